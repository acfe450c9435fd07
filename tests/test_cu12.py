"""The ``[cu12]`` extra compiles: the probe kernels through CUDA 12's NVVM and ptxas.

The rest of the suite compiles with the CUDA 13 wheels of the test extra.
Here a venv with ``numba-cuda[cu12]`` (the same numba-cuda, numba and NumPy
as this one) and the CUDA 12 ``nvidia-cuda-nvcc-cu12`` wheel (NVVM and
ptxas) compiles every probe kernel of :mod:`devalloc.tools.probes` for sm_75 and
sm_90 with :func:`devalloc.tools.aot.compile_ptx` and assembles it with ptxas 12.
There is no CUDA 12 nvdisasm wheel: the CUDA 13 one (the test extra's)
disassembles ptxas 12's cubins for the SASS counts.

The venv is made once (about 2 minutes and 800 MB, most of it CUDA wheels)
and reused: ``$DEVALLOC_CU12_VENV``, else ``~/.cache/devalloc-cu12-venv``
(``$XDG_CACHE_HOME`` respected). It is made again when its requirements
change. The test skips, saying why, when the wheels cannot be had.
"""

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import COMPILE_REPORT, session_cached

ROOT = Path(__file__).resolve().parents[1]
#: What pip says when a package cannot be had (no index, no network).
UNAVAILABLE = re.compile(
    r"No matching distribution found|Could not find a version|Failed to establish a new "
    r"connection|Temporary failure in name resolution|Max retries exceeded|ReadTimeoutError")
#: The probe kernels that call the allocator (the others are floors).
ALLOCATOR_KERNELS = ("alloc", "free", "alloc_view_free", "conditional", "bump", "scoped",
                     "debug_alloc_view_free", "debug_scoped")


def requirements():
    """Return the cu12 venv's requirements: this venv's numba-cuda, CUDA 12 tools."""
    pinned = [f"{d}=={metadata.version(d)}" for d in ("numba", "numpy")]
    return [f"numba-cuda[cu12]=={metadata.version('numba-cuda')}", *pinned,
            "nvidia-cuda-nvcc-cu12>=12.0,<13", "nvidia-cuda-nvdisasm>=13.0"]


def venv_dir():
    if os.environ.get("DEVALLOC_CU12_VENV"):
        return Path(os.environ["DEVALLOC_CU12_VENV"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "devalloc-cu12-venv"


def cu12_python():
    """Return the cu12 venv's python, making the venv if it is missing or stale."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    stamp = venv / "devalloc-requirements.txt"
    wanted = "\n".join([sys.version.split()[0], *requirements()]) + "\n"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / (venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python
        shutil.rmtree(venv, ignore_errors=True)
        # No pip of its own: this venv's pip installs into it (--python).
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
             "--disable-pip-version-check", *requirements()],
            capture_output=True, text=True, timeout=1800)
        if proc.returncode:
            shutil.rmtree(venv, ignore_errors=True)
            said = proc.stderr.strip().splitlines() or ["(pip said nothing)"]
            if UNAVAILABLE.search(proc.stderr):
                pytest.skip(f"the CUDA 12 wheels cannot be had: {said[-1]}")
            pytest.fail("pip could not make the cu12 venv:\n" + "\n".join(said[-20:]))
        stamp.write_text(wanted)  # last: an interrupted make is made again
    return python


SCRIPT = """
import json, re, subprocess
from devalloc.tools import aot, probes
from devalloc.sim import compat

compat.check()
ptxas = aot.tool_path("ptxas")
ptx, _ = aot.compile_ptx(probes.k_alloc, probes.SIG, cc=(9, 0))
print(json.dumps({
    "ptxas": ptxas,
    "ptxas_version": subprocess.run([ptxas, "--version"], capture_output=True,
                                    text=True).stdout,
    "ptx_isa": re.search(r"^\\.version (\\S+)", ptx, re.M).group(1),
    "probes": probes.measure(((7, 5), (9, 0))),
    "traps": probes.check_traps(),
}))
"""


def _cu12_compile():
    python = cu12_python()
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "DEVALLOC_PTXAS", "DEVALLOC_NVDISASM")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cu12_result():
    result = session_cached("cu12_result", _cu12_compile)  # once for every xdist worker
    COMPILE_REPORT.extend({**r, "arch": r["arch"] + " cu12"} for r in result["probes"])
    return result


@pytest.mark.slow
def test_the_cuda_12_toolchain_is_the_one_used(cu12_result):
    assert cu12_result["ptxas"].startswith(str(venv_dir())), cu12_result["ptxas"]
    assert "release 12." in cu12_result["ptxas_version"], cu12_result["ptxas_version"]
    # CUDA 12.x's NVVM emits PTX ISA 8.x; CUDA 13's emits 9.x.
    assert cu12_result["ptx_isa"].startswith("8."), cu12_result["ptx_isa"]


@pytest.mark.slow
def test_every_probe_kernel_compiles_without_spills_for_sm75_and_sm90(cu12_result):
    rows = cu12_result["probes"]
    got = {(r["kernel"], r["arch"]) for r in rows}
    kernels = {k for k, _ in got}
    assert kernels >= {"empty", "atomic_floor", *ALLOCATOR_KERNELS}
    assert got == {(k, a) for k in kernels for a in ("sm_75", "sm_90")}
    for r in rows:
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, r
        assert r["registers"] > 0, r
        if r["kernel"] not in ("empty", "atomic_floor"):
            assert r["sass_atomics"] >= 2, r  # the allocator really is in there


@pytest.mark.slow
def test_compile_traps_hold_with_cuda_12(cu12_result):
    traps = cu12_result["traps"]
    assert traps["return_created_array_rejected"] is True
    assert traps["merge_mask_zero_extended"] is True


def test_skips_saying_why_when_the_wheels_cannot_be_had(monkeypatch, tmp_path):
    # No package index (and no local wheels of these): pip finds nothing.
    monkeypatch.setenv("DEVALLOC_CU12_VENV", str(tmp_path / "venv"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="the CUDA 12 wheels cannot be had: .*numba"):
        cu12_python()
    assert not (tmp_path / "venv").exists()  # nothing half-made is kept
