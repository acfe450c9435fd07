"""A counter's stripe reads the block number where it counts (issue 28).

``_meta._stripe`` (failure, misuse and scope counters) reads ``%ctaid.x``
through a volatile ``asm`` (``ptx._block_read``): NVVM neither shares the
read with ``cuda.grid``'s at the kernel's start nor hoists the stripe's
metadata index out of the searches before the count, where it held a
register across all of them (docs/outline.md, "Counter stripes read where
they count"). Compiled for sm_90 in a subprocess with the real CUDA target
(no GPU); the counts themselves run on the simulator in the rest of the
suite (every failure count sums its stripes).
"""

from cuda_target import last_json

SCRIPT = """
import json
from numba import cuda, types
from devalloc import layout as L
from devalloc.device._meta import _count, _stripe
from devalloc.tools import aot


def k_counts(meta, out):
    i = cuda.grid(1)
    n = out[i]
    acc = 0
    for j in range(n):  # a loop between the kernel's start and the counts
        acc += cuda.atomic.add(meta, j, 1)
    if acc > 7:
        _count(meta, L.S_FAILED)
    else:
        _count(meta, L.S_INVALID)
    out[i] = acc + _stripe()


sig = (types.int64[::1], types.int64[::1])
print(json.dumps(aot.compile_ptx(k_counts, sig, cc=(9, 0))[0]))
"""


def test_each_stripe_reads_the_block_number_where_it_counts():
    ptx = last_json(SCRIPT)
    reads = [line for line in ptx.splitlines() if "%ctaid.x" in line]
    # cuda.grid's read, and one per stripe (two counts on two branches, one
    # more after them): through cuda.blockIdx NVVM keeps the grid's read
    # alone and derives every stripe from it.
    assert len(reads) >= 4, reads
