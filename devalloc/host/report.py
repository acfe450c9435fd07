"""The usage report: :class:`~devalloc.host.stats.Usage` as an aligned text table.

Pure formatting: ``format_usage(usage)`` reads only the attributes of a
``Usage`` (``str(usage)`` calls it) and imports neither numba nor a device
module. Every number in the table is an attribute printed as an exact
integer; byte counts also get a human-readable size beside them::

    heap usage
      capacity       1146880 B  (1.09 MiB)
      in use           50480 B  (49.3 KiB)
      reserved        344064 B  (336 KiB)
      peak            344064 B  (336 KiB)
      live blocks        256
      allocs             256
      frees                0
      failed               0
      invalid frees        0
      size class  blocks live  slabs held  slack bytes  slack
              16           19           1        16080  98.1%
              32           26           1        15552  94.9%

``slack bytes`` is a class's internal fragmentation as the heap sees it: the
bytes of the slabs (whole pages) it holds that no live block occupies, the
price of holding pages per size class; ``slack`` is their share of the
slabs' bytes. The heap does not record requested sizes, so the rounding of
a request up to its class size (at most 25 % above 128 B) is not in it.
A ``large`` row counts the live blocks of more than half a page (8 KiB by default; whole pages;
their bytes are in ``in use``). Class and large rows count every block the
heap holds, threads' scoped-scratch chunks included (those are reported as
``scoped chunks`` and kept out of ``in use``, ``allocs`` and ``frees``:
their bytes held now, the chunks held now and the chunks taken since the
reset, rows that appear once a thread took a chunk, so that a scoped-only
kernel's ``peak`` beside ``allocs 0`` says where it went); ``bump chunks``
and ``bump allocs`` rows appear once ``bump`` has been used, and a ``profile``
section (the counters of ``usage().profile``) for heaps made with
``profile=True``.

``format_worker_usage({worker: usage})`` prints the heaps of several Dask
workers (:func:`devalloc.host.distributed.usage`) as one table, a row per worker
and a total row::

    heap usage per worker
      worker                 capacity  in use  reserved    peak  live blocks  ...
      tcp://127.0.0.1:40155   1130496       0    344064  344064            0  ...
      tcp://127.0.0.1:40157   1130496     112    344064  360448            1  ...
      total                   2260992     112    688128  704512            1  ...

(then ``allocs``, ``frees``, ``failed`` and ``invalid frees``).
Every column of the total row is the sum over the workers; its peak is the
sum of each heap's own high-water mark, an upper bound of what the heaps
held at one moment (they need not peak together).
"""

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n):
    """Return ``n`` bytes as a short size, three significant digits: '1.09 MiB'."""
    n = int(n)
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    unit = 0
    while v >= 1024 and unit < len(_UNITS) - 1:
        v /= 1024
        unit += 1
    if unit == 0:
        return f"{sign}{int(v)} B"
    text = f"{v:.3g}" if v < 1000 else f"{v:.0f}"
    return f"{sign}{text} {_UNITS[unit]}"


def large_blocks(usage):
    """Return the live blocks not held by a size class (blocks above half a page)."""
    return usage.large_blocks


def _class_rows(usage):
    rows = []
    for size in sorted(usage.classes):
        c = usage.classes[size]
        held = c.slack_bytes + c.blocks_live * c.size  # = slabs * page size
        share = f"{100.0 * c.slack_bytes / held:.1f}%" if held > 0 else "-"
        rows.append((str(int(size)), str(int(c.blocks_live)), str(int(c.slabs)),
                     str(int(c.slack_bytes)), share))
    large = large_blocks(usage)
    if large:
        rows.append(("large", str(large), "-", "-", "-"))
    return rows


def format_usage(usage, title="heap usage"):
    """Return ``usage`` as a compact, aligned table of exact integers.

    ``title`` is the first line (for example, when the report follows a
    phase of a run: "heap usage between the passes").
    """
    byte_rows = [
        ("capacity", usage.capacity),
        ("in use", usage.in_use),
        ("reserved", usage.reserved),
        ("peak", usage.peak),
    ]
    # Where reserved bytes are besides alloc's blocks: rows whenever the
    # kind was used this epoch, even once its bytes went back (peak says so).
    scoped_used = usage.scoped_bytes or usage.scoped_chunks_taken
    if usage.bump_allocs or usage.bump_bytes:
        byte_rows.append(("bump chunks", usage.bump_bytes))
    if scoped_used:
        byte_rows.append(("scoped chunks", usage.scoped_bytes))
    count_rows = [
        ("live blocks", usage.live_blocks),
        ("allocs", usage.allocs),
        ("frees", usage.frees),
        ("failed", usage.failed),
        ("invalid frees", usage.invalid_frees),
    ]
    if usage.bump_allocs or usage.bump_bytes:
        count_rows.append(("bump allocs", usage.bump_allocs))
    if scoped_used:
        count_rows.append(("scoped chunks held", usage.scoped_chunks))
        count_rows.append(("scoped chunks taken", usage.scoped_chunks_taken))
    if usage.scope_misuse:
        count_rows.append(("scope misuse", usage.scope_misuse))
    if usage.empty_requests:
        count_rows.append(("0-byte requests", usage.empty_requests))
    label_w = max(len(name) for name, _ in byte_rows + count_rows)
    num_w = max(len(str(int(v))) for _, v in byte_rows + count_rows)
    lines = [title]
    for name, v in byte_rows:
        lines.append(f"  {name:<{label_w}}  {int(v):>{num_w}} B  ({human_bytes(v)})")
    for name, v in count_rows:
        lines.append(f"  {name:<{label_w}}  {int(v):>{num_w}}")
    rows = _class_rows(usage)
    if not rows:
        lines.append("  no size class holds a slab")
    else:
        heads = ("size class", "blocks live", "slabs held", "slack bytes", "slack")
        widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(heads)]
        lines.append("  " + "  ".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
        for r in rows:
            lines.append("  " + "  ".join(f"{v:>{w}}" for v, w in zip(r, widths)))
    profile = getattr(usage, "profile", None)
    if profile:
        lines.append("  profile")
        w = max(len(k) for k in profile)
        vw = max(len(str(v)) for v in profile.values())
        for k, v in profile.items():
            lines.append(f"    {k.replace('_', ' '):<{w}}  {v:>{vw}}")
    return "\n".join(lines)


#: The columns of the per-worker table: (heading, Usage attribute).
WORKER_COLUMNS = (
    ("capacity", "capacity"),
    ("in use", "in_use"),
    ("reserved", "reserved"),
    ("peak", "peak"),
    ("live blocks", "live_blocks"),
    ("allocs", "allocs"),
    ("frees", "frees"),
    ("failed", "failed"),
    ("invalid frees", "invalid_frees"),
)


def format_worker_usage(usages, title="heap usage per worker"):
    """Return ``{worker: Usage}`` as one aligned table with a total row.

    A row per worker (in the mapping's order), exact integers, bytes in the
    first four columns; the last row sums every column.
    """
    rows = [(str(w), *(int(getattr(u, a)) for _, a in WORKER_COLUMNS))
            for w, u in usages.items()]
    total = ("total", *(sum(r[k] for r in rows) for k in range(1, len(WORKER_COLUMNS) + 1)))
    heads = ("worker", *(h for h, _ in WORKER_COLUMNS))
    cells = [heads] + [tuple(str(v) for v in r) for r in rows + [total]]
    widths = [max(len(c[k]) for c in cells) for k in range(len(heads))]
    lines = [title]
    for c in cells:
        lines.append("  " + "  ".join(
            f"{v:<{w}}" if k == 0 else f"{v:>{w}}" for k, (v, w) in enumerate(zip(c, widths))))
    return "\n".join(lines)
