"""Pages: large blocks (whole pages) and runs of pages for bump chunks.

A large block (more than MAX_SMALL bytes) takes whole pages: its first
page's state word is a HEAD holding the page count, the others are TAILs.
Callers: :mod:`devalloc.device.core` (large ``alloc``/``free``) and
:mod:`devalloc.device.bumpalloc` (chunks, tagged BUMP). Every state word change
is an atomic named below; the ordering argument is in docs/correctness.md.
"""

from numba import cuda

from .. import layout as L
from ._meta import (RETRIES, _acquire_cas, _at, _fence_acq_rel, _fold, _load, _note_fold,
                    _pages_changed, _pcount, _ptally)

#: Passes of the large-block scan, repeated only while claims collided.
LARGE_PASSES = 8


@cuda.jit(device=True)
def _take_page(meta, q, head_k, tag, prof):
    """Turn free page ``q`` into a tail (head_k == 0) or a head of head_k pages.

    ``tag`` is the head's tag: TAG_HEAD (a large block, counted in allocs),
    TAG_BUMP (bump chunks, not counted). Returns 1 on success.
    Atomics: ``cas`` on the state word (<= RETRIES).
    """
    idx = L.state_word(q)
    s = _load(meta, _at(idx))
    for _ in range(RETRIES):
        if L.state_tag(s) != L.TAG_FREE:
            return 0
        folded = 0
        if head_k == 0:
            new = L.state_keep_count(s) | L.TAG_TAIL
        else:
            new, folded = _head_word(s, head_k, tag)
        # State word: cas, races with slab reservers and other large claims.
        # Acquire: the page's previous owner's accesses come before ours.
        old = _acquire_cas(meta, _at(idx), s, new)
        if old == s:
            _note_fold(meta, folded)
            return 1
        s = old
        _pcount(prof, L.P_CAS_RETRIES, 1)
    return 0


@cuda.jit(device=True)
def _head_word(s, k, tag):
    """Return (state word, folded) for a head of ``k`` pages over word ``s``.

    A large block (TAG_HEAD) counts one allocation; a bump chunk does not.
    """
    keep = L.state_keep_count(s)
    if tag == L.TAG_HEAD:
        return _fold(keep + L.COUNT_ONE + L.pack_state(L.TAG_HEAD, k, 0))
    return keep + L.pack_state(tag, k, 0), 0


@cuda.jit(device=True)
def _untail(meta, lo, hi):
    # Tail pages lo..hi-1 back to free, count kept. Tails belong to the one
    # thread that holds them, so a plain and (never fails) suffices.
    for q in range(lo, hi):
        cuda.atomic.and_(meta, _at(L.state_word(q)), L.COUNT_MASK)


@cuda.jit(device=True)
def _alloc_large(meta, npages, k, prof):
    """Allocate a large block of ``k`` pages; return its offset or NULL."""
    p = _alloc_pages(meta, npages, k, L.TAG_HEAD, prof)
    if p < 0:
        return L.NULL
    return p << L.PAGE_SHIFT


@cuda.jit(device=True)
def _alloc_pages(meta, npages, k, tag, prof):
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
    seen = 0  # pages loaded and passes made (profiled heaps only)
    scans = 0
    for _ in range(LARGE_PASSES):
        scans = _ptally(prof, scans)
        contended = False
        run = 0
        p = npages - 1
        while p >= 0:
            seen = _ptally(prof, seen)
            if L.state_tag(_load(meta, _at(L.state_word(p)))) == L.TAG_FREE:  # guess
                run += 1
            else:
                run = 0
            if run >= k:
                if k == 1:
                    if _take_page(meta, p, 1, tag, prof):
                        _pages_changed(meta, 1)
                        _profile_scan(prof, scans, seen)
                        return p
                elif _take_page(meta, p, 0, tag, prof):
                    q = p + 1
                    while q < p + k and _take_page(meta, q, 0, tag, prof):
                        q += 1
                    if q == p + k:
                        _crown(meta, p, k, tag)
                        _pages_changed(meta, k)
                        _profile_scan(prof, scans, seen)
                        return p
                    _untail(meta, p, q)
                contended = True
                run = 0  # next candidates lie below p
            p -= 1
        if not contended:
            break
    _profile_scan(prof, scans, seen)
    return -1


@cuda.jit(device=True)
def _profile_scan(prof, passes, seen):
    # Profiled heaps: the large scan's passes and pages loaded.
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
def _free_large(meta, p, prof):
    """Free the large block whose head is page ``p``; return 1, or 0 if invalid."""
    return _free_pages(meta, p, L.TAG_HEAD, prof)


@cuda.jit(device=True)
def _free_pages(meta, p, tag, prof):
    """Return the run whose head (tagged ``tag``) is page ``p``; 1, or 0 if none.

    Atomics: the pages-used ``add``, one ``cas`` on the head, one ``and`` per
    tail page, after one release fence (the run's accesses before any of
    them: ``fence.acq_rel``, one for every page).
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
    _untail(meta, p + 1, p + k)
    return 1
