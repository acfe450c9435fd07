"""Operation counts on the CUDA simulator: atomics per allocation and per free.

Counts every simulated atomic by kind with ``devalloc.sim.atomics.count_atomics``
(exact) around separate launches, so that allocations and frees are counted
apart, for the standard workloads of issue 3, each in both warp-shim modes
(``devalloc.sim.warp.simulate``): "single" (every lane a group of one) and
"warp" (the lanes of a converged warp rendezvous and aggregate as on a GPU).

Workloads (``BLOCKS`` blocks of ``THREADS`` threads, sizes seeded):

* ``16 B``, ``1 KiB``: every thread allocates that size, then frees it;
* ``mixed``: every thread allocates 16-4096 B (uniform), then frees;
* ``25 %``: a quarter of the threads allocate 16 B, then free. In "single"
  mode every fourth thread (divergent); in "warp" mode every fourth *warp*,
  because the rendezvous needs every lane of a warp at the same call;
* ``churn``: after every thread allocated (not counted), ``CHURN_ROUNDS``
  rounds in which a random half of the threads (of the warps, in "warp"
  mode) free their block and allocate a new one of 16-4096 B.

Also exact single-thread figures (``uncontended``: the small-block path with
no other thread running) and a converged warp allocating one class, and
bumping one size, into a warm heap (``converged_warp``).

What each figure is:

* atomics per allocation / per free: atomics counted in the alloc launches
  over the blocks served, and in the free launches over the blocks freed;
* per allocating warp: alloc-launch atomics over the warps with at least one
  allocating lane (issue 3's "one atomic per warp" target);
* ``cas`` per allocation: every ``cas`` issued, successful or not; ``cas``
  retries per allocation: the ``cas`` that found another value than they
  expected and changed nothing (``AtomicCounts.cas_failed``), i.e. lost
  races;
* pages held, minimum pages: ``usage().reserved`` after the last counted
  alloc launch, and the fewest pages that could hold the live blocks of each
  class (``usage().classes``: ceil(blocks / blocks per slab) per class);
* page takes: the number of ``max`` atomics in the counted alloc launches.
  devalloc issues one (the peak update) each time it takes a page run for a
  slab, a large block or a bump chunk (``devalloc/device/pages.py``), so this
  counts slabs acquired, retakes after a slab was retired included.

Contention: the simulator runs one block at a time, its threads as Python
threads; the interpreter's switch interval is set to ``SWITCH_INTERVAL`` so
that they interleave inside ``alloc`` and ``free`` and races (``cas``
retries) happen. Those figures vary from run to run; each workload runs
``repeats`` times and the table gives means and the range.

Run: ``.venv/bin/python bench/op_counts.py`` (rewrites its section of
``bench/RESULTS.md``; ``--no-write`` only prints).
"""

import argparse
import sys
from dataclasses import dataclass, field

from _results import header, markdown_table, simulator_environment, use_simulator, write_section

use_simulator()  # before numba is imported

import numpy as np  # noqa: E402
from numba import config, cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc import layout as L  # noqa: E402
from devalloc.sim import warp  # noqa: E402
from devalloc.sim.atomics import count_atomics  # noqa: E402

NULL = devalloc.NULL
WARP = 32
MODES = ("single", "warp")
BLOCKS = 4
THREADS = 64
HEAP_PAGES = 128
CHURN_ROUNDS = 6
SEED = 2024
REPEATS = 3
#: Seconds between interpreter thread switches while counting (default 5e-3).
SWITCH_INTERVAL = 2e-5


# ------------------------------------------------------------------ kernels


@cuda.jit
def alloc_phase(ctx, sizes, offs):
    i = cuda.grid(1)
    if sizes[i] > 0:
        offs[i] = devalloc.alloc(ctx, sizes[i])


@cuda.jit
def free_phase(ctx, select, offs):
    i = cuda.grid(1)
    if select[i] != 0:
        devalloc.free(ctx, offs[i])
        offs[i] = NULL


@cuda.jit
def bump_phase(ctx, sizes, offs):
    i = cuda.grid(1)
    if sizes[i] > 0:
        offs[i] = devalloc.bump(ctx, sizes[i])


@cuda.jit
def alloc_sequence(ctx, nbytes, offs):
    for k in range(offs.shape[0]):
        offs[k] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def free_sequence(ctx, offs):
    for k in range(offs.shape[0]):
        devalloc.free(ctx, offs[k])


# ------------------------------------------------------------------ helpers


@dataclass
class Tally:
    """Atomics by kind over some launches, and what they served."""

    by_kind: dict = field(default_factory=dict)
    ops: int = 0        # blocks served (allocs) or freed (frees)
    warps: int = 0      # warps with at least one lane taking part
    cas_failed: int = 0     # cas that lost a race (retries)

    def add(self, counts, ops, warps=0):
        for k, v in counts.by_kind.items():
            self.by_kind[k] = self.by_kind.get(k, 0) + v
        self.cas_failed += counts.cas_failed
        self.ops += ops
        self.warps += warps

    @property
    def total(self):
        return sum(self.by_kind.values())

    def per_op(self, kind=None):
        n = self.total if kind is None else self.by_kind.get(kind, 0)
        return n / self.ops if self.ops else float("nan")

    def kinds_per_op(self):
        """Return {kind: count per op}, kinds in a fixed order."""
        return {k.rstrip("_"): self.by_kind[k] / self.ops for k in sorted(self.by_kind)} if self.ops else {}


def counted(mode, launch):
    """Run ``launch()`` in warp-shim ``mode`` and return its atomic counts."""
    with warp.simulate(mode), count_atomics() as n:
        launch()
    return n


def warps_in(mask):
    """Return how many warps of 32 consecutive threads have a lane in ``mask``."""
    mask = np.asarray(mask, bool)
    pad = (-mask.size) % WARP
    return int(np.pad(mask, (0, pad)).reshape(-1, WARP).any(axis=1).sum())


def min_pages(usage):
    """Return the fewest pages that hold the live small blocks of every class."""
    return sum(-(-c.blocks_live // (L.PAGE // size)) for size, c in usage.classes.items())


def selection(mode, rng, threads, fraction):
    """Return a bool mask of ``fraction`` of the threads: by lane ("single"), by warp ("warp")."""
    if mode == "single":
        return rng.random(threads) < fraction
    return np.repeat(rng.random(threads // WARP) < fraction, WARP)


def every_nth(mode, threads, n):
    """Return every ``n``-th thread ("single") or every ``n``-th warp ("warp")."""
    i = np.arange(threads)
    return (i % n == 0) if mode == "single" else ((i // WARP) % n == 0)


# --------------------------------------------------------------- workloads


def plan(name, mode, threads, rng):
    """Return the phases of workload ``name``: (kind, array, counted) tuples.

    ``("alloc", sizes)``: thread i allocates ``sizes[i]`` bytes (0: nothing);
    ``("free", select)``: selected threads free their block.
    """
    every = np.ones(threads, bool)
    mixed = lambda: rng.integers(16, 4097, threads)  # noqa: E731
    if name == "16 B":
        return [("alloc", np.full(threads, 16), True), ("free", every, True)]
    if name == "1 KiB":
        return [("alloc", np.full(threads, 1024), True), ("free", every, True)]
    if name == "mixed":
        return [("alloc", mixed(), True), ("free", every, True)]
    if name == "25 %":
        sel = every_nth(mode, threads, 4)
        return [("alloc", np.where(sel, 16, 0), True), ("free", sel, True)]
    if name == "churn":
        phases = [("alloc", mixed(), False)]
        for _ in range(CHURN_ROUNDS):
            sel = selection(mode, rng, threads, 0.5)
            phases += [("free", sel, True), ("alloc", np.where(sel, mixed(), 0), True)]
        return phases + [("free", every, False)]
    raise ValueError(f"unknown workload {name!r}")


WORKLOADS = ("16 B", "1 KiB", "mixed", "25 %", "churn")


def run_workload(name, mode, blocks=BLOCKS, threads=THREADS, seed=SEED, heap_pages=HEAP_PAGES,
                 profile=False):
    """Run workload ``name`` once in ``mode``; return its figures as a dict.

    ``profile``: on a heap with profile counters (their own ``add``s then
    count among the atomics: use the counts of a run without them).
    """
    n = blocks * threads
    rng = np.random.default_rng(seed)
    heap = devalloc.Heap(L.capacity_for_pages(heap_pages), profile=profile)
    offs = cuda.to_device(np.full(n, NULL, np.int64))
    allocs, frees = Tally(), Tally()
    failed = 0
    after_alloc = None
    for kind, arr, count in plan(name, mode, n, rng):
        arr = np.asarray(arr, np.int64)
        d_arr = cuda.to_device(arr)
        before = offs.copy_to_host()
        if kind == "alloc":
            launch = lambda: alloc_phase[blocks, threads](heap.ctx, d_arr, offs)  # noqa: E731
        else:
            launch = lambda: free_phase[blocks, threads](heap.ctx, d_arr, offs)  # noqa: E731
        counts = counted(mode, launch)
        after = offs.copy_to_host()
        if kind == "alloc":
            asked = arr > 0
            served = asked & (after != NULL)
            failed += int((asked & ~served).sum())
            if count:
                allocs.add(counts, int(served.sum()), warps_in(asked))
                after_alloc = heap.usage()
        elif count:
            frees.add(counts, int(((arr != 0) & (before != NULL)).sum()), warps_in(arr != 0))
    end = heap.usage()
    after_alloc = after_alloc or end  # no counted alloc launch ran
    return {
        "workload": name, "mode": mode, "threads": n,
        "allocs": allocs, "frees": frees, "failed": failed,
        "pages_held": after_alloc.reserved // L.PAGE,
        "min_pages": min_pages(after_alloc),
        "page_takes": allocs.by_kind.get("max", 0),
        "pages_after": end.reserved // L.PAGE,
        "usage_allocs": end.allocs, "usage_failed": end.failed,
        "profile": end.profile,
    }


def uncontended(nbytes=16, count=8, heap_pages=16):
    """Return exact single-thread costs of the small-block path.

    ``cold``: the first allocation in an empty heap (takes a page).
    ``alloc``/``free``: ``count`` allocations into, then frees from, a slab
    that already holds a block (so no page is taken or retired), per op.
    One thread, so nothing races: the figures are exact and repeatable.
    """
    heap = devalloc.Heap(L.capacity_for_pages(heap_pages))
    first = cuda.to_device(np.full(1, nbytes, np.int64))
    warm = cuda.to_device(np.full(1, NULL, np.int64))
    cold = Tally()
    cold.add(counted("single", lambda: alloc_phase[1, 1](heap.ctx, first, warm)), 1)
    offs = cuda.to_device(np.full(count, NULL, np.int64))
    a, f = Tally(), Tally()
    a.add(counted("single", lambda: alloc_sequence[1, 1](heap.ctx, nbytes, offs)), count)
    served = int((offs.copy_to_host() != NULL).sum())
    f.add(counted("single", lambda: free_sequence[1, 1](heap.ctx, offs)), count)
    return {"cold": cold, "alloc": a, "free": f, "served": served, "usage": heap.usage()}


def uncontended_reuse(nbytes=8192, heap_pages=4):
    """Return the exact single-thread cost of allocations that reuse freed blocks.

    One thread takes a slab of ``nbytes`` blocks and bumps every block of it
    (so the cursor is at the end), frees all but the first, then allocates
    them again: every one of those allocations takes a freed block.
    """
    heap = devalloc.Heap(L.capacity_for_pages(heap_pages))
    cap = L.class_blocks(L.size_class(nbytes))
    first = cuda.to_device(np.full(1, nbytes, np.int64))
    warm = cuda.to_device(np.full(1, NULL, np.int64))
    alloc_phase[1, 1](heap.ctx, first, warm)
    offs = cuda.to_device(np.full(cap - 1, NULL, np.int64))
    alloc_sequence[1, 1](heap.ctx, nbytes, offs)
    free_sequence[1, 1](heap.ctx, offs)
    t = Tally()
    t.add(counted("single", lambda: alloc_sequence[1, 1](heap.ctx, nbytes, offs)), cap - 1)
    served = int((offs.copy_to_host() != NULL).sum())
    return {"alloc": t, "served": served, "usage": heap.usage()}


def converged_warp(mode, what="alloc", nbytes=16, lanes=WARP, heap_pages=16):
    """Return the atomics of one converged warp allocating (or bumping) one size.

    A warm-up launch of one thread first takes the slab (or installs the bump
    chunk), so the counted launch is the steady-state path: one block of
    ``lanes`` threads, all calling at the same point with the same size.
    """
    heap = devalloc.Heap(L.capacity_for_pages(heap_pages))
    kernel = alloc_phase if what == "alloc" else bump_phase
    warm = cuda.to_device(np.full(1, NULL, np.int64))
    kernel[1, 1](heap.ctx, cuda.to_device(np.full(1, nbytes, np.int64)), warm)
    offs = cuda.to_device(np.full(lanes, NULL, np.int64))
    sizes = cuda.to_device(np.full(lanes, nbytes, np.int64))
    t = Tally()
    t.add(counted(mode, lambda: kernel[1, lanes](heap.ctx, sizes, offs)), lanes, 1)
    got = offs.copy_to_host()
    out = {"what": what, "mode": mode, "alloc": t, "offsets": got}
    if what == "alloc":
        select = cuda.to_device(np.ones(lanes, np.int64))
        f = Tally()
        f.add(counted(mode, lambda: free_phase[1, lanes](heap.ctx, select, offs)), lanes, 1)
        out["free"] = f
    out["usage"] = heap.usage()
    return out


def measure(workloads=WORKLOADS, modes=MODES, repeats=REPEATS, **kw):
    """Return ``{(workload, mode): [run dicts]}``, ``repeats`` runs each."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        return {(w, m): [run_workload(w, m, seed=SEED + r, **kw) for r in range(repeats)]
                for w in workloads for m in modes}
    finally:
        sys.setswitchinterval(old)


def profile_table(results):
    """The profile counters (``Heap(profile=True)``) of each workload, means over runs."""
    cols = [("workload", "l"), ("mode", "l")] + [(k.replace("_", " "), "r")
                                                 for k in L.PROF_NAMES]
    rows = [[w, m] + [_range([r["profile"][k] for r in runs], "{:.1f}") for k in L.PROF_NAMES]
            for (w, m), runs in results.items()]
    return markdown_table(cols, rows)


# ------------------------------------------------------------------ report


def _mean(values):
    return sum(values) / len(values)


def _fmt_kinds(tallies):
    kinds = sorted({k for t in tallies for k in t.kinds_per_op()})
    return ", ".join(f"{k} {_mean([t.kinds_per_op().get(k, 0.0) for t in tallies]):.3g}"
                     for k in kinds)


def _range(values, fmt="{:.2f}"):
    lo, hi, mean = min(values), max(values), _mean(values)
    if lo == hi:
        return fmt.format(mean)
    return f"{fmt.format(mean)} ({fmt.format(lo)}-{fmt.format(hi)})"


def workload_table(results):
    cols = [("workload", "l"), ("mode", "l"), ("allocs", "r"), ("failed", "r"),
            ("atomics / alloc", "r"), ("cas / alloc", "r"), ("cas retries / alloc", "r")]
    cols += [("alloc atomics by kind", "l"), ("atomics / alloc. warp", "r"),
             ("atomics / free", "r"), ("free atomics by kind", "l"), ("pages held", "r"),
             ("min pages", "r"), ("page takes", "r")]
    rows = []
    for (w, m), runs in results.items():
        A = [r["allocs"] for r in runs]
        F = [r["frees"] for r in runs]
        row = [w, m, _range([a.ops for a in A], "{:.0f}"),
               _range([r["failed"] for r in runs], "{:.0f}"),
               _range([a.per_op() for a in A]), _range([a.per_op("cas") for a in A])]
        row += [_range([a.cas_failed / a.ops for a in A])]
        row += [_fmt_kinds(A), _range([a.total / a.warps for a in A], "{:.1f}"),
                _range([f.per_op() for f in F]), _fmt_kinds(F)]
        row += [_range([r[k] for r in runs], "{:.1f}")
                for k in ("pages_held", "min_pages", "page_takes")]
        rows.append(row)
    return markdown_table(cols, rows)


def exact_table(u, warps):
    cols = [("case", "l"), ("mode", "l"), ("atomics", "r"), ("by kind", "l")]

    def kinds(t, per):
        scale = t.ops if per else 1
        return ", ".join(f"{k.rstrip('_')} {v / scale:g}" for k, v in sorted(t.by_kind.items()))

    rows = [
        ["first alloc, empty heap (takes a page)", "single", f"{u['cold'].total}", kinds(u["cold"], False)],
        ["alloc into a warm slab, per alloc", "single", f"{u['alloc'].per_op():g}", kinds(u["alloc"], True)],
        ["alloc reusing a freed block (slab fully bumped), per alloc", "single",
         f"{u['reuse'].per_op():g}", kinds(u["reuse"], True)],
        ["free, slab stays, per free", "single", f"{u['free'].per_op():g}", kinds(u["free"], True)],
    ]
    for w in warps:
        label = ("converged warp allocs 16 B (one class)" if w["what"] == "alloc"
                 else "converged warp bumps 16 B")
        rows.append([label + ", per warp", w["mode"], f"{w['alloc'].total}", kinds(w["alloc"], False)])
        if "free" in w:
            rows.append(["converged warp frees them, per warp", w["mode"], f"{w['free'].total}",
                         kinds(w["free"], False)])
    return markdown_table(cols, rows)


def section(results, u, warps, repeats, profiled=None):
    retries = ("`cas / alloc` counts every `cas`; `cas retries / alloc` those that "
               "lost a race and changed nothing (exact, `count_atomics`).")
    lines = header("Operation counts (simulator)", ".venv/bin/python bench/op_counts.py",
                   simulator_environment())
    lines += [
        f"{BLOCKS} blocks of {THREADS} threads, a heap of {HEAP_PAGES} pages, {repeats} runs "
        f"per row (seeds {SEED}..{SEED + repeats - 1}): means, with the range where runs "
        f"differ. Thread switch interval {SWITCH_INTERVAL:g} s, so that threads of a "
        "block race inside `alloc`; the simulator runs one block at a time, so only "
        "threads of one block contend. \"warp\" mode: converged warps rendezvous as "
        "on a GPU; its 25 % and churn workloads select whole warps. Churn: "
        f"{CHURN_ROUNDS} rounds, a random half turning over each. "
        "`pages held` / `min pages`: after the last counted alloc launch; "
        "`page takes`: slabs acquired in counted launches (one `max` each). "
        + retries,
        "",
        workload_table(results),
        "",
        "Exact figures (one thread, or one warp alone in the heap, warm slab):",
        "",
        exact_table(u, warps),
    ]
    if profiled:
        lines += [
            "",
            "Profile counters (`Heap(..., profile=True)`, `usage().profile`), the same "
            "workloads and seeds run again on profiled heaps (their counters' own `add`s "
            "would count among the atomics above). Whole-run totals, allocation and free "
            "launches together, the uncounted warm-up included; runs interleave "
            "differently, so they vary like the cas retries above:",
            "",
            profile_table(profiled),
        ]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    a = p.parse_args(argv)
    if not config.ENABLE_CUDASIM:
        sys.exit("op_counts needs the CUDA simulator: run with NUMBA_ENABLE_CUDASIM=1 (or unset)")
    results = measure(repeats=a.repeats)
    u = uncontended()
    u["reuse"] = uncontended_reuse()["alloc"]
    warps = [converged_warp(m, what) for what in ("alloc", "bump") for m in MODES]
    profiled = measure(repeats=a.repeats, profile=True)
    text = section(results, u, warps, a.repeats, profiled)
    if not a.no_write:
        write_section(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
