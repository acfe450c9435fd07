"""Several arrays in one block: ``carve``, ``carve_end`` and ``realloc_carved``.

A block laid out with ``carve`` holds fields (parallel arrays of ``count``
items each, in a fixed order, each aligned): where a field starts depends
on ``count``. ``realloc`` copies bytes, so a carved block it grows keeps
its first field and loses the others' places; ``realloc_carved`` knows the
layout and moves each field to its place for the new count. The byte
arithmetic is :mod:`devalloc.device.blocks` (``carve_at``, ``carve_end``: pure,
unit-tested); the calls under it are the public ``alloc``, ``free``,
``usable_size`` and ``view``, so every kind of heap is served.

Who may call: any thread, in divergent code too, as ``alloc``/``free``.
``carve`` returns an array and is inlined into its caller on the GPU.
"""

from numba import config, cuda, int64

from .. import layout as L
from . import api
from . import blocks as B
from ._meta import _count
from .porting import _copy, _sim_dtype, usable_size, view


@cuda.jit(device=True)
def carve_end(pos, count, itemsize):
    """Return where ``count`` items of ``itemsize`` bytes end, placed aligned at or after ``pos``.

    Pure arithmetic (:func:`devalloc.device.blocks.carve_end`): chain it to size a
    block of several parallel arrays, padding included.
    """
    return B.carve_end(int64(pos), int64(count), int64(itemsize))


def carve(ctx, off, pos, count, dtype):
    """Return ``(array, next_pos)``: ``count`` items of ``dtype`` at the first aligned
    byte at or after ``pos`` in the block at ``off``, and where they end.

    Lays out mixed-dtype parallel arrays in one block with the padding done:
    size the block with ``carve_end``, then carve each array in the same
    order from ``pos = 0``. No atomics. The block's start is 16-aligned, and
    each field starts at a multiple of its itemsize's largest power-of-two
    factor (up to 16), so every field is aligned for its dtype (records
    included). To grow or shrink such a block, ``realloc_carved``.
    """
    itemsize = _sim_dtype(ctx, off, count, dtype).itemsize
    at = B.carve_at(int64(pos), itemsize)
    a = view(ctx, off + at, count, dtype)
    return a, at + _sim_total(count) * itemsize


def _sim_total(count):
    if isinstance(count, tuple):
        t = 1
        for d in count:
            t *= int(d)
        return t
    return int(count)


@cuda.jit(device=True)
def _carved_bytes(count, sizes):
    """Return the bytes of fields of ``count`` items of each of ``sizes``, in order.

    A negative count is 0; past any heap, TOO_BIG (what ``alloc`` refuses),
    never a wrapped product.
    """
    end = int64(0)
    c = max(int64(count), int64(0))
    for s in sizes:
        field = B.calloc_bytes(c, int64(s))
        if field == B.TOO_BIG:
            return int64(B.TOO_BIG)
        end = B.carve_at(end, int64(s)) + field
    if end > B.MAX_BYTES:
        return int64(B.TOO_BIG)
    return end


@cuda.jit(device=True)
def _copy_bytes(ctx, dst, src, n):
    """Copy ``n`` bytes from ``src`` to ``dst`` (distinct blocks): words when both are
    8-aligned, else bytes."""
    if (dst | src) & 7 == 0:
        _copy(ctx, dst, src, n)
    else:
        arena = ctx.arena
        for j in range(n):
            arena[dst + j] = arena[src + j]


@cuda.jit(device=True)
def _realloc_carved(ctx, off, count, new_count, sizes):
    """``realloc_carved`` with the fields' itemsizes (a tuple of ints) for ``dtypes``."""
    o = int64(off)
    n = int64(count)
    m = int64(new_count)
    if o == L.NULL:
        return api.alloc(ctx, _carved_bytes(m, sizes))
    have = usable_size(ctx, o)  # (a debug heap records an offset that is no block)
    if have == 0 or n < 0 or _carved_bytes(n, sizes) > have:
        _count(ctx.meta, L.S_INVALID)  # no block, or not one of count items per field
        return int64(L.NULL)
    if m == n:
        return o
    new = api.alloc(ctx, _carved_bytes(m, sizes))  # m <= 0: NULL, counted as alloc counts it
    if new == L.NULL:
        return new  # the old block untouched, still the caller's
    keep = min(n, m)
    src = int64(0)
    dst = int64(0)
    for s in sizes:
        size = int64(s)
        src = B.carve_at(src, size)
        dst = B.carve_at(dst, size)
        _copy_bytes(ctx, new + dst, o + src, keep * size)
        src += n * size
        dst += m * size
    api.free(ctx, o)
    return new


def _check_dtypes(dtypes, tuple_class, n):
    from numba.core.errors import TypingError

    if not isinstance(dtypes, tuple_class) or n == 0:
        raise TypingError(
            "devalloc.realloc_carved: dtypes must be a tuple of the fields' dtypes in the "
            f"order they were carved, such as (np.int32, np.float64), got {dtypes}")


def realloc_carved(ctx, off, count, new_count, dtypes):
    """Resize a block laid out by ``carve``: ``count`` -> ``new_count`` items per field.

    ``dtypes``: the fields' dtypes, a tuple in the order they were carved
    from ``pos = 0`` (``(np.int32, np.float64)``), every field ``count``
    items long. A new block is allocated for ``new_count`` items per field
    (``alloc``'s atomics), each field's first ``min(count, new_count)``
    items are copied to where ``carve`` puts that field for ``new_count``,
    and the old block is freed (``free``'s atomics); carve the fields
    again from the offset it returns. ``new_count == count`` returns
    ``off`` (no atomic); ``off`` NULL allocates (as ``realloc(ctx, NULL, n)``).

    :returns: the new offset, or NULL: when the new block cannot be served
        (counted in ``failed``; ``new_count <= 0`` asks for 0 bytes, counted
        in ``empty_requests``: free the block with ``free``), the old block
        is untouched and still the caller's; when ``off`` is no block, or a
        block too small for ``count`` items per field (counted in
        ``invalid_frees``; a debug heap records an offset that is no block).
    """
    _check_dtypes(dtypes, tuple, len(dtypes) if isinstance(dtypes, tuple) else 0)
    sizes = tuple(_sim_dtype(ctx, 0, 1, d).itemsize for d in dtypes)
    return _realloc_carved(ctx, off, count, new_count, sizes)


if not config.ENABLE_CUDASIM:
    from numba.core import types
    from numba.core.errors import TypingError
    from numba.cuda.extending import overload
    from numba.np.numpy_support import as_dtype

    from .intrinsics import check_view_args
    from .porting import _inline_arrays

    @overload(carve, target="cuda", inline="always")
    def _carve_impl(ctx, off, pos, count, dtype):
        _inline_arrays("carve")
        itemsize = as_dtype(check_view_args(off, count, dtype)).itemsize
        if isinstance(count, types.Integer):
            def impl(ctx, off, pos, count, dtype):
                at = B.carve_at(int64(pos), itemsize)
                return view(ctx, off + at, count, dtype), at + int64(count) * itemsize
        else:
            def impl(ctx, off, pos, count, dtype):
                at = B.carve_at(int64(pos), itemsize)
                a = view(ctx, off + at, count, dtype)
                return a, at + int64(a.size) * itemsize
        return impl

    @overload(realloc_carved, target="cuda", jit_options={"forceinline": True})
    def _realloc_carved_impl(ctx, off, count, new_count, dtypes):
        _check_dtypes(dtypes, types.BaseTuple,
                      len(dtypes) if isinstance(dtypes, types.BaseTuple) else 0)
        for t in (off, count, new_count):
            if not isinstance(t, types.Integer):
                raise TypingError("devalloc.realloc_carved: off, count and new_count must be "
                                  f"integers, got {off}, {count} and {new_count}")
        sizes = tuple(as_dtype(check_view_args(types.int64, types.int64, d)).itemsize
                      for d in dtypes)

        def impl(ctx, off, count, new_count, dtypes):
            return _realloc_carved(ctx, off, count, new_count, sizes)
        return impl
