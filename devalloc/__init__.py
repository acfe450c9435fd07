"""devalloc: a lock-free device heap for Numba-CUDA kernels.

Host: ``Heap(capacity)``, ``heap.ctx``, ``heap.reset()``, ``heap.usage()``.
Device (inside ``@cuda.jit`` kernels): ``alloc(ctx, nbytes)``,
``free(ctx, off)``, ``view(ctx, off, count, dtype)``; ``NULL`` on failure.
"""

from numba import config as _config

from . import _simshim
from .device import alloc, free
from .host import Ctx, Heap, ctx_type
from .layout import ALIGN, NULL, PAGE
from .stats import ClassUsage, Usage

if _config.ENABLE_CUDASIM:
    _simshim.install()
    from ._intrinsics import view_simulated as view
else:
    from ._intrinsics import view

__all__ = [
    "ALIGN",
    "ClassUsage",
    "Ctx",
    "Heap",
    "NULL",
    "PAGE",
    "Usage",
    "alloc",
    "ctx_type",
    "free",
    "view",
]
