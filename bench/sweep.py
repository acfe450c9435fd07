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
#: A smaller page, asked about (what-if) for issue 30's part 4.
SMALL_PAGE = 4096
#: The issue's targets for heap peak / exact.
TARGETS = {256: 3.0, 65536: 1.5, 1 << 20: 1.2}


def histogram(sizes, counts):
    """Return ``{size: blocks}`` of blocks of ``sizes`` held ``counts`` times each."""
    keep = counts > 0
    values, inverse = np.unique(sizes[keep], return_inverse=True)
    totals = np.bincount(inverse, weights=counts[keep]).astype(np.int64)
    return dict(zip(values.tolist(), totals.tolist()))


def rows_for(name, model, module, rng):
    """Return the sweep's rows for one example."""
    s = model(THREADS[-1], rng)
    rows = []
    for n in THREADS:
        live = n if s.all_live else min(n, RESIDENT)
        h = histogram(s.block[:live], s.blocks[:live])
        packed, spread = L.histogram_bytes(h), L.histogram_bytes(h, SPREAD)
        small = L.histogram_bytes(h, page=SMALL_PAGE)
        held = sum(n_ * (L.class_size(L.size_class(z)) if z <= L.MAX_SMALL else L.PAGE *
                         L.pages_for(z)) for z, n_ in h.items() if z > 0)
        exact = int(s.need[:n].sum())
        local = 2 * module.MAX_STACK * 8 * min(n, RESIDENT) if name == "particle_transport" else 0
        scan = 4 * n + _scan.scratch_bytes(n) + local
        worst = module.worst_case_bytes(n)
        rows.append({"threads": n, "heap_packed": packed, "heap_spread": spread,
                     "heap_small_page": small, "in_blocks": held,
                     "exact": exact, "count_scan": exact + scan, "worst": worst,
                     "live_blocks": int(sum(h.values())),
                     "classes": len({L.size_class(z) for z in h if z <= L.MAX_SMALL})})
    return rows


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


def section(results):
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
        "per resident thread. Ratios are to the exact bytes. Blocks: the live blocks at their "
        "class size, what the heap would hold with no slab slack at all (the rest of the "
        "gap between blocks and exact is the example's own rounding: whole 128 B chunks in "
        "barrier_option, stacks that double in particle_transport, and the size classes' "
        "at most 25 %).", ""]
    summary = []
    for name, rows in results.items():
        cols = [("threads", "r"), ("heap packed", "r"), ("heap spread", "r"), ("exact", "r"),
                ("count + scan", "r"), ("worst case", "r"), ("packed / exact", "r"),
                ("spread / exact", "r"), ("worst / exact", "r"), ("blocks / exact", "r"),
                ("classes", "r"),
                (f"packed, {SMALL_PAGE // 1024} KiB pages / exact", "r")]
        table = [[f"{r['threads']:,}", f"{r['heap_packed']:,}", f"{r['heap_spread']:,}",
                  f"{r['exact']:,}", f"{r['count_scan']:,}", f"{r['worst']:,}",
                  _ratio(r["heap_packed"], r["exact"]), _ratio(r["heap_spread"], r["exact"]),
                  _ratio(r["worst"], r["exact"]), _ratio(r["in_blocks"], r["exact"]),
                  r["classes"],
                  _ratio(r["heap_small_page"], r["exact"])]
                 for r in rows if r["threads"].bit_length() % 2 == 1]  # 256, 1K, 4K, ...
        lines += [f"### {name}", "", markdown_table(cols, table), ""]
        by_n = {r["threads"]: r for r in rows}
        summary.append([
            name, _n(crossover(rows, "heap_packed", "worst")),
            _n(crossover(rows, "heap_spread", "worst")),
            _n(crossover(rows, "heap_packed", "count_scan")),
            " / ".join(_ratio(by_n[t]["heap_packed"], by_n[t]["exact"]) for t in TARGETS),
            " / ".join(("met" if by_n[t]["heap_packed"] <= x * by_n[t]["exact"] else "missed")
                       for t, x in TARGETS.items()),
            " / ".join(_ratio(by_n[t]["heap_small_page"], by_n[t]["exact"]) for t in TARGETS)])
    cols = [("example", "l"), ("heap < worst case from (packed)", "r"),
            ("heap < worst case from (spread)", "r"), ("heap < count + scan from", "r"),
            ("packed / exact at 256 / 64K / 1M", "r"), ("targets 3x / 1.5x / 1.2x", "l"),
            (f"the same with {SMALL_PAGE // 1024} KiB pages", "r")]
    lines += ["### Crossovers", "", markdown_table(cols, summary), "",
              "A crossover is the first power of two from which the heap stays below the "
              "other method up to 1M threads (on this grid: the true one lies between it and "
              "half of it). The last column asks what pages of "
              f"{SMALL_PAGE // 1024} KiB (a what-if: devalloc's page is "
              f"{L.PAGE // 1024} KiB) would give, from the same histograms."]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    p.add_argument("--no-write", action="store_true", help="print, do not touch RESULTS.md")
    args = p.parse_args(argv)
    results = {}
    for name, (model, module) in MODELS.items():
        print(f"{name} ...", file=sys.stderr, flush=True)
        results[name] = rows_for(name, model, module, np.random.default_rng(SEED))
    text = section(results)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if not args.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
