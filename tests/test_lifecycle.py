"""Host side for real workloads (issue 5): streams, sizing, outside memory,
debug mode, errors. On the simulator."""

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L


@cuda.jit
def alloc_each(ctx, nbytes, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def free_each(ctx, offs):
    i = cuda.grid(1)
    if i < offs.shape[0]:
        devalloc.free(ctx, offs[i])


@cuda.jit
def fill_block(ctx, offs, nbytes, value):
    i = cuda.grid(1)
    if i < offs.shape[0] and offs[i] != devalloc.NULL:
        a = devalloc.view(ctx, offs[i], nbytes, np.uint8)
        for j in range(nbytes):
            a[j] = value


@cuda.jit
def write_past_end(ctx, off, nbytes):
    # One byte past the block: the bug debug mode must catch.
    a = devalloc.view(ctx, off, nbytes + 1, np.uint8)
    a[nbytes] = 42


@cuda.jit
def needs_scratch(ctx, nbytes, out):
    # Safe to re-run: every thread allocates, writes, records, frees at the end.
    i = cuda.grid(1)
    off = devalloc.alloc(ctx, nbytes)
    out[i] = off
    if off != devalloc.NULL:
        a = devalloc.view(ctx, off, nbytes, np.uint8)
        a[0] = 1


class SyncCounter:
    def __init__(self, monkeypatch):
        self.device = 0
        self.stream = 0
        counter = self

        def device_sync():
            counter.device += 1

        monkeypatch.setattr(cuda, "synchronize", device_sync)

    def stream_sync(self, stream):
        def sync():
            self.stream += 1
        stream.synchronize = sync
        return stream


# ------------------------------------------------------------------ streams
def test_reset_never_synchronizes_and_usage_syncs_only_the_heap_stream(monkeypatch):
    counter = SyncCounter(monkeypatch)
    s = counter.stream_sync(cuda.stream())
    heap = devalloc.Heap(L.capacity_for_pages(4), stream=s)
    assert (counter.device, counter.stream) == (0, 0)  # creation: no sync
    heap.reset()
    heap.reset(stream=s)
    assert (counter.device, counter.stream) == (0, 0)
    heap.usage()
    assert (counter.device, counter.stream) == (0, 1)  # only the heap's stream
    other = counter.stream_sync(cuda.stream())
    heap.usage(stream=other)
    assert (counter.device, counter.stream) == (0, 2)


def test_kernels_and_heap_work_on_a_stream():
    s = cuda.stream()
    heap = devalloc.Heap(L.capacity_for_pages(4), stream=s)
    out = cuda.device_array(32, np.int64, stream=s)
    alloc_each[1, 32, s](heap.ctx, 64, out)
    assert heap.usage().allocs == 32
    heap.reset(stream=s)
    assert heap.usage().allocs == 0


# ------------------------------------------------------------------- sizing
def test_suggest_capacity_covers_the_peak_with_headroom():
    heap = devalloc.Heap(L.capacity_for_pages(20))
    out = cuda.device_array(64, np.int64)
    alloc_each[2, 32](heap.ctx, 3000, out)  # 5 blocks of 3072 per page: 13 pages
    u = heap.usage()
    assert u.peak == 13 * L.PAGE
    assert u.suggest_capacity(0) == L.capacity_for_pages(13)
    assert u.suggest_capacity(0.25) == L.capacity_for_pages(17)  # ceil(16.25)
    # A heap of the suggested size serves the same run without failure.
    small = devalloc.Heap(u.suggest_capacity(0))
    alloc_each[2, 32](small.ctx, 3000, out)
    assert small.usage().failed == 0
    for bad in (-0.1, float("nan"), float("inf"), "1", None, True):
        with pytest.raises(ValueError, match="headroom"):
            u.suggest_capacity(bad)


def test_run_grows_the_heap_until_a_kernel_needing_3x_fits():
    start = L.capacity_for_pages(4)
    heap = devalloc.Heap(start)
    out = cuda.device_array(96, np.int64)
    # 96 blocks of 2048 B = 12 pages: three times the initial heap.
    result = heap.run(needs_scratch, 3, 32, heap, 2048, out, ceiling=1 << 20)
    assert result.usage.failed == 0 and result.usage.allocs == 96
    assert result.attempts == 3  # 4 -> 8 -> 16 pages' worth of capacity
    assert result.capacity == heap.requested >= 3 * start
    assert heap.capacity >= 12 * L.PAGE


def test_run_stops_at_the_ceiling():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(96, np.int64)
    ceiling = L.capacity_for_pages(5)
    with pytest.raises(devalloc.HeapExhausted, match="ceiling") as e:
        heap.run(needs_scratch, 3, 32, heap, 2048, out, ceiling=ceiling)
    assert heap.requested == ceiling  # never beyond it
    assert e.value.attempts == 3 and e.value.usage.failed > 0
    with pytest.raises(ValueError, match="growth"):
        heap.run(needs_scratch, 1, 1, heap, 16, out, ceiling=ceiling, growth=1)


def test_resize_discards_contents_and_changes_ctx():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(8, np.int64)
    alloc_each[1, 8](heap.ctx, 16, out)
    old_ctx = heap.ctx
    heap.resize(L.capacity_for_pages(6))
    assert heap.ctx is not old_ctx and heap.capacity == 6 * L.PAGE
    u = heap.usage()
    assert (u.allocs, u.in_use, u.peak) == (0, 0, 0)
    with pytest.raises(ValueError, match="at least"):
        heap.resize(10)
    assert heap.capacity == 6 * L.PAGE  # a failed resize keeps the heap


# ---------------------------------------------------------- outside memory
def test_heap_inside_a_numba_device_array_and_arena_exposes_it():
    # Inside memory= the buffer holds the metadata too.
    buf = cuda.to_device(np.full(L.memory_for_pages(3) + 4096, 0x11, np.uint8))
    heap = devalloc.Heap(memory=buf)
    assert heap.requested == buf.size and heap.capacity == 3 * L.PAGE
    out = cuda.device_array(4, np.int64)
    alloc_each[1, 4](heap.ctx, 100, out)
    fill_block[1, 4](heap.ctx, out, 100, 0xAB)
    offs = out.copy_to_host()
    arena = heap.arena.copy_to_host()
    assert heap.arena.size == heap.capacity
    for off in offs:
        assert (arena[off:off + 100] == 0xAB).all()
    # The bytes really live in buf: the arena is a view of it.
    host_buf = buf.copy_to_host()
    assert int((host_buf == 0xAB).sum()) == 400
    heap.close()
    assert buf.copy_to_host().size == buf.size  # still usable: not freed by the heap


def test_memory_errors_are_specific():
    with pytest.raises(TypeError, match="device array"):
        devalloc.Heap(memory=np.zeros(1 << 20, np.uint8))
    small = cuda.device_array(L.MIN_MEMORY_BYTES, np.uint8)
    with pytest.raises(ValueError, match="too small"):
        devalloc.Heap(memory=small)
    buf = cuda.device_array(1 << 16, np.uint8)
    with pytest.raises(ValueError, match="exceeds"):
        devalloc.Heap(1 << 17, memory=buf)
    with pytest.raises(TypeError):
        devalloc.Heap()


# ------------------------------------------------------------------- errors
def test_capacity_beyond_free_memory_raises_out_of_memory(monkeypatch):
    class Ctx:
        def get_memory_info(self):
            return (1 << 20, 1 << 30)

    monkeypatch.setattr(cuda, "current_context", lambda: Ctx())
    with pytest.raises(devalloc.OutOfMemoryError, match=r"1048577 bytes .*1048576 of 1073741824") as e:
        devalloc.Heap((1 << 20) + 1)
    assert isinstance(e.value, MemoryError)


def test_closed_heap_and_context_manager():
    with devalloc.Heap(1 << 20) as heap:
        assert heap.usage().capacity == heap.capacity
    assert heap.closed
    for use in (lambda: heap.ctx, heap.usage, heap.reset, heap.live, lambda: heap.arena,
                lambda: heap.resize(1 << 20)):
        with pytest.raises(devalloc.HeapClosedError, match="closed"):
            use()
    heap.close()  # idempotent


def test_device_selection():
    heap = devalloc.Heap(L.capacity_for_pages(2), device=0)
    out = cuda.device_array(4, np.int64)
    alloc_each[1, 4](heap.ctx, 16, out)
    assert heap.usage().allocs == 4
    with pytest.raises(ValueError, match="does not exist"):
        devalloc.Heap(1 << 20, device=len(cuda.gpus))
    with pytest.raises(TypeError, match="device number"):
        devalloc.Heap(1 << 20, device="0")


# --------------------------------------------------------------- debug mode
def test_debug_catches_one_byte_past_a_block_and_names_it():
    heap = devalloc.Heap(L.capacity_for_pages(4), debug=True)
    out = cuda.device_array(4, np.int64)
    alloc_each[1, 4](heap.ctx, 20, out)
    offs = out.copy_to_host()
    heap.check()  # clean so far
    write_past_end[1, 1](heap.ctx, offs[2], 20)
    with pytest.raises(devalloc.HeapCorruption, match=f"guard bytes overwritten at offset {offs[2]} ") as e:
        heap.check()
    assert [r.offset for r in e.value.records] == [offs[2]]
    # free also sees it, and records which block and thread freed it.
    free_each[2, 2](heap.ctx, out)
    with pytest.raises(devalloc.HeapCorruption) as e:
        heap.check()
    rec = e.value.records[0]
    assert (rec.kind, rec.offset, rec.block, rec.thread) == ("guard bytes overwritten", offs[2], 1, 0)
    assert heap.usage().live_blocks == 0
    heap.reset()
    heap.check()


def test_debug_records_invalid_frees_and_poisons_freed_blocks():
    heap = devalloc.Heap(L.capacity_for_pages(4), debug=True)
    out = cuda.device_array(3, np.int64)
    alloc_each[1, 3](heap.ctx, 40, out)
    offs = out.copy_to_host()
    fill_block[1, 3](heap.ctx, out, 40, 0x55)
    free_each[1, 1](heap.ctx, out)                      # frees offs[0]
    bad = cuda.to_device(np.array([offs[0], offs[1] + 16, -5], np.int64))
    free_each[1, 3](heap.ctx, bad)                      # double, interior, outside
    with pytest.raises(devalloc.HeapCorruption) as e:
        heap.check()
    kinds = sorted((r.offset, r.kind, r.thread) for r in e.value.records)
    assert kinds == sorted([(offs[0], "invalid free", 0), (offs[1] + 16, "invalid free", 1),
                            (-5, "invalid free", 2)])
    u = heap.usage()
    assert (u.invalid_frees, u.frees, u.live_blocks) == (3, 1, 2)
    arena = heap.arena.copy_to_host()
    assert (arena[offs[0]:offs[0] + 40] == 0xDB).all()   # poisoned
    assert (arena[offs[1]:offs[1] + 40] == 0x55).all()   # untouched


def test_live_lists_blocks_with_requested_sizes_on_debug_and_reserved_otherwise():
    for debug, size in ((True, 100), (False, L.class_size(L.size_class(100)))):
        heap = devalloc.Heap(L.capacity_for_pages(4), debug=debug)
        out = cuda.device_array(5, np.int64)
        alloc_each[1, 5](heap.ctx, 100, out)
        assert heap.live() == sorted((int(o), size) for o in out.copy_to_host())
        free_each[1, 5](heap.ctx, out)
        assert heap.live() == []
    with pytest.raises(ValueError, match="debug heap"):
        heap.check()


@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_heap_inside_another_librarys_buffer(library):
    # Needs the library and a GPU: the simulator has no __cuda_array_interface__.
    from numba import config

    if config.ENABLE_CUDASIM:
        pytest.skip(f"{library} buffers need a GPU; the tests run on the simulator")
    lib = pytest.importorskip(library, reason=f"{library} is not installed")
    nbytes = L.memory_for_pages(3) + 512
    if library == "cupy":
        buf = lib.zeros(nbytes, dtype=lib.uint8)
    else:
        buf = lib.zeros(nbytes, dtype=lib.uint8, device="cuda")
    heap = devalloc.Heap(memory=buf)
    out = cuda.device_array(4, np.int64)
    alloc_each[1, 4](heap.ctx, 100, out)
    fill_block[1, 4](heap.ctx, out, 100, 0xAB)
    assert heap.usage().allocs == 4
    host = buf.get() if library == "cupy" else buf.cpu().numpy()
    assert int((host == 0xAB).sum()) == 400


def test_several_heaps_side_by_side_on_each_device():
    heaps = [devalloc.Heap(L.capacity_for_pages(2), device=d) for d in range(len(cuda.gpus))
             for _ in range(2)]
    out = cuda.device_array(3, np.int64)
    for k, heap in enumerate(heaps):
        with cuda.gpus[heap.device]:
            alloc_each[1, 3](heap.ctx, 16 * (k + 1), out)
    for k, heap in enumerate(heaps):
        u = heap.usage()
        assert u.allocs == 3 and u.in_use == 3 * L.class_size(L.size_class(16 * (k + 1)))
        heap.close()


def test_capacity_above_the_page_limit_is_refused_before_allocating():
    most = L.capacity_for_pages(L.MAX_PAGES + 1) - 1
    assert L.pages_for_capacity(most) == L.MAX_PAGES
    with pytest.raises(ValueError, match=f"at most {most} bytes"):
        devalloc.Heap(most + 1)
