"""Old path of :mod:`devalloc.tools.probes` (moved): that module, and a DeprecationWarning.

``python -m devalloc.probes`` stays the command (docs/guide.md, "What it costs"):
run as a script this module runs :func:`devalloc.tools.probes.main`, with no
warning.
"""

if __name__ == "__main__":
    import os
    import sys

    if "--contention" in sys.argv[1:] and "numba" not in sys.modules:
        # The contention model runs the simulator's device modules (no GPU,
        # no NVVM): numba reads this once, at import.
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from devalloc.tools.probes import main

    sys.exit(main())
else:
    from ._moved import alias

    alias(__name__)
