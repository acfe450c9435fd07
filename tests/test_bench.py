"""The benchmark suite (``bench/``), run small, with its exact structural figures.

The measurement functions of ``bench/op_counts.py`` and ``bench/oom.py`` run
here at tiny sizes; what is deterministic on the simulator (one thread, or
one converged warp in "warp" mode, one block at a time) is asserted exactly.
No timings are asserted. ``bench/gpu_throughput.py`` is checked to exit 0
with its message on a machine without a GPU, its kernels to compile for
sm_90 (in a subprocess with the real CUDA target, as in test_compile.py),
and its protocol (alloc and free timed apart, iterations without a reset,
thread and warp variants, ratios to the floor) to run on the simulator with
CUDA events replaced by stubs that hand out made-up times.
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
from devalloc.examples import step_scratch as ss  # noqa: E402

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


@pytest.mark.slow
def test_gpu_throughput_kernels_compile_for_sm90():
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_throughput.py"), "--compile-only", "--cc", "90"],
        capture_output=True, text=True, env=_real_target_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    by_name = {r["kernel"]: r for r in rows}
    timed = {f"{role}_{v}" for role in ("floor", "alloc", "free", "pair", "nrt")
             for v in ("thread", "warp")}
    # step_scratch's kernels: every one its SIGNATURES names (the count + scan
    # twin's path_count and path_fill since issue 30).
    steps = {f"step_scratch.{name}" for name in ss.SIGNATURES}
    assert {"path_scoped", "path_alloc_free", "path_worst_case"} <= set(ss.SIGNATURES)
    assert set(by_name) == timed | {"hold", "touch", "check"} | steps
    assert len(rows) == len(by_name)
    for r in rows:
        assert r["cc"] == [9, 0] and r["ptx_chars"] > 0
        # NRT (CUDA malloc) only where asked for; devalloc's kernels never use it.
        assert r["calls_nrt"] == r["kernel"].startswith("nrt_"), r
    # The floor is one atomic per allocation, the write pass none, the check
    # one (counting bad blocks); alloc and free are devalloc's own.
    for v in ("thread", "warp"):
        assert by_name[f"floor_{v}"]["atomics"] == 1
        assert by_name[f"alloc_{v}"]["atomics"] > 1 and by_name[f"free_{v}"]["atomics"] > 1
    assert (by_name["touch"]["atomics"], by_name["check"]["atomics"]) == (0, 1)


@pytest.mark.slow
def test_retry_cost_walks_every_contended_path():
    # Its waypoints name lines of the device code: a change there must not
    # leave a path unwalkable (bump_lost1 was, after bump's inline first try).
    proc = subprocess.run([sys.executable, str(BENCH / "retry_cost.py")], capture_output=True,
                          text=True, env=_real_target_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout)["paths"]
    assert set(got) == {"alloc_fresh_slab_lost1", "alloc_reuse_lost_bits", "bump_lost1"}
    for name, r in got.items():
        # A lost race costs the loser more than the uncontended path, and
        # less than the uncontended path again (measured: +38, +55, +41).
        assert 0 < r["retry_cost"] < r["uncontended_instructions"], (name, r)


def test_gpu_throughput_heaps_hold_one_iterations_live_set():
    import gpu_throughput as G

    # whole slabs of the class (16 B blocks: 1024 per page; 4 B rounds up to
    # 16 B; 8 KiB: 2 per page), plus one partly filled slab per hint slot
    assert G.heap_pages(10_000, 16) == 10 + L.HINT_SLOTS
    assert G.heap_pages(10_000, 4) == G.heap_pages(10_000, 16)
    assert G.heap_pages(1_000_000, 8192) == 500_000 + L.HINT_SLOTS
    assert G.heap_pages(3, 3 * L.PAGE) == 9  # large blocks: whole pages each
    for n, b in [(100_000, 4), (100_000, 1024), (1000, 8192)]:
        cap = G.heap_capacity(n, b)
        assert L.pages_for_capacity(cap) == G.heap_pages(n, b)
        live = n * L.class_size(L.size_class(b))
        assert live <= cap < 1.05 * live + (L.HINT_SLOTS + 1) * L.PAGE + 2**20


def test_gpu_throughput_cli_defaults_and_quick():
    import gpu_throughput as G

    a = G.parse_args([])
    assert a.iterations == 100 and a.variants == ["thread", "warp"]
    assert a.sizes == [4 << k for k in range(12)] and a.sizes[-1] == 8192
    assert a.threads == [10_000, 100_000, 1_000_000]
    q = G.parse_args(["--quick", "--iterations", "7"])
    assert q.iterations == 7  # given explicitly: wins over --quick
    assert len(q.sizes) < len(a.sizes) and max(q.threads) <= 10_000
    with pytest.raises(SystemExit):
        G.parse_args(["--iterations", "0"])


@simulator_only
def test_gpu_throughput_measures_on_the_simulator_with_events_stubbed(monkeypatch):
    # The simulator's events record no time and it has no nanosleep: stub
    # both. Each stub event notes how many kernels were launched when it was
    # recorded, so every timed interval is checked to hold exactly one kernel
    # and is given that kernel's (made-up) time: the first alloc and free of
    # a row take 4 times longer (a "first touch"), and the figures derived
    # from them are checked exactly.
    import _gpu_kernels as K
    import gpu_throughput as G
    from numba import cuda

    ms = {"floor": 2.0, "alloc": 6.0, "free": 3.0, "pair": 10.0}
    iterations = 3
    launched, timed = [], []

    class Spy:
        def __init__(self, role, kern, n_at):
            self.role, self.kern, self.n_at = role, kern, n_at

        def __getitem__(self, config):
            inner = self.kern[config]

            def launch(*args):
                if args[self.n_at] > 0:  # not the do-nothing launch that compiles
                    launched.append(self.role)
                return inner(*args)
            return launch

    class Event:
        mark = None

        def record(self, stream=0):
            self.mark = len(launched)

        def synchronize(self):
            pass

    def elapsed(start, end):
        (role,) = launched[start.mark:end.mark]  # one kernel per timing
        timed.append(role)
        first = timed.count(role) % iterations == 1
        return ms[role] * (4.0 if first and role in ("alloc", "free") else 1.0)

    monkeypatch.setattr(cuda, "event", lambda timing=True: Event())
    monkeypatch.setattr(cuda, "event_elapsed_time", elapsed, raising=False)
    monkeypatch.setattr(K, "hold", cuda.jit(lambda microseconds: None))
    for v in K.VARIANTS:
        for role, n_at in (("floor", 2), ("alloc", 2), ("free", 1), ("pair", 2)):
            monkeypatch.setitem(K.VARIANTS[v], role, Spy(role, K.VARIANTS[v][role], n_at))
    monkeypatch.setattr(K, "touch", Spy("touch", K.touch, 2))
    monkeypatch.setattr(K, "check", Spy("check", K.check, 2))

    timer = G.EventTimer(cuda.stream(), runs=1, warmup=0)
    configs = [("thread", 64, 4), ("thread", 64, 8192), ("warp", 3, 16), ("warp", 3, 8192)]
    rows = []
    for v, n, b in configs:
        launched.clear()
        rows.append(G.measure_config(timer, v, n, b, iterations))
        # alloc and free timed apart, the write and check untimed between them
        assert launched == (["floor", "alloc", "touch", "check", "free"] * iterations
                            + ["pair"] * iterations)
    for (v, n, b), r in zip(configs, rows):
        # no reset between iterations: the heap's counts span all of them
        assert (r["done_allocs"], r["done_frees"]) == (iterations * n, iterations * n)
        assert r["live_blocks"] == r["failed"] == r["pair_failed"] == r["bad_blocks"] == 0
        assert r["invalid_frees"] == 0
        assert r["floor_bytes"] == iterations * n * b  # one add per allocation
        assert 0 < r["peak"] <= G.heap_pages(n, b) * L.PAGE
        s = G.summarize(r)
        assert s["ms"]["alloc"] == (12.0, 6.0) and s["ms"]["free"] == (6.0, 3.0)
        assert s["ratio"] == {"alloc": (3.0, 6.0), "free": (1.5, 3.0), "pair": (5.0, 5.0)}
        assert s["first"] == {"alloc": 4.0, "free": 4.0}
    table = G.throughput_table(rows)
    assert table.count("\n") == 1 + len(rows) and table.count("| 3.00 (6.00) |") == len(rows)
    assert "4.00 to 4.00 times" in G.first_touch_note(rows)

    monkeypatch.setattr(G, "_free_memory", lambda: 0)  # no room: skipped, and said so
    skipped = G.measure_config(timer, "thread", 64, 4, iterations)
    assert "skipped" in skipped and "times" not in skipped
    assert "skipped: heap of" in G.throughput_table([skipped])


@simulator_only
def test_gpu_throughput_check_counts_overlapping_blocks():
    # The untimed check must be able to fail: two allocations given the same
    # block write different indices into it, so one of them reads back
    # another's.
    import _gpu_kernels as K
    from numba import cuda

    import devalloc

    heap = devalloc.Heap(1 << 20)
    offs = cuda.device_array(2, np.int64)
    K.alloc_thread[1, 32](heap.ctx, 64, 1, offs)
    offs.copy_to_device(np.array([offs.copy_to_host()[0]] * 2))
    bad = cuda.to_device(np.zeros(1, np.int64))
    K.touch[1, 32](heap.ctx, 64, 2, offs)
    K.check[1, 32](heap.ctx, 64, 2, offs, bad)
    assert bad.copy_to_host()[0] >= 1
    heap.close()


def test_profiled_workload_counts_what_it_did():
    r = op_counts.run_workload("16 B", "single", blocks=1, threads=32, heap_pages=64, profile=True)
    p = r["profile"]
    assert p["slabs_taken"] >= 1 and p["pages_scanned"] >= r["allocs"].ops
    assert p["failed_no_page"] == r["failed"] == 0
    table = op_counts.profile_table({("16 B", "single"): [r]})
    assert "cas retries" in table and "slabs taken" in table


def test_exact_fit_prints_both_kernels():
    # bench/exact_fit.py runs both kernels on the exact heap and prints a row
    # each: runs, runs with a NULL (at most the runs), NULLs (at most the
    # 96 calls a run makes). Whether a NULL comes depends on the
    # interleaving (its section in RESULTS.md), so it is not asserted here.
    proc = subprocess.run([sys.executable, str(BENCH / "exact_fit.py"), "--runs", "1",
                           "--switch", "0.05"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:5] for line in proc.stdout.splitlines()
            if line.startswith("| together") or line.startswith("| bump apart")]
    assert len(rows) == 2, proc.stdout
    for _, runs, bad_runs, nulls in rows:
        assert int(runs) == 1 and 0 <= int(bad_runs) <= 1 and 0 <= int(nulls) <= 96, rows


def _first_call_result():
    import first_call as F

    row = {"import_s": 0.5, "numba_nvvm_s": 1.0, "ptxas_s": 0.5, "total_s": 1.5,
           "ptx_lines": 100, "registers": 32, "cache_hits": 0}
    median = {k: dict(row) for k in F.KINDS}
    median["twin"]["total_s"] = 0.5
    median["cached_heap_2"]["cache_hits"] = 1
    ratios = {"warm_over_twin": 3.0, "cold_over_twin": 3.0, "four_over_one": 1.0,
              "four_over_one_cold": 1.0, "cached_second_over_twin": 3.0,
              "cached_second_over_cached_twin": 1.0, "new_kernel_over_twin": 3.0,
              "launch_new_kernel_over_twin": 3.0, "launch_warm_over_twin": 3.5,
              "launch_cold_over_twin": 3.0, "launch_four_over_one": 1.0,
              "four_over_one_new": 1.1, "launch_four_over_one_new": 1.1,
              "twin_four_over_one": 1.1, "launch_twin_four_over_one": 1.1}
    met = {k: ratios[k] <= v for k, v in F.TARGETS.items()}
    return {"runs": [], "median": median, "ratios": ratios, "met": met}


def test_first_call_section_names_each_target_and_whether_it_is_met():
    import first_call as F

    text = F.section(_first_call_result(), 3)
    assert text.startswith("## First call (compile time, fresh processes)")
    assert "bench/first_call.py --runs 3 --write" in text
    assert "warm_over_twin 3.00 (target <= 3.0: met)" in text
    assert "four_over_one 1.00 (target <= 1.2: met)" in text
    # the launch build's targets too, each with its verdict
    assert "launch_warm_over_twin 3.50 (target <= 3.0: MISSED)" in text
    assert "launch_four_over_one 1.00 (target <= 1.2: met)" in text
    assert "| launch build: `devalloc.array`, second process | 1.00 | in total | 1.50 | 3.0 |" in text
    # every kind is a row, with its ratio to the twin
    assert text.count("\n| ") == len(F.KINDS) + 1
    assert "| `devalloc.array`, second process | 1.00 | 0.50 | 1.50 | 3.0 | 100 | 32 |" in text


def test_first_call_breakdown_section_adds_up():
    import first_call as F

    def row(kind, passes, nvvm, total):
        return {"kind": kind, "numba_nvvm_s": total, "nvvm_s": nvvm, "ptxas_s": 0.3,
                "passes_s": passes, "in_passes_s": sum(passes.values()), "functions": 9,
                "compilations": 12, "devalloc_compilations": 10, "devalloc_functions": 8}

    text = F.breakdown_section([row("cold", {"a": 2.0, "b": 1.0}, 0.7, 4.0),
                                row("warm", {"a": 0.1}, 0.7, 1.0)])
    assert "| a | 2.00 | 0.10 |" in text and "| b | 1.00 | 0.00 |" in text
    # outside the passes: total - passes - NVVM
    assert "| outside the passes (Numba's dispatch, libraries, NVVM input) | 0.30 | 0.20 |" in text
    assert "| **Numba + NVVM** | **4.00** | **1.00** |" in text


@pytest.mark.slow
def test_first_call_runs_every_kind_in_fresh_processes():
    # One round for real (no time asserted, only what is structural): the
    # second process makes the same code from the bodies it reads (the same
    # registers and PTX: it reads the first one's, devalloc.device.kernelcache),
    # a new kernel compiles its own, and the cache=True kernel is loaded, not
    # compiled.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, str(BENCH / "first_call.py"), "--runs", "1",
                           "--json"], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    m = result["median"]
    assert set(m) == set(__import__("first_call").KINDS)
    assert m["heap_warm"]["registers"] == m["heap_cold"]["registers"]
    assert m["heap_warm"]["ptx_lines"] == m["heap_cold"]["ptx_lines"]
    assert m["heap4_new"]["registers"] == m["heap4_cold"]["registers"]
    assert m["heap_new"]["registers"] == m["heap_cold"]["registers"]
    assert m["cached_heap_2"]["cache_hits"] == 1 and m["cached_heap"]["cache_hits"] == 0
    assert set(result["met"]) == set(__import__("first_call").TARGETS)


def test_launch_check_section_says_what_the_check_adds():
    import launch_check as LC

    rows = {"metadata type, no lease (before)": 5000.0,
            "metadata type, lease checked (now)": 5050.0,
            "simulator: check_launch_args, 3 arguments": 250.0,
            "numba typeof of a ctx (every launch, for comparison)": 25000.0}
    text = LC.section(rows)
    assert "it adds +50 ns" in text and "costs 25.0 us" in text
    assert text.count("\n| ") == len(rows) + 1
