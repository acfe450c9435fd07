"""Shared by the bench scripts: the environment line and ``RESULTS.md`` sections.

Each script owns the sections it writes (a ``## Title`` heading and
everything up to the next ``## ``) and rewrites only those; every other
section, the hand-written ``## Notes`` and ``## Targets`` included, is kept
as it is. Imports no numba, so scripts can use it before choosing a target.
"""

import datetime
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
ROOT = Path(__file__).resolve().parents[1]
#: Hand-written section that new generated sections are inserted before.
KEEP_LAST = "## Targets"


def ver(pkg):
    """Return the installed version of ``pkg``, or "absent"."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "absent"


def environment():
    """Return one line naming Python, the machine and the CUDA toolchain wheels."""
    return (f"Python {platform.python_version()}, {platform.machine()}, "
            f"numba-cuda {ver('numba-cuda')}, NVVM {ver('nvidia-nvvm')}, "
            f"ptxas {ver('nvidia-cuda-nvcc')}, nvdisasm {ver('nvidia-cuda-nvdisasm')}")


def simulator_environment():
    """Return :func:`environment` plus what the simulator figures depend on."""
    return (f"{environment()}, NumPy {ver('numpy')}; CUDA simulator "
            f"(NUMBA_ENABLE_CUDASIM=1), {os.cpu_count()} CPU(s)")


def header(title, command, env):
    """Return the first lines of a section: heading, command, date, environment."""
    return [f"## {title}", "",
            f"Command: `{command}`  ",
            f"Date: {datetime.date.today().isoformat()}  ",
            f"Environment: {env}", ""]


def markdown_table(columns, rows):
    """Return a Markdown table; ``columns`` are (title, align) with align "l" or "r"."""
    out = ["| " + " | ".join(t for t, _ in columns) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for _, a in columns) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def write_section(section, path=RESULTS):
    """Replace the section whose heading starts ``section`` in ``path``, or add it.

    A new section goes before the hand-written ``## Targets`` when there is
    one, else at the end.
    """
    section = section.rstrip("\n") + "\n\n"
    title = section.split("\n", 1)[0]
    text = path.read_text() if path.exists() else "# devalloc benchmark results\n\n"
    start = text.find(title + "\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    else:
        at = text.find("\n" + KEEP_LAST)
        if at >= 0:
            text = text[:at + 1] + section + text[at + 1:]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n")


def add_root_to_path():
    """Make ``devalloc`` and its examples (``devalloc.examples``) importable from a checkout."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from devalloc import _examples

    _examples.package()  # this checkout's kernels/, whatever the venv has installed


def use_simulator():
    """Select the CUDA simulator unless NUMBA_ENABLE_CUDASIM is set; call before numba.

    Also makes ``devalloc`` importable (:func:`add_root_to_path`). A script
    run with NUMBA_ENABLE_CUDASIM=0 gets the real target and must refuse.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") is None:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    add_root_to_path()
