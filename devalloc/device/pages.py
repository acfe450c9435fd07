"""Pages: large blocks (whole pages) and runs of pages for bump chunks.

A large block (more than MAX_SMALL bytes) takes whole pages: its first
page's state word is a HEAD holding the page count, the others are TAILs.
Runs of free pages are looked up in the free-page index (:mod:`.index`), a
hint: every page is claimed with a ``cas`` on its state word, the single
source of truth, and the index follows the state words: a page enters it
after it became FREE and leaves it after it was claimed. A page claimed and
freed again while another thread was between reading the index and its
``cas`` can be left in the index though taken (a stale entry): a claim that
meets one takes it out (:func:`_repair`). Callers:
:mod:`devalloc.device.core` (large ``alloc``/``free``),
:mod:`devalloc.device.bumpalloc` (chunks, tagged BUMP) and
:mod:`devalloc.device.slab` (the index of single pages). Every state word
change is an atomic named below; the ordering argument is in
docs/correctness.md.
"""

from numba import cuda, int32, int64, uint32

from .. import layout as L
from ._meta import (_acquire_cas, _pshift, _at, _fence_acq_rel, _fold, _lo32, _load,
                    _note_fold, _opaque, _pages_changed, _pcount, _ptally)
from .index import _index_clear, _index_find, _index_set


@cuda.jit(device=True)
def _run_mask(lo, hi):
    # The bits of pages [lo, hi) in the level-0 word of page lo (hi at most
    # the word's end).
    return ((int64(1) << int64(hi - lo)) - 1) << int64(lo & (L.BITS_PER_WORD - 1))


@cuda.jit(device=True)
def _word_end(q, hi):
    # The end of the part of [q, hi) that lies in page q's level-0 word.
    return min(hi, (q | (L.BITS_PER_WORD - 1)) + 1)


@cuda.jit(device=True)
def _index_pages(meta, npages, lo, hi, free):
    """Put pages [lo, hi) in the free-page index (``free``) or take them out.

    Called after their state words changed: set once they are FREE, cleared
    once they are claimed. Atomics per index word: one ``or`` or ``and``,
    and the counts' ``add``s.
    """
    base = L.free_tree(npages, _pshift(meta))
    q = int32(lo)  # 32-bit page numbers (pages < 2**25): registers
    end = int32(hi)
    while q < end:
        e = int32(_word_end(q, end))
        if free:
            _index_set(meta, base, npages, q >> L.WORD_SHIFT, _run_mask(q, e))
        else:
            _index_clear(meta, base, npages, q >> L.WORD_SHIFT, _run_mask(q, e))
        q = e


@cuda.jit(device=True)
def _take_page(meta, q, head_k, tag, prof):
    """Turn free page ``q`` into a tail (head_k == 0) or a head of head_k pages.

    ``tag`` is the head's tag: TAG_HEAD (a large block, counted in allocs),
    TAG_BUMP (bump chunks, not counted). Returns 1 on success, 0 if the page
    is not free. Atomics: ``cas`` on the state word, again only while the
    page stays FREE: a FREE page's word changes only when another thread
    takes it (and frees it again), so every retry follows another thread's
    progress (no fixed budget, docs/correctness.md, "Progress").
    """
    idx = L.state_word(q)
    s = _load(meta, _at(idx))  # guess, validated by the cas
    while True:
        if L.state_tag(s) != L.TAG_FREE:
            return 0
        folded = 0
        if head_k == 0:
            new = L.state_keep_count(s) | L.TAG_TAIL
        else:
            new, folded = _head_word(s, head_k, tag)
        # State word: cas, races with slab takers and other large claims.
        # Acquire: the page's previous owner's accesses come before ours.
        old = _acquire_cas(meta, _at(idx), s, new)
        if old == s:
            _note_fold(meta, folded)
            return 1
        s = old
        _pcount(prof, L.P_CAS_RETRIES, 1)


@cuda.jit(device=True)
def _head_word(s, k, tag):
    """Return (state word, folded) for a head of ``k`` pages over word ``s``.

    A large block (TAG_HEAD) counts one allocation; a bump chunk does not.
    """
    keep = L.state_keep_count(s)
    k = int64(k)
    if tag == L.TAG_HEAD:
        return _fold(keep + L.COUNT_ONE + L.pack_state(L.TAG_HEAD, k, 0))
    return keep + L.pack_state(tag, k, 0), 0


@cuda.jit(device=True)
def _repair(meta, npages, q):
    """Take page ``q``, found in the free-page index but taken, out of it.

    Clear, then look again: if the page became FREE meanwhile (its freer's
    ``or`` came before our clear), put it back, so that a FREE page is never
    left out once every thread is done. Atomics: the index's ``and`` (and
    counts), and its ``or`` when the page is FREE again.
    """
    base = L.free_tree(npages, _pshift(meta))
    bit = int64(1) << (q & (L.BITS_PER_WORD - 1))
    if _index_clear(meta, base, npages, q >> L.WORD_SHIFT, bit):
        if L.state_tag(_load(meta, _at(L.state_word(q)))) == L.TAG_FREE:  # look again
            _index_set(meta, base, npages, q >> L.WORD_SHIFT, bit)


@cuda.jit(device=True)
def _untail(meta, lo, hi):
    # Tail pages lo..hi-1 back to free, count kept. Tails belong to the one
    # thread that holds them, so a plain and (never fails) suffices.
    # 32-bit page numbers (a 64-bit loop counter was live: registers).
    for q in range(int32(lo), int32(hi)):
        cuda.atomic.and_(meta, _at(L.state_word(q)), L.COUNT_MASK)


@cuda.jit(device=True)
def _alloc_large(meta, npages, k, prof):
    """Allocate a large block of ``k`` pages; return its offset or NULL.

    NULL only when :func:`_alloc_pages` proved no run of ``k`` pages free.
    """
    p = _alloc_pages(meta, npages, k, L.TAG_HEAD, prof)
    if p < 0:
        _pcount(prof, L.P_FAILED_FULL, 1)  # no run: proved full (_alloc_pages)
        return L.NULL
    return p << _pshift(meta)


@cuda.jit(device=True)
def _alloc_pages(meta, npages, k, tag, prof):
    """Take ``k`` contiguous free pages, highest addresses first; head page or -1.

    The head gets ``tag`` (TAG_HEAD or TAG_BUMP) and n = k.

    Large blocks grow down from the top of the arena, slabs up from the
    bottom, so slabs fragment the runs large blocks need as little as
    possible. The highest run below ``limit`` (first: the arena's end) is
    looked up in the free-page index (:func:`_find_run`); an index with no
    such run answers at once. The run
    [p, p + k) is claimed from its lowest page up, every page as a TAIL, and
    page p becomes the HEAD last, so the block is freeable only once it is
    complete; then the run leaves the index (one ``and`` per index word).
    Two threads that found the same run collide on page p: the loser has
    taken nothing. A claim that loses a page q gives back what it took
    (FREE, then in the index), takes q out of the index (:func:`_repair`:
    the winner's own ``and`` may not have come yet) and looks again below
    q, where every run it can still take lies. So each pass goes strictly
    down; a pass that lost a race is followed by another from the top, for
    as long as passes lose races (each lost page is another thread's take:
    progress). -1 only after a pass that lost no race and found no run of
    ``k`` pages in the index (docs/correctness.md, "Progress").
    """
    seen = 0  # candidate runs tried and passes made (profiled heaps only)
    scans = 0
    k = int32(k)  # 32-bit page numbers (pages < 2**25): registers
    while True:
        scans = _ptally(prof, scans)
        limit = int32(npages)
        lost = False
        while True:
            # Hidden each time: what derives from npages is not hoisted out
            # of the loop and kept live across it (registers).
            npages = _opaque(npages)
            p = _find_run(meta, npages, k, limit)
            if p < 0:
                break
            seen = _ptally(prof, seen)
            q = p
            end = int32(p + k)  # 32-bit: a 64-bit sum was kept live (registers)
            while q < end and _take_page(meta, q, k if k == 1 else 0, tag, prof):
                q = int32(q + 1)
            if q == end:
                if k > 1:
                    _crown(meta, p, k, tag)
                _index_pages(meta, npages, p, end, False)
                _pages_changed(meta, k)
                _profile_scan(prof, scans, seen)
                return int64(p)
            # Lost page q: free what we took, back into the index (another
            # claim may have repaired them out meanwhile), and take q out of
            # the index if it is a stale entry.
            _untail(meta, p, q)
            _index_pages(meta, npages, p, q, True)
            _repair(meta, npages, q)
            lost = True
            limit = q
        if not lost:
            break
    _profile_scan(prof, scans, seen)
    return int64(-1)


@cuda.jit(device=True)
def _profile_scan(prof, passes, seen):
    # Profiled heaps: the large search's passes and candidate runs tried.
    _pcount(prof, L.P_LARGE_SCANS, passes)
    _pcount(prof, L.P_PAGES_SCANNED, seen)


@cuda.jit(device=True)
def _crown(meta, p, k, tag):
    """Turn page ``p``, a TAIL this thread holds, into the head of ``k`` pages.

    Nobody else writes a TAIL's state word, so the value read is current and
    one ``exch`` suffices (plus the fold ``add`` when the count folds).
    """
    idx = L.state_word(p)
    new, folded = _head_word(_load(meta, _at(idx)), k, tag)
    # State word: exch on our own tail page.
    cuda.atomic.exch(meta, _at(idx), new)
    _note_fold(meta, folded)


@cuda.jit(device=True)
def _find_run(meta, npages, k, limit):
    """Return the first page of the highest run of ``k`` free pages below ``limit``, or -1.

    From the free-page index alone (relaxed loads: a guess the state ``cas``
    validates). Goes down over the index words with pages set
    (:func:`_index_find` skips the empty ones 32 words per count read),
    carrying ``run``, the free pages at the bottom of the words above: a
    word's top free pages extend it; a run inside a word is found with
    shifts; else the word's bottom free pages start a new one. 32-bit
    (pages < 2**25): registers.
    """
    kk = uint32(k)
    lim = uint32(limit)
    # limit 0 (a lost page 0): first is past every word, and nothing is found.
    first = int32(_lo32(int64(lim) - 1) >> L.WORD_SHIFT)
    w = first
    if lim == uint32(npages):
        w = int32(-1)  # the whole index, from its top word down
    run = uint32(0)
    while True:
        v, found = _index_find(meta, L.free_tree(npages, _pshift(meta)), npages, w, False)
        if v < 0:
            return int32(-1)
        vw = v
        x = found
        if vw == first:  # only the pages below limit
            x = uint32(x & (uint32(0xFFFFFFFF) >> uint32(31 - ((lim - uint32(1)) & uint32(31)))))
        if vw != w:
            run = uint32(0)  # words w .. v + 1 have no free page
        # Free pages at the top of word v: its leading ones.
        top = uint32(cuda.clz(uint32(~x)))
        if top + run >= kk:
            return int32(((vw + 1) << L.WORD_SHIFT) + int32(run) - int32(kk))
        if top == uint32(L.BITS_PER_WORD):
            run = uint32(run + uint32(L.BITS_PER_WORD))
        else:
            if kk < uint32(L.BITS_PER_WORD):
                # Bit i of m: pages i .. i + k - 1 of the word are all free.
                m = x
                sh = uint32(1)
                while sh < kk:
                    t = min(sh, uint32(kk - sh))
                    m = uint32(m & (m >> t))
                    sh = uint32(sh + t)
                if m != 0:
                    return int32((vw << L.WORD_SHIFT) + 31 - int32(cuda.clz(m)))
            # Free pages at its bottom (trailing ones) start the next run.
            run = uint32(cuda.ffs(uint32(~x)) - 1)
        if vw == 0:
            return int32(-1)
        w = int32(vw - 1)


@cuda.jit(device=True)
def _free_large(meta, npages, p, prof):
    """Free the large block whose head is page ``p``; return 1, or 0 if invalid."""
    return _free_pages(meta, npages, p, L.TAG_HEAD, prof)


@cuda.jit(device=True)
def _free_pages(meta, npages, p, tag, prof):
    """Return the run whose head (tagged ``tag``) is page ``p``; 1, or 0 if none.

    The head becomes FREE (of two racing frees exactly one wins it), the
    tails after it, then the pages enter the free-page index (a claim that
    looks meanwhile does not see them yet). Atomics: the pages-used
    ``add``, one ``cas`` on the head, one ``and`` per tail page, after one
    release fence (the run's accesses before any of them: ``fence.acq_rel``,
    one for every page), then the index's ``or`` (and counts) per index word.
    """
    idx = L.state_word(p)
    s = _load(meta, _at(idx))  # guess; a live head changes only when it is freed
    if L.state_tag(s) != tag:
        return 0
    k = L.state_n(s)
    _fence_acq_rel()
    _pages_changed(meta, -k)
    # State word: cas head -> free; of two racing frees exactly one wins.
    if cuda.atomic.cas(meta, _at(idx), s, L.state_keep_count(s)) != s:
        _pages_changed(meta, k)
        _pcount(prof, L.P_CAS_RETRIES, 1)
        return 0
    _untail(meta, int32(p + 1), int32(p + k))
    _index_pages(meta, npages, p, p + k, True)
    return 1
