"""Count the metadata words one ``alloc`` or ``free`` touches, on the host.

Runs the device functions' own Python source (``py_func``), as the
interleaving explorer does (:func:`devalloc.testing.machine.installed`), on
a copy of a heap's metadata wrapped in :class:`CountingMeta`: every plain
load, store and atomic is counted, by kind and by word. One thread alone,
no scheduling: a figure for "how many words does this operation read",
which is what a GPU pays for in dependent memory round trips. Used by the
tests that pin the page index's O(log pages) costs (tests/test_index.py).
"""

from collections import Counter, namedtuple
from dataclasses import dataclass, field

import numpy as np

from . import machine

_Dim3 = namedtuple("_Dim3", "x y z")


def _apply(kind, old, a, b):
    return machine._apply(kind, old, a, b)


class CountingMeta(machine.WordArray):
    """The ``int64`` metadata as a list, counting every access (no scheduling)."""

    def __init__(self, words):
        self.words = [int(w) for w in words]
        self.shape = (len(self.words),)
        self.kinds = Counter()
        self.touched = set()

    def access(self, kind, i, a=None, b=None):
        i = int(i)
        a = None if a is None else int(a)
        b = None if b is None else int(b)
        old = self.words[i]
        self.words[i] = _apply(kind, old, a, b)
        self.kinds[kind] += 1
        self.touched.add(i)
        return None if kind == "store" else old


@dataclass
class Touched:
    """What one operation did: its result, accesses by kind, distinct words."""

    result: int
    kinds: Counter = field(default_factory=Counter)
    words: int = 0

    @property
    def accesses(self):
        return sum(self.kinds.values())

    @property
    def loads(self):
        return self.kinds["load"]


class _Lane:
    # The identity FakeCuda reads (grid, block, stripe) for a lone lane.
    blockIdx = _Dim3(0, 0, 0)
    threadIdx = _Dim3(0, 0, 0)
    blockDim = _Dim3(32, 1, 1)
    group = None


def touched(meta, arena_bytes, op, arg):
    """Run ``alloc(ctx, arg)`` (``op="alloc"``) or ``free(ctx, arg)`` once.

    ``meta``: a host copy of a heap's metadata (``heap.ctx.meta.copy_to_host()``);
    ``arena_bytes``: its arena's size. The metadata copy is changed as the
    device would change it. Returns a :class:`Touched`.
    """
    from ..ctx import Ctx

    counted = CountingMeta(meta)
    # The device code only reads the arena's size (pages) and, for a debug
    # heap, its bytes; a normal heap's alloc and free never touch them.
    arena = np.zeros(arena_bytes, np.uint8)
    saved = getattr(machine._tls, "thread", None)
    with machine.installed():
        from ..device import core

        machine._tls.thread = _Lane()
        try:
            fn = core.alloc if op == "alloc" else core.free
            result = fn(Ctx(arena, counted), arg)
        finally:
            machine._tls.thread = saved
    meta[:] = counted.words
    return Touched(None if result is None else int(result), counted.kinds,
                   len(counted.touched))
