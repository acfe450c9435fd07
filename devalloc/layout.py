"""Pure layout arithmetic: size classes, page geometry, metadata offsets.

Nothing here touches a device. Every function is plain integer arithmetic:
it runs on the host as ordinary Python (and is unit-tested there), and
``register_jitable`` lets device code call the very same function, so there
is one definition of the layout. Keep them free of Python-only constructs
(no ``int.bit_length``, no tuples indexed at run time, no exceptions).

The heap
--------
A heap of ``capacity`` bytes of device memory is split into

* the **arena**: ``npages`` pages of :data:`PAGE` bytes, the only bytes ever
  handed to users; offsets returned by ``alloc`` index into it;
* the **metadata**: one ``int64`` array of :func:`meta_words` words.

Every page is, at any moment, exactly one of: free; a *slab* of one size
class (blocks of :func:`class_size` bytes tracked by a bitmap); the *head* of
a large block spanning one or more whole pages; or a *tail* page of one.
That is recorded in the page's **state word** (see :func:`pack_state`).

Metadata words (offsets into the ``int64`` metadata array)::

    [0, HEADER_WORDS)                       global words, below
    [STATE_BASE, STATE_BASE + npages)       one state word per page
    [bits_base(npages), + npages * BITMAP_WORDS)
                                            slab bitmaps, 32 bits used per word
"""

from numba.cuda.extending import register_jitable

#: Returned by ``alloc`` when a request cannot be served.
NULL = -1

#: Every block offset and every block size is a multiple of this.
ALIGN = 16

#: Bytes per page: the unit in which slabs and large blocks take the arena.
PAGE_SHIFT = 14
PAGE = 1 << PAGE_SHIFT

#: Bitmap bits used in each ``int64`` metadata word (the low 32 bits, so that
#: every bitmap word stays non-negative and ``ffs``/``popc`` see 32-bit values).
BITS_PER_WORD = 32
#: Largest number of blocks in one slab (16-byte blocks).
MAX_SLAB_BLOCKS = PAGE // ALIGN
#: Bitmap words reserved per page, enough for the smallest class.
BITMAP_WORDS = MAX_SLAB_BLOCKS // BITS_PER_WORD
#: Mask of the bits used in a bitmap word.
WORD_MASK = (1 << BITS_PER_WORD) - 1

#: Size classes: 16..128 in steps of 16, then four steps per power of two up
#: to MAX_SMALL. Requests above MAX_SMALL take whole pages.
NCLASSES = 32
MAX_SMALL = 8192

# ---------------------------------------------------------------- state word
# bits  0..7   tag: FREE, 1 + class for a slab, HEAD or TAIL of a large block
# bits  8..39  n:   live blocks of a slab; pages of a large block (head only)
# bits 40..62  count: successful allocations served from this page, modulo
#              folding (see COUNT_FOLD); survives every change of tag.
# Bit 63 is never set, so a state word is never negative.
TAG_BITS = 8
TAG_MASK = (1 << TAG_BITS) - 1
TAG_FREE = 0
TAG_HEAD = 0x40
TAG_TAIL = 0x41
#: Head of a bump chunk (devalloc.bump); n = its pages. Not freeable.
TAG_BUMP = 0x42
#: A slab being retired: its last block was freed and the retiring thread is
#: clearing its bitmap. No valid operation changes the page until it becomes
#: FREE (a racing double free can: docs/correctness.md, "Known limits").
TAG_RETIRING = 0x43

N_SHIFT = 8
N_BITS = 32
N_MASK = (1 << N_BITS) - 1
N_ONE = 1 << N_SHIFT
COUNT_SHIFT = 40
COUNT_ONE = 1 << COUNT_SHIFT
COUNT_MASK = ((1 << 23) - 1) << COUNT_SHIFT
#: When a page's count field reaches this value, the allocating thread moves
#: it into the global ALLOC_FOLD word; the field never overflows its 23 bits.
COUNT_FOLD = 1 << 22
#: The state word's bit that is set exactly when its count is >= COUNT_FOLD.
COUNT_FOLD_BIT = COUNT_FOLD << COUNT_SHIFT

# A slab splits the n field in two (large heads use all 32 bits of n):
# bits  8..23  live:   blocks handed out and not freed, plus reserved slots
# bits 24..39  cursor: blocks handed out by bumping since the slab was taken
# Blocks at or past the cursor have never been handed out; below it, the
# slab's bitmap marks the blocks that were freed (see devalloc/device.py).
LIVE_MASK = (1 << 16) - 1
CURSOR_SHIFT = 24
CURSOR_ONE = 1 << CURSOR_SHIFT
CURSOR_MASK = (1 << 16) - 1

# ------------------------------------------------------------ global words
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
#: Per-class hints, HINT_SLOTS per class: page + 1 of a slab that recently
#: served the class (0: none yet). A warp uses the slot its hashed warp
#: number picks (:func:`hint_word`), so in a large heap up to HINT_SLOTS slabs
#: of a class fill side by side instead of every warp hitting one word.
HINT_SLOTS = 8
#: A heap gets one slot per this many pages (at least 1, at most HINT_SLOTS).
PAGES_PER_SLOT = 256
HINT_BASE = STRIPE_BASE + STRIPES * STRIPE_STRIDE
HEADER_WORDS = HINT_BASE + NCLASSES * HINT_SLOTS
STATE_BASE = HEADER_WORDS

#: Most pages a heap may have: page indices must fit the bump word (25 bits).
MAX_PAGES = (1 << 25) - 2

#: Bytes of metadata each page costs (its state word and its bitmap).
META_BYTES_PER_PAGE = 8 * (1 + BITMAP_WORDS)
HEADER_BYTES = 8 * HEADER_WORDS
#: The smallest capacity that holds the metadata and one page.
MIN_CAPACITY = HEADER_BYTES + PAGE + META_BYTES_PER_PAGE


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
def size_class(nbytes):
    """Return the size class serving ``nbytes`` (1 <= nbytes <= MAX_SMALL)."""
    m = nbytes - 1
    if m < 128:
        return m >> 4
    e = floor_log2(m)
    sub = (m >> (e - 2)) & 3
    return 8 + (e - 7) * 4 + sub


@register_jitable
def class_size(c):
    """Return the block size in bytes of size class ``c``."""
    if c < 8:
        return (c + 1) << 4
    e = 7 + ((c - 8) >> 2)
    sub = (c - 8) & 3
    return (5 + sub) << (e - 2)


@register_jitable
def class_blocks(c):
    """Return the number of blocks in one slab of class ``c``."""
    return PAGE // class_size(c)


@register_jitable
def pages_for(nbytes):
    """Return the pages a large block of ``nbytes`` bytes takes."""
    return (nbytes + PAGE - 1) >> PAGE_SHIFT


@register_jitable
def bits_base(npages):
    """Return the metadata word where the slab bitmaps start."""
    return STATE_BASE + npages


@register_jitable
def meta_words(npages):
    """Return the number of ``int64`` metadata words for ``npages`` pages."""
    return STATE_BASE + npages * (1 + BITMAP_WORDS)


@register_jitable
def pages_for_capacity(capacity):
    """Return how many pages fit, with their metadata, in ``capacity`` bytes."""
    if capacity < MIN_CAPACITY:
        return 0
    return (capacity - HEADER_BYTES) // (PAGE + META_BYTES_PER_PAGE)


@register_jitable
def capacity_for_pages(npages):
    """Return the smallest capacity whose heap has ``npages`` pages."""
    return HEADER_BYTES + npages * (PAGE + META_BYTES_PER_PAGE)


# ------------------------------------------------------------- bump word
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
def bump_chunk_pages(npages):
    """Return the pages of a bump chunk in a heap of ``npages`` pages."""
    k = npages // 4
    if k > BUMP_CHUNK_PAGES:
        return BUMP_CHUNK_PAGES
    if k < 1:
        return 1
    return k


# ------------------------------------------------------------ scope state
# A thread's scoped-scratch state (and every mark) is one int64:
# bits  0..7   depth: open scopes
# bits  8..27  cursor / 16: bytes used in the current chunk, header included
# bits 28..62  offset / 16 + 1 of the current chunk (0: no chunk); bit 63 clear
SCOPE_NONE = 0
SCOPE_DEPTH_MAX = (1 << 8) - 1
SCOPE_CURSOR_SHIFT = 8
SCOPE_CURSOR_MASK = (1 << 20) - 1
SCOPE_CHUNK_SHIFT = 28
#: Bytes at the start of each scoped chunk: previous, next chunk + 1, size.
SCOPE_HEADER = 32
#: Smallest and largest scoped chunk (the cursor must fit in 20 x 16 bytes).
SCOPE_MIN_CHUNK = 256
SCOPE_MAX_CHUNK = (SCOPE_CURSOR_MASK + 1) * ALIGN - PAGE


@register_jitable
def pack_scope(chunk, cursor, depth):
    """Return the scope state for chunk offset ``chunk`` (-1: none), ``cursor``, ``depth``."""
    return (((chunk >> 4) + 1) << SCOPE_CHUNK_SHIFT) | ((cursor >> 4) << SCOPE_CURSOR_SHIFT) | depth


@register_jitable
def scope_chunk(s):
    """Return the chunk offset of scope state ``s`` (-1: none)."""
    c = s >> SCOPE_CHUNK_SHIFT
    if c == 0:
        return -1
    return (c - 1) << 4


@register_jitable
def scope_cursor(s):
    """Return the cursor (bytes) of scope state ``s``."""
    return ((s >> SCOPE_CURSOR_SHIFT) & SCOPE_CURSOR_MASK) << 4


@register_jitable
def scope_depth(s):
    """Return the depth of scope state ``s``."""
    return s & SCOPE_DEPTH_MAX


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
    """Return the n field (live blocks or pages) of state word ``s``."""
    return (s >> N_SHIFT) & N_MASK


@register_jitable
def state_count(s):
    """Return the allocation-count field of state word ``s``."""
    return (s & COUNT_MASK) >> COUNT_SHIFT


@register_jitable
def slab_tag(c):
    """Return the state tag of a slab of class ``c``."""
    return 1 + c


@register_jitable
def stripe_word(stripe, field):
    """Return the metadata word of counter ``field`` in ``stripe``."""
    return STRIPE_BASE + stripe * STRIPE_STRIDE + field


@register_jitable
def word_valid_mask(c, w):
    """Return the mask of bitmap bits of word ``w`` that name blocks of ``c``."""
    left = class_blocks(c) - w * BITS_PER_WORD
    if left >= BITS_PER_WORD:
        return WORD_MASK
    if left <= 0:
        return 0
    return (1 << left) - 1


@register_jitable
def class_words(c):
    """Return the number of bitmap words a slab of class ``c`` uses."""
    return (class_blocks(c) + BITS_PER_WORD - 1) // BITS_PER_WORD


@register_jitable
def slab_live(s):
    """Return the live field (blocks out plus reserved slots) of slab state ``s``."""
    return (s >> N_SHIFT) & LIVE_MASK


@register_jitable
def slab_cursor(s):
    """Return the cursor field (blocks ever bumped) of slab state ``s``."""
    return (s >> CURSOR_SHIFT) & CURSOR_MASK


@register_jitable
def hint_slots(npages):
    """Return how many hint slots per class a heap of ``npages`` pages uses."""
    k = npages // PAGES_PER_SLOT
    if k < 1:
        return 1
    if k > HINT_SLOTS:
        return HINT_SLOTS
    return k


@register_jitable
def hint_word(c, slot):
    """Return the metadata word of class ``c``'s hint in ``slot``."""
    return HINT_BASE + c * HINT_SLOTS + slot


@register_jitable
def slot_start(npages, slot):
    """Return the page where ``slot`` starts searching while it has no hint.

    Slots start 1/32 of the arena apart, all in the lowest quarter (large
    blocks are taken from the top).
    """
    return slot * (npages // 32)


@register_jitable
def popc32(x):
    """Return the number of set bits of ``x`` (0 <= x < 2**32)."""
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


# ------------------------------------------------------------- grants
# What a warp's leader won for its group in one round (devalloc/device.py),
# broadcast to the group as one int64:
# bits  0..31  bump: first block | count << 16;  reuse: mask of blocks in word w
# bits 32..36  reuse: the bitmap word w
# bit  37      set for a reuse grant
# bits 38..62  page + 1 (0: nothing was won)
GRANT_WORD_SHIFT = 32
GRANT_REUSE = 1 << 37
GRANT_PAGE_SHIFT = 38


@register_jitable
def bump_grant(page, first, count):
    """Return the grant of blocks ``first``..``first + count - 1`` of ``page``."""
    return ((page + 1) << GRANT_PAGE_SHIFT) | (count << 16) | first


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
    return (g >> 16) & 0xFFFF


@register_jitable
def grant_block(g, k):
    """Return the slab block index of the ``k``-th block of grant ``g``."""
    if g & GRANT_REUSE:
        w = (g >> GRANT_WORD_SHIFT) & 31
        return w * BITS_PER_WORD + nth_set_bit(g & WORD_MASK, k)
    return (g & 0xFFFF) + k
