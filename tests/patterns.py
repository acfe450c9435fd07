"""Device helpers the simulator tests share: thread ids, byte patterns, a held scope.

A block owned by ``key`` holds ``pat(key, j)`` at byte ``j``; writers and
checkers touch about 16 evenly spaced bytes and the last one, so a block
overwritten by another thread's block (or allocation) is caught cheaply.
"""

import numpy as np
from numba import cuda

import devalloc


@cuda.jit(device=True)
def linear_id():
    """Return the thread's index in a 1-D or 2-D grid of 1-3-D blocks."""
    per_block = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
    t = cuda.threadIdx.x + cuda.blockDim.x * (
        cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    b = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y
    return b * per_block + t


@cuda.jit(device=True)
def pat(key, j):
    """Return the byte stored at position ``j`` of the block owned by ``key``."""
    return (key * 131 + j * 7 + 1) & 0xFF


@cuda.jit(device=True)
def stride_of(n):
    s = n // 16
    if s < 1:
        s = 1
    return s


@cuda.jit(device=True)
def write_pattern(ctx, off, n, key):
    """Write ``key``'s pattern into bytes 0, stride, 2*stride.. and n-1; return the view's length."""
    a = devalloc.view(ctx, off, n, np.uint8)
    s = stride_of(n)
    j = 0
    while j < n:
        a[j] = pat(key, j)
        j += s
    a[n - 1] = pat(key, n - 1)
    return a.shape[0]


@cuda.jit(device=True)
def pattern_ok(ctx, off, n, key):
    """Return 1 if the bytes :func:`write_pattern` wrote are all still there."""
    a = devalloc.view(ctx, off, n, np.uint8)
    if a.shape[0] != n:
        return 0
    s = stride_of(n)
    j = 0
    while j < n:
        if a[j] != pat(key, j):
            return 0
        j += s
    if a[n - 1] != pat(key, n - 1):
        return 0
    return 1


@cuda.jit
def hold_scope(ctx, nbytes, out):
    """Open a scope, take one scoped block, keep the scope open.

    ``out[0]``: the block's offset (or NULL); ``out[1]``: the state after.
    """
    s = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    off, s = devalloc.scoped(ctx, s, nbytes)
    out[0] = off
    out[1] = s
