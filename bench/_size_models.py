"""Host models of what each example's threads allocate, for ``bench/sweep.py``.

Each model draws, with NumPy (not the kernels' xoroshiro streams: the same
laws, other numbers), for ``n`` threads:

* ``need``: the bytes each thread needs exactly (what count + scan
  allocates for it);
* ``block`` and ``blocks``: the size of the heap blocks the thread holds
  at the heap's peak, and how many (0 blocks: none);

and says whether those blocks are held by every thread at once (they live
from one launch to the next: ``ragged_walks``, ``barrier_option``) or only
by the threads running at the time (freed inside the kernel: the others).
The physics and the constants are the examples' own (imported from them).
Imports the examples, so numba: select the simulator first.
"""

import math
from dataclasses import dataclass

import numpy as np

from devalloc.examples import barrier_option as bo
from devalloc.examples import particle_transport as pt
from devalloc.examples import ragged_walks as rw
from devalloc.examples import step_scratch as ss
from devalloc.examples import two_pass_variance as tpv


@dataclass
class Sample:
    """Per-thread needs and held blocks of ``n`` threads."""

    need: np.ndarray
    block: np.ndarray
    blocks: np.ndarray
    #: True: every thread's blocks are live at once (across launches).
    all_live: bool


def ragged_walks(n, rng):
    """Walk lengths (gambler's ruin from START, cap MAX_STEPS); one block of 4 B per item."""
    x = np.full(n, rw.START, np.int64)
    steps = np.zeros(n, np.int64)
    active = np.arange(n)
    for _ in range(rw.MAX_STEPS):
        if active.size == 0:
            break
        steps[active] += 1
        x[active] += 2 * rng.integers(0, 2, active.size) - 1
        active = active[(x[active] != 0) & (x[active] != rw.SITES)]
    need = steps * rw.ITEM_BYTES
    return Sample(need=need, block=need, blocks=np.ones(n, np.int64), all_live=True)


def barrier_option(n, rng, chunk=1 << 18):
    """Points kept by the paths alive and in the money; one block of exactly them a path."""
    kept = np.empty(n, np.int64)
    for lo in range(0, n, chunk):
        m = min(chunk, n - lo)
        x = bo.LOG_SPOT + np.cumsum(bo.DRIFT + bo.VOL * rng.standard_normal((m, bo.NSTEPS)), axis=1)
        dead = (x >= bo.LOG_BARRIER).any(axis=1)
        near = bo.LOG_BARRIER - x < bo.BAND_LOG
        first = np.where(near.any(axis=1), near.argmax(axis=1), bo.NSTEPS)
        points = np.where(first < bo.NSTEPS, 1 + bo.NSTEPS - first, 0)
        keep = ~dead & (x[:, -1] > bo.LOG_STRIKE)
        kept[lo:lo + m] = np.where(keep, points, 0)
    return barrier_blocks(kept)


def barrier_blocks(kept):
    """Return the Sample of paths keeping ``kept`` points, one block of exactly them each.

    The kernel's design: a path allocates ``kept_points(k)`` float64 when it
    first comes within the band at step ``k``, and keeps them all if it
    survives.
    """
    return Sample(need=8 * kept, block=8 * kept, blocks=(kept > 0).astype(np.int64),
                  all_live=True)


def barrier_chunks(kept, words):
    """Return the Sample of paths keeping ``kept`` points in chains of ``words``-word chunks.

    The kernel's design before issue 30's part 4 (``words`` 16, then 8): a
    chunk is one link word and ``words - 1`` points, allocated as the path
    needs them.
    """
    chunks = -(-kept // (words - 1))
    return Sample(need=8 * kept, block=np.full(kept.size, 8 * words), blocks=chunks,
                  all_live=True)


def _history_depth(rand):
    """Return the deepest stack of one history (the kernel's physics, Python floats)."""
    x, mu, depth, deepest, stack = 0.0, 1.0, 0, 0, []
    for _ in range(pt.MAX_FLIGHTS):
        x += mu * -math.log(1.0 - rand())
        if x >= pt.THICKNESS or x < 0.0:
            event = 0
        else:
            u = rand()
            if u < pt.P_ABSORB:
                event = 1
            else:
                mu = 2.0 * rand() - 1.0
                event = 2 if u < pt.P_ABSORB + pt.P_SCATTER else 3
        if event == 3:
            if depth < pt.MAX_STACK:
                stack.append((x, 2.0 * rand() - 1.0))
                depth += 1
                deepest = max(deepest, depth)
            continue
        if event == 2:
            continue
        if depth == 0:
            break
        depth -= 1
        x, mu = stack.pop()
    return deepest


#: Histories simulated one by one in Python; more threads are drawn from them.
PT_HISTORIES = 100_000


def particle_transport(n, rng):
    """Deepest stack per history; the heap holds the last (doubled) stack block."""
    import random

    r = random.Random(int(rng.integers(1 << 62)))
    base = np.array([_history_depth(r.random) for _ in range(min(n, PT_HISTORIES))], np.int64)
    depth = base if n <= base.size else rng.choice(base, n)
    return transport_stacks(depth)


def transport_stacks(depth, stack0=pt.STACK0):
    """Return the Sample of histories whose deepest stacks are ``depth`` entries.

    The stack starts at ``stack0`` entries on the first split and doubles
    when full, up to MAX_STACK (the kernel's growth; deeper histories lose
    their secondaries beyond it, as in the kernel).
    """
    cap = np.where(depth > 0, stack0, 0)
    want = np.minimum(depth, pt.MAX_STACK)  # deeper: the kernel drops secondaries
    while (grow := (cap > 0) & (cap < want)).any():
        cap = np.where(grow, np.minimum(2 * cap, pt.MAX_STACK), cap)
    return Sample(need=depth * pt.ENTRY_BYTES, block=cap * pt.ENTRY_BYTES,
                  blocks=(depth > 0).astype(np.int64), all_live=False)


def two_pass_variance(n, rng):
    """Samples per thread (none below 2); one block of 4 B per sample."""
    k = np.minimum((-tpv.MEAN_SAMPLES * np.log(1.0 - rng.random(n))).astype(np.int64),
                   tpv.MAX_SAMPLES - 1)
    need = np.where(k >= 2, 4 * k, 0)
    return Sample(need=need, block=need, blocks=(need > 0).astype(np.int64), all_live=False)


def step_scratch(n, rng):
    """The alloc/free version: one block of a step's k floats; count + scan: the largest k."""
    k = 1 + np.minimum((rng.random((n, ss.NSTEPS)) * ss.MAX_K).astype(np.int64), ss.MAX_K - 1)
    return Sample(need=4 * k.max(axis=1), block=4 * k[:, 0], blocks=np.ones(n, np.int64),
                  all_live=False)


MODELS = {
    "ragged_walks": (ragged_walks, rw),
    "particle_transport": (particle_transport, pt),
    "barrier_option": (barrier_option, bo),
    "two_pass_variance": (two_pass_variance, tpv),
    "step_scratch": (step_scratch, ss),
}
