"""Slabs: blocks of up to MAX_SMALL bytes in 16 KiB pages of one size class.

A slab's state word holds *live* (blocks out plus reserved slots) and
*cursor* (blocks handed out by bumping since the page became a slab); its
bitmap marks the bumped blocks that were freed. The pipeline of a group's
allocation: the leader ``_find``s a page (hint, then scan), ``_reserve``s
blocks there with one ``cas`` (and takes freed bits with one ``and``), and
broadcasts the grant; lanes take their block by rank (``_alloc_small``).
Callers: :mod:`devalloc.device.core` (and the interleaving explorer, which
runs these functions' ``py_func``). Invariants, ordering and progress
arguments: docs/correctness.md.
"""

from numba import cuda, int64, uint32

from .. import layout as L
from . import warp
from ._meta import (RETRIES, _acquire_and, _acquire_cas, _at, _fold, _load, _note_fold, _opaque,
                    _pages_changed, _popc32, _release_add, _release_exch, _release_or,
                    _store, _warp_number)

#: Passes of the small-block scan, repeated only while races were lost.
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
    # Hidden from the optimiser: a constant size would make the trip count
    # constant, and the unrolled loop's addresses would stay live (_opaque).
    nw = _opaque((cap + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT)
    w = _scatter(_warp_number(), nw)
    for _ in range(nw):
        free = _load(meta, _at(L.bitmap_word(npages, p, w)))  # guess
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

    A free page becomes a slab of class ``c``. Blocks come from the slab's
    cursor while it has unbumped blocks (one ``cas`` on the state word raises
    live, cursor and count together: that ``cas`` is the whole allocation),
    else from its freed blocks: one ``cas`` reserves as many slots as the
    bits picked from one bitmap word, then one ``and`` takes those bits (the
    bits it did not get are given back as undone reservations).

    Returns a grant (:func:`layout.bump_grant`/``reuse_grant``), ``NO`` when
    the page cannot serve the class, or ``BUSY`` when it could but every try
    lost a race. Atomics: ``cas`` per try (<= RETRIES), then the ``and`` on
    the reuse path; pages-used ``add`` and peak ``max`` when a page is taken.
    """
    idx = L.state_word(p)
    tag = L.slab_tag(c)
    cap = _blocks(c)
    s = _load(meta, _at(idx))  # guess, validated by the cas
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
        # Acquire: a block bumped here is ours after every access of its
        # previous owner (whose release reached this word through the chain
        # of atomics on it).
        old = _acquire_cas(meta, _at(idx), s, new)
        if old == s:
            _note_fold(meta, folded)
            if t == L.TAG_FREE:
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
    says which of the picked (freed) blocks are now ours. Acquire: the
    blocks' previous owners' accesses come before ours (their release ``or``).
    """
    return _acquire_and(meta, _at(widx), ~pick & L.WORD_MASK) & pick


@cuda.jit(device=True)
def _release_slots(meta, npages, p, k, undo):
    """Give back ``k`` slots of the slab on page ``p``; retire it when empty.

    ``undo`` counts the slots as reservations that were never used (not
    frees). Atomics: one ``add`` on the state word; when the slab became
    empty, :func:`_retire`.
    """
    idx = L.state_word(p)
    # State word: add never fails, so giving slots back never spins.
    # Release: our bitmap or/and before it are seen by whoever acquires the
    # word after it (the retirer clearing the bitmap, the page's next taker).
    old = _release_add(meta, _at(idx), -k * L.N_ONE)
    if undo:
        cuda.atomic.add(meta, L.H_ALLOC_UNDO, k)  # undone reservations: add
    new = old - k * L.N_ONE
    if L.slab_live(new) == 0:
        _retire(meta, npages, p, new)


@cuda.jit(device=True)
def _retire(meta, npages, p, s):
    """Turn the empty slab ``p`` (state ``s``) back into a free page.

    Unless someone reserved meanwhile (their release retires it later): one
    acquire ``cas`` to RETIRING, which no other thread changes (every
    freer's and reuser's bitmap access came before its release ``add`` on
    this word); relaxed stores clearing the bitmap words below the cursor
    (every block there was freed, so every bit there is set); one release
    ``exch`` to FREE (the cleared bitmap before the page is free). The
    pages-used ``add`` before, and back if the ``cas`` fails.
    """
    idx = L.state_word(p)
    _pages_changed(meta, -1)
    # State word: cas from exactly the empty slab we saw.
    if _acquire_cas(meta, _at(idx), s, L.state_keep_count(s) | L.TAG_RETIRING) != s:
        _pages_changed(meta, 1)
        return
    for w in range((L.slab_cursor(s) + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT):
        _store(meta, _at(L.bitmap_word(npages, p, w)), 0)  # bitmap: RETIRING, ours
    # State word: exch on a page only we may change.
    _release_exch(meta, _at(idx), L.state_keep_count(s))


@cuda.jit(device=True)
def _find(meta, npages, c, want):
    """Return a grant of up to ``want`` blocks of class ``c``, or 0.

    Starts at the page the warp's hint slot names and visits every page
    once per pass; a pass that lost a race somewhere is followed by another,
    up to SMALL_PASSES, so contention alone rarely yields nothing. A grant
    from another page than the hint's moves the hint there (``exch``).
    """
    slot = _scatter(_warp_number(), L.hint_slots(npages))
    hint_idx = L.hint_word(c, slot)
    # The search's own state is 32-bit (pages < 2**25): 64-bit counters here
    # cost 7 registers in the alloc kernel. A hint of 0 (none) wraps to
    # 2**32 - 1, so one compare range-checks it.
    n = uint32(npages)
    p = uint32((_load(meta, _at(hint_idx)) - 1) & 0xFFFFFFFF)  # racy hint: any value is safe
    if p >= n:
        p = uint32(L.slot_start(npages, slot))
    left = n  # visits left in this pass
    passes = uint32(SMALL_PASSES)
    busy = False
    moved = False
    while True:
        g = _reserve(meta, npages, int64(p), c, want)
        if g > BUSY:
            if moved:
                cuda.atomic.exch(meta, _at(hint_idx), int64(p) + 1)  # hint: racy, harmless
            return g
        if g == BUSY:
            busy = True
        moved = True
        p = uint32(p + 1)
        if p == n:
            p = uint32(0)
        left = uint32(left - 1)
        if left == 0:
            passes = uint32(passes - 1)
            if not busy or passes == 0:
                return 0
            busy = False
            left = n


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
        warp.sync(mask)  # the leader's acquiring claim before each lane's accesses
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
        warp.sync(mask)  # each lane's accesses before the leader's release or
    old = int64(0)
    if rank == 0:
        # Bitmap word: or (set = freed), races with other freers and with
        # reusers' and. Bits already set were not live: invalid frees.
        # Release: the group's accesses to its blocks (each lane's, before
        # the sync) come before the reuser's acquire and that takes them.
        old = _release_or(meta, _at(widx), bits)
        freed = _popc32(bits & ~old)
        if freed:
            _release_slots(meta, npages, p, freed, False)
    old = warp.share(mask, leader, old)
    if old & bit or dup:
        return 0
    return 1
