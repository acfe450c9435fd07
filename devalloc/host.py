"""Host side: the :class:`Heap` that owns the device memory.

A heap is two device arrays: the arena (the bytes handed to threads) and the
``int64`` metadata (layout in :mod:`devalloc.layout`). ``heap.ctx`` bundles
both into a named tuple, the cheap immutable handle kernels receive.
"""

import collections
import numbers

import numpy as np
from numba import config, cuda, types

from . import layout as L
from .stats import usage_from_meta

#: The handle kernels receive: the arena bytes and the metadata words.
Ctx = collections.namedtuple("Ctx", ["arena", "meta"])

#: The Numba type of ``Heap.ctx``, for compiling kernels ahead of time.
ctx_type = types.NamedTuple(
    [types.Array(types.uint8, 1, "C"), types.Array(types.int64, 1, "C")], Ctx
)


def check_capacity(capacity):
    """Return ``capacity`` as an int, or raise TypeError/ValueError saying why."""
    if isinstance(capacity, (bool, np.bool_)) or not isinstance(
        capacity, numbers.Integral
    ):
        raise TypeError(
            "Heap capacity must be an integer number of bytes (int or NumPy "
            f"integer), got {type(capacity).__name__}: {capacity!r}"
        )
    capacity = int(capacity)
    if capacity < L.MIN_CAPACITY:
        raise ValueError(
            f"Heap capacity must be at least {L.MIN_CAPACITY} bytes (metadata "
            f"plus one {L.PAGE}-byte page), got {capacity}"
        )
    return capacity


def _zero_meta(meta, stream):
    """Zero the metadata array on ``stream`` without synchronizing the host."""
    if config.ENABLE_CUDASIM:
        meta.copy_to_device(np.zeros(meta.shape, np.int64), stream=stream)
    else:
        from numba.cuda.cudadrv.driver import device_memset

        device_memset(meta, 0, meta.size * 8, stream=stream)


class Heap:
    """A device heap of ``capacity`` bytes that kernels allocate from.

    ``capacity`` counts all the device memory the heap takes: the arena plus
    its metadata (about 1.6 % of it). ``usage().capacity`` is the part that
    can be handed out. Creating a heap allocates and zeroes device memory; it
    launches no kernel.
    """

    def __init__(self, capacity):
        capacity = check_capacity(capacity)
        self.npages = L.pages_for_capacity(capacity)
        self.requested = capacity
        self._arena = cuda.device_array(self.npages * L.PAGE, dtype=np.uint8)
        self._meta = cuda.to_device(np.zeros(L.meta_words(self.npages), np.int64))
        self._ctx = Ctx(self._arena, self._meta)

    @property
    def ctx(self):
        """The handle to pass to kernels (type: ``devalloc.ctx_type``)."""
        return self._ctx

    @property
    def capacity(self):
        """Bytes the heap can hand out (whole pages of the arena)."""
        return self.npages * L.PAGE

    def reset(self, stream=0):
        """Free every allocation and clear every counter, ordered on ``stream``.

        Does not synchronize the host. Costs one memset of the metadata
        (about 1.6 % of the capacity); the arena is not touched, so blocks keep
        their bytes but every offset handed out before is invalid.
        """
        _zero_meta(self._meta, stream)

    def usage(self, stream=0):
        """Synchronize ``stream`` and return the heap's :class:`~devalloc.stats.Usage`."""
        meta = self._meta.copy_to_host(stream=stream)
        if stream:
            stream.synchronize()
        else:
            cuda.synchronize()
        return usage_from_meta(meta, self.npages)

    def __repr__(self):
        return f"Heap(capacity={self.requested}, pages={self.npages})"
