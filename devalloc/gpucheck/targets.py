"""The GPU check's throughput rows, and issue 49's targets beside them.

Pure: :func:`throughput_rows` turns bench/gpu_throughput.py's JSON into one
row per (variant, size): medians divided by the atomic floor of the same
row; :func:`against_targets` says, per row and operation, the target and
whether it is met. The targets are goals, not pass/fail: a missed one does
not fail the GPU check (bench/RESULTS.md, "Contention model").
"""

import statistics

#: Issue 49's GPU targets, median ÷ the atomic floor of the same row:
#: (variant, bytes) -> (alloc, free); None where the issue sets none.
THROUGHPUT_TARGETS = {
    ("thread", 16): (3, 2),
    ("thread", 256): (20, None),
    ("thread", 4096): (60, None),
    ("thread", 8192): (120, 10),
    ("warp", 16): (3, None),
}


def against_targets(rows):
    """Add each row's targets and whether they are met (``*_target``, ``*_met``).

    A pure function of the rows :func:`throughput` builds (``variant``,
    ``bytes``, ``alloc_over_floor``, ``free_over_floor``); a row without a
    target gets None for both. Returns the rows and the summary's words.
    """
    met = missed = 0
    for r in rows:
        targets = THROUGHPUT_TARGETS.get((r["variant"], r["bytes"]), (None, None))
        for op, target in zip(("alloc", "free"), targets):
            ok = None if target is None else r[f"{op}_over_floor"] <= target
            r[f"{op}_target"], r[f"{op}_met"] = target, ok
            met += ok is True
            missed += ok is False
    return rows, f"issue 49's targets: {met} met, {missed} missed"


def target_lines(rows):
    """Return the rows of :func:`against_targets` that have a target, one line each."""
    return "\n".join(
        f"{r['variant']:>6} {r['bytes']:>5} B {op:>5} / floor {r[f'{op}_over_floor']:9.1f}  "
        f"target <= {r[f'{op}_target']:>4}  {'met' if r[f'{op}_met'] else 'MISSED'}"
        for r in rows for op in ("alloc", "free") if r[f"{op}_target"] is not None)


def throughput_rows(raw):
    """Return (rows, words): bench/gpu_throughput.py's JSON ``raw`` as rows against the targets.

    Medians over the iterations after the first (all of them if there is
    one), each divided by the floor's median; the first iteration's alloc
    over the later median (the first touch of the heap's pages).
    """
    rows = []
    for r in raw["rows"]:
        t = r["times"]
        med = {k: statistics.median(v[1:] or v) for k, v in t.items() if v}
        floor = med.get("floor")
        rows.append({"variant": r["variant"], "allocs": r["allocs"], "bytes": r["bytes"],
                     "alloc_over_floor": med["alloc"] / floor,
                     "free_over_floor": med["free"] / floor,
                     "pair_over_floor": med.get("pair", 0) / floor if "pair" in med else None,
                     "nrt_pair_over_floor": med["nrt"] / floor if "nrt" in med else None,
                     "first_over_later_alloc": t["alloc"][0] / med["alloc"],
                     "floor_ms": floor, "alloc_ms": med["alloc"], "free_ms": med["free"],
                     "nulls": r["failed"], "bad_blocks": r["bad_blocks"]})
    return against_targets(rows)
