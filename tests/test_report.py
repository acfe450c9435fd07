"""The usage report: str(usage) is an aligned table of the exact figures."""

import json
import re

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import layout as L
from devalloc.host.report import WORKER_COLUMNS, format_usage, format_worker_usage, human_bytes
from devalloc.host.stats import ClassUsage, Usage, live_blocks, total_usage

BYTE_ROWS = {"capacity": "capacity", "in use": "in_use", "reserved": "reserved", "peak": "peak"}
COUNT_ROWS = {"live blocks": "live_blocks", "allocs": "allocs", "frees": "frees",
              "failed": "failed", "invalid frees": "invalid_frees"}


def parse(text):
    """Return ({label: int}, {size class or 'large': [columns]}, lines) from a report."""
    figures, classes = {}, {}
    lines = text.splitlines()
    in_classes = False
    for line in lines[1:]:
        if line.strip().startswith("size class"):
            in_classes = True
            continue
        if in_classes:
            cols = line.split()
            classes[cols[0] if cols[0] == "large" else int(cols[0])] = cols[1:]
            continue
        m = re.match(r"^  (\S+(?: \S+)?) +(-?\d+)( B  \((.+)\))?$", line)
        if m:
            figures[m.group(1)] = int(m.group(2))
    return figures, classes, lines


def check_report(u):
    text = str(u)
    assert text == format_usage(u)
    figures, classes, lines = parse(text)
    for label, attr in {**BYTE_ROWS, **COUNT_ROWS}.items():
        assert figures[label] == getattr(u, attr), label
    for size, c in u.classes.items():
        live, slabs, slack = (int(v) for v in classes[size][:3])
        assert (live, slabs, slack) == (c.blocks_live, c.slabs, c.slack_bytes)
    # Aligned: every figure ends in the same column, every class row too.
    ends = {re.search(r"\d+(?= B  \(|$)", line).end()
            for line in lines[1:10]}
    assert len(ends) == 1, text
    table = [line for line in lines if line.strip().split()[0].isdigit()
             or line.strip().startswith(("size class", "large"))]
    assert len({len(line) for line in table}) <= 1, text
    return text, classes


def test_report_shows_the_exact_figures_of_a_usage():
    u = Usage(capacity=1_146_880, in_use=83_248, reserved=344_064, peak=360_448,
              allocs=300, frees=42, failed=3, invalid_frees=1, live_blocks=258,
              classes={16: ClassUsage(16, 19, 1, 16_080), 1280: ClassUsage(1280, 1, 1, 15_104)},
              large_blocks=238)
    text, classes = check_report(u)
    assert text.splitlines()[0] == "heap usage"
    assert "  capacity       1146880 B  (1.09 MiB)" in text
    assert "  invalid frees        1" in text
    assert classes[16] == ["19", "1", "16080", "98.1%"]
    assert classes[1280] == ["1", "1", "15104", "92.2%"]
    # 258 live blocks, 20 in size classes: 238 large ones.
    assert classes["large"][0] == "238"


def test_report_of_an_empty_heap_says_no_class_holds_a_slab():
    u = Usage(L.PAGE, 0, 0, 0, 0, 0, 0, 0, 0)
    text, classes = check_report(u)
    assert classes == {}
    assert text.endswith("  no size class holds a slab")
    assert format_usage(u, title="heap usage at the end").startswith("heap usage at the end\n")


def test_usage_keeps_its_dataclass_repr_and_to_dict():
    u = Usage(16_384, 32, 16_384, 16_384, 2, 0, 0, 0, 2, {16: ClassUsage(16, 2, 1, 16_352)})
    assert repr(u).startswith("Usage(capacity=16384, in_use=32, reserved=16384")
    d = json.loads(json.dumps(u.to_dict()))
    assert d["classes"]["16"] == {"size": 16, "blocks_live": 2, "slabs": 1, "slack_bytes": 16_352}


def test_worker_table_has_a_row_per_worker_and_a_total_row():
    a = Usage(1_130_496, 112, 344_064, 360_448, 300, 299, 3, 1, 1)
    b = Usage(2_260_992, 0, 16_384, 32_768, 7, 7, 0, 0, 0)
    text = format_worker_usage({"tcp://10.0.0.1:40155": a, "tcp://10.0.0.2:1": b})
    lines = text.splitlines()
    assert lines[0] == "heap usage per worker"
    assert lines[1].split() == ["worker", "capacity", "in", "use", "reserved", "peak", "live",
                                "blocks", "allocs", "frees", "failed", "invalid", "frees"]
    rows = {line.split()[0]: [int(v) for v in line.split()[1:]] for line in lines[2:]}
    assert list(rows) == ["tcp://10.0.0.1:40155", "tcp://10.0.0.2:1", "total"]
    for name, u in (("tcp://10.0.0.1:40155", a), ("tcp://10.0.0.2:1", b)):
        assert rows[name] == [getattr(u, attr) for _, attr in WORKER_COLUMNS]
    assert rows["total"] == [x + y for x, y in zip(rows["tcp://10.0.0.1:40155"],
                                                   rows["tcp://10.0.0.2:1"])]
    assert rows["total"][0] == 3_391_488 and rows["total"][3] == 393_216
    # Aligned: every line as wide as the header, every figure right-aligned
    # under its heading.
    assert len({len(line) for line in lines[1:]}) == 1, text
    for heading, _ in WORKER_COLUMNS:
        end = lines[1].index(heading) + len(heading)
        assert all(line[end - 1] != " " and line[end:end + 1] in ("", " ")
                   for line in lines[2:]), (heading, text)


def test_worker_table_of_no_workers_is_a_zero_total():
    lines = format_worker_usage({}, title="none").splitlines()
    assert lines[0] == "none" and lines[2].split() == ["total"] + ["0"] * len(WORKER_COLUMNS)


def test_total_usage_adds_every_figure_and_merges_classes():
    a = Usage(16_384, 32, 16_384, 32_768, 2, 0, 1, 0, 2, {16: ClassUsage(16, 2, 1, 16_352)},
              bump_allocs=3, large_blocks=1)
    b = Usage(32_768, 112, 16_384, 16_384, 5, 4, 0, 2, 1,
              {16: ClassUsage(16, 1, 1, 16_368), 112: ClassUsage(112, 1, 1, 16_272)})
    t = total_usage([a, b])
    assert (t.capacity, t.in_use, t.reserved, t.peak, t.allocs, t.frees, t.failed,
            t.invalid_frees, t.live_blocks, t.bump_allocs, t.large_blocks) == (
        49_152, 144, 32_768, 49_152, 7, 4, 1, 2, 3, 3, 1)
    assert t.classes == {16: ClassUsage(16, 3, 2, 32_720), 112: ClassUsage(112, 1, 1, 16_272)}
    assert total_usage([a]) == a and total_usage([a]).classes == a.classes
    with pytest.raises(ValueError, match="at least one"):
        total_usage([])


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 1_146_880, 1 << 30, -2048)] == [
        "0 B", "1023 B", "1 KiB", "1.5 KiB", "1.09 MiB", "1 GiB", "-2 KiB"]


@cuda.jit
def mixed(ctx, offs):
    # Threads 0-9: 100 B (class 112), kept. 10-12: 16 B, freed. 13-14: 20000 B
    # (large: two pages), kept. 15: frees an offset inside a block (invalid).
    i = cuda.grid(1)
    if i < 10:
        offs[i] = devalloc.alloc(ctx, 100)
    elif i < 13:
        devalloc.free(ctx, devalloc.alloc(ctx, 16))
    elif i < 15:
        offs[i] = devalloc.alloc(ctx, 20_000)
    elif i == 15:
        devalloc.free(ctx, 8)


def test_report_from_a_real_heap_matches_the_attributes():
    heap = devalloc.Heap(1 << 20)
    offs = cuda.to_device(np.full(16, -1, np.int64))
    mixed[1, 16](heap.ctx, offs)
    u = heap.usage()
    text, classes = check_report(u)
    assert (u.allocs, u.frees, u.failed, u.invalid_frees, u.live_blocks) == (15, 3, 0, 1, 12)
    assert u.in_use == 10 * 112 + 2 * 2 * L.PAGE
    assert classes[112][:2] == ["10", "1"]
    assert classes["large"][0] == "2"
    assert 16 not in classes  # its slab was retired when emptied
    heap.reset()
    text, classes = check_report(heap.usage())
    assert classes == {}


@cuda.jit
def scoped_only(ctx, out):
    # Scoped scratch only: a scope, two allocations in it, released (the
    # chunk goes back to the heap): no alloc, a peak.
    i = cuda.grid(1)
    s = devalloc.SCOPE_NONE
    m = devalloc.mark(ctx, s)
    s = m
    off, s = devalloc.scoped(ctx, s, 200)
    off2, s = devalloc.scoped(ctx, s, 100)
    out[i] = off2 - off
    s = devalloc.release(ctx, s, m)


def test_report_of_a_scoped_only_kernel_says_where_the_peak_went():
    heap = devalloc.Heap(1 << 20)
    out = cuda.to_device(np.zeros(4, np.int64))
    scoped_only[1, 4](heap.ctx, out)
    u = heap.usage()
    assert (u.allocs, u.live_blocks, u.scoped_bytes, u.scoped_chunks) == (0, 0, 0, 0)
    assert u.peak > 0 and u.scoped_chunks_taken == 4  # a chunk a thread, given back
    text = str(u)
    assert re.search(r"^  scoped chunks +0 B  \(0 B\)$", text, re.M), text
    assert re.search(r"^  scoped chunks held +0$", text, re.M), text
    assert re.search(r"^  scoped chunks taken +4$", text, re.M), text
    heap.reset()
    assert "scoped chunks" not in str(heap.usage())  # a new epoch took none


def _live_block_by_block(meta, npages):
    # The definition, one block at a time: a HEAD page is a large block; a
    # slab's block is live when it lies below the cursor and its bit is clear.
    out = []
    for p in range(npages):
        s = int(meta[L.STATE_BASE + p])
        t = L.state_tag(s)
        if t == L.TAG_HEAD:
            out.append((p * L.PAGE, L.state_n(s) * L.PAGE))
        elif 1 <= t <= L.NCLASSES:
            size = L.class_size(t - 1)
            for b in range(L.slab_cursor(s)):
                word = int(meta[L.bits_base(npages) + p * L.BITMAP_WORDS + b // 32])
                if not word >> (b % 32) & 1:
                    out.append((p * L.PAGE + b * size, size))
    return out


@pytest.mark.parametrize("npages", [1, 7, 300])
def test_live_blocks_match_a_block_by_block_reading(npages):
    rng = np.random.default_rng(npages)
    meta = np.zeros(L.meta_words(npages), np.int64)
    for p in range(npages):
        kind = rng.random()
        if kind < 0.7:
            c = int(rng.integers(0, L.NCLASSES))
            cap = L.class_blocks(c)
            cursor = int(rng.integers(0, cap + 1))
            freed = np.flatnonzero(rng.integers(0, 2, cursor))
            live = cursor - len(freed)
            meta[L.STATE_BASE + p] = L.pack_state(L.slab_tag(c), live | cursor << 16, 5)
            for b in freed:
                meta[L.bits_base(npages) + p * L.BITMAP_WORDS + b // 32] |= 1 << int(b % 32)
        elif kind < 0.8:
            meta[L.STATE_BASE + p] = L.pack_state(L.TAG_HEAD, 1, 1)
        elif kind < 0.9:
            meta[L.STATE_BASE + p] = L.pack_state(L.TAG_BUMP, 1, 0)
    got = live_blocks(meta, npages)
    assert got == _live_block_by_block(meta, npages)
    assert all(type(off) is int and type(size) is int for off, size in got)
    assert [off for off, _ in got] == sorted(off for off, _ in got)


def test_live_blocks_unpacks_slabs_in_batches(monkeypatch):
    from devalloc.host import stats

    monkeypatch.setattr(stats, "_SLAB_BATCH", 3)
    test_live_blocks_match_a_block_by_block_reading(7)
