"""Heaps of every page size compile for real GPUs, at the default page's cost.

``Heap(page=)`` puts the page in the metadata's Numba type
(:class:`devalloc.ctx.PagedMeta`), so kernels compile with it as a constant:
a small page must cost no spill, no stack and (almost) no instruction over
the default page. A ctx built by hand from plain arrays still compiles: the
device code reads the page from the metadata's length there, at a cost the
figures below pin. Subprocesses with the real CUDA target, no GPU needed.
"""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import json, re, sys
from numba import types
import devalloc
from devalloc.ctx import ctx_type_for
from devalloc.tools import aot, probe_kernels as P
plain = types.NamedTuple([types.Array(types.uint8, 1, "C"), types.Array(types.int64, 1, "C")],
                         devalloc.Ctx)
rows = []
for name in sys.argv[1].split(","):
    for label in sys.argv[2].split(","):
        ct = plain if label == "plain" else ctx_type_for(int(label))
        ptx, _ = aot.compile_ptx(P.PROBES[name], (ct,) + P.signature(name)[1:], cc=(9, 0))
        r = aot.assemble(ptx, (9, 0))
        rows.append({"kernel": name, "page": label, "registers": r.registers,
                     "spill": r.spill_bytes, "stack": r.stack_bytes,
                     "sass": r.sass_instructions, "atomics": r.sass_atomics,
                     "ptx_atomics": len(re.findall(r"^\\s*(?:atom|red)\\.", ptx, re.M))})
print(json.dumps(rows))
"""


def _compile(kernels, pages):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(kernels), ",".join(pages)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {(r["kernel"], r["page"]): r for r in json.loads(proc.stdout.strip().splitlines()[-1])}


def _check(by, kernel, pages, budget):
    base = by[(kernel, "14")]
    for page in pages:
        r = by[(kernel, page)]
        assert r["spill"] == 0 and r["stack"] == 0, r
        assert r["registers"] <= budget, r
        # The same operations: the PTX's atomics (ptxas may duplicate one
        # into two branches, e.g. 27 and 28 SASS atomics for free).
        assert r["ptx_atomics"] == base["ptx_atomics"], (r, base)
        # The page is a constant: the code is the default page's, but for
        # the constants (measured sm_90: +0 to +8 SASS instructions). A
        # kernel's SASS comes in steps of 8 instructions (its padding), so
        # one step is allowed where 1 % is less (free: 696 and 704 since the
        # page claim's 32-bit run end).
        assert r["sass"] <= max(base["sass"] * 1.01, base["sass"] + 8), (r, base)


#: The 16 KiB page's figures of the probe kernels (sm_90, numba-cuda 0.30.4,
#: CUDA 13: ``python -m devalloc.probes --cc 90``), for the fast test, which
#: compiles the 1 KiB page only. 4,480 and 133 until a search looked at the
#: room index again before each free page it tries (its held page and the
#: look at a page left for its taker: 4,608 and 137).
ALLOC_VIEW_FREE_16K = {"sass": 4608, "atomics": 137}


def test_alloc_view_free_compiles_alike_on_1_kib_pages():
    # Measured sm_90: 32 registers on 1 KiB pages and on 16 KiB (the budget
    # of test_compile.py is 52; 40 before the held free page).
    r = _compile(["alloc_view_free"], ["10"])[("alloc_view_free", "10")]
    assert r["spill"] == 0 and r["stack"] == 0, r
    assert r["registers"] <= 52, r
    assert r["atomics"] == ALLOC_VIEW_FREE_16K["atomics"], r
    assert r["sass"] <= ALLOC_VIEW_FREE_16K["sass"] * 1.02, r


@pytest.mark.slow
def test_every_operation_compiles_alike_for_every_page():
    pages = ["14", "10", "12"]
    by = _compile(["alloc", "free", "alloc_view_free", "bump", "scoped"], pages + ["plain"])
    # Measured sm_90: alloc 40, free 32, bump 40 for every page;
    # alloc_view_free 40 (16 KiB pages) and 46 (smaller); scoped 52 and 55.
    for kernel, budget in (("alloc", 40), ("free", 32), ("alloc_view_free", 52), ("bump", 40),
                           ("scoped", 56)):
        _check(by, kernel, pages[1:], budget)
    # A ctx of plain arrays: the page read from the metadata's length
    # (measured: alloc 44, alloc_view_free 46, scoped 57 registers).
    for kernel in ("alloc", "free", "alloc_view_free", "bump", "scoped"):
        r = by[(kernel, "plain")]
        assert r["spill"] == 0 and r["stack"] == 0, r
        assert r["ptx_atomics"] == by[(kernel, "14")]["ptx_atomics"], r
