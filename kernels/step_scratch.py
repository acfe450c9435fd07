"""Per-time-step scratch in a path simulation: scoped vs alloc/free vs worst case.

Each thread simulates a path of NSTEPS time steps. At every step the path
takes a random number ``k`` (1 to MAX_K) of noisy sub-observations, stores
them, and moves by their median (robust to outliers), which needs the ``k``
values stored and sorted: per-step scratch of a size known only at run
time, needed only for the duration of the step.

These versions draw the same numbers (xoroshiro128+, same seeds) and give
bit-identical paths:

* ``path_scoped``: the step's buffer comes from devalloc's scoped scratch:
  one scope per thread around the path, one per step (``mark`` /
  ``scoped`` / ``release``), no atomic per step;
* ``path_alloc_free``: ``devalloc.alloc`` and ``free`` at every step;
* ``path_worst_case``: a global ``threads x MAX_K`` array, the way it is
  written today;
* ``path_count`` / ``path_fill``: count + scan + exact: each thread's
  largest k (the count pass draws every number of the path), scanned, and
  the path again on a buffer of exactly that;
* ``path_nrt``: each step's buffer from ``np.empty`` (CUDA's malloc through
  NRT; GPU only).

On the simulator :func:`run` also counts the atomics each heap version
issued per allocation (``devalloc.sim.atomics.count_atomics``).

Run: ``python -m devalloc demo --example step_scratch [--threads N] [--seed S]``
(or ``python kernels/step_scratch.py`` with the same options); the demo's
heap figures are the scoped version's, the alloc/free version's are in its
summary. ``bench/step_scratch.py`` tabulates both.
"""

if __name__ == "__main__":  # python kernels/NAME.py: see _script.py
    import _script

    _script.run(__file__)

from dataclasses import dataclass

import numpy as np
from numba import config, cuda
from numba.cuda.random import xoroshiro128p_normal_float32, xoroshiro128p_uniform_float32

import devalloc

from . import _mc, _methods

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


@cuda.jit(device=True)
def _path(buf, states, i):
    """Return path ``i``'s end point, every step's draws in ``buf`` (at least MAX_K long for any k)."""
    x = 0.0
    for _ in range(NSTEPS):
        k = _draw_k(states, i)
        x += DT * _fill_and_median(buf, k, states, i)
    return x


@cuda.jit
def path_worst_case(scratch, states, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    out[i] = _path(scratch[i], states, i)


@cuda.jit
def path_count(states, counts):
    """Count pass of the count + scan twin: every draw of the path, storing none; the largest k."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    most = 0
    for _ in range(NSTEPS):
        k = _draw_k(states, i)
        most = max(most, k)
        for _ in range(k):
            xoroshiro128p_normal_float32(states, i)
    counts[i] = most


@cuda.jit
def path_fill(states, counts, starts, scratch, out):
    """Fill pass: the path again, each step's draws in the thread's exact buffer (its largest k)."""
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    s = starts[i]
    out[i] = _path(scratch[s:s + counts[i]], states, i)


def _path_nrt(states, out):
    """NRT twin of ``path_alloc_free``: each step's buffer from ``np.empty`` (CUDA malloc)."""
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    x = 0.0
    for _ in range(NSTEPS):
        k = _draw_k(states, i)
        x += DT * _fill_and_median(np.empty(k, np.float32), k, states, i)
    out[i] = x


#: Compiled (and launched) only with NRT on: see ``_mc.nrt_enabled``.
path_nrt = cuda.jit(_path_nrt)


#: Seconds per thread on the CUDA simulator, for the demo's time estimate:
#: ``python -m devalloc demo --example step_scratch --json --threads N`` took
#: 21.8 s at N = 32 and 84.8 s at N = 256 (wall clock, whole command; 2 CPU
#: cores shared with other jobs, load 9 to 11): (84.8 - 21.8) / 224.
#: An estimate good to a factor of about 2.
SIM_SECONDS_PER_THREAD = 0.28


#: Heap bytes per thread beyond the first MiB: a thread holds one scoped chunk
#: (at least ``layout.SCOPE_MIN_CHUNK`` = 256 B) or one block of at most
#: ``MAX_K * 4`` = 128 B at a time; twice that leaves room for partly filled
#: slabs. (It was 0: a 1 MiB heap, enough for the simulator's one block at a
#: time, failed 1.9 million of 8 million allocations at 1M threads on an H100.)
HEAP_PER_THREAD = 2 * 256


def worst_case_bytes(threads):
    """Return the bytes the worst-case version preallocates for ``threads``."""
    return threads * MAX_K * 4


@dataclass(kw_only=True)
class StepResult(_mc.Result):
    """The paths' mean end point; the heap figures of both heap versions.

    ``heap_peak_bytes`` and ``usage`` are the scoped version's; ``identical``
    says that both heap versions match the worst-case twin.
    """

    answer_name = "mean end point of the paths"
    expected_label = "exact"

    #: Allocations that returned NULL, both heap versions together.
    failed: int
    alloc_free_peak_bytes: int
    alloc_free_usage: object
    #: Atomics per allocation counted on the simulator (None on a GPU).
    scoped_atomics_per_alloc: float | None
    alloc_free_atomics_per_alloc: float | None

    def summary_lines(self):
        def atomics(x):
            return "not counted on a GPU" if x is None else f"{x:.2f} atomics per allocation"

        return [
            f"mean end point {_mc.pm(self.answer, self.stderr)} (exact {self.expected:g}: "
            "every step is the median of draws symmetric about 0)",
            f"scoped: peak {self.heap_peak_bytes} B, "
            f"{atomics(self.scoped_atomics_per_alloc)}; alloc/free: peak "
            f"{self.alloc_free_peak_bytes} B, {atomics(self.alloc_free_atomics_per_alloc)}; "
            f"allocations failed: {self.failed}",
        ]


def _heap_run(lc, kernel, heap, name):
    """Run ``kernel`` on an emptied ``heap`` as method ``name``; return outputs, failures, usage, atomics counted."""
    heap.reset()
    row = lc.begin(name)
    out = cuda.device_array(lc.threads, np.float64)
    failed = cuda.to_device(np.zeros(lc.threads, np.int32))
    atomics = {}
    if config.ENABLE_CUDASIM:
        from devalloc.sim.atomics import count_atomics

        with count_atomics() as counts:
            lc.launch(kernel, heap.ctx, lc.states(), out, failed)
        atomics = {kernel.__name__: counts.total}
    else:
        lc.launch(kernel, heap.ctx, lc.states(), out, failed)
    lc.end()
    usage = lc.finish(heap, heap.debug)
    row.peak_bytes, row.meta_bytes = usage.peak, heap.meta_bytes
    return out.copy_to_host(), int(failed.copy_to_host().sum()), usage, atomics


def simulate(lc, heap):
    """Run the three versions on ``lc``'s threads; return their :class:`_mc.Shard`.

    Both heap versions use ``heap`` in turn (reset before each); a debug
    heap is checked after each (``HeapCorruption`` on misuse).
    """
    threads = lc.threads
    lc.say(f"scoped version: {threads} paths of {NSTEPS} steps, a scope per step")
    scoped_x, _, scoped_u, scoped_atomics = _heap_run(lc, path_scoped, heap, _methods.HEAP)
    lc.say(f"alloc/free version: {threads} paths, an alloc and a free per step")
    af_x, _, af_u, af_atomics = _heap_run(lc, path_alloc_free, heap, _methods.HEAP_ALLOC_FREE)
    lc.say(f"worst-case version: {threads} x {MAX_K} floats")
    lc.begin(_methods.WORST, peak_bytes=worst_case_bytes(threads))
    ref = cuda.device_array(threads, np.float64)
    lc.launch(path_worst_case, cuda.device_array((threads, MAX_K), np.float32), lc.states(), ref)
    lc.end()

    lc.say(f"count + scan + exact: {threads} paths drawn, largest k scanned, run again")
    m = lc.begin(_methods.EXACT, twice=True)
    counts = cuda.device_array(threads, np.int32)
    lc.launch(path_count, lc.states(), counts)
    offsets, total = lc.scan(counts)
    scratch = lc.exact(m, total, np.float32, counts)
    exact = cuda.device_array(threads, np.float64)
    lc.launch(path_fill, lc.states(), counts, offsets[:threads], _mc.Whole(scratch), exact)
    lc.end()

    nrt = cuda.device_array(threads, np.float64)
    ran_nrt = lc.nrt(_mc.malloc_bytes(m.exact_bytes, threads),
                     lambda row: lc.launch(path_nrt, lc.states(), nrt) or True)

    ref_x = ref.copy_to_host()
    same = lc.check(ref_x, {_methods.HEAP: scoped_x, _methods.HEAP_ALLOC_FREE: af_x,
                            _methods.EXACT: exact, _methods.NRT: nrt if ran_nrt else None})
    return lc.shard(
        identical=same,
        arrays={"x": ref_x}, usages={"end": scoped_u, "alloc_free": af_u},
        # NULLs as the heaps counted them (allocations; the kernels' flags
        # count threads): both versions, each of which a NULL makes differ.
        counts={"failed": scoped_u.failed + af_u.failed, **scoped_atomics, **af_atomics})


def result(shard):
    """Return the :class:`StepResult` of a shard (or of shards combined)."""
    mean, err = _mc.mean_stderr(shard.arrays["x"])
    scoped_u, af_u = shard.usages["end"], shard.usages["alloc_free"]
    allocations = shard.threads * NSTEPS

    def per_alloc(kernel):  # counted on the simulator only
        n = shard.counts.get(kernel.__name__)
        return None if n is None else n / allocations

    return StepResult(
        threads=shard.threads,
        answer=mean,
        stderr=err,
        expected=0.0,
        identical=shard.identical,
        heap_peak_bytes=scoped_u.peak,
        worst_case_bytes=worst_case_bytes(shard.threads),
        usage=scoped_u,
        failed=shard.counts["failed"],
        alloc_free_peak_bytes=af_u.peak,
        alloc_free_usage=af_u,
        scoped_atomics_per_alloc=per_alloc(path_scoped),
        alloc_free_atomics_per_alloc=per_alloc(path_alloc_free),
        methods=shard.methods,
    )


def run(threads=128, seed=1, *, capacity=None, block=32, progress=None, debug=False,
        profile=False):
    """Run the three versions; return a :class:`StepResult`.

    ``capacity`` defaults to 1 MiB plus :data:`HEAP_PER_THREAD` bytes per thread
    (on a GPU every thread may hold its scratch at once). ``progress`` is told each phase (see
    :class:`_mc.Runner`). ``debug`` runs the heap versions on a debug heap
    and raises ``HeapCorruption`` on misuse (``Heap.check``).
    """
    lc = _mc.Runner(threads, seed, block, progress)
    return result(simulate(lc, lc.heap(capacity, debug, per_thread=HEAP_PER_THREAD, profile=profile)))


#: Kernel name -> argument words of :func:`_mc.signatures`.
SIGNATURES = {
    "path_scoped": "ctx states float64 int32",
    "path_alloc_free": "ctx states float64 int32",
    "path_worst_case": "float32[2] states float64",
    "path_count": "states int32",
    "path_fill": "states int32 int64 float32 float64",
}
#: The NRT twin's, compiled with NRT on (``_mc.precompile``).
NRT_SIGNATURES = {"path_nrt": "states float64"}
