"""Test setup: kernels run on the CUDA simulator unless DEVALLOC_TEST_GPU=1.

NUMBA_ENABLE_CUDASIM is read when numba is imported, so it is set here,
before any test module imports numba. The compile checks need the real CUDA
target and run in a subprocess (tests/test_compile.py).
"""

import os
import sys

if os.environ.get("DEVALLOC_TEST_GPU") != "1":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import pytest  # noqa: E402

from devalloc import _examples  # noqa: E402

# The examples (kernels/) as devalloc.examples, from this checkout even when
# another checkout of devalloc is installed in the venv.
_examples.package()

#: Figures reported by the compile checks, printed in the terminal summary.
COMPILE_REPORT = []


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
