"""Bump allocation: monotonic blocks, released all at once by ``reset``.

``bump(ctx, n)`` hands out blocks that are never freed one by one, from
*bump chunks*: runs of pages of the same arena (no fixed partition), tagged
TAG_BUMP so that ``free`` rejects any offset inside them. The current chunk
is one word, H_BUMP (layout.py, "bump word"): ``cas`` by bump allocators
only, so a request that does not fit changes nothing. H_BUMP_DONE: ``add``
by the thread that replaced a chunk and by large bumps. Lanes of a warp
bumping one size form a group whose leader claims for all with one ``cas``.
Who races with whom: docs/correctness.md, "Bump and scoped scratch".
"""

from numba import cuda, int64, uint32

from .. import layout as L
from . import warp
from ._meta import (_acquire_cas, _count, _load, _npages, _opaque, _pcount, _prof_of,
                    _pshift, _release_cas)
from .outline import outline
from .pages import _alloc_pages, _free_pages


@cuda.jit(device=True)
def _claim(meta, npages, total, cnt, prof):
    """Claim ``total`` bytes (at most a chunk's: 32 bits) for ``cnt`` blocks from the current chunk.

    Installs a new chunk when the current one cannot hold them (or uses the
    one another thread installed meanwhile). Returns the
    offset of the claimed bytes or NULL. Atomics: one ``cas`` on H_BUMP when
    it fits; a chunk's page claims and one more ``cas`` when a chunk is
    installed (and its pages given back if another thread installed first).
    Every retry follows a change of H_BUMP (a lost ``cas``, or a chunk
    another thread installed): progress, so no fixed budget. NULL only when
    no run of a chunk's pages was found (:func:`pages._alloc_pages`'s -1,
    justified there) and H_BUMP had not changed meanwhile; counted as
    ``cnt`` ``failed_full`` on a profiled heap.
    """
    chunk_pages = L.bump_chunk_pages(npages)
    chunk_bytes = chunk_pages << _pshift(meta)
    w = _load(meta, L.H_BUMP)  # guess, validated by the cas
    while True:
        page = L.bump_page(w)
        count = L.bump_count(w)
        cursor = L.bump_cursor(w)
        if page >= 0 and cursor + total <= chunk_bytes and count + cnt <= L.BUMP_COUNT_MAX:
            # H_BUMP: cas, races with every bump allocator. Acquire: the
            # chunk's pages as their installer took them (its release cas).
            old = _acquire_cas(meta, L.H_BUMP, w, w + (cnt << L.BUMP_COUNT_SHIFT) + int64(total))
            if old == w:
                return (page << _pshift(meta)) + cursor
            w = old
            _pcount(prof, L.P_CAS_RETRIES, 1)
            continue
        # Hidden: what the page search derives from these is computed there,
        # not hoisted out of this loop onto the path that fits (registers).
        q = _alloc_pages(meta, _opaque(npages), _opaque(chunk_pages), L.TAG_BUMP, prof)
        if q < 0:
            # No free run: maybe because other threads hold pages for a chunk
            # of their own right now. If one of them installed it, use it.
            now = _load(meta, L.H_BUMP)
            if now == w:
                _pcount(prof, L.P_FAILED_FULL, cnt)
                return L.NULL
            w = now
            continue
        new = L.pack_bump(q, cnt, int64(total))
        # H_BUMP: cas from the full chunk to ours; exactly one installer wins.
        # Release: our acquiring page takes come before every later claim's
        # acquire of this word.
        old = _release_cas(meta, L.H_BUMP, w, new)
        if old == w:
            if count:
                # H_BUMP_DONE: add, once per chunk replaced.
                cuda.atomic.add(meta, L.H_BUMP_DONE, count)
            return q << _pshift(meta)
        _pcount(prof, L.P_CAS_RETRIES, 1)  # the install lost
        _free_pages(meta, npages, q, L.TAG_BUMP, prof)  # another thread changed the chunk first
        w = old


@cuda.jit(device=True)
def _claim_fast(meta, npages, total, cnt, prof):
    """:func:`_claim`, its first try on the current chunk inline.

    Called by one lane of a group (or a lane alone), as :func:`_claim`.
    Atomics: one acquire ``cas`` on H_BUMP when the bytes fit in the current
    chunk and no other claim came between (the common case); otherwise (a
    lost ``cas``, counted as a retry; a full chunk) :func:`_claim` from a new
    read of H_BUMP. A lost ``cas`` means another claim changed H_BUMP:
    progress. Returns what :func:`_claim` returns (NULL when no chunk's
    pages could be found). Measured: the walked bump path 156 -> 127 SASS
    instructions (docs/outline.md).
    """
    chunk_bytes = L.bump_chunk_pages(npages) << _pshift(meta)
    w = _load(meta, L.H_BUMP)  # guess, validated by the cas
    page = L.bump_page(w)
    cursor = L.bump_cursor(w)
    if (page >= 0 and cursor + total <= chunk_bytes
            and L.bump_count(w) + cnt <= L.BUMP_COUNT_MAX):
        # H_BUMP: cas, as in _claim (acquire: the chunk's pages as their
        # installer took them).
        old = _acquire_cas(meta, L.H_BUMP, w, w + (cnt << L.BUMP_COUNT_SHIFT) + int64(total))  # fast try
        if old == w:
            return cursor + (page << _pshift(meta))
        _pcount(prof, L.P_CAS_RETRIES, 1)
    return _claim(meta, npages, total, cnt, prof)


@cuda.jit(device=True)
def bump(ctx, nbytes):
    """Allocate ``nbytes`` bytes that live until ``reset``; return the offset.

    Any thread may call, in divergent code too. The offset is a multiple of
    16. ``free`` of a bump offset is an invalid free (counted, no effect).

    Atomics: one ``cas`` per group of lanes bumping the same size at once
    (one per converged warp), plus a chunk's page claims every
    ``BUMP_CHUNK_PAGES`` pages; blocks over half a chunk take their own pages
    (their page claims and one ``add``). The claim is an acquire (no fence);
    the lanes of a group sync with their leader after it.

    :returns: the offset, or ``devalloc.NULL`` if ``nbytes <= 0``, if it is
        larger than the arena, or if the heap is full; counted in ``failed``
        (0 bytes: in ``empty_requests``).
    """
    meta = ctx.meta
    npages = _npages(ctx)
    n = int64(nbytes)
    off = int64(L.NULL)
    if n > 0 and n <= (npages << _pshift(meta)):
        size = L.align_up(n)
        chunk_bytes = L.bump_chunk_pages(npages) << _pshift(meta)
        if size * 2 > chunk_bytes:
            q = _alloc_pages(meta, _opaque(npages), L.pages_for(size, _pshift(meta)),
                             L.TAG_BUMP, _prof_of(ctx))
            if q >= 0:
                cuda.atomic.add(meta, L.H_BUMP_DONE, 1)  # H_BUMP_DONE: add
                off = q << _pshift(meta)
            else:
                _pcount(_prof_of(ctx), L.P_FAILED_FULL, 1)  # no run: proved full
        else:
            mask, leader, rank, lanes = warp.group(size)
            if size * lanes > chunk_bytes:
                # Too much for one chunk together: each lane a group of its
                # own. (One call of _claim_fast for both cases: its inline
                # code once per site, not twice.)
                rank = 0
                lanes = 1
            base = int64(0)  # a follower's, replaced below (NULL here: a pair held in the claim)
            if rank == 0:
                # The group's bytes fit one chunk (at most 4 pages): 32 bits.
                # As a 64-bit value they were kept live across the claim's
                # page search (four sites out of line 48 -> 44 registers).
                base = _claim_fast(meta, npages, uint32(size * lanes), lanes, _prof_of(ctx))
            if lanes > 1:  # a lane alone has nobody to tell
                base = warp.share(mask, leader, base)
                warp.sync(mask)  # the leader's acquire before each lane's accesses
            if base != L.NULL:
                off = base + int64(uint32(rank * size))  # < a chunk: 32 bits
    if off == L.NULL:
        _count(meta, L.S_EMPTY if n == 0 else L.S_FAILED)
    return off


#: What the public dispatchers call (``api.bump``, ``observe.bump``): ``bump``
#: itself, or, with outlining on, one out-of-line copy per kernel that every
#: site calls (its claim and page search inline in that copy: a call inside
#: the call cost registers, docs/outline.md).
bump_site = outline(bump, pages=True)
