"""Exceptions raised on the host. Device code never raises: it returns NULL."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: host.stats and host.debug import numba
    from .host.debug import Record
    from .host.stats import Usage


class DevallocError(Exception):
    """Base class of every devalloc exception."""


class OutOfMemoryError(DevallocError, MemoryError):
    """The device cannot provide the memory a heap asks for."""


class HeapClosedError(DevallocError, RuntimeError):
    """A heap was used after ``close()`` (or after its ``with`` block).

    Also raised when a kernel is launched with the ``ctx`` of a closed heap:
    its memory is freed, and may belong to another array.
    """


class StaleCtxError(HeapClosedError):
    """A kernel was launched with a ``ctx`` from before ``heap.resize()``.

    ``resize`` replaces the heap's memory: pass ``heap.ctx`` again.
    """


class NoCudaError(DevallocError, RuntimeError):
    """No usable CUDA driver or GPU, and the CUDA simulator is not enabled.

    The message says how to run on the simulator (``NUMBA_ENABLE_CUDASIM=1``)
    or what to install for a GPU.
    """

    @classmethod
    def about(cls, cause: BaseException) -> "NoCudaError":
        """Return the error for numba-cuda's ``cause`` (its CudaSupportError)."""
        said = " ".join(str(cause).split()) or type(cause).__name__
        return cls(f"no usable CUDA driver or GPU here ({said}). To run kernels on the CPU, "
                   "on the CUDA simulator, set NUMBA_ENABLE_CUDASIM=1 in the environment "
                   "before numba is imported; for a GPU, install the NVIDIA driver and "
                   "devalloc's CUDA extra: pip install 'devalloc[cu13]' (driver R580+) or "
                   "'devalloc[cu12]' (R525+)")


class HeapExhausted(DevallocError):
    """``Heap.run`` reached its ceiling and allocations still failed.

    ``usage`` is the usage of the last attempt, ``attempts`` how many
    launches were made.
    """

    def __init__(self, message: str, usage: "Usage", attempts: int) -> None:
        super().__init__(message)
        self.usage = usage
        self.attempts = attempts


class HeapCorruption(DevallocError):
    """Debug mode found misuse: invalid frees or overwritten guard bytes.

    ``records`` lists what was seen, first ones first: each a
    :class:`devalloc.host.debug.Record` (kind, offset, block, thread).
    """

    def __init__(self, message: str, records: "list[Record]") -> None:
        super().__init__(message)
        self.records = records


class WorkerHeapError(DevallocError, RuntimeError):
    """No worker heap here: not inside a Dask task, or ``attach`` was not called.

    Raised by :mod:`devalloc.host.distributed` (``worker_heap``, ``usage``,
    ``grow_worker_heap``); the message says which of the two it is.
    """
