"""Compile figures of the porting API: one kernel per call, every heap kind, sm_90.

``python -m devalloc.testing.porting_probes`` (the real CUDA target: no
``NUMBA_ENABLE_CUDASIM``; NVVM and ptxas from the test extra) prints one
JSON object: for each call and heap kind (normal, debug, observed) the
registers, spill and stack bytes and SASS atomics of a kernel making that
call, as ``tests/test_porting_compile.py`` pins them; then the kernels of
``Heap.gather``.
"""

import json
import sys

import numpy as np
from numba import cuda, types

import devalloc
from devalloc.tools import aot
from devalloc.ctx import ctx_type, debug_ctx_type, obs_ctx_type


def k_array(ctx, n, out):
    """``array`` of a per-thread shape (rows, 10), written, ``free_array``."""
    i = cuda.grid(1)
    a = devalloc.array(ctx, (out[i], 10), np.float64)
    for r in range(a.shape[0]):
        a[r, 9] = r
    out[i] = a.size
    devalloc.free_array(ctx, a)


def k_view_shape(ctx, n, out):
    """A 2-D ``view`` at a per-thread offset, written."""
    i = cuda.grid(1)
    v = devalloc.view(ctx, out[i], (n, 4), np.float32)
    for r in range(v.shape[0]):
        v[r, 3] = r
    out[i] = v.size


def k_calloc(ctx, n, out):
    """``calloc`` of a per-thread count of 8-byte items."""
    i = cuda.grid(1)
    out[i] = devalloc.calloc(ctx, out[i], 8)


def k_realloc(ctx, n, out):
    """``realloc`` of a per-thread block to a kernel argument's size."""
    i = cuda.grid(1)
    out[i] = devalloc.realloc(ctx, out[i], n)


def k_usable_size(ctx, n, out):
    """``usable_size`` of a per-thread offset."""
    i = cuda.grid(1)
    out[i] = devalloc.usable_size(ctx, out[i])


def k_alloc_aligned(ctx, n, out):
    """``alloc_aligned`` of a per-thread size at a kernel argument's alignment."""
    i = cuda.grid(1)
    out[i] = devalloc.alloc_aligned(ctx, out[i], n)


def k_carve(ctx, n, out):
    """An int32 and a float64 array of a per-thread length carved from one block."""
    i = cuda.grid(1)
    m = out[i]
    off = devalloc.alloc(ctx, devalloc.carve_end(devalloc.carve_end(0, m, 4), m, 8))
    a, p = devalloc.carve(ctx, off, 0, m, np.int32)
    b, p = devalloc.carve(ctx, off, p, m, np.float64)
    for j in range(a.shape[0]):
        a[j] = j
        b[j] = j
    out[i] = p
    devalloc.free(ctx, off)


def k_realloc_carved(ctx, n, out):
    """An int32 and a float64 field of a per-thread count resized to a kernel argument's."""
    i = cuda.grid(1)
    out[i] = devalloc.realloc_carved(ctx, out[i], out[i + 1], n, (np.int32, np.float64))


#: A record of a float64 and an int32 (16 bytes, 8-aligned).
RECORD = np.dtype([("x", np.float64), ("n", np.int32)], align=True)


def k_array_record(ctx, n, out):
    """``array`` of a per-thread count of records, written, ``free_array``."""
    i = cuda.grid(1)
    a = devalloc.array(ctx, out[i], RECORD)
    for j in range(a.shape[0]):
        a[j]["x"] = j
        a[j]["n"] = j
    out[i] = a.size
    devalloc.free_array(ctx, a)


PROBES = {"array": k_array, "view_shape": k_view_shape, "calloc": k_calloc,
          "realloc": k_realloc, "usable_size": k_usable_size,
          "alloc_aligned": k_alloc_aligned, "carve": k_carve,
          "realloc_carved": k_realloc_carved, "array_record": k_array_record}
KINDS = {"normal": ctx_type, "debug": debug_ctx_type, "observed": obs_ctx_type}


def gather_kernels():
    """Compile the kernels of ``Heap.gather`` (devalloc.device.gather) for sm_90."""
    from devalloc.device import gather as K

    i64 = types.Array(types.int64, 1, "C")
    sigs = {
        "lengths": (types.int64, i64, i64, types.int64, types.int64, types.boolean, i64, i64),
        "scan_blocks": (i64, i64, i64),
        "add_block_sums": (i64, i64),
        "copy_rows": (types.Array(types.float64, 1, "C"), i64, i64, types.float64,
                      types.Array(types.float64, 1, "C"), types.int64),
        "copy_item_rows": (types.Array(types.float64, 1, "C"), i64, i64, types.float64,
                           types.Array(types.float64, 1, "C"), types.int64, types.int64),
        "free_rows": (ctx_type, i64),
    }
    rows = []
    for name, sig in sigs.items():
        ptx, _ = aot.compile_ptx(getattr(K, name).py_func, sig, cc=(9, 0))
        r = aot.assemble(ptx, (9, 0))
        rows.append({"kernel": f"gather_{name}", "heap": "normal", "arch": r.arch,
                     "registers": r.registers, "spill_bytes": r.spill_bytes,
                     "stack_bytes": r.stack_bytes, "sass_instructions": r.sass_instructions,
                     "sass_atomics": r.sass_atomics, "sass_membar_sc": r.sass_membar_sc})
    return rows


def main():
    out = types.Array(types.int64, 1, "C")
    rows = []
    for name, kernel in PROBES.items():
        for kind, ct in KINDS.items():
            ptx, _ = aot.compile_ptx(kernel, (ct, types.int64, out), cc=(9, 0))
            r = aot.assemble(ptx, (9, 0))
            rows.append({"kernel": f"porting_{name}", "heap": kind, "arch": r.arch,
                         "registers": r.registers, "spill_bytes": r.spill_bytes,
                         "stack_bytes": r.stack_bytes, "sass_instructions": r.sass_instructions,
                         "sass_atomics": r.sass_atomics, "sass_membar_sc": r.sass_membar_sc})
    rows += gather_kernels()
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
