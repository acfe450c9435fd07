"""Budgets per call site: what each extra alloc/free/... in a kernel costs (issue 28).

Compiled for sm_90 without a GPU (:mod:`devalloc.tools.codesize`, in a subprocess
with the real CUDA target), in the three modes of :mod:`devalloc.device.outline`:
inline (every site is expanded in full), out of line (one copy of each body
per kernel, a call per site) and automatic (the default: inline where a
kernel has one site of a body, out of line where it has several), chosen by
the ctx type the kernels compile for (``Heap(outline=)``,
``ctx_type_for(outline=)``) or, for plain arrays, by the process default
(``DEVALLOC_OUTLINE``).
Deterministic figures only (SASS, registers, stack); compile seconds are
reported by ``python -m devalloc.probes --code-size``, never asserted.
bench/RESULTS.md ("Code size per call site") has the figures and what is
still above the issue's limits.
"""

import json
import os
import subprocess
import sys

import pytest

from devalloc.tools import codesize, occupancy
from devalloc.device import outline

MEASURE = """
import json, sys
from devalloc.tools import codesize
choice = {"True": True, "False": False, "auto": "auto"}[sys.argv[2]]
print(json.dumps(codesize.measure((9, 0), sys.argv[1].split(","), timing=False,
                                  outline=choice)))
"""


def _run(script, args, outlined, default=False):
    # script in a subprocess with the real CUDA target, given args and
    # outlined (the ctx type's choice); the process default (DEVALLOC_OUTLINE,
    # read when devalloc is imported) is `default`. Its last line's JSON.
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM",
                                                            "DEVALLOC_OUTLINE")}
    if default:
        env["DEVALLOC_OUTLINE"] = "1"
    proc = subprocess.run([sys.executable, "-c", script, ",".join(args), str(outlined)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _measure(ops, outlined):
    return _run(MEASURE, ops, outlined)


def test_every_operation_has_kernels_of_one_two_and_four_sites():
    assert set(codesize.KERNELS) == {"alloc", "free", "view", "bump", "scoped"}
    for op, kernels in codesize.KERNELS.items():
        assert sorted(kernels) == [1, 2, 4], op
        assert all(k.__name__ == f"k_{op}_{n}" for n, k in kernels.items())


def test_outline_is_the_function_itself_on_the_simulator():
    # The simulator runs the Python source: nothing to outline, and the
    # interleaving explorer still sees the device functions it swaps.
    from numba import config

    from devalloc.device import core

    if not config.ENABLE_CUDASIM:
        pytest.skip("the real CUDA target: outline(f) chooses when a kernel is typed")

    def f(x):
        return x

    assert outline.outline(f) is f
    assert core.free_site is core.free and core.alloc_site is core.alloc


#: Reached out of line (``codesize.measure(outline=True)``: the kernels
#: compiled for a ctx typed ``outline=True``; numba-cuda 0.30, CUDA 13.5
#: tools, sm_90), since arrays cross the call as global-space pointers and
#: free's NULL test is inline: SASS per extra site alloc 85, free 37, view
#: 122, bump 266, scoped 320; registers (1/2/4 sites) alloc 44/48/54, free
#: 30/32/32, view 52/54/54, bump 51/64/64 (52/54/62 before: the smaller body
#: let ptxas keep more live), scoped 60/70/79; since the search's hoisted
#: values went (docs/outline.md, "Lowered"): alloc 40/45/48, view 40/48/48,
#: scoped 55/70/79; since the index's arithmetic is 32-bit (docs/outline.md,
#: "32-bit index arithmetic"): alloc 37/44/48, free 30/32/32, view 40/48/48,
#: bump 49/59/64, scoped 54/70/80; since the index's masks are 32-bit
#: ("32-bit masks across the count updates"): alloc 36/44/48, view 38/48/48,
#: scoped 53/70/80; since one call of the claim serves a group's leader and
#: a lane alone, and scoped's two chunk allocs are one call ("One slow
#: path per site"): bump 50/60/61, 240 per site; scoped 51/71/78; since
#: bump itself is the out-of-line body (its claim inline there): bump
#: 46/56/52, 40 per site; since a search tries the free page it read before
#: its last look at the room index (docs/correctness.md, "Where two takers
#: meet"): alloc 38/42/47, view 40/47/47, 96 and 125 per site; since
#: _room_drop compares 32-bit tags (docs/outline.md, "As a probe"): alloc
#: 37/42/46, view 40/46/46; since the arena crosses the call as its page
#: count and _pick's mask of the last bitmap word moved to _settle
#: (docs/outline.md, "The arena as its page count"): alloc 39/43/44, free
#: 30/32/32, view 40/43/43, bump 48/51/48, scoped 54/68/76; since a bump
#: group's bytes cross the claim in 32 bits: bump 40/43/44; since a
#: follower's base before the share is 0, not NULL: bump 40/42/41.
#: Pinned: the issue's site limits (400 for alloc and what builds on it,
#: 150 for free), registers as measured + 2, one alloc site in the
#: allocation unit of the issue's limit (39: unit 40, as 36's; the raw
#: limit is met by the default build, which inlines one site: 32), and four
#: alloc sites within it (44).
OUTLINED_SITE = {"alloc": 400, "free": 150, "view": 400, "bump": 400, "scoped": 400}
OUTLINED_REGISTERS = {"alloc": 50, "free": 34, "view": 50, "bump": 58, "scoped": 81}
#: One site out of line is no bigger than inline (3,480 and 728 SASS): 3,304
#: and 688 measured (3,568 and 744 inline, 3,368 and 696 out of line before
#: the index's 32-bit masks; 3,696 and 768 inline, 3,504 and 720 out of line
#: before its 32-bit arithmetic). With the heap's arrays crossing as generic pointers it
#: was 5,432 and 1,280: every numba atomic in the body tested the address
#: space at run time (QSPC and a shared-memory CAS loop beside the global
#: atomic).
#: Since index passes start at the warp's own word and wrap (issue 49):
#: alloc 3,424 -> 3,512 out of line, 3,616 -> 3,720 inline; pinned at 3,560.
OUTLINED_ONE_SITE = {"alloc": 3560, "free": 728}
#: 39 -> 40 since a 0-byte request is counted apart (issue 51: the failure
#: count's word chosen from alloc's result in the out-of-line body; inline,
#: one site keeps its 32).
OUTLINED_ONE_SITE_REGISTERS = 40


@pytest.mark.slow
def test_an_extra_call_site_is_a_call_when_outlined():
    got = _measure(sorted(OUTLINED_SITE), outlined=True)
    for op, limit in OUTLINED_SITE.items():
        e = got[op]
        assert e["per_extra_site"] <= limit, (op, e)
        for k, r in e["sites"].items():
            assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, (op, k, r)
            assert r["calls"] >= int(k), (op, k, r)  # every site calls
            assert r["registers"] <= OUTLINED_REGISTERS[op], (op, k, r)
    for op, inline in OUTLINED_ONE_SITE.items():
        assert got[op]["sites"]["1"]["sass_instructions"] <= inline, (op, got[op])
    assert got["alloc"]["sites"]["1"]["registers"] <= OUTLINED_ONE_SITE_REGISTERS, got["alloc"]
    for op in ("alloc", "bump"):
        assert got[op]["sites"]["4"]["registers"] <= ISSUE_REGISTERS["4"], got[op]
    _check_register_units(got["alloc"])
    for op in ("alloc", "free", "view"):
        # Registers grow with the sites only by what the kernel keeps live
        # across the later calls: four sites hold two more 64-bit results than
        # two (4 registers; measured alloc 48 -> 54, free and view +0).
        e = got[op]
        assert e["sites"]["4"]["registers"] <= e["sites"]["2"]["registers"] + 6, (op, e)


#: The default (inline) mode, measured: per extra site alloc 3477, free 760
#: (3528 and 773 before the index's 32-bit masks, 3669 and 794 before its
#: 32-bit arithmetic), bump 1816 (2826 while a group's leader and a lane
#: alone each had their own inline copy of the claim); pinned with 5 % of
#: room so that it cannot creep up unnoticed. alloc 3,592 since a search
#: tries the free page it read before its last look at the room index
#: (3,490 before).
INLINE_SITE = {"alloc": 3650, "free": 800, "bump": 1910}
#: Inline, alloc's registers for 1 / 4 sites: issue 28's limits (36 and 44)
#: were met at 34 / 44; since a search tries the free page it read before
#: its last look at the room index, 32 / 46 (the same allocation units, 40
#: and 48: _check_register_units); since _room_drop compares 32-bit tags,
#: 32 / 44 again: the issue's limits (the default build, which calls one
#: copy from four sites, takes 46).
INLINE_REGISTERS = {"1": 36, "4": 44}


@pytest.mark.slow
def test_an_extra_inline_call_site_costs_no_more_than_measured():
    got = _measure(sorted(codesize.KERNELS), outlined=False)
    for op, limit in INLINE_SITE.items():
        assert got[op]["per_extra_site"] <= limit, (op, got[op])
    for op, e in got.items():
        for k, r in e["sites"].items():
            # Every site inlined whole: no call, no stack frame. (Four scoped
            # sites kept two calls and an 8- to 32-byte frame, NVVM's inliner
            # out of budget, until the too-small spare's link is cleared
            # before its chain is freed: docs/outline.md, "A shared chain of frees".)
            assert r["spill_bytes"] == 0, (op, k, r)
            assert r["stack_bytes"] == 0 and r["calls"] == 0, (op, k, r)
    for k, limit in INLINE_REGISTERS.items():
        # Measured 32 and 44 (34 and 45 before the index's 32-bit masks, 34
        # and 44 after them, 32 and 46 from the free page read before the
        # last look until _room_drop's 32-bit tags).
        assert got["alloc"]["sites"][k]["registers"] <= limit, got["alloc"]
    _check_register_units(got["alloc"])


#: Issue 28's register limits: one alloc site <= 36, four <= 44.
ISSUE_REGISTERS = {"1": 36, "4": 44}

#: The default, automatic mode (``outline="auto"``), measured (sm_90,
#: numba-cuda 0.30.4, CUDA 13 tools): SASS per extra site alloc 29, free 26,
#: view 66, bump 18, scoped 352-354 (its one-site kernel inline, its two- and
#: four-site kernels call scoped's new chunk and its chain of frees, which
#: release shares: docs/outline.md, "A shared chain of frees"; 696 while the
#: chain frees stayed inline); registers 1/2/4 sites alloc 34/44/48, free
#: 32/34/32, view 33/46/48, bump 40/56/52, scoped 45/64/72; since a search
#: tries the free page it read before its last look at the room index:
#: alloc 32/42/47 (29 per site), view 32/43/47, scoped 45/65/72; since the
#: arena crosses as its page count and _pick's mask moved to _settle: alloc
#: 32/43/44 (26 per site), view 32/46/43, bump 40/51/48, scoped 44/65/72;
#: since a bump group's bytes cross the claim in 32 bits, bump 40/43/44;
#: since a follower's base before the share is 0, not NULL (the claim's
#: NULL no longer sits in a register pair across the page search): bump
#: 32/42/41.
#: Since the counter stripes read the block number where they count, the
#: chain of frees reads the arena's end where it checks a link, and
#: scoped's size and new chunk's size are 32-bit (docs/outline.md,
#: "Counter stripes read where they count"): scoped 39/57/64 (44/65/72
#: before), free 32/30/32. Since scoped's chunk headers are read and
#: written a word at a time and a retried new chunk's failure is taken back
#: before the retry (docs/outline.md, "Chunk headers in words"): scoped
#: 38/59/64, 4,992/5,400/5,712 SASS (5,568/6,160/6,560 before), 240 per
#: extra site (330). Since the new chunk returns the state (the caller
#: holds nothing of its own across the call): 38/54/58.
#: Pinned: the issue's site limits, one site as inline, and the issue's
#: register limits for alloc, alloc + view + free and bump; scoped's
#: registers as measured + 2 (the issue's 36 and 44 are not met).
AUTO_SITE = {"alloc": 400, "free": 150, "view": 400, "bump": 400, "scoped": 400}
AUTO_SCOPED_REGISTERS = {"1": 40, "2": 56, "4": 60}


BOTH = """
import json, sys
from devalloc.tools import codesize
ops = sys.argv[1].split(",")
print(json.dumps({label: codesize.measure((9, 0), ops, timing=False, outline=choice)
                  for label, choice in (("auto", "auto"), ("inline", False))}))
"""


@pytest.mark.slow
def test_auto_inlines_one_site_and_calls_one_copy_for_several():
    # Both in one process: NVVM's register assignment may follow
    # PYTHONHASHSEED by a register (docs/outline.md), the same for both here.
    got = _run(BOTH, sorted(codesize.KERNELS), None)
    auto, inline = got["auto"], got["inline"]
    for op, limit in AUTO_SITE.items():
        e = auto[op]
        assert e["per_extra_site"] <= limit, (op, e)
        one, alone = e["sites"]["1"], inline[op]["sites"]["1"]
        for key in ("registers", "stack_bytes", "calls"):
            assert one[key] == alone[key], (op, key, one, alone)
        # The same code but for NVVM's ordering, which follows PYTHONHASHSEED
        # and what the process compiled before: view's one-site kernel is
        # 4,224 or 4,232 in either build (seeds 0 to 5), scoped's 5,592, or
        # 5,576 under "auto" after other kernels (docs/outline.md).
        assert abs(one["sass_instructions"] - alone["sass_instructions"]) <= 16, (op, one, alone)
        for k, r in e["sites"].items():
            assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, (op, k, r)
    for op, k in (("alloc", "2"), ("alloc", "4"), ("bump", "2"), ("bump", "4"), ("free", "4")):
        assert auto[op]["sites"][k]["calls"] >= int(k), (op, auto[op])  # one copy, called
    for k in ("2", "4"):
        # scoped's new chunk at each site, and its chain of frees (one copy:
        # release's and the new chunk's) from release and from the new chunk.
        assert auto["scoped"]["sites"][k]["calls"] == int(k) + 2, auto["scoped"]
    # free: two copies of its small body stay inline, four go out of line
    # (outline_choice.SAVING); its per-site cost is measured from 1 to 4.
    assert auto["free"]["sites"]["2"]["calls"] == 0, auto["free"]
    assert auto["alloc"]["sites"]["1"]["registers"] <= ISSUE_REGISTERS["1"], auto["alloc"]
    # Four sites: 44 registers, the issue's limit, for alloc and for alloc +
    # view + free (the out-of-line build's; 48 until the free page read
    # before the last look, 47 until _room_drop's 32-bit tags, 46 until the
    # arena crossed as its page count: docs/outline.md, "The arena as its
    # page count").
    for op in ("alloc", "view"):
        assert auto[op]["sites"]["4"]["registers"] <= ISSUE_REGISTERS["4"], auto[op]
        assert auto[op]["sites"]["1"]["registers"] <= ISSUE_REGISTERS["1"], auto[op]
    # bump: four sites 44 since a group's bytes cross the claim in 32 bits
    # (52, then 48 before), 41 since a follower's base is 0 before the share;
    # one site 32 since then (40: the claim's NULL was held across the page
    # search, docs/outline.md, "A follower's base").
    for k in ("1", "4"):
        assert auto["bump"]["sites"][k]["registers"] <= ISSUE_REGISTERS[k], auto["bump"]
    for k, limit in AUTO_SCOPED_REGISTERS.items():
        assert auto["scoped"]["sites"][k]["registers"] <= limit, auto["scoped"]

CAPPED = """
import json, sys
from devalloc.tools import codesize
print(json.dumps(codesize.measure((9, 0), ["alloc"], timing=False, outline=True,
                                  max_registers=int(sys.argv[1]))))
"""


@pytest.mark.slow
def test_four_outlined_alloc_sites_fit_the_limit_when_the_kernel_asks():
    # Out of line, four alloc sites take 48 registers unasked (the kernel's
    # values live across the later calls beside the body's); a kernel that
    # asks for issue 28's 44 (@cuda.jit(max_registers=44), ptxas
    # -maxrregcount) gets it with no spill and no stack, at the same size
    # (measured 3,568 SASS either way). The README says so to users.
    got = _run(CAPPED, [str(ISSUE_REGISTERS["4"])], True)["alloc"]["sites"]
    for k, r in got.items():
        assert r["registers"] <= ISSUE_REGISTERS["4"], (k, r)
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, (k, r)


FLOOR = """
import sys
from devalloc.tools import probes
floors = [a for s in sys.argv[1].split(",") for a in ("--register-floor", s)]
sys.exit(probes.main(["--cc", "90", "--no-paths", "--json"] + floors))
"""

#: The fewest registers each kernel fits in without spilling, by default
#: (``python -m devalloc.probes --cc 90 --no-paths --register-floor OP:SITES``,
#: 2026-11-29, PYTHONHASHSEED 0 to 3): alloc 32 / 44 at 1 / 4 sites, ptxas's
#: own picks; scoped 36 / 56 against picks of 38 / 58 (docs/outline.md,
#: "Scoped's registers: the floor"). Pinned: alloc's and scoped's one site
#: at issue 28's limits (a kernel that asks for 36 gets it with no spill),
#: scoped's four sites as measured + 2 (the issue's 44 is below the floor).
FLOORS = {"alloc:1": 36, "alloc:4": 44, "scoped:1": 36, "scoped:4": 58}


@pytest.mark.slow
def test_register_floors_are_what_the_code_needs():
    got = _run(FLOOR, sorted(FLOORS), None)["register_floor"]
    assert sorted(got) == sorted(FLOORS), got
    for key, limit in FLOORS.items():
        r = got[key]
        assert r["floor"] <= limit, (key, r)
        # The floor is a bisection's end: ptxas's own pick fits, the floor
        # fits (no spill, no stack), one register less does not.
        assert codesize.FLOOR_LOW < r["floor"] <= r["registers"], (key, r)
        assert (r["spill_below"] + r["stack_below"] > 0
                or r["registers_below"] >= r["floor"]), (key, r)
        assert abs(r["sass_at_floor"] - r["sass_instructions"]) <= 64, (key, r)


def test_lowest_fitting_bisects_and_asks_only_below_the_top():
    for first in range(16, 41):
        asked = []

        def fits(n):
            asked.append(n)
            return n >= first

        assert codesize.lowest_fitting(fits, 16, 40) == first
        assert all(16 <= n < 40 for n in asked), asked
        assert len(asked) <= 5, asked  # log2(24), rounded up
    assert codesize.lowest_fitting(lambda n: False, 30, 30) == 30  # the top is not asked


def test_register_floor_names_the_kernels_it_knows():
    with pytest.raises(ValueError, match="scoped:4"):
        codesize.register_floor("scoped", 3)
    with pytest.raises(ValueError, match="alloc:1"):
        codesize.register_floor("malloc", 1)


def _check_register_units(alloc):
    # The limits as an SM allocates registers (8 per thread: tools/occupancy.py):
    # the alloc kernels fall in the limits' units (40 and 48), so they keep as
    # many warps resident as the limits would. Measured 32/44 inline, 39/44 out
    # of line; the raw count 39 (one site out of line) misses its limit
    # (docs/outline.md).
    for k, limit in ISSUE_REGISTERS.items():
        r = alloc["sites"][k]
        assert r["allocated_registers"] <= occupancy.allocated(limit), (k, r)
        assert r["warps_per_sm"] >= occupancy.warps_per_sm(limit), (k, r)


PATHS = """
import json, sys
from devalloc.tools import paths
print(json.dumps({f: paths.measure((9, 0), frames=f, outline=sys.argv[2] == "True")
                  for f in sys.argv[1].split(",")}))
"""


def _paths(frames, outlined):
    return _run(PATHS, frames, outlined)


@pytest.mark.slow
def test_frames_from_the_ptx_walk_the_inline_paths_as_nvdisasm_does():
    # The walker's frames for kernels that call (nvdisasm -gp and the PTX's
    # .loc chains) give the same walks as nvdisasm -gi where both are right.
    got = _paths(("sass", "ptx"), outlined=False)
    assert ({k: r["instructions"] for k, r in got["ptx"].items()}
            == {k: r["instructions"] for k, r in got["sass"].items()}), got


#: The walked paths (SASS instructions executed, sm_90) out of line
#: (``paths.measure(outline=True)``, as with DEVALLOC_OUTLINE=1),
#: measured (numba-cuda 0.30, CUDA 13.5 tools): the call's argument moves,
#: CALL, RET and the callee's path. Inline (this walker alone): 148, 238,
#: 120, 141, 127, 140. All within issue 28's 10 %: alloc +5.4 % and +2.5 %,
#: free +10.0 % and +9.2 % (its NULL test inline, the body called: it was
#: +17 % and +15 % with the whole of free out of line), bump (its first try is
#: inline) -4 %, scoped (its current chunk's case is inline and calls
#: nothing) -11 % (docs/outline.md). bump 122 -> 129 since one call of
#: _claim_fast serves a group's leader and a lane alone (132 inline), and
#: 135 since bump itself is called (+2.3 %). Since the arena crosses as
#: its page count and the last bitmap word's mask is in _settle: 157, 250,
#: 129, 151, 133, 126 (inline 148, 241, 120, 141, 131, 136: +6.1 %, +3.7 %,
#: +7.5 %, +7.1 %). bump 137 since its group's bytes cross in 32 bits
#: (inline 134: +2.2 %); 136 since a follower's base is 0 before the share
#: (inline 133: +2.3 %); scoped 122 since its size is 32-bit (inline 134),
#: 105 since its chunk headers are read a word at a time (inline 115), 97
#: since its new chunk returns the state (inline 117).
OUTLINED_PATHS = {"alloc_fresh_slab": 157, "alloc_reuse": 250, "free_lone": 129,
                  "free_warp32": 151, "bump": 136, "scoped": 97}


@pytest.mark.slow
def test_outlined_walked_paths():
    got = _paths(("auto",), outlined=True)["auto"]
    for name, pinned in OUTLINED_PATHS.items():
        r = got[name]
        assert pinned // 2 <= r["instructions"] <= pinned + max(8, pinned // 20), (name, r)
        assert not any(op.startswith("MEMBAR.SC") for op in r["ordering"]), (name, r)
    # The walks went into the out-of-line bodies (functions only they inline).
    assert "slab._reserve" in got["alloc_fresh_slab"]["by_function"], got["alloc_fresh_slab"]
    assert "slab._free_small" in got["free_lone"]["by_function"], got["free_lone"]
    # bump is called whole; its first try on the chunk is inline in the
    # body, and the walk went there (the claim's loop is not on the path).
    assert "bumpalloc._claim_fast" in got["bump"]["by_function"], got["bump"]
    assert got["bump"]["by_function"].get("bumpalloc._claim", 0) <= 1, got["bump"]
    # scoped's case of a chunk with room is inline: its path calls nothing.
    assert "scope._next_chunk" not in got["scoped"]["by_function"], got["scoped"]


CHOICE = """
import json, sys
from numba import cuda, types
import devalloc
from devalloc.ctx import ctx_type_for
from devalloc.tools import aot

def k(ctx, n, out):
    i = cuda.grid(1)
    off = devalloc.alloc(ctx, out[i])
    devalloc.free(ctx, off)

# A ctx of plain arrays (no PagedMeta: no page, no choice in its type).
plain = types.NamedTuple([types.Array(types.uint8, 1, "C"), types.Array(types.int64, 1, "C")],
                         devalloc.Ctx)
ctxs = {"outline": ctx_type_for(outline=True), "inline": ctx_type_for(outline=False),
        "auto": ctx_type_for(outline="auto"), "default": devalloc.ctx_type, "plain": plain}
calls = {}
for label in sys.argv[1].split(","):
    ptx, _ = aot.compile_ptx(k, (ctxs[label], types.int64, types.int64[::1]), cc=(9, 0))
    calls[label] = aot.assemble(ptx, (9, 0)).sass_calls
print(json.dumps(calls))
"""


@pytest.mark.slow
def test_the_ctx_type_chooses_outline_per_kernel():
    # One kernel (an alloc and a free site), one process: compiled for a ctx
    # typed outline=True it calls the bodies (alloc's, free's past its NULL
    # test); for the default ctx and outline=False it calls nothing; a ctx of
    # plain arrays follows the process default.
    got = _run(CHOICE, ("outline", "inline", "auto", "default", "plain"), None)
    assert got["outline"] >= 2, got
    # (auto, the default: one alloc and one free site, both inline)
    assert got["inline"] == got["auto"] == got["default"] == got["plain"] == 0, got
    got = _run(CHOICE, ("plain", "default", "inline"), None, default=True)
    assert got["plain"] >= 2 and got["default"] >= 2, got
    assert got["inline"] == 0, got


DEVICE_FUNCTION = """
import json, sys
from numba import cuda, types
import devalloc
from devalloc.ctx import ctx_type_for
from devalloc.tools import aot

@cuda.jit(device=True)
def g(ctx, n):
    return devalloc.alloc(ctx, n)  # one site, in a user's device function

def once(ctx, n, out):
    i = cuda.grid(1)
    out[i] = g(ctx, out[i])

def twice(ctx, n, out):
    i = cuda.grid(1)
    out[i] = g(ctx, out[i]) ^ g(ctx, out[i] + n)

rows = {}
for label, k in (("once", once), ("twice", twice)):
    for choice in ("auto", False):
        sig = (ctx_type_for(outline=choice), types.int64, types.int64[::1])
        ptx, _ = aot.compile_ptx(k, sig, cc=(9, 0))
        r = aot.assemble(ptx, (9, 0))
        rows[f"{label} {choice}"] = {"sass": r.sass_instructions, "calls": r.sass_calls}
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_auto_counts_a_site_in_a_device_function_once_per_call_of_it():
    # NVVM inlines g at each call: two calls of g are two copies of alloc,
    # so "auto" calls one out-of-line copy (measured 3,544 SASS against
    # 6,984 inline); g called once is inlined whole, as with outline=False.
    got = _run(DEVICE_FUNCTION, ("-",), None)
    assert got["once auto"] == got["once False"], got
    assert got["once auto"]["calls"] == 0, got
    assert got["twice auto"]["calls"] >= 2 and got["twice False"]["calls"] == 0, got
    assert got["twice auto"]["sass"] < got["once auto"]["sass"] + 400, got
