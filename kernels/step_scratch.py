"""Per-time-step scratch in a path simulation: scoped vs alloc/free vs worst case.

Each thread simulates a path of NSTEPS time steps. At every step the path
takes a random number ``k`` (1 to MAX_K) of noisy sub-observations, stores
them, and moves by their median (robust to outliers), which needs the ``k``
values stored and sorted: per-step scratch of a size known only at run
time, needed only for the duration of the step.

Three versions draw the same numbers (xoroshiro128+, same seeds) and give
bit-identical paths:

* ``path_scoped``: the step's buffer comes from devalloc's scoped scratch:
  one scope per thread around the path, one per step (``mark`` /
  ``scoped`` / ``release``), no atomic per step;
* ``path_alloc_free``: ``devalloc.alloc`` and ``free`` at every step;
* ``path_worst_case``: a global ``threads x MAX_K`` array, the way it is
  written today.

On the simulator :func:`run` also counts the atomics each heap version
issued per allocation (``devalloc.sim.atomics.count_atomics``).
"""

import numpy as np
from numba import config, cuda
from numba.cuda.random import xoroshiro128p_normal_float32, xoroshiro128p_uniform_float32

import devalloc
from kernels import _mc

NSTEPS = 8
MAX_K = 32
DT = 0.1


@cuda.jit(device=True)
def _draw_k(states, i):
    return 1 + min(int(xoroshiro128p_uniform_float32(states, i) * MAX_K), MAX_K - 1)


@cuda.jit(device=True)
def _fill_and_median(buf, k, states, i):
    for j in range(k):
        v = xoroshiro128p_normal_float32(states, i)
        # insertion sort as we go: buf[0:j+1] stays sorted
        p = j
        while p > 0 and buf[p - 1] > v:
            buf[p] = buf[p - 1]
            p -= 1
        buf[p] = v
    if k % 2 == 1:
        return buf[k // 2]
    return 0.5 * (buf[k // 2 - 1] + buf[k // 2])


@cuda.jit
def path_scoped(ctx, states, out, failed):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    x = 0.0
    outer = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    s = outer
    for _ in range(NSTEPS):
        k = _draw_k(states, i)
        step = devalloc.mark(ctx, s)
        s = step
        off, s = devalloc.scoped(ctx, s, k * 4)
        if off == devalloc.NULL:
            failed[i] = 1
        else:
            buf = devalloc.view(ctx, off, k, np.float32)
            x += DT * _fill_and_median(buf, k, states, i)
        s = devalloc.release(ctx, s, step)
    s = devalloc.release(ctx, s, outer)
    out[i] = x


@cuda.jit
def path_alloc_free(ctx, states, out, failed):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    x = 0.0
    for _ in range(NSTEPS):
        k = _draw_k(states, i)
        off = devalloc.alloc(ctx, k * 4)
        if off == devalloc.NULL:
            failed[i] = 1
        else:
            buf = devalloc.view(ctx, off, k, np.float32)
            x += DT * _fill_and_median(buf, k, states, i)
            devalloc.free(ctx, off)
    out[i] = x


@cuda.jit
def path_worst_case(scratch, states, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    x = 0.0
    buf = scratch[i]
    for _ in range(NSTEPS):
        k = _draw_k(states, i)
        x += DT * _fill_and_median(buf, k, states, i)
    out[i] = x


def _heap_run(kernel, threads, seeds, grid, block, capacity, allocations):
    heap = devalloc.Heap(capacity)
    states = cuda.to_device(seeds)
    out = cuda.device_array(threads, np.float64)
    failed = cuda.to_device(np.zeros(threads, np.int32))
    atomics = None
    if config.ENABLE_CUDASIM:
        from devalloc.sim.atomics import count_atomics

        with count_atomics() as counts:
            kernel[grid, block](heap.ctx, states, out, failed)
        atomics = counts.total / allocations
    else:
        kernel[grid, block](heap.ctx, states, out, failed)
    usage = heap.usage()
    return out.copy_to_host(), int(failed.copy_to_host().sum()), usage, atomics


def run(threads=128, seed=1, capacity=1 << 20, block=32):
    """Run the three versions; return answers, peaks and atomics per allocation."""
    grid, block = _mc.launch_shape(threads, block)
    seeds = _mc.rng_states(threads, seed)
    allocations = threads * NSTEPS
    scoped_x, scoped_failed, scoped_u, scoped_atomics = _heap_run(
        path_scoped, threads, seeds, grid, block, capacity, allocations)
    af_x, af_failed, af_u, af_atomics = _heap_run(
        path_alloc_free, threads, seeds, grid, block, capacity, allocations)
    states = cuda.to_device(seeds)
    ref = cuda.device_array(threads, np.float64)
    path_worst_case[grid, block](cuda.device_array((threads, MAX_K), np.float32), states, ref)
    ref_x = ref.copy_to_host()
    mean, err = _mc.mean_stderr(ref_x)
    return {
        "identical": bool(np.array_equal(scoped_x, ref_x) and np.array_equal(af_x, ref_x)),
        "answer": mean,
        "stderr": err,
        "failed": scoped_failed + af_failed,
        "worst_case_bytes": threads * MAX_K * 4,
        "scoped": {"peak": scoped_u.peak, "atomics_per_alloc": scoped_atomics, "usage": scoped_u},
        "alloc_free": {"peak": af_u.peak, "atomics_per_alloc": af_atomics, "usage": af_u},
    }


def signatures():
    """Return ``{kernel name: argument types}`` for compiling ahead of time."""
    from numba import types
    from numba.cuda.random import xoroshiro128p_type

    states = types.Array(xoroshiro128p_type, 1, "C")
    f64 = types.Array(types.float64, 1, "C")
    i32 = types.Array(types.int32, 1, "C")
    return {
        "path_scoped": (devalloc.ctx_type, states, f64, i32),
        "path_alloc_free": (devalloc.ctx_type, states, f64, i32),
        "path_worst_case": (types.Array(types.float32, 2, "C"), states, f64),
    }
