"""Contention model (issue 49): ``python -m devalloc.probes --contention``.

Issue 49: speed at GPU scale is poor because every warp leader's search
for a page starts at the same place, and thousands of warps ``cas`` the
same words. This measures it without a GPU: W warp leaders run in lockstep
on the real device code (:mod:`devalloc.tools.contention_model`: what runs,
what a round is, what is counted), for each variant, size and W; the
figures are calibrated against the H200's throughput rows
(:mod:`devalloc.tools.contention_fit`) and checked against issue 49's
targets. This module runs the rows (in worker processes) and reports them.

``python -m devalloc.probes --contention [--leaders 32,64,128,256]
[--sizes 16,256,4096,8192] [--variants thread,warp] [--waves N] [--seed S]
[--jobs N] [--json]`` (or ``python -m devalloc.tools.contention``, which
also takes ``--markdown FILE [--cost-from FILE2]``: the tables of an
earlier ``--json`` run). Runs on the CUDA simulator's device modules only
(no GPU, no NVVM): ``NUMBA_ENABLE_CUDASIM=1`` must be set before numba is
imported (``devalloc.probes`` sets it, or re-runs itself with it:
:func:`ensure_simulator`).
"""

import argparse
import sys
import time

from .. import layout as L
from .contention_fit import (H200, TARGET_BASE_W, TARGET_CAS, TARGET_GROWTH, TARGET_W,
                             calibrations, targets)
from .contention_model import (ALLOCATIONS, BLOCK, GRANTS, LEADERS, SEED, SIZES, SMS, VARIANTS,
                               run_row)


# ------------------------------------------------------------ many rows

def configs(variants=VARIANTS, sizes=SIZES, leaders=LEADERS):
    """Return the (variant, bytes, W) of a run, the costliest first (for a pool of workers)."""
    out = [(v, b, w) for v in variants for b in sizes for w in leaders]
    return sorted(out, key=lambda c: (-c[2] * (32 if c[0] == "thread" else 4) * c[1], c))


def _row_job(args):
    variant, nbytes, leaders, waves, seed = args
    return run_row(variant, nbytes, leaders, waves, seed)


def measure(variants=VARIANTS, sizes=SIZES, leaders=LEADERS, waves=None, seed=SEED, jobs=1,
            progress=None):
    """Return the rows of every (variant, size, W), ordered by variant, size, W.

    ``jobs`` worker processes (forked: the parent has the simulator's
    numba already); ``progress(row)`` is called as each row ends.
    """
    todo = [(v, b, w, waves, seed) for v, b, w in configs(variants, sizes, leaders)]
    rows = []
    if jobs <= 1 or len(todo) == 1:
        for t in todo:
            rows.append(_row_job(t))
            if progress:
                progress(rows[-1])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            for r in pool.map(_row_job, todo):
                rows.append(r)
                if progress:
                    progress(r)
    order = {(v, b, w): k for k, (v, b, w) in enumerate(
        (v, b, w) for v in variants for b in sizes for w in leaders)}
    return sorted(rows, key=lambda r: order[(r["variant"], r["bytes"], r["leaders"])])


# ------------------------------------------------------------ report

def _f(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def table(rows, phase="warm"):
    """Return the text table of ``rows``: the alloc and free figures of ``phase``."""
    head = (f"{'variant':>7} {'size':>5} {'W':>4} {'waves':>5} {'rounds/grant':>12} "
            f"{'cas/ok':>7} {'reserve cas/ok':>14} {'ser/alloc':>10} {'rounds/alloc':>12} "
            f"{'ser/free':>9} {'NULLs':>5}  hottest words (alloc: atomics)")
    lines = [f"{phase} iteration (serialized atomics: per round, the most on one word, "
             "summed; per block)", head]
    for r in rows:
        a = r["phases"][f"{phase}_alloc"]
        f = r["phases"][f"{phase}_free"]
        hot = ", ".join(f"{name} {n}" for name, n in a["hottest"][:3])
        lines.append(f"{r['variant']:>7} {r['bytes']:>5} {r['leaders']:>4} {r['waves']:>5} "
                     f"{_f(a['rounds_per_grant'], 1):>12} {_f(a['cas_per_success']):>7} "
                     f"{_f(a['reserve_cas_per_success']):>14} "
                     f"{_f(a['serialized_per_block'], 3):>10} {_f(a['rounds_per_block'], 5):>12} "
                     f"{_f(f['serialized_per_block'], 3):>9} {a['nulls']:>5}  {hot}")
    return "\n".join(lines)


def formula(cal):
    """Return one line saying what a :func:`calibrate` result predicts with, and how well."""
    n = f"{H200['allocations']:,}"
    at = (f"its rounds per block at W = {cal['leaders']}" if cal["leaders"] else
          f"its rounds per block scaled to {cal['target']:,} warps (from the two largest W)")
    term = f"{'floor + ' if cal['floor'] else ''}{n} x "
    if cal["hot"]:
        term += (f"max(rounds/block x {cal['cost_us']:.4f} µs, hottest-word atomics/block x "
                 f"{cal['atomic_us'] * 1000:.3f} ns)")
    else:
        term += f"rounds/block x {cal['cost_us']:.4f} µs"
    how = "fitted here" if cal.get("fitted", True) else "the cost given, not fitted here"
    return (f"{cal['variant']} rows, {cal['phase']}, {at}, {how}: ms = {term}; worst factor "
            f"{cal['worst_factor']:.2f}, geometric mean {cal['geomean_factor']:.2f}")


def calibration_text(cal):
    """Return the text table of one :func:`calibrate` result."""
    lines = [f"calibration ({H200['source']}, {H200['commit']}): {formula(cal)}",
             f"{'variant':>7} {'size':>5} {'op':>5} {'rounds/blk':>10} {'slope':>6} "
             f"{'hot/blk':>8} {'measured ms':>12} {'predicted ms':>13} {'pred/meas':>9}"]
    for v, ps in ((cal["variant"], cal["rows"]), ("(other)", cal["others"])):
        for p in ps:
            lines.append(f"{v:>7} {p['bytes']:>5} {p['op']:>5} {p['x']:>10.5f} "
                         f"{p['slope']:>6.2f} {p['hot']:>8.4f} {p['measured_ms']:>12.3f} "
                         f"{p['predicted_ms']:>13.3f} {p['ratio']:>9.2f}")
    return "\n".join(lines)


def markdown(result, phase="warm", fit_rows=None):
    """Return Markdown tables of a run's ``result`` (as ``--json`` prints it).

    One row per (variant, size, W): ``phase``'s alloc (rounds per grant,
    ``cas`` per success, serialized atomics and rounds per block, the three
    hottest words) and free figures; then the calibrations of its rows
    (:func:`calibrations`, computed again: the H200's figures are data
    here; ``fit_rows``: the rows whose fitted cost predicts these first).
    """
    lines = ["| variant | size | W | waves | rounds/grant | cas/ok (all) | cas/ok (reserve) "
             "| ser. atomics/alloc | rounds/alloc | ser. atomics/free | rounds/free | NULLs "
             "| hottest words (alloc: atomics) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        a = r["phases"][f"{phase}_alloc"]
        f = r["phases"][f"{phase}_free"]
        hot = ", ".join(f"`{name}` {n}" for name, n in a["hottest"][:3])
        lines.append(
            f"| {r['variant']} | {r['bytes']} | {r['leaders']} | {r['waves']} "
            f"| {_f(a['rounds_per_grant'], 1)} | {_f(a['cas_per_success'])} "
            f"| {_f(a['reserve_cas_per_success'])} | {_f(a['serialized_per_block'], 3)} "
            f"| {_f(a['rounds_per_block'], 4)} | {_f(f['serialized_per_block'], 3)} "
            f"| {_f(f['rounds_per_block'], 4)} | {a['nulls']} | {hot} |")
    lines += ["", f"Issue 49's targets (W = {TARGET_W}, {phase}): `cas` per success <= "
              f"{TARGET_CAS:g}; serialized atomics per allocation at W = {TARGET_W} <= "
              f"{TARGET_GROWTH:g}x those at W = {TARGET_BASE_W}.", "",
              f"| variant | size | cas/ok at W = {TARGET_W} | met | ser. atomics "
              f"W = {TARGET_W} ÷ W = {TARGET_BASE_W} | met |", "|---|---:|---:|---|---:|---|"]
    for t in targets(result["rows"], phase):
        lines.append(f"| {t['variant']} | {t['bytes']} | {_f(t['cas_per_success'])} "
                     f"| {_yes(t['cas_ok'])} | {_f(t['growth'])} | {_yes(t['growth_ok'])} |")
    for cal in calibrations(result["rows"], fit_rows=fit_rows):
        lines += ["", f"Calibration: {formula(cal)}.", "",
                  "| variant | size | op | rounds/block | slope | hot atomics/block | H200 ms "
                  "| predicted ms | predicted ÷ H200 |",
                  "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
        for p in cal["rows"] + cal["others"]:
            v = cal["variant"] if p in cal["rows"] else f"{p.get('variant', 'warp')} (not fitted)"
            lines.append(f"| {v} | {p['bytes']} | {p['op']} | {p['x']:.5f} | {p['slope']:.2f} "
                         f"| {p['hot']:.4f} | {p['measured_ms']:.3f} | {p['predicted_ms']:.3f} "
                         f"| {p['ratio']:.2f} |")
    return "\n".join(lines)


def _yes(ok):
    return "-" if ok is None else "yes" if ok else "no"


def _ints(text):
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: integers separated by commas") from None
    if not out or min(out) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: one or more positive integers")
    return out


def _names(text):
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in VARIANTS]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: variants among {', '.join(VARIANTS)}")
    return out


def add_arguments(p):
    """Add the model's options to the argparse parser ``p`` (``devalloc.probes`` shares them)."""
    p.add_argument("--leaders", type=_ints, default=LEADERS, metavar="W,...",
                   help="warp slots in lockstep (default 32,64,128,256)")
    p.add_argument("--sizes", type=_ints, default=SIZES, metavar="B,...",
                   help=f"bytes per allocation, at most {L.MAX_SMALL} (default 16,256,4096,8192)")
    p.add_argument("--variants", type=_names, default=VARIANTS, metavar="V,...",
                   help="thread (a warp's 32 lanes allocate) and/or warp (lane 0 alone)")
    p.add_argument("--waves", type=int, default=None,
                   help=f"warps per slot per phase (default: enough for {GRANTS} grants per "
                        "slot, devalloc.tools.contention.waves_for)")
    p.add_argument("--seed", type=int, default=SEED, help="seed of the rounds' orders")
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes (default: the CPUs, at most the rows)")


def run(a, out=sys.stdout):
    """Measure and print what the parsed options ``a`` ask for; return 0."""
    import json
    import os

    if any(b > L.MAX_SMALL for b in a.sizes):
        raise SystemExit(f"contention: sizes above {L.MAX_SMALL} B are whole pages, not modelled")
    n = len(a.variants) * len(a.sizes) * len(a.leaders)
    jobs = a.jobs or min(n, os.cpu_count() or 1)
    t0 = time.perf_counter()

    def progress(r):
        print(f"contention: {r['variant']} {r['bytes']} B W={r['leaders']}: {r['seconds']} s",
              file=sys.stderr, flush=True)

    rows = measure(a.variants, a.sizes, a.leaders, a.waves, a.seed, jobs, progress)
    cals = calibrations(rows)
    result = {"model": {"allocations": ALLOCATIONS, "block": BLOCK, "sms": SMS,
                        "seed": a.seed, "grants": GRANTS, "waves": a.waves, "jobs": jobs,
                        "seconds": round(time.perf_counter() - t0, 1)},
              "rows": rows, "targets": targets(rows), "calibration": cals}
    if getattr(a, "json", False):
        json.dump(result, out)
        print(file=out)
        return 0
    print(table(rows), file=out)
    print(f"\nissue 49's targets (W = {TARGET_W}, warm): cas/ok <= {TARGET_CAS}, serialized "
          f"atomics per alloc at W = {TARGET_W} <= {TARGET_GROWTH}x W = {TARGET_BASE_W}'s",
          file=out)
    def met(ok):
        return "no row" if ok is None else "met" if ok else "not met"

    for t in targets(rows):
        print(f"{t['variant']:>7} {t['bytes']:>5}  cas/ok {_f(t['cas_per_success'])} "
              f"({met(t['cas_ok'])})  growth {_f(t['growth'])} ({met(t['growth_ok'])})",
              file=out)
    for c in cals:
        print(file=out)
        print(calibration_text(c), file=out)
    print(f"\n{len(rows)} rows in {result['model']['seconds']} s ({jobs} processes)", file=out)
    return 0


def ensure_simulator(argv, module="devalloc.tools.contention"):
    """Return None when numba runs the simulator; else re-run ``module argv`` with it, its status.

    The model runs the simulator's device modules (``_warp_number`` and
    friends read ``cuda.blockIdx``): ``NUMBA_ENABLE_CUDASIM=1`` must be set
    before numba is imported. If numba is not imported yet it is set here.
    """
    import os
    import subprocess

    if "numba" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        return None
    from numba import config

    if config.ENABLE_CUDASIM:
        return None
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    rc = ensure_simulator(argv)
    if rc is not None:
        return rc
    p = argparse.ArgumentParser(prog="python -m devalloc.tools.contention",
                                description=__doc__.split("\n")[0])
    add_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--markdown", metavar="FILE",
                   help="print the Markdown tables of FILE (what an earlier --json run "
                        "printed) instead of running")
    p.add_argument("--cost-from", metavar="FILE",
                   help="with --markdown: first predict its rows with the cost fitted on "
                        "FILE's rows (another --json run, e.g. of the commit the H200 measured)")
    a = p.parse_args(argv)
    if a.markdown:
        import json

        with open(a.markdown) as f:
            result = json.load(f)
        fit_rows = None
        if a.cost_from:
            with open(a.cost_from) as f:
                fit_rows = json.load(f)["rows"]
        print(markdown(result, fit_rows=fit_rows))
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
