"""The public device functions: one name each, a compiled path per heap kind.

A kernel calls ``devalloc.alloc(ctx, n)`` (and ``free``, ``bump``, ``mark``,
``scoped``, ``release``) for any heap. For a normal heap (``ctx`` is a
:class:`~devalloc.ctx.Ctx`) that is :mod:`devalloc.device.core` (and
``bump``/``scope``); for a debug heap (a :class:`~devalloc.ctx.DebugCtx`)
:mod:`devalloc.device.debug`; for an observed heap (an
:class:`~devalloc.ctx.ObsCtx`) :mod:`devalloc.device.observe`. On the GPU the
choice is made when the kernel is compiled, from the ctx's Numba type (an
``@overload``), so the normal path carries no other branch; on the simulator
it is made at call time (the kind of heap: :mod:`devalloc.device.kinds`).
Scoped scratch's own calls into the heap (``chunk_alloc``, ``chunk_free``
and the debug hooks) are in :mod:`devalloc.device.chunks`.
"""

from numba import config

from . import bumpalloc as _bump
from . import core, debug, observe, scope
# (all of them read as api._X by devalloc.device.porting too)
from .kinds import _DEBUG, _NORMAL, _OBSERVED, _kind, _kind_of_class, _kind_of_type  # noqa: F401


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
        return lambda ctx, nbytes: _bump.bump_site(ctx, nbytes)

    @overload(mark, target="cuda")
    def _mark(ctx, s):
        if _kind_of_type(ctx) == _OBSERVED:
            return lambda ctx, s: observe.mark(ctx, s)
        return lambda ctx, s: scope.mark(ctx, s)

    # Not forceinline: it would take the 32-byte stack frame off a kernel
    # with four scoped sites (NVVM keeps two of them as calls) but lengthen
    # the walked scoped path from 140 to 166 instructions (docs/outline.md).
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
