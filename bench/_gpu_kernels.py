"""Kernels timed by ``bench/gpu_throughput.py``, and their signatures.

Imports numba: import this module only after ``devalloc.target.choose()``
(``gpu_throughput.py`` does). Every kernel takes the allocation count ``n``
and lets the threads past it return at once, so any block size covers any
count (and ``n = 0`` launches nothing but compile and load the kernel).

Two variants of each timed kernel, as in Winter et al.'s
``perf_allocation.cu``:

* ``*_thread``: thread ``i < n`` makes allocation ``i``;
* ``*_warp``: the grid has ``32 * n`` threads; lane 0 of warp ``w < n``
  makes allocation ``w`` (of the same size) and the other 31 lanes do
  nothing. One allocating thread per warp: no two allocations of a warp
  meet, and there are 32 times as many warps in flight.

The kernels:

* ``hold``: one thread sleeps, to keep the stream busy (see its docstring);
* ``floor_*``: one ``cuda.atomic.add`` of the size on a counter per
  allocation, i.e. a hand-written bump allocator (no free): the floor every
  figure is divided by;
* ``alloc_*``: one ``devalloc.alloc`` per allocation, offset stored in ``offs``;
* ``free_*``: one ``devalloc.free`` of each stored offset;
* ``touch``/``check`` (untimed, thread-indexed for both variants): write the
  allocation's index into every 4-byte word of its block, then read them
  back, counting blocks that do not hold it (overlapping blocks);
* ``pair_*``: ``alloc``, write one byte through ``view``, ``free``, in one
  kernel: the only shape NRT can be timed in (below);
* ``nrt_*``: ``np.empty`` inside the kernel, which numba-cuda's NRT serves
  with CUDA's device ``malloc`` (data and header in one block) and frees with
  ``free`` when the array dies at the end of the thread: an alloc+free pair.
  Compiled only while ``numba.cuda.config.CUDA_ENABLE_NRT`` is true (see
  :func:`nrt_enabled`), so that NRT's reference counting does not touch the
  other kernels.
"""

import numpy as np
from numba import cuda, types

import devalloc
from devalloc import _examples

#: Lanes per warp; the warp variant's lane 0 allocates.
WARP = 32


@cuda.jit
def hold(microseconds):
    """Keep the stream busy for about ``microseconds`` (one thread sleeps).

    Launched just before a timing's start event, so that the host has queued
    the timed launch by the time the GPU records the start: Python's launch
    overhead then falls outside the timed interval.
    """
    for _ in range(microseconds):
        cuda.nanosleep(np.uint32(1000))


@cuda.jit(device=True)
def _warp_leader(n):
    # The allocation index of this thread in the warp variant, or -1: lane 0
    # of warp w < n (the survey's tid = global thread / 32).
    w = cuda.grid(1) // WARP
    if w < n and cuda.laneid == 0:
        return w
    return -1


@cuda.jit
def floor_thread(counter, nbytes, n, out):
    i = cuda.grid(1)
    if i < n:
        # The floor itself: one add per allocation on one shared counter, the
        # whole cost of a hand-written bump allocator.
        out[i] = cuda.atomic.add(counter, 0, nbytes)


@cuda.jit
def floor_warp(counter, nbytes, n, out):
    w = _warp_leader(n)
    if w >= 0:
        # The floor itself: one add per allocation (lane 0 of each warp).
        out[w] = cuda.atomic.add(counter, 0, nbytes)


@cuda.jit
def alloc_thread(ctx, nbytes, n, offs):
    i = cuda.grid(1)
    if i < n:
        offs[i] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def alloc_warp(ctx, nbytes, n, offs):
    w = _warp_leader(n)
    if w >= 0:
        offs[w] = devalloc.alloc(ctx, nbytes)


@cuda.jit
def free_thread(ctx, n, offs):
    i = cuda.grid(1)
    if i < n:
        devalloc.free(ctx, offs[i])  # free(ctx, NULL) does nothing


@cuda.jit
def free_warp(ctx, n, offs):
    w = _warp_leader(n)
    if w >= 0:
        devalloc.free(ctx, offs[w])


@cuda.jit
def touch(ctx, nbytes, n, offs):
    i = cuda.grid(1)
    if i < n and offs[i] != devalloc.NULL:
        v = devalloc.view(ctx, offs[i], nbytes // 4, np.int32)
        for k in range(v.shape[0]):
            v[k] = np.int32(i)


@cuda.jit
def check(ctx, nbytes, n, offs, bad):
    i = cuda.grid(1)
    if i < n and offs[i] != devalloc.NULL:
        v = devalloc.view(ctx, offs[i], nbytes // 4, np.int32)
        for k in range(v.shape[0]):
            if v[k] != np.int32(i):
                # Count blocks another allocation wrote into (any thread may
                # find one, so the count needs an atomic; never taken when
                # the heap is correct).
                cuda.atomic.add(bad, 0, 1)
                break


@cuda.jit(device=True)
def _pair(ctx, nbytes):
    off = devalloc.alloc(ctx, nbytes)
    if off != devalloc.NULL:
        devalloc.view(ctx, off, 1, np.uint8)[0] = 1
        devalloc.free(ctx, off)
    return off


@cuda.jit
def pair_thread(ctx, nbytes, n, offs):
    i = cuda.grid(1)
    if i < n:
        offs[i] = _pair(ctx, nbytes)


@cuda.jit
def pair_warp(ctx, nbytes, n, offs):
    w = _warp_leader(n)
    if w >= 0:
        offs[w] = _pair(ctx, nbytes)


def nrt_thread(nbytes, n, out):
    i = cuda.grid(1)
    if i < n:
        a = np.empty(nbytes, np.uint8)
        a[0] = 1
        out[i] = a[0]


def nrt_warp(nbytes, n, out):
    w = cuda.grid(1) // WARP
    if w < n and cuda.laneid == 0:
        a = np.empty(nbytes, np.uint8)
        a[0] = 1
        out[w] = a[0]


#: Compile (and first launch) NRT kernels inside this ``with`` only: the
#: examples' switch (``kernels/_metering.py``), one for the whole project.
nrt_enabled = _examples.load("_metering").nrt_enabled


#: NRT kernels get their own dispatchers, compiled under nrt_enabled().
NRT = {"nrt_thread": cuda.jit(nrt_thread), "nrt_warp": cuda.jit(nrt_warp)}

#: The kernels of each variant, by role.
VARIANTS = {
    "thread": {"floor": floor_thread, "alloc": alloc_thread, "free": free_thread,
               "pair": pair_thread, "nrt": NRT["nrt_thread"]},
    "warp": {"floor": floor_warp, "alloc": alloc_warp, "free": free_warp,
             "pair": pair_warp, "nrt": NRT["nrt_warp"]},
}

_I64 = types.int64
_OUT = types.Array(types.int64, 1, "C")
_U8 = types.Array(types.uint8, 1, "C")
_CTX = devalloc.ctx_type

#: Argument types of every kernel, for compiling ahead of time.
SIGNATURES = {
    "hold": (_I64,),
    "touch": (_CTX, _I64, _I64, _OUT),
    "check": (_CTX, _I64, _I64, _OUT, _OUT),
}
for _v in VARIANTS:
    SIGNATURES.update({
        f"floor_{_v}": (_OUT, _I64, _I64, _OUT),
        f"alloc_{_v}": (_CTX, _I64, _I64, _OUT),
        f"free_{_v}": (_CTX, _I64, _OUT),
        f"pair_{_v}": (_CTX, _I64, _I64, _OUT),
        f"nrt_{_v}": (_I64, _I64, _U8),
    })


def kernel(name):
    """Return the dispatcher of kernel ``name``."""
    return NRT.get(name) or globals()[name]
