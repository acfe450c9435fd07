"""Slabs: blocks of up to half a page (MAX_SMALL in 16 KiB pages) of one size class.

A slab's state word holds *live* (blocks out plus reserved slots) and
*cursor* (blocks handed out by bumping since the page became a slab); its
bitmap marks the bumped blocks that were freed. The pipeline of a group's
allocation: the leader ``_find``s a page (its hint, then the page index:
:mod:`.index`), ``_reserve``s blocks there with one ``cas`` (and takes freed
bits with one ``and``), and broadcasts the grant; lanes take their block by
rank (``_alloc_small``). The index is a hint, the state ``cas`` decides.
Callers: :mod:`devalloc.device.core` (and the interleaving explorer, which
runs these functions' ``py_func``). Invariants, ordering and progress
arguments: docs/correctness.md.

Longer than 500 lines because every function that touches a slab's state
word and bitmap is here, so that the ``cas``, ``and`` and ``or`` racing on
those words name each other as rivals in one file (as
docs/correctness.md's arguments read them); the page index (:mod:`.index`)
and whole pages (:mod:`.pages`) are already apart.
"""

import numpy as np
from numba import cuda, int32, int64, uint32, uint64

from .. import layout as L
from . import warp
from ._meta import (_acquire_and, _acquire_cas, _at, _fold, _load, _note_fold, _opaque,
                    _lo32, _pages_changed, _pcount, _popc32, _pshift, _release_add,
                    _release_exch, _release_or, _store, _tie, _warp_number)
from .index import _index_clear, _index_find, _index_set, _words_above
from .pages import _repair

#: Lost ``cas`` on one slab's state word before ``_reserve`` passes it over
#: (BUSY): the search moves on to the next candidate (and repeats its pass
#: at the end), and a hinted slab's class widens its spread. Not a budget
#: that ends in NULL (docs/correctness.md, "Progress"). 2, not 4 (issue 49):
#: in the contention model (W = 128 leaders, warm) a leader that gives up
#: after two losses takes its scattered search elsewhere, and ``cas``
#: attempts per success fall from 2.2 to 1.7 at 16 B and from 2.2 to 1.4 at
#: 4 KiB warp-based, with no more rounds per block.
SLAB_TRIES = 2
#: ``_reserve`` results that are not grants (every grant is >= 1 << 38):
#: the page cannot serve the class (NO); it could but every ``cas`` lost
#: (BUSY: a race, another thread progressed); a slab with free slots whose
#: freed bits none are seen (TRANSIT: a reservation being given back by a
#: racing thread, or a freer's ``or`` not yet visible: in transit).
NO = 0
BUSY = 1
TRANSIT = 2

#: Per size class, read from constant memory instead of computed (a
#: division, a dozen instructions): the block size, the blocks in a slab of
#: the largest page (a page of 2**ps bytes holds that >> (PAGE_SHIFT - ps):
#: floor(floor(x / a) / b) = floor(x / (a b))), and ceil(2**32 / size), with
#: which ``free`` divides an offset in a page by the block size exactly (a
#: multiply-shift; tests/test_layout.py).
CLASS_SIZES = np.array([L.class_size(c) for c in range(L.NCLASSES)], np.uint32)
CLASS_BLOCKS = np.array([L.class_blocks(c) for c in range(L.NCLASSES)], np.uint32)
CLASS_RECIPS = np.array([-(-(1 << 32) // L.class_size(c)) for c in range(L.NCLASSES)], np.uint32)
#: The size class of n bytes (1 <= n <= MAX_SMALL) depends on (n - 1) >> 4
#: only: looked up too (no floor_log2 chain; tests/test_layout.py).
CLASS_OF = np.array([L.size_class((i << L.ALIGN_SHIFT) + 1)
                     for i in range(L.MAX_SMALL >> L.ALIGN_SHIFT)], np.uint8)


@cuda.jit(device=True)
def _size_class(n):
    # size_class(n) for 1 <= n <= MAX_SMALL, looked up.
    return uint32(CLASS_OF[_lo32(n - 1) >> L.ALIGN_SHIFT])


@cuda.jit(device=True)
def _size(c):
    # class_size(c), looked up (32 bits).
    return uint32(CLASS_SIZES[c])


@cuda.jit(device=True)
def _blocks(meta, c):
    # class_blocks(c, ps) of the heap whose metadata is meta, looked up (32 bits).
    return uint32(uint32(CLASS_BLOCKS[c]) >> uint32(L.PAGE_SHIFT - _pshift(meta)))


@cuda.jit(device=True)
def _bitmap_word(meta, npages, p, w):
    # layout.bitmap_word for the heap whose metadata is meta.
    return L.bitmap_word(npages, p, w, _pshift(meta))


@cuda.jit(device=True)
def _scatter(spread, n):
    # Map a warp number to [0, n) without a division (Fibonacci hashing), so
    # that consecutive warps land far apart. 32-bit: the hash wraps, the
    # scaling is the high half of h * n.
    h = uint32(uint64(spread) * uint64(0x9E3779B1))
    return uint32((uint64(h) * uint64(n)) >> 32)


@cuda.jit(device=True)
def _start_word(npages, anchor):
    """Return the level-0 index word at which the warp's index passes start.

    The warp number scattered over the index's words (:func:`_scatter`), so
    that leaders searching at once start far apart instead of all at word 0;
    0 for warp 0 and for any heap of up to 32 pages (one word). No memory
    access; ``anchor`` ties the warp number's read to the caller's loop.
    """
    return _scatter(_warp_number(anchor), _words_above(uint32(npages)))


@cuda.jit(device=True)
def _lowest(m, k):
    # The k lowest set bits of the 32-bit mask m (all of them if fewer).
    out = uint32(0)
    for _ in range(int32(k)):
        if m == 0:
            break
        low = uint32(m & uint32(~m + uint32(1)))
        out = uint32(out | low)
        m = uint32(m ^ low)
    return out


@cuda.jit(device=True)
def _pick(meta, npages, p, cap, want, anchor):
    """Guess up to ``want`` freed blocks of slab ``p`` (``cap`` blocks): (word, bits).

    Relaxed loads only, from a word the warp number picks on; (0, 0) if none
    is seen. ``anchor`` (the state word being tried) ties the start word and
    the bitmap's address to this path: without it the compiler hoists the
    warp number's hash onto every allocation's path, and the address out of
    ``_reserve``'s cas loop, live across it (registers).
    """
    # Hidden from the optimiser: a constant size would make the trip count
    # constant, and the unrolled loop's addresses would stay live (_opaque).
    nw = _opaque(uint32(uint32(cap + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT))  # cap < 2**16: no carry
    w = _scatter(_warp_number(anchor), nw)
    p = _tie(p, anchor)
    for _ in range(int32(nw)):
        # Bits at or past cap are not masked off here but in _settle, where
        # fewer values are live (the mask's two temporaries were the peak of
        # the out-of-line alloc: registers).
        free = _lo32(_load(meta, _at(_bitmap_word(meta, npages, p, w))))  # guess (32 bits used)
        if free != 0:
            return w, _lowest(free, want)
        w = uint32(w + uint32(1))
        if w == nw:
            w = uint32(0)
    return uint32(0), uint32(0)


@cuda.jit(device=True)
def _reserve(meta, npages, p, c, want, prof):
    """Win up to ``want`` blocks of class ``c`` on page ``p``; return a grant.

    A free page becomes a slab of class ``c``. Blocks come from the slab's
    cursor while it has unbumped blocks (one ``cas`` on the state word raises
    live, cursor and count together: that ``cas`` is the whole allocation),
    else from its freed blocks: one ``cas`` reserves as many slots as the
    bits picked from one bitmap word (the caller's ``and`` takes the bits,
    :func:`_settle`).

    A free page is claimed by the ``cas`` (two threads taking one page meet
    there: the loser finds the slab and takes blocks of it); the caller then
    updates the page index (:func:`_took_page`).

    Returns a grant (:func:`layout.bump_grant`, with GRANT_TOOK when the
    page was free; ``reuse_grant`` of the picked bits, whose slots are
    reserved but whose bits the caller still has to take: :func:`_settle`),
    ``NO`` when the page cannot serve the class, ``BUSY`` when it could but
    every try lost a race, ``TRANSIT`` when its free slots' bits are not
    seen (in transit). Atomics: ``cas`` per try (<= SLAB_TRIES);
    when a page is taken, the pages-used ``add`` and peak ``max``. Counts
    and block indices are 32-bit.
    """
    idx = L.state_word(p)
    tag = uint32(L.slab_tag(c))
    cap = _blocks(meta, c)
    s = _load(meta, _at(idx))  # guess, validated by the cas
    tries = _opaque(int32(SLAB_TRIES))  # hidden: a constant trip count unrolls the loop
    while True:
        t = uint32(_lo32(s) & L.TAG_MASK)
        # The grant's two halves below its page, built before the cas so
        # that only they (not first, w, pick and got) live across it.
        glo = uint32(0)
        ghi = uint32(0)
        if t == L.TAG_FREE:
            # (_tie: computed here, not hoisted out of the loop and kept.)
            got = min(_tie(want, s), cap)
            new = L.state_keep_count(s) + int64(got) * L.SLAB_BUMP_ONE + int64(tag)
            glo = uint32(got << L.GRANT_COUNT_SHIFT)
            ghi = uint32(L.GRANT_TOOK >> 32)
        elif t == tag:
            first = uint32(_lo32(s >> L.CURSOR_SHIFT) & L.CURSOR_MASK)
            if first < cap:
                got = min(want, uint32(cap - first))
                new = s + int64(got) * L.SLAB_BUMP_ONE
                glo = uint32((got << L.GRANT_COUNT_SHIFT) | first)
            else:
                live = uint32(_lo32(s >> L.N_SHIFT) & L.LIVE_MASK)
                if live >= cap:
                    return NO
                w, pick = _pick(meta, npages, p, cap, min(want, uint32(cap - live)), s)
                if pick == 0:
                    return TRANSIT  # slots free, bits not seen: in transit
                got = uint32(_popc32(pick))
                new = s + int64(got) * L.SLAB_REUSE_ONE
                glo = pick
                ghi = uint32(uint32(L.GRANT_REUSE >> 32) | w)
        else:
            return NO
        new, folded = _fold(new)
        # State word: cas, races with every allocator and freer of page p.
        # Acquire: a block bumped here is ours after every access of its
        # previous owner (whose release reached this word through the chain
        # of atomics on it).
        old = _acquire_cas(meta, _at(idx), s, new)
        if old == s:
            if t == L.TAG_FREE or folded:  # rare: one branch on the common path
                _note_fold(meta, folded)
                if t == L.TAG_FREE:
                    _pages_changed(meta, 1)
                    _pcount(prof, L.P_SLABS_TAKEN, 1)
                    # The page index is updated by the caller (_took_page),
                    # where fewer values are live: registers.
            # A bump grant (GRANT_TOOK when the page was free), or the slots
            # reserved for the picked bits (the caller takes them: _settle,
            # out of the search, where fewer values are live).
            return ((int64(p) + 1) << L.GRANT_PAGE_SHIFT) | (int64(ghi) << 32) | int64(glo)
        s = old
        _pcount(prof, L.P_CAS_RETRIES, 1)
        tries = int32(tries - 1)
        if tries == 0:
            return BUSY


@cuda.jit(device=True)
def _took_page(meta, npages, c, g):
    """Update the page index for grant ``g``, whose ``cas`` took a free page.

    Who calls: :func:`_find`, on a grant with GRANT_TOOK, before returning
    it. A slot being left, the class's room index marks the page;
    then it leaves the free-page index (marking first: a search that no
    longer finds the page free finds its mark). Atomics: the room mark's
    ``or`` (and counts), the free-page index's ``and`` (and counts).
    """
    p = int64(_lo32(g >> L.GRANT_PAGE_SHIFT) - uint32(1))
    if _grant_got(g) < _blocks(meta, c):
        _room_set(meta, npages, c, p)
    _index_clear(meta, L.free_tree(npages, _pshift(meta)), npages, p >> L.WORD_SHIFT,
                 int64(1) << (p & (L.BITS_PER_WORD - 1)))


@cuda.jit(device=True)
def _take_bits(meta, widx, pick):
    """Clear the bits ``pick`` of bitmap word ``widx``; return those that were set.

    Only a thread holding as many reserved slots of the slab may call. One
    ``and``: it races with other reusers and with freers, and its old value
    says which of the picked (freed) blocks are now ours. Acquire: the
    blocks' previous owners' accesses come before ours (their release ``or``).
    """
    return _acquire_and(meta, _at(widx), ~pick & L.WORD_MASK) & pick


@cuda.jit(device=True)
def _release_slots(meta, npages, p, k, undo, c, prof):
    """Give back ``k`` slots of the slab on page ``p``; retire it when empty.

    ``undo`` counts the slots as reservations that were never used (not
    frees); ``c`` is the slab's class (its blocks pin it: it cannot change).
    Atomics: one ``add`` on the state word; when the slab became empty,
    :func:`_retire`; when it was full (and was not retired), the room mark
    (:func:`_room_set`).
    """
    idx = L.state_word(p)
    # State word: add never fails, so giving slots back never spins.
    # Release: our bitmap or/and before it are seen by whoever acquires the
    # word after it (the retirer clearing the bitmap, the page's next taker).
    old = _release_add(meta, _at(idx), -k * L.N_ONE)
    if undo:
        cuda.atomic.add(meta, L.H_ALLOC_UNDO, k)  # undone reservations: add
    live = uint32(_lo32(old >> L.N_SHIFT) & L.LIVE_MASK)  # before: >= k
    if live == uint32(k):  # now empty
        if _retire(meta, npages, p, old - k * L.N_ONE, prof):
            return
    if live >= _blocks(meta, c):
        _room_set(meta, npages, c, p)  # it was full: room appeared


@cuda.jit(device=True)
def _retire(meta, npages, p, s, prof):
    """Turn the empty slab ``p`` (state ``s``) back into a free page; 1, or 0.

    Unless someone reserved meanwhile (their release retires it later): one
    acquire ``cas`` to RETIRING, which no other thread changes (every
    freer's and reuser's bitmap access came before its release ``add`` on
    this word); relaxed stores clearing the bitmap words below the cursor
    (every block there was freed, so every bit there is set); one release
    ``exch`` to FREE (the cleared bitmap before the page is free); once
    FREE, it enters the free-page index (``or`` and counts). Its room mark
    stays, stale (docs/correctness.md, "Page index"). The pages-used ``add``
    before, and back if the ``cas`` fails.
    """
    idx = L.state_word(p)
    npages = _opaque(npages)  # what derives from it is computed here, not kept live
    _pages_changed(meta, -1)
    # State word: cas from exactly the empty slab we saw.
    if _acquire_cas(meta, _at(idx), s, L.state_keep_count(s) | L.TAG_RETIRING) != s:
        _pages_changed(meta, 1)
        _pcount(prof, L.P_CAS_RETRIES, 1)
        return 0
    _pcount(prof, L.P_SLABS_RETIRED, 1)
    for w in range(uint32(uint32(L.slab_cursor(s) + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT)):
        _store(meta, _at(_bitmap_word(meta, npages, p, w)), 0)  # bitmap: RETIRING, ours
    # State word: exch on a page only we may change.
    _release_exch(meta, _at(idx), L.state_keep_count(s))
    _index_set(meta, L.free_tree(npages, _pshift(meta)), npages, p >> L.WORD_SHIFT,
               int64(1) << (p & (L.BITS_PER_WORD - 1)))
    return 1


@cuda.jit(device=True)
def _room_set(meta, npages, c, p):
    """Mark page ``p`` in class ``c``'s room index (a slot may be free there).

    Nothing if the mark is there already (a relaxed load): a search that
    clears a mark looks at the page again afterwards (:func:`_room_drop`),
    so a mark seen here and cleared just after is put back if the room we
    made is still there. Else the index's ``or`` (and counts).
    """
    base = L.room_tree(npages, c, _pshift(meta))
    bit = int64(1) << (p & (L.BITS_PER_WORD - 1))
    if not _load(meta, _at(base + (p >> L.WORD_SHIFT))) & bit:  # guess
        _index_set(meta, base, npages, p >> L.WORD_SHIFT, bit)


@cuda.jit(device=True)
def _room_drop(meta, npages, c, p):
    """Take page ``p``, found unable to serve class ``c``, out of its room index.

    Clear, then look again: if room appeared meanwhile (a free whose mark
    came before our clear), mark it back, so that a slab with room is never
    left unmarked once every thread is done. Atomics: the clear's ``and``
    (and counts); the mark's when room reappeared.
    """
    if _index_clear(meta, L.room_tree(npages, c, _pshift(meta)), npages, p >> L.WORD_SHIFT,
                    int64(1) << (p & (L.BITS_PER_WORD - 1))):
        s = _load(meta, _at(L.state_word(p)))  # look again (a guess: at worst a stale mark)
        # 32-bit tags: a 64-bit ``1 + c`` was hoisted out of the search's
        # loop and kept as a register pair beside the 32-bit one (registers).
        if uint32(_lo32(s) & L.TAG_MASK) == uint32(c + 1) and L.slab_live(s) < _blocks(meta, c):
            # The index and bit computed again, not kept live across the
            # clear (registers): _opaque keeps NVVM from reusing them.
            q = _opaque(p)
            _index_set(meta, L.room_tree(_opaque(npages), c, _pshift(meta)), npages,
                       q >> L.WORD_SHIFT, int64(1) << (q & (L.BITS_PER_WORD - 1)))


@cuda.jit(device=True)
def _widen(meta, c, e, prof):
    """Widen class ``c``'s spread from ``e`` to ``e + 1``, unless at the heap's most.

    Called by a leader that passed its hinted slab over (BUSY). Atomics: one
    ``max`` on the spread word when below H_SPREAD_MAX (read relaxed: set at
    reset, never changed by a kernel).
    """
    if e < _lo32(_load(meta, _at(L.H_SPREAD_MAX))):
        # Spread word: max, races with other wideners; of those that saw e,
        # exactly one step wins, so a burst widens once, not once per loser.
        if cuda.atomic.max(meta, _at(L.spread_word(c)), int64(e + 1)) <= e:
            _pcount(prof, L.P_SPREAD_WIDENED, 1)


#: _find's index cursor: the whole index from its top word, or none left.
START = -1
DONE = -2
#: _search's flags.
_FREE = 0x100
_RECHECK = 0x200
_BUSY = 0x400
_LAST = 0x800  # the free pages gave nothing: the last look at the room index
_FLOOR = 0x1000  # the free pass goes on above the held page
_WRAP = 0x2000  # the pass has wrapped: from word 0 up to the start word
_TOP = 0x4000  # the pass's first look, from the top word
_HELD_WRAP_SHIFT = 18  # _WRAP << 18 is bit 31 of held (pages + 1 < 2**25)
_HELD_PAGE = 0x7FFFFFFF
_HINT_SHIFT = 16  # the hint's metadata index (< 2**16: HEADER_WORDS)


@cuda.jit(device=True)
def _find(meta, npages, c, want, prof):
    """Return a grant of up to ``want`` blocks of class ``c``, or 0.

    :func:`_seek` a page and reserve blocks there, then settle the grant
    (:func:`_took_page`, :func:`_settle`) once the search's state is dead:
    the page index updates and the bits' ``and`` cost no registers on top of
    the search. A reuse whose bits all went to another thread seeks again:
    each such loss is another reuser's win (progress), so the loop ends
    once the others stop winning (lock-free, no fixed budget).

    Who calls: a group's leader (``_alloc_small``). Atomics: those of
    :func:`_seek`, then the ones named in :func:`_took_page` or
    :func:`_settle`. Returns 0 only when :func:`_search` proved that no
    page could serve (docs/correctness.md, "Progress").
    """
    while True:
        # Hidden each time: what derives from npages is not hoisted out of
        # this loop and kept live across the search (registers).
        npages = _opaque(npages)
        c = _opaque(c)
        g = _seek(meta, npages, c, want, prof)
        if g == 0:
            return g
        if _lo32(g >> 32) & uint32(L.GRANT_REUSE >> 32):
            g = _settle(meta, npages, c, g, prof)
            if g != 0:
                return g
        else:
            if g & L.GRANT_TOOK:
                _took_page(meta, npages, c, g)
            return g


@cuda.jit(device=True)
def _settle(meta, npages, c, g, prof):
    """Take the bits of reuse grant ``g``, whose slots ``_reserve`` reserved.

    One ``and`` on the bitmap word (:func:`_take_bits`): the bits it got are
    ours; the slots of those it did not get (another reuser's) are given
    back as undone reservations (:func:`_release_slots`). Returns the grant
    of the bits won, or 0 if none.
    """
    hi = _lo32(g >> 32)
    p = int64(uint32(hi >> (L.GRANT_PAGE_SHIFT - 32)) - uint32(1))
    w = int64(hi & L.GRANT_WORD_MASK)
    pick = _lo32(g)
    mine = _lo32(_take_bits(meta, _bitmap_word(meta, npages, p, w), int64(pick)))
    # A bit at or past the slab's last block is no block: none is set but by
    # an invalid free racing with the page's reuse (docs/correctness.md,
    # "Known limits"), or read stale from the page's earlier slab (_pick's
    # guess). Taken off the word if set, never handed out; its slot back.
    left = uint32(_blocks(meta, c) - uint32(w << L.WORD_SHIFT))
    if left < L.BITS_PER_WORD:
        mine = uint32(mine & uint32((uint32(1) << left) - uint32(1)))
    if mine != pick:  # bits another reuser got (or past the last block): slots back
        _release_slots(meta, npages, p, int64(_popc32(pick ^ mine)), True, c, prof)
        if mine == 0:
            return int64(0)
    return (g & ~L.WORD_MASK) | int64(mine)  # the grant of the bits won


@cuda.jit(device=True)
def _seek(meta, npages, c, want, prof):
    """Return a reserved grant of up to ``want`` blocks of class ``c``, or 0.

    First the page the warp's hint slot names (slot: the warp number modulo
    the class's spread); passing it over after SLAB_TRIES lost ``cas``
    widens the class's spread (:func:`_widen`). Then :func:`_search`.

    Who calls: :func:`_find`. Atomics: those of the ``_reserve``s tried, the
    hint's ``exch`` when it moves, the repairs'. Returns 0 when nothing was
    reserved.
    """
    n = uint32(npages)
    # The spread word and slot 0's hint share a line: two independent loads.
    e = _lo32(_load(meta, _at(L.spread_word(c))))  # racy: any value is safe (masked)
    hint_idx = L.hint_word(c, 0)
    hv = _load(meta, _at(hint_idx))
    if e != 0:  # widened: the warp's own slot
        # (_tie: the warp number is computed here, not on the calm path.)
        hint_idx = L.hint_word(c, _warp_number(int64(e)) & ((uint32(1) << (e & 7)) - uint32(1)))
        hv = _load(meta, _at(hint_idx))
    # A hint of 0 (none) wraps to 2**32 - 1, so one compare range-checks it.
    h = _lo32(hv - 1)  # racy hint: any value is safe
    busy = False
    if h < n:
        g = _reserve(meta, npages, int64(h), c, want, prof)
        if g > TRANSIT:
            _pcount(prof, L.P_PAGES_SCANNED, 1)
            return g
        if g == BUSY:
            busy = True
            _widen(meta, c, e, prof)
    return _search(meta, npages, c, want, prof, uint32(hint_idx), h < n, busy)


@cuda.jit(device=True)
def _search(meta, npages, c, want, prof, hint_idx, tried, busy):
    """Return a grant of class ``c`` from the page index, or 0 (``_find``'s rest).

    Candidates, in order: the slabs of class ``c`` that may have room (the
    room index; one that cannot serve is taken out of it,
    :func:`_room_drop`); the free pages (the free-page index;
    a stale entry is repaired, :func:`pages._repair`, unless it is a slab
    of another class with room, :func:`_has_room`). Before each free page
    it tries, it reads the room index once more, *after* reading that page
    in the free-page index, and then tries the page it read (``held``, not
    read again); the pass then goes on after that page (``_FLOOR``). Each
    pass over an index starts at the warp's own word (:func:`_start_word`:
    leaders searching at once start far apart, not all at word 0), takes
    the lowest candidate first within a word, and wraps around from the
    last word to word 0 and on up to its start word (``_WRAP``), so a pass
    sees every word before any NULL. A slab
    another thread took meanwhile for the class is marked in the room index
    before its page leaves the free-page index, so a page read after the
    look could be a second slab for the class (two lone leaders each took
    a page: docs/correctness.md, "Where two takers meet"). When the free
    pages gave nothing, it reads the room index a last time (a slab taken
    between that look and our read of the free-page index is marked by
    then: without it such a search returned
    NULL beside the new slab). An empty index answers with one load (its
    top word), so a heap with no page that can serve says so at once. A
    pass that lost a race (BUSY; ``busy``: the hint's page did, ``tried``:
    it was tried) is followed by another, for as long as passes lose races
    (each lost ``cas`` is another thread's progress); 0 only after a pass
    in which every candidate was seen unable to serve (NO) or in transit,
    counted as ``want`` ``failed_full`` on a profiled heap. A grant moves
    the hint at ``hint_idx`` to its page (``exch``). One index lookup site
    and 32-bit state, the hint's index packed with the flags: registers.
    """
    n = uint32(npages)
    # One word of flags and the passes left (registers): _FREE set while on
    # the free-page index (else the room index), _RECHECK while the room
    # index is to be read before the next free page, _BUSY when a race was
    # lost this pass, _LAST during the last look, _FLOOR when the free pass
    # goes on above page p, _WRAP once the pass has wrapped to word 0.
    st = uint32(_RECHECK | (_BUSY if busy else 0) | (hint_idx << _HINT_SHIFT))
    w = int32(START)  # the index word to look at next
    bits = uint32(0)  # candidates left in the word before it
    seen = uint32(1) if tried else uint32(0)  # pages tried (profiled heaps only)
    held = uint32(0)  # the free page (+ 1) to try after the room index's recheck
    p = uint32(0)  # the page tried last
    while True:
        # Hidden each time: what derives from npages is not hoisted out of
        # the loop and kept live across it (registers).
        npages = _opaque(npages)
        if bits == 0 and w != DONE:
            ps = _pshift(meta)
            base = L.free_tree(npages, ps) if st & _FREE else L.room_tree(npages, c, ps)
            # The warp's own start word (recomputed, not kept live: registers).
            s0 = int32(_start_word(npages, int64(st)))
            # A pass's first look is at the whole tree from its top word
            # (_TOP), so that an empty index answers with one load; the
            # wrapped part of a pass starts from the top too.
            if w == START and not st & _WRAP:
                st = uint32(st | _TOP)
            v, x = _index_find(meta, base, npages, w, True)
            if st & _WRAP:
                if v >= s0:  # back at the start word: the pass is whole
                    v = int32(-1)
            elif st & _TOP:
                st = uint32(st ^ _TOP)
                if v >= 0 and v < s0:
                    # The first candidate is below the start word: first the
                    # words from the start word up (leaders spread out).
                    w = s0
                    continue
            elif v < 0 and s0 != 0:
                # Nothing from the start word up: the words below it, from
                # the top, so that a pass sees every word before any NULL.
                st = uint32((st | _WRAP) & (0xFFFFFFFF ^ _FLOOR))
                w = int32(START)
                continue
            w = int32(v) if v >= 0 else int32(DONE)
            bits = uint32(x) if v >= 0 else uint32(0)  # (a pass back at its start: none)
            if st & _FLOOR:  # after the held page p: only the pages above it
                st = uint32(st ^ _FLOOR)
                if w == int32(p >> L.WORD_SHIFT):
                    bits = uint32(bits & uint32(uint32(0xFFFFFFFE) << (p & uint32(31))))
                    if bits == 0:
                        w = int32(w + 1)
                        continue
        if bits == 0:  # this index has no more candidates
            if st & _FREE:  # the free pages end
                if st & _BUSY:  # a race lost: the pass again
                    st = uint32((st & (0xFFFFFFFF ^ _BUSY)) | _RECHECK)
                else:
                    # None: the room index a last time. A slab another
                    # leader took for the class after our last look there is
                    # marked before its page left the free-page index.
                    st = uint32(st | _LAST)
            elif st & _LAST:  # the last look at the room index ends
                if not st & _BUSY:  # no race lost: every candidate was NO
                    _pcount(prof, L.P_PAGES_SCANNED, int64(seen))
                    _pcount(prof, L.P_FAILED_FULL, int64(want))  # the lanes left NULL
                    return 0
                st = uint32((st & (0xFFFFFFFF ^ (_BUSY | _LAST))) | _RECHECK)
            st = uint32((st ^ _FREE) & (0xFFFFFFFF ^ _WRAP))  # a new pass: from its start word
            w = int32(START)
            if held == 0:
                continue
            # Back from the recheck: the free page read before it first. A
            # page read after it could be a second page for the class: a
            # leader that took the first between the two looks marked it in
            # the room index before it left the free-page index.
            p = uint32(uint32(held & _HELD_PAGE) - uint32(1))
            # The free pass then goes on above p (kept until then), not
            # from its start: p may stay in the free-page index (a slab
            # with room, for its taker to take out), and meeting it again
            # would hold it again.
            w = int32(p >> L.WORD_SHIFT)
            st = uint32((st & (0xFFFFFFFF ^ _WRAP)) | _FLOOR | (uint32(held >> _HELD_WRAP_SHIFT) & _WRAP))
            held = uint32(0)
        else:
            low = uint32(bits & uint32(~bits + uint32(1)))
            p = uint32((w << L.WORD_SHIFT) + cuda.ffs(low) - 1)
            if st & _FREE and st & _RECHECK:
                # About to take free page p: the room index once more
                # first, then p (held, not read again).
                # (and whether p was met after the pass wrapped, in bit 31:
                # the pass resumes after p in the same part)
                held = uint32(uint32(p + uint32(1)) | (uint32(st & _WRAP) << _HELD_WRAP_SHIFT))
                st = uint32(st ^ (_FREE | _RECHECK | (st & _WRAP)))  # both set here; a new pass
                w = int32(START)
                bits = uint32(0)
                continue
            bits = uint32(bits ^ low)
            if bits == 0:
                w = int32(w + 1)
        if p < n:
            g = _reserve(meta, npages, int64(p), c, want, prof)
            seen = uint32(seen + 1)
            if g > TRANSIT:
                # Hint: racy, harmless (any value is range-checked).
                cuda.atomic.exch(meta, _at(st >> _HINT_SHIFT), int64(p) + 1)
                _pcount(prof, L.P_HINT_MOVES, 1)
                _pcount(prof, L.P_PAGES_SCANNED, int64(seen))
                return g
            if g == BUSY:
                st = uint32(st | _BUSY)
            elif g == TRANSIT:
                pass  # room in transit: no race lost, the mark stays
            elif st & _FREE:
                if not _has_room(meta, p):  # a slab with room: its taker clears it
                    _repair(meta, npages, int64(p))  # a stale entry
            else:
                _room_drop(meta, npages, c, int64(p))  # a stale mark
            if st & _FREE:  # the next free page after a look again, too
                st = uint32(st | _RECHECK)


@cuda.jit(device=True)
def _has_room(meta, p):
    """Return True if page ``p`` looks like a slab with room (a relaxed load: a guess).

    Who calls: :func:`_search`, on a free-page candidate that could not
    serve (NO): such a page stays in the free-page index, unrepaired. Its
    taker may not have marked it in its class's room index yet, and takes
    it out of the free-page index itself after marking it; a repair before
    that mark would hide the slab from a search of its class that reads the
    free-page index after the repair and the room index before the mark
    (docs/correctness.md, "Where two takers meet"). One load.
    """
    s = _load(meta, _at(L.state_word(p)))
    t = uint32(_lo32(s) & L.TAG_MASK)
    if t == L.TAG_FREE or t > uint32(L.NCLASSES):
        return False
    return uint32(_lo32(s >> L.N_SHIFT) & L.LIVE_MASK) < _blocks(meta, uint32(t - uint32(1)))


@cuda.jit(device=True)
def _grant_got(g):
    # Blocks in grant g (layout.grant_count on the grant's two 32-bit halves).
    lo = _lo32(g)
    if _lo32(g >> 32) & uint32(L.GRANT_REUSE >> 32):
        return uint32(_popc32(lo))
    return uint32(lo >> L.GRANT_COUNT_SHIFT)


@cuda.jit(device=True)
def _grant_offset(g, k, c, ps):
    # The offset of the k-th block of grant g of class c in pages of 2**ps
    # bytes (layout.grant_page, grant_block, in 32 bits but for the page's
    # offset).
    lo = _lo32(g)
    hi = _lo32(g >> 32)
    page = uint32(uint32(hi >> (L.GRANT_PAGE_SHIFT - 32)) - uint32(1))
    if hi & uint32(L.GRANT_REUSE >> 32):
        for _ in range(int32(k)):
            lo = uint32(lo & uint32(lo - uint32(1)))
        b = uint32(((hi & L.GRANT_WORD_MASK) << L.WORD_SHIFT) + uint32(cuda.ffs(lo) - 1))
    else:
        b = uint32((lo & L.GRANT_FIRST_MASK) + k)
    return (int64(page) << ps) + int64(uint32(b * _size(c)))


@cuda.jit(device=True)
def _alloc_small(meta, npages, c, mask, leader, rank, lanes, prof):
    """Serve one block of class ``c`` to each lane of a group; offset or NULL.

    Every lane of the group (``warp.group`` of the same class) calls. The
    leader wins blocks for the lanes not served yet and broadcasts each
    grant; the lanes take theirs by rank. Each round serves at least one
    lane or ends with NULL for the rest, so there are at most ``lanes``
    rounds, the same number for every lane of the group. Counts are 32-bit.
    """
    c = _lo32(c)
    n = uint32(lanes)
    if n == 1:
        # A lane alone (the usual case in divergent code): one round, nothing
        # to share, no sync. Its own copy of the search: in the loop below,
        # the rounds' bookkeeping costs a lone lane some 25 instructions.
        g = _find(meta, npages, c, n, prof)
        if g == 0:
            return int64(L.NULL)
        return _grant_offset(g, uint32(0), c, _pshift(meta))
    off = int64(L.NULL)
    me = uint32(rank)
    # Two counts live across the search, not three (registers): the lanes
    # not served yet (the ranks n - left .. n - 1), and d = rank - n
    # (modulo 2**32: _lo32), with which d + left is this lane's index in the
    # round's grant, or a huge number once it is served.
    left = n
    d = _lo32(int64(me) - int64(n))
    while True:
        g = int64(0)
        if me == 0:
            g = _find(meta, npages, c, left, prof)
        g = warp.share(mask, leader, g)
        if g == 0:
            break
        got = _grant_got(g)
        k = _lo32(int64(d) + int64(left))
        if k < got:
            off = _grant_offset(g, k, c, _pshift(meta))
        if got >= left:
            break
        left = uint32(left - got)
    warp.sync(mask)  # the leader's acquiring claim before each lane's accesses
    return off


@cuda.jit(device=True)
def _free_small(meta, npages, p, s, rel, prof):
    """Free the block at ``rel`` in slab ``p`` (state guess ``s``); 1, or 0 if invalid.

    Every lane that frees calls (``free`` groups lanes by bitmap word): the
    leader sets the group's bits with one ``or`` and gives their slots back
    with one ``add``; each lane learns from the old bits whether its block
    was live. Atomics per group: one ``or``, one ``add`` (and the retire).
    """
    c = uint32((_lo32(s) & L.TAG_MASK) - 1)  # slab_class(state_tag(s))
    r = _lo32(rel)  # 0 <= rel < page: 32 bits suffice
    # r // size, exactly, as a multiply-shift (no division; tests/test_layout.py).
    b = uint32((uint64(r) * uint64(CLASS_RECIPS[c])) >> 32)
    widx = int64(warp.solo_key())
    bit = uint32(0)
    if r == uint32(b * _size(c)) and b < uint32(_lo32(s >> L.CURSOR_SHIFT) & L.CURSOR_MASK):
        widx = _bitmap_word(meta, npages, p, int64(b >> L.WORD_SHIFT))
        bit = uint32(uint32(1) << (b & (L.BITS_PER_WORD - 1)))
    mask, leader, rank, lanes = warp.group(widx)
    if bit == 0:
        return 0
    bits = bit
    dup = False
    if lanes > 1:
        bits, dup = warp.merge_bits(mask, bit)
        warp.sync(mask)  # each lane's accesses before the leader's release or
    old = int64(0)
    if rank == 0:
        # Bitmap word: or (set = freed), races with other freers and with
        # reusers' and. Bits already set were not live: invalid frees.
        # Release: the group's accesses to its blocks (each lane's, before
        # the sync) come before the reuser's acquire and that takes them.
        old = _release_or(meta, _at(widx), int64(bits))
        freed = int64(_popc32(bits & ~_lo32(old)))
        if freed:
            _release_slots(meta, npages, p, freed, False, c, prof)
    if lanes > 1:
        old = warp.share(mask, leader, old)
    if old & bit or dup:
        return 0
    return 1
