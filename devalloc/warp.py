"""Warp aggregation: lanes that ask for the same thing share one atomic.

``group(key)`` forms, among the lanes active *now*, the group of lanes with
the same ``key``; the lowest lane of the group is its leader. The leader
performs one atomic for the whole group and ``share(g, leader, value)``
broadcasts its result. Each lane then takes its part by ``rank`` (its
position among the group's lanes). Only active lanes take part, so this is
safe in divergent code: a lane never waits for a lane that is not there.

On the GPU these are ``activemask``, ``match_any_sync``, ``lanemask_lt``,
``popc`` and ``shfl_sync``. The CUDA simulator has no warp intrinsics, so on
the simulator every lane forms a group of one (mask 1, leader 0, rank 0,
size 1): always correct, divergent code included, just not aggregated. The
compiled GPU code is the same either way.
"""

from numba import config, cuda, int64


if config.ENABLE_CUDASIM:

    def group(key):
        """Return ``(mask, leader, rank, size)``: here, a group of one."""
        return 1, 0, 0, 1

    def share(mask, leader, value):
        """Return the leader's ``value`` (here, the lane's own)."""
        return value

else:

    @cuda.jit(device=True)
    def group(key):
        """Return ``(mask, leader, rank, size)`` of the active lanes sharing ``key``.

        Any lane may call; all lanes in ``mask`` must reach the same call
        (true for lanes that are active together at ``activemask``).
        No atomics.
        """
        active = cuda.activemask()
        mask = cuda.match_any_sync(active, int64(key))
        leader = cuda.ffs(mask) - 1
        rank = cuda.popc(mask & cuda.lanemask_lt())
        return mask, leader, rank, cuda.popc(mask)

    @cuda.jit(device=True)
    def share(mask, leader, value):
        """Return the leader's ``value`` to every lane of ``mask``. No atomics."""
        return cuda.shfl_sync(mask, int64(value), leader)
