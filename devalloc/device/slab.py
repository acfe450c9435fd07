"""Slabs: blocks of up to MAX_SMALL bytes in 16 KiB pages of one size class.

A slab's state word holds *live* (blocks out plus reserved slots) and
*cursor* (blocks handed out by bumping since the page became a slab); its
bitmap marks the bumped blocks that were freed. The pipeline of a group's
allocation: the leader ``_find``s a page (hint, then scan), ``_reserve``s
blocks there with one ``cas`` (and takes freed bits with one ``and``), and
broadcasts the grant; lanes take their block by rank (``_alloc_small``).
``_find`` looks for pages in the page index (:mod:`.index`): the class's
room index (slabs that may have a free slot), then the free-page index;
either is a hint, and a page's state ``cas`` decides. Callers: :mod:`devalloc.device.core` (and the interleaving explorer, which
runs these functions' ``py_func``). Invariants, ordering and progress
arguments: docs/correctness.md.
"""

from numba import cuda, int32, int64, uint32

from .. import layout as L
from . import warp
from ._meta import RETRIES, _at, _fold, _note_fold, _pages_changed, _popc32, _warp_number
from .index import _index_clear, _index_find, _index_set
from .pages import _repair

#: Passes over the page index, repeated only while races were lost.
SMALL_PASSES = 4
#: ``_reserve`` results that are not grants (every grant is >= 1 << 38).
NO = 0
BUSY = 1


@cuda.jit(device=True)
def _blocks(c):
    # class_blocks(c) with a 32-bit division (a 64-bit one costs registers).
    return int64(uint32(L.PAGE) // uint32(L.class_size(c)))


@cuda.jit(device=True)
def _scatter(spread, n):
    # Map a warp number to [0, n) without a division (Fibonacci hashing), so
    # that consecutive warps land far apart.
    h = (spread * 0x9E3779B1) & 0xFFFFFFFF
    return (h * n) >> 32


@cuda.jit(device=True)
def _pick(meta, npages, p, cap, want):
    """Guess up to ``want`` freed blocks of slab ``p`` (``cap`` blocks): (word, bits).

    Plain loads only, from a word the warp number picks on; (0, 0) if none
    is seen.
    """
    nw = (cap + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT
    w = _scatter(_warp_number(), nw)
    for _ in range(nw):
        free = meta[_at(L.bitmap_word(npages, p, w))]  # guess
        left = cap - w * L.BITS_PER_WORD
        if left < L.BITS_PER_WORD:
            free &= (int64(1) << left) - 1
        if free != 0:
            return w, L.lowest_bits(free & L.WORD_MASK, want)
        w += 1
        if w == nw:
            w = 0
    return 0, 0


@cuda.jit(device=True)
def _reserve(meta, npages, p, c, want):
    """Win up to ``want`` blocks of class ``c`` on page ``p``; return a grant.

    Blocks come from the slab's
    cursor while it has unbumped blocks (one ``cas`` on the state word raises
    live, cursor and count together: that ``cas`` is the whole allocation),
    else from its freed blocks: one ``cas`` reserves as many slots as the
    bits picked from one bitmap word, then one ``and`` takes those bits (the
    bits it did not get are given back as undone reservations).

    A free page becomes a slab of class ``c``: the ``cas`` claims it (two
    threads taking one page meet there: the loser finds the slab and takes
    blocks of it), then, a slot being left, the class's room index marks
    it, and it leaves the free-page index. Marking before leaving means that
    a search that no longer finds the page free finds its mark
    (docs/correctness.md, "Page index").

    Returns a grant (:func:`layout.bump_grant`/``reuse_grant``), ``NO`` when
    the page cannot serve the class, or ``BUSY`` when it could but every try
    lost a race. Atomics: ``cas`` per try (<= RETRIES), then the ``and`` on
    the reuse path; when a page is taken, the room mark's ``or``, the
    free-page index's ``and``, the pages-used ``add`` and peak ``max``.
    """
    idx = L.state_word(p)
    tag = L.slab_tag(c)
    cap = _blocks(c)
    s = meta[_at(idx)]  # guess, validated by the cas
    for _ in range(RETRIES):
        t = L.state_tag(s)
        first = int64(0)
        w = int64(0)
        pick = int64(0)
        if t == L.TAG_FREE:
            got = min(want, cap)
            new = L.state_keep_count(s) + got * L.SLAB_BUMP_ONE + tag
        elif t == tag:
            first = L.slab_cursor(s)
            live = L.slab_live(s)
            if first < cap:
                got = min(want, cap - first)
                new = s + got * L.SLAB_BUMP_ONE
            elif live < cap:
                w, pick = _pick(meta, npages, p, cap, min(want, cap - live))
                if pick == 0:
                    return BUSY  # the freed blocks' bits are still being set
                got = L.popc32(pick)
                new = s + got * L.SLAB_REUSE_ONE
            else:
                return NO
        else:
            return NO
        new, folded = _fold(new)
        # State word: cas, races with every allocator and freer of page p.
        old = cuda.atomic.cas(meta, _at(idx), s, new)
        if old == s:
            _note_fold(meta, folded)
            if t == L.TAG_FREE:
                if got < cap:
                    _room_set(meta, npages, c, p)
                _index_clear(meta, L.free_tree(npages), npages, p >> L.WORD_SHIFT,
                             int64(1) << (p & (L.BITS_PER_WORD - 1)))
                _pages_changed(meta, 1)
            if pick == 0:
                return L.bump_grant(p, first, got)
            mine = _take_bits(meta, L.bitmap_word(npages, p, w), pick)
            lost = got - L.popc32(mine)
            if lost:
                _release_slots(meta, npages, p, lost, True)
            if mine == 0:
                return BUSY
            return L.reuse_grant(p, w, mine)
        s = old
    return BUSY


@cuda.jit(device=True)
def _take_bits(meta, widx, pick):
    """Clear the bits ``pick`` of bitmap word ``widx``; return those that were set.

    Only a thread holding as many reserved slots of the slab may call. One
    ``and``: it races with other reusers and with freers, and its old value
    says which of the picked (freed) blocks are now ours.
    """
    return cuda.atomic.and_(meta, _at(widx), ~pick & L.WORD_MASK) & pick


@cuda.jit(device=True)
def _release_slots(meta, npages, p, k, undo):
    """Give back ``k`` slots of the slab on page ``p``; retire it when empty.

    ``undo`` counts the slots as reservations that were never used (not
    frees). Atomics: one ``add`` on the state word; when the slab became
    empty, :func:`_retire`; when it was full (and was not retired), the room
    mark (:func:`_room_set`).
    """
    idx = L.state_word(p)
    # State word: add never fails, so giving slots back never spins.
    old = cuda.atomic.add(meta, _at(idx), -k * L.N_ONE)
    if undo:
        cuda.atomic.add(meta, L.H_ALLOC_UNDO, k)  # undone reservations: add
    new = old - k * L.N_ONE
    t = L.state_tag(old)
    if L.slab_live(new) == 0 and _retire(meta, npages, p, new):
        return
    if L.is_slab_tag(t) and (L.slab_live(old) + 1) * L.class_size(L.slab_class(t)) > L.PAGE:
        # It was full and is not retired: room appeared.
        _room_set(meta, npages, L.slab_class(t), p)


@cuda.jit(device=True)
def _retire(meta, npages, p, s):
    """Turn the empty slab ``p`` (state ``s``) back into a free page; 1, or 0.

    Unless someone reserved meanwhile (their release retires it later): one
    ``cas`` to RETIRING, which no other thread changes; the page out of its
    class's room index; plain stores clearing the bitmap words below the
    cursor (every block there was freed, so every bit there is set); a
    fence; one ``exch`` to FREE; then the page back in the free-page index. The pages-used ``add`` before, and back if the ``cas`` fails.
    """
    idx = L.state_word(p)
    _pages_changed(meta, -1)
    # State word: cas from exactly the empty slab we saw.
    if cuda.atomic.cas(meta, _at(idx), s, L.state_keep_count(s) | L.TAG_RETIRING) != s:
        _pages_changed(meta, 1)
        return 0
    c = L.slab_class(L.state_tag(s))
    _index_clear(meta, L.room_tree(npages, c), npages, p >> L.WORD_SHIFT,
                 int64(1) << (p & (L.BITS_PER_WORD - 1)))
    for w in range((L.slab_cursor(s) + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT):
        meta[_at(L.bitmap_word(npages, p, w))] = 0
    cuda.threadfence()  # release: the cleared bitmap before the page is free
    # State word: exch on a page only we may change.
    cuda.atomic.exch(meta, _at(idx), L.state_keep_count(s))
    _index_set(meta, L.free_tree(npages), npages, p >> L.WORD_SHIFT,
               int64(1) << (p & (L.BITS_PER_WORD - 1)))
    return 1


@cuda.jit(device=True)
def _room_set(meta, npages, c, p):
    """Mark page ``p`` in class ``c``'s room index (a slot may be free there).

    Nothing if the mark is there already (a plain load): a search that
    clears a mark looks at the page again afterwards (:func:`_room_drop`),
    so a mark seen here and cleared just after is put back if the room we
    made is still there. Else the index's ``or`` (and counts).
    """
    base = L.room_tree(npages, c)
    bit = int64(1) << (p & (L.BITS_PER_WORD - 1))
    if not meta[_at(base + (p >> L.WORD_SHIFT))] & bit:  # guess
        _index_set(meta, base, npages, p >> L.WORD_SHIFT, bit)


@cuda.jit(device=True)
def _room_drop(meta, npages, c, p):
    """Take page ``p``, found unable to serve class ``c``, out of its room index.

    Clear, then look again: if room appeared meanwhile (a free whose mark
    came before our clear), mark it back, so that a slab with room is never
    left unmarked once every thread is done. Atomics: the clear's ``and``
    (and counts); the mark's when room reappeared.
    """
    base = L.room_tree(npages, c)
    if _index_clear(meta, base, npages, p >> L.WORD_SHIFT,
                    int64(1) << (p & (L.BITS_PER_WORD - 1))):
        s = meta[_at(L.state_word(p))]  # look again (a guess: at worst a stale mark)
        if L.state_tag(s) == L.slab_tag(c) and L.slab_live(s) < _blocks(c):
            _index_set(meta, base, npages, p >> L.WORD_SHIFT,
                       int64(1) << (p & (L.BITS_PER_WORD - 1)))


#: _find's index cursor: the whole index from its top word, or none left.
START = -1
DONE = -2


@cuda.jit(device=True)
def _find(meta, npages, c, want):
    """Return a grant of up to ``want`` blocks of class ``c``, or 0.

    Candidates, in order: the page the warp's hint slot names; the slabs of
    class ``c`` that may have room (the room index; one that cannot serve is
    taken out of it, :func:`_room_drop`); the free pages (the free-page
    index, lowest first; a stale entry is repaired, :func:`pages._repair`).
    An empty index answers with one load (its top word), so a heap with no
    page that can serve says so at once. A pass
    over the indexes that lost a race somewhere (BUSY) is followed by
    another, up to SMALL_PASSES. A grant from an index moves the hint there
    (``exch``).

    Each callee has one call site (everything is inlined), and the loop's
    state is 32-bit where it can be: registers.
    """
    slot = _scatter(_warp_number(), L.hint_slots(npages))
    hint_idx = L.hint_word(c, slot)
    # A hint of 0 (none) wraps to 2**32 - 1, so one compare range-checks it.
    h = uint32((meta[_at(hint_idx)] - 1) & 0xFFFFFFFF)  # racy hint: any value is safe
    p = h
    phase = uint32(0)  # 0: the hint; 1: the room index; 2: the free-page index
    passes = uint32(SMALL_PASSES)
    busy = False
    w = int32(DONE)  # the index word to look at next
    bits = uint32(0)  # candidates left in the word before it
    recheck = True
    while True:
        if phase > 0:
            if bits == 0 and w != DONE:
                base = L.room_tree(npages, c) if phase == 1 else L.free_tree(npages)
                v, x = _index_find(meta, base, npages, w, True)
                w = int32(v) if v >= 0 else int32(DONE)
                bits = uint32(x)
            if bits == 0:  # this index has no more candidates
                phase = uint32(phase + 1)
                if phase == 3:
                    passes = uint32(passes - 1)
                    if not busy or passes == 0:
                        return 0
                    busy = False
                    phase = uint32(1)
                    recheck = True
                w = int32(START)
                continue
            low = bits & uint32(-int64(bits))
            bits = uint32(bits ^ low)
            p = uint32((w << L.WORD_SHIFT) + L.floor_log2(low))
            if bits == 0:
                w = int32(w + 1)
            if phase == 2 and recheck:
                # The pass's first free page: did a slab with room appear
                # since the room index was read? (A taker marks it before
                # its page leaves the free-page index, read just now.)
                recheck = False
                if _index_find(meta, L.room_tree(npages, c), npages, START, True)[0] >= 0:
                    phase = uint32(1)
                    w = int32(START)
                    bits = uint32(0)
                    continue
        if p < uint32(npages):
            g = _reserve(meta, npages, int64(p), c, want)
            if g > BUSY:
                if p != h:
                    cuda.atomic.exch(meta, _at(hint_idx), int64(p) + 1)  # hint: racy, harmless
                return g
            if g == BUSY:
                busy = True
            elif phase == 1:
                _room_drop(meta, npages, c, int64(p))  # a stale mark
            elif phase == 2:
                _repair(meta, npages, int64(p))  # a stale entry
        if phase == 0:
            phase = uint32(1)
            w = int32(START)


@cuda.jit(device=True)
def _alloc_small(meta, npages, c, mask, leader, rank, lanes):
    """Serve one block of class ``c`` to each lane of a group; offset or NULL.

    Every lane of the group (``warp.group`` of the same class) calls. The
    leader wins blocks for the lanes not served yet and broadcasts each
    grant; the lanes take theirs by rank. Each round serves at least one
    lane or ends with NULL for the rest, so there are at most ``lanes``
    rounds, the same number for every lane of the group.
    """
    off = int64(L.NULL)
    served = int64(0)
    for _ in range(lanes):
        g = int64(0)
        if rank == 0:
            g = _find(meta, npages, c, lanes - served)
        g = warp.share(mask, leader, g)
        if g == 0:
            break
        got = L.grant_count(g)
        k = rank - served
        if k >= 0 and k < got:
            off = (L.grant_page(g) << L.PAGE_SHIFT) + L.grant_block(g, k) * L.class_size(c)
        served += got
        if served >= lanes:
            break
    if lanes > 1:
        warp.sync(mask)  # the leader's claim before each lane's own acquire fence
    return off


@cuda.jit(device=True)
def _free_small(meta, npages, p, s, rel):
    """Free the block at ``rel`` in slab ``p`` (state guess ``s``); 1, or 0 if invalid.

    Every lane that frees calls (``free`` groups lanes by bitmap word): the
    leader sets the group's bits with one ``or`` and gives their slots back
    with one ``add``; each lane learns from the old bits whether its block
    was live. Atomics per group: one ``or``, one ``add`` (and the retire).
    """
    c = L.slab_class(L.state_tag(s))
    size = L.class_size(c)
    b = int64(uint32(rel) // uint32(size))  # 0 <= rel < PAGE: 32 bits suffice
    widx = int64(warp.solo_key())
    bit = int64(0)
    if rel - b * size == 0 and b < L.slab_cursor(s):
        widx = L.bitmap_word(npages, p, b >> L.WORD_SHIFT)
        bit = int64(1) << (b & (L.BITS_PER_WORD - 1))
    mask, leader, rank, lanes = warp.group(widx)
    if bit == 0:
        return 0
    bits, dup = warp.merge_bits(mask, bit)
    if lanes > 1:
        warp.sync(mask)  # each lane's release fence before the leader's or
    old = int64(0)
    if rank == 0:
        # Bitmap word: or (set = freed), races with other freers and with
        # reusers' and. Bits already set were not live: invalid frees.
        old = cuda.atomic.or_(meta, _at(widx), bits)
        freed = _popc32(bits & ~old)
        if freed:
            _release_slots(meta, npages, p, freed, False)
    old = warp.share(mask, leader, old)
    if old & bit or dup:
        return 0
    return 1
