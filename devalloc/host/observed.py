"""Host side of observed heaps: profile counters and the allocation trace.

``Heap(capacity, profile=True)`` keeps device-side counters (striped, so
they are no hot spot) and ``usage().profile`` reports them;
``Heap(capacity, trace=N)`` records the first N events (alloc, free, bump,
mark, scoped, release) and ``heap.trace()`` returns them as a structured
array. :func:`write_csv` and :func:`read_csv` use the columns of RMM's
replay log (Thread, Time, Action, Pointer, Size, Stream), so tools written
for RMM logs read ours; :func:`devalloc.replay` runs a trace again.
Pure NumPy: imports no device code (layout.py, "trace record", "profile
counters", for the formats).
"""

import csv
import numbers

import numpy as np

from .. import layout as L

#: The fields of a trace, in sequence order (``op`` is a name of OP_NAMES).
TRACE_DTYPE = np.dtype([("seq", np.int64), ("op", "U12"), ("nbytes", np.int64),
                        ("offset", np.int64), ("thread", np.int64)])
#: Column order of RMM's replay log, which ours follows.
CSV_COLUMNS = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
_CODES = {name: code for code, name in L.OP_NAMES.items()}


class Trace(np.ndarray):
    """A structured array of trace events (:data:`TRACE_DTYPE`), in sequence
    order, with ``dropped``: the events past the heap's room, not kept."""

    dropped = 0

    def __array_finalize__(self, obj):
        self.dropped = getattr(obj, "dropped", 0)


def check_options(profile, trace):
    """Return ``(profile, trace)`` validated, or raise TypeError/ValueError saying why."""
    if not isinstance(profile, (bool, np.bool_)):
        raise TypeError(f"profile= must be True or False, got {type(profile).__name__}: "
                        f"{profile!r}")
    if isinstance(trace, (bool, np.bool_)) or not isinstance(trace, numbers.Integral):
        raise TypeError(f"trace= must be a number of events (an int >= 0), got "
                        f"{type(trace).__name__}: {trace!r}")
    if not 0 <= trace <= 1 << 32:
        raise ValueError(f"trace= must be between 0 and {1 << 32} events, got {trace}")
    return bool(profile), int(trace)


def profile_dict(prof):
    """Return the profile counters of ``prof`` words, summed over stripes.

    Plus ``failed_residual`` (``layout.PROF_DERIVED``): NULLs for a size the
    arena could hold that no search proved full.
    """
    words = np.asarray(prof, np.int64).reshape(L.PROF_STRIPES, L.PROF_STRIDE)
    sums = words.sum(axis=0)
    out = {name: int(sums[k]) for k, name in enumerate(L.PROF_NAMES)}
    out["failed_residual"] = out["failed_no_page"] - out["failed_full"]
    return out


def decode_trace(words, room):
    """Return the :class:`Trace` held by ``trace`` words with room for ``room`` events."""
    words = np.asarray(words, np.int64)
    attempted = int(words[0])
    n = min(attempted, room)
    ev = words[L.TRACE_BASE:L.trace_word(n, 0)].reshape(n, L.TRACE_WORDS)
    out = np.zeros(n, TRACE_DTYPE)
    out["seq"] = np.arange(n)
    out["op"] = [L.OP_NAMES.get(int(c), f"op{int(c)}") for c in ev[:, L.T_OP]]
    out["nbytes"] = ev[:, L.T_NBYTES]
    out["offset"] = ev[:, L.T_OFFSET]
    out["thread"] = ev[:, L.T_THREAD]
    out = out.view(Trace)
    out.dropped = attempted - n
    return out


def _action(op, offset):
    if op == "alloc":
        return "allocate failure" if offset == L.NULL else "allocate"
    if op in ("bump", "scoped") and offset == L.NULL:
        return f"{op} failure"
    return op


def write_csv(events, path):
    """Write trace ``events`` as CSV with RMM's columns; return ``path``.

    ``Time`` is the sequence number; ``Pointer`` the offset in hex (``0x0``
    on a failure row, as RMM writes; ``-0x1`` for a free of NULL); ``Size``
    the requested bytes; ``Stream`` 0. A mark's or release's Pointer is its mark.
    """
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for e in events:
            op, off = str(e["op"]), int(e["offset"])
            action = _action(op, off)
            ptr = "0x0" if action.endswith("failure") else hex(off)
            w.writerow((int(e["thread"]), int(e["seq"]), action, ptr, int(e["nbytes"]), 0))
    return path


def read_csv(path):
    """Return the :class:`Trace` written by :func:`write_csv` (or an RMM-style log).

    Columns are found by name; rows are put in ``Time`` order. RMM's
    ``allocate``/``free`` rows read as ``alloc``/``free``.
    """
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in ("Thread", "Time", "Action", "Pointer", "Size") if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: not a trace log: no column(s) {missing}; "
                         f"expected {', '.join(CSV_COLUMNS)}")
    out = np.zeros(len(rows), TRACE_DTYPE)
    for i, r in enumerate(rows):
        action = r["Action"].strip()
        failed = action.endswith(" failure")
        op = {"allocate": "alloc", "allocate failure": "alloc"}.get(action, action)
        op = op[:-len(" failure")] if failed and op != "alloc" else op
        if op not in _CODES:
            raise ValueError(f"{path}: row {i + 2}: unknown action {action!r}; known: "
                             f"{', '.join(sorted(set(_CODES) | {'allocate', 'allocate failure'}))}")
        out[i] = (int(r["Time"]), op, int(r["Size"]),
                  L.NULL if failed else int(r["Pointer"], 16), int(r["Thread"]))
    out = out[np.argsort(out["seq"], kind="stable")].view(Trace)
    return out


def op_codes(events):
    """Return the ``OP_*`` code of every event of ``events``."""
    try:
        return np.array([_CODES[str(o)] for o in events["op"]], np.int64)
    except KeyError as e:
        raise ValueError(f"unknown trace op {e.args[0]!r}; known: {', '.join(_CODES)}") from None
