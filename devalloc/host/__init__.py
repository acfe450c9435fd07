"""Host side: the ``Heap`` that owns the device memory, and everything that reads it back.

:mod:`.heap` makes and owns a heap's memory (``Heap``, ``reset``, ``resize``,
``close``); :mod:`.run` launches kernels until no allocation fails
(``Heap.run``); :mod:`.reading` reads the heap back (``usage``, ``trace``,
``live``, ``check``) through :mod:`.stats` (``Usage`` from the metadata),
:mod:`.observed` (profile counters and trace), :mod:`.debug` (debug records
and guards); :mod:`.report` formats usage as a table; :mod:`.gather` brings
ragged results back (``Heap.gather``, ``Heap.array``); :mod:`.distributed`
gives every Dask worker a heap. Nothing here runs in a kernel (that is
:mod:`devalloc.device`), and none of it imports the device package except to
launch :mod:`devalloc.device.gather`'s kernels.

Importing this package imports nothing else (so that
:mod:`.distributed` can choose the GPU or the simulator on a worker before
numba is imported); the names below load on first use.
"""

import importlib
import typing as _typing

if _typing.TYPE_CHECKING:  # what type checkers see; at run time these load on first use
    from ..ctx import Ctx, DebugCtx, ObsCtx, ctx_type, debug_ctx_type
    from .heap import ALIGN_SLACK, MIN_MEMORY, Heap, check_capacity, free_index_template
    from .run import RunResult

#: Name -> the module of this package that defines it (the names
#: ``devalloc.host`` had when it was one module, host.py).
_WHERE = {
    "ALIGN_SLACK": ".heap",
    "MIN_MEMORY": ".heap",
    "Heap": ".heap",
    "check_capacity": ".heap",
    "free_index_template": ".heap",
    "RunResult": ".run",
    "Ctx": "..ctx",
    "DebugCtx": "..ctx",
    "ObsCtx": "..ctx",
    "ctx_type": "..ctx",
    "debug_ctx_type": "..ctx",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> _typing.Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
