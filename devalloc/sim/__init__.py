"""The CUDA simulator's side of devalloc: every read of numba-cuda internals.

Nothing here compiles for a GPU, and nothing here is imported on one except
:func:`install`, which returns at once there. Three parts:

* this module: make every simulated atomic kind share one lock. numba-cuda's
  simulator guards each kind with its own lock (``addlock``, ``caslock``...),
  so an ``add`` and a ``cas`` on the same word could interleave and lose an
  update; on a GPU every atomic on a word is atomic with respect to every
  other, and devalloc mixes kinds on one word (``cas`` to reserve a slab
  slot, ``add`` to release it);
* :mod:`devalloc.sim.warp`: warp groups as a rendezvous of simulated threads;
* :mod:`devalloc.sim.atomics`: ``count_atomics``, the exact atomic counter
  the tests and the benchmarks use.

Installed once, at the first use of :mod:`devalloc`'s public names, and only
when the simulator is enabled. Names it reads are checked, so a numba-cuda
that renames them fails loudly instead of silently.
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
    return True


def installed():
    """Return True when every simulator atomic lock is the shared lock."""
    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernelapi

    return all(getattr(kernelapi, n) is ATOMIC_LOCK for n in LOCK_NAMES)
