"""The kernels bench/first_call.py compiles (module level, so that ``cache=True`` can keep them).

``twin`` fills a per-thread ``cuda.local.array(64, float64)`` with
``counts[i]`` values and sums them; ``heap`` does the same in a
``devalloc.array`` (one ``alloc`` and one ``free`` site); ``heap4`` in four
arrays (four sites each), and ``twin4`` its twin on four local arrays.
"""

from numba import cuda, float64

import devalloc


def twin(ctx, counts, out):
    i = cuda.grid(1)
    if i >= counts.size:
        return
    n = counts[i]
    a = cuda.local.array(64, float64)
    s = 0.0
    for j in range(n):
        a[j] = j * 0.5
    for j in range(n):
        s += a[j]
    out[i] = s


def heap(ctx, counts, out):
    i = cuda.grid(1)
    if i >= counts.size:
        return
    a = devalloc.array(ctx, counts[i], float64)
    s = 0.0
    for j in range(a.size):
        a[j] = j * 0.5
    for j in range(a.size):
        s += a[j]
    devalloc.free_array(ctx, a)
    out[i] = s


def heap4(ctx, counts, out):
    i = cuda.grid(1)
    if i >= counts.size:
        return
    n = counts[i]
    a = devalloc.array(ctx, n, float64)
    b = devalloc.array(ctx, n + 1, float64)
    c = devalloc.array(ctx, 2 * n, float64)
    d = devalloc.array(ctx, n + 3, float64)
    s = 0.0
    for j in range(a.size):
        a[j] = j * 0.5
    for j in range(b.size):
        b[j] = j * 0.25
    for j in range(c.size):
        c[j] = j * 0.125
    for j in range(d.size):
        d[j] = j * 2.0
    for j in range(a.size):
        s += a[j] + b[j] + c[j] + d[j]
    devalloc.free_array(ctx, d)
    devalloc.free_array(ctx, c)
    devalloc.free_array(ctx, b)
    devalloc.free_array(ctx, a)
    out[i] = s


def twin4(ctx, counts, out):
    # heap4's twin: four cuda.local.array, the same loops
    i = cuda.grid(1)
    if i >= counts.size:
        return
    n = counts[i]
    a = cuda.local.array(64, float64)
    b = cuda.local.array(65, float64)
    c = cuda.local.array(128, float64)
    d = cuda.local.array(67, float64)
    s = 0.0
    for j in range(n):
        a[j] = j * 0.5
    for j in range(n + 1):
        b[j] = j * 0.25
    for j in range(2 * n):
        c[j] = j * 0.125
    for j in range(n + 3):
        d[j] = j * 2.0
    for j in range(n):
        s += a[j] + b[j] + c[j] + d[j]
    out[i] = s


KERNELS = {"twin": twin, "heap": heap, "heap4": heap4, "twin4": twin4}
