"""``python -m devalloc.gpucheck``: run every part of the GPU check and write the report.

See :mod:`devalloc.gpucheck`. Each part runs as ``python -m
devalloc.gpucheck.parts NAME`` in a process of its own, under a time limit
(a part that outlives it failed: a hang is a failure), and the check goes on
after a failing part. The report is rewritten after every part, so a run cut
short still leaves what it found.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED
from . import report as R

#: Parts in order, with their time limits in seconds by mode (full, quick, simulate).
PARTS = {
    "environment": (60, 60, 120),
    "tests": (200, 120, 300),
    "stress": (120, 60, 360),
    "sanitizer": (160, 80, 60),
    "throughput": (120, 90, 60),
    "examples": (150, 90, 600),
    "latency": (120, 90, 300),
}
MODES = ("full", "quick", "simulate")
ROOT = Path(__file__).resolve().parents[2]


def _commit():
    if os.environ.get("DEVALLOC_COMMIT"):
        return os.environ["DEVALLOC_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_part(name, mode, limit, log):
    """Run one part in its own process; return its result (a failure if it hangs or dies)."""
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1" if mode == "simulate" else "0"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "part.json"
        cmd = [sys.executable, "-m", "devalloc.gpucheck.parts", name, "--mode", mode,
               "--json", str(out)]
        t0 = time.perf_counter()
        log.write(f"\n===== {name} ({mode}, limit {limit} s)\n")
        log.flush()
        start = log.tell()
        try:
            p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                               timeout=limit)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = None
        seconds = time.perf_counter() - t0
        if rc is None:
            res = R_result(name, "failed", f"timed out after {limit} s (a hang, or too slow)")
        elif out.exists():
            res = json.loads(out.read_text())
        else:
            said = _last_line(log, start)
            res = R_result(name, "failed", f"could not start or finish: its process exited "
                                           f"{rc} without a result" + (f" ({said})" if said else ""))
    res["seconds"] = round(seconds, 1)
    return res


def _last_line(log, start):
    # The last line a part's process wrote to the log after offset start.
    log.flush()
    try:
        with open(log.name, errors="replace") as f:
            f.seek(start)
            lines = [line.strip() for line in f.read().splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def R_result(part, status, summary):
    return {"part": part, "status": status, "summary": summary, "data": {}}


def write_report(out_dir, meta, results):
    """Write ``<stem>.md`` and ``<stem>.json``; return the Markdown path."""
    md = out_dir / f"{meta['stem']}.md"
    md.write_text(R.markdown(meta, results))
    (out_dir / f"{meta['stem']}.json").write_text(json.dumps(
        {"meta": meta, "results": results}, indent=1, default=str))
    return md


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m devalloc.gpucheck",
        description="Validate devalloc on a CUDA GPU and write a report "
                    "(bench/results/gpu-<gpu>-<date>.md and .json).",
        epilog="exit status: 0 every verification part passed; 1 one failed (wrong answer, "
               "sanitizer error, hang); 2 usage error; 4 no usable CUDA GPU (without "
               "--simulate)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help="smaller sizes, fewer rounds (under 2 minutes on an H100)")
    mode.add_argument("--simulate", action="store_true",
                      help="every part at a tiny scale on the CUDA simulator (no GPU needed)")
    p.add_argument("--out", metavar="DIR", type=Path,
                   help="folder for the report (default: bench/results of the checkout)")
    p.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS),
                   help="run only these parts (default: all, in order)")
    return p


def main(argv=None):
    a = build_parser().parse_args(argv)
    mode = "simulate" if a.simulate else "quick" if a.quick else "full"
    from .. import target

    if mode != "simulate" and not target.gpu_available():
        print("devalloc.gpucheck: no usable CUDA GPU here (no driver or no device); "
              "--simulate runs the check's code on the CUDA simulator", file=sys.stderr)
        return EXIT_NO_GPU
    out_dir = a.out or (ROOT / "bench" / "results" if (ROOT / "bench").is_dir()
                        else Path.cwd() / "gpucheck-results")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"devalloc.gpucheck: cannot write the report to {out_dir}: {e}", file=sys.stderr)
        return 2
    from .. import __version__

    date = datetime.date.today().isoformat()
    meta = {"gpu": "simulator" if mode == "simulate" else "GPU", "date": date, "mode": mode,
            "command": "python -m devalloc.gpucheck" + {"full": "", "quick": " --quick",
                                                       "simulate": " --simulate"}[mode],
            "version": __version__, "commit": _commit(), "seconds": 0.0,
            "verdict": "running", "stem": f"gpucheck-{mode}-{date}"}
    index = MODES.index(mode)
    results = []
    t0 = time.perf_counter()
    log_path = out_dir / f"{meta['stem']}.log"
    with open(log_path, "w") as log:
        for name in a.parts:
            res = run_part(name, mode, PARTS[name][index], log)
            results.append(res)
            print(R.part_line(res), flush=True)
            if name == "environment" and mode != "simulate" and res["data"].get("gpu"):
                meta["gpu"] = res["data"]["gpu"]
                stem = f"gpu-{R.slug(meta['gpu'])}-{date}" + ("-quick" if mode == "quick"
                                                             else "")
                log.flush()
                new_log = out_dir / f"{stem}.log"
                os.replace(log_path, new_log)
                log_path = new_log
                meta["stem"] = stem
            meta["seconds"] = time.perf_counter() - t0
            write_report(out_dir, meta, results)
    ok = R.passed(results)
    meta["verdict"] = ("passed: every verification part passed" if ok else
                       "FAILED: " + ", ".join(r["part"] for r in results
                                              if r["status"] == "failed" and
                                              r["part"] in R.VERIFICATION))
    md = write_report(out_dir, meta, results)
    print(f"{meta['verdict']}; report: {md}")  # (each part's line is printed as it ends)
    return EXIT_PASSED if ok else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
