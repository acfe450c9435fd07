"""Concurrency on the CUDA simulator: threads allocate and free at once.

Every test runs with ``fine_interleaving`` (the interpreter switches threads
every 20 microseconds), so simulator threads interleave inside ``alloc`` and
``free``. Sizes come from a seeded NumPy generator: mostly 1..8192 bytes (every
size class), a few large blocks. Threads write a pattern into every block they
get and check it before freeing, recording any mismatch, and count their
successes and NULLs, which the heap's counters must match exactly.

The simulator runs one block at a time, so contention is among the threads
of a block. Each kernel does a few hundred allocations: many threads taking
one simulated atomic lock convoy, and thousands of contended atomics can
take minutes.
"""

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L
from patterns import linear_id, pattern_ok, write_pattern


NULL = devalloc.NULL

#: (blocks, threads per block); the last one is a 2-D block of 32 threads.
SHAPES = [(1, 32), (2, 16), (4, 8), (1, (8, 4))]
SHAPE_IDS = ["1x32", "2x16", "4x8", "1x(8x4)"]

pytestmark = pytest.mark.usefixtures("fine_interleaving")


# ----------------------------------------------------------------- helpers


def rounded(n, ps=L.PAGE_SHIFT):
    """Return the bytes the heap reserves for a block of ``n`` bytes (pages of ``2**ps``)."""
    if n <= L.max_small(ps):
        return L.class_size(L.size_class(n))
    return L.pages_for(n, ps) << ps


def nthreads(shape):
    blocks, tpb = shape
    return blocks * int(np.prod(tpb))


def size_table(seed, threads, rounds, large=0.06, large_max=40_000, ps=L.PAGE_SHIFT):
    """Return a (threads, rounds) table: 1..8192 bytes (half a page: slab
    blocks), a few large blocks (up to ``large_max`` in 16 KiB pages, scaled
    to the page)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, L.max_small(ps) + 1, (threads, rounds))
    big = rng.random((threads, rounds)) < large
    sizes[big] = rng.integers(L.max_small(ps) + 1, (large_max >> (L.PAGE_SHIFT - ps)) + 1,
                              int(big.sum()))
    return sizes.astype(np.int64)


def check_disjoint(offs, sizes, ps=L.PAGE_SHIFT):
    spans = sorted((int(o), int(o) + rounded(int(n), ps)) for o, n in zip(offs, sizes))
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 <= b0, f"blocks [{a0}, {a1}) and [{b0}, {b1}) overlap"


def check_drained(heap, allocs, failed):
    """Every block was freed; the counters match what the threads recorded."""
    u = heap.usage()
    assert (u.allocs, u.frees, u.failed, u.invalid_frees) == (allocs, allocs, failed, 0)
    assert (u.in_use, u.reserved, u.live_blocks) == (0, 0, 0)
    assert u.classes == {}
    assert heap.live() == []
    assert u.peak <= u.capacity
    return u


# ------------------------------------------------------------------ kernels


@cuda.jit
def k_churn(ctx, sizes, ok, nulls, bad):
    """Each round: allocate, write, yield to others, verify, free."""
    i = linear_id()
    for r in range(sizes.shape[1]):
        n = sizes[i, r]
        off = devalloc.alloc(ctx, n)
        if off == NULL:
            nulls[i] += 1
            continue
        ok[i] += 1
        key = i * 64 + r
        write_pattern(ctx, off, n, key)
        if not pattern_ok(ctx, off, n, key):
            bad[i] += 1
        devalloc.free(ctx, off)


@cuda.jit
def k_hold_two(ctx, sizes, ok, nulls, bad, held_off, held_n, held_key):
    """Each round: allocate; while two blocks are held, free the oldest.

    The blocks a thread holds are re-verified every round, so a block that
    another thread was handed while it was live shows up as a mismatch. The
    last two blocks stay live; ``held_*`` describe them (NULL if fewer).
    """
    i = linear_id()
    h = 0
    for r in range(sizes.shape[1]):
        n = sizes[i, r]
        off = devalloc.alloc(ctx, n)
        if off == NULL:
            nulls[i] += 1
            continue
        ok[i] += 1
        key = i * 64 + r
        write_pattern(ctx, off, n, key)
        if h == 2:
            if not pattern_ok(ctx, held_off[i, 0], held_n[i, 0], held_key[i, 0]):
                bad[i] += 1
            devalloc.free(ctx, held_off[i, 0])
            held_off[i, 0] = held_off[i, 1]
            held_n[i, 0] = held_n[i, 1]
            held_key[i, 0] = held_key[i, 1]
            h = 1
        held_off[i, h] = off
        held_n[i, h] = n
        held_key[i, h] = key
        h += 1
        for k in range(h):
            if not pattern_ok(ctx, held_off[i, k], held_n[i, k], held_key[i, k]):
                bad[i] += 1


@cuda.jit
def k_verify_free_held(ctx, held_off, held_n, held_key, bad):
    i = linear_id()
    for k in range(2):
        if held_off[i, k] != NULL:
            if not pattern_ok(ctx, held_off[i, k], held_n[i, k], held_key[i, k]):
                bad[i] += 1
            devalloc.free(ctx, held_off[i, k])


@cuda.jit(device=True)
def phase_alloc(ctx, sizes, i, r0, got, ok, nulls, phase):
    """Allocate sizes[i, r0] and sizes[i, r0 + 1], keep them in got[i]."""
    for k in range(2):
        n = sizes[i, r0 + k]
        off = devalloc.alloc(ctx, n)
        got[i, k] = off
        if off == NULL:
            nulls[i, phase] += 1
        else:
            ok[i, phase] += 1
            write_pattern(ctx, off, n, i * 64 + r0 + k)


@cuda.jit(device=True)
def phase_free(ctx, sizes, i, r0, got, bad):
    for k in range(2):
        off = got[i, k]
        if off != NULL:
            if not pattern_ok(ctx, off, sizes[i, r0 + k], i * 64 + r0 + k):
                bad[i] += 1
            devalloc.free(ctx, off)


@cuda.jit
def k_exhaust_first(ctx, sizes, ok, nulls, got):
    """Phase 0: every thread asks for two blocks and keeps what it gets."""
    i = linear_id()
    phase_alloc(ctx, sizes, i, 0, got, ok, nulls, 0)


@cuda.jit
def k_exhaust_rest(ctx, sizes, ok, nulls, bad, got):
    """Free phase 0, then phase 1 like phase 0, then an unsynchronized churn.

    The barrier makes phase 1's demand simultaneous, so when the heap is
    smaller than the demand some allocations must fail.
    """
    i = linear_id()
    phase_free(ctx, sizes, i, 0, got, bad)
    cuda.syncthreads()  # the heap is empty again
    phase_alloc(ctx, sizes, i, 2, got, ok, nulls, 1)
    cuda.syncthreads()  # every thread has asked for its two blocks
    phase_free(ctx, sizes, i, 2, got, bad)
    for r in range(4, sizes.shape[1]):
        n = sizes[i, r]
        off = devalloc.alloc(ctx, n)
        if off == NULL:
            nulls[i, 2] += 1
            continue
        ok[i, 2] += 1
        write_pattern(ctx, off, n, i * 64 + r)
        if not pattern_ok(ctx, off, n, i * 64 + r):
            bad[i] += 1
        devalloc.free(ctx, off)


# ------------------------------------------------------------------- checks


def zeros(t, *more):
    return np.zeros((t, *more), np.int64)


def check_churn(shape, seed, rounds=16, page=None):
    t = nthreads(shape)
    ps = L.PAGE_SHIFT if page is None else L.floor_log2(page)
    sizes = size_table(seed, t, rounds, ps=ps)
    # Room for every thread's largest block at once, twice over (and 64 pages).
    heap = devalloc.Heap(2 * t * max(rounded(int(n), ps) for n in sizes.ravel())
                         + (64 << ps), page=page)
    ok, nulls, bad = zeros(t), zeros(t), zeros(t)
    blocks, tpb = shape
    k_churn[blocks, tpb](heap.ctx, sizes, ok, nulls, bad)
    assert bad.tolist() == [0] * t
    # Roomy heap: contention alone must not make an allocation fail.
    assert nulls.tolist() == [0] * t
    assert ok.tolist() == [rounds] * t
    check_drained(heap, allocs=int(ok.sum()), failed=0)


def check_hold_two(shape, seed, rounds=12, page=None):
    t = nthreads(shape)
    ps = L.PAGE_SHIFT if page is None else L.floor_log2(page)
    sizes = size_table(seed, t, rounds, ps=ps)
    heap = devalloc.Heap(3 * t * max(rounded(int(n), ps) for n in sizes.ravel())
                         + (64 << ps), page=page)
    ok, nulls, bad = zeros(t), zeros(t), zeros(t)
    held_off = np.full((t, 2), NULL, np.int64)
    held_n, held_key = zeros(t, 2), zeros(t, 2)
    blocks, tpb = shape
    k_hold_two[blocks, tpb](heap.ctx, sizes, ok, nulls, bad, held_off, held_n, held_key)
    assert bad.tolist() == [0] * t
    assert nulls.tolist() == [0] * t
    # Each thread holds its last two blocks: rounds-2 and rounds-1.
    assert held_n.tolist() == sizes[:, -2:].tolist()
    offs, ns = held_off.ravel(), held_n.ravel()
    assert (offs % L.ALIGN == 0).all() and (offs >= 0).all()
    check_disjoint(offs, ns, ps)
    assert sorted(heap.live()) == sorted(
        (int(o), rounded(int(n), ps)) for o, n in zip(offs, ns))
    u = heap.usage()
    live = 2 * t
    assert (u.allocs, u.frees, u.live_blocks) == (t * rounds, t * rounds - live, live)
    assert u.in_use == sum(rounded(int(n), ps) for n in ns)
    assert u.large_blocks == sum(int(n) > L.max_small(ps) for n in ns)
    assert (u.failed, u.invalid_frees) == (0, 0)
    k_verify_free_held[blocks, tpb](heap.ctx, held_off, held_n, held_key, bad)
    assert bad.tolist() == [0] * t
    check_drained(heap, allocs=t * rounds, failed=0)


def check_one_page_competition(seed, threads=32, rounds=24):
    """One page: slabs of four classes and a one-page block take turns."""
    heap = devalloc.Heap(L.MIN_CAPACITY)
    assert heap.npages == 1
    rng = np.random.default_rng(seed)
    choices = np.array([16, 48, 4096, 8192, L.PAGE], np.int64)
    sizes = choices[rng.integers(0, len(choices), (threads, rounds))]
    ok, nulls, bad = zeros(threads), zeros(threads), zeros(threads)
    k_churn[1, threads](heap.ctx, sizes, ok, nulls, bad)  # failures expected and counted
    assert bad.tolist() == [0] * threads
    assert int(ok.sum()) > 0 and int(nulls.sum()) > 0
    assert (ok + nulls).tolist() == [rounds] * threads
    check_drained(heap, allocs=int(ok.sum()), failed=int(nulls.sum()))
    assert heap.usage().peak == L.PAGE


def exhaust(heap, sizes):
    """Run phase 0, check its live set, then the rest; return the records."""
    threads = sizes.shape[0]
    ok, nulls, bad = zeros(threads, 3), zeros(threads, 3), zeros(threads)
    got = np.full((threads, 2), -99, np.int64)
    k_exhaust_first[1, threads](heap.ctx, sizes, ok, nulls, got)
    held = got.ravel() != NULL
    offs, ns = got.ravel()[held], sizes[:, :2].ravel()[held]
    assert len(offs) == int(ok[:, 0].sum()) > 0
    check_disjoint(offs, ns)
    assert sorted(heap.live()) == sorted(
        (int(o), rounded(int(n))) for o, n in zip(offs, ns))
    u = heap.usage()
    assert (u.allocs, u.failed, u.live_blocks) == (len(offs), int(nulls.sum()), len(offs))
    k_exhaust_rest[1, threads](heap.ctx, sizes, ok, nulls, bad, got)
    assert bad.tolist() == [0] * threads
    return ok, nulls


def check_exhaust_one_size(n, threads=48, rounds=12):
    """Demand of 2 * threads blocks of ``n`` bytes on a 3-page heap."""
    heap = devalloc.Heap(L.capacity_for_pages(3))
    slots = heap.npages * L.class_blocks(L.size_class(n))
    assert 2 * threads > slots  # some requests must fail in both phases
    ok, nulls = exhaust(heap, np.full((threads, rounds), n, np.int64))
    # With all requests outstanding at once, the heap serves every slot it
    # has, in each phase: a full heap, not contention, is what fails them.
    assert ok[:, :2].sum(axis=0).tolist() == [slots, slots]
    assert nulls[:, :2].sum(axis=0).tolist() == [2 * threads - slots] * 2
    check_drained(heap, allocs=int(ok.sum()), failed=int(nulls.sum()))
    assert heap.usage().peak == heap.capacity


def check_exhaust_mixed(seed, threads=48, rounds=12):
    heap = devalloc.Heap(L.capacity_for_pages(8))
    sizes = size_table(seed, threads, rounds, large=0.1, large_max=3 * L.PAGE)
    for r0 in (0, 2):  # each synchronized phase asks for over twice the heap
        assert sum(rounded(int(n)) for n in sizes[:, r0:r0 + 2].ravel()) > 2 * heap.capacity
    ok, nulls = exhaust(heap, sizes)
    assert (ok[:, :2].sum(axis=0) > 0).all()
    assert (nulls[:, :2].sum(axis=0) > 0).all()
    check_drained(heap, allocs=int(ok.sum()), failed=int(nulls.sum()))


# -------------------------------------------------------------------- tests


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_churn_mixed_sizes_counters_reconcile(shape):
    check_churn(shape, seed=SHAPES.index(shape) + 11)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_churn_holding_two_blocks_leaves_a_disjoint_live_set(shape):
    check_hold_two(shape, seed=SHAPES.index(shape) + 23)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_page_heap_classes_take_turns(seed):
    check_one_page_competition(seed)


@pytest.mark.parametrize("n", [1024, 4096, 8192])
def test_exhaustion_serves_every_slot_and_counts_every_null(n):
    check_exhaust_one_size(n)


@pytest.mark.parametrize("seed", [5, 6])
def test_exhaustion_with_mixed_sizes_counts_every_null(seed):
    check_exhaust_mixed(seed)


@pytest.mark.parametrize("page", [4096, 1024])
def test_churn_on_small_pages_counters_reconcile(page):
    # Heap(page=): half a page is the largest slab block, large blocks of a
    # few pages; the same rules (no NULL in a roomy heap, exact counters).
    check_churn((1, 32), seed=31, page=page)


@pytest.mark.parametrize("page", [4096, 1024])
def test_churn_on_small_pages_holding_two_blocks_leaves_a_disjoint_live_set(page):
    check_hold_two((2, 16), seed=37, page=page)
