"""Two-pass sample variance with scratch of a size known only at run time.

Each thread draws how many samples it needs, from a geometric-like law with
mean MEAN_SAMPLES, capped at MAX_SAMPLES - 1 (most threads need a few, a few
need many: the case where worst-case preallocation wastes the most), stores
them, and computes their variance with the numerically stable two-pass
formula, which must read the samples twice, so they must be kept. Threads
that draw fewer than 2 need no scratch at all.

* ``variance_heap``: scratch comes from ``devalloc.alloc`` and is sized to
  what the thread drew.
* ``variance_worst_case``: the way it is written today: a global array of
  ``threads x MAX_SAMPLES`` floats, the worst case for every thread.
* ``variance_count`` / ``variance_fill``: count + scan + exact (the count
  pass draws the counts only).
* ``variance_nrt``: the samples in an ``np.empty`` array (CUDA's malloc
  through NRT; GPU only).

Both draw from the same per-thread xoroshiro128+ stream (numba.cuda.random),
so their results are identical bit for bit.

Run: ``python -m devalloc demo --example two_pass_variance [--threads N] [--seed S]``
(or ``python kernels/two_pass_variance.py`` with the same options).
"""

if __name__ == "__main__":  # python kernels/NAME.py: see _script.py
    import _script

    _script.run(__file__)

import math
from dataclasses import dataclass

import numpy as np
from numba import cuda
from numba.cuda.random import xoroshiro128p_uniform_float32

import devalloc

from . import _mc, _methods

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
    out[i] = _fill_variance(devalloc.view(ctx, off, n, np.float32), n, states, i)
    devalloc.free(ctx, off)


@cuda.jit(device=True)
def _fill_variance(buf, n, states, i):
    """Draw ``n`` samples into ``buf``; return their variance."""
    for j in range(n):
        buf[j] = xoroshiro128p_uniform_float32(states, i)
    return _variance(buf, n)


@cuda.jit
def variance_worst_case(scratch, states, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    n = _draw_count(states, i)
    if n < 2:
        out[i] = -1.0
        return
    out[i] = _fill_variance(scratch[i], n, states, i)


@cuda.jit
def variance_count(states, counts):
    """Count pass of the count + scan twin: draw each thread's count (0 below 2)."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    n = _draw_count(states, i)
    counts[i] = n if n >= 2 else 0


@cuda.jit
def variance_fill(states, starts, samples, out):
    """Fill pass: draw the count again, then the samples into the exact buffer."""
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    n = _draw_count(states, i)  # the same number as the count pass drew
    if n < 2:
        out[i] = -1.0
        return
    s = starts[i]
    out[i] = _fill_variance(samples[s:s + n], n, states, i)


def _variance_nrt(states, out):
    """NRT twin: the samples in an ``np.empty`` array (CUDA malloc), freed at the end."""
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    n = _draw_count(states, i)
    if n < 2:
        out[i] = -1.0
        return
    out[i] = _fill_variance(np.empty(n, np.float32), n, states, i)


#: Compiled (and launched) only with NRT on: see ``_mc.nrt_enabled``.
variance_nrt = cuda.jit(_variance_nrt)


#: Seconds per thread on the CUDA simulator, for the demo's time estimate:
#: ``python -m devalloc demo --example two_pass_variance --json --threads N`` took
#: 14.5 s at N = 256 and 63.6 s at N = 4096 (wall clock, whole command; 2 CPU
#: cores shared with other jobs, load 9 to 10): (63.6 - 14.5) / 3840.
#: An estimate good to a factor of about 2.
SIM_SECONDS_PER_THREAD = 1.3e-2


#: Heap bytes a thread beyond the first MiB, by default (``_mc.heap_capacity``).
HEAP_PER_THREAD = 256


def worst_case_bytes(threads):
    """Return the bytes the worst-case version preallocates for ``threads``."""
    return threads * MAX_SAMPLES * 4


@dataclass(kw_only=True)
class VarianceResult(_mc.Result):
    """The mean of the threads' sample variances (of U(0, 1): exactly 1/12)."""

    answer_name = "mean sample variance"
    expected_label = "exact, 1/12"

    #: Threads that drew at least two samples (the others give no estimate).
    estimates: int

    def summary_lines(self):
        return [f"mean sample variance {_mc.pm(self.answer, self.stderr, '.5f')} "
                f"(exact 1/12 = {self.expected:.5f}; {self.estimates} of "
                f"{self.threads} threads drew two samples or more)"]


def simulate(lc, heap):
    """Run every version on ``lc``'s threads; return their :class:`_mc.Shard`.

    The heap version, the worst-case twin, the count + scan + exact twin
    and (on a GPU) the NRT twin. ``heap`` must be empty (just made or
    reset); a debug heap is checked at the end (``HeapCorruption`` if a
    block was overrun or freed wrongly).
    """
    threads = lc.threads
    lc.say(f"heap version: {threads} threads, each with a run-time number of samples")
    heap_row = lc.begin(_methods.HEAP)
    out_heap = cuda.device_array(threads, np.float64)
    lc.launch(variance_heap, heap.ctx, lc.states(), out_heap)
    lc.end()
    usage = lc.finish(heap, heap.debug)
    heap_row.peak_bytes, heap_row.meta_bytes = usage.peak, heap.meta_bytes

    lc.say(f"worst-case version: {threads} x {MAX_SAMPLES} samples")
    lc.begin(_methods.WORST, peak_bytes=worst_case_bytes(threads))
    scratch = cuda.device_array((threads, MAX_SAMPLES), np.float32)
    out_ref = cuda.device_array(threads, np.float64)
    lc.launch(variance_worst_case, scratch, lc.states(), out_ref)
    lc.end()

    lc.say(f"count + scan + exact: {threads} counts drawn, scanned, drawn again")
    m = lc.begin(_methods.EXACT, twice=True, note="the counting pass draws the counts only")
    counts = cuda.device_array(threads, np.int32)
    lc.launch(variance_count, lc.states(), counts)
    offsets, total = lc.scan(counts)
    samples = lc.exact(m, total, np.float32, counts)
    out_exact = cuda.device_array(threads, np.float64)
    lc.launch(variance_fill, lc.states(), offsets[:threads], _mc.Whole(samples), out_exact)
    lc.end()

    out_nrt = cuda.device_array(threads, np.float64)
    ran_nrt = lc.nrt(_mc.malloc_bytes(m.exact_bytes, threads),
                     lambda row: lc.launch(variance_nrt, lc.states(), out_nrt) or True)

    a = out_heap.copy_to_host()
    same = lc.check(out_ref, {_methods.HEAP: a, _methods.EXACT: out_exact,
                              _methods.NRT: out_nrt if ran_nrt else None})
    return lc.shard(identical=same,
                    arrays={"variance": a}, usages={"end": usage})


def result(shard):
    """Return the :class:`VarianceResult` of a shard (or of shards combined)."""
    a, usage = shard.arrays["variance"], shard.usages["end"]
    used = a[a >= 0]
    mean, err = _mc.mean_stderr(used)
    return VarianceResult(
        threads=shard.threads,
        answer=mean,
        stderr=err,
        expected=1.0 / 12.0,
        identical=shard.identical,
        heap_peak_bytes=usage.peak,
        worst_case_bytes=worst_case_bytes(shard.threads),
        usage=usage,
        estimates=int(used.size),
        methods=shard.methods,
    )


def run(threads=256, seed=1, *, capacity=None, block=64, progress=None, debug=False,
        profile=False):
    """Run both versions; return a :class:`VarianceResult`.

    ``capacity`` None is 1 MiB plus 256 bytes per thread; the other
    arguments are every example's (see ``_mc``).
    """
    lc = _mc.Runner(threads, seed, block, progress)
    return result(simulate(lc, lc.heap(capacity, debug, per_thread=HEAP_PER_THREAD, profile=profile)))


#: Kernel name -> argument words of :func:`_mc.signatures`.
SIGNATURES = {
    "variance_heap": "ctx states float64",
    "variance_worst_case": "float32[2] states float64",
    "variance_count": "states int32",
    "variance_fill": "states int64 float32 float64",
}
#: The NRT twin's, compiled with NRT on (``_mc.precompile``).
NRT_SIGNATURES = {"variance_nrt": "states float64"}
