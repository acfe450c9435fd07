"""The Monte-Carlo examples of issue 4: each matches its worst-case twin
exactly, frees everything, handles a full heap, and compiles for a GPU.

Kernels run on the simulator at a small size (64 threads, blocks of 32).
The compile check runs in a subprocess with the real CUDA target, like
tests/test_compile.py, and adds its figures to the terminal summary.
"""

import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpu_marks import ON_GPU, needs_simulator

from conftest import COMPILE_REPORT, session_cached

from devalloc import layout as L
from devalloc.examples import _mc
from devalloc.examples import barrier_option as bo
from devalloc.examples import particle_transport as pt
from devalloc.examples import ragged_walks as rw
from devalloc.examples import step_scratch as ss
from devalloc.examples import two_pass_variance as tpv

ROOT = Path(__file__).resolve().parents[1]
THREADS = 64
SMALL = {"threads": THREADS, "seed": 7, "block": 32}
NEW_EXAMPLES = (pt, bo, rw)
#: Every example: the compile check and the debug heap cover them all.
ALL_EXAMPLES = NEW_EXAMPLES + (tpv, ss)


def check_matches_twin_and_frees_everything(module, **kwargs):
    args = {**SMALL, **kwargs}
    r = module.run(**args)
    assert isinstance(r, _mc.Result) and r.threads == args["threads"]
    assert r.identical
    u = r.usage
    assert u.failed == 0 and u.invalid_frees == 0
    assert u.in_use == 0 and u.live_blocks == 0 and u.reserved == 0
    assert u.allocs == u.frees > 0
    assert r.heap_peak_bytes == u.peak > 0
    assert r.worst_case_bytes == module.worst_case_bytes(args["threads"])
    if not ON_GPU:
        # A GPU runs every thread at once: slabs spread over hint slots
        # (heap.spread), so a few dozen threads can take more than their
        # worst case (issue 30's crossover). The simulator runs a block at a time.
        assert r.heap_peak_bytes < r.worst_case_bytes
    assert math.isfinite(r.answer) and r.stderr > 0
    return r


@pytest.mark.parametrize("seed", [0, 7, 2**64 - 1])
def test_rng_states_are_numbas_states(seed):
    from numba.cuda.random import create_xoroshiro128p_states

    ours = _mc.rng_states(5, seed)
    try:
        expected = create_xoroshiro128p_states(5, seed=seed).copy_to_host()
    except OverflowError as e:  # seen on a GPU: numba-cuda 0.30.4, NumPy 2.5.2
        pytest.skip(f"numba-cuda's create_xoroshiro128p_states refuses seed {seed} here ({e})")
    assert np.array_equal(ours, expected)


def test_particle_transport_matches_worst_case_and_frees_everything():
    r = check_matches_twin_and_frees_everything(pt)
    tally = r.tally
    # Every history ends somewhere: the source particle and each secondary
    # is transmitted, reflected, absorbed or lost.
    ends = tally[:, pt.TRANSMITTED] + tally[:, pt.REFLECTED] + tally[:, pt.ABSORBED] + tally[:, pt.LOST]
    assert (ends >= 1).all()
    assert r.lost == 0
    # The stack grew: some history went past the first block, so a history
    # allocated more than once (alloc bigger, copy, free the old one).
    assert r.max_depth > pt.STACK0
    assert r.usage.allocs > r.histories_with_stack > 0
    # The CPU reference (10**6 histories, +-0.0005) within 5 standard errors.
    assert abs(r.answer - pt.REFERENCE_TRANSMITTED) < 5 * r.stderr + 0.002
    assert abs(r.reflected - pt.REFERENCE_REFLECTED) < 5 * r.reflected_stderr + 0.002


def test_barrier_option_matches_worst_case_and_frees_everything():
    r = check_matches_twin_and_frees_everything(bo)
    assert abs(r.answer - bo.exact_price()) < 5 * r.stderr
    # Between the passes only the kept paths' blocks are live, one a path, each
    # of exactly its kept points (in their size class: blocks are at most 264 B).
    snap = r.snapshot
    kept = r.kept[r.kept > 0]
    assert 0 < r.paths_kept == kept.size == snap.live_blocks == r.blocks_between_passes
    assert snap.in_use == sum(L.class_size(L.size_class(8 * int(n))) for n in kept)
    assert ((kept >= 2) & (kept <= bo.NSTEPS + 1)).all()


def test_barrier_closed_form_limits():
    # Barrier far away: the Black-Scholes call (S = K = 100, r = 5 %, 20 %, 1 y).
    assert bo.exact_price(barrier=1e9) == pytest.approx(10.450583572185565, rel=1e-9)
    assert bo.exact_price(barrier=bo.SPOT) == pytest.approx(0.0, abs=1e-9)
    assert 0 < bo.exact_price() < bo.exact_price(barrier=200.0) < 10.4506


def test_ragged_walks_match_worst_case_and_gather_everything():
    # 256 threads: with 16 KiB pages, below about 100 walks one page per size
    # class in use outweighed the worst case (see the module docstring).
    threads = 256
    r = check_matches_twin_and_frees_everything(rw, threads=threads, block=64)
    counts, compact = r.counts, r.compact
    assert compact.size == counts.sum() == r.items
    assert ((compact >= 1) & (compact <= rw.SITES - 1)).all()
    # Each gathered walk starts at START and moves one site per step.
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    assert (compact[starts] == rw.START).all()
    steps = np.abs(np.diff(compact))
    steps[starts[1:] - 1] = 1  # walk boundaries
    assert (steps == 1).all()
    # Before the gather every walk had its block, of exactly its size's class
    # (whole pages of the heap's page above half a page: page="auto" gives
    # this small heap 1 KiB pages, so the longer walks' blocks are large).
    snap = r.snapshot
    assert snap.live_blocks == threads and snap.allocs == threads and snap.frees == 0
    ps = L.floor_log2(snap.page)
    assert snap.page == 1 << ps < L.PAGE

    def held(nbytes):
        if nbytes <= L.max_small(ps):
            return L.class_size(L.size_class(nbytes))
        return L.pages_for(nbytes, ps) << ps

    sizes = [int(n) * rw.ITEM_BYTES for n in counts]
    assert snap.in_use == sum(held(z) for z in sizes)
    assert snap.large_blocks == sum(z > L.max_small(ps) for z in sizes) > 0
    assert abs(r.answer - r.expected) < 5 * r.stderr
    assert sum(r.histogram) == pytest.approx(r.answer)


@pytest.mark.parametrize("module", ALL_EXAMPLES, ids=lambda m: m.__name__.split(".")[-1])
def test_examples_stay_inside_their_blocks_on_a_debug_heap(module):
    # A debug heap puts guard bytes after every block and records bad frees;
    # run(debug=True) calls heap.check(), which raises on either.
    r = module.run(threads=32, seed=11, block=32, debug=True)
    assert r.identical
    assert r.usage.in_use == 0


def test_a_full_heap_is_counted_and_reported_not_hidden():
    # One page cannot hold every size class the walks need at once: some
    # allocs return NULL. The example must say so and still free the rest.
    r = rw.run(**SMALL, capacity=L.MIN_CAPACITY)
    u = r.usage
    assert u.failed > 0
    assert not r.identical
    assert (r.compact == -1).sum() > 0  # the missing walks' items
    assert u.in_use == 0 and u.allocs == u.frees == THREADS - u.failed


_COMPILE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from devalloc import _examples
from devalloc.tools import aot
_examples.package()
from devalloc.examples import _mc
rows = []
for name in sys.argv[2:]:
    module = _examples.load(name)
    for kernel, sig in _mc.signatures(module.SIGNATURES).items():
        ptx, _ = aot.compile_ptx(getattr(module, kernel).py_func, sig, cc=(9, 0))
        r = aot.assemble(ptx, (9, 0))
        rows.append({"kernel": kernel, "arch": r.arch, "registers": r.registers,
                     "spill_bytes": r.spill_bytes, "sass_instructions": r.sass_instructions,
                     "sass_atomics": r.sass_atomics})
states = _mc.rng_states(64, 7).view(np.uint64).tolist()  # numba's compiled seeding
tail = _mc.rng_states(4, 7, start=60).view(np.uint64).tolist()  # from a subsequence start
print(json.dumps({"rows": rows, "states": states, "tail": tail}))
"""


def _compile_examples():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    names = [m.__name__.split(".")[-1] for m in ALL_EXAMPLES]
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE, str(ROOT), *names],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def compiled():
    """Compile every example kernel for sm_90 in a process with the real CUDA target."""
    result = session_cached("examples_compiled", _compile_examples)  # once for every worker
    COMPILE_REPORT.extend(result["rows"])
    return result


@pytest.mark.slow
def test_example_kernels_compile_for_sm90_without_spills(compiled):
    rows = compiled["rows"]
    kernels = {r["kernel"]: r for r in rows}
    expected = set()
    for m in ALL_EXAMPLES:
        expected |= set(m.SIGNATURES)
    assert set(kernels) == expected
    for r in rows:
        assert r["spill_bytes"] == 0, r
        assert r["registers"] > 0, r
        if r["kernel"].endswith(("_heap", "_scoped", "_alloc_free")):
            assert r["sass_atomics"] > 0, r  # the allocator really is in there
        else:
            assert r["sass_atomics"] == 0, r  # twins never touch a heap


@pytest.mark.slow
def test_rng_states_match_on_the_gpu_path(compiled):
    # Off the simulator _mc.rng_states uses numba's compiled seeding; the
    # simulator path (Python integers) must give the very same states.
    assert compiled["states"] == _mc.rng_states(64, 7).view(np.uint64).tolist()
    # A shard's states (from a start, for demo --workers): the whole run's tail.
    assert compiled["tail"] == compiled["states"][-8:]
    assert compiled["tail"] == _mc.rng_states(4, 7, start=60).view(np.uint64).tolist()


class _Bars:
    """Progress with bars (into a string): Runner.launch then cuts simulator launches."""

    def __init__(self):
        self.phases, self.bars, self.file = [], [], io.StringIO()

    def __call__(self, msg):
        self.phases.append(msg)

    def bar(self, total, desc):
        from tqdm import tqdm

        self.bars.append((desc, total))
        return tqdm(total=total, desc=desc, file=self.file, mininterval=0)


@needs_simulator("progress bars are drawn for simulator launches only")
def test_launches_cut_for_a_progress_bar_give_the_very_same_walks():
    # 8 blocks of 8 threads: every launch is cut into 8 launches of 8 rows.
    plain = rw.run(threads=THREADS, seed=5, block=8)
    bars = _Bars()
    cut = rw.run(threads=THREADS, seed=5, block=8, progress=bars)
    assert plain.identical and cut.identical
    assert np.array_equal(plain.counts, cut.counts) and np.array_equal(plain.compact, cut.compact)
    assert plain.answer == cut.answer and plain.histogram == cut.histogram
    assert bars.bars == [("RNG states", THREADS), ("walk_heap", THREADS),
                         ("walk_worst_case", THREADS), ("gather_worst_case", THREADS),
                         ("walk_count", THREADS), ("walk_fill", THREADS)]
    shown = bars.file.getvalue()
    for kernel in ("walk_heap", "walk_worst_case", "gather_worst_case", "walk_count",
                   "walk_fill"):
        for done in range(8, THREADS + 1, 8):  # a block at a time
            assert re.search(rf"\r{kernel}: [^\r]*\| {done}/{THREADS} ", shown), (kernel, done)
    assert len(bars.phases) == 4
