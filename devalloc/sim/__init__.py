"""The CUDA simulator's side of devalloc: every read of numba-cuda internals.

Nothing here compiles for a GPU. This module makes every simulated atomic
kind share one lock (and a block's threads one shared array per line:
:mod:`.shared`): the simulator guards each kind with its own
(``addlock``, ``caslock``...), so an ``add`` and a ``cas`` on one word could
interleave, while on a GPU every atomic on a word is atomic with respect to
every other, and devalloc mixes kinds on one word. :mod:`.warp` forms warp
groups as a rendezvous of simulated threads; :mod:`.atomics` counts atomics
(``count_atomics``, public); :mod:`.compat` checks at first use that every
numba-cuda internal devalloc reads is where it expects it. Installed at the first use of devalloc's public
names, only on the simulator; the names it reads are checked, so a
numba-cuda that renames them fails loudly.
"""

import threading

from numba import config

LOCK_NAMES = (
    "addlock", "sublock", "andlock", "orlock", "xorlock", "maxlock",
    "minlock", "compare_and_swaplock", "caslock", "inclock", "declock",
    "exchlock",
)

#: The single lock every simulated atomic takes once the shim is installed.
ATOMIC_LOCK = threading.Lock()


def install():
    """Point every simulator atomic lock at :data:`ATOMIC_LOCK`.

    Returns True when the shim is (now) installed, False when the simulator
    is not enabled. Raises RuntimeError if the simulator lacks a lock name.
    """
    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernelapi

    missing = [n for n in LOCK_NAMES if not hasattr(kernelapi, n)]
    if missing:
        raise RuntimeError(
            "devalloc's simulator shim does not recognise this numba-cuda "
            f"simulator: lock(s) {missing} not found in kernelapi"
        )
    for name in LOCK_NAMES:
        setattr(kernelapi, name, ATOMIC_LOCK)
    from . import launch, shared

    launch.install()  # launches without a convoy of a block's threads
    shared.install()  # one shared array per block and line, also when threads race
    return True


def installed():
    """Return True when every simulator atomic lock is the shared lock."""
    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernelapi

    return all(getattr(kernelapi, n) is ATOMIC_LOCK for n in LOCK_NAMES)
