"""Kernels timed by ``bench/gpu_throughput.py``, and their signatures.

Imports numba: import this module only after ``devalloc.target.choose()``
(``gpu_throughput.py`` does). Every kernel takes the thread count ``n`` and
lets threads ``i >= n`` return at once, so any block size covers any count.

* ``hold``: one thread sleeps, to keep the stream busy (see its docstring);
* ``bump_floor``: one ``cuda.atomic.add`` on a counter per thread, the floor
  a hand-written bump allocator costs (no free);
* ``alloc_*``: one ``devalloc.alloc`` per thread, offset stored;
* ``pair_*``: ``alloc``, write one byte through ``view``, ``free``;
* ``bump_*``: one ``devalloc.bump`` per thread (warp-aggregated);
* ``nrt_*``: ``np.empty`` inside the kernel, which numba-cuda's NRT serves
  with CUDA's device ``malloc`` (data and header in one block) and frees with
  ``free`` when the array dies at the end of the thread: an alloc+free pair.
  Compiled only while ``numba.cuda.config.CUDA_ENABLE_NRT`` is true (see
  :func:`nrt_enabled`), so that NRT's reference counting does not touch the
  other kernels.

``*_fixed`` kernels take one size for every thread, ``*_sized`` ones a size
per thread (the mixed 16-4096 B workload).
"""

import contextlib

import numpy as np
from numba import config, cuda, types

import devalloc


@cuda.jit
def hold(microseconds):
    """Keep the stream busy for about ``microseconds`` (one thread sleeps).

    Launched just before a timing's start event, so that the host has queued
    the timed launch by the time the GPU records the start: Python's launch
    overhead then falls outside the timed interval.
    """
    for _ in range(microseconds):
        cuda.nanosleep(np.uint32(1000))


@cuda.jit
def bump_floor(counter, n, out):
    i = cuda.grid(1)
    if i < n:
        out[i] = cuda.atomic.add(counter, 0, 1)


@cuda.jit
def alloc_fixed(ctx, nbytes, n, out):
    i = cuda.grid(1)
    if i < n:
        out[i] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def alloc_sized(ctx, sizes, n, out):
    i = cuda.grid(1)
    if i < n:
        out[i] = devalloc.alloc(ctx, sizes[i])


@cuda.jit(device=True)
def _pair(ctx, nbytes):
    off = devalloc.alloc(ctx, nbytes)
    if off != devalloc.NULL:
        devalloc.view(ctx, off, 1, np.uint8)[0] = 1
        devalloc.free(ctx, off)
    return off


@cuda.jit
def pair_fixed(ctx, nbytes, n, out):
    i = cuda.grid(1)
    if i < n:
        out[i] = _pair(ctx, nbytes)


@cuda.jit
def pair_sized(ctx, sizes, n, out):
    i = cuda.grid(1)
    if i < n:
        out[i] = _pair(ctx, sizes[i])


@cuda.jit
def bump_fixed(ctx, nbytes, n, out):
    i = cuda.grid(1)
    if i < n:
        out[i] = devalloc.bump(ctx, nbytes)


def nrt_fixed(nbytes, n, out):
    i = cuda.grid(1)
    if i < n:
        a = np.empty(nbytes, np.uint8)
        a[0] = 1
        out[i] = a[0]


def nrt_sized(sizes, n, out):
    i = cuda.grid(1)
    if i < n:
        a = np.empty(sizes[i], np.uint8)
        a[0] = 1
        out[i] = a[0]


@contextlib.contextmanager
def nrt_enabled():
    """Compile (and first launch) NRT kernels inside this ``with`` only."""
    old = getattr(config, "CUDA_ENABLE_NRT", False)
    config.CUDA_ENABLE_NRT = True
    try:
        yield
    finally:
        config.CUDA_ENABLE_NRT = old


#: NRT kernels get their own dispatchers, compiled under nrt_enabled().
NRT = {"nrt_fixed": cuda.jit(nrt_fixed), "nrt_sized": cuda.jit(nrt_sized)}

_I64 = types.int64
_OUT = types.Array(types.int64, 1, "C")
_SIZES = types.Array(types.int64, 1, "C")
_U8 = types.Array(types.uint8, 1, "C")
_CTX = devalloc.ctx_type

#: Argument types of every kernel, for compiling ahead of time.
SIGNATURES = {
    "hold": (_I64,),
    "bump_floor": (_OUT, _I64, _OUT),
    "alloc_fixed": (_CTX, _I64, _I64, _OUT),
    "alloc_sized": (_CTX, _SIZES, _I64, _OUT),
    "pair_fixed": (_CTX, _I64, _I64, _OUT),
    "pair_sized": (_CTX, _SIZES, _I64, _OUT),
    "bump_fixed": (_CTX, _I64, _I64, _OUT),
    "nrt_fixed": (_I64, _I64, _U8),
    "nrt_sized": (_SIZES, _I64, _U8),
}


def kernel(name):
    """Return the dispatcher of kernel ``name``."""
    return NRT.get(name) or globals()[name]
