"""Scoped scratch's own calls into the heap: its chunks and its debug hooks, per heap kind.

:mod:`.scope` takes and returns its chunks with :func:`chunk_alloc` and
:func:`chunk_free` (``alloc``/``free`` of the heap's kind, never traced: the
observed heap records the scoped calls instead) and poisons or checks the
bytes it hands out with :func:`scratch_poison` and :func:`scratch_check`
(debug heaps; nothing on a normal heap). Below :mod:`.api` and
:mod:`.observe`, which both use scope: scope reaches the debug and observed
paths through here, not through them.

Who may call: any thread, for its own chunks (scope's rules). Atomics: those
of the ``alloc``/``free`` of the heap's kind (:mod:`.core`, :mod:`.debug`);
the hooks take none. Failure: :func:`chunk_alloc` returns NULL as ``alloc``
does; :func:`observed_chunk_free` returns 0 for an invalid free (counted).
"""

from numba import config, cuda

from . import core, debug
from .kinds import _DEBUG, _OBSERVED, _kind, _kind_of_type


@cuda.jit(device=True)
def observed_chunk_alloc(ctx, nbytes):
    """``alloc`` without a record: scoped scratch's chunks (their scoped calls are recorded)."""
    if ctx.debug.shape[0] > 0:
        return debug.alloc(ctx, nbytes)
    return core.alloc_site(ctx, nbytes)


@cuda.jit(device=True)
def observed_chunk_free(ctx, off):
    """``free`` without a record; 1 if it freed a block (or ``off`` is NULL), else 0."""
    if ctx.debug.shape[0] > 0:
        return debug.free(ctx, off)
    return core.free_site(ctx, off)


@cuda.jit(device=True)
def observed_scratch_poison(ctx, off, n):
    """Debug hooks of scoped scratch on an observed heap that is a debug heap too."""
    if ctx.debug.shape[0] > 0:
        debug.scratch_poison(ctx, off, n)


@cuda.jit(device=True)
def observed_scratch_check(ctx, off, n):
    """As :func:`observed_scratch_poison`."""
    if ctx.debug.shape[0] > 0:
        debug.scratch_check(ctx, off, n)


def chunk_alloc(ctx, nbytes):
    """``alloc`` for scoped scratch's chunks: as ``alloc``, never traced."""
    k = _kind(ctx)
    if k == _DEBUG:
        return debug.alloc(ctx, nbytes)
    if k == _OBSERVED:
        return observed_chunk_alloc(ctx, nbytes)
    return core.alloc(ctx, nbytes)


def chunk_free(ctx, off):
    """``free`` for scoped scratch's chunks: as ``free``, never traced."""
    k = _kind(ctx)
    if k == _DEBUG:
        debug.free(ctx, off)
    elif k == _OBSERVED:
        observed_chunk_free(ctx, off)
    else:
        core.free(ctx, off)


def scratch_poison(ctx, off, n):
    """Debug heaps: poison released scoped bytes. Normal heaps: nothing."""
    k = _kind(ctx)
    if k == _DEBUG:
        debug.scratch_poison(ctx, off, n)
    elif k == _OBSERVED:
        observed_scratch_poison(ctx, off, n)


def scratch_check(ctx, off, n):
    """Debug heaps: check scoped bytes are still poison. Normal heaps: nothing."""
    k = _kind(ctx)
    if k == _DEBUG:
        debug.scratch_check(ctx, off, n)
    elif k == _OBSERVED:
        observed_scratch_check(ctx, off, n)


if not config.ENABLE_CUDASIM:
    from numba.cuda.extending import overload

    # Each overload returns the implementation for the ctx's type, chosen
    # while the kernel is typed: (normal, debug, observed)[kind].

    @overload(chunk_alloc, target="cuda")
    def _chunk_alloc(ctx, nbytes):
        return (lambda ctx, nbytes: core.alloc_site(ctx, nbytes),
                lambda ctx, nbytes: debug.alloc(ctx, nbytes),
                lambda ctx, nbytes: observed_chunk_alloc(ctx, nbytes))[_kind_of_type(ctx)]

    @overload(chunk_free, target="cuda")
    def _chunk_free(ctx, off):
        return (lambda ctx, off: core.free_site(ctx, off),
                lambda ctx, off: debug.free(ctx, off),
                lambda ctx, off: observed_chunk_free(ctx, off))[_kind_of_type(ctx)]

    @overload(scratch_poison, target="cuda")
    def _poison(ctx, off, n):
        return (lambda ctx, off, n: None,
                lambda ctx, off, n: debug.scratch_poison(ctx, off, n),
                lambda ctx, off, n: observed_scratch_poison(ctx, off, n))[_kind_of_type(ctx)]

    @overload(scratch_check, target="cuda")
    def _check(ctx, off, n):
        return (lambda ctx, off, n: None,
                lambda ctx, off, n: debug.scratch_check(ctx, off, n),
                lambda ctx, off, n: observed_scratch_check(ctx, off, n))[_kind_of_type(ctx)]
