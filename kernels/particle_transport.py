"""Particle transport through a slab, with secondaries on a growing stack.

A beam of particles hits a slab of THICKNESS mean free paths at normal
incidence. At each collision a particle is absorbed (P_ABSORB), scattered
isotropically (P_SCATTER), or splits (the rest): it scatters and emits one
secondary particle in another isotropic direction. Each thread follows one
source particle and every descendant (one *history*) depth-first: the
particle in flight lives in registers, and pending secondaries wait on a
per-history stack. Tallied per history: particles transmitted (leaving at
x = THICKNESS), reflected (leaving at x = 0), absorbed, and lost (dropped
because the stack was full, or the history ran past MAX_FLIGHTS flights).
The answer is the number transmitted and reflected per source particle,
with standard errors over the histories.

Two thirds of the histories never split, so they need no stack at all;
two thirds of the others never hold more than one entry at a time, and
about 3 in 10,000 need more than eight. A worst-case buffer must hold the deepest history of any run,
with a margin: MAX_STACK = 256 entries (4 KiB) per thread.

* ``transport_heap``: the stack comes from ``devalloc.realloc`` on the
  first split (STACK0 entries; ``realloc`` of NULL allocates) and grows on
  demand: when full, ``realloc`` to twice the size (a new block, the
  entries copied, the old one freed; up to MAX_STACK entries).
* ``transport_worst_case``: the way it is written today: a global array of
  ``threads x MAX_STACK`` entries, the worst case for every history.
* ``transport_count`` / ``transport_fill``: count + scan + exact: each
  history's deepest stack, scanned, then the histories again on stacks of
  exactly that depth. Counting needs the stack itself: the count pass keeps
  a MAX_STACK one in local memory (set aside per resident thread).
* ``transport_nrt``: the heap version's growing stack from ``np.empty``
  (CUDA's malloc through NRT; run on a GPU only).

Memory, measured on the simulator (the heap's page ``page="auto"``'s,
1 KiB here): heap peak 3,072 B vs 1,048,576 B at 256 threads (seed 1);
3,072 B vs 12,288,000 B at 3,000 threads (seed 5); with 16 KiB pages,
before issue 30, 32,768 and 49,152 B (the simulator's thread switching
decides how many stacks overlap). On a GPU all threads run at once, so
more stacks overlap, but only those of the histories that split.

All draw the same numbers from the same per-thread xoroshiro128+ stream
and drop a secondary in the same case (stack at MAX_STACK), so their tallies
are identical. If the heap cannot serve a stack (``alloc`` returns NULL:
counted in ``usage().failed``) the secondary is dropped and counted as lost,
and the comparison with the twin says so.

Run: ``python -m devalloc demo --example particle_transport [--threads N] [--seed S]``
(or ``python kernels/particle_transport.py`` with the same options).
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

#: Slab thickness, in mean free paths (total cross-section 1).
THICKNESS = 3.0
#: Probabilities of the collision outcomes; a split has 1 - both.
P_ABSORB = 0.3
P_SCATTER = 0.5
#: Stack entries: (x, mu) as two float64.
ENTRY_BYTES = 16
#: First stack, allocated on the first split; doubled when full. One entry:
#: most histories that split never hold more (a first stack of two held
#: 1.56x the exact bytes from 64K threads up, one 1.16x: issue 30, bench/sweep.py).
STACK0 = 1
#: Largest stack, the depth the worst-case version preallocates per thread.
MAX_STACK = 256
#: float64 slots of a MAX_STACK stack (a compile-time constant for a local array).
STACK_SLOTS = 2 * MAX_STACK
#: Flights followed per history (a bound for the GPU loop; never reached at
#: these parameters: the cascade is subcritical, 0.9 particles per collision).
MAX_FLIGHTS = 4096

#: Particles per source particle from an independent CPU model of the same
#: physics (plain Python, 10**6 histories): transmitted 0.21474 +- 0.00054,
#: reflected 0.39558 +- 0.00072.
REFERENCE_TRANSMITTED = 0.21474
REFERENCE_REFLECTED = 0.39558

#: Columns of the per-history tally.
TRANSMITTED, REFLECTED, ABSORBED, LOST, MAX_DEPTH = range(5)
NCOLS = 5

# Flight outcomes.
_LEAK, _ABSORB, _SCATTER, _SPLIT = range(4)


@cuda.jit(device=True)
def _flight(states, i, x, mu):
    """Fly one particle from ``x`` along ``mu`` to its next event.

    Returns ``(event, x, mu, mu_secondary)``: the particle's new position,
    its new direction (after a collision) and, on a split, the secondary's.
    Draws 1 (leak), 2 (absorption), 3 (scatter) or 4 (split) numbers.
    """
    x = x + mu * -math.log(1.0 - xoroshiro128p_uniform_float64(states, i))
    if x >= THICKNESS or x < 0.0:
        return _LEAK, x, mu, 0.0
    u = xoroshiro128p_uniform_float64(states, i)
    if u < P_ABSORB:
        return _ABSORB, x, mu, 0.0
    mu = 2.0 * xoroshiro128p_uniform_float64(states, i) - 1.0
    if u < P_ABSORB + P_SCATTER:
        return _SCATTER, x, mu, 0.0
    return _SPLIT, x, mu, 2.0 * xoroshiro128p_uniform_float64(states, i) - 1.0


@cuda.jit(device=True)
def _tally_leak(out, i, x):
    if x >= THICKNESS:
        out[i, TRANSMITTED] += 1
    else:
        out[i, REFLECTED] += 1


@cuda.jit(device=True)
def _clear(out, i):
    for c in range(NCOLS):
        out[i, c] = 0


def _history_with(grow):
    """Return the device function that follows one history, written once for every version.

    ``follow(store, states, i, out, stack, cap)`` follows history ``i``, its
    pending secondaries on ``stack`` (``cap`` entries of two float64: x and
    mu), tallies in ``out`` and returns the stack it ended with. The
    versions differ only in where the stack comes from: when it is full,
    below MAX_STACK entries, ``grow(store, stack, depth, cap)`` returns a
    stack with room (its first ``depth`` entries kept) and its capacity, or
    the same stack and capacity (a secondary that finds it full is then
    lost, as every version drops one at MAX_STACK). Inlined into the kernel
    (``grow`` may return an array it made: a view of a heap block, or
    ``np.empty``'s).
    """

    def follow(store, states, i, out, stack, cap):
        _clear(out, i)
        depth = 0
        x = 0.0
        mu = 1.0
        done = False
        for _ in range(MAX_FLIGHTS):
            event, x, mu, mu2 = _flight(states, i, x, mu)
            if event == _SPLIT:
                if depth == cap and cap < MAX_STACK:
                    stack, cap = grow(store, stack, depth, cap)
                if depth < cap:
                    stack[2 * depth] = x
                    stack[2 * depth + 1] = mu2
                    depth += 1
                    out[i, MAX_DEPTH] = max(out[i, MAX_DEPTH], depth)
                else:
                    out[i, LOST] += 1  # stack at MAX_STACK, or no room to grow it
                continue
            if event == _SCATTER:
                continue
            if event == _ABSORB:
                out[i, ABSORBED] += 1
            else:
                _tally_leak(out, i, x)
            if depth == 0:
                done = True
                break
            depth -= 1
            x = stack[2 * depth]
            mu = stack[2 * depth + 1]
        if not done:
            out[i, LOST] += 1 + depth  # the particle in flight and those waiting
        return stack

    return cuda.jit(device=True, inline="always")(follow)


@cuda.jit(device=True)
def _next_cap(cap):
    """Return the entries of a growing stack after ``cap``: STACK0 first, then doubled."""
    return STACK0 if cap == 0 else min(2 * cap, MAX_STACK)


@cuda.jit(device=True, inline="always")
def _grow_on_heap(ctx, stack, depth, cap):
    """The heap version's growth: ``realloc`` to twice the entries (the first: STACK0).

    ``realloc`` of the empty stack's NULL allocates; it copies the entries
    to a new block and frees the old one (or stays in place); on NULL the
    old stack stays the history's.
    """
    new_cap = _next_cap(cap)
    off = devalloc.realloc(ctx, devalloc.offset_of(ctx, stack), new_cap * ENTRY_BYTES)
    if off == devalloc.NULL:
        return stack, cap
    return devalloc.view(ctx, off, 2 * new_cap, np.float64), new_cap


@cuda.jit(device=True, inline="always")
def _no_growth(store, stack, depth, cap):
    """The twins' stacks are as large as they will be: the worst case, or the exact depth."""
    return stack, cap


@cuda.jit(device=True, inline="always")
def _grow_nrt(store, stack, depth, cap):
    """The NRT twin's growth: an ``np.empty`` array twice as large, the entries copied."""
    new_cap = _next_cap(cap)
    bigger = np.empty(2 * new_cap, np.float64)
    for k in range(2 * depth):
        bigger[k] = stack[k]
    return bigger, new_cap


_follow_heap = _history_with(_grow_on_heap)
_follow = _history_with(_no_growth)
_follow_nrt = _history_with(_grow_nrt)


@cuda.jit
def transport_heap(ctx, states, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    # The stack: none until the first split (an empty view), then realloc's.
    stack = _follow_heap(ctx, states, i, out, devalloc.view(ctx, devalloc.NULL, 0, np.float64), 0)
    devalloc.free(ctx, devalloc.offset_of(ctx, stack))  # (NULL: nothing to free)


@cuda.jit
def transport_worst_case(scratch, states, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    _follow(0, states, i, out, scratch[i], MAX_STACK)  # MAX_STACK entries for every history


@cuda.jit
def transport_count(states, out, counts):
    """Count pass of the count + scan twin: the whole transport, its stack in local memory.

    The stack's depth is known only by running the history, which needs the
    stack: the count pass keeps it in a MAX_STACK-entry local array (local
    memory, which the GPU sets aside per resident thread, not per thread
    launched), and stores each history's deepest stack, in float64 slots.
    """
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    stack = cuda.local.array(STACK_SLOTS, np.float64)
    _follow(0, states, i, out, stack, MAX_STACK)
    counts[i] = 2 * out[i, MAX_DEPTH]


@cuda.jit
def transport_fill(states, counts, starts, stacks, out):
    """Fill pass: the same history again, its stack exactly as deep as it gets."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    s = starts[i]
    _follow(0, states, i, out, stacks[s:s + counts[i]], counts[i] // 2)


def _transport_nrt(states, out):
    """NRT twin of ``transport_heap``: the growing stack from ``np.empty`` (CUDA malloc)."""
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    _follow_nrt(0, states, i, out, np.empty(0, np.float64), 0)


#: Compiled (and launched) only with NRT on: see ``_mc.nrt_enabled``.
transport_nrt = cuda.jit(_transport_nrt)


#: Seconds per thread on the CUDA simulator, for the demo's time estimate:
#: ``python -m devalloc demo --example particle_transport --json --threads N`` took
#: 9.0 s at N = 256 and 47.2 s at N = 4096 (wall clock, whole command; 2 CPU
#: cores shared with other jobs, load 5 to 7): (47.2 - 9.0) / 3840.
#: An estimate good to a factor of about 2.
SIM_SECONDS_PER_THREAD = 1.0e-2


#: Heap bytes a thread beyond the first MiB, by default (``_mc.heap_capacity``).
HEAP_PER_THREAD = 256


def worst_case_bytes(threads):
    """Return the bytes the worst-case version preallocates for ``threads``."""
    return threads * MAX_STACK * ENTRY_BYTES


@dataclass(kw_only=True)
class TransportResult(_mc.Result):
    """Particles transmitted, reflected and absorbed per source particle; the tallies."""

    answer_name = "transmitted per source particle"
    expected_label = "CPU reference, 10**6 histories, +- 0.0005"

    reflected: float
    reflected_stderr: float | None
    absorbed: float
    absorbed_stderr: float | None
    lost: int
    histories_with_stack: int
    max_depth: int
    #: Per history: the columns TRANSMITTED, REFLECTED, ABSORBED, LOST, MAX_DEPTH.
    tally: np.ndarray

    def summary_lines(self):
        return [
            f"per source particle: transmitted {_mc.pm(self.answer, self.stderr)}, "
            f"reflected {_mc.pm(self.reflected, self.reflected_stderr)}, "
            f"absorbed {_mc.pm(self.absorbed, self.absorbed_stderr)}",
            f"CPU reference (10**6 histories): transmitted {REFERENCE_TRANSMITTED}, "
            f"reflected {REFERENCE_REFLECTED}; particles lost: {self.lost}",
            f"histories that needed a stack: {self.histories_with_stack} of "
            f"{self.threads} (deepest: {self.max_depth} entries; worst case: {MAX_STACK})",
        ]


def simulate(lc, heap):
    """Run every version on ``lc``'s threads; return their :class:`_mc.Shard`.

    The heap version, the worst-case twin, the count + scan + exact twin
    and (on a GPU) the NRT twin. ``heap`` must be empty (just made or
    reset); a debug heap is checked at the end (``HeapCorruption`` if a
    block was overrun or freed wrongly).
    """
    threads = lc.threads
    lc.say(f"heap version: {threads} histories")
    heap_row = lc.begin(_methods.HEAP)
    out_heap = cuda.device_array((threads, NCOLS), np.int32)
    lc.launch(transport_heap, heap.ctx, lc.states(), out_heap)
    lc.end()
    usage = lc.finish(heap, heap.debug)
    heap_row.peak_bytes, heap_row.meta_bytes = usage.peak, heap.meta_bytes

    lc.say(f"worst-case version: {threads} x {MAX_STACK} stack entries")
    lc.begin(_methods.WORST, peak_bytes=worst_case_bytes(threads))
    scratch = cuda.device_array((threads, 2 * MAX_STACK), np.float64)
    out_ref = cuda.device_array((threads, NCOLS), np.int32)
    lc.launch(transport_worst_case, scratch, lc.states(), out_ref)
    lc.end()

    lc.say(f"count + scan + exact: {threads} histories counted (stack in local memory), "
           "scanned, run again")
    local = 2 * MAX_STACK * 8
    m = lc.begin(_methods.EXACT, twice=True, local_bytes_per_thread=local,
                 peak_bytes=local * _mc.resident_threads(threads))
    out_exact = cuda.device_array((threads, NCOLS), np.int32)
    counts = cuda.device_array(threads, np.int32)
    lc.launch(transport_count, lc.states(), out_exact, counts)
    offsets, total = lc.scan(counts)
    stacks = lc.exact(m, total, np.float64, counts)
    lc.launch(transport_fill, lc.states(), counts, offsets[:threads], _mc.Whole(stacks),
              out_exact)
    lc.end()

    out_nrt = cuda.device_array((threads, NCOLS), np.int32)
    ran_nrt = lc.nrt(_mc.malloc_bytes(4 * m.exact_bytes, 2 * threads),
                     lambda row: lc.launch(transport_nrt, lc.states(), out_nrt) or True)

    a = out_heap.copy_to_host()
    same = lc.check(out_ref, {_methods.HEAP: a, _methods.EXACT: out_exact,
                              _methods.NRT: out_nrt if ran_nrt else None})
    return lc.shard(identical=same,
                    arrays={"tally": a}, usages={"end": usage})


def result(shard):
    """Return the :class:`TransportResult` of a shard (or of shards combined)."""
    a, usage = shard.arrays["tally"], shard.usages["end"]
    t, t_err = _mc.mean_stderr(a[:, TRANSMITTED])
    r, r_err = _mc.mean_stderr(a[:, REFLECTED])
    ab, ab_err = _mc.mean_stderr(a[:, ABSORBED])
    return TransportResult(
        threads=shard.threads,
        answer=t,
        stderr=t_err,
        expected=REFERENCE_TRANSMITTED,
        identical=shard.identical,
        heap_peak_bytes=usage.peak,
        worst_case_bytes=worst_case_bytes(shard.threads),
        usage=usage,
        reflected=r,
        reflected_stderr=r_err,
        absorbed=ab,
        absorbed_stderr=ab_err,
        lost=int(a[:, LOST].sum()),
        histories_with_stack=int((a[:, MAX_DEPTH] > 0).sum()),
        max_depth=int(a[:, MAX_DEPTH].max()) if shard.threads else 0,
        tally=a,
        methods=shard.methods,
    )


def run(threads=256, seed=1, *, capacity=None, block=64, progress=None, debug=False,
        profile=False):
    """Run both versions; return a :class:`TransportResult`.

    ``capacity`` None is 1 MiB plus 256 bytes per thread; the other
    arguments are every example's (see ``_mc``).
    """
    lc = _mc.Runner(threads, seed, block, progress)
    return result(simulate(lc, lc.heap(capacity, debug, per_thread=HEAP_PER_THREAD, profile=profile)))


#: Kernel name -> argument words of :func:`_mc.signatures`.
SIGNATURES = {
    "transport_heap": "ctx states int32[2]",
    "transport_worst_case": "float64[2] states int32[2]",
    "transport_count": "states int32[2] int32",
    "transport_fill": "states int32 int64 float64 int32[2]",
}
#: The NRT twin's, compiled with NRT on (``_mc.precompile``).
NRT_SIGNATURES = {"transport_nrt": "states int32[2]"}
