"""The public device functions: one name each, a compiled path per heap kind.

A kernel calls ``devalloc.alloc(ctx, n)`` (and ``free``, ``bump``, ``mark``,
``scoped``, ``release``) for any heap. For a normal heap (``ctx`` is a
:class:`~devalloc.ctx.Ctx`) that is :mod:`devalloc.device.core` (and
``bump``/``scope``); for a debug heap (a :class:`~devalloc.ctx.DebugCtx`)
:mod:`devalloc.device.debug`; for an observed heap (an
:class:`~devalloc.ctx.ObsCtx`) :mod:`devalloc.device.observe`. On the GPU the
choice is made when the kernel is compiled, from the ctx's Numba type (an
``@overload``), so the normal path carries no other branch; on the simulator
it is made at call time. ``chunk_alloc``/``chunk_free`` are scoped
scratch's own (never traced), ``scratch_poison``/``scratch_check`` its debug
hooks (no-ops normally).
"""

from numba import config, types

from ..ctx import DebugCtx, ObsCtx
from . import bumpalloc as _bump
from . import core, debug, observe, scope

_NORMAL, _DEBUG, _OBSERVED = 0, 1, 2


def _kind_of_class(cls):
    return _DEBUG if cls is DebugCtx else _OBSERVED if cls is ObsCtx else _NORMAL


def _kind(ctx):
    return _kind_of_class(type(ctx))


def alloc(ctx, nbytes):
    """Allocate a block of at least ``nbytes`` bytes; return its offset or NULL.

    See :func:`devalloc.device.core.alloc` (who may call, atomics, failures).
    """
    k = _kind(ctx)
    if k == _DEBUG:
        return debug.alloc(ctx, nbytes)
    if k == _OBSERVED:
        return observe.alloc(ctx, nbytes)
    return core.alloc(ctx, nbytes)


def free(ctx, off):
    """Return the block at ``off`` to the heap. See :func:`devalloc.device.core.free`."""
    k = _kind(ctx)
    if k == _DEBUG:
        debug.free(ctx, off)
    elif k == _OBSERVED:
        observe.free(ctx, off)
    else:
        core.free(ctx, off)


def bump(ctx, nbytes):
    """Allocate ``nbytes`` that live until ``reset``. See :func:`devalloc.device.bumpalloc.bump`."""
    if _kind(ctx) == _OBSERVED:
        return observe.bump(ctx, nbytes)
    return _bump.bump(ctx, nbytes)


def mark(ctx, s):
    """Open a scope; return its mark. See :func:`devalloc.device.scope.mark`."""
    if _kind(ctx) == _OBSERVED:
        return observe.mark(ctx, s)
    return scope.mark(ctx, s)


def scoped(ctx, s, nbytes):
    """Allocate in the innermost scope. See :func:`devalloc.device.scope.scoped`."""
    if _kind(ctx) == _OBSERVED:
        return observe.scoped(ctx, s, nbytes)
    return scope.scoped(ctx, s, nbytes)


def release(ctx, s, m):
    """Close the scope of mark ``m``. See :func:`devalloc.device.scope.release`."""
    if _kind(ctx) == _OBSERVED:
        return observe.release(ctx, s, m)
    return scope.release(ctx, s, m)


def chunk_alloc(ctx, nbytes):
    """``alloc`` for scoped scratch's chunks: as ``alloc``, never traced."""
    if _kind(ctx) == _OBSERVED:
        return observe.chunk_alloc(ctx, nbytes)
    return alloc(ctx, nbytes)


def chunk_free(ctx, off):
    """``free`` for scoped scratch's chunks: as ``free``, never traced."""
    if _kind(ctx) == _OBSERVED:
        observe.chunk_free(ctx, off)
    else:
        free(ctx, off)


def scratch_poison(ctx, off, n):
    """Debug heaps: poison released scoped bytes. Normal heaps: nothing."""
    k = _kind(ctx)
    if k == _DEBUG:
        debug.scratch_poison(ctx, off, n)
    elif k == _OBSERVED:
        observe.scratch_poison(ctx, off, n)


def scratch_check(ctx, off, n):
    """Debug heaps: check scoped bytes are still poison. Normal heaps: nothing."""
    k = _kind(ctx)
    if k == _DEBUG:
        debug.scratch_check(ctx, off, n)
    elif k == _OBSERVED:
        observe.scratch_check(ctx, off, n)


def _kind_of_type(ctx):
    if isinstance(ctx, types.NamedTuple):
        return _kind_of_class(ctx.instance_class)
    return _NORMAL


if not config.ENABLE_CUDASIM:
    from numba.cuda.extending import overload

    # Each overload returns the implementation for the ctx's type, chosen
    # while the kernel is typed: (normal, debug, observed)[kind].

    @overload(alloc, target="cuda")
    def _alloc(ctx, nbytes):
        return (lambda ctx, nbytes: core.alloc_site(ctx, nbytes),
                lambda ctx, nbytes: debug.alloc(ctx, nbytes),
                lambda ctx, nbytes: observe.alloc(ctx, nbytes))[_kind_of_type(ctx)]

    @overload(free, target="cuda")
    def _free(ctx, off):
        return (lambda ctx, off: core.free_site(ctx, off),
                lambda ctx, off: debug.free(ctx, off),
                lambda ctx, off: observe.free(ctx, off))[_kind_of_type(ctx)]

    @overload(bump, target="cuda")
    def _bump_impl(ctx, nbytes):
        if _kind_of_type(ctx) == _OBSERVED:
            return lambda ctx, nbytes: observe.bump(ctx, nbytes)
        return lambda ctx, nbytes: _bump.bump(ctx, nbytes)

    @overload(mark, target="cuda")
    def _mark(ctx, s):
        if _kind_of_type(ctx) == _OBSERVED:
            return lambda ctx, s: observe.mark(ctx, s)
        return lambda ctx, s: scope.mark(ctx, s)

    @overload(scoped, target="cuda")
    def _scoped(ctx, s, nbytes):
        if _kind_of_type(ctx) == _OBSERVED:
            return lambda ctx, s, nbytes: observe.scoped(ctx, s, nbytes)
        return lambda ctx, s, nbytes: scope.scoped(ctx, s, nbytes)

    # forceinline: NVVM left the observed release out of line on sm_75 (a
    # call, with an 8-byte stack frame) once the page index grew the paths.
    @overload(release, target="cuda", jit_options={"forceinline": True})
    def _release(ctx, s, m):
        if _kind_of_type(ctx) == _OBSERVED:
            return lambda ctx, s, m: observe.release(ctx, s, m)
        return lambda ctx, s, m: scope.release(ctx, s, m)

    @overload(chunk_alloc, target="cuda")
    def _chunk_alloc(ctx, nbytes):
        if _kind_of_type(ctx) == _OBSERVED:
            return lambda ctx, nbytes: observe.chunk_alloc(ctx, nbytes)
        return lambda ctx, nbytes: alloc(ctx, nbytes)

    @overload(chunk_free, target="cuda")
    def _chunk_free(ctx, off):
        if _kind_of_type(ctx) == _OBSERVED:
            return lambda ctx, off: observe.chunk_free(ctx, off)
        return lambda ctx, off: free(ctx, off)

    @overload(scratch_poison, target="cuda")
    def _poison(ctx, off, n):
        return (lambda ctx, off, n: None,
                lambda ctx, off, n: debug.scratch_poison(ctx, off, n),
                lambda ctx, off, n: observe.scratch_poison(ctx, off, n))[_kind_of_type(ctx)]

    @overload(scratch_check, target="cuda")
    def _check(ctx, off, n):
        return (lambda ctx, off, n: None,
                lambda ctx, off, n: debug.scratch_check(ctx, off, n),
                lambda ctx, off, n: observe.scratch_check(ctx, off, n))[_kind_of_type(ctx)]
