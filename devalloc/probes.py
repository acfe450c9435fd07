"""The command ``python -m devalloc.probes``: :func:`devalloc.tools.probes.main`.

What devalloc costs in registers, spills and SASS (docs/guide.md, "What it
costs"); the module itself is :mod:`devalloc.tools.probes`. Importing this
one does nothing.
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
