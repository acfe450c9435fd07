"""Which kind of heap a ctx belongs to: normal, debug or observed.

The public device functions (:mod:`.api`), scoped scratch's calls into the
heap (:mod:`.chunks`) and the porting API (:mod:`.porting`) each run the
path of the heap's kind: on the simulator chosen at call time from the ctx
(:func:`_kind`), on the GPU when the kernel is typed, from the ctx's Numba
type (:func:`_kind_of_type`, in their ``@overload``\\ s), so that the normal
path carries no other branch. Host code; no device function lives here.
"""

from numba import types

from ..ctx import DebugCtx, ObsCtx

_NORMAL, _DEBUG, _OBSERVED = 0, 1, 2


def _kind_of_class(cls):
    return _DEBUG if cls is DebugCtx else _OBSERVED if cls is ObsCtx else _NORMAL


def _kind(ctx):
    return _kind_of_class(type(ctx))


def _kind_of_type(ctx):
    if isinstance(ctx, types.NamedTuple):
        return _kind_of_class(ctx.instance_class)
    return _NORMAL
