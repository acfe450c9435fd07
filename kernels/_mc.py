"""The scaffold every example shares: RNG states, launches, heaps, results, signatures.

An example module defines its kernels, a :class:`Result` subclass with its
own figures, ``SIGNATURES`` (kernel name -> argument types, as words for
:func:`signatures`), ``worst_case_bytes(threads)``, ``SIM_SECONDS_PER_THREAD``,
``HEAP_PER_THREAD`` (its heap's bytes a thread: :func:`heap_capacity`) and
three functions:

* ``simulate(lc, heap)`` runs the heap version (on ``heap``), its
  worst-case twin, its count + scan + exact twin and (on a GPU) its NRT
  twin on the same random numbers, for the threads of the :class:`Runner`
  ``lc``, each between ``lc.begin`` and ``lc.end`` (a row of the
  comparison: :mod:`._metering`, :mod:`._methods`), and returns their
  per-thread outputs as a :class:`Shard`;
* ``result(shard)`` computes the :class:`Result` from a shard (the answer,
  its error, the example's figures) on the host;
* ``run(threads, seed, *, capacity, block, progress, debug, profile)`` is
  ``result(simulate(Runner(...), heap))`` in one process: ``capacity``
  None is a default of the example's; ``progress`` is told each phase (see
  :class:`Runner`); ``debug`` runs the heap version on a debug heap and
  raises ``HeapCorruption`` if it wrote past a block or freed wrongly;
  ``profile`` gives the heap profile counters (``usage().profile``).

The split is what lets ``python -m devalloc demo --workers N``
(:mod:`devalloc.host.distributed`) run the threads as shards on several workers:
a shard's Runner starts at a global thread index, so each thread draws the
same random numbers as in one process; :func:`combine` joins the shards in
thread order, and ``result`` gives the answer a single process gives.
Argument parsing and the choice of GPU or simulator are the command's:
``python -m devalloc demo`` (``python kernels/NAME.py`` runs the same
command for that example).

``rng_states(n, seed)`` returns, as a host array, exactly the states that
``numba.cuda.random.create_xoroshiro128p_states(n, seed)`` puts on the
device: thread ``i`` gets the generator seeded by SplitMix64(``seed``) and
jumped ``i`` times by 2**64 steps (``rng_states(n, seed, start=t0)``: the
states of threads ``t0 .. t0 + n - 1``). Each version uploads its own copy, so
both draw the very same numbers. On the CUDA simulator numba seeds in object
mode (about 12 ms per thread); the same arithmetic on Python integers here
takes well under a millisecond. On a GPU numba's compiled seeding is used.

Importing this module imports numba: call ``devalloc.target.choose()`` first.
"""

import math
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np
from numba import config, cuda
from numba.cuda.random import init_xoroshiro128p_states_cpu, xoroshiro128p_dtype

import devalloc

from . import _methods
from ._metering import (Meter, malloc_bytes, nrt_enabled, precompile,  # noqa: F401
                        resident_threads, signatures)

if config.ENABLE_CUDASIM:
    # The simulator runs numba.cuda.random's wrapping uint64 arithmetic on
    # NumPy scalars (overflow warnings) and its host seeding in object mode.
    from numba.core.errors import NumbaWarning

    warnings.filterwarnings("ignore", message="overflow encountered")
    warnings.filterwarnings("ignore", category=NumbaWarning)

_M64 = (1 << 64) - 1
#: numba.cuda.random's jump polynomial: advance a xoroshiro128+ state by 2**64.
_JUMP = (0xBEAC0467EBA5FACB, 0xD86B048B86AA9922)
#: Simulator launches are cut into about this many pieces when a progress
#: bar is shown, so that it moves (one block at a time runs anyway).
BAR_STEPS = 100


def heap_capacity(threads, per_thread):
    """Return the capacity of an example's heap by default: 1 MiB plus ``per_thread`` a thread.

    ``per_thread`` is the example's ``HEAP_PER_THREAD``; the heap's page is
    ``Heap(page="auto")``'s for that capacity (bench/sweep.py computes the
    heap's peak with the same page).
    """
    return (1 << 20) + per_thread * threads


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & _M64


def _next(s0, s1):
    s1 ^= s0
    return _rotl(s0, 55) ^ s1 ^ ((s1 << 14) & _M64), _rotl(s1, 36)


def _jump(s0, s1):
    t0 = t1 = 0
    for word in _JUMP:
        for b in range(64):
            if (word >> b) & 1:
                t0 ^= s0
                t1 ^= s1
            s0, s1 = _next(s0, s1)
    return t0, t1


def _splitmix64(seed):
    z = (seed + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def rng_states(n, seed, bar=None, start=0):
    """Return ``n`` xoroshiro128+ states (host array) equal to numba's for ``seed``.

    The states of the global threads ``start .. start + n - 1``: numba's
    ``init_xoroshiro128p_states(states, seed, subsequence_start=start)``.
    ``bar``, if given, is told ``update(k)`` as states are made (simulator).
    """
    states = np.empty(n, dtype=xoroshiro128p_dtype)
    if not config.ENABLE_CUDASIM:
        init_xoroshiro128p_states_cpu(states, seed, start)  # compiled: fast
        return states
    s0 = s1 = _splitmix64(int(seed) & _M64)
    for _ in range(start):
        s0, s1 = _jump(s0, s1)
    tick = max(1, n // BAR_STEPS)
    for i in range(n):
        if i:
            s0, s1 = _jump(s0, s1)
        states[i]["s0"] = s0
        states[i]["s1"] = s1
        if bar is not None and (i + 1) % tick == 0:
            bar.update(tick)
    if bar is not None and n % tick:
        bar.update(n % tick)
    return states


def mean_stderr(x):
    """Return the mean of ``x`` and its standard error.

    The error is None (undefined) for fewer than two values, and the mean
    NaN for none.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return math.nan, None
    if x.size == 1:
        return float(x[0]), None
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def pm(value, err, spec=".4f"):
    """Return ``"value +- err"`` formatted with ``spec``; n/a for what is undefined."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if err is None or not math.isfinite(err):
        return f"{value:{spec}} +- n/a (one sample)"
    return f"{value:{spec}} +- {err:{spec}}"


def launch_shape(threads, block):
    """Return ``(grid, block)`` covering ``threads`` threads."""
    block = max(1, min(block, threads))
    return (threads + block - 1) // block, block


class Whole:
    """A kernel argument that :meth:`Runner.launch` passes whole, never cut per thread."""

    def __init__(self, array):
        self.array = array


class Runner(Meter):
    """One run's set-up: launch shape, RNG states, progress, heaps.

    ``progress`` is None (silent) or a callable taking a phase message; if
    it also has ``bar(total, desc)`` (a context manager with ``update(n)``,
    such as a tqdm bar), simulator launches and the seeding report their
    progress there. ``start`` is the global index of the first thread (a
    shard of a larger run): thread ``i`` of the launch draws the random
    numbers of thread ``start + i``.
    """

    def __init__(self, threads, seed, block, progress=None, start=0):
        self.threads = threads
        self.start = start
        self.grid, self.block = launch_shape(threads, block)
        self.progress = progress
        bar = getattr(progress, "bar", None)
        self._bar = bar if bar is not None and config.ENABLE_CUDASIM else None
        with self.bar(threads, "RNG states") as b:
            self.seeds = rng_states(threads, seed, b, start)
        Meter.__init__(self)

    def say(self, msg):
        """Report the start of a phase."""
        if self.progress is not None:
            self.progress(msg)

    def bar(self, total, desc):
        """Return a progress bar (or a do-nothing stand-in) counting ``total`` threads."""
        return self._bar(total, desc) if self._bar else nullcontext(None)

    def states(self):
        """Return a fresh device copy of the RNG states (one per version)."""
        return cuda.to_device(self.seeds)

    def heap(self, capacity, debug=False, per_thread=256, profile=False):
        """Return a new heap (a debug heap if ``debug``, with profile counters if ``profile``).

        ``capacity`` None means 1 MiB plus ``per_thread`` bytes per thread.
        The page is the heap's automatic one (``Heap(page="auto")``: small
        pages for a small heap, so a small run does not hold a 16 KiB page
        per size class it touches).
        """
        return devalloc.Heap(capacity or heap_capacity(self.threads, per_thread), debug=debug,
                             profile=profile, page="auto")

    def finish(self, heap, debug=False):
        """Return ``heap.usage()``; on a debug heap also ``check()`` it (raises on misuse)."""
        usage = heap.usage()
        if debug:
            heap.check()
        return usage

    def launch(self, kernel, *args):
        """Launch ``kernel`` over every thread.

        With a progress bar on the simulator, the launch is cut into about
        BAR_STEPS launches of whole blocks: every argument whose first
        dimension is the thread count is cut to those threads' rows (a
        view: the kernel indexes it by ``cuda.grid(1)``); the rest, and any
        wrapped in :class:`Whole`, are passed whole.
        """
        plain = [a.array if isinstance(a, Whole) else a for a in args]
        self._counted()  # one launch of the method, however it is cut for a bar
        if self._bar is None:
            kernel[self.grid, self.block](*plain)
            return
        rows = [not isinstance(a, Whole) and getattr(a, "shape", (None,))[:1] == (self.threads,)
                for a in args]
        step = self.block * max(1, self.grid // BAR_STEPS)
        with self.bar(self.threads, kernel.__name__) as b:
            for lo in range(0, self.threads, step):
                hi = min(lo + step, self.threads)
                cut = [a[lo:hi] if r else a for a, r in zip(plain, rows)]
                kernel[(hi - lo + self.block - 1) // self.block, self.block](*cut)
                b.update(hi - lo)

    def shard(self, identical, arrays, usages, counts=None):
        """Return the :class:`Shard` of this runner's threads."""
        return Shard(start=self.start, threads=self.threads, identical=bool(identical),
                     arrays=arrays, usages=usages, counts=counts or {},
                     methods=dict(self.methods))


@dataclass(kw_only=True)
class Shard:
    """What ``simulate`` returns for a range of threads: outputs, twin check, heap figures.

    ``arrays`` holds the heap version's outputs in thread order (a value per
    thread, or items of variable count per thread, one thread after the
    other); ``usages`` the heap's :class:`devalloc.Usage` at named moments
    (``end`` always); ``counts`` numbers that add up over shards.
    """

    #: Global index of the first thread, and how many threads.
    start: int
    threads: int
    #: The heap version and its worst-case twin agree bit for bit on these threads.
    identical: bool
    arrays: dict
    usages: dict
    counts: dict = field(default_factory=dict)
    #: Method name -> :class:`_methods.Method`: the comparison's rows.
    methods: dict = field(default_factory=dict)
    #: Set by devalloc.host.distributed: the worker that ran it.
    worker: str | None = None

    def failed(self):
        """Return the allocations that returned NULL (over every usage taken)."""
        return sum(u.failed for u in self.usages.values())


def combine(shards):
    """Join shards that cover threads ``0 .. n - 1`` into one :class:`Shard`.

    Arrays are concatenated in thread order, usages and counts added up
    (:func:`devalloc.host.stats.total_usage`: the figures of all the shards'
    heaps together), ``identical`` holds if it holds for every shard.
    Raises ValueError if the shards leave a gap or overlap.
    """
    from devalloc.host.stats import total_usage

    shards = sorted(shards, key=lambda s: s.start)
    at = 0
    for s in shards:
        if s.start != at:
            raise ValueError(f"shards must cover threads 0.. in order: thread {at} is "
                             f"followed by a shard starting at {s.start}")
        at += s.threads
    first = shards[0]
    return Shard(
        start=0, threads=at, identical=all(s.identical for s in shards),
        arrays={k: np.concatenate([s.arrays[k] for s in shards]) for k in first.arrays},
        usages={k: total_usage([s.usages[k] for s in shards]) for k in first.usages},
        counts={k: sum(s.counts[k] for s in shards) for k in first.counts},
        methods=_methods.combine([s.methods for s in shards]),
    )


@dataclass(kw_only=True)
class Result:
    """What an example's ``run`` returns: its answer, the twin check, the memory figures.

    Subclasses add the example's own figures as fields, name the answer and
    the reference in ``answer_name``/``expected_label``, and write
    :meth:`summary_lines`. ``snapshot`` is the heap's usage at the moment
    the example is most interesting (``snapshot_label`` says which), if any.
    """

    answer_name: ClassVar[str] = "answer"
    expected_label: ClassVar[str] = "exact"
    snapshot_label: ClassVar[str | None] = None

    threads: int
    answer: float
    #: Standard error of ``answer``; None where undefined (fewer than two samples).
    stderr: float | None
    #: The value ``answer`` estimates (None where there is none).
    expected: float | None
    #: The heap version and its worst-case twin agree bit for bit.
    identical: bool
    heap_peak_bytes: int
    worst_case_bytes: int
    #: The heap's usage at the end of the run (a :class:`devalloc.Usage`).
    usage: object
    snapshot: object = None
    #: Method name -> :class:`_methods.Method`: heap, worst case, count + scan, NRT.
    methods: dict = field(default_factory=dict)

    def details(self):
        """Return ``{name: value}`` of the fields a subclass adds."""
        own = {f.name for f in fields(Result)}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in own}

    def summary_lines(self):
        """Return the answer as lines of text."""
        line = f"{self.answer_name}: {pm(self.answer, self.stderr, '.6g')}"
        if self.expected is not None:
            line += f" ({self.expected_label}: {self.expected:.6g})"
        return [line]

