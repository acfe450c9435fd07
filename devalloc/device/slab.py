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

import numpy as np
from numba import cuda, int32, int64, uint32, uint64

from .. import layout as L
from . import warp
from ._meta import (RETRIES, _acquire_and, _acquire_cas, _at, _fold, _load, _note_fold, _opaque,
                    _lo32, _pages_changed, _pcount, _popc32, _release_add, _release_exch,
                    _release_or, _store, _tie, _warp_number)

#: Passes of the small-block scan, repeated only while races were lost.
SMALL_PASSES = 4
#: ``_reserve`` results that are not grants (every grant is >= 1 << 38).
NO = 0
BUSY = 1

#: Per size class, read from constant memory instead of computed (a
#: division, a dozen instructions): the block size, the blocks in a slab,
#: and ceil(2**32 / size), with which ``free`` divides an offset in a page
#: by the block size exactly (a multiply-shift; tests/test_layout.py).
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
def _blocks(c):
    # class_blocks(c), looked up (32 bits).
    return uint32(CLASS_BLOCKS[c])


@cuda.jit(device=True)
def _scatter(spread, n):
    # Map a warp number to [0, n) without a division (Fibonacci hashing), so
    # that consecutive warps land far apart. 32-bit: the hash wraps, the
    # scaling is the high half of h * n.
    h = uint32(uint64(spread) * uint64(0x9E3779B1))
    return uint32((uint64(h) * uint64(n)) >> 32)


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
    is seen. ``anchor`` (the state word being tried) ties the start word to
    this path: without it the compiler hoists the warp number's hash onto
    every allocation's path.
    """
    # Hidden from the optimiser: a constant size would make the trip count
    # constant, and the unrolled loop's addresses would stay live (_opaque).
    nw = _opaque(uint32((cap + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT))
    w = _scatter(_tie(_warp_number(), anchor), nw)
    for _ in range(int32(nw)):
        free = _lo32(_load(meta, _at(L.bitmap_word(npages, p, w))))  # guess (32 bits used)
        left = uint32(cap - (w << L.WORD_SHIFT))
        if left < L.BITS_PER_WORD:
            free = uint32(free & uint32((uint32(1) << left) - uint32(1)))
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
    bits picked from one bitmap word, then one ``and`` takes those bits (the
    bits it did not get are given back as undone reservations).

    Returns a grant (:func:`layout.bump_grant`/``reuse_grant``), ``NO`` when
    the page cannot serve the class, or ``BUSY`` when it could but every try
    lost a race. Atomics: ``cas`` per try (<= RETRIES), then the ``and`` on
    the reuse path; pages-used ``add`` and peak ``max`` when a page is taken.
    Counts and block indices are 32-bit (``want`` too).
    """
    idx = L.state_word(p)
    tag = uint32(L.slab_tag(c))
    cap = _blocks(c)
    s = _load(meta, _at(idx))  # guess, validated by the cas
    tries = int32(RETRIES)
    while True:
        t = uint32(_lo32(s) & L.TAG_MASK)
        first = uint32(0)
        w = uint32(0)
        pick = uint32(0)
        if t == L.TAG_FREE:
            got = min(want, cap)
            new = L.state_keep_count(s) + int64(got) * L.SLAB_BUMP_ONE + int64(tag)
        elif t == tag:
            first = uint32(_lo32(s >> L.CURSOR_SHIFT) & L.CURSOR_MASK)
            if first < cap:
                got = min(want, uint32(cap - first))
                new = s + int64(got) * L.SLAB_BUMP_ONE
            else:
                live = uint32(_lo32(s >> L.N_SHIFT) & L.LIVE_MASK)
                if live >= cap:
                    return NO
                w, pick = _pick(meta, npages, p, cap, min(want, uint32(cap - live)), s)
                if pick == 0:
                    return BUSY  # the freed blocks' bits are still being set
                got = uint32(_popc32(pick))
                new = s + int64(got) * L.SLAB_REUSE_ONE
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
            if pick == 0:
                return L.bump_grant(p, int64(first), int64(got))
            mine = _lo32(_take_bits(meta, L.bitmap_word(npages, p, w), int64(pick)))
            lost = uint32(got - uint32(_popc32(mine)))
            if lost:
                _release_slots(meta, npages, p, int64(lost), True, prof)
            if mine == 0:
                return BUSY
            return L.reuse_grant(p, int64(w), int64(mine))
        s = old
        _pcount(prof, L.P_CAS_RETRIES, 1)
        tries = int32(tries - 1)
        if tries == 0:
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
def _release_slots(meta, npages, p, k, undo, prof):
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
        _retire(meta, npages, p, new, prof)


@cuda.jit(device=True)
def _retire(meta, npages, p, s, prof):
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
        _pcount(prof, L.P_CAS_RETRIES, 1)
        return
    _pcount(prof, L.P_SLABS_RETIRED, 1)
    for w in range((L.slab_cursor(s) + L.BITS_PER_WORD - 1) >> L.WORD_SHIFT):
        _store(meta, _at(L.bitmap_word(npages, p, w)), 0)  # bitmap: RETIRING, ours
    # State word: exch on a page only we may change.
    _release_exch(meta, _at(idx), L.state_keep_count(s))


@cuda.jit(device=True)
def _find(meta, npages, c, want, prof):
    """Return a grant of up to ``want`` blocks of class ``c``, or 0.

    Starts at the page the warp's hint slot names and visits every page
    once per pass; a pass that lost a race somewhere is followed by another,
    up to SMALL_PASSES, so contention alone rarely yields nothing. A grant
    from another page than the hint's moves the hint there (``exch``).
    """
    # The search's own state is 32-bit (pages < 2**25): 64-bit counters here
    # cost 7 registers in the alloc kernel, and 64-bit hint-slot arithmetic
    # a dozen instructions. A hint of 0 (none) wraps to 2**32 - 1, so one
    # compare range-checks it.
    n = uint32(npages)
    slot = _scatter(_warp_number(), L.hint_slots(n))
    hint_idx = L.hint_word(c, slot)
    p = _lo32(_load(meta, _at(hint_idx)) - 1)  # racy hint: any value is safe
    if p >= n:
        p = uint32(L.slot_start(n, slot))
    left = n  # visits left in this pass
    passes = uint32(SMALL_PASSES)
    busy = False
    moved = False
    seen = uint32(0)  # pages visited (profiled heaps only)
    while True:
        g = _reserve(meta, npages, int64(p), c, want, prof)
        seen = uint32(seen + 1)
        if g > BUSY:
            if moved:
                cuda.atomic.exch(meta, _at(hint_idx), int64(p) + 1)  # hint: racy, harmless
                _pcount(prof, L.P_HINT_MOVES, 1)
            _pcount(prof, L.P_PAGES_SCANNED, int64(seen))
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
                _pcount(prof, L.P_PAGES_SCANNED, int64(seen))
                return 0
            busy = False
            left = n


@cuda.jit(device=True)
def _grant_got(g):
    # Blocks in grant g (layout.grant_count on the grant's two 32-bit halves).
    lo = _lo32(g)
    if _lo32(g >> 32) & uint32(L.GRANT_REUSE >> 32):
        return uint32(_popc32(lo))
    return uint32(lo >> L.GRANT_COUNT_SHIFT)


@cuda.jit(device=True)
def _grant_offset(g, k, c):
    # The offset of the k-th block of grant g of class c (layout.grant_page,
    # grant_block, in 32 bits but for the page's offset).
    lo = _lo32(g)
    hi = _lo32(g >> 32)
    page = uint32(uint32(hi >> (L.GRANT_PAGE_SHIFT - 32)) - uint32(1))
    if hi & uint32(L.GRANT_REUSE >> 32):
        for _ in range(int32(k)):
            lo = uint32(lo & uint32(lo - uint32(1)))
        b = uint32(((hi & L.GRANT_WORD_MASK) << L.WORD_SHIFT) + uint32(cuda.ffs(lo) - 1))
    else:
        b = uint32((lo & L.GRANT_FIRST_MASK) + k)
    return (int64(page) << L.PAGE_SHIFT) + int64(uint32(b * _size(c)))


@cuda.jit(device=True)
def _alloc_small(meta, npages, c, mask, leader, rank, lanes, prof):
    """Serve one block of class ``c`` to each lane of a group; offset or NULL.

    Every lane of the group (``warp.group`` of the same class) calls. The
    leader wins blocks for the lanes not served yet and broadcasts each
    grant; the lanes take theirs by rank. Each round serves at least one
    lane or ends with NULL for the rest, so there are at most ``lanes``
    rounds, the same number for every lane of the group. Counts are 32-bit.
    """
    n = uint32(lanes)
    if n == 1:
        # A lane alone (the usual case in divergent code): one round, nothing
        # to share, no sync. Its own copy of the search: in the loop below,
        # the rounds' bookkeeping costs a lone lane some 25 instructions.
        g = _find(meta, npages, c, n, prof)
        if g == 0:
            return int64(L.NULL)
        return _grant_offset(g, uint32(0), c)
    off = int64(L.NULL)
    me = uint32(rank)
    served = uint32(0)
    for _ in range(int32(lanes)):
        g = int64(0)
        if me == 0:
            g = _find(meta, npages, c, uint32(n - served), prof)
        g = warp.share(mask, leader, g)
        if g == 0:
            break
        got = _grant_got(g)
        if me >= served and me - served < got:
            off = _grant_offset(g, uint32(me - served), c)
        served = uint32(served + got)
        if served >= n:
            break
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
    r = _lo32(rel)  # 0 <= rel < PAGE: 32 bits suffice
    # r // size, exactly, as a multiply-shift (no division; tests/test_layout.py).
    b = uint32((uint64(r) * uint64(CLASS_RECIPS[c])) >> 32)
    widx = int64(warp.solo_key())
    bit = uint32(0)
    if r == uint32(b * _size(c)) and b < uint32(_lo32(s >> L.CURSOR_SHIFT) & L.CURSOR_MASK):
        widx = L.bitmap_word(npages, p, int64(b >> L.WORD_SHIFT))
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
            _release_slots(meta, npages, p, freed, False, prof)
    if lanes > 1:
        old = warp.share(mask, leader, old)
    if old & bit or dup:
        return 0
    return 1
