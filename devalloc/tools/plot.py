"""The demo's plot (``python -m devalloc demo --plot FILE``): occupancy and footprints.

Two panels: the heap's pages by size class (live blocks and slack, large
blocks' whole pages beside them) at the example's snapshot, and the device
bytes each way of running the example held at its peak (the heap, count +
scan + exact, CUDA's malloc on a GPU, the worst case). Needs matplotlib
(the ``[plot]`` extra); imported only when a plot is asked for.
"""

from .._examples import load
from ..host.report import human_bytes


def large_pages_bytes(usage):
    """Return the bytes of whole pages held by large blocks (beyond slabs and bump chunks)."""
    if not usage.large_blocks:
        return 0
    slabs = sum(c.slabs for c in usage.classes.values()) * usage.page
    return max(0, usage.reserved - slabs - usage.bump_bytes)


#: Colours of the footprint panel's bars, by method (kernels/_methods.py's names).
_METHOD_COLOURS = {"heap": "tab:blue", "heap, alloc/free": "tab:purple",
                   "count + scan + exact": "tab:green", "CUDA malloc (NRT)": "tab:orange",
                   "worst case": "tab:red"}


_METHOD_LABELS = {"heap": "heap peak\n(pages reserved)", "heap, alloc/free": "heap peak,\nalloc/free",
                  "count + scan + exact": "count + scan\n+ exact", "CUDA malloc (NRT)":
                  "CUDA malloc\n(NRT)", "worst case": "worst-case\npreallocation"}


def footprint_bars(s, r):
    """Return the footprint panel's bars, ``[(label, bytes, colour)]``: every way the
    example ran that has a figure (the heap's peak, its alloc/free version, count +
    scan, CUDA's malloc on a GPU, the worst case), in the comparison's order."""
    methods = getattr(r, "methods", None) or {}
    if not methods:
        return [("worst-case\npreallocation", s["worst_case_bytes"], "tab:red"),
                ("heap peak\n(pages reserved)", s["heap_peak_bytes"], "tab:blue")]
    bars = []
    for name in load("_methods").ORDER:
        m = methods.get(name)
        if m is not None and m.peak_bytes is not None:
            bars.append((_METHOD_LABELS.get(name, name), int(m.peak_bytes),
                         _METHOD_COLOURS.get(name, "tab:gray")))
    return bars


def plot(path, s, r):
    """Draw size-class occupancy and the footprint comparison to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (occ, foot) = plt.subplots(1, 2, figsize=(12, 4.5))
    snap = r.snapshot or r.usage
    label = r.snapshot_label or "at the end"
    sizes = sorted(snap.classes)
    large = large_pages_bytes(snap)
    if sizes or large:
        kib = 1.0 / 1024
        used = [snap.classes[z].blocks_live * z * kib for z in sizes]
        slack = [snap.classes[z].slack_bytes * kib for z in sizes]
        counts = [snap.classes[z].blocks_live for z in sizes]
        ticks = [str(z) for z in sizes]
        if large:  # blocks over half a page: whole pages, no slack
            used.append(large * kib)
            slack.append(0.0)
            counts.append(snap.large_blocks)
            ticks.append("large")
        xs = range(len(used))
        occ.bar(xs, used, color="tab:blue", label="live blocks")
        occ.bar(xs, slack, bottom=used, color="tab:gray", alpha=0.45,
                label="slack (slab bytes not in a live block)")
        for x, n in zip(xs, counts):
            occ.annotate(str(n), (x, used[x] + slack[x]), ha="center", va="bottom", fontsize=7)
        occ.set_xticks(list(xs), ticks, rotation=60, fontsize=7)
        occ.set_ylim(0, max(u + k for u, k in zip(used, slack)) * 1.12)  # room for the counts
        occ.set_xlim(-0.75, max(len(used), 6) - 0.25)  # a lone class stays a bar
        occ.set_xlabel("size class (bytes), large blocks (whole pages); blocks live above each bar")
        occ.set_ylabel("KiB of pages held")
        occ.legend(fontsize=8)
    else:
        occ.text(0.5, 0.5, "no live blocks at the end of the run:\n"
                 "every block was freed inside the kernel",
                 ha="center", va="center", transform=occ.transAxes)
        occ.set_xticks([])
        occ.set_yticks([])
    occ.set_title(f"size-class occupancy {label}", fontsize=10)

    bars = footprint_bars(s, r)
    if r.snapshot is not None:
        bars.append((f"heap in use\n{label}", snap.in_use, "tab:cyan"))
    names = [b[0] for b in bars]
    values = [b[1] / 1024 for b in bars]
    foot.barh(range(len(bars)), values, color=[b[2] for b in bars])
    foot.set_yticks(range(len(bars)), names, fontsize=8)
    foot.invert_yaxis()
    for y, (_, v, _) in enumerate(bars):
        foot.annotate(f" {v} B ({human_bytes(v)})", (v / 1024, y), va="center", fontsize=8)
    foot.set_xlim(0, max(values) * 1.45 if max(values) > 0 else 1)
    foot.set_xlabel("KiB")
    saved = s["saved_bytes"]
    foot.set_title(f"footprint: {human_bytes(abs(saved))} "
                   + ("saved" if saved >= 0 else "more on the heap"), fontsize=10)
    fig.suptitle(f"devalloc demo: {s['example']}, {s['threads']} threads, "
                 f"seed {s['seed']}, on the {s['target']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
