"""Which kind of heap a ctx belongs to: normal, debug or observed.

The public device functions (:mod:`.api`), scoped scratch's calls into the
heap (:mod:`.chunks`) and the porting API (:mod:`.porting`) each run the
path of the heap's kind: on the simulator chosen at call time from the ctx
(:func:`_kind`), on the GPU when the kernel is typed, from the ctx's Numba
type (:func:`_kind_of_type`, in their ``@overload``\\ s), so that the normal
path carries no other branch. Host code; no device function lives here.
"""

from numba import types

from ..ctx import CTX_CLASSES, DebugCtx, ObsCtx, not_a_ctx

_NORMAL, _DEBUG, _OBSERVED = 0, 1, 2


def _kind_of_class(cls):
    return _DEBUG if cls is DebugCtx else _OBSERVED if cls is ObsCtx else _NORMAL


def _kind(ctx):
    """The kind of ``ctx`` (simulator: at call time); TypeError if it is not a heap's ctx."""
    if type(ctx) not in CTX_CLASSES:
        raise not_a_ctx(ctx)
    return _kind_of_class(type(ctx))


def _kind_of_type(ctx):
    """The kind of a ctx of Numba type ``ctx`` (GPU: while a kernel is typed).

    TypeError (it reaches the caller of the compilation as it is: Numba
    passes on exceptions that are not its own) when ``ctx`` is not a
    heap's ctx: an array, a tuple, None.
    """
    if isinstance(ctx, types.NamedTuple) and ctx.instance_class in CTX_CLASSES:
        return _kind_of_class(ctx.instance_class)
    raise not_a_ctx(ctx)
