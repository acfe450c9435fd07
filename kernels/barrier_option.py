"""Up-and-out barrier call: only paths that come near the barrier keep their path.

A European call (strike STRIKE, maturity MATURITY) that dies if the price
ever reaches BARRIER, monitored continuously, under Black-Scholes (rate
RATE, volatility SIGMA). Each thread simulates one path of the log-price at
NSTEPS dates. A path that reaches the barrier at a date is dead (payoff 0).
But a path can also cross the barrier *between* two dates and come back;
given the two end points ``a, c`` of a step, the probability of that is
exactly ``exp(-2 (b - a)(b - c) / (SIGMA**2 dt))`` (the maximum of a
Brownian bridge), so a second pass draws one number per step to decide it.
That makes the price an unbiased estimate of the continuously monitored
price, which has a closed form (:func:`exact_price`) to check against.

The second pass needs the path, but only some of it, for only some paths:

* steps whose end points both lie more than BAND sigma-root-dt below the
  barrier cross it with probability below exp(-2 BAND**2) = 1.3e-14, which
  is neglected: a path keeps its points only from the step in which it first
  comes within the band (about 53 % of the paths, 16 points on average);
* a path that is dead, or finishes out of the money, pays 0 whatever the
  bridge says: its points are dropped at maturity. Only the paths still
  alive and in the money (about 27 %) keep them for the second pass, which
  is a second kernel launch: the blocks live across launches.

* ``barrier_heap``: when a path first comes within the band, at step
  ``k``, it allocates one heap block of exactly the points it keeps if it
  survives: the point before the step, and one a step from ``k`` to the
  last (``kept_points(k)``, 2 to NSTEPS + 1 float64). A path that dies, or
  ends out of the money, frees it. ``bridge_heap`` reads each kept block,
  draws the bridge tests, frees it.
* ``barrier_worst_case`` / ``bridge_worst_case``: the way it is written
  today: a global ``threads x (NSTEPS + 1)`` array, every path's worst case.
* ``barrier_count`` / ``barrier_fill`` / ``bridge_exact``: count + scan +
  exact: the points each path keeps, scanned; the paths again, into an
  exact buffer; the same bridge pass on it.
* ``barrier_nrt``: the kept points in a growing ``np.empty`` array (CUDA's
  malloc through NRT; GPU only), both passes in one thread, since an NRT
  array cannot outlive it.

Memory: the worst case is (NSTEPS + 1) float64 per path, 264 B; the heap
holds the kept points of about 27 % of the paths between the passes, each
in a block of their size class (16 B steps to 128 B, then at most 25 %).
Before issue 30 the points went into chains of 128 B, then 64 B, chunks (a
link word and 15 or 7 points each) grown as the path needed them: 1.35x the
kept bytes from 64K threads up with 64 B chunks, against 1.07x at 1M
threads with one exact block (bench/sweep.py, bench/RESULTS.md). Measured
on the simulator (the heap's page ``page="auto"``'s): peak 18,432 B vs
67,584 B at 256 threads (seed 1; 13,312 B with 64 B chunks: one class
against 11 here); 131,072 B vs 792,000 B at 3,000 threads (seed 5;
147,456 B with 64 B chunks).

All draw the same numbers from the same per-thread xoroshiro128+ stream, so
their payoffs are identical. If the heap cannot serve a block (``alloc``
returns NULL, counted in ``usage().failed``) the path's payoff is NaN, and
the comparison with the twin says so.

Run: ``python -m devalloc demo --example barrier_option [--threads N] [--seed S]``
(or ``python kernels/barrier_option.py`` with the same options).
"""

if __name__ == "__main__":  # python kernels/NAME.py: see _script.py
    import _script

    _script.run(__file__)

import math
from dataclasses import dataclass

import numpy as np
from numba import cuda
from numba.cuda.random import xoroshiro128p_uniform_float64

import devalloc

from . import _mc, _methods

SPOT = 100.0
STRIKE = 100.0
BARRIER = 130.0
RATE = 0.05
SIGMA = 0.2
MATURITY = 1.0
#: Monitoring dates of the simulated path (even: normals come in pairs).
NSTEPS = 32
#: Width of the band below the barrier where a path starts keeping its points,
#: in units of SIGMA * sqrt(dt).
BAND = 4.0

DT = MATURITY / NSTEPS
LOG_SPOT = math.log(SPOT)
LOG_STRIKE = math.log(STRIKE)
LOG_BARRIER = math.log(BARRIER)
DRIFT = (RATE - 0.5 * SIGMA * SIGMA) * DT
VOL = SIGMA * math.sqrt(DT)
BAND_LOG = BAND * VOL
DISCOUNT = math.exp(-RATE * MATURITY)


@cuda.jit(device=True)
def kept_points(k):
    """Return the points a path keeps if it first comes within the band at step ``k``.

    The point before step ``k`` and the one after each step from ``k`` to
    the last: a path that survives keeps every one of them.
    """
    return 1 + NSTEPS - k


@cuda.jit(device=True)
def _normal_pair(states, i):
    """Return two independent standard normals (Box-Muller); draws two numbers."""
    r = math.sqrt(-2.0 * math.log(1.0 - xoroshiro128p_uniform_float64(states, i)))
    t = 2.0 * math.pi * xoroshiro128p_uniform_float64(states, i)
    return r * math.cos(t), r * math.sin(t)


@cuda.jit(device=True)
def _bridge_crosses(states, i, a, c):
    """Return True if the bridge from log-price ``a`` to ``c`` over dt hits the barrier."""
    p = math.exp(-2.0 * (LOG_BARRIER - a) * (LOG_BARRIER - c) / (VOL * VOL))
    return 1.0 - xoroshiro128p_uniform_float64(states, i) < p


def _path_with(take):
    """Return the device function that simulates one path, written once for every version.

    ``follow(store, states, i, payoff, counts, path, write)`` simulates path
    ``i``, sets its payoff and the points it keeps (``counts[i]``), writing
    them to ``path`` when ``write``, and returns ``(path, kept)``: the array
    it ended with and whether the path keeps points for the bridge pass
    (alive and in the money, and it came within the band). The versions
    differ only in where the points go: when the path first comes within
    the band, at step ``k``, ``take(store, path, k)`` returns the array for
    its ``kept_points(k)`` points and True, or False when there is none to
    be had (the heap is full: the path's payoff is NaN, no exact answer).
    Inlined into the kernel (``take`` may return an array it made).
    """

    def follow(store, states, i, payoff, counts, path, write):
        payoff[i] = 0.0
        counts[i] = 0
        n = 0  # points kept
        x = LOG_SPOT
        z2 = 0.0
        alive = True
        for k in range(NSTEPS):
            if k % 2 == 0:
                z, z2 = _normal_pair(states, i)
            else:
                z = z2
            prev = x
            x = prev + DRIFT + VOL * z
            if x >= LOG_BARRIER:
                alive = False
                break
            if n == 0 and LOG_BARRIER - x < BAND_LOG:
                path, ok = take(store, path, k)
                if not ok:
                    payoff[i] = math.nan  # the heap is full: no exact answer
                    return path, False
                if write:
                    path[0] = prev
                n = 1
            if n > 0:
                if write:
                    path[n] = x
                n += 1
        if not alive or x <= LOG_STRIKE:
            return path, False  # pays 0 whatever the bridge says: nothing kept
        payoff[i] = DISCOUNT * (math.exp(x) - STRIKE)
        counts[i] = n
        return path, n > 0

    return cuda.jit(device=True, inline="always")(follow)


@cuda.jit(device=True, inline="always")
def _take_heap_block(ctx, path, k):
    """The heap version's points: one block of exactly ``kept_points(k)`` float64."""
    off = devalloc.alloc(ctx, 8 * kept_points(k))
    return devalloc.view(ctx, off, kept_points(k), np.float64), off != devalloc.NULL


@cuda.jit(device=True, inline="always")
def _keep_in_place(store, path, k):
    """The twins' points go to the array they were given (the worst case, or the exact row)."""
    return path, True


@cuda.jit(device=True, inline="always")
def _take_nrt(store, path, k):
    """The NRT twin's points: an ``np.empty`` array of ``kept_points(k)`` float64."""
    return np.empty(kept_points(k), np.float64), True


_follow_heap = _path_with(_take_heap_block)
_follow = _path_with(_keep_in_place)
_follow_nrt = _path_with(_take_nrt)


@cuda.jit
def barrier_heap(ctx, states, payoff, heads, counts):
    i = cuda.grid(1)
    if i >= payoff.shape[0]:
        return
    heads[i] = devalloc.NULL
    # The block of kept points: none until the band (an empty view).
    pts, kept = _follow_heap(ctx, states, i, payoff, counts,
                             devalloc.view(ctx, devalloc.NULL, 0, np.float64), True)
    if kept:
        heads[i] = devalloc.offset_of(ctx, pts)  # for the second pass: exactly its points
    else:
        devalloc.free(ctx, devalloc.offset_of(ctx, pts))  # (NULL: nothing was taken)


@cuda.jit
def bridge_heap(ctx, states, payoff, heads, counts):
    i = cuda.grid(1)
    if i >= payoff.shape[0] or heads[i] == devalloc.NULL:
        return
    _bridge(devalloc.view(ctx, heads[i], counts[i], np.float64), states, i, payoff, counts)
    devalloc.free(ctx, heads[i])
    heads[i] = devalloc.NULL


@cuda.jit(device=True)
def _bridge(path, states, i, payoff, counts):
    """Draw the bridge test of each kept step of path ``i``; a crossing zeroes its payoff."""
    for j in range(counts[i] - 1):
        if _bridge_crosses(states, i, path[j], path[j + 1]):
            payoff[i] = 0.0
            break


@cuda.jit
def barrier_worst_case(scratch, states, payoff, counts):
    i = cuda.grid(1)
    if i >= payoff.shape[0]:
        return
    _follow(0, states, i, payoff, counts, scratch[i], True)  # NSTEPS + 1 points for every path


@cuda.jit
def bridge_worst_case(scratch, states, payoff, counts):
    i = cuda.grid(1)
    if i >= payoff.shape[0]:
        return
    _bridge(scratch[i], states, i, payoff, counts)


@cuda.jit
def barrier_count(states, payoff, counts):
    """Count pass of the count + scan twin: the paths, keeping nothing; count the kept points."""
    i = cuda.grid(1)
    if i >= payoff.shape[0]:
        return
    _follow(0, states, i, payoff, counts, payoff[:0], False)


@cuda.jit
def barrier_fill(states, starts, points, payoff, counts):
    """Fill pass: the same paths again, the kept points into the exact buffer."""
    i = cuda.grid(1)
    if i >= payoff.shape[0]:
        return
    s = starts[i]
    n = counts[i]
    _follow(0, states, i, payoff, counts, points[s:s + n], n > 0)


@cuda.jit
def bridge_exact(points, starts, states, payoff, counts):
    i = cuda.grid(1)
    if i >= payoff.shape[0]:
        return
    s = starts[i]
    _bridge(points[s:s + counts[i]], states, i, payoff, counts)


def _barrier_nrt(states, payoff, counts):
    """NRT twin: the kept points in an ``np.empty`` array, bridge tests in the same thread.

    The array is made, as the heap version's block, of ``kept_points(k)``
    points when the path first comes within the band at step ``k``.

    An NRT array dies with its thread, so the second pass cannot be a
    second launch; it draws the same numbers right after the path, as the
    second launch does.
    """
    i = cuda.grid(1)
    if i >= payoff.shape[0]:
        return
    path, kept = _follow_nrt(0, states, i, payoff, counts, np.empty(0, np.float64), True)
    if kept:
        _bridge(path, states, i, payoff, counts)


#: Compiled (and launched) only with NRT on: see ``_mc.nrt_enabled``.
barrier_nrt = cuda.jit(_barrier_nrt)


def _norm_cdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def exact_price(spot=SPOT, strike=STRIKE, barrier=BARRIER, rate=RATE, sigma=SIGMA,
                maturity=MATURITY):
    """Return the closed-form price of the continuously monitored up-and-out call.

    Black-Scholes call minus the up-and-in call (Hull, *Options, Futures and
    Other Derivatives*, barrier options, barrier above the strike).
    """
    if spot >= barrier:
        return 0.0
    st = sigma * math.sqrt(maturity)
    lam = (rate + 0.5 * sigma * sigma) / (sigma * sigma)
    disc = math.exp(-rate * maturity)
    d1 = (math.log(spot / strike) + (rate + 0.5 * sigma * sigma) * maturity) / st
    call = spot * _norm_cdf(d1) - strike * disc * _norm_cdf(d1 - st)
    x1 = math.log(spot / barrier) / st + lam * st
    y = math.log(barrier * barrier / (spot * strike)) / st + lam * st
    y1 = math.log(barrier / spot) / st + lam * st
    hs = barrier / spot
    up_in = (spot * _norm_cdf(x1) - strike * disc * _norm_cdf(x1 - st)
             - spot * hs ** (2 * lam) * (_norm_cdf(-y) - _norm_cdf(-y1))
             + strike * disc * hs ** (2 * lam - 2)
             * (_norm_cdf(-y + st) - _norm_cdf(-y1 + st)))
    return call - up_in


#: Seconds per thread on the CUDA simulator, for the demo's time estimate:
#: ``python -m devalloc demo --example barrier_option --json --threads N`` took
#: 12.0 s at N = 256 and 83.5 s at N = 4096 (wall clock, whole command; 2 CPU
#: cores shared with other jobs, load 9 to 10): (83.5 - 12.0) / 3840.
#: An estimate good to a factor of about 2.
SIM_SECONDS_PER_THREAD = 1.9e-2


#: Heap bytes a thread beyond the first MiB, by default (``_mc.heap_capacity``).
HEAP_PER_THREAD = 512


def worst_case_bytes(threads):
    """Return the bytes the worst-case version preallocates for ``threads``."""
    return threads * (NSTEPS + 1) * 8


@dataclass(kw_only=True)
class BarrierResult(_mc.Result):
    """The option's price, and how many paths kept their points for the second pass."""

    answer_name = "up-and-out call price"
    expected_label = "closed form"
    snapshot_label = "between the passes (kept paths live)"

    paths_kept: int
    blocks_between_passes: int
    #: Points each path kept for the second pass (0: none).
    kept: np.ndarray

    def summary_lines(self):
        return [
            f"up-and-out call price {_mc.pm(self.answer, self.stderr)} "
            f"(closed form, continuous monitoring: {self.expected:.4f})",
            f"paths kept for the second pass: {self.paths_kept} of {self.threads} "
            f"({self.blocks_between_passes} blocks of their kept points)",
        ]


def simulate(lc, heap):
    """Run every version (two passes each) on ``lc``'s threads; return their :class:`_mc.Shard`.

    The heap version, the worst-case twin, the count + scan + exact twin
    and (on a GPU) the NRT twin. ``heap`` must be empty (just made or
    reset); a debug heap is checked at the end (``HeapCorruption`` if a
    block was overrun or freed wrongly).
    """
    threads = lc.threads
    lc.say(f"heap version, pass 1: {threads} paths of {NSTEPS} steps")
    heap_row = lc.begin(_methods.HEAP)
    states = lc.states()
    pay_heap = cuda.device_array(threads, np.float64)
    heads = cuda.device_array(threads, np.int64)
    counts_heap = cuda.device_array(threads, np.int32)
    lc.launch(barrier_heap, heap.ctx, states, pay_heap, heads, counts_heap)
    with lc.untimed():
        between = heap.usage()  # the kept paths, live between the passes
    lc.say(f"heap version, pass 2: bridge tests on {between.live_blocks} kept paths")
    lc.launch(bridge_heap, heap.ctx, states, pay_heap, heads, counts_heap)
    lc.end()
    usage = lc.finish(heap, heap.debug)
    heap_row.peak_bytes, heap_row.meta_bytes = usage.peak, heap.meta_bytes
    heap_row.in_use_bytes = between.in_use

    lc.say(f"worst-case version: {threads} x {NSTEPS + 1} points, two passes")
    lc.begin(_methods.WORST, peak_bytes=worst_case_bytes(threads))
    states = lc.states()
    scratch = cuda.device_array((threads, NSTEPS + 1), np.float64)
    pay_ref = cuda.device_array(threads, np.float64)
    counts_ref = cuda.device_array(threads, np.int32)
    lc.launch(barrier_worst_case, scratch, states, pay_ref, counts_ref)
    lc.launch(bridge_worst_case, scratch, states, pay_ref, counts_ref)
    lc.end()

    lc.say(f"count + scan + exact: {threads} paths counted, scanned, run again, two passes")
    m = lc.begin(_methods.EXACT, twice=True)
    pay_exact = cuda.device_array(threads, np.float64)
    counts_exact = cuda.device_array(threads, np.int32)
    lc.launch(barrier_count, lc.states(), pay_exact, counts_exact)
    offsets, total = lc.scan(counts_exact)
    points = lc.exact(m, total, np.float64, counts_exact)
    states = lc.states()
    starts = offsets[:threads]
    lc.launch(barrier_fill, states, starts, _mc.Whole(points), pay_exact, counts_exact)
    lc.launch(bridge_exact, _mc.Whole(points), starts, states, pay_exact, counts_exact)
    lc.end()

    pay_nrt = cuda.device_array(threads, np.float64)
    counts_nrt = cuda.device_array(threads, np.int32)
    ran_nrt = lc.nrt(_mc.malloc_bytes(4 * m.exact_bytes, 2 * threads),
                     lambda row: lc.launch(barrier_nrt, lc.states(), pay_nrt, counts_nrt) or True)

    a, ca = pay_heap.copy_to_host(), counts_heap.copy_to_host()
    same = lc.check((pay_ref, counts_ref), {
        _methods.HEAP: (a, ca), _methods.EXACT: (pay_exact, counts_exact),
        _methods.NRT: (pay_nrt, counts_nrt) if ran_nrt else None})
    return lc.shard(
        identical=same,
        arrays={"payoff": a, "kept": ca}, usages={"end": usage, "snapshot": between})


def result(shard):
    """Return the :class:`BarrierResult` of a shard (or of shards combined)."""
    usage, between = shard.usages["end"], shard.usages["snapshot"]
    price, err = _mc.mean_stderr(shard.arrays["payoff"])
    return BarrierResult(
        threads=shard.threads,
        answer=price,
        stderr=err,
        expected=exact_price(),
        identical=shard.identical,
        heap_peak_bytes=usage.peak,
        worst_case_bytes=worst_case_bytes(shard.threads),
        usage=usage,
        snapshot=between,
        paths_kept=int((shard.arrays["kept"] > 0).sum()),
        blocks_between_passes=between.live_blocks,
        kept=shard.arrays["kept"],
        methods=shard.methods,
    )


def run(threads=256, seed=1, *, capacity=None, block=64, progress=None, debug=False,
        profile=False):
    """Run both versions (two passes each); return a :class:`BarrierResult`.

    ``capacity`` defaults to 1 MiB plus 512 bytes per thread. ``progress``
    is told each phase (see :class:`_mc.Runner`). ``debug`` runs the heap
    version on a debug heap and raises ``HeapCorruption`` if it wrote past
    a block or freed wrongly (``Heap.check``).
    """
    lc = _mc.Runner(threads, seed, block, progress)
    return result(simulate(lc, lc.heap(capacity, debug, per_thread=HEAP_PER_THREAD, profile=profile)))


#: Kernel name -> argument words of :func:`_mc.signatures`.
SIGNATURES = {
    "barrier_heap": "ctx states float64 int64 int32",
    "bridge_heap": "ctx states float64 int64 int32",
    "barrier_worst_case": "float64[2] states float64 int32",
    "bridge_worst_case": "float64[2] states float64 int32",
    "barrier_count": "states float64 int32",
    "barrier_fill": "states int64 float64 float64 int32",
    "bridge_exact": "float64 int64 states float64 int32",
}
#: The NRT twin's, compiled with NRT on (``_mc.precompile``).
NRT_SIGNATURES = {"barrier_nrt": "states float64 int32"}
