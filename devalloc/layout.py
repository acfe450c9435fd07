"""Pure layout arithmetic: the heap's geometry and every packed word's bits.

Nothing here touches a device. Every function is plain integer arithmetic:
it runs on the host as ordinary Python (and is unit-tested there), and
``register_jitable`` lets device code call the very same function, so there
is one definition of the layout. Keep them free of Python-only constructs
(no ``int.bit_length``, no tuples indexed at run time, no exceptions).

One section per format, each with its bit table, then the functions that
pack and unpack it: geometry and size classes, the page **state word**,
the **metadata** words, the **grant**, the **bump word**, the **scope
state**, the **debug record**. Import-time asserts tie the derived
constants together. Who writes each word, with which atomic, is in
docs/correctness.md.

Longer than 500 lines because it is the one home of every packed format
(one section says what every bit of a word means, for host and device
alike), and the import-time asserts tie constants of different sections
together; a split would scatter the tables that must agree. The pure
arithmetic of the porting API is apart (:mod:`devalloc.device.blocks`).
"""

from typing import NamedTuple

from numba.cuda.extending import register_jitable

# ================================================================ bits
# Helpers for 32-bit masks, used by the sections below and by device code.

@register_jitable
def floor_log2(x):
    """Return floor(log2(x)) for 1 <= x < 2**32 (branch-light, no loops)."""
    r = 0
    if x >= 65536:
        x >>= 16
        r += 16
    if x >= 256:
        x >>= 8
        r += 8
    if x >= 16:
        x >>= 4
        r += 4
    if x >= 4:
        x >>= 2
        r += 2
    if x >= 2:
        r += 1
    return r


@register_jitable
def popc32(x):
    """Return the number of set bits of ``x`` (0 <= x < 2**32).

    Device paths that count bits of a bitmap word use
    :func:`devalloc.device._meta._popc32` (one ``popc`` instruction).
    """
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & 0xFFFFFFFF) >> 24


@register_jitable
def nth_set_bit(m, k):
    """Return the index of the ``k``-th (from 0) lowest set bit of ``m``.

    ``m`` is a 32-bit mask with more than ``k`` bits set.
    """
    for _ in range(k):
        m &= m - 1
    return floor_log2(m & -m)


@register_jitable
def lowest_bits(m, k):
    """Return the ``k`` lowest set bits of ``m`` (all of them if fewer)."""
    out = 0
    for _ in range(k):
        if m == 0:
            break
        low = m & -m
        out |= low
        m ^= low
    return out


# ================================================================ geometry

#: Returned by ``alloc`` when a request cannot be served.
NULL = -1

#: Every block offset and every block size is a multiple of this.
ALIGN_SHIFT = 4
ALIGN = 1 << ALIGN_SHIFT

#: Bytes per page: the unit in which slabs and large blocks take the arena.
#: This is the default page and the largest; ``Heap(capacity, page=...)``
#: chooses any power of two from PAGE_MIN up to it per heap (the *page
#: shift* ``ps`` that the page-dependent functions below take, their
#: default being PAGE_SHIFT's). The device reads a heap's page shift from
#: the length of its metadata array (:func:`meta_words`, :func:`page_shift_of`).
PAGE_SHIFT = 14
PAGE = 1 << PAGE_SHIFT
#: The smallest page a heap may choose.
PAGE_SHIFT_MIN = 10
PAGE_MIN = 1 << PAGE_SHIFT_MIN

#: Lanes per warp (a warp's number is the thread's number >> WARP_SHIFT).
WARP_SHIFT = 5
WARP_SIZE = 1 << WARP_SHIFT

#: Bitmap bits used in each ``int64`` metadata word (the low 32 bits, so that
#: every bitmap word stays non-negative and ``ffs``/``popc`` see 32-bit values).
WORD_SHIFT = 5
BITS_PER_WORD = 1 << WORD_SHIFT
#: Mask of the bits used in a bitmap word.
WORD_MASK = (1 << BITS_PER_WORD) - 1
#: Largest number of blocks in one slab (16-byte blocks, the largest page).
MAX_SLAB_BLOCKS = PAGE // ALIGN
#: Bitmap words reserved per page of the largest size, enough for the
#: smallest class (a page of 2**ps bytes has bitmap_words(ps)).
BITMAP_WORDS = MAX_SLAB_BLOCKS // BITS_PER_WORD
#: log2 of the bytes one bitmap word covers in the smallest class (32 blocks of ALIGN).
BITMAP_WORD_SHIFT = WORD_SHIFT + ALIGN_SHIFT

# ------------------------------------------------------------ size classes
# Classes 0..LINEAR_CLASSES-1 are 16, 32, ... LINEAR_MAX bytes (steps of
# ALIGN); above LINEAR_MAX each power of two is split into 2**SUB_BITS
# classes (at most 25 % rounding) up to MAX_SMALL. Larger requests take
# whole pages.
LINEAR_CLASSES = 8
LINEAR_MAX = LINEAR_CLASSES * ALIGN
LINEAR_SHIFT = 7  # log2(LINEAR_MAX)
SUB_BITS = 2
SUBCLASSES = 1 << SUB_BITS
MAX_SMALL = 8192
NCLASSES = LINEAR_CLASSES + (13 - LINEAR_SHIFT) * SUBCLASSES  # 13 = log2(MAX_SMALL)


@register_jitable
def size_class(nbytes):
    """Return the size class serving ``nbytes`` (1 <= nbytes <= MAX_SMALL)."""
    m = nbytes - 1
    if m < LINEAR_MAX:
        return m >> ALIGN_SHIFT
    e = floor_log2(m)
    sub = (m >> (e - SUB_BITS)) & (SUBCLASSES - 1)
    return LINEAR_CLASSES + ((e - LINEAR_SHIFT) << SUB_BITS) + sub


@register_jitable
def class_size(c):
    """Return the block size in bytes of size class ``c``."""
    if c < LINEAR_CLASSES:
        return (c + 1) << ALIGN_SHIFT
    e = LINEAR_SHIFT + ((c - LINEAR_CLASSES) >> SUB_BITS)
    sub = (c - LINEAR_CLASSES) & (SUBCLASSES - 1)
    return (SUBCLASSES + 1 + sub) << (e - SUB_BITS)


@register_jitable
def max_small(ps=PAGE_SHIFT):
    """Return the largest request served by a slab in pages of ``2**ps`` bytes.

    Half a page (MAX_SMALL for the largest page), so that every slab holds
    at least two blocks; a larger request takes whole pages.
    """
    return min(MAX_SMALL, 1 << (ps - 1))


@register_jitable
def class_blocks(c, ps=PAGE_SHIFT):
    """Return the number of blocks in one slab of class ``c`` (pages of ``2**ps`` bytes)."""
    return (1 << ps) // class_size(c)


@register_jitable
def class_words(c, ps=PAGE_SHIFT):
    """Return the number of bitmap words a slab of class ``c`` uses."""
    return (class_blocks(c, ps) + BITS_PER_WORD - 1) >> WORD_SHIFT


@register_jitable
def word_valid_mask(c, w, ps=PAGE_SHIFT):
    """Return the mask of bitmap bits of word ``w`` that name blocks of ``c``."""
    left = class_blocks(c, ps) - w * BITS_PER_WORD
    if left >= BITS_PER_WORD:
        return WORD_MASK
    if left <= 0:
        return 0
    return (1 << left) - 1


@register_jitable
def pages_for(nbytes, ps=PAGE_SHIFT):
    """Return the pages of ``2**ps`` bytes a large block of ``nbytes`` bytes takes."""
    return (nbytes + (1 << ps) - 1) >> ps


@register_jitable
def bitmap_words(ps=PAGE_SHIFT):
    """Return the bitmap words of one page of ``2**ps`` bytes (its smallest class's blocks / 32)."""
    return 1 << (ps - BITMAP_WORD_SHIFT)


@register_jitable
def align_up(nbytes):
    """Return ``nbytes`` rounded up to a multiple of ALIGN."""
    return (nbytes + ALIGN - 1) & ~(ALIGN - 1)


# ============================================================ state word
# One int64 per page; the single source of truth for what the page is.
# bits  0..7   tag: FREE, 1 + class for a slab, HEAD/TAIL of a large block,
#              BUMP (head of a bump chunk), RETIRING (a slab being retired)
# bits  8..39  n:   a slab's live and cursor (below); a head's page count
# bits 40..62  count: successful allocations served from this page, modulo
#              folding (COUNT_FOLD); survives every change of tag
# bit  63      never set, so a state word is never negative
# A slab splits n in two:
# bits  8..23  live:   blocks handed out and not freed, plus reserved slots
# bits 24..39  cursor: blocks handed out by bumping since the slab was taken
# Blocks at or past the cursor have never been handed out; below it, the
# slab's bitmap marks the blocks that were freed.
TAG_BITS = 8
TAG_MASK = (1 << TAG_BITS) - 1
TAG_FREE = 0
TAG_HEAD = 0x40
TAG_TAIL = 0x41
#: Head of a bump chunk (devalloc.device.bumpalloc); n = its pages. Not freeable.
TAG_BUMP = 0x42
#: A slab being retired: its last block was freed and the retiring thread is
#: clearing its bitmap. No valid operation changes the page until it becomes
#: FREE (a racing double free can: docs/correctness.md, "Known limits").
TAG_RETIRING = 0x43

N_SHIFT = TAG_BITS
N_BITS = 32
N_MASK = (1 << N_BITS) - 1
N_ONE = 1 << N_SHIFT
LIVE_BITS = 16
LIVE_MASK = (1 << LIVE_BITS) - 1
CURSOR_SHIFT = N_SHIFT + LIVE_BITS
CURSOR_ONE = 1 << CURSOR_SHIFT
CURSOR_MASK = (1 << (N_BITS - LIVE_BITS)) - 1
COUNT_SHIFT = N_SHIFT + N_BITS
COUNT_BITS = 63 - COUNT_SHIFT
COUNT_ONE = 1 << COUNT_SHIFT
COUNT_MASK = ((1 << COUNT_BITS) - 1) << COUNT_SHIFT
#: When a page's count field reaches this value, the allocating thread moves
#: it into the global ALLOC_FOLD word; the field never overflows its bits.
COUNT_FOLD = 1 << (COUNT_BITS - 1)
#: The state word's bit that is set exactly when its count is >= COUNT_FOLD.
COUNT_FOLD_BIT = COUNT_FOLD << COUNT_SHIFT
#: What one block handed out by bumping adds to a slab's state word.
SLAB_BUMP_ONE = COUNT_ONE + CURSOR_ONE + N_ONE
#: What one freed block taken again adds (live and count; the cursor stays).
SLAB_REUSE_ONE = COUNT_ONE + N_ONE


@register_jitable
def pack_state(tag, n, count):
    """Return the state word with fields ``tag``, ``n`` and ``count``."""
    return (count << COUNT_SHIFT) | (n << N_SHIFT) | tag


@register_jitable
def state_tag(s):
    """Return the tag field of state word ``s``."""
    return s & TAG_MASK


@register_jitable
def state_n(s):
    """Return the n field (a slab's live and cursor, or a head's pages) of ``s``."""
    return (s >> N_SHIFT) & N_MASK


@register_jitable
def state_count(s):
    """Return the allocation-count field of state word ``s``."""
    return (s & COUNT_MASK) >> COUNT_SHIFT


@register_jitable
def state_keep_count(s):
    """Return state word ``s`` with only its count kept: the page as FREE."""
    return s & COUNT_MASK


@register_jitable
def slab_tag(c):
    """Return the state tag of a slab of class ``c``."""
    return 1 + c


@register_jitable
def is_slab_tag(t):
    """Return True if tag ``t`` names a slab (of class ``t - 1``)."""
    return t >= 1 and t <= NCLASSES


@register_jitable
def slab_class(t):
    """Return the size class of a slab whose tag is ``t``."""
    return t - 1


@register_jitable
def slab_live(s):
    """Return the live field (blocks out plus reserved slots) of slab state ``s``."""
    return (s >> N_SHIFT) & LIVE_MASK


@register_jitable
def slab_cursor(s):
    """Return the cursor field (blocks ever bumped) of slab state ``s``."""
    return (s >> CURSOR_SHIFT) & CURSOR_MASK


# ============================================================ metadata
# Offsets into the int64 metadata array (pages of 2**ps bytes):
#   [0, HEADER_WORDS)                          global words, stripes, hints
#   [STATE_BASE, STATE_BASE + npages)          one state word per page
#   [bits_base(npages), + npages * bitmap_words(ps))
#                                              slab bitmaps, 32 bits per word
#   [free_tree(npages, ps), + tree_words(npages))
#                                              the free-page index ("page index")
#   [room_tree(npages, c, ps), + tree_words(npages))
#                                              class c's room index, c < NCLASSES
#   then 0 to 7 unused words: the array's length is PAGE_SHIFT_MIN + ps
#   modulo 8 (meta_words), so a plain array of a heap's metadata still
#   tells its page (page_shift_of; a heap's own is typed with it,
#   devalloc.ctx.PagedMeta).
# Everything is zero after a reset but the free-page index, which starts
# with every page free (free_tree_init), and H_SPREAD_MAX.
#: Pages currently held by slabs and large blocks.
H_PAGES_USED = 0
#: High-water mark of H_PAGES_USED since the last reset.
H_PEAK_PAGES = 1
#: Allocation counts moved out of page state words (multiples of COUNT_FOLD).
H_ALLOC_FOLD = 2
#: Slot reservations that were undone (counted in a page, then given back).
H_ALLOC_UNDO = 3
#: The current bump chunk: see pack_bump.
H_BUMP = 4
#: Bump allocations served from chunks no longer current, and large bumps.
H_BUMP_DONE = 5
#: Failure counters are striped over STRIPES cache lines (by block index) so
#: that a grid that runs out of memory does not serialise on one word.
STRIPES = 8
STRIPE_BASE = 16
STRIPE_STRIDE = 16  # words: one 128-byte line per stripe
S_FAILED = 0
S_INVALID = 1
S_SCOPE_MISUSE = 2
#: Scoped chunks are ordinary blocks; these let usage() report them apart.
S_SCOPE_CHUNKS = 3   # chunks ever taken (subtracted from allocs)
S_SCOPE_LIVE = 4     # chunks held now (subtracted from live blocks)
S_SCOPE_BYTES = 5    # their reserved bytes (subtracted from in_use)
#: Requests for 0 bytes (``alloc``, ``bump``, ``scoped``, an empty ``array``):
#: NULL as documented, counted apart from ``S_FAILED`` (the heap could serve).
S_EMPTY = 6
#: The most hint slots a class may spread over: log2, written at reset
#: (:func:`spread_log_max`; the heap's pages and the GPU's SM count bound it).
H_SPREAD_MAX = 6
#: Per class, one line of HINT_STRIDE words: the class's *spread* word
#: (log2 of the hint slots in use; 0 after a reset: one slot), then HINT_SLOTS
#: hints, page + 1 of a slab that recently served the class (0: none yet).
#: A warp uses slot ``warp number mod 2**spread`` (:func:`hint_word`); a
#: leader that passes its slot's slab over after SLAB_TRIES lost ``cas``
#: widens the spread by one (``max``, up to H_SPREAD_MAX), so a class fills
#: one slab while it is calm and up to 2**H_SPREAD_MAX side by side under
#: contention. The spread word and slot 0 share a 128-byte line: a calm
#: class's search loads both at once.
HINT_SLOTS = 128
HINT_STRIDE = 144  # 1 + HINT_SLOTS, rounded up to a 128-byte line (16 words)
#: A heap spreads a class over at most one slot per this many pages.
PAGES_PER_SLOT = 32
HINT_BASE = STRIPE_BASE + STRIPES * STRIPE_STRIDE
HEADER_WORDS = HINT_BASE + NCLASSES * HINT_STRIDE
STATE_BASE = HEADER_WORDS

#: Most pages a heap may have: page indices must fit the bump word (25 bits).
MAX_PAGES = (1 << 25) - 2

HEADER_BYTES = 8 * HEADER_WORDS


@register_jitable
def state_word(p):
    """Return the metadata word of page ``p``'s state."""
    return STATE_BASE + p


@register_jitable
def bits_base(npages):
    """Return the metadata word where the slab bitmaps start."""
    return STATE_BASE + npages


@register_jitable
def bitmap_word(npages, p, w, ps=PAGE_SHIFT):
    """Return the metadata word of bitmap word ``w`` of page ``p`` (pages of ``2**ps`` bytes)."""
    return STATE_BASE + npages + (p << (ps - BITMAP_WORD_SHIFT)) + w


@register_jitable
def free_tree(npages, ps=PAGE_SHIFT):
    """Return the metadata word where the free-page index starts (pages of ``2**ps`` bytes)."""
    return STATE_BASE + npages + (npages << (ps - BITMAP_WORD_SHIFT))


@register_jitable
def tree_stride(npages):
    """Return the words from one tree's start to the next's (>= tree_words).

    A bound without a loop: level 0's ceil(npages / 32) words, the levels
    above (fewer than npages / 512 together) and their rounding.
    """
    return (npages >> WORD_SHIFT) + (npages >> (2 * WORD_SHIFT - 1)) + 2 * TREE_LEVELS


@register_jitable
def room_tree(npages, c, ps=PAGE_SHIFT):
    """Return the metadata word where class ``c``'s room index starts (pages of ``2**ps`` bytes)."""
    return free_tree(npages, ps) + (1 + c) * tree_stride(npages)


@register_jitable
def meta_words(npages, ps=PAGE_SHIFT):
    """Return the number of ``int64`` metadata words for ``npages`` pages of ``2**ps`` bytes.

    Rounded up (by 0 to 7 words) so that the length modulo 8 tells the page
    shift (:func:`page_shift_of`).
    """
    n = room_tree(npages, NCLASSES, ps)
    return n + ((ps - PAGE_SHIFT_MIN - n) & 7)


@register_jitable
def page_shift_of(meta_len):
    """Return the page shift of a heap whose metadata array has ``meta_len`` words."""
    return PAGE_SHIFT_MIN + (meta_len & 7)


@register_jitable
def meta_bytes(npages, ps=PAGE_SHIFT):
    """Return the bytes of metadata of a heap of ``npages`` pages of ``2**ps`` bytes."""
    return 8 * meta_words(npages, ps)


# A heap's capacity counts its arena only: whole pages, what kernels can be
# served. The metadata is allocated beside it (meta_bytes: a 37 KiB header
# and about 1.7 % of the arena, mostly bitmaps), so a small heap loses no
# page to it. A heap built inside a ``memory=`` buffer has nowhere else to
# put it: there the buffer holds both (pages_for_memory).


@register_jitable
def pages_for_capacity(capacity, ps=PAGE_SHIFT):
    """Return the pages of a heap of ``capacity`` bytes (whole pages, rounded down)."""
    return capacity >> ps


@register_jitable
def capacity_for_pages(npages, ps=PAGE_SHIFT):
    """Return the smallest capacity whose heap has ``npages`` pages."""
    return npages << ps


@register_jitable
def memory_for_pages(npages, ps=PAGE_SHIFT):
    """Return the bytes ``npages`` pages and their metadata take together."""
    return (npages << ps) + meta_bytes(npages, ps)


@register_jitable
def meta_bytes_per_page(ps=PAGE_SHIFT):
    """Return the most metadata bytes a page of ``2**ps`` bytes costs beyond the header.

    Its state word, its bitmap, and its share of the 1 + NCLASSES trees (a
    bit each, 32 to a word, and the counts above them); TREE_SLACK_BYTES
    and META_PAD_BYTES cover the rest.
    """
    return 8 * (1 + bitmap_words(ps)) + -(-8 * (1 + NCLASSES) * 17 // 512)


@register_jitable
def pages_for_memory(nbytes, ps=PAGE_SHIFT):
    """Return how many pages of ``2**ps`` bytes fit, with their metadata, in ``nbytes`` bytes."""
    # A lower bound (meta_bytes_per_page, TREE_SLACK_BYTES and META_PAD_BYTES
    # bound the metadata from above), then up while one more page fits.
    n = ((nbytes - HEADER_BYTES - TREE_SLACK_BYTES - META_PAD_BYTES)
         // ((1 << ps) + meta_bytes_per_page(ps)))
    if n < 0:
        n = 0
    while n > 0 and memory_for_pages(n, ps) > nbytes:
        n -= 1
    while memory_for_pages(n + 1, ps) <= nbytes:
        n += 1
    return n


# ============================================================ page index
# Two kinds of 32-ary tree over the pages, laid out alike (word offsets from
# the tree's start; ``free_tree``/``room_tree`` give the starts):
#   level 0: level_words(npages, 0) = ceil(npages / 32) words; bit b of word w
#            (b < 32) stands for page 32 w + b; bits 32..63 are always clear
#   level j >= 1, while level j - 1 has more than one word:
#            ceil(words of level j - 1 / 32) words; word i holds the number
#            of level-0 bits set under it (pages [32^(j+1) i, 32^(j+1) (i+1)))
# The top level has one word (a heap of up to 32 pages: level 0 alone).
# * The free-page index: bit set = the page may be FREE (set with an ``or``
#   after the page became FREE, cleared with an ``and`` after it was
#   claimed; a claimer that meets a stale bit repairs it). Starts all set.
# * Class c's room index: bit set = the page may be a slab of class c with a
#   free slot (set when room appears, cleared when a search finds none).
# A count is raised before the bits it counts are set and lowered after they
# were cleared, so it is never below them (docs/correctness.md, "Page index").
#: Bits used in a level-0 word (as in the slab bitmaps).
TREE_FANOUT = BITS_PER_WORD
#: Most levels a tree has (a heap of MAX_PAGES pages).
TREE_LEVELS = 5
#: Bytes the trees may take beyond their share per page: a partly used word
#: per level in each of the 1 + NCLASSES trees.
TREE_SLACK_BYTES = 8 * (TREE_LEVELS + 1) * (1 + NCLASSES)
#: The most unused words at the end of the metadata (meta_words), in bytes.
META_PAD_BYTES = 8 * 7


@register_jitable
def level_words(npages, j):
    """Return the words of level ``j`` of a tree over ``npages`` pages."""
    n = (npages + TREE_FANOUT - 1) >> WORD_SHIFT
    for _ in range(j):
        n = (n + TREE_FANOUT - 1) >> WORD_SHIFT
    return n


@register_jitable
def tree_levels(npages):
    """Return the levels of a tree over ``npages`` pages (1: level 0 alone)."""
    k = 1
    n = (npages + TREE_FANOUT - 1) >> WORD_SHIFT
    while n > 1:
        n = (n + TREE_FANOUT - 1) >> WORD_SHIFT
        k += 1
    return k


@register_jitable
def level_start(npages, j):
    """Return the offset of level ``j``'s first word from the tree's start."""
    start = 0
    for i in range(j):
        start += level_words(npages, i)
    return start


@register_jitable
def tree_words(npages):
    """Return the words of one tree over ``npages`` pages (every level)."""
    return level_start(npages, tree_levels(npages))


@register_jitable
def free_tree_init(npages, j, i):
    """Return word ``i`` of level ``j`` of a free-page index with every page free."""
    span = 1 << (WORD_SHIFT * (j + 1))  # pages under one word of level j
    lo = i * span
    n = min(span, npages - lo)
    if j == 0:
        return (1 << n) - 1
    return n


#: The smallest capacity: one page (of the default size; a heap of smaller
#: pages may be as small as one of them).
MIN_CAPACITY = PAGE
#: The smallest buffer that holds one page and its metadata.
MIN_MEMORY_BYTES = memory_for_pages(1)
#: Bytes of metadata each default page costs, at most (meta_bytes_per_page).
META_BYTES_PER_PAGE = meta_bytes_per_page(PAGE_SHIFT)


@register_jitable
def stripe_word(stripe, field):
    """Return the metadata word of counter ``field`` in ``stripe``."""
    return STRIPE_BASE + stripe * STRIPE_STRIDE + field


@register_jitable
def spread_log_max(npages, sms):
    """Return log2 of the most hint slots a class may use (H_SPREAD_MAX).

    Enough slots for every SM to fill its own slab (``sms`` rounded up to a
    power of two), but at most one per PAGES_PER_SLOT pages of the heap (a
    slot holds a page per class in use) and at most HINT_SLOTS.
    """
    e = 0
    while (2 << e) <= HINT_SLOTS and (1 << e) < sms and (2 << e) * PAGES_PER_SLOT <= npages:
        e += 1
    return e


@register_jitable
def spread_word(c):
    """Return the metadata word of class ``c``'s spread (log2 of its slots in use)."""
    return HINT_BASE + c * HINT_STRIDE


@register_jitable
def hint_word(c, slot):
    """Return the metadata word of class ``c``'s hint in ``slot``."""
    return HINT_BASE + c * HINT_STRIDE + 1 + slot


# ================================================================ grant
# What a warp's leader won for its group in one round, broadcast as one int64:
# bits  0..15  bump: first block          reuse: bits 0..31 are the mask of
# bits 16..31  bump: count                       blocks won in word w
# bits 32..36  reuse: the bitmap word w; bump: bit 32 set if the page was
#              taken from FREE by this grant (GRANT_TOOK)
# bit  37      set for a reuse grant
# bits 38..62  page + 1 (0: nothing was won); bit 63 clear
GRANT_FIRST_MASK = (1 << 16) - 1
GRANT_COUNT_SHIFT = 16
GRANT_COUNT_MASK = (1 << 16) - 1
GRANT_WORD_SHIFT = 32
GRANT_WORD_MASK = (1 << 5) - 1
GRANT_REUSE = 1 << 37
GRANT_PAGE_SHIFT = 38
#: In a bump grant (whose word field is unused): the page was FREE and this
#: grant's ``cas`` made it a slab (the leader then updates the page index).
GRANT_TOOK = 1 << GRANT_WORD_SHIFT


@register_jitable
def bump_grant(page, first, count):
    """Return the grant of blocks ``first``..``first + count - 1`` of ``page``."""
    return ((page + 1) << GRANT_PAGE_SHIFT) | (count << GRANT_COUNT_SHIFT) | first


@register_jitable
def reuse_grant(page, w, mask):
    """Return the grant of the blocks whose bits are ``mask`` in word ``w`` of ``page``."""
    return ((page + 1) << GRANT_PAGE_SHIFT) | GRANT_REUSE | (w << GRANT_WORD_SHIFT) | mask


@register_jitable
def grant_page(g):
    """Return the page of grant ``g`` (-1: nothing was won)."""
    return (g >> GRANT_PAGE_SHIFT) - 1


@register_jitable
def grant_count(g):
    """Return how many blocks grant ``g`` holds."""
    if g & GRANT_REUSE:
        return popc32(g & WORD_MASK)
    return (g >> GRANT_COUNT_SHIFT) & GRANT_COUNT_MASK


@register_jitable
def grant_block(g, k):
    """Return the slab block index of the ``k``-th block of grant ``g``."""
    if g & GRANT_REUSE:
        w = (g >> GRANT_WORD_SHIFT) & GRANT_WORD_MASK
        return w * BITS_PER_WORD + nth_set_bit(g & WORD_MASK, k)
    return (g & GRANT_FIRST_MASK) + k


# ============================================================ bump word
# H_BUMP, the current bump chunk:
# bits  0..23  cursor: bytes handed out from the current chunk
# bits 24..37  count: bump blocks served from it (a chunk holds <= 4096)
# bits 38..62  page + 1 of the chunk's head (0: no chunk yet); bit 63 clear
BUMP_CURSOR_MASK = (1 << 24) - 1
BUMP_COUNT_SHIFT = 24
BUMP_COUNT_MAX = (1 << 14) - 1
BUMP_PAGE_SHIFT = 38
#: Pages in a bump chunk (fewer in heaps of under 4 * BUMP_CHUNK_PAGES pages).
BUMP_CHUNK_PAGES = 4


@register_jitable
def pack_bump(page, count, cursor):
    """Return the bump word for chunk ``page`` (-1: none), ``count``, ``cursor``."""
    return ((page + 1) << BUMP_PAGE_SHIFT) | (count << BUMP_COUNT_SHIFT) | cursor


@register_jitable
def bump_page(w):
    """Return the head page of bump word ``w``'s chunk (-1: none)."""
    return (w >> BUMP_PAGE_SHIFT) - 1


@register_jitable
def bump_count(w):
    """Return the blocks served from bump word ``w``'s chunk."""
    return (w >> BUMP_COUNT_SHIFT) & BUMP_COUNT_MAX


@register_jitable
def bump_cursor(w):
    """Return the bytes handed out from bump word ``w``'s chunk."""
    return w & BUMP_CURSOR_MASK


@register_jitable
def bump_chunk_pages(npages):
    """Return the pages of a bump chunk in a heap of ``npages`` pages."""
    k = npages // 4
    if k > BUMP_CHUNK_PAGES:
        return BUMP_CHUNK_PAGES
    if k < 1:
        return 1
    return k


# ============================================================ scope state
# A thread's scoped-scratch state (and every mark) is one int64:
# bits  0..7   depth: open scopes
# bits  8..27  cursor / ALIGN: bytes used in the current chunk, header included
# bits 28..62  offset / ALIGN + 1 of the current chunk (0: no chunk); bit 63 clear
SCOPE_NONE = 0
SCOPE_DEPTH_MAX = (1 << 8) - 1
SCOPE_CURSOR_SHIFT = 8
SCOPE_CURSOR_MASK = (1 << 20) - 1
SCOPE_CHUNK_SHIFT = 28
#: Bytes at the start of each scoped chunk: the chunk header below.
SCOPE_HEADER = 32
#: Chunk header fields (byte offsets, little-endian int64 each): previous and
#: next chunk's offset + 1 (0: none), the chunk's size in bytes.
CHUNK_PREV = 0
CHUNK_NEXT = 8
CHUNK_SIZE = 16
#: Smallest and largest scoped chunk (the cursor must fit in 20 x 16 bytes).
SCOPE_MIN_CHUNK = 256
SCOPE_MAX_CHUNK = (SCOPE_CURSOR_MASK + 1) * ALIGN - PAGE


@register_jitable
def pack_scope(chunk, cursor, depth):
    """Return the scope state for chunk offset ``chunk`` (-1: none), ``cursor``, ``depth``."""
    return ((((chunk >> ALIGN_SHIFT) + 1) << SCOPE_CHUNK_SHIFT)
            | ((cursor >> ALIGN_SHIFT) << SCOPE_CURSOR_SHIFT) | depth)


@register_jitable
def scope_chunk(s):
    """Return the chunk offset of scope state ``s`` (-1: none)."""
    if s >> SCOPE_CHUNK_SHIFT == 0:
        return -1
    return scope_chunk_had(s)


@register_jitable
def scope_chunk_had(s):
    """Return the chunk offset of scope state ``s``, which has a chunk (no test for none)."""
    return ((s >> SCOPE_CHUNK_SHIFT) - 1) << ALIGN_SHIFT


@register_jitable
def scope_cursor(s):
    """Return the cursor (bytes) of scope state ``s``."""
    return ((s >> SCOPE_CURSOR_SHIFT) & SCOPE_CURSOR_MASK) << ALIGN_SHIFT


@register_jitable
def scope_advance(s, nbytes):
    """Return scope state ``s`` with its cursor moved on by ``nbytes`` (aligned)."""
    return s + ((nbytes >> ALIGN_SHIFT) << SCOPE_CURSOR_SHIFT)


@register_jitable
def scope_depth(s):
    """Return the depth of scope state ``s``."""
    return s & SCOPE_DEPTH_MAX


# ============================================================ debug record
# A debug heap's ``debug`` array (int64 words):
#   [0]                      records written (and attempted beyond the room)
#   [RECORD_BASE + i * RECORD_WORDS + field]   record i, fields below
# A debug block of n requested bytes is a normal block of at least
# max(n + GUARD, DEBUG_MIN_BLOCK) bytes: [0, n) the user's, [n, n + GUARD)
# guard bytes. n itself is kept outside the arena, where no overrun reaches
# it: the debug heap's ``sizes`` array (uint16, one entry per DEBUG_MIN_BLOCK
# bytes of arena) holds the block's slack, its real size minus n (below
# PAGE + GUARD, so it fits), at index offset >> DEBUG_SLOT_SHIFT. Debug
# blocks are at least DEBUG_MIN_BLOCK bytes apart, so two never share one.
GUARD = 8
DEBUG_SLOT_SHIFT = 5
DEBUG_MIN_BLOCK = 1 << DEBUG_SLOT_SHIFT
GUARD_BYTE = 0xFD
POISON_BYTE = 0xDB
RECORDS = 64
RECORD_BASE = 8
RECORD_WORDS = 4
R_KIND = 0
R_OFFSET = 1
R_BLOCK = 2    # linear block index in the grid
R_THREAD = 3   # linear thread index in the block
DEBUG_WORDS = RECORD_BASE + RECORDS * RECORD_WORDS
KIND_INVALID_FREE = 1
KIND_GUARD = 2
KIND_SCOPED_REUSE = 3
#: ``view`` at an offset not a multiple of its dtype's alignment (porting API).
KIND_MISALIGNED_VIEW = 4
#: ``realloc`` or ``usable_size`` of an offset that is no live block.
KIND_INVALID_BLOCK = 5


@register_jitable
def record_word(i, field):
    """Return the debug word of ``field`` in record ``i``."""
    return RECORD_BASE + i * RECORD_WORDS + field


@register_jitable
def debug_size_slots(npages, ps=PAGE_SHIFT):
    """Return the ``sizes`` entries of a debug heap of ``npages`` pages of ``2**ps`` bytes."""
    return npages << (ps - DEBUG_SLOT_SHIFT)


class Geometry(NamedTuple):
    """A heap's geometry: every figure the host needs of it, computed once.

    Made by :func:`geometry` when a heap is built (``heap.geometry``): the
    host reads its figures there, not one call into this module at a time.
    Kernels read the same figures from the metadata array: its length (the
    pages) and its type (the page shift, :class:`devalloc.ctx.PagedMeta`).
    """

    #: Pages of the arena, and log2 of their bytes.
    npages: int
    page_shift: int
    #: ``int64`` words of the metadata (:func:`meta_words`).
    meta_words: int
    #: The metadata word where the free-page index starts (:func:`free_tree`).
    free_tree_at: int
    #: log2 of the most hint slots a size class may spread over (:func:`spread_log_max`).
    spread_log_max: int
    #: Entries of a debug heap's table of requested sizes (:func:`debug_size_slots`).
    debug_slots: int

    @property
    def arena_bytes(self):
        """Bytes of the arena: what the heap can hand out."""
        return self.npages << self.page_shift

    @property
    def meta_bytes(self):
        """Bytes of the metadata, beside the arena."""
        return 8 * self.meta_words

    @property
    def memory_bytes(self):
        """Bytes of the arena and its metadata together (:func:`memory_for_pages`)."""
        return self.arena_bytes + self.meta_bytes


def geometry(npages, ps=PAGE_SHIFT, sms=1):
    """Return the :class:`Geometry` of a heap of ``npages`` pages of ``2**ps`` bytes.

    ``sms``: the device's SM count (the spread's bound). Host code only.
    """
    return Geometry(npages, ps, meta_words(npages, ps), free_tree(npages, ps),
                    spread_log_max(npages, sms), debug_size_slots(npages, ps))


# ============================================================ trace record
# An observed heap's ``trace`` array (int64 words), Heap(trace=N):
#   [0]                                   events attempted (the sequence counter)
#   [TRACE_BASE + i * TRACE_WORDS + field] event i (its sequence number), below
# Only the first N events are kept; the rest are counted in [0] and dropped.
TRACE_BASE = 8
TRACE_WORDS = 4
T_OP = 0
T_NBYTES = 1
T_OFFSET = 2    # the block's offset (NULL: failed); a mark's or release's mark
T_THREAD = 3    # global linear thread index
OP_ALLOC = 1
OP_FREE = 2     # a valid free
OP_BUMP = 3
OP_SCOPED = 4
OP_RELEASE = 5
OP_MARK = 6
OP_FREE_INVALID = 7  # a free that changed nothing (counted in invalid_frees)
OP_NAMES = {OP_ALLOC: "alloc", OP_FREE: "free", OP_BUMP: "bump", OP_SCOPED: "scoped",
            OP_RELEASE: "release", OP_MARK: "mark", OP_FREE_INVALID: "free_invalid"}


@register_jitable
def trace_word(i, field):
    """Return the trace word of ``field`` in event ``i``."""
    return TRACE_BASE + i * TRACE_WORDS + field


@register_jitable
def trace_words(n):
    """Return the ``trace`` array's length for ``n`` kept events."""
    return TRACE_BASE + n * TRACE_WORDS


# ============================================================ profile counters
# An observed heap's ``prof`` array (int64 words), Heap(profile=True):
# PROF_STRIPES stripes of one 128-byte line each, chosen by block index as
# the failure stripes are; counter k of stripe s is word s * PROF_STRIDE + k.
PROF_STRIPES = 8
PROF_STRIDE = 16
P_CAS_RETRIES = 0      # state-word cas that lost (slab reserve, page take, retire)
P_PAGES_SCANNED = 1    # pages tried by the slab search, runs tried by the large search
P_SLABS_TAKEN = 2      # free pages that became slabs
P_SLABS_RETIRED = 3    # empty slabs that became free pages
P_LARGE_SCANS = 4      # passes of the large-block scan
P_HINT_MOVES = 5       # class hints moved to another page
P_FAILED_TOO_BIG = 6   # NULL: larger than the arena (alloc, bump, scoped)
P_FAILED_NONPOSITIVE = 7  # NULL: nbytes <= 0
P_FAILED_NO_PAGE = 8   # NULL for a size the arena could hold (failed_full + any residual)
P_SPREAD_WIDENED = 9   # a class's spread widened (a leader gave up on its hinted slab)
P_FAILED_FULL = 10     # NULL after a search that proved the heap full (issue 25)
PROF_COUNTERS = 11
PROF_WORDS = PROF_STRIPES * PROF_STRIDE
#: ``usage().profile`` keys, by counter.
PROF_NAMES = ("cas_retries", "pages_scanned", "slabs_taken", "slabs_retired",
              "large_scans", "hint_moves", "failed_too_big", "failed_nonpositive",
              "failed_no_page", "spread_widened", "failed_full")
#: ``usage().profile`` keys computed on the host: ``failed_residual`` is
#: ``failed_no_page - failed_full``, the NULLs no search proved (0 since
#: issue 25: docs/correctness.md, "Progress").
PROF_DERIVED = ("failed_residual",)


@register_jitable
def prof_word(stripe, counter):
    """Return the ``prof`` word of ``counter`` in ``stripe``."""
    return stripe * PROF_STRIDE + counter


# ============================================================ footprint of a size histogram
# What a heap holds when a given set of blocks is live at once: pure
# arithmetic over the size classes, for sizing and for bench/sweep.py.


def class_round(nbytes, sub_bits=SUB_BITS):
    """Return ``nbytes`` (1 <= nbytes <= MAX_SMALL) rounded up to its size class.

    With the default ``sub_bits`` that is ``class_size(size_class(nbytes))``.
    Another ``sub_bits`` (0 to 4) asks what a class table split into
    ``2**sub_bits`` classes per power of two above LINEAR_MAX would give
    (a what-if for bench/sweep.py: the device's table is SUB_BITS's); at
    and below LINEAR_MAX the classes are multiples of ALIGN either way.
    """
    if nbytes <= LINEAR_MAX:
        return align_up(nbytes)
    e = floor_log2(nbytes - 1)
    step = 1 << max(e - sub_bits, ALIGN_SHIFT)
    return (nbytes + step - 1) & ~(step - 1)


def histogram_pages(hist, spread=1, page=PAGE, sub_bits=SUB_BITS):
    """Return the pages a heap holds while the blocks of ``hist`` are live at once.

    ``hist`` maps a request size in bytes (1 or more) to the number of live
    blocks of that size. A block up to MAX_SMALL takes a slot of its size
    class: each class in use holds the slabs its blocks fill,
    ``ceil(blocks / class_blocks)``, at least (slabs packed full, as one
    block at a time fills them). ``spread`` > 1 gives the most a class
    may hold when its blocks are spread over up to ``spread`` slabs side by
    side (a GPU under contention: ``Heap(spread=)``): ``spread - 1`` more
    partly filled slabs, never more slabs than blocks. A larger block takes
    whole pages. Two what-ifs (the heap's own are the defaults): ``page``
    (a power of two from 1 KiB) asks what pages of another size would
    hold, a class larger than such a page taking whole pages per block;
    ``sub_bits`` (0 to 4) another split of the classes (:func:`class_round`).
    Raises ValueError for a size below 1, a negative count, a spread below
    1, a page that is not a power of two from 1 KiB to 1 MiB or a
    ``sub_bits`` outside 0 to 4.
    """
    if spread < 1:
        raise ValueError(f"spread must be at least 1, got {spread}")
    if page & (page - 1) or not 1024 <= page <= 1 << 20:
        raise ValueError(f"page must be a power of two from 1024 to 2**20, got {page}")
    if sub_bits not in range(5):
        raise ValueError(f"sub_bits must be 0, 1, 2, 3 or 4, got {sub_bits}")
    per_class = {}  # class size -> live blocks
    pages = 0
    for nbytes, n in hist.items():
        nbytes, n = int(nbytes), int(n)
        if nbytes < 1 or n < 0:
            raise ValueError(f"a histogram maps sizes >= 1 to counts >= 0, got {nbytes}: {n}")
        if n == 0:
            continue
        if nbytes > min(MAX_SMALL, page // 2):  # max_small: a slab holds two blocks or more
            pages += n * (-(-nbytes // page))
            continue
        size = class_round(nbytes, sub_bits)
        per_class[size] = per_class.get(size, 0) + n
    for size, n in per_class.items():
        pages += min(n, -(-n // (page // size)) + spread - 1)
    return pages


def histogram_bytes(hist, spread=1, page=PAGE, sub_bits=SUB_BITS):
    """Return :func:`histogram_pages` in bytes: a heap's peak for that set of live blocks."""
    return histogram_pages(hist, spread, page, sub_bits) * page


# ============================================================ ties
assert class_size(NCLASSES - 1) == MAX_SMALL and size_class(MAX_SMALL) == NCLASSES - 1
assert class_size(LINEAR_CLASSES - 1) == LINEAR_MAX == 1 << LINEAR_SHIFT
assert BITS_PER_WORD == WARP_SIZE == 32  # ffs/popc/match masks are 32-bit
assert BITMAP_WORDS - 1 <= GRANT_WORD_MASK  # a reuse grant names any word
assert MAX_SLAB_BLOCKS <= min(LIVE_MASK, CURSOR_MASK, GRANT_FIRST_MASK, GRANT_COUNT_MASK)
assert COUNT_SHIFT + COUNT_BITS == 63  # the state word is never negative
assert (MAX_PAGES + 1) < 1 << (63 - max(GRANT_PAGE_SHIFT, BUMP_PAGE_SHIFT))
assert BUMP_CHUNK_PAGES * PAGE <= BUMP_CURSOR_MASK
assert SCOPE_MAX_CHUNK + PAGE == (SCOPE_CURSOR_MASK + 1) << ALIGN_SHIFT
assert CHUNK_SIZE + 8 <= SCOPE_HEADER
assert DEBUG_WORDS == record_word(RECORDS, R_KIND)
assert PAGE + GUARD < 1 << 16  # a debug block's slack fits a uint16 sizes entry
assert HINT_STRIDE >= 1 + HINT_SLOTS and HINT_STRIDE % 16 == 0 and HINT_BASE % 16 == 0
assert H_SPREAD_MAX < STRIPE_BASE
assert HEADER_WORDS < 1 << 16  # a hint's index packs into slab._search's flags word
assert len(OP_NAMES) == OP_FREE_INVALID and len(PROF_NAMES) == PROF_COUNTERS <= PROF_STRIDE
assert tree_levels(MAX_PAGES) <= TREE_LEVELS
assert all(tree_words(n) <= tree_stride(n) for n in (1, 31, 32, 33, 1023, 1025, 32769, MAX_PAGES))
assert tree_levels(TREE_FANOUT) == 1 and tree_levels(TREE_FANOUT + 1) == 2
assert level_words(MAX_PAGES, TREE_LEVELS - 1) == 1  # the top level is one word
# A count word holds at most every page of the heap: far below bit 63.
assert MAX_PAGES < 1 << 62
assert meta_words(MAX_PAGES) < 1 << 31  # metadata indices fit 32 bits (device _at)
assert PAGE_SHIFT_MIN + 7 >= PAGE_SHIFT  # meta_words' length code names every page shift
assert max_small(PAGE_SHIFT) == MAX_SMALL
assert all(page_shift_of(meta_words(n, ps)) == ps
           and free_tree(n, ps) == bits_base(n) + n * bitmap_words(ps)
           and room_tree(n, NCLASSES, ps) <= meta_words(n, ps) < room_tree(n, NCLASSES, ps) + 8
           for ps in range(PAGE_SHIFT_MIN, PAGE_SHIFT + 1) for n in (1, 2, 33, 1025))
