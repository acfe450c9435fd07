"""Usage statistics: computed on the host from a copy of the metadata.

Pure NumPy over the ``int64`` metadata array; no device code. Every figure
is exact when no kernel using the heap is running (``Heap.usage``
synchronizes before copying).
"""

from dataclasses import dataclass, field, asdict

import numpy as np

from . import layout as L


@dataclass(frozen=True)
class ClassUsage:
    """One size class: blocks live, slabs held, bytes wasted inside blocks."""

    size: int
    blocks_live: int
    slabs: int
    #: Bytes of the slabs held that no live block occupies.
    slack_bytes: int


@dataclass(frozen=True)
class Usage:
    """A heap's usage since its last reset. All counts are exact.

    ``in_use`` counts live blocks at the granularity reserved for them (the
    size class of a small block, whole pages of a large one); ``allocs``,
    ``frees`` and ``live_blocks`` count ``alloc``/``free`` blocks only. Bump
    blocks and scoped scratch are counted apart: ``bump_allocs``,
    ``bump_bytes``, ``scoped_chunks`` and ``scoped_bytes`` (whole chunks),
    and they are in ``reserved`` and ``peak``. Threads' scoped chunks are
    blocks of the heap, so ``Heap.live()`` lists them:
    ``len(heap.live()) == live_blocks + scoped_chunks``. ``reserved``
    counts whole pages held by slabs and large blocks, and ``peak`` is the
    high-water mark of ``reserved``: the capacity this epoch needed. Like
    RMM's statistics, ``capacity - in_use`` does not say which request will
    succeed: free space may be split across slabs and pages.
    """

    capacity: int
    in_use: int
    reserved: int
    peak: int
    allocs: int
    frees: int
    failed: int
    invalid_frees: int
    live_blocks: int
    classes: dict = field(default_factory=dict, compare=False)
    #: Blocks handed out by ``bump`` (never freed one by one; ``reset`` frees them).
    bump_allocs: int = 0
    #: Bytes of the arena held by bump chunks (whole pages).
    bump_bytes: int = 0
    #: Bytes of the arena held by threads' scoped-scratch chunks (whole pages).
    scoped_bytes: int = 0
    #: Scoped-scratch misuse: a release out of LIFO order, a scoped call
    #: outside any scope, too deep a nesting.
    scope_misuse: int = 0
    #: Live blocks of whole pages (over 8 KiB), scoped chunks included.
    large_blocks: int = 0
    #: Scoped-scratch chunks threads hold now: blocks that ``Heap.live()``
    #: lists and ``live_blocks`` leaves out.
    scoped_chunks: int = 0

    def suggest_capacity(self, headroom=0.25):
        """Return a ``Heap`` capacity whose arena holds ``peak * (1 + headroom)``.

        The result counts the metadata too, so ``Heap(u.suggest_capacity())``
        has room for what this epoch needed plus the headroom (at least one
        page). ``headroom`` is a fraction >= 0.
        """
        if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not (
            headroom >= 0 and headroom != float("inf")
        ):
            raise ValueError(f"headroom must be a finite fraction >= 0, got {headroom!r}")
        need = self.peak * (1.0 + headroom)
        pages = max(1, -(-int(round(need)) // L.PAGE))
        return L.capacity_for_pages(pages)

    def __str__(self):
        """Return the usage report: an aligned table (:mod:`devalloc.report`)."""
        from .report import format_usage

        return format_usage(self)

    def to_dict(self):
        """Return the usage as plain JSON-serialisable data."""
        d = asdict(self)
        d["classes"] = {int(k): asdict(v) for k, v in self.classes.items()}
        return d


def usage_from_meta(meta, npages):
    """Return the :class:`Usage` described by metadata ``meta`` of ``npages``."""
    meta = np.asarray(meta, dtype=np.int64)
    state = meta[L.STATE_BASE:L.STATE_BASE + npages]
    tag = state & L.TAG_MASK
    n = (state >> L.N_SHIFT) & L.N_MASK
    count = (state & L.COUNT_MASK) >> L.COUNT_SHIFT

    heads = tag == L.TAG_HEAD
    large_live = int(heads.sum())
    large_bytes = int(n[heads].sum()) * L.PAGE

    classes = {}
    small_live = 0
    small_bytes = 0
    for c in range(L.NCLASSES):
        slabs = tag == L.slab_tag(c)
        nslabs = int(slabs.sum())
        if not nslabs:
            continue
        size = L.class_size(c)
        live = int((n[slabs] & L.LIVE_MASK).sum())
        small_live += live
        small_bytes += live * size
        classes[size] = ClassUsage(size, live, nslabs, nslabs * L.PAGE - live * size)

    reserved_pages = int((tag != L.TAG_FREE).sum())
    bump_bytes = int(n[tag == L.TAG_BUMP].sum()) * L.PAGE
    bump_word = int(meta[L.H_BUMP])
    bump_allocs = int(meta[L.H_BUMP_DONE]) + ((bump_word >> L.BUMP_COUNT_SHIFT) & L.BUMP_COUNT_MAX)
    live = small_live + large_live
    allocs = int(count.sum()) + int(meta[L.H_ALLOC_FOLD]) - int(meta[L.H_ALLOC_UNDO])
    stripes = [L.stripe_word(s, 0) for s in range(L.STRIPES)]
    failed = int(sum(meta[w + L.S_FAILED] for w in stripes))
    invalid = int(sum(meta[w + L.S_INVALID] for w in stripes))
    misuse = int(sum(meta[w + L.S_SCOPE_MISUSE] for w in stripes))
    # Scoped chunks are blocks too; take them out of the alloc/free figures.
    chunks = int(sum(meta[w + L.S_SCOPE_CHUNKS] for w in stripes))
    chunks_live = int(sum(meta[w + L.S_SCOPE_LIVE] for w in stripes))
    scoped_bytes = int(sum(meta[w + L.S_SCOPE_BYTES] for w in stripes))
    allocs -= chunks
    live -= chunks_live
    return Usage(
        capacity=npages * L.PAGE,
        in_use=small_bytes + large_bytes - scoped_bytes,
        reserved=reserved_pages * L.PAGE,
        peak=int(meta[L.H_PEAK_PAGES]) * L.PAGE,
        allocs=allocs,
        frees=allocs - live,
        failed=failed,
        invalid_frees=invalid,
        live_blocks=live,
        classes=classes,
        bump_allocs=bump_allocs,
        bump_bytes=bump_bytes,
        scoped_bytes=scoped_bytes,
        scope_misuse=misuse,
        large_blocks=large_live,
        scoped_chunks=chunks_live,
    )


#: Slabs unpacked at once by :func:`live_blocks` (1 KiB of bits each).
_SLAB_BATCH = 4096
_CLASS_SIZES = np.array([L.class_size(c) for c in range(L.NCLASSES)], np.int64)


def live_blocks(meta, npages):
    """Return the live blocks as sorted ``(offset, reserved size)`` pairs.

    Vectorized over pages: a slab's live blocks are those below its cursor
    whose freed bit is clear; a large block is its HEAD page.
    """
    meta = np.asarray(meta, dtype=np.int64)
    state = meta[L.STATE_BASE:L.STATE_BASE + npages]
    tag = state & L.TAG_MASK
    heads = np.flatnonzero(tag == L.TAG_HEAD)
    offs = [heads * L.PAGE]
    sizes = [((state[heads] >> L.N_SHIFT) & L.N_MASK) * L.PAGE]
    slabs = np.flatnonzero((tag >= 1) & (tag <= L.NCLASSES))
    bitmaps = meta[L.bits_base(npages):L.free_tree(npages)].reshape(npages, L.BITMAP_WORDS)
    block = np.arange(L.MAX_SLAB_BLOCKS)
    for lo in range(0, len(slabs), _SLAB_BATCH):
        pages = slabs[lo:lo + _SLAB_BATCH]
        # Bit k of word w is block 32 w + k: unpack the low 4 bytes of each
        # word, least significant bit first.
        words = bitmaps[pages].astype("<u4")
        freed = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")
        cursor = (state[pages] >> L.CURSOR_SHIFT) & L.CURSOR_MASK
        slab, k = np.nonzero((freed == 0) & (block < cursor[:, None]))
        size = _CLASS_SIZES[tag[pages] - 1][slab]
        offs.append(pages[slab] * L.PAGE + k * size)
        sizes.append(size)
    offs = np.concatenate(offs)
    sizes = np.concatenate(sizes)
    order = np.argsort(offs, kind="stable")
    return list(zip(offs[order].tolist(), sizes[order].tolist()))
