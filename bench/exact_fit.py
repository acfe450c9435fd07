"""A heap of exactly the pages a kernel needs, under racing threads (simulator).

32 threads (one warp, each lane its own group: the simulator's default),
each asking 16, 48, 100 or 300 B (8 of each) of ``alloc``, of ``bump`` and
of ``scoped`` scratch, all held at once, in a heap of 9 pages: 4 slabs for
the allocs' classes, 3 for the scoped chunks' (256 B for the 16 and 48 B
threads, 448 and 1280 B), a bump chunk of 2 pages. Any order of the calls
one after the other is served. Two kernels: *together* (each thread alloc,
bump, scoped) and *bump apart* (every thread bumps, ``syncthreads``, then
alloc and scoped; tests/test_scratch.py's ``mixed``). Printed per kernel:
the runs with a NULL and the NULLs, with ``sys.setswitchinterval`` at
``--switch`` so that threads switch inside the allocator.

Run: ``.venv/bin/python bench/exact_fit.py [--runs 10] [--switch 1e-5]``
(``--profile``: observed heaps, whose counters add atomics and so races).
"""

import argparse
import sys

from _results import use_simulator

use_simulator()  # before numba is imported

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc import layout as L  # noqa: E402

SIZES = np.array([16, 48, 100, 300] * 8, np.int64)
PAGES = 9


@cuda.jit
def together(ctx, sizes, out):
    i = cuda.grid(1)
    n = sizes[i]
    out[i, 0] = devalloc.alloc(ctx, n)
    out[i, 1] = devalloc.bump(ctx, n)
    s = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    c, s = devalloc.scoped(ctx, s, n)
    out[i, 2] = c


@cuda.jit
def bump_apart(ctx, sizes, out):
    i = cuda.grid(1)
    n = sizes[i]
    out[i, 1] = devalloc.bump(ctx, n)
    cuda.syncthreads()
    out[i, 0] = devalloc.alloc(ctx, n)
    s = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    c, s = devalloc.scoped(ctx, s, n)
    out[i, 2] = c


def run(kernel, runs, profile):
    """Return (runs with a NULL, NULLs) over ``runs`` launches of ``kernel``."""
    bad_runs = nulls = 0
    sizes = cuda.to_device(SIZES)
    for _ in range(runs):
        heap = devalloc.Heap(L.capacity_for_pages(PAGES), profile=profile)
        out = cuda.to_device(np.zeros((SIZES.shape[0], 3), np.int64))
        kernel[1, SIZES.shape[0]](heap.ctx, sizes, out)
        n = int((out.copy_to_host() == devalloc.NULL).sum())
        bad_runs += n > 0
        nulls += n
    return bad_runs, nulls


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10, help="launches per kernel (default 10)")
    p.add_argument("--switch", type=float, default=1e-5,
                   help="sys.setswitchinterval in seconds (default 1e-5)")
    p.add_argument("--profile", action="store_true", help="observed heaps (Heap(profile=True))")
    args = p.parse_args(argv)
    old = sys.getswitchinterval()
    sys.setswitchinterval(args.switch)
    try:
        print(f"| kernel ({PAGES}-page heap, switch {args.switch:g} s"
              f"{', profiled' if args.profile else ''}) | runs | runs with a NULL | NULLs |")
        print("|---|---:|---:|---:|")
        for name, kernel in (("together", together), ("bump apart", bump_apart)):
            bad_runs, nulls = run(kernel, args.runs, args.profile)
            print(f"| {name} | {args.runs} | {bad_runs} | {nulls} |")
    finally:
        sys.setswitchinterval(old)


if __name__ == "__main__":
    main()
