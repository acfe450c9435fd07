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
#: Per-class hint: a page that recently served the class.
HINT_BASE = STRIPE_BASE + STRIPES * STRIPE_STRIDE
HEADER_WORDS = HINT_BASE + NCLASSES
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
