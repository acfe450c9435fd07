"""Replay an allocation trace on a fresh heap: ``devalloc.replay(events, capacity)``.

For sizing a heap and comparing layouts: a trace recorded with
``Heap(capacity, trace=N)`` (or read from CSV with
:func:`devalloc.host.observed.read_csv`) runs again, one event at a time in
sequence order, on one thread of one kernel (the simulator or a GPU). A
free replays as the free of the block its matching alloc returned in the
replay; a release as the release of the mark its matching mark returned;
each recording thread keeps its own scope state. Replay and trace agree on
allocs, frees and failures when the capacity is the same and nothing failed
from contention (one thread never contends). The kernel is defined at
module level: the simulator swaps a kernel's ``cuda`` global.
"""

import os
import warnings

import numpy as np
from numba import cuda

import devalloc

from .. import layout as L
from ..host import observed
from ..host.debug import describe
from ..errors import HeapCorruption

#: A free that is invalid in any heap (misaligned): an invalid free's replay.
BOGUS = 8


@cuda.jit
def _replay_kernel(ctx, op, size, off, ref, slot, out, states):
    if cuda.grid(1) != 0:
        return
    for i in range(op.shape[0]):
        o = op[i]
        if o == L.OP_ALLOC:
            out[i] = devalloc.alloc(ctx, size[i])
        elif o == L.OP_FREE:
            if ref[i] >= 0:
                devalloc.free(ctx, out[ref[i]])
            elif off[i] == L.NULL:
                devalloc.free(ctx, L.NULL)
            else:
                devalloc.free(ctx, BOGUS)  # its alloc is not in the trace
        elif o == L.OP_FREE_INVALID:
            devalloc.free(ctx, BOGUS)
        elif o == L.OP_BUMP:
            out[i] = devalloc.bump(ctx, size[i])
        elif o == L.OP_MARK:
            m = devalloc.mark(ctx, states[slot[i]])
            states[slot[i]] = m
            out[i] = m
        elif o == L.OP_SCOPED:
            got, s = devalloc.scoped(ctx, states[slot[i]], size[i])
            states[slot[i]] = s
            out[i] = got
        elif o == L.OP_RELEASE:
            m = off[i]
            if ref[i] >= 0:
                m = out[ref[i]]
            states[slot[i]] = devalloc.release(ctx, states[slot[i]], m)


def plan(events):
    """Return ``(op, ref, slot, nslots)`` for replaying ``events`` in order.

    ``ref[i]``: for a free, the event that allocated its block (-1: none in
    the trace); for a release, the event of its mark. ``slot[i]``: the
    recording thread's scope-state slot.
    """
    op = observed.op_codes(events)
    n = len(events)
    ref = np.full(n, -1, np.int64)
    slot = np.zeros(n, np.int64)
    live, marks, slots = {}, {}, {}
    for i in range(n):
        o, offset, thread = int(op[i]), int(events["offset"][i]), int(events["thread"][i])
        if o in (L.OP_MARK, L.OP_SCOPED, L.OP_RELEASE):
            slot[i] = slots.setdefault(thread, len(slots))
        if o == L.OP_ALLOC and offset != L.NULL:
            live[offset] = i
        elif o == L.OP_FREE and offset != L.NULL:
            ref[i] = live.pop(offset, -1)
        elif o == L.OP_MARK:
            marks.setdefault((thread, offset), []).append(i)
        elif o == L.OP_RELEASE:
            stack = marks.get((thread, offset))
            if stack:
                ref[i] = stack.pop()
    return op, ref, slot, max(1, len(slots))


def replay(events, capacity, *, debug=False, stream=0, page=None):
    """Replay ``events`` on a fresh heap of ``capacity`` bytes; return its ``Usage``.

    ``events``: a trace (``heap.trace()``, :func:`devalloc.host.observed.read_csv`)
    or the path of a CSV trace. ``page``: the heap's page (``Heap(page=)``;
    to see the same blocks as the traced heap, its ``heap.page``).
    ``debug=True`` replays on a debug heap and
    raises :class:`devalloc.HeapCorruption` for what it finds beyond the
    trace's own invalid frees. A
    trace with dropped events is replayed as far as it goes, with a warning.
    """
    if isinstance(events, (str, os.PathLike)):
        events = observed.read_csv(events)
    dropped = getattr(events, "dropped", 0)
    events = np.asarray(events)
    if events.dtype.names is None or not {"op", "nbytes", "offset", "thread"} <= set(events.dtype.names):
        raise TypeError("events must be a trace (heap.trace(), observed.read_csv()) or a CSV "
                        f"path, got an array of dtype {events.dtype}")
    if dropped:
        warnings.warn(f"the trace dropped {dropped} event(s) past its room: the replay "
                      "stops where the trace does", stacklevel=2)
    op, ref, slot, nslots = plan(events)
    with devalloc.Heap(capacity, debug=debug, stream=stream, page=page) as heap:
        if len(events):
            args = [cuda.to_device(a) for a in (
                op, events["nbytes"].astype(np.int64), events["offset"].astype(np.int64), ref, slot,
                np.full(len(events), L.NULL, np.int64), np.zeros(nslots, np.int64))]
            _replay_kernel[1, 1, heap.stream](heap.ctx, *args)
        u = heap.usage()
        if debug:
            try:
                heap.check()
            except HeapCorruption as e:
                # The trace's own invalid frees replay as invalid frees.
                worse = [r for r in e.records if r.kind != "invalid free"]
                if worse:
                    raise HeapCorruption(describe(worse), worse) from None
        return u
