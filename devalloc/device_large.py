"""Device side, page level: large blocks and the pages-used accounting.

Part of :mod:`devalloc.device` (whose docstring describes every shared
metadata word and the memory-ordering argument); split out to keep each
module readable. A large block (more than MAX_SMALL bytes) takes whole
pages: its first page's state word is a HEAD holding the page count, the
others are TAILs. Callers: only :func:`devalloc.device.alloc` and
:func:`devalloc.device.free`.
"""

from numba import config, cuda, int64, uint32

from . import layout as L

#: Attempts of a contended ``cas`` on one word before moving on.
RETRIES = 64
#: Passes of the large-block scan, repeated only while claims collided.
LARGE_PASSES = 8


if config.ENABLE_CUDASIM:

    def _at(i):
        """The simulator's ``_at``: the index itself (see below).

        A plain function, because the simulator's device-function calls are
        slow enough to widen every load-to-``cas`` window, which would make
        the simulated contention figures worse than the algorithm's.
        """
        return i

else:

    @cuda.jit(device=True)
    def _at(i):
        """Return metadata index ``i`` as a value the compiler knows is >= 0.

        Every metadata index is below 2**31 (MAX_PAGES bounds the heap).
        Numba wraps negative indices around for loads, stores and atomics;
        zero-extending a 32-bit value lets the compiler drop that code, which
        saves instructions and registers at every metadata access.
        """
        return int64(uint32(i))


@cuda.jit(device=True)
def _pages_changed(meta, delta):
    # Pages used: add, once per slab taken/retired or large block taken/freed.
    # Takers add after their cas, releasers subtract before theirs (and add
    # back if it fails), so the counter never exceeds the pages really held.
    old = cuda.atomic.add(meta, L.H_PAGES_USED, delta)
    if delta > 0:
        # Peak: max with the value this add produced, so the peak is the
        # exact high-water mark of the pages-used counter.
        cuda.atomic.max(meta, L.H_PEAK_PAGES, old + delta)


@cuda.jit(device=True)
def _fold(new):
    # Return (state word, folded amount): keep the count field below 2**23.
    # The count is the word's top field, so count >= COUNT_FOLD is its top
    # bit, and folding clears that bit (no compare, no 64-bit subtraction).
    top = new & L.COUNT_FOLD_BIT
    return new ^ top, top >> L.COUNT_SHIFT


@cuda.jit(device=True)
def _take_page(meta, q, head_k, tag):
    """Turn free page ``q`` into a tail (head_k == 0) or a head of head_k pages.

    ``tag`` is the head's tag: TAG_HEAD (a large block, counted in allocs),
    TAG_BUMP (bump chunks, not counted). Returns 1 on success.
    Atomics: ``cas`` on the state word (<= RETRIES).
    """
    idx = L.STATE_BASE + q
    s = meta[_at(idx)]
    for _ in range(RETRIES):
        if s & L.TAG_MASK != L.TAG_FREE:
            return 0
        folded = 0
        if head_k == 0:
            new = (s & L.COUNT_MASK) | L.TAG_TAIL
        else:
            new, folded = _head_word(s, head_k, tag)
        # State word: cas, races with slab reservers and other large claims.
        old = cuda.atomic.cas(meta, _at(idx), s, new)
        if old == s:
            _note_fold(meta, folded)
            return 1
        s = old
    return 0


@cuda.jit(device=True)
def _head_word(s, k, tag):
    """Return (state word, folded) for a head of ``k`` pages over word ``s``.

    A large block (TAG_HEAD) counts one allocation; a bump chunk does not.
    """
    keep = s & L.COUNT_MASK
    if tag == L.TAG_HEAD:
        return _fold(keep + L.COUNT_ONE + (k << L.N_SHIFT) + L.TAG_HEAD)
    return keep + (k << L.N_SHIFT) + tag, 0


@cuda.jit(device=True)
def _note_fold(meta, folded):
    if folded:
        cuda.atomic.add(meta, L.H_ALLOC_FOLD, folded)  # fold word: add


@cuda.jit(device=True)
def _untail(meta, lo, hi):
    # Tail pages lo..hi-1 back to free, count kept. Tails belong to the one
    # thread that holds them, so a plain and (never fails) suffices.
    for q in range(lo, hi):
        cuda.atomic.and_(meta, _at(L.STATE_BASE + q), L.COUNT_MASK)


@cuda.jit(device=True)
def _alloc_large(meta, npages, k):
    """Allocate a large block of ``k`` pages; return its offset or NULL."""
    p = _alloc_pages(meta, npages, k, L.TAG_HEAD)
    if p < 0:
        return L.NULL
    return p << L.PAGE_SHIFT


@cuda.jit(device=True)
def _alloc_pages(meta, npages, k, tag):
    """Take ``k`` contiguous free pages, highest addresses first; head page or -1.

    The head gets ``tag`` (TAG_HEAD or TAG_BUMP) and n = k.

    Large blocks grow down from the top of the arena, slabs up from the
    bottom, so slabs fragment the runs large blocks need as little as
    possible. The scan goes down; a candidate run [p, p + k) is claimed from
    its lowest page up, every page as a TAIL, and page p becomes the HEAD
    last, so the block is freeable only once it is complete. Two threads
    that found the same run collide on page p: the loser has taken nothing
    and goes on below p, never touching the winner's run again. A claim
    that fails higher up (a slab took a page) gives back what it took and
    also goes on below p. So each pass is strictly downward and costs at
    most npages loads and npages + k ``cas``; a pass that lost a race is
    followed by another, up to LARGE_PASSES.
    """
    for _ in range(LARGE_PASSES):
        contended = False
        run = 0
        p = npages - 1
        while p >= 0:
            if meta[_at(L.STATE_BASE + p)] & L.TAG_MASK == L.TAG_FREE:  # guess
                run += 1
            else:
                run = 0
            if run >= k:
                if k == 1:
                    if _take_page(meta, p, 1, tag):
                        _pages_changed(meta, 1)
                        return p
                elif _take_page(meta, p, 0, tag):
                    q = p + 1
                    while q < p + k and _take_page(meta, q, 0, tag):
                        q += 1
                    if q == p + k:
                        _crown(meta, p, k, tag)
                        _pages_changed(meta, k)
                        return p
                    _untail(meta, p, q)
                contended = True
                run = 0  # next candidates lie below p
            p -= 1
        if not contended:
            break
    return -1


@cuda.jit(device=True)
def _crown(meta, p, k, tag):
    """Turn page ``p``, a TAIL this thread holds, into the head of ``k`` pages.

    Nobody else writes a TAIL's state word, so the value read is current and
    one ``exch`` suffices (plus the fold ``add`` when the count folds).
    """
    idx = L.STATE_BASE + p
    new, folded = _head_word(meta[_at(idx)], k, tag)
    # State word: exch on our own tail page.
    cuda.atomic.exch(meta, _at(idx), new)
    _note_fold(meta, folded)


@cuda.jit(device=True)
def _free_large(meta, p):
    """Free the large block whose head is page ``p``; return 1, or 0 if invalid."""
    return _free_pages(meta, p, L.TAG_HEAD)


@cuda.jit(device=True)
def _free_pages(meta, p, tag):
    """Return the run whose head (tagged ``tag``) is page ``p``; 1, or 0 if none.

    Atomics: the pages-used ``add``, one ``cas`` on the head, one ``and`` per
    tail page.
    """
    idx = L.STATE_BASE + p
    s = meta[_at(idx)]  # guess; a live head changes only when it is freed
    if s & L.TAG_MASK != tag:
        return 0
    k = (s >> L.N_SHIFT) & L.N_MASK
    _pages_changed(meta, -k)
    # State word: cas head -> free; of two racing frees exactly one wins.
    if cuda.atomic.cas(meta, _at(idx), s, s & L.COUNT_MASK) != s:
        _pages_changed(meta, k)
        return 0
    _untail(meta, p + 1, p + k)
    return 1
