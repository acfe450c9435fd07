"""The GPU check (``python -m devalloc.gpucheck``): its stress kernel, report and command.

The stress kernel runs tiny on the simulator and at full size (every SM
full, 200 rounds) with ``DEVALLOC_TEST_GPU=1``. The command itself runs with
``--simulate``, so its own code is exercised where there is no GPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import config

from devalloc import target
from devalloc.gpucheck import EXIT_NO_GPU, EXIT_PASSED
from devalloc.gpucheck import report as R

ROOT = Path(__file__).resolve().parents[1]
ON_GPU = not config.ENABLE_CUDASIM


@pytest.mark.usefixtures("fine_interleaving")
def test_stress_kernel_finds_no_overlap_no_spurious_null_and_drains():
    from devalloc.gpucheck import stress

    if ON_GPU:
        r = stress.run(rounds=200, warps_per_sm=16)
    else:
        r = stress.run(threads=64, rounds=5, block=32, max_large=40_000)
    assert stress.verdict(r) == []
    assert r["allocs"] > 0 and r["nulls"] == 0 and r["bad_blocks"] == 0
    assert r["requests"] == r["allocs"]


@pytest.mark.usefixtures("fine_interleaving")
def test_stress_kernel_on_small_pages_finds_no_overlap_no_spurious_null_and_drains():
    from devalloc.gpucheck import stress

    if ON_GPU:
        r = stress.run(rounds=60, warps_per_sm=8, page=1024)
    else:
        r = stress.run(threads=64, rounds=5, block=32, max_large=40_000, page=1024)
    assert r["page"] == 1024
    assert stress.verdict(r) == []
    assert r["allocs"] > 0 and r["nulls"] == 0 and r["bad_blocks"] == 0


@pytest.mark.usefixtures("fine_interleaving")
def test_stress_kernel_on_a_tight_heap_fails_some_and_corrupts_nothing():
    from devalloc import layout as L
    from devalloc.gpucheck import stress

    threads = 4096 if ON_GPU else 64
    # One page: a single slab of one class at a time, so the other classes'
    # requests must fail (the check itself uses a third of the roomy peak).
    r = stress.run(threads=threads, rounds=5, block=32, max_large=40_000,
                   capacity=L.MIN_CAPACITY)
    assert r["nulls"] > 0, r
    assert stress.verdict(r) == [], r  # counted, nothing corrupted, drained consistent


def test_verdict_names_each_kind_of_wrong_result():
    from devalloc.gpucheck import stress

    good = {"bad_blocks": 0, "sized_for_room": True, "nulls": 0, "requests": 10,
            "scoped_nulls": 0, "scope_misuse": 0,
            "allocs": 10, "heap_allocs": 10, "heap_failed": 0, "heap_frees": 10,
            "in_use_after": 0, "reserved_after": 0, "live_after": 0, "drained_problem": None}
    assert stress.verdict(good) == []
    cases = {"bad_blocks": 1, "nulls": 2, "scoped_nulls": 1, "scope_misuse": 1,
             "heap_frees": 9, "live_after": 1, "heap_failed": 4,
             "drained_problem": "page 3 is HEAD"}
    for key, value in cases.items():
        assert stress.verdict({**good, key: value}), key
    tight = {**good, "sized_for_room": False, "nulls": 3, "requests": 13, "heap_failed": 3}
    assert stress.verdict(tight) == []


def test_worst_case_capacity_covers_two_blocks_per_thread():
    from devalloc import layout as L
    from devalloc.gpucheck import stress

    one = stress.worst_case_capacity(1, 1 << 17)
    assert (stress.worst_case_capacity(1001, 1 << 17) - one
            == 1000 * (4 + 8 + stress.SCOPE_PAGES) * L.PAGE)


def _results(**status):
    return [{"part": p, "status": s, "summary": f"{p} said {s}", "data": {}}
            for p, s in status.items()]


def test_report_fails_only_on_verification_parts():
    assert R.passed(_results(environment="passed", tests="passed", throughput="failed",
                             latency="failed", sanitizer="skipped"))
    for part in R.VERIFICATION:
        assert not R.passed(_results(**{part: "failed"}))


def test_report_markdown_and_summary():
    meta = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-24", "command": "c",
            "mode": "full", "version": "0.1.0", "commit": "abc", "seconds": 12.0,
            "verdict": "passed"}
    results = _results(environment="passed", stress="failed")
    results[1]["data"] = {"room": {"threads": 10, "rounds": 2, "requests": 5, "allocs": 4,
                                   "nulls": 1, "bad_blocks": 0, "capacity": 100, "peak": 50,
                                   "seconds": 0.1}, "problems": ["room: 1 NULLs"]}
    md = R.markdown(meta, results)
    assert "| stress | FAIL | stress said failed |" in md
    assert "- problem: room: 1 NULLs" in md
    assert R.part_line(results[1]).split()[:2] == ["stress", "FAIL"]
    assert R.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def _run(*args, env=None):
    e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    e.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-m", "devalloc.gpucheck", *args], cwd=ROOT,
                          env=e, capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(target.gpu_available(), reason="a GPU is usable here")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_4():
    p = _run()
    assert p.returncode == EXIT_NO_GPU
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1
    assert "no usable CUDA GPU" in p.stderr and "--simulate" in p.stderr


def test_simulate_runs_every_part_and_writes_the_report(tmp_path):
    p = _run("--simulate", "--out", str(tmp_path))
    assert p.returncode == EXIT_PASSED, p.stdout + p.stderr
    (md,) = tmp_path.glob("gpucheck-simulate-*.md")
    data = json.loads(md.with_suffix(".json").read_text())
    status = {r["part"]: r["status"] for r in data["results"]}
    assert status == {"environment": "passed", "tests": "passed", "stress": "passed",
                      "sanitizer": "skipped", "throughput": "skipped",
                      "examples": "passed", "latency": "info"}
    sims = {r["part"]: r["summary"] for r in data["results"]}
    assert sims["sanitizer"] == sims["throughput"] == "skipped: simulator"
    tight = next(r for r in data["results"] if r["part"] == "stress")["data"]["tight"]
    assert tight["nulls"] > 0 and tight["bad_blocks"] == 0
    assert "Verdict: passed" in md.read_text()
    assert md.with_suffix(".log").exists()
    # each part's line once (as it ends), then the verdict
    lines = p.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines[:-1]] == list(status)
    assert lines[-1].startswith("passed: every verification part passed; report: ")


COMPILE_STRESS = """
import json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
sys.path.insert(0, sys.argv[1])
import devalloc
from devalloc.tools import aot
from numba import types
from devalloc.gpucheck import stress
sig = (devalloc.ctx_type, types.int64, types.int64, types.int64, types.int64[:, :])
ptx, _ = aot.compile_ptx(stress.stress_kernel, sig)
r = aot.assemble(ptx)
print(json.dumps({"registers": r.registers, "spills": r.spill_stores + r.spill_loads,
                  "stack": r.stack_bytes, "membar_sc": r.sass_membar_sc}))
"""


@pytest.mark.slow
def test_stress_kernel_compiles_for_sm90_without_spills():
    """What the GPU check launches compiles for real hardware (no GPU needed)."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    p = subprocess.run([sys.executable, "-c", COMPILE_STRESS, str(ROOT)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    # 91 registers when written (2 blocks of 256 threads per SM: 16 warps).
    assert r["spills"] == 0 and r["stack"] == 0 and r["membar_sc"] == 0
    assert r["registers"] <= 128


def test_throughput_rows_are_set_against_issue_49s_targets():
    from devalloc.gpucheck import targets

    def row(v, b, a, f):
        return {"variant": v, "bytes": b, "alloc_over_floor": a, "free_over_floor": f}

    rows, words = targets.against_targets([row("thread", 16, 2.5, 2.5), row("thread", 8192, 121, 9),
                                         row("warp", 16, 3, 1), row("warp", 256, 50, 50)])
    assert [(r["alloc_target"], r["alloc_met"], r["free_target"], r["free_met"]) for r in rows] == [
        (3, True, 2, False), (120, False, 10, True), (3, True, None, None),
        (None, None, None, None)]
    assert words == "issue 49's targets: 3 met, 2 missed"
    assert targets.target_lines(rows).splitlines() == [
        "thread    16 B alloc / floor       2.5  target <=    3  met",
        "thread    16 B  free / floor       2.5  target <=    2  MISSED",
        "thread  8192 B alloc / floor     121.0  target <=  120  MISSED",
        "thread  8192 B  free / floor       9.0  target <=   10  met",
        "  warp    16 B alloc / floor       3.0  target <=    3  met"]


def test_throughput_rows_are_medians_over_the_floor_after_the_first_iteration():
    from devalloc.gpucheck import targets

    raw = {"rows": [{"variant": "thread", "allocs": 1000, "bytes": 16, "failed": 0,
                     "bad_blocks": 0, "times": {"floor": [9.0, 1.0, 1.0, 1.0],
                                                "alloc": [50.0, 2.0, 3.0, 4.0],
                                                "free": [7.0, 1.0, 2.0, 9.0]}}]}
    rows, words = targets.throughput_rows(raw)
    (r,) = rows
    assert (r["alloc_over_floor"], r["free_over_floor"], r["first_over_later_alloc"]) == (3, 2, 50 / 3)
    assert (r["alloc_met"], r["free_met"], r["pair_over_floor"]) == (True, True, None)
    assert words == "issue 49's targets: 2 met, 0 missed"


def test_latency_summary_names_the_examples_over_two_seconds():
    from devalloc.gpucheck import latency

    row = lambda s: {"first_s": s, "later_s": 0.01}  # noqa: E731
    m = {"cold": row(5.5), "warm": {"first_s": 1.25, "later_s": 2e-4},
         "examples": {"a": row(1.5), "b": row(2.5), "c": row(0.75)}}
    text, problems = latency.summary_and_problems(m)
    assert "first call 5.50 s on an empty body cache, 1.25 s in a second process" in text
    assert "later calls 0.20 ms" in text
    assert "0.75-2.50 s (target <= 2 s: missed by b)" in text
    assert problems == ["b: first call 2.50 s in a second process (target <= 2 s)"]
    m["examples"]["b"] = row(1.0)
    text, problems = latency.summary_and_problems(m)
    assert "(target <= 2 s: met)" in text and problems == []
    # the second process runs the kernel it read from the cache: a wrong offset is a problem
    m["warm"]["bad"] = 3
    text, problems = latency.summary_and_problems(m)
    assert problems == ["one-alloc kernel (warm): 3 of its offsets NULL, outside the arena "
                        "or misaligned"]


def test_latency_report_lists_cold_warm_and_each_example():
    from devalloc.gpucheck import report as R

    data = {"first_s": 5.0, "warm_s": 1.5, "later_s": 3e-4,
            "examples": {"ragged_walks": {"first_s": 1.75, "later_s": 0.25}},
            "problems": ["x: slow"]}
    meta = {"gpu": "g", "date": "d", "command": "c", "mode": "quick", "version": "v",
            "commit": "c", "seconds": 1.0, "verdict": "passed"}
    md = R.markdown(meta, [{"part": "latency", "status": "info", "summary": "s", "data": data}])
    assert "first call 5.000 s on an empty body cache, 1.500 s in a second process" in md
    assert "- ragged_walks: first call 1.750 s in a second process, a second run 0.250 s" in md
    assert "- problem: x: slow" in md


def test_the_tests_part_names_a_missing_pytest(monkeypatch):
    from devalloc.gpucheck import parts

    real = parts._version
    monkeypatch.setattr(parts, "_version", lambda d: None if d == "pytest" else real(d))
    r = parts.tests("simulate")
    assert r["status"] == "failed"
    assert r["summary"].startswith("cannot start: pytest is not installed here")
    assert "devalloc[test]" in r["summary"]


def test_a_part_that_cannot_start_says_what_its_process_said(tmp_path, monkeypatch):
    from devalloc.gpucheck import __main__ as M

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'numba'\"\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(M.sys, "executable", str(fake))
    with open(tmp_path / "log", "w") as log:
        r = M.run_part("environment", "simulate", 30, log)
    assert r["status"] == "failed"
    assert r["summary"] == ("could not start or finish: its process exited 3 without a result "
                            "(ModuleNotFoundError: No module named 'numba')")
