"""An exclusive prefix sum on the device, for the count + scan + exact twins.

numba-cuda has no scan, and devalloc depends on no array library that has
one, so this is a small one: each block of BLOCK values is scanned in
shared memory (Hillis-Steele: log2(BLOCK) rounds of adds, each between two
``syncthreads``), the block totals are scanned the same way (recursively,
one level per factor of BLOCK), and a last kernel adds each block's offset
to its values. ``n`` values take ``ceil(log_BLOCK(n + 1))`` scan launches
plus one add launch per level below the top: 1 launch up to 127 values,
3 up to 16,255, 5 up to 2,080,639.

:func:`exclusive_scan` returns the ``n + 1`` offsets on the device (the last
one is the total) and reads nothing back; :func:`total` reads the total:
one host synchronisation, which the caller counts. No atomics.

Importing this module imports numba: call ``devalloc.target.choose()`` first.
"""

import numpy as np
from numba import cuda, int64

#: Values per block, scanned in shared memory (a power of two).
BLOCK = 128


@cuda.jit
def scan_blocks(values, out, sums):
    """Write the exclusive prefix sums of ``values`` within each block to ``out``.

    Thread ``i`` of the launch covers element ``i``; elements past the
    end of ``values`` count as 0 (``out`` may be one longer than ``values``: its last
    element gets the total of its block's prefix). Block ``b``'s total
    goes to ``sums[b]``. Every thread of a block must reach both
    ``syncthreads``; none returns early.
    """
    tmp = cuda.shared.array(BLOCK, int64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    v = int64(0)
    if i < values.shape[0]:
        v = int64(values[i])
    tmp[t] = v
    cuda.syncthreads()
    d = 1
    while d < BLOCK:
        a = int64(0)
        if t >= d:
            a = tmp[t - d]
        cuda.syncthreads()
        tmp[t] += a
        cuda.syncthreads()
        d *= 2
    if i < out.shape[0]:
        out[i] = tmp[t] - v  # inclusive minus own: exclusive
    if t == BLOCK - 1:
        sums[cuda.blockIdx.x] = tmp[t]


@cuda.jit
def add_block_offsets(out, offsets):
    """Add block ``b``'s offset ``offsets[b]`` to its elements of ``out``."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] += offsets[cuda.blockIdx.x]


def _scan_into(values, out, launch):
    """Scan ``values`` into ``out`` (one longer); return the launches made."""
    n = values.shape[0]
    blocks = (n + 1 + BLOCK - 1) // BLOCK
    sums = cuda.device_array(blocks, np.int64)
    launch(scan_blocks, blocks, values, out, sums)
    if blocks == 1:
        return 1
    offsets = cuda.device_array(blocks + 1, np.int64)
    launches = 1 + _scan_into(sums, offsets, launch)
    launch(add_block_offsets, blocks, out, offsets)
    return launches + 1


def _launch(kernel, blocks, *args):
    kernel[blocks, BLOCK](*args)


def exclusive_scan(values, launch=_launch):
    """Return ``(offsets, launches)``: the exclusive prefix sum of device array ``values``.

    ``offsets`` is a device int64 array of ``len(values) + 1`` elements:
    ``offsets[i]`` is the sum of ``values[:i]`` and the last one the total.
    ``values`` holds integers (any integer dtype, at most 2**63 - 1 in
    all). ``launch(kernel, blocks, *args)`` launches a kernel on ``blocks``
    blocks of BLOCK threads (the default does just that; a caller may count
    or time them). Reads nothing back to the host.
    """
    out = cuda.device_array(values.shape[0] + 1, np.int64)
    return out, _scan_into(values, out, launch)


def scratch_bytes(n):
    """Return the device bytes :func:`exclusive_scan` allocates for ``n`` values.

    The offsets (``n + 1`` int64) and, per level, the block totals and the
    next level's offsets.
    """
    total = 8 * (n + 1)
    while True:
        blocks = (n + 1 + BLOCK - 1) // BLOCK
        total += 8 * blocks
        if blocks == 1:
            return total
        total += 8 * (blocks + 1)
        n = blocks


def total(offsets):
    """Return the total, ``offsets[-1]``, read back to the host (one synchronisation)."""
    return int(offsets[offsets.shape[0] - 1:].copy_to_host()[0])


#: Kernel name -> argument words of ``_mc.signatures`` (for compile checks).
SIGNATURES = {
    "scan_blocks": "int32 int64 int64",
    "add_block_offsets": "int64 int64",
}
#: More argument words a kernel is launched with: the block totals (int64)
#: are scanned by the same kernel. ``_mc.precompile`` compiles these too.
MORE_SIGNATURES = [("scan_blocks", "int64 int64 int64")]
