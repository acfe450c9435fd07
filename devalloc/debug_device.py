"""Device side of debug mode: guard bytes, poison, and a record of misuse.

Used only for heaps made with ``Heap(capacity, debug=True)``, whose ``ctx``
is a :class:`DebugCtx` (a third array, ``debug``). The public ``alloc`` and
``free`` pick these functions at compile time from the ctx's type
(:mod:`devalloc.api`), so a normal heap's compiled code has no debug branch.

A debug block of ``n`` requested bytes is a normal block of at least
``max(n + GUARD, MIN_BLOCK)`` bytes laid out as::

    [0, n)            the user's bytes
    [n, n + GUARD)    guard bytes, GUARD_BYTE each, checked at free and by check()
    ...               unused

``n`` itself is kept outside the arena, where no overrun reaches it: the
``sizes`` array (``uint16``, one entry per MIN_BLOCK bytes of arena) holds
the block's slack, its real size minus ``n`` (below PAGE + GUARD, so it
fits), at index ``offset >> SLOT_SHIFT``. Debug blocks are at least
MIN_BLOCK bytes apart, so two live blocks never share an entry.

``debug`` words: [0] records written (and attempted beyond the room),
then RECORDS records of 4 words from RECORD_BASE: kind, offset, linear block
index, linear thread index within the block. Records are appended with one
``add`` on ``debug[0]``; only the first RECORDS are kept.
"""

from numba import cuda, int64

from . import device
from . import layout as L

GUARD = 8
GUARD_BYTE = 0xFD
POISON_BYTE = 0xDB
RECORDS = 64
RECORD_BASE = 8
RECORD_WORDS = 4
DEBUG_WORDS = RECORD_BASE + RECORDS * RECORD_WORDS

#: Debug blocks are at least MIN_BLOCK bytes; ``sizes`` has one entry per MIN_BLOCK.
SLOT_SHIFT = 5
MIN_BLOCK = 1 << SLOT_SHIFT


def size_slots(npages):
    """Return the number of ``sizes`` entries of a debug heap of ``npages`` pages."""
    return npages << (L.PAGE_SHIFT - SLOT_SHIFT)


KIND_INVALID_FREE = 1
KIND_GUARD = 2
KIND_SCOPED_REUSE = 3


@cuda.jit(device=True)
def _record(debug, kind, off):
    # debug[0]: add, the only contended word; racing recorders get distinct slots.
    i = cuda.atomic.add(debug, 0, 1)
    if i < RECORDS:
        base = RECORD_BASE + i * RECORD_WORDS
        debug[base + 1] = off
        debug[base + 2] = cuda.blockIdx.x + cuda.gridDim.x * (
            cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
        debug[base + 3] = cuda.threadIdx.x + cuda.blockDim.x * (
            cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
        debug[base] = kind


@cuda.jit(device=True)
def _block_size(meta, npages, off):
    """Return the real size of the live block at ``off``, or 0 if there is none.

    A plain-load inspection for debug checks; ``free`` itself still decides.
    """
    if off < 0 or off >= (npages << L.PAGE_SHIFT) or off % L.ALIGN != 0:
        return 0
    p = off >> L.PAGE_SHIFT
    rel = off - (p << L.PAGE_SHIFT)
    s = meta[L.STATE_BASE + p]
    t = s & L.TAG_MASK
    if t == L.TAG_HEAD:
        if rel != 0:
            return 0
        return ((s >> L.N_SHIFT) & L.N_MASK) << L.PAGE_SHIFT
    if t < 1 or t > L.NCLASSES:
        return 0
    size = L.class_size(t - 1)
    b = rel // size
    if rel % size != 0 or b >= L.class_blocks(t - 1):
        return 0
    if b >= L.slab_cursor(s):
        return 0  # never handed out
    word = meta[L.bits_base(npages) + p * L.BITMAP_WORDS + b // L.BITS_PER_WORD]
    if (word >> (b % L.BITS_PER_WORD)) & 1:
        return 0  # freed
    return size


@cuda.jit(device=True)
def alloc(ctx, nbytes):
    """Debug ``alloc``: as :func:`devalloc.device.alloc`, plus guard bytes.

    Costs the normal atomics plus GUARD plain byte stores and one store of
    the block's slack in ``ctx.sizes``.
    """
    n = int64(nbytes)
    inner = n
    if n > 0:
        inner = max(n + GUARD, MIN_BLOCK)
    off = device.alloc(ctx, inner)
    if off != L.NULL:
        arena = ctx.arena
        for j in range(GUARD):
            arena[off + n + j] = GUARD_BYTE
        npages = arena.shape[0] >> L.PAGE_SHIFT
        ctx.sizes[off >> SLOT_SHIFT] = _block_size(ctx.meta, npages, off) - n
    return off


@cuda.jit(device=True)
def free(ctx, off):
    """Debug ``free``: check the guard, poison the block, record misuse.

    An invalid free is recorded (kind 1) and counted as usual; an overwritten
    guard is recorded (kind 2) and the block is still freed.
    """
    o = int64(off)
    if o == L.NULL:
        device.free(ctx, o)  # nothing to free, but the lane joins its group
        return
    arena = ctx.arena
    npages = arena.shape[0] >> L.PAGE_SHIFT
    cuda.threadfence()
    size = _block_size(ctx.meta, npages, o)
    if size == 0:
        _record(ctx.debug, KIND_INVALID_FREE, o)
    else:
        n = size - int64(ctx.sizes[o >> SLOT_SHIFT])
        bad = False
        if n < 0 or n + GUARD > size:
            bad = True
        else:
            for j in range(GUARD):
                if arena[o + n + j] != GUARD_BYTE:
                    bad = True
        if bad:
            _record(ctx.debug, KIND_GUARD, o)
        for j in range(size):
            arena[o + j] = POISON_BYTE
    device.free(ctx, o)


@cuda.jit(device=True)
def scratch_poison(ctx, off, n):
    """Fill ``n`` scoped-scratch bytes at ``off`` with POISON_BYTE (released)."""
    arena = ctx.arena
    for j in range(n):
        arena[off + j] = POISON_BYTE


@cuda.jit(device=True)
def scratch_check(ctx, off, n):
    """Record (kind 3) if scoped bytes about to be handed out are not poison.

    Bytes of a scoped chunk are poisoned when the chunk is made and when a
    scope releases them, so a changed byte means a scoped block was written
    after its release (or past the end of its block).
    """
    arena = ctx.arena
    for j in range(n):
        if arena[off + j] != POISON_BYTE:
            _record(ctx.debug, KIND_SCOPED_REUSE, off)
            return
