"""Ragged results back on the host: ``Heap.gather`` and ``Heap.array`` (simulator)."""

import numpy as np
import pytest
from numba import config, cuda

import devalloc
from devalloc.host import gather as G
from devalloc.device import gather as K

NULL = devalloc.NULL


@cuda.jit
def k_rows(ctx, counts, fail_every, offsets, dtype_probe):
    # Row i: counts[i] items i * 1000 + j of dtype_probe's dtype; every
    # fail_every-th row is left at NULL (as if its alloc had failed).
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    n = counts[i]
    off = devalloc.NULL
    if n > 0 and not (fail_every > 0 and i % fail_every == 0):
        off = devalloc.alloc(ctx, n * dtype_probe.itemsize)
        a = devalloc.view(ctx, off, n, dtype_probe.dtype)
        for j in range(a.shape[0]):
            a[j] = i * 1000 + j
    offsets[i] = off


def make_rows(heap, counts, dtype, fail_every=0):
    offsets = cuda.device_array(len(counts), np.int64)
    probe = cuda.device_array(1, dtype)
    k_rows[(len(counts) + 63) // 64, 64](heap.ctx, np.asarray(counts, np.int64), fail_every,
                                          offsets, probe)
    return offsets


def expected(counts, dtype, fail_every=0, fill=None):
    rows = []
    for i, n in enumerate(counts):
        missing = n > 0 and fail_every > 0 and i % fail_every == 0
        if missing:
            rows.append(np.full(n if fill is not None else 0, fill if fill is not None else 0, dtype))
        else:
            rows.append((i * 1000 + np.arange(n)).astype(dtype))
    lens = [len(r) for r in rows]
    starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return (np.concatenate(rows) if rows else np.zeros(0, dtype)), starts


@pytest.mark.parametrize("kw", [{}, {"debug": True}, {"profile": True, "trace": 4096}],
                         ids=["normal", "debug", "observed"])
@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.int16, np.complex128])
def test_gather_gives_every_row_in_order_and_frees(kw, dtype):
    heap = devalloc.Heap(1 << 20, **kw)
    counts = [3, 0, 17, 1, 40, 0, 0, 5, 2]
    offsets = make_rows(heap, counts, dtype)
    values, starts = heap.gather(offsets, np.array(counts), dtype)
    want, want_starts = expected(counts, dtype)
    assert values.dtype == np.dtype(dtype)
    assert np.array_equal(values.copy_to_host(), want)
    assert np.array_equal(starts.copy_to_host(), want_starts)
    u = heap.usage()
    assert u.in_use == 0 and u.invalid_frees == 0
    if kw.get("debug"):
        heap.check()
    if kw.get("trace"):
        t = heap.trace()
        freed = [int(o) for op, o in zip(t["op"], t["offset"]) if str(op) == "free" and o != NULL]
        assert sorted(freed) == sorted(int(o) for o in offsets.copy_to_host() if o != NULL)


def test_gather_many_rows_and_keep_blocks():
    # 600 rows, many of them empty, copied by threads of several items each.
    heap = devalloc.Heap(1 << 20)
    counts = (np.arange(600) * 7) % 5
    offsets = make_rows(heap, counts, np.int32)
    values, starts = heap.gather(offsets, counts, np.int32, free=False)
    want, want_starts = expected(counts, np.int32)
    assert np.array_equal(values.copy_to_host(), want)
    assert np.array_equal(starts.copy_to_host(), want_starts)
    assert heap.usage().live_blocks == int((counts > 0).sum())  # free=False: still there
    again, _ = heap.gather(offsets, counts, np.int32)
    assert np.array_equal(again.copy_to_host(), want)
    assert heap.usage().in_use == 0


@pytest.mark.parametrize("fill", [None, -1])
def test_gather_rows_at_null(fill):
    heap = devalloc.Heap(1 << 18)
    counts = [4, 2, 0, 3, 5, 1, 6]
    offsets = make_rows(heap, counts, np.int32, fail_every=3)
    values, starts = heap.gather(offsets, counts, np.int32, fill=fill)
    want, want_starts = expected(counts, np.int32, fail_every=3, fill=fill)
    assert np.array_equal(values.copy_to_host(), want)
    assert np.array_equal(starts.copy_to_host(), want_starts)
    assert heap.usage().in_use == 0


def test_gather_of_nothing():
    heap = devalloc.Heap(1 << 16)
    values, starts = heap.gather(np.zeros(0, np.int64), np.zeros(0, np.int64), np.float32)
    assert values.shape == (0,) and starts.copy_to_host().tolist() == [0]


@pytest.mark.parametrize("n", [1, 7, 300, 2 * K.SCAN_SPAN + 11])
def test_exclusive_scan_matches_numpy(n):
    # The last size spans three scan blocks, whose totals are scanned and added back.
    vals = np.random.default_rng(n).integers(0, 1000, n).astype(np.int64)
    got = G._exclusive_scan(K, cuda.to_device(vals), 0).copy_to_host()
    assert np.array_equal(got, np.concatenate([[0], np.cumsum(vals)[:-1]]))


def test_gather_refuses_bad_arguments():
    heap = devalloc.Heap(1 << 18)
    offsets = make_rows(heap, [4, 4], np.int32)
    with pytest.raises(ValueError, match="differ in length"):
        heap.gather(offsets, [4, 4, 4], np.int32)
    with pytest.raises(TypeError, match="1-D integer array"):
        heap.gather(offsets, [4.0, 4.0], np.int32)
    with pytest.raises(TypeError, match="numeric scalar"):
        heap.gather(offsets, [4, 4], np.dtype([("a", np.int32)]))
    with pytest.raises(TypeError, match="fill"):
        heap.gather(offsets, [4, 4], np.int32, fill="x")
    with pytest.raises(ValueError, match="row 1 .*count -2"):
        heap.gather(offsets, [4, -2], np.int32)
    off = offsets.copy_to_host()
    with pytest.raises(ValueError, match="row 0 .*multiples of 8"):
        heap.gather(off + 4, [1, 1], np.float64)
    with pytest.raises(ValueError, match="row 1 .*inside"):
        heap.gather(off, [1, heap.capacity], np.int32)
    assert heap.usage().live_blocks == 2  # nothing was freed by the refused calls
    heap.gather(offsets, [4, 4], np.int32)
    assert heap.usage().in_use == 0


@cuda.jit
def k_fill(ctx, off, n):
    a = devalloc.view(ctx, off, n, np.float32)
    for j in range(a.shape[0]):
        a[j] = j


def test_heap_array_is_a_view_of_the_block():
    heap = devalloc.Heap(1 << 16)
    k_fill[1, 1](heap.ctx, 4096, 12)
    a = heap.array(4096, (3, 4), np.float32)
    assert a.shape == (3, 4)
    assert np.array_equal(a.copy_to_host(), np.arange(12, dtype=np.float32).reshape(3, 4))
    a[1, 1] = 100.0  # writes reach the heap's bytes: no copy
    assert heap.array(4096 + 20, 1, np.float32).copy_to_host()[0] == 100.0
    if not config.ENABLE_CUDASIM:
        assert hasattr(a, "__cuda_array_interface__")


@pytest.mark.parametrize("off,shape,dtype,err,says", [
    (4, 2, np.float64, ValueError, "alignment"),
    (-16, 2, np.float64, ValueError, "inside"),
    (0, 1 << 20, np.float64, ValueError, "inside"),
    (0, (2, -1), np.float64, ValueError, ">= 0"),
    (0.5, 2, np.float64, TypeError, "integer offset"),
    (0, (2.0, 3), np.float64, TypeError, "tuple of ints"),
    (0, 2, object, TypeError, "numeric scalar"),
])
def test_heap_array_refuses_bad_arguments(off, shape, dtype, err, says):
    heap = devalloc.Heap(1 << 16)
    with pytest.raises(err, match=says):
        heap.array(off, shape, dtype)


def test_launch_count_of_a_gather():
    # lengths, one scan launch (up to SCAN_SPAN values), copy, frees.
    assert G.launches(10, 40) == 4 and G.launches(10, 0) == 3 and G.launches(10, 40, False) == 3
    assert G.launches(0, 0) == 2
    # Past one scan block: scan, add, and the scan of the block totals.
    assert G.launches(K.SCAN_SPAN, 1) == 1 + 3 + 1 + 1
    assert G.scan_launches(K.SCAN_SPAN ** 2 + 1, K.SCAN_SPAN) == 5


# ------------------------------------------------ rows of items (issue 51)

@cuda.jit
def k_pairs(ctx, counts, offsets):
    # row i: counts[i] (x, y) pairs, x = 100 * i + j, y = -j
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    a = devalloc.array(ctx, (counts[i], 2), np.int32)
    for j in range(a.shape[0]):
        a[j, 0] = 100 * i + j
        a[j, 1] = -j
    offsets[i] = devalloc.offset_of(ctx, a)


@pytest.mark.parametrize("fill", [None, 7])
def test_gather_rows_of_pairs_by_item_shape(fill):
    heap = devalloc.Heap(1 << 18)
    counts = np.array([2, 0, 3, 1], np.int64)
    offsets = cuda.device_array(4, np.int64)
    k_pairs[1, 4](heap.ctx, cuda.to_device(counts), offsets)
    host = offsets.copy_to_host()
    host[3] = devalloc.NULL  # as if its alloc had failed (its block is freed below)
    values, starts = heap.gather(cuda.to_device(host), counts, np.int32, item_shape=(2,),
                                 fill=fill)
    v = values.copy_to_host()
    want = [[0, 0], [1, -1], [200, 0], [201, -1], [202, -2]] + ([[7, 7]] if fill else [])
    assert v.shape == (len(want), 2) and v.tolist() == want
    assert starts.copy_to_host().tolist() == [0, 2, 2, 5, 5 + (1 if fill else 0)]
    # row 3's own block was left out of the gather: free it by its offset
    leftover = cuda.to_device(offsets.copy_to_host()[3:])
    heap.gather(leftover, counts[3:], np.int32, item_shape=(2,))
    assert heap.usage().in_use == 0


def test_gather_item_shape_is_checked():
    heap = devalloc.Heap(1 << 16)
    offs = cuda.to_device(np.array([devalloc.NULL], np.int64))
    for bad in ((0,), (2, -1), [2], (2.0,), 2):
        with pytest.raises(TypeError, match="item_shape must be a tuple of positive integers"):
            heap.gather(offs, np.array([1], np.int64), np.int32, item_shape=bad)
    # 2-D items: (n, 2, 3)
    values, _ = heap.gather(offs, np.array([1], np.int64), np.int32, item_shape=(2, 3), fill=1)
    assert values.copy_to_host().shape == (1, 2, 3)
