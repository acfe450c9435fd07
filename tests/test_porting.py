"""The porting API on the simulator: array, shaped view, calloc, realloc,
usable_size, alloc_aligned, carve; on normal, debug and observed heaps.

Module-level kernels, small ``check_*`` helpers, thin ``test_*`` functions.
The pure arithmetic under them (:mod:`devalloc.device.blocks`) is checked first,
exhaustively where that is cheap.
"""

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc.device import blocks as B
from devalloc import layout as L

NULL = devalloc.NULL
HEAPS = [{}, {"debug": True}, {"profile": True, "trace": 4096},
         {"debug": True, "profile": True}]
HEAP_IDS = ["normal", "debug", "observed", "observed-debug"]


# ------------------------------------------------------------ pure arithmetic

def test_served_size_is_what_alloc_hands_out():
    assert B.served_size(1) == 16 and B.served_size(17) == 32 and B.served_size(129) == 160
    assert B.served_size(8192) == 8192 and B.served_size(8193) == L.PAGE
    assert B.served_size(L.PAGE + 1) == 2 * L.PAGE
    assert B.served_size(0) == 0 and B.served_size(-5) == 0 and B.served_size(B.TOO_BIG) == 0


@pytest.mark.parametrize("align", [1 << k for k in range(L.PAGE_SHIFT + 1)])
def test_aligned_request_gives_an_aligned_class_for_every_size(align):
    for n in list(range(1, 3 * L.MAX_SMALL, 7)) + [L.PAGE, L.PAGE + 1, 5 * L.PAGE + 3]:
        r = B.aligned_request(n, align)
        size = B.served_size(r)
        assert r >= n and size >= n, (n, align)
        # Blocks of this size start at multiples of block_alignment(size) within a page.
        assert B.block_alignment(size) % align == 0 and size % min(align, size) == 0, (n, align)


def test_aligned_request_refuses_bad_alignments():
    for align in (0, -16, 3, 48, 2 * L.PAGE):
        assert B.aligned_request(100, align) == -1  # refused: a failure
        assert B.aligned_request(0, align) == -1  # a bad alignment, even for 0 bytes
    assert B.aligned_request(0, 16) == 0  # nothing to serve: an empty request
    assert B.aligned_request(-1, 16) == -1


def test_calloc_and_array_bytes_never_wrap():
    assert B.calloc_bytes(10, 8) == 80
    assert B.calloc_bytes(0, 8) == 0 and B.calloc_bytes(3, 0) == 0  # empty requests
    assert B.calloc_bytes(3, -1) == -1 and B.calloc_bytes(-3, 0) == -1  # refused
    assert B.calloc_bytes(1 << 62, 4) == B.TOO_BIG  # wraps to 0 in int64
    assert B.calloc_bytes(1 << 32, 1 << 32) == B.TOO_BIG
    assert B.array_bytes(3, 4, 5, 8) == 480
    assert B.array_bytes(3, 0, 5, 8) == 0
    assert B.array_bytes(3, -1, 5, 8) == -1
    assert B.array_bytes(1 << 21, 1 << 21, 1 << 21, 8) == B.TOO_BIG  # 2**66 wraps to 0


def test_carve_pads_each_field_to_its_itemsize():
    assert B.carve_at(0, 8) == 0 and B.carve_at(12, 8) == 16 and B.carve_at(13, 4) == 16
    # An int32[3], a float64[3], an int16[1], a complex128[2].
    p = B.carve_end(0, 3, 4)
    assert p == 12
    p = B.carve_end(p, 3, 8)
    assert p == 16 + 24
    p = B.carve_end(p, 1, 2)
    assert p == 42
    assert B.carve_end(p, 2, 16) == 48 + 32


# ------------------------------------------------------------ kernels

@cuda.jit
def k_array_rows(ctx, rows, out, sizes):
    # Each thread: a (rows[i], 10) float64 array, filled, summed, freed.
    i = cuda.grid(1)
    if i >= rows.shape[0]:
        return
    a = devalloc.array(ctx, (rows[i], 10), np.float64)
    sizes[i] = a.size
    acc = 0.0
    for r in range(a.shape[0]):
        for c in range(a.shape[1]):
            a[r, c] = i * 1000 + r * 10 + c
    for r in range(a.shape[0]):
        for c in range(a.shape[1]):
            acc += a[r, c]
    out[i] = acc
    devalloc.free_array(ctx, a)


@cuda.jit
def k_array_1d_3d(ctx, n, out):
    a = devalloc.array(ctx, n, np.int32)
    b = devalloc.array(ctx, (2, 3, n), np.int16)
    for j in range(a.shape[0]):
        a[j] = j
    for x in range(b.shape[0]):
        for y in range(b.shape[1]):
            for z in range(b.shape[2]):
                b[x, y, z] = x * 100 + y * 10 + z
    out[0] = a.size
    out[1] = b.size
    out[2] = b.strides[0]
    out[3] = b.strides[1]
    out[4] = b[1, 2, n - 1] if b.size else -1
    out[5] = a[n - 1] if a.size else -1
    devalloc.free_array(ctx, a)
    devalloc.free_array(ctx, b)


@cuda.jit
def k_array_shape(ctx, d0, d1, out):
    a = devalloc.array(ctx, (d0, d1), np.float64)
    out[0] = a.size
    out[1] = a.shape[0]
    out[2] = a.shape[1]
    devalloc.free_array(ctx, a)


@cuda.jit
def k_view_shape(ctx, off, d0, d1, out):
    v = devalloc.view(ctx, off, (d0, d1), np.float32)
    out[0] = v.shape[0]
    out[1] = v.shape[1]
    out[2] = v.strides[0]
    out[3] = v.strides[1]


@cuda.jit
def k_view_misaligned(ctx, n, out):
    off = devalloc.alloc(ctx, 64)
    good = devalloc.view(ctx, off + 8, n, np.int32)    # inside a block, aligned: allowed
    bad = devalloc.view(ctx, off + 2, n, np.int32)     # not a multiple of 4
    out[0] = good.size
    out[1] = bad.size
    devalloc.free(ctx, off)


@cuda.jit
def k_dirty(ctx, n, out):
    # Leave n bytes of 0xFF behind in a freed block.
    off = devalloc.alloc(ctx, n)
    a = devalloc.view(ctx, off, n, np.uint8)
    for j in range(a.shape[0]):
        a[j] = 0xFF
    out[0] = off
    devalloc.free(ctx, off)


@cuda.jit
def k_calloc(ctx, count, itemsize, out):
    off = devalloc.calloc(ctx, count, itemsize)
    out[0] = off
    n = 0
    if off != devalloc.NULL:
        n = count * itemsize
    a = devalloc.view(ctx, off, n, np.uint8)
    nz = 0
    for j in range(a.shape[0]):
        if a[j] != 0:
            nz += 1
    out[1] = nz
    devalloc.free(ctx, off)


@cuda.jit
def k_realloc_chain(ctx, sizes, offs, ok, usable):
    # One block resized through ``sizes``; every step keeps the first
    # min(old, new) bytes (a counter pattern) and writes the rest.
    off = devalloc.NULL
    have = 0
    for s in range(sizes.shape[0]):
        n = sizes[s]
        off2 = devalloc.realloc(ctx, off, n)
        offs[s] = off2
        if off2 == devalloc.NULL:
            ok[s] = -1
            continue
        off = off2
        a = devalloc.view(ctx, off, n, np.uint8)
        good = 1
        for j in range(min(have, n)):
            if a[j] != (j * 7) & 0xFF:
                good = 0
        ok[s] = good
        for j in range(n):
            a[j] = (j * 7) & 0xFF
        have = n
        usable[s] = devalloc.usable_size(ctx, off)
    devalloc.free(ctx, off)


@cuda.jit
def k_realloc_fail(ctx, first, second, out):
    # realloc that cannot be served: NULL, and the old block intact and still ours.
    off = devalloc.alloc(ctx, first)
    a = devalloc.view(ctx, off, first, np.uint8)
    for j in range(a.shape[0]):
        a[j] = j & 0xFF
    off2 = devalloc.realloc(ctx, off, second)
    out[0] = off
    out[1] = off2
    good = 1
    for j in range(a.shape[0]):
        if a[j] != j & 0xFF:
            good = 0
    out[2] = good
    out[3] = devalloc.usable_size(ctx, off)
    devalloc.free(ctx, off)


@cuda.jit
def k_bad_offsets(ctx, base, out):
    # realloc and usable_size of offsets that are no block.
    off = devalloc.alloc(ctx, base)
    out[0] = devalloc.realloc(ctx, off + 16, 64)      # inside a block
    out[1] = devalloc.usable_size(ctx, off + 16)
    out[2] = devalloc.realloc(ctx, 5, 64)             # misaligned
    out[3] = devalloc.usable_size(ctx, devalloc.NULL)
    out[4] = devalloc.usable_size(ctx, off)
    devalloc.free(ctx, off)


@cuda.jit
def k_realloc_per_thread(ctx, sizes, grow, out):
    # Sizes per thread: alloc sizes[i], fill, realloc to grow[i], check, free.
    i = cuda.grid(1)
    if i >= sizes.shape[0]:
        return
    n = sizes[i]
    off = devalloc.alloc(ctx, n * 4)
    a = devalloc.view(ctx, off, n, np.int32)
    for j in range(a.shape[0]):
        a[j] = i * 1000 + j
    off2 = devalloc.realloc(ctx, off, grow[i] * 4)
    if off2 == devalloc.NULL:
        out[i] = -1
        devalloc.free(ctx, off)
        return
    b = devalloc.view(ctx, off2, grow[i], np.int32)
    good = 1
    for j in range(min(n, grow[i])):
        if b[j] != i * 1000 + j:
            good = 0
    out[i] = good
    devalloc.free(ctx, off2)


@cuda.jit
def k_aligned(ctx, sizes, align, offs):
    i = cuda.grid(1)
    if i < sizes.shape[0]:
        offs[i] = devalloc.alloc_aligned(ctx, sizes[i], align)


@cuda.jit
def k_free_all(ctx, offs):
    i = cuda.grid(1)
    if i < offs.shape[0]:
        devalloc.free(ctx, offs[i])


@cuda.jit
def k_carve(ctx, n, out):
    # A per-thread open list of four parallel arrays of two dtypes in one block.
    end = devalloc.carve_end(0, n, 4)
    end = devalloc.carve_end(end, n, 8)
    end = devalloc.carve_end(end, n, 8)
    end = devalloc.carve_end(end, n, 4)
    off = devalloc.alloc(ctx, end)
    node, p = devalloc.carve(ctx, off, 0, n, np.int32)
    g, p = devalloc.carve(ctx, off, p, n, np.float64)
    f, p = devalloc.carve(ctx, off, p, n, np.float64)
    parent, p = devalloc.carve(ctx, off, p, n, np.int32)
    for j in range(n):
        node[j] = j
        g[j] = j * 0.5
        f[j] = j * 0.25
        parent[j] = -j
    s = 0.0
    for j in range(n):
        s += node[j] + g[j] + f[j] + parent[j]
    out[0] = s
    out[1] = end
    out[2] = p
    devalloc.free(ctx, off)


# ------------------------------------------------------------ tests

@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
def test_array_sizes_per_thread(kw):
    heap = devalloc.Heap(1 << 20, **kw)
    rows = np.array([0, 1, 3, 7, 20, 100, 2, 0, 13, 1], dtype=np.int64)
    out = cuda.to_device(np.zeros(rows.size))
    sizes = cuda.to_device(np.zeros(rows.size, dtype=np.int64))
    k_array_rows[1, 16](heap.ctx, rows, out, sizes)
    want = np.array([sum(i * 1000 + r * 10 + c for r in range(n) for c in range(10))
                     for i, n in enumerate(rows)], dtype=np.float64)
    assert np.array_equal(out.copy_to_host(), want)
    assert np.array_equal(sizes.copy_to_host(), rows * 10)
    u = heap.usage()
    assert u.in_use == 0 and u.failed == 0 and u.invalid_frees == 0  # rows of 0: no count
    if kw.get("debug"):
        heap.check()


def test_array_1d_and_3d():
    heap = devalloc.Heap(1 << 18)
    out = cuda.to_device(np.zeros(6, dtype=np.int64))
    k_array_1d_3d[1, 1](heap.ctx, 5, out)
    assert out.copy_to_host().tolist() == [5, 30, 30, 10, 124, 4]
    assert heap.usage().in_use == 0


@pytest.mark.parametrize("shape,counted", [((1 << 20, 4), True), ((-1, 4), True),
                                           ((1 << 40, 1 << 40), True), ((0, 4), False)])
def test_array_that_cannot_be_served_is_empty(shape, counted):
    heap = devalloc.Heap(1 << 18)  # 256 KiB: 32 MiB arrays do not fit
    out = cuda.to_device(np.full(3, 7, dtype=np.int64))
    k_array_shape[1, 1](heap.ctx, shape[0], shape[1], out)
    assert out.copy_to_host().tolist() == [0, 0, 0]
    u = heap.usage()
    assert u.failed == int(counted) and u.invalid_frees == 0 and u.in_use == 0


def test_view_with_a_shape_is_c_contiguous_and_empty_out_of_range():
    heap = devalloc.Heap(1 << 16)
    out = cuda.to_device(np.zeros(4, dtype=np.int64))
    k_view_shape[1, 1](heap.ctx, 64, 3, 5, out)
    assert out.copy_to_host().tolist() == [3, 5, 20, 4]
    for off, d0, d1 in [(NULL, 3, 5), (heap.capacity - 8, 1, 3), (0, -1, 5), (0, 1 << 40, 1 << 40)]:
        k_view_shape[1, 1](heap.ctx, off, d0, d1, out)
        assert out.copy_to_host().tolist()[:2] == [0, 0], (off, d0, d1)


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
def test_misaligned_view_is_reported_on_debug_heaps(kw):
    heap = devalloc.Heap(1 << 16, **kw)
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    k_view_misaligned[1, 1](heap.ctx, 4, out)
    good, bad = out.copy_to_host().tolist()
    assert good == 4
    if kw.get("debug"):
        assert bad == 0  # an empty view, and a record naming it
        with pytest.raises(devalloc.HeapCorruption, match="not aligned"):
            heap.check()
    else:
        assert bad == 4  # unchecked: the docs state the rule


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
@pytest.mark.parametrize("count,itemsize", [(5, 8), (3, 3), (100, 40), (3000, 8)])
def test_calloc_zeroes_a_used_block(kw, count, itemsize):
    heap = devalloc.Heap(1 << 18, **kw)
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    k_dirty[1, 1](heap.ctx, count * itemsize, out)
    dirty = out.copy_to_host()[0]
    k_calloc[1, 1](heap.ctx, count, itemsize, out)
    off, nonzero = out.copy_to_host().tolist()
    assert off == dirty and nonzero == 0  # the same (dirtied) block, zeroed
    assert heap.usage().in_use == 0


@pytest.mark.parametrize("count,itemsize", [(1 << 62, 4), (1 << 32, 1 << 32), (0, 8), (4, -1)])
def test_calloc_overflow_or_nonpositive_is_null(count, itemsize):
    heap = devalloc.Heap(1 << 16)
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    k_calloc[1, 1](heap.ctx, count, itemsize, out)
    assert out.copy_to_host()[0] == NULL
    u = heap.usage()
    # 0 items: an empty request, not a failure
    assert (u.failed, u.empty_requests) == ((0, 1) if 0 in (count, itemsize) else (1, 0))


#: A chain of sizes: within a class, across classes up and down, into large
#: blocks and back, and within a large block's pages.
CHAIN = [10, 16, 17, 100, 128, 129, 700, 8192, 8193, 16384, 16385, 40000, 33000, 5000, 48, 1]


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
def test_realloc_keeps_contents_across_classes_and_large_blocks(kw):
    heap = devalloc.Heap(1 << 20, **kw)
    sizes = np.array(CHAIN, dtype=np.int64)
    offs = cuda.to_device(np.zeros(sizes.size, dtype=np.int64))
    ok = cuda.to_device(np.zeros(sizes.size, dtype=np.int64))
    usable = cuda.to_device(np.zeros(sizes.size, dtype=np.int64))
    k_realloc_chain[1, 1](heap.ctx, sizes, offs, ok, usable)
    offs, ok, usable = offs.copy_to_host(), ok.copy_to_host(), usable.copy_to_host()
    assert ok.tolist() == [1] * sizes.size
    debug = kw.get("debug", False)
    for s in range(1, sizes.size):
        inner = (lambda n: max(n + L.GUARD, L.DEBUG_MIN_BLOCK)) if debug else (lambda n: n)
        same = B.served_size(inner(CHAIN[s])) == B.served_size(inner(CHAIN[s - 1]))
        assert (offs[s] == offs[s - 1]) == same, (s, CHAIN[s - 1], CHAIN[s])
    want = [n if debug else B.served_size(n) for n in CHAIN]
    assert usable.tolist() == want
    u = heap.usage()
    assert u.in_use == 0 and u.failed == 0 and u.invalid_frees == 0
    if debug:
        heap.check()
    if kw.get("trace"):
        ops = [str(o) for o in heap.trace()["op"]]
        moves = sum(offs[s] != offs[s - 1] for s in range(1, sizes.size))
        assert ops.count("alloc") == 1 + moves and ops.count("free") == 1 + moves


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
@pytest.mark.parametrize("first,second", [(100, 1 << 20), (20000, 1 << 20), (100, 0), (100, -8)])
def test_realloc_failure_leaves_the_old_block(kw, first, second):
    heap = devalloc.Heap(1 << 18, **kw)
    out = cuda.to_device(np.zeros(4, dtype=np.int64))
    k_realloc_fail[1, 1](heap.ctx, first, second, out)
    off, off2, good, usable = out.copy_to_host().tolist()
    assert off != NULL and off2 == NULL and good == 1
    assert usable == (first if kw.get("debug") else B.served_size(first))
    u = heap.usage()
    # realloc to 0 bytes: NULL (free with free), an empty request, not a failure
    assert (u.failed, u.empty_requests) == ((0, 1) if second == 0 else (1, 0))
    assert u.in_use == 0 and u.invalid_frees == 0
    if kw.get("debug"):
        heap.check()


@pytest.mark.parametrize("kw", HEAPS[:2], ids=HEAP_IDS[:2])
@pytest.mark.parametrize("base", [64, 40000])
def test_realloc_and_usable_size_of_no_block(kw, base):
    heap = devalloc.Heap(1 << 18, **kw)
    out = cuda.to_device(np.zeros(5, dtype=np.int64))
    k_bad_offsets[1, 1](heap.ctx, base, out)
    r1, u1, r2, u_null, u_ok = out.copy_to_host().tolist()
    assert r1 == NULL and u1 == 0 and r2 == NULL and u_null == 0
    assert u_ok == (base if kw.get("debug") else B.served_size(base))
    u = heap.usage()
    assert u.invalid_frees == 2 and u.in_use == 0
    if kw.get("debug"):
        with pytest.raises(devalloc.HeapCorruption, match="no live block"):
            heap.check()


def test_realloc_per_thread_sizes_contended(fine_interleaving):
    heap = devalloc.Heap(1 << 20)
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 600, 32)
    grow = rng.integers(1, 3000, 32)
    out = cuda.to_device(np.zeros(32, dtype=np.int64))
    k_realloc_per_thread[1, 32](heap.ctx, sizes, grow, out)
    assert out.copy_to_host().tolist() == [1] * 32
    u = heap.usage()
    assert u.in_use == 0 and u.failed == 0 and u.invalid_frees == 0


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
@pytest.mark.parametrize("align", [1, 16, 64, 256, 1024, 8192, L.PAGE])
def test_alloc_aligned(kw, align):
    heap = devalloc.Heap(1 << 20, **kw)
    sizes = np.array([1, 20, 100, 300, 1000, 5000, 9000, 17], dtype=np.int64)
    offs = cuda.to_device(np.zeros(sizes.size, dtype=np.int64))
    k_aligned[1, 8](heap.ctx, sizes, align, offs)
    got = offs.copy_to_host()
    assert (got != NULL).all() and (got % align == 0).all(), got
    assert heap.usage().failed == 0
    if kw.get("debug"):
        assert sorted(n for _, n in heap.live()) == sorted(sizes.tolist())
        heap.check()
    k_free_all[1, 8](heap.ctx, offs)
    assert heap.usage().in_use == 0


@pytest.mark.parametrize("align", [0, 3, 48, 2 * L.PAGE])
def test_alloc_aligned_refuses_bad_alignments(align):
    heap = devalloc.Heap(1 << 16)
    offs = cuda.to_device(np.zeros(1, dtype=np.int64))
    k_aligned[1, 1](heap.ctx, np.array([64]), align, offs)
    assert offs.copy_to_host()[0] == NULL and heap.usage().failed == 1


@pytest.mark.parametrize("kw", HEAPS[:2], ids=HEAP_IDS[:2])
def test_carve_lays_out_mixed_dtypes_in_one_block(kw):
    heap = devalloc.Heap(1 << 16, **kw)
    out = cuda.to_device(np.zeros(3))
    k_carve[1, 1](heap.ctx, 7, out)
    s, end, p = out.copy_to_host().tolist()
    assert s == sum(j + j * 0.5 + j * 0.25 - j for j in range(7))
    assert end == p == 28 + 4 + 56 + 56 + 28  # int32[7], pad 4, 2 x float64[7], int32[7]
    if kw.get("debug"):
        heap.check()  # no misaligned view, no guard overwritten


@cuda.jit
def k_alloc_one(ctx, n, offs):
    offs[0] = devalloc.alloc(ctx, n)


@cuda.jit
def k_realloc_one(ctx, n, offs):
    offs[1] = devalloc.realloc(ctx, offs[0], n)


@cuda.jit
def k_usable_one(ctx, offs):
    offs[1] = devalloc.usable_size(ctx, offs[0])


@pytest.mark.parametrize("first,second,moves", [(100, 112, False), (128, 113, False),
                                                (20000, 30000, False), (100, 129, True),
                                                (8192, 8193, True)])
def test_realloc_in_place_takes_no_atomic(first, second, moves):
    from devalloc.sim.atomics import count_atomics

    heap = devalloc.Heap(1 << 18)
    offs = cuda.to_device(np.zeros(2, dtype=np.int64))
    k_alloc_one[1, 1](heap.ctx, first, offs)
    with count_atomics() as n:
        k_usable_one[1, 1](heap.ctx, offs)
    assert n.total == 0 and offs.copy_to_host()[1] == B.served_size(first)
    with count_atomics() as n:
        k_realloc_one[1, 1](heap.ctx, second, offs)
    old, new = offs.copy_to_host().tolist()
    assert (new != old) == moves
    assert (n.total > 0) == moves, n.by_kind


# ------------------------------------------------ offset_of (issue 51)

@cuda.jit
def k_offset_of(ctx, out):
    a = devalloc.array(ctx, (3, 4), np.float32)
    out[0] = devalloc.offset_of(ctx, a)
    inner = devalloc.view(ctx, out[0] + 16, 2, np.int32)
    out[1] = devalloc.offset_of(ctx, inner)
    out[2] = devalloc.usable_size(ctx, out[0])
    empty = devalloc.array(ctx, 0, np.float32)
    out[3] = devalloc.offset_of(ctx, empty)
    devalloc.free(ctx, out[0])  # the array's block, freed through its offset


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
def test_offset_of_gives_an_arrays_block(kw):
    heap = devalloc.Heap(1 << 16, **kw)
    out = cuda.to_device(np.zeros(4, np.int64))
    k_offset_of[1, 1](heap.ctx, out)
    off, inner, usable, empty = out.copy_to_host().tolist()
    assert off != NULL and off % 16 == 0 and inner == off + 16
    assert usable >= 48 and empty == NULL
    u = heap.usage()
    assert u.in_use == 0 and u.invalid_frees == 0 and u.failed == 0
    if kw.get("debug"):
        heap.check()


OFFSET_OF_SM90 = """
import json
import numpy as np
from numba import cuda, types
import devalloc
from devalloc.tools import aot

def k(ctx, n, out):
    a = devalloc.array(ctx, n, np.float64)
    out[0] = devalloc.offset_of(ctx, a)
    devalloc.free(ctx, out[0])

ptx, _ = aot.compile_ptx(k, (devalloc.ctx_type, types.int64, types.int64[::1]))
r = aot.assemble(ptx)
print(json.dumps({"spill": r.spill_bytes, "registers": r.registers}))
"""


def test_offset_of_compiles_for_sm90():
    import cuda_target

    r = cuda_target.last_json(OFFSET_OF_SM90)
    assert r["spill"] == 0 and r["registers"] <= 48
