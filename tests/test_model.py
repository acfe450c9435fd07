"""Model-based tests: random single-thread histories against a reference model.

Hypothesis drives a real :class:`devalloc.Heap` on the CUDA simulator
through ``alloc(n)``, ``free(offset)`` and ``reset()`` (one kernel launch per
operation) and keeps a page-level reference model of the same history. One
thread, so there is no contention and the model is exact:

* an ``alloc`` returns NULL exactly when no page could serve it (a small
  request: no free page and no slab of its class with a free slot; a large
  one: no run of free pages long enough), and an offset is aligned, inside
  the arena, in a page the model allows, and overlaps no live block;
* a ``free`` is valid exactly when its offset starts a live block (the
  device cannot tell a stale offset whose slot was reused from a new one,
  and neither does the model); anything else is one invalid free;
* after every operation ``usage()`` equals the model's: allocs, frees,
  failed, invalid_frees, live blocks, in_use (from ``class_size``/
  ``size_class``/``pages_for``), reserved, peak and the per-class figures;
  ``live()`` lists exactly the model's blocks, and each keeps its bytes.

The same machine runs on heaps of 16 KiB pages (the default), 4 KiB and
1 KiB pages (``Heap(page=)``): sizes, edges and the model follow the page.

Failing histories shrink to a minimal sequence of rules. Examples: 40 (400
with ``DEVALLOC_EXPLORE_DEEP=1``) per page size.
"""

import dataclasses
import os

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from numba import cuda

import devalloc
from devalloc import layout as L
from devalloc.host.stats import ClassUsage, Usage

NULL = devalloc.NULL
NPAGES = 3
DEEP = os.environ.get("DEVALLOC_EXPLORE_DEEP", "0") not in ("", "0")



def edges(ps=L.PAGE_SHIFT):
    """Sizes at the edges of the classes, of a slab block, a page and the arena."""
    page, most = 1 << ps, L.max_small(ps)
    extra = [] if ps == L.PAGE_SHIFT else [most, most + 1]
    return [1, 15, 16, 17, 48, 128, 129, 160, 161, 1000, 4096, 4097, 6000, 8192,
            8193, page, page + 1, 2 * page, NPAGES * page, NPAGES * page + 1,
            0, -3, 2**40] + extra


def sizes(ps=L.PAGE_SHIFT):
    """Request sizes: edges, any slab size, any large size up to the arena."""
    return st.one_of(
        st.sampled_from(edges(ps)),
        st.integers(1, L.max_small(ps)),
        st.integers(L.max_small(ps) + 1, NPAGES << ps),
    )


def filling(ps=L.PAGE_SHIFT):
    """Sizes whose slabs fill up within a short history (scaled to the page)."""
    return st.sampled_from([n >> (L.PAGE_SHIFT - ps) for n in (4096, 4000, 8192, 6000,
                                                                L.PAGE, 3000)])


@cuda.jit
def k_alloc(ctx, n, key, out):
    """Allocate ``n`` bytes; mark the block's first and last byte with ``key``."""
    off = devalloc.alloc(ctx, n)
    out[0] = off
    if off != NULL:
        a = devalloc.view(ctx, off, n, np.uint8)
        a[0] = key
        a[n - 1] = key


@cuda.jit
def k_free(ctx, off):
    devalloc.free(ctx, off)


def span(n, ps=L.PAGE_SHIFT):
    if n <= L.max_small(ps):
        return L.class_size(L.size_class(n))
    return L.pages_for(n, ps) << ps


class PageModel:
    """What a one-thread history makes of the heap: pages (of ``2**ps``
    bytes), blocks, counters."""

    def __init__(self, npages, ps=L.PAGE_SHIFT):
        self.npages = npages
        self.ps = ps
        self.page = 1 << ps
        self.reset()

    def reset(self):
        self.pages = [None] * self.npages  # None | ("slab", c, slots) | ("head", k) | "tail"
        self.live = {}  # offset -> (requested bytes, key)
        self.allocs = self.frees = self.failed = self.invalid = self.empty = 0
        self.peak = 0

    def held(self):
        return sum(p is not None for p in self.pages)

    def room(self, n):
        """Return True when some page can serve ``alloc(n)``."""
        if n <= 0 or n > self.npages * self.page:
            return False
        if n <= L.max_small(self.ps):
            c = L.size_class(n)
            return any(p is None or (p[0] == "slab" and p[1] == c
                                     and len(p[2]) < L.class_blocks(c, self.ps))
                       for p in self.pages)
        k = L.pages_for(n, self.ps)
        return any(all(p is None for p in self.pages[q:q + k])
                   for q in range(self.npages - k + 1))

    def allocated(self, n, off, key):
        """Record ``alloc(n) == off``; return a complaint or None."""
        if off == NULL:
            if self.room(n):
                return f"alloc({n}) returned NULL but the heap had room"
            if n == 0:
                self.empty += 1  # 0 bytes: NULL, not a failure
            else:
                self.failed += 1
            return None
        if not self.room(n):
            return f"alloc({n}) returned {off} but the heap was full"
        s = span(n, self.ps)
        if off % L.ALIGN or off < 0 or off + s > self.npages * self.page:
            return f"alloc({n}) returned {off}: misaligned or outside the arena"
        for o, (m, _) in self.live.items():
            if o < off + s and off < o + span(m, self.ps):
                return (f"alloc({n}) returned [{off}, {off + s}), overlapping "
                        f"[{o}, {o + span(m, self.ps)})")
        p, rel = divmod(off, self.page)
        if n <= L.max_small(self.ps):
            c = L.size_class(n)
            page = self.pages[p]
            if page is not None and (page[0] != "slab" or page[1] != c):
                return f"alloc({n}) returned {off} in page {p}, which is {page}"
            if rel % s or rel + s > self.page:
                return f"alloc({n}) returned {off}, not a slot of a {s}-byte slab"
            if page is None:
                page = self.pages[p] = ("slab", c, set())
            page[2].add(rel // s)
        else:
            k = L.pages_for(n, self.ps)
            if rel or any(q is not None for q in self.pages[p:p + k]):
                return f"alloc({n}) returned {off}: pages {p}..{p + k - 1} not all free"
            self.pages[p] = ("head", k)
            for q in range(p + 1, p + k):
                self.pages[q] = "tail"
        self.live[off] = (n, key)
        self.allocs += 1
        self.peak = max(self.peak, self.held())
        return None

    def freed(self, off):
        """Record ``free(off)``: valid exactly when ``off`` starts a live block."""
        if off == NULL:
            return
        if off not in self.live:
            self.invalid += 1
            return
        n, _ = self.live.pop(off)
        p, rel = divmod(off, self.page)
        if n <= L.max_small(self.ps):
            slots = self.pages[p][2]
            slots.remove(rel // span(n, self.ps))
            if not slots:
                self.pages[p] = None  # the last free retires the slab
        else:
            for q in range(p, p + L.pages_for(n, self.ps)):
                self.pages[q] = None
        self.frees += 1

    def large_blocks(self):
        return sum(n > L.max_small(self.ps) for n, _ in self.live.values())

    def usage(self):
        """Return the figures of ``usage()`` this history determines, by name."""
        classes = {}
        for page in self.pages:
            if isinstance(page, tuple) and page[0] == "slab":
                size = L.class_size(page[1])
                live, slabs = len(page[2]), 1
                if size in classes:
                    live += classes[size].blocks_live
                    slabs += classes[size].slabs
                classes[size] = ClassUsage(size, live, slabs, slabs * self.page - live * size)
        want = dict(
            capacity=self.npages * self.page,
            in_use=sum(span(n, self.ps) for n, _ in self.live.values()),
            reserved=self.held() * self.page,
            peak=self.peak * self.page,
            allocs=self.allocs,
            frees=self.frees,
            failed=self.failed,
            empty_requests=self.empty,
            invalid_frees=self.invalid,
            live_blocks=len(self.live),
            classes=classes,
            page=self.page,
        )
        # Figures newer than this model: zero for a history of alloc and free.
        for f in dataclasses.fields(Usage):
            if f.name not in want:
                want[f.name] = (self.large_blocks() if f.name == "large_blocks"
                                else None if f.name == "profile" else 0)
        return want


def heap_machine(page=None):
    """Return the state machine of one thread's history on a heap of ``page``-byte pages."""
    ps = L.PAGE_SHIFT if page is None else L.floor_log2(page)
    SIZES, FILLING = sizes(ps), filling(ps)

    class HeapMachine(RuleBasedStateMachine):
        """One thread's alloc/free/reset history, on a device heap and the model."""

        @initialize()
        def make(self):
            self.heap = devalloc.Heap(L.capacity_for_pages(NPAGES, ps), page=page)
            assert self.heap.npages == NPAGES and self.heap.page_shift == ps
            self.model = PageModel(NPAGES, ps)
            self.seen = []  # every offset alloc returned, stale ones included
            self.key = 0
            self.out = np.zeros(1, np.int64)

        def _alloc(self, n):
            self.key = self.key % 250 + 1
            k_alloc[1, 1](self.heap.ctx, n, self.key, self.out)
            off = int(self.out[0])
            problem = self.model.allocated(n, off, self.key)
            assert problem is None, problem
            if off != NULL:
                self.seen.append(off)

        @rule(n=SIZES)
        def alloc(self, n):
            self._alloc(n)

        @rule(n=FILLING)
        def alloc_filling(self, n):
            """Sizes whose slabs fill up within a short history."""
            self._alloc(n)

        @rule(i=st.integers(0, 10**6),
              delta=st.sampled_from([0, 0, 0, 8, 16, 48, 1 << ps, -16]))
        def free(self, i, delta):
            """Free an offset alloc returned (live, or stale: then invalid), or
            one near it: inside a block, misaligned, in the next page."""
            off = (self.seen[i % len(self.seen)] if self.seen else 12345) + delta
            k_free[1, 1](self.heap.ctx, off)
            self.model.freed(off)

        @rule(off=st.sampled_from([NULL, -16, NPAGES << ps, (NPAGES << ps) + 16, 2**40]))
        def free_outside(self, off):
            k_free[1, 1](self.heap.ctx, off)
            self.model.freed(off)

        @rule(dice=st.integers(0, 5))
        def reset(self, dice):
            if dice == 0:  # rarely, so that histories grow long between resets
                self.heap.reset()
                self.model.reset()

        @invariant()
        def usage_matches_the_model(self):
            got, want = self.heap.usage(), self.model.usage()
            assert dataclasses.asdict(got) == {k: v if k != "classes" else {
                s: dataclasses.asdict(c) for s, c in v.items()} for k, v in want.items()}
            assert got.allocs - got.frees == got.live_blocks

        @invariant()
        def live_blocks_keep_their_bytes(self):
            live = self.model.live
            assert self.heap.live() == sorted((o, span(n, ps)) for o, (n, _) in live.items())
            arena = self.heap.arena.copy_to_host()
            for off, (n, key) in live.items():
                assert arena[off] == key and arena[off + n - 1] == key, (off, n)

    HeapMachine.TestCase.settings = settings(
        max_examples=400 if DEEP else 40,
        stateful_step_count=30,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return HeapMachine


HeapMachine = heap_machine()
test_heap_follows_the_reference_model = HeapMachine.TestCase
#: Smaller pages (Heap(page=)): slabs of fewer blocks, large blocks from page / 2 up.
test_heap_of_4k_pages_follows_the_reference_model = heap_machine(4096).TestCase
test_heap_of_1k_pages_follows_the_reference_model = heap_machine(1024).TestCase


def test_model_agrees_with_a_known_history():
    """The model itself, on a history worked out by hand (and the heap too)."""
    m = PageModel(NPAGES)
    assert m.allocated(20000, 1 * L.PAGE, 1) is None  # pages 1-2 (large, top)
    assert m.allocated(64, 0, 2) is None  # page 0: a 64-byte slab
    assert not m.room(100)  # no free page for another class
    assert m.room(64) and not m.room(L.PAGE)
    assert m.allocated(100, NULL, 3) is None
    assert m.allocated(100, 0, 3) == "alloc(100) returned 0 but the heap was full"
    m.freed(0)
    m.freed(0)  # double free: invalid
    m.freed(1 * L.PAGE + 16)  # inside the large block: invalid
    u = Usage(**m.usage())
    assert (u.allocs, u.frees, u.failed, u.invalid_frees) == (2, 1, 1, 2)
    assert (u.live_blocks, u.in_use, u.reserved, u.peak) == (1, 2 * L.PAGE, 2 * L.PAGE,
                                                             3 * L.PAGE)
    assert u.classes == {} and m.large_blocks() == 1


def test_model_of_1k_pages_agrees_with_a_known_history():
    """Pages of 1 KiB: a slab holds up to 512-byte blocks (two of them), 513
    bytes take a whole page, and the heap itself agrees with the model."""
    m = PageModel(NPAGES, 10)
    assert m.allocated(513, 2048, 1) is None  # page 2: a one-page large block
    assert m.allocated(512, 0, 2) is None  # page 0: a slab of two 512-byte blocks
    assert m.allocated(512, 512, 3) is None
    assert m.room(1000) and not m.room(2048)  # page 1 left: one page, no run of two
    assert m.allocated(500, 1024, 4) is None  # page 1: class 512 again
    assert not m.room(16)  # every page held
    u = Usage(**m.usage())
    assert (u.live_blocks, u.in_use, u.reserved, u.peak) == (4, 3 * 512 + 1024, 3072, 3072)
    assert u.classes[512].slabs == 2 and u.classes[512].blocks_live == 3 and u.page == 1024
    heap = devalloc.Heap(3 * 1024, page=1024)
    out = np.zeros(1, np.int64)
    for n, key in ((513, 1), (512, 2), (512, 3), (500, 4)):
        k_alloc[1, 1](heap.ctx, n, key, out)
        assert out[0] in (0, 512, 1024, 2048)
    k_alloc[1, 1](heap.ctx, 16, 5, out)
    assert out[0] == NULL  # full: every page held
    got = heap.usage()
    assert (got.live_blocks, got.in_use, got.reserved, got.peak, got.failed, got.page) == (
        4, 3 * 512 + 1024, 3072, 3072, 1, 1024)
    assert sorted(size for _, size in heap.live()) == [512, 512, 512, 1024]
