"""The order of the tests: the longest work first, spread over pytest-xdist's workers.

pytest-xdist's worksteal scheduler (``--dist worksteal`` in pyproject.toml)
first sends worker ``i`` the next ``left // (workers - i)`` tests of the
collection, in order; a worker that runs out takes the last half of the
longest queue. A long test that starts last keeps one core busy while the
other idles, so :func:`plan` orders the collection (every worker collects,
and orders, the same tests the same way) so that

* the known long work (:data:`SECONDS`, :data:`FIXTURE_SECONDS`) is spread
  over the workers' first shares, longest first, each long piece to the
  worker with the least long work so far (longest processing time first);
* the short tests follow in collection order, so that what a worker steals
  at the end is short;
* the tests that use one module-scoped fixture (a compile in a
  subprocess, a venv, a cluster) stay together, so that the fixture is set
  up once rather than once per stretch;
* tests that compile some of a fixture's kernels again follow that
  fixture's tests (:data:`AFTER_FIXTURE`: the session's PTX cache serves them);
* tests marked ``after_all`` (they read what the others computed) come last.

The figures are seconds measured with ``--durations`` on the project's
2-core machine: hints for the order only. A stale or missing figure makes
the spread less even, never a test wrong (every test runs once, whatever the
order; tests/test_tiers.py checks it), and a node id that no longer exists
is reported by tests/test_tiers.py.
"""

from collections import namedtuple

#: Seconds of the long tests (node id -> seconds, measured with --durations;
#: the call, or the setup where it computes a module's fixture alone).
SECONDS = {
    # a page per heap (tests/test_page_compile.py): compiles in a subprocess
    "tests/test_page_compile.py::test_every_operation_compiles_alike_for_every_page": 30,
    "tests/test_page_compile.py::test_alloc_view_free_compiles_alike_on_1_kib_pages": 8,
    # the explorer (tests/test_explorer.py): whole explorations
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[free_vs_alloc_long]": 70,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[group_retire]": 60,
    # 174,501 executions since a search looks at the room index before each
    # free page it tries (76,732 before): 544 s beside other work, 2026-11-28.
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[class_change_long]": 300,
    "tests/test_explorer.py::test_group_bugs_need_group_scenarios[alloc_small_overserve]": 46,
    "tests/test_explorer.py::test_group_bugs_need_group_scenarios[free_small_leader_bit_only]": 40,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[reuse_race]": 38,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[group_two_words]": 36,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[large_vs_slab]": 32,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[group_reuse]": 24,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[group_partial]": 24,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[bump_race]": 22,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation"
    "[slab_vs_large_one_page]": 18,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation"
    "[realloc_vs_alloc_write]": 15,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation"
    "[realloc_in_place_vs_free]": 13,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[pct_mixed_3t-2]": 12,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[scope_release_vs_reuse-3]": 10,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[pct_mixed_3t-3]": 9,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[realloc_vs_free]": 8,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[scope_grow_vs_alloc-3]": 8,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[settle_lost-2]": 8,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[pct_large_4t-2]": 7,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[pct_slab_4t-3]": 7,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[scope_grow_vs_alloc-2]": 7,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[pct_large_4t-3]": 6,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[pct_slab_4t-2]": 6,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[large_vs_large]": 6,
    "tests/test_explorer.py::test_exhaustive_exploration_finds_no_violation[free_vs_alloc]": 6,
    # the device scan of 16K items on the simulator (quick_switching)
    "tests/test_methods.py::test_the_device_scan_is_numpys_cumsum[16256]": 12,
    "tests/test_methods.py::test_the_device_scan_is_numpys_cumsum[16255]": 9,
    # the fast tier's longest
    "tests/test_gpucheck.py::test_simulate_runs_every_part_and_writes_the_report": 34,
    "tests/test_explorer.py::test_pct_schedules_find_no_violation[scope_release_vs_reuse-2]": 17,
    "tests/test_explorer.py::test_settle_lost_schedules_never_return_null_with_room": 12,
    "tests/test_compile.py::test_alloc_and_free_compile_for_sm90_within_budget": 16,
    "tests/test_porting_compile.py::test_array_and_usable_size_compile_for_sm90_within_budget": 13,
    "tests/test_host.py::test_first_kernel_using_a_device_name_compiles_for_the_gpu[alloc]": 11,
    "tests/test_host.py::test_first_kernel_using_a_device_name_compiles_for_the_gpu[free]": 8,
    "tests/test_tiers.py::test_the_full_tier_is_every_test": 11,
    "tests/test_methods.py::test_every_twin_gives_the_worst_cases_answers_bit_for_bit"
    "[step_scratch]": 10,
    "tests/test_distributed.py::test_shards_joined_give_the_answer_of_one_run[step_scratch1]": 10,
    "tests/test_distributed.py::test_shards_joined_give_the_answer_of_one_run[step_scratch0]": 6,
    "tests/test_distributed.py::test_demo_with_workers_gives_the_json_of_one_process": 7,
    "tests/test_distributed.py::test_sharded_run_on_the_cluster_gives_the_answer_of_one_process": 5,
    "tests/test_typing.py::test_public_host_modules_type_check": 8,
    "tests/test_typing.py::test_a_users_program_gets_devallocs_types": 6,
    "tests/test_examples.py::test_examples_stay_inside_their_blocks_on_a_debug_heap"
    "[step_scratch]": 7,
    "tests/test_methods.py::test_the_sweeps_model_of_the_heap_peak_is_the_simulators_peak": 7,
    "tests/test_demo.py::test_plot_draws_a_png": 7,
    "tests/test_observe.py::test_demo_profile_prints_and_reports_the_counters": 7,
    "tests/test_heap_sim.py::test_fill_reset_fill_serves_capacity[16B]": 6,
    "tests/test_scratch.py::test_step_scratch_example_matches_and_costs_fewer_atomics": 6,
    "tests/test_bench.py::test_gpu_throughput_measures_on_the_simulator_with_events_stubbed": 5,
    "tests/test_observe.py::test_replay_command": 5,
    "tests/test_demo.py::test_text_report_of_every_example[step_scratch]": 5,
    "tests/test_compile.py::test_a_kernel_is_compiled_once_per_ptx_cache": 5,
    # compiles for sm_90 in a subprocess
    "tests/test_bench.py::test_gpu_throughput_kernels_compile_for_sm90": 12,
    "tests/test_gpucheck.py::test_stress_kernel_compiles_for_sm90_without_spills": 12,
    "tests/test_methods.py::test_nrt_twins_and_the_scan_compile_for_sm90": 6,
    # per call site and walked paths in both outline modes (issue 28), in subprocesses
    "tests/test_codesize.py::test_an_extra_call_site_is_a_call_when_outlined": 19,
    "tests/test_codesize.py::test_frames_from_the_ptx_walk_the_inline_paths_as_nvdisasm_does": 18,
    "tests/test_codesize.py::test_outlined_walked_paths": 15,
    "tests/test_codesize.py::test_an_extra_inline_call_site_costs_no_more_than_measured": 9,
    "tests/test_codesize.py::test_four_outlined_alloc_sites_fit_the_limit_when_the_kernel_asks": 30,
    "tests/test_codesize.py::test_the_ctx_type_chooses_outline_per_kernel": 15,
    "tests/test_codesize.py::test_auto_inlines_one_site_and_calls_one_copy_for_several": 110,
    "tests/test_codesize.py::test_auto_counts_a_site_in_a_device_function_once_per_call_of_it": 25,
}

#: Seconds to set up a module-scoped fixture ((module, fixture) -> seconds):
#: the tests that use it are one piece of work, together.
FIXTURE_SECONDS = {
    ("tests/test_compile.py", "probe_result"): 100,  # every probe kernel, sm_75 and sm_90
    ("tests/test_porting_compile.py", "figures"): 90,  # every porting call, every heap
    ("tests/test_cu12.py", "cu12_result"): 65,  # the probes with CUDA 12 (venv made before)
    ("tests/test_examples.py", "compiled"): 21,  # every example kernel for sm_90
    ("tests/test_wheel_examples.py", "installed"): 10,  # wheel and venv
    ("tests/test_tiers.py", "tiers"): 14,  # two collections in subprocesses
    ("tests/test_packaging.py", "wheel"): 7,  # a wheel built
    ("tests/test_distributed.py", "client"): 3,  # a local Dask cluster
}

#: Tests that compile some of a fixture's kernels again ((module, fixture)):
#: run after the fixture's tests, on the same worker, they read the kernels
#: from the session's PTX cache ($DEVALLOC_PTX_CACHE) instead of compiling
#: them at the same time on the other worker.
AFTER_FIXTURE = {
    "tests/test_compile.py::test_alloc_and_free_compile_for_sm90_within_budget":
        ("tests/test_compile.py", "probe_result"),
    "tests/test_porting_compile.py::test_array_and_usable_size_compile_for_sm90_within_budget":
        ("tests/test_porting_compile.py", "figures"),
}

#: Pieces of work at least this long are spread over the workers first.
LONG = 5.0
#: Seconds assumed for a test not in SECONDS.
DEFAULT = 0.3

#: One collected test: its node id, its seconds, the key of the module-scoped
#: fixture it shares with others ("" if none), whether it must come last, and
#: whether it comes after the tests that use its group's fixture.
Entry = namedtuple("Entry", "nodeid seconds group last after", defaults=(False,))


def first_shares(n, workers):
    """Return how many of ``n`` tests pytest-xdist's worksteal first sends each worker."""
    shares, left = [], n
    for i in range(workers):
        shares.append(left // (workers - i))
        left -= shares[-1]
    return shares


def plan(entries, workers, fixture_seconds=None):
    """Return the indices of ``entries`` in the order to run them on ``workers`` workers.

    ``fixture_seconds``: group key -> seconds of the group's fixture (added
    once to the group's piece). Deterministic: the same entries give the
    same order in every worker.
    """
    fixture_seconds = fixture_seconds or {}
    last = [i for i, e in enumerate(entries) if e.last]
    pieces = {}  # key -> indices, in collection order
    for i, e in enumerate(entries):
        if not e.last:
            pieces.setdefault(e.group or "test:" + e.nodeid, []).append(i)
    for idx in pieces.values():
        idx.sort(key=lambda i: entries[i].after)  # stable: collection order otherwise
    seconds = {k: sum(entries[i].seconds for i in idx) + fixture_seconds.get(k, 0)
               for k, idx in pieces.items()}
    long_ = sorted((k for k in pieces if seconds[k] >= LONG), key=lambda k: (-seconds[k], k))
    lanes, load = [[] for _ in range(workers)], [0.0] * workers
    for k in long_:  # longest processing time first
        j = min(range(workers), key=lambda j: (load[j], j))
        lanes[j] += pieces[k]
        load[j] += seconds[k]
    taken = {i for lane in lanes for i in lane}
    short = [i for i, e in enumerate(entries) if not e.last and i not in taken]
    shares = first_shares(len(entries), workers)
    order, at = [], 0
    for j, lane in enumerate(lanes):
        need = len(short) - at if j == workers - 1 else max(0, shares[j] - len(lane))
        order += lane + short[at:at + need]
        at += need
    return order + last


def _group(item):
    # The first (by name) module- or class-scoped fixture the test uses, as
    # "module::fixture"; "" when it uses none.
    module = item.nodeid.split("::")[0]
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    shared = sorted(name for name, fd in defs.items()
                    if fd and fd[-1].scope in ("module", "class"))
    return f"{module}::{shared[0]}" if shared else ""


def order(items, workers):
    """Reorder pytest ``items`` in place for ``workers`` workers (see :func:`plan`)."""
    entries = []
    for item in items:
        after = AFTER_FIXTURE.get(item.nodeid)
        entries.append(Entry(item.nodeid, SECONDS.get(item.nodeid, DEFAULT),
                             "::".join(after) if after else _group(item),
                             item.get_closest_marker("after_all") is not None, bool(after)))
    fixtures = {f"{module}::{name}": s for (module, name), s in FIXTURE_SECONDS.items()}
    items[:] = [items[i] for i in plan(entries, max(1, workers), fixtures)]
