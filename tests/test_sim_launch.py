"""devalloc.sim.launch: simulated launches without a convoy, computing the same.

A device function's module sees the launch's simulated ``cuda`` from its
first call on and gets the real one back when the launch ends, also when a
thread raised; device functions called from host code keep the simulator's
own path; a launch runs with the switch interval asked (the caller's by
default) and gives the caller's back. Wall-clock figures are in bench/RESULTS.md
(``bench/sim_launch.py``), never asserted.
"""

import sys
import types

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L
from devalloc.device import core, slab
from devalloc.sim import launch

pytestmark = pytest.mark.skipif(sys.modules["numba"].config.ENABLE_CUDASIM == 0,
                                reason="simulator launches")


@cuda.jit
def k_interval(out):
    # Simulator only: a kernel body is Python here.
    out[cuda.grid(1)] = sys.getswitchinterval()


@cuda.jit(device=True)
def _tid():
    return cuda.threadIdx.x


@cuda.jit
def k_alloc_seen(ctx, out, seen):
    i = cuda.grid(1)
    out[i] = devalloc.alloc(ctx, 64)
    seen[i] = _tid()
    # The device modules called so far see the simulated module, not the
    # real one (every global bound to the real one is swapped: look it up).
    real = sys.modules["numba.cuda"]
    if core.cuda is real or slab.cuda is real or cuda is real:
        seen[i] = -1


@cuda.jit
def k_raise(out):
    i = cuda.grid(1)
    out[i] = devalloc.alloc(out, 16)  # not a heap context: raises in every thread


def test_installed_with_the_first_use_of_devalloc():
    devalloc.Heap
    assert launch.installed()


@pytest.mark.parametrize("cap", [None, 1e-4])
@pytest.mark.parametrize("before", [5e-3, 1.0, 2e-5])
def test_a_launch_runs_with_the_interval_asked_and_restores_the_callers(
        monkeypatch, before, cap):
    devalloc.Heap
    monkeypatch.setattr(launch, "SWITCH_INTERVAL", cap)
    old = sys.getswitchinterval()
    sys.setswitchinterval(before)
    try:
        out = np.zeros(4)
        k_interval[1, 4](out)
        assert sys.getswitchinterval() == pytest.approx(before)
    finally:
        sys.setswitchinterval(old)
    # None: the caller's. A cap: at most the cap, a shorter one (a test making
    # races show) kept.
    want = before if cap is None else min(before, cap)
    assert out.tolist() == pytest.approx([want] * 4)


def test_device_modules_see_the_simulated_cuda_during_a_launch_only():
    heap = devalloc.Heap(L.capacity_for_pages(2))
    out = cuda.to_device(np.full(32, L.NULL, np.int64))
    seen = cuda.to_device(np.full(32, -2, np.int64))
    k_alloc_seen[1, 32](heap.ctx, out, seen)
    assert seen.copy_to_host().tolist() == list(range(32))
    offs = out.copy_to_host()
    assert (offs != L.NULL).all() and len(set(offs.tolist())) == 32
    assert heap.usage().allocs == 32
    # Given back when the launch ended.
    assert core.cuda is cuda and slab.cuda is cuda
    assert isinstance(sys.modules[__name__].cuda, types.ModuleType)
    assert launch._SWAPPED == {}


def test_modules_are_given_back_when_a_thread_raises():
    devalloc.Heap
    with pytest.raises(Exception):
        k_raise[1, 4](np.zeros(4, np.int64))
    assert launch._SWAPPED == {}
    assert core.cuda is cuda and sys.modules[__name__].cuda is cuda


def test_a_device_function_called_from_host_code_keeps_the_simulators_path():
    devalloc.Heap
    with pytest.raises(Exception):
        _tid()  # no launch: no simulated module, as without devalloc
    assert sys.modules[__name__].cuda is cuda and launch._SWAPPED == {}


def test_uninstall_and_install_again(monkeypatch):
    devalloc.Heap
    monkeypatch.setattr(launch, "SWITCH_INTERVAL", 1e-4)
    launch.uninstall()
    try:
        assert not launch.installed()
        out = np.zeros(2)
        k_interval[1, 2](out)  # the simulator's own call: the caller's interval
        assert out.tolist() == pytest.approx([sys.getswitchinterval()] * 2)
    finally:
        launch.install()
    assert launch.installed()
    launch.install()  # once only: not wrapped twice
    from numba.cuda.simulator import kernel

    assert not getattr(kernel.FakeCUDAKernel.__call__.__wrapped__, "_devalloc_launch", False)



@cuda.jit
def k_rotate(out):
    tmp = cuda.shared.array(128, np.int64)
    t = cuda.threadIdx.x
    tmp[t] = t
    cuda.syncthreads()
    out[cuda.blockIdx.x, t] = tmp[(t + 1) % 128]


@cuda.jit
def k_two_shared(out):
    a = cuda.shared.array(32, np.int64)
    b = cuda.shared.array(32, np.float32)
    dyn = cuda.shared.array(0, np.float32)
    t = cuda.threadIdx.x
    a[t] = t
    b[t] = 2.0 * t
    cuda.syncthreads()
    out[t] = a[31 - t] + b[31 - t] + dyn.size


def test_a_blocks_threads_share_one_shared_array_when_they_race():
    # numba-cuda's simulator made a block's shared array on a look and a
    # store without a lock: with a short switch interval two threads could
    # each make one, and a thread read uninitialized memory (the count + scan
    # twins' scan gave garbage totals about one GPU-check run in two).
    # devalloc.sim.shared makes the look and the store one step.
    from numba.cuda.simulator import kernelapi

    from devalloc.sim import shared

    devalloc._load()
    assert kernelapi.FakeCUDAShared.array is shared._array
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        out = np.zeros((4, 128), np.int64)
        for _ in range(3):
            k_rotate[4, 128](out)
            assert (out == (np.arange(128) + 1) % 128).all()
    finally:
        sys.setswitchinterval(old)


def test_a_second_shared_array_on_another_line_is_another_array():
    # per line, as the simulator had it; dynamic shared memory is its own
    devalloc._load()
    out = np.zeros(32, np.float64)
    k_two_shared[1, 32, 0, 64](out)
    assert (out == 3.0 * (31 - np.arange(32)) + 16).all()
