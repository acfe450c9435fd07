"""devalloc: a lock-free device heap for Numba-CUDA kernels.

Host: ``Heap(capacity)``, ``heap.ctx``, ``heap.reset()``, ``heap.usage()``.
Device (inside ``@cuda.jit`` kernels): ``alloc(ctx, nbytes)``,
``free(ctx, off)``, ``view(ctx, off, count, dtype)``; ``NULL`` on failure.

Importing the package does not import numba: the public names load on first
use (PEP 562), so that ``devalloc.target.choose()`` and ``python -m devalloc``
can pick the GPU or the simulator before numba reads its configuration.
``__version__`` is the installed distribution's version (no numba import).
"""

import importlib
import typing as _typing

if _typing.TYPE_CHECKING:  # what type checkers see; at run time these load on first use
    from .errors import (DevallocError, HeapClosedError, HeapCorruption, HeapExhausted,
                         NoCudaError, OutOfMemoryError, StaleCtxError)
    from .ctx import Ctx, DebugCtx, ctx_type, debug_ctx_type
    from .host.capacity import ctx_type_for
    from .host.heap import Heap
    from .host.run import RunResult
    from .layout import ALIGN, NULL, PAGE, SCOPE_NONE
    from .host.stats import ClassUsage, Usage

from ._version import __version__  # noqa: F401 (public)

__all__ = [
    "ALIGN",
    "ClassUsage",
    "Ctx",
    "DebugCtx",
    "DevallocError",
    "Heap",
    "HeapClosedError",
    "HeapCorruption",
    "HeapExhausted",
    "NULL",
    "NoCudaError",
    "ObsCtx",
    "OutOfMemoryError",
    "PAGE",
    "RunResult",
    "Usage",
    "SCOPE_NONE",
    "StaleCtxError",
    "alloc",
    "alloc_aligned",
    "array",
    "bump",
    "calloc",
    "carve",
    "carve_end",
    "ctx_type",
    "ctx_type_for",
    "debug_ctx_type",
    "free",
    "free_array",
    "mark",
    "obs_ctx_type",
    "offset_of",
    "realloc",
    "realloc_carved",
    "release",
    "replay",
    "scoped",
    "usable_size",
    "view",
]

_WHERE = {
    "ALIGN": "layout",
    "NULL": "layout",
    "PAGE": "layout",
    "SCOPE_NONE": "layout",
    "bump": "device",
    "mark": "device",
    "scoped": "device",
    "release": "device",
    "alloc": "device",
    "free": "device",
    "view": "device",
    # The porting API (devalloc/device/porting.py, docs/porting.md).
    "alloc_aligned": "device",
    "array": "device",
    "calloc": "device",
    "carve": "device",
    "carve_end": "device",
    "free_array": "device",
    "offset_of": "device",
    "realloc": "device",
    "realloc_carved": "device",
    "usable_size": "device",
    "DebugCtx": "ctx",
    "debug_ctx_type": "ctx",
    "Ctx": "ctx",
    "Heap": "host.heap",
    "replay": "tools.replayer",
    "ctx_type": "ctx",
    "ctx_type_for": "host.capacity",
    "ObsCtx": "ctx",
    "obs_ctx_type": "ctx",
    "RunResult": "host.run",
    "DevallocError": "errors",
    "HeapClosedError": "errors",
    "HeapCorruption": "errors",
    "HeapExhausted": "errors",
    "NoCudaError": "errors",
    "StaleCtxError": "errors",
    "OutOfMemoryError": "errors",
    "ClassUsage": "host.stats",
    "Usage": "host.stats",
}


#: Submodules reachable as attributes without an explicit import.
_SUBMODULES = ("device", "host", "layout", "sim", "target", "tools")


def _load():
    """Import every public name at once (the first time any is used).

    All at once, because ``alloc`` and ``free`` are ``@overload``-ed: their
    typing templates must be registered before Numba types a kernel that
    calls them. Registering them while Numba is already typing that kernel
    (a lazy import triggered by the kernel's own ``devalloc.alloc``) is too
    late for that compilation. First checks the numba-cuda internals devalloc
    reads (:func:`devalloc.sim.compat.check`).
    """
    from . import sim
    from .sim import compat

    compat.restore_numpy_aliases()  # numba-cuda <= 0.30.4 with NumPy >= 2.5
    compat.check()  # every numba-cuda internal devalloc reads is there
    sim.install()  # simulator only: one lock for every atomic kind
    for name in __all__:
        globals()[name] = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)


def __getattr__(name: str) -> _typing.Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name not in __all__:
        raise AttributeError(f"module 'devalloc' has no attribute {name!r}")
    _load()
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(__all__))
