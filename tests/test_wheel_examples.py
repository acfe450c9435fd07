"""A plain install runs the examples: the wheel holds kernels/ as devalloc.examples.

Builds the wheel from a copy of this checkout (``pip wheel --no-deps
--no-build-isolation``: nothing downloaded, nothing written into the
checkout), installs it with ``--no-deps`` into a fresh venv whose
site-packages reuses this venv's packages through a ``.pth`` file (but
never the checkout, nor an editable install of it), and runs every example
through ``python -m devalloc demo`` from a folder outside the checkout.
About 40 s: the wheel and the venv are in the fast tier, the run of every
example (marked slow) in the full tier (python -m pytest --full).
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest

from conftest import SESSION_ENV, session_cached
from devalloc import __main__ as cli

ROOT = Path(__file__).resolve().parents[1]

#: Written into the new venv's site-packages and imported by a .pth file:
#: this venv's site-packages, and the .pth files there (numba-cuda's
#: redirector, say), except an editable install of devalloc and any line
#: naming the checkout.
_REUSE = """\
import os, sys
SITE = {site!r}
CHECKOUT = {checkout!r}
sys.path.append(SITE)
for _name in sorted(os.listdir(SITE)):
    if not _name.endswith(".pth") or _name.startswith("__editable__") or "devalloc" in _name:
        continue
    with open(os.path.join(SITE, _name)) as _f:
        for _line in _f:
            _line = _line.rstrip()
            if _line.startswith(("import ", "import\\t")):
                exec(_line)
            elif _line and not _line.startswith("#"):
                _path = os.path.join(SITE, _line)
                if os.path.exists(_path) and os.path.realpath(_path) != CHECKOUT:
                    sys.path.append(_path)
"""


def _run(cmd, cwd, timeout=120):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "NUMBA_ENABLE_CUDASIM", "PYTHONHOME")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (cmd, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Return ``(python, folder, wheel)``: a venv with the wheel installed, a folder to run in.

    Made once per test session, whichever xdist worker asks first, in a
    folder of the session's (tests/conftest.py): the others use it.
    """
    if not os.environ.get(SESSION_ENV):  # no session folder (run without tests/conftest.py's setup)
        return _install(tmp_path_factory.mktemp("packaging"))
    return session_cached("wheel_examples_installed", lambda: _install(Path(
        tempfile.mkdtemp(prefix="packaging-", dir=os.environ[SESSION_ENV]))))


def _install(tmp):
    """Build the wheel from a copy of the checkout, install it in a venv under ``tmp``."""
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", ".pytest_cache",
        ".benchmarks"))
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", dist, source], cwd=tmp, timeout=300)
    (wheel,) = dist.glob("devalloc-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=tmp)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], cwd=tmp,
         timeout=300)
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=tmp).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])  # this venv's packages
    (purelib / "_reuse_test_venv.py").write_text(
        _REUSE.format(site=str(ours), checkout=os.path.realpath(ROOT)))
    (purelib / "_reuse_test_venv.pth").write_text("import _reuse_test_venv\n")
    away = tmp / "elsewhere"
    away.mkdir()
    return python, away, wheel


def test_the_wheel_holds_the_examples_as_devalloc_examples(installed):
    _, _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ["__init__", "_mc", "_metering", "_methods", "_scan", "_script", *cli.EXAMPLES]:
        assert f"devalloc/examples/{module}.py" in names
    assert not any(n.startswith("kernels/") for n in names)


def test_the_installed_devalloc_and_its_examples_come_from_the_venv(installed):
    python, away, _ = installed
    code = ("import json, sys, devalloc, devalloc._examples as e; p = e.package(); "
            "print(json.dumps([devalloc.__file__, p.__file__, sys.path]))")
    devalloc_file, examples_file, path = json.loads(_run([python, "-c", code], cwd=away).stdout)
    venv = python.parent.parent.resolve()
    assert venv in Path(devalloc_file).resolve().parents
    assert Path(examples_file).resolve().parent == Path(devalloc_file).resolve().parent / "examples"
    assert not any(Path(p).resolve() == ROOT.resolve() for p in path if p)


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(cli.EXAMPLES))
def test_every_example_runs_from_a_plain_install_outside_the_checkout(installed, example):
    python, away, _ = installed
    proc = _run([python, "-m", "devalloc", "demo", "--example", example, "--threads", "4",
                 "--seed", "3", "--json"], cwd=away, timeout=300)
    s = json.loads(proc.stdout)
    assert s["example"] == example and s["threads"] == 4
    assert s["identical"] is True


def test_the_gpu_check_is_installed_and_says_when_there_is_no_gpu(installed):
    python, away, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("__init__", "__main__", "parts", "report", "stress"):
        assert f"devalloc/gpucheck/{module}.py" in names
    proc = subprocess.run([python, "-m", "devalloc.gpucheck", "--help"], cwd=away,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--simulate" in proc.stdout
