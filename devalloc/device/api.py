"""The public device functions ``alloc`` and ``free``: one name, two compiled paths.

A kernel calls ``devalloc.alloc(ctx, n)`` for any heap. For a normal heap
(``ctx`` is a :class:`~devalloc.ctx.Ctx`) that is :func:`devalloc.device.core.alloc`;
for a debug heap (a :class:`~devalloc.ctx.DebugCtx`) it is
:func:`devalloc.device.debug.alloc`. On the GPU the choice is made when the
kernel is compiled, from the ctx's Numba type (an ``@overload``), so the
normal path carries no debug branch. On the simulator, where kernels run as
Python, it is made at call time. ``scratch_poison``/``scratch_check`` are
the debug hooks of scoped scratch, chosen the same way (no-ops normally).
"""

from numba import config, types

from ..ctx import DebugCtx
from . import core, debug


def alloc(ctx, nbytes):
    """Allocate a block of at least ``nbytes`` bytes; return its offset or NULL.

    See :func:`devalloc.device.core.alloc` (who may call, atomics, failures).
    """
    if type(ctx) is DebugCtx:
        return debug.alloc(ctx, nbytes)
    return core.alloc(ctx, nbytes)


def free(ctx, off):
    """Return the block at ``off`` to the heap. See :func:`devalloc.device.core.free`."""
    if type(ctx) is DebugCtx:
        debug.free(ctx, off)
    else:
        core.free(ctx, off)


def scratch_poison(ctx, off, n):
    """Debug heaps: poison released scoped bytes. Normal heaps: nothing."""
    if type(ctx) is DebugCtx:
        debug.scratch_poison(ctx, off, n)


def scratch_check(ctx, off, n):
    """Debug heaps: check scoped bytes are still poison. Normal heaps: nothing."""
    if type(ctx) is DebugCtx:
        debug.scratch_check(ctx, off, n)


def _is_debug(ctx):
    return isinstance(ctx, types.NamedTuple) and ctx.instance_class is DebugCtx


if not config.ENABLE_CUDASIM:
    from numba.cuda.extending import overload

    @overload(alloc, target="cuda")
    def _alloc_overload(ctx, nbytes):
        if _is_debug(ctx):
            return lambda ctx, nbytes: debug.alloc(ctx, nbytes)
        return lambda ctx, nbytes: core.alloc(ctx, nbytes)

    @overload(free, target="cuda")
    def _free_overload(ctx, off):
        if _is_debug(ctx):
            return lambda ctx, off: debug.free(ctx, off)
        return lambda ctx, off: core.free(ctx, off)

    @overload(scratch_poison, target="cuda")
    def _poison_overload(ctx, off, n):
        if _is_debug(ctx):
            return lambda ctx, off, n: debug.scratch_poison(ctx, off, n)
        return lambda ctx, off, n: None

    @overload(scratch_check, target="cuda")
    def _check_overload(ctx, off, n):
        if _is_debug(ctx):
            return lambda ctx, off, n: debug.scratch_check(ctx, off, n)
        return lambda ctx, off, n: None
