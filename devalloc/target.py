"""Choose where kernels run: the GPU when a driver is usable, else the simulator.

Must be called before numba is first imported, because numba reads
``NUMBA_ENABLE_CUDASIM`` once, at import.
"""

import ctypes
import os
import sys


def gpu_available():
    """Return True when the CUDA driver loads and reports at least one device."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return False
        return count.value > 0
    return False


def choose():
    """Set NUMBA_ENABLE_CUDASIM=1 unless a GPU is usable; return "gpu" or "simulator".

    An explicit NUMBA_ENABLE_CUDASIM in the environment is respected. Raises
    RuntimeError if numba was imported already with the opposite choice.
    """
    explicit = os.environ.get("NUMBA_ENABLE_CUDASIM")
    if explicit is None:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_available() else "1"
    sim = os.environ["NUMBA_ENABLE_CUDASIM"] not in ("0", "")
    if "numba" in sys.modules:
        from numba import config

        if bool(config.ENABLE_CUDASIM) != sim:
            raise RuntimeError(
                "numba was imported before devalloc.target.choose(); call it first"
            )
    return "simulator" if sim else "gpu"
