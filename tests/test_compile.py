"""Everything public compiles for real GPUs: PTX via NVVM, SASS via ptxas.

Runs ``python -m devalloc.probes`` in a subprocess with the real CUDA target
(the rest of the suite runs on the simulator), for compute capabilities 7.5
and 9.0, without a GPU. Asserts zero spills and records registers and SASS
figures for the terminal summary. Also pins the two compile traps devalloc
is built around, so a numba-cuda that changes them is noticed, and the
ptxas fact behind the register figures (a callee's registers count in its
caller kernel's).
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import COMPILE_REPORT, session_cached

CCS = ["75", "90"]


def _probes():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run(
        [sys.executable, "-m", "devalloc.probes", "--json", "--traps", "--cc", *CCS],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probe_result():
    result = session_cached("probe_result", _probes)  # once for every xdist worker
    COMPILE_REPORT.extend(result["probes"])
    return result


QUICK_SM90 = """
import json
from devalloc.tools import probes
names = ("empty", "alloc", "free", "alloc_view_free")
print(json.dumps(probes.measure(((9, 0),), {n: probes.PROBES[n] for n in names})))
"""


def test_alloc_and_free_compile_for_sm90_within_budget():
    # The fast tier's compile check (the full tier's probe_result covers every
    # public kernel for sm_75 and sm_90): the same budgets for the core path.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", QUICK_SM90], capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    by = {r["kernel"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert {r["arch"] for r in by.values()} == {"sm_90"}
    for name in ("alloc", "free", "alloc_view_free"):
        r = by[name]
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, r
        assert r["sass_atomics"] >= 2, r
    assert by["empty"]["sass_atomics"] == 0
    # The ceilings of test_register_ceiling_sm90 and
    # test_registers_for_every_way_of_passing_a_size_sm90.
    assert by["alloc"]["registers"] <= 40, by["alloc"]
    assert by["alloc_view_free"]["registers"] <= 52, by["alloc_view_free"]


def rows(result, kernel):
    found = [r for r in result["probes"] if r["kernel"] == kernel]
    assert len(found) == len(CCS)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [
    "alloc", "alloc_const", "alloc_per_thread", "free", "alloc_view_free",
    "alloc_view_free_per_thread", "conditional", "bump", "scoped", "debug_alloc_view_free",
    "debug_scoped", "observed_alloc_view_free", "observed_bump", "observed_scoped"])
def test_public_device_api_compiles_without_spills(probe_result, kernel):
    for r in rows(probe_result, kernel):
        assert r["spill_bytes"] == 0, r
        assert r["stack_bytes"] == 0, r
        assert r["registers"] > 0, r
        # The allocator really is in there: it issues global atomics.
        assert r["sass_atomics"] >= 2, r


@pytest.mark.slow
def test_floor_kernels_are_what_they_claim(probe_result):
    for r in rows(probe_result, "atomic_floor"):
        assert r["sass_atomics"] == 1, r
    for r in rows(probe_result, "empty"):
        assert r["sass_atomics"] == 0, r


def _called_function_ptx(values):
    # A kernel whose only work is an out-of-line call to a function that
    # keeps ``values`` 64-bit values live at once.
    body = [f"  ld.volatile.global.u64 v{i}, [p+{8 * i}];" for i in range(values)]
    body += [f"  mul.lo.u64 v{i}, v{i}, v{(i + 1) % values};" for i in range(values)]
    body += ["  mov.b64 acc, 0;"] + [f"  xor.b64 acc, acc, v{i};" for i in range(values)]
    return "\n".join([
        ".version 8.0", ".target sm_90", ".address_size 64",
        ".func (.param .b64 ret) heavy(.param .b64 pp)", "{",
        "  .reg .b64 p, acc;", f"  .reg .b64 v<{values}>;", "  ld.param.b64 p, [pp];",
        *body, "  st.param.b64 [ret], acc;", "  ret;", "}",
        ".visible .entry k(.param .u64 a)", "{", "  .reg .b64 p, r;",
        "  ld.param.u64 p, [a];", "  cvta.to.global.u64 p, p;",
        "  { .param .b64 pa; .param .b64 pr; st.param.b64 [pa], p;",
        "    call.uni (pr), heavy, (pa); ld.param.b64 r, [pr]; }",
        "  st.global.u64 [p], r;", "  ret;", "}", ""])


def test_a_called_function_counts_in_the_kernels_registers(tmp_path):
    # Why the allocator's register figures cannot be lowered by moving its
    # cold paths out of line: ptxas reports, for a kernel, the registers of
    # everything it calls. The call stays a real CALL in the SASS here, and
    # the kernel still needs the callee's 24 live 64-bit values.
    from devalloc.tools import aot

    ptx = _called_function_ptx(24)
    r = aot.assemble(ptx, (9, 0))
    assert r.registers >= 48 and r.spill_stores == 0, r
    (tmp_path / "k.ptx").write_text(ptx)
    subprocess.run([aot.tool_path("ptxas"), "-arch=sm_90", str(tmp_path / "k.ptx"),
                    "-o", str(tmp_path / "k.cubin")], check=True)
    sass = subprocess.run([aot.tool_path("nvdisasm"), "-c", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, check=True).stdout
    assert " CALL" in sass and " RET" in sass


@pytest.mark.slow
def test_register_ceiling_sm90(probe_result):
    # Deterministic for a given toolchain; a ceiling that catches growth, not
    # issue 3's targets of 24/32 registers, which are missed (bench/RESULTS.md
    # says by how much and why). Measured with numba-cuda 0.30 / CUDA 13: 40
    # and 48 (44 and 44 before warp aggregation, 47 and 55 before the page
    # search kept its state in 32 bits); the ceiling leaves room for
    # toolchain updates.
    by = {r["kernel"]: r for r in probe_result["probes"] if r["arch"] == "sm_90"}
    assert by["alloc"]["registers"] <= 44
    assert by["alloc_view_free"]["registers"] <= 52


@pytest.mark.slow
def test_registers_for_every_way_of_passing_a_size_sm90(probe_result):
    # Issue 13: a constant size made NVVM unroll _pick's word loop and keep
    # its addresses live (88 registers) until the trip count went through
    # _meta._opaque. Per-thread sizes cannot live in uniform registers, so
    # they cost more than a kernel argument.
    by = {r["kernel"]: r for r in probe_result["probes"] if r["arch"] == "sm_90"}
    assert by["alloc"]["registers"] <= 40, by["alloc"]
    assert by["alloc_const"]["registers"] <= 40, by["alloc_const"]
    # Issue 28: one alloc site <= 36 registers (measured 32 since the
    # search's hoisted values went, docs/outline.md "Lowered"; was 40; 34
    # since the index's arithmetic is 32-bit, same 40-register allocation
    # unit: tools/occupancy.py).
    assert by["alloc_per_thread"]["registers"] <= 36, by["alloc_per_thread"]
    assert by["alloc_view_free_per_thread"]["registers"] <= 44, by["alloc_view_free_per_thread"]


#: SASS instructions executed on each path on sm_90, as measured (numba-cuda
#: 0.30, CUDA 13 tools); the floor, one atomic add, is 39. Pinned with a
#: margin of 5 % (at least 8) for toolchain updates. Issue 14 (page index,
#: adaptive spread) added the spread word's load to alloc (162 -> 165), the
#: settling of reserved bits after the search to the reuse path (237 ->
#: 251: the search keeps 40 registers), the room-mark check to free (115 ->
#: 120) and the page search's setup to bump's loop (150 -> 160). Issue 25
#: (no retry budget ends in NULL) took bump's RETRIES count out (160 -> 156).
#: Issue 28 (second part): bump's first try on the current chunk before the
#: claim's loop (bumpalloc._claim_fast) took its path from 156 to 127.
#: Issue 28 (registers): the search's hoisted values gone (docs/outline.md,
#: "Lowered") took alloc's paths from 164 to 148 and 250 to 236, scoped's
#: from 139 to 137; the index's 32-bit arithmetic (docs/outline.md) moved
#: alloc_reuse to 238 and scoped to 140 (register allocation: neither path
#: runs the index's code). One call of _claim_fast for a group's leader and
#: for a lane alone (a third less inline code per bump site) moved bump to
#: 132; one chunk alloc call in scoped's new chunk (not on the walked path)
#: moved scoped to 136 (register assignment); _room_drop's 32-bit tags
#: and the page claim's 32-bit run end (neither on these paths) moved
#: alloc's to 147 and 237, then back to 148 and 238, and bump to 131. The
#: mask of a slab's last bitmap word, moved from the search to _settle (on
#: the reuse path: docs/outline.md, "The arena as its page count"), took
#: alloc_reuse to 241. A bump group's bytes and a lane's offset in them in
#: 32 bits (registers: docs/outline.md, "A bump group's bytes in 32 bits")
#: moved bump to 134; a follower's base set to 0, not NULL, before the
#: share, to 133; scoped's size in 32 bits took scoped to 134, and the
#: counter stripes read where they count moved free's to 119 and 142
#: (docs/outline.md, "Counter stripes read where they count"); its chunk
#: headers read a word at a time, scoped to 115, and 117 since its new
#: chunk returns the state ("Chunk headers in words").
PATHS = {"alloc_fresh_slab": 148, "alloc_reuse": 241, "free_lone": 120,
         "free_warp32": 141, "bump": 133, "scoped": 117}


@pytest.mark.slow
def test_walked_path_lengths_sm90(probe_result):
    got = probe_result["paths"]
    assert probe_result["paths_floor"] <= 48
    for name, pinned in PATHS.items():
        r = got[name]
        # Where the instructions go, per device function (shown with -s).
        print(f"{name}: {r['instructions']} ({r['what']}): {r['by_function']}")
        assert r["instructions"] <= pinned + max(8, pinned // 20), (name, r)
        assert r["instructions"] >= pinned // 2, (name, r)  # the walk really walked
    # What the ordering costs on each path: no SC fence; an acquire is one
    # L1 invalidation after its atomic, a release one MEMBAR.ALL before it.
    assert got["alloc_fresh_slab"]["ordering"] == {"CCTL.IVALL": 1}
    assert got["free_lone"]["ordering"].get("MEMBAR.ALL.GPU") == 2
    assert not any(op.startswith("MEMBAR.SC") for r in got.values() for op in r["ordering"])
    # Issue 13's targets.
    assert got["alloc_fresh_slab"]["instructions"] <= 170
    assert got["free_lone"]["instructions"] <= 120
    assert got["free_warp32"]["instructions"] <= 250


@pytest.mark.slow
def test_trap_device_function_needs_a_device_without_the_stand_in(probe_result):
    got = probe_result["traps"]["device_call_needs_device"]
    if got is None:
        pytest.skip("a CUDA driver is present: the no-driver trap cannot be observed")
    assert got == "CudaSupportError"


@pytest.mark.slow
def test_trap_device_function_cannot_return_an_array_it_created(probe_result):
    assert probe_result["traps"]["return_created_array_rejected"] is True


@pytest.mark.slow
def test_no_sequentially_consistent_fence_in_any_kernel(probe_result):
    # Issue 13: every alloc and free ran cuda.threadfence() (MEMBAR.SC.GPU,
    # ERRBAR, CCTL.IVALL: L1 invalidated). Ordering now comes from acquire
    # and release atomics (docs/correctness.md, "Memory ordering").
    for r in probe_result["probes"]:
        assert r["sass_membar_sc"] == 0, r


@pytest.mark.slow
def test_bump_orders_its_claim_and_its_chunk_install(probe_result):
    # Issue 13's two bump gaps: the lanes sync with the leader after its
    # claim, and the chunk's page takes are released by the install's cas.
    got = probe_result["traps"]["bump_ordering"]
    assert got["bar_warp_sync"] >= 1, got
    assert got["acquire_cas"] >= 1 and got["release_cas"] >= 1, got


@pytest.mark.slow
def test_merge_bits_is_one_redux_on_sm80_and_later(probe_result):
    assert probe_result["traps"]["merge_bits_redux"] == {"75": False, "90": True}


@pytest.mark.slow
def test_merge_bits_widens_the_warp_mask_without_sign_extension(probe_result):
    # match_any_sync's mask is an int32: sign-extended, a group holding lane
    # 31 would make merge_bits shuffle from 32 lanes outside the group (a
    # bug the simulator cannot show). Pinned on the PTX.
    assert probe_result["traps"]["merge_mask_zero_extended"] is True


@pytest.mark.slow
def test_normal_heaps_compile_no_observed_code(probe_result):
    # Profile counters and the trace cost nothing on normal heaps: the path
    # is chosen from the ctx's type when the kernel compiles.
    assert probe_result["traps"]["observed_path_only_when_observed"] is True


@pytest.mark.slow
def test_the_replay_kernel_compiles_for_the_gpu(probe_result):
    assert probe_result["traps"]["replay_kernel_spills"] == 0


CACHED = """
import json, os
from numba import cuda
from devalloc.tools import aot, probes
calls = []
real = cuda.compile_ptx
def counted(*args, **kwargs):
    calls.append(kwargs["cc"])
    return real(*args, **kwargs)
cuda.compile_ptx = counted
first = aot.compile_ptx(probes.k_empty, probes.SIG, cc=(9, 0))
second = aot.compile_ptx(probes.k_empty, probes.SIG, cc=(9, 0))
other = aot.compile_ptx(probes.k_empty, probes.SIG, cc=(7, 5))
print(json.dumps([calls, first[0] == second[0], first[0] == other[0], ".target sm_90" in first[0],
                  sorted(f.rsplit(".", 1)[1] for f in os.listdir(os.environ["DEVALLOC_PTX_CACHE"]))]))
"""


def test_a_kernel_is_compiled_once_per_ptx_cache(tmp_path):
    # The test session's cache (tests/conftest.py): what one process compiled,
    # the next one with the same folder reads.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["DEVALLOC_PTX_CACHE"] = str(tmp_path / "ptx")
    said = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", CACHED], capture_output=True, text=True,
                              env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
        said.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert said[0] == [[[9, 0], [7, 5]], True, False, True, ["pickle", "pickle"]]
    assert said[1] == [[], True, False, True, ["pickle", "pickle"]]


def test_the_ptx_cache_keys_what_the_ptx_depends_on():
    from numba import types

    import devalloc
    from devalloc.tools import aot, probes

    sig = probes.SIG
    key = aot._cache_key(probes.k_alloc, sig, (9, 0), {})
    assert key == aot._cache_key(probes.k_alloc, sig, (9, 0), {})
    others = {aot._cache_key(probes.k_alloc, sig, (7, 5), {}),
              aot._cache_key(probes.k_alloc, sig, (9, 0), {"lineinfo": True}),
              aot._cache_key(probes.k_empty, sig, (9, 0), {}),
              aot._cache_key(probes.k_alloc, (devalloc.debug_ctx_type, types.int64,
                                              types.int64[::1]), (9, 0), {})}
    assert len(others) == 4 and key not in others and None not in others
    # DEVALLOC_OUTLINE (read at import) compiles the same sources to other PTX.
    from devalloc.device import outline

    monkey = pytest.MonkeyPatch()
    try:
        monkey.setattr(outline, "ENABLED", not outline.ENABLED)
        assert aot._cache_key(probes.k_alloc, sig, (9, 0), {}) != key
    finally:
        monkey.undo()
    # Not cached: a kernel without a source file, or closing over an object.
    ns = {}
    exec("def k(ctx, n, out):\n    out[0] = n\n", ns)
    assert aot._cache_key(ns["k"], sig, (9, 0), {}) is None
    table = [1]

    def k_closure(ctx, n, out):
        out[0] = table[0]

    assert aot._cache_key(k_closure, sig, (9, 0), {}) is None
