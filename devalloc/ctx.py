"""The handles kernels receive, and their Numba types.

A ``Ctx`` bundles a heap's two device arrays (the arena bytes and the
``int64`` metadata); a ``DebugCtx`` adds the debug record words and the
requested-size table; an ``ObsCtx`` (a heap made with ``profile=True`` or
``trace=N``) adds the profile counters and the trace, with the debug arrays
empty unless ``debug=True`` too. They are
plain named tuples, so kernels take them as ordinary arguments and the
device code can tell a debug heap from its type when it compiles. Shared by
the host (:class:`devalloc.Heap` builds them) and the device code, which
imports nothing else from the host side.
"""

import collections

from numba import types

#: The handle kernels receive: the arena bytes and the metadata words.
Ctx = collections.namedtuple("Ctx", ["arena", "meta"])

#: The handle of a debug heap: also the debug record words and the table of
#: requested sizes (layout.py, "debug record").
DebugCtx = collections.namedtuple("DebugCtx", ["arena", "meta", "debug", "sizes"])

_BYTES = types.Array(types.uint8, 1, "C")
_WORDS = types.Array(types.int64, 1, "C")
#: The Numba type of ``Heap.ctx``, for compiling kernels ahead of time.
ctx_type = types.NamedTuple([_BYTES, _WORDS], Ctx)
#: The Numba type of a debug heap's ``ctx``.
debug_ctx_type = types.NamedTuple(
    [_BYTES, _WORDS, _WORDS, types.Array(types.uint16, 1, "C")], DebugCtx)

#: The handle of an observed heap (profile counters, allocation trace; debug
#: arrays of length 0 unless it is a debug heap too).
ObsCtx = collections.namedtuple("ObsCtx", ["arena", "meta", "debug", "sizes", "prof", "trace"])
#: The Numba type of an observed heap's ``ctx``.
obs_ctx_type = types.NamedTuple(
    [_BYTES, _WORDS, _WORDS, types.Array(types.uint16, 1, "C"), _WORDS, _WORDS], ObsCtx)
