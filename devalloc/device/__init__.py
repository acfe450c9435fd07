"""Device side: everything that runs inside ``@cuda.jit`` kernels.

The public device API, re-exported as ``devalloc.alloc`` and friends:
``alloc``, ``free``, ``bump``, ``mark``, ``scoped``, ``release`` (:mod:`.api`,
which picks the normal, debug or observed path when the kernel compiles)
and the porting API (:mod:`.porting`: ``view``, ``array``, ``free_array``,
``calloc``, ``realloc``, ``usable_size``, ``alloc_aligned``; :mod:`.carving`:
``carve``, ``carve_end``, ``realloc_carved``; the intrinsics under them in
:mod:`.intrinsics`). The paths behind them: :mod:`.core`
(classify, group, serve, account), :mod:`.slab` (blocks up to 8 KiB),
:mod:`.pages` (whole pages), :mod:`.bumpalloc`, :mod:`.scope` (and
:mod:`.chunks`, its calls into the heap), :mod:`.warp` (aggregation),
:mod:`.debug` (guards and records), :mod:`.observe` (profile and trace),
:mod:`.kinds` (which path a ctx takes), :mod:`.outline` (one out-of-line
copy of a body per kernel) and :mod:`.bodies` (those bodies compiled once;
:mod:`.bodycache` keeps them on disk; :mod:`.kernelcache` keeps each
kernel's compiled code there too), :mod:`.blocks` (the porting API's
pure block arithmetic),
:mod:`._meta` (helpers every path uses, and the rules
every device function follows). The host side imports none
of this; the shared formats are in :mod:`devalloc.layout`.
"""

from .api import alloc, bump, free, mark, release, scoped
from .carving import carve, carve_end, realloc_carved
from .porting import (alloc_aligned, array, calloc, free_array, offset_of, realloc, usable_size,
                      view)

#: The modules of the device package, for the interleaving explorer.
MODULES = ("_meta", "blocks", "ptx", "warp", "index", "pages", "slab", "core", "debug", "kinds",
           "chunks", "api", "bumpalloc", "scope", "observe", "intrinsics", "porting", "carving",
           "gather", "outline", "outline_choice", "bodycache", "bodies", "kernelcache")

__all__ = ["alloc", "alloc_aligned", "array", "bump", "calloc", "carve", "carve_end", "free",
           "free_array", "mark", "offset_of", "realloc", "realloc_carved", "release", "scoped",
           "usable_size", "view"]
