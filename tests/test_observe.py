"""Observed heaps: profile counters, the allocation trace, CSV and replay (issue 18)."""

import numpy as np
import pytest
from numba import cuda

import devalloc
from gpu_marks import COUNTS_ATOMICS
from devalloc import layout as L
from devalloc.host import observed

NULL = devalloc.NULL


@cuda.jit
def k_mixed(ctx, sizes, out):
    # Even threads free what they got; odd ones keep it.
    i = cuda.grid(1)
    if i >= sizes.shape[0]:
        return
    off = devalloc.alloc(ctx, sizes[i])
    out[i] = off
    if i % 2 == 0:
        devalloc.free(ctx, off)


@cuda.jit
def k_everything(ctx, n, out):
    i = cuda.grid(1)
    b = devalloc.bump(ctx, n)
    s = devalloc.SCOPE_NONE
    m = devalloc.mark(ctx, s)
    s = m
    off, s = devalloc.scoped(ctx, s, n)
    s = devalloc.release(ctx, s, m)
    devalloc.free(ctx, b)  # a bump offset: an invalid free
    out[i] = off


SIZES = np.array([16, 0, 5000, 1 << 30, 64, 64, 20000, 8, -3, 100], np.int64)


def run_mixed(heap, sizes=SIZES):
    out = cuda.to_device(np.zeros(len(sizes), np.int64))
    k_mixed[1, len(sizes)](heap.ctx, cuda.to_device(sizes), out)
    return out.copy_to_host()


def test_profile_counts_failures_by_cause():
    heap = devalloc.Heap(1 << 20, profile=True)
    run_mixed(heap)
    u = heap.usage()
    p = u.profile
    assert set(p) == set(L.PROF_NAMES + L.PROF_DERIVED)
    # -3 and 1 << 30 fail; 0 is an empty request, not a failure
    assert (p["failed_nonpositive"], p["failed_too_big"], p["failed_no_page"]) == (1, 1, 0)
    assert (p["failed_full"], p["failed_residual"]) == (0, 0)
    assert u.failed == 2 == p["failed_nonpositive"] + p["failed_too_big"] + p["failed_no_page"]
    assert u.empty_requests == 1
    assert "failed nonpositive" in str(u)
    heap.reset()
    assert heap.usage().profile["failed_too_big"] == 0


def test_a_full_heap_fails_for_want_of_a_page():
    heap = devalloc.Heap(L.capacity_for_pages(2), profile=True)
    run_mixed(heap, np.full(4, 20000, np.int64))  # two pages each; room for one
    p = heap.usage().profile
    assert p["failed_no_page"] >= 1 and p["failed_too_big"] == 0
    # Each of those NULLs was proved by a search that lost no race (issue 25).
    assert p["failed_full"] == p["failed_no_page"] and p["failed_residual"] == 0


def test_normal_heaps_report_no_profile():
    heap = devalloc.Heap(1 << 20)
    run_mixed(heap)
    assert heap.usage().profile is None
    assert "profile" not in str(heap.usage())
    with pytest.raises(ValueError, match="trace=N"):
        heap.trace()


def test_trace_records_every_event_in_order():
    heap = devalloc.Heap(1 << 20, trace=100)
    out = run_mixed(heap)
    t = heap.trace()
    assert t.dropped == 0 and list(t["seq"]) == list(range(len(t)))
    allocs = t[t["op"] == "alloc"]
    assert len(allocs) == len(SIZES)
    assert sorted(allocs["thread"]) == list(range(len(SIZES)))
    for e in allocs:
        assert e["nbytes"] == SIZES[e["thread"]] and e["offset"] == out[e["thread"]]
    frees = t[t["op"] == "free"]
    assert sorted(frees["thread"]) == list(range(0, len(SIZES), 2))
    # A thread's free follows its alloc.
    for e in frees:
        a = allocs[allocs["thread"] == e["thread"]][0]
        assert a["seq"] < e["seq"] and a["offset"] == e["offset"]
    assert heap.usage().profile is None  # trace only


def test_trace_drops_past_its_room_and_says_so():
    heap = devalloc.Heap(1 << 20, trace=4)
    run_mixed(heap)
    t = heap.trace()
    assert len(t) == 4 and t.dropped == len(SIZES) + len(SIZES) // 2 - 4
    assert t[1:].dropped == t.dropped
    heap.reset()
    assert len(heap.trace()) == 0


def test_trace_of_bump_scopes_and_invalid_frees():
    heap = devalloc.Heap(1 << 20, trace=64, profile=True)
    out = cuda.to_device(np.zeros(4, np.int64))
    k_everything[1, 4](heap.ctx, 48, out)
    t = heap.trace()
    ops = list(t["op"])
    for op, n in (("bump", 4), ("mark", 4), ("scoped", 4), ("release", 4), ("free_invalid", 4)):
        assert ops.count(op) == n, ops
    # scoped's chunks are not traced as allocs: replaying the trace would
    # take them twice.
    assert "alloc" not in ops
    for th in range(4):
        mine = t[t["thread"] == th]
        assert list(mine["op"]) == ["bump", "mark", "scoped", "release", "free_invalid"]
        assert mine[3]["offset"] == mine[1]["offset"]  # release names its mark
    u = heap.usage()
    assert u.invalid_frees == 4 and u.bump_allocs == 4


def test_debug_and_observed_together():
    heap = devalloc.Heap(1 << 20, debug=True, profile=True, trace=32)
    run_mixed(heap)
    heap.check()
    assert len(heap.trace()) == len(SIZES) + len(SIZES) // 2
    assert heap.usage().profile["failed_too_big"] == 1
    assert len(heap.live()) == heap.usage().live_blocks


def test_csv_round_trip_in_rmm_column_order(tmp_path):
    heap = devalloc.Heap(1 << 20, trace=100)
    run_mixed(heap)
    t = heap.trace()
    path = observed.write_csv(t, tmp_path / "trace.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream"
    assert any(",allocate failure,0x0," in line for line in lines)
    back = observed.read_csv(path)
    assert (back == np.asarray(t)).all()


def test_read_csv_refuses_what_is_not_a_trace(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a trace log"):
        observed.read_csv(p)
    p.write_text("Thread,Time,Action,Pointer,Size,Stream\n0,0,teleport,0x0,1,0\n")
    with pytest.raises(ValueError, match="unknown action 'teleport'"):
        observed.read_csv(p)


def test_replay_agrees_with_the_run(tmp_path):
    cap = 1 << 20
    heap = devalloc.Heap(cap, trace=200)
    run_mixed(heap)
    u = heap.usage()
    path = observed.write_csv(heap.trace(), tmp_path / "t.csv")
    for events in (heap.trace(), str(path)):
        r = devalloc.replay(events, cap)
        assert (r.allocs, r.frees, r.failed, r.invalid_frees, r.live_blocks, r.in_use) == (
            u.allocs, u.frees, u.failed, u.invalid_frees, u.live_blocks, u.in_use)


def test_replay_of_scopes_bumps_and_invalid_frees():
    cap = 1 << 20
    heap = devalloc.Heap(cap, trace=64)
    k_everything[1, 4](heap.ctx, 48, cuda.to_device(np.zeros(4, np.int64)))
    u = heap.usage()
    r = devalloc.replay(heap.trace(), cap, debug=True)
    assert (r.invalid_frees, r.bump_allocs, r.scope_misuse, r.failed, r.scoped_chunks) == (
        u.invalid_frees, u.bump_allocs, u.scope_misuse, u.failed, u.scoped_chunks) == (4, 4, 0, 0, 0)


def test_replay_on_a_smaller_heap_sizes_it():
    heap = devalloc.Heap(1 << 20, trace=100)
    run_mixed(heap, np.full(6, 20000, np.int64))
    assert heap.usage().failed == 0
    r = devalloc.replay(heap.trace(), L.capacity_for_pages(4))
    assert r.failed > 0  # the smaller heap would not have served it


def test_replay_warns_about_dropped_events():
    heap = devalloc.Heap(1 << 20, trace=3)
    run_mixed(heap)
    with pytest.warns(UserWarning, match="dropped"):
        devalloc.replay(heap.trace(), 1 << 20)


@pytest.mark.parametrize("kw, err, match", [
    ({"profile": "yes"}, TypeError, "profile= must be True or False"),
    ({"trace": 1.5}, TypeError, "trace= must be a number of events"),
    ({"trace": True}, TypeError, "trace= must be a number of events"),
    ({"trace": -1}, ValueError, "between 0 and"),
])
def test_bad_options_are_refused(kw, err, match):
    with pytest.raises(err, match=match):
        devalloc.Heap(1 << 20, **kw)


def test_resize_keeps_the_heap_observed():
    heap = devalloc.Heap(1 << 20, profile=True, trace=8)
    heap.resize(2 << 20)
    run_mixed(heap)
    assert heap.usage().profile["failed_too_big"] == 1 and len(heap.trace()) == 8


# ---------------------------------------------------------------- the CLI

def _cli(args, cwd):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "devalloc", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=300)


def test_demo_profile_prints_and_reports_the_counters(tmp_path):
    import json

    proc = _cli(["demo", "--profile", "--json", "--threads", "32"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    prof = json.loads(proc.stdout)["usage"]["profile"]
    assert set(prof) == set(L.PROF_NAMES + L.PROF_DERIVED)
    proc = _cli(["demo", "--profile", "--threads", "32"], tmp_path)
    assert proc.returncode == 0 and "failed no page" in proc.stdout
    proc = _cli(["demo", "--profile", "--workers", "2"], tmp_path)
    assert proc.returncode == 2 and "--profile works on one process" in proc.stderr


def test_replay_command(tmp_path):
    import json

    heap = devalloc.Heap(1 << 20, trace=100)
    run_mixed(heap)
    u = heap.usage()
    path = observed.write_csv(heap.trace(), tmp_path / "t.csv")
    proc = _cli(["replay", str(path), "--capacity", str(1 << 20), "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["events"] == len(heap.trace())
    assert (got["usage"]["allocs"], got["usage"]["frees"], got["usage"]["failed"]) == (
        u.allocs, u.frees, u.failed)
    proc = _cli(["replay", str(path), "--capacity", str(1 << 20)], tmp_path)
    assert proc.returncode == 0 and "heap usage after replaying" in proc.stdout
    for args, msg in ((["replay", str(tmp_path / "none.csv"), "--capacity", "1048576"],
                       "No such file"),
                      (["replay", str(path), "--capacity", "1000"], "at least")):
        proc = _cli(args, tmp_path)
        assert proc.returncode == 2 and msg in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------- inner counters

@cuda.jit
def k_alloc_keep(ctx, n, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = devalloc.alloc(ctx, n)


@cuda.jit
def k_free_all(ctx, offs):
    i = cuda.grid(1)
    if i < offs.shape[0]:
        devalloc.free(ctx, offs[i])


def test_inner_counters_follow_slabs_pages_and_hints():
    heap = devalloc.Heap(L.capacity_for_pages(16), profile=True)
    offs = cuda.to_device(np.zeros(3, np.int64))
    k_alloc_keep[1, 1](heap.ctx, 8192, offs[:1])
    p = heap.usage().profile
    # No hint yet: the free-page index names page 0, which becomes the hint.
    assert (p["slabs_taken"], p["pages_scanned"], p["hint_moves"]) == (1, 1, 1)
    k_alloc_keep[1, 1](heap.ctx, 8192, offs[1:2])  # the slab's second block
    # Full: the hint's page, its stale room mark (the same page), then the
    # free-page index's page 1; the hint moves there.
    k_alloc_keep[1, 1](heap.ctx, 8192, offs[2:])
    p = heap.usage().profile
    assert p["slabs_taken"] == 2 and p["hint_moves"] == 2 and p["pages_scanned"] == 5
    k_free_all[1, 3](heap.ctx, offs)
    p = heap.usage().profile
    assert p["slabs_retired"] == 2 and heap.usage().reserved == 0
    big = cuda.to_device(np.zeros(1, np.int64))
    k_alloc_keep[1, 1](heap.ctx, 3 * L.PAGE, big)
    p = heap.usage().profile
    assert p["large_scans"] == 1 and p["pages_scanned"] == 5 + 1  # one run, from the index
    assert (p["failed_too_big"], p["failed_no_page"], p["failed_nonpositive"]) == (0, 0, 0)


@cuda.jit
def k_churn(ctx, out):
    i = cuda.grid(1)
    for r in range(4):
        off = devalloc.alloc(ctx, 4096)
        devalloc.free(ctx, off)
    out[i] = devalloc.bump(ctx, 48)


@COUNTS_ATOMICS
def test_cas_retries_are_exactly_the_lost_cas():
    import sys

    from devalloc.sim.atomics import count_atomics

    old = sys.getswitchinterval()
    sys.setswitchinterval(5e-6)
    lost = 0
    try:
        for _ in range(10):  # until the interleaving made some cas lose
            heap = devalloc.Heap(L.capacity_for_pages(4), profile=True)
            with count_atomics() as n:
                k_churn[1, 32](heap.ctx, cuda.to_device(np.zeros(32, np.int64)))
            # Every lost cas of the allocator (slab reserve, page take,
            # retire, bump claim) is counted once, and nothing else is.
            assert heap.usage().profile["cas_retries"] == n.cas_failed
            lost += n.cas_failed
            if lost:
                break
    finally:
        sys.setswitchinterval(old)
    assert lost > 0
