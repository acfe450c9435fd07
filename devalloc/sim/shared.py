"""A block's shared arrays, made once: the simulator's ``cuda.shared.array`` under a lock.

numba-cuda's simulator (``FakeCUDAShared.array``, 0.30.4 and before) finds a
block's shared array by the calling line and, when it has none yet, makes
one with ``np.empty``: a look and a store with no lock between them. With
a short thread switch interval (the GPU check's simulate mode sets 5e-5 s,
tests that contend set 1e-6 to 5e-5) two threads of a block can both find
none and each make its own; the rest of the block shares one and the other
thread computes on uninitialized memory. The count + scan twins' scan
(kernels/_scan.py) then returned garbage totals about one run in two
(``python -m devalloc.gpucheck --simulate``: a 500 TiB array, or an empty
slice). On a GPU a block has one shared array; :func:`install` makes the
simulator agree: the look and the store under one lock, and the caller's
line read from its frame (not a whole extracted stack, as before: faster).
Dynamic shared memory (``shape == 0``) is the simulator's own.
"""

import sys
import threading

import numpy as np

#: Taken to look up or make a block's shared array.
SHARED_LOCK = threading.Lock()


def _array(self, shape, dtype, alignment=None):
    # FakeCUDAShared.array, with its look-and-make under SHARED_LOCK.
    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    from numba.core import types
    from numba.np import numpy_support

    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    dtype = np.dtype(dtype)  # (np.float32 too, for the itemsize below)
    if shape == 0:  # dynamic shared memory: one buffer, as the simulator has it
        count = self._dynshared_size // dtype.itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    frame = sys._getframe(1)
    caller = (frame.f_code.co_filename, frame.f_lineno)
    with SHARED_LOCK:
        res = self._allocations.get(caller)
        if res is None:
            res = self._allocations[caller] = np.empty(shape, dtype)
    return res


_array.devalloc = True


def install():
    """Make the simulator's ``cuda.shared.array`` one array per block and line; once.

    Raises RuntimeError when the simulator's shared memory is not what this
    replaces (:mod:`devalloc.sim.compat` names it too).
    """
    from numba.cuda.simulator import kernelapi

    shared = getattr(kernelapi, "FakeCUDAShared", None)
    if shared is None or not hasattr(shared, "array"):
        raise RuntimeError("devalloc's simulator shim does not recognise this numba-cuda "
                           "simulator: kernelapi.FakeCUDAShared.array not found")
    if not getattr(shared.array, "devalloc", False):
        shared.array = _array
