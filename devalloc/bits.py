"""Bit helpers for 32-bit masks, shared by the host and device code.

Plain integer arithmetic, callable from device code (``register_jitable``)
and unit-tested on the host.
"""

from numba.cuda.extending import register_jitable


@register_jitable
def floor_log2(x):
    """Return floor(log2(x)) for 1 <= x < 2**32 (branch-light, no loops)."""
    r = 0
    if x >= 65536:
        x >>= 16
        r += 16
    if x >= 256:
        x >>= 8
        r += 8
    if x >= 16:
        x >>= 4
        r += 4
    if x >= 4:
        x >>= 2
        r += 2
    if x >= 2:
        r += 1
    return r


@register_jitable
def popc32(x):
    """Return the number of set bits of ``x`` (0 <= x < 2**32).

    Device paths that count bits of a bitmap word use
    :func:`devalloc.device._meta._popc32` (one ``popc`` instruction).
    """
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & 0xFFFFFFFF) >> 24


@register_jitable
def nth_set_bit(m, k):
    """Return the index of the ``k``-th (from 0) lowest set bit of ``m``.

    ``m`` is a 32-bit mask with more than ``k`` bits set.
    """
    for _ in range(k):
        m &= m - 1
    return floor_log2(m & -m)


@register_jitable
def lowest_bits(m, k):
    """Return the ``k`` lowest set bits of ``m`` (all of them if fewer)."""
    out = 0
    for _ in range(k):
        if m == 0:
            break
        low = m & -m
        out |= low
        m ^= low
    return out

