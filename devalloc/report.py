"""The usage report: :class:`~devalloc.stats.Usage` as an aligned text table.

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
A ``large`` row counts the live blocks of more than 8 KiB (whole pages;
their bytes are in ``in use``). Class and large rows count every block the
heap holds, threads' scoped-scratch chunks included (those are reported as
``scoped chunks`` and kept out of ``in use``, ``allocs`` and ``frees``);
``bump chunks`` rows appear once ``bump`` has been used.
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
    """Return the live blocks not held by a size class (blocks above 8 KiB)."""
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
    if usage.bump_allocs or usage.bump_bytes:
        byte_rows.append(("bump chunks", usage.bump_bytes))
    if usage.scoped_bytes:
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
    if usage.scope_misuse:
        count_rows.append(("scope misuse", usage.scope_misuse))
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
        return "\n".join(lines)
    heads = ("size class", "blocks live", "slabs held", "slack bytes", "slack")
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(heads)]
    lines.append("  " + "  ".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
    for r in rows:
        lines.append("  " + "  ".join(f"{v:>{w}}" for v, w in zip(r, widths)))
    return "\n".join(lines)
