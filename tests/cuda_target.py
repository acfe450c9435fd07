"""Python scripts run in a subprocess with the real CUDA target (no GPU needed).

For tests that compile device code for a GPU (``aot.compile_ptx``) from a
suite that runs on the simulator: NUMBA_ENABLE_CUDASIM is read when numba
is imported, so the script gets an environment without it.
"""

import json
import os
import subprocess
import sys


def run(script, timeout=600, env=None):
    """Run ``script`` with ``python -c``; its standard output (it must exit 0).

    ``env``: variables to set (or, with the value None, to unset) on top of
    this process's environment.
    """
    env = {k: v for k, v in {**os.environ, **(env or {})}.items()
           if k != "NUMBA_ENABLE_CUDASIM" and v is not None}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def last_json(script, timeout=600, env=None):
    """Run ``script``; the JSON its last line of output prints."""
    return json.loads(run(script, timeout, env).strip().splitlines()[-1])
