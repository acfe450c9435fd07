"""Warp-aggregated ``alloc`` and ``free`` with groups larger than one.

The simulator's "warp" mode (``devalloc.sim.warp.simulate("warp")``) makes the
32 lanes of each warp rendezvous at ``warp.group``, so lanes asking for the
same class (or freeing blocks of the same bitmap word) form real groups, as
on a GPU. Every kernel here is convergent: all lanes of a warp reach
``alloc``/``free`` together, as that mode requires. Exact figures come from
the layout; atomics are counted by kind.
"""

import numpy as np
import pytest
from numba import config, cuda

import devalloc
from devalloc import layout as L
from devalloc.sim import warp
from devalloc.sim.atomics import count_atomics
from patterns import linear_id, pattern_ok, write_pattern

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator warp modes")

NULL = devalloc.NULL


@cuda.jit
def k_alloc(ctx, sizes, offs):
    i = linear_id()
    off = devalloc.alloc(ctx, sizes[i])
    offs[i] = off
    if off != NULL:
        write_pattern(ctx, off, sizes[i], i)


@cuda.jit
def k_check_free(ctx, sizes, offs, ok):
    i = linear_id()
    off = offs[i]
    if off != NULL:
        ok[i] = pattern_ok(ctx, off, sizes[i], i)
    devalloc.free(ctx, off)


def run(kernel, shape, *args, mode="warp"):
    with warp.simulate(mode), count_atomics() as n:
        kernel[shape](*args)
    return n


def spans_disjoint(offs, sizes):
    spans = sorted((o, o + L.class_size(L.size_class(s))) for o, s in zip(offs, sizes))
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_mixed_classes_form_one_group_per_class():
    threads = 64
    sizes = np.array([(16, 100, 1000)[i % 3] for i in range(threads)], np.int64)
    heap = devalloc.Heap(L.capacity_for_pages(16))
    offs = cuda.to_device(np.full(threads, NULL, np.int64))
    d_sizes = cuda.to_device(sizes)
    n = run(k_alloc, (1, threads), heap.ctx, d_sizes, offs)
    got = offs.copy_to_host()
    assert (got != NULL).all() and spans_disjoint(got, sizes)
    # Two warps, three classes each: at least one cas per group; each slab
    # taken costs a pages-used add and a peak max. The two warps' leaders
    # may race for a page, and a class may then hold a second slab.
    taken = n.by_kind["add"]
    assert n.by_kind["cas"] >= 6 and n.by_kind["max"] == taken and 3 <= taken <= 6
    assert heap.usage().live_blocks == threads
    ok = cuda.to_device(np.zeros(threads, np.int64))
    run(k_check_free, (1, threads), heap.ctx, d_sizes, offs, ok)
    assert ok.copy_to_host().all()
    u = heap.usage()
    assert (u.live_blocks, u.frees, u.invalid_frees, u.reserved) == (0, threads, 0, 0)


def test_a_group_larger_than_the_heap_gets_what_fits_and_nulls_counted():
    # One page of 8192-byte blocks holds two: 32 lanes ask for one each.
    heap = devalloc.Heap(L.capacity_for_pages(1))
    sizes = cuda.to_device(np.full(32, 8192, np.int64))
    offs = cuda.to_device(np.full(32, NULL, np.int64))
    run(k_alloc, (1, 32), heap.ctx, sizes, offs)
    got = offs.copy_to_host()
    assert sorted(got[got != NULL].tolist()) == [0, 8192]
    u = heap.usage()
    assert (u.allocs, u.failed, u.live_blocks) == (2, 30, 2)


def test_a_group_spans_slabs_when_one_slab_runs_out():
    # 4096-byte blocks: four per slab; 32 lanes need eight slabs, one grant
    # (one cas) per slab.
    heap = devalloc.Heap(L.capacity_for_pages(8))
    sizes = np.full(32, 4096, np.int64)
    offs = cuda.to_device(np.full(32, NULL, np.int64))
    n = run(k_alloc, (1, 32), heap.ctx, cuda.to_device(sizes), offs)
    got = offs.copy_to_host()
    assert (got != NULL).all() and spans_disjoint(got, sizes)
    assert n.by_kind["cas"] == 8 and n.by_kind["add"] == 8
    assert heap.usage().reserved == 8 * L.PAGE


@cuda.jit
def k_free_selected(ctx, offs, select):
    i = linear_id()
    off = NULL
    if select[i] != 0:
        off = offs[i]
    devalloc.free(ctx, off)


def test_freed_blocks_are_reused_by_a_group_word_by_word():
    # 512-byte blocks: 32 per slab, all in bitmap word 0. A warp fills the
    # slab, frees the odd lanes' blocks, and a second warp asks for 16.
    heap = devalloc.Heap(L.capacity_for_pages(2))
    sizes = np.full(32, 512, np.int64)
    d_sizes = cuda.to_device(sizes)
    first = cuda.to_device(np.full(32, NULL, np.int64))
    run(k_alloc, (1, 32), heap.ctx, d_sizes, first)
    a = first.copy_to_host()
    assert sorted(a.tolist()) == [512 * k for k in range(32)]
    odd = cuda.to_device((np.arange(32) % 2).astype(np.int64))
    n = run(k_free_selected, (1, 32), heap.ctx, first, odd)
    # One group: one word; the slab was full, so room appears: its mark in
    # the class's room index (one more or).
    assert n.by_kind == {"or_": 2, "add": 1}
    freed = set(a[1::2].tolist())
    again = cuda.to_device(np.full(16, NULL, np.int64))
    n = run(k_alloc, (1, 16), heap.ctx, cuda.to_device(sizes[:16]), again)
    b = again.copy_to_host()
    assert set(b.tolist()) == freed  # exactly the freed blocks, each once
    assert n.by_kind == {"cas": 1, "and_": 1}  # one reservation, one take
    u = heap.usage()
    assert (u.live_blocks, u.allocs, u.frees, u.reserved) == (32, 48, 16, L.PAGE)


@cuda.jit
def k_free_pairs(ctx, offs):
    # Lanes 2k and 2k+1 free the same block: one of each pair is a double free.
    i = linear_id()
    devalloc.free(ctx, offs[i // 2])


def test_two_lanes_of_a_group_freeing_one_block_count_one_invalid_free():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    offs = cuda.to_device(np.full(16, NULL, np.int64))
    run(k_alloc, (1, 16), heap.ctx, cuda.to_device(np.full(16, 64, np.int64)), offs)
    run(k_free_pairs, (1, 32), heap.ctx, offs)
    u = heap.usage()
    assert (u.live_blocks, u.frees, u.invalid_frees, u.reserved) == (0, 16, 16, 0)


@cuda.jit
def k_free_mixed(ctx, offs):
    # Valid small frees, a large free, NULL, and bogus offsets in one warp.
    i = linear_id()
    off = offs[i]
    if i % 4 == 1:
        off = off + 16  # inside a block: invalid
    elif i % 4 == 2:
        off = NULL
    devalloc.free(ctx, off)


def test_frees_of_every_kind_in_one_warp():
    heap = devalloc.Heap(L.capacity_for_pages(16))
    sizes = np.array([64 if i % 8 else 20000 for i in range(32)], np.int64)
    offs = cuda.to_device(np.full(32, NULL, np.int64))
    run(k_alloc, (1, 32), heap.ctx, cuda.to_device(sizes), offs)
    assert (offs.copy_to_host() != NULL).all()
    run(k_free_mixed, (1, 32), heap.ctx, offs)
    u = heap.usage()
    assert u.invalid_frees == 8  # the interior offsets
    assert u.frees == 16  # lanes 0 and 3 of every four (blocks of 8 lanes' large ones too)
    assert u.live_blocks == 16


def test_one_warp_of_three_classes_costs_one_cas_per_class():
    sizes = np.array([(16, 100, 1000)[i % 3] for i in range(32)], np.int64)
    heap = devalloc.Heap(L.capacity_for_pages(16))
    offs = cuda.to_device(np.full(32, NULL, np.int64))
    n = run(k_alloc, (1, 32), heap.ctx, cuda.to_device(sizes), offs)
    # Per class: one cas (its slab taken and its blocks bumped at once), the
    # room index's mark (or), the page out of the free-page index (and),
    # pages-used add and peak max, and its hint moved to the page (exch).
    # The three groups' leaders run at once and may race for the same free
    # page: a lost cas is retried (the loser meets the winner's slab or
    # takes the next page).
    cas = n.by_kind.pop("cas")
    assert n.by_kind == {"or_": 3, "and_": 3, "add": 3, "max": 3, "exch": 3} and 3 <= cas <= 6


@pytest.mark.parametrize("mode", ["single", "warp"])
def test_both_modes_serve_the_same_blocks_for_one_warp(mode):
    heap = devalloc.Heap(L.capacity_for_pages(4))
    offs = cuda.to_device(np.full(32, NULL, np.int64))
    run(k_alloc, (1, 32), heap.ctx, cuda.to_device(np.full(32, 48, np.int64)), offs, mode=mode)
    got = np.sort(offs.copy_to_host())
    assert (got == 48 * np.arange(32)).all()  # one slab, bumped in order


def test_a_debug_heap_groups_lanes_too_null_frees_included():
    heap = devalloc.Heap(L.capacity_for_pages(4), debug=True)
    offs = cuda.to_device(np.full(32, NULL, np.int64))
    run(k_alloc, (1, 32), heap.ctx, cuda.to_device(np.full(32, 64, np.int64)), offs)
    odd = cuda.to_device((np.arange(32) % 2).astype(np.int64))
    run(k_free_selected, (1, 32), heap.ctx, offs, odd)  # even lanes free NULL
    u = heap.usage()
    assert (u.live_blocks, u.frees, u.invalid_frees) == (16, 16, 0)
    heap.check()  # guards intact, nothing recorded


def test_warps_of_one_class_share_a_slab_through_the_room_index():
    # Eight warps (one block of 256 threads) allocating 16 B: whatever hint
    # slot a warp starts from, a slot without a slab looks in the class's
    # room index before taking a free page, so they all fill the first slab
    # (256 blocks of 1024), in a large heap as in a small one.
    for npages in (2048, 64):
        heap = devalloc.Heap(L.capacity_for_pages(npages))
        offs = cuda.to_device(np.full(256, NULL, np.int64))
        run(k_alloc, (1, 256), heap.ctx, cuda.to_device(np.full(256, 16, np.int64)), offs)
        got = offs.copy_to_host()
        assert (got != NULL).all() and len(set(got.tolist())) == 256
        assert len(set((got // L.PAGE).tolist())) == 1, npages
        assert heap.usage().classes[16].slabs == 1