"""The old paths of modules that moved (issue 31): each is the moved module, with a warning.

``devalloc/stats.py`` and the other modules at an old path hold two lines:
they call :func:`alias`, which imports the module at its new path, puts it
in ``sys.modules`` under the old name too, and warns once
(:class:`DeprecationWarning`). So ``import devalloc.stats`` gives the very
module :mod:`devalloc.host.stats` is (``devalloc.stats is
devalloc.host.stats``): attributes read, set or monkeypatched through the old
name are the module's own. :data:`MOVED` lists every old path; the package
itself imports none of them (tests/test_architecture.py checks both).
"""

import importlib
import sys
import warnings

#: Old module path -> new module path (devalloc 0.1.0, issue 31).
MOVED = {
    "devalloc.aot": "devalloc.tools.aot",
    "devalloc.codesize": "devalloc.tools.codesize",
    "devalloc.debug_host": "devalloc.host.debug",
    "devalloc.distributed": "devalloc.host.distributed",
    "devalloc.gather": "devalloc.host.gather",
    "devalloc.observed": "devalloc.host.observed",
    "devalloc.paths": "devalloc.tools.paths",
    "devalloc.probes": "devalloc.tools.probes",
    "devalloc.replayer": "devalloc.tools.replayer",
    "devalloc.report": "devalloc.host.report",
    "devalloc.stats": "devalloc.host.stats",
}


def alias(old):
    """Make the module being imported as ``old`` its new module, and warn that it moved.

    Called by the module at the old path while it is imported; returns the
    new module (which the import then hands out, from ``sys.modules``).
    """
    new = MOVED[old]
    # stacklevel 3: the importing line (the import machinery's frames are skipped)
    warnings.warn(f"{old} moved to {new}; import {new} (the old path goes away in a "
                  "later release)", DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module
