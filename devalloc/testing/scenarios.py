"""The configurations the explorer checks, and how far it goes.

:data:`EXHAUSTIVE`: two threads, a heap of one or two pages, three or four
operations each, explored exhaustively in CI. :data:`EXHAUSTIVE_DEEP`: three
threads, explored exhaustively only when deep. :data:`PCT`: three or four
threads, one to three pages, up to six operations each, explored with PCT
schedules.

Warp groups (``alloc_group``, ``free_group``) are one logical thread acting
for several lanes (:mod:`devalloc.testing.groups`): their leaders' grants of
several blocks, partial grants and frees of several bits are explored like
a lone lane's operations.

Sizes are chosen so that threads collide where the code is delicate: 4096-
and 8192-byte blocks put a slab's every slot in bitmap word 0 (so two slot
holders race on one word whatever ``cuda.grid(1)`` is); a one-page heap
makes two classes compete for the same page (reserve against retire); large
blocks of one and two pages race with each other and with slabs on a
two-page heap; ``preset_count`` starts pages just below a count fold. The
page index (free pages, each class's slabs with room) is exercised by
every scenario; ``large_one_run`` (no allocation may fail),
``slab_vs_large_one_page`` and ``index_two_words`` (index words with a count
above them) aim at it; ``spread_widen`` at the adaptive spread.

:func:`at_page` gives any scenario on smaller pages (``Heap(page=)``), its
sizes scaled to the page; tests/test_explorer.py explores them at 1 KiB.

:func:`bounds` reads ``DEVALLOC_EXPLORE_DEEP``: unset or ``0`` gives the CI
bounds, anything else the deep ones (an hour of CPU rather than a minute).
"""

import os
from dataclasses import dataclass

from .. import layout as L
from .machine import Scenario, ThreadSpec


def _t(block, thread, *ops):
    return ThreadSpec(block, thread, tuple(ops))


A = "alloc"
F = "free"
W = "write"
V = "verify"
AG = "alloc_group"  # (AG, n, k): k lanes of a warp allocate n bytes together
FG = "free_group"   # (FG, (i, j, ...)): lanes free those blocks together
B = "bump"          # (B, n): bump n bytes (numbered like an alloc, never freed)
S = "scope"         # (S, (n1, n2...)): a scope taking scoped scratch of each size
R = "realloc"       # (R, i, n): devalloc.realloc of allocation i to n bytes

EXHAUSTIVE = (
    # Two slot holders of one slab, both in bitmap word 0, same block.
    Scenario("slab_same_word", 1, (
        _t(0, 0, (A, 4096), (W, 0), (F, 0)),
        _t(0, 1, (A, 4096), (W, 0), (V, 0)),
    )),
    # A two-slot slab asked for three blocks: a failure, a free, a retry.
    Scenario("slab_full", 1, (
        _t(0, 0, (A, 8192), (A, 8192), (F, 0)),
        _t(1, 0, (A, 8192), (W, 0), (F, 0)),
    )),
    # Two classes want the only page: reserve racing with retire.
    Scenario("class_change", 1, (
        _t(0, 0, (A, 64), ("free_interior", 0), (F, 0)),
        _t(1, 0, (A, 100), (F, 0), (A, 100)),
    )),
    # A two-page large block against a slab on a two-page heap.
    Scenario("large_vs_slab", 2, (
        _t(0, 0, (A, 20000), (W, 0), (F, 0)),
        _t(0, 1, (A, 16), (F, 0), (A, 16)),
    )),
    # One-page and two-page large blocks claiming overlapping runs.
    Scenario("large_vs_large", 2, (
        _t(0, 0, (A, 9000), (F, 0), (A, 9000)),
        _t(1, 0, (A, 20000), (F, 0)),
    )),
    # Pages that have served 2**22 - 1 allocations: the next one on each
    # page folds its count into the global word, racing with the other.
    Scenario("count_fold", 2, (
        _t(0, 0, (A, 64), (F, 0), (A, 64)),
        _t(1, 0, (A, 9000), (F, 0)),
    ), preset_count=L.COUNT_FOLD - 1),
    # Frees racing with allocations in one bitmap word: slot reuse.
    Scenario("free_vs_alloc", 1, (
        _t(0, 0, (A, 4096), (A, 4096), (F, 0)),
        _t(1, 0, (A, 4096), (F, 0), (A, 4096)),
    )),
    # A two-slot slab, both blocks bumped: a reuse of the first freed block
    # racing with the free of the second into the same bitmap word.
    Scenario("reuse_race", 1, (
        _t(0, 0, (A, 8192), (A, 8192), (F, 0), (F, 1)),
        _t(1, 0, (A, 8192), (F, 0), (A, 8192)),
    )),
    # Four operations each: frees of the newest and the oldest block racing
    # with allocations in one bitmap word.
    Scenario("free_vs_alloc_long", 1, (
        _t(0, 0, (A, 4096), (A, 4096), (F, 1), (F, 0)),
        _t(1, 0, (A, 4096), (F, 0), (A, 4096), (F, 1)),
    )),
    # Warp groups (devalloc.testing.groups): the leader of three lanes
    # against a thread taking two of the page's four slots. Partial grants:
    # some lanes served, the rest NULL (each lane counts its failure), or
    # a second round served from a block freed meanwhile.
    Scenario("group_partial", 1, (
        _t(0, 0, (AG, 4096, 3), (FG, (0, 1, 2))),
        _t(1, 0, (A, 4096), (A, 4096), (F, 0), (F, 1)),
    )),
    # A group fills the slab, frees two blocks of one word with one or and
    # one add, and takes them back as one reuse grant of two bits, racing
    # with a thread that reuses one of them.
    Scenario("group_reuse", 1, (
        _t(0, 0, (AG, 4096, 4), (FG, (0, 1)), (AG, 4096, 2)),
        _t(1, 0, (A, 4096), (F, 0)),
    )),
    # A group free that empties its slab (one add of -2, then the retire)
    # racing with another class that wants the page.
    Scenario("group_retire", 1, (
        _t(0, 0, (AG, 8192, 2), (FG, (0, 1)), (A, 64)),
        _t(1, 0, (A, 64), (F, 0), (A, 8192)),
    )),
    # A group of three on a two-page heap of two-slot slabs: grants from two
    # pages, then one group free that is two word groups (two leaders).
    Scenario("group_two_words", 2, (
        _t(0, 0, (AG, 8192, 3), (FG, (0, 1, 2))),
        _t(1, 0, (A, 8192), (F, 0)),
    )),
    # Four operations each: a page changes class twice.
    Scenario("class_change_long", 1, (
        _t(0, 0, (A, 64), (F, 0), (A, 4096), (F, 1)),
        _t(1, 0, (A, 100), (F, 0), (A, 64), (F, 1)),
    )),
    # Two leaders of one class, each alone, on a one-page heap: the later
    # one must find the earlier one's new slab, although it read the room
    # index before the slab was marked and the free-page index after the
    # page left it (the search's last look at the room index; before it,
    # a NULL beside the slab).
    Scenario("one_class_one_page", 1, (
        _t(0, 0, (A, 64), (W, 0), (V, 0)),
        _t(1, 0, (A, 64), (W, 0), (V, 0)),
    ), no_nulls=True),
    # Two leaders of one class, each alone, race for a slab on a two-page
    # heap, then one of them wants the other page for another class. The
    # later leader could read the room index before the earlier one marked
    # its slab there, and the free-page index after the earlier one's page
    # left it: it took the second page for the class, and the other class's
    # alloc returned NULL (docs/correctness.md, "Where two takers meet"),
    # until a search tried the free page it had read before its last look
    # at the room index, not one read after it.
    Scenario("one_class_two_leaders", 2, (
        _t(0, 0, (A, 64), (A, 4096)),
        _t(1, 0, (A, 64)),
    ), no_nulls=True),
    # Two bumpers on one-page chunks of a two-page heap: racing installers
    # (the loser gives its page back), slices of one chunk, a replaced
    # chunk, and a third chunk that does not fit (NULL).
    Scenario("bump_race", 2, (
        _t(0, 0, (B, 6000), (W, 0), (B, 6000), (V, 0)),
        _t(1, 0, (B, 6000), (B, 6000), (B, 6000)),
    )),
    # A bump too large for a chunk takes pages of its own, racing with a
    # large block and a chunk for the same pages.
    Scenario("bump_large", 2, (
        _t(0, 0, (B, 9000), (W, 0), (V, 0)),
        _t(1, 0, (A, 9000), (B, 64), (F, 0)),
    )),
    # The page index: two large claims racing for the highest run of a
    # four-page heap; the loser must take the other run (no holes: both
    # are always served).
    Scenario("large_one_run", 4, (
        _t(0, 0, (A, 20000), (W, 0), (V, 0)),
        _t(1, 0, (A, 20000), (W, 0), (V, 0)),
    ), no_nulls=True),
    # A slab take racing with a large claim for the one page, each freed and
    # the page taken again by the other kind.
    Scenario("slab_vs_large_one_page", 1, (
        _t(0, 0, (A, 16), (F, 0), (A, 9000)),
        _t(1, 0, (A, 9000), (F, 0), (A, 16)),
    )),
    # 33 pages: the index has two level-0 words and a count above them. The
    # large block's run [31, 33) spans both words; the slab takes page 0.
    Scenario("index_two_words", 33, (
        _t(0, 0, (A, 16), (F, 0)),
        _t(1, 0, (A, 20000), (F, 0)),
    )),
    # 33 pages, two index words: warp 1's passes start at word 1 (page 32
    # alone, slab._start_word) and wrap to word 0. Warp 0's one-page large
    # block takes page 32 (the highest run), then its 16 B takes a slab;
    # warp 1's 16 B must be served whatever the order: from word 1 up, then
    # wrapped, it finds warp 0's slab in the room index or page 0 in the
    # free-page index (or page 32 before the large block, which then takes
    # page 31).
    Scenario("wrap_two_words", 33, (
        _t(0, 0, (A, 9000), (A, 16)),
        _t(1, 0, (A, 16)),
    ), no_nulls=True),
    # The adaptive spread: warps of two blocks (two warps) allocate one class
    # on a two-page heap whose spread may widen once; a slab is given up
    # after one lost cas (SLAB_TRIES = 1, so two threads reach it), which
    # widens the class, and the warps' own slots then name their own slabs.
    Scenario("spread_widen", 2, (
        _t(0, 0, (A, 16), (A, 16), (F, 0), (F, 1)),
        _t(1, 0, (A, 16), (A, 16), (F, 0)),
    ), spread_max=1, constants=(("SLAB_TRIES", 1),)),
    # realloc racing frees of other blocks (the porting API). Moving to
    # another class: the new block comes from the slab the other thread's
    # free may be retiring; then the copy (checked by verify), then the old
    # block's free.
    Scenario("realloc_vs_free", 2, (
        _t(0, 0, (A, 48), (W, 0), (R, 0, 100), (V, 0)),
        _t(1, 0, (A, 100), (F, 0)),
    )),
    # In place (same class: no atomic, one load of the state word) while a
    # neighbour in the same slab is freed; then a move into a large block.
    Scenario("realloc_in_place_vs_free", 3, (
        _t(0, 0, (A, 100), (W, 0), (R, 0, 110), (R, 0, 9000), (V, 0)),
        _t(1, 0, (A, 100), (F, 0)),
    )),
    # realloc racing another thread's alloc, write and free: the old block's
    # bytes stay T0's until they are copied (a free before the copy would
    # let T1 take the retired page and write over them).
    Scenario("realloc_vs_alloc_write", 2, (
        _t(0, 0, (A, 48), (W, 0), (R, 0, 4096), (V, 0)),
        _t(1, 0, (A, 4096), (W, 0), (F, 0)),
    )),
    # One page, which T0's own 48-byte block keeps a slab: the move to 4096
    # bytes fails (NULL, the old block intact and still T0's) whatever T1 does.
    Scenario("realloc_fails_on_one_page", 1, (
        _t(0, 0, (A, 48), (W, 0), (R, 0, 4096), (V, 0), (F, 0)),
        _t(1, 0, (A, 48), (F, 0)),
    )),
)

PCT = (
    # Two lone leaders of one class and an allocation of another class on a
    # heap with a page for each class: the third thread meets the first
    # leader's new slab in the free-page index before the leader has marked
    # it in the room index. Repairing that entry (taking it out) hid the slab
    # from the second leader, which then took the other page, or returned
    # NULL (docs/correctness.md, "Where two takers meet": a slab with room is
    # left for its taker since).
    Scenario("two_leaders_and_a_repair", 2, (
        _t(0, 0, (A, 64)),
        _t(1, 0, (A, 64)),
        _t(2, 0, (A, 4096)),
    ), no_nulls=True),
    # The same, then the first leader wants the third page for a third class.
    Scenario("two_leaders_a_repair_then_another", 3, (
        _t(0, 0, (A, 64), (A, 1024)),
        _t(1, 0, (A, 64)),
        _t(2, 0, (A, 4096)),
    ), no_nulls=True),
    # NULL means full (issue 25): two reusers pick the same freed block of a
    # 3-slot slab with two freed; the one whose bit went to the other must
    # not give up (the other freed block and the free page can serve it).
    Scenario("settle_lost", 2, (
        _t(0, 0, (A, 5120), (A, 5120), (A, 5120), (F, 0), (F, 1), (A, 5120)),
        _t(1, 0, (A, 5120)),
    )),
    # A scope's chain grows (a 320-byte chunk, then a 2 KiB one) while
    # another thread allocates and frees in the same two classes.
    Scenario("scope_grow_vs_alloc", 2, (
        _t(0, 0, (S, (64, 500))),
        _t(1, 0, (A, 300), (W, 0), (F, 0), (A, 2000), (F, 1)),
    )),
    # Releases free a scope's chunk while another thread reuses blocks of
    # the chunk's class on the same slab.
    Scenario("scope_release_vs_reuse", 1, (
        _t(0, 0, (S, (64,)), (S, (64,))),
        _t(1, 0, (A, 288), (W, 0), (F, 0), (A, 288), (F, 1)),
    )),
    # Four threads on a two-slot slab: exhaustion, reuse, retire, retake.
    Scenario("pct_slab_4t", 1, (
        _t(0, 0, (A, 8192), (W, 0), (V, 0), (F, 0), (A, 8192)),
        _t(0, 1, (A, 8192), (W, 0), (F, 0), (A, 5000)),
        _t(1, 0, (A, 7000), (A, 8192), (W, 1), (F, 1), (F, 0)),
        _t(2, 3, (A, 8192), (W, 0), (V, 0), (F, 0)),
    )),
    # Three threads, small and large blocks on three pages; every page's
    # second allocation folds its count.
    Scenario("pct_mixed_3t", 3, (
        _t(0, 0, (A, 64), (A, 20000), (W, 1), (F, 0), (V, 1), (F, 1)),
        _t(0, 5, (A, 64), (A, 64), (W, 0), ("free_interior", 0), (F, 1), (F, 0)),
        _t(3, 0, (A, 9000), (A, 4096), (W, 0), (F, 0), (A, 16384), (F, 2)),
    ), preset_count=L.COUNT_FOLD - 2),
    # Four threads, large blocks only, on two pages: claims and rollbacks.
    Scenario("pct_large_4t", 2, (
        _t(0, 0, (A, 9000), (F, 0), (A, 20000), (F, 1)),
        _t(0, 1, (A, 16384), (W, 0), (F, 0)),
        _t(1, 0, (A, 20000), (F, 0), (A, 9000)),
        _t(1, 1, (A, 12000), ("free_bogus", 8), (F, 0)),
    )),
)


#: Explored exhaustively only with DEVALLOC_EXPLORE_DEEP=1: three threads
#: (1e5 to 1e6 states, minutes each).
EXHAUSTIVE_DEEP = (
    Scenario("deep_three_slab", 1, (
        _t(0, 0, (A, 8192), (F, 0)),
        _t(0, 1, (A, 8192), (F, 0)),
        _t(1, 0, (A, 8192), (F, 0)),
    )),
    Scenario("deep_three_mixed", 2, (
        _t(0, 0, (A, 9000), (F, 0)),
        _t(0, 1, (A, 20000), (F, 0)),
        _t(1, 0, (A, 100), (F, 0)),
    )),
    Scenario("deep_three_large", 3, (
        _t(0, 0, (A, 9000), (F, 0)),
        _t(0, 1, (A, 20000), (F, 0)),
        _t(1, 0, (A, 9000), (F, 0)),
    )),
)


@dataclass(frozen=True)
class Bounds:
    """How far to explore: DFS executions per scenario, PCT seeds and depths."""

    max_executions: int
    pct_seeds: tuple
    pct_depths: tuple


#: The CI bound lets every EXHAUSTIVE scenario complete: the largest,
#: class_change_long, takes 246,856 executions since a slab is passed over
#: after 2 lost cas, not 4 (issue 49: 174,501 with 4, measured the same
#: day), and 174,501 since a search looks at the room index again before
#: each free page it tries (76,732 before).
CI = Bounds(max_executions=300_000, pct_seeds=tuple(range(400)), pct_depths=(2, 3))
DEEP = Bounds(max_executions=5_000_000, pct_seeds=tuple(range(20_000)),
              pct_depths=(2, 3, 4, 5))


def deep_requested():
    """Return True when ``DEVALLOC_EXPLORE_DEEP`` asks for the deep bounds."""
    return os.environ.get("DEVALLOC_EXPLORE_DEEP", "0") not in ("", "0")


def bounds(deep=None):
    """Return :data:`DEEP` or :data:`CI` (``deep=None``: from the environment)."""
    if deep is None:
        deep = deep_requested()
    return DEEP if deep else CI


def exhaustive(deep=None):
    """Return the scenarios to explore exhaustively (more when deep)."""
    if deep is None:
        deep = deep_requested()
    return EXHAUSTIVE + EXHAUSTIVE_DEEP if deep else EXHAUSTIVE


def by_name(name):
    """Return the scenario called ``name``; ``name@page`` is it on pages of
    ``page`` bytes (:func:`at_page`), as its reports name it."""
    if "@" in name:
        base, _, page = name.partition("@")
        if not page.isdigit() or int(page) not in [1 << ps for ps in range(
                L.PAGE_SHIFT_MIN, L.PAGE_SHIFT + 1)]:
            raise KeyError(f"{name}: the page must be a power of two from {L.PAGE_MIN} "
                           f"to {L.PAGE} bytes")
        return at_page(by_name(base), L.floor_log2(int(page)))
    for sc in EXHAUSTIVE + EXHAUSTIVE_DEEP + PCT:
        if sc.name == name:
            return sc
    raise KeyError(name)


def _scale_size(n, ps):
    # Sizes from 1 KiB up scale with the page (4096 in 16 KiB pages is 256
    # in 1 KiB pages: a quarter of a slab's page either way; 20000, two
    # pages, is 1250); smaller ones are kept (their classes still fit).
    return n >> (L.PAGE_SHIFT - ps) if n >= L.PAGE_MIN else n


def _scale_op(op, ps):
    kind = op[0]
    if kind in ("alloc", "bump", "alloc_group"):
        return (kind, _scale_size(op[1], ps)) + tuple(op[2:])
    if kind == "scope":
        return (kind, tuple(_scale_size(n, ps) for n in op[1]))
    if kind == "realloc":
        return (kind, op[1], _scale_size(op[2], ps))
    return op


def at_page(sc, ps):
    """Return scenario ``sc`` on pages of ``2**ps`` bytes (``Heap(page=)``).

    Named ``name@page``; its sizes scaled to the page (:func:`_scale_size`),
    so that blocks take the same share of a slab or the same pages as in
    the default page, and the explored code reads the page shift from the
    metadata's length as it does on a GPU.
    """
    threads = tuple(ThreadSpec(t.block, t.thread, tuple(_scale_op(op, ps) for op in t.ops))
                    for t in sc.threads)
    return Scenario(f"{sc.name}@{1 << ps}", sc.npages, threads, sc.block_dim,
                    sc.preset_count, sc.no_nulls, sc.spread_max, sc.preset_spread,
                    sc.constants, page_shift=ps)
