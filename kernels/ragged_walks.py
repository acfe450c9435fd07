"""Ragged output: random walks of random length, gathered into one array.

Each thread runs a symmetric random walk on the sites 0..SITES, from START,
until it is absorbed at 0 or at SITES (gambler's ruin), and emits its
trajectory: the interior sites it visits, one int32 item per step. A walk
lasts START * (SITES - START) = 48 steps on average, but its length has a
long tail, so a safe per-thread buffer is MAX_STEPS items, 20 times the
mean (a walk still inside after MAX_STEPS is truncated there, in both
versions, and counted). The host then gathers every trajectory into one
compact array and computes the mean length (exactly 48) and the occupation
histogram (visits per site, exactly ``2 min(s, x) (SITES - max(s, x)) /
SITES`` for start s), with their standard errors.

* ``walk_heap`` emits into a heap block of exactly the walk's size. The size
  is known only at the end of the walk, so the thread walks twice from the
  same saved RNG state: once to count the steps, once, after ``alloc``, to
  write them. It leaves the block's offset and item count for the host,
  where ``heap.gather`` (a prefix sum and one copy kernel on the device)
  puts every block in one compact array and frees it. The blocks live from
  the walk to the gather: that is the heap's peak.
* ``walk_worst_case`` / ``gather_worst_case``: the way it is written today:
  a ``threads x MAX_STEPS`` array, every walk's worst case, then the same
  gather from its rows.
* ``walk_count`` / ``walk_fill``: count + scan + exact: count every walk's
  items, scan the counts on the device, allocate exactly the total, walk
  again straight into the compact array (no gather). No NRT twin: an
  ``np.empty`` array dies with its thread, before the gather.

Memory. Every walk's block is live at the gather, so the heap's peak is
the live bytes plus, per size class in use, the unused rest of its slabs
(whole pages: the heap's page is ``page="auto"``'s, 1 KiB up to 1,024
threads, 2 KiB at 4,096; walks over half a page take whole pages). Measured
on the simulator (seed 1): 24,576 B against a worst case of 262,144 B at 64
threads, 64,512 B vs 1,048,576 B at 256, 246,784 B vs 4,194,304 B at 1,024
and 935,936 B vs 16,777,216 B at 4,096 threads (with 16 KiB pages, before
issue 30: 294,912, 344,064, 425,984 and 1,064,960 B, 20-odd classes in use
holding a mostly empty 16 KiB page each).

Steps come from the top 32 bits of each 64-bit xoroshiro128+ output (the
strongest bits; one draw serves 32 steps). Both versions draw the same
numbers per thread, so their compact arrays are identical. If the heap
cannot serve a block (``alloc`` returns NULL, counted in
``usage().failed``) that walk's items are missing from the compact array
(left at -1), and the comparison with the twin says so.

Run: ``python -m devalloc demo --example ragged_walks [--threads N] [--seed S]``
(or ``python kernels/ragged_walks.py`` with the same options).
"""

if __name__ == "__main__":  # python kernels/NAME.py: see _script.py
    import _script

    _script.run(__file__)

import math
from dataclasses import dataclass

import numpy as np
from numba import cuda, int64, uint32
from numba.cuda.random import xoroshiro128p_next

import devalloc

from devalloc.host.gather import launches as gather_launches

from . import _mc, _methods

#: The walk is absorbed at sites 0 and SITES.
SITES = 16
START = 4
#: Items a walk may emit; the worst-case version preallocates this per thread.
MAX_STEPS = 1024
ITEM_BYTES = 4  # int32 site numbers
#: Steps served by one 64-bit draw (its high half).
BITS_PER_DRAW = 32


@cuda.jit(device=True)
def _walk(states, i, out, write):
    """Walk from START until absorbed or MAX_STEPS items; return (items, absorbed).

    Writes the visited sites to ``out`` when ``write`` is true (``out`` may
    be empty otherwise). Draws one number per BITS_PER_DRAW steps.
    """
    x = START
    n = 0
    bits = int64(0)
    left = 0
    for _ in range(MAX_STEPS):
        if write:
            out[n] = x
        n += 1
        if left == 0:
            bits = int64(xoroshiro128p_next(states, i) >> uint32(64 - BITS_PER_DRAW))
            left = BITS_PER_DRAW
        x += 2 * (bits & 1) - 1
        bits >>= 1
        left -= 1
        if x == 0 or x == SITES:
            return n, True
    return n, False


@cuda.jit
def walk_heap(ctx, states, offsets, counts, absorbed):
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    # Walk once to count, from a saved state; rewind; walk again to write.
    s0 = states[i]["s0"]
    s1 = states[i]["s1"]
    n, done = _walk(states, i, devalloc.view(ctx, devalloc.NULL, 0, np.int32), False)
    states[i]["s0"] = s0
    states[i]["s1"] = s1
    counts[i] = n
    absorbed[i] = done
    off = devalloc.alloc(ctx, n * ITEM_BYTES)
    offsets[i] = off  # NULL when the heap is full: the walk is missing
    if off != devalloc.NULL:
        _walk(states, i, devalloc.view(ctx, off, n, np.int32), True)


@cuda.jit
def walk_count(states, counts):
    """Count pass of the count + scan twin: walk without writing; store the item count."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    n, _ = _walk(states, i, counts[:0], False)
    counts[i] = n


@cuda.jit
def walk_fill(states, counts, starts, compact, absorbed):
    """Fill pass: walk again from the same state, straight into the compact array."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    s = starts[i]
    _, done = _walk(states, i, compact[s:s + counts[i]], True)
    absorbed[i] = done


@cuda.jit
def walk_worst_case(scratch, states, counts, absorbed):
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    n, done = _walk(states, i, scratch[i], True)  # MAX_STEPS items per thread
    counts[i] = n
    absorbed[i] = done


@cuda.jit
def gather_worst_case(scratch, counts, starts, compact):
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    s = starts[i]
    for j in range(counts[i]):
        compact[s + j] = scratch[i, j]


def exact_occupation(sites=SITES, start=START):
    """Return the expected visits to each site 0..sites of one walk (Green's function)."""
    x = np.arange(sites + 1)
    g = 2.0 * np.minimum(start, x) * (sites - np.maximum(start, x)) / sites
    g[0] = g[sites] = 0.0
    return g


#: Seconds per thread on the CUDA simulator, for the demo's time estimate:
#: ``python -m devalloc demo --example ragged_walks --json --threads N`` took
#: 5.3 s at N = 256 and 17.1 s at N = 4096 (wall clock, whole command; 2 CPU
#: cores shared with other jobs, load about 4): (17.1 - 5.3) / 3840.
#: An estimate good to a factor of about 2.
SIM_SECONDS_PER_THREAD = 3.1e-3


#: Heap bytes a thread beyond the first MiB, by default (``_mc.heap_capacity``).
HEAP_PER_THREAD = 512


def worst_case_bytes(threads):
    """Return the bytes the worst-case version preallocates for ``threads``."""
    return threads * MAX_STEPS * ITEM_BYTES


def _starts(counts):
    """Return each walk's place in the compact array (exclusive prefix sum)."""
    starts = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return starts


@dataclass(kw_only=True)
class WalksResult(_mc.Result):
    """The mean walk length, the occupation histogram and the gathered walks."""

    answer_name = "mean walk length (steps)"
    snapshot_label = "before the gather (every trajectory live)"

    #: Visits per walk and site 0..SITES: measured, its error (None for one
    #: walk) and exact.
    histogram: list
    histogram_stderr: list | None
    expected_histogram: list
    items: int
    truncated: int
    #: Every walk's items, one after the other, and each walk's item count.
    compact: np.ndarray
    counts: np.ndarray
    heap_in_use_before_gather: int

    def summary_lines(self):
        lines = [
            f"mean walk length {_mc.pm(self.answer, self.stderr, '.3f')} steps "
            f"(exact {self.expected:.0f}); {self.items} items gathered from "
            f"{self.counts.size} blocks; {self.truncated} walks truncated",
            "visits per walk and site: measured +- error (exact)",
        ]
        h, e, x = self.histogram, self.histogram_stderr, self.expected_histogram
        for a in range(1, SITES, 4):
            lines.append("  " + "   ".join(
                f"{s:2d}: {h[s]:5.2f} +- " + (f"{e[s]:4.2f}" if e else "n/a") + f" ({x[s]:4.2f})"
                for s in range(a, min(a + 4, SITES))))
        return lines


def simulate_exact(lc):
    """Run the count + scan + exact twin; return ``(counts, compact, absorbed)`` on the host.

    Count the items of every walk, scan the counts on the device, read the
    total (one synchronisation), allocate exactly that, walk again into it:
    the compact array is the exact buffer, no gather is needed.
    """
    threads = lc.threads
    lc.say(f"count + scan + exact: {threads} walks counted, scanned, walked again")
    m = lc.begin(_methods.EXACT, twice=True)
    counts_d = cuda.device_array(threads, np.int32)
    lc.launch(walk_count, lc.states(), counts_d)
    offsets, total = lc.scan(counts_d)
    compact_d = lc.exact(m, total, np.int32, counts_d)
    absorbed_d = cuda.device_array(threads, np.bool_)
    lc.launch(walk_fill, lc.states(), counts_d, offsets[:threads], _mc.Whole(compact_d),
              absorbed_d)
    lc.end()
    return counts_d.copy_to_host(), compact_d.copy_to_host()[:total], absorbed_d.copy_to_host()


def simulate(lc, heap):
    """Run both versions and gather on ``lc``'s threads; return their :class:`_mc.Shard`.

    ``heap`` must be empty (just made or reset); a debug heap is checked at
    the end (``HeapCorruption`` if a block was overrun or freed wrongly).
    """
    threads = lc.threads
    lc.say(f"heap version: {threads} walks, each into a block of its own size")
    heap_row = lc.begin(_methods.HEAP, twice=True)  # walk_heap walks twice
    offsets = cuda.device_array(threads, np.int64)
    counts_d = cuda.device_array(threads, np.int32)
    absorbed_d = cuda.device_array(threads, np.bool_)
    lc.launch(walk_heap, heap.ctx, lc.states(), offsets, counts_d, absorbed_d)
    with lc.untimed():
        before_gather = heap.usage()  # every trajectory is live here
    # Every block into one array, freed; a walk the heap could not serve is -1s.
    lc.say(f"gather: {before_gather.live_blocks} blocks")
    compact_d, _ = heap.gather(offsets, counts_d, np.int32, fill=-1)
    lc.synced()  # gather reads the total back, to size the compact array
    lc.launched(gather_launches(threads, compact_d.shape[0]))
    lc.end()
    counts = counts_d.copy_to_host()
    total = int(counts.sum())
    usage = lc.finish(heap, heap.debug)
    heap_row.peak_bytes, heap_row.meta_bytes = usage.peak, heap.meta_bytes
    heap_row.in_use_bytes = before_gather.in_use

    lc.say(f"worst-case version: {threads} x {MAX_STEPS} items")
    lc.begin(_methods.WORST, peak_bytes=worst_case_bytes(threads))
    scratch = cuda.device_array((threads, MAX_STEPS), np.int32)
    counts_ref_d = cuda.device_array(threads, np.int32)
    absorbed_ref_d = cuda.device_array(threads, np.bool_)
    lc.launch(walk_worst_case, scratch, lc.states(), counts_ref_d, absorbed_ref_d)
    counts_ref = counts_ref_d.copy_to_host()
    lc.synced()  # the counts, for the starts
    ref_d = cuda.to_device(np.full(max(int(counts_ref.sum()), 1), -1, np.int32))
    lc.launch(gather_worst_case, scratch, counts_ref_d, cuda.to_device(_starts(counts_ref)),
              _mc.Whole(ref_d))
    lc.end()
    exact = simulate_exact(lc)
    lc.methods[_methods.NRT] = _methods.Method(
        name=_methods.NRT, note="no NRT twin: an np.empty array dies with its thread, and "
        "the walks must live until the gather")

    compact = compact_d.copy_to_host()[:total]
    ref = ref_d.copy_to_host()[:int(counts_ref.sum())]
    absorbed, absorbed_ref = absorbed_d.copy_to_host(), absorbed_ref_d.copy_to_host()
    same = lc.check((counts_ref, ref, absorbed_ref),
                    {_methods.HEAP: (counts, compact, absorbed), _methods.EXACT: exact})
    return lc.shard(
        identical=same,
        arrays={"counts": counts, "compact": compact, "absorbed": absorbed},
        usages={"end": usage, "snapshot": before_gather},
    )


def result(shard):
    """Return the :class:`WalksResult` of a shard (or of shards combined)."""
    threads = shard.threads
    counts, compact = shard.arrays["counts"], shard.arrays["compact"]
    usage, before_gather = shard.usages["end"], shard.usages["snapshot"]
    mean, err = _mc.mean_stderr(counts)
    # Occupation per walk and site: mean and standard error over the walks.
    hist = np.bincount(compact[compact >= 0], minlength=SITES + 1)[: SITES + 1] / max(threads, 1)
    walk_of = np.repeat(np.arange(threads), counts)
    visits = np.zeros((threads, SITES + 1))
    ok = compact >= 0
    np.add.at(visits, (walk_of[ok], compact[ok]), 1.0)
    hist_err = visits.std(axis=0, ddof=1) / math.sqrt(threads) if threads > 1 else None
    return WalksResult(
        threads=threads,
        answer=mean,
        stderr=err,
        expected=float(START * (SITES - START)),
        identical=shard.identical,
        heap_peak_bytes=usage.peak,
        worst_case_bytes=worst_case_bytes(threads),
        usage=usage,
        snapshot=before_gather,
        histogram=hist.tolist(),
        histogram_stderr=None if hist_err is None else hist_err.tolist(),
        expected_histogram=exact_occupation().tolist(),
        items=int(counts.sum()),
        truncated=int((~shard.arrays["absorbed"]).sum()),
        compact=compact,
        counts=counts,
        heap_in_use_before_gather=before_gather.in_use,
        methods=shard.methods,
    )


def run(threads=256, seed=1, *, capacity=None, block=64, progress=None, debug=False,
        profile=False):
    """Run both versions and gather; return a :class:`WalksResult`.

    ``capacity`` defaults to 1 MiB plus 512 bytes per thread. ``progress``
    is told each phase (see :class:`_mc.Runner`). ``debug`` runs the heap
    version on a debug heap and raises ``HeapCorruption`` if it wrote past
    a block or freed wrongly (``Heap.check``).
    """
    lc = _mc.Runner(threads, seed, block, progress)
    return result(simulate(lc, lc.heap(capacity, debug, per_thread=HEAP_PER_THREAD, profile=profile)))


#: Kernel name -> argument words of :func:`_mc.signatures`.
SIGNATURES = {
    "walk_heap": "ctx states int64 int32 boolean",
    "walk_worst_case": "int32[2] states int32 boolean",
    "gather_worst_case": "int32[2] int32 int64 int32",
    "walk_count": "states int32",
    "walk_fill": "states int32 int64 int32 boolean",
}
