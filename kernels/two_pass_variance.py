"""Two-pass sample variance with scratch of a size known only at run time.

Each thread draws how many samples it needs, from a geometric-like law with
mean MEAN_SAMPLES, capped at MAX_SAMPLES - 1 (most threads need a few, a few
need many: the case where worst-case preallocation wastes the most), stores them, and computes their variance with the numerically stable two-pass
formula, which must read the samples twice, so they must be kept. Threads
that draw fewer than 2 need no scratch at all.

* ``variance_heap``: scratch comes from ``devalloc.alloc`` and is sized to
  what the thread drew.
* ``variance_worst_case``: the way it is written today: a global array of
  ``threads x MAX_SAMPLES`` floats, the worst case for every thread.

Both use the same counter-based RNG stream per thread (numba.cuda.random's
xoroshiro128+), so their results are identical bit for bit.

Run: ``python kernels/two_pass_variance.py [--threads N] [--seed S]`` (on the
GPU when one is usable, else on the CUDA simulator).
"""

import math
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from devalloc import target  # imports no numba

    TARGET = target.choose()

import warnings

import numpy as np
from numba import config, cuda
from numba.core.errors import NumbaWarning
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

import devalloc

if config.ENABLE_CUDASIM:
    # The simulator runs numba.cuda.random's wrapping uint64 arithmetic on
    # NumPy scalars (overflow warnings) and its host seeding in object mode.
    warnings.filterwarnings("ignore", message="overflow encountered")
    warnings.filterwarnings("ignore", category=NumbaWarning)

MAX_SAMPLES = 1024
MEAN_SAMPLES = 16.0


@cuda.jit(device=True)
def _draw_count(states, i):
    u = xoroshiro128p_uniform_float32(states, i)
    n = int(-MEAN_SAMPLES * math.log(1.0 - u))
    return min(n, MAX_SAMPLES - 1)


@cuda.jit(device=True)
def _variance(buf, n):
    s = 0.0
    for j in range(n):
        s += buf[j]
    mean = s / n
    v = 0.0
    for j in range(n):
        d = buf[j] - mean
        v += d * d
    return v / (n - 1)  # unbiased


@cuda.jit
def variance_heap(ctx, states, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    n = _draw_count(states, i)
    out[i] = math.nan
    if n < 2:
        out[i] = -1.0  # no estimate, and no scratch needed
        return
    off = devalloc.alloc(ctx, n * 4)
    if off == devalloc.NULL:
        return  # heap full: reported as NaN and counted in usage().failed
    buf = devalloc.view(ctx, off, n, np.float32)
    for j in range(n):
        buf[j] = xoroshiro128p_uniform_float32(states, i)
    out[i] = _variance(buf, n)
    devalloc.free(ctx, off)


@cuda.jit
def variance_worst_case(scratch, states, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    n = _draw_count(states, i)
    if n < 2:
        out[i] = -1.0
        return
    buf = scratch[i]
    for j in range(n):
        buf[j] = xoroshiro128p_uniform_float32(states, i)
    out[i] = _variance(buf, n)


def run(threads=256, seed=1, capacity=1 << 20, block=64):
    """Run both versions; return a dict with results and memory figures."""
    grid = (threads + block - 1) // block
    heap = devalloc.Heap(capacity)
    out_heap = cuda.device_array(threads, np.float64)
    out_ref = cuda.device_array(threads, np.float64)
    states = create_xoroshiro128p_states(threads, seed=seed)
    variance_heap[grid, block](heap.ctx, states, out_heap)
    usage = heap.usage()
    states = create_xoroshiro128p_states(threads, seed=seed)
    scratch = cuda.device_array((threads, MAX_SAMPLES), np.float32)
    variance_worst_case[grid, block](scratch, states, out_ref)
    a, b = out_heap.copy_to_host(), out_ref.copy_to_host()
    used = a[a >= 0]
    return {
        "identical": bool(np.array_equal(a, b)),
        "mean_variance": float(used.mean()) if used.size else 0.0,
        "stderr": float(used.std(ddof=1) / math.sqrt(used.size)) if used.size > 1 else 0.0,
        "expected_variance": 1.0 / 12.0,
        "heap_peak_bytes": usage.peak,
        "heap_in_use_after": usage.in_use,
        "worst_case_bytes": threads * MAX_SAMPLES * 4,
        "usage": usage,
    }


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    r = run(a.threads, a.seed)
    print(f"ran on: {TARGET}")
    print(f"mean sample variance {r['mean_variance']:.5f} +- {r['stderr']:.5f} "
          f"(exact 1/12 = {r['expected_variance']:.5f})")
    print(f"identical to the worst-case version: {r['identical']}")
    print(r["usage"])
    print(f"heap peak {r['heap_peak_bytes']} B vs worst-case preallocation "
          f"{r['worst_case_bytes']} B")
    return 0 if r["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
