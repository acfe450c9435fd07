"""``devalloc.__version__``: the installed distribution's version (imports no numba).

Apart from the package's ``__init__`` so that a module the package imports
(:mod:`devalloc.sim.compat`, which names it in its errors) can read it
without importing the package back.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("devalloc")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
