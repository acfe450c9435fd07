"""Device side: ``alloc`` and ``free``, called by GPU threads inside kernels.

The slab path is in :mod:`devalloc.device_slab`, large blocks and page
accounting in :mod:`devalloc.device_large`; this docstring covers all three.

Shared metadata (the ``int64`` array ``ctx.meta``; word layout in
:mod:`devalloc.layout`) and who touches it:

* **page state word** ``meta[STATE_BASE + p]`` (tag, n, count; a slab splits
  n into *live* and *cursor*). Written only with atomics: ``cas`` by
  allocators (take a free page as a slab, hand out blocks, reserve freed
  blocks, take pages for a large block), by the retire of an empty slab
  (slab -> RETIRING) and by ``free`` of a large block; ``add`` by ``free``
  of small blocks (give slots back); ``exch`` by the retiring thread
  (RETIRING -> FREE) and by a large claim crowning its head; ``and`` by
  large-block rollback and free (tail pages back to free, count kept).
  Plain loads only produce *guesses* that a later ``cas`` validates. The
  state word is the single source of truth for what a page is; while a slab
  has a live block its tag cannot change.
* **slab bitmap word**: bit set = the block, below the cursor, was *freed*.
  Set with ``or`` by ``free``; cleared with ``and`` by an allocator that
  reserved slots and takes freed blocks for them; cleared with plain stores
  by the retiring thread while the page is RETIRING (nobody else may touch
  it then). Blocks at or past the cursor were never handed out: a fresh
  slab needs no bitmap traffic at all.
* **global words** (pages used, peak, fold, undo): ``add``/``max`` on page-level
  events only (a slab taken or retired, a large block taken or freed), never
  per small allocation.
* **failure stripes**: ``add`` on the failure paths, striped by block index.
* **class hints** (HINT_SLOTS per class; a warp uses the slot its hashed
  warp number picks): racy ``exch`` stores and plain loads; any value is
  safe because every hint is range-checked and validated by the state ``cas``.

Invariant per slab: freed bits >= cursor - live, i.e. at least as many
blocks are marked freed as there are bumped blocks that are neither live nor
reserved (``free`` sets its bit before it gives the slot back; a reuser
reserves slots before it takes bits). So a reuser's picked bits exist unless
another reuser took them first, and when live reaches zero every bumped
block is marked freed: the retiring thread clears those bits, so a page
that becomes FREE has an all-zero bitmap and any class may take it.

Warp aggregation (:mod:`devalloc.warp`). Lanes of a warp that call ``alloc``
for the same size class at the same time form a group; its leader wins
blocks for all of them (one ``cas`` for a run of never-used blocks, or a
``cas`` and an ``and`` for freed blocks of one bitmap word) and broadcasts
a *grant*; lanes take their block by rank. Lanes that ``free`` blocks of one
bitmap word form a group; its leader sets all their bits with one ``or`` and
gives the slots back with one ``add``. A lone lane is a group of one.

Memory ordering. numba's atomics are relaxed. ``free`` issues
``cuda.threadfence()`` before the atomic that releases the block (release:
the owner's writes to the block are visible before anyone can claim it), and
``alloc`` issues one after the atomic that claims it (acquire: the new owner's
accesses happen after the claim). In a group the claiming or releasing
atomic is the leader's, so ``__syncwarp(mask)`` orders it with the lanes'
fences (a shuffle is no memory-ordering edge). The retiring thread fences
between clearing the bitmap and making the page FREE. Where one atomic must be
performed before the next (a free's ``or`` before its ``add``; a reuser's
``cas`` before its ``and``), the second is issued only once the first has
returned the value it depends on. Plain loads only choose what to try (a
page, a word, a hint); a stale one costs a skipped page or a retry, never a
wrong change, with one documented exception (an invalid free racing with
page reuse: docs/correctness.md).

Progress. No thread ever waits for another, with one exception that is
bounded: lanes of a group wait at the leader's ``shfl_sync``, and the leader
is on the same bounded path. There are no locks and no spins on a value
another thread must change. Every loop is bounded by the number of pages,
bitmap words, lanes or ``RETRIES``; running out of bounds returns NULL.
"""

from numba import cuda, int64

from . import layout as L
from . import warp
from .device_large import _alloc_large, _at, _free_large
from .device_slab import _alloc_small, _free_small
from .layout import pages_for, size_class, stripe_word


@cuda.jit(device=True)
def _count(meta, field):
    # Failure stripes: add, contended only among failing threads of blocks
    # that share a stripe. Ordering irrelevant: read by the host after sync.
    stripe = cuda.blockIdx.x % L.STRIPES
    cuda.atomic.add(meta, _at(stripe_word(stripe, field)), 1)


@cuda.jit(device=True)
def _alloc_uncounted(meta, npages, nbytes):
    """``alloc`` without the failure count and the fence; offset or NULL.

    Every lane calls ``warp.group`` once: lanes asking for the same size
    class form a group; the others a group of one each.
    """
    n = int64(nbytes)
    small = n > 0 and n <= L.MAX_SMALL
    c = int64(0)
    key = warp.solo_key()
    if small:
        c = size_class(n)
        key = c
    mask, leader, rank, lanes = warp.group(key)
    if small:
        return _alloc_small(meta, npages, c, mask, leader, rank, lanes)
    if n > 0 and n <= (npages << L.PAGE_SHIFT):
        return _alloc_large(meta, npages, pages_for(n))
    return int64(L.NULL)


@cuda.jit(device=True)
def alloc(ctx, nbytes):
    """Allocate a block of at least ``nbytes`` bytes; return its offset.

    Any thread of any kernel may call, in divergent code too; lanes never
    wait for lanes that are not calling. The offset is a multiple of 16 into
    ``ctx.arena``.

    Atomics, blocks up to 8 KiB: one ``cas`` on a page state word per group
    of lanes of a warp asking for the same size class (a lone lane is a
    group of one) while the slab has never-used blocks; reusing freed blocks
    adds one ``and`` on a bitmap word per group. Large blocks: one ``cas``
    per page. Plus the pages-used ``add`` and peak ``max`` when a page is
    taken, and the hint ``exch`` when a group moves to another page. Then
    one ``threadfence`` (acquire).

    :returns: the offset, or ``devalloc.NULL`` if ``nbytes <= 0``, if it is
        larger than the arena, or if no space is found; NULL results are
        counted in ``failed``.
    """
    meta = ctx.meta
    off = _alloc_uncounted(meta, ctx.arena.shape[0] >> L.PAGE_SHIFT, nbytes)
    if off == L.NULL:
        _count(meta, L.S_FAILED)
    else:
        cuda.threadfence()  # acquire: our accesses to the block follow the claim
    return off


@cuda.jit(device=True)
def free(ctx, off):
    """Return the block at offset ``off`` to the heap.

    Any thread may call, in divergent code too. ``free(ctx, NULL)`` does
    nothing. An offset that is not a live block (double free, inside a
    block, outside the heap) changes nothing and is counted in
    ``invalid_frees``.

    Atomics: one ``threadfence`` (release), then for small blocks one ``or``
    on the bitmap word and one ``add`` on the page state word per group of
    lanes of a warp freeing blocks of the same bitmap word (a lone lane is a
    group of one), plus the retire (a ``cas``, an ``exch`` and the pages-used
    ``add``) when the slab empties; for a large block one ``cas`` on its
    head page, one ``and`` per tail page and the pages-used ``add``.
    """
    meta = ctx.meta
    o = int64(off)
    if o == L.NULL:
        warp.join_alone()  # free: no group (simulator: joins the rendezvous)
        return
    npages = ctx.arena.shape[0] >> L.PAGE_SHIFT
    ok = 0
    inside = o >= 0 and o < (npages << L.PAGE_SHIFT) and o & (L.ALIGN - 1) == 0
    p = o >> L.PAGE_SHIFT
    rel = o - (p << L.PAGE_SHIFT)
    s = int64(0)
    if inside:
        # Release: our writes to the block are ordered before the atomic that
        # frees it. Being before the load, the fence also orders the load
        # after whatever made this offset known to us (docs/correctness.md).
        cuda.threadfence()
        s = meta[_at(L.STATE_BASE + p)]  # see "Known limits"
    t = s & L.TAG_MASK
    if inside and t >= 1 and t <= L.NCLASSES:
        ok = _free_small(meta, npages, p, s, rel)
    else:
        warp.join_alone()  # no group needed (simulator: joins the rendezvous)
        if inside and t == L.TAG_HEAD and rel == 0:
            ok = _free_large(meta, p)
    if not ok:
        _count(meta, L.S_INVALID)
