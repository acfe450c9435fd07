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
largest (an upper bound on the overlap). Two heap figures: slabs packed
full (``spread`` 1, the least), and each class spread over up to 132 slabs
side by side (the most a GPU's contention may cost: ``Heap(spread=)``).

Count + scan allocates the exact bytes for every thread (its buffer lives
through the fill pass), plus its counts (4 B a thread) and the scan's
arrays, and in ``particle_transport`` the count pass's local stack (4 KiB
per resident thread). The worst case is the example's ``worst_case_bytes``.

Each example's gap is split into its causes (requested / exact: the
example's own rounding; class / requested: the size classes'; packed /
class: slab slack), and a levers table asks, from the same histograms,
what other pages and class splits (``histogram_bytes(page=, sub_bits=)``,
what-ifs: the device's are fixed) and other designs of the example's own
blocks would give (issue 30, part 4).

The model is checked against the simulator where both apply
(``tests/test_methods.py``: the peak of a real run equals
``histogram_bytes`` of its real sizes, for the examples whose blocks are
all live at once).

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
from devalloc.examples import _scan  # noqa: E402

COMMAND = ".venv/bin/python bench/sweep.py"
THREADS = [1 << k for k in range(8, 21)]
#: Threads resident at once on an H100 SXM (132 SMs x 2,048).
RESIDENT = 132 * 2048
#: Slabs side by side per class at most: one per SM.
SPREAD = 132
SEED = 1
#: A smaller page, asked about (what-if) for issue 30's part 4 (the rows' heap_small_page).
SMALL_PAGE = 4096
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
        packed, spread = L.histogram_bytes(h), L.histogram_bytes(h, SPREAD)
        small = L.histogram_bytes(h, page=SMALL_PAGE)
        requested = sum(z * k for z, k in h.items())
        held = sum(k * (L.class_round(z) if z <= L.MAX_SMALL else L.PAGE * L.pages_for(z))
                   for z, k in h.items() if z > 0)
        exact, count_scan = _exact_and_scan(name, module, s, n)
        worst = module.worst_case_bytes(n)
        rows.append({"threads": n, "heap_packed": packed, "heap_spread": spread,
                     "heap_small_page": small, "in_blocks": held, "requested": requested,
                     "meta": L.meta_bytes(packed // L.PAGE),
                     "exact": exact, "count_scan": count_scan, "worst": worst,
                     "live_blocks": int(sum(h.values())),
                     "classes": len({L.size_class(z) for z in h if 0 < z <= L.MAX_SMALL})})
    return rows


#: What-ifs measured for every example: (label, histogram_bytes keywords).
HEAP_LEVERS = [("today: 16 KiB pages, 4 classes a power of two", {})] + [
    (f"{p // 1024} KiB pages", {"page": p}) for p in (8192, 4096, 2048, 1024)] + [
    (f"{1 << k} class{'es' if k else ''} a power of two", {"sub_bits": k}) for k in (0, 1, 3)]
#: Thread counts of the levers table (the targets' and two between).
LEVER_THREADS = [256, 1024, 4096, 65536, 1 << 20]


#: The automatic page asked about: a heap gets at least this many pages.
AUTO_PAGES = 256


def auto_page(capacity):
    """Return the page a heap of ``capacity`` bytes would get: capacity / AUTO_PAGES.

    A power of two from 1 KiB to PAGE (a what-if: devalloc's page is PAGE).
    """
    page = 1024
    while page < L.PAGE and 2 * page * AUTO_PAGES <= capacity:
        page *= 2
    return page


def _ratios(s, name, module, auto=False, **kw):
    """Return {threads: heap peak / exact} for every thread count, with histogram_bytes(**kw).

    ``auto``: with the page :func:`auto_page` gives a heap of the peak with
    16 KiB pages (the capacity ``usage().suggest_capacity`` starts from).
    """
    out = {}
    for n in THREADS:
        h = _live(s, n)
        if auto:
            kw = {"page": auto_page(L.histogram_bytes(h))}
        out[n] = L.histogram_bytes(h, **kw) / _exact_and_scan(name, module, s, n)[0]
    return out


def example_variants(name, module, s):
    """Return (label, Sample) of the example's other designs, for the levers table."""
    if name == "particle_transport":
        depth = s.need // module.ENTRY_BYTES
        return [(f"before: first stack {2} entries (today {module.STACK0})",
                 _size_models.transport_stacks(depth, 2))]
    if name == "barrier_option":
        kept = s.need // 8
        return [(f"before: chunks of 16 words (today {module.CHUNK_WORDS})",
                 _size_models.barrier_chunks(kept, 16)),
                ("one block of exactly the kept points", _size_models.barrier_chunks(kept, 0))]
    return []


def levers_for(name, module, s):
    """Return the levers table's rows for one example: (label, {threads: ratio})."""
    rows = [(label, _ratios(s, name, module, **kw)) for label, kw in HEAP_LEVERS]
    best = {n: min(r[n] for _, r in rows[:5]) for n in THREADS}  # today's classes, any page
    rows.append(("the best of those pages at each size", best))
    rows.append((AUTO, _ratios(s, name, module, auto=True)))
    for label, v in example_variants(name, module, s):
        rows.append((label, _ratios(v, name, module)))
        rows.append((label + ", automatic page", _ratios(v, name, module, auto=True)))
    return rows


#: The levers table's row of the automatic page.
AUTO = f"automatic page: capacity / {AUTO_PAGES}, 1 to 16 KiB"


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


def section(results, levers):
    lines = header("Heap vs count + scan vs worst case, 256 to 1M threads (issue 30)", COMMAND,
                   f"NumPy models of the examples (bench/_size_models.py), seed {SEED}; "
                   "devalloc.layout.histogram_bytes; no GPU needed")
    lines += [
        "Heap peak from the size histogram of the blocks live at the peak: packed (slabs "
        f"full, the least) and spread over up to {SPREAD} slabs per class (the most a GPU's "
        "contention may cost). Blocks freed inside the kernel are held by at most "
        f"{RESIDENT:,} resident threads (H100 SXM), each at its largest. Exact: the bytes "
        "every thread needs (count + scan's buffer); count + scan's peak adds its counts, "
        "the scan's arrays and, in particle_transport, the count pass's 4 KiB local stack "
        "per resident thread. Ratios are to the exact bytes. The gap packed / exact is the "
        "product of three columns: requested / exact (the blocks live at the peak at the "
        "sizes the example asks for: its own rounding, e.g. a chunk's link word and unused "
        "points in barrier_option, stacks that double in particle_transport; below 1 where "
        "threads outnumber the resident ones), class / requested (the size classes' "
        "rounding: 16 B steps to 128 B, then at most 25 %) and packed / class (slab slack: "
        "the unused slots of the last slab of every class in use, one 16 KiB page each at "
        "least). Metadata: what a heap of exactly the packed peak keeps beside its arena "
        "(layout.meta_bytes: the 37 KiB header and about 1.7 % of the arena), not counted "
        "in the peak.", ""]
    summary = []
    for name, rows in results.items():
        cols = [("threads", "r"), ("heap packed", "r"), ("heap spread", "r"), ("exact", "r"),
                ("count + scan", "r"), ("worst case", "r"), ("packed / exact", "r"),
                ("spread / exact", "r"), ("worst / exact", "r"), ("requested / exact", "r"),
                ("class / requested", "r"), ("packed / class", "r"), ("classes", "r"),
                ("metadata", "r")]
        table = [[f"{r['threads']:,}", f"{r['heap_packed']:,}", f"{r['heap_spread']:,}",
                  f"{r['exact']:,}", f"{r['count_scan']:,}", f"{r['worst']:,}",
                  _ratio(r["heap_packed"], r["exact"]), _ratio(r["heap_spread"], r["exact"]),
                  _ratio(r["worst"], r["exact"]), _ratio(r["requested"], r["exact"]),
                  _ratio(r["in_blocks"], r["requested"]),
                  _ratio(r["heap_packed"], r["in_blocks"]), r["classes"], f"{r['meta']:,}"]
                 for r in rows if r["threads"].bit_length() % 2 == 1]  # 256, 1K, 4K, ...
        lines += [f"### {name}", "", markdown_table(cols, table), ""]
        by_n = {r["threads"]: r for r in rows}
        today = (by_n[256]["heap_packed"] / by_n[256]["exact"], _from(rows, 65536, "heap_packed"),
                 by_n[1 << 20]["heap_packed"] / by_n[1 << 20]["exact"])
        auto = dict(levers[name])[AUTO]
        adaptive = (auto[256], _from(auto, 65536), auto[1 << 20])
        summary.append([
            name, _n(crossover(rows, "heap_packed", "worst")),
            _n(crossover(rows, "heap_spread", "worst")),
            _n(crossover(rows, "heap_packed", "count_scan")),
            " / ".join(f"{v:.2f}" for v in today), _targets(*today),
            " / ".join(f"{v:.2f}" for v in adaptive), _targets(*adaptive)])
    lt = LEVER_THREADS
    lines += ["### What each lever would give (packed / exact, same histograms)", "",
              "Every figure is heap packed / exact from the same histograms as above. The "
              "heap's rows are what-ifs of layout.histogram_bytes (`page=`, `sub_bits=`): "
              "devalloc's page is a compile-time constant of the device code (16 KiB) and "
              "its classes are 4 a power of two. 'The best of those pages' takes, at each "
              "thread count, the least of the 16, 8, 4, 2 and 1 KiB rows: what a page chosen "
              "per heap (`Heap(capacity, page=...)`, not in the device code yet) could reach "
              "at best. 'Automatic page' is a rule a heap could apply by itself: pages of "
              f"capacity / {AUTO_PAGES} (at least {AUTO_PAGES} pages), a power of two from 1 "
              "to 16 KiB, for a heap whose capacity is the 16 KiB peak. The example rows are "
              "other designs of the example's own blocks (the answers do not depend on them), "
              "with the heap as it is and with the automatic page.", ""]
    for name, rows in levers.items():
        cols = [("lever", "l")] + [(f"{t:,}", "r") for t in lt] + [("worst from 65,536", "r")]
        table = [[label] + [f"{r[t]:.2f}" for t in lt] + [f"{_from(r, 65536):.2f}"]
                 for label, r in rows]
        lines += [f"#### {name}", "", markdown_table(cols, table), ""]
    cols = [("example", "l"), ("heap < worst case from (packed)", "r"),
            ("heap < worst case from (spread)", "r"), ("heap < count + scan from", "r"),
            ("packed / exact at 256 / worst from 64K / 1M", "r"), ("targets 3x / 1.5x / 1.2x", "l"),
            ("the same, automatic page (what-if)", "r"), ("targets", "l")]
    lines += ["### Crossovers and the targets", "", markdown_table(cols, summary), "",
              "A crossover is the first power of two from which the heap stays below the "
              "other method up to 1M threads (on this grid: the true one lies between it and "
              "half of it). 'Worst from 64K' is the largest ratio at 65,536 threads and "
              "above (the target holds from 64K up). The what-if columns take the automatic "
              f"page (capacity / {AUTO_PAGES}, 1 to 16 KiB: a page chosen per heap)."]
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
