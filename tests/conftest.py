"""Test setup: kernels run on the CUDA simulator unless DEVALLOC_TEST_GPU=1.

NUMBA_ENABLE_CUDASIM is read when numba is imported, so it is set here,
before any test module imports numba. The compile checks need the real CUDA
target and run in a subprocess (tests/test_compile.py).
"""

import os
import shutil
import sys
import tempfile

if os.environ.get("DEVALLOC_TEST_GPU") != "1":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import pytest  # noqa: E402

from devalloc import _examples  # noqa: E402

# The examples (kernels/) as devalloc.examples, from this checkout even when
# another checkout of devalloc is installed in the venv.
_examples.package()

#: Figures reported by the compile checks, printed in the terminal summary.
COMPILE_REPORT = []


def pytest_configure(config):
    # One PTX cache per test session (devalloc.aot.PTX_CACHE_ENV), made by the
    # main process before pytest-xdist starts its workers, which inherit it:
    # a kernel compiled by several test files' subprocesses is compiled once.
    if hasattr(config, "workerinput") or os.environ.get("DEVALLOC_PTX_CACHE"):
        return
    folder = tempfile.mkdtemp(prefix="devalloc-ptx-")
    os.environ["DEVALLOC_PTX_CACHE"] = folder
    config._devalloc_ptx_cache = folder


def pytest_unconfigure(config):
    folder = getattr(config, "_devalloc_ptx_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("DEVALLOC_PTX_CACHE", None)


@pytest.fixture
def fine_interleaving():
    """Make simulator threads switch very often, so that races can show."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    yield
    sys.setswitchinterval(old)


def pytest_terminal_summary(terminalreporter):
    if not COMPILE_REPORT:
        return
    tr = terminalreporter
    tr.section("devalloc compile checks (ptxas -v / nvdisasm)")
    cols = ["kernel", "arch", "registers", "spill_bytes", "sass_instructions", "sass_atomics"]
    tr.write_line("  ".join(f"{c:>17}" for c in cols))
    for row in COMPILE_REPORT:
        tr.write_line("  ".join(f"{row[c]:>17}" for c in cols))


# ----------------------------------------------------------------- the tiers
#
# Two tiers, each one command (README, "Tests"):
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


def _module_fixture_users(items):
    # Items using a fixture wider than a function that their own module
    # defines (a compile, a wheel, a venv, a cluster made once per module).
    for item in items:
        module = item.nodeid.split("::")[0]
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        for fixturedefs in defs.values():
            fd = fixturedefs[-1]
            if fd.scope != "function" and fd.baseid == module:
                yield item, module
                break


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # With -n (pytest-xdist, --dist loadgroup), the tests sharing a fixture
    # made once per module run on one worker, so it is made once.
    for item, module in _module_fixture_users(items):
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(module))
    if not _tier_applies(config):
        # The modules with slow tests first (their order within a module
        # kept): the longest work starts first, so the workers end together.
        heavy = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: item.nodeid.split("::")[0] not in heavy)
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config._devalloc_slow_deselected = len(slow)


def pytest_report_header(config):
    if _tier_applies(config):
        return "devalloc: fast tier (tests marked slow are left out; --full runs every test)"
    return "devalloc: full tier (or tests chosen by node id / -m)"
