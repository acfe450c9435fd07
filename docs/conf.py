"""Sphinx configuration of devalloc's manual: ``python -m sphinx -W -b html docs docs/_build``.

The chapters are the Markdown files beside this one (MyST); the API
reference (api.rst) is autodoc of every public name. The simulator is
turned on before devalloc is imported, so the manual builds on a machine
without a GPU or a CUDA driver.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import devalloc  # noqa: E402

project = "devalloc"
author = "the devalloc developers"
release = devalloc.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
# Links from the chapters to files outside docs/ (README, bench/, the
# sources) are links on GitHub, not pages of the manual.
suppress_warnings = ["myst.xref_missing"]
