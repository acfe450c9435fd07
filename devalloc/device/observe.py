"""Observed heaps' public calls: the normal (or debug) path, then a record.

Used only for heaps made with ``Heap(capacity, profile=True)`` or
``trace=N``, whose ``ctx`` is an :class:`~devalloc.ctx.ObsCtx`; the public
functions pick these at compile time from the ctx's type
(:mod:`devalloc.device.api`), so normal and debug heaps compile as before.
Each call runs the ordinary path (the debug one when the heap is a debug
heap too: a run-time choice here), counts the cause of a NULL in the
striped ``prof`` words (one ``add``) and appends a trace event: one ``add``
on ``trace[0]`` takes its sequence number, plain stores fill it (layout.py,
"trace record", "profile counters"). A free takes its number *before* it
frees, an allocation *after* it has its block, so a block's reuse always
follows its free in sequence order (the free's release fence and the
alloc's acquire fence order the counter's ``add`` with the claims).
"""

from numba import cuda, int64

from .. import layout as L
from . import bumpalloc as _bump
from . import scope
from ._meta import _pshift
from .chunks import observed_chunk_alloc, observed_chunk_free


@cuda.jit(device=True)
def _thread():
    # Global linear thread index: linear block index * block size + linear thread index.
    block = cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
    size = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
    within = cuda.threadIdx.x + cuda.blockDim.x * (
        cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    return int64(block) * size + within


@cuda.jit(device=True)
def _seq(ctx):
    """Return the next sequence number, or -1 when the heap keeps no trace.

    One ``add`` on ``trace[0]``, shared by every recording thread: the order
    of the trace. Counted past the room too, so the host knows what was dropped.
    """
    if ctx.trace.shape[0] == 0:
        return int64(-1)
    return cuda.atomic.add(ctx.trace, 0, 1)


@cuda.jit(device=True)
def _record(ctx, seq, op, nbytes, off):
    """Write event ``seq`` if it is one of the kept ones; plain stores."""
    tr = ctx.trace
    if seq >= 0 and L.trace_word(seq + 1, 0) <= tr.shape[0]:
        tr[L.trace_word(seq, L.T_NBYTES)] = nbytes
        tr[L.trace_word(seq, L.T_OFFSET)] = off
        tr[L.trace_word(seq, L.T_THREAD)] = _thread()
        tr[L.trace_word(seq, L.T_OP)] = op


@cuda.jit(device=True)
def _failed(ctx, nbytes, most):
    """Count the cause of a NULL for a request of ``nbytes`` (at most ``most`` served).

    A request for 0 bytes is no failure (``empty_requests``): not counted.
    """
    n = int64(nbytes)
    if ctx.prof.shape[0] == 0 or n == 0:
        return
    k = L.P_FAILED_NO_PAGE
    if n <= 0:
        k = L.P_FAILED_NONPOSITIVE
    elif n > most:
        k = L.P_FAILED_TOO_BIG
    # Profile stripe: add, contended only among failing threads of blocks sharing it.
    cuda.atomic.add(ctx.prof, L.prof_word(cuda.blockIdx.x % L.PROF_STRIPES, k), 1)


@cuda.jit(device=True)
def _arena_bytes(ctx):
    ps = _pshift(ctx.meta)
    return int64(ctx.arena.shape[0] >> ps) << ps


@cuda.jit(device=True)
def alloc(ctx, nbytes):
    """Observed ``alloc``: see :func:`devalloc.device.core.alloc`; plus a record."""
    off = observed_chunk_alloc(ctx, nbytes)
    if off == L.NULL:
        _failed(ctx, nbytes, _arena_bytes(ctx))
    _record(ctx, _seq(ctx), L.OP_ALLOC, nbytes, off)
    return off


@cuda.jit(device=True)
def free(ctx, off):
    """Observed ``free``: see :func:`devalloc.device.core.free`; plus a record."""
    seq = _seq(ctx)  # before the free: a reuse of the block comes after it
    op = L.OP_FREE
    if not observed_chunk_free(ctx, off):
        op = L.OP_FREE_INVALID
    _record(ctx, seq, op, 0, off)


@cuda.jit(device=True)
def bump(ctx, nbytes):
    """Observed ``bump``: see :func:`devalloc.device.bumpalloc.bump`; plus a record."""
    off = _bump.bump_site(ctx, nbytes)
    if off == L.NULL:
        _failed(ctx, nbytes, _arena_bytes(ctx))
    _record(ctx, _seq(ctx), L.OP_BUMP, nbytes, off)
    return off


@cuda.jit(device=True)
def mark(ctx, s):
    """Observed ``mark``: see :func:`devalloc.device.scope.mark`; plus a record."""
    m = scope.mark(ctx, s)
    _record(ctx, _seq(ctx), L.OP_MARK, 0, m)
    return m


@cuda.jit(device=True)
def scoped(ctx, s, nbytes):
    """Observed ``scoped``: see :func:`devalloc.device.scope.scoped`; plus a record."""
    off, s2 = scope.scoped(ctx, s, nbytes)
    if off == L.NULL and L.scope_depth(int64(s)) > 0:
        _failed(ctx, nbytes, L.SCOPE_MAX_CHUNK - L.SCOPE_HEADER)
    _record(ctx, _seq(ctx), L.OP_SCOPED, nbytes, off)
    return off, s2


@cuda.jit(device=True)
def release(ctx, s, m):
    """Observed ``release``: see :func:`devalloc.device.scope.release`; plus a record."""
    s2 = scope.release(ctx, s, m)
    _record(ctx, _seq(ctx), L.OP_RELEASE, 0, m)
    return s2
