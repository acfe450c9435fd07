"""Where the heap wins and loses: heap peak vs count + scan's exact bytes vs the worst case.

For every example and thread counts from 256 to 1,048,576 (powers of two),
the heap's peak is computed, not simulated (the simulator cannot reach a
million threads): ``devalloc.layout.histogram_bytes`` of the blocks live
at the peak, from a size histogram drawn by the example's host model
(``bench/_size_models.py``: the kernels' laws and constants, NumPy's
random numbers). Blocks that live across launches (``ragged_walks``,
``barrier_option``) are all live at the peak; blocks freed inside the
kernel are held only by the threads resident at once, at most
RESIDENT = 132 SMs x 2,048 threads (an H100 SXM), every one of them at its
largest (an upper bound on the overlap). The heap is the example's own: the
capacity it gives itself (``_mc.heap_capacity``: 1 MiB plus the example's
``HEAP_PER_THREAD`` a thread) with ``Heap(page="auto")``'s page for it
(``devalloc.host.capacity.auto_page_shift``). Two heap figures: slabs
packed full (``spread`` 1, the least), and each class spread over up to
132 slabs side by side (the most a GPU's contention may cost:
``Heap(spread=)``); and, for before and after, the packed figure with the
16 KiB pages every heap had before ``Heap(page=)``.

Count + scan allocates the exact bytes for every thread (its buffer lives
through the fill pass), plus its counts (4 B a thread) and the scan's
arrays, and in ``particle_transport`` the count pass's local stack (4 KiB
per resident thread). The worst case is the example's ``worst_case_bytes``.
Where the heap version keeps its blocks across launches, it also keeps an
offset and a count a thread beside the heap (``BESIDE``); the crossover
with count + scan counts them on the heap's side.

Each example's gap is split into its causes (requested / exact: the
example's own rounding; class / requested: the size classes'; packed /
class: slab slack), and a levers table asks, from the same histograms,
what the other pages a heap may be given (``Heap(capacity, page=...)``),
other class splits (``histogram_bytes(sub_bits=)``: a what-if, the
device's classes are fixed) and the example's earlier designs of its own
blocks would give (issue 30, part 4).

The model is checked against the simulator where both apply
(``tests/test_methods.py``: the peak of a real run equals
``histogram_bytes`` of its real sizes with its heap's page, which is the
sweep's :func:`heap_page`, for the examples whose blocks are all live at
once).

Run: ``.venv/bin/python bench/sweep.py`` (writes its section of
``bench/RESULTS.md``; ``--json FILE`` also writes every figure; ``--no-write``
prints only).
"""

import argparse
import json
import sys

import numpy as np
from _results import header, markdown_table, use_simulator, write_section

use_simulator()  # the models import the examples, so numba: no GPU needed

import _size_models  # noqa: E402
from _size_models import MODELS  # noqa: E402

from devalloc import layout as L  # noqa: E402
from devalloc.examples import _mc, _scan  # noqa: E402
from devalloc.host.capacity import AUTO_PAGES, auto_page_shift  # noqa: E402

COMMAND = ".venv/bin/python bench/sweep.py"
THREADS = [1 << k for k in range(8, 21)]
#: Threads resident at once on an H100 SXM (132 SMs x 2,048).
RESIDENT = 132 * 2048
#: Slabs side by side per class at most: one per SM.
SPREAD = 132
SEED = 1
#: Bytes a thread the heap version keeps beside the heap while its blocks
#: live across launches: the block's offset (int64) and its count (int32)
#: a thread, as count + scan keeps its counts and offsets (its figure counts
#: them). Added to the heap's side of the count + scan crossover only.
BESIDE = {"ragged_walks": 12, "barrier_option": 12}
#: The issue's targets for heap peak / exact.
TARGETS = {256: 3.0, 65536: 1.5, 1 << 20: 1.2}


def histogram(sizes, counts):
    """Return ``{size: blocks}`` of blocks of ``sizes`` held ``counts`` times each."""
    keep = counts > 0
    values, inverse = np.unique(sizes[keep], return_inverse=True)
    totals = np.bincount(inverse, weights=counts[keep]).astype(np.int64)
    return dict(zip(values.tolist(), totals.tolist()))


def _exact_and_scan(name, module, s, n):
    exact = int(s.need[:n].sum())
    local = 2 * module.MAX_STACK * 8 * min(n, RESIDENT) if name == "particle_transport" else 0
    return exact, exact + 4 * n + _scan.scratch_bytes(n) + local


def heap_page(module, n):
    """Return the page of the example's heap at ``n`` threads.

    ``Heap(page="auto")`` on the capacity the example gives itself
    (``_mc.heap_capacity(n, module.HEAP_PER_THREAD)``).
    """
    return 1 << auto_page_shift(_mc.heap_capacity(n, module.HEAP_PER_THREAD))


def held_bytes(h, page):
    """Return the bytes the blocks of histogram ``h`` hold in a heap of ``page``-byte pages.

    A block up to half a page holds a slot of its size class, a larger one
    whole pages.
    """
    ps = L.floor_log2(page)
    return sum(k * (L.class_round(z) if z <= L.max_small(ps) else page * L.pages_for(z, ps))
               for z, k in h.items() if z > 0)


def _live(s, n):
    """Return the histogram of the blocks live at the peak of ``n`` threads of ``s``."""
    live = n if s.all_live else min(n, RESIDENT)
    return histogram(s.block[:live], s.blocks[:live])


def rows_for(name, model, module, rng, sample=None):
    """Return the sweep's rows for one example (``sample``: a drawn Sample to use)."""
    s = sample if sample is not None else model(THREADS[-1], rng)
    rows = []
    for n in THREADS:
        h = _live(s, n)
        page = heap_page(module, n)
        ps = L.floor_log2(page)
        packed = L.histogram_bytes(h, page=page)
        spread = L.histogram_bytes(h, SPREAD, page=page)
        requested = sum(z * k for z, k in h.items())
        exact, count_scan = _exact_and_scan(name, module, s, n)
        worst = module.worst_case_bytes(n)
        rows.append({"threads": n, "page": page, "heap_packed": packed, "heap_spread": spread,
                     "heap_and_arrays": packed + BESIDE.get(name, 0) * n,
                     "heap_16k": L.histogram_bytes(h), "in_blocks": held_bytes(h, page),
                     "requested": requested, "meta": L.meta_bytes(packed // page, ps),
                     "exact": exact, "count_scan": count_scan, "worst": worst,
                     "live_blocks": int(sum(h.values())),
                     "classes": len({L.size_class(z) for z in h if 0 < z <= L.max_small(ps)})})
    return rows


#: The levers table's row of devalloc as it is: the example's heap, page="auto".
AUTO = f'devalloc: page="auto" (capacity / {AUTO_PAGES}, 1 to 16 KiB), 4 classes a power of two'
#: The row of the heap before Heap(page=): 16 KiB pages whatever the capacity.
BEFORE = "16 KiB pages (the default page; every heap's before page=)"
#: Levers measured for every example: (label, histogram_bytes keywords; page
#: None: the example's automatic page, :func:`heap_page`).
HEAP_LEVERS = [(AUTO, {"page": None}), (BEFORE, {})] + [
    (f"{p // 1024} KiB pages (page={p})", {"page": p}) for p in (8192, 4096, 2048, 1024)] + [
    (f"{1 << k} class{'es' if k else ''} a power of two, automatic page (what-if)",
     {"page": None, "sub_bits": k}) for k in (0, 1, 3)]
#: Thread counts of the levers table (the targets' and two between).
LEVER_THREADS = [256, 1024, 4096, 65536, 1 << 20]


def _ratios(s, name, module, **kw):
    """Return {threads: heap peak / exact} for every thread count, with histogram_bytes(**kw).

    ``page=None``: the page of the example's heap at that thread count
    (:func:`heap_page`).
    """
    out = {}
    for n in THREADS:
        h = _live(s, n)
        args = dict(kw)
        if "page" in args and args["page"] is None:
            args["page"] = heap_page(module, n)
        out[n] = L.histogram_bytes(h, **args) / _exact_and_scan(name, module, s, n)[0]
    return out


def example_variants(name, module, s):
    """Return (label, Sample) of the example's other designs, for the levers table."""
    if name == "particle_transport":
        depth = s.need // module.ENTRY_BYTES
        return [(f"before: first stack {2} entries (today {module.STACK0})",
                 _size_models.transport_stacks(depth, 2))]
    if name == "barrier_option":
        kept = s.need // 8
        return [("before: chains of 64 B chunks (today one exact block a path)",
                 _size_models.barrier_chunks(kept, 8)),
                ("before that: chains of 128 B chunks", _size_models.barrier_chunks(kept, 16))]
    return []


def levers_for(name, module, s):
    """Return the levers table's rows for one example: (label, {threads: ratio})."""
    rows = [(label, _ratios(s, name, module, **kw)) for label, kw in HEAP_LEVERS]
    best = {n: min(r[n] for _, r in rows[1:6]) for n in THREADS}  # the 16 to 1 KiB pages
    rows.append((BEST, best))
    for label, v in example_variants(name, module, s):
        rows.append((label + ", automatic page", _ratios(v, name, module, page=None)))
        rows.append((label + ", 16 KiB pages", _ratios(v, name, module)))
    return rows


#: The levers table's row of the least of the fixed pages at each thread count.
BEST = "the best of the 16 to 1 KiB pages at each size"


def crossover(rows, key, other):
    """Return the first thread count from which ``key`` stays below ``other``, or None."""
    at = None
    for r in rows:
        if r[key] < r[other]:
            at = at or r["threads"]
        else:
            at = None
    return at


def _ratio(a, b):
    return f"{a / b:.2f}" if b else "-"


def _n(v):
    return "never (to 1M)" if v is None else f"{v:,}"


def _from(rows_or_ratios, t0, key=None):
    """Return the largest heap / exact ratio at ``t0`` threads and above."""
    if key is None:
        return max(v for n, v in rows_or_ratios.items() if n >= t0)
    return max(r[key] / r["exact"] for r in rows_or_ratios if r["threads"] >= t0)


def _targets(r256, r64k, r1m):
    return " / ".join("met" if v <= x else "missed"
                      for v, x in zip((r256, r64k, r1m), TARGETS.values()))


def _three(by_n, rows, key):
    """Return ``key`` / exact at 256 threads, the largest from 64K up, and at 1M."""
    return (by_n[256][key] / by_n[256]["exact"], _from(rows, 65536, key),
            by_n[1 << 20][key] / by_n[1 << 20]["exact"])


def section(results, levers):
    lines = header("Heap vs count + scan vs worst case, 256 to 1M threads (issue 30)", COMMAND,
                   f"NumPy models of the examples (bench/_size_models.py), seed {SEED}; "
                   "devalloc.layout.histogram_bytes; no GPU needed")
    lines += [
        "Heap peak from the size histogram of the blocks live at the peak, in the example's "
        "own heap: the capacity it gives itself (1 MiB plus HEAP_PER_THREAD bytes a thread: "
        "512 in ragged_walks, barrier_option and step_scratch, 256 in the others) with "
        f'Heap(page="auto")\'s page for it (capacity / {AUTO_PAGES} rounded down to a power '
        "of two from 1 to 16 KiB: 1 KiB at 256 threads, 16 KiB from 32K or 64K threads; column "
        "'page'). Packed: slabs full (the least); spread: over up to "
        f"{SPREAD} slabs per class (the most a GPU's contention may cost). 'Before': the "
        "packed peak with 16 KiB pages, every heap's page before Heap(page=). Blocks freed "
        f"inside the kernel are held by at most {RESIDENT:,} resident threads (H100 SXM), each "
        "at its largest. Exact: the bytes every thread needs (count + scan's buffer); count + "
        "scan's peak adds its counts, the scan's arrays and, in particle_transport, the count "
        "pass's 4 KiB local stack per resident thread. Ratios are to the exact bytes. The gap "
        "packed / exact is the product of three columns: requested / exact (the blocks live at "
        "the peak at the sizes the example asks for: its own rounding, e.g. stacks that double "
        "in particle_transport; below 1 where threads outnumber the resident ones), class / "
        "requested (the size classes' rounding: 16 B steps to 128 B, then at most 25 %; a "
        "block over half a page takes whole pages) and packed / class (slab slack: the unused "
        "slots of the last slab of every class in use, a page each at least). Metadata: what "
        "a heap of exactly the packed peak, with that page, keeps beside its arena "
        "(layout.meta_bytes), not counted in the peak.", ""]
    summary = []
    for name, rows in results.items():
        cols = [("threads", "r"), ("page", "r"), ("heap packed", "r"), ("heap spread", "r"),
                ("before: 16 KiB pages", "r"), ("exact", "r"), ("count + scan", "r"),
                ("worst case", "r"), ("packed / exact", "r"), ("before / exact", "r"),
                ("spread / exact", "r"), ("worst / exact", "r"), ("requested / exact", "r"),
                ("class / requested", "r"), ("packed / class", "r"), ("classes", "r"),
                ("metadata", "r")]
        table = [[f"{r['threads']:,}", f"{r['page']:,}", f"{r['heap_packed']:,}",
                  f"{r['heap_spread']:,}", f"{r['heap_16k']:,}", f"{r['exact']:,}",
                  f"{r['count_scan']:,}", f"{r['worst']:,}",
                  _ratio(r["heap_packed"], r["exact"]), _ratio(r["heap_16k"], r["exact"]),
                  _ratio(r["heap_spread"], r["exact"]), _ratio(r["worst"], r["exact"]),
                  _ratio(r["requested"], r["exact"]), _ratio(r["in_blocks"], r["requested"]),
                  _ratio(r["heap_packed"], r["in_blocks"]), r["classes"], f"{r['meta']:,}"]
                 for r in rows if r["threads"].bit_length() % 2 == 1]  # 256, 1K, 4K, ...
        lines += [f"### {name}", "", markdown_table(cols, table), ""]
        by_n = {r["threads"]: r for r in rows}
        now, before = _three(by_n, rows, "heap_packed"), _three(by_n, rows, "heap_16k")
        summary.append([
            name, _n(crossover(rows, "heap_packed", "worst")),
            _n(crossover(rows, "heap_spread", "worst")),
            _n(crossover(rows, "heap_and_arrays", "count_scan")),
            " / ".join(f"{v:.2f}" for v in now), _targets(*now),
            " / ".join(f"{v:.2f}" for v in before), _targets(*before)])
    lt = LEVER_THREADS
    lines += ["### What each lever gives (packed / exact, same histograms)", "",
              "Every figure is heap packed / exact from the same histograms as above. The first "
              "row is devalloc as the examples run it (the tables above); the page rows are "
              "what `Heap(capacity, page=...)` gives with a fixed page (16 KiB: the default, "
              "and every heap's page before); 'the best of the 16 to 1 KiB pages' takes the "
              "least of them at each thread count, the most a page chosen per run could reach. "
              "The class rows are what-ifs (`histogram_bytes(sub_bits=)`, with the automatic "
              "page): the device's classes are 4 a power of two. The example rows are the "
              "example's earlier designs of its own blocks (the answers do not depend on "
              "them), with the automatic page and with 16 KiB pages.", ""]
    for name, rows in levers.items():
        cols = [("lever", "l")] + [(f"{t:,}", "r") for t in lt] + [("worst from 65,536", "r")]
        table = [[label] + [f"{r[t]:.2f}" for t in lt] + [f"{_from(r, 65536):.2f}"]
                 for label, r in rows]
        lines += [f"#### {name}", "", markdown_table(cols, table), ""]
    cols = [("example", "l"), ("heap < worst case from (packed)", "r"),
            ("heap < worst case from (spread)", "r"),
            ("heap and its arrays < count + scan from", "r"),
            ("packed / exact at 256 / worst from 64K / 1M", "r"), ("targets 3x / 1.5x / 1.2x", "l"),
            ("before: 16 KiB pages", "r"), ("targets before", "l")]
    lines += ["### Crossovers and the targets", "", markdown_table(cols, summary), "",
              "A crossover is the first power of two from which the heap (its automatic page) "
              "stays below the other method up to 1M threads (on this grid: the true one lies "
              "between it and half of it). Against count + scan, whose figure counts its "
              "counts and offsets, the heap's side adds the offset and count a thread that "
              "ragged_walks' and barrier_option's heap versions keep beside the heap between "
              f"launches ({BESIDE['barrier_option']} B a thread). 'Worst from 64K' is the "
              "largest ratio at 65,536 "
              "threads and above (the target holds from 64K up). 'Before' is the same heap "
              "with 16 KiB pages and the examples as they are now (bench/RESULTS.md, \"Issue 30 "
              "part 4\", has the examples' own before and after)."]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    p.add_argument("--no-write", action="store_true", help="print, do not touch RESULTS.md")
    args = p.parse_args(argv)
    results, levers = {}, {}
    for name, (model, module) in MODELS.items():
        print(f"{name} ...", file=sys.stderr, flush=True)
        s = model(THREADS[-1], np.random.default_rng(SEED))
        results[name] = rows_for(name, model, module, None, sample=s)
        levers[name] = levers_for(name, module, s)
    text = section(results, levers)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": results, "levers": {k: dict(v) for k, v in levers.items()}},
                      f, indent=1)
    if not args.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
