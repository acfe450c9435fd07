"""The normal heap's ``alloc`` and ``free``: classify, group, serve, account.

``alloc`` reads as a pipeline: classify the request (size class, large, or
invalid), form the warp group of lanes asking for the same class
(:mod:`devalloc.device.warp`), serve it (:mod:`devalloc.device.slab` for
blocks up to MAX_SMALL, :mod:`devalloc.device.pages` for whole pages), then
count a failure (the claim's atomic is an acquire: no fence). ``free`` finds
the page's kind from its state word and hands the block to the slab or page
path. Every shared word, the invariants and the memory-ordering argument:
docs/correctness.md.
Callers: the public dispatchers in :mod:`devalloc.device.api` (and the debug
path, which wraps these).
"""

from numba import cuda, int64

from .. import layout as L
from . import warp
from ._meta import _at, _count, _lo32, _load, _npages, _prof_of, _pshift
from .outline import outline
from .pages import _alloc_large, _free_large
from .slab import _alloc_small, _free_small, _size_class

#: What ``_alloc_uncounted`` returns for a request of 0 bytes (``alloc``
#: returns NULL for it, counted in ``empty_requests``): never an offset.
_EMPTY = -2


@cuda.jit(device=True)
def _alloc_uncounted(meta, npages, nbytes, prof):
    """``alloc`` without the failure count; offset, NULL, or ``_EMPTY`` for 0 bytes.

    Every lane calls ``warp.group`` once: lanes asking for the same size
    class form a group; the others a group of one each.
    """
    n = int64(nbytes)
    ps = _pshift(meta)
    small = n > 0 and n <= L.max_small(ps)
    c = int64(0)
    key = warp.solo_key()
    if small:
        c = int64(_size_class(n))
        key = c
    mask, leader, rank, lanes = warp.group(key)
    if small:
        return _alloc_small(meta, npages, c, mask, leader, rank, lanes, prof)
    if n > 0 and n <= (npages << ps):
        return _alloc_large(meta, npages, L.pages_for(n, ps), prof)
    # (0 bytes told apart here, where n is live anyway: a test after the
    # search would keep it live across it, 5 more registers on sm_90)
    return int64(_EMPTY) if n == 0 else int64(L.NULL)


@cuda.jit(device=True)
def alloc(ctx, nbytes):
    """Allocate a block of at least ``nbytes`` bytes; return its offset.

    Any thread of any kernel may call, in divergent code too; lanes never
    wait for lanes that are not calling. The offset is a multiple of 16 into
    ``ctx.arena``.

    Atomics, blocks up to half a page (8 KiB in the default 16 KiB
    pages): one ``cas`` on a page state word per group of lanes of a warp
    asking for the same size class (a lone lane is a group of one) while
    the slab has never-used blocks; reusing freed blocks
    adds one ``and`` on a bitmap word per group. Large blocks: one ``cas``
    per page. Plus the pages-used ``add`` and peak ``max`` when a page is
    taken, and the hint ``exch`` when a group moves to another page. The
    claiming atomic is an acquire (no fence): the caller's accesses to the
    block come after the previous owner's (docs/correctness.md).

    :returns: the offset, or ``devalloc.NULL`` if ``nbytes <= 0``, if it is
        larger than the arena, or if no space is found; NULL results are
        counted in ``failed``, but for 0 bytes, counted in
        ``empty_requests`` (nothing to serve is not a failure).
    """
    meta = ctx.meta
    off = _alloc_uncounted(meta, _npages(ctx), nbytes, _prof_of(ctx))
    if off < 0:  # NULL, or _EMPTY: a request for 0 bytes
        _count(meta, L.S_EMPTY if off == _EMPTY else L.S_FAILED)
        off = int64(L.NULL)
    return off


@cuda.jit(device=True)
def _free_live(ctx, o):
    """``free`` of an offset that is not NULL: 1, or 0 for an invalid free."""
    meta = ctx.meta
    npages = _npages(ctx)
    ps = _pshift(meta)
    ok = 0
    inside = o >= 0 and o < (npages << ps) and o & (L.ALIGN - 1) == 0
    p = _lo32(o >> ps)  # 32 bits, so metadata indices are 32-bit sums
    rel = o & ((int64(1) << ps) - 1)
    s = int64(0)
    if inside:
        # A relaxed load: it reads the claim that handed this block out or a
        # later value, since that claim happened before this call (our own
        # alloc, or another thread's passed on with release and acquire).
        s = _load(meta, _at(L.state_word(p)))  # see "Known limits"
    t = L.state_tag(s)
    if inside and L.is_slab_tag(t):
        ok = _free_small(meta, npages, p, s, rel, _prof_of(ctx))
    else:
        warp.join_alone()  # no group needed (simulator: joins the rendezvous)
        if inside and t == L.TAG_HEAD and rel == 0:
            ok = _free_large(meta, npages, p, _prof_of(ctx))
    if not ok:
        _count(meta, L.S_INVALID)
    return ok


#: The body of ``free`` past its NULL test: ``_free_live`` itself, or, with
#: :mod:`devalloc.device.outline` enabled, one out-of-line copy per kernel
#: (the NULL test stays inline at each site: a free of NULL calls nothing).
_free_live_site = outline(_free_live, pages=True)


@cuda.jit(device=True)
def free(ctx, off):
    """Return the block at offset ``off`` to the heap.

    Any thread may call, in divergent code too. ``free(ctx, NULL)`` does
    nothing. An offset that is not a live block (double free, inside a
    block, outside the heap) changes nothing and is counted in
    ``invalid_frees``.

    Atomics: for small blocks one ``or`` on the bitmap word and one ``add``
    on the page state word (both release) per group of lanes of a warp
    freeing blocks of the same bitmap word (a lone lane is a group of one),
    plus the retire (a ``cas``, an ``exch`` and the pages-used ``add``) when
    the slab empties; for a large block a release fence, one ``cas`` on its
    head page, one ``and`` per tail page and the pages-used ``add``.

    :returns: 1 if a block was freed (or ``off`` is NULL), 0 for an invalid
        free (the observed heaps' trace tells them apart).
    """
    o = int64(off)
    if o == L.NULL:
        warp.join_alone()  # free: no group (simulator: joins the rendezvous)
        return 1
    return _free_live_site(ctx, o)  # one copy per kernel when outlined


#: What the public dispatchers call (:mod:`devalloc.device.api`; the debug and
#: observed paths too): ``alloc`` itself, or, with
#: :mod:`devalloc.device.outline` enabled, one out-of-line copy per kernel
#: that every call site calls; ``free`` (whose body past the NULL test is
#: outlined in that mode).
alloc_site = outline(alloc, pages=True)
free_site = free
