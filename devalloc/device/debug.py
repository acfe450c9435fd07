"""Debug heaps' ``alloc`` and ``free``: guard bytes, poison, a record of misuse.

Used only for heaps made with ``Heap(capacity, debug=True)``, whose ``ctx``
is a :class:`~devalloc.ctx.DebugCtx` (two more arrays, ``debug`` and
``sizes``). The public ``alloc`` and ``free`` pick these functions at compile
time from the ctx's type (:mod:`devalloc.device.api`), so a normal heap's
compiled code has no debug branch. The block layout (user bytes, guard) and
the record words are in layout.py, "debug record"; the requested size is
kept outside the arena, in ``sizes``, where no overrun reaches it. Records
are appended with one ``add`` on ``debug[0]``; only the first RECORDS are kept.
"""

from numba import cuda, int64

from .. import layout as L
from . import core
from ._meta import _load, _pshift

@cuda.jit(device=True)
def _record(debug, kind, off):
    # debug[0]: add, the only contended word; racing recorders get distinct slots.
    i = cuda.atomic.add(debug, 0, 1)
    if i < L.RECORDS:
        base = L.record_word(i, 0)
        debug[base + L.R_OFFSET] = off
        debug[base + L.R_BLOCK] = cuda.blockIdx.x + cuda.gridDim.x * (
            cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
        debug[base + L.R_THREAD] = cuda.threadIdx.x + cuda.blockDim.x * (
            cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
        debug[base + L.R_KIND] = kind


@cuda.jit(device=True)
def _block_size(meta, npages, off):
    """Return the real size of the live block at ``off``, or 0 if there is none.

    A plain-load inspection for debug checks; ``free`` itself still decides.
    """
    ps = _pshift(meta)
    if off < 0 or off >= (npages << ps) or off % L.ALIGN != 0:
        return 0
    p = off >> ps
    rel = off - (p << ps)
    s = _load(meta, L.state_word(p))
    t = L.state_tag(s)
    if t == L.TAG_HEAD:
        if rel != 0:
            return 0
        return L.state_n(s) << ps
    if not L.is_slab_tag(t):
        return 0
    size = L.class_size(L.slab_class(t))
    b = rel // size
    if rel % size != 0 or b >= L.class_blocks(L.slab_class(t), ps):
        return 0
    if b >= L.slab_cursor(s):
        return 0  # never handed out
    word = _load(meta, L.bitmap_word(npages, p, b >> L.WORD_SHIFT, ps))
    if (word >> (b & (L.BITS_PER_WORD - 1))) & 1:
        return 0  # freed
    return size


@cuda.jit(device=True)
def alloc_inner(ctx, nbytes, inner):
    """Debug ``alloc`` of ``nbytes`` user bytes in a block of at least ``inner``.

    ``inner`` is at least ``max(nbytes + GUARD, DEBUG_MIN_BLOCK)`` (larger:
    an aligned request, devalloc.device.porting). Costs the normal atomics
    plus GUARD plain byte stores and one store of the block's slack in
    ``ctx.sizes``; NULL as :func:`devalloc.device.core.alloc`.
    """
    n = int64(nbytes)
    off = core.alloc_site(ctx, inner)
    if off != L.NULL:
        arena = ctx.arena
        for j in range(L.GUARD):
            arena[off + n + j] = L.GUARD_BYTE
        npages = arena.shape[0] >> _pshift(ctx.meta)
        ctx.sizes[off >> L.DEBUG_SLOT_SHIFT] = _block_size(ctx.meta, npages, off) - n
    return off


@cuda.jit(device=True)
def alloc(ctx, nbytes):
    """Debug ``alloc``: as :func:`devalloc.device.core.alloc`, plus guard bytes.

    Costs the normal atomics plus GUARD plain byte stores and one store of
    the block's slack in ``ctx.sizes``.
    """
    n = int64(nbytes)
    inner = n
    if n > 0:
        inner = max(n + L.GUARD, L.DEBUG_MIN_BLOCK)
    return alloc_inner(ctx, n, inner)


@cuda.jit(device=True)
def guard_intact(ctx, off, size):
    """Return True if the live debug block at ``off`` (real ``size``) has its guard.

    Plain loads of the slack and the GUARD bytes after the requested size.
    """
    arena = ctx.arena
    n = size - int64(ctx.sizes[off >> L.DEBUG_SLOT_SHIFT])
    if n < 0 or n + L.GUARD > size:
        return False
    for j in range(L.GUARD):
        if arena[off + n + j] != L.GUARD_BYTE:
            return False
    return True


@cuda.jit(device=True)
def free(ctx, off):
    """Debug ``free``: check the guard, poison the block, record misuse.

    An invalid free is recorded (kind 1) and counted as usual; an overwritten
    guard is recorded (kind 2) and the block is still freed.
    """
    o = int64(off)
    if o == L.NULL:
        return core.free_site(ctx, o)  # nothing to free, but the lane joins its group
    arena = ctx.arena
    npages = arena.shape[0] >> _pshift(ctx.meta)
    size = _block_size(ctx.meta, npages, o)
    if size == 0:
        _record(ctx.debug, L.KIND_INVALID_FREE, o)
    else:
        if not guard_intact(ctx, o, size):
            _record(ctx.debug, L.KIND_GUARD, o)
        for j in range(size):
            arena[o + j] = L.POISON_BYTE
    return core.free_site(ctx, o)


@cuda.jit(device=True)
def scratch_poison(ctx, off, n):
    """Fill ``n`` scoped-scratch bytes at ``off`` with POISON_BYTE (released)."""
    arena = ctx.arena
    for j in range(n):
        arena[off + j] = L.POISON_BYTE


@cuda.jit(device=True)
def scratch_check(ctx, off, n):
    """Record (kind 3) if scoped bytes about to be handed out are not poison.

    Bytes of a scoped chunk are poisoned when the chunk is made and when a
    scope releases them, so a changed byte means a scoped block was written
    after its release (or past the end of its block).
    """
    arena = ctx.arena
    for j in range(n):
        if arena[off + j] != L.POISON_BYTE:
            _record(ctx.debug, L.KIND_SCOPED_REUSE, off)
            return
