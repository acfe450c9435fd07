"""docs/porting.md's ``python`` snippets run as written, in order (simulator).

The "before" snippets are fenced ``py`` and not run: they are fragments of
the code a port replaces.
"""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "porting.md"


def test_porting_guide_snippets_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4
    ns = {}
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/porting.md block {k}", "exec"), ns)


def test_readme_links_the_porting_guide():
    readme = (DOC.parents[1] / "README.md").read_text()
    assert "docs/porting.md" in readme
