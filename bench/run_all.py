"""Run every benchmark that can run on this machine and update ``bench/RESULTS.md``.

Run: ``.venv/bin/python bench/run_all.py`` (``--only op oom`` picks steps).

Each step runs in its own subprocess, with the CUDA target it needs chosen
before numba is imported:

=========  =======================================  ===========================
step       script                                   target
=========  =======================================  ===========================
static     ``bench/static_cost.py``                 real CUDA target, no GPU
op         ``bench/op_counts.py``                   simulator
oom        ``bench/oom.py``                         simulator
steps      ``bench/step_scratch.py``                simulator
sweep      ``bench/sweep.py``                       none (host models)
timings    ``pytest bench/ --benchmark-only``       simulator
gpu        ``bench/gpu_throughput.py``              GPU (exits 0 without one)
=========  =======================================  ===========================

Every script rewrites only its own sections of ``RESULTS.md`` (this one
writes the ``timings`` section from pytest-benchmark's JSON); hand-written
sections (``## Notes``, ``## Targets``) are kept.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, header, markdown_table, simulator_environment, write_section

BENCH = Path(__file__).resolve().parent
STEPS = ("static", "op", "oom", "steps", "sweep", "timings", "gpu")
TIMINGS_COMMAND = ".venv/bin/python -m pytest bench/ --benchmark-only"


def _env(simulator):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def _run(cmd, simulator):
    print(f"$ {' '.join(cmd)}", flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=_env(simulator)).returncode


def timings_section(report):
    """Return the pytest-benchmark section from its JSON ``report``."""
    cols = [("benchmark", "l"), ("median", "r"), ("IQR", "r"), ("min", "r"), ("rounds", "r")]

    def t(seconds):
        return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"

    rows = [[b["name"], t(b["stats"]["median"]), t(b["stats"]["iqr"]), t(b["stats"]["min"]),
             b["stats"]["rounds"]] for b in sorted(report["benchmarks"], key=lambda b: b["name"])]
    lines = header("Host and simulator timings (pytest-benchmark)", TIMINGS_COMMAND,
                   simulator_environment())
    lines += [
        "`bench/test_bench_host.py`: `Heap` creation, `reset`, `usage` and `live` (a heap "
        "with 256 live blocks), and two simulator launches (64 threads allocate 16 B, then "
        "free). On the simulator the device is host memory, so these time devalloc's host "
        "code and the simulator, not a GPU; on a shared machine they are noisy. Compare "
        "runs with `--benchmark-autosave` / `--benchmark-compare`.",
        "",
        markdown_table(cols, rows),
    ]
    return "\n".join(lines)


def run_timings():
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        rc = _run([sys.executable, "-m", "pytest", str(BENCH), "--benchmark-only", "-q",
                   "-p", "no:cacheprovider", f"--benchmark-json={out}"], simulator=True)
        if rc == 0:
            text = timings_section(json.loads(out.read_text()))
            write_section(text)
            print(text)
    return rc


def run_step(step):
    py = sys.executable
    if step == "static":
        return _run([py, str(BENCH / "static_cost.py")], simulator=False)
    if step == "op":
        return _run([py, str(BENCH / "op_counts.py")], simulator=True)
    if step == "oom":
        return _run([py, str(BENCH / "oom.py")], simulator=True)
    if step == "steps":
        return _run([py, str(BENCH / "step_scratch.py")], simulator=True)
    if step == "sweep":
        return _run([py, str(BENCH / "sweep.py")], simulator=True)
    if step == "timings":
        return run_timings()
    if step == "gpu":  # target.choose() decides: the GPU, or a message and exit 0
        return _run([py, str(BENCH / "gpu_throughput.py")], simulator=False)
    raise ValueError(step)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS))
    a = p.parse_args(argv)
    failed = []
    for step in STEPS:
        if step not in a.only:
            continue
        t0 = time.monotonic()
        rc = run_step(step)
        print(f"[run_all] {step}: exit {rc}, {time.monotonic() - t0:.0f} s", flush=True)
        if rc:
            failed.append(step)
    if failed:
        print(f"[run_all] failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
