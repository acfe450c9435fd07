"""Contention model: W warp leaders in lockstep on the real device code (issue 49).

The GPU's throughput rows (bench/gpu_throughput.py, the survey's protocol)
are poor because thousands of warp leaders search for a page from the same
place and ``cas`` the same words. This tool measures that without a GPU.

What runs
---------
The real device functions (their ``py_func``), installed as the
interleaving explorer installs them (:func:`devalloc.testing.machine.installed`):
every metadata access (``meta[i]``, ``cuda.atomic.*``, the ordered atomics
and relaxed loads of :data:`devalloc.sim.ordered.KINDS`) is a scheduling
point. Each *actor* is a greenlet that runs up to its next access and parks.

* ``thread`` variant (every thread allocates): an actor is a warp's group of
  32 lanes of one class, run as the explorer's ``alloc_group`` (the leader
  searches and asks for the lanes not served yet; the other lanes replay
  its shares and touch no metadata).
* ``warp`` variant (lane 0 of each warp allocates): an actor is a lone lane
  asking for one block.
* frees: each warp frees the blocks it allocated. Thread-based, the lanes
  form one group per bitmap word (``match_any_sync``; the explorer's
  ``free_word_group``); the group leaders of a warp issue their atomics in
  the same warp instructions, so each group is an actor of its own, all of
  a warp's groups starting together. Warp-based: one lone ``free``.

Lockstep
--------
``W`` warp *slots* (the warps resident at once). Each slot runs one warp's
job (its allocation, or its frees), then the next warp's: slot ``i`` runs
warps ``i, i + W, i + 2W, ...`` (a launch's blocks are issued in order), up
to ``waves`` warps per slot; a warp's number sets its ``blockIdx`` and
``threadIdx`` (256 threads per block, as the benchmark), hence its hint slot
and bitmap word scatter. In each *round* every actor that is not done makes
exactly one metadata access: the actors are stepped one after another, in
an order drawn afresh each round (a seeded random permutation,
:func:`round_order`), so accesses to one word within a round are
serialized in a fair order, and one actor's access sees those stepped
before it in the round. A warp whose job ended starts its next job in the
next round.

What is counted, per phase
--------------------------
* ``rounds``: rounds until every slot ran its ``waves`` jobs;
  ``actor_rounds``: accesses made (one per actor per round).
* ``grants``: successful state-word ``cas`` in ``_reserve`` (a leader's
  reservation of blocks: one round of ``_alloc_small``); ``rounds_per_grant``
  = ``actor_rounds / grants`` (rounds a leader spends per grant).
* ``cas_per_success``: every ``cas`` in the allocator (state words,
  ``_retire``'s, bump words) per successful one; ``reserve_cas_per_success``:
  the state-word ``cas`` of ``_reserve`` alone.
* ``serialized_atomics``: per round, the most atomics (every
  read-modify-write: ``add``, ``or``, ``and``, ``max``, ``exch``, ``cas``...;
  not loads or stores) on any one word, summed over rounds;
  ``serialized_per_alloc`` divides it by the blocks allocated (or freed).
* ``hottest``: the words with the most atomics in the phase, by name
  (:func:`devalloc.testing.invariants.word_name`).
* ``nulls``: blocks that came back NULL (none while room remains).

Phases: ``cold`` alloc (a fresh heap), ``cold`` free (every block), ``warm``
alloc (the same heap again, no reset: the GPU benchmark's later
iterations), ``warm`` free.

Geometry
--------
The heap of bench/gpu_throughput.py for 1 M allocations of the size
(:func:`heap_pages`: the live set in whole slabs plus one slab per hint
slot), its spread bound for an H200's 132 SMs (``layout.spread_log_max``):
the full 1 M-allocation metadata, every word of it. Only ``W * waves``
warps run, a few percent of the million, so the index trees are as deep
as on the GPU and the pages taken are the lowest ones, as on the GPU at the
start of a launch.

``python -m devalloc.probes --contention [--leaders 32,64,128,256]
[--sizes 16,256,4096,8192] [--variants thread,warp] [--waves N] [--seed S]
[--json]``. Runs on the CUDA simulator's device modules only (no GPU, no
NVVM); it needs ``NUMBA_ENABLE_CUDASIM=1`` before numba is imported
(``devalloc.probes`` sets it, or re-runs itself with it).
"""

import argparse
import random
import sys
import time
from collections import Counter

from .. import layout as L

#: Threads per block of the benchmark's launches (bench/gpu_throughput.py BLOCK).
BLOCK = 256
#: SMs of the GPU whose rows calibrate the model (the H200's; bounds the spread).
SMS = 132
#: The benchmark's allocations per launch whose heap geometry is modelled.
ALLOCATIONS = 1_000_000
VARIANTS = ("thread", "warp")
LEADERS = (32, 64, 128, 256)
SIZES = (16, 256, 4096, 8192)
#: Grants each slot makes per phase at least, which sets its warps (:func:`waves_for`).
GRANTS = 8
SEED = 1
#: Hottest words reported per phase.
HOTTEST = 5
#: Access kinds that are not read-modify-write atomics.
_PLAIN = frozenset(("load", "store"))


# ------------------------------------------------------------ pure helpers

def heap_pages(n, nbytes):
    """Return the pages of the benchmark's heap for ``n`` blocks of ``nbytes``.

    The same figure as bench/gpu_throughput.py's ``heap_pages``: the live
    set in whole slabs of the size's class plus HINT_SLOTS slabs; whole
    pages each above MAX_SMALL.
    """
    if nbytes > L.MAX_SMALL:
        return n * L.pages_for(nbytes)
    return -(-n // L.class_blocks(L.size_class(nbytes))) + L.HINT_SLOTS


def check_row(variant, nbytes, leaders):
    """Raise ValueError unless the model can run ``leaders`` slots of ``variant`` at ``nbytes``."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {VARIANTS}")
    if not 0 < nbytes <= L.MAX_SMALL:
        raise ValueError(f"{nbytes} B: the model covers slab sizes (1 .. {L.MAX_SMALL} B)")
    if leaders < 1:
        raise ValueError(f"{leaders} leaders: one or more")


def waves_for(variant, nbytes, grants=GRANTS):
    """Return the warps each slot runs per phase so that it makes ``grants`` grants or more.

    A warp asks for 32 blocks (``thread``) or one (``warp``); one grant is at
    most a fresh slab's blocks (``layout.class_blocks``), so a warp makes at
    least ``ceil(asked / class_blocks)`` grants.
    """
    asked = L.WARP_SIZE if variant == "thread" else 1
    per_warp = -(-asked // L.class_blocks(L.size_class(nbytes)))
    return -(-grants // per_warp)


def warp_position(warp, block_dim=BLOCK):
    """Return ``(blockIdx.x, threadIdx.x)`` of lane 0 of warp number ``warp``."""
    return divmod(warp * L.WARP_SIZE, block_dim)


def round_order(n, rng):
    """Return a fresh random order of ``n`` actors for one round (``rng``: random.Random)."""
    order = list(range(n))
    rng.shuffle(order)
    return order


def serialized(words):
    """Return the most atomics on any one word in a round (``words``: word -> count)."""
    return max(words.values(), default=0)


def ratio(a, b):
    """Return ``a / b``, or None when ``b`` is 0."""
    return a / b if b else None


def hottest(atomics, npages, n=HOTTEST, ps=L.PAGE_SHIFT):
    """Return the ``n`` words with the most atomics as ``[name, count]``, most first.

    Ties are broken by word index (lowest first), so the list is deterministic.
    """
    from ..testing.invariants import word_name

    top = sorted(atomics.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [[word_name(i, npages, ps), c] for i, c in top]


# ------------------------------------------------------------ the driver

class _Actor:
    """One logical thread: a warp's group leader (or a group freeing one word)."""

    __slots__ = ("blockIdx", "threadIdx", "blockDim", "group", "glet", "done", "slot", "error")

    def __init__(self, warp, slot):
        from ..testing.machine import Dim3

        b, t = warp_position(warp)
        self.blockIdx = Dim3(b, 0, 0)
        self.threadIdx = Dim3(t, 0, 0)
        self.blockDim = Dim3(BLOCK, 1, 1)
        self.group = None  # a groups.GroupRun while it acts for a warp group
        self.glet = None
        self.done = False
        self.slot = slot
        self.error = None


class _Stats:
    """What one phase's accesses did (see the module docstring)."""

    def __init__(self):
        self.rounds = 0
        self.actor_rounds = 0
        self.serialized = 0
        self.serialized_loads = 0
        self.atomics = Counter()  # word -> atomics in the phase
        self.loads = 0
        self.stores = 0
        self.cas = 0
        self.cas_ok = 0
        self.reserve_cas = 0
        self.reserve_ok = 0
        self.round_atomics = Counter()  # word -> atomics in the current round
        self.round_loads = Counter()


class ModelMeta:
    """The metadata as the modelled leaders see it: every access a scheduling point.

    A plain list of Python ints; ``meta[i]``, ``meta[i] = v`` and the
    atomics all go through :meth:`access`, which parks the calling actor
    until the driver steps it, then applies the access and counts it.
    """

    def __init__(self, words, driver):
        self.words = words
        self.shape = (len(words),)
        self.driver = driver

    def __len__(self):
        return len(self.words)

    def __getitem__(self, i):
        return self.access("load", i)

    def __setitem__(self, i, v):
        self.access("store", i, v)

    def access(self, kind, i, a=None, b=None):
        d = self.driver
        i = int(i)
        if d.stepping:
            fn = sys._getframe(2).f_code.co_name
            d.main.switch()  # parked: the driver steps us in some round
        else:
            fn = None
        old = self.words[i]
        a = None if a is None else int(a)
        b = None if b is None else int(b)
        new = d.apply(kind, old, a, b)
        self.words[i] = new
        s = d.stats
        if s is not None and fn is not None:
            if kind in _PLAIN:
                if kind == "load":
                    s.loads += 1
                    s.round_loads[i] += 1
                else:
                    s.stores += 1
            else:
                s.atomics[i] += 1
                s.round_atomics[i] += 1
                if kind == "cas":
                    ok = old == a
                    s.cas += 1
                    s.cas_ok += ok
                    if fn == "_reserve":
                        s.reserve_cas += 1
                        s.reserve_ok += ok
        return None if kind == "store" else old


class _Arena:
    """The arena as the allocator sees it: only its length (``ctx.arena.shape``)."""

    def __init__(self, nbytes):
        self.shape = (nbytes,)


def initial_words(npages, sms=SMS, ps=L.PAGE_SHIFT):
    """Return the metadata words of a fresh heap of ``npages`` pages, as ``Heap`` sets them."""
    from ..host.heap import free_index_template

    words = [0] * L.meta_words(npages, ps)
    at = L.free_tree(npages, ps)
    words[at:at + L.tree_words(npages)] = free_index_template(npages).tolist()
    words[L.H_SPREAD_MAX] = L.spread_log_max(npages, sms)
    return words


class Driver:
    """W warp slots stepping through one heap's phases in lockstep (use inside ``installed()``)."""

    def __init__(self, variant, nbytes, leaders, waves, seed=SEED, npages=None):
        import greenlet

        from ..ctx import Ctx
        from ..device import core
        from ..testing import machine

        check_row(variant, nbytes, leaders)
        self.variant = variant
        self.nbytes = nbytes
        self.leaders = leaders
        self.waves = waves
        self.rng = random.Random(seed)
        self.npages = npages if npages is not None else heap_pages(ALLOCATIONS, nbytes)
        self.lanes = L.WARP_SIZE if variant == "thread" else 1
        self.alloc = core.alloc
        self.free = core.free
        if hasattr(self.alloc, "py_func"):
            raise RuntimeError("Driver must be created inside machine.installed()")
        self.main = greenlet.getcurrent()
        self.apply = machine._apply  # an access's new value
        self.tls = machine._tls  # the running actor, as FakeCuda and FakeWarp read it
        self.stepping = False
        self.stats = None
        self.meta = ModelMeta(initial_words(self.npages), self)
        self.ctx = Ctx(_Arena(self.npages << L.PAGE_SHIFT), self.meta)
        self.blocks = {}  # warp -> offsets its lanes hold
        self.nulls = 0

    # -- jobs: what one warp does in a phase, as the actors that do it
    def _alloc_jobs(self, warp):
        if self.lanes == 1:
            def run():
                self.blocks[warp] = [int(self.alloc(self.ctx, self.nbytes))]
        else:
            def run():
                from ..testing import groups

                self.blocks[warp] = groups.alloc_group(self, _current(), self.nbytes, self.lanes)
        return [run]

    def _free_jobs(self, warp):
        from ..testing import groups

        offs = [o for o in self.blocks.pop(warp, []) if o != L.NULL]
        if self.lanes == 1:
            return [(lambda o=o: self.free(self.ctx, o)) for o in offs]
        word_groups = groups.word_groups([(o, self.nbytes) for o in offs])
        return [(lambda g=g: groups.free_word_group(self, _current(), g)) for g in word_groups]

    def phase(self, kind):
        """Run one phase (``"alloc"`` or ``"free"``) of each slot's ``waves`` warps; its figures."""
        import greenlet

        from ..testing import machine

        tls = machine._tls
        self.stats = s = _Stats()
        jobs = self._alloc_jobs if kind == "alloc" else self._free_jobs
        blocks_before = sum(len(v) for v in self.blocks.values())
        nulls_before = sum(o == L.NULL for v in self.blocks.values() for o in v)
        next_wave = [0] * self.leaders
        actors = []

        def start(slot):
            # The slot's next warp, if any: its actors, parked at their first access.
            while next_wave[slot] < self.waves:
                warp = next_wave[slot] * self.leaders + slot
                next_wave[slot] += 1
                started = []
                for fn in jobs(warp):
                    a = _Actor(warp, slot)
                    a.glet = greenlet.greenlet(_body(a, fn), parent=self.main)
                    self._run(tls, a)
                    if not a.done:
                        started.append(a)
                if started:
                    return started
            return []

        for slot in range(self.leaders):
            actors += start(slot)
        while actors:
            s.rounds += 1
            s.actor_rounds += len(actors)
            ended = []
            for k in round_order(len(actors), self.rng):
                a = actors[k]
                self._run(tls, a)
                if a.done:
                    ended.append(a)
            s.serialized += serialized(s.round_atomics)
            s.serialized_loads += serialized(s.round_loads)
            s.round_atomics.clear()
            s.round_loads.clear()
            if ended:
                gone = set(map(id, ended))
                actors = [a for a in actors if id(a) not in gone]
                for a in ended:  # a slot whose warp is done starts its next
                    if not any(b.slot == a.slot for b in actors):
                        actors += start(a.slot)
        self.stats = None
        blocks = sum(len(v) for v in self.blocks.values())
        nulls = sum(o == L.NULL for v in self.blocks.values() for o in v)
        ops = blocks - blocks_before if kind == "alloc" else blocks_before - blocks
        return {
            "phase": kind,
            "blocks": ops,
            "nulls": nulls - nulls_before if kind == "alloc" else 0,
            "rounds": s.rounds,
            "actor_rounds": s.actor_rounds,
            "grants": s.reserve_ok,
            "rounds_per_grant": ratio(s.actor_rounds, s.reserve_ok) if kind == "alloc" else None,
            "cas": s.cas,
            "cas_ok": s.cas_ok,
            "cas_per_success": ratio(s.cas, s.cas_ok),
            "reserve_cas_per_success": ratio(s.reserve_cas, s.reserve_ok),
            "atomics": sum(s.atomics.values()),
            "loads": s.loads,
            "serialized_atomics": s.serialized,
            "serialized_per_block": ratio(s.serialized, ops),
            "serialized_loads_per_block": ratio(s.serialized_loads, ops),
            "rounds_per_block": ratio(s.rounds, ops),
            "hottest": hottest(s.atomics, self.npages),
        }

    def _run(self, tls, a):
        tls.thread = a
        self.stepping = True
        try:
            a.glet.switch()
        finally:
            self.stepping = False
            tls.thread = None
        if a.error is not None:
            raise a.error


def _current():
    from ..testing import machine

    return machine._tls.thread


def _body(actor, fn):
    def body():
        try:
            fn()
        except BaseException as e:  # reported by the driver
            actor.error = e
        actor.done = True

    return body


def run_row(variant, nbytes, leaders, waves=None, seed=SEED, npages=None):
    """Return the figures of one (variant, size, W): its four phases.

    ``waves``: warps per slot per phase (None: :func:`waves_for`).
    """
    from ..testing.machine import installed

    if waves is None:
        waves = waves_for(variant, nbytes)
    t0 = time.perf_counter()
    with installed():
        d = Driver(variant, nbytes, leaders, waves, seed, npages)
        phases = {}
        for name, kind in (("cold_alloc", "alloc"), ("cold_free", "free"),
                           ("warm_alloc", "alloc"), ("warm_free", "free")):
            phases[name] = d.phase(kind)
    return {"variant": variant, "bytes": nbytes, "leaders": leaders, "waves": waves,
            "seed": seed, "npages": d.npages, "seconds": round(time.perf_counter() - t0, 2),
            "phases": phases}


# ------------------------------------------------------------ many rows

def configs(variants=VARIANTS, sizes=SIZES, leaders=LEADERS):
    """Return the (variant, bytes, W) of a run, the costliest first (for a pool of workers)."""
    out = [(v, b, w) for v in variants for b in sizes for w in leaders]
    return sorted(out, key=lambda c: (-c[2] * (32 if c[0] == "thread" else 4) * c[1], c))


def _row_job(args):
    variant, nbytes, leaders, waves, seed = args
    return run_row(variant, nbytes, leaders, waves, seed)


def measure(variants=VARIANTS, sizes=SIZES, leaders=LEADERS, waves=None, seed=SEED, jobs=1,
            progress=None):
    """Return the rows of every (variant, size, W), ordered by variant, size, W.

    ``jobs`` worker processes (forked: the parent has the simulator's
    numba already); ``progress(row)`` is called as each row ends.
    """
    todo = [(v, b, w, waves, seed) for v, b, w in configs(variants, sizes, leaders)]
    rows = []
    if jobs <= 1 or len(todo) == 1:
        for t in todo:
            rows.append(_row_job(t))
            if progress:
                progress(rows[-1])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            for r in pool.map(_row_job, todo):
                rows.append(r)
                if progress:
                    progress(r)
    order = {(v, b, w): k for k, (v, b, w) in enumerate(
        (v, b, w) for v in variants for b in sizes for w in leaders)}
    return sorted(rows, key=lambda r: order[(r["variant"], r["bytes"], r["leaders"])])


# ------------------------------------------------------------ calibration

#: The H200's throughput rows the model is calibrated against: medians of
#: iterations 1-4 of 5 (warm), 1 M allocations, survey protocol; from
#: bench/results/gpu-nvidia-h200-2026-11-28.json (``python -m
#: devalloc.gpucheck``, devalloc at commit 0c49ef3), part "throughput".
H200 = {
    "source": "bench/results/gpu-nvidia-h200-2026-11-28.json",
    "commit": "0c49ef3",
    "allocations": 1_000_000,
    # (variant, bytes): (floor_ms, alloc_ms, free_ms)
    "rows": {
        ("thread", 16): (0.0272000003606081, 9.21398401260376, 0.029600000008940697),
        ("thread", 256): (0.027216000482439995, 37.01759910583496, 0.047071998938918114),
        ("thread", 4096): (0.02715199999511242, 441.65943908691406, 0.5029279887676239),
        ("thread", 8192): (0.027184000238776207, 878.6553039550781, 0.9372319877147675),
        ("warp", 16): (0.7444320023059845, 58.32262420654297, 1.1357600092887878),
        ("warp", 256): (0.7439199984073639, 197.009521484375, 0.45900800824165344),
        ("warp", 4096): (0.7404959797859192, 2283.434814453125, 0.7765600085258484),
        ("warp", 8192): (0.7446559965610504, 1224.0486450195312, 1.547104001045227),
    },
}
#: The model's figure that a cost per round multiplies: rounds of the
#: lockstep machine per block of the phase (its time per block at W slots).
MEASURE = "rounds_per_block"
#: Warps the H200 keeps resident: 132 SMs x 64 warps (fewer when registers
#: bound it: 40 registers a thread, alloc's on sm_90, leave 48 a SM).
W_GPU = SMS * 64


def at_scale(pairs, target=W_GPU):
    """Return ``(x, slope)``: a per-block figure at ``target`` warps, from ``pairs`` [(W, x)].

    A power law through the two largest W: ``x(W) = x(W2) (W / W2)**slope``.
    The slope is clamped to [-1, 0]: with no word shared, W slots serve W
    times as fast (rounds per block as 1 / W, slope -1); with a word every
    operation serializes on, no faster at all (slope 0). A figure that grows
    with W is held at its largest W's (not extrapolated 30-fold). One pair:
    its figure, slope 0.
    """
    import math

    pts = sorted(p for p in pairs if p[1] is not None)
    if not pts:
        raise ValueError("no figure to scale")
    w2, x2 = pts[-1]
    if len(pts) == 1 or x2 <= 0:
        return x2, 0.0
    w1, x1 = pts[-2]
    slope = 0.0 if x1 <= 0 else math.log(x2 / x1) / math.log(w2 / w1)
    slope = min(0.0, max(-1.0, slope))
    return x2 * (target / w2) ** slope, slope


def atomic_us(data=None):
    """Return the µs one atomic on a word every thread hits costs, from ``data``'s warp floor.

    The warp-based floor kernel: lane 0 of each of ``allocations`` warps
    adds to one counter (nothing for the compiler to merge within a warp),
    so its time over ``allocations`` is one same-word atomic's share of
    L2's throughput (0.74 ns on the H200). Measured, not fitted.
    """
    data = H200 if data is None else data
    floor_ms = data["rows"][("warp", 16)][0]
    return floor_ms * 1000.0 / data["allocations"]


def predict_ms(x, cost_us, n=ALLOCATIONS, floor_ms=0.0, hot=0.0, atom_us=0.0):
    """Return the predicted milliseconds of ``n`` operations.

    ``floor_ms`` (the launch, as the floor kernel times it: one atomic per
    thread, same shape) plus the larger of ``x`` rounds of ``cost_us`` per
    operation (the latency of the leaders' dependent accesses) and ``hot``
    atomics on the hottest word per operation at ``atom_us`` each (its
    throughput: every operation's atomic there waits for the others').
    """
    return floor_ms + n * max(x * cost_us, hot * atom_us) / 1000.0


def fit_cost(points, n=ALLOCATIONS, floor=True, atom_us=0.0):
    """Return the cost per round (µs) that best predicts ``points``.

    ``points``: ``(x, floor_ms, ms)`` or ``(x, floor_ms, ms, hot)`` (see
    :func:`predict_ms`). Least squares on the logarithms (each row's error
    is a factor, so the 0.03 ms rows count as much as the 900 ms ones):
    without floor or hot words, the geometric mean of ``ms / (x n)``; else
    a grid over log(cost), refined by golden-section search around its
    best point. Rows with ``x == 0`` are left out.
    """
    import math

    pts = [(p[0], p[1] if floor else 0.0, p[2], p[3] if len(p) > 3 else 0.0)
           for p in points if p[0] > 0 and p[2] > 0]
    if not pts:
        raise ValueError("no row with a figure to fit")
    guesses = [math.log(ms * 1000.0 / (x * n)) for x, _, ms, _ in pts]
    if not floor and not any(h for *_, h in pts):
        return math.exp(sum(guesses) / len(guesses))

    def err(logc):
        c = math.exp(logc)
        return sum((math.log(predict_ms(x, c, n, f, h, atom_us)) - math.log(ms)) ** 2
                   for x, f, ms, h in pts)

    lo, hi = min(guesses) - 5.0, max(guesses) + 5.0
    grid = [lo + (hi - lo) * k / 400 for k in range(401)]
    k = min(range(len(grid)), key=lambda k: err(grid[k]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(100):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if err(a) <= err(b):
            hi = b
        else:
            lo = a
    return math.exp((lo + hi) / 2.0)


def calibrations(rows, data=None, fit_rows=None):
    """Return the calibrations of ``rows``: the model's (scaled to the GPU's
    warps, with the hottest word's throughput), then the plain one at each W
    (its rounds per block as they are, one cost per round and nothing else).

    ``fit_rows``: fit the model's cost on these rows (the model's figures of
    the code the H200 measured) and predict ``rows`` with it, first.
    """
    ws = sorted({r["leaders"] for r in rows})
    out = []
    if fit_rows is not None:
        fit = calibrate(fit_rows, None, hot=True, data=data)
        if fit:
            out.append(calibrate(rows, None, hot=True, data=data, cost=fit["cost_us"]))
    out += [calibrate(rows, None, hot=True, data=data)]
    out += [calibrate(rows, w, hot=False, data=data) for w in ws]
    return [c for c in out if c]


def calibrate(rows, leaders=None, variant="thread", phase="warm", measure=MEASURE,
              floor=True, hot=True, data=None, target=W_GPU, cost=None):
    """Fit one cost per round on ``variant``'s alloc and free rows of ``data`` (the H200's).

    ``leaders``: the rows' figures at that W as they are; None: at
    ``target`` warps (:func:`at_scale`, from the two largest W of ``rows``).
    ``hot``: each operation also waits for its share of the hottest word's
    atomics at the same-word rate of ``data``'s warp floor
    (:func:`atomic_us`, measured), whichever is longer (:func:`predict_ms`);
    the hottest word's atomics per block are those of the largest W.
    Returns ``{"cost_us", "atomic_us", "rows": [{bytes, op, x, slope, hot,
    floor_ms, measured_ms, predicted_ms, ratio}], "worst_factor",
    "geomean_factor", "others"}`` (``others``: the other variant's rows of
    ``data`` predicted with the same cost, out of sample), or None when
    ``rows`` lack a size of ``data`` for ``variant``. ``cost``: predict
    with that cost per round instead of fitting one (``"fitted": False``),
    e.g. one fitted on the model's figures of the code ``data`` measured.
    """
    import math

    data = H200 if data is None else data
    atom = atomic_us(data) if hot else 0.0

    def points(v):
        out = []
        for (dv, b), (floor_ms, alloc_ms, free_ms) in sorted(data["rows"].items()):
            if dv != v:
                continue
            mine = sorted((r for r in rows if (r["variant"], r["bytes"]) == (v, b)
                           and (leaders is None or r["leaders"] == leaders)),
                          key=lambda r: r["leaders"])
            if not mine:
                return None
            for op, ms in (("alloc", alloc_ms), ("free", free_ms)):
                figures = [r["phases"][f"{phase}_{op}"] for r in mine]
                x, slope = at_scale([(r["leaders"], f[measure]) for r, f in zip(mine, figures)],
                                    target)
                top = figures[-1]
                h = top["hottest"][0][1] / top["blocks"] if hot and top["hottest"] else 0.0
                out.append({"bytes": b, "op": op, "x": x, "slope": slope, "hot": h,
                            "floor_ms": floor_ms, "measured_ms": ms})
        return out

    pts = points(variant)
    if not pts:
        return None
    n = data["allocations"]
    fitted = cost is None
    if fitted:
        cost = fit_cost([(p["x"], p["floor_ms"], p["measured_ms"], p["hot"]) for p in pts], n,
                        floor, atom)

    def fill(ps):
        for p in ps:
            p["predicted_ms"] = predict_ms(p["x"], cost, n, p["floor_ms"] if floor else 0.0,
                                           p["hot"], atom)
            p["ratio"] = p["predicted_ms"] / p["measured_ms"]
        return ps

    fill(pts)
    logs = [abs(math.log(p["ratio"])) for p in pts]
    out = {"variant": variant, "leaders": leaders, "target": None if leaders else target,
           "phase": phase, "measure": measure, "floor": floor, "hot": hot,
           "cost_us": cost, "fitted": fitted, "atomic_us": atom, "rows": pts,
           "worst_factor": math.exp(max(logs)),
           "geomean_factor": math.exp(sum(logs) / len(logs))}
    out["others"] = [p for v in sorted({v for v, _ in data["rows"]}) if v != variant
                     for ps in [points(v)] if ps for p in fill(ps)]
    return out


# ------------------------------------------------------------ targets

#: Issue 49's targets, in this model (W = 128, warm iteration): ``cas``
#: attempts per success at most 2 at every size and variant; serialized
#: atomics per allocation at W = 128 at most 2x those at W = 32 (4x the
#: work: flat means no hot word).
TARGET_W = 128
TARGET_BASE_W = 32
TARGET_CAS = 2.0
TARGET_GROWTH = 2.0


def targets(rows, phase="warm"):
    """Return, per (variant, size), issue 49's two figures and whether each is met.

    ``[{variant, bytes, cas_per_success, cas_ok, growth, growth_ok}]``:
    ``phase``'s alloc ``cas`` per success at W = TARGET_W, and its serialized
    atomics per allocation at TARGET_W over those at TARGET_BASE_W (None
    when a W is missing).
    """
    at = {(r["variant"], r["bytes"], r["leaders"]): r["phases"][f"{phase}_alloc"] for r in rows}
    out = []
    for v, b in sorted({(v, b) for v, b, _ in at}, key=lambda k: (VARIANTS.index(k[0]), k[1])):
        hi, lo = at.get((v, b, TARGET_W)), at.get((v, b, TARGET_BASE_W))
        cas = hi["cas_per_success"] if hi else None
        growth = (ratio(hi["serialized_per_block"], lo["serialized_per_block"])
                  if hi and lo else None)
        out.append({"variant": v, "bytes": b, "cas_per_success": cas,
                    "cas_ok": None if cas is None else cas <= TARGET_CAS,
                    "growth": growth,
                    "growth_ok": None if growth is None else growth <= TARGET_GROWTH})
    return out


# ------------------------------------------------------------ report

def _f(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def table(rows, phase="warm"):
    """Return the text table of ``rows``: the alloc and free figures of ``phase``."""
    head = (f"{'variant':>7} {'size':>5} {'W':>4} {'waves':>5} {'rounds/grant':>12} "
            f"{'cas/ok':>7} {'reserve cas/ok':>14} {'ser/alloc':>10} {'rounds/alloc':>12} "
            f"{'ser/free':>9} {'NULLs':>5}  hottest words (alloc: atomics)")
    lines = [f"{phase} iteration (serialized atomics: per round, the most on one word, "
             "summed; per block)", head]
    for r in rows:
        a = r["phases"][f"{phase}_alloc"]
        f = r["phases"][f"{phase}_free"]
        hot = ", ".join(f"{name} {n}" for name, n in a["hottest"][:3])
        lines.append(f"{r['variant']:>7} {r['bytes']:>5} {r['leaders']:>4} {r['waves']:>5} "
                     f"{_f(a['rounds_per_grant'], 1):>12} {_f(a['cas_per_success']):>7} "
                     f"{_f(a['reserve_cas_per_success']):>14} "
                     f"{_f(a['serialized_per_block'], 3):>10} {_f(a['rounds_per_block'], 5):>12} "
                     f"{_f(f['serialized_per_block'], 3):>9} {a['nulls']:>5}  {hot}")
    return "\n".join(lines)


def formula(cal):
    """Return one line saying what a :func:`calibrate` result predicts with, and how well."""
    n = f"{H200['allocations']:,}"
    at = (f"its rounds per block at W = {cal['leaders']}" if cal["leaders"] else
          f"its rounds per block scaled to {cal['target']:,} warps (from the two largest W)")
    term = f"{'floor + ' if cal['floor'] else ''}{n} x "
    if cal["hot"]:
        term += (f"max(rounds/block x {cal['cost_us']:.4f} µs, hottest-word atomics/block x "
                 f"{cal['atomic_us'] * 1000:.3f} ns)")
    else:
        term += f"rounds/block x {cal['cost_us']:.4f} µs"
    how = "fitted here" if cal.get("fitted", True) else "the cost given, not fitted here"
    return (f"{cal['variant']} rows, {cal['phase']}, {at}, {how}: ms = {term}; worst factor "
            f"{cal['worst_factor']:.2f}, geometric mean {cal['geomean_factor']:.2f}")


def calibration_text(cal):
    """Return the text table of one :func:`calibrate` result."""
    lines = [f"calibration ({H200['source']}, {H200['commit']}): {formula(cal)}",
             f"{'variant':>7} {'size':>5} {'op':>5} {'rounds/blk':>10} {'slope':>6} "
             f"{'hot/blk':>8} {'measured ms':>12} {'predicted ms':>13} {'pred/meas':>9}"]
    for v, ps in ((cal["variant"], cal["rows"]), ("(other)", cal["others"])):
        for p in ps:
            lines.append(f"{v:>7} {p['bytes']:>5} {p['op']:>5} {p['x']:>10.5f} "
                         f"{p['slope']:>6.2f} {p['hot']:>8.4f} {p['measured_ms']:>12.3f} "
                         f"{p['predicted_ms']:>13.3f} {p['ratio']:>9.2f}")
    return "\n".join(lines)


def markdown(result, phase="warm", fit_rows=None):
    """Return Markdown tables of a run's ``result`` (as ``--json`` prints it).

    One row per (variant, size, W): ``phase``'s alloc (rounds per grant,
    ``cas`` per success, serialized atomics and rounds per block, the three
    hottest words) and free figures; then the calibrations of its rows
    (:func:`calibrations`, computed again: the H200's figures are data
    here; ``fit_rows``: the rows whose fitted cost predicts these first).
    """
    lines = ["| variant | size | W | waves | rounds/grant | cas/ok (all) | cas/ok (reserve) "
             "| ser. atomics/alloc | rounds/alloc | ser. atomics/free | rounds/free | NULLs "
             "| hottest words (alloc: atomics) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        a = r["phases"][f"{phase}_alloc"]
        f = r["phases"][f"{phase}_free"]
        hot = ", ".join(f"`{name}` {n}" for name, n in a["hottest"][:3])
        lines.append(
            f"| {r['variant']} | {r['bytes']} | {r['leaders']} | {r['waves']} "
            f"| {_f(a['rounds_per_grant'], 1)} | {_f(a['cas_per_success'])} "
            f"| {_f(a['reserve_cas_per_success'])} | {_f(a['serialized_per_block'], 3)} "
            f"| {_f(a['rounds_per_block'], 4)} | {_f(f['serialized_per_block'], 3)} "
            f"| {_f(f['rounds_per_block'], 4)} | {a['nulls']} | {hot} |")
    lines += ["", f"Issue 49's targets (W = {TARGET_W}, {phase}): `cas` per success <= "
              f"{TARGET_CAS:g}; serialized atomics per allocation at W = {TARGET_W} <= "
              f"{TARGET_GROWTH:g}x those at W = {TARGET_BASE_W}.", "",
              f"| variant | size | cas/ok at W = {TARGET_W} | met | ser. atomics "
              f"W = {TARGET_W} ÷ W = {TARGET_BASE_W} | met |", "|---|---:|---:|---|---:|---|"]
    for t in targets(result["rows"], phase):
        lines.append(f"| {t['variant']} | {t['bytes']} | {_f(t['cas_per_success'])} "
                     f"| {_yes(t['cas_ok'])} | {_f(t['growth'])} | {_yes(t['growth_ok'])} |")
    for cal in calibrations(result["rows"], fit_rows=fit_rows):
        lines += ["", f"Calibration: {formula(cal)}.", "",
                  "| variant | size | op | rounds/block | slope | hot atomics/block | H200 ms "
                  "| predicted ms | predicted ÷ H200 |",
                  "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
        for p in cal["rows"] + cal["others"]:
            v = cal["variant"] if p in cal["rows"] else f"{p.get('variant', 'warp')} (not fitted)"
            lines.append(f"| {v} | {p['bytes']} | {p['op']} | {p['x']:.5f} | {p['slope']:.2f} "
                         f"| {p['hot']:.4f} | {p['measured_ms']:.3f} | {p['predicted_ms']:.3f} "
                         f"| {p['ratio']:.2f} |")
    return "\n".join(lines)


def _yes(ok):
    return "-" if ok is None else "yes" if ok else "no"


def _ints(text):
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: integers separated by commas") from None
    if not out or min(out) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: one or more positive integers")
    return out


def _names(text):
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in VARIANTS]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: variants among {', '.join(VARIANTS)}")
    return out


def add_arguments(p):
    """Add the model's options to the argparse parser ``p`` (``devalloc.probes`` shares them)."""
    p.add_argument("--leaders", type=_ints, default=LEADERS, metavar="W,...",
                   help="warp slots in lockstep (default 32,64,128,256)")
    p.add_argument("--sizes", type=_ints, default=SIZES, metavar="B,...",
                   help=f"bytes per allocation, at most {L.MAX_SMALL} (default 16,256,4096,8192)")
    p.add_argument("--variants", type=_names, default=VARIANTS, metavar="V,...",
                   help="thread (a warp's 32 lanes allocate) and/or warp (lane 0 alone)")
    p.add_argument("--waves", type=int, default=None,
                   help=f"warps per slot per phase (default: enough for {GRANTS} grants per "
                        "slot, devalloc.tools.contention.waves_for)")
    p.add_argument("--seed", type=int, default=SEED, help="seed of the rounds' orders")
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes (default: the CPUs, at most the rows)")


def run(a, out=sys.stdout):
    """Measure and print what the parsed options ``a`` ask for; return 0."""
    import json
    import os

    if any(b > L.MAX_SMALL for b in a.sizes):
        raise SystemExit(f"contention: sizes above {L.MAX_SMALL} B are whole pages, not modelled")
    n = len(a.variants) * len(a.sizes) * len(a.leaders)
    jobs = a.jobs or min(n, os.cpu_count() or 1)
    t0 = time.perf_counter()

    def progress(r):
        print(f"contention: {r['variant']} {r['bytes']} B W={r['leaders']}: {r['seconds']} s",
              file=sys.stderr, flush=True)

    rows = measure(a.variants, a.sizes, a.leaders, a.waves, a.seed, jobs, progress)
    cals = calibrations(rows)
    result = {"model": {"allocations": ALLOCATIONS, "block": BLOCK, "sms": SMS,
                        "seed": a.seed, "grants": GRANTS, "waves": a.waves, "jobs": jobs,
                        "seconds": round(time.perf_counter() - t0, 1)},
              "rows": rows, "targets": targets(rows), "calibration": cals}
    if getattr(a, "json", False):
        json.dump(result, out)
        print(file=out)
        return 0
    print(table(rows), file=out)
    print(f"\nissue 49's targets (W = {TARGET_W}, warm): cas/ok <= {TARGET_CAS}, serialized "
          f"atomics per alloc at W = {TARGET_W} <= {TARGET_GROWTH}x W = {TARGET_BASE_W}'s",
          file=out)
    def met(ok):
        return "no row" if ok is None else "met" if ok else "not met"

    for t in targets(rows):
        print(f"{t['variant']:>7} {t['bytes']:>5}  cas/ok {_f(t['cas_per_success'])} "
              f"({met(t['cas_ok'])})  growth {_f(t['growth'])} ({met(t['growth_ok'])})",
              file=out)
    for c in cals:
        print(file=out)
        print(calibration_text(c), file=out)
    print(f"\n{len(rows)} rows in {result['model']['seconds']} s ({jobs} processes)", file=out)
    return 0


def ensure_simulator(argv, module="devalloc.tools.contention"):
    """Return None when numba runs the simulator; else re-run ``module argv`` with it, its status.

    The model runs the simulator's device modules (``_warp_number`` and
    friends read ``cuda.blockIdx``): ``NUMBA_ENABLE_CUDASIM=1`` must be set
    before numba is imported. If numba is not imported yet it is set here.
    """
    import os
    import subprocess

    if "numba" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        return None
    from numba import config

    if config.ENABLE_CUDASIM:
        return None
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    rc = ensure_simulator(argv)
    if rc is not None:
        return rc
    p = argparse.ArgumentParser(prog="python -m devalloc.tools.contention",
                                description=__doc__.split("\n")[0])
    add_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--markdown", metavar="FILE",
                   help="print the Markdown tables of FILE (what an earlier --json run "
                        "printed) instead of running")
    p.add_argument("--cost-from", metavar="FILE",
                   help="with --markdown: first predict its rows with the cost fitted on "
                        "FILE's rows (another --json run, e.g. of the commit the H200 measured)")
    a = p.parse_args(argv)
    if a.markdown:
        import json

        with open(a.markdown) as f:
            result = json.load(f)
        fit_rows = None
        if a.cost_from:
            with open(a.cost_from) as f:
                fit_rows = json.load(f)["rows"]
        print(markdown(result, fit_rows=fit_rows))
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
