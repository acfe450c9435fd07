"""The page index: 32-ary trees of bits over the pages, with counts above.

Two kinds of tree share this code (layout.py, "page index"): the free-page
index (a bit per page, set = the page may be FREE: set after a page became
FREE, cleared after it was claimed), and each size class's room index (set = the page may be a slab of
that class with a free slot). Level 0 holds the bits, 32 to a word; every
level above holds, per word, the number of bits set under it, so a search
skips 32 words of the level below for each zero it reads.

A count is raised before the bits it counts are set and lowered after they
were cleared: it is never below its bits, so a search that reads a zero
count skips nothing that was set (a count above its bits only costs a
search a look). The state words stay the single source of truth; callers
validate every page they find with the page's state ``cas``
(docs/correctness.md, "Page index").

Callers: :mod:`devalloc.device.pages` (free pages: runs for large
blocks) and :mod:`devalloc.device.slab` (a page for a slab: the class's
room index, then the free-page index).
"""

from numba import cuda, int32, int64, uint32

from .. import layout as L
from ._meta import _at, _lo32, _load, _popc32


@cuda.jit(device=True)
def _words_above(n):
    """ceil(n / 32) for ``1 <= n < 2**32``, in 32-bit arithmetic.

    ``(n + 31) >> 5`` would carry into bit 32 for n near 2**32, so NVVM keeps
    it in 64 bits (a register pair and two instructions more per level).
    """
    return uint32(uint32(uint32(n - 1) >> L.WORD_SHIFT) + 1)


@cuda.jit(device=True)
def _counts_add(meta, base, npages, w, delta):
    """Add ``delta`` to the count above level-0 word ``w`` at every level.

    One ``add`` per level above level 0 (none in a heap of up to 32 pages).
    """
    # 32-bit: metadata indices are below 2**31 (64-bit ones cost registers).
    n = _words_above(npages)
    b = uint32(base)
    i = uint32(w)
    while n > 1:
        b = uint32(b + n)
        n = _words_above(n)
        i = uint32(i >> L.WORD_SHIFT)
        # Count word: add, races with every update of a bit under it.
        cuda.atomic.add(meta, _at(b + i), delta)


@cuda.jit(device=True)
def _index_set(meta, base, npages, w, mask):
    """Set the bits ``mask`` of level-0 word ``w`` of the tree at ``base``.

    Returns the bits this call set (those of ``mask`` that were clear).
    Atomics: the counts' ``add``s (raised first, by every bit of ``mask``),
    one ``or``, and the counts lowered again by the bits that were set
    already.
    """
    m = _lo32(mask)  # 32 bits live across the counts' adds: registers
    _counts_add(meta, base, npages, w, _popc32(m))
    # Level-0 word: or, races with other setters and with clearers' and.
    old = cuda.atomic.or_(meta, _at(base + w), int64(m))
    dup = uint32(_lo32(old) & m)
    if dup:
        _counts_add(meta, base, npages, w, -_popc32(dup))
    return int64(uint32(m & ~_lo32(old)))


@cuda.jit(device=True)
def _index_clear(meta, base, npages, w, mask):
    """Clear the bits ``mask`` of level-0 word ``w``; return those that were set.

    The bits returned are those this call cleared (of two racing clearers,
    each bit goes to one), so the counts are lowered once per bit. Atomics:
    one ``and``, then the counts' ``add``s.
    """
    # Level-0 word: and, races with setters' or and other clearers' and.
    m = _lo32(mask)  # a level-0 word uses 32 bits: no register pair kept live
    got = uint32(_lo32(cuda.atomic.and_(meta, _at(base + w), int64(uint32(~m)))) & m)
    if got:
        _counts_add(meta, base, npages, w, -_popc32(got))
    return int64(got)


@cuda.jit(device=True)
def _index_find(meta, base, npages, w, up):
    """Return ``(v, bits)``: the nearest level-0 word ``v`` with bits set (32-bit).

    The first at or after ``w`` if ``up``, else the last at or before it;
    ``w == -1``: the first (``up``) or last word of the whole tree.
    ``(-1, 0)`` if none. Plain loads only (a guess the caller validates).

    From ``w``: scans the rest of ``w``'s group of 32 words; when it is
    empty, climbs a level and scans the counts of the following groups; a
    nonzero count sends it down into that group. The whole tree: starts at
    the top word and goes down the same way (an empty tree: one load). So a
    search reads at most 64 words per level.
    """
    levels = int32(L.tree_levels(npages))
    j = int32(0)
    i = int32(w)
    if w < 0:
        j = int32(levels - 1)
        i = int32(0)
    step = int32(1) if up else int32(-1)
    while True:
        start, n = _level(npages, j)
        # This group of level j: i .. its last word (up) or its first (down).
        if up:
            end = min(int32(i | (L.TREE_FANOUT - 1)), int32(n - 1))
        else:
            end = max(int32(i & ~(L.TREE_FANOUT - 1)), int32(0))
        v = uint32(0)
        while (i <= end) if up else (i >= end):
            if i >= 0 and i < n:
                # A guess, validated by the caller's atomics. 32 bits: a
                # level-0 word uses 32, a count is below 2**31 (MAX_PAGES).
                v = _lo32(_load(meta, _at(base + start + i)))
                if v != 0:
                    break
            i = int32(i + step)
        if v != 0:
            if j == 0:
                return i, v  # a level-0 word: 32 bits used
            j = int32(j - 1)  # down: the first (up) or last (down) word under i
            i = int32(i << L.WORD_SHIFT)
            if not up:
                i = int32(i + L.TREE_FANOUT - 1)
            continue
        if j == levels - 1:
            return int32(-1), uint32(0)
        # Up: the group after (before) the one just scanned, one level higher.
        j = int32(j + 1)
        i = int32((end >> L.WORD_SHIFT) + step)
        if i < 0:
            return int32(-1), uint32(0)


@cuda.jit(device=True)
def _level(npages, j):
    """(offset from the tree's start, words) of level ``j``, in 32 bits.

    Level i has ceil(npages / 32**(i + 1)) words (a ceiling of a ceiling is
    one ceiling): straight-line code with a constant trip count, no chain
    from one level to the next (a loop over j cost registers).
    """
    m1 = uint32(npages - 1)  # ceil(m / k) = (m - 1) // k + 1 for m >= 1: no carry
    start = uint32(0)
    n = uint32(uint32(m1 >> L.WORD_SHIFT) + 1)
    for i in range(1, L.TREE_LEVELS):
        if i <= j:
            start = uint32(start + n)
            n = uint32(uint32(m1 >> (L.WORD_SHIFT * (i + 1))) + 1)
    return int32(start), int32(n)
