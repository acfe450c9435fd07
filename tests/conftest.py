"""Test setup: kernels run on the CUDA simulator unless DEVALLOC_TEST_GPU=1.

NUMBA_ENABLE_CUDASIM is read when numba is imported, so it is set here,
before any test module imports numba. The compile checks need the real CUDA
target and run in a subprocess (tests/test_compile.py).
"""

import contextlib
import json
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: no cross-process lock, each computes
    fcntl = None

if os.environ.get("DEVALLOC_TEST_GPU") != "1":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import pytest  # noqa: E402

import run_order  # noqa: E402  (tests/run_order.py: the order of the tests)
from devalloc import _examples  # noqa: E402

# The examples (kernels/) as devalloc.examples, from this checkout even when
# another checkout of devalloc is installed in the venv.
_examples.package()

#: The folder of this test session, shared by pytest-xdist's workers (they
#: inherit the environment of the main process, which makes it).
SESSION_ENV = "DEVALLOC_TEST_SESSION"


class _CompileReport(list):
    """Figures reported by the compile checks, printed in the terminal summary.

    Rows added on a pytest-xdist worker also go to the session folder, from
    which the main process prints them.
    """

    def extend(self, rows):
        rows = list(rows)
        super().extend(rows)
        folder = os.environ.get(SESSION_ENV)
        if folder:
            with _locked(Path(folder) / "compile-report"):
                with open(Path(folder) / "compile-report.jsonl", "a") as f:
                    f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)


COMPILE_REPORT = _CompileReport()


@contextlib.contextmanager
def _locked(path):
    # An exclusive lock on path.lock, across processes (where fcntl exists).
    with open(f"{path}.lock", "w") as f:
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def session_cached(key, compute):
    """Return ``compute()``, computed once per test session on any worker.

    For a fixture's costly result (a compile in a subprocess, an
    exploration): the first process to ask computes it and keeps it
    (pickled) in the session folder; the others wait for it and read it. A
    compute that raises keeps nothing (the next one to ask tries again).
    """
    folder = os.environ.get(SESSION_ENV)
    if not folder:
        return compute()
    path = Path(folder) / f"{key}.pickle"
    with _locked(path):
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = compute()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(value))
        os.replace(tmp, path)
        return value


def pytest_configure(config):
    # The session folder, made by the main process before pytest-xdist starts
    # its workers. In it, the session's PTX cache (devalloc.tools.aot.PTX_CACHE_ENV):
    # a kernel compiled by several test files' subprocesses is compiled once.
    if hasattr(config, "workerinput") or os.environ.get(SESSION_ENV):
        return
    folder = tempfile.mkdtemp(prefix="devalloc-tests-")
    os.environ[SESSION_ENV] = folder
    os.environ.setdefault("DEVALLOC_PTX_CACHE", os.path.join(folder, "ptx"))
    # and its compiled-body cache (devalloc.device.bodycache), not the user's
    os.environ.setdefault("DEVALLOC_CACHE_DIR", os.path.join(folder, "bodies"))
    config._devalloc_session = folder


def pytest_unconfigure(config):
    folder = getattr(config, "_devalloc_session", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(SESSION_ENV, None)
        for name in ("DEVALLOC_PTX_CACHE", "DEVALLOC_CACHE_DIR"):
            if os.environ.get(name, "").startswith(folder):
                os.environ.pop(name)


@pytest.fixture
def fine_interleaving():
    """Make simulator threads switch very often, so that races can show."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    yield
    sys.setswitchinterval(old)


@pytest.fixture
def quick_switching():
    """Switch simulator threads every 0.1 ms, for kernels whose result no interleaving changes.

    The simulator's block manager polls its threads in a busy loop while
    they wait at ``syncthreads``; with the default 5 ms switch interval each
    hand-over of the GIL from it to a thread waits out the interval, so a
    128-thread block with a dozen barriers crawls (bench/RESULTS.md, "Test
    tiers: where the full tier's time went"). Only for kernels that are
    race-free by construction (every shared read and write separated by a
    ``syncthreads``), whose every interleaving gives the same result: it
    changes how long they take, not what they compute.
    """
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(old)


def pytest_terminal_summary(terminalreporter, config):
    rows = list(COMPILE_REPORT)
    folder = getattr(config, "_devalloc_session", None)
    report = Path(folder or ".") / "compile-report.jsonl"
    if folder and report.exists():  # rows from the workers
        rows += [json.loads(line) for line in report.read_text().splitlines()]
    seen, unique = set(), []
    for row in rows:
        key = json.dumps(row, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(row)
    if not unique:
        return
    tr = terminalreporter
    tr.section("devalloc compile checks (ptxas -v / nvdisasm)")
    cols = ["kernel", "arch", "registers", "spill_bytes", "sass_instructions", "sass_atomics"]
    tr.write_line("  ".join(f"{c:>17}" for c in cols))
    for row in unique:
        tr.write_line("  ".join(f"{row[c]:>17}" for c in cols))


# ----------------------------------------------------------------- the tiers
#
# Two tiers, each one command (README, "Tests"; docs/development.md):
#   python -m pytest          the fast tier: every test not marked slow
#   python -m pytest --full   the full tier: every test (also -m "slow or not slow")
# A test is in the fast tier unless it carries @pytest.mark.slow, so a new
# test module lands there by default. tests/test_tiers.py checks that the
# fast tier keeps at least one test of every test module and the checks
# listed in tiers.FAST_KINDS. Naming tests by node id (file.py::test) or
# choosing with -m runs what was named, slow or not.


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="devalloc: run the full tier, the tests marked slow too "
                          "(the default is the fast tier)")


def _tier_applies(config):
    if config.getoption("--full") or config.getoption("markexpr"):
        return False
    return not any("::" in str(a) for a in config.args)


def pytest_collection_modifyitems(config, items):
    if _tier_applies(config):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
    # Then the order (tests/run_order.py): the known long work spread over the
    # workers' first shares, longest first; the short tests after it (what a
    # worker steals at the end is short); tests marked after_all (they read
    # what others computed, session_cached) last. Every worker collects and
    # orders the same tests the same way; -n 0 counts as one worker.
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    run_order.order(items, workers)


def pytest_report_header(config):
    if _tier_applies(config):
        return "devalloc: fast tier (tests marked slow are left out; --full runs every test)"
    return "devalloc: full tier (or tests chosen by node id / -m)"
