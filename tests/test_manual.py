"""The manual (docs/, Sphinx): every public name in its API reference, its
snippets run, and (full tier) it builds with warnings as errors.

``python -m sphinx -W -b html docs docs/_build`` is the build; the chapters
are docs/*.md (MyST), the reference docs/api.rst (autodoc).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import devalloc

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_api_reference_has_every_public_name():
    api = (DOCS / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. (?:auto\w+|py:data):: devalloc\.(\w+)", api, re.M))
    assert documented == set(devalloc.__all__), (
        sorted(set(devalloc.__all__) - documented), sorted(documented - set(devalloc.__all__)))


def test_the_manual_has_every_chapter():
    index = (DOCS / "index.rst").read_text()
    chapters = {p.stem for p in DOCS.glob("*.md")} | {"api"}
    listed = set(re.findall(r"^   (\w+)$", index, re.M))
    assert listed == chapters


def test_the_user_guides_snippets_run(tmp_path, monkeypatch):
    # Its ```python blocks, in order, in one namespace (the first is their
    # setup); ```py blocks are fragments of kernels.
    monkeypatch.chdir(tmp_path)  # the trace snippet writes trace.csv
    blocks = re.findall(r"^```python\n(.*?)^```", (DOCS / "guide.md").read_text(), re.S | re.M)
    assert len(blocks) >= 3
    ns = {}
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/guide.md block {k}", "exec"), ns)
    assert (tmp_path / "trace.csv").exists()


@pytest.mark.slow
def test_the_manual_builds_without_a_warning(tmp_path):
    pytest.importorskip("sphinx", reason="the [docs] extra (in [test]) is not installed")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", str(DOCS), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    api = (tmp_path / "html" / "api.html").read_text()
    for name in ("alloc", "realloc_carved", "Heap", "StaleCtxError"):
        assert f'id="devalloc.{name}"' in api, name
