"""Usage statistics: computed on the host from a copy of the metadata.

Pure NumPy over the ``int64`` metadata array; no device code. Every figure
is exact when no kernel using the heap is running (``Heap.usage``
synchronizes before copying).
"""

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from .. import layout as L


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
    #: Per size class in use: its block size in bytes -> :class:`ClassUsage`.
    classes: dict[int, ClassUsage] = field(default_factory=dict, compare=False)
    #: Blocks handed out by ``bump`` (never freed one by one; ``reset`` frees them).
    bump_allocs: int = 0
    #: Bytes of the arena held by bump chunks (whole pages).
    bump_bytes: int = 0
    #: Bytes of the arena held by threads' scoped-scratch chunks (whole pages).
    scoped_bytes: int = 0
    #: Scoped-scratch misuse: a release out of LIFO order, a scoped call
    #: outside any scope, too deep a nesting.
    scope_misuse: int = 0
    #: Live blocks of whole pages (over half a page: 8 KiB with the default
    #: page), scoped chunks included.
    large_blocks: int = 0
    #: Scoped-scratch chunks threads hold now: blocks that ``Heap.live()``
    #: lists and ``live_blocks`` leaves out.
    scoped_chunks: int = 0
    #: Profile counters of a heap made with ``profile=True`` (keys:
    #: ``devalloc.layout.PROF_NAMES``), else None.
    profile: dict | None = field(default=None, compare=False)
    #: The heap's page size in bytes (``Heap(page=)``): slabs and large
    #: blocks hold whole pages of it.
    page: int = L.PAGE
    #: Requests for 0 bytes (``alloc``, ``bump``, ``scoped``, an empty
    #: ``array``): NULL, as documented, but not counted in ``failed``.
    empty_requests: int = 0
    #: Scoped-scratch chunks threads took since the last reset (held now or
    #: given back): where a scoped-only kernel's ``peak`` went.
    scoped_chunks_taken: int = 0

    def suggest_capacity(self, headroom: float = 0.25) -> int:
        """Return a ``Heap`` capacity whose arena holds ``peak * (1 + headroom)``.

        Whole pages, so ``Heap(u.suggest_capacity())`` has room for what this
        epoch needed plus the headroom (at least one page; the metadata is
        allocated beside it). ``headroom`` is a fraction >= 0.
        """
        if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not (
            headroom >= 0 and headroom != float("inf")
        ):
            raise ValueError(f"headroom must be a finite fraction >= 0, got {headroom!r}")
        need = self.peak * (1.0 + headroom)
        pages = max(1, -(-int(round(need)) // self.page))
        return pages * self.page

    def __str__(self) -> str:
        """Return the usage report: an aligned table (:mod:`devalloc.host.report`)."""
        from .report import format_usage

        return format_usage(self)

    def to_dict(self) -> dict[str, Any]:
        """Return the usage as plain JSON-serialisable data."""
        d = asdict(self)
        d["classes"] = {int(k): asdict(v) for k, v in self.classes.items()}
        return d


def total_usage(usages: Any) -> "Usage":
    """Return the :class:`Usage` of several heaps together: every figure added up.

    Size classes are merged class by class. ``peak`` is the sum of each
    heap's own high-water mark: what the heaps reserved at most at one
    moment if they peaked together (an upper bound otherwise). ``page`` is
    the largest of the heaps' pages.
    """
    usages = list(usages)
    if not usages:
        raise ValueError("total_usage() needs at least one Usage")
    names = [f.name for f in fields(Usage) if f.name not in ("classes", "profile", "page")]
    classes: dict[int, ClassUsage] = {}
    for u in usages:
        for size, c in u.classes.items():
            t = classes.get(size)
            classes[size] = c if t is None else ClassUsage(
                size, t.blocks_live + c.blocks_live, t.slabs + c.slabs,
                t.slack_bytes + c.slack_bytes)
    profile = None
    if all(u.profile is not None for u in usages):
        profile = {k: sum(u.profile[k] for u in usages) for k in usages[0].profile}
    return Usage(**{n: sum(getattr(u, n) for u in usages) for n in names},
                 classes=dict(sorted(classes.items())), profile=profile,
                 page=max(u.page for u in usages))


def usage_from_meta(meta: Any, npages: int) -> Usage:
    """Return the :class:`Usage` described by metadata ``meta`` of ``npages``.

    The page size is the heap's, read from the metadata's length
    (``layout.page_shift_of``).
    """
    meta = np.asarray(meta, dtype=np.int64)
    page = 1 << L.page_shift_of(len(meta))
    # The layout's accessors are plain arithmetic: they work on arrays too.
    state = meta[L.state_word(0):L.state_word(npages)]
    tag = L.state_tag(state)
    n = L.state_n(state)
    count = L.state_count(state)

    heads = tag == L.TAG_HEAD
    large_live = int(heads.sum())
    large_bytes = int(n[heads].sum()) * page

    classes = {}
    small_live = 0
    small_bytes = 0
    for c in range(L.NCLASSES):
        slabs = tag == L.slab_tag(c)
        nslabs = int(slabs.sum())
        if not nslabs:
            continue
        size = L.class_size(c)
        live = int(L.slab_live(state[slabs]).sum())
        small_live += live
        small_bytes += live * size
        classes[size] = ClassUsage(size, live, nslabs, nslabs * page - live * size)

    reserved_pages = int((tag != L.TAG_FREE).sum())
    bump_bytes = int(n[tag == L.TAG_BUMP].sum()) * page
    bump_word = int(meta[L.H_BUMP])
    bump_allocs = int(meta[L.H_BUMP_DONE]) + L.bump_count(bump_word)
    live = small_live + large_live
    allocs = int(count.sum()) + int(meta[L.H_ALLOC_FOLD]) - int(meta[L.H_ALLOC_UNDO])
    stripes = [L.stripe_word(s, 0) for s in range(L.STRIPES)]
    failed = int(sum(meta[w + L.S_FAILED] for w in stripes))
    invalid = int(sum(meta[w + L.S_INVALID] for w in stripes))
    misuse = int(sum(meta[w + L.S_SCOPE_MISUSE] for w in stripes))
    empty = int(sum(meta[w + L.S_EMPTY] for w in stripes))
    # Scoped chunks are blocks too; take them out of the alloc/free figures.
    chunks = int(sum(meta[w + L.S_SCOPE_CHUNKS] for w in stripes))
    chunks_live = int(sum(meta[w + L.S_SCOPE_LIVE] for w in stripes))
    scoped_bytes = int(sum(meta[w + L.S_SCOPE_BYTES] for w in stripes))
    allocs -= chunks
    live -= chunks_live
    return Usage(
        capacity=npages * page,
        in_use=small_bytes + large_bytes - scoped_bytes,
        reserved=reserved_pages * page,
        peak=int(meta[L.H_PEAK_PAGES]) * page,
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
        page=page,
        empty_requests=empty,
        scoped_chunks_taken=chunks,
    )


#: Slabs unpacked at once by :func:`live_blocks` (1 KiB of bits each).
_SLAB_BATCH = 4096
_CLASS_SIZES = np.array([L.class_size(c) for c in range(L.NCLASSES)], np.int64)


def live_blocks(meta: Any, npages: int) -> list[tuple[int, int]]:
    """Return the live blocks as sorted ``(offset, reserved size)`` pairs.

    Vectorized over pages: a slab's live blocks are those below its cursor
    whose freed bit is clear; a large block is its HEAD page. The page size
    is read from the metadata's length (``layout.page_shift_of``).
    """
    meta = np.asarray(meta, dtype=np.int64)
    ps = L.page_shift_of(len(meta))
    page = 1 << ps
    state = meta[L.state_word(0):L.state_word(npages)]
    tag = L.state_tag(state)
    heads = np.flatnonzero(tag == L.TAG_HEAD)
    offs = [heads * page]
    sizes = [L.state_n(state[heads]) * page]
    slabs = np.flatnonzero((tag >= 1) & (tag <= L.NCLASSES))  # is_slab_tag, vectorized
    nwords = L.bitmap_words(ps)
    bitmaps = meta[L.bits_base(npages):L.free_tree(npages, ps)].reshape(npages, nwords)
    block = np.arange(nwords * L.BITS_PER_WORD)
    for lo in range(0, len(slabs), _SLAB_BATCH):
        pages = slabs[lo:lo + _SLAB_BATCH]
        # Bit k of word w is block 32 w + k: unpack the low 4 bytes of each
        # word, least significant bit first.
        words = bitmaps[pages].astype("<u4")
        freed = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")
        cursor = L.slab_cursor(state[pages])
        slab, k = np.nonzero((freed == 0) & (block < cursor[:, None]))
        size = _CLASS_SIZES[L.slab_class(tag[pages])][slab]
        offs.append(pages[slab] * page + k * size)
        sizes.append(size)
    all_offs = np.concatenate(offs)
    all_sizes = np.concatenate(sizes)
    order = np.argsort(all_offs, kind="stable")
    return list(zip(all_offs[order].tolist(), all_sizes[order].tolist()))
