"""The churn of issue 25, shared by tests/test_null_sim.py and bench/null_rate.py.

Plus racing ``bump`` and scoped scratch (:func:`bumps`, :func:`scopes`).

Every thread runs ``steps`` steps over ``slots`` slots: step ``i`` frees
the block in slot ``i % slots`` (if any) and then allocates the next size
of its row of ``sizes``, keeping it in the slot. It writes the block's first
and last byte with its thread number and checks them before freeing, and
counts its NULLs. At the end it frees what it still holds. A heap can be
filled beforehand to a fraction of its pages (:func:`fill_pages`), with
one-page large blocks from one thread, so that the churn runs at that use.

Kernels are module level (the simulator needs that) and take the ``ctx``
of any heap (normal, debug or observed).
"""

import numpy as np
from numba import cuda

from .. import layout as L
from ..device.api import alloc, bump, free, mark, release, scoped

NULL = L.NULL
#: Live blocks per thread: the slots of the churn.
SLOTS = 4


@cuda.jit
def _fill(ctx, pages, nbytes, offs):
    # One thread: `pages` one-page large blocks of `nbytes`; their offsets (NULL: none).
    if cuda.grid(1) == 0:
        for i in range(pages):
            offs[i] = alloc(ctx, nbytes)


@cuda.jit
def _churn(ctx, sizes, nulls, bad, held):
    t = cuda.grid(1)
    if t >= sizes.shape[0]:
        return
    arena = ctx.arena
    mark = np.uint8((t % 251) + 1)
    for i in range(sizes.shape[1]):
        slot = i % SLOTS
        off = held[t, slot]
        if off != NULL:
            if arena[off] != mark or arena[off + held[t, SLOTS + slot] - 1] != mark:
                bad[t] += 1
        free(ctx, off)  # NULL too: convergent, as the simulator's warp mode needs
        held[t, slot] = NULL
        n = sizes[t, i]
        off = alloc(ctx, n)
        if off == NULL:
            nulls[t] += 1
        else:
            arena[off] = mark
            arena[off + n - 1] = mark
            held[t, slot] = off
            held[t, SLOTS + slot] = n
    for slot in range(SLOTS):
        free(ctx, held[t, slot])
        held[t, slot] = NULL


@cuda.jit
def _bumps(ctx, sizes, nulls):
    # Every thread bumps its row of sizes (never freed until reset).
    t = cuda.grid(1)
    if t < sizes.shape[0]:
        for i in range(sizes.shape[1]):
            if bump(ctx, sizes[t, i]) == NULL:
                nulls[t] += 1


@cuda.jit
def _scopes(ctx, sizes, nulls):
    # Every thread opens a scope per step, takes scoped scratch of its row's
    # sizes (from step i: i % 4 + 1 of them), and releases it.
    t = cuda.grid(1)
    if t < sizes.shape[0]:
        for i in range(sizes.shape[1]):
            m = mark(ctx, L.SCOPE_NONE)
            s = m
            for j in range(i % 4 + 1):
                off, s = scoped(ctx, s, sizes[t, (i + j) % sizes.shape[1]])
                if off == NULL:
                    nulls[t] += 1
            release(ctx, s, m)


def sizes_table(seed, threads, steps, low=1, high=3000, large=0.0, large_max=40_000,
                ps=L.PAGE_SHIFT):
    """Return a (threads, steps) table of sizes in [low, high], a share ``large`` of them large.

    Large: above ``layout.max_small(ps)``, the largest slab block in pages of ``2**ps`` bytes.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(low, high + 1, (threads, steps))
    big = rng.random((threads, steps)) < large
    sizes[big] = rng.integers(L.max_small(ps) + 1, large_max + 1, int(big.sum()))
    return sizes.astype(np.int64)


def fill_pages(heap, pages):
    """Take ``pages`` pages of ``heap`` with one-page blocks; return their offsets."""
    offs = cuda.to_device(np.full(max(pages, 1), NULL, np.int64))
    # The smallest large request: one page, whatever the heap's page.
    _fill[1, 1](heap.ctx, pages, L.max_small(heap.page_shift) + 1, offs)
    got = offs.copy_to_host()[:pages]
    if (got == NULL).any():
        raise RuntimeError(f"the heap could not hold {pages} pages to fill it")
    return got


def _launch(kernel, heap, sizes, block, *extra):
    threads = sizes.shape[0]
    nulls = cuda.to_device(np.zeros(threads, np.int64))
    kernel[(threads + block - 1) // block, block](heap.ctx, cuda.to_device(sizes), nulls, *extra)
    return nulls.copy_to_host()


def bumps(heap, sizes, block=32):
    """Every thread bumps its row of ``sizes``; return the NULLs per thread."""
    return _launch(_bumps, heap, sizes, block)


def scopes(heap, sizes, block=32):
    """Every thread takes scoped scratch of its row of ``sizes``; NULLs per thread."""
    return _launch(_scopes, heap, sizes, block)


def churn(heap, sizes, block=32):
    """Run the churn of ``sizes`` (one row per thread) on ``heap``.

    Returns ``(nulls, bad)``: NULLs and corrupted blocks per thread.
    """
    threads = sizes.shape[0]
    nulls = cuda.to_device(np.zeros(threads, np.int64))
    bad = cuda.to_device(np.zeros(threads, np.int64))
    held = cuda.to_device(np.full((threads, 2 * SLOTS), NULL, np.int64))
    grid = (threads + block - 1) // block
    _churn[grid, block](heap.ctx, cuda.to_device(sizes), nulls, bad, held)
    return nulls.copy_to_host(), bad.copy_to_host()
