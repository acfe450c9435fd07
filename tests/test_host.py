"""Host side: capacity arguments, heap geometry, the public names, ctx types.

Runs on the simulator like the rest of the suite, except the Numba-type
checks, which compare against the real CUDA target in a subprocess
(``typeof`` of a simulator array is not the type a GPU kernel sees).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L


# ------------------------------------------------------ capacity arguments


@pytest.mark.parametrize(
    "capacity", [0, -1, L.MIN_CAPACITY - 1, -(1 << 40)], ids=["0", "-1", "MIN-1", "-2**40"]
)
def test_capacity_below_minimum_is_a_value_error_naming_the_minimum(capacity):
    with pytest.raises(ValueError) as e:
        devalloc.Heap(capacity)
    assert str(L.MIN_CAPACITY) in str(e.value)


@pytest.mark.parametrize(
    "capacity",
    [1.5, None, [1], True, False, np.bool_(True), "4096", np.float64(1e6), 1e6, b"4096"],
    ids=["1.5", "None", "[1]", "True", "False", "np.bool_", "str", "np.float64",
         "float", "bytes"],
)
def test_capacity_that_is_not_an_integer_is_a_type_error(capacity):
    with pytest.raises(TypeError):
        devalloc.Heap(capacity)


@pytest.mark.parametrize(
    "capacity", [np.int64(1 << 20), np.uint32(1 << 20), np.int32(1 << 20), 1 << 20],
    ids=["np.int64", "np.uint32", "np.int32", "int"],
)
def test_integer_capacities_of_any_integer_type(capacity):
    heap = devalloc.Heap(capacity)
    assert heap.capacity == L.pages_for_capacity(1 << 20) * L.PAGE
    assert type(heap.capacity) is int
    assert heap.usage().capacity == heap.capacity


def test_minimum_capacity_gives_one_page():
    heap = devalloc.Heap(L.MIN_CAPACITY)
    assert (heap.npages, heap.capacity) == (1, L.PAGE)


def device_bytes(array):
    return array.size * array.dtype.itemsize


GEOMETRY = [
    L.MIN_CAPACITY,
    L.MIN_CAPACITY + 12345,
    12 * L.PAGE,
    1 << 20,
    L.capacity_for_pages(7),
    L.capacity_for_pages(7) - 1,
    (3 << 20) + 1,
]


@pytest.mark.parametrize("requested", GEOMETRY)
def test_capacity_is_the_whole_pages_asked_for_and_the_metadata_lies_beside(requested):
    heap = devalloc.Heap(requested)
    assert heap.capacity % L.PAGE == 0
    assert 0 < heap.capacity <= requested < heap.capacity + L.PAGE
    assert heap.capacity == heap.npages * L.PAGE == device_bytes(heap.ctx.arena)
    assert device_bytes(heap.ctx.meta) == 8 * L.meta_words(heap.npages) == heap.meta_bytes
    assert L.capacity_for_pages(heap.npages + 1) > requested


def test_capacity_for_pages_boundary():
    assert devalloc.Heap(L.capacity_for_pages(7)).npages == 7
    assert devalloc.Heap(L.capacity_for_pages(7) - 1).npages == 6


# ---------------------------------------------------------------- the shim


@cuda.jit
def k_mixed_atomics(a, iters):
    """Half the increments by ``add``, half by a ``cas`` loop, on one word."""
    for it in range(iters):
        if (cuda.threadIdx.x + it) % 2 == 0:
            cuda.atomic.add(a, 0, 1)
        else:
            old = a[0]
            while True:
                got = cuda.atomic.cas(a, 0, old, old + 1)
                if got == old:
                    break
                old = got


def test_simulator_atomic_shim_is_installed():
    devalloc.Heap  # first use of a public name installs it
    from devalloc import sim

    assert sim.installed() is True



@cuda.jit
def k_cas_expecting(a, expected):
    cuda.atomic.cas(a, 0, expected, 7)


def test_count_atomics_tells_lost_cas_from_won_ones():
    from devalloc.sim.atomics import count_atomics

    a = np.zeros(1, np.int64)
    with count_atomics() as n:
        k_cas_expecting[1, 1](a, 5)  # finds 0: loses, changes nothing
        k_cas_expecting[1, 1](a, 0)  # finds 0: wins
        k_cas_expecting[1, 1](a, 0)  # finds 7: loses
    assert a[0] == 7
    assert n.by_kind == {"cas": 3} and n.cas_failed == 2

def test_mixed_atomic_kinds_lose_no_update(fine_interleaving):
    # Without the shim, add and cas take different simulator locks and
    # about one launch in two loses an increment.
    for _ in range(3):
        a = np.zeros(1, np.int64)
        k_mixed_atomics[1, 32](a, 100)
        assert a[0] == 32 * 100


# ------------------------------------------------------ public names, types


#: The public API: what ``from devalloc import *`` gives. Pinned on purpose:
#: a name added to or dropped from the API must be added or dropped here.
PUBLIC = {
    # host
    "Heap", "Ctx", "DebugCtx", "ObsCtx", "ctx_type", "debug_ctx_type", "obs_ctx_type",
    "ctx_type_for",
    "RunResult", "replay",
    "Usage", "ClassUsage",
    # errors
    "DevallocError", "HeapClosedError", "HeapCorruption", "HeapExhausted", "StaleCtxError",
    "NoCudaError",
    "OutOfMemoryError",
    # constants
    "ALIGN", "NULL", "PAGE", "SCOPE_NONE",
    # device
    "alloc", "free", "view", "bump", "mark", "release", "scoped",
    # device: the porting API (docs/porting.md)
    "array", "free_array", "calloc", "realloc", "usable_size", "alloc_aligned", "carve",
    "carve_end", "offset_of", "realloc_carved",
}


def test_all_lists_exactly_the_public_names():
    assert len(devalloc.__all__) == len(set(devalloc.__all__))
    assert set(devalloc.__all__) == PUBLIC
    for name in devalloc.__all__:
        assert getattr(devalloc, name) is not None, name
    namespace = {}
    exec("from devalloc import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC


def test_no_other_public_attributes():
    import types

    public = {
        n for n in dir(devalloc)
        if not n.startswith("_") and not isinstance(getattr(devalloc, n), types.ModuleType)
    }
    assert public == PUBLIC


def test_layout_constants_are_re_exported_unchanged():
    assert (devalloc.NULL, devalloc.ALIGN, devalloc.PAGE) == (L.NULL, L.ALIGN, L.PAGE)


TYPES_SCRIPT = """
import numpy as np, numba, devalloc
from numba.cuda.cudadrv.devicearray import DeviceNDArray
from devalloc.ctx import ctx_type_for
from devalloc.host.paged import paged_meta
# Device arrays as a heap makes them (no GPU: their memory is never touched);
# the metadata typed with its page, as Heap does.
def dev(dtype):
    return DeviceNDArray((4,), (np.dtype(dtype).itemsize,), dtype, gpu_data=object())
b, h, w = dev(np.uint8), dev(np.uint16), dev(np.int64)
m = paged_meta(w, 14)
print(numba.typeof(devalloc.Ctx(b, m)))
print(devalloc.ctx_type)
print(numba.typeof(devalloc.Ctx(b, m)) == devalloc.ctx_type)
print(numba.typeof(devalloc.DebugCtx(b, m, w, h)))
print(devalloc.debug_ctx_type)
print(numba.typeof(devalloc.DebugCtx(b, m, w, h)) == devalloc.debug_ctx_type)
print(numba.typeof(devalloc.Ctx(b, paged_meta(w, 10))) == ctx_type_for(10))
print(numba.typeof(devalloc.Ctx(b, paged_meta(w, 10))) != devalloc.ctx_type)
print(numba.typeof(devalloc.Ctx(b, paged_meta(w, 14, True))) == ctx_type_for(14, outline=True))
print(numba.typeof(devalloc.Ctx(b, paged_meta(w, 14, True)))
      != numba.typeof(devalloc.Ctx(b, paged_meta(w, 14, False))))
print(numba.typeof(devalloc.Ctx(b, paged_meta(w, 14, True))))
"""


@pytest.fixture(scope="module")
def gpu_types():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run(
        [sys.executable, "-c", TYPES_SCRIPT], capture_output=True, text=True,
        env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()


def test_ctx_type_is_the_type_of_a_ctx_on_the_cuda_target(gpu_types):
    typeof_ctx, ctx_type, equal = gpu_types[:3]
    assert typeof_ctx == ctx_type == str(devalloc.ctx_type)
    assert equal == "True"
    assert "uint8" in typeof_ctx and "int64" in typeof_ctx


def test_debug_ctx_type_is_the_type_of_a_debug_ctx_on_the_cuda_target(gpu_types):
    typeof_ctx, ctx_type, equal = gpu_types[3:6]
    assert typeof_ctx == ctx_type == str(devalloc.debug_ctx_type)
    assert equal == "True"


def test_a_heaps_page_is_part_of_its_ctx_type_on_the_cuda_target(gpu_types):
    # Heap(page=1024)'s ctx has its own type (kernels compile with the page
    # as a constant, once per page size they meet): ctx_type_for(10).
    assert gpu_types[6:8] == ["True", "True"]


def test_a_heaps_outline_choice_is_part_of_its_ctx_type_on_the_cuda_target(gpu_types):
    # Heap(outline=True) and heap.ctx_with(outline=True): the metadata's type
    # says it (kernels compile once per choice they meet): ctx_type_for(outline=True).
    assert gpu_types[8:10] == ["True", "True"]
    assert gpu_types[10] == "Ctx(array(uint8, 1d, C), array(int64, 1d, C, page=16384, outline))"


FIRST_USE_SCRIPT = """
import sys
import numpy as np
from numba import types
import devalloc
from devalloc.tools import aot

def k_alloc(ctx, n, out):
    out[0] = devalloc.alloc(ctx, n)

def k_free(ctx, n, out):
    devalloc.free(ctx, n)

def k_view(ctx, n, out):
    out[0] = devalloc.view(ctx, n, 4, np.int64).shape[0]

kernel = {"alloc": k_alloc, "free": k_free, "view": k_view}[sys.argv[1]]
aot.compile_ptx(kernel, (devalloc.ctx_type, types.int64, types.int64[::1]))
print("compiled")
"""


@pytest.mark.parametrize("name", ["alloc", "free", "view"])
def test_first_kernel_using_a_device_name_compiles_for_the_gpu(name):
    # A fresh process, as a user's script: the kernel is the first thing
    # that uses devalloc.<name>; nothing on the host touched it before.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run(
        [sys.executable, "-c", FIRST_USE_SCRIPT, name], capture_output=True,
        text=True, env=env, timeout=300,
    )
    unknown = [line for line in proc.stderr.splitlines() if "Unknown attribute" in line]
    assert proc.returncode == 0 and proc.stdout.strip() == "compiled", unknown or proc.stderr[-2000:]


@pytest.mark.parametrize("capacity,page", [(1 << 20, "auto"), (1 << 26, "auto"), (None, 4096),
                                           (None, None)])
def test_ctx_type_for_names_the_page_a_heap_would_get(capacity, page):
    # ahead of time, for any page and kind (issue 51): the page Heap works out
    import devalloc.ctx as C

    t = devalloc.ctx_type_for(capacity, page=page)
    want = devalloc.Heap(capacity or 1 << 20, page=page).page_shift
    assert t.types[1].page_shift == want and t.instance_class is devalloc.Ctx
    assert devalloc.ctx_type_for(capacity, page=page, debug=True).instance_class is C.DebugCtx
    assert devalloc.ctx_type_for(capacity, page=page, observed=True).instance_class is C.ObsCtx


def test_ctx_type_for_says_what_is_wrong():
    with pytest.raises(TypeError, match=r"needs the capacity"):
        devalloc.ctx_type_for(page="auto")
    with pytest.raises(ValueError, match="power of two"):
        devalloc.ctx_type_for(page=3000)
    with pytest.raises(TypeError, match="debug= must be True or False"):
        devalloc.ctx_type_for(debug=1)
