"""The contention model's machine: W warp leaders in lockstep on the real device code.

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
to ``waves`` warps per slot (by default enough for 8 grants a slot,
:func:`waves_for`); a warp's number sets its ``blockIdx`` and
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
  ``serialized_per_block`` divides it by the blocks allocated (or freed);
  ``serialized_loads_per_block``: the same of loads.
* ``rounds_per_block``: ``rounds`` over the blocks: the lockstep machine's
  time per block, the figure the calibration maps to time.
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

Issue 49. The command, the calibration against the H200 and the
reports: :mod:`devalloc.tools.contention` (``python -m devalloc.probes
--contention``); the fit: :mod:`devalloc.tools.contention_fit`. The
device modules must be the simulator's (``NUMBA_ENABLE_CUDASIM=1``
before numba is imported: ``_warp_number`` reads ``cuda.blockIdx``).
"""

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

#: Accesses after which one actor's operation is declared endless (the
#: costliest row, thread 8 KiB at W = 256 on the search of 0c49ef3, makes
#: about 1,300 a grant, 16 grants a warp).
MAX_STEPS = 200_000


class _Actor:
    """One logical thread: a warp's group leader (or a group freeing one word)."""

    __slots__ = ("blockIdx", "threadIdx", "blockDim", "group", "glet", "done", "slot", "error",
                 "steps")

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
        self.steps = 0  # accesses made (MAX_STEPS)


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
                a.steps += 1
                if a.steps > MAX_STEPS:
                    raise RuntimeError(
                        f"{kind}: warp {a.blockIdx.x * BLOCK + a.threadIdx.x >> L.WARP_SHIFT} "
                        f"made {MAX_STEPS} metadata accesses without finishing: an endless "
                        f"loop in the device code, not contention")
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
