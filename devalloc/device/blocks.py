"""Pure arithmetic of the porting API: block sizes, alignment, byte counts.

What ``alloc(n)`` really hands out (:func:`served_size`), which sizes give
a block aligned to a power of two (:func:`aligned_request`), how many bytes
an array of a shape takes with overflow caught (:func:`array_bytes`,
:func:`calloc_bytes`), and where the fields of a block carved into
mixed-dtype parallel arrays start (:func:`carve_at`, :func:`carve_end`).
Plain integer functions, ``register_jitable``: the device code
(:mod:`devalloc.device.porting`) calls the very same ones the unit tests
check on the host.

Alignment every block start has (relative to the arena, whose address is
a multiple of 256): 16 bytes always (ALIGN); a block of a size class is at
``page + b * size``, so it is aligned to the largest power of two dividing
its class size (32 for the 32-, 96- and 160-byte classes, 64 for 64, 192,
320, ...); a large block (more than MAX_SMALL bytes) starts a page.
"""

from numba.cuda.extending import register_jitable

from .. import layout as L

#: Largest ``count * itemsize`` (or array size) the porting calls accept: any
#: larger request cannot be served by any heap (MAX_PAGES pages), and every
#: product below it fits an int64 with room to spare.
MAX_BYTES = L.MAX_PAGES << L.PAGE_SHIFT


@register_jitable
def served_size(nbytes, ps=L.PAGE_SHIFT):
    """Return the bytes of the block ``alloc(nbytes)`` hands out (0 if none).

    In a heap of pages of ``2**ps`` bytes: its size class's size up to
    ``layout.max_small(ps)``, whole pages above; 0 for ``nbytes <= 0`` or
    more than MAX_BYTES.
    """
    if nbytes <= 0 or nbytes > MAX_BYTES:
        return 0
    if nbytes <= L.max_small(ps):
        return L.class_size(L.size_class(nbytes))
    return L.pages_for(nbytes, ps) << ps


@register_jitable
def lowbit(x):
    """Return the largest power of two dividing ``x`` (``x > 0``)."""
    return x & -x


@register_jitable
def block_alignment(size, ps=L.PAGE_SHIFT):
    """Return the alignment (relative to the arena) of every block of ``size`` bytes.

    ``size`` is a served size in a heap of pages of ``2**ps`` bytes: a class
    size, or whole pages.
    """
    if size > L.max_small(ps):
        return 1 << ps
    return lowbit(size)


@register_jitable
def aligned_request(nbytes, align, ps=L.PAGE_SHIFT):
    """Return the request whose block is aligned to ``align``; 0 for 0 bytes, -1 if none.

    -1 (a request ``alloc`` refuses: a failure) for a bad ``align`` or
    ``nbytes`` < 0 or too large; 0 (an empty request, not a failure) for 0
    bytes with a good ``align``.

    ``align`` must be a power of two from 1 to the heap's page (``2**ps``
    bytes: large blocks start pages, nothing is aligned beyond); the result is
    ``nbytes`` rounded up to a multiple of ``align`` (at least ``align``),
    whose size class is then a multiple of ``align`` too: within one
    power of two the classes are steps of a quarter of it, so a multiple of
    ``align`` rounds up to a class that is a multiple of ``align`` or of the
    step (which ``align`` then divides). Checked for every size and
    alignment in tests/test_porting.py.
    """
    if nbytes < 0 or nbytes > MAX_BYTES or align <= 0 or align > (1 << ps) or align & (align - 1):
        return -1
    if nbytes == 0:
        return 0
    n = (nbytes + align - 1) & ~(align - 1)
    if n < align:
        n = align
    return n


#: What the byte counts below return for a product too large for any heap:
#: a request ``alloc`` refuses (NULL, counted as too big), never a wrapped one.
TOO_BIG = MAX_BYTES + 1


@register_jitable
def calloc_bytes(count, itemsize):
    """Return ``count * itemsize``: 0 when either is 0, -1 (refused) when either is
    negative, TOO_BIG past MAX_BYTES.

    Never a wrapped product: both factors are checked before multiplying.
    """
    if count < 0 or itemsize < 0:
        return -1
    if count == 0 or itemsize == 0:
        return 0
    if count > MAX_BYTES or itemsize > MAX_BYTES or count > MAX_BYTES // itemsize:
        return TOO_BIG
    return count * itemsize


@register_jitable
def array_bytes(d0, d1, d2, itemsize):
    """Return the bytes of a ``(d0, d1, d2)`` array of ``itemsize``-byte items.

    0 when any dimension is 0 (nothing to allocate); -1 when one is negative
    (a request ``alloc`` refuses); TOO_BIG when the product exceeds MAX_BYTES.
    """
    if d0 < 0 or d1 < 0 or d2 < 0:
        return -1
    return calloc_bytes(d2, calloc_bytes(d1, calloc_bytes(d0, itemsize)))


@register_jitable
def carve_at(pos, itemsize):
    """Return ``pos`` rounded up to where a field of ``itemsize``-byte items starts.

    Where a field starts when the previous field of the block ended at byte
    ``pos``: a multiple of ``itemsize``'s largest power-of-two factor, up to
    16 (a block's own alignment). For a scalar that is its itemsize; for a
    record (structured dtype) it is at least the record's alignment, which
    divides its itemsize.
    """
    a = itemsize & -itemsize
    if a > 16:
        a = 16
    return (pos + a - 1) & ~(a - 1)


@register_jitable
def carve_end(pos, count, itemsize):
    """Return where a field of ``count`` items placed at or after ``pos`` ends.

    ``carve_end(carve_end(0, n, 4), n, 8)`` is the bytes a block needs for an
    int32 and a float64 array of ``n`` items each, padding included.
    """
    c = count
    if c < 0:
        c = 0
    return carve_at(pos, itemsize) + c * itemsize
