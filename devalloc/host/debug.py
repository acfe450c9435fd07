"""Host side of debug mode: decode records, check guards. Pure NumPy."""

from dataclasses import dataclass

import numpy as np

from .. import layout as D

KINDS = {
    D.KIND_INVALID_FREE: "invalid free",
    D.KIND_GUARD: "guard bytes overwritten",
    D.KIND_SCOPED_REUSE: "scoped scratch written after its release",
    D.KIND_MISALIGNED_VIEW: "view at an offset not aligned to its dtype (an empty view)",
    D.KIND_INVALID_BLOCK: "realloc or usable_size of an offset that is no live block",
}


@dataclass(frozen=True)
class Record:
    """One misuse: its kind, the block offset, and who did it (if known).

    ``block`` and ``thread`` are the CUDA block and the thread in it (linear
    indices within the launch) that freed the heap block; -1 when the host
    found it (``check``), not a thread.
    """

    kind: str
    offset: int
    block: int
    thread: int
    size: int = -1
    #: What else the host can tell, e.g. that the offset is beyond this heap.
    note: str = ""

    def __str__(self) -> str:
        who = (f"CUDA block {self.block}, thread {self.thread}" if self.block >= 0
               else "found by check()")
        size = f" (requested {self.size} B)" if self.size >= 0 else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.kind} at offset {self.offset}{size}{note}: {who}"


def requested_size(sizes, off, size):
    """Return the requested size of the live debug block at ``off`` of real ``size``.

    ``sizes`` is the debug heap's table of slacks (real size minus requested
    size), kept outside the arena.
    """
    return int(size) - int(sizes[off >> D.DEBUG_SLOT_SHIFT])


def device_records(debug, capacity):
    """Return the records written by device code, first ones first.

    An invalid free beyond the ``capacity``-byte arena is noted as an offset
    that cannot be this heap's: one from another heap, most likely.
    """
    n = min(int(debug[0]), D.RECORDS)
    out = []
    for i in range(n):
        kind, off, block, thread = (int(debug[D.record_word(i, f)])
                                    for f in (D.R_KIND, D.R_OFFSET, D.R_BLOCK, D.R_THREAD))
        note = ""
        if kind == D.KIND_INVALID_FREE and off >= capacity:
            note = f"beyond this heap's {capacity}-byte arena: an offset from another heap?"
        out.append(Record(KINDS.get(kind, f"kind {kind}"), off, block, thread, note=note))
    return out


def guard_violations(arena, sizes, blocks):
    """Return a record for every live debug block whose guard bytes changed."""
    out = []
    for off, size in blocks:
        n = requested_size(sizes, off, size)
        guard = np.asarray(arena[off + n:off + n + D.GUARD])
        if np.any(guard != D.GUARD_BYTE):
            out.append(Record(KINDS[D.KIND_GUARD], off, -1, -1, n))
    return out


def find_corruption(debug, arena, sizes, blocks):
    """Return every record: device records first, then live-block guard checks."""
    return device_records(debug, arena.size) + guard_violations(arena, sizes, blocks)


def describe(records):
    """Return a message naming the first records."""
    head = "; ".join(str(r) for r in records[:5])
    more = f" (and {len(records) - 5} more)" if len(records) > 5 else ""
    return f"heap corruption: {head}{more}"
