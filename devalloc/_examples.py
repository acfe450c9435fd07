"""Find the example kernels: the package ``devalloc.examples``.

The examples' source lives in the repository's top-level ``kernels/``
folder; pyproject's ``package-dir`` installs it as ``devalloc.examples``
(in a wheel, and through the finder of an editable install). In a checkout
used without an install of its own (``PYTHONPATH=checkout``, a worktree, a
bench script), :func:`package` gives the checkout's ``kernels/`` that same
name, so that a devalloc always runs the examples that sit beside it.

Imports no numba (``kernels/__init__.py`` is a docstring and a table).
"""

import importlib
import importlib.util
import sys
from pathlib import Path

NAME = "devalloc.examples"
HERE = Path(__file__).resolve().parent
#: Where the examples' source is in a checkout: beside the devalloc folder.
CHECKOUT = HERE.parent / "kernels"


def package():
    """Return the ``devalloc.examples`` package; raise ModuleNotFoundError if there is none.

    In order: one imported already; one installed inside this devalloc (a
    wheel); the ``kernels/`` folder beside this devalloc (a checkout); any
    other importer (an editable install's finder).
    """
    if NAME in sys.modules:
        return sys.modules[NAME]
    init = CHECKOUT / "__init__.py"
    if not (HERE / "examples").is_dir() and init.is_file():
        spec = importlib.util.spec_from_file_location(
            NAME, init, submodule_search_locations=[str(CHECKOUT)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[NAME]
            raise
        setattr(sys.modules["devalloc"], "examples", module)
        return module
    return importlib.import_module(NAME)


def load(name):
    """Import and return example module ``name`` (``devalloc.examples.<name>``)."""
    package()
    return importlib.import_module(f"{NAME}.{name}")
