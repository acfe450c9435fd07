"""Warp aggregation: lanes that ask for the same thing share one atomic.

``group(key)`` forms, among the lanes active *now*, the group of lanes with
the same ``key``; the lowest lane of the group is its leader. The leader
performs one atomic for the whole group and ``share(g, leader, value)``
broadcasts its result. Each lane then takes its part by ``rank`` (its
position among the group's lanes). Only active lanes take part, so this is
safe in divergent code: a lane never waits for a lane that is not there.

On the GPU these are ``activemask``, ``match_any_sync``, ``lanemask_lt``,
``popc`` and ``shfl_sync``. ``merge_bits`` ORs one value per lane over a
group (one ``shfl_sync`` per lane of the group) and tells each lane whether a
lower lane brought the same value. The CUDA simulator has no warp intrinsics, so on
the simulator every lane forms a group of one by default (mask 1, leader 0,
rank 0, size 1): always correct, divergent code included, not aggregated. The
compiled GPU code is the same either way. Tests can make whole converged
warps rendezvous instead (``with warp.simulate("warp"):``) so that groups of
up to 32 lanes, and their one atomic per group, are exercised too. There,
``group`` needs every lane of the warp to reach it (convergent code); the
calls after it (``share``, ``merge_bits``) need only the lanes of the group,
which may make different numbers of calls than other groups.
"""

from numba import config, cuda, int64


if config.ENABLE_CUDASIM:
    import contextlib
    import math
    import threading

    #: "single": every lane is a group of one (safe anywhere). "warp": the
    #: lanes of a warp rendezvous, so groups of up to 32 form as on a GPU;
    #: only for code where every lane of the warp reaches the same calls
    #: (convergent code), as in tests. Set with :func:`simulate`.
    MODE = "single"
    _TABLE_LOCK = threading.Lock()
    #: Seconds a lane waits for the rest of its warp before failing loudly.
    TIMEOUT = 30.0

    class _Warp:
        def __init__(self, lanes):
            self.barrier = threading.Barrier(lanes, timeout=TIMEOUT)
            self.keys = {}
            self.values = {}
            self.groups = {}  # mask -> Barrier of the group's lanes

        def group_barrier(self, mask):
            with _TABLE_LOCK:
                b = self.groups.get(mask)
                if b is None:
                    b = self.groups[mask] = threading.Barrier(bin(mask).count("1"),
                                                              timeout=TIMEOUT)
            return b

    def _warp_of_this_thread():
        t = threading.current_thread()
        manager = t._manager  # the simulator's BlockManager: one per block
        lane = t.thread_id % 32
        warp = t.thread_id // 32
        with _TABLE_LOCK:
            table = manager.__dict__.setdefault("_devalloc_warps", {})
            w = table.get(warp)
            if w is None:
                threads = math.prod(manager._block_dim)
                w = table[warp] = _Warp(min(32, threads - 32 * warp))
        return w, lane

    @contextlib.contextmanager
    def simulate(mode):
        """Run the block in ``mode`` ("single" or "warp") inside the ``with``."""
        global MODE
        if mode not in ("single", "warp"):
            raise ValueError(f"mode must be 'single' or 'warp', got {mode!r}")
        old, MODE = MODE, mode
        try:
            yield
        finally:
            MODE = old

    def group(key):
        """Return ``(mask, leader, rank, size)``: see the module docstring."""
        if MODE == "single":
            return 1, 0, 0, 1
        w, lane = _warp_of_this_thread()
        w.keys[lane] = key
        w.barrier.wait()
        same = sorted(other for other, k in w.keys.items() if k == key)
        w.barrier.wait()  # everyone has read the keys before they are reused
        mask = sum(1 << other for other in same)
        return mask, same[0], same.index(lane), len(same)

    def _exchange(mask, value):
        # Post value, wait for the group, return {lane: value} of the group.
        w, lane = _warp_of_this_thread()
        b = w.group_barrier(mask)
        w.values[lane] = value
        b.wait()
        got = {other: w.values[other] for other in range(32) if mask >> other & 1}
        b.wait()  # everyone has read the values before they are reused
        return got, lane

    def share(mask, leader, value):
        """Return the leader's ``value`` to every lane of its group."""
        if MODE == "single" or mask & (mask - 1) == 0:
            return value
        got, _ = _exchange(mask, value)
        return got[leader]

    def merge_bits(mask, value):
        """Return (OR of ``value`` over the group, whether a lower lane has ``value``)."""
        if MODE == "single" or mask & (mask - 1) == 0:
            return value, False
        got, lane = _exchange(mask, value)
        acc = 0
        for v in got.values():
            acc |= v
        return acc, any(v == value for other, v in got.items() if other < lane)

    def solo_key():
        """Return a ``group`` key no other lane of the warp uses."""
        if MODE == "single":
            return -2
        return -2 - _warp_of_this_thread()[1]

    def sync(mask):
        """Nothing to do: the simulator's threads share memory in program order."""

    def join_alone():
        """Take part in the rendezvous as a group of one ("warp" mode needs
        every lane of the warp at ``group``); a lane that needs no group on
        a GPU calls this instead."""
        group(solo_key())

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

    @cuda.jit(device=True)
    def merge_bits(mask, value):
        """Return (OR of ``value`` over ``mask``, whether a lower lane has ``value``).

        Every lane of ``mask`` must call. One ``shfl_sync`` per lane of the
        group, no atomics.
        """
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
        return int64(-2 - cuda.laneid)

    @cuda.jit(device=True)
    def join_alone():
        """Nothing on a GPU: a lane that needs no group forms none (the
        simulator's "warp" mode makes it join its warp's rendezvous)."""
        return

    @cuda.jit(device=True)
    def sync(mask):
        """Order the memory accesses of the lanes of ``mask`` (``syncwarp``).

        A shuffle carries a value but is no memory-ordering edge; where one
        lane's atomic acts for the group, ``__syncwarp`` orders the other
        lanes' fenced accesses with it. No atomics.
        """
        cuda.syncwarp(mask)
