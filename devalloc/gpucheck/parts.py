"""The parts of ``python -m devalloc.gpucheck``, each run in a process of its own.

``python -m devalloc.gpucheck.parts NAME --mode full|quick|simulate --json FILE``
runs one part and writes its result to FILE: ``{"part", "status", "summary",
"data"}`` where status is ``passed`` or ``failed`` (verification parts),
``info`` (figures: they never fail the check) or ``skipped`` (with the
reason in ``summary``). The runner (:mod:`devalloc.gpucheck.__main__`) sets
``NUMBA_ENABLE_CUDASIM`` for the mode before this module imports numba.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from importlib import metadata
from pathlib import Path

from .targets import target_lines, throughput_rows

#: The examples run against their worst-case twins (kernels/).
EXAMPLES = ("ragged_walks", "particle_transport", "barrier_option", "two_pass_variance",
            "step_scratch")
#: Threads per example run, by mode.
EXAMPLE_THREADS = {"full": 1_000_000, "quick": 100_000, "simulate": 32}
#: Stress settings by mode: (rounds, warps per SM, largest block).
STRESS = {"full": (200, 16, 1 << 17), "quick": (60, 8, 1 << 17), "simulate": (4, None, 40_000)}
#: The kernel test files run with DEVALLOC_TEST_GPU=1 (simulate: one small file).
TEST_FILES = ("test_kernels.py", "test_heap_sim.py", "test_scratch.py", "test_churn_sim.py",
              "test_misuse.py", "test_observe.py", "test_lifecycle.py", "test_examples.py",
              "test_warp_sim.py", "test_gpucheck.py", "test_carving.py")
SIM_TEST_FILES = ("test_kernels.py",)
QUICK_TEST_FILES = ("test_kernels.py", "test_heap_sim.py", "test_gpucheck.py")
#: numpy releases devalloc is tested with (pyproject: numpy>=1.24).
NUMPY_TESTED = ("1.24", "2.4")

ROOT = Path(__file__).resolve().parents[2]  # the checkout (tests/, bench/) when run from one


def _version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _vtuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def result(part, status, summary, **data):
    return {"part": part, "status": status, "summary": summary, "data": data}


# ------------------------------------------------------------------ environment


def environment(mode):
    """GPU, driver, runtime and package versions; warnings for untested versions."""
    from ..sim import compat

    restored = compat.restore_numpy_aliases()
    from numba import config, cuda

    versions = {d: _version(d) for d in ("numba", "numba-cuda", "cuda-bindings", "numpy",
                                         "cuda-python", "llvmlite")}
    warnings = []
    nc = versions["numba-cuda"]
    if nc and not _vtuple(compat.TESTED[0]) <= _vtuple(nc) <= _vtuple(compat.TESTED[1]):
        warnings.append(f"numba-cuda {nc} is outside the tested range "
                        f"{compat.TESTED[0]}..{compat.TESTED[1]}")
    npv = versions["numpy"]
    if npv and not _vtuple(NUMPY_TESTED[0]) <= _vtuple(npv)[:2] <= _vtuple(NUMPY_TESTED[1]):
        warnings.append(f"numpy {npv} is outside the tested range "
                        f"{NUMPY_TESTED[0]}..{NUMPY_TESTED[1]}.x")
    if restored:
        warnings.append(f"numpy lacks {', '.join(restored)} that numba-cuda {nc} reads: "
                        "devalloc put the alias back (devalloc.sim.compat.NUMPY_ALIASES)")
    problems = compat.problems()
    data = {"versions": versions, "python": sys.version.split()[0], "warnings": warnings,
            "numba_cuda_problems": problems}
    if config.ENABLE_CUDASIM:
        data["gpu"] = "CUDA simulator"
        return result("environment", "passed" if not problems else "failed",
                      "the CUDA simulator; " + (f"{len(warnings)} warnings" if warnings
                                                else "versions in range"), **data)
    from numba.cuda.cudadrv.driver import get_version

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    try:
        runtime = ".".join(map(str, cuda.runtime.get_version()))
    except Exception as e:  # the runtime library may be absent: say so
        runtime = f"unknown ({type(e).__name__})"
    ctx = cuda.current_context()
    free, total = ctx.get_memory_info()
    data.update(gpu=name, sms=dev.MULTIPROCESSOR_COUNT,
                cc=".".join(map(str, dev.compute_capability)),
                driver=".".join(map(str, get_version())), runtime=runtime,
                memory_bytes=int(total), free_bytes=int(free))
    status = "failed" if problems else "passed"
    summary = (f"{name}, {dev.MULTIPROCESSOR_COUNT} SMs, cc {data['cc']}, driver "
               f"{data['driver']}, runtime {runtime}; numba-cuda {nc}, numpy {npv}"
               + (f"; {len(warnings)} warnings" if warnings else ""))
    return result("environment", status, summary, **data)


# ------------------------------------------------------------------------ tests


def tests(mode):
    """The kernel tests: DEVALLOC_TEST_GPU=1 on a GPU, one small file on the simulator."""
    folder = ROOT / "tests"
    if not (folder / "conftest.py").exists():
        return result("tests", "skipped", "no tests/ folder: run from a checkout of devalloc")
    if not _version("pytest"):  # the README's main command installs no test tools
        return result("tests", "failed", "cannot start: pytest is not installed here "
                      "(pip install 'devalloc[test]' in this environment, then run again)")
    files = {"simulate": SIM_TEST_FILES, "quick": QUICK_TEST_FILES}.get(mode, TEST_FILES)
    files = [str(folder / f) for f in files if (folder / f).exists()]
    env = dict(os.environ)
    tools = {}
    if mode == "simulate":
        env.pop("DEVALLOC_TEST_GPU", None)
    else:
        env["DEVALLOC_TEST_GPU"] = "1"
        from ..tools import aot

        for tool in ("ptxas", "nvdisasm"):  # the compile checks: wheels, else the toolkit's
            var = "DEVALLOC_" + tool.upper()
            found = env.get(var) or aot._wheel_bin(tool) or aot.toolkit_path(tool)
            if found:
                env[var] = found
            tools[tool] = found
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs",
               f"--junitxml={xml}", *files]
        if not _version("pytest-xdist"):  # pyproject's addopts name xdist's -n
            cmd[4:4] = ["-o", "addopts=-ra"]
        elif mode != "simulate":
            cmd[4:4] = ["-n", str(os.cpu_count() or 1)]  # the compiles run on the CPU
        if mode != "simulate" and _version("pytest-timeout"):
            cmd[4:4] = ["--timeout", "120"]  # a hanging test fails alone
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        print(p.stdout[-20000:])
        print(p.stderr[-5000:], file=sys.stderr)
        counts, failures, skips = _junit(xml)
    status = "passed" if p.returncode == 0 and not counts["failed"] + counts["errors"] \
        else "failed"
    summary = (f"{counts['passed']} passed, {counts['failed']} failed, {counts['errors']} "
               f"errors, {counts['skipped']} skipped in {seconds:.0f} s")
    return result("tests", status, summary, counts=counts, failures=failures,
                  skips=skips, returncode=p.returncode, files=[Path(f).name for f in files],
                  tools=tools)


def _junit(path):
    """Return (counts, failed test ids with their first line, skip reasons with counts)."""
    import xml.etree.ElementTree as ET

    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures, skips = [], {}
    if not path.exists():
        return counts, ["pytest wrote no report"], skips
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag: child for child in case}
        if "failure" in kinds or "error" in kinds:
            tag = "failure" if "failure" in kinds else "error"
            counts["failed" if tag == "failure" else "errors"] += 1
            msg = (kinds[tag].get("message") or "").splitlines()
            failures.append(f"{name}: {msg[0][:200] if msg else tag}")
        elif "skipped" in kinds:
            counts["skipped"] += 1
            why = (kinds["skipped"].get("message") or "").strip()[:160]
            skips[why] = skips.get(why, 0) + 1
        else:
            counts["passed"] += 1
    return counts, failures, skips


# ----------------------------------------------------------------------- stress


def stress(mode):
    """The stress kernel: a heap sized for the worst case, one of a third of its peak (one
    page on the simulator), 1 KiB pages, and (not quick) the first with ``outline=True``."""
    from . import stress as st

    rounds, warps, max_large = STRESS[mode]
    if mode == "simulate":
        first = st.run(threads=64, rounds=rounds, block=32, max_large=max_large)
    else:
        first = st.run(rounds=rounds, warps_per_sm=warps, max_large=max_large)
    from .. import layout as L

    # A third of the roomy run's peak; on the simulator's 64 threads that can
    # still serve every request (a peak inflated by the interleaving, a tight
    # run that happened to pack), so there one page: a single slab of one
    # class at a time, the other classes' requests must fail.
    second_cap = (L.MIN_CAPACITY if mode == "simulate"
                  else max(first["peak"] // 3, L.MIN_CAPACITY))
    second = st.run(threads=first["threads"], rounds=rounds, max_large=max_large,
                    capacity=second_cap, block=first["block"])
    # Small pages (Heap(page=1024)): more slabs, more page claims and retires
    # for the same blocks; sized for the worst case, so no NULL either.
    small = st.run(threads=first["threads"], rounds=rounds, max_large=max_large,
                   block=first["block"], page=L.PAGE_MIN)
    # Heap(outline=True): one copy of alloc, free, scoped's chunk code per kernel.
    outlined = None if mode == "quick" else st.run(
        threads=first["threads"], rounds=rounds, max_large=max_large, block=first["block"],
        outline=True)
    runs = (first, second, small, outlined)
    wrong = [f"{name}: {w}" for name, r in zip(("room", "tight", "1 KiB pages", "outlined"), runs)
             if r for w in st.verdict(r)]
    fail_rate = second["nulls"] / max(1, second["requests"])
    summary = (f"{first['threads']} threads x {rounds} rounds: {first['allocs']} blocks "
               f"served, {first['bad_blocks']} bad, {first['nulls']} NULLs with room "
               f"(peak {first['peak'] / first['capacity']:.1%} of the heap); tight heap: "
               f"{fail_rate:.0%} of requests failed, {second['bad_blocks']} bad; "
               + "".join(f"{n}: {r['allocs']} served, {r['bad_blocks']} bad, {r['nulls']} "
                         "NULLs with room; " for n, r in (("1 KiB pages", small),
                                                          ("outlined", outlined)) if r)
               + "drained heaps consistent: "
               f"{'NO' if any(r and r['drained_problem'] for r in runs) else 'yes'}")
    return result("stress", "failed" if wrong else "passed", summary, room=first,
                  tight=second, small_pages=small, outlined=outlined, problems=wrong)


def stress_small(mode):
    """A small stress configuration for compute-sanitizer (a few thousand threads)."""
    from . import stress as st

    r = st.run(threads=64 if mode == "simulate" else 2048, rounds=4 if mode == "simulate"
               else 12, block=32 if mode == "simulate" else 256, max_large=40_000)
    wrong = st.verdict(r)
    return result("stress-small", "failed" if wrong else "passed",
                  f"{r['allocs']} blocks, {r['bad_blocks']} bad, {r['nulls']} NULLs", run=r,
                  problems=wrong)


# -------------------------------------------------------------------- sanitizer

#: "ERROR SUMMARY: 0 errors" (memcheck, synccheck); "RACECHECK SUMMARY: 0 hazards
#: displayed (0 errors, 0 warnings)" (racecheck).
_SUMMARY = re.compile(r"SUMMARY: (?:[^\n(]*\()?(\d+) error")


def sanitizer(mode):
    """compute-sanitizer memcheck, racecheck and synccheck on a small stress and an example."""
    if mode == "simulate":
        return result("sanitizer", "skipped", "skipped: simulator")
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        return result("sanitizer", "skipped", "skipped: compute-sanitizer is not on the PATH")
    targets = {
        "stress-small": [sys.executable, "-m", "devalloc.gpucheck.parts", "stress-small",
                         "--mode", "quick"],
        "ragged_walks": [sys.executable, "-m", "devalloc", "demo", "--threads", "4096",
                         "--json"],
    }
    plan = ([("memcheck", "stress-small")] if mode == "quick" else
            [("memcheck", "stress-small"), ("memcheck", "ragged_walks"),
             ("racecheck", "stress-small"), ("synccheck", "stress-small")])
    limit = 40 if mode == "quick" else 50  # per run; the part has its own limit
    runs, kernel_errors, refused = [], 0, []
    for check, name in plan:
        cmd = targets[name]
        t0 = time.perf_counter()
        try:
            p = subprocess.run([tool, "--tool", check, "--error-exitcode", "99", *cmd],
                               capture_output=True, text=True, timeout=limit)
            out = p.stdout + p.stderr
            rc = p.returncode
        except subprocess.TimeoutExpired:
            out, rc = f"timed out after {limit} s", None
        m = _SUMMARY.findall(out)
        errors = int(m[-1]) if m else None
        api = len(re.findall(r"Program hit .* on CUDA API call", out))
        msgs = sorted(set(re.findall(r"=========\s+(Invalid [^\n]*|Program hit [^\n]*|"
                                     r"[A-Za-z ]*hazard[^\n]*|Race [^\n]*)", out)))[:8]
        if "not supported" in out.lower() and errors is None:
            refused.append(f"{check} on {name}: {out.strip().splitlines()[-1][:160]}")
        in_kernels = None if errors is None else errors - api
        if in_kernels:
            kernel_errors += in_kernels
        runs.append({"tool": check, "target": name, "errors": errors,
                     "api_errors": api, "kernel_errors": in_kernels, "returncode": rc,
                     "seconds": round(time.perf_counter() - t0, 1), "messages": msgs})
        print(f"--- {check} {name}: rc {rc}, errors {errors} (API {api})\n{out[-6000:]}")
    if refused and all(r["errors"] is None for r in runs):
        return result("sanitizer", "skipped", "skipped: compute-sanitizer refused the device: "
                      + refused[0], runs=runs)
    unknown = [r for r in runs if r["errors"] is None]
    status = "failed" if kernel_errors or unknown else "passed"
    summary = "; ".join(f"{r['tool']} {r['target']}: "
                        + ("no summary" if r["errors"] is None else
                           f"{r['kernel_errors']} errors" + (f" (+{r['api_errors']} CUDA API "
                                                              "errors)" if r["api_errors"]
                                                              else ""))
                        for r in runs)
    return result("sanitizer", status, summary, runs=runs)


# ------------------------------------------------------------------- throughput


def throughput(mode):
    """bench/gpu_throughput.py on the survey's protocol (figures; bad blocks fail)."""
    if mode == "simulate":
        return result("throughput", "skipped", "skipped: simulator")
    script = ROOT / "bench" / "gpu_throughput.py"
    if not script.exists():
        return result("throughput", "skipped", "no bench/ folder: run from a checkout")
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(tmp) / "tp.json"
        args = (["--quick"] if mode == "quick" else
                ["--threads", "1000000", "--iterations", "5", "--runs", "3",
                 "--sizes", "16", "256", "4096", "8192"])
        p = subprocess.run([sys.executable, str(script), *args, "--no-write", "--json",
                            str(js)], cwd=ROOT, capture_output=True, text=True)
        print(p.stdout[-30000:])
        print(p.stderr[-5000:], file=sys.stderr)
        if p.returncode or not js.exists():
            return result("throughput", "failed", f"bench/gpu_throughput.py exited "
                          f"{p.returncode}", table=p.stdout[-4000:])
        raw = json.loads(js.read_text())
    rows, against = throughput_rows(raw)
    bad = sum(r["bad_blocks"] for r in rows)
    table = p.stdout[p.stdout.find("### thread-based"):] if "### thread-based" in p.stdout \
        else p.stdout[-6000:]
    worst = max(rows, key=lambda r: r["alloc_over_floor"])
    print(target_lines(rows))
    summary = (f"{len(rows)} rows; alloc / floor median from "
               f"{min(r['alloc_over_floor'] for r in rows):.1f} to "
               f"{worst['alloc_over_floor']:.1f} ({worst['variant']}, {worst['bytes']} B); "
               f"{against}; {sum(r['nulls'] for r in rows)} NULLs, {bad} bad blocks")
    return result("throughput", "failed" if bad else "info", summary, rows=rows,
                  nrt=raw.get("nrt"), step_scratch=raw.get("step_scratch"), table=table)


# --------------------------------------------------------------------- examples


class _Phases:
    """A progress callback that records when each phase of an example began."""

    def __init__(self):
        self.marks = []

    def __call__(self, msg):
        self.marks.append((time.perf_counter(), str(msg)))


def _split(marks, end):
    """Return seconds in the heap versions and in the worst-case version, from phase marks.

    A phase lasts until the next one begins (host wall clock); the simulator's
    fallback where the comparison has no GPU timings.
    """
    times = [t for t, m in marks] + [end]
    heap = worst = None
    for k, (t, m) in enumerate(marks):
        span = times[k + 1] - t
        if m.startswith("worst-case"):
            worst = span
        elif m.startswith(("heap", "scoped", "alloc/free", "gather")):
            heap = (heap or 0.0) + span
    return heap, worst


def _method_seconds(r):
    """Return {method name: (seconds or None, identical)} from the example's comparison."""
    rows = getattr(r, "methods", None) or {}
    return {name: (m.seconds, m.identical) for name, m in rows.items()}


def examples(mode):
    """Every example against its worst-case twin: identical answers, time, memory."""
    from numba import config

    from .. import _examples

    threads = EXAMPLE_THREADS[mode]
    rows, wrong = [], []
    for name in EXAMPLES:
        module = _examples.load(name)
        runs = []
        for _ in range(2):  # the first run compiles and loads every kernel
            ph = _Phases()
            t0 = time.perf_counter()
            r = module.run(threads=threads, seed=1, progress=ph)
            end = time.perf_counter()
            runs.append((end - t0, _split(ph.marks, end), r))
        (first, _, _), (second, (heap_s, worst_s), r) = runs
        methods = _method_seconds(r)
        heap_rows = [s for name, (s, _) in methods.items() if name.startswith("heap")]
        if methods.get("worst case", (None,))[0] and all(heap_rows):
            # the comparison's own timings: between two device syncs (GPU only)
            heap_s, worst_s = sum(heap_rows), methods["worst case"][0]
        failed = int(getattr(r, "failed", None) or getattr(r.usage, "failed", 0))
        row = {"example": name, "threads": threads, "identical": bool(r.identical),
               "heap_peak_bytes": int(r.heap_peak_bytes),
               "heap_capacity_bytes": int(r.usage.capacity),
               "worst_case_bytes": int(r.worst_case_bytes), "failed_allocs": failed,
               "first_run_s": round(first, 3), "warm_run_s": round(second, 3),
               "first_call_latency_s": round(first - second, 3),
               "heap_versions_s": None if heap_s is None else round(heap_s, 4),
               "worst_case_s": None if worst_s is None else round(worst_s, 4)}
        row["time_ratio"] = (row["heap_versions_s"] / row["worst_case_s"]
                             if heap_s and worst_s else None)
        row["methods"] = {name: {"seconds": s, "identical": same}
                          for name, (s, same) in methods.items()}
        rows.append(row)
        if not r.identical:
            differ = [m for m, (_, same) in methods.items() if same is False]
            wrong.append(f"{name}: answers differ ({', '.join(differ) or 'heap'} against the "
                         f"worst case; {failed} allocations failed)")
    target = "simulator" if config.ENABLE_CUDASIM else "gpu"
    summary = (f"{sum(r['identical'] for r in rows)} of {len(rows)} identical to their "
               f"worst-case twins at {threads} threads on the {target}")
    return result("examples", "failed" if wrong else "passed", summary, rows=rows,
                  problems=wrong)


# ---------------------------------------------------------------------- latency


def latency(mode):
    """First calls (compile + load + first launch) in fresh processes: :mod:`.latency`."""
    from . import latency as lat

    m = lat.measure(EXAMPLES, lat.EXAMPLE_THREADS if mode != "simulate" else 32)
    summary, problems = lat.summary_and_problems(m)
    # informative: a missed compile-time target is reported, not a failure;
    # a wrong answer (a kernel run from a cached cubin included) fails
    wrong = any(m[which].get("bad") for which in ("cold", "warm"))
    return result("latency", "failed" if wrong else "info", summary,
                  first_s=m["cold"]["first_s"],
                  warm_s=m["warm"]["first_s"], later_s=m["warm"]["later_s"],
                  examples=m["examples"], problems=problems)


PARTS = {"environment": environment, "tests": tests, "stress": stress,
         "sanitizer": sanitizer, "throughput": throughput, "examples": examples,
         "latency": latency, "stress-small": stress_small}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m devalloc.gpucheck.parts",
                                description="Run one part of the GPU check.")
    p.add_argument("part", choices=sorted(PARTS))
    p.add_argument("--mode", choices=("full", "quick", "simulate"), default="full")
    p.add_argument("--json", metavar="FILE", help="write the part's result here")
    a = p.parse_args(argv)
    from .. import target

    if a.mode == "simulate":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        sys.setswitchinterval(5e-5)  # contention shows on the simulator
    target.choose()
    try:
        res = PARTS[a.part](a.mode)
    except Exception:
        res = result(a.part, "failed", "raised: " + traceback.format_exc().strip()
                     .splitlines()[-1][:300], traceback=traceback.format_exc())
        print(res["data"]["traceback"], file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(res, default=str))
    print(f"{res['part']}: {res['status']}: {res['summary']}")
    return 0 if res["status"] in ("passed", "info", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
