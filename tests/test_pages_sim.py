"""Heaps of smaller pages (``Heap(capacity, page=...)``) on the CUDA simulator.

The machinery the default page is checked with, run on heaps of 1 KiB and
4 KiB pages (and 16 KiB, the default, beside them): racing churns whose
metadata the explorer's invariant checker reads at a quiescent point and
after the drain (:mod:`devalloc.testing.invariants`), NULL only when the
heap is full (issue 25's rule: every churn here is sized so that its worst
case fits, so any NULL is a bug), exact usage figures, large blocks (over
half a page) in whole pages, ``alloc_aligned`` up to the page, ``bump`` and
scoped scratch, debug heaps, ``live()``, ``resize`` and ``memory=``; and
the host's refusals of a bad ``page=``.

Threads switch every 10 µs (``racing``), so they interleave inside
``alloc`` and ``free``; no assertion depends on the interleaving but those
that must hold in every one.
"""

import sys

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L
from devalloc.host.capacity import AUTO_PAGES, min_memory
from devalloc.sim import warp
from devalloc.testing import churn as C
from devalloc.testing.invariants import (Block, Model, check_drained, check_quiescent,
                                         check_safe, span)

NULL = devalloc.NULL
#: The pages every test runs on: the default (None: 16 KiB), 4 KiB, 1 KiB.
PAGES = [None, 4096, 1024]
PAGE_IDS = ["16k", "4k", "1k"]
#: Live blocks each thread of the hold churn keeps.
HELD = 2


@pytest.fixture
def racing(fine_interleaving):
    """Switch simulator threads every 10 µs (fine_interleaving restores the interval)."""
    sys.setswitchinterval(1e-5)


def shift(page):
    return L.PAGE_SHIFT if page is None else L.floor_log2(page)


def words_of(heap):
    """The heap's metadata words, as the invariant checker reads them."""
    return [int(w) for w in heap.ctx.meta.copy_to_host()]


# ------------------------------------------------------------------ kernels

@cuda.jit
def k_hold(ctx, sizes, offs, held, ok, nulls, bad):
    """Each step frees the block of slot ``i % HELD`` and allocates the next size
    into it; every held block carries its owner's byte, checked before its
    free and at the end. The last HELD blocks stay live (``offs``, ``held``)."""
    t = cuda.grid(1)
    if t >= sizes.shape[0]:
        return
    arena = ctx.arena
    key = np.uint8(t % 251 + 1)
    for i in range(sizes.shape[1]):
        slot = i % HELD
        off = offs[t, slot]
        if off != NULL:
            if arena[off] != key or arena[off + held[t, slot] - 1] != key:
                bad[t] += 1
        devalloc.free(ctx, off)  # NULL too: convergent (the simulator's warp mode)
        offs[t, slot] = NULL
        n = sizes[t, i]
        off = devalloc.alloc(ctx, n)
        if off == NULL:
            nulls[t] += 1
        else:
            ok[t] += 1
            arena[off] = key
            arena[off + n - 1] = key
            offs[t, slot] = off
            held[t, slot] = n
    for slot in range(HELD):
        off = offs[t, slot]
        if off != NULL and (arena[off] != key or arena[off + held[t, slot] - 1] != key):
            bad[t] += 1


@cuda.jit
def k_free_rows(ctx, offs):
    # Thread t frees every block of row t of offs (NULL: nothing).
    t = cuda.grid(1)
    if t < offs.shape[0]:
        for slot in range(offs.shape[1]):
            devalloc.free(ctx, offs[t, slot])


@cuda.jit
def k_alloc_each(ctx, sizes, offs):
    # One thread, in order: alloc(sizes[i]) -> offs[i].
    if cuda.grid(1) == 0:
        for i in range(sizes.shape[0]):
            offs[i] = devalloc.alloc(ctx, sizes[i])


@cuda.jit
def k_aligned(ctx, sizes, align, offs):
    i = cuda.grid(1)
    if i < sizes.shape[0]:
        offs[i] = devalloc.alloc_aligned(ctx, sizes[i], align)


@cuda.jit
def k_bump_each(ctx, sizes, offs):
    i = cuda.grid(1)
    if i < sizes.shape[0]:
        off = devalloc.bump(ctx, sizes[i])
        offs[i] = off
        if off != NULL:
            a = ctx.arena
            for j in range(sizes[i]):
                a[off + j] = np.uint8(i + 1)


@cuda.jit
def k_bump_serial(ctx, sizes, offs):
    # One thread, in order: bump(sizes[i]) -> offs[i], each filled with i + 1.
    if cuda.grid(1) == 0:
        for i in range(sizes.shape[0]):
            off = devalloc.bump(ctx, sizes[i])
            offs[i] = off
            if off != NULL:
                for j in range(sizes[i]):
                    ctx.arena[off + j] = np.uint8(i + 1)


@cuda.jit
def k_scoped(ctx, sizes, offs, bad):
    """Each thread opens a scope, takes scoped scratch of its row of sizes
    (each filled with its byte), checks them all, and releases the scope."""
    t = cuda.grid(1)
    if t >= sizes.shape[0]:
        return
    arena = ctx.arena
    key = np.uint8(t % 251 + 1)
    m = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    s = m
    for i in range(sizes.shape[1]):
        off, s = devalloc.scoped(ctx, s, sizes[t, i])
        offs[t, i] = off
        if off != NULL:
            for j in range(sizes[t, i]):
                arena[off + j] = key
    for i in range(sizes.shape[1]):
        off = offs[t, i]
        if off != NULL:
            for j in range(sizes[t, i]):
                if arena[off + j] != key:
                    bad[t] += 1
    devalloc.release(ctx, s, m)


@cuda.jit
def k_realloc_chain(ctx, sizes, offs, usable, kept):
    """One thread: a block of sizes[0] bytes (byte j holds j % 251), realloc'd
    to each next size in turn; the offsets, usable sizes, and whether the
    first min(old, new) bytes survived each move."""
    if cuda.grid(1) != 0:
        return
    arena = ctx.arena
    off = devalloc.alloc(ctx, sizes[0])
    for j in range(sizes[0]):
        arena[off + j] = np.uint8(j % 251)
    offs[0] = off
    usable[0] = devalloc.usable_size(ctx, off)
    for i in range(1, sizes.shape[0]):
        off = devalloc.realloc(ctx, off, sizes[i])
        offs[i] = off
        usable[i] = devalloc.usable_size(ctx, off)
        good = 1
        for j in range(min(sizes[i - 1], sizes[i])):
            if arena[off + j] != np.uint8(j % 251):
                good = 0
        kept[i] = good
        for j in range(sizes[i]):  # the pattern over the new size
            arena[off + j] = np.uint8(j % 251)
    devalloc.free(ctx, off)


@cuda.jit
def k_overrun(ctx, off, n):
    # Write n bytes from off: past a block's end, into its guard bytes.
    if cuda.grid(1) == 0:
        for j in range(n):
            ctx.arena[off + j] = np.uint8(0x5A)


# ----------------------------------------------------------------- helpers

def hold_sizes(seed, threads, steps, page):
    """Sizes 1 .. one page: slabs of every class a page holds, and one-page large blocks."""
    rng = np.random.default_rng(seed)
    return rng.integers(1, page + 1, (threads, steps)).astype(np.int64)


def model_of(heap, offs, held, allocs, failed):
    """The invariant checker's model of a quiescent heap whose live blocks are
    ``offs`` (of requested sizes ``held``) after ``allocs`` allocations and
    ``failed`` NULLs, all frees valid."""
    ps = heap.page_shift
    m = Model(heap.npages, ps=ps)
    for t in range(offs.shape[0]):
        for slot in range(offs.shape[1]):
            off, n = int(offs[t, slot]), int(held[t, slot])
            if off != NULL:
                m.live[off] = Block(t, slot, off, n, span(n, ps), ps=ps)
    m.allocs, m.failed = allocs, failed
    m.frees = allocs - len(m.live)
    return m


def assert_disjoint(blocks):
    """``blocks``: (offset, bytes) pairs; none overlaps the next."""
    spans = sorted(blocks)
    for (a, n), (b, _) in zip(spans, spans[1:]):
        assert a + n <= b, f"[{a}, {a + n}) overlaps the block at {b}"


# ------------------------------------------------------------- the churns

def hold_churn(heap, sizes, mode):
    """Run the hold churn of ``sizes`` on ``heap`` (profiled) in simulator warp
    ``mode``, check what holds in every interleaving, drain; return the NULLs.

    Checked: no block's bytes changed while held; every request answered
    (served or NULL); every NULL proved full by a search (issue 25); at the
    quiescent end, every invariant of the explorer's checker (the exact ones
    too: the metadata and ``usage()`` agree with the threads' records),
    ``live()`` and the large blocks in whole pages; after the drain,
    nothing lost.
    """
    ps = heap.page_shift
    threads, steps = sizes.shape
    offs = cuda.to_device(np.full((threads, HELD), NULL, np.int64))
    held = cuda.to_device(np.zeros((threads, HELD), np.int64))
    ok, nulls, bad = (cuda.to_device(np.zeros(threads, np.int64)) for _ in range(3))
    with warp.simulate(mode):
        k_hold[1, threads](heap.ctx, sizes, offs, held, ok, nulls, bad)
    offs, held = offs.copy_to_host(), held.copy_to_host()
    ok, nulls, bad = ok.copy_to_host(), nulls.copy_to_host(), bad.copy_to_host()
    assert bad.sum() == 0, "a block's bytes changed while its owner held it"
    assert (ok + nulls).tolist() == [steps] * threads
    u = heap.usage()
    assert u.failed == nulls.sum() == u.profile["failed_no_page"]
    assert u.profile["failed_residual"] == 0, u.profile  # every NULL proved full
    words = words_of(heap)
    assert L.page_shift_of(len(words)) == ps
    model = model_of(heap, offs, held, int(ok.sum()), int(nulls.sum()))
    check_safe(words, heap.npages, model)
    check_quiescent(words, heap.npages, model, words[L.H_PEAK_PAGES])
    live = sorted((int(o), span(int(n), ps)) for o, n in zip(offs.ravel(), held.ravel())
                  if o != NULL)
    assert heap.live() == live
    assert_disjoint(live)
    assert u.in_use == sum(n for _, n in live)
    assert u.large_blocks == sum(n > 1 << (ps - 1) for _, n in live)
    assert all(off % (1 << ps) == 0 for off, n in live if n > L.max_small(ps))
    with warp.simulate(mode):
        k_free_rows[1, threads](heap.ctx, offs)
    check_drained(words_of(heap), heap.npages)
    u = heap.usage()
    assert (u.in_use, u.reserved, u.live_blocks, u.invalid_frees) == (0, 0, 0, 0)
    assert u.allocs == u.frees == ok.sum()
    return nulls


def hold_table(page, mode, threads, seed):
    """The hold churn's sizes: 16 steps of 1 .. one page; in warp mode the
    lanes of a warp ask for one size at each step (groups of 32 lanes)."""
    ps = shift(page)
    sizes = hold_sizes(seed + ps, threads, 16, 1 << ps)
    if mode == "warp":
        sizes = np.repeat(sizes[:threads // 32], 32, axis=0)
    return sizes


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("mode", ["single", "warp"])
@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_racing_churn_keeps_every_invariant_and_gets_no_null(page, mode):
    ps = shift(page)
    threads = 32
    # Sizes up to a page: a live block holds one page at most, so the churn
    # never needs more than its live blocks' and one in flight per thread:
    # the heap holds that and a page per thread more, so a NULL would be a
    # race lost, not a full heap.
    npages = threads * (HELD + 2)
    heap = devalloc.Heap(npages << ps, page=page, profile=True)
    assert (heap.npages, heap.page, heap.page_shift) == (npages, 1 << ps, ps)
    nulls = hold_churn(heap, hold_table(page, mode, threads, 40), mode)
    assert nulls.sum() == 0, (nulls, heap.usage().profile)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("mode", ["single", "warp"])
@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_racing_churn_on_a_tight_heap_of_small_pages_keeps_every_invariant(page, mode):
    # A few dozen pages for up to 96 live or in-flight blocks: classes and
    # one-page blocks compete for pages, slabs retire and pages are taken
    # again; NULLs come (not asserted: how many depends on the interleaving),
    # and each must be proved full.
    ps = shift(page)
    heap = devalloc.Heap(24 << ps, page=page, profile=True)
    hold_churn(heap, hold_table(page, mode, 32, 70), mode)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("debug", [False, True], ids=["normal", "debug"])
@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_project_churn_on_a_partly_filled_heap_of_small_pages_gets_no_null(page, debug):
    # devalloc.testing.churn (4 live blocks per thread, sizes up to 3000 B:
    # large ones in these pages) on a heap partly filled with one-page blocks;
    # a debug heap's blocks carry guard bytes, which heap.check() checks.
    ps = shift(page)
    threads = 16
    fill = 48
    # Each live block takes 3 pages at most (guard bytes included): room
    # for every thread's four and one in flight beside the filled pages.
    npages = fill + threads * (C.SLOTS + 1) * L.pages_for(3000 + L.GUARD, ps)
    heap = devalloc.Heap(npages << ps, page=page, profile=True, debug=debug)
    offs = C.fill_pages(heap, fill)
    one_page = L.max_small(ps) + 1 if debug else 1 << ps  # live(): requested / reserved
    assert sorted(heap.live()) == sorted((int(o), one_page) for o in offs)
    nulls, bad = C.churn(heap, C.sizes_table(50 + ps, threads, 16, ps=ps), block=threads)
    assert bad.sum() == 0 and nulls.sum() == 0, (nulls, heap.usage().profile)
    u = heap.usage()
    assert (u.live_blocks, u.in_use, u.failed, u.invalid_frees) == (fill, fill << ps, 0, 0)
    assert u.profile["failed_residual"] == 0
    if debug:
        assert heap.check() is None  # no misuse recorded, every guard intact
    k_free_rows[1, fill](heap.ctx, offs.reshape(-1, 1))
    check_drained(words_of(heap), heap.npages)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_a_full_heap_of_small_pages_nulls_are_proved_full(page):
    # More demand than pages (every thread ends holding two one-page blocks,
    # 32 in all, in 8 pages): NULLs must come, each proved full, none a race
    # lost (hold_churn); every invariant holds and the heap drains whole.
    ps = shift(page)
    heap = devalloc.Heap(8 << ps, page=page, profile=True)
    sizes = np.full((16, 8), (1 << ps) // 2 + 1, np.int64)  # one page each
    nulls = hold_churn(heap, sizes, "single")
    assert nulls.sum() > 0
    assert heap.usage().profile["failed_full"] == nulls.sum()


# ------------------------------------------------------- exact, one thread

def test_usage_and_live_of_a_1k_page_heap_are_exact():
    heap = devalloc.Heap(8 * 1024, page=1024)
    assert (heap.npages, heap.capacity, heap.page, heap.page_shift) == (8, 8192, 1024, 10)
    assert "page=1024" in repr(heap)
    # 512 is a slab block (half a page, two to a slab), 513 a whole page.
    sizes = np.array([16, 100, 512, 512, 513, 1024, 1025, 3000, 2048, 1000, 16], np.int64)
    offs = cuda.to_device(np.zeros(sizes.size, np.int64))
    k_alloc_each[1, 1](heap.ctx, sizes, offs)
    got = offs.copy_to_host()
    # Pages: 16, 112 and 512 slabs (3), 513, 1024 (1 each), 1025 (2): 7 of 8;
    # 3000 (3 pages) and 2048 (2) cannot be served; 1000 takes the last page;
    # the second 16 shares the 16-byte slab.
    nulls = [i for i, off in enumerate(got) if off == NULL]
    assert nulls == [7, 8]
    c100 = L.class_size(L.size_class(100))
    live = [(int(got[i]), n) for i, n in enumerate(
        [16, c100, 512, 512, 1024, 1024, 2048, None, None, 1024, 16]) if n]
    assert heap.live() == sorted(live)
    assert_disjoint(live)
    for i in (4, 5, 6, 9):  # large blocks start pages
        assert got[i] % 1024 == 0
    assert got[3] - got[2] in (512, -512)  # one slab of two 512-byte blocks
    assert got[10] // 1024 == got[0] // 1024  # the 16-byte slab again
    u = heap.usage()
    assert (u.capacity, u.page, u.reserved, u.peak) == (8192, 1024, 8192, 8192)
    assert u.in_use == 16 + c100 + 512 + 512 + 1024 + 1024 + 2048 + 1024 + 16
    assert (u.allocs, u.failed, u.live_blocks, u.large_blocks) == (9, 2, 9, 4)
    assert {s: (c.blocks_live, c.slabs, c.slack_bytes) for s, c in u.classes.items()} == {
        16: (2, 1, 1024 - 32), c100: (1, 1, 1024 - c100), 512: (2, 1, 0)}
    k_free_rows[1, sizes.size](heap.ctx, got.reshape(-1, 1))
    u = heap.usage()
    assert (u.in_use, u.reserved, u.live_blocks, u.frees, u.peak) == (0, 0, 0, 9, 8192)
    check_drained(words_of(heap), heap.npages)


@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_alloc_aligned_aligns_up_to_the_page_and_refuses_beyond(page):
    ps = shift(page)
    heap = devalloc.Heap(32 << ps, page=page)
    sizes = np.array([1, 20, 100, 300, 1000, 17, 2 * page + 5, page // 2], np.int64)
    for align in (16, 64, 256, page // 2, page):
        offs = cuda.to_device(np.zeros(sizes.size, np.int64))
        k_aligned[1, sizes.size](heap.ctx, sizes, align, offs)
        got = offs.copy_to_host()
        assert (got != NULL).all() and (got % align == 0).all(), (align, got)
        assert heap.usage().failed == 0
        assert_disjoint(heap.live())
        k_free_rows[1, sizes.size](heap.ctx, got.reshape(-1, 1))
        assert heap.usage().in_use == 0
    for align in (2 * page, 3, 0):  # beyond the page, not a power of two
        offs = cuda.to_device(np.zeros(1, np.int64))
        k_aligned[1, 1](heap.ctx, np.array([64], np.int64), align, offs)
        assert offs.copy_to_host()[0] == NULL
    assert heap.usage().failed == 3
    check_drained(words_of(heap), heap.npages)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_bump_on_small_pages(page):
    ps = shift(page)
    npages = 32
    heap = devalloc.Heap(npages << ps, page=page)
    chunk = L.bump_chunk_pages(npages) << ps
    # Small bumps share chunks; one over half a chunk takes pages of its own.
    sizes = np.array([1, 16, 100, page // 2, page - 16, chunk // 2 + 1, 40, 3], np.int64)
    offs = cuda.to_device(np.zeros(sizes.size, np.int64))
    k_bump_serial[1, 1](heap.ctx, sizes, offs)  # one thread: exact figures
    got = offs.copy_to_host()
    assert (got != NULL).all() and (got % L.ALIGN == 0).all()
    assert_disjoint([(int(o), L.align_up(int(n))) for o, n in zip(got, sizes)])
    assert all(o + n <= heap.capacity for o, n in zip(got, sizes))
    assert got[5] % page == 0  # its own run of whole pages
    arena = heap.arena.copy_to_host()
    for i, (o, n) in enumerate(zip(got, sizes)):
        assert (arena[o:o + n] == i + 1).all()
    u = heap.usage()
    assert u.bump_allocs == sizes.size and u.live_blocks == 0
    # One chunk holds the small bumps; the big one took a run of its own.
    big = L.pages_for(L.align_up(chunk // 2 + 1), ps)
    assert u.reserved == u.peak == (L.bump_chunk_pages(npages) + big) << ps
    heap.reset()
    assert heap.usage().reserved == 0
    # Racing bumps, on a heap that holds every thread's chunk claim at once
    # (threads that race to replace a full chunk each claim one, and all but
    # one give theirs back) beside the data: no interleaving runs out of room.
    threads = 16
    heap = devalloc.Heap(threads * 8 << ps, page=page)
    sizes = np.random.default_rng(ps).integers(1, page, threads).astype(np.int64)
    offs = cuda.to_device(np.zeros(threads, np.int64))
    k_bump_each[1, threads](heap.ctx, sizes, offs)
    got = offs.copy_to_host()
    assert (got != NULL).all()
    assert_disjoint([(int(o), L.align_up(int(n))) for o, n in zip(got, sizes)])
    arena = heap.arena.copy_to_host()
    for i, (o, n) in enumerate(zip(got, sizes)):
        assert (arena[o:o + n] == i + 1).all(), i
    u = heap.usage()
    assert (u.bump_allocs, u.failed, u.live_blocks) == (threads, 0, 0)
    assert u.reserved % page == 0 and u.reserved <= heap.capacity


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_scoped_scratch_on_small_pages(page):
    ps = shift(page)
    threads = 16
    # Sizes from a few bytes to over a page: chunks of slab blocks and of pages.
    sizes = np.random.default_rng(60 + ps).integers(1, page + page // 2,
                                                     (threads, 5)).astype(np.int64)
    # A thread's chunks: at most one per request (5), each at most twice the
    # last or 4 requests (6 pages) and a header: 7 * (1 + 2 + 4 + 8 + 16)
    # pages and 5 more for the headers, 224 in all; the heap holds every
    # thread's at once, so no interleaving can leave a request without room.
    heap = devalloc.Heap(threads * 224 << ps, page=page, profile=True)
    offs = cuda.to_device(np.zeros(sizes.shape, np.int64))
    bad = cuda.to_device(np.zeros(threads, np.int64))
    k_scoped[1, threads](heap.ctx, sizes, offs, bad)
    got = offs.copy_to_host()
    assert bad.copy_to_host().sum() == 0
    assert (got != NULL).all() and (got % L.ALIGN == 0).all()
    u = heap.usage()
    assert (u.failed, u.scope_misuse, u.profile["failed_residual"]) == (0, 0, 0)
    assert (u.in_use, u.reserved, u.live_blocks, u.scoped_chunks) == (0, 0, 0, 0)
    assert heap.live() == []
    check_drained(words_of(heap), heap.npages)


@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_debug_heap_of_small_pages_keeps_guards_and_sizes(page):
    ps = shift(page)
    heap = devalloc.Heap(16 << ps, page=page, debug=True)
    sizes = np.array([8, 100, page // 2, page // 2 + 1, page, 2 * page + 3], np.int64)
    offs = cuda.to_device(np.zeros(sizes.size, np.int64))
    k_alloc_each[1, 1](heap.ctx, sizes, offs)
    got = offs.copy_to_host()
    assert (got != NULL).all()
    # live() names the requested sizes of a debug heap.
    assert heap.live() == sorted(zip(got.tolist(), sizes.tolist()))
    assert heap.check() is None
    k_overrun[1, 1](heap.ctx, int(got[3]), int(sizes[3]) + 4)  # 4 bytes into the guard
    with pytest.raises(devalloc.HeapCorruption,
                       match=f"guard bytes overwritten at offset {got[3]} "
                             f"\\(requested {sizes[3]} B\\)"):
        heap.check()
    k_free_rows[1, sizes.size](heap.ctx, got.reshape(-1, 1))
    u = heap.usage()
    assert (u.live_blocks, u.in_use, u.invalid_frees) == (0, 0, 0)
    check_drained(words_of(heap), heap.npages)


@pytest.mark.parametrize("page", PAGES[1:], ids=PAGE_IDS[1:])
def test_realloc_and_usable_size_follow_the_page(page):
    ps = shift(page)
    heap = devalloc.Heap(16 << ps, page=page)
    half = page // 2
    # slab -> slab -> a whole page (half + 1) -> two pages -> back to a slab
    sizes = np.array([100, half, half + 1, page + 1, 40], np.int64)
    offs, usable, kept = (cuda.to_device(np.zeros(sizes.size, np.int64)) for _ in range(3))
    k_realloc_chain[1, 1](heap.ctx, sizes, offs, usable, kept)
    offs, usable, kept = offs.copy_to_host(), usable.copy_to_host(), kept.copy_to_host()
    assert (offs != NULL).all()
    assert usable.tolist() == [span(int(n), ps) for n in sizes]
    assert usable.tolist()[1:4] == [half, page, 2 * page]
    assert kept[1:].tolist() == [1] * (sizes.size - 1)
    assert offs[2] % page == 0 and offs[3] % page == 0
    u = heap.usage()
    assert (u.in_use, u.live_blocks, u.failed, u.invalid_frees) == (0, 0, 0, 0)
    check_drained(words_of(heap), heap.npages)


# ------------------------------------------------------------- the host

def test_resize_keeps_the_page_and_auto_decides_again():
    heap = devalloc.Heap(20 * 1024, page=1024)
    heap.resize(40 * 1024)
    assert (heap.page, heap.npages) == (1024, 40)
    assert L.page_shift_of(heap.ctx.meta.shape[0]) == 10  # the metadata names its page
    # "auto": pages of capacity / AUTO_PAGES, from 1 KiB to 16 KiB.
    auto = devalloc.Heap(AUTO_PAGES * 1024, page="auto")
    assert (auto.page, auto.npages) == (1024, AUTO_PAGES)
    auto.resize(AUTO_PAGES * 4096)
    assert (auto.page, auto.npages) == (4096, AUTO_PAGES)
    auto.resize(2 * AUTO_PAGES * L.PAGE)  # capped at 16 KiB
    assert (auto.page, auto.npages) == (L.PAGE, 2 * AUTO_PAGES)
    auto.resize(4096)  # floored at 1 KiB
    assert (auto.page, auto.npages) == (1024, 4)
    # The resized heap serves kernels in its new page.
    offs = cuda.to_device(np.zeros(2, np.int64))
    k_alloc_each[1, 1](auto.ctx, np.array([513, 512], np.int64), offs)
    assert auto.live() == sorted(zip(offs.copy_to_host().tolist(), [1024, 512]))
    with pytest.raises(ValueError, match="at least 1024"):
        heap.resize(1000)
    assert (heap.page, heap.npages) == (1024, 40)  # a failed resize keeps the heap


def test_heap_inside_memory_with_small_pages():
    buf = cuda.to_device(np.zeros(L.memory_for_pages(12, 10) + 4096, np.uint8))
    heap = devalloc.Heap(memory=buf, page=1024)
    assert heap.page == 1024 and heap.npages >= 12
    assert heap.meta_bytes == L.meta_bytes(heap.npages, 10)
    sizes = np.array([600, 16, 1000, 300], np.int64)
    offs = cuda.to_device(np.zeros(sizes.size, np.int64))
    k_alloc_each[1, 1](heap.ctx, sizes, offs)
    got = offs.copy_to_host()
    assert (got != NULL).all() and got[0] % 1024 == 0 and got[2] % 1024 == 0
    u = heap.usage()
    assert (u.page, u.live_blocks, u.large_blocks) == (1024, 4, 2)
    heap.close()
    # The smallest buffer holds one page of its size, and one byte less none.
    for page in (1024, 4096):
        least = min_memory(L.floor_log2(page))
        one = devalloc.Heap(memory=cuda.device_array(least, np.uint8), page=page)
        assert (one.npages, one.page) == (1, page)
        with pytest.raises(ValueError, match=f"too small: .*at least {least} bytes "
                                             f"\\(metadata, one {page}-byte page"):
            devalloc.Heap(memory=cuda.device_array(least - 1, np.uint8), page=page)
    # "auto" decides from the buffer's size.
    buf = cuda.device_array(AUTO_PAGES * 4096 + (1 << 20), np.uint8)
    assert devalloc.Heap(memory=buf, page="auto").page == 4096


@pytest.mark.parametrize("page, error", [
    (3000, ValueError), (512, ValueError), (32768, ValueError), ("big", ValueError),
    (True, TypeError), (1024.0, TypeError),
])
def test_bad_page_is_refused_saying_what_is_allowed(page, error):
    with pytest.raises(error, match="page= must be .*'auto' or a power of two from 1024 to 16384"):
        devalloc.Heap(1 << 20, page=page)


def test_capacity_below_one_page_is_refused():
    with pytest.raises(ValueError, match="at least 1024 bytes"):
        devalloc.Heap(1000, page=1024)
    with pytest.raises(ValueError, match="at least 4096 bytes"):
        devalloc.Heap(4000, page=4096)
    assert devalloc.Heap(1024, page=1024).npages == 1
