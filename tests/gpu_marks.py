"""Marks for the tests that can only run on the CUDA simulator.

``DEVALLOC_TEST_GPU=1`` runs the suite on a GPU (``python -m
devalloc.gpucheck`` does); the tests that count simulated atomics, read the
simulator's host memory or its progress bars skip there with the reason.
"""

import pytest
from numba import config

#: True when the kernels of this run go to a GPU, not the simulator.
ON_GPU = not config.ENABLE_CUDASIM


def needs_simulator(why):
    """Skip the test on a GPU, saying what of the simulator it needs."""
    return pytest.mark.skipif(ON_GPU, reason=f"needs the CUDA simulator: {why}")


#: count_atomics() counts the simulator's atomics; a GPU has no such hook.
COUNTS_ATOMICS = needs_simulator("counts simulated atomics (devalloc.sim.count_atomics)")
