"""pytest-benchmark: the host side of ``Heap`` and small simulator kernel runs.

Run: ``.venv/bin/python -m pytest bench/ --benchmark-only``. To see
regressions, save a baseline with ``--benchmark-autosave`` and compare a
later run with ``--benchmark-compare``. On the simulator (the default; see
``bench/conftest.py``) the "device" is host memory and kernels are Python
threads, so these time devalloc's host code and the simulator, not a GPU;
``DEVALLOC_TEST_GPU=1`` runs them on a GPU (the warp-mode runs are then
skipped: they exist only on the simulator).
"""

import numpy as np
import pytest
from numba import config, cuda

import devalloc
from devalloc import layout as L
from op_counts import alloc_phase, free_phase

CAPACITIES = [1 << 20, 64 << 20]
CAPACITY_IDS = ["1MiB", "64MiB"]


@pytest.fixture
def populated():
    """A 4 MiB heap holding 256 blocks of mixed sizes (16-4096 B)."""
    heap = devalloc.Heap(4 << 20)
    sizes = np.random.default_rng(3).integers(16, 4097, 256)
    offs = cuda.to_device(np.full(256, devalloc.NULL, np.int64))
    alloc_phase[4, 64](heap.ctx, cuda.to_device(sizes), offs)
    assert heap.usage().live_blocks == 256
    return heap


@pytest.mark.parametrize("capacity", CAPACITIES, ids=CAPACITY_IDS)
def test_heap_creation(benchmark, capacity):
    heap = benchmark(devalloc.Heap, capacity)
    assert heap.capacity == L.pages_for_capacity(capacity) * L.PAGE


@pytest.mark.parametrize("capacity", CAPACITIES, ids=CAPACITY_IDS)
def test_reset(benchmark, capacity):
    heap = devalloc.Heap(capacity)

    def reset():
        heap.reset()
        cuda.synchronize()

    benchmark(reset)
    assert heap.usage().allocs == 0


def test_usage(benchmark, populated):
    u = benchmark(populated.usage)
    assert u.live_blocks == 256


def test_live(benchmark, populated):
    blocks = benchmark(populated.live)
    assert len(blocks) == 256


MODES = ["single", "warp"] if config.ENABLE_CUDASIM else ["gpu"]


@pytest.mark.parametrize("mode", MODES)
def test_kernel_alloc_free(benchmark, mode):
    """Two blocks of 32 threads allocate 16 B each, then free them (two launches)."""
    heap = devalloc.Heap(L.capacity_for_pages(16))
    sizes = cuda.to_device(np.full(64, 16, np.int64))
    every = cuda.to_device(np.ones(64, np.int64))
    offs = cuda.to_device(np.full(64, devalloc.NULL, np.int64))

    def run():
        alloc_phase[2, 32](heap.ctx, sizes, offs)
        free_phase[2, 32](heap.ctx, every, offs)
        cuda.synchronize()

    if mode == "gpu":
        benchmark.pedantic(run, setup=heap.reset, rounds=20, warmup_rounds=1)
    else:
        from devalloc.sim import warp

        with warp.simulate(mode):
            benchmark.pedantic(run, setup=heap.reset, rounds=10, warmup_rounds=1)
    u = heap.usage()
    assert (u.allocs, u.frees, u.failed, u.reserved) == (64, 64, 0, 0)
