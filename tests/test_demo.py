"""The main command, ``python -m devalloc demo``, end to end.

The JSON run is a subprocess started outside the repository with
NUMBA_ENABLE_CUDASIM removed, so the command must choose the target itself
(before numba is imported) and find the examples from devalloc's own path.
The text reports of all examples run in-process, on the simulator the
suite selected.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import __main__ as cli

KEYS = {"example", "target", "threads", "seed", "answer_name", "answer", "stderr",
        "expected", "expected_label", "identical", "heap_peak_bytes", "worst_case_bytes",
        "saved_bytes", "saved_fraction", "usage", "snapshot", "details", "seconds",
        "methods"}
USAGE_KEYS = {"capacity", "in_use", "reserved", "peak", "allocs", "frees", "failed",
              "invalid_frees", "live_blocks", "classes", "bump_allocs", "bump_bytes",
              "scoped_bytes", "scope_misuse", "large_blocks", "scoped_chunks", "profile",
              "page", "empty_requests", "scoped_chunks_taken"}


def run_cli(args, cwd, extra_env=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "devalloc", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=timeout)


def test_demo_json_end_to_end_from_outside_the_repository(tmp_path):
    proc = run_cli(["demo", "--json", "--threads", "96", "--seed", "3"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads(proc.stdout)
    assert set(s) == KEYS and set(s["usage"]) == USAGE_KEYS
    assert s["example"] == cli.DEFAULT_EXAMPLE
    assert s["target"] in ("gpu", "simulator")
    assert (s["threads"], s["seed"]) == (96, 3)
    assert s["identical"] is True
    rows = {m["name"]: m for m in s["methods"]}  # the comparison table's rows (issue 30)
    assert {"heap", "count + scan + exact", "CUDA malloc (NRT)", "worst case"} <= set(rows)
    assert rows["heap"]["identical"] and rows["count + scan + exact"]["identical"]
    assert rows["heap"]["peak_bytes"] == s["heap_peak_bytes"]
    u = s["usage"]
    assert s["heap_peak_bytes"] == u["peak"] > 0
    assert s["worst_case_bytes"] == 96 * 1024 * 4  # ragged_walks: MAX_STEPS int32 per thread
    assert s["saved_bytes"] == s["worst_case_bytes"] - s["heap_peak_bytes"]
    assert s["saved_fraction"] == pytest.approx(s["saved_bytes"] / s["worst_case_bytes"])
    assert u["in_use"] == 0 and u["live_blocks"] == 0 and u["classes"] == {}
    assert u["allocs"] == u["frees"] == 96 and u["failed"] == 0
    # Before the gather every walk's block was live.
    snap = s["snapshot"]["usage"]
    assert snap["live_blocks"] == 96 and snap["peak"] == u["peak"]
    # Each walk's block in a size class, or whole pages above half a page
    # (the demo's heap has page="auto": 1 KiB pages at 96 threads).
    assert s["usage"]["page"] == 1024
    assert sum(c["blocks_live"] for c in snap["classes"].values()) + snap["large_blocks"] == 96
    assert s["details"]["items"] == pytest.approx(s["answer"] * 96)
    assert s["answer"] > 0 and s["stderr"] > 0 and s["expected"] == 48.0
    # Progress: a line per phase on stderr, saying where it ran.
    assert "done in" in proc.stderr and "gather:" in proc.stderr
    if s["target"] == "simulator":
        assert "CUDA simulator" in proc.stderr


def test_importing_the_command_imports_no_numba(tmp_path):
    code = "import sys, devalloc.__main__; print('numba' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.parametrize("args", [["demo", "--threads", "0"], ["demo", "--example", "nope"],
                                  ["demo", "--seed", "-1"], []])
def test_usage_errors_exit_2(args, tmp_path):
    proc = run_cli(args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr


def test_plot_without_matplotlib_says_what_to_install(tmp_path):
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    proc = run_cli(["demo", "--plot", str(tmp_path / "x.png")], cwd=tmp_path,
                   extra_env={"PYTHONPATH": str(fake.parent)}, timeout=120)
    assert proc.returncode == 2
    assert "pip install 'devalloc[plot]'" in proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo.png"
    proc = run_cli(["demo", "--threads", "64", "--plot", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plots_footprint_has_every_twin_and_its_occupancy_large_blocks():
    from devalloc import _examples
    from devalloc.tools import plot

    r = _examples.load("step_scratch").run(threads=32, seed=5)
    s = {"worst_case_bytes": r.worst_case_bytes, "heap_peak_bytes": r.heap_peak_bytes}
    bars = {label.replace("\n", " "): v for label, v, _ in plot.footprint_bars(s, r)}
    assert bars["worst-case preallocation"] == r.worst_case_bytes
    assert bars["heap peak (pages reserved)"] == r.heap_peak_bytes
    assert "heap peak, alloc/free" in bars and bars["count + scan + exact"] > 0
    assert "CUDA malloc (NRT)" not in bars  # needs a GPU: no figure on the simulator
    heap = devalloc.Heap(1 << 20, page=1024)
    out = cuda.to_device(np.zeros(1, np.int64))
    _alloc_one[1, 1](heap.ctx, 3000, out)  # three pages
    _alloc_one[1, 1](heap.ctx, 100, out)   # a slab
    u = heap.usage()
    assert u.large_blocks == 1 and plot.large_pages_bytes(u) == 3 * 1024


@cuda.jit
def _alloc_one(ctx, n, out):
    out[0] = devalloc.alloc(ctx, n)


@pytest.mark.parametrize("example", sorted(cli.EXAMPLES))
def test_text_report_of_every_example(example, capsys):
    assert cli.main(["demo", "--example", example, "--threads", "32", "--seed", "5"]) == 0
    out = capsys.readouterr()
    text = out.out
    assert text.startswith(f"devalloc demo: {example}, 32 threads, seed 5, on ")
    assert "identical to the worst-case version: yes" in text
    assert "heap usage at the end\n" in text and "  invalid frees" in text
    assert "worst-case preallocation" in text
    assert "memory saved:" in text or "more than the worst case" in text
    assert "done in" in out.err


@pytest.mark.parametrize("option, value, says", [
    ("--threads", "abc", "must be a positive integer, got 'abc'"),
    ("--threads", "2.5", "must be a positive integer, got '2.5'"),
    ("--seed", "x", "must be an integer in [0, 2**64), got 'x'"),
])
def test_a_bad_number_is_named_in_words_not_by_the_parsers_function(option, value, says, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {says}" in err
    assert "invalid" not in err and "_positive_int" not in err and "_seed" not in err


PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("where, written", [(".", "ragged_walks.png"), ("fig", "fig.png")])
def test_plot_names_the_file_it_really_wrote(where, written, tmp_path, capsys):
    # A folder gets <example>.png in it; a name without an extension gets
    # .png (what matplotlib would append without saying so).
    pytest.importorskip("matplotlib")
    assert cli.main(["demo", "--threads", "16", "--plot", str(tmp_path / where)]) == 0
    path = tmp_path / written
    assert path.read_bytes()[:8] == PNG
    assert f"plot written to {path}\n" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == [written]


@pytest.mark.parametrize("where, says", [
    ("missing/x.png", "the folder {tmp}/missing does not exist"),
    ("x.nope", "matplotlib cannot write .nope files (it writes "),
])
def test_a_plot_path_that_cannot_be_written_is_refused_before_the_simulation(
        where, says, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")

    def no_simulation(*args, **kwargs):
        raise AssertionError("the simulation ran")

    monkeypatch.setattr(cli, "import_example", no_simulation)
    assert cli.main(["demo", "--plot", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("devalloc demo: --plot ")
    assert says.format(tmp=tmp_path) in err


def test_the_demo_offers_every_example_module():
    # README's example table lists them all; the demo must run them all.
    from devalloc import _examples

    folder = Path(_examples.package().__path__[0])
    modules = {p.stem for p in folder.glob("*.py") if not p.name.startswith("_")}
    assert set(cli.EXAMPLES) == modules


def test_a_missing_example_module_has_its_own_exit_status(monkeypatch, capsys):
    # 1 means "the heap version and its twin differ"; a missing module is 3.
    monkeypatch.setitem(cli.EXAMPLES, "ghost", "an example that is not installed")
    assert cli.main(["demo", "--example", "ghost"]) == cli.EXIT_NOT_INSTALLED == 3
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines()[-1].startswith(
        "devalloc demo: the example ghost is not installed with this devalloc")
    assert cli.main(["demo", "--example", "ghost", "--json"]) == 3
    s = json.loads(capsys.readouterr().out)
    assert s["example"] == "ghost" and "not installed" in s["error"]
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "1 they differ;" in help_text and "3 the example is not installed" in help_text


@pytest.mark.parametrize("example", sorted(cli.EXAMPLES))
def test_one_thread_has_no_error_bar_rather_than_a_zero_one(example, capsys):
    # A standard error is undefined for one sample: "n/a", never "+- 0.000".
    assert cli.main(["demo", "--example", example, "--threads", "1", "--seed", "2"]) == 0
    text = capsys.readouterr().out
    assert "+- n/a" in text
    assert not re.search(r"\+- 0\.0+\b", text), text


def test_a_long_simulator_run_is_announced_with_an_estimate_and_shows_bars(monkeypatch, capsys):
    # As if every thread took the simulator 10 s: 64 threads are 11 minutes,
    # and 6 threads fit in the minute. The bars appear at once (BAR_DELAY 0).
    from devalloc.examples import ragged_walks

    monkeypatch.setattr(ragged_walks, "SIM_SECONDS_PER_THREAD", 10.0)
    monkeypatch.setattr(cli, "BAR_DELAY", 0)
    assert cli.main(["demo", "--threads", "64", "--seed", "4"]) == 0
    err = capsys.readouterr().err
    if "CUDA simulator" not in err:
        pytest.skip("ran on a GPU: no estimate, no bars")
    assert ("warning: 64 threads of ragged_walks take about 11 min on the CUDA simulator "
            "(10 s per thread, measured), --threads 6 about a minute") in err
    for bar in ("RNG states", "walk_heap", "walk_worst_case", "gather_worst_case"):
        assert f"{bar}: " in err and " threads" in err


def test_short_runs_get_no_estimate(capsys):
    assert cli.main(["demo", "--threads", "8", "--seed", "4"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_every_example_has_a_measured_simulator_rate():
    from devalloc import _examples

    for name in cli.EXAMPLES:
        rate = _examples.load(name).SIM_SECONDS_PER_THREAD
        assert 1e-5 < rate < 10, name
        # 10,000,000 threads are far more than a minute: the demo warns.
        assert cli.slow_warning(name, rate, 10_000_000).startswith("warning: 10,000,000 threads")
