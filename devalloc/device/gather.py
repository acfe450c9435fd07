"""Kernels behind ``Heap.gather``: lengths, an exclusive scan, one copy, frees.

Ragged results (one block per row, ``counts[i]`` items at ``offsets[i]``)
become one array plus row starts (CSR). numba-cuda has no scan, so this is
a small one: each block of up to SCAN_THREADS threads scans
SCAN_THREADS * SCAN_ITEMS values (each thread sums its SCAN_ITEMS, thread 0
scans the threads' sums in shared memory, each thread writes its items'
prefixes: two barriers per block, which keeps the simulator fast too) and
leaves its total; the host scans the totals the same way, recursively, and
:func:`add_block_sums` adds them back. Launched by :mod:`devalloc.host.gather`
(the host side), on the heap's stream. No heap metadata is touched except
by :func:`free_rows`, through the public ``free``.
"""

from numba import cuda, int64

from .. import layout as L
from .api import free

#: Most threads per block of the scan (a power of two), and the values each scans.
SCAN_THREADS = 256
SCAN_ITEMS = 8
#: Values one scan block covers.
SCAN_SPAN = SCAN_THREADS * SCAN_ITEMS


@cuda.jit
def lengths(arena_bytes, offsets, counts, itemsize, align, keep_null, lens, bad):
    """Write each row's length in the result to ``lens`` (and 0 at ``lens[n]``).

    ``itemsize``: the bytes of one item (``align``: of its scalars, which
    a block's offset must be a multiple of). A row of NULL offset has ``counts[i]`` items when
    ``keep_null`` (filled), none otherwise. A row with a negative count, or
    a block that is not ``itemsize``-aligned or runs past the arena, has
    length 0 and is noted in ``bad[0]`` (the lowest such row: an
    ``atomic.min``, relaxed; read by the host after the stream synchronizes).
    """
    i = cuda.grid(1)
    n = offsets.shape[0]
    if i == n:
        lens[i] = 0
    if i >= n:
        return
    o = int64(offsets[i])
    c = int64(counts[i])
    ok = c >= 0
    if o == L.NULL:
        if not keep_null:
            c = 0
    elif o < 0 or o % align != 0 or o > arena_bytes or c > (arena_bytes - o) // itemsize:
        ok = False
    if not ok:
        cuda.atomic.min(bad, 0, i)  # lowest bad row; rivals: other bad rows, min commutes
        c = 0
    lens[i] = c


@cuda.jit
def scan_blocks(vals, out, sums):
    """Exclusive scan of each block's SCAN_SPAN-slice of ``vals`` into ``out``; totals to ``sums``.

    Thread ``t`` of a block of ``blockDim.x`` threads (a divisor of
    SCAN_THREADS) owns SCAN_ITEMS * SCAN_THREADS / blockDim.x consecutive
    values of the slice.
    """
    buf = cuda.shared.array(SCAN_THREADS, int64)
    t = cuda.threadIdx.x
    per = SCAN_SPAN // cuda.blockDim.x
    first = cuda.blockIdx.x * SCAN_SPAN + t * per
    n = vals.shape[0]
    acc = int64(0)
    for k in range(first, min(first + per, n)):
        acc += vals[k]
    buf[t] = acc
    cuda.syncthreads()
    if t == 0:
        run = int64(0)
        for k in range(cuda.blockDim.x):
            v = buf[k]
            buf[k] = run
            run += v
        sums[cuda.blockIdx.x] = run
    cuda.syncthreads()
    run = buf[t]
    for k in range(first, min(first + per, n)):
        v = vals[k]
        out[k] = run
        run += v


@cuda.jit
def add_block_sums(out, sums_scanned):
    """Add each block's scanned total to its SCAN_SPAN-slice of ``out``."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] += sums_scanned[i // SCAN_SPAN]


@cuda.jit(device=True)
def _row_of(starts, nrows, first):
    """The largest ``r`` with ``starts[r] <= first`` (binary search: empty rows passed over)."""
    lo = 0
    hi = nrows
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if starts[mid] <= first:
            lo = mid
        else:
            hi = mid
    return lo


@cuda.jit
def copy_rows(source, offsets, starts, fill, out, chunk):
    """Copy every row's items to ``out[starts[r]:starts[r + 1]]``; NULL rows get ``fill``.

    ``source`` is the arena viewed as the items' dtype. Thread ``t`` copies
    items ``[t * chunk, (t + 1) * chunk)`` (a few items each on a GPU, so a
    warp writes one stretch): it finds the first one's row by binary search
    in ``starts`` (:func:`_row_of`), then walks on.
    """
    itemsize = source.itemsize
    first = cuda.grid(1) * chunk
    end = min(first + chunk, out.shape[0])
    if first >= end:
        return
    r = _row_of(starts, offsets.shape[0], first)
    for e in range(first, end):
        while starts[r + 1] <= e:
            r += 1
        o = offsets[r]
        if o == L.NULL:
            out[e] = fill
        else:
            out[e] = source[o // itemsize + (e - starts[r])]


@cuda.jit
def copy_item_rows(source, offsets, starts, fill, out, chunk, per_item):
    """:func:`copy_rows` for items of ``per_item`` scalars each (``gather(item_shape=)``).

    ``out`` holds ``per_item`` scalars per item; a kernel of its own, so
    that ``copy_rows`` keeps its registers.
    """
    itemsize = source.itemsize
    first = cuda.grid(1) * chunk
    end = min(first + chunk, out.shape[0] // per_item)
    if first >= end:
        return
    r = _row_of(starts, offsets.shape[0], first)
    for e in range(first, end):
        while starts[r + 1] <= e:
            r += 1
        o = offsets[r]
        dst = e * per_item
        if o == L.NULL:
            for j in range(per_item):
                out[dst + j] = fill
        else:
            src = o // itemsize + (e - starts[r]) * per_item
            for j in range(per_item):
                out[dst + j] = source[src + j]


@cuda.jit
def free_rows(ctx, offsets):
    """Free every row's block (``free(NULL)`` does nothing)."""
    i = cuda.grid(1)
    if i < offsets.shape[0]:
        free(ctx, offsets[i])
