"""Example kernels run on the simulator and match their worst-case versions."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from devalloc.examples import two_pass_variance as tpv

ROOT = Path(__file__).resolve().parents[1]


def test_two_pass_variance_matches_worst_case_and_frees_everything():
    r = tpv.run(threads=96, seed=7, block=32)
    assert r.identical
    u = r.usage
    assert u.failed == 0 and u.invalid_frees == 0
    assert u.in_use == 0 and u.live_blocks == 0 and u.allocs == u.frees > 0
    assert 0 < r.heap_peak_bytes < r.worst_case_bytes
    # An unbiased estimator of Var(U(0,1)) = 1/12, within 5 standard errors.
    assert abs(r.answer - 1 / 12) < 5 * r.stderr
    assert 0 < r.estimates < 96


def test_two_pass_variance_script_runs_the_demo_for_it():
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)  # the script chooses by itself
    proc = subprocess.run(
        [sys.executable, str(ROOT / "kernels" / "two_pass_variance.py"), "--threads", "64"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("devalloc demo: two_pass_variance, 64 threads")
    assert "identical to the worst-case version: yes, bit for bit" in proc.stdout
    assert np.isfinite(float(proc.stdout.split("mean sample variance ")[1].split()[0]))
