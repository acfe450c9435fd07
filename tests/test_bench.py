"""The benchmark suite (``bench/``), run small, with its exact structural figures.

The measurement functions of ``bench/op_counts.py`` and ``bench/oom.py`` run
here at tiny sizes; what is deterministic on the simulator (one thread, or
one converged warp in "warp" mode, one block at a time) is asserted exactly.
No timings are asserted. ``bench/gpu_throughput.py`` is checked to exit 0
with its message on a machine without a GPU, and its kernels to compile for
sm_90 (in a subprocess with the real CUDA target, as in test_compile.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import config

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.append(str(BENCH))  # after tests/, whose conftest must win

import _results  # noqa: E402
import oom  # noqa: E402
import op_counts  # noqa: E402
from devalloc import layout as L  # noqa: E402

simulator_only = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="counts simulated atomics")

#: Exact atomics of the small-block path with no other thread running, by
#: kind (devalloc/device.py's docstring). The first alloc also takes a page
#: from the free-page index: its cas, the room index's mark (or), the page
#: out of the free-page index (and), pages-used add, peak max, and the hint
#: moved to it (exch); a heap of up to 32 pages has no counts above its
#: index words. A slab with never-used blocks serves an allocation with its
#: one state-word cas; reusing a freed block adds the bitmap and. A free
#: sets its bit and gives its slot back.
UNCONTENDED = {
    "cold": {"cas": 1, "or_": 1, "and_": 1, "add": 1, "max": 1, "exch": 1},
    "alloc": {"cas": 1},
    "reuse": {"cas": 1, "and_": 1},
    "free": {"or_": 1, "add": 1},
}


def _per_op(tally):
    return {k: v / tally.ops for k, v in tally.by_kind.items()}


@simulator_only
def test_uncontended_small_path_costs_exact_atomics():
    u = op_counts.uncontended(nbytes=16, count=4)
    assert u["cold"].by_kind == UNCONTENDED["cold"]
    assert _per_op(u["alloc"]) == UNCONTENDED["alloc"]  # issue 3: one atomic
    assert _per_op(u["free"]) == UNCONTENDED["free"]
    assert u["cold"].cas_failed == u["alloc"].cas_failed == 0  # alone: no retries
    assert u["served"] == 4
    usage = u["usage"]  # the warm-up block is still live, in its slab
    assert (usage.allocs, usage.frees, usage.live_blocks, usage.reserved) == (5, 4, 1, L.PAGE)


@simulator_only
@pytest.mark.parametrize("nbytes", [8192, 4096, 512])
def test_uncontended_reuse_of_freed_blocks_costs_exact_atomics(nbytes):
    r = op_counts.uncontended_reuse(nbytes)
    cap = L.class_blocks(L.size_class(nbytes))
    assert r["served"] == cap - 1
    assert _per_op(r["alloc"]) == UNCONTENDED["reuse"]
    assert r["alloc"].cas_failed == 0
    u = r["usage"]
    assert (u.allocs, u.frees, u.live_blocks, u.reserved) == (2 * cap - 1, cap - 1, cap, L.PAGE)


@simulator_only
def test_a_converged_warp_bumping_one_size_costs_one_cas():
    w = op_counts.converged_warp("warp", "bump", nbytes=16)
    assert w["alloc"].by_kind == {"cas": 1}
    offs = np.sort(w["offsets"])
    assert (np.diff(offs) == 16).all()


@simulator_only
def test_a_converged_warp_allocating_one_class_costs_one_cas():
    w = op_counts.converged_warp("warp", "alloc", nbytes=16)
    offs = np.sort(w["offsets"])
    assert (np.diff(offs) == 16).all() and offs[0] == 16  # after the warm block
    assert w["alloc"].by_kind == {"cas": 1}  # issue 3: one atomic per warp
    assert w["alloc"].cas_failed == 0
    # The 32 blocks (slots 1..32) lie in two bitmap words: one group each,
    # one or and one add per group.
    assert w["free"].by_kind == {"or_": 2, "add": 2}
    u = w["usage"]
    assert (u.allocs, u.frees, u.live_blocks, u.reserved) == (33, 32, 1, L.PAGE)


@simulator_only
def test_lanes_alone_pay_one_cas_each():
    w = op_counts.converged_warp("single", "alloc", nbytes=16)
    offs = w["offsets"]
    assert len(set(offs.tolist())) == 32 and (offs >= 0).all()
    assert (offs // L.PAGE == offs[0] // L.PAGE).all()  # all from the warm slab
    # Lanes race on the one state word: at least one cas each, nothing else.
    assert set(w["alloc"].by_kind) == {"cas"} and w["alloc"].by_kind["cas"] >= 32
    # Each lane wins exactly one cas (its block); every other cas lost a race.
    assert w["alloc"].by_kind["cas"] - w["alloc"].cas_failed == 32
    assert w["free"].by_kind == {"or_": 32, "add": 32}
    u = w["usage"]
    assert (u.allocs, u.frees, u.live_blocks, u.reserved) == (33, 32, 1, L.PAGE)


@simulator_only
@pytest.mark.parametrize("mode", op_counts.MODES)
@pytest.mark.parametrize("workload", op_counts.WORKLOADS)
def test_workload_counts_are_consistent(workload, mode):
    r = op_counts.run_workload(workload, mode, blocks=1, threads=32, heap_pages=64)
    expect = 8 if (workload == "25 %" and mode == "single") else 32
    if workload != "churn":
        assert r["allocs"].ops == r["frees"].ops == expect
        assert r["allocs"].warps == 1
        assert r["usage_allocs"] == expect
    assert r["failed"] == r["usage_failed"] == 0
    assert r["allocs"].ops > 0 and r["frees"].ops > 0
    assert r["allocs"].total > 0 and r["frees"].total > 0
    assert r["pages_held"] >= r["min_pages"] >= 1
    assert r["pages_after"] == 0  # every slab retired once its blocks are freed


@simulator_only
@pytest.mark.parametrize("nbytes,npages", [(16, 1), (512, 4), (8192, 4), (65536, 16)])
def test_fill_serves_every_slot_of_the_heap(nbytes, npages):
    f = oom.fill_heap(nbytes, npages, "warp", shape=(1, 32))
    per_page = L.class_blocks(L.size_class(nbytes)) if nbytes <= L.MAX_SMALL else 1 / 4
    assert f["served"] == f["slots"] == npages * per_page
    assert f["served_bytes"] == f["capacity"] == npages * L.PAGE
    assert f["pct_capacity"] == 100.0
    assert f["pct_requested"] == 100.0 * npages * L.PAGE / L.capacity_for_pages(npages)
    assert f["usage"].live_blocks == f["served"]


@pytest.mark.parametrize("nbytes", [16, 512, 8192])
def test_a_1gib_heap_can_serve_at_least_97_percent(nbytes):
    arena, slab, usable = oom.arithmetic(nbytes)
    assert arena == L.pages_for_capacity(1 << 30) * L.PAGE / (1 << 30)
    assert slab == 1.0  # these sizes fill a slab exactly
    assert usable >= 0.97  # issue 3's target, metadata included


@simulator_only
def test_fragmentation_figures_are_bounded():
    f = oom.fragmentation(16, 4096, False, seed=1, rounds=3, shape=(1, 16), npages=32)
    assert f["failed"] == 0 and f["live_blocks"] > 0
    assert f["span"] >= f["in_use"] >= f["live_bytes"]  # live blocks are disjoint
    assert f["reserved"] >= f["in_use"]


def test_results_sections_are_replaced_and_hand_written_ones_kept(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# r\n\n## A\n\nold\n\n## Notes (by hand)\n\nmine\n\n## Targets\n\nt\n")
    _results.write_section("## A\n\nnew", path)
    _results.write_section("## B\n\nadded", path)
    assert path.read_text() == (
        "# r\n\n## A\n\nnew\n\n## Notes (by hand)\n\nmine\n\n## B\n\nadded\n\n## Targets\n\nt\n")


def _real_target_env():
    return {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}


def test_gpu_throughput_says_it_needs_a_gpu_and_exits_0():
    from devalloc import target

    if target.gpu_available():
        pytest.skip("a GPU is present: the script would measure it")
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_throughput.py"), "--no-write"],
                          capture_output=True, text=True, env=_real_target_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "needs a CUDA GPU" in proc.stdout


def test_gpu_throughput_kernels_compile_for_sm90():
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_throughput.py"), "--compile-only", "--cc", "90"],
        capture_output=True, text=True, env=_real_target_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    names = {r["kernel"] for r in rows}
    assert {"hold", "bump_floor", "alloc_fixed", "alloc_sized", "pair_fixed", "pair_sized",
            "bump_fixed", "nrt_fixed", "nrt_sized", "step_scratch.path_scoped",
            "step_scratch.path_alloc_free", "step_scratch.path_worst_case"} == names
    for r in rows:
        assert r["cc"] == [9, 0] and r["ptx_chars"] > 0
        # NRT (CUDA malloc) only where asked for; devalloc's kernels never use it.
        assert r["calls_nrt"] == r["kernel"].startswith("nrt_"), r


@simulator_only
def test_gpu_throughput_measures_on_the_simulator_with_events_stubbed(monkeypatch):
    # The simulator's events record no time and it has no nanosleep: stub
    # both, so the measuring and reporting code runs (not its timings).
    import _gpu_kernels as K
    import gpu_throughput as G
    from numba import cuda

    fake_event = cuda.event
    monkeypatch.setattr(cuda, "event", lambda timing=True: fake_event())
    monkeypatch.setattr(cuda, "event_elapsed_time", lambda start, end: 1.0, raising=False)
    monkeypatch.setattr(K, "hold", cuda.jit(lambda microseconds: None))
    rows = G.measure_devalloc(G.EventTimer(cuda.stream(), runs=1, warmup=0), threads=[32])
    assert [r["workload"] for r in rows] == [w for w, _ in G.WORKLOADS]
    for r in rows:
        assert (r["alloc_ms"], r["pair_ms"], r["floor_ms"]) == (1.0, 1.0, 1.0)
        assert r["alloc_failed"] == r["pair_failed"] == 0
    assert G.throughput_table(rows).count("\n") == 1 + len(rows)


def test_profiled_workload_counts_what_it_did():
    r = op_counts.run_workload("16 B", "single", blocks=1, threads=32, heap_pages=64, profile=True)
    p = r["profile"]
    assert p["slabs_taken"] >= 1 and p["pages_scanned"] >= r["allocs"].ops
    assert p["failed_no_page"] == r["failed"] == 0
    table = op_counts.profile_table({("16 B", "single"): [r]})
    assert "cas retries" in table and "slabs taken" in table
