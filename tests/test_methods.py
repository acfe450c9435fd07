"""Issue 30: every example against count + scan + exact allocation and CUDA malloc (NRT).

The device scan against NumPy; every twin of every example gives the worst
case's answers bit for bit (the NRT twins too: on the simulator their
``np.empty`` is NumPy's); the rows' launches, synchronisations and exact
bytes; the NRT twins compile for sm_90 with NRT on; the demo's table and
its JSON rows.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from devalloc.examples import _mc, _methods, _scan
from devalloc.examples import barrier_option as bo
from devalloc.examples import particle_transport as pt
from devalloc.examples import ragged_walks as rw
from devalloc.examples import step_scratch as ss
from devalloc.examples import two_pass_variance as tpv

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = (rw, pt, bo, tpv, ss)


# quick_switching: the scan is race-free (each block's shared reads and
# writes are separated by syncthreads), so every interleaving gives the same
# offsets; the default 5 ms switch interval made the 16K-item scans (128
# blocks of 128 threads) take a minute each on the simulator, 10 s with it.
@pytest.mark.usefixtures("quick_switching")
@pytest.mark.parametrize("n", [0, 1, 5, 127, 128, 129, 300,
                               *(pytest.param(n, marks=pytest.mark.slow) for n in (16255, 16256))])
def test_the_device_scan_is_numpys_cumsum(n):
    from numba import cuda

    v = np.random.default_rng(n).integers(0, 1000, n).astype(np.int32)
    offsets, launches = _scan.exclusive_scan(cuda.to_device(v) if n else
                                             cuda.device_array(0, np.int32))
    assert np.array_equal(offsets.copy_to_host(), np.concatenate([[0], np.cumsum(v)]))
    assert _scan.total(offsets) == int(v.sum())
    # 1 launch up to 127 values, 3 up to 16,255, 5 beyond (module docstring).
    assert launches == (1 if n <= 127 else 3 if n <= 16255 else 5)


def test_scan_scratch_bytes_exact():
    assert _scan.scratch_bytes(64) == 8 * 65 + 8  # offsets; one block total
    # 257 values: 3 blocks; their 3 totals and 4 offsets; then one block.
    assert _scan.scratch_bytes(256) == 8 * 257 + 8 * 3 + 8 * 4 + 8


def _run_all(module, threads, seed=7, block=32):
    lc = _mc.Runner(threads, seed, block)
    lc.nrt_on_simulator = True
    shard = module.simulate(lc, lc.heap(None))
    return shard, module.result(shard)


@pytest.mark.parametrize("module", EXAMPLES, ids=lambda m: m.__name__.split(".")[-1])
def test_every_twin_gives_the_worst_cases_answers_bit_for_bit(module):
    threads = 32 if module is ss else 64
    shard, r = _run_all(module, threads)
    rows = r.methods
    assert shard.identical and r.identical
    heaps = {_methods.HEAP} | ({_methods.HEAP_ALLOC_FREE} if module is ss else set())
    for name in heaps | {_methods.EXACT}:
        assert rows[name].identical is True, name
    nrt = rows[_methods.NRT]
    if module is rw:  # the walks must outlive the walk kernel: no NRT twin
        assert nrt.identical is None and nrt.launches == 0 and "dies with its thread" in nrt.note
    else:
        assert nrt.identical is True and nrt.launches == 1 and nrt.peak_bytes is None
    exact = rows[_methods.EXACT]
    assert exact.twice and exact.syncs == 1  # the total, read back
    assert exact.launches == 2 + (module is bo) + 1  # count, fill (+ bridge), one scan launch
    assert exact.scan_bytes == 4 * threads + _scan.scratch_bytes(threads)
    assert exact.peak_bytes == exact.exact_bytes + exact.scan_bytes + (
        exact.local_bytes_per_thread or 0) * threads
    assert rows[_methods.WORST].peak_bytes == module.worst_case_bytes(threads)
    assert rows[_methods.HEAP].peak_bytes == r.heap_peak_bytes
    assert rows[_methods.HEAP].meta_bytes > 0
    for m in rows.values():
        assert m.seconds is None  # the simulator: no time


def test_exact_bytes_are_what_the_threads_needed():
    shard, r = _run_all(rw, 64)
    assert r.methods[_methods.EXACT].exact_bytes == rw.ITEM_BYTES * int(r.counts.sum())
    assert r.methods[_methods.HEAP].twice  # walk_heap walks twice too
    assert r.methods[_methods.HEAP].syncs == 1  # the counts, for the host's starts
    shard, r = _run_all(pt, 64)
    # Each history's deepest stack, 16 B an entry; the count pass's stack is local.
    assert r.methods[_methods.EXACT].exact_bytes == pt.ENTRY_BYTES * int(
        r.tally[:, pt.MAX_DEPTH].sum())
    assert r.methods[_methods.EXACT].local_bytes_per_thread == pt.MAX_STACK * pt.ENTRY_BYTES
    shard, r = _run_all(bo, 64)
    assert r.methods[_methods.EXACT].exact_bytes == 8 * int(shard.arrays["kept"].sum())
    assert r.methods[_methods.EXACT].in_use_bytes is None


def test_the_sweeps_model_of_the_heap_peak_is_the_simulators_peak():
    # bench/sweep.py computes the heap's peak from a size histogram; where every
    # block is live at once (ragged_walks, before the gather) that is exact,
    # with the page the example's heap really has (page="auto" on the
    # capacity the example gives itself), and with no other page.
    from devalloc import layout as L
    from devalloc.host.capacity import auto_page_shift

    for threads, seed in ((64, 7), (256, 1)):
        r = rw.run(threads=threads, seed=seed)
        page = r.usage.page
        assert page == 1 << auto_page_shift((1 << 20) + 512 * threads) < L.PAGE
        sizes, counts = np.unique(rw.ITEM_BYTES * r.counts, return_counts=True)
        hist = dict(zip(sizes.tolist(), counts.tolist()))
        assert L.histogram_bytes(hist, page=page) == r.heap_peak_bytes
        assert L.histogram_bytes(hist) != r.heap_peak_bytes  # the page matters


def test_histogram_pages_exact():
    from devalloc import layout as L

    assert L.histogram_pages({}) == 0
    assert L.histogram_pages({16: 1024}) == 1 and L.histogram_pages({16: 1025}) == 2
    assert L.histogram_pages({1: 1, 16: 1}) == 1  # one class
    assert L.histogram_pages({17: 1, 16: 1}) == 2  # two classes, a slab each
    assert L.histogram_pages({L.MAX_SMALL + 1: 3}) == 3  # large: whole pages each
    assert L.histogram_pages({L.PAGE + 1: 2}) == 4
    assert L.histogram_pages({100: 3}, spread=132) == 3  # never more slabs than blocks
    assert L.histogram_pages({16: 2048}, spread=4) == 2 + 3
    for bad in ({0: 1}, {16: -1}):
        with pytest.raises(ValueError, match="sizes >= 1"):
            L.histogram_pages(bad)
    with pytest.raises(ValueError, match="spread"):
        L.histogram_pages({16: 1}, spread=0)


def test_combined_shards_add_up_their_rows():
    a = {"x": _methods.Method(name="x", peak_bytes=10, launches=2, syncs=1, identical=True,
                              seconds=0.5)}
    b = {"x": _methods.Method(name="x", peak_bytes=5, launches=2, syncs=1, identical=False,
                              seconds=0.7)}
    c = _methods.combine([a, b])["x"]
    assert (c.peak_bytes, c.launches, c.syncs, c.identical, c.seconds) == (15, 4, 2, False, 0.7)
    assert a["x"].peak_bytes == 10  # the shards' rows are left alone


def test_the_table_says_what_was_not_run_and_why():
    rows = {
        _methods.HEAP: _methods.Method(name=_methods.HEAP, peak_bytes=16384, in_use_bytes=512,
                                       meta_bytes=58000, launches=1, identical=True),
        _methods.NRT: _methods.Method(name=_methods.NRT, note="needs a GPU"),
        _methods.WORST: _methods.Method(name=_methods.WORST, peak_bytes=262144, launches=1),
    }
    lines = _methods.format_table(rows, "simulator")
    assert lines[0].split("  ")[0] == "method"
    heap, nrt, worst = lines[2:5]
    assert "16,384 (in use 512, metadata 58,000)" in heap and "simulator" in heap
    assert "needs a GPU" in nrt and nrt.split()[-1] == "n/a"
    assert "(reference)" in worst
    assert len(lines) == 5  # "needs a GPU" on the simulator needs no footnote
    rows[_methods.NRT].note = "not run: too big"
    assert _methods.format_table(rows, "gpu")[-1] == "CUDA malloc (NRT): not run: too big"


def test_the_demo_prints_the_table_and_carries_its_rows_in_json(capsys):
    from devalloc.__main__ import main

    assert main(["demo", "--example", "two_pass_variance", "--threads", "64", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in s["methods"]}
    assert [r["name"] for r in s["methods"]] == [
        _methods.HEAP, _methods.EXACT, _methods.NRT, _methods.WORST]
    assert rows[_methods.HEAP]["peak_bytes"] == s["heap_peak_bytes"]
    assert rows[_methods.WORST]["peak_bytes"] == s["worst_case_bytes"]
    assert rows[_methods.EXACT]["identical"] is True and rows[_methods.EXACT]["syncs"] == 1
    assert rows[_methods.NRT]["note"] == "needs a GPU" and rows[_methods.NRT]["identical"] is None
    assert main(["demo", "--example", "two_pass_variance", "--threads", "64"]) == 0
    out = capsys.readouterr().out
    assert "count + scan + exact" in out and "CUDA malloc (NRT)" in out
    assert "work twice" in out and "needs a GPU" in out


_COMPILE_NRT = r"""
import json, subprocess, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from devalloc import _examples
from devalloc.tools import aot
_examples.package()
from devalloc.examples import _mc, _scan
rows = []
with _mc.nrt_enabled():
    for name in sys.argv[2:]:
        module = _examples.load(name)
        for kernel, sig in _mc.signatures(module.NRT_SIGNATURES).items():
            ptx, _ = aot.compile_ptx(getattr(module, kernel).py_func, sig, cc=(9, 0))
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "k.ptx"
                src.write_text(ptx)
                # NRT's functions are linked in at load time: assemble relocatable code.
                res = subprocess.run([aot.tool_path("ptxas"), "-c", "-v", "-arch=sm_90", str(src),
                                      "-o", str(Path(tmp) / "k.o")], capture_output=True, text=True)
            rows.append({"kernel": kernel, "rc": res.returncode, "log": res.stderr[-2000:],
                         "nrt": "NRT_MemInfo" in ptx or "NRT_Allocate" in ptx,
                         "malloc": "malloc" in ptx})
for kernel, sig in _mc.signatures(_scan.SIGNATURES).items():
    ptx, _ = aot.compile_ptx(getattr(_scan, kernel).py_func, sig, cc=(9, 0))
    r = aot.assemble(ptx, (9, 0))
    rows.append({"kernel": kernel, "rc": 0, "spill_bytes": r.spill_bytes,
                 "sass_atomics": r.sass_atomics})
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_nrt_twins_and_the_scan_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    names = ["particle_transport", "barrier_option", "two_pass_variance", "step_scratch"]
    proc = subprocess.run([sys.executable, "-c", _COMPILE_NRT, str(ROOT), *names],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["kernel"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert set(rows) == {"transport_nrt", "barrier_nrt", "variance_nrt", "path_nrt",
                         "scan_blocks", "add_block_offsets"}
    for name in ("transport_nrt", "barrier_nrt", "variance_nrt", "path_nrt"):
        r = rows[name]
        assert r["rc"] == 0, r["log"]
        assert r["nrt"], name  # np.empty really goes through NRT
    for name in ("scan_blocks", "add_block_offsets"):
        assert rows[name]["spill_bytes"] == 0 and rows[name]["sass_atomics"] == 0


def _sweep():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import sweep
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return sweep


def test_the_sweeps_example_designs_exact():
    sweep = _sweep()
    import _size_models as M

    s = M.transport_stacks(np.array([0, 1, 2, 3, 5, 300]), stack0=1)
    assert s.block.tolist() == [0, 16, 32, 64, 128, 256 * pt.ENTRY_BYTES]  # doubled, capped
    assert s.blocks.tolist() == [0, 1, 1, 1, 1, 1] and s.need.tolist() == [0, 16, 32, 48, 80, 4800]
    assert M.transport_stacks(np.array([1, 3]), stack0=2).block.tolist() == [32, 64]
    s = M.barrier_chunks(np.array([0, 7, 8, 15]), words=8)  # a link word and 7 points
    assert s.blocks.tolist() == [0, 1, 2, 3] and set(s.block.tolist()) == {64}
    s = M.barrier_blocks(np.array([0, 7, 8, 15]))  # one exact block per path: the kernel's
    assert s.blocks.tolist() == [0, 1, 1, 1] and s.block.tolist() == [0, 56, 64, 120]
    assert s.need.tolist() == s.block.tolist() and s.all_live
    assert M.barrier_chunks(np.array([15]), words=16).blocks.tolist() == [1]


def test_the_sweeps_page_is_the_examples_heaps_page():
    # The sweep's heap is the one each example makes for itself (page="auto"
    # on 1 MiB + HEAP_PER_THREAD a thread): 1 KiB pages at 256 threads, 16 KiB
    # from 32K (512 B a thread) or 64K threads (256 B).
    from devalloc.host.capacity import AUTO_PAGES

    sweep = _sweep()
    assert AUTO_PAGES == 1024
    for name, (_, module) in sweep.MODELS.items():
        lc = _mc.Runner(256, 1, 64, None)
        heap = lc.heap(None, per_thread=module.HEAP_PER_THREAD)
        assert heap.page == sweep.heap_page(module, 256) == 1024, name
        per = module.HEAP_PER_THREAD
        assert sweep.heap_page(module, 1 << 20) == 16384
        assert sweep.heap_page(module, (1 << 24) // per) == 16384  # capacity 17 MiB
        assert sweep.heap_page(module, (1 << 23) // per) == 8192  # 9 MiB
    assert sweep.held_bytes({100: 2, 600: 1, 5000: 1}, 1024) == 2 * 112 + 1024 + 5 * 1024
    assert sweep.held_bytes({100: 2, 600: 1, 5000: 1}, 16384) == 2 * 112 + 640 + 5120


def test_the_sweeps_levers(monkeypatch):
    from devalloc import layout as L

    sweep = _sweep()
    monkeypatch.setattr(sweep, "THREADS", [256, 1024])
    model, module = sweep.MODELS["barrier_option"]
    s = model(1024, np.random.default_rng(1))
    rows = sweep.rows_for("barrier_option", model, module, None, sample=s)
    levers = dict(sweep.levers_for("barrier_option", module, s))
    for r in rows:
        n = r["threads"]
        assert r["page"] == sweep.heap_page(module, n) == 1024
        # The first lever is the heap as it is: the sweep's own packed / exact;
        # the second the same blocks in 16 KiB pages (the rows' "before").
        today = r["heap_packed"] / r["exact"]
        assert levers[sweep.AUTO][n] == today == levers["1 KiB pages (page=1024)"][n]
        assert levers[sweep.BEFORE][n] == r["heap_16k"] / r["exact"]
        pages = [levers[f"{k} KiB pages (page={k * 1024})"][n] for k in (1, 2, 4, 8)]
        assert levers[sweep.BEST][n] == min(pages + [levers[sweep.BEFORE][n]])
        # One block of exactly the kept points a path: requested is exact; the
        # metadata is that of a heap of exactly the peak, with its page.
        assert r["requested"] == r["exact"] < r["in_blocks"] <= r["heap_packed"]
        assert r["meta"] == L.meta_bytes(r["heap_packed"] // 1024, 10)
    # Exact blocks touch many classes: 16 KiB pages hold far more at 256 threads.
    assert levers[sweep.BEFORE][256] > 5 * levers[sweep.AUTO][256]
    # The chains of 64 B chunks before: a link word and unused points, one class.
    chunks = levers["before: chains of 64 B chunks (today one exact block a path), 16 KiB pages"]
    assert chunks[256] < levers[sweep.BEFORE][256]


def test_the_sweeps_histograms_and_crossovers(monkeypatch):
    sweep = _sweep()
    h = sweep.histogram(np.array([16, 16, 128, 0, 4000]), np.array([1, 2, 3, 5, 0]))
    assert h == {16: 3, 128: 3, 0: 5}
    rows = [{"threads": t, "a": a, "b": 10} for t, a in ((256, 20), (512, 5), (1024, 30),
                                                            (2048, 9), (4096, 1))]
    assert sweep.crossover(rows, "a", "b") == 2048  # stays below from 2,048 on
    assert sweep.crossover(rows[:3], "a", "b") is None
    monkeypatch.setattr(sweep, "THREADS", [256, 1024])
    model, module = sweep.MODELS["barrier_option"]
    rows = sweep.rows_for("barrier_option", model, module, np.random.default_rng(1))
    for r in rows:
        assert r["worst"] == bo.worst_case_bytes(r["threads"])
        assert r["heap_packed"] <= r["heap_spread"] and r["heap_packed"] <= r["heap_16k"]
        assert r["exact"] < r["count_scan"] and 1 < r["classes"] <= 16  # 16 to 264 B blocks
        # One block a kept path: the heap holds at least the blocks' bytes.
        assert r["heap_packed"] >= r["in_blocks"] >= r["exact"]
        assert r["live_blocks"] < r["threads"]
        # Against count + scan the heap's side adds each path's offset and count.
        assert r["heap_and_arrays"] == r["heap_packed"] + 12 * r["threads"]
