"""GPU throughput of alloc and free, measured the way Winter et al.'s survey measures it.

Needs a CUDA GPU; on a machine without one it says so and exits 0 (it
calls ``devalloc.target.choose()`` before numba is imported).

**The survey.** Winter, Parger, Mlakar, Steinberger, "Are dynamic memory
managers on GPUs slow? A survey and benchmarks" (PPoPP 2021); its code,
GPUPeople/GPUMemManSurvey, times allocation in
``tests/alloc_tests/perf_allocation.cu`` (the paper's Fig. 9a-c). This script
follows that protocol with devalloc's kernels (``bench/_gpu_kernels.py``).

**Protocol.** For each variant, allocation count ``n`` (``--threads``:
10K, 100K, 1M; the survey's default is 10K, its Fig. 9a/b use 100K threads
and 9c 10K warps) and size (``--sizes``: 4 B, 8 B, ..., 8 KiB, powers of
two; the survey steps by 4 B), one heap is created and then, ``--iterations``
times (100, the survey's figure), **without a reset in between**:

1. the floor kernel, timed: one ``cuda.atomic.add`` of the size on a counter
   per allocation, the cost of a hand-written bump allocator, measured in
   the same run with the same launch shape;
2. the alloc kernel, timed: each allocation's offset is stored;
3. untimed, as the survey does: every 4-byte word of each block is written
   with its allocation's index and read back (blocks that do not hold it
   are counted: overlapping blocks);
4. the free kernel, timed: each stored offset is freed.

Alloc and free are timed separately, one launch each. Each figure is
reported as the mean and the median over the iterations (the survey reports
both; the mean includes iteration 0, as the survey's does) and divided by
the floor's figure of the same row (median by median, mean by mean).
Iteration 0 is also set against the median of the later ones: it is the
first touch of the heap's pages and hints (cold caches and TLB).
``NULLs`` counts allocations that failed, ``bad blocks`` the check's finds.

Later iterations allocate where earlier ones freed. With devalloc, a slab
whose last block is freed goes back to the free pages, so, every block being
freed at each iteration, iteration ``k + 1`` takes the same pages again as
fresh slabs (hints pointing at them, lines in L2): the path that reuses
freed blocks of a partly live slab (bitmap) is not what this protocol times.

**Variants** (as the survey's ``warp_based`` template argument):

* ``thread``: ``n`` threads, each allocates ``size`` bytes and frees them;
* ``warp``: ``32 * n`` threads; lane 0 of each of the ``n`` warps allocates
  ``size`` bytes (the size a thread asks for, not ``32 * size``) and frees
  them, the other 31 lanes do nothing. So ``n`` allocations as before, but
  one per warp: devalloc's warp grouping has nothing to merge, and 32 times
  as many warps are in flight. The floor of a warp row is the warp-based
  floor (lane 0 of each warp adds).

**Comparing with the survey.** Compare ratios to the floor, not
milliseconds: the survey's tables are milliseconds on its GPUs (TITAN V,
2080 Ti), which say nothing about another GPU. A figure of ours divided by
the floor, set beside the survey's figure for a manager divided by the cost
of one atomic on its GPU, is the comparison that carries over.

**Baseline: CUDA's malloc through NRT** (``--no-nrt`` skips it).
``np.empty`` inside a kernel with numba-cuda's NRT takes the bytes from
CUDA's device ``malloc`` and gives them back with ``free`` when the array
dies at the end of the thread. So NRT cannot time an alloc kernel and a free
kernel apart: only ``pair`` kernels (alloc, write a byte, free in one thread)
are timed, NRT's and devalloc's alike, ``--iterations`` times, after the
alloc/free loop. NRT kernels are compiled with ``config.CUDA_ENABLE_NRT``
set for them alone and are timed last: NRT does not check ``malloc``'s
result, so a failed ``malloc`` ends in an illegal address and a dead
context. The device ``malloc`` heap is sized first
(``cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)``, settable only before the
first kernel that calls ``malloc``); rows that do not fit it are skipped,
and any CUDA error stops the NRT measurements, saying so.

Also timed (medians of ``--runs`` launches after ``--warmup``): the three
versions of ``kernels/step_scratch.py`` (scoped scratch, alloc/free per
step, worst-case preallocation) at 100K threads.

**Heaps** hold one iteration's whole live set at once (on a GPU all blocks
may be live together): ``n`` blocks of the size's class, in whole slabs
(``layout.class_blocks`` per page), plus one partly filled slab per hint
slot a class may spread over under contention (at most
``layout.HINT_SLOTS``: that many slabs of a class fill side by side);
sizes over 8 KiB take whole pages each. The survey gave every manager 8 GiB
whatever the workload. A heap that does not fit in 90 % of the device's free
memory is skipped and reported as such. ``peak`` is the heap's high-water
mark of pages actually held.

**Timing.** CUDA events recorded on one stream around each launch. Before
each start event a short sleeping kernel keeps Python's launch overhead out
of the timed interval (``EventTimer``; the survey's events, from C++,
include its smaller launch overhead); every kernel is compiled and loaded
by a launch that does nothing before anything is timed. Threads per block:
256, as the survey's.

Run: ``.venv/bin/python bench/gpu_throughput.py`` (rewrites the "GPU
throughput" section of ``bench/RESULTS.md``; ``--no-write`` only prints,
``--json FILE`` also saves every iteration's times). ``--quick``: 5
iterations, 4 sizes, 10K allocations, 1K-thread step_scratch.
``--compile-only [--cc 90]`` compiles every kernel to PTX with
``devalloc.tools.aot.compile_ptx`` and needs no GPU (the test suite runs it).
"""

import argparse
import contextlib
import json
import os
import statistics
import sys

from _results import add_root_to_path, environment, header, markdown_table, write_section

add_root_to_path()

from devalloc import target  # noqa: E402  (imports no numba)

VARIANTS = ("thread", "warp")
#: Allocations per launch (threads, or warps in the warp variant).
THREADS = (10_000, 100_000, 1_000_000)
#: Bytes per allocation: 4 B to 8 KiB, powers of two.
SIZES = tuple(4 << k for k in range(12))
ITERATIONS = 100
#: What --quick changes (unless given explicitly).
QUICK = {"iterations": 5, "sizes": (4, 64, 1024, 8192), "threads": (10_000,),
         "runs": 3, "warmup": 1, "step_threads": 1_000}
BLOCK = 256
WARP = 32
RUNS = 7
WARMUP = 2
SEED = 1
STEP_THREADS = 100_000
#: Microseconds the stream is held busy before each start event.
HOLD_US = 2000
#: Share of the device's free memory a heap (or NRT's malloc heap) may take.
MEMORY_SHARE = 0.9
#: Bytes NRT adds to each malloc'ed block (its MemInfo header), rounded up.
NRT_HEADER = 64
NO_GPU = ("gpu_throughput.py needs a CUDA GPU: {why}. Nothing was measured "
          "(the simulator cannot time a GPU).")


def launch_threads(variant, n):
    """Return the threads a launch of ``n`` allocations of ``variant`` has."""
    return n * WARP if variant == "warp" else n


def grid_for(threads):
    """Return the blocks of BLOCK threads covering ``threads`` (at least one)."""
    return max(1, -(-threads // BLOCK))


def heap_pages(n, nbytes):
    """Return the pages a heap needs for ``n`` live blocks of ``nbytes`` at once.

    Small blocks: the live set in whole slabs of the size's class, plus one
    partly filled slab per hint slot a class may spread over (at most
    HINT_SLOTS slabs of one class fill side by side). With fewer pages every
    allocation still succeeds (the page index finds any slab with room).
    Large blocks (over ``MAX_SMALL``): whole pages each.
    """
    from devalloc import layout as L

    if nbytes > L.MAX_SMALL:
        return n * L.pages_for(nbytes)
    return -(-n // L.class_blocks(L.size_class(nbytes))) + L.HINT_SLOTS


def heap_capacity(n, nbytes):
    """Return the capacity of a heap of :func:`heap_pages` pages (metadata beside it)."""
    from devalloc import layout as L

    return L.capacity_for_pages(heap_pages(n, nbytes))


class EventTimer:
    """GPU time of launches, from CUDA events on ``stream``.

    Before each start event a one-thread kernel sleeps ``HOLD_US``
    microseconds on the stream, so the timed launch is queued before the GPU
    records the start: the host's launch overhead is not timed.
    """

    def __init__(self, stream, runs=RUNS, warmup=WARMUP):
        from numba import cuda

        import _gpu_kernels as K

        self.hold = K.hold
        self.cuda = cuda
        self.stream = stream
        self.runs = runs
        self.warmup = warmup
        self.start = cuda.event(timing=True)
        self.end = cuda.event(timing=True)
        self.hold[1, 1, stream](0)  # compiled and loaded before any timing

    def once_ms(self, launch):
        """Return the milliseconds of one ``launch()``."""
        self.hold[1, 1, self.stream](HOLD_US)
        self.start.record(self.stream)
        launch()
        self.end.record(self.stream)
        self.end.synchronize()
        return self.cuda.event_elapsed_time(self.start, self.end)

    def median_ms(self, launch, before=None):
        """Return the median ms of ``runs`` launches after ``warmup``; ``before()`` untimed."""
        times = []
        for k in range(self.warmup + self.runs):
            if before is not None:
                before()
            ms = self.once_ms(launch)
            if k >= self.warmup:
                times.append(ms)
        return statistics.median(times)


def _free_memory():
    from numba import cuda

    ctx = cuda.current_context()
    # Numba's own memory manager defers frees: free closed heaps now, so the
    # next one finds the room (an EMM plugin may have no such list).
    pending = getattr(getattr(ctx, "memory_manager", None), "deallocations", None)
    if pending is not None:
        pending.clear()
    return ctx.get_memory_info()[0]


#: The page of the measured heaps (``--page``; None: the default 16 KiB).
PAGE = None


def measure_config(timer, variant, n, nbytes, iterations):
    """Run the protocol for one (variant, allocations, size); return its row.

    The row has ``times``: per-iteration milliseconds of ``floor``,
    ``alloc``, ``free`` and ``pair`` (``nrt`` is added by
    :func:`measure_nrt`), the heap's counts after the alloc/free loop, and
    ``floor_bytes``, what the floor kernels bumped in all.
    """
    import numpy as np
    from numba import cuda

    import _gpu_kernels as K
    import devalloc

    row = {"variant": variant, "allocs": n, "bytes": nbytes,
           "heap_bytes": heap_capacity(n, nbytes), "page": PAGE or devalloc.PAGE}
    free_mem = _free_memory()
    if row["heap_bytes"] > MEMORY_SHARE * free_mem:
        row["skipped"] = (f"heap of {row['heap_bytes'] / 2**30:.1f} GiB, "
                          f"{free_mem / 2**30:.1f} GiB free")
        return row
    s = timer.stream
    k = K.VARIANTS[variant]
    grid = grid_for(launch_threads(variant, n))
    tgrid = grid_for(n)  # touch and check: one thread per allocation
    heap = devalloc.Heap(row["heap_bytes"], stream=s, page=PAGE)
    try:
        ctx = heap.ctx
        offs = cuda.device_array(n, np.int64, stream=s)
        bumped = cuda.device_array(n, np.int64, stream=s)
        counter = cuda.to_device(np.zeros(1, np.int64), stream=s)
        bad = cuda.to_device(np.zeros(1, np.int64), stream=s)
        launch = {
            "floor": lambda m: k["floor"][grid, BLOCK, s](counter, nbytes, m, bumped),
            "alloc": lambda m: k["alloc"][grid, BLOCK, s](ctx, nbytes, m, offs),
            "free": lambda m: k["free"][grid, BLOCK, s](ctx, m, offs),
            "pair": lambda m: k["pair"][grid, BLOCK, s](ctx, nbytes, m, offs),
            "touch": lambda m: K.touch[tgrid, BLOCK, s](ctx, nbytes, m, offs),
            "check": lambda m: K.check[tgrid, BLOCK, s](ctx, nbytes, m, offs, bad),
        }
        for f in launch.values():
            f(0)  # compiles and loads the kernel; no thread does anything
        times = {"floor": [], "alloc": [], "free": []}
        for _ in range(iterations):
            times["floor"].append(timer.once_ms(lambda: launch["floor"](n)))
            times["alloc"].append(timer.once_ms(lambda: launch["alloc"](n)))
            launch["touch"](n)
            launch["check"](n)
            times["free"].append(timer.once_ms(lambda: launch["free"](n)))
        u = heap.usage(s)  # synchronizes s
        row.update(done_allocs=u.allocs, done_frees=u.frees, live_blocks=u.live_blocks,
                   peak=u.peak, failed=u.failed, invalid_frees=u.invalid_frees,
                   bad_blocks=int(bad.copy_to_host(stream=s)[0]),
                   floor_bytes=int(counter.copy_to_host(stream=s)[0]))
        times["pair"] = [timer.once_ms(lambda: launch["pair"](n)) for _ in range(iterations)]
        row["pair_failed"] = heap.usage(s).failed - u.failed
    finally:
        heap.close()
    row["times"] = times
    return row


def measure(timer, variants, threads, sizes, iterations, progress=True):
    """Return the rows of every (variant, allocations, size), in that order."""
    from tqdm import tqdm

    configs = [(v, n, b) for v in variants for n in threads for b in sizes]
    rows = []
    # disable=None: a bar on a terminal only, nothing in logs
    with tqdm(total=len(configs), unit="config", disable=None if progress else True,
              file=sys.stderr) as bar:
        for v, n, b in configs:
            bar.set_postfix_str(f"{v} {n} x {b} B")
            rows.append(measure_config(timer, v, n, b, iterations))
            bar.update()
    return rows


def measure_nrt(timer, rows, iterations):
    """Add NRT (CUDA malloc) pair timings to ``rows``; return a note."""
    import numpy as np
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    import _gpu_kernels as K

    s = timer.stream
    rows = [r for r in rows if "skipped" not in r]
    if not rows:
        return "NRT not measured: no row fitted."
    limit = int(min(MEMORY_SHARE * _free_memory(), max(map(_malloc_bytes, rows))))
    try:
        driver.cuCtxSetLimit(binding.CUlimit.CU_LIMIT_MALLOC_HEAP_SIZE, limit)
    except Exception as e:  # noqa: BLE001 (reported, not hidden)
        return f"NRT not measured: setting the malloc heap size failed: {e}"
    for r in rows:
        n, nbytes = r["allocs"], r["bytes"]
        if _malloc_bytes(r) > limit:
            r["nrt"] = f"skipped: malloc heap {limit / 2**30:.1f} GiB"
            continue
        kern = K.VARIANTS[r["variant"]]["nrt"]
        grid = grid_for(launch_threads(r["variant"], n))
        out = cuda.to_device(np.zeros(n, np.uint8), stream=s)
        try:
            with K.nrt_enabled():
                kern[grid, BLOCK, s](nbytes, 0, out)  # compile and load
                times = [timer.once_ms(lambda: kern[grid, BLOCK, s](nbytes, n, out))
                         for _ in range(iterations)]
            s.synchronize()
            ok = bool((out.copy_to_host() == 1).all())
        except Exception as e:  # noqa: BLE001 (the context is gone: stop here)
            r["nrt"] = f"error: {type(e).__name__}"
            return (f"NRT measurements stopped at {r['variant']} {n} x {nbytes} B: "
                    f"{type(e).__name__}: {e}")
        r["times"]["nrt"] = times
        if not ok:
            r["nrt"] = "malloc failed in some threads"
    return f"CUDA malloc heap limit set to {limit} bytes."


def _malloc_bytes(row):
    """Return the malloc heap a row's NRT run may need: twice its bytes.

    Each allocation is the data plus NRT's MemInfo header (NRT_HEADER bytes
    here); CUDA does not document its malloc's overhead, so twice the total
    is asked for and rows that need more are skipped.
    """
    return 2 * row["allocs"] * (row["bytes"] + NRT_HEADER)


def measure_step_scratch(timer, n=STEP_THREADS):
    """Return the median ms of the three step_scratch versions at ``n`` threads."""
    import numpy as np
    from numba import cuda

    import devalloc
    from devalloc.examples import _mc
    from devalloc.examples import step_scratch as S

    s = timer.stream
    grid = grid_for(n)
    seeds = _mc.rng_states(n, SEED)
    states = cuda.to_device(seeds, stream=s)
    out = cuda.device_array(n, np.float64, stream=s)
    failed = cuda.to_device(np.zeros(n, np.int32), stream=s)
    heap = devalloc.Heap(256 << 20, stream=s)

    def fresh():  # the kernels advance the RNG states: start every run alike
        states.copy_to_device(seeds, stream=s)
        failed.copy_to_device(np.zeros(n, np.int32), stream=s)
        heap.reset(s)

    rows = []
    for name, kernel in (("scoped", S.path_scoped), ("alloc/free per step", S.path_alloc_free)):
        ms = timer.median_ms(lambda: kernel[grid, BLOCK, s](heap.ctx, states, out, failed), fresh)
        u = heap.usage()  # synchronizes s
        # Allocations that returned NULL in the last timed run (the heap's
        # count: the kernels' per-thread flags would count threads).
        rows.append({"version": name, "ms": ms, "failed": int(u.failed),
                     "bytes": u.peak, "what": "heap peak"})
    scratch = cuda.device_array((n, S.MAX_K), np.float32, stream=s)
    ms = timer.median_ms(lambda: S.path_worst_case[grid, BLOCK, s](scratch, states, out),
                         lambda: states.copy_to_device(seeds, stream=s))
    rows.append({"version": "worst case (preallocated)", "ms": ms, "failed": 0,
                 "bytes": n * S.MAX_K * 4, "what": "scratch array"})
    heap.close()
    return rows


# ------------------------------------------------------------------ report


def summarize(row):
    """Return a row's figures: mean and median ms, ratios to the floor, iteration 0.

    ``ms[kind] = (mean, median)``; ``ratio[kind] = (median / floor median,
    mean / floor mean)`` for alloc, free, pair and nrt (when timed);
    ``first[kind]``: iteration 0 over the median of the later iterations
    (None with one iteration) for alloc and free.
    """
    times = row["times"]
    ms = {k: (statistics.fmean(v), statistics.median(v)) for k, v in times.items() if v}
    f_mean, f_median = ms["floor"]
    ratio = {k: (ms[k][1] / f_median, ms[k][0] / f_mean)
             for k in ("alloc", "free", "pair", "nrt") if k in ms}
    first = {k: (times[k][0] / statistics.median(times[k][1:]) if len(times[k]) > 1 else None)
             for k in ("alloc", "free")}
    return {"ms": ms, "ratio": ratio, "first": first}


def _size(nbytes):
    return f"{nbytes // 1024} KiB" if nbytes >= 1024 else f"{nbytes} B"


def _amount(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def _ratio(r):
    return f"{r[0]:.2f} ({r[1]:.2f})"


COLUMNS = [("allocations", "r"), ("size", "r"), ("heap", "r"), ("peak", "r"),
           ("alloc ms mean / median", "r"), ("free ms mean / median", "r"),
           ("floor ms mean / median", "r"), ("alloc ÷ floor", "r"), ("free ÷ floor", "r"),
           ("pair ÷ floor", "r"), ("NRT pair ÷ floor", "r"),
           ("iteration 0 ÷ later: alloc, free", "r"), ("NULLs", "r"), ("bad blocks", "r")]


def throughput_table(rows):
    """Return the Markdown table of ``rows`` (one variant's)."""
    out = []
    for r in rows:
        if "skipped" in r:
            out.append([f"{r['allocs']:,}", _size(r["bytes"]), "skipped: " + r["skipped"]]
                       + [""] * (len(COLUMNS) - 3))
            continue
        s = summarize(r)
        ms, ratio, first = s["ms"], s["ratio"], s["first"]
        out.append([
            f"{r['allocs']:,}", _size(r["bytes"]), _amount(r["heap_bytes"]), _amount(r["peak"]),
            *(f"{ms[k][0]:.4f} / {ms[k][1]:.4f}" for k in ("alloc", "free", "floor")),
            _ratio(ratio["alloc"]), _ratio(ratio["free"]), _ratio(ratio["pair"]),
            _ratio(ratio["nrt"]) if "nrt" in ratio else r.get("nrt", "-"),
            ", ".join("-" if first[k] is None else f"{first[k]:.2f}" for k in ("alloc", "free")),
            f"{r['failed']} / {r['pair_failed']}", r["bad_blocks"],
        ])
    return markdown_table(COLUMNS, out)


def first_touch_note(rows):
    """Return one sentence on iteration 0 against the later iterations."""
    firsts = [summarize(r)["first"] for r in rows if "skipped" not in r]
    parts = []
    for k in ("alloc", "free"):
        vals = [f[k] for f in firsts if f[k] is not None]
        if vals:
            parts.append(f"{k} {min(vals):.2f} to {max(vals):.2f} times")
    if not parts:
        return "One iteration only: no first-touch comparison."
    return ("Iteration 0 (first touch of the heap) took " + " and ".join(parts)
            + " the median of the later iterations, over the rows.")


def step_table(rows, n):
    cols = [("version", "l"), ("ms", "r"), ("paths/s", "r"), ("bytes", "r"), ("of", "l"),
            ("failed", "r")]
    return markdown_table(cols, [[r["version"], f"{r['ms']:.3f}", f"{n / (r['ms'] / 1e3):.3g}",
                                  r["bytes"], r["what"], r["failed"]] for r in rows])


def gpu_description():
    from numba import cuda
    from numba.cuda.cudadrv.driver import get_version

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    cc = ".".join(map(str, dev.compute_capability))
    return f"{name} (cc {cc}), CUDA driver {'.'.join(map(str, get_version()))}"


def report(args, rows, steps, note):
    """Return the "GPU throughput" section of RESULTS.md."""
    command = " ".join([".venv/bin/python bench/gpu_throughput.py", *args.argv])
    lines = header("GPU throughput", command, f"{environment()}; {gpu_description()}")
    lines += [
        "Protocol of Winter et al. (PPoPP 2021, `tests/alloc_tests/perf_allocation.cu`): "
        f"per row one heap, {args.iterations} iterations without a reset, each timing a "
        "floor kernel (one `cuda.atomic.add` per allocation), an alloc kernel and, after an "
        "untimed write and check of every block, a free kernel, each with CUDA events (a "
        f"sleeping kernel before each start keeps the launch overhead out); {BLOCK} threads "
        "per block. Times are mean / median over the iterations (iteration 0 included); "
        "`÷ floor` is median ÷ floor median (mean ÷ floor mean), the figure to set beside the "
        "survey's: compare ratios to the floor, not milliseconds across GPUs. `pair`: alloc, "
        "write a byte, free in one kernel, the only shape NRT (`np.empty` in the kernel: CUDA "
        "malloc, freed at thread end) can be timed in. `NULLs`: failed allocs in the "
        "alloc/free loop / the pair loop. `bad blocks`: blocks that did not read back what was "
        f"written. Heaps: one iteration's live set in whole slabs plus one slab per hint slot, "
        f"pages of {PAGE or 16384:,} B (`--page`). "
        f"{first_touch_note(rows)} NRT: {note}",
    ]
    for v in VARIANTS:
        mine = [r for r in rows if r["variant"] == v]
        if not mine:
            continue
        what = ("each thread allocates" if v == "thread" else
                "32 threads per allocation: lane 0 of each warp allocates the size, "
                "the other lanes idle")
        lines += ["", f"### {v}-based ({what})", "", throughput_table(mine)]
    lines += ["", f"`kernels/step_scratch.py`, {args.step_threads} threads (medians of "
              f"{args.runs} launches after {args.warmup}):", "",
              step_table(steps, args.step_threads)]
    return "\n".join(lines)


def run(args):
    from numba import cuda

    global PAGE
    PAGE = args.page
    timer = EventTimer(cuda.stream(), args.runs, args.warmup)
    rows = measure(timer, args.variants, args.threads, args.sizes, args.iterations)
    steps = measure_step_scratch(timer, args.step_threads)
    note = (measure_nrt(timer, rows, args.iterations) if not args.no_nrt
            else "not measured (--no-nrt).")
    text = report(args, rows, steps, note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "step_scratch": steps, "nrt": note}, f)
    if not args.no_write:
        write_section(text)
    print(text)
    return 0


# ------------------------------------------------------------ compile only


def compile_only(ccs, assemble=False):
    """Compile every kernel to PTX for each cc; return one dict per kernel and cc."""
    from devalloc.tools import aot
    import _gpu_kernels as K
    from devalloc.examples import _mc
    from devalloc.examples import step_scratch as S

    jobs = [(name, K.kernel(name), sig) for name, sig in K.SIGNATURES.items()]
    jobs += [(f"step_scratch.{name}", getattr(S, name), sig)
             for name, sig in _mc.signatures(S.SIGNATURES).items()]
    out = []
    for cc in ccs:
        for name, fn, sig in jobs:
            nrt = name.startswith("nrt_")
            with K.nrt_enabled() if nrt else contextlib.nullcontext():
                ptx, _ = aot.compile_ptx(fn, sig, cc=cc)
            row = {"kernel": name, "cc": list(cc), "ptx_chars": len(ptx),
                   "calls_nrt": "NRT_" in ptx, "atomics": ptx.count("atom.")}
            if assemble and not nrt:  # NRT kernels need NRT's library linked in
                r = aot.assemble(ptx, cc)
                row.update(registers=r.registers, spill_bytes=r.spill_bytes)
            out.append(row)
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help=f"allocations per launch (threads, or warps in the warp variant); "
                        f"default {' '.join(map(str, THREADS))}")
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help="bytes per allocation; default 4 8 16 ... 8192")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--iterations", type=int, default=None,
                   help=f"alloc/free iterations per row, no reset between them (default "
                        f"{ITERATIONS})")
    p.add_argument("--quick", action="store_true",
                   help="a short run: " + ", ".join(f"{k} {v}" for k, v in QUICK.items())
                        + " (options given explicitly win)")
    p.add_argument("--runs", type=int, default=None, help=f"step_scratch: timed launches ({RUNS})")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"step_scratch: launches before timing ({WARMUP})")
    p.add_argument("--step-threads", type=int, default=None,
                   help=f"step_scratch: threads ({STEP_THREADS})")
    p.add_argument("--no-nrt", action="store_true", help="skip CUDA malloc (NRT) timings")
    p.add_argument("--page", type=int, default=None,
                   help="the measured heaps' page (Heap(page=): 1024 .. 16384; default 16384)")
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    p.add_argument("--json", metavar="FILE", help="also save every iteration's times")
    p.add_argument("--compile-only", action="store_true",
                   help="compile every kernel to PTX (no GPU needed), print JSON")
    p.add_argument("--cc", nargs="+", default=["90"], help="with --compile-only: e.g. 75 90")
    p.add_argument("--assemble", action="store_true",
                   help="with --compile-only: also ptxas (registers, spills)")
    a = p.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    full = {"iterations": ITERATIONS, "sizes": SIZES, "threads": THREADS, "runs": RUNS,
            "warmup": WARMUP, "step_threads": STEP_THREADS}
    for key, value in (QUICK if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, list(value) if isinstance(value, tuple) else value)
    if a.iterations < 1:
        p.error("--iterations must be at least 1")
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.compile_only:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # compiling needs no GPU
        target.choose()
        ccs = [(int(c[:-1]), int(c[-1])) for c in a.cc]
        print(json.dumps(compile_only(ccs, a.assemble)))
        return 0
    if target.choose() != "gpu":
        why = ("NUMBA_ENABLE_CUDASIM is set" if target.gpu_available()
               else "no CUDA driver and device are usable here")
        print(NO_GPU.format(why=why))
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
