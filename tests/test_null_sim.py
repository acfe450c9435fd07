"""NULL means out of memory (issue 25): racing threads never get NULL while there is room.

The churn of :mod:`devalloc.testing.churn` (each thread keeps up to 4 live
blocks, freeing a slot's old block before allocating its new one) on the
simulator with a 1 µs switch interval, so that threads switch inside
``alloc`` and ``free``, several seeds each. Before issue 25, bounded retry
budgets ran out under such races and ``alloc`` returned NULL at 8 % use.
Every test checks the heap's peak use, so that it runs in the regime it
claims, and the profile: ``failed_residual`` (NULLs that no search proved)
is 0 everywhere, and NULLs happen only where the heap was within a page per
thread of full (docs/correctness.md, "Progress").
"""

import sys

import numpy as np
import pytest
from numba import config

import devalloc
from devalloc import layout as L
from devalloc.sim import warp
from devalloc.testing import churn as C

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator interleaving")

MIB = 1 << 20


@pytest.fixture
def racing(fine_interleaving):
    """Switch simulator threads every microsecond (fine_interleaving restores the interval)."""
    sys.setswitchinterval(1e-6)


def run_churn(sizes, capacity=8 * MIB, fill=0.0, block=None, debug=False, mode="single"):
    """Fill ``capacity`` to ``fill``, churn ``sizes``; return (nulls, usage, heap)."""
    heap = devalloc.Heap(capacity, profile=True, debug=debug)
    C.fill_pages(heap, int(fill * (heap.capacity // L.PAGE)))
    with warp.simulate(mode):
        nulls, bad = C.churn(heap, sizes, block=block or sizes.shape[0])
    assert bad.sum() == 0, "a block's bytes changed while its owner held it"
    u = heap.usage()
    assert u.live_blocks == int(fill * (heap.capacity // L.PAGE)), "the churn leaked"
    assert u.failed == nulls.sum() == u.profile["failed_no_page"]
    assert u.profile["failed_residual"] == 0, u.profile
    if debug:
        assert heap.check() is None  # no misuse recorded, every guard intact
    return nulls, u, heap


#: How far a run's peak may pass the use its test was sized for: the peak
#: depends on the interleaving (seen: one page over half of 512 on a loaded
#: 2-core CI machine). The claim stays "no NULL while most of the heap is free".
PEAK_SLACK = 0.125


def assert_no_nulls(nulls, u, heap, most_use):
    # The regime claimed (the test sized for ``most_use``), with slack for the interleaving.
    assert u.peak <= (most_use + PEAK_SLACK) * heap.capacity, (u.peak, heap.capacity)
    assert nulls.sum() == 0 and u.profile["failed_full"] == 0, (nulls.sum(), u.profile)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mixed_small_churn_of_many_threads_gets_no_null(seed):
    # 128 threads, 1..3000 B, over a quarter filled: peak at most half.
    nulls, u, heap = run_churn(C.sizes_table(seed, 128, 30), fill=0.25)
    assert_no_nulls(nulls, u, heap, 0.5)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("seed", [4, 5])
def test_churn_with_large_blocks_mixed_in_gets_no_null(seed):
    # One allocation in ten is a large block of 2..3 pages.
    sizes = C.sizes_table(seed, 128, 20, large=0.1, large_max=3 * L.PAGE)
    nulls, u, heap = run_churn(sizes, fill=0.1)
    assert_no_nulls(nulls, u, heap, 0.5)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("seed", [6, 7])
def test_warp_converged_groups_get_no_null(seed):
    # Warp mode: the lanes of a warp ask for one size at each step, so each
    # warp's allocation is one group of 32 lanes served by its leader.
    rows = C.sizes_table(seed, 4, 20)
    sizes = np.repeat(rows, 32, axis=0)  # warp w: row w for all its lanes
    nulls, u, heap = run_churn(sizes, fill=0.25, mode="warp")
    assert_no_nulls(nulls, u, heap, 0.5)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("seed", [8, 9])
def test_warp_divergent_groups_get_no_null(seed):
    # Warp mode, lanes of a warp asking for 4 different sizes at each step
    # (4 groups per warp, racing each other and the other warp's groups).
    rows = C.sizes_table(seed, 16, 20)
    sizes = np.stack([rows[(t // 32) * 4 + t % 4] for t in range(128)])
    nulls, u, heap = run_churn(sizes, fill=0.25, mode="warp")
    assert_no_nulls(nulls, u, heap, 0.5)


@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("seed", [10, 11])
def test_heap_filled_to_90_percent_churns_without_null_while_a_page_per_thread_is_left(seed):
    threads = 64
    sizes = C.sizes_table(seed, threads, 30, high=1000)
    nulls, u, heap = run_churn(sizes, capacity=16 * MIB, fill=0.9)
    room = (heap.capacity - u.peak) // L.PAGE
    assert room >= threads, f"the churn left {room} pages: not the regime this test is about"
    assert nulls.sum() == 0 and u.profile["failed_full"] == 0, u.profile


@pytest.mark.usefixtures("racing")
def test_debug_heap_follows_the_same_rule():
    nulls, u, heap = run_churn(C.sizes_table(12, 64, 30), fill=0.25, debug=True)
    assert_no_nulls(nulls, u, heap, 0.5)


@pytest.mark.usefixtures("racing")
def test_a_full_heap_nulls_are_proved_full():
    # 99 % filled: NULLs are expected, and every one is failed_full.
    nulls, u, heap = run_churn(C.sizes_table(13, 64, 20), fill=0.99)
    assert nulls.sum() > 0
    assert u.profile["failed_full"] == nulls.sum() and u.profile["failed_residual"] == 0


@pytest.mark.usefixtures("racing")
def test_racing_bumps_get_no_null_at_half_use():
    heap = devalloc.Heap(16 * MIB, profile=True)
    sizes = C.sizes_table(14, 128, 15)  # ~2.9 MB of 16 MiB, with chunk slack
    nulls = C.bumps(heap, sizes, block=128)
    u = heap.usage()
    assert nulls.sum() == 0 and u.failed == 0, u.profile
    assert u.profile["failed_residual"] == 0 and u.reserved <= heap.capacity // 2


@pytest.mark.usefixtures("racing")
def test_racing_scoped_scratch_gets_no_null():
    heap = devalloc.Heap(8 * MIB, profile=True)
    nulls = C.scopes(heap, C.sizes_table(15, 64, 12), block=64)
    u = heap.usage()
    assert nulls.sum() == 0 and u.failed == 0 and u.profile["failed_residual"] == 0, u.profile
    assert u.live_blocks == 0


@pytest.mark.slow
@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("seed", range(20, 25))
def test_issue_25_churn_in_full_gets_no_null(seed):
    # The issue's own figures: 128 threads, 60 steps, 8 MiB, no fill (it
    # failed at 8 % use, in every one of five runs).
    nulls, u, heap = run_churn(C.sizes_table(seed, 128, 60))
    assert_no_nulls(nulls, u, heap, 0.5)


@pytest.mark.slow
@pytest.mark.usefixtures("racing")
@pytest.mark.parametrize("seed", range(30, 33))
def test_half_full_heap_with_large_blocks_and_many_threads_gets_no_null(seed):
    sizes = C.sizes_table(seed, 128, 40, large=0.05, large_max=3 * L.PAGE)
    nulls, u, heap = run_churn(sizes, fill=0.2)
    assert_no_nulls(nulls, u, heap, 0.5)


def test_null_rate_bench_prints_json_with_its_counts():
    import json
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "null_rate.py"
    proc = subprocess.run([sys.executable, str(script), "--threads", "16", "--steps", "6",
                           "--seeds", "1", "--uses", "0.25", "0.99", "1.0", "--label", "t"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    quarter, most, full = (out["by_use"][u] for u in ("0.25", "0.99", "1.0"))
    assert out["label"] == "t" and quarter["allocs"] == most["allocs"] == full["allocs"] == 96
    # A quarter used: room for every request. Every page taken: no request
    # can be served, whatever the interleaving. At 99 % some usually fail
    # (5 free pages, many classes), but how many depends on the interleaving
    # (none in a rare one): only that each NULL was proved is asserted there.
    assert quarter["nulls"] == 0 and full["nulls"] == 96
    for r in (most, full):
        assert r["failed_full"] == r["nulls"] == r["failed_no_page"]
    assert all(r["separated"] and r["bad"] == 0 for r in out["runs"])
