"""Carved blocks that grow, and record dtypes (issue 51): on the simulator, and on a GPU.

``realloc_carved`` moves each field of a block laid out by ``carve`` to its
place for the new count (``realloc`` copies bytes, so a carved block it
grows loses every field but the first); ``array``, ``view`` and ``carve``
take NumPy record dtypes. Every kind of heap; the pure alignment rule
first.
"""

import numpy as np
import pytest
from numba import cuda
from numba.core.errors import TypingError

import devalloc
from devalloc.device import blocks as B

NULL = devalloc.NULL
HEAPS = [{}, {"debug": True}, {"profile": True, "trace": 4096},
         {"debug": True, "profile": True}]
HEAP_IDS = ["normal", "debug", "observed", "observed-debug"]

#: A record of a float64 and an int32 (16 bytes aligned), and a packed one of 12 bytes.
REC = np.dtype([("x", np.float64), ("n", np.int32)], align=True)
PACKED = np.dtype([("a", np.int32), ("b", np.int32), ("c", np.int32)])
FIELDS = (np.int32, np.float64, PACKED)


# ------------------------------------------------------------ pure arithmetic

def test_a_field_starts_at_its_itemsizes_power_of_two_factor_up_to_16():
    for size in (1, 2, 4, 8, 16):  # scalars: their itemsize, as before
        assert [B.carve_at(p, size) for p in (0, 1, size, size + 1)] == [0, size, size, 2 * size]
    assert B.carve_at(13, 12) == 16 and B.carve_at(5, 12) == 8  # a 12-byte record: 4-aligned
    assert B.carve_at(9, 24) == 16 and B.carve_at(1, 48) == 16  # 8-aligned; 16 at most
    assert B.carve_at(17, 32) == 32 and B.carve_at(3, 3) == 3
    assert B.carve_end(B.carve_end(0, 3, 4), 2, 12) == 12 + 24
    for rec in (REC, PACKED):
        assert B.carve_at(1, rec.itemsize) % rec.alignment == 0


# ------------------------------------------------------------ kernels

@cuda.jit
def k_grow(ctx, counts, new_counts, out, offs):
    # A carved block of three fields (int32, float64, a packed record) per
    # thread, filled, resized by realloc_carved and read back through carve.
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    n = counts[i]
    m = new_counts[i]
    end = devalloc.carve_end(devalloc.carve_end(devalloc.carve_end(0, n, 4), n, 8), n, 12)
    off = devalloc.alloc(ctx, end)
    a, p = devalloc.carve(ctx, off, 0, n, np.int32)
    b, p = devalloc.carve(ctx, off, p, n, np.float64)
    c, p = devalloc.carve(ctx, off, p, n, PACKED)
    for j in range(n):
        a[j] = i * 1000 + j
        b[j] = i + j * 0.25
        c[j]["a"] = -j
        c[j]["c"] = i
    new = devalloc.realloc_carved(ctx, off, n, m, (np.int32, np.float64, PACKED))
    offs[i, 0] = off
    offs[i, 1] = new
    a, p = devalloc.carve(ctx, new, 0, m, np.int32)
    b, p = devalloc.carve(ctx, new, p, m, np.float64)
    c, p = devalloc.carve(ctx, new, p, m, PACKED)
    bad = 0
    for j in range(min(n, m)):
        if a[j] != i * 1000 + j or b[j] != i + j * 0.25 or c[j]["a"] != -j or c[j]["c"] != i:
            bad += 1
    for j in range(n, m):  # the new items are the caller's to fill: every field can take them
        a[j] = 1
        b[j] = 2.0
        c[j]["b"] = 3
    out[i] = bad
    devalloc.free(ctx, new)


@cuda.jit
def k_carved_call(ctx, off, n, m, out):
    out[0] = devalloc.realloc_carved(ctx, off, n, m, (np.int32, np.float64))


@cuda.jit
def k_alloc(ctx, n, out):
    out[0] = devalloc.alloc(ctx, n)


@cuda.jit
def k_records(ctx, n, out):
    # An array of records, a view of records over the same block, a carved
    # field of packed records after an int16 field.
    arr = devalloc.array(ctx, n, REC)
    for j in range(n):
        arr[j]["x"] = j * 1.5
        arr[j]["n"] = j
    v = devalloc.view(ctx, devalloc.offset_of(ctx, arr), n, REC)
    s = 0.0
    for j in range(v.shape[0]):
        s += v[j]["x"] + v[j]["n"]
    out[0] = s
    out[1] = v.size
    devalloc.free_array(ctx, arr)
    off = devalloc.alloc(ctx, devalloc.carve_end(devalloc.carve_end(0, n, 2), n, 12))
    h, p = devalloc.carve(ctx, off, 0, n, np.int16)
    c, p = devalloc.carve(ctx, off, p, n, PACKED)
    for j in range(n):
        h[j] = j
        c[j]["a"] = 7 * j
        c[j]["b"] = j
        c[j]["c"] = -1
    t = 0
    for j in range(n):
        t += h[j] + c[j]["a"] + c[j]["b"] + c[j]["c"]
    out[2] = t
    out[3] = p
    out[4] = devalloc.offset_of(ctx, c) - off
    devalloc.free(ctx, off)


@cuda.jit
def k_record_view_at(ctx, off, out):
    v = devalloc.view(ctx, off, 2, REC)
    out[0] = v.size


@cuda.jit
def k_not_a_tuple(ctx, off, out):
    out[0] = devalloc.realloc_carved(ctx, off, 1, 2, np.int32)


# ------------------------------------------------------------ tests

@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
def test_realloc_carved_keeps_every_field_growing_and_shrinking(kw):
    heap = devalloc.Heap(1 << 20, **kw)
    counts = np.array([3, 10, 1, 40, 600, 7, 25, 2], dtype=np.int64)
    new_counts = np.array([4, 21, 9, 40, 700, 3, 1, 1000], dtype=np.int64)
    out = cuda.to_device(np.full(counts.size, -1, dtype=np.int64))
    offs = cuda.to_device(np.zeros((counts.size, 2), dtype=np.int64))
    k_grow[1, 32](heap.ctx, cuda.to_device(counts), cuda.to_device(new_counts), out, offs)
    assert out.copy_to_host().tolist() == [0] * counts.size  # every kept item in its field
    o = offs.copy_to_host()
    assert (o != NULL).all()  # room remained: no NULL
    same = counts == new_counts
    assert (o[same, 0] == o[same, 1]).all() and (o[~same, 0] != o[~same, 1]).all()
    u = heap.usage()
    assert (u.in_use, u.failed, u.invalid_frees, u.empty_requests) == (0, 0, 0, 0), u
    assert u.allocs == counts.size + (~same).sum() and u.frees == u.allocs
    if kw.get("debug"):
        heap.check()  # no guard overwritten by a field moved past its block


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
def test_realloc_carved_edges(kw):
    heap = devalloc.Heap(1 << 18, **kw)
    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    k_carved_call[1, 1](heap.ctx, NULL, 0, 5, out)  # NULL: an allocation
    off = int(out.copy_to_host()[0])
    assert off != NULL and heap.usage().allocs == 1
    k_carved_call[1, 1](heap.ctx, off, 5, 5, out)  # the same count: the same block
    assert out.copy_to_host()[0] == off and heap.usage().allocs == 1
    k_carved_call[1, 1](heap.ctx, off, 5, 1 << 40, out)  # cannot be served: NULL, block kept
    assert out.copy_to_host()[0] == NULL
    k_carved_call[1, 1](heap.ctx, off, 5, 1 << 62, out)  # 12 B an item wraps int64 to 0: NULL
    assert out.copy_to_host()[0] == NULL
    u = heap.usage()
    assert (u.failed, u.live_blocks, u.invalid_frees) == (2, 1, 0), u
    k_carved_call[1, 1](heap.ctx, off, 5, 0, out)  # 0 items: an empty request, block kept
    assert out.copy_to_host()[0] == NULL
    u = heap.usage()
    assert (u.failed, u.empty_requests, u.live_blocks) == (2, 1, 1), u
    k_carved_call[1, 1](heap.ctx, off, 1000, 2000, out)  # not a block of 1000 per field
    assert out.copy_to_host()[0] == NULL and heap.usage().invalid_frees == 1
    k_carved_call[1, 1](heap.ctx, off + 16, 1, 2, out)  # no block starts there
    assert out.copy_to_host()[0] == NULL and heap.usage().invalid_frees == 2
    assert heap.usage().live_blocks == 1
    if kw.get("debug"):
        with pytest.raises(devalloc.HeapCorruption, match="no live block"):
            heap.check()


def test_realloc_carved_out_of_memory_keeps_the_old_block():
    heap = devalloc.Heap(1 << 16)  # four pages
    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    k_carved_call[1, 1](heap.ctx, NULL, 0, 100, out)
    off = int(out.copy_to_host()[0])
    k_alloc[1, 1](heap.ctx, 3 * 16384, out)  # the other pages taken
    k_carved_call[1, 1](heap.ctx, off, 100, 5000, out)  # 60 KB: no room
    assert out.copy_to_host()[0] == NULL
    u = heap.usage()
    assert u.failed == 1 and u.live_blocks == 2


def test_realloc_carved_wants_a_tuple_of_dtypes():
    heap = devalloc.Heap(1 << 16)
    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    with pytest.raises(TypingError, match="tuple of the fields' dtypes"):
        k_not_a_tuple[1, 1](heap.ctx, NULL, out)


@pytest.mark.parametrize("kw", HEAPS, ids=HEAP_IDS)
def test_array_view_and_carve_take_record_dtypes(kw):
    heap = devalloc.Heap(1 << 18, **kw)
    n = 9
    out = cuda.to_device(np.zeros(5, dtype=np.int64))
    k_records[1, 1](heap.ctx, n, out)
    s, size, t, end, at = out.copy_to_host().tolist()
    assert s == sum(j * 1.5 + j for j in range(n)) and size == n
    assert t == sum(j + 7 * j + j - 1 for j in range(n))
    assert at == 20 and end == 20 + 12 * n  # int16[9] ends at 18: the 12-byte records 4-aligned
    u = heap.usage()
    assert (u.in_use, u.failed, u.invalid_frees) == (0, 0, 0)
    if kw.get("debug"):
        heap.check()


def test_a_misaligned_record_view_is_reported_on_a_debug_heap():
    heap = devalloc.Heap(1 << 16, debug=True)
    out = cuda.to_device(np.zeros(1, dtype=np.int64))
    k_record_view_at[1, 1](heap.ctx, 16, out)  # REC's alignment is 8
    assert out.copy_to_host()[0] == 2
    k_record_view_at[1, 1](heap.ctx, 20, out)
    assert out.copy_to_host()[0] == 0
    with pytest.raises(devalloc.HeapCorruption, match="not aligned"):
        heap.check()
