"""The porting API: arrays by shape, zeroed blocks, grow in place, block size.

What a kernel written with ``cuda.local.array`` or C's allocator reaches
for: ``array`` / ``free_array``, ``view`` with a shape (and, on debug heaps,
an alignment check), ``calloc``, ``realloc``, ``usable_size``,
and ``alloc_aligned`` (``carve`` for mixed-dtype arrays in one block, and
``realloc_carved``, are in :mod:`.carving`). Each
is built on the public ``alloc``/``free`` (:mod:`devalloc.device.api`), so
it works on normal, debug and observed heaps; where the heaps differ
(a debug block's guard and requested size) the path is chosen from the
ctx's type when the kernel compiles (an ``@overload``), at call time on the
simulator. The byte arithmetic is :mod:`devalloc.device.blocks` (pure, unit-tested).

Who may call: any thread, in divergent code too, as ``alloc``/``free``.
``array`` and the shaped ``view`` return arrays a kernel may keep in a
local variable; they are inlined into the caller (a device function may not
return an array it created otherwise).

Each public function has its simulator body and its GPU ``@overload`` per
heap kind side by side, so that the two cannot drift apart; the byte
arithmetic under them is apart (:mod:`devalloc.device.blocks`).
"""

from numba import config, cuda, int64

from . import blocks as B
from .. import layout as L
from . import api, core, debug, observe
from ._meta import _at, _count, _load, _lo32, _npages, _pshift

if config.ENABLE_CUDASIM:
    from .intrinsics import offset_of_simulated as _offset_of
    from .intrinsics import view_simulated as _raw_view
else:
    from .intrinsics import offset_of as _offset_of
    from .intrinsics import view as _raw_view


#: Device functions NVVM must inline (``forceinline``: out of line, the
#: observed realloc took a stack frame on sm_90); the simulator has no such option.
_inlined = (cuda.jit(device=True) if config.ENABLE_CUDASIM
            else cuda.jit(device=True, forceinline=True))


def _pick(ctx, paths):
    """Simulator: the path of ``paths`` (normal, debug, observed) for ``ctx``'s heap.

    On the GPU the overloads at the end of this module choose when the
    kernel compiles.
    """
    return paths[api._kind(ctx)]


# ------------------------------------------------------------ block sizes

@cuda.jit(device=True)
def _state_size(ctx, o):
    """Return the real size of the block starting at ``o``, from its page's state word.

    0 if no block of a slab or large block starts there (outside the arena,
    misaligned, inside a block, past the slab's cursor, a free page). Does
    not tell a freed slab block from a live one (that needs the bitmap: the
    debug heap checks it). One relaxed load: the caller owns the block, so
    the claim that handed it out happened before this call, and the page's
    tag cannot change while a block of it is live.
    """
    npages = _npages(ctx)
    ps = _pshift(ctx.meta)
    if o < 0 or o >= (npages << ps) or o & (L.ALIGN - 1) != 0:
        return int64(0)
    p = _lo32(o >> ps)
    rel = _lo32(o & ((int64(1) << ps) - 1))
    s = _load(ctx.meta, _at(L.state_word(p)))
    t = L.state_tag(s)
    if t == L.TAG_HEAD:
        if rel == 0:
            return int64(L.state_n(s)) << ps
        return int64(0)
    if L.is_slab_tag(t):
        size = _lo32(L.class_size(L.slab_class(t)))
        b = rel // size  # 32-bit division: rel < page
        if rel == b * size and b < L.slab_cursor(s):
            return int64(size)
    return int64(0)


@cuda.jit(device=True)
def _usable_normal(ctx, off):
    o = int64(off)
    if o == L.NULL:
        return int64(0)
    return _state_size(ctx, o)


@cuda.jit(device=True)
def _invalid(ctx, o):
    """Record (debug: kind KIND_INVALID_BLOCK) a call naming no live block."""
    debug._record(ctx.debug, L.KIND_INVALID_BLOCK, o)


@cuda.jit(device=True)
def _usable_debug(ctx, off):
    o = int64(off)
    if o == L.NULL:
        return int64(0)
    size = debug._block_size(ctx.meta, _npages(ctx), o)
    if size == 0:
        _invalid(ctx, o)
        return int64(0)
    return size - int64(ctx.sizes[o >> L.DEBUG_SLOT_SHIFT])


@cuda.jit(device=True)
def _usable_observed(ctx, off):
    if ctx.debug.shape[0] > 0:
        return _usable_debug(ctx, off)
    return _usable_normal(ctx, off)


def usable_size(ctx, off):
    """Return the bytes the block at ``off`` really has: 0 for NULL or no block.

    Normal and observed heaps: its class size, or the large block's whole
    pages (``malloc_usable_size``), read from the page's state word (one
    relaxed load, no atomic); an offset where no block starts gives 0, but
    a freed block is not told from a live one. Debug heaps: the requested
    size (the guard follows it), and an offset that is no live block is
    recorded (``heap.check()`` names it) and gives 0.
    """
    return _pick(ctx, (_usable_normal, _usable_debug, _usable_observed))(ctx, off)


# ------------------------------------------------------------ copying

@cuda.jit(device=True)
def _copy(ctx, dst, src, n):
    """Copy ``n`` bytes from ``src`` to ``dst`` (16-aligned blocks): words, then bytes."""
    w = n >> 3
    a = _raw_view(ctx, dst, w, int64)
    b = _raw_view(ctx, src, w, int64)
    for j in range(a.shape[0]):
        a[j] = b[j]
    arena = ctx.arena
    for j in range(w << 3, n):
        arena[dst + j] = arena[src + j]


@cuda.jit(device=True)
def _zero(ctx, off, n):
    """Zero ``n`` bytes at ``off`` (a 16-aligned block): words, then bytes."""
    w = n >> 3
    a = _raw_view(ctx, off, w, int64)
    for j in range(a.shape[0]):
        a[j] = 0
    arena = ctx.arena
    for j in range(w << 3, n):
        arena[off + j] = 0


@_inlined
def _move(ctx, o, n, keep):
    """Allocate ``n`` bytes, copy ``keep`` from ``o``, free ``o``; NULL leaves ``o`` alone.

    ``o`` NULL: only the allocation (``realloc(NULL, n)``; one call site of
    ``alloc``, so the kernel carries one inlined copy of it).
    """
    new = api.alloc(ctx, n)
    if new != L.NULL and o != L.NULL:
        _copy(ctx, new, o, keep)
        api.free(ctx, o)
    return new


# ------------------------------------------------------------ realloc

@_inlined
def _realloc_normal(ctx, off, nbytes):
    o = int64(off)
    n = int64(nbytes)
    keep = int64(0)
    if o != L.NULL:
        have = _state_size(ctx, o)
        if have == 0:
            _count(ctx.meta, L.S_INVALID)
            return int64(L.NULL)
        if B.served_size(n, _pshift(ctx.meta)) == have:
            return o  # the block alloc(n) would hand out is this one's size
        keep = min(have, n)
    return _move(ctx, o, n, keep)


@_inlined
def _realloc_debug(ctx, off, nbytes):
    o = int64(off)
    n = int64(nbytes)
    keep = int64(0)
    if o != L.NULL:
        size = debug._block_size(ctx.meta, _npages(ctx), o)
        if size == 0:
            _invalid(ctx, o)
            _count(ctx.meta, L.S_INVALID)
            return int64(L.NULL)
        if n > 0 and B.served_size(max(n + L.GUARD, L.DEBUG_MIN_BLOCK), _pshift(ctx.meta)) == size:
            # In place: check the old guard, then move it after the new size.
            if not debug.guard_intact(ctx, o, size):
                debug._record(ctx.debug, L.KIND_GUARD, o)
            arena = ctx.arena
            for j in range(L.GUARD):
                arena[o + n + j] = L.GUARD_BYTE
            ctx.sizes[o >> L.DEBUG_SLOT_SHIFT] = size - n
            return o
        keep = min(size - int64(ctx.sizes[o >> L.DEBUG_SLOT_SHIFT]), n)
    return _move(ctx, o, n, keep)


@_inlined
def _realloc_observed(ctx, off, nbytes):
    if ctx.debug.shape[0] > 0:
        return _realloc_debug(ctx, off, nbytes)
    return _realloc_normal(ctx, off, nbytes)


def realloc(ctx, off, nbytes):
    """Resize the block at ``off`` to ``nbytes``; return its (maybe new) offset or NULL.

    When the block ``alloc(nbytes)`` would hand out has this block's size
    (same size class; same pages for a large block), the block stays: the
    same offset, no copy, no atomic (one relaxed load of the page's state
    word; a debug heap moves its guard). Otherwise, shrinking or growing, a
    new block is allocated (``alloc``'s atomics), ``min(old, nbytes)``
    bytes are copied and the old block is freed (``free``'s atomics);
    ``realloc(ctx, NULL, n)`` is ``alloc(ctx, n)``.

    :returns: the offset. NULL when the new block cannot be served (counted
        in ``failed``; ``nbytes == 0`` is an empty request, counted in
        ``empty_requests``: free with ``free``): the old block is untouched
        and still the caller's. NULL too when ``off`` is
        no block (counted in ``invalid_frees``; a debug heap records it).
    """
    return _pick(ctx, (_realloc_normal, _realloc_debug, _realloc_observed))(ctx, off, nbytes)


# ------------------------------------------------------------ calloc, aligned

@cuda.jit(device=True)
def calloc(ctx, count, itemsize):
    """Allocate a zeroed block of ``count * itemsize`` bytes; return its offset or NULL.

    Any thread may call. ``alloc``'s atomics, then plain stores zeroing the
    bytes (8 at a time). NULL (counted in ``failed``, as ``alloc``'s) when
    ``count`` or ``itemsize`` is < 0, when the product overflows (it is
    checked before multiplying: never a short block), or when no space is
    found; NULL counted in ``empty_requests`` when either is 0.
    """
    n = B.calloc_bytes(int64(count), int64(itemsize))
    off = api.alloc(ctx, n)
    if off != L.NULL:
        _zero(ctx, off, n)
    return off


@cuda.jit(device=True)
def _aligned_normal(ctx, nbytes, align):
    return core.alloc_site(ctx, B.aligned_request(int64(nbytes), int64(align), _pshift(ctx.meta)))


@cuda.jit(device=True)
def _aligned_debug(ctx, nbytes, align):
    n = int64(nbytes)
    # -1 refused (a bad align, n < 0), 0 for 0 bytes, as the normal heap's
    inner = B.aligned_request(n, int64(align), _pshift(ctx.meta))
    if inner > 0:
        inner = B.aligned_request(max(n + L.GUARD, L.DEBUG_MIN_BLOCK), int64(align),
                                   _pshift(ctx.meta))
    return debug.alloc_inner(ctx, n, inner)


@cuda.jit(device=True)
def _aligned_observed(ctx, nbytes, align):
    if ctx.debug.shape[0] > 0:
        off = _aligned_debug(ctx, nbytes, align)
    else:
        off = _aligned_normal(ctx, nbytes, align)
    if off == L.NULL:
        observe._failed(ctx, nbytes, observe._arena_bytes(ctx))
    observe._record(ctx, observe._seq(ctx), L.OP_ALLOC, nbytes, off)
    return off


def alloc_aligned(ctx, nbytes, align):
    """Allocate ``nbytes`` at an offset that is a multiple of ``align``; offset or NULL.

    ``align`` is a power of two from 1 to the heap's page (16 KiB unless
    ``Heap(page=)`` chose a smaller one). The request is
    rounded up to a multiple of ``align``, whose size class is then a
    multiple of ``align`` (blocks of a class start at multiples of its size
    within a page; large blocks start pages), so the cost is ``alloc``'s,
    plus the rounding's unused bytes. The offset is aligned relative to the
    arena, whose address is a multiple of 256 (absolute alignment above 256
    bytes holds when the arena's address has it: ``heap.arena``).

    :returns: the offset, or NULL (counted in ``failed``) when ``align`` is
        not a power of two up to the page, ``nbytes <= 0``, or no space is found.
    """
    return _pick(ctx, (_aligned_normal, _aligned_debug, _aligned_observed))(ctx, nbytes, align)


# ------------------------------------------------------------ arrays

@cuda.jit(device=True)
def _alloc_array(ctx, n):
    """``alloc(n)``: 0 bytes (an empty shape) is NULL, counted as ``alloc(ctx, 0)`` is."""
    return api.alloc(ctx, n)


#: ``offset_of(ctx, arr)``: the byte offset in the heap of ``arr``'s first
#: item, NULL for an empty array. No memory access. The offset of a
#: ``devalloc.array`` is its block's: for ``free``, ``realloc``,
#: ``usable_size`` or ``heap.gather`` (docs/porting.md); of a ``view`` or
#: ``carve`` inside a block, where that field starts.
offset_of = _offset_of


@cuda.jit(device=True)
def free_array(ctx, arr):
    """Free the block of an array made by ``devalloc.array`` (or ``view`` at a block's start).

    Any thread may call; ``free``'s atomics. An empty array (``array``'s
    result when it could not be served) frees nothing. An array that does
    not start a live block is an invalid free (counted; recorded on a
    debug heap), as for ``free``.
    """
    api.free(ctx, _offset_of(ctx, arr))


@cuda.jit(device=True)
def _misaligned(ctx, off, align):
    """Debug heaps: record a view at ``off`` not a multiple of ``align``; its offset, or NULL."""
    o = int64(off)
    if o != L.NULL and o & (align - 1) != 0:  # a view of NULL is empty, not misuse
        debug._record(ctx.debug, L.KIND_MISALIGNED_VIEW, o)
        return int64(L.NULL)
    return o


@cuda.jit(device=True)
def _misaligned_observed(ctx, off, align):
    if ctx.debug.shape[0] > 0:
        return _misaligned(ctx, off, align)
    return int64(off)


def _dims3(shape):
    """Return ``shape`` (an int or a tuple of 1..3 ints) as three dimensions."""
    if isinstance(shape, tuple):
        return tuple(shape) + (1,) * (3 - len(shape))
    return (shape, 1, 1)


def _sim_dtype(ctx, off, shape, dtype):
    # Simulator: the dtype the typing would find (the same TypingErrors).
    from numba.np.numpy_support import as_dtype

    from .intrinsics import _typeof, check_view_args
    return as_dtype(check_view_args(_typeof(off), _typeof(shape), _typeof(dtype)))


def view(ctx, off, count, dtype):
    """Return an array of ``count`` items (or a ``count``-shaped C array) at byte ``off``.

    ``count`` an integer: a 1-D array; a tuple of 1 to 3 integers: that
    shape, C-contiguous. Any thread may call; no atomics. Views at offsets
    inside a block are allowed (several arrays carved out of one block);
    ``off`` must be a multiple of the dtype's alignment (its itemsize; 8
    for complex128): on a GPU a misaligned access faults. A debug heap
    checks it: a misaligned view is recorded (``heap.check()`` names it) and
    is empty. A range outside the arena (``off`` NULL) gives an empty array
    (every dimension 0) over the kernel's sink (1 KiB outside every heap:
    an unchecked write through it reaches no block). ``dtype``: a scalar
    type, or a NumPy record dtype (``align=True`` for aligned fields).
    """
    k = api._kind(ctx)
    if k != api._NORMAL:
        align = _sim_dtype(ctx, off, count, dtype).alignment
        if k == api._DEBUG:
            off = _misaligned(ctx, off, align)
        else:
            off = _misaligned_observed(ctx, off, align)
    return _raw_view(ctx, off, count, dtype)


def array(ctx, shape, dtype):
    """Allocate a C-contiguous array of ``shape`` and ``dtype`` in a new block.

    ``shape`` is an int or a tuple of 1 to 3 ints (sizes may differ per
    thread): ``cuda.local.array((n, 10), float64)`` becomes
    ``devalloc.array(ctx, (n, 10), float64)``. Any thread may call;
    ``alloc``'s atomics; the contents are not zeroed. Free it with
    ``free_array``. An empty array (``size == 0``, every dimension 0) when
    it cannot be served (counted in ``failed``; a negative dimension, or a
    size beyond any heap, too) or when ``shape`` has a 0 (nothing to
    allocate, not counted).
    """
    d0, d1, d2 = _dims3(shape)
    itemsize = _sim_dtype(ctx, 0, shape, dtype).itemsize
    off = _alloc_array(ctx, B.array_bytes(int64(d0), int64(d1), int64(d2), itemsize))
    return _raw_view(ctx, off, shape, dtype)


#: The first numba-cuda whose ``inline="always"`` functions may return an
#: array they made (``view``, ``array``, ``carve`` on the GPU target).
INLINE_ARRAYS = (0, 28)

if not config.ENABLE_CUDASIM:
    from numba.core import types
    from numba.core.errors import TypingError
    from numba.cuda.extending import overload

    from ..sim import compat
    from numba.np.numpy_support import as_dtype

    from .intrinsics import _dims, check_view_args

    _K = api._kind_of_type

    @overload(usable_size, target="cuda")
    def _usable_impl(ctx, off):
        return (lambda ctx, off: _usable_normal(ctx, off),
                lambda ctx, off: _usable_debug(ctx, off),
                lambda ctx, off: _usable_observed(ctx, off))[_K(ctx)]

    # forceinline (here and on _realloc_*, _move): out of line, the observed
    # realloc took an 8- to 16-byte stack frame on sm_90.
    @overload(realloc, target="cuda", jit_options={"forceinline": True})
    def _realloc_impl(ctx, off, nbytes):
        return (lambda ctx, off, nbytes: _realloc_normal(ctx, off, nbytes),
                lambda ctx, off, nbytes: _realloc_debug(ctx, off, nbytes),
                lambda ctx, off, nbytes: _realloc_observed(ctx, off, nbytes))[_K(ctx)]

    @overload(alloc_aligned, target="cuda")
    def _aligned_impl(ctx, nbytes, align):
        return (lambda ctx, nbytes, align: _aligned_normal(ctx, nbytes, align),
                lambda ctx, nbytes, align: _aligned_debug(ctx, nbytes, align),
                lambda ctx, nbytes, align: _aligned_observed(ctx, nbytes, align))[_K(ctx)]

    # The array-returning calls are inlined into their caller at Numba IR
    # level (inline="always"): only so may a function return an array it made.
    # numba-cuda before 0.28 still checked such a function's return on its
    # own ("Only accept returning of array passed into the function as
    # argument"): say what is needed instead.

    def _inline_arrays(name):
        have = compat.numba_cuda_version()
        if have is not None and have < INLINE_ARRAYS:
            raise TypingError(
                f"devalloc.{name} returns an array, which needs numba-cuda >= "
                f"{'.'.join(map(str, INLINE_ARRAYS))} on the GPU target (numba-cuda "
                f"{'.'.join(map(str, have))} is installed): pip install 'numba-cuda>=0.28'")

    @overload(view, target="cuda", inline="always")
    def _view_impl(ctx, off, count, dtype):
        _inline_arrays("view")
        align = as_dtype(check_view_args(off, count, dtype)).alignment
        k = _K(ctx)
        if k == api._NORMAL:
            return lambda ctx, off, count, dtype: _raw_view(ctx, off, count, dtype)
        if k == api._DEBUG:
            return lambda ctx, off, count, dtype: _raw_view(
                ctx, _misaligned(ctx, off, align), count, dtype)
        return lambda ctx, off, count, dtype: _raw_view(
            ctx, _misaligned_observed(ctx, off, align), count, dtype)

    @overload(array, target="cuda", inline="always")
    def _array_impl(ctx, shape, dtype):
        _inline_arrays("array")
        itemsize = as_dtype(check_view_args(types.int64, shape, dtype)).itemsize
        if isinstance(shape, types.Integer):
            def impl(ctx, shape, dtype):
                n = B.array_bytes(int64(shape), int64(1), int64(1), itemsize)
                return _raw_view(ctx, _alloc_array(ctx, n), shape, dtype)
        elif _dims(shape) == 1:
            def impl(ctx, shape, dtype):
                n = B.array_bytes(int64(shape[0]), int64(1), int64(1), itemsize)
                return _raw_view(ctx, _alloc_array(ctx, n), shape, dtype)
        elif _dims(shape) == 2:
            def impl(ctx, shape, dtype):
                n = B.array_bytes(int64(shape[0]), int64(shape[1]), int64(1), itemsize)
                return _raw_view(ctx, _alloc_array(ctx, n), shape, dtype)
        else:
            def impl(ctx, shape, dtype):
                n = B.array_bytes(int64(shape[0]), int64(shape[1]), int64(shape[2]), itemsize)
                return _raw_view(ctx, _alloc_array(ctx, n), shape, dtype)
        return impl
