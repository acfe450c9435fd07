"""``python kernels/NAME.py [options]``: the demo command for example NAME.

Run as a script, an example file imports this module (its folder is first
on ``sys.path`` then) before anything imports numba, and hands over to
``python -m devalloc demo --example NAME [options]``, which chooses the GPU
or the simulator, parses the options and prints the report.
"""

import os
import sys


def run(path):
    """Run the demo for the example in file ``path`` with the script's options; exit."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(path))))
    from devalloc.__main__ import example_script

    example_script(path)
