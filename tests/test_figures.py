"""The figures the docs quote are the code's, and the GPU report's.

``docs/figures.json`` is written by ``bench/figures.py`` (the examples at
256 threads, seed 1, on the simulator). The fast tier checks that README.md
and docs/porting.md quote what the file holds, and that porting.md's
register table is what ``tests/test_porting_compile.py`` pins; the full
tier runs the script and checks that the file holds what the code gives.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_porting_compile import MEASURED

ROOT = Path(__file__).resolve().parents[1]
FIGURES = json.loads((ROOT / "docs" / "figures.json").read_text())
#: Examples whose heap peak does not depend on the simulator's interleaving.
EXACT = ("ragged_walks", "particle_transport", "barrier_option")


def _b(n):
    return f"{n:,} B"


def test_the_porting_guide_quotes_the_examples_figures():
    doc = (ROOT / "docs" / "porting.md").read_text()
    doc = re.sub(r"\s+", " ", doc)
    for name in ("ragged_walks", "particle_transport"):
        f = FIGURES[name]
        assert f"{_b(f['heap_peak_bytes'])} against {_b(f['worst_case_bytes'])}" in doc, name
        assert f["identical"], name
    tpv = FIGURES["two_pass_variance"]
    assert f"1,024 to 2,048 B (the simulator's interleaving decides) against " \
           f"{_b(tpv['worst_case_bytes'])}" in doc
    assert 1024 <= tpv["heap_peak_bytes"] <= 2048


def test_the_readme_quotes_the_examples_figures():
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text())
    for name in EXACT:
        f = FIGURES[name]
        assert f"{_b(f['heap_peak_bytes'])} vs {_b(f['worst_case_bytes'])}" in readme, name


LABELS = {"array": "`array` + `free_array`", "view_shape": "`view` with a shape",
          "calloc": "`calloc`", "realloc": "`realloc`", "usable_size": "`usable_size`",
          "alloc_aligned": "`alloc_aligned`", "carve": "`alloc` + two `carve`s + `free`",
          "realloc_carved": "`realloc_carved`",
          "array_record": "`array` of records + `free_array`"}


def test_the_porting_guides_register_table_is_what_the_compile_tests_pin():
    doc = (ROOT / "docs" / "porting.md").read_text()
    for call, figures in MEASURED.items():
        row = f"| {LABELS[call]} | " + " | ".join(str(r) for r in figures) + " |"
        assert row in doc, row


def test_the_check_lets_a_peak_move_by_the_interleaving_and_nothing_else(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import figures

    old = {"x": {"heap_peak_bytes": 3072, "worst_case_bytes": 10, "identical": True}}
    assert figures.differences(old, {"x": {"heap_peak_bytes": 4096, "worst_case_bytes": 10,
                                           "identical": True}}) == []
    said = figures.differences(old, {"x": {"heap_peak_bytes": 7000, "worst_case_bytes": 11,
                                           "identical": False}})
    assert [line.split(":")[0] for line in said] == [
        "x.heap_peak_bytes", "x.worst_case_bytes", "x.identical"]


@pytest.mark.slow
def test_the_figures_file_holds_what_the_examples_give():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "figures.py"), "--check"],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _report_rows(text, section):
    """Return the rows of the first table under ``## section`` of a GPU report, as cell lists."""
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in part.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]
            if not set(line) <= set("|-: ")]


def test_the_readmes_gpu_figures_are_the_linked_reports():
    readme = (ROOT / "README.md").read_text()
    link = re.search(r"\((bench/results/gpu-[^)]+\.md)\)", readme).group(1)
    report = (ROOT / link).read_text()
    flat = re.sub(r"\s+", " ", readme)
    # the headline: the thread-by-thread 16 B alloc + free pair against the floor, and NRT's
    row = next(r for r in _report_rows(report, "throughput") if r[0] == "thread" and r[2] == "16 B")
    pair, nrt = float(_num(row[5])), float(_num(row[6]))
    assert f"cost {pair:,.0f} times one atomic add" in flat, pair
    assert f"costs {nrt:,.0f} times" in flat, nrt
    stress = report.split("| stress |", 1)[1].split("\n", 1)[0]
    threads, blocks = re.search(r"(\d+) threads x 200 rounds: (\d+) blocks served", stress).groups()
    assert f"{int(threads):,} threads" in flat and f"{int(blocks) / 1e6:.1f} million blocks" in flat
    # the examples at a million threads
    rows = _report_rows(report, "examples")
    assert len(rows) == 5 and all(r[2] == "yes" for r in rows)
    peaks = [int(_num(r[4])) for r in rows]
    worst = [int(_num(r[6])) for r in rows]
    assert (f"with {min(peaks) / 1e6:.1f} to {max(peaks) / 1e6:.0f} MB of heap against "
            f"{min(worst) / 1e6:.0f} MB to {max(worst) / 1e9:.1f} GB") in flat


def _num(cell):
    """A table cell's number without its thousands separators."""
    return cell.replace(",", "")
