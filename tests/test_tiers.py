"""The two test tiers: the fast one drops no subject, the full one drops nothing.

``python -m pytest`` runs the fast tier (every test not marked slow);
``python -m pytest --full`` runs every test (README, "Tests"; docs/development.md, "Test tiers").
Here both are collected in a subprocess, as those commands collect them, and
checked: the fast tier keeps at least one test of every ``tests/test_*.py``
module found on disk (so a new module is covered without a list to edit),
and every kind of check listed in :data:`FAST_KINDS`; the full tier is every
test, the fast tier's included.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import run_order
from conftest import session_cached

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: Kind of check -> node ids of tests of that kind that the fast tier must
#: run (issue 27: every kind of check is touched by the README's command).
FAST_KINDS = {
    "each public device function on the simulator: alloc, free, view": [
        "tests/test_heap_sim.py::test_free_everything_then_fill_again",
        "tests/test_heap_sim.py::test_view_types_and_bounds",
    ],
    "each public device function on the simulator: bump, mark, scoped, release": [
        "tests/test_scratch.py::test_many_threads_interleave_bump_scoped_and_slab",
        "tests/test_scratch.py::test_nested_scopes_verify_and_return_every_chunk",
    ],
    "a compile-and-budget check for sm_90 (NVVM, ptxas)": [
        "tests/test_compile.py::test_alloc_and_free_compile_for_sm90_within_budget",
    ],
    "an exhaustive two-thread exploration of one scenario": [
        "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[slab_same_word]",
    ],
    "PCT seeds": [
        "tests/test_explorer.py::test_pct_schedules_find_no_violation[scope_release_vs_reuse-2]",
    ],
    "a broken variant caught by the explorer": [
        "tests/test_explorer.py::test_exhaustive_exploration_catches_broken_variant"
        "[free_release_first]",
    ],
    "the demo": [
        "tests/test_demo.py::test_demo_json_end_to_end_from_outside_the_repository",
    ],
    "the misuse errors": [
        "tests/test_misuse.py::test_a_heap_given_to_a_kernel_says_to_pass_heap_ctx",
        "tests/test_misuse.py::test_run_refuses_a_ctx_it_cannot_count",
    ],
    "the simulator's fast launches": [
        "tests/test_sim_launch.py::test_device_modules_see_the_simulated_cuda_during_a_launch_only",
    ],
}

#: Tests in the suite when the tiers were made (issue 27): the full tier may
#: only grow.
TESTS_BEFORE_TIERS = 577


def collect(*options):
    """Return the node ids ``python -m pytest OPTIONS`` would run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
         "-p", "no:cacheprovider", *options],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def tiers():
    return session_cached("tiers", lambda: (collect(), collect("--full")))


def test_the_fast_tier_keeps_a_test_of_every_module(tiers):
    fast, full = tiers
    modules = sorted(f"tests/{p.name}" for p in TESTS.glob("test_*.py"))
    assert len(modules) > 20
    lacking = [m for m in modules if not any(n.startswith(m + "::") for n in fast)]
    assert lacking == [], f"no test of these modules in the fast tier: {lacking}"
    # ... and no module is only in the fast tier's collection by accident.
    assert {n.split("::")[0] for n in full} == set(modules)


@pytest.mark.parametrize("kind", sorted(FAST_KINDS))
def test_the_fast_tier_runs_every_kind_of_check(tiers, kind):
    fast, full = tiers
    for nodeid in FAST_KINDS[kind]:
        assert nodeid in full, f"{nodeid} is gone (renamed?): update FAST_KINDS"
        assert nodeid in fast, f"{kind}: {nodeid} is not in the fast tier"


def test_the_full_tier_is_every_test(tiers):
    fast, full = tiers
    assert len(set(full)) == len(full) >= TESTS_BEFORE_TIERS
    assert set(fast) < set(full)
    # -m "slow or not slow" is the same full tier; .ci/run's two commands,
    # the fast tier and -m slow, run every test of it once.
    assert collect("-m", "slow or not slow") == full
    slow = collect("-m", "slow")
    assert sorted(fast + slow) == sorted(full)


def test_naming_a_slow_test_runs_it():
    slow = "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[reuse_race]"
    assert collect(slow) == [slow]


# ------------------------------------------------- the order (tests/run_order.py)


def test_the_order_spreads_long_work_first_and_keeps_every_test():
    E = run_order.Entry
    entries = ([E(f"m.py::short{i}", 0.1, "", False) for i in range(10)]
               + [E("m.py::after", 0.1, "", True)]
               + [E(f"c.py::uses_fixture{i}", 1.0, "c.py::fx", False) for i in range(3)]
               + [E(f"m.py::long{s}", s, "", False) for s in (30, 20, 10, 6)])
    for workers in (1, 2, 3):
        got = run_order.plan(entries, workers, {"c.py::fx": 40})
        assert sorted(got) == list(range(len(entries)))  # every test once
        assert got == run_order.plan(entries, workers, {"c.py::fx": 40})  # the same every time
        names = [entries[i].nodeid for i in got]
        assert names[-1] == "m.py::after"
        fixture = [k for k, n in enumerate(names) if n.startswith("c.py::")]
        assert fixture == list(range(fixture[0], fixture[0] + 3))  # together, in their order
        # What each worker gets first: its long pieces, longest first, then short tests.
        at = 0
        for share in run_order.first_shares(len(entries), workers):
            first = names[at:at + share]
            at += share
            kinds = ["short" if n.startswith(("m.py::short", "m.py::after")) else "long"
                     for n in first]
            assert kinds == sorted(kinds), first  # "long" < "short": no long after a short
    two = [entries[i].nodeid for i in run_order.plan(entries, 2, {"c.py::fx": 40})]
    shares = run_order.first_shares(len(entries), 2)
    # Longest processing time first: the fixture's tests (43 s) to the first
    # worker, long30 to the second, long20 to the second (30 < 43), long10 to
    # the first (50 > 43), long6 to the second (50 < 53).
    assert shares == [9, 9]
    assert two[:9] == [f"c.py::uses_fixture{i}" for i in range(3)] + ["m.py::long10"] + [
        f"m.py::short{i}" for i in range(5)]
    assert two[9:] == ["m.py::long30", "m.py::long20", "m.py::long6"] + [
        f"m.py::short{i}" for i in range(5, 10)] + ["m.py::after"]


def test_first_shares_are_what_pytest_xdist_worksteal_sends():
    assert run_order.first_shares(838, 2) == [419, 419]
    assert run_order.first_shares(727, 2) == [363, 364]
    assert run_order.first_shares(10, 3) == [3, 3, 4]
    assert sum(run_order.first_shares(111, 4)) == 111


def test_the_orders_figures_name_tests_and_fixtures_that_exist(tiers):
    fast, full = tiers
    stale = sorted(set(run_order.SECONDS) - set(full))
    assert stale == [], f"tests/run_order.py names tests that are gone: {stale}"
    stale = sorted(set(run_order.AFTER_FIXTURE) - set(full))
    assert stale == [], f"tests/run_order.py names tests that are gone: {stale}"
    for module, fixture in [*run_order.FIXTURE_SECONDS, *run_order.AFTER_FIXTURE.values()]:
        assert f"def {fixture}(" in (ROOT / module).read_text(), (module, fixture)


def test_a_test_that_compiles_a_fixtures_kernels_again_follows_the_fixtures_tests():
    E = run_order.Entry
    entries = [E("c.py::again", 10, "c.py::fx", False, True),
               *(E(f"c.py::uses{i}", 1, "c.py::fx", False) for i in range(2)),
               E("m.py::short", 0.1, "", False)]
    names = [entries[i].nodeid for i in run_order.plan(entries, 2, {"c.py::fx": 50})]
    assert names == ["c.py::uses0", "c.py::uses1", "c.py::again", "m.py::short"]
