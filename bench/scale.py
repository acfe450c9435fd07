"""Scaling with the heap and the load, on the CUDA simulator (issue 14).

Five measurements, each a figure that should not grow with the heap, or a
count that should stay at its ideal:

* **large**: with ``HELD`` of the heap held by live 64 KiB blocks, the time
  of one more 64 KiB ``alloc`` + ``free`` (one thread, one launch) on a heap
  of ``LARGE_PAGES[1]`` pages over the same on ``LARGE_PAGES[0]`` pages;
* **failing**: the time of an 8 KiB ``alloc`` that fails (NULL) on a heap
  full of large blocks, ``FAIL_PAGES[1]`` pages over ``FAIL_PAGES[0]``;
* **racing**: ``RACE_THREADS`` threads of one block each ``alloc``/``free``
  a ``RACE_BYTES`` block ``RACE_ROUNDS`` times in a ``RACE_HEAP``-byte heap
  (room for all of them at once), with a thread switch every 20 us: the
  NULLs over ``RACE_RUNS`` runs (``usage().failed``);
* **spread**: pages held after one warp, and after 8 warps (one block of 256
  threads), allocate 16 B each on an idle ``SPREAD_PAGES``-page heap
  (converged warps, the simulator's "warp" mode);
* **small heap**: the share of a ``SMALL_HEAP``-byte heap's requested
  capacity that 16 B blocks fill;
* **contention**: ``CONTEND_THREADS`` lone lanes (the simulator's "single"
  mode: no warp aggregation, the worst case) each alloc/free 16 B
  ``CONTEND_ROUNDS`` times with a thread switch every 20 us, on a heap whose
  spread may widen to ``CONTEND_SPREAD`` slots and on one held to a single
  slot: the class's spread at the end, the lost ``cas`` per allocation and
  the pages held at the peak (profile counters).

Times are medians of ``--repeats`` launches, as ratios within one run (the
machine's speed cancels); each launch on the simulator also pays a fixed
launch cost, which the ratio includes.

Run: ``.venv/bin/python bench/scale.py`` (rewrites its section of
``bench/RESULTS.md``; ``--no-write`` only prints).
"""

import argparse
import statistics
import sys
import time

from _results import header, markdown_table, simulator_environment, use_simulator, write_section

use_simulator()  # before numba is imported

import numpy as np  # noqa: E402
from numba import config, cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc import layout as L  # noqa: E402
from devalloc.sim import warp  # noqa: E402

NULL = devalloc.NULL
COMMAND = ".venv/bin/python bench/scale.py"
HELD = 0.9
LARGE_BYTES = 64 << 10
LARGE_PAGES = (64, 16384)
FAIL_PAGES = (64, 4096)
FAIL_BYTES = 8192
RACE_THREADS = 4
RACE_ROUNDS = 25
RACE_BYTES = 200_000
RACE_HEAP = 1 << 20
RACE_RUNS = 5
SPREAD_PAGES = 2048
SMALL_HEAP = 128 << 10
CONTEND_THREADS = 64
CONTEND_ROUNDS = 20
CONTEND_SPREAD = 8
CONTEND_PAGES = 2048
REPEATS = 15
#: Seconds between interpreter thread switches in the racing runs.
SWITCH_INTERVAL = 2e-5


# ------------------------------------------------------------------ kernels


@cuda.jit
def alloc_many(ctx, nbytes, offs):
    for k in range(offs.shape[0]):
        offs[k] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def alloc_free_one(ctx, nbytes, out):
    off = devalloc.alloc(ctx, nbytes)
    out[0] = off
    if off != NULL:
        devalloc.free(ctx, off)


@cuda.jit
def churn(ctx, nbytes, rounds, nulls):
    i = cuda.grid(1)
    for _ in range(rounds):
        off = devalloc.alloc(ctx, nbytes)
        if off == NULL:
            nulls[i] += 1
        else:
            devalloc.view(ctx, off, 1, np.uint8)[0] = i
            devalloc.free(ctx, off)


@cuda.jit
def alloc_each(ctx, nbytes, offs):
    i = cuda.grid(1)
    offs[i] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def fill(ctx, nbytes, counts):
    i = cuda.grid(1)
    n = 0
    while devalloc.alloc(ctx, nbytes) != NULL:
        n += 1
    counts[i] = n


# ------------------------------------------------------------------ figures


def heap_of(npages):
    return devalloc.Heap(L.capacity_for_pages(npages))


def median_launch(launch, repeats):
    """Return the median seconds of ``launch()`` over ``repeats`` calls (one warm-up)."""
    launch()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        launch()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def large_time(npages, repeats=REPEATS, held=HELD, nbytes=LARGE_BYTES):
    """Return (seconds, NULL) of one alloc+free of ``nbytes`` with ``held`` of the heap live."""
    heap = heap_of(npages)
    count = int(npages * held) // L.pages_for(nbytes)
    offs = cuda.to_device(np.full(count, NULL, np.int64))
    alloc_many[1, 1](heap.ctx, nbytes, offs)
    assert (offs.copy_to_host() != NULL).all(), "the fill failed"
    out = cuda.to_device(np.zeros(1, np.int64))
    t = median_launch(lambda: alloc_free_one[1, 1](heap.ctx, nbytes, out), repeats)
    return t, int(out.copy_to_host()[0]) == NULL


def failing_time(npages, repeats=REPEATS, nbytes=FAIL_BYTES):
    """Return (seconds, served) of an ``nbytes`` alloc on a heap full of large blocks."""
    heap = heap_of(npages)
    block = max(1, npages // 16)  # 16 large blocks fill the heap
    offs = cuda.to_device(np.full(npages // block, NULL, np.int64))
    alloc_many[1, 1](heap.ctx, block * L.PAGE, offs)
    assert heap.usage().reserved == heap.capacity, "the fill left room"
    out = cuda.to_device(np.zeros(1, np.int64))
    t = median_launch(lambda: alloc_free_one[1, 1](heap.ctx, nbytes, out), repeats)
    return t, int(out.copy_to_host()[0]) != NULL


def racing(runs=RACE_RUNS, threads=RACE_THREADS, rounds=RACE_ROUNDS, nbytes=RACE_BYTES,
           capacity=RACE_HEAP):
    """Return the NULLs of each run of ``threads`` racing large alloc/free loops."""
    out = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        for _ in range(runs):
            heap = devalloc.Heap(capacity)
            assert heap.capacity >= threads * L.pages_for(nbytes) * L.PAGE
            nulls = cuda.to_device(np.zeros(threads, np.int64))
            churn[1, threads](heap.ctx, nbytes, rounds, nulls)
            u = heap.usage()
            assert u.failed == int(nulls.copy_to_host().sum())
            out.append(u.failed)
    finally:
        sys.setswitchinterval(old)
    return out


def spread(npages=SPREAD_PAGES):
    """Return pages held after 1 warp and after 8 warps allocate 16 B (warp mode)."""
    held = []
    for threads in (32, 256):
        heap = heap_of(npages)
        offs = cuda.to_device(np.full(threads, NULL, np.int64))
        with warp.simulate("warp"):
            alloc_each[1, threads](heap.ctx, 16, offs)
        assert (offs.copy_to_host() != NULL).all()
        held.append(heap.usage().reserved // L.PAGE)
    return held


def small_heap(capacity=SMALL_HEAP, nbytes=16):
    """Return (served bytes, capacity requested, heap.capacity) of a fill of ``nbytes``."""
    heap = devalloc.Heap(capacity)
    counts = cuda.to_device(np.zeros(64, np.int64))
    fill[1, 64](heap.ctx, nbytes, counts)
    return int(counts.copy_to_host().sum()) * nbytes, capacity, heap.capacity


def contention(spread, threads=CONTEND_THREADS, rounds=CONTEND_ROUNDS, npages=CONTEND_PAGES):
    """Return (slots in use, lost cas per alloc, peak pages) of a 16 B churn."""
    heap = devalloc.Heap(L.capacity_for_pages(npages), profile=True, spread=spread)
    nulls = cuda.to_device(np.zeros(threads, np.int64))
    old = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        with warp.simulate("single"):
            churn[1, threads](heap.ctx, 16, rounds, nulls)
    finally:
        sys.setswitchinterval(old)
    u = heap.usage()
    assert u.failed == 0 and u.live_blocks == 0
    meta = heap.ctx.meta.copy_to_host()
    slots = 1 << int(meta[L.spread_word(L.size_class(16))])
    return slots, u.profile["cas_retries"] / u.allocs, u.peak // L.PAGE


def measure(repeats=REPEATS):
    (ts, _), (tb, _) = [large_time(n, repeats) for n in LARGE_PAGES]
    (fs, served_s), (fb, served_b) = [failing_time(n, repeats) for n in FAIL_PAGES]
    assert not (served_s or served_b), "an alloc on a full heap was served"
    return {
        "large": (ts, tb), "failing": (fs, fb), "racing": racing(),
        "spread": spread(), "small": small_heap(),
        "contention": [contention(s) for s in (CONTEND_SPREAD, 1)],
    }


# ------------------------------------------------------------------ report


def section(r, repeats):
    (ts, tb), (fs, fb) = r["large"], r["failing"]
    served, asked, cap = r["small"]
    one, eight = r["spread"]
    cols = [("measurement", "l"), ("figure", "r"), ("detail", "l")]
    rows = [
        [f"64 KiB alloc+free, {HELD:.0%} held, {LARGE_PAGES[1]} vs {LARGE_PAGES[0]} pages",
         f"{tb / ts:.2f}x", f"{tb * 1e3:.2f} ms vs {ts * 1e3:.2f} ms per launch"],
        [f"failing {FAIL_BYTES} B alloc, heap full of large blocks, {FAIL_PAGES[1]} vs "
         f"{FAIL_PAGES[0]} pages", f"{fb / fs:.2f}x",
         f"{fb * 1e3:.2f} ms vs {fs * 1e3:.2f} ms per launch"],
        [f"{RACE_THREADS} threads x {RACE_ROUNDS} alloc/free of {RACE_BYTES} B, "
         f"{RACE_HEAP >> 20} MiB heap: NULLs", str(sum(r["racing"])),
         "per run: " + ", ".join(map(str, r["racing"]))],
        [f"pages held: 1 warp / 8 warps of 16 B, {SPREAD_PAGES}-page heap", f"{one} / {eight}", ""],
        [f"{SMALL_HEAP >> 10} KiB heap filled with 16 B blocks", f"{100 * served / asked:.1f} %",
         f"{served} B served, heap.capacity {cap} B"],
    ]
    for (slots, lost, peak), bound in zip(r["contention"], (CONTEND_SPREAD, 1)):
        rows.append([f"{CONTEND_THREADS} lone lanes x {CONTEND_ROUNDS} alloc/free of 16 B, "
                     f"spread up to {bound}: slots in use / lost cas per alloc / peak pages",
                     f"{slots} / {lost:.2f} / {peak}", ""])
    lines = header("Scaling with the heap and the load (simulator)", COMMAND,
                   simulator_environment())
    lines += [
        f"Issue 14's measurements. Times: medians of {repeats} launches of one thread, "
        "as ratios within one run (each includes the simulator's fixed launch cost). "
        "Racing and contention: one block, a thread switch every 20 us. Spread: "
        "converged warps (\"warp\" mode) on an idle heap. Contention: lone lanes "
        "(\"single\" mode), spread bound set with `Heap(spread=)`.",
        "",
        markdown_table(cols, rows),
    ]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    a = p.parse_args(argv)
    if not config.ENABLE_CUDASIM:
        sys.exit("scale needs the CUDA simulator: run with NUMBA_ENABLE_CUDASIM=1 (or unset)")
    text = section(measure(a.repeats), a.repeats)
    if not a.no_write:
        write_section(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
