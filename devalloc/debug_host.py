"""Host side of debug mode: decode records, check guards. Pure NumPy."""

from dataclasses import dataclass

import numpy as np

from . import debug_device as D

KINDS = {
    D.KIND_INVALID_FREE: "invalid free",
    D.KIND_GUARD: "guard bytes overwritten",
    D.KIND_SCOPED_REUSE: "scoped scratch written after its release",
}


@dataclass(frozen=True)
class Record:
    """One misuse: its kind, the block offset, and who did it (if known).

    ``block`` and ``thread`` are linear indices within the launch that
    freed the block; -1 when the host found it (``check``), not a thread.
    """

    kind: str
    offset: int
    block: int
    thread: int
    size: int = -1

    def __str__(self) -> str:
        who = f"block {self.block}, thread {self.thread}" if self.block >= 0 else "found by check()"
        size = f" (requested {self.size} B)" if self.size >= 0 else ""
        return f"{self.kind} at offset {self.offset}{size}: {who}"


def requested_size(arena, off, size):
    """Return the requested size stored at the end of the debug block at ``off``."""
    return int(np.asarray(arena[off + size - 8:off + size]).view(np.int64)[0])


def device_records(debug):
    """Return the records written by device code, first ones first."""
    n = min(int(debug[0]), D.RECORDS)
    out = []
    for i in range(n):
        kind, off, block, thread = (int(x) for x in debug[D.RECORD_BASE + i * D.RECORD_WORDS:
                                                      D.RECORD_BASE + (i + 1) * D.RECORD_WORDS])
        out.append(Record(KINDS.get(kind, f"kind {kind}"), off, block, thread))
    return out


def guard_violations(arena, blocks):
    """Return a record for every live debug block whose guard bytes changed."""
    out = []
    for off, size in blocks:
        n = requested_size(arena, off, size)
        guard = arena[off + n:off + n + D.GUARD] if 0 <= n <= size - 8 - D.GUARD else None
        if guard is None or np.any(np.asarray(guard) != D.GUARD_BYTE):
            out.append(Record(KINDS[D.KIND_GUARD], off, -1, -1, n))
    return out


def find_corruption(debug, arena, blocks):
    """Return every record: device records first, then live-block guard checks."""
    return device_records(debug) + guard_violations(arena, blocks)


def describe(records):
    """Return a message naming the first records."""
    head = "; ".join(str(r) for r in records[:5])
    more = f" (and {len(records) - 5} more)" if len(records) > 5 else ""
    return f"heap corruption: {head}{more}"
