"""The porting API compiles for sm_90 within a register budget, without spills.

Runs ``python -m devalloc.testing.porting_probes`` in a subprocess with the
real CUDA target: one kernel per call (``array``, a shaped ``view``,
``calloc``, ``realloc``, ``usable_size``, ``alloc_aligned``, ``carve``,
``realloc_carved``, ``array`` of records) for
normal, debug and observed heaps. The budgets are the figures measured with
numba-cuda 0.30 / CUDA 13 plus a few registers for toolchain updates, as in
tests/test_compile.py.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import COMPILE_REPORT, session_cached

#: Registers measured on sm_90 (normal, debug, observed heap).
MEASURED = {
    "array": (32, 43, 64),
    "view_shape": (32, 32, 32),
    "calloc": (32, 40, 56),
    "realloc": (40, 43, 72),
    "usable_size": (15, 40, 38),
    "alloc_aligned": (32, 40, 56),
    "carve": (32, 48, 64),
    "realloc_carved": (40, 63, 70),
    "array_record": (32, 43, 64),
}
MARGIN = 4
KINDS = ("normal", "debug", "observed")


def _on_gpu_target(*args):
    """Run ``python *args`` with the simulator off (the real CUDA target compiles); the process."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=900)


def _json_of(*args):
    """Run ``python *args`` as :func:`_on_gpu_target`; return the JSON of its last line."""
    proc = _on_gpu_target(*args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _porting_probes():
    return _json_of("-m", "devalloc.testing.porting_probes")["rows"]


@pytest.fixture(scope="module")
def figures():
    # Once for every xdist worker: a module's tests may run on several.
    rows = session_cached("porting_figures", _porting_probes)
    COMPILE_REPORT.extend({**r, "kernel": f"{r['kernel']}[{r['heap']}]"} for r in rows)
    return {(r["kernel"].removeprefix("porting_"), r["heap"]): r for r in rows}


QUICK = """
import json
from numba import types
from devalloc import ctx_type
from devalloc.tools import aot
from devalloc.testing import porting_probes as P
rows = {}
for name in ("array", "usable_size"):
    ptx, _ = aot.compile_ptx(P.PROBES[name], (ctx_type, types.int64, types.int64[::1]), cc=(9, 0))
    r = aot.assemble(ptx, (9, 0))
    rows[name] = {"registers": r.registers, "spill_bytes": r.spill_bytes,
                  "stack_bytes": r.stack_bytes, "sass_atomics": r.sass_atomics,
                  "sass_membar_sc": r.sass_membar_sc}
print(json.dumps(rows))
"""


def test_array_and_usable_size_compile_for_sm90_within_budget():
    # The fast tier's share of this module (the full tier's figures cover
    # every call on every kind of heap): the same budgets, normal heaps.
    rows = _json_of("-c", QUICK)
    for call, r in rows.items():
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, r
        assert 0 < r["registers"] <= MEASURED[call][0] + MARGIN, (call, r)
        assert r["sass_membar_sc"] == 0, r
    assert rows["usable_size"]["sass_atomics"] == 0
    assert rows["array"]["sass_atomics"] >= 2


@pytest.mark.slow
@pytest.mark.parametrize("call", sorted(MEASURED))
def test_porting_call_compiles_within_budget_without_spills(figures, call):
    for kind, measured in zip(KINDS, MEASURED[call]):
        r = figures[(call, kind)]
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, r
        assert 0 < r["registers"] <= measured + MARGIN, r
        assert r["sass_membar_sc"] == 0, r  # no sequentially consistent fence


@pytest.mark.slow
def test_calls_without_a_block_to_take_issue_no_atomic_on_normal_heaps(figures):
    # usable_size reads the state word (a relaxed load); a view is arithmetic.
    assert figures[("usable_size", "normal")]["sass_atomics"] == 0
    assert figures[("view_shape", "normal")]["sass_atomics"] == 0
    # A debug heap's view and usable_size may record misuse (one add).
    assert figures[("view_shape", "debug")]["sass_atomics"] >= 1
    for call in ("array", "calloc", "realloc", "alloc_aligned", "carve"):
        assert figures[(call, "normal")]["sass_atomics"] >= 2, call


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["lengths", "scan_blocks", "add_block_sums", "copy_rows",
                                    "copy_item_rows", "free_rows"])
def test_gather_kernels_compile_without_spills(figures, kernel):
    # Heap.gather runs on the GPU: measured 22, 32, 14, 28, 30 and 32 registers.
    r = figures[(f"gather_{kernel}", "normal")]
    assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0 and r["sass_membar_sc"] == 0, r
    assert 0 < r["registers"] <= 40, r


OLD_NUMBA_CUDA = """
import numpy as np
from numba import cuda, types
import devalloc
from devalloc import ctx_type
from devalloc.sim import compat
from devalloc.tools import aot

compat.numba_cuda_version = lambda: (0, 27)  # what an older release would say

def k(ctx, n, out):
    a = devalloc.view(ctx, out[0], n, np.float32)
    a[0] = 1.0

try:
    aot.compile_ptx(k, (ctx_type, types.int64, types.int64[::1]), cc=(9, 0))
except Exception as e:
    print(str(e))
else:
    print("compiled")
"""


@pytest.mark.slow
def test_an_array_returning_call_says_which_numba_cuda_it_needs():
    # numba-cuda 0.26 and 0.27 check an inline="always" function's return
    # on its own and reject view/array/carve with "Only accept returning of
    # array passed into the function as argument" (seen with 0.26.0 and
    # 0.27.0 on numba 0.65.1); devalloc says what to install instead.
    proc = _on_gpu_target("-c", OLD_NUMBA_CUDA)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert "devalloc.view returns an array, which needs numba-cuda >= 0.28" in out, out[-2000:]
    assert "numba-cuda 0.27 is installed" in out, out[-2000:]


LAST_WRITE = """
import json, re
import numpy as np
from numba import types
import devalloc
from devalloc import ctx_type, debug_ctx_type
from devalloc.tools import aot

def view_write(ctx, off, n):
    a = devalloc.view(ctx, off, n + 1, np.uint8)
    a[n] = 90  # the function's last use of a

def view_no_write(ctx, off, n):
    a = devalloc.view(ctx, off, n + 1, np.uint8)

def view_2d_write(ctx, off, n):
    a = devalloc.view(ctx, off, (n, 4), np.float32)
    a[n - 1, 3] = 1.5

def view_2d_no_write(ctx, off, n):
    a = devalloc.view(ctx, off, (n, 4), np.float32)

def array_write(ctx, off, n):
    a = devalloc.array(ctx, n, np.float64)
    if a.size:
        a[off] = 2.5

def array_no_write(ctx, off, n):
    a = devalloc.array(ctx, n, np.float64)

rows = {}
for name, fn in list(globals().items()):
    if name.endswith("write"):
        for kind, t in (("normal", ctx_type), ("debug", debug_ctx_type)):
            ptx, _ = aot.compile_ptx(fn, (t, types.int64, types.int64), cc=(9, 0))
            rows[f"{name}[{kind}]"] = len(re.findall(r"^\\s*st\\.", ptx, re.M))
print(json.dumps(rows))
"""


def test_a_write_that_is_the_last_use_of_a_view_is_compiled():
    # Numba's dead-code elimination drops a setitem on an array that is dead
    # afterwards and aliases no argument; an intrinsic's result looked like
    # a fresh array to it, so `a = view(...); a[i] = x` (or `array`) as the
    # last use of `a` compiled to no store at all on the GPU. The first GPU
    # check after issue 25 found it (a one-byte overrun that wrote nothing);
    # devalloc.device.intrinsics.register_view_alias keeps such writes.
    stores = _json_of("-c", LAST_WRITE)
    for call in ("view", "view_2d", "array"):
        for kind in ("normal", "debug"):
            assert stores[f"{call}_write[{kind}]"] == stores[f"{call}_no_write[{kind}]"] + 1, stores
