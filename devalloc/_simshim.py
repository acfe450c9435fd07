"""Simulator-only shim: make every atomic kind atomic with respect to the others.

numba-cuda's CUDA simulator guards each atomic operation kind with its own
lock (``addlock``, ``caslock``, ``andlock``...), so an ``add`` and a ``cas`` on
the same word can interleave and lose an update. On a GPU every atomic on a
word is atomic with respect to every other. devalloc mixes kinds on one word
(for example ``cas`` to reserve a slab slot, ``add`` to release it), so on the
simulator all atomic kinds are made to share one lock.

Installed once, at import of :mod:`devalloc`, and only when the simulator is
enabled; nothing that compiles for the GPU changes. The set of lock names is
checked, so a numba-cuda that renames them fails loudly instead of silently.
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
