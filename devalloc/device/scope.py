"""Scoped scratch: a thread-private stack of chunks, released in LIFO order.

Inside a kernel (``s`` is a plain int64 local the thread keeps)::

    m = devalloc.mark(ctx, s); s = m           # open a scope; m is its mark
    off, s = devalloc.scoped(ctx, s, nbytes)   # no atomic
    s = devalloc.release(ctx, s, m)            # everything since m is gone

The state packs the current chunk, the bytes used in it and the depth
(layout.py, "scope state"). Chunks are heap blocks taken with the heap's
own ``alloc`` (:mod:`.chunks`: so debug heaps guard them), chained through a 32-byte header read
and written with plain accesses by their one thread; inner releases keep
them for the next scopes, the outermost frees them. Misuse changes nothing
and counts ``scope_misuse``. Details: docs/correctness.md, "Bump and scoped
scratch".
"""

from numba import config, cuda, int64, uint32

from .. import layout as L
from . import chunks
from ._meta import _count, _lo32, _npages, _pcount, _prof_of, _pshift, _stripe, _tie
from .outline import outline

#: Chains longer than this are not followed (a release through one is misuse).
MAX_CHAIN = 64

#: The bit :func:`_next_chunk` sets in the state it returns when it fails
#: (bit 63, clear in every state: layout.py, "scope state"); the rest is the
#: caller's state unchanged.
_FAILED = int64(-(2**63))
_STATE = int64(2**63 - 1)


if config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def _word(arena, off):
        """The simulator's ``_word``: the little-endian int64 at byte ``off``, byte by byte."""
        v = int64(0)
        for j in range(8):
            v |= int64(arena[off + j]) << (8 * j)
        return v

    @cuda.jit(device=True)
    def _set_word(arena, off, v):
        """The simulator's ``_set_word``: ``v`` stored little-endian at byte ``off``."""
        for j in range(8):
            arena[off + j] = (v >> (8 * j)) & 0xFF

else:
    # One 8-byte load or store of a header word (ptx._get_word): byte by
    # byte, a word was 8 loads and 14 shifts and ors, or 8 stores, at each
    # of scoped's header accesses (docs/outline.md, "Chunk headers in words").
    from .ptx import _get_word as _word
    from .ptx import _put_word as _set_word


@cuda.jit(device=True)
def _chunk_ok(arena, c):
    """Return True if offset ``c`` can be a chunk of this heap.

    Its offset 16-aligned, its header inside the arena, and the size in
    the header a multiple of 16 between one header plus 16 bytes and
    SCOPE_MAX_CHUNK that ends inside the arena. Plain loads of the thread's
    own header; a state or link from another heap (or corrupted) fails.
    """
    return _chunk_ok_below(arena, c, arena.shape[0])


@cuda.jit(device=True)
def _chunk_ok_below(arena, c, end):
    """:func:`_chunk_ok` with the arena's length ``end`` given by the caller.

    :func:`_free_from` gives it tied to ``c`` (``_meta._tie``): read in its
    loop, the length's derived bounds were hoisted out of it and held in
    registers across each chunk's ``free`` (docs/outline.md, "Counter
    stripes read where they count").
    """
    if c < 0 or c % L.ALIGN != 0 or c > end - L.SCOPE_HEADER:
        return False
    size = _word(arena, c + L.CHUNK_SIZE)
    if size % L.ALIGN != 0 or size <= L.SCOPE_HEADER or size > L.SCOPE_MAX_CHUNK:
        return False
    return size <= end - c


@cuda.jit(device=True)
def _reserved(meta, n):
    # The bytes alloc reserves for n bytes in the heap whose metadata is
    # meta: its size class, or whole pages.
    ps = _pshift(meta)
    if n <= L.max_small(ps):
        return L.class_size(L.size_class(n))
    return L.pages_for(n, ps) << ps


@cuda.jit(device=True)
def _chunk_changed(meta, taken, delta_bytes):
    # Striped scope counters: add, by block, once per chunk taken or freed.
    stripe = _stripe()
    if taken > 0:
        cuda.atomic.add(meta, L.stripe_word(stripe, L.S_SCOPE_CHUNKS), 1)
    cuda.atomic.add(meta, L.stripe_word(stripe, L.S_SCOPE_LIVE), taken)
    cuda.atomic.add(meta, L.stripe_word(stripe, L.S_SCOPE_BYTES), delta_bytes)


@cuda.jit(device=True)
def _free_chunk(ctx, chunk):
    # What the chunk reserved, read before the free gives its header away:
    # at most SCOPE_MAX_CHUNK's pages (_chunk_ok checked the size), so 32
    # bits across the free, not the 64-bit size.
    gone = uint32(_reserved(ctx.meta, _word(ctx.arena, chunk + L.CHUNK_SIZE)))
    chunks.chunk_free(ctx, chunk)
    _chunk_changed(ctx.meta, -1, -int64(gone))


@cuda.jit(device=True)
def mark(ctx, s):
    """Open a scope; return its mark, which is also the new state.

    The calling thread only. No atomics. At the depth limit (255 open
    scopes) it changes nothing, counts a misuse and returns ``s``.
    """
    s = int64(s)
    if L.scope_depth(s) >= L.SCOPE_DEPTH_MAX:
        _count(ctx.meta, L.S_SCOPE_MISUSE)
        return s
    return s + 1


@cuda.jit(device=True)
def _new_chunk(ctx, prev, size, have):
    """Take a chunk for a request of ``size`` bytes after chunk ``prev``; offset or NULL.

    Through the heap's ``alloc`` (:mod:`.chunks`: a debug heap gives chunks guard bytes);
    when the preferred size fails and a smaller retry is made, one of the
    two failures ``alloc`` counted is taken back: one request, one count
    (and, on a profiled heap, the first try's ``failed_full`` when it could
    fit the arena: the one the search proved). Atomics: ``alloc``'s, at
    most twice, and on success the three striped counter ``add``s.
    """
    meta = ctx.meta
    # 32 bits (at most SCOPE_MAX_CHUNK) that NVVM keeps 32-bit (_lo32): one
    # register across the tries, not a 64-bit pair and a copy.
    want = _lo32(min(max(2 * have, 4 * int64(size) + L.SCOPE_HEADER, L.SCOPE_MIN_CHUNK),
                     L.SCOPE_MAX_CHUNK))
    least = _lo32(size + L.SCOPE_HEADER)  # the smaller retry
    # At most two tries, through one call: inline, each call site is a
    # whole copy of alloc (docs/outline.md, "One slow path per site").
    while True:
        new = chunks.chunk_alloc(ctx, int64(want))
        if new != L.NULL or want <= least:
            break
        # The preferred size failed and a retry follows: its failure is
        # taken back here, where its size is still known (no flag or size
        # carried across the retry). Failure stripe: add -1.
        cuda.atomic.add(meta, L.stripe_word(_stripe(), L.S_FAILED), -1)
        if want + L.GUARD <= (_npages(ctx) << _pshift(meta)):
            _pcount(_prof_of(ctx), L.P_FAILED_FULL, -1)  # the one the search proved
        want = least
    if new == L.NULL:
        return new
    arena = ctx.arena
    _set_word(arena, new + L.CHUNK_PREV, prev + 1)
    _set_word(arena, new + L.CHUNK_NEXT, 0)
    _set_word(arena, new + L.CHUNK_SIZE, int64(want))
    if prev >= 0:
        _set_word(arena, prev + L.CHUNK_NEXT, new + 1)
    _chunk_changed(meta, 1, _reserved(meta, int64(want)))
    chunks.scratch_poison(ctx, new + L.SCOPE_HEADER, int64(want) - L.SCOPE_HEADER)
    return new


@cuda.jit(device=True)
def _free_from(ctx, c):
    """Free chunk ``c`` and every chunk after it in the chain.

    A link that is not a chunk of this heap (:func:`_chunk_ok`) ends the walk
    and counts a misuse: the chunks past it are left, nothing is touched.
    """
    for _ in range(MAX_CHAIN):
        if c < 0:
            return
        # The arena's end tied to c: read where it is checked, not hoisted
        # out of the loop and held across its frees (registers).
        if not _chunk_ok_below(ctx.arena, c, _tie(int64(ctx.arena.shape[0]), c)):
            _count(ctx.meta, L.S_SCOPE_MISUSE)
            return
        nxt = _word(ctx.arena, c + L.CHUNK_NEXT) - 1
        _free_chunk(ctx, c)
        c = nxt


@cuda.jit(device=True)
def _first(arena, c):
    """Return the first chunk of the chain through ``c`` (``c`` >= 0, checked).

    Stops at a link that is not a chunk of this heap (:func:`_chunk_ok`).
    """
    for _ in range(MAX_CHAIN):
        p = _word(arena, c + L.CHUNK_PREV) - 1
        if not _chunk_ok(arena, p):
            return c
        c = p
    return c


#: The out-of-line copy (devalloc.device.outline; the function itself unless
#: it is enabled) of freeing a chain of chunks, for release and _next_chunk.
#: Under "auto" it follows _next_chunk: out of line when _next_chunk is (a
#: kernel with several scoped sites: its copy there and release's share
#: one), inline otherwise; never for its size alone, since the calls sit in
#: scope loops where a call costs registers (the probe kernel ``scoped``: 52
#: registers inline, 64 with it out of line; docs/outline.md).
_free_from_out = outline(_free_from, auto="shared")


@cuda.jit(device=True)
def scoped(ctx, s, nbytes):
    """Allocate ``nbytes`` in the innermost open scope; return ``(offset, state)``.

    The calling thread only. No atomics while its chunks have room (chunks
    of released inner scopes are kept and reused); a new chunk costs one
    ``alloc`` and three striped counter ``add``s. On a debug heap, the bytes
    handed out are checked to be still poisoned (see ``release``). The offset is a multiple
    of 16. On failure returns ``(NULL, s)`` and counts it in ``failed`` (and
    in ``scope_misuse`` when no scope is open, or when ``s`` or its chunk's
    link cannot be this heap's: see :func:`_chunk_ok`); ``nbytes <= 0`` or
    more than the largest chunk holds fail.

    When the current chunk has no room, the next chunk is :func:`_next_chunk`'s
    (out of line when outlining is on: one copy per kernel, docs/outline.md).
    """
    s = int64(s)
    n = int64(nbytes)
    meta = ctx.meta
    arena = ctx.arena
    depth = L.scope_depth(s)
    if depth == 0:
        _count(meta, L.S_SCOPE_MISUSE)
        _count(meta, L.S_FAILED)
        return int64(L.NULL), s
    if n <= 0 or n > L.SCOPE_MAX_CHUNK - L.SCOPE_HEADER:
        _count(meta, L.S_EMPTY if n == 0 else L.S_FAILED)  # 0 bytes: not a failure
        return int64(L.NULL), s
    size = _lo32(L.align_up(n))  # < SCOPE_MAX_CHUNK: 32 bits
    chunk = L.scope_chunk(s)
    cursor = L.scope_cursor(s)
    have = int64(0)
    if chunk >= 0:
        if cursor < L.SCOPE_HEADER or not _chunk_ok(arena, chunk):
            _count(meta, L.S_SCOPE_MISUSE)  # not a state of this heap
            _count(meta, L.S_FAILED)
            return int64(L.NULL), s
        have = _word(arena, chunk + L.CHUNK_SIZE)
        if cursor + size <= have:
            chunks.scratch_check(ctx, chunk + cursor, size)
            return chunk + cursor, L.scope_advance(s, int64(size))
    # The state after the request, or s with _FAILED set: the caller keeps
    # nothing of its own (s, size, depth) across the call (registers).
    t = _next_chunk_out(ctx, s, size)
    if t < 0:
        return int64(L.NULL), t & _STATE  # counted; s itself
    # The new chunk's offset: t's chunk, which is never "none" here.
    return L.scope_chunk_had(t) + L.SCOPE_HEADER, t


@cuda.jit(device=True)
def _next_chunk(ctx, s, size):
    """Serve ``size`` bytes from the start of a chunk after state ``s``'s; return the new state.

    Called by :func:`scoped` only, when the current chunk of ``s`` (checked)
    cannot serve ``size`` bytes, or when it has none. The spare chunk after
    it if that one is large enough (a debug heap checks its bytes are still
    poisoned); else a new one (:func:`_new_chunk`: one ``alloc``, three
    striped ``add``s), after freeing a spare that is too small. Returns the
    state with that chunk current and ``size`` bytes used after its header,
    at ``s``'s depth. Failure: ``s | _FAILED`` (negative), counted in
    ``failed`` (by ``alloc`` for a new chunk), and in ``scope_misuse`` when
    the link to the spare cannot be this heap's.
    """
    arena = ctx.arena
    chunk = L.scope_chunk(s)
    depth = L.scope_depth(s)
    have = int64(0)
    if chunk >= 0:
        have = _word(arena, chunk + L.CHUNK_SIZE)
        spare = _word(arena, chunk + L.CHUNK_NEXT) - 1
        if spare >= 0 and not _chunk_ok(arena, spare):
            _count(ctx.meta, L.S_SCOPE_MISUSE)  # a corrupted link
            _count(ctx.meta, L.S_FAILED)
            return s | _FAILED
        if spare >= 0:
            if L.SCOPE_HEADER + size <= _word(arena, spare + L.CHUNK_SIZE):
                chunks.scratch_check(ctx, spare + L.SCOPE_HEADER, size)
                return L.pack_scope(spare, L.SCOPE_HEADER + int64(size), depth)
            # Too small: replaced by a larger one. Unlinked first (the same
            # thread owns both chunks; nothing reads the link in between):
            # freed first, the kernels of 2 and 4 scoped sites took 4
            # registers more under "auto" (docs/outline.md).
            _set_word(arena, chunk + L.CHUNK_NEXT, 0)
            _free_from_out(ctx, spare)
    new = _new_chunk(ctx, chunk, size, have)
    if new == L.NULL:
        return s | _FAILED
    return L.pack_scope(new, L.SCOPE_HEADER + int64(size), depth)


#: What scoped calls when its current chunk has no room (out of line when
#: devalloc.device.outline is enabled, the function itself otherwise).
_next_chunk_out = outline(_next_chunk)


@cuda.jit(device=True)
def release(ctx, s, m):
    """Close the scope whose mark is ``m``; return the state before ``mark``.

    The calling thread only. ``m`` must be the innermost open scope of state
    ``s``: otherwise (or when ``s``'s chain of chunks up to ``m``'s cannot be
    this heap's, see :func:`_chunk_ok`) nothing changes, a misuse is counted
    and ``s`` is returned. The chunks stay with the thread for its next scopes until the
    outermost scope closes, which frees them all: one ``free`` and three
    striped ``add``s each. No atomics otherwise. On a debug heap the bytes
    given back are poisoned, so that a write to them before they are handed
    out again is recorded by the next ``scoped`` (``heap.check()`` reports it).
    """
    s = int64(s)
    m = int64(m)
    meta = ctx.meta
    depth = L.scope_depth(s)
    if depth == 0 or L.scope_depth(m) != depth:
        _count(meta, L.S_SCOPE_MISUSE)
        return s
    arena = ctx.arena
    chunk = L.scope_chunk(s)
    mchunk = L.scope_chunk(m)
    bad = chunk >= 0 and (L.scope_cursor(s) < L.SCOPE_HEADER or not _chunk_ok(arena, chunk))
    bad = bad or (mchunk >= 0 and L.scope_cursor(m) < L.SCOPE_HEADER)
    # m's chunk must be in our chain at or before ours (-1: the chain's start);
    # every chunk on the way is checked before its header is read.
    c = chunk
    steps = 0
    while not bad and c != mchunk and c >= 0 and steps < MAX_CHAIN:
        c = _word(arena, c + L.CHUNK_PREV) - 1
        bad = c >= 0 and not _chunk_ok(arena, c)
        steps += 1
    if bad or c != mchunk or (mchunk == chunk and L.scope_cursor(m) > L.scope_cursor(s)):
        _count(meta, L.S_SCOPE_MISUSE)
        return s
    if depth == 1:
        if chunk >= 0:
            _free_from_out(ctx, _first(arena, chunk))
        return int64(L.SCOPE_NONE)
    if chunk >= 0:
        _poison_since(ctx, chunk, mchunk, L.scope_cursor(m))
    if mchunk < 0 and chunk >= 0:
        return L.pack_scope(_first(arena, chunk), L.SCOPE_HEADER, depth - 1)
    return m - 1


@cuda.jit(device=True)
def _poison_since(ctx, chunk, mchunk, mcursor):
    """Debug heaps: poison what a release gives back. Normal heaps: nothing.

    From the mark's position to the end of its chunk, and every later chunk
    up to ``chunk`` (later bytes were never handed out, or were given back).
    """
    arena = ctx.arena
    c = chunk
    for _ in range(MAX_CHAIN):
        if c < 0:
            return
        size = _word(arena, c + L.CHUNK_SIZE)
        if c == mchunk:
            chunks.scratch_poison(ctx, c + mcursor, size - mcursor)
            return
        chunks.scratch_poison(ctx, c + L.SCOPE_HEADER, size - L.SCOPE_HEADER)
        c = _word(arena, c + L.CHUNK_PREV) - 1
