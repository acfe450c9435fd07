"""Benchmark setup: kernels run on the CUDA simulator unless DEVALLOC_TEST_GPU=1.

Run the benchmarks with ``.venv/bin/python -m pytest bench/ --benchmark-only``
(they are not part of the main suite: pyproject's ``testpaths`` is
``["tests"]``). NUMBA_ENABLE_CUDASIM is read when numba is imported, so it
is set here, before any benchmark module imports numba.
"""

import os
import sys
from pathlib import Path

if os.environ.get("DEVALLOC_TEST_GPU") != "1":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

# The bench scripts import their shared helpers as top-level modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))
