"""The probe kernels: user-style kernels that call devalloc, compiled to measure it.

Each probe is one way a kernel uses the heap (an ``alloc`` per thread, with
the size passed three ways; ``free``; ``view``; ``bump``; scoped scratch),
for each kind of heap (:data:`PROBES`, argument types :func:`signature`).
:mod:`.probes` compiles and assembles them for registers, spills and SASS;
:mod:`.paths` walks the instructions their calls execute. Both read them
from here (neither imports the other for them).
"""

import numpy as np
from numba import cuda, types

import devalloc
from devalloc.ctx import ctx_type_for, obs_ctx_type


def k_empty(ctx, n, out):
    """Floor of floors: a kernel that stores one value."""
    out[cuda.grid(1)] = n


def k_atomic_floor(ctx, n, out):
    """The hand-written floor: one ``cuda.atomic.add`` bump per thread."""
    out[cuda.grid(1)] = cuda.atomic.add(ctx.meta, 0, n)


def k_alloc(ctx, n, out):
    """One ``alloc`` per thread of a size passed as a kernel argument, offset stored."""
    out[cuda.grid(1)] = devalloc.alloc(ctx, n)


def k_alloc_const(ctx, n, out):
    """One ``alloc`` per thread of a compile-time constant size (64 B)."""
    out[cuda.grid(1)] = devalloc.alloc(ctx, 64)


def k_alloc_per_thread(ctx, n, out):
    """One ``alloc`` per thread of a size that differs per thread (read from ``out``)."""
    i = cuda.grid(1)
    out[i] = devalloc.alloc(ctx, out[i])


@cuda.jit(device=True)
def _alloc_view_free(ctx, n, out, i):
    # The typical scratch use: alloc n bytes, write through view, free.
    off = devalloc.alloc(ctx, n)
    if off != devalloc.NULL:
        a = devalloc.view(ctx, off, n // 4, np.float32)
        for j in range(a.shape[0]):
            a[j] = j
        out[i] = a[0]
        devalloc.free(ctx, off)


def k_alloc_view_free(ctx, n, out):
    """``alloc``, write through ``view``, ``free`` of a kernel argument's size."""
    _alloc_view_free(ctx, n, out, cuda.grid(1))


def k_alloc_view_free_per_thread(ctx, n, out):
    """``alloc``/``view``/``free`` of a size that differs per thread."""
    i = cuda.grid(1)
    _alloc_view_free(ctx, out[i], out, i)


def k_free(ctx, n, out):
    """One ``free`` per thread."""
    devalloc.free(ctx, out[cuda.grid(1)])


def k_conditional(ctx, n, out):
    """Divergent use: only odd threads allocate, of a per-thread size."""
    i = cuda.grid(1)
    if i % 2 == 1:
        off = devalloc.alloc(ctx, n + i)
        if off != devalloc.NULL:
            v = devalloc.view(ctx, off, 2, np.int64)
            v[0] = i
            out[i] = v[0]
            devalloc.free(ctx, off)


def k_bump(ctx, n, out):
    """One ``bump`` per thread (warp-aggregated on the GPU)."""
    out[cuda.grid(1)] = devalloc.bump(ctx, n)


def k_scoped(ctx, n, out):
    """An inner loop of scoped scratch: mark, scoped, view, release."""
    i = cuda.grid(1)
    s = devalloc.SCOPE_NONE
    m = devalloc.mark(ctx, s)
    s = m
    acc = 0.0
    for step in range(4):
        inner = devalloc.mark(ctx, s)
        s = inner
        off, s = devalloc.scoped(ctx, s, n * (step + 1))
        if off != devalloc.NULL:
            a = devalloc.view(ctx, off, 2, np.float64)
            a[0] = step
            acc += a[0]
        s = devalloc.release(ctx, s, inner)
    s = devalloc.release(ctx, s, m)
    out[i] = acc


PROBES = {
    "empty": k_empty,
    "atomic_floor": k_atomic_floor,
    # The three ways of passing a size: a kernel argument, a constant, per thread.
    "alloc": k_alloc,
    "alloc_const": k_alloc_const,
    "alloc_per_thread": k_alloc_per_thread,
    "free": k_free,
    "alloc_view_free": k_alloc_view_free,
    "alloc_view_free_per_thread": k_alloc_view_free_per_thread,
    "conditional": k_conditional,
    "bump": k_bump,
    "scoped": k_scoped,
    # The same kernels on a debug heap (Heap(..., debug=True)): guards,
    # poison and checks compiled in.
    "debug_alloc_view_free": k_alloc_view_free,
    "debug_scoped": k_scoped,
    # On an observed heap (Heap(..., profile=True, trace=N)): failure
    # causes counted, every call recorded in the trace.
    "observed_alloc_view_free": k_alloc_view_free,
    "observed_bump": k_bump,
    "observed_scoped": k_scoped,
}

SIG = (devalloc.ctx_type, types.int64, types.int64[::1])
DEBUG_SIG = (devalloc.debug_ctx_type, types.int64, types.int64[::1])
OBSERVED_SIG = (obs_ctx_type, types.int64, types.int64[::1])


def signature(name, outline=None):
    """Return the argument types of probe ``name`` (its heap kind from its prefix).

    ``outline``: the heap's choice of out-of-line bodies (``Heap(outline=)``,
    devalloc.device.outline); None for the process default (``DEVALLOC_OUTLINE``).
    """
    kind = ("debug" if name.startswith("debug_")
            else "observed" if name.startswith("observed_") else "normal")
    return sig_for(kind, outline)


def sig_for(kind="normal", outline=None):
    """Return the probes' argument types for a heap of ``kind`` and ``outline``
    (:func:`devalloc.ctx.ctx_type_for`; None: the process default, :data:`SIG` and its siblings)."""
    if outline is None:
        return {"normal": SIG, "debug": DEBUG_SIG, "observed": OBSERVED_SIG}[kind]
    return (ctx_type_for(kind=kind, outline=outline), types.int64, types.int64[::1])
