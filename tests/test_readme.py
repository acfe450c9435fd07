"""The README's usage snippet runs as written (on the simulator)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_usage_snippet_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    ns = {}
    exec(compile(blocks[0], "README.md", "exec"), ns)
    out = ns["out"].copy_to_host()
    sizes = ns["sizes"]
    expected = [(s - 1) * 0.5 if s else 0.0 for s in sizes]
    got = [o if s else 0.0 for o, s in zip(out, sizes)]
    assert got == expected
    u = ns["heap"].usage()  # after reset: a clean epoch
    assert (u.allocs, u.frees, u.in_use, u.failed) == (0, 0, 0, 0)
    printed = capsys.readouterr().out
    n = int((sizes > 0).sum())
    # print(usage) is the report table (devalloc/host/report.py): one row per figure.
    for label, value in (("allocs", n), ("frees", n), ("failed", 0), ("invalid frees", 0)):
        assert re.search(rf"^  {label} +{value}$", printed, re.M), (label, printed)
