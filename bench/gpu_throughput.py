"""GPU throughput: allocations per second against the atomic floor and CUDA's malloc.

Needs a CUDA GPU; on a machine without one it says so and exits 0 (it
calls ``devalloc.target.choose()`` before numba is imported).

For the workloads of Winter et al. ("Are dynamic memory managers on GPUs
slow?", PPoPP 2021): 10K, 100K and 1M threads, each allocating 16 B, 1 KiB,
8 KiB, or a size drawn from 16-4096 B (seeded), it measures

* **alloc/s**: one ``devalloc.alloc`` per thread (offsets stored; the heap is
  reset, untimed, before every launch);
* **pairs/s**: ``alloc``, write one byte through ``view``, ``free``;
* **bump/s**: one ``devalloc.bump`` per thread (fixed sizes only);
* **floor/s**: one ``cuda.atomic.add`` on a counter per thread, the cost of
  a hand-written bump allocator (the issue's floor);
* **NRT pairs/s**: ``np.empty`` inside the kernel with numba-cuda's NRT,
  which takes the bytes from CUDA's device ``malloc`` and gives them back
  with ``free`` when the array dies at the end of the thread, so only the
  alloc+free pair can be timed. NRT kernels are compiled with
  ``config.CUDA_ENABLE_NRT`` set for them alone, and timed last: NRT does
  not check ``malloc``'s result, so a failed ``malloc`` ends in an illegal
  address and a dead context. The device ``malloc`` heap is sized first
  (``cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)``, settable only before the
  first kernel that calls ``malloc``); workloads that do not fit it are
  skipped, and any CUDA error stops the NRT measurements, saying so.

and the three versions of ``kernels/step_scratch.py`` (scoped scratch,
alloc/free per step, worst-case preallocation) at 100K threads.

Timing: CUDA events recorded on one stream around each launch, ``--warmup``
launches first (the first one compiles), then the median of ``--runs``; a
short sleeping kernel before each start event keeps Python's launch overhead
out of the timed interval (``EventTimer``).
Threads per block: 256. Heaps are sized for every thread's block at once
(they all may be live together on a GPU); a workload whose heap does not fit
in 90 % of the device's free memory is skipped and reported as such.

Run: ``.venv/bin/python bench/gpu_throughput.py`` (rewrites the "GPU
throughput" section of ``bench/RESULTS.md``; ``--no-write`` only prints).
``--compile-only [--cc 90]`` compiles every kernel to PTX with
``devalloc.aot.compile_ptx`` and needs no GPU (the test suite runs it).
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

THREADS = (10_000, 100_000, 1_000_000)
#: (name, bytes per thread; None: drawn from 16-4096 B)
WORKLOADS = (("16 B", 16), ("1 KiB", 1024), ("8 KiB", 8192), ("mixed 16-4096 B", None))
BLOCK = 256
RUNS = 7
WARMUP = 2
SEED = 1
STEP_THREADS = 100_000
#: Microseconds the stream is held busy before each start event.
HOLD_US = 2000
#: Share of the device's free memory a heap (or NRT's malloc heap) may take.
MEMORY_SHARE = 0.9
NO_GPU = ("gpu_throughput.py needs a CUDA GPU: {why}. Nothing was measured "
          "(the simulator cannot time a GPU).")


def sizes_for(n, nbytes, seed=SEED):
    """Return the per-thread sizes of a workload (int64 host array)."""
    import numpy as np

    if nbytes is None:
        return np.random.default_rng(seed).integers(16, 4097, n).astype(np.int64)
    return np.full(n, nbytes, np.int64)


def heap_capacity(sizes):
    """Return a capacity that holds one block of every size at once, plus a slab per class."""
    import numpy as np

    from devalloc import layout as L

    uniq, counts = np.unique(sizes, return_counts=True)
    per_class = {}
    pages = 0
    for size, count in zip(uniq.tolist(), counts.tolist()):
        if size <= L.MAX_SMALL:
            c = L.size_class(size)
            per_class[c] = per_class.get(c, 0) + count
        else:
            pages += count * L.pages_for(size)
    pages += sum(-(-count // L.class_blocks(c)) for c, count in per_class.items())
    return L.capacity_for_pages(pages + L.NCLASSES + pages // 20)


class EventTimer:
    """Median GPU time of a launch, from CUDA events on ``stream``.

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

    def median_ms(self, launch, before=None):
        """Return the median milliseconds of ``launch()``; ``before()`` runs untimed."""
        times = []
        for k in range(self.warmup + self.runs):
            if before is not None:
                before()
            self.hold[1, 1, self.stream](HOLD_US)
            self.start.record(self.stream)
            launch()
            self.end.record(self.stream)
            self.end.synchronize()
            if k >= self.warmup:
                times.append(self.cuda.event_elapsed_time(self.start, self.end))
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


def _rate(n, ms):
    return n / (ms / 1e3)


def measure_devalloc(timer, threads=THREADS):
    """Return one row per (threads, workload): devalloc, bump and the floor."""
    import numpy as np
    from numba import cuda

    import _gpu_kernels as K
    import devalloc

    s = timer.stream
    rows = []
    for n in threads:
        grid = (n + BLOCK - 1) // BLOCK
        out = cuda.device_array(n, np.int64, stream=s)
        counter = cuda.to_device(np.zeros(1, np.int64), stream=s)
        floor_ms = timer.median_ms(lambda: K.bump_floor[grid, BLOCK, s](counter, n, out))
        for name, nbytes in WORKLOADS:
            row = {"threads": n, "workload": name, "floor_ms": floor_ms}
            rows.append(row)
            sizes = sizes_for(n, nbytes)
            cap = heap_capacity(sizes)
            free = _free_memory()
            if cap > MEMORY_SHARE * free:
                row["skipped"] = f"heap of {cap / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
                continue
            heap = devalloc.Heap(cap, stream=s)
            d_sizes = cuda.to_device(sizes, stream=s)
            reset = lambda: heap.reset(s)  # noqa: E731
            if nbytes is None:
                a = lambda: K.alloc_sized[grid, BLOCK, s](heap.ctx, d_sizes, n, out)  # noqa: E731
                p = lambda: K.pair_sized[grid, BLOCK, s](heap.ctx, d_sizes, n, out)  # noqa: E731
                b = None
            else:
                a = lambda: K.alloc_fixed[grid, BLOCK, s](heap.ctx, nbytes, n, out)  # noqa: E731
                p = lambda: K.pair_fixed[grid, BLOCK, s](heap.ctx, nbytes, n, out)  # noqa: E731
                b = lambda: K.bump_fixed[grid, BLOCK, s](heap.ctx, nbytes, n, out)  # noqa: E731
            row["alloc_ms"] = timer.median_ms(a, reset)
            row["alloc_failed"] = heap.usage().failed
            row["pair_ms"] = timer.median_ms(p, reset)
            row["pair_failed"] = heap.usage().failed
            if b is not None:
                row["bump_ms"] = timer.median_ms(b, reset)
            row["heap_bytes"] = cap
            heap.close()
    return rows


def measure_nrt(timer, rows):
    """Add NRT (CUDA malloc) pair timings to ``rows``; return a note."""
    import numpy as np
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    import _gpu_kernels as K

    s = timer.stream
    rows = [r for r in rows if "skipped" not in r]
    if not rows:
        return "NRT not measured: no workload fitted."
    limit = int(min(MEMORY_SHARE * _free_memory(), max(map(_malloc_bytes, rows))))
    try:
        driver.cuCtxSetLimit(binding.CUlimit.CU_LIMIT_MALLOC_HEAP_SIZE, limit)
    except Exception as e:  # noqa: BLE001 (reported, not hidden)
        return f"NRT not measured: setting the malloc heap size failed: {e}"
    for r in rows:
        n = r["threads"]
        if _malloc_bytes(r) > limit:
            r["nrt"] = f"skipped: malloc heap {limit / 2**30:.1f} GiB"
            continue
        grid = (n + BLOCK - 1) // BLOCK
        nbytes = dict(WORKLOADS)[r["workload"]]
        out = cuda.device_array(n, np.uint8, stream=s)
        try:
            with K.nrt_enabled():
                if nbytes is None:
                    d_sizes = cuda.to_device(sizes_for(n, None), stream=s)
                    ms = timer.median_ms(lambda: K.NRT["nrt_sized"][grid, BLOCK, s](d_sizes, n, out))
                else:
                    ms = timer.median_ms(lambda: K.NRT["nrt_fixed"][grid, BLOCK, s](nbytes, n, out))
            s.synchronize()
            ok = bool((out.copy_to_host() == 1).all())
        except Exception as e:  # noqa: BLE001 (the context is gone: stop here)
            r["nrt"] = f"error: {type(e).__name__}"
            return f"NRT measurements stopped at {n} threads, {r['workload']}: {e}"
        r["nrt_ms"] = ms
        if not ok:
            r["nrt"] = "malloc failed in some threads"
    return f"NRT: CUDA malloc heap limit set to {limit} bytes."


def _malloc_bytes(row):
    """Return the malloc heap a row's NRT run may need: twice its bytes.

    Each thread's block is the data plus NRT's MemInfo header (rounded up
    to 64 bytes here); CUDA does not document its malloc's overhead, so
    twice the total is asked for and rows that need more are skipped.
    """
    n = row["threads"]
    largest = int(sizes_for(n, dict(WORKLOADS)[row["workload"]]).max())
    return 2 * n * (largest + 64)


def measure_step_scratch(timer, n=STEP_THREADS):
    """Return the median ms of the three step_scratch versions at ``n`` threads."""
    import numpy as np
    from numba import cuda

    import devalloc
    from devalloc.examples import _mc
    from devalloc.examples import step_scratch as S

    s = timer.stream
    grid = (n + BLOCK - 1) // BLOCK
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
        rows.append({"version": name, "ms": ms, "failed": int(failed.copy_to_host().sum()),
                     "bytes": u.peak, "what": "heap peak"})
    scratch = cuda.device_array((n, S.MAX_K), np.float32, stream=s)
    ms = timer.median_ms(lambda: S.path_worst_case[grid, BLOCK, s](scratch, states, out),
                         lambda: states.copy_to_device(seeds, stream=s))
    rows.append({"version": "worst case (preallocated)", "ms": ms, "failed": 0,
                 "bytes": n * S.MAX_K * 4, "what": "scratch array"})
    heap.close()
    return rows


# ------------------------------------------------------------------ report


def _fmt_rate(n, ms):
    return f"{_rate(n, ms):.3g}"


def throughput_table(rows):
    cols = [("threads", "r"), ("workload", "l"), ("alloc ms", "r"), ("alloc/s", "r"),
            ("pair ms", "r"), ("pairs/s", "r"), ("bump/s", "r"), ("floor ms", "r"),
            ("floor/s", "r"), ("alloc / floor time", "r"), ("NRT pair ms", "r"),
            ("NRT pairs/s", "r"), ("NRT / devalloc pair time", "r"), ("NULLs", "r")]
    out = []
    for r in rows:
        n = r["threads"]
        if "skipped" in r:
            out.append([n, r["workload"], "skipped: " + r["skipped"]] + [""] * (len(cols) - 3))
            continue
        nrt = r.get("nrt_ms")
        out.append([
            n, r["workload"], f"{r['alloc_ms']:.4f}", _fmt_rate(n, r["alloc_ms"]),
            f"{r['pair_ms']:.4f}", _fmt_rate(n, r["pair_ms"]),
            _fmt_rate(n, r["bump_ms"]) if "bump_ms" in r else "-",
            f"{r['floor_ms']:.4f}", _fmt_rate(n, r["floor_ms"]),
            f"{r['alloc_ms'] / r['floor_ms']:.1f}",
            f"{nrt:.4f}" if nrt else r.get("nrt", "-"),
            _fmt_rate(n, nrt) if nrt else "-",
            f"{nrt / r['pair_ms']:.1f}" if nrt else "-",
            f"{r['alloc_failed']}/{r['pair_failed']}",
        ])
    return markdown_table(cols, out)


def step_table(rows, n):
    cols = [("version", "l"), ("ms", "r"), ("paths/s", "r"), ("bytes", "r"), ("of", "l"),
            ("failed", "r")]
    return markdown_table(cols, [[r["version"], f"{r['ms']:.3f}", _fmt_rate(n, r["ms"]),
                                  r["bytes"], r["what"], r["failed"]] for r in rows])


def gpu_description():
    from numba import cuda
    from numba.cuda.cudadrv.driver import get_version

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    cc = ".".join(map(str, dev.compute_capability))
    return f"{name} (cc {cc}), CUDA driver {'.'.join(map(str, get_version()))}"


def run(args):
    from numba import cuda

    timer = EventTimer(cuda.stream(), args.runs, args.warmup)
    rows = measure_devalloc(timer, args.threads)
    steps = measure_step_scratch(timer)
    note = measure_nrt(timer, rows) if not args.no_nrt else "NRT not measured (--no-nrt)."
    lines = header("GPU throughput", ".venv/bin/python bench/gpu_throughput.py",
                   f"{environment()}; {gpu_description()}")
    lines += [
        f"Medians of {args.runs} launches after {args.warmup} warm-up launches, CUDA "
        "events (a sleeping kernel before each start keeps the launch overhead out), "
        f"{BLOCK} threads per block. `pair`: alloc, write a byte, free. "
        "`floor`: one `cuda.atomic.add` per thread. `NRT`: `np.empty` in the kernel "
        f"(CUDA malloc + free). `NULLs`: failed allocs in the alloc / pair runs. {note}",
        "",
        throughput_table(rows),
        "",
        f"`kernels/step_scratch.py`, {STEP_THREADS} threads:",
        "",
        step_table(steps, STEP_THREADS),
    ]
    text = "\n".join(lines)
    if not args.no_write:
        write_section(text)
    print(text)
    return 0


# ------------------------------------------------------------ compile only


def compile_only(ccs, assemble=False):
    """Compile every kernel to PTX for each cc; return one dict per kernel and cc."""
    from devalloc import aot
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
                   "calls_nrt": "NRT_" in ptx}
            if assemble and not nrt:  # NRT kernels need NRT's library linked in
                r = aot.assemble(ptx, cc)
                row.update(registers=r.registers, spill_bytes=r.spill_bytes)
            out.append(row)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=list(THREADS))
    p.add_argument("--runs", type=int, default=RUNS)
    p.add_argument("--warmup", type=int, default=WARMUP)
    p.add_argument("--no-nrt", action="store_true", help="skip CUDA malloc (NRT) timings")
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    p.add_argument("--compile-only", action="store_true",
                   help="compile every kernel to PTX (no GPU needed), print JSON")
    p.add_argument("--cc", nargs="+", default=["90"], help="with --compile-only: e.g. 75 90")
    p.add_argument("--assemble", action="store_true",
                   help="with --compile-only: also ptxas (registers, spills)")
    a = p.parse_args(argv)
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
