"""Device side: everything that runs inside ``@cuda.jit`` kernels.

The public device API, re-exported as ``devalloc.alloc`` and friends:
``alloc``/``free`` (:mod:`.api`, which picks the normal or the debug path
when the kernel compiles), ``bump`` (:mod:`.bump`), ``mark``/``scoped``/
``release`` (:mod:`.scope`) and ``view`` (:mod:`.intrinsics`). The paths behind
them: :mod:`.core` (classify, group, serve, account), :mod:`.slab` (blocks
up to 8 KiB), :mod:`.pages` (whole pages), :mod:`.warp` (aggregation),
:mod:`.debug` (guards and records), :mod:`._meta` (helpers every path uses,
and the rules every device function follows). The host side imports none
of this; the shared formats are in :mod:`devalloc.layout`.
"""

from numba import config

from .api import alloc, free
from .bump import bump
from .scope import mark, release, scoped

if config.ENABLE_CUDASIM:
    from .intrinsics import view_simulated as view
else:
    from .intrinsics import view

#: The modules of the device package, for the interleaving explorer.
MODULES = ("_meta", "warp", "index", "pages", "slab", "core", "debug", "api", "bump", "scope", "intrinsics")

__all__ = ["alloc", "bump", "free", "mark", "release", "scoped", "view"]
