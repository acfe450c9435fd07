"""The comparison of ways to give threads scratch: one row per method, as the demo prints it.

Every example runs the same work several ways, on the same random numbers:

* ``heap``: devalloc's ``alloc``/``free`` (or scoped scratch);
* ``worst case``: a ``threads x worst case`` array, the way it is written today;
* ``count + scan + exact``: a first kernel counts what each thread needs, an
  exclusive prefix sum on the device (:mod:`._scan`) turns the counts into
  offsets, the host reads the total (one synchronisation) and allocates
  exactly that, and a second kernel redoes the work from the same random
  streams and fills;
* ``CUDA malloc (NRT)``: ``np.empty`` inside the kernel, which numba-cuda's
  NRT serves with CUDA's device ``malloc`` and frees when the array dies
  (compiled with NRT on; run only on a GPU).

A :class:`Method` holds what the demo's table shows: the device memory the
method's scratch takes at its peak, kernel launches, host synchronisations
the method needs (not the ones the demo adds to read figures), whether it
does (part of) the work twice, the time (on a GPU: wall clock between two
device synchronisations, kernels compiled beforehand; None on the
simulator) and whether its answers are identical, bit for bit, to the
worst-case twin's.

Imports no numba.
"""

from dataclasses import asdict, dataclass

HEAP = "heap"
#: step_scratch's second heap version (HEAP is its scoped one).
HEAP_ALLOC_FREE = "heap, alloc/free"
WORST = "worst case"
EXACT = "count + scan + exact"
NRT = "CUDA malloc (NRT)"
#: The table's order.
ORDER = (HEAP, HEAP_ALLOC_FREE, EXACT, NRT, WORST)


@dataclass
class Method:
    """One row of the comparison."""

    name: str
    #: Device bytes the method's scratch takes at its peak (None: not measured).
    peak_bytes: int | None = None
    launches: int = 0
    syncs: int = 0
    #: The method does (part of) the work twice (the counting pass).
    twice: bool = False
    #: Seconds on a GPU; None on the simulator, or when not run.
    seconds: float | None = None
    #: Answers identical to the worst-case twin's; None when not run.
    identical: bool | None = None
    #: Heap only: bytes in live blocks at the example's snapshot, and the metadata.
    in_use_bytes: int | None = None
    meta_bytes: int | None = None
    #: Count + scan only: the exact buffer, and the scan's arrays (in peak_bytes too).
    exact_bytes: int | None = None
    scan_bytes: int | None = None
    #: Local memory per thread a pass needs (the counting pass's stack), in peak_bytes.
    local_bytes_per_thread: int | None = None
    #: Why a method did not run, or what its figure means.
    note: str = ""

    def to_dict(self):
        """Return the row as JSON data."""
        return asdict(self)


def combine(rows_per_shard):
    """Return the rows of several shards as one: bytes, launches and syncs add up.

    ``identical`` holds if it holds in every shard; the time is the longest.
    """
    out = {}
    for rows in rows_per_shard:
        for name, m in rows.items():
            if name not in out:
                out[name] = Method(**asdict(m))
                continue
            o = out[name]
            for f in ("peak_bytes", "in_use_bytes", "meta_bytes", "exact_bytes", "scan_bytes"):
                a, b = getattr(o, f), getattr(m, f)
                setattr(o, f, None if a is None or b is None else a + b)
            o.launches += m.launches
            o.syncs += m.syncs
            if o.seconds is not None and m.seconds is not None:
                o.seconds = max(o.seconds, m.seconds)
            if o.identical is not None and m.identical is not None:
                o.identical = o.identical and m.identical
    return out


def _bytes(m):
    if m.peak_bytes is None:
        return "needs a GPU" if m.note == "needs a GPU" else "-"
    text = f"{m.peak_bytes:,}"
    parts = []
    if m.in_use_bytes is not None:
        parts.append(f"in use {m.in_use_bytes:,}")
    if m.meta_bytes is not None:
        parts.append(f"metadata {m.meta_bytes:,}")
    if m.exact_bytes is not None:
        parts.append(f"exact {m.exact_bytes:,}")
    if m.scan_bytes is not None:
        parts.append(f"scan {m.scan_bytes:,}")
    if m.local_bytes_per_thread:
        parts.append(f"local {m.local_bytes_per_thread:,}/thread")
    return text + (f" ({', '.join(parts)})" if parts else "")


def _yes(v):
    return "n/a" if v is None else ("yes" if v else "NO" if v is False else str(v))


def format_table(rows, target):
    """Return the comparison table as lines of text (``rows``: name -> :class:`Method`)."""
    head = ("method", "device memory peak, bytes", "launches", "host syncs", "work twice",
            "time", "identical")
    body, notes = [], []
    for name in ORDER:
        m = rows.get(name)
        if m is None:
            continue
        ran = m.launches > 0
        if m.note and not (m.note == "needs a GPU" and target == "simulator" and not ran):
            notes.append(f"{name}: {m.note}")
        if m.seconds is not None:
            time = f"{1e3 * m.seconds:.2f} ms"
        else:
            time = "simulator" if target == "simulator" else "n/a"
        body.append((name, _bytes(m), str(m.launches) if ran else "-",
                     str(m.syncs) if ran else "-", "yes" if m.twice else "no",
                     time if ran else "-",
                     _yes(m.identical) if name != WORST else "(reference)"))
    widths = [max(len(r[c]) for r in (head, *body)) for c in range(len(head))]
    line = "  ".join
    out = [line(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
           line("-" * w for w in widths)]
    out += [line(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in body]
    return out + notes
