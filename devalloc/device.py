"""Device side: ``alloc`` and ``free``, called by GPU threads inside kernels.

Shared metadata (the ``int64`` array ``ctx.meta``; word layout in
:mod:`devalloc.layout`) and who touches it:

* **page state word** ``meta[STATE_BASE + p]`` (tag, n, count). Written only
  with atomics: ``cas`` by allocators (reserve a slot in a slab, turn a free
  page into a slab or part of a large block, retire an empty slab) and by
  ``free`` of a large block; ``add`` by ``free`` of a small block (give a slot
  back); ``and`` by large-block claim rollback and large ``free`` (tail pages
  back to free, count kept). Plain loads only produce *guesses* that a later
  ``cas`` validates. The state word is the single source of truth for what a
  page is; while a slab has a live block its tag cannot change.
* **slab bitmap word**: bit set = block handed out. Set with ``or`` by the
  thread that holds a reserved slot; cleared with ``and`` by ``free``. Plain
  loads are guesses validated by the ``or``/``and`` result.
* **global words** (pages used, peak, fold, undo): ``add``/``max`` on page-level
  events only (a slab taken or retired, a large block taken or freed), never
  per small allocation.
* **failure stripes**: ``add`` on the failure paths, striped by block index.
* **class hints**: racy ``exch`` stores and plain loads; any value is safe
  because every hint is range-checked and validated by the state ``cas``.

Invariant per slab: bits set <= live slots (``alloc`` reserves a slot before
setting its bit; ``free`` clears the bit before giving the slot back), so a
thread holding a reserved slot always has a clear bit to find, and a slab
whose live count reaches zero has an all-zero bitmap and may be retired and
reused with no initialisation.

Memory ordering. numba's atomics are relaxed. ``free`` issues
``cuda.threadfence()`` before the atomic that releases the block (release:
the owner's writes to the block are visible before anyone can claim it), and
``alloc`` issues one after the atomic that claims it (acquire: the new owner's
accesses happen after the claim). Metadata needs no further fences: every
state change is made by an atomic whose returned value validates it. Plain
loads only choose what to try (a page, a word, a hint); a stale one costs a
skipped page or a retry, never a wrong change, with one documented exception
(an invalid free racing with page reuse: docs/correctness.md).

Progress. No thread ever waits for another: there are no locks and no spins
on a value another thread must change. Every loop is bounded by the number
of pages, bitmap words or ``RETRIES``; running out of bounds returns NULL.
"""

from numba import cuda, int64

from . import layout as L
from .device_large import RETRIES, _alloc_large, _fold, _free_large, _pages_changed
from .layout import (
    bits_base,
    class_blocks,
    class_size,
    class_words,
    pages_for,
    size_class,
    slab_tag,
    stripe_word,
    word_valid_mask,
)

#: Passes over a slab's bitmap words by a thread holding a reserved slot.
BIT_PASSES = 4
#: Passes of the small-block scan, repeated only while races were lost.
SMALL_PASSES = 4


@cuda.jit(device=True)
def _count(meta, field):
    # Failure stripes: add, contended only among failing threads of blocks
    # that share a stripe. Ordering irrelevant: read by the host after sync.
    stripe = cuda.blockIdx.x % L.STRIPES
    cuda.atomic.add(meta, stripe_word(stripe, field), 1)


@cuda.jit(device=True)
def _reserve(meta, p, c):
    """Reserve one slot of class ``c`` in page ``p``.

    Succeeds on a slab of class ``c`` with a free slot, or on a free page,
    which becomes such a slab. Returns 1 on success, 0 when the page cannot
    serve the class, 2 when it still could but RETRIES ``cas`` attempts all
    lost to other threads. Atomics: one ``cas`` on the state word per
    attempt, plus pages-used/peak when a page is taken.
    """
    idx = L.STATE_BASE + p
    tag = slab_tag(c)
    cap = class_blocks(c)
    s = meta[idx]  # guess, validated by the cas
    for _ in range(RETRIES):
        t = s & L.TAG_MASK
        taken = False
        if t == L.TAG_FREE:
            new = (s & L.COUNT_MASK) + L.COUNT_ONE + L.N_ONE + tag
            taken = True
        elif t == tag and ((s >> L.N_SHIFT) & L.N_MASK) < cap:
            new = s + L.COUNT_ONE + L.N_ONE
        else:
            return 0
        new, folded = _fold(new)
        # State word: cas, races with every allocator and freer of page p.
        old = cuda.atomic.cas(meta, idx, s, new)
        if old == s:
            if folded:
                cuda.atomic.add(meta, L.H_ALLOC_FOLD, folded)
            if taken:
                _pages_changed(meta, 1)
            return 1
        s = old
    return 2


@cuda.jit(device=True)
def _release_slot(meta, p, undo):
    """Give back one slot of the slab on page ``p``; retire it when empty.

    Atomics: one ``add`` on the state word; when the slab became empty, one
    ``cas`` to retire it and the pages-used ``add``. ``undo`` also counts a
    reservation that was never used (it is not a free).
    """
    idx = L.STATE_BASE + p
    # State word: add never fails, so giving a slot back never spins.
    old = cuda.atomic.add(meta, idx, -L.N_ONE)
    if undo:
        cuda.atomic.add(meta, L.H_ALLOC_UNDO, 1)
    new = old - L.N_ONE
    if ((new >> L.N_SHIFT) & L.N_MASK) == 0:
        # Empty: retire, unless someone reserved (or folded) meanwhile, in
        # which case that thread's own release will retire it later.
        _pages_changed(meta, -1)
        if cuda.atomic.cas(meta, idx, new, new & L.COUNT_MASK) != new:
            _pages_changed(meta, 1)


@cuda.jit(device=True)
def _claim_bit(meta, npages, p, c):
    """Set a clear bit of the slab on page ``p``; return its index or -1.

    Only a thread holding a reserved slot of that slab may call. Atomics: one
    ``or`` per attempt; a failed ``or`` means another thread took that bit.
    """
    base = bits_base(npages) + p * L.BITMAP_WORDS
    nw = class_words(c)
    start = cuda.grid(1) % nw  # spread threads over the words
    for i in range(nw * BIT_PASSES):
        w = (start + i) % nw
        valid = word_valid_mask(c, w)
        clear = ~meta[base + w] & valid  # guess, validated by the or
        for _ in range(L.BITS_PER_WORD):
            if clear == 0:
                break
            b = int64(cuda.ffs(clear)) - 1
            bit = int64(1) << b
            # Bitmap word: or, races with other slot holders and freers.
            old = cuda.atomic.or_(meta, base + w, bit)
            if old & bit == 0:
                return w * L.BITS_PER_WORD + b
            clear = ~old & valid
    return -1


@cuda.jit(device=True)
def _alloc_small(meta, npages, c):
    """Serve class ``c`` from the first page, from the hint on, that can.

    A pass visits every page once; a pass that lost a race somewhere (a
    ``cas`` budget spent, a bit search that came back empty) is followed by
    another, up to SMALL_PASSES, so contention alone rarely yields NULL.
    """
    hint_idx = L.HINT_BASE + c
    h = meta[hint_idx]  # racy hint: any value is safe
    if h < 0 or h >= npages:
        h = 0
    for _ in range(SMALL_PASSES):
        contended = False
        p = h
        for _ in range(npages):
            r = _reserve(meta, p, c)
            if r == 1:
                b = _claim_bit(meta, npages, p, c)
                if b >= 0:
                    if p != h:
                        cuda.atomic.exch(meta, hint_idx, p)  # hint: racy, harmless
                    return (p << L.PAGE_SHIFT) + b * class_size(c)
                _release_slot(meta, p, True)
                contended = True
            elif r == 2:
                contended = True
            p += 1
            if p == npages:
                p = 0
        if not contended:
            break
    return L.NULL


@cuda.jit(device=True)
def _alloc_uncounted(meta, npages, nbytes):
    """``alloc`` without the failure count and the fence; offset or NULL."""
    n = int64(nbytes)
    if n > 0 and n <= (npages << L.PAGE_SHIFT):
        if n <= L.MAX_SMALL:
            return _alloc_small(meta, npages, size_class(n))
        return _alloc_large(meta, npages, pages_for(n))
    return int64(L.NULL)


@cuda.jit(device=True)
def alloc(ctx, nbytes):
    """Allocate a block of at least ``nbytes`` bytes; return its offset.

    Any thread of any kernel may call, in divergent code too; lanes never
    wait for one another. The offset is a multiple of 16 into ``ctx.arena``.

    Atomics, uncontended: one ``cas`` on a page state word and one ``or`` on
    a bitmap word (blocks up to 8 KiB); one ``cas`` per page (large blocks);
    plus the pages-used ``add`` and peak ``max`` when a page is taken. Then
    one ``threadfence`` (acquire).

    :returns: the offset, or ``devalloc.NULL`` if ``nbytes <= 0``, if it is
        larger than the arena, or if no space is found; NULL results are
        counted in ``failed``.
    """
    meta = ctx.meta
    off = _alloc_uncounted(meta, ctx.arena.shape[0] >> L.PAGE_SHIFT, nbytes)
    if off == L.NULL:
        _count(meta, L.S_FAILED)
    else:
        cuda.threadfence()  # acquire: our accesses to the block follow the claim
    return off


@cuda.jit(device=True)
def _free_small(meta, npages, p, c, rel):
    size = class_size(c)
    b = rel // size
    if rel - b * size != 0 or b >= class_blocks(c):
        return 0
    w = b // L.BITS_PER_WORD
    bit = int64(1) << (b % L.BITS_PER_WORD)
    # Bitmap word: and; if the bit was already clear nothing changed.
    old = cuda.atomic.and_(meta, bits_base(npages) + p * L.BITMAP_WORDS + w,
                           ~bit & L.WORD_MASK)
    if old & bit == 0:
        return 0
    _release_slot(meta, p, False)
    return 1


@cuda.jit(device=True)
def free(ctx, off):
    """Return the block at offset ``off`` to the heap.

    Any thread may call, in divergent code too. ``free(ctx, NULL)`` does
    nothing. An offset that is not a live block (double free, inside a
    block, outside the heap) changes nothing and is counted in
    ``invalid_frees``.

    Atomics: one ``threadfence`` (release), then for a small block one
    ``and`` on its bitmap word and one ``add`` on the page state word (plus a
    ``cas`` and the pages-used ``add`` when the slab empties); for a large
    block one ``cas`` on its head page, one ``and`` per tail page and the
    pages-used ``add``.
    """
    meta = ctx.meta
    o = int64(off)
    if o == L.NULL:
        return
    npages = ctx.arena.shape[0] >> L.PAGE_SHIFT
    ok = 0
    if o >= 0 and o < (npages << L.PAGE_SHIFT) and o & (L.ALIGN - 1) == 0:
        p = o >> L.PAGE_SHIFT
        rel = o - (p << L.PAGE_SHIFT)
        # Release: our writes to the block are ordered before the atomic that
        # frees it. Being before the load, the fence also orders the load
        # after whatever made this offset known to us (docs/correctness.md).
        cuda.threadfence()
        t = meta[L.STATE_BASE + p] & L.TAG_MASK  # see "Known limits"
        if t == L.TAG_HEAD:
            if rel == 0:
                ok = _free_large(meta, p)
        elif t >= 1 and t <= L.NCLASSES:
            ok = _free_small(meta, npages, p, t - 1, rel)
    if not ok:
        _count(meta, L.S_INVALID)
