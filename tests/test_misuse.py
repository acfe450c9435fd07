"""Bad input and misuse (issue 15): a clear error, or NULL and a count.

Never a false success and never an access outside the arena. On the
simulator, except the GPU typing checks, which compile in a subprocess
with the real CUDA target (no GPU needed).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from gpu_marks import ON_GPU, needs_simulator
from numba import cuda
from numba.core.errors import TypingError

import devalloc
from devalloc.host import heap as host
from devalloc import layout as L
from patterns import hold_scope


@cuda.jit
def needs_scratch(ctx, nbytes, out):
    # Safe to re-run: every thread allocates and records its offset.
    i = cuda.grid(1)
    out[i] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def alloc_one(ctx, nbytes, out):
    out[0] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def free_one(ctx, off):
    devalloc.free(ctx, off)


@cuda.jit
def scoped_with(ctx, s, nbytes, out):
    off, s2 = devalloc.scoped(ctx, s, nbytes)
    out[0] = off
    out[1] = s2


@cuda.jit
def release_with(ctx, s, m, out):
    out[0] = devalloc.release(ctx, s, m)


@cuda.jit
def fill_doubles(ctx, off, count):
    # count float64 of 1.0 from off: past the block's end when count is too large.
    a = devalloc.view(ctx, off, count, np.float64)
    for j in range(a.shape[0]):
        a[j] = 1.0


@cuda.jit
def view_str_dtype(ctx, off, out):
    out[0] = devalloc.view(ctx, off, 4, "f4").shape[0]


@cuda.jit
def view_float_count(ctx, off, out):
    out[0] = devalloc.view(ctx, off, 2.5, np.float32).shape[0]


# ---------------------------------------------------------------- run()
def test_run_with_heap_ctx_counts_every_attempt():
    # heap.ctx rather than heap: after a resize the old ctx would point at
    # the discarded heap, and every later failure would go uncounted.
    heap = devalloc.Heap(L.capacity_for_pages(4))
    out = cuda.device_array(96, np.int64)
    result = heap.run(needs_scratch, 3, 32, heap.ctx, 2048, out, ceiling=1 << 20)
    assert (result.usage.failed, result.usage.allocs, result.attempts) == (0, 96, 3)
    assert (out.copy_to_host() != devalloc.NULL).all()


def test_run_refuses_a_ctx_it_cannot_count():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    other = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(96, np.int64)
    with pytest.raises(ValueError, match=r"argument 0 .* another heap.*Pass `heap`"):
        heap.run(needs_scratch, 3, 32, other.ctx, 2048, out, ceiling=1 << 20)
    stale = heap.ctx
    heap.resize(L.capacity_for_pages(3))
    with pytest.raises(ValueError, match="before a resize"):
        heap.run(needs_scratch, 3, 32, stale, 2048, out, ceiling=1 << 20)
    assert heap.usage().allocs == 0 and other.usage().allocs == 0  # nothing launched


@pytest.mark.parametrize("bad,error", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                       (True, TypeError), ("3", TypeError)])
def test_run_max_attempts_is_validated(bad, error):
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(1, np.int64)
    with pytest.raises(error, match="max_attempts must be an integer >= 1"):
        heap.run(needs_scratch, 1, 1, heap, 16, out, ceiling=1 << 20, max_attempts=bad)


def test_run_ceiling_below_the_heap_is_refused_truthfully():
    heap = devalloc.Heap(1 << 20)
    out = cuda.device_array(1, np.int64)
    with pytest.raises(ValueError, match=f"ceiling=524288 is below the heap's current size of "
                                         f"{1 << 20} bytes"):
        heap.run(needs_scratch, 1, 1, heap, 16, out, ceiling=524288)
    assert heap.requested == 1 << 20 and heap.usage().allocs == 0
    for growth in (float("inf"), float("nan"), 1, True):
        with pytest.raises(ValueError, match="growth"):
            heap.run(needs_scratch, 1, 1, heap, 16, out, ceiling=2 << 20, growth=growth)


# ---------------------------------------------------- scoped and release
def _snapshot(heap):
    return heap.arena.copy_to_host()


def _scoped(heap, s, nbytes):
    out = cuda.device_array(2, np.int64)
    scoped_with[1, 1](heap.ctx, s, nbytes, out)
    return out.copy_to_host().tolist()


def _release(heap, s, m):
    out = cuda.device_array(1, np.int64)
    release_with[1, 1](heap.ctx, s, m, out)
    return int(out.copy_to_host()[0])


def _patterned(pages):
    # A heap whose arena holds a known pattern: no header can be read as sane.
    heap = devalloc.Heap(L.capacity_for_pages(pages))
    heap.arena.copy_to_device(np.full(heap.capacity, 0xEE, np.uint8))
    return heap


def test_a_scope_state_of_another_heap_is_null_and_counted():
    big = devalloc.Heap(L.capacity_for_pages(8))
    out = cuda.device_array(10, np.int64)
    needs_scratch[1, 10](big.ctx, 8192, out)         # five pages of 8 KiB slabs first
    hold_scope[1, 1](big.ctx, 100, out)
    off, foreign = out.copy_to_host()[:2].tolist()
    assert off > 2 * L.PAGE and L.scope_chunk(foreign) >= 5 * L.PAGE
    small = _patterned(2)
    before = _snapshot(small)
    assert _scoped(small, foreign, 64) == [devalloc.NULL, foreign]
    outer = L.pack_scope(-1, 0, 1)
    assert _release(small, foreign, outer) == foreign
    u = small.usage()
    assert (u.scope_misuse, u.failed, u.reserved, u.scoped_bytes) == (2, 1, 0, 0)
    np.testing.assert_array_equal(_snapshot(small), before)


@pytest.mark.parametrize("state", [
    pytest.param(lambda cap: L.pack_scope(cap - 16, 48, 1), id="header-past-the-end"),
    pytest.param(lambda cap: L.pack_scope(cap + L.PAGE, 48, 1), id="beyond-the-arena"),
    pytest.param(lambda cap: L.pack_scope(L.PAGE, 48, 1), id="garbage-header"),
    pytest.param(lambda cap: L.pack_scope((1 << 35) - 16, 48, 3), id="far-away"),
])
def test_a_corrupted_scope_state_is_null_and_counted(state):
    heap = _patterned(2)
    before = _snapshot(heap)
    s = state(heap.capacity)
    assert _scoped(heap, s, 64) == [devalloc.NULL, s]
    depth = L.scope_depth(s)
    assert _release(heap, s, L.pack_scope(-1, 0, depth)) == s
    u = heap.usage()
    assert (u.scope_misuse, u.failed, u.reserved) == (2, 1, 0)
    np.testing.assert_array_equal(_snapshot(heap), before)


def _held_scope():
    # A heap in which one thread holds an open scope: (heap, offset, state, chunk).
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(2, np.int64)
    hold_scope[1, 1](heap.ctx, 100, out)
    off, s = out.copy_to_host().tolist()
    return heap, off, s, L.scope_chunk(s)


def test_a_scope_state_whose_cursor_points_into_the_header_is_refused():
    heap, off, s, chunk = _held_scope()
    forged = L.pack_scope(chunk, 0, 1)             # would hand out the chunk's header
    assert _scoped(heap, forged, 16) == [devalloc.NULL, forged]
    assert heap.usage().scope_misuse == 1
    assert _scoped(heap, s, 16)[0] == off + 112    # the real state still works


def test_a_corrupted_chunk_link_is_not_followed():
    heap, off, s, chunk = _held_scope()
    arena = _snapshot(heap)
    arena[chunk + 8:chunk + 16] = np.array([1 << 40], np.int64).view(np.uint8)  # next link
    heap.arena.copy_to_device(arena)
    # Too big for the chunk: scoped would look at the (corrupted) next chunk.
    assert _scoped(heap, s, 4000) == [devalloc.NULL, s]
    u = heap.usage()
    assert (u.scope_misuse, u.failed) == (1, 1)
    # The outermost release frees the chunk and stops at the bad link.
    assert _release(heap, s, L.pack_scope(-1, 0, 1)) == devalloc.SCOPE_NONE
    u = heap.usage()
    assert (u.scope_misuse, u.scoped_bytes, u.reserved) == (2, 0, 0)


# ------------------------------------------------------------ debug heaps
def test_debug_reports_the_requested_size_after_an_overrun_reaches_the_block_end():
    heap = devalloc.Heap(L.capacity_for_pages(2), debug=True)
    out = cuda.device_array(1, np.int64)
    alloc_one[1, 1](heap.ctx, 64, out)
    off = int(out.copy_to_host()[0])
    fill_doubles[1, 1](heap.ctx, off, 64 // 8 + 4)  # 32 bytes past the 64: the block's end
    assert heap.live() == [(off, 64)]
    with pytest.raises(devalloc.HeapCorruption,
                       match=f"guard bytes overwritten at offset {off} \\(requested 64 B\\)"):
        heap.check()
    free_one[1, 1](heap.ctx, off)
    with pytest.raises(devalloc.HeapCorruption) as e:
        heap.check()
    assert [(r.kind, r.offset) for r in e.value.records] == [("guard bytes overwritten", off)]
    assert heap.usage().live_blocks == 0 and heap.live() == []


def test_debug_heap_names_a_free_beyond_its_arena_as_another_heaps_offset():
    heap = devalloc.Heap(L.capacity_for_pages(2), debug=True)
    free_one[1, 1](heap.ctx, 5 * L.PAGE)
    with pytest.raises(devalloc.HeapCorruption,
                       match=f"invalid free at offset {5 * L.PAGE} .*another heap"):
        heap.check()
    assert heap.usage().invalid_frees == 1


def test_live_and_live_blocks_agree_through_scoped_chunks():
    heap = devalloc.Heap(L.capacity_for_pages(4))
    out = cuda.device_array(2, np.int64)
    alloc_one[1, 1](heap.ctx, 100, out)
    alloc_one[1, 1](heap.ctx, 300, out)
    hold_scope[1, 1](heap.ctx, 100, out)
    u = heap.usage()
    assert (u.live_blocks, u.scoped_chunks) == (2, 1)
    assert len(heap.live()) == u.live_blocks + u.scoped_chunks
    assert "scoped" in devalloc.Heap.live.__doc__ and "live_blocks" in devalloc.Heap.live.__doc__


# ------------------------------------------------------------- memory=
def test_memory_names_one_minimum_and_a_buffer_of_that_size_works_at_any_address():
    minimum = host.MIN_MEMORY
    said = set()
    for size in (1000, L.MIN_CAPACITY, minimum - 1):
        with pytest.raises(ValueError, match="too small") as e:
            devalloc.Heap(memory=cuda.device_array(size, np.uint8))
        said.update(int(n) for n in re.findall(r"at least (\d+) bytes", str(e.value)))
    assert said == {minimum}
    big = cuda.device_array(minimum + 256, np.uint8)
    for k in range(256):   # every offset from a 256-byte boundary
        heap = devalloc.Heap(memory=big[k:k + minimum])
        assert heap.npages == 1 and heap.requested == minimum
    with pytest.raises(ValueError, match=f"at least {minimum} bytes"):
        devalloc.Heap(minimum - 1, memory=big)
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    assert f"at least {minimum:,} B" in guide


# ------------------------------------------------------ other arguments
@pytest.mark.parametrize("stream", ["x", None, 1, 1.0, True])
def test_stream_is_validated(stream):
    with pytest.raises(TypeError, match="stream= must be 0 .* or a Numba CUDA stream"):
        devalloc.Heap(L.capacity_for_pages(2), stream=stream)
    heap = devalloc.Heap(L.capacity_for_pages(2))
    for call in (heap.usage, heap.reset, heap.live):
        if stream is not None:   # None: the heap's own stream
            with pytest.raises(TypeError, match="stream must be 0"):
                call(stream=stream)


def test_streams_that_are_allowed():
    for stream in (0, np.int64(0), cuda.stream(), cuda.default_stream()):
        heap = devalloc.Heap(L.capacity_for_pages(2), stream=stream)
        assert heap.usage(stream=stream).allocs == 0


@pytest.mark.parametrize("debug", ["no", "yes", 1, 0, None, [True]])
def test_debug_must_be_a_bool(debug):
    with pytest.raises(TypeError, match="debug= must be True or False"):
        devalloc.Heap(L.capacity_for_pages(2), debug=debug)


def test_debug_accepts_bools():
    for debug in (True, False, np.bool_(True)):
        assert devalloc.Heap(L.capacity_for_pages(2), debug=debug).debug is bool(debug)


@needs_simulator("the simulator's heap lives in host memory")
def test_a_heap_larger_than_the_simulators_host_memory_is_out_of_memory():
    ram = host._host_memory()
    capacity = L.capacity_for_pages(-(-int(ram) // L.PAGE) + 1)
    if capacity > L.capacity_for_pages(L.MAX_PAGES):
        pytest.skip("this host has more memory than the largest heap")
    nbytes = L.memory_for_pages(L.pages_for_capacity(capacity))  # arena and metadata
    with pytest.raises(devalloc.OutOfMemoryError,
                       match=f"{capacity} bytes needs {nbytes} bytes .*the host"):
        devalloc.Heap(capacity)


def test_numpys_memory_error_becomes_out_of_memory(monkeypatch):
    def refuse(*args, **kwargs):
        raise MemoryError("Unable to allocate 1.00 GiB for an array")

    monkeypatch.setattr(cuda, "device_array", refuse)
    with pytest.raises(devalloc.OutOfMemoryError, match="could not allocate") as e:
        devalloc.Heap(1 << 20)
    assert isinstance(e.value.__cause__, MemoryError)


def test_a_heap_given_to_a_kernel_says_to_pass_heap_ctx():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(1, np.int64)
    # The simulator runs the kernel and fails at the first use of the heap
    # (devalloc.device.kinds); a GPU fails at launch, typing the argument
    # (Heap._numba_type_).
    with pytest.raises(TypeError, match="pass heap.ctx"):
        alloc_one[1, 1](heap, 16, out)
    with pytest.raises(TypeError, match="pass heap.ctx"):
        view_str_dtype[1, 1](heap, 0, out)
    with pytest.raises(TypeError, match="pass heap.ctx"):
        numba.typeof(heap)
    assert heap.arena is heap.ctx.arena   # the public attribute is untouched


# ------------------------------------------- simulator and GPU agree on view
GPU_SCRIPT = """
import json
import numpy as np
from numba import cuda, types
import devalloc
from devalloc.tools import aot

def k_str(ctx, off, out):
    out[0] = devalloc.view(ctx, off, 4, "f4").shape[0]

def k_float(ctx, off, out):
    out[0] = devalloc.view(ctx, off, 2.5, np.float32).shape[0]

def k_alloc(ctx, n, out):
    out[0] = devalloc.alloc(ctx, n)

got = {}
for name, k in (("str", k_str), ("float", k_float)):
    try:
        aot.compile_ptx(k, (devalloc.ctx_type, types.int64, types.int64[::1]))
        got[name] = None
    except Exception as e:
        got[name] = [type(e).__name__, str(e)]
try:
    aot.compile_ptx(k_alloc, (types.int64[::1], types.int64, types.int64[::1]))
    got["array"] = None
except Exception as e:
    got["array"] = [type(e).__name__, str(e)]
# a heap's metadata array refuses to be typed (at launch) once its lease ended
from devalloc.ctx import Lease
from devalloc.host.paged import paged_array_class
meta = object.__new__(paged_array_class())   # no GPU here: no device memory behind it
meta._devalloc_lease = Lease("Heap(capacity=1)")
got["typed_live"] = str(meta._numba_type_)
for why in ("closed", "resized"):
    meta._devalloc_lease.end(why)
    try:
        meta._numba_type_
        got[why] = None
    except Exception as e:
        got[why] = [type(e).__name__, str(e)]
heap = object.__new__(devalloc.Heap)    # no GPU here: typing is what is tried
try:
    cuda.jit(k_alloc)[1, 1](heap, 16, np.zeros(1, np.int64))
    got["heap"] = None
except Exception as e:
    got["heap"] = [type(e).__name__, str(e)]
# an empty view's data: the kernel's sink, a global array outside every heap
from devalloc.ctx import ctx_type_for
from devalloc.device.intrinsics import SINK_BYTES

def k_empty_write(ctx, off, out):
    v = devalloc.view(ctx, off, 4, np.int64)
    v[0] = 7
    out[0] = v.size

for kind in ("normal", "debug"):
    ptx, _ = aot.compile_ptx(k_empty_write, (ctx_type_for(14, kind), types.int64,
                                             types.int64[::1]))
    decl = ".global .align 16 .b8 _devalloc_empty_view_sink[%d];" % SINK_BYTES
    got["sink_" + kind] = [decl in ptx, "mov.u64" in ptx and "_devalloc_empty_view_sink;" in ptx,
                           aot.assemble(ptx).spill_bytes]
print(json.dumps(got))
"""


@pytest.fixture(scope="module")
def gpu_errors():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", GPU_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel,name,says", [
    (view_str_dtype, "str", "devalloc.view: dtype must be a NumPy or Numba scalar type"),
    (view_float_count, "float", "devalloc.view: off and count must be integers"),
])
def test_view_refuses_on_the_simulator_what_the_gpu_refuses(gpu_errors, kernel, name, says):
    kind, message = gpu_errors[name]
    assert kind == "TypingError" and says in message
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(1, np.int64)
    with pytest.raises(TypingError, match=re.escape(says)):
        kernel[1, 1](heap.ctx, 0, out)


def test_a_heap_given_to_a_kernel_on_the_gpu_target_says_to_pass_heap_ctx(gpu_errors):
    kind, message = gpu_errors["heap"]
    assert kind == "TypeError" and "pass heap.ctx" in message


# ------------------------------------------------ a ctx checked at launch (issue 51)

@pytest.mark.parametrize("what", ["array", "device array", "None", "tuple", "heap words"])
def test_anything_but_a_heaps_ctx_is_a_type_error_naming_heap_ctx(what):
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.device_array(1, np.int64)
    bad = {"array": np.zeros(8, np.int64), "device array": cuda.device_array(8, np.uint8),
           "None": None, "tuple": (heap.ctx.arena, heap.ctx.meta),
           "heap words": heap.ctx.meta}[what]
    with pytest.raises(TypeError, match=r"pass heap\.ctx"):
        alloc_one[1, 1](bad, 16, out)
    alloc_one[1, 1](heap.ctx, 16, out)  # the heap itself is untouched
    assert out.copy_to_host()[0] != L.NULL and heap.usage().allocs == 1


def test_a_closed_heaps_ctx_is_refused_before_the_kernel_runs():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    ctx, other = heap.ctx, heap.ctx_with(outline=not heap.outline)
    out = cuda.to_device(np.full(1, 7, np.int64))
    heap.close()
    for c in (ctx, other):
        with pytest.raises(devalloc.HeapClosedError, match="closed.*pass its heap.ctx"):
            alloc_one[1, 1](c, 16, out)
    assert out.copy_to_host()[0] == 7  # the kernel did not run


def test_a_ctx_from_before_resize_is_refused_and_the_new_one_works():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    old = heap.ctx
    out = cuda.to_device(np.full(1, 7, np.int64))
    heap.resize(L.capacity_for_pages(4))
    with pytest.raises(devalloc.StaleCtxError, match=r"before Heap.*resize\(\).*pass heap\.ctx"):
        alloc_one[1, 1](old, 16, out)
    assert out.copy_to_host()[0] == 7 and heap.usage().allocs == 0
    assert isinstance(devalloc.StaleCtxError("x"), devalloc.HeapClosedError)
    alloc_one[1, 1](heap.ctx, 16, out)
    assert out.copy_to_host()[0] != L.NULL and heap.usage().allocs == 1


def test_a_failed_resize_keeps_the_old_ctx_usable():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    ctx = heap.ctx
    with pytest.raises((ValueError, TypeError)):
        heap.resize(-1)
    out = cuda.device_array(1, np.int64)
    alloc_one[1, 1](ctx, 16, out)
    assert out.copy_to_host()[0] != L.NULL


def test_the_launch_check_costs_one_isinstance_per_argument():
    # What every launch pays (the GPU's check is the same attribute read, in
    # the metadata array's Numba type): measured in bench/RESULTS.md, here
    # only that it looks at nothing else.
    from devalloc.ctx import Lease, check_launch_args

    heap = devalloc.Heap(L.capacity_for_pages(2))
    args = (heap.ctx, 16, np.zeros(4))
    check_launch_args(args)
    lease = heap.ctx.meta._devalloc_lease
    assert isinstance(lease, Lease) and lease.ended is None
    heap.close()
    with pytest.raises(devalloc.HeapClosedError):
        check_launch_args(args)


def test_on_the_gpu_target_a_non_ctx_and_an_ended_heap_are_refused(gpu_errors):
    kind, message = gpu_errors["array"]
    assert kind == "TypeError" and "pass heap.ctx" in message and "array(int64" in message
    assert gpu_errors["typed_live"].startswith("array(int64, 1d, C, page=")
    assert gpu_errors["closed"][0] == "HeapClosedError"
    assert gpu_errors["resized"][0] == "StaleCtxError"
    assert "pass heap.ctx again" in gpu_errors["resized"][1]


# --------------------------------------------- 0 bytes is not a failure (issue 51)

@cuda.jit
def zero_byte_requests(ctx, counts, out):
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    n = counts[i]
    out[i, 0] = devalloc.alloc(ctx, n * 4)
    out[i, 1] = devalloc.bump(ctx, n * 4)
    s = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    m = s
    off, s = devalloc.scoped(ctx, s, n * 4)
    out[i, 2] = off
    devalloc.release(ctx, s, m)
    a = devalloc.array(ctx, n, np.float32)
    out[i, 3] = a.size
    devalloc.free_array(ctx, a)
    devalloc.free(ctx, out[i, 0])


@pytest.mark.parametrize("kind", ["normal", "debug", "observed"])
def test_a_zero_byte_request_is_null_and_counted_apart_from_failures(kind):
    heap = devalloc.Heap(L.capacity_for_pages(16), debug=kind == "debug",
                         profile=kind == "observed")
    counts = cuda.to_device(np.array([0, 3, 0, 5], np.int64))
    out = cuda.device_array((4, 4), np.int64)
    zero_byte_requests[1, 4](heap.ctx, counts, out)
    got = out.copy_to_host()
    assert (got[[0, 2]][:, :3] == L.NULL).all() and (got[[0, 2], 3] == 0).all()
    assert (got[[1, 3]][:, :3] != L.NULL).all() and list(got[[1, 3], 3]) == [3, 5]
    u = heap.usage()
    # 2 threads x (alloc, bump, scoped, array) of 0 bytes
    assert u.failed == 0 and u.empty_requests == 8, u
    assert "0-byte requests" in str(u) and u.to_dict()["empty_requests"] == 8
    heap.reset()
    assert heap.usage().empty_requests == 0


def test_heap_run_does_not_grow_for_zero_byte_requests():
    # docs/porting.md's ragged example asks for counts[i] * 4 bytes, some 0
    heap = devalloc.Heap(L.capacity_for_pages(16))
    before = heap.capacity
    counts = cuda.to_device(np.array([0, 3, 0, 5], np.int64))
    out = cuda.device_array((4, 4), np.int64)
    r = heap.run(zero_byte_requests, 1, 4, heap, counts, out,
                 ceiling=L.capacity_for_pages(64))
    assert r.attempts == 1 and r.usage.failed == 0 and r.usage.empty_requests == 8
    assert heap.capacity == before  # not grown


NO_DRIVER = """
import devalloc
try:
    devalloc.Heap(1 << 20)
    print("made a heap")
except devalloc.NoCudaError as e:
    assert isinstance(e, RuntimeError)
    print("NoCudaError:", e)
"""


@pytest.mark.skipif(__import__("devalloc.target").target.gpu_available(),
                    reason="a GPU is usable here")
def test_no_driver_and_no_simulator_says_how_to_run_on_the_simulator():
    import cuda_target

    said = cuda_target.run(NO_DRIVER).strip()
    assert said.startswith("NoCudaError: no usable CUDA driver or GPU here (")
    assert "NUMBA_ENABLE_CUDASIM=1" in said and "pip install 'devalloc[cu13]'" in said


def test_a_misuse_record_says_cuda_block_and_thread():
    from devalloc.host.debug import Record

    said = str(Record("double free", 4096, 3, 17))
    assert said == "double free at offset 4096: CUDA block 3, thread 17"
    assert str(Record("guard overwritten", 16, -1, -1)).endswith("found by check()")


# ------------------------------------ an empty view reaches no block (issue 51)

@cuda.jit
def empty_views(ctx, off, write, out):
    # Views that are empty (NULL, past the arena, a negative count), each
    # written through unchecked when `write` (on a GPU: nothing checks bounds).
    a = devalloc.view(ctx, devalloc.NULL, 4, np.int64)
    b = devalloc.view(ctx, off, 4, np.float64)
    c = devalloc.view(ctx, 0, -3, np.int32)
    d = devalloc.view(ctx, off, (2, 3), np.int16)
    if write:
        a[0] = -1
        a[3] = -1
        b[1] = 1.5
        c[2] = -7
        d[1, 1] = 99
    out[0] = a.size + b.size + c.size + d.size
    out[1] = devalloc.offset_of(ctx, a)


def test_an_empty_view_is_empty_and_its_offset_null():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    empty_views[1, 1](heap.ctx, heap.capacity, 0, out)
    assert out.copy_to_host().tolist() == [0, L.NULL]


@pytest.mark.parametrize("debug", [False, True])
def test_a_write_through_an_empty_view_lands_in_no_block(debug):
    # Every byte of the arena holds a pattern; writes through empty views
    # must leave all of it alone. On a GPU they land in the kernel's sink;
    # the simulator checks bounds and refuses them.
    heap = devalloc.Heap(L.capacity_for_pages(2), debug=debug)
    pattern = (np.arange(heap.capacity) % 251).astype(np.uint8)
    heap.arena.copy_to_device(pattern)
    out = cuda.to_device(np.zeros(2, dtype=np.int64))
    if ON_GPU:
        empty_views[1, 32](heap.ctx, heap.capacity, 1, out)
        cuda.synchronize()
    else:
        with pytest.raises(IndexError):
            empty_views[1, 1](heap.ctx, heap.capacity, 1, out)
    assert np.array_equal(heap.arena.copy_to_host(), pattern)
    if debug:
        heap.check()  # a view of NULL or past the arena is empty, not misuse


def test_on_the_gpu_target_an_empty_views_data_is_the_kernels_sink(gpu_errors):
    for kind in ("normal", "debug"):
        declared, used, spills = gpu_errors["sink_" + kind]
        assert declared and used and spills == 0, kind
