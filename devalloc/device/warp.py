"""Warp aggregation: lanes that ask for the same thing share one atomic.

``group(key)`` forms, among the lanes active *now*, the group of lanes with
the same ``key``; the lowest lane of the group is its leader. The leader
performs one atomic for the whole group and ``share(g, leader, value)``
broadcasts its result; each lane takes its part by ``rank``. Only active
lanes take part, so this is safe in divergent code: a lane never waits for
a lane that is not there. No function here performs an atomic.

On the GPU these are ``activemask``, ``match_any_sync``, ``lanemask_lt``,
``popc`` and ``shfl_sync`` (and ``redux.sync`` on sm_80 and later). On the
simulator, which has no warp intrinsics, the same names come from
:mod:`devalloc.sim.warp`.
"""

from numba import config, cuda, int32, int64, uint32

if config.ENABLE_CUDASIM:
    from ..sim.warp import (  # noqa: F401 (this module's API on the simulator)
        group,
        join_alone,
        merge_bits,
        share,
        simulate,
        solo_key,
        sync,
    )

else:
    from .ptx import _has_redux, _redux_or

    @cuda.jit(device=True)
    def group(key):
        """Return ``(mask, leader, rank, size)`` of the active lanes sharing ``key``.

        Any lane may call; all lanes in ``mask`` must reach the same call
        (true for lanes that are active together at ``activemask``).
        """
        active = cuda.activemask()
        # Every key fits 32 bits (metadata indices, classes, bump sizes, and
        # the negative solo keys): one 32-bit match.
        mask = cuda.match_any_sync(active, int32(key))
        leader = cuda.ffs(mask) - 1
        rank = cuda.popc(mask & cuda.lanemask_lt())
        return mask, leader, rank, cuda.popc(mask)

    @cuda.jit(device=True)
    def share(mask, leader, value):
        """Return the leader's ``value`` to every lane of ``mask``."""
        return cuda.shfl_sync(mask, int64(value), leader)

    @cuda.jit(device=True)
    def merge_bits(mask, value):
        """Return (OR of ``value`` over ``mask``, whether a lower lane has ``value``).

        ``value`` is a 32-bit mask (bits of one bitmap word). Every lane of
        ``mask`` must call. sm_80 and later: one ``redux.sync.or`` and one
        ``match.any.sync`` for the group (the choice is made when NVVM
        compiles for the target). Before: one ``shfl_sync`` per lane of the
        group.
        """
        if _has_redux():
            same = cuda.match_any_sync(mask, uint32(value))
            return int64(_redux_or(mask, value)), (same & cuda.lanemask_lt()) != 0
        me = cuda.laneid
        acc = int64(0)
        dup = False
        # match_any_sync's mask is an int32: widened as it is, lane 31 would
        # sign-extend it to 64 bits and the loop would shuffle from 32 lanes
        # that are not in the group. Zero-extend it.
        m = int64(mask) & 0xFFFFFFFF
        while m != 0:
            src = cuda.ffs(m) - 1
            v = cuda.shfl_sync(mask, int64(value), src)
            if src < me and v == value:
                dup = True
            acc |= v
            m &= m - 1
        return acc, dup

    @cuda.jit(device=True)
    def solo_key():
        """Return a ``group`` key no other lane of the warp uses."""
        return int32(-2 - cuda.laneid)

    @cuda.jit(device=True)
    def join_alone():
        """Nothing on a GPU: a lane that needs no group forms none (the
        simulator's "warp" mode makes it join its warp's rendezvous)."""
        return

    @cuda.jit(device=True)
    def sync(mask):
        """Order the memory accesses of the lanes of ``mask`` (``syncwarp``).

        A shuffle carries a value but is no memory-ordering edge; where the
        leader's acquire or release atomic acts for the group, ``__syncwarp``
        orders the other lanes' accesses after or before it
        (docs/correctness.md, "Memory ordering").
        """
        cuda.syncwarp(mask)
