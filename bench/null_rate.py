"""NULLs per million allocations under racing churn, by heap use (issue 25).

The churn of :mod:`devalloc.testing.churn`: ``--threads`` threads (one
block) of ``--steps`` steps each, keeping up to 4 live blocks of 1..3000 B
(pseudo-random sizes; a slot's old block is freed before its new one is
allocated), on an 8 MiB heap with ``sys.setswitchinterval(1e-6)`` so that
simulator threads switch inside ``alloc`` and ``free``. Before the churn,
one thread fills the heap to the given use with one-page blocks. Printed per
use: allocations, NULLs, NULLs per million, the profile's NULL causes
(``failed_full``: the call saw no page that could serve; ``failed_no_page``:
any other cause, before issue 25 the only one), lost ``cas`` and pages
scanned per allocation, and the heap's peak use.

Run: ``.venv/bin/python bench/null_rate.py`` (prints JSON; ``--write``
also rewrites its section of ``bench/RESULTS.md``).
"""

import argparse
import json
import sys
import time

from _results import header, markdown_table, simulator_environment, use_simulator, write_section

use_simulator()  # before numba is imported

import numpy as np  # noqa: E402

import devalloc  # noqa: E402
from devalloc import layout as L  # noqa: E402
from devalloc.testing import churn as C  # noqa: E402

USES = (0.25, 0.50, 0.75, 0.90, 0.99)
CAPACITY = 8 << 20


def run_one(use, seed, threads, steps, switch):
    """One churn at ``use``: a dict of counts."""
    heap = devalloc.Heap(CAPACITY, profile=True)
    npages = heap.capacity // L.PAGE
    filled = int(round(use * npages))
    fill = C.fill_pages(heap, filled)
    sizes = C.sizes_table(seed, threads, steps)
    old = sys.getswitchinterval()
    sys.setswitchinterval(switch)
    try:
        nulls, bad = C.churn(heap, sizes, block=threads)
    finally:
        sys.setswitchinterval(old)
    u = heap.usage()
    prof = u.profile
    return {"use": use, "seed": seed, "allocs": int(sizes.size), "nulls": int(nulls.sum()),
            "bad": int(bad.sum()), "failed_full": int(prof.get("failed_full", 0)),
            "failed_no_page": int(prof["failed_no_page"]),
            "separated": "failed_full" in prof,
            "cas_retries": int(prof["cas_retries"]), "pages_scanned": int(prof["pages_scanned"]),
            "peak_use": u.peak / heap.capacity}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=128)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--uses", type=float, nargs="+", default=list(USES))
    p.add_argument("--switch", type=float, default=1e-6, help="sys.setswitchinterval during the churn")
    p.add_argument("--label", default="", help="a name for this run in the JSON (e.g. before/after)")
    p.add_argument("--write", metavar="JSON", nargs="*",
                   help="rewrite the RESULTS.md section from these saved outputs (before, after)")
    p.add_argument("--retry", metavar="JSON", nargs="*", default=[],
                   help="with --write: bench/retry_cost.py outputs (before, after) to add")
    a = p.parse_args(argv)
    if a.write is not None and a.write:
        write(a.write, a.retry)
        return
    rows = []
    for use in a.uses:
        for seed in a.seeds:
            t0 = time.perf_counter()
            r = run_one(use, seed, a.threads, a.steps, a.switch)
            r["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr)
    out = {"label": a.label, "threads": a.threads, "steps": a.steps, "switch": a.switch,
           "seeds": a.seeds, "runs": rows, "by_use": summary(rows)}
    print(json.dumps(out, indent=1))


def summary(rows):
    """Per use: totals over the seeds and NULLs per million allocations."""
    out = {}
    for r in rows:
        s = out.setdefault(str(r["use"]), {k: 0 for k in (
            "allocs", "nulls", "failed_full", "failed_no_page", "cas_retries", "pages_scanned")})
        for k in ("allocs", "nulls", "failed_full", "failed_no_page", "cas_retries",
                  "pages_scanned"):
            s[k] += r[k]
        s["peak_use_max"] = max(s.get("peak_use_max", 0), round(r["peak_use"], 3))
    for s in out.values():
        s["nulls_per_million"] = round(1e6 * s["nulls"] / s["allocs"])
        s["residual_per_million"] = round(1e6 * s["failed_no_page"] / s["allocs"])
    return out


def write(paths, retry=()):
    """The RESULTS.md section from saved JSON outputs (labelled before/after)."""
    runs = [json.loads(open(x).read()) for x in paths]
    cols = [("run", "l"), ("filled", "r"), ("allocs", "r"), ("NULLs", "r"),
            ("NULLs / 10^6", "r"), ("failed_full", "r"), ("residual", "r"),
            ("lost cas / alloc", "r"), ("pages scanned / alloc", "r"), ("peak use", "r")]
    rows = []
    for r in runs:
        sep = all(x.get("separated") for x in r["runs"])
        for use, s in r["by_use"].items():
            full = s["failed_full"] if sep else "n/a"
            resid = s["failed_no_page"] - s["failed_full"] if sep else f"({s['failed_no_page']})"
            rows.append((r["label"], f"{float(use):.0%}", s["allocs"], s["nulls"],
                         s["nulls_per_million"], full, resid,
                         f"{s['cas_retries'] / s['allocs']:.3f}",
                         f"{s['pages_scanned'] / s['allocs']:.3f}", f"{s['peak_use_max']:.0%}"))
    r0 = runs[0]
    cmd = (f".venv/bin/python bench/null_rate.py --threads {r0['threads']} --steps {r0['steps']} "
           f"--seeds {' '.join(map(str, r0['seeds']))} --label LABEL > LABEL.json; "
           ".venv/bin/python bench/retry_cost.py [--root OLD_CHECKOUT] > retry_LABEL.json; "
           ".venv/bin/python bench/null_rate.py --write before.json after.json "
           "--retry retry_before.json retry_after.json")
    lines = header("NULL rate under racing churn (issue 25)", cmd, simulator_environment())
    lines += [
        f"{r0['threads']} threads (one block), {r0['steps']} steps each, up to 4 live blocks of "
        "1..3000 B per thread (a slot's old block freed before its new one is allocated), "
        f"8 MiB heap, `sys.setswitchinterval({r0['switch']:g})`, seeds "
        f"{', '.join(map(str, r0['seeds']))} (totals over them). *filled*: the share of the "
        "arena's pages one thread took with one-page blocks before the churn; the churn's own "
        "blocks come on top (*peak use*: the heap's peak, so at 90 % and 99 % the heap is "
        "really full and NULLs are due). *before*: main before issue 25, whose profile had no "
        "`failed_full` (its NULLs, in brackets, were all `failed_no_page`: at 25 % to 75 % "
        "filled every one of them was a lost race); *after*: this branch, where *residual* is "
        "`failed_no_page - failed_full` (`failed_residual`), NULLs that no search proved. "
        "Simulator figures; the GPU check fills in GPU ones when it runs.", "",
        markdown_table(cols, rows), ""]
    if retry:
        rr = [json.loads(open(x).read()) for x in retry]
        cols = [("contended path (sm_90)", "l")] + [(f"{lab} instructions", "r") for lab in
                                                    ("before", "after")[:len(rr)]]
        cols += [(f"{lab} retry cost", "r") for lab in ("before", "after")[:len(rr)]]
        rows = []
        for name, v in rr[-1]["paths"].items():
            rows.append((f"`{name}`: {v['what']} (uncontended twin `{v['uncontended']}`)",
                         *[x["paths"][name]["instructions"] for x in rr],
                         *[x["paths"][name]["retry_cost"] for x in rr]))
        lines += ["What one lost race costs the losing call, in walked SASS instructions "
                  "(`bench/retry_cost.py`: the contended twins of the probes' walked paths; "
                  "retry cost = contended minus uncontended). Lost `cas` per allocation under "
                  "the churn: the table above.", "", markdown_table(cols, rows), ""]
    write_section("\n".join(lines))


if __name__ == "__main__":
    main()
