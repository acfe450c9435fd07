"""One run of a scenario: the real device functions, one step at a time.

What runs
---------
The very functions that compile for the GPU: the ``py_func`` of every
``@cuda.jit(device=True)`` dispatcher in every module of the
:mod:`devalloc.device` package (:func:`device_modules`). While a run is in progress (:func:`installed`)
those modules' globals are changed, and restored afterwards:

* ``cuda`` becomes a :class:`FakeCuda`: ``cuda.atomic.*`` are scheduling
  points on the metadata, ``threadfence`` does nothing (the explorer is
  sequentially consistent), ``ffs``/``grid``/``blockIdx`` are computed for
  the logical thread that runs;
* every dispatcher global (``_reserve``, ``_alloc_large``, ``alloc``...)
  becomes its ``py_func``, so device functions call each other directly;
* every ordered atomic and relaxed load or store (``_acquire_cas``,
  ``_load``..., :data:`devalloc.sim.ordered.KINDS`) becomes one scheduling
  point of its kind, like ``cuda.atomic.*`` and ``meta[i]`` (the explorer
  is sequentially consistent: acquire and release change nothing here);
* ``warp`` becomes a :class:`~devalloc.testing.groups.FakeWarp`: a thread is
  a lane alone, or acts for a whole warp group in the ``alloc_group`` and
  ``free_group`` operations (:mod:`devalloc.testing.groups`).

No seam in the device modules was needed: this is the CUDA simulator's own
trick (run ``py_func`` with the ``cuda`` global swapped), with a scheduler
in place of the simulator's free-running threads. The metadata is a
:class:`SharedMeta` whose plain loads and stores (``meta[i]``) and atomics
are scheduling points; the arena is a NumPy ``uint8`` array. Both are laid
out as :class:`devalloc.Heap` lays them out (sizes from
:mod:`devalloc.layout`).

How it runs
-----------
Each logical thread is a greenlet (a coroutine with its own stack, the
``greenlet`` package: no OS thread, so a switch costs about a microsecond):
it runs only when the scheduler switches to it, up to its next scheduling
point, where it announces the access it is about to make and switches back.
Exactly one thread runs at a time, so a run is a sequence of *steps* (one
access each, plus the local code up to the next access), and a *schedule*
is the sequence of thread numbers chosen at each step. :class:`Machine`
runs steps, keeps the sequential model of the history
(:class:`~devalloc.testing.invariants.Model`) and checks the invariants;
:mod:`devalloc.testing.explorer` decides which schedules to run.

Longer than 500 lines because the fake device (:class:`FakeCuda`,
:class:`SharedMeta`), installing it into the device modules
(:func:`installed`, :class:`FakeApi`) and the :class:`Machine` that steps
the logical threads share one scheduler state (the running logical thread,
``_tls.thread``) and one rule (which globals of the device modules are
swapped while a run is in progress); each section is one of them. Choosing
the runs is apart (:mod:`.explorer`), so are the model and the checks
(:mod:`.invariants`) and warp groups (:mod:`.groups`).
"""

import contextlib
import functools
import sys
import threading
import types
from collections import namedtuple
from dataclasses import dataclass

import greenlet
import numpy as np
from numba.core import types as numba_types

from .. import layout as L
from ..host.heap import free_index_template
from . import groups
from .room import could_serve
from .invariants import (INT64_MAX, INT64_MIN, Fault, Model, check_drained, check_quiescent,
                         check_safe, pages_moved, word_name)

Dim3 = namedtuple("Dim3", "x y z")

#: Seconds to wait for another exploration to leave the device modules.
STEP_TIMEOUT = 60.0
#: Steps after which one schedule is declared not to make progress.
MAX_STEPS = 5000

_MASK64 = (1 << 64) - 1
_tls = threading.local()
_INSTALL_LOCK = threading.Lock()


class _Abort(BaseException):
    """Raised in a parked thread to unwind it when its schedule is dropped."""


# ------------------------------------------------------------------ programs

@dataclass(frozen=True)
class ThreadSpec:
    """One logical thread: its ``blockIdx.x``, ``threadIdx.x`` and program.

    Operations (``i`` numbers the thread's own allocations, from 0):
    ``("alloc", n)``; ``("free", i)``; ``("write", i)`` and ``("verify", i)``
    fill block ``i`` with the thread's byte pattern, check it is intact;
    ``("free_interior", i)`` frees ``16`` bytes into live block ``i`` (an
    invalid free that reads the pinned page's state); ``("free_bogus", off)``
    frees an offset that is never a block (misaligned or outside).
    ``("alloc_group", n, k)``: ``k`` lanes of a warp allocate ``n`` (small)
    bytes together, one group, allocations numbered in lane order;
    ``("free_group", (i, j, ...))``: lanes free those allocations (of one
    size) together, grouped by bitmap word (:mod:`devalloc.testing.groups`).
    ``("bump", n)``: a bump allocation, numbered like an alloc (it may be
    written and verified, never freed). ``("scope", (n1, n2, ...))``: open a
    scope, take scoped scratch of each size (each written with the thread's
    pattern), verify them all, release the scope: its chunks are heap blocks
    the model tracks, taken and freed through the public ``alloc``/``free``.
    ``("realloc", i, n)``: ``devalloc.realloc`` of allocation ``i`` to ``n``
    bytes (the porting API): in place, or a new block (numbered ``i`` too),
    the copy and the old block's free, each told to the model; afterwards
    ``write``/``verify`` of ``i`` cover the first ``min(old, n)`` bytes, so a
    ``verify`` checks that the copy kept them.
    """

    block: int
    thread: int
    ops: tuple


@dataclass(frozen=True)
class Scenario:
    """A configuration: heap pages, block size (threads per block), threads."""

    name: str
    npages: int
    threads: tuple
    block_dim: int = 32
    #: Allocations each page has served before the run (state word count
    #: field); COUNT_FOLD - 1 makes the first allocation per page fold.
    preset_count: int = 0
    #: Every allocation must be served: the programs never ask for more
    #: than the heap holds at once, whatever the interleaving.
    no_nulls: bool = False
    #: The heap's spread bound (H_SPREAD_MAX, log2 of hint slots per class)
    #: and every class's spread at the start (log2 of its slots in use).
    spread_max: int = 0
    preset_spread: int = 0
    #: Module constants replaced while this scenario runs, as (name, value)
    #: pairs, e.g. ("SLAB_TRIES", 1): a contended slab passed over after one
    #: lost ``cas``, which two threads reach in a few steps.
    constants: tuple = ()
    #: The heap's page shift (pages of 2**page_shift bytes, ``Heap(page=)``):
    #: its metadata is laid out for it, and the device code reads it from
    #: the metadata's length as on a GPU.
    page_shift: int = L.PAGE_SHIFT

    def __post_init__(self):
        if not L.PAGE_SHIFT_MIN <= self.page_shift <= L.PAGE_SHIFT:
            raise ValueError(f"scenario {self.name}: page_shift {self.page_shift} is not "
                             f"in [{L.PAGE_SHIFT_MIN}, {L.PAGE_SHIFT}]")
        for k, t in enumerate(self.threads):
            _check_program(f"{self.name} T{k}", t.ops, self.page_shift)

    def describe(self):
        page = "" if self.page_shift == L.PAGE_SHIFT else f" of {1 << self.page_shift} bytes"
        lines = [f"scenario {self.name}: {self.npages} page(s){page}, "
                 f"blockDim.x = {self.block_dim}"]
        for k, t in enumerate(self.threads):
            ops = ", ".join(op_str(op) for op in t.ops)
            lines.append(f"  T{k} (block {t.block}, thread {t.thread}): {ops}")
        return "\n".join(lines)


def _check_program(who, ops, ps=L.PAGE_SHIFT):
    """Refuse programs whose checks would be meaningless (see ThreadSpec);
    small sizes are those of pages of ``2**ps`` bytes."""
    allocs = []  # size of each allocation, by number
    written, freed = set(), set()
    bumps = set()
    for op in ops:
        kind = op[0]
        if kind == "alloc":
            allocs.append(op[1])
            continue
        if kind == "bump":
            bumps.add(len(allocs))
            allocs.append(op[1])
            continue
        if kind == "scope":
            if not op[1] or any(not 0 < n <= L.max_small(ps) for n in op[1]):
                raise ValueError(f"{who}: {op_str(op)}: one or more small sizes")
            continue
        if kind == "alloc_group":
            if not (0 < op[1] <= L.max_small(ps) and 2 <= op[2] <= 32):
                raise ValueError(f"{who}: {op_str(op)}: groups are 2-32 lanes, small blocks")
            allocs += [op[1]] * op[2]
            continue
        if kind == "free_group":
            named = op[1]
            if (len(named) < 2 or len(set(named)) != len(named)
                    or any(not 0 <= i < len(allocs) or i in freed for i in named)
                    or len({allocs[i] for i in named}) != 1):
                raise ValueError(f"{who}: {op_str(op)} needs two or more live "
                                 "allocations of its own, of one size")
            freed.update(named)
            continue
        if kind == "free_bogus":
            if op[1] >= 0 and op[1] % L.ALIGN == 0:
                raise ValueError(f"{who}: free_bogus({op[1]}) may name a real block")
            continue
        if kind == "realloc":
            i = op[1]
            if not 0 <= i < len(allocs) or i in freed or i in bumps or op[2] <= 0:
                raise ValueError(f"{who}: {op_str(op)} needs a live allocation of its "
                                 "own (not a bump) and a size > 0")
            continue
        i = op[1]
        if not 0 <= i < len(allocs) or i in freed:
            raise ValueError(f"{who}: {op_str(op)} names no live allocation of its own")
        if kind == "write":
            written.add(i)
        elif kind == "verify":
            if i not in written:
                raise ValueError(f"{who}: verify(#{i}) before write(#{i})")
        elif kind == "free":
            if i in bumps:
                raise ValueError(f"{who}: {op_str(op)} frees a bump block")
            freed.add(i)
        elif kind != "free_interior":
            raise ValueError(f"{who}: unknown operation {op!r}")


def op_str(op):
    kind = op[0]
    if kind == "alloc":
        return f"alloc({op[1]})"
    if kind == "alloc_group":
        return f"alloc({op[1]}) x{op[2]} lanes"
    if kind == "free_group":
        return "free(" + ", ".join(f"#{i}" for i in op[1]) + ")"
    if kind == "free_bogus":
        return f"free({op[1]})"
    if kind == "bump":
        return f"bump({op[1]})"
    if kind == "scope":
        return "scope(" + ", ".join(str(n) for n in op[1]) + ")"
    if kind == "realloc":
        return f"realloc(#{op[1]}, {op[2]})"
    return f"{kind}(#{op[1]})"


# ------------------------------------------------------------ fake device

class _FakeAtomic:
    """``cuda.atomic`` for explored code: each call is one scheduling point."""

    def add(self, ary, idx, val):
        return ary.access("add", idx, val)

    def sub(self, ary, idx, val):
        return ary.access("add", idx, -val)

    def or_(self, ary, idx, val):
        return ary.access("or", idx, val)

    def and_(self, ary, idx, val):
        return ary.access("and", idx, val)

    def xor(self, ary, idx, val):
        return ary.access("xor", idx, val)

    def max(self, ary, idx, val):
        return ary.access("max", idx, val)

    def min(self, ary, idx, val):
        return ary.access("min", idx, val)

    def exch(self, ary, idx, val):
        return ary.access("exch", idx, val)

    def cas(self, ary, idx, old, val):
        return ary.access("cas", idx, old, val)


class FakeCuda:
    """The ``cuda`` module as explored device code sees it (one per run)."""

    def __init__(self):
        self.atomic = _FakeAtomic()

    @property
    def blockIdx(self):
        return _tls.thread.blockIdx

    @property
    def threadIdx(self):
        return _tls.thread.threadIdx

    @property
    def blockDim(self):
        return _tls.thread.blockDim

    def grid(self, ndim):
        t = _tls.thread
        if ndim != 1:
            raise NotImplementedError("the explorer's threads are 1-D")
        return t.blockIdx.x * t.blockDim.x + t.threadIdx.x

    def threadfence(self):
        # Sequential consistency: every access is already globally ordered.
        pass

    def ffs(self, x):
        x = int(x) & 0xFFFFFFFF
        return (x & -x).bit_length()

    def clz(self, x):
        # 32-bit operands only (as devalloc's device code passes them).
        return 32 - (int(x) & 0xFFFFFFFF).bit_length()

    def __getattr__(self, name):
        raise AttributeError(
            f"the explorer's fake cuda module has no {name!r}: device code "
            "uses an API devalloc.testing.machine.FakeCuda does not model yet")


def _apply(kind, old, a, b):
    if kind == "load":
        return old
    if kind in ("store", "exch"):
        return a
    if kind == "add":
        return old + a
    if kind == "or":
        return old | a
    if kind == "and":
        return old & a
    if kind == "xor":
        return old ^ a
    if kind == "max":
        return max(old, a)
    if kind == "min":
        return min(old, a)
    if kind == "cas":
        return b if old == a else old
    raise ValueError(kind)


def _word_hash(i, v):
    """Return two independent 64-bit hashes of word ``i`` holding ``v``."""
    return hash((i, v)) & _MASK64, hash((v, i, 0x9E3779B9)) & _MASK64


class WordArray:
    """An ``int64`` metadata array whose every element access is a method
    call: ``meta[i]`` is ``access("load", i)``, ``meta[i] = v`` is
    ``access("store", i, v)``; atomics call ``access`` too. Subclasses
    define ``words`` and ``access``."""

    def __len__(self):
        return len(self.words)

    def __getitem__(self, i):
        return self.access("load", i)

    def __setitem__(self, i, v):
        self.access("store", i, v)


class SharedMeta(WordArray):
    """The ``int64`` metadata as explored code sees it: every access a step."""

    def __init__(self, machine, nwords):
        self.machine = machine
        self.words = [0] * nwords
        self.shape = (nwords,)
        self.pages_used_max = 0
        self.digest = (0, 0)  # Zobrist: XOR of _word_hash over the words (see rehash)
        # How many words are outside int64, kept up to date at every write
        # (see recount): check_safe skips its scan of every word while it is 0.
        self.outside = 0

    def recount(self):
        """Recompute :attr:`outside` from every word (after writing ``words`` directly)."""
        self.outside = sum(not INT64_MIN <= v <= INT64_MAX for v in self.words)

    def rehash(self):
        """Recompute :attr:`digest` from every word (after writing ``words`` directly)."""
        a = b = 0
        for i, v in enumerate(self.words):
            if v:
                ha, hb = _word_hash(i, v)
                a ^= ha
                b ^= hb
        self.digest = (a, b)

    def access(self, kind, i, a=None, b=None):
        """Make one access as the calling logical thread (a scheduling point)."""
        m = self.machine
        i = int(i)
        a = None if a is None else int(a)
        b = None if b is None else int(b)
        if not 0 <= i < len(self.words):
            raise Fault("bounds", f"{kind} of metadata word {i}, outside [0, {len(self.words)})")
        if m.serial:
            t = None
        else:
            t = _tls.thread
            frame = sys._getframe(2)
            code = frame.f_code
            m.points.add((code.co_filename, frame.f_lineno))
            m.park(t, (kind, i, code.co_name, frame.f_lineno))
        old = self.words[i]
        new = _apply(kind, old, a, b)
        if new != old:
            self.words[i] = new
            if not INT64_MIN <= new <= INT64_MAX or not INT64_MIN <= old <= INT64_MAX:
                self.outside += (not INT64_MIN <= new <= INT64_MAX) - (
                    not INT64_MIN <= old <= INT64_MAX)
            # Keep the digest of the words up to date: O(1) per access.
            ha, hb = _word_hash(i, old) if old else (0, 0)
            na, nb = _word_hash(i, new) if new else (0, 0)
            self.digest = (self.digest[0] ^ ha ^ na, self.digest[1] ^ hb ^ nb)
        if i == L.H_PAGES_USED and new > self.pages_used_max:
            self.pages_used_max = new
        ret = None if kind == "store" else old
        if t is not None:
            t.hist = hash((t.hist, kind, i, ret))
            if not t.touched:
                t.touched = True
                t.events.append(("touch",))
            m.trace.append((t.tid, t.op_desc, t.pending[2], t.pending[3], kind, i, a, b, old, new))
        return ret


class LThread:
    """A logical GPU thread: identity, program, baton and what it observed."""

    def __init__(self, tid, spec, block_dim, machine):
        self.tid = tid
        self.spec = spec
        self.blockIdx = Dim3(spec.block, 0, 0)
        self.threadIdx = Dim3(spec.thread, 0, 0)
        self.blockDim = Dim3(block_dim, 1, 1)
        self.machine = machine
        self.glet = None  # the greenlet running the program, one per run
        self.reset()
        self.finished = True  # idle until a run starts

    def reset(self):
        self.hist = 0
        self.pending = None
        self.finished = False
        self.abort = False
        self.error = None
        self.touched = True
        self.events = []
        self.offs = []
        self.op_desc = ""
        self.group = None  # a groups.GroupRun during a group operation
        self.chunks = 0  # scoped chunks taken (their model numbers are -1, -2...)
        self.scoped_calls = 0  # scoped() calls made, and the one in which
        self.null_in = -1  # a chunk alloc last returned NULL (-1: none)
        self.resizing = -1  # the allocation a realloc operation is resizing
        self.unwritten = set()  # allocations a realloc of NULL made: nothing to verify
        self.asking = None  # the size of the alloc in progress (NULL watch)
        self.asking_own = 0  # pages its own earlier rounds may hold
        self.full_seen = False  # the model had no room for it at some step


# ------------------------------------------------------------- installing

def _is_dispatcher(v):
    return hasattr(v, "py_func") and callable(v) and not isinstance(v, type)


def _access_point(kind):
    """Return the explored stand-in of an ordered atomic or relaxed access."""

    def access(meta, i, *vals):
        return meta.access(kind, i, *vals)

    return access


def _ordered_stand_ins():
    from ..sim.ordered import KINDS

    return {name: _access_point(kind) for name, kind in KINDS.items()}


def rebind(fn, module):
    """Return ``fn`` with ``module``'s globals: a drop-in for one of its functions."""
    return types.FunctionType(fn.__code__, module.__dict__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def device_modules():
    """Return the modules whose device functions the explorer runs: all of
    :mod:`devalloc.device` (``devalloc.device.MODULES`` lists them)."""
    import importlib

    from .. import device

    return tuple(importlib.import_module(f"{device.__name__}.{name}")
                 for name in device.MODULES)


@contextlib.contextmanager
def installed(overrides=None):
    """Run device code as plain Python on a :class:`FakeCuda`, then restore.

    In every module of :func:`device_modules`: the global
    ``cuda`` becomes a fresh :class:`FakeCuda`, every dispatcher global its
    ``py_func``, every numba integer type (``int64(x)``...) the NumPy type
    that calling it returns (numba's ``cast_python_value``, without its
    dispatch: a third of the explorer's time), and each ``overrides[name]``
    (a plain function, e.g. from
    :mod:`devalloc.testing.broken`) replaces ``name`` wherever it is a global,
    rebound to the globals of the module that defines ``name`` (so it sees
    what the function it replaces sees); an override that is not a function
    (a module constant such as ``SLAB_TRIES``) is set as it is. Yields the
    fake module. One at a time.
    """
    overrides = dict(overrides or {})
    ordered = _ordered_stand_ins()
    fake = FakeCuda()
    fake_warp = groups.FakeWarp(lambda: getattr(_tls, "thread", None))
    from ..device import api as real_api
    from ..device import chunks as real_chunks

    fake_api = FakeApi(real_api, real_chunks)
    saved = []
    if not _INSTALL_LOCK.acquire(timeout=STEP_TIMEOUT):
        raise RuntimeError("another exploration holds the device modules")
    try:
        home = {}
        # id of an overridden dispatcher -> its name: another global bound to
        # the same object is an alias (``bump_site = outline(bump)``, the
        # function itself on the simulator) and is overridden with it.
        aliased = {}
        for mod in device_modules():
            for name in overrides:
                v = mod.__dict__.get(name)
                if not callable(overrides[name]):
                    home[name] = overrides[name]
                elif _is_dispatcher(v) and v.py_func.__module__ == mod.__name__:
                    home[name] = rebind(overrides[name], mod)
                    aliased[id(v)] = name
        for mod in device_modules():
            g = mod.__dict__
            if "cuda" in g and not isinstance(g["cuda"], types.ModuleType):
                raise RuntimeError(
                    f"{mod.__name__}.cuda is {g.get('cuda')!r}, not the numba.cuda "
                    "module: is a simulated kernel running?")
            for name, v in list(g.items()):
                new = None
                if name == "cuda":
                    new = fake
                elif name == "warp" and isinstance(v, types.ModuleType):
                    new = fake_warp
                elif (name, v) in (("api", real_api), ("chunks", real_chunks)):
                    new = fake_api
                elif _is_dispatcher(v):
                    new = v.py_func
                elif name in ordered and callable(v):
                    new = ordered[name]
                elif isinstance(v, numba_types.Integer):
                    new = getattr(np, v.name)
                if name in overrides:
                    new = home[name] if name in home else rebind(overrides[name], mod)
                elif id(v) in aliased:
                    new = home[aliased[id(v)]]
                if new is not None:
                    saved.append((g, name, v))
                    g[name] = new
        missing = set(overrides) - {name for _, name, _ in saved}
        if missing:
            raise KeyError(f"no device function named {sorted(missing)}")
        yield fake
    finally:
        for g, name, v in reversed(saved):
            g[name] = v
        _INSTALL_LOCK.release()


class FakeApi:
    """The device API (:mod:`~devalloc.device.api`, :mod:`~devalloc.device.chunks`) while exploring.

    Stands for both modules' globals (``api`` in the porting API, ``chunks``
    in scoped scratch). The real ``chunk_alloc``/``chunk_free`` (so the real
    device code runs), with each chunk they take or give back told to the
    model as an operation of its own: a chunk is a heap block like any other
    until ``usage()`` reports it apart.
    """

    def __init__(self, api, chunks):
        self._api = api
        self._chunks = chunks
        self.scratch_poison = chunks.scratch_poison
        self.scratch_check = chunks.scratch_check

    def chunk_alloc(self, ctx, nbytes):
        t = _tls.thread
        if t.null_in == t.scoped_calls:
            # scoped's retry with a smaller chunk: it takes the first
            # failure back (one request, one count), after this alloc.
            t.events.append(("unfail",))
        t.chunks += 1
        t.events.append(("start", "alloc", (), 1))
        t.touched = False
        off = int(self._chunks.chunk_alloc(ctx, nbytes))
        t.events.append(("alloc", -t.chunks, int(nbytes), off, True))
        t.null_in = t.scoped_calls if off == L.NULL else -1
        return off

    def chunk_free(self, ctx, off):
        t = _tls.thread
        t.events.append(("start", "free", (int(off),), 1))
        t.touched = False
        self._chunks.chunk_free(ctx, off)
        t.events.append(("free", "free"))

    # The porting API's own alloc and free (realloc's new block and its free
    # of the old one): the real ones, each told to the model as an
    # operation, the new block numbered as the allocation being resized.
    # Its NULL is watched like an alloc's (issue 25: NULL only when full).
    def alloc(self, ctx, nbytes):
        t = _tls.thread
        n = int(nbytes)
        t.machine._ask(t, n, 0)
        t.events.append(("start", "alloc", (), 1, pages_moved(n, t.machine.ps)))
        t.touched = False
        off = int(self._api.alloc(ctx, nbytes))
        t.machine._answered(t, [off], f"realloc's alloc({n})")
        t.events.append(("alloc", t.resizing, n, off))
        return off

    def free(self, ctx, off):
        t = _tls.thread
        t.events.append(("start", "free", (int(off),), 1))
        t.touched = False
        self._api.free(ctx, off)
        t.events.append(("free", "free"))


# ---------------------------------------------------------------- machine

class Machine:
    """One scenario's threads, heap and model; runs schedules step by step.

    Use inside :func:`installed`. :meth:`reset` starts a fresh run with every
    thread parked at its first scheduling point; :meth:`step` runs one
    thread to its next one; :meth:`close` ends the worker threads.
    """

    def __init__(self, scenario):
        from ..ctx import Ctx
        from ..device import core

        self.scenario = scenario
        self.npages = scenario.npages
        self.ps = scenario.page_shift  # pages of 2**ps bytes
        self.alloc = core.alloc  # the py_funcs, once installed
        self.free = core.free
        bump_mod = sys.modules[f"{core.__package__}.bumpalloc"]
        scope_mod = sys.modules[f"{core.__package__}.scope"]
        self.bump = bump_mod.bump
        self.mark, self.scoped, self.release = scope_mod.mark, scope_mod.scoped, scope_mod.release
        self.realloc = sys.modules[f"{core.__package__}.porting"]._realloc_normal
        if _is_dispatcher(self.alloc):
            raise RuntimeError("Machine must be created inside explorer.installed()")
        self._Ctx = Ctx
        self.main = greenlet.getcurrent()  # the scheduler
        self.serial = False
        self.points = set()  # (file, line) of every access site executed
        self.threads = [LThread(k, spec, scenario.block_dim, self)
                        for k, spec in enumerate(scenario.threads)]
        self.drainer = LThread(-1, ThreadSpec(0, 0, ()), scenario.block_dim, self)
        self.meta = None
        self._digest0 = None
        self._outside0 = None
        # NULL means full (room.py): watched where the model knows every
        # page's use (bump chunks and scoped chunks hold pages it does not).
        self.watch_nulls = not any(op[0] in ("bump", "scope")
                                   for spec in scenario.threads for op in spec.ops)

    # ------------------------------------------------------ worker side
    def park(self, t, pending):
        """Announce ``pending``, hand the baton back, wait to be chosen."""
        t.pending = pending
        self.main.switch()
        if t.abort:
            raise _Abort()

    def _work(self, t):
        # The body of thread t's greenlet: its program, once.
        try:
            self._program(t)
        except _Abort:
            pass
        except greenlet.GreenletExit:  # dropped with its machine
            pass
        except BaseException as e:  # reported by the scheduler
            t.error = e
        t.pending = None
        t.finished = True

    def _program(self, t):
        ctx = self.ctx
        for k, op in enumerate(t.spec.ops):
            kind = op[0]
            t.op_desc = f"#{k} {op_str(op)}"
            t.touched = False
            # Between operations a thread's future depends only on where it
            # is and what its allocations returned: forget the rest.
            t.hist = hash(("op", k, tuple(t.offs)))
            if kind == "alloc":
                self._ask(t, op[1], 0)
                t.events.append(("start", "alloc", (), 1, pages_moved(op[1], self.ps)))
                off = int(self.alloc(ctx, op[1]))
                self._answered(t, [off], f"alloc({op[1]})")
                t.events.append(("alloc", len(t.offs), op[1], off))
                self._returned(t, off)
                t.offs.append(off)
                if off == L.NULL and self.scenario.no_nulls:
                    raise Fault("served", f"T{t.tid}'s alloc({op[1]}) returned NULL, but "
                                "this scenario always leaves room for it")
            elif kind == "alloc_group":
                self._ask(t, op[1], op[2] - 1)
                t.events.append(("start", "alloc", (), op[2]))
                offs = groups.alloc_group(self, t, op[1], op[2])
                self._answered(t, offs, f"alloc_group({op[1]}, {op[2]})")
                for off in offs:
                    t.events.append(("alloc", len(t.offs), op[1], off))
                    t.offs.append(off)
                self._returned(t, offs)
            elif kind == "free":
                off = t.offs[op[1]]
                t.events.append(("start", "free", (off,), 1))
                self.free(ctx, off)
                t.events.append(("free", "free"))
                self._returned(t, None)
            elif kind == "free_group":
                blocks = [(t.offs[i], self._alloc_size(t, i)) for i in op[1]
                          if t.offs[i] != L.NULL]  # free(NULL): no group, nothing
                for lanes in groups.word_groups(blocks, self.ps):
                    # Each word's group is an operation of its own: its
                    # blocks leave the live set at its own first access.
                    t.touched = False
                    t.events.append(("start", "free", [off for off, _ in lanes], len(lanes)))
                    groups.free_word_group(self, t, lanes)
                    t.events += [("free", "free")] * len(lanes)
                self._returned(t, None)
            elif kind in ("free_interior", "free_bogus"):
                if kind == "free_bogus":
                    off = op[1]
                elif t.offs[op[1]] == L.NULL:
                    off = 8  # misaligned: invalid whatever the heap holds
                else:
                    off = t.offs[op[1]] + 16
                t.events.append(("start", "invalid", (), 1))
                self.free(ctx, off)
                t.events.append(("free", "invalid"))
                self._returned(t, None)
            elif kind == "bump":
                t.events.append(("start", "bump", (), 1))
                off = int(self.bump(ctx, op[1]))
                t.events.append(("bump", len(t.offs), op[1], off))
                self._returned(t, off)
                t.offs.append(off)
            elif kind == "scope":
                self._scope(t, k, op[1])
            elif kind == "realloc":
                if t.offs[op[1]] == L.NULL:
                    t.unwritten.add(op[1])  # realloc(NULL) is alloc: a fresh block
                t.resizing = op[1]
                off = int(self.realloc(ctx, t.offs[op[1]], op[2]))
                t.resizing = -1
                if off != L.NULL:
                    t.offs[op[1]] = off
                self._returned(t, off)
            elif kind in ("write", "verify"):
                off = t.offs[op[1]]
                if off == L.NULL or (kind == "verify" and op[1] in t.unwritten):
                    continue
                t.unwritten.discard(op[1])
                n = self._alloc_size(t, op[1])
                self.park(t, (kind, off, "program", 0))
                key = (t.tid * 37 + op[1] * 11 + 1) & 0xFF
                block = self.arena[off:off + n]
                ok = True
                if kind == "write":
                    block[:] = key
                else:
                    ok = bool((block == key).all())
                    if not ok:
                        t.events.append(("corrupt", off, n))
                t.hist = hash((t.hist, kind, ok))  # the thread moved on
                self.trace.append((t.tid, t.op_desc, "program", 0, kind, off, n, None, None, None))
            else:
                raise ValueError(f"unknown operation {op!r}")

    def _scope(self, t, k, sizes):
        """Run a ``("scope", sizes)`` operation: mark, scoped each, verify, release."""
        ctx = self.ctx
        t.events.append(("scope", True))
        m = int(self.mark(ctx, L.SCOPE_NONE))
        s = m
        got = []
        for j, n in enumerate(sizes):
            t.scoped_calls += 1
            off, s = self.scoped(ctx, s, n)
            off, s = int(off), int(s)
            if off != L.NULL:
                key = (t.tid * 37 + (k * 8 + j) * 11 + 5) & 0xFF
                self.arena[off:off + n] = key
                got.append((off, n, key))
        if got:
            self.park(t, ("verify", got[0][0], "program", 0))
        for off, n, key in got:
            if not (self.arena[off:off + n] == key).all():
                t.events.append(("corrupt", off, n))
        s = int(self.release(ctx, s, m))
        if s != L.SCOPE_NONE:
            raise Fault("scope", f"release of the outermost scope returned state {s}")
        t.events.append(("scope", False))
        self._returned(t, [off for off, _, _ in got])

    # ------------------------------------------ NULL means full (issue 25)
    def _ask(self, t, size, own):
        """Thread ``t`` starts an allocation of ``size``: watch the model's room."""
        if not self.watch_nulls:
            return
        self._events(t)  # its own earlier operations, as the model has them
        t.asking, t.asking_own, t.full_seen = size, own, False
        self._watch()

    def _watch(self):
        """After a step: note every watched allocation for which the model has no room."""
        for u in self.threads:
            if u.asking is not None and not u.full_seen:
                key = (u.asking, u.tid, u.asking_own)
                room = self._room.get(key)
                if room is None:
                    room = self._room[key] = could_serve(self.model, *key)
                u.full_seen = not room

    def _answered(self, t, offs, what):
        """Thread ``t``'s allocation returned ``offs``: a NULL needs a step without room."""
        if not self.watch_nulls:
            return
        self._watch()  # the call's last moment
        seen, t.asking = t.full_seen, None
        if L.NULL in offs and not seen:
            raise Fault("null means full", f"T{t.tid}'s {what} returned NULL, but at every "
                        "step of the call the model had room for it beyond one page per "
                        "racing operation")

    def _returned(self, t, value):
        self.trace.append((t.tid, t.op_desc, None, None, "=", None, None, None, None, value))

    @staticmethod
    def _alloc_size(t, i):
        """Return the size thread ``t``'s allocation number ``i`` asked for."""
        sizes = []
        for op in t.spec.ops:
            if op[0] in ("alloc", "bump"):
                sizes.append(op[1])
            elif op[0] == "alloc_group":
                sizes += [op[1]] * op[2]
            elif op[0] == "realloc":
                # What the block holds for sure: the old size if realloc
                # failed, the new one if it did not (and the copy, min of both).
                sizes[op[1]] = min(sizes[op[1]], op[2])
        return sizes[i]

    # --------------------------------------------------- scheduler side
    def reset(self):
        """Start a fresh run: zeroed heap, every thread at its first point."""
        self.meta = SharedMeta(self, L.meta_words(self.npages, self.ps))
        preset = self.scenario.preset_count
        for p in range(self.npages):
            self.meta.words[L.STATE_BASE + p] = L.pack_state(L.TAG_FREE, 0, preset)
        at = L.free_tree(self.npages, self.ps)  # every page free, as Heap sets it
        self.meta.words[L.H_SPREAD_MAX] = self.scenario.spread_max
        for c in range(L.NCLASSES):
            self.meta.words[L.spread_word(c)] = self.scenario.preset_spread
        self.meta.words[at:at + L.tree_words(self.npages)] = free_index_template(self.npages).tolist()
        if self._digest0 is None:  # every run starts from the same words
            self.meta.rehash()
            self.meta.recount()
            self._digest0 = self.meta.digest
            self._outside0 = self.meta.outside
        self.meta.digest = self._digest0
        self.meta.outside = self._outside0
        self.arena = np.zeros(self.npages << self.ps, np.uint8)
        self.ctx = self._Ctx(self.arena, self.meta)
        self.model = Model(self.npages, base=preset * self.npages, ps=self.ps)
        self._room = {}  # (size, tid, own) -> room.could_serve, until the model changes
        self.trace = []
        self.choices = []
        for t in self.threads:
            t.reset()
            t.glet = greenlet.greenlet(functools.partial(self._work, t), parent=self.main)
            self._run(t)
            self._after(t)

    def _run(self, t):
        """Run thread ``t`` up to its next scheduling point (or its end)."""
        _tls.thread = t
        try:
            t.glet.switch()
        finally:
            _tls.thread = None

    def enabled(self):
        return [t.tid for t in self.threads if not t.finished]

    def step(self, tid):
        """Let thread ``tid`` make its pending access and run to its next point."""
        t = self.threads[tid]
        self.choices.append(tid)
        self._run(t)
        self._after(t)

    def _after(self, t):
        """Take in what thread ``t`` did in its last stretch; raise its error."""
        self._events(t)
        if self.watch_nulls:
            self._watch()
        if t.error is not None:
            e, t.error = t.error, None
            if isinstance(e, Fault):
                raise e
            raise Fault("exception", f"T{t.tid} raised {type(e).__name__}: {e}") from e

    def _events(self, t):
        m = self.model
        if t.events:
            self._room = {}  # the model changes: its room is to be asked again
        for ev in t.events:
            kind = ev[0]
            if kind == "touch":
                m.touch(t.tid)
            elif kind == "start":
                m.start(t.tid, ev[1], [m.live.get(off) for off in ev[2]], ev[3], *ev[4:])
            elif kind == "alloc":
                m.alloc_done(t.tid, *ev[1:])
            elif kind == "bump":
                m.bump_done(t.tid, ev[1], ev[2], ev[3])
            elif kind == "scope":
                m.scoping(t.tid, ev[1])
            elif kind == "unfail":
                m.failed -= 1
            elif kind == "free":
                m.free_done(t.tid, ev[1])
            elif kind == "corrupt":
                raise Fault("block contents", f"T{t.tid}'s block at {ev[1]} ({ev[2]} "
                            "bytes) no longer holds the pattern its owner wrote")
        t.events.clear()

    def key(self):
        """Return a 128-bit digest of the state (words, histories, peak mark)."""
        k = (self.meta.digest, tuple((t.hist, t.touched) for t in self.threads),
             self.meta.pages_used_max)
        return ((hash(k) & _MASK64) << 64) | (hash((k, 0x9E3779B9)) & _MASK64)

    def check(self):
        """Check the invariants of the current state (strong ones if quiescent)."""
        w = self.meta.words
        check_safe(w, self.npages, self.model, fits_int64=self.meta.outside == 0)
        if self.model.quiescent:
            check_quiescent(w, self.npages, self.model, self.meta.pages_used_max)

    def finish(self):
        """At the end of a schedule: free what is left, serially; check nothing is lost."""
        self.serial = True
        saved = getattr(_tls, "thread", None)
        _tls.thread = self.drainer
        try:
            for off in sorted(self.model.live):
                self.free(self.ctx, off)
            check_drained(self.meta.words, self.npages)
            if self.meta.words[L.H_BUMP] or self.model.bumped:
                return  # bump chunks stay until reset: the arena is not whole
            whole = self.npages << self.ps
            off = self.alloc(self.ctx, whole)
            if off != 0:
                raise Fault("nothing lost", f"alloc({whole}), the whole arena, returned "
                            f"{off} after every block was freed")
            self.free(self.ctx, off)
            check_drained(self.meta.words, self.npages)
        finally:
            _tls.thread = saved
            self.serial = False

    def stop(self):
        """Unwind every thread still parked (the schedule is dropped)."""
        for t in self.threads:
            if not t.finished:
                t.abort = True
                self._run(t)

    def close(self):
        self.stop()

    def format_trace(self):
        """Return the steps of the current run, one line each."""
        lines = [" step  thr  operation            where                        access"]
        step = 0
        for tid, op, fn, line, kind, i, a, b, old, new in self.trace:
            if kind == "=":
                res = "" if new is None else f" -> {new}"
                lines.append(f"    .  T{tid}   {op} returned{res}")
                continue
            step += 1
            if fn == "program":
                lines.append(f"{step:5d}  T{tid}   {op:<20} {'(program)':<28} "
                             f"{kind} arena[{i}:{i + a}]")
                continue
            name = word_name(i, self.npages, self.ps)
            if kind == "load":
                acc = f"load  {name} -> {old:#x}"
            elif kind == "store":
                acc = f"store {name} = {new:#x} (was {old:#x})"
            elif kind == "cas":
                ok = "ok" if old == a else "FAILED"
                acc = f"cas   {name} {a:#x} -> {b:#x}: old {old:#x} ({ok})"
            else:
                acc = f"{kind:<5} {name} {a:#x}: {old:#x} -> {new:#x}"
            lines.append(f"{step:5d}  T{tid}   {op:<20} {fn + ':' + str(line):<28} {acc}")
        return "\n".join(lines)
