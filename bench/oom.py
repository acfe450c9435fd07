"""Memory usable before out-of-memory, and fragmentation, on the CUDA simulator.

**Fill** (the test of Winter et al., "Are dynamic memory managers on GPUs
slow?", PPoPP 2021): threads allocate blocks of one size (16 B, 512 B,
8 KiB, and 64 KiB: large blocks of 4 pages) until ``alloc`` returns NULL; the served bytes are reported as a
percentage of (a) the capacity asked of ``Heap`` (metadata included) and
(b) ``heap.capacity``, the arena. In "single" warp-shim mode each thread
stops at its first NULL, as in the paper. In "warp" mode the lanes of a warp
must reach every ``alloc`` together, so every thread keeps calling until a
round of calls in which no thread of the block was served; a lane that got
NULL earlier calls again (and gets NULL again in a full heap).

The simulator is slow, so the heaps are small (``FILL_PAGES``). A heap's
capacity is its arena (the metadata is allocated beside it: issue 14), so
percentage (a) does not depend on the heap's size. :func:`arithmetic` gives
the exact figure for a 1 GiB heap from :mod:`devalloc.layout` (arena share
times the share of a slab that blocks of that size fill).

**Fragmentation**: rounds in which a random half of the threads free their
block (if any) and allocate a new one of a random size, writing its first
and last byte; afterwards, from ``heap.live()`` and ``heap.usage()``: the
span of addresses used (end of the highest live block minus start of the
lowest) over the bytes live (requested), the pages held over ``in_use``
(class-size bytes of the live blocks), and ``in_use`` over the requested
bytes (rounding to size classes). Single mode (threads diverge), so block
placement, and the figures, vary with thread interleaving.

Run: ``.venv/bin/python bench/oom.py`` (rewrites its sections of
``bench/RESULTS.md``; ``--no-write`` only prints).
"""

import argparse
import sys

from _results import header, markdown_table, simulator_environment, use_simulator, write_section

use_simulator()  # before numba is imported

import numpy as np  # noqa: E402
from numba import config, cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc import layout as L  # noqa: E402
from devalloc.sim import warp  # noqa: E402

NULL = devalloc.NULL
MODES = ("single", "warp")
#: Block size (bytes) -> heap pages of its fill; a few thousand blocks each
#: (16 large blocks of 4 pages).
FILL_PAGES = {16: 4, 512: 64, 8192: 64, 65536: 64}
FILL_SHAPE = (2, 64)
#: Fragmentation: (name, low, high, log-uniform) size distributions.
DISTRIBUTIONS = (("16-4096 B uniform", 16, 4096, False),
                 ("16 B-64 KiB log-uniform", 16, 65536, True))
FRAG_SHAPE = (2, 64)
FRAG_ROUNDS = 12
FRAG_PAGES = 256
FRAG_SEEDS = (7, 8)


# ------------------------------------------------------------------ kernels


@cuda.jit
def fill(ctx, nbytes, per_thread, counts):
    i = cuda.grid(1)
    active = True
    n = 0
    while True:
        ok = 0
        if active:
            off = devalloc.alloc(ctx, nbytes)
            if off == NULL:
                if per_thread != 0:
                    active = False
            else:
                n += 1
                ok = 1
        if cuda.syncthreads_count(ok) == 0:
            break
    counts[i] = n


@cuda.jit
def turnover(ctx, select, sizes, offs):
    i = cuda.grid(1)
    if select[i] != 0:
        devalloc.free(ctx, offs[i])  # free(NULL) does nothing
        n = sizes[i]
        off = devalloc.alloc(ctx, n)
        offs[i] = off
        if off != NULL:
            b = devalloc.view(ctx, off, n, np.uint8)
            b[0] = i & 0xFF
            b[n - 1] = i & 0xFF


# -------------------------------------------------------------------- fill


def fill_heap(nbytes, npages, mode, shape=FILL_SHAPE):
    """Fill a heap of ``npages`` pages with ``nbytes`` blocks; return the figures."""
    requested = L.capacity_for_pages(npages)
    heap = devalloc.Heap(requested)
    blocks, threads = shape
    counts = cuda.to_device(np.zeros(blocks * threads, np.int64))
    with warp.simulate(mode):
        fill[blocks, threads](heap.ctx, nbytes, 1 if mode == "single" else 0, counts)
    served = int(counts.copy_to_host().sum())
    u = heap.usage()
    return {
        "size": nbytes, "mode": mode, "pages": npages, "requested": requested,
        "capacity": heap.capacity, "served": served, "served_bytes": served * nbytes,
        "pct_requested": 100.0 * served * nbytes / requested,
        "pct_capacity": 100.0 * served * nbytes / heap.capacity,
        "slots": (npages * L.class_blocks(L.size_class(nbytes)) if nbytes <= L.MAX_SMALL
                  else npages // L.pages_for(nbytes)),
        "usage": u,
    }


def arithmetic(nbytes, capacity=1 << 30):
    """Return the usable share of a ``capacity``-byte heap for ``nbytes`` blocks (exact).

    ``(arena share, slab share, product)``: pages_for_capacity * PAGE /
    capacity; blocks per slab * nbytes / PAGE (1 for whole pages); their
    product, the percentage of ``capacity`` a perfect fill serves.
    """
    arena = L.pages_for_capacity(capacity) * L.PAGE / capacity
    if nbytes <= L.MAX_SMALL:
        slab = L.class_blocks(L.size_class(nbytes)) * nbytes / L.PAGE
    else:
        slab = nbytes / (L.pages_for(nbytes) * L.PAGE)
    return arena, slab, arena * slab


# ----------------------------------------------------------- fragmentation


def draw_sizes(rng, n, low, high, log):
    if log:
        return np.exp(rng.uniform(np.log(low), np.log(high + 1), n)).astype(np.int64).clip(low, high)
    return rng.integers(low, high + 1, n)


def fragmentation(low, high, log, seed, rounds=FRAG_ROUNDS, shape=FRAG_SHAPE, npages=FRAG_PAGES):
    """Run ``rounds`` of turnover; return span, live and reserved figures."""
    blocks, threads = shape
    n = blocks * threads
    rng = np.random.default_rng(seed)
    heap = devalloc.Heap(L.capacity_for_pages(npages))
    offs = cuda.to_device(np.full(n, NULL, np.int64))
    held = np.zeros(n, np.int64)  # requested bytes of each thread's live block
    failed = 0
    for _ in range(rounds):
        select = rng.random(n) < 0.5
        sizes = draw_sizes(rng, n, low, high, log)
        turnover[blocks, threads](heap.ctx, cuda.to_device(select.astype(np.int64)),
                                  cuda.to_device(sizes), offs)
        got = offs.copy_to_host()
        failed += int((select & (got == NULL)).sum())
        held = np.where(select, np.where(got != NULL, sizes, 0), held)
    live = heap.live()
    u = heap.usage()
    live_bytes = int(held.sum())
    span = (max(o + s for o, s in live) - min(o for o, _ in live)) if live else 0
    return {
        "live_blocks": len(live), "live_bytes": live_bytes, "in_use": u.in_use,
        "reserved": u.reserved, "peak": u.peak, "span": span, "failed": failed,
        "span_per_live": span / live_bytes if live_bytes else float("nan"),
        "reserved_per_in_use": u.reserved / u.in_use if u.in_use else float("nan"),
        "in_use_per_live": u.in_use / live_bytes if live_bytes else float("nan"),
        "large_blocks": u.large_blocks,
    }


# ------------------------------------------------------------------ report


def fill_section(fills):
    cols = [("block", "r"), ("mode", "l"), ("heap pages", "r"), ("requested B", "r"),
            ("arena B", "r"), ("blocks served", "r"), ("slots", "r"), ("served B", "r"),
            ("% of requested", "r"), ("% of arena", "r"), ("NULLs", "r")]
    rows = [[f"{f['size']} B", f["mode"], f["pages"], f["requested"], f["capacity"], f["served"],
             f["slots"], f["served_bytes"], f"{f['pct_requested']:.2f}",
             f"{f['pct_capacity']:.2f}", f["usage"].failed] for f in fills]
    ar_cols = [("block", "r"), ("arena / capacity", "r"), ("slab filled", "r"),
               ("usable % of 1 GiB", "r")]
    ar_rows = []
    for size in FILL_PAGES:
        arena, slab, both = arithmetic(size)
        ar_rows.append([f"{size} B", f"{100 * arena:.3f} %", f"{100 * slab:.3f} %",
                        f"{100 * both:.3f}"])
    blocks, threads = FILL_SHAPE
    lines = header("Memory usable before out-of-memory (simulator)",
                   ".venv/bin/python bench/oom.py", simulator_environment())
    lines += [
        f"{blocks} blocks of {threads} threads allocate one size until NULL "
        "(\"single\": each thread stops at its first NULL; \"warp\": converged, "
        "every thread calls until a round serves nothing). `slots`: heap pages x "
        "blocks per slab (for 64 KiB: heap pages / 4). `NULLs`: `usage().failed`, the "
        "calls that found the heap full.",
        "",
        markdown_table(cols, rows),
        "",
        "The same, exact arithmetic for a heap of 1 GiB (`devalloc.layout`; its "
        f"metadata, {L.meta_bytes(L.pages_for_capacity(1 << 30)):,} B, lies beside it):",
        "",
        markdown_table(ar_cols, ar_rows),
    ]
    return "\n".join(lines)


def frag_section(frags):
    cols = [("sizes", "l"), ("seed", "r"), ("live blocks", "r"), ("large", "r"),
            ("live B (requested)", "r"), ("in_use B", "r"), ("reserved B", "r"),
            ("span B", "r"), ("span / live", "r"), ("reserved / in_use", "r"),
            ("in_use / live", "r"), ("NULLs", "r")]
    rows = [[d, seed, f["live_blocks"], f["large_blocks"], f["live_bytes"], f["in_use"],
             f["reserved"], f["span"], f"{f['span_per_live']:.2f}",
             f"{f['reserved_per_in_use']:.2f}", f"{f['in_use_per_live']:.2f}", f["failed"]]
            for d, seed, f in frags]
    blocks, threads = FRAG_SHAPE
    lines = header("Fragmentation (simulator)", ".venv/bin/python bench/oom.py",
                   simulator_environment())
    lines += [
        f"{blocks} blocks of {threads} threads, {FRAG_ROUNDS} rounds in a heap of "
        f"{FRAG_PAGES} pages; each round a random half of the threads free their block "
        "and allocate a new one (write first and last byte). Then: `span` = end of the "
        "highest live block - start of the lowest (`heap.live()`); `live` = requested "
        "bytes of the live blocks; `in_use` = their class-size bytes; `reserved` = pages "
        "held (`heap.usage()`). Large blocks (over 8 KiB) take whole pages from the top "
        "of the arena, slabs from the bottom.",
        "",
        markdown_table(cols, rows),
    ]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    a = p.parse_args(argv)
    if not config.ENABLE_CUDASIM:
        sys.exit("oom needs the CUDA simulator: run with NUMBA_ENABLE_CUDASIM=1 (or unset)")
    fills = [fill_heap(size, pages, mode) for size, pages in FILL_PAGES.items() for mode in MODES]
    frags = [(name, seed, fragmentation(lo, hi, log, seed))
             for name, lo, hi, log in DISTRIBUTIONS for seed in FRAG_SEEDS]
    texts = [fill_section(fills), frag_section(frags)]
    if not a.no_write:
        for t in texts:
            write_section(t)
    print("\n\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
