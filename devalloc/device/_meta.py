"""Metadata helpers every device path uses: indices, counters, the fold.

Callers: the modules of :mod:`devalloc.device` only. Rules that hold for
every device function (docs/correctness.md gives the arguments):

* every metadata index goes through :func:`_at`;
* every shared word is changed by an atomic, with a comment naming the word,
  the operation and who races with it; loads (``_load``, relaxed) only
  produce guesses that a later atomic validates;
* ordering comes from the atomics themselves, never from
  ``cuda.threadfence()`` (an SC fence): the atomic that hands a block or a
  page over is ``_acquire_*`` on the taking side and ``_release_*`` on the
  giving side (or follows ``_fence_acq_rel``); counters, hints and guesses
  stay relaxed (``cuda.atomic.*``, ``_load``). These names are inline PTX
  on a GPU (:mod:`devalloc.device.ptx`) and numba's atomics on the
  simulator (:mod:`devalloc.sim.ordered`);
* ``cuda`` and ``warp`` are used as module globals (``from numba import
  cuda``, ``from . import warp``): the interleaving explorer swaps exactly
  those names (tests/test_explorer.py rejects other import forms) and the
  ordered atomics above.
"""

from numba import config, cuda, int64, uint32

from .. import layout as L


if config.ENABLE_CUDASIM:

    def _at(i):
        """The simulator's ``_at``: the index itself (see below).

        A plain function, because the simulator's device-function calls are
        slow enough to widen every load-to-``cas`` window, which would make
        the simulated contention figures worse than the algorithm's.
        """
        return i

    def _popc32(x):
        """The simulator's ``_popc32``: layout.popc32 on a Python int (no
        NumPy 32-bit overflow in its multiply)."""
        return L.popc32(int(x))

    def _opaque(x):
        """The simulator's ``_opaque``: ``x`` itself."""
        return x

    def _tie(x, anchor):
        """The simulator's ``_tie``: ``x`` itself."""
        return x

    def _lo32(x):
        """The simulator's ``_lo32``: the low 32 bits of ``x``."""
        return uint32(int(x) & 0xFFFFFFFF)

    from ..sim.ordered import (  # noqa: F401 (plain atomics with the GPU names)
        _acquire_and,
        _acquire_cas,
        _fence_acq_rel,
        _load,
        _release_add,
        _release_cas,
        _release_exch,
        _release_or,
        _store,
    )

else:
    from .ptx import (  # noqa: F401 (inline PTX: ordered atomics, relaxed loads)
        _acquire_and,
        _acquire_cas,
        _block_read,
        _fence_acq_rel,
        _load,
        _opaque,
        _release_add,
        _release_cas,
        _release_exch,
        _release_or,
        _store,
        _thread_tied,
        _tie,
    )

    @cuda.jit(device=True)
    def _at(i):
        """Return metadata index ``i`` as a value the compiler knows is >= 0.

        Every metadata index is below 2**31 (MAX_PAGES bounds the heap).
        Numba wraps negative indices around for loads, stores and atomics;
        zero-extending a 32-bit value lets the compiler drop that code, which
        saves instructions and registers at every metadata access. The
        32-bit value goes through ``_opaque``: otherwise NVVM folds the
        truncation and the extension into a mask on the 64-bit index and
        computes it in 64 bits; through it, the index is 32-bit arithmetic
        and the address one wide multiply-add.
        """
        return int64(_opaque(uint32(i)))

    @cuda.jit(device=True)
    def _lo32(x):
        """Return the low 32 bits of ``x`` as a 32-bit value NVVM keeps 32-bit.

        A plain ``uint32(x)`` of a 64-bit value is folded back into a mask
        on the 64-bit value, so everything computed from it (compares,
        shifts, sums) stays 64-bit: two instructions each on the GPU. Through
        ``_opaque`` it is a real 32-bit register.
        """
        return _opaque(uint32(x))

    @cuda.jit(device=True)
    def _popc32(x):
        """Return the set bits of bitmap word ``x`` (< 2**32): one ``popc``.

        Every count of bitmap bits on the slab path uses it since that path
        is 32-bit (issue 13); before, in 64-bit code, ``popc`` in the grant
        decoding had cost registers (48 -> 54, per-thread sizes, sm_90).
        """
        return int64(cuda.popc(uint32(x)))


if config.ENABLE_CUDASIM:

    def _pshift(meta):
        """The simulator's ``_pshift``: the page shift as a Python int."""
        return L.page_shift_of(int(meta.shape[0]))

else:

    def _pshift(meta):
        """Return the heap's page shift (log2 of its page bytes), 32 bits.

        Any device function that has ``meta`` may call. No atomics, no memory
        access; never fails. For a heap's own metadata (typed
        :class:`devalloc.ctx.PagedMeta`) it is a constant of the compiled
        code; for a plain ``int64`` array, the low three bits of its length
        (a kernel parameter; layout.meta_words, page_shift_of), which costs
        registers and instructions (sm_90: 0 to 6 registers more than a
        heap's ctx, tests/test_page_compile.py): compiled by the
        ``@overload`` below.
        """
        return uint32(L.page_shift_of(meta.shape[0]))


@cuda.jit(device=True)
def _npages(ctx):
    """Return the heap's page count, as a value the compiler knows is >= 0.

    Below 2**25 (MAX_PAGES); zero-extended from 32 bits like ``_at``, so that
    divisions of it by constants are shifts, not signed divisions.
    """
    return int64(_lo32(ctx.arena.shape[0] >> _pshift(ctx.meta)))


if config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def _warp_number(anchor):
        """The simulator's ``_warp_number``: ``anchor`` unused."""
        t = uint32(uint32(cuda.blockIdx.x) * uint32(cuda.blockDim.x)) + uint32(cuda.threadIdx.x)
        return uint32(uint32(t) >> L.WARP_SHIFT)

else:

    @cuda.jit(device=True)
    def _warp_number(anchor):
        """Return the warp's number in the grid, computed after ``anchor`` (64-bit).

        1-D numbering; any value is correct, it only spreads warps over hint
        slots and bitmap words. 32-bit arithmetic (a grid's threads wrap
        around 2**32: still a number). Read where it is called
        (:func:`devalloc.device.ptx._thread_tied`), not kept live from the
        kernel's start across the search (a register).
        """
        return uint32(_thread_tied(anchor) >> L.WARP_SHIFT)


if config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def _stripe():
        """The simulator's ``_stripe``: the same value, through ``cuda.blockIdx``."""
        return int64(cuda.blockIdx.x % L.STRIPES)

else:

    @cuda.jit(device=True)
    def _stripe():
        """Return the counter stripe of this thread's block (failure stripes).

        The block number read where it is called (:func:`ptx._block_read`):
        counts come after searches, which they would otherwise hold a
        register across.
        """
        return int64(_block_read() % uint32(L.STRIPES))


@cuda.jit(device=True)
def _count(meta, field):
    """Add one to striped counter ``field`` (a failure or misuse); any thread.

    One ``add`` on the block's stripe, contended only among counting threads
    of blocks that share it. Ordering irrelevant: read by the host after a
    synchronization.
    """
    cuda.atomic.add(meta, _at(L.stripe_word(_stripe(), field)), 1)


@cuda.jit(device=True)
def _pages_changed(meta, delta):
    """Account ``delta`` pages taken (> 0) or given back (< 0).

    Takers add after their cas, releasers subtract before theirs (and add
    back if it fails), so the counter never exceeds the pages really held.
    Atomics: one ``add`` on H_PAGES_USED, and when pages are taken one
    ``max`` on H_PEAK_PAGES with the value this add produced, so the peak is
    the exact high-water mark. Page-level events only, never per block.
    """
    old = cuda.atomic.add(meta, L.H_PAGES_USED, delta)
    if delta > 0:
        cuda.atomic.max(meta, L.H_PEAK_PAGES, old + delta)


@cuda.jit(device=True)
def _fold(new):
    """Return (state word, folded amount): keep the count field below 2**23.

    The count is the word's top field, so count >= COUNT_FOLD is its top
    bit, and folding clears that bit (no compare, no 64-bit subtraction).
    """
    top = new & L.COUNT_FOLD_BIT
    return new ^ top, top >> L.COUNT_SHIFT


@cuda.jit(device=True)
def _note_fold(meta, folded):
    """Move ``folded`` allocations into H_ALLOC_FOLD (an ``add``) if nonzero."""
    if folded:
        cuda.atomic.add(meta, L.H_ALLOC_FOLD, folded)  # fold word: add, any thread


# ------------------------------------------------------------ profile counters
# Observed heaps (Heap(profile=True)) count inner events in ``ctx.prof``.
# The paths pass ``prof``: the observed heap's ctx itself, or None for every
# other heap (a device function may return an array argument's container,
# not an array taken out of it). For None, ``_pcount`` compiles to nothing
# (an @overload chosen while typing), so normal kernels carry no trace of it
# (tests/test_compile.py checks the PTX).

def _prof_of(ctx):
    """Return ``ctx`` if it is an observed heap's (its ``prof`` counts), else None."""
    return ctx if getattr(ctx, "prof", None) is not None else None


def _pcount(prof, counter, n):
    """Add ``n`` to profile ``counter`` (one ``add`` on the block's stripe); no-op for None."""
    if prof is not None and prof.prof.shape[0] > 0 and n:
        cuda.atomic.add(prof.prof, L.prof_word(cuda.blockIdx.x % L.PROF_STRIPES, counter), n)


if config.ENABLE_CUDASIM:
    # A simulated device function, so that the simulator (and the explorer)
    # give it their ``cuda``; on the GPU the @overload below compiles it.
    _pcount = cuda.jit(device=True)(_pcount)


def _ptally(prof, k):
    """Return ``k + 1`` on a profiled path, 0 otherwise: a local tally that
    normal heaps' code does not keep at all (it is the constant 0 there)."""
    return k + 1 if prof is not None else 0


if not config.ENABLE_CUDASIM:
    from numba.core import types as _types
    from numba.cuda.extending import overload as _overload

    @_overload(_prof_of, target="cuda")
    def _prof_of_impl(ctx):
        if "prof" in getattr(ctx, "fields", ()):
            return lambda ctx: ctx
        return lambda ctx: None

    @_overload(_pcount, target="cuda")
    def _pcount_impl(prof, counter, n):
        if isinstance(prof, (_types.NoneType, _types.Omitted)):
            return lambda prof, counter, n: None

        def count(prof, counter, n):
            # Profile stripe: add, contended only among counting threads of
            # blocks sharing it; read by the host after a synchronization.
            if prof.prof.shape[0] > 0 and n != 0:
                cuda.atomic.add(prof.prof,
                                L.prof_word(cuda.blockIdx.x % L.PROF_STRIPES, counter), n)
        return count

    @_overload(_pshift, target="cuda")
    def _pshift_impl(meta):
        k = getattr(meta, "page_shift", None)
        if k is not None:  # devalloc.ctx.PagedMeta: the page is part of the type
            return lambda meta: uint32(k)
        return lambda meta: uint32(uint32(uint32(meta.shape[0]) & uint32(7))
                                   + uint32(L.PAGE_SHIFT_MIN))

    @_overload(_ptally, target="cuda")
    def _ptally_impl(prof, k):
        if isinstance(prof, (_types.NoneType, _types.Omitted)):
            return lambda prof, k: 0
        return lambda prof, k: k + 1
