"""Index passes start at the warp's own word and wrap around (issue 49), on the simulator.

Leaders searching at once used to start every pass at index word 0, so they
all met at the same page and ``cas``ed the same state word. Now a pass
starts at ``slab._start_word`` (the warp number scattered over the level-0
words) and wraps to word 0 and on up to its start, so it still sees every
word before any NULL. These tests pin both halves: warps start far apart,
and a warp whose start word is full is served from the words before it.
"""

import numpy as np
from numba import cuda

import devalloc
from devalloc import layout as L
from devalloc.device import slab

NULL = devalloc.NULL


def start(warp, npages):
    # slab._start_word for the warp number ``warp`` (the device function
    # reads the warp number itself).
    words = -(-npages // L.BITS_PER_WORD)
    return int(slab._scatter.py_func(np.uint32(warp), np.uint32(words)))


def warp_with_start(word, npages):
    return next(w for w in range(1, 1 << 16) if start(w, npages) == word)


@cuda.jit
def alloc_from_warp(ctx, warp, n, out):
    # Only lane 0 of warp ``warp`` allocates (the grid's other threads idle).
    if cuda.grid(1) == warp * 32:
        out[0] = devalloc.alloc(ctx, n)


def alloc_as(heap, warp, n):
    out = cuda.to_device(np.full(1, -7, np.int64))
    alloc_from_warp[warp + 1, 32](heap.ctx, warp, n, out)
    return int(out.copy_to_host()[0])


def test_start_words_are_scattered_and_warp_0_starts_at_word_0():
    assert start(0, 1 << 20) == 0
    # A heap of one index word: every warp starts at word 0, as before.
    assert {start(w, 32) for w in range(4096)} == {0}
    # 64 warps over a heap of 64 index words: consecutive warps land far
    # apart, and they cover most words (Fibonacci hashing).
    words = [start(w, 64 * 32) for w in range(64)]
    assert len(set(words)) >= 48
    assert all(abs(a - b) >= 8 for a, b in zip(words, words[1:]))
    assert max(start(w, 100 * 32) for w in range(1 << 12)) == 99


def test_a_pass_wraps_to_the_free_pages_below_its_start_word():
    heap = devalloc.Heap(L.capacity_for_pages(64))
    # One large block takes the whole of word 1 (pages 32..63: the highest run).
    big = alloc_as(heap, 0, 32 * L.PAGE)
    assert big == 32 * L.PAGE
    w = warp_with_start(1, 64)
    off = alloc_as(heap, w, 16)
    assert off != NULL, "a warp whose start word is full must wrap to word 0"
    assert off // L.PAGE < 32


def test_warps_starting_apart_share_one_slab_on_an_idle_heap():
    heap = devalloc.Heap(L.capacity_for_pages(64))
    first = alloc_as(heap, 0, 16)
    assert first // L.PAGE == 0  # warp 0 starts at word 0
    w = warp_with_start(1, 64)
    off = alloc_as(heap, w, 16)
    # The class's hint (or the room index's pass from word 1, wrapped)
    # names page 0's slab: no second slab of the class on an idle heap.
    assert off // L.PAGE == 0 and off != first
    assert heap.usage().reserved == L.PAGE  # one page held


def test_a_warp_starting_high_fills_the_heap_to_the_last_page():
    # Every page served from one warp whose passes start at word 1: its
    # 8 KiB blocks (two a slab) fill every page, words 1 and 0 alike.
    heap = devalloc.Heap(L.capacity_for_pages(64))
    w = warp_with_start(1, 64)
    offs = [alloc_as(heap, w, 8192) for _ in range(2 * 64)]
    assert NULL not in offs
    assert len(set(offs)) == len(offs)
    assert alloc_as(heap, w, 8192) == NULL  # then full: NULL
