"""Kernels behind ``Heap.gather``: lengths, an exclusive scan, one copy, frees.

Ragged results (one block per row, ``counts[i]`` items at ``offsets[i]``)
become one array plus row starts (CSR). numba-cuda has no scan, so this is
a small one: each block of SCAN_THREADS threads scans its slice in shared
memory (Hillis-Steele: log2(SCAN_THREADS) steps) and leaves its total; the
host scans the totals the same way, recursively, and :func:`add_block_sums`
adds them back. Launched by :mod:`devalloc.gather` (the host side), on the
heap's stream. No heap metadata is touched except by :func:`free_rows`,
through the public ``free``.
"""

from numba import cuda, int64

from .. import layout as L
from .api import free

#: Threads per block of the scan (a power of two): the slice each block scans.
SCAN_THREADS = 256


@cuda.jit
def lengths(arena_bytes, offsets, counts, itemsize, keep_null, lens, bad):
    """Write each row's length in the result to ``lens`` (and 0 at ``lens[n]``).

    A row of NULL offset has ``counts[i]`` items when ``keep_null`` (filled),
    none otherwise. A row with a negative count, or a block that is not
    ``itemsize``-aligned or runs past the arena, has length 0 and is noted
    in ``bad[0]`` (the lowest such row: an ``atomic.min``, relaxed; read by
    the host after the stream synchronizes).
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
    elif o < 0 or o % itemsize != 0 or o > arena_bytes or c > (arena_bytes - o) // itemsize:
        ok = False
    if not ok:
        cuda.atomic.min(bad, 0, i)  # lowest bad row; rivals: other bad rows, min commutes
        c = 0
    lens[i] = c


@cuda.jit
def scan_blocks(vals, out, sums):
    """Exclusive scan of each SCAN_THREADS-slice of ``vals`` into ``out``; totals to ``sums``."""
    buf = cuda.shared.array(SCAN_THREADS, int64)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * SCAN_THREADS + t
    v = int64(0)
    if i < vals.shape[0]:
        v = vals[i]
    buf[t] = v
    cuda.syncthreads()
    d = 1
    while d < SCAN_THREADS:
        add = int64(0)
        if t >= d:
            add = buf[t - d]
        cuda.syncthreads()
        buf[t] += add
        cuda.syncthreads()
        d *= 2
    if i < vals.shape[0]:
        out[i] = buf[t] - v
    if t == SCAN_THREADS - 1:
        sums[cuda.blockIdx.x] = buf[t]


@cuda.jit
def add_block_sums(out, sums_scanned):
    """Add each block's scanned total to its slice of ``out``."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] += sums_scanned[i // SCAN_THREADS]


@cuda.jit
def copy_rows(source, offsets, starts, fill, out):
    """Copy every row's items to ``out[starts[r]:starts[r + 1]]``; NULL rows get ``fill``.

    ``source`` is the arena viewed as the items' dtype. Grid-stride over the
    items, so consecutive threads write consecutive items; each finds its
    row by binary search in ``starts`` (the largest ``r`` with
    ``starts[r] <= e``: empty rows are passed over).
    """
    nrows = offsets.shape[0]
    itemsize = source.itemsize
    for e in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        lo = 0
        hi = nrows
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if starts[mid] <= e:
                lo = mid
            else:
                hi = mid
        o = offsets[lo]
        if o == L.NULL:
            out[e] = fill
        else:
            out[e] = source[o // itemsize + (e - starts[lo])]


@cuda.jit
def free_rows(ctx, offsets):
    """Free every row's block (``free(NULL)`` does nothing)."""
    i = cuda.grid(1)
    if i < offsets.shape[0]:
        free(ctx, offsets[i])
