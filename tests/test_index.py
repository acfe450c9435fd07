"""The page index (issue 14): O(log pages) words per search, racing large
claims without holes, a full heap answering at once.

Words are counted with :mod:`devalloc.testing.counting` (the device
functions' own source on a copy of a simulated heap's metadata, every
access counted): deterministic, unlike times. The racing test runs the
real kernels on the simulator with a fine thread interleaving.
"""

import sys

import numpy as np
import pytest
from numba import config, cuda

import devalloc
from devalloc import layout as L
from devalloc.host.heap import free_index_template
from devalloc.testing.counting import touched

NULL = devalloc.NULL
simulator_only = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulated kernels")


@cuda.jit
def alloc_many(ctx, nbytes, offs):
    for k in range(offs.shape[0]):
        offs[k] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def churn(ctx, nbytes, rounds, nulls):
    i = cuda.grid(1)
    for _ in range(rounds):
        off = devalloc.alloc(ctx, nbytes)
        if off == NULL:
            nulls[i] += 1
        else:
            devalloc.view(ctx, off, 1, np.uint8)[0] = i
            devalloc.free(ctx, off)


def full_of_large_blocks(npages, blocks=16):
    """Return a heap of ``npages`` pages held entirely by ``blocks`` large blocks."""
    heap = devalloc.Heap(L.capacity_for_pages(npages))
    offs = cuda.to_device(np.full(blocks, NULL, np.int64))
    alloc_many[1, 1](heap.ctx, npages // blocks * L.PAGE, offs)
    assert (offs.copy_to_host() != NULL).all() and heap.usage().reserved == heap.capacity
    return heap


@simulator_only
@pytest.mark.parametrize("nbytes", [16, 8192, 20000, 1 << 20])
def test_a_failing_alloc_reads_the_same_few_words_on_any_heap(nbytes):
    # Heap full of large blocks: the hint, the class's room index and the
    # free-page index (their top words) for a slab, the free-page index for
    # a run; then the failure counter. The same words at 64 and 4096 pages
    # (before the index: up to 4 passes over every page's state word).
    figures = []
    for npages in (64, 4096):
        heap = full_of_large_blocks(npages)
        t = touched(heap.ctx.meta.copy_to_host(), heap.capacity, "alloc", nbytes)
        assert t.result == NULL
        figures.append((dict(t.kinds), t.words))
    assert figures[0] == figures[1]
    kinds, words = figures[0]
    assert kinds.pop("add") == 1  # the failure, counted
    assert set(kinds) == {"load"} and words <= 5


@simulator_only
def test_a_large_alloc_in_a_mostly_held_heap_reads_few_words():
    # 90 % of the heap held by 64 KiB blocks (from the top down); one more
    # 64 KiB alloc and its free. The run is found by skipping 32 index
    # words per count read: a few dozen words where the scan of state words
    # read ~15,000 at 16,384 pages (here 4,096 to keep the fill short).
    costs = {}
    for npages in (64, 4096):
        heap = devalloc.Heap(L.capacity_for_pages(npages))
        count = int(npages * 0.9) // 4
        offs = cuda.to_device(np.full(count, NULL, np.int64))
        alloc_many[1, 1](heap.ctx, 65536, offs)
        meta = heap.ctx.meta.copy_to_host()
        a = touched(meta, heap.capacity, "alloc", 65536)
        assert a.result != NULL
        f = touched(meta, heap.capacity, "free", a.result)
        costs[npages] = (a.words, a.accesses, f.words)
    small, big = costs[64], costs[4096]
    assert big[0] <= small[0] + 2 * 32 * 2  # at most two groups of 32 words more per level
    assert big[2] <= small[2] + 4  # a free: its pages, the index words and counts
    assert big[0] < 100, costs


@simulator_only
def test_a_heap_reset_starts_with_every_page_free_in_the_index():
    heap = devalloc.Heap(L.capacity_for_pages(40))
    at = L.free_tree(heap.npages)
    want = free_index_template(heap.npages)
    meta = heap.ctx.meta.copy_to_host()
    assert (meta[at:at + len(want)] == want).all() and want[-1] == 40
    offs = cuda.to_device(np.full(2, NULL, np.int64))
    alloc_many[1, 1](heap.ctx, 20 * L.PAGE, offs)
    meta = heap.ctx.meta.copy_to_host()
    assert meta[at + len(want) - 1] == 0  # the top count: nothing free
    heap.reset()
    meta = heap.ctx.meta.copy_to_host()
    assert (meta[at:at + len(want)] == want).all()
    assert not meta[L.room_tree(heap.npages, 0):].any()  # no room marks


@simulator_only
@pytest.mark.usefixtures("fine_interleaving")
def test_racing_large_claims_leave_room_for_every_thread():
    # 4 threads each allocate and free a 200,000 B block (13 pages) 25
    # times in a 1 MiB heap (64 pages: room for all four at once). A claim
    # that loses a race finds the others in the index and takes another
    # run: no NULL (7 to 29 over 5 runs before the index).
    for _ in range(5):
        heap = devalloc.Heap(1 << 20)
        nulls = cuda.to_device(np.zeros(4, np.int64))
        churn[1, 4](heap.ctx, 200_000, 25, nulls)
        u = heap.usage()
        assert u.failed == int(nulls.copy_to_host().sum()) == 0
        assert (u.allocs, u.frees, u.reserved) == (100, 100, 0)


# ------------------------------------------------------------ adaptive spread


def test_spread_argument_is_checked_and_bounds_the_heap():
    for bad in (0, -3):
        with pytest.raises(ValueError, match="spread= must be at least 1"):
            devalloc.Heap(L.capacity_for_pages(64), spread=bad)
    for bad in (1.5, "8", True):
        with pytest.raises(TypeError, match="spread= must be a positive integer"):
            devalloc.Heap(L.capacity_for_pages(64), spread=bad)
    # Rounded up to a power of two, one slot per PAGES_PER_SLOT pages at most.
    assert devalloc.Heap(L.capacity_for_pages(4096), spread=6).spread == 8
    assert devalloc.Heap(L.capacity_for_pages(64), spread=100).spread == 2
    assert devalloc.Heap(L.capacity_for_pages(8), spread=100).spread == 1
    heap = devalloc.Heap(L.capacity_for_pages(4096), spread=16)
    meta = heap.ctx.meta.copy_to_host()
    assert meta[L.H_SPREAD_MAX] == 4  # log2, written at reset
    heap.reset()
    assert heap.ctx.meta.copy_to_host()[L.H_SPREAD_MAX] == 4


@simulator_only
@pytest.mark.usefixtures("fine_interleaving")
def test_contention_widens_the_spread_and_a_calm_heap_stays_at_one_slot():
    c = L.size_class(16)
    calm = devalloc.Heap(L.capacity_for_pages(512), spread=8, profile=True)
    offs = cuda.to_device(np.full(64, NULL, np.int64))
    alloc_many[1, 1](calm.ctx, 16, offs)  # one thread: nobody to lose a cas to
    assert calm.ctx.meta.copy_to_host()[L.spread_word(c)] == 0
    assert calm.usage().profile["spread_widened"] == 0
    assert calm.usage().reserved == L.PAGE
    # 64 lone lanes churning one class on one slab: leaders give up after
    # SLAB_TRIES lost cas and widen the class (up to 8 slots here).
    # An interleaving with SLAB_TRIES lost cas in a row, on some run: likely at a 1 us
    # switch interval, not certain on a loaded machine (up to 10 runs; most
    # widen at the first).
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(10):
            heap = devalloc.Heap(L.capacity_for_pages(512), spread=8, profile=True)
            nulls = cuda.to_device(np.zeros(64, np.int64))
            churn[1, 64](heap.ctx, 16, 20, nulls)
            u = heap.usage()
            assert u.failed == 0 and u.live_blocks == 0
            e = int(heap.ctx.meta.copy_to_host()[L.spread_word(c)])
            assert 0 <= e <= 3 and u.profile["spread_widened"] == e
            if e > 0:
                break
    finally:
        sys.setswitchinterval(old)
    assert e > 0, "no run widened the spread"
