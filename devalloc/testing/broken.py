"""Deliberately broken copies of device functions, for testing the explorer.

Each is a plain function written like the device code it replaces, with one
bug. They never run on a device: the explorer installs one in place of the
real function (``explore(..., overrides={"_take_bits": take_bits_check_then_clear})``)
and rebinds it to the device module's globals, so ``cuda`` is the explorer's
fake module and ``_release_slots`` etc. are the real ``py_func``s. The
imports below only make the source readable and checkable.

:data:`VARIANTS` maps a short name to ``(device function name, broken copy)``.
"""

from numba import cuda, int32, int64, uint32

from .. import layout as L
from ..device import api, warp
from ..device._meta import _at, _opaque, _pages_changed, _pcount, _pshift
from ..device.index import _index_find, _index_set
from ..device.pages import _alloc_pages, _free_pages, _repair
from ..device.porting import _copy
from ..device.slab import (_BUSY, _FREE, _HINT_SHIFT, _LAST, _RECHECK, BUSY, DONE, START,
                           TRANSIT, _bitmap_word, _blocks, _find, _release_slots, _reserve,
                           _room_drop, _seek, _settle, _took_page)


def take_bits_check_then_clear(meta, widx, pick):
    """``_take_bits`` with a plain load then a plain store, not an atomic ``and``.

    A block freed into the same word between the load and the store loses
    its freed bit: the slab counts a slot that no reuser can ever find.
    """
    old = meta[widx]
    meta[widx] = old & ~pick & L.WORD_MASK  # BUG: check-then-clear
    return old & pick


def free_small_release_first(meta, npages, p, s, rel, prof):
    """``_free_small`` (for a lone lane) that gives the slot back before it sets the bit.

    Breaks freed >= cursor - live: between the two, a reuser finds no freed
    bit for the slot it reserved, and the slab may retire with the bit unset.
    """
    c = (s & L.TAG_MASK) - 1
    size = L.class_size(c)
    b = rel // size
    if rel - b * size != 0 or b >= L.slab_cursor(s):
        warp.join_alone()
        return 0
    widx = _bitmap_word(meta, npages, p, b // L.BITS_PER_WORD)
    bit = int64(1) << (b % L.BITS_PER_WORD)
    warp.group(widx)
    _release_slots(meta, npages, p, 1, False, c, prof)  # BUG: the slot goes back first
    old = cuda.atomic.or_(meta, widx, bit)
    return 0 if old & bit else 1


def retire_plain_store(meta, npages, p, s, prof):
    """``_retire`` that frees the empty slab with a plain store, not a ``cas``.

    A reservation made between the ``add`` that emptied the slab and the
    store is wiped out: its holder owns a block of a page that is now free.
    """
    idx = L.STATE_BASE + p
    _pages_changed(meta, -1)
    meta[idx] = (s & L.COUNT_MASK) | L.TAG_RETIRING  # BUG: plain store, no cas
    base = _bitmap_word(meta, npages, p, 0)
    for w in range((L.slab_cursor(s) + L.BITS_PER_WORD - 1) // L.BITS_PER_WORD):
        meta[base + w] = 0
    cuda.atomic.exch(meta, idx, s & L.COUNT_MASK)
    _index_set(meta, L.free_tree(npages, _pshift(meta)), npages, p >> 5, int64(1) << (p & 31))
    return 1


def retire_keeping_bits(meta, npages, p, s, prof):
    """``_retire`` that does not clear the freed bits of the retired slab.

    The next slab on the page starts with stale freed bits: blocks it hands
    out by bumping look freed, and a reuser can take a live block.
    """
    idx = L.STATE_BASE + p
    _pages_changed(meta, -1)
    if cuda.atomic.cas(meta, idx, s, (s & L.COUNT_MASK) | L.TAG_RETIRING) != s:
        _pages_changed(meta, 1)
        return 0
    # BUG: the bitmap words below the cursor are not cleared
    cuda.atomic.exch(meta, idx, s & L.COUNT_MASK)
    _index_set(meta, L.free_tree(npages, _pshift(meta)), npages, p >> 5, int64(1) << (p & 31))
    return 1


def reserve_plain_update(meta, npages, p, c, want, prof):
    """``_reserve`` (bump path only) with a plain read-modify-write, not a ``cas``.

    Two reservers of the same page can read the same state word and both
    write their increment: both get the same block.
    """
    idx = L.STATE_BASE + p
    tag = int(L.slab_tag(c))  # _find passes a 32-bit class: Python ints below
    cap = int(_blocks(meta, c))
    want = int(want)  # _find passes a 32-bit count
    s = meta[idx]
    t = s & L.TAG_MASK
    first = 0
    if t == L.TAG_FREE:
        got = min(want, cap)
        new = (s & L.COUNT_MASK) + got * (L.COUNT_ONE + L.CURSOR_ONE + L.N_ONE) + tag
    elif t == tag and L.slab_cursor(s) < cap:
        first = L.slab_cursor(s)
        got = min(want, cap - first)
        new = s + got * (L.COUNT_ONE + L.CURSOR_ONE + L.N_ONE)
    else:
        return 0
    meta[idx] = new  # BUG: plain read-modify-write
    if t == L.TAG_FREE:
        _pages_changed(meta, 1)
        return L.bump_grant(p, first, got) | L.GRANT_TOOK  # _find updates the index
    return L.bump_grant(p, first, got)


def alloc_small_overserve(meta, npages, c, mask, leader, rank, lanes, prof):
    """``_alloc_small`` whose lanes take a block one past their grant.

    The lane ranked just past a grant's last block also takes one: a block
    its leader never won, which another thread may hold or win.
    """
    off = int64(L.NULL)
    served = int64(0)
    for _ in range(lanes):
        g = int64(0)
        if rank == 0:
            g = _find(meta, npages, c, lanes - served, prof)
        g = warp.share(mask, leader, g)
        if g == 0:
            break
        got = L.grant_count(g)
        k = rank - served
        if k >= 0 and k <= got:  # BUG: <=, one lane too many
            off = (L.grant_page(g) << _pshift(meta)) + L.grant_block(g, k) * L.class_size(c)
        served += got
        if served >= lanes:
            break
    return off


def free_small_leader_bit_only(meta, npages, p, s, rel, prof):
    """``_free_small`` whose leader sets only its own bit, but gives back the
    slots of the whole group.

    The other lanes' blocks are no longer live yet not marked freed: a
    reuser that reserves their slots finds no bit to take.
    """
    c = (s & L.TAG_MASK) - 1
    size = L.class_size(c)
    b = rel // size
    widx = warp.solo_key()
    bit = int64(0)
    if rel - b * size == 0 and b < L.slab_cursor(s):
        widx = _bitmap_word(meta, npages, p, b >> 5)
        bit = int64(1) << (b & (L.BITS_PER_WORD - 1))
    mask, leader, rank, lanes = warp.group(widx)
    if bit == 0:
        return 0
    bits = bit
    dup = False
    if lanes > 1:
        bits, dup = warp.merge_bits(mask, bit)
    old = int64(0)
    if rank == 0:
        old = cuda.atomic.or_(meta, widx, bit)  # BUG: bit, not the group's bits
        freed = L.popc32(bits & ~old)
        if freed:
            _release_slots(meta, npages, p, freed, False, c, prof)
    if lanes > 1:
        old = warp.share(mask, leader, old)
    if old & bit or dup:
        return 0
    return 1


def claim_plain_update(meta, npages, total, cnt, prof):
    """``bump``'s claim (``_claim_fast``, which tries the current chunk and
    then calls ``_claim``) with a plain read-modify-write of the bump word
    where the chunk has room, not a ``cas``.

    Two bumpers that read the same cursor both move it on from there: both
    get the same bytes.
    """
    chunk_pages = L.bump_chunk_pages(npages)
    while True:  # as the real one: retried while the bump word changes (issue 25)
        w = meta[L.H_BUMP]
        if L.bump_page(w) >= 0 and L.bump_cursor(w) + total <= chunk_pages << _pshift(meta):
            meta[L.H_BUMP] = w + (cnt << L.BUMP_COUNT_SHIFT) + int64(total)  # BUG: plain update
            return (L.bump_page(w) << _pshift(meta)) + L.bump_cursor(w)
        q = _alloc_pages(meta, npages, chunk_pages, L.TAG_BUMP, prof)
        if q < 0:
            if meta[L.H_BUMP] == w:
                return L.NULL
            continue
        if cuda.atomic.cas(meta, L.H_BUMP, w, L.pack_bump(q, cnt, int64(total))) == w:
            if L.bump_count(w):
                cuda.atomic.add(meta, L.H_BUMP_DONE, L.bump_count(w))
            return q << _pshift(meta)
        _pcount(prof, L.P_CAS_RETRIES, 1)
        _free_pages(meta, npages, q, L.TAG_BUMP, prof)


def find_settle_gives_up(meta, npages, c, want, prof):
    """``_find`` that ends in NULL when the freed blocks it reserved went to
    another reuser (the bounded SETTLE_TRIES budget before issue 25, at 1).

    Two reusers pick the same freed bit, both reserve a slot, one takes the
    bit: the other gives its slot back and returns NULL although another
    freed block, or a free page, could serve it: it only lost a race.
    """
    g = _seek(meta, npages, c, want, prof)
    if g == 0:
        return g
    if g & L.GRANT_REUSE:
        return _settle(meta, npages, c, g, prof)  # BUG: 0 when the bits went elsewhere
    if g & L.GRANT_TOOK:
        _took_page(meta, npages, c, g)
    return g


def move_free_first(ctx, o, n, keep):
    """``realloc``'s move (``_move``) that frees the old block before it copies it.

    Between the free and the copy another thread may be handed the old
    bytes (its slab retired, the page taken again) and write them: the
    copy then carries the other thread's bytes, not the caller's.
    """
    api.free(ctx, o)  # BUG: the old block is given back before it is copied
    new = api.alloc(ctx, n)
    if new != L.NULL:
        _copy(ctx, new, o, keep)
    return new


def search_reads_free_again(meta, npages, c, want, prof, hint_idx, tried, busy):
    """``_search`` as it was before 2026-11-28: after its recheck of the room
    index it reads the free-page index again and takes the page it finds there.

    Two lone leaders of one class: the later one rechecks the room index
    before the earlier one marks its new slab there, then reads the
    free-page index after that slab's page left it, and takes the other
    page: two slabs for one class, and on a heap with no page to spare
    another class's alloc returns NULL.
    """
    n = uint32(npages)
    # One word of flags and the passes left (registers): _FREE set while on
    # the free-page index (else the room index), _RECHECK while the room
    # index is to be read once more, _BUSY when a race was lost this pass.
    st = uint32(_RECHECK | (_BUSY if busy else 0) | (hint_idx << _HINT_SHIFT))
    w = int32(START)  # the index word to look at next
    bits = uint32(0)  # candidates left in the word before it
    seen = uint32(1) if tried else uint32(0)  # pages tried (profiled heaps only)
    while True:
        # Hidden each time: what derives from npages is not hoisted out of
        # the loop and kept live across it (registers).
        npages = _opaque(npages)
        if bits == 0 and w != DONE:
            ps = _pshift(meta)
            base = L.free_tree(npages, ps) if st & _FREE else L.room_tree(npages, c, ps)
            v, x = _index_find(meta, base, npages, w, True)
            w = int32(v) if v >= 0 else int32(DONE)
            bits = uint32(x)
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
            st = uint32(st ^ _FREE)
            w = int32(START)
            continue
        if st & _FREE and st & _RECHECK:
            # About to take a free page: the room index once more first.
            st = uint32(st ^ (_FREE | _RECHECK))  # both set here
            w = int32(START)
            bits = uint32(0)  # BUG: the free page is read again after the recheck
            continue
        low = uint32(bits & uint32(~bits + uint32(1)))
        bits = uint32(bits ^ low)
        p = uint32((w << L.WORD_SHIFT) + cuda.ffs(low) - 1)
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
                _repair(meta, npages, int64(p))  # a stale entry
            else:
                _room_drop(meta, npages, c, int64(p))  # a stale mark


#: name -> (device function replaced, broken copy)
VARIANTS = {
    "take_check_then_clear": ("_take_bits", take_bits_check_then_clear),
    "free_release_first": ("_free_small", free_small_release_first),
    "retire_plain_store": ("_retire", retire_plain_store),
    "retire_keeping_bits": ("_retire", retire_keeping_bits),
    "reserve_plain_update": ("_reserve", reserve_plain_update),
    "alloc_small_overserve": ("_alloc_small", alloc_small_overserve),
    "free_small_leader_bit_only": ("_free_small", free_small_leader_bit_only),
    "claim_plain_update": ("_claim_fast", claim_plain_update),
    "move_free_first": ("_move", move_free_first),
    "find_settle_gives_up": ("_find", find_settle_gives_up),
    "search_reads_free_again": ("_search", search_reads_free_again),
}
