"""Ragged results back on the host side: ``Heap.gather`` and ``Heap.array``.

``gather`` turns per-thread blocks (``counts[i]`` items of ``dtype`` at
``offsets[i]``) into one device array and its row starts, CSR-style, on the
GPU: a lengths kernel, an exclusive scan (numba-cuda has none:
:mod:`devalloc.device.gather`), one copy kernel, and a kernel freeing the
blocks. ``array`` gives a block's bytes as a device array without a copy.
Host code: argument checks and launches; the kernels are device code,
imported on first use (``devalloc.host`` imports none of this).
"""

import numbers

import numpy as np
from numba import config, cuda

from .. import layout as L

#: Threads per block of the gather's kernels other than the scan.
THREADS = 256
#: Most threads the copy kernel launches (each copies a stretch of items);
#: on the simulator a few, since each thread there is a Python thread.
MAX_COPY_THREADS = 256 if config.ENABLE_CUDASIM else 1 << 20
#: Fewest items a copy thread copies (a warp writes 32 such stretches in a row).
COPY_CHUNK = 4


def _scalar_dtype(dtype, who):
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{who}: dtype must be a NumPy scalar type such as np.float32, "
                        f"got {dtype!r}") from e
    if dt.kind not in "biufc" or dt.itemsize > L.ALIGN:
        raise TypeError(f"{who}: dtype must be a numeric scalar type (bool, int, uint, "
                        f"float, complex), got {dt}")
    return dt


def _rows(values, name, stream):
    """Return ``values`` (a 1-D integer array, host or device) on the device."""
    if config.ENABLE_CUDASIM and isinstance(values, cuda.devicearray.FakeCUDAArray):
        d = values  # simulated device arrays have no CUDA array interface
    elif not config.ENABLE_CUDASIM and hasattr(values, "__cuda_array_interface__"):
        d = cuda.as_cuda_array(values)
    else:
        a = np.asarray(values)
        if a.dtype == object:
            raise TypeError(f"gather: {name} must be an integer array, got {a.dtype}")
        d = None
        values = a
    dt = d.dtype if d is not None else values.dtype
    shape = d.shape if d is not None else values.shape
    if len(shape) != 1 or dt.kind not in "iu":
        raise TypeError(f"gather: {name} must be a 1-D integer array, got shape {shape}, "
                        f"dtype {dt}")
    return d if d is not None else cuda.to_device(np.ascontiguousarray(values), stream=stream)


def scan_launches(n, span):
    """Return the kernel launches :func:`_exclusive_scan` makes for ``n`` values.

    One scan launch per level, plus one add launch per level below the top;
    each level has ``ceil(n / span)`` times fewer values.
    """
    blocks = (n + span - 1) // span
    return 1 if blocks <= 1 else 2 + scan_launches(blocks, span)


def launches(nrows, total, free=True):
    """Return the kernel launches ``gather`` makes for ``nrows`` rows of ``total`` items.

    The lengths, the scan of ``nrows + 1`` values, the copy (when there is
    an item) and the frees (``free`` and a row). For the examples' tallies.
    """
    from ..device import gather as kernels

    return (1 + scan_launches(nrows + 1, kernels.SCAN_SPAN) + (1 if total else 0)
            + (1 if free and nrows else 0))


def _exclusive_scan(kernels, vals, stream):
    """Return the exclusive prefix sums of int64 device array ``vals`` (same length)."""
    n = vals.shape[0]
    span = kernels.SCAN_SPAN
    blocks = (n + span - 1) // span
    # Threads per block: enough for SCAN_ITEMS values each, a power of two.
    threads = kernels.SCAN_THREADS
    while threads > 1 and (threads // 2) * kernels.SCAN_ITEMS >= n:
        threads //= 2
    out = cuda.device_array(n, np.int64, stream=stream)
    sums = cuda.device_array(blocks, np.int64, stream=stream)
    kernels.scan_blocks[blocks, threads, stream](vals, out, sums)
    if blocks > 1:
        kernels.add_block_sums[(n + THREADS - 1) // THREADS, THREADS, stream](
            out, _exclusive_scan(kernels, sums, stream))
    return out


def gather(heap, offsets, counts, dtype, *, free=True, fill=None, item_shape=()):
    """Return ``(values, starts)``: every row's items in one device array, and row starts.

    Row ``i`` is ``counts[i]`` items of ``dtype`` in the block at
    ``offsets[i]``; ``values[starts[i]:starts[i + 1]]`` are its items
    (``starts`` has ``len(offsets) + 1`` entries, the last one the total).
    ``item_shape``: the shape of one item, when it is several scalars (an
    (x, y) pair: ``(2,)``): ``values`` then has shape ``(total, *item_shape)``
    and ``counts`` count items, not scalars.
    A row at NULL (its ``alloc`` failed) is empty, or keeps its count
    filled with ``fill`` when ``fill`` is given. ``free=True`` frees every
    block afterwards (``offsets`` themselves are left as they are: do not
    free them again). Computed on the GPU on the heap's stream (a scan,
    one copy kernel); synchronizes it once, to size ``values``.

    :raises TypeError: ``offsets``/``counts`` not 1-D integer arrays,
        ``dtype`` not a numeric scalar type, or ``item_shape`` not a tuple
        of positive integers.
    :raises ValueError: lengths differ, or a row has a negative count or a
        block not aligned to ``dtype`` or past the arena (nothing is freed).
    """
    from ..device import gather as kernels

    heap._live()
    dt = _scalar_dtype(dtype, "gather")
    per_item = _per_item(item_shape)
    s = heap.stream
    offs = _rows(offsets, "offsets", s)
    cnts = _rows(counts, "counts", s)
    if offs.shape[0] != cnts.shape[0]:
        raise ValueError(f"gather: offsets and counts differ in length: {offs.shape[0]} "
                         f"and {cnts.shape[0]}")
    if fill is not None and not isinstance(fill, (numbers.Number, np.generic)):
        raise TypeError(f"gather: fill must be None or a number, got {fill!r}")
    n = offs.shape[0]
    arena = heap.arena
    with heap._on_device():
        lens = cuda.device_array(n + 1, np.int64, stream=s)
        bad = cuda.to_device(np.array([n], np.int64), stream=s)
        kernels.lengths[(n + 1 + THREADS - 1) // THREADS, THREADS, s](
            arena.shape[0], offs, cnts, dt.itemsize * per_item, dt.itemsize, fill is not None,
            lens, bad)
        starts = _exclusive_scan(kernels, lens, s)
        head = np.empty(2, np.int64)
        starts[n:].copy_to_host(head[:1], stream=s)
        bad.copy_to_host(head[1:], stream=s)
        (s if s else cuda.default_stream()).synchronize()
        total, first_bad = int(head[0]), int(head[1])
        if first_bad < n:
            o = int(offs[first_bad:first_bad + 1].copy_to_host()[0])
            c = int(cnts[first_bad:first_bad + 1].copy_to_host()[0])
            raise ValueError(
                f"gather: row {first_bad} (offset {o}, count {c}) is not a block of "
                f"{dt} items in this heap: counts must be >= 0 and offsets NULL or "
                f"multiples of {dt.itemsize} with the items inside the "
                f"{arena.shape[0]}-byte arena")
        values = cuda.device_array(total * per_item, dt, stream=s)
        if total:
            chunk = max(COPY_CHUNK, -(-total // MAX_COPY_THREADS))
            threads = -(-total // chunk)
            fill_value = dt.type(0 if fill is None else fill)
            grid = ((threads + THREADS - 1) // THREADS, THREADS, s)
            args = (arena.view(dt), offs, starts, fill_value, values, chunk)
            if per_item == 1:
                kernels.copy_rows[grid](*args)
            else:
                kernels.copy_item_rows[grid](*args, per_item)
        if free and n:
            kernels.free_rows[(n + THREADS - 1) // THREADS, THREADS, s](heap.ctx, offs)
    if item_shape:
        values = values.reshape((total, *item_shape))
    return values, starts


def _per_item(item_shape):
    """Return the scalars of one item of ``item_shape`` (a tuple of positive ints)."""
    if not isinstance(item_shape, tuple) or not all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0
            for d in item_shape):
        raise TypeError(f"gather: item_shape must be a tuple of positive integers (the shape "
                        f"of one item, e.g. (2,) for (x, y) pairs), got {item_shape!r}")
    return int(np.prod(item_shape, dtype=np.int64)) if item_shape else 1


def block_array(heap, off, shape, dtype):
    """Return the bytes at ``off`` as a C-contiguous device array of ``shape``, no copy.

    A view of ``heap.arena`` (``__cuda_array_interface__``: CuPy, PyTorch
    and Numba take it). It stays valid until the block is freed or the heap
    reset, resized or closed.

    :raises TypeError: ``off`` or ``shape`` not integers, ``dtype`` not numeric.
    :raises ValueError: ``off`` not a multiple of the dtype's alignment, a
        negative dimension, or the range not inside the arena.
    """
    heap._live()
    dt = _scalar_dtype(dtype, "array")
    if isinstance(off, bool) or not isinstance(off, numbers.Integral):
        raise TypeError(f"array: off must be an integer offset, got {off!r}")
    dims = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    if not dims or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in dims):
        raise TypeError(f"array: shape must be an int or a tuple of ints, got {shape!r}")
    dims = tuple(int(d) for d in dims)
    off = int(off)
    if min(dims) < 0:
        raise ValueError(f"array: dimensions must be >= 0, got {dims}")
    nbytes = int(np.prod(dims, dtype=object)) * dt.itemsize
    arena = heap.arena
    if off < 0 or off + nbytes > arena.shape[0]:
        raise ValueError(f"array: bytes {off}..{off + nbytes} are not inside the "
                         f"{arena.shape[0]}-byte arena")
    if off % dt.alignment:
        raise ValueError(f"array: offset {off} is not a multiple of {dt}'s alignment "
                         f"({dt.alignment})")
    return arena[off:off + nbytes].view(dt).reshape(dims)
