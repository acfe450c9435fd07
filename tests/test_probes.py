"""``python -m devalloc.probes`` without the test extra: one line naming it, exit 3.

Each case runs the module as ``python -m`` would, in a subprocess with the
real CUDA target, after hiding one tool from the lookup that finds it:
``aot._wheel_bin`` for ptxas and nvdisasm, cuda.pathfinder's loader for
libnvvm (what numba-cuda's cu13 extra installs).
"""

import os
import subprocess
import sys

import pytest

from devalloc.tools import probes

_HIDE = {
    "ptxas": """
from devalloc.tools import aot
found = aot._wheel_bin
aot._wheel_bin = lambda tool: None if tool == "ptxas" else found(tool)
""",
    "nvdisasm": """
from devalloc.tools import aot
found = aot._wheel_bin
aot._wheel_bin = lambda tool: None if tool == "nvdisasm" else found(tool)
""",
    "NVVM": """
import cuda.pathfinder as pf
load = pf.load_nvidia_dynamic_lib
def hidden(name):
    if name == "nvvm":
        raise pf.DynamicLibNotFoundError("no libnvvm in this environment")
    return load(name)
pf.load_nvidia_dynamic_lib = hidden
""",
    "simulator": "",
}
_RUN = """
import runpy, sys
sys.argv = ["python -m devalloc.probes", "--cc", "90"]
runpy.run_module("devalloc.probes", run_name="__main__")
"""


@pytest.mark.parametrize("lacking", sorted(_HIDE))
def test_probes_without_a_tool_say_what_to_install_in_one_line(lacking, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "DEVALLOC_PTXAS", "DEVALLOC_NVDISASM")}
    if lacking == "simulator":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    proc = subprocess.run([sys.executable, "-c", _HIDE[lacking] + _RUN], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == probes.EXIT_MISSING == 3, proc.stderr[-3000:]
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m devalloc.probes: "), proc.stderr
    if lacking == "simulator":
        assert "unset NUMBA_ENABLE_CUDASIM" in lines[0]
    else:
        assert lines[0].startswith(f"python -m devalloc.probes: {lacking} ")
        assert "pip install 'devalloc[test]'" in lines[0]
