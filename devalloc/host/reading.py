"""Reading a heap back on the host: ``usage``, ``trace``, ``live`` and ``check``.

The :class:`Reading` part of :class:`devalloc.host.Heap`: each method copies
the device words it needs to the host (``Heap._snapshot``, which synchronizes
the stream) and decodes them with :mod:`.stats` (the usage and the live
blocks), :mod:`.observed` (profile counters, trace) and :mod:`.debug` (debug
records, guards). Reads only: nothing here changes the heap.
"""

import dataclasses
from typing import TYPE_CHECKING, Any

from ..errors import HeapCorruption
from . import observed
from .debug import describe, find_corruption, requested_size
from .stats import Usage, live_blocks, usage_from_meta


class Reading:
    """``Heap``'s methods that read the heap back (mixed into :class:`~devalloc.host.Heap`)."""

    if TYPE_CHECKING:  # made by Heap (devalloc.host.heap)
        npages: int
        debug: bool
        profile: bool
        trace_room: int
        _meta: Any
        _arena: Any
        _debug: Any
        _sizes: Any
        _prof: Any
        _trace: Any

        def _snapshot(self, array: Any, stream: Any) -> Any: ...

    def usage(self, stream: Any = None) -> Usage:
        """Synchronize ``stream`` (default: the heap's) and return the :class:`Usage`.

        On a heap made with ``profile=True``, ``usage().profile`` holds the
        profile counters (``devalloc.layout.PROF_NAMES``); otherwise it is None.
        """
        meta = self._snapshot(self._meta, stream)
        u = usage_from_meta(meta, self.npages)
        if self.profile:
            u = dataclasses.replace(u, profile=observed.profile_dict(
                self._snapshot(self._prof, stream)))
        return u

    def trace(self, stream=None):
        """Synchronize and return the recorded events, in sequence order.

        A :class:`~devalloc.host.observed.Trace`: a NumPy structured array with
        the fields ``seq``, ``op`` (alloc, free, free_invalid, bump, mark,
        scoped, release), ``nbytes``, ``offset`` (NULL for a failure; a
        mark's or release's mark) and ``thread`` (global linear thread
        index), and ``.dropped``, the events past ``trace=N`` that were
        counted but not kept. ``reset`` clears it. Heaps made with ``trace=N`` only.
        """
        if not self.trace_room:
            raise ValueError("trace() needs a heap made with trace=N (the events to keep)")
        return observed.decode_trace(self._snapshot(self._trace, stream), self.trace_room)

    def live(self, stream: Any = None) -> list[tuple[int, int]]:
        """Synchronize and list the live blocks as ``(offset, size)`` pairs.

        ``size`` is the requested size on a debug heap (kept outside the
        arena, so an overrun cannot change it), the reserved size (size class
        or whole pages) otherwise. Leaks at the end of a phase show up here.
        Every block ``alloc`` handed out is listed, threads' scoped-scratch
        chunks too: they are blocks of this heap, but ``usage().live_blocks``
        leaves them out (it counts ``alloc``/``free`` blocks) and counts them
        in ``usage().scoped_chunks``, so ``len(heap.live())`` is
        ``live_blocks + scoped_chunks``. Bump blocks are not listed.
        """
        meta = self._snapshot(self._meta, stream)
        blocks = live_blocks(meta, self.npages)
        if not self.debug:
            return blocks
        sizes = self._snapshot(self._sizes, stream)
        return [(off, requested_size(sizes, off, size)) for off, size in blocks]

    def check(self, stream: Any = None) -> None:
        """Synchronize and raise :class:`HeapCorruption` if misuse was seen.

        Debug heaps only. Reports the invalid frees and overwritten guards
        recorded by ``free`` (with block and thread), and checks the guard
        bytes of every live block now. Returns None when all is well.
        """
        if not self.debug:
            raise ValueError("check() needs a debug heap: Heap(capacity, debug=True)")
        debug = self._snapshot(self._debug, stream)
        meta = self._snapshot(self._meta, stream)
        arena = self._snapshot(self._arena, stream)
        sizes = self._snapshot(self._sizes, stream)
        records = find_corruption(debug, arena, sizes, live_blocks(meta, self.npages))
        if records:
            raise HeapCorruption(describe(records), records)
