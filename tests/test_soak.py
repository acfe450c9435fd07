"""Soak and faults on the CUDA simulator, bounded for CI.

What tests/test_churn_sim.py does not: blocks that stay live *across*
launches while the heap runs out of room inside each launch (a thread that
gets NULL frees its oldest block and goes on), interleaved with invalid
frees of three kinds, on 1-D and 2-D grids; every thread allocating greedily
until NULL, freeing half and allocating until NULL again; and a reset after a
run full of failures, invalid frees and double frees, after which the heap
behaves exactly like a new one. After every launch every counter is
reconciled with what the threads recorded: allocs, frees, failed and
invalid_frees exact, allocs - frees == live blocks == what ``live()`` lists,
in_use == their reserved bytes. At the end everything is freed and one
block of the whole arena must fit: nothing was lost for good.

All tests run with ``fine_interleaving`` (a thread switch every 20 us).
"""

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L
from patterns import linear_id, pattern_ok, write_pattern

NULL = devalloc.NULL
#: Blocks a soak thread holds at most; a new block replaces the oldest.
HOLD = 3
#: counts[i, k]: successes, NULLs, invalid frees, bad patterns,
#: successes that came after a NULL in the same launch.
OK, NULLS, INVALID, BAD, AFTER_NULL = range(5)

pytestmark = pytest.mark.usefixtures("fine_interleaving")


# ----------------------------------------------------------------- helpers


def rounded(n):
    if n <= L.MAX_SMALL:
        return L.class_size(L.size_class(n))
    return L.pages_for(n) * L.PAGE


def nthreads(grid, block):
    return int(np.prod(grid)) * int(np.prod(block))


def sizes_for(seed, shape, large=0.08, large_max=2 * L.PAGE):
    """Mostly small sizes (every class), a few of one or two pages."""
    rng = np.random.default_rng(seed)
    small = rng.integers(1, 2049, shape)
    mid = rng.random(shape) < 0.25
    small[mid] = rng.integers(2049, L.MAX_SMALL + 1, int(mid.sum()))
    big = rng.random(shape) < large
    small[big] = rng.integers(L.MAX_SMALL + 1, large_max + 1, int(big.sum()))
    return small.astype(np.int64)


def check_disjoint(pairs):
    spans = sorted(pairs)
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a0 + a1 <= b0, f"blocks [{a0}, {a0 + a1}) and [{b0}, {b0 + b1}) overlap"


def check_reconciled(heap, counts, held_off, held_n, invalid_extra=0):
    """The heap's counters and live list are exactly what the threads recorded."""
    live = held_off != NULL
    pairs = [(int(o), rounded(int(n))) for o, n in zip(held_off[live], held_n[live])]
    check_disjoint(pairs)
    u = heap.usage()
    assert u.allocs == int(counts[:, OK].sum())
    assert u.failed + u.empty_requests == int(counts[:, NULLS].sum())
    assert u.invalid_frees == int(counts[:, INVALID].sum()) + invalid_extra
    assert u.live_blocks == len(pairs) == u.allocs - u.frees
    assert u.in_use == sum(s for _, s in pairs)
    assert sorted(heap.live()) == sorted(pairs)
    assert 0 < u.peak <= u.capacity and u.reserved <= u.peak
    return u


def check_nothing_lost(heap):
    """Everything was freed: the heap is empty and one block of it all fits."""
    u = heap.usage()
    assert (u.in_use, u.reserved, u.live_blocks, u.classes) == (0, 0, 0, {})
    assert u.allocs == u.frees
    out = np.full(1, -99, np.int64)
    k_alloc_free[1, 1](heap.ctx, heap.capacity, out)
    assert out[0] == 0
    after = heap.usage()
    assert (after.allocs, after.frees) == (u.allocs + 1, u.frees + 1)
    assert (after.in_use, after.reserved, after.peak) == (0, 0, heap.capacity)


# ---------------------------------------------------------- device helpers


@cuda.jit(device=True)
def drop(ctx, i, k, held_off, held_n, held_key, counts):
    """Verify and free held block ``k`` of thread ``i``, if any."""
    off = held_off[i, k]
    if off != NULL:
        if not pattern_ok(ctx, off, held_n[i, k], held_key[i, k]):
            counts[i, BAD] += 1
        devalloc.free(ctx, off)
        held_off[i, k] = NULL


@cuda.jit(device=True)
def invalid_free(ctx, off, n, kind):
    """Free an offset that is never a block start while ``off`` stays live."""
    if kind == 0:
        devalloc.free(ctx, off + 8)  # misaligned
    elif kind == 1 and n > 16:
        devalloc.free(ctx, off + 16)  # inside the block (it pins its page)
    elif kind == 1:
        devalloc.free(ctx, off - 7)
    else:
        devalloc.free(ctx, ctx.arena.shape[0] + 16 * kind)  # outside


# ------------------------------------------------------------------ kernels


@cuda.jit
def k_soak(ctx, sizes, launch, held_off, held_n, held_key, counts):
    """One launch of the soak: keep up to HOLD blocks, replacing the oldest.

    On NULL (the heap is full) the thread frees its oldest block and goes
    on; blocks held at the end stay live for the next launch, which first
    checks they still hold their bytes.
    """
    i = linear_id()
    for k in range(HOLD):
        if held_off[i, k] != NULL and not pattern_ok(ctx, held_off[i, k], held_n[i, k],
                                                     held_key[i, k]):
            counts[i, BAD] += 1
    failed_once = False
    for r in range(sizes.shape[1]):
        n = sizes[i, r]
        slot = (launch * sizes.shape[1] + r) % HOLD
        off = devalloc.alloc(ctx, n)
        if off == NULL:
            counts[i, NULLS] += 1
            failed_once = True
            drop(ctx, i, slot, held_off, held_n, held_key, counts)
            continue
        counts[i, OK] += 1
        if failed_once:
            counts[i, AFTER_NULL] += 1
        key = i * 7 + launch * 61 + r * 3
        write_pattern(ctx, off, n, key)
        drop(ctx, i, slot, held_off, held_n, held_key, counts)
        held_off[i, slot] = off
        held_n[i, slot] = n
        held_key[i, slot] = key
        if r % 3 == 1:
            invalid_free(ctx, off, n, (i + r) % 3)
            counts[i, INVALID] += 1


@cuda.jit
def k_release(ctx, held_off, held_n, held_key, counts):
    i = linear_id()
    for k in range(HOLD):
        drop(ctx, i, k, held_off, held_n, held_key, counts)


@cuda.jit
def k_greedy(ctx, sizes, got, counts):
    """Allocate until NULL, free every other block, again until NULL, free all."""
    i = linear_id()
    cap = got.shape[1]
    m = sizes.shape[1]
    h = 0
    r = 0
    full = False
    while h < cap:
        n = sizes[i, r % m]
        off = devalloc.alloc(ctx, n)
        r += 1
        if off == NULL:
            counts[i, NULLS] += 1
            full = True
            break
        counts[i, OK] += 1
        write_pattern(ctx, off, n, i * 53 + h)
        got[i, h] = off
        h += 1
    kept = 0
    for k in range(h):  # free every other block, compact the rest
        off = got[i, k]
        n = sizes[i, k % m]
        if not pattern_ok(ctx, off, n, i * 53 + k):
            counts[i, BAD] += 1
        if k % 2 == 0:
            devalloc.free(ctx, off)
        else:
            got[i, kept] = off
            kept += 1
    h2 = 0
    while kept + h2 < cap:
        n = sizes[i, (r + h2) % m]
        off = devalloc.alloc(ctx, n)
        if off == NULL:
            counts[i, NULLS] += 1
            break
        counts[i, OK] += 1
        if full:
            counts[i, AFTER_NULL] += 1
        got[i, kept + h2] = off
        h2 += 1
    for k in range(kept + h2):
        devalloc.free(ctx, got[i, k])


@cuda.jit
def k_misuse(ctx, sizes, held_off, held_n, counts):
    """Over-ask a small heap, with invalid frees of every kind and free(NULL)."""
    i = linear_id()
    for r in range(sizes.shape[1]):
        devalloc.free(ctx, 8 + 32 * (i + r))  # misaligned: never a block
        counts[i, INVALID] += 1
        n = sizes[i, r]
        off = devalloc.alloc(ctx, n)
        if off == NULL:
            counts[i, NULLS] += 1
            devalloc.free(ctx, off)  # free(NULL): a no-op, not counted
            continue
        counts[i, OK] += 1
        invalid_free(ctx, off, n, r % 3)
        counts[i, INVALID] += 1
        if held_off[i, 0] != NULL:
            devalloc.free(ctx, held_off[i, 0])
        held_off[i, 0] = off
        held_n[i, 0] = n


@cuda.jit
def k_serial_free(ctx, offs):
    for k in range(offs.shape[0]):
        devalloc.free(ctx, offs[k])


@cuda.jit
def k_serial_alloc(ctx, sizes, out):
    for k in range(sizes.shape[0]):
        out[k] = devalloc.alloc(ctx, sizes[k])


@cuda.jit
def k_alloc_free(ctx, n, out):
    out[0] = devalloc.alloc(ctx, n)
    devalloc.free(ctx, out[0])


# ------------------------------------------------------------------- checks


def check_soak(grid, block, seed, launches=8, rounds=12, npages=12):
    t = nthreads(grid, block)
    heap = devalloc.Heap(L.capacity_for_pages(npages))
    held_off = np.full((t, HOLD), NULL, np.int64)
    held_n = np.zeros((t, HOLD), np.int64)
    held_key = np.zeros((t, HOLD), np.int64)
    counts = np.zeros((t, 5), np.int64)
    for launch in range(launches):
        sizes = sizes_for(seed * 100 + launch, (t, rounds))
        k_soak[grid, block](heap.ctx, sizes, launch, held_off, held_n, held_key, counts)
        assert counts[:, BAD].tolist() == [0] * t
        check_reconciled(heap, counts, held_off, held_n)
    # The heap ran out inside kernels, and threads allocated again after that.
    assert counts[:, NULLS].sum() > 0 and counts[:, AFTER_NULL].sum() > 0
    k_release[grid, block](heap.ctx, held_off, held_n, held_key, counts)
    assert counts[:, BAD].tolist() == [0] * t
    check_reconciled(heap, counts, held_off, held_n)
    check_nothing_lost(heap)


def check_greedy(grid, block, seed, npages=8, cap=24):
    t = nthreads(grid, block)
    heap = devalloc.Heap(L.capacity_for_pages(npages))
    sizes = sizes_for(seed, (t, 16), large=0.05)
    got = np.full((t, cap), NULL, np.int64)
    counts = np.zeros((t, 5), np.int64)
    k_greedy[grid, block](heap.ctx, sizes, got, counts)
    assert counts[:, BAD].tolist() == [0] * t
    u = heap.usage()
    assert (u.allocs, u.frees) == (int(counts[:, OK].sum()),) * 2
    assert (u.failed, u.invalid_frees) == (int(counts[:, NULLS].sum()), 0)
    assert counts[:, NULLS].sum() > 0 and counts[:, AFTER_NULL].sum() > 0
    check_nothing_lost(heap)


def misuse_run(heap, threads=32, rounds=8, seed=3):
    """Run k_misuse, free what is left, double-free it all; return the figures."""
    sizes = sizes_for(seed, (threads, rounds), large=0.05)
    sizes[:, 2] = heap.capacity + 1  # never fits
    sizes[:, 4] = 0  # never valid
    held = np.full((threads, 1), NULL, np.int64)
    held_n = np.zeros((threads, 1), np.int64)
    counts = np.zeros((threads, 5), np.int64)
    k_misuse[1, threads](heap.ctx, sizes, held, held_n, counts)
    check_reconciled(heap, counts, held, held_n)
    last = held[held != NULL]
    k_serial_free[1, 1](heap.ctx, last)
    k_serial_free[1, 1](heap.ctx, last)  # double frees, serially: all invalid
    u = heap.usage()
    assert u.invalid_frees == int(counts[:, INVALID].sum()) + len(last)
    assert u.failed + u.empty_requests == int(counts[:, NULLS].sum()) >= 2 * threads
    assert (u.live_blocks, u.in_use, u.reserved, u.allocs - u.frees) == (0, 0, 0, 0)
    return u


def check_reset_after_misuse():
    heap = devalloc.Heap(L.capacity_for_pages(4))
    u = misuse_run(heap)
    assert u.invalid_frees > 8 * 32 and u.failed >= 2 * 32 and u.allocs > 0
    heap.reset()
    fresh = devalloc.Heap(L.capacity_for_pages(4))
    assert heap.usage() == fresh.usage()
    assert heap.live() == []
    # After the reset the heap behaves exactly like a new one: same offsets,
    # same figures, for the same serial history.
    sizes = np.array([64, 64, 9000, 100, 8192, 8192, 20000, 16, 4096], np.int64)
    out_a = np.full(len(sizes), -99, np.int64)
    out_b = np.full(len(sizes), -99, np.int64)
    k_serial_alloc[1, 1](heap.ctx, sizes, out_a)
    k_serial_alloc[1, 1](fresh.ctx, sizes, out_b)
    assert out_a.tolist() == out_b.tolist()
    assert heap.usage() == fresh.usage()
    assert heap.usage().classes == fresh.usage().classes
    # And a second misuse run is counted from zero again, exactly.
    heap.reset()
    misuse_run(heap)


# -------------------------------------------------------------------- tests

SOAK_SHAPES = [((1,), (32,)), ((2,), (16,)), ((4,), (8,)), ((2, 2), (4, 2))]
SOAK_IDS = ["1x32", "2x16", "4x8", "(2x2)x(4x2)"]


@pytest.mark.parametrize("grid, block", SOAK_SHAPES, ids=SOAK_IDS)
def test_soak_blocks_live_across_launches_through_exhaustion(grid, block):
    check_soak(grid, block, seed=SOAK_SHAPES.index((grid, block)) + 1)


@pytest.mark.parametrize("grid, block", [((1,), (32,)), ((3,), (8,)), ((2, 1), (2, 4))],
                         ids=["1x32", "3x8", "(2x1)x(2x4)"])
def test_greedy_exhaustion_then_frees_then_exhaustion_again(grid, block):
    check_greedy(grid, block, seed=int(np.prod(grid)) * 7 + int(np.prod(block)))


def test_reset_after_failures_invalid_and_double_frees_is_a_new_heap():
    check_reset_after_misuse()
