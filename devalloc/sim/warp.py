"""Warp groups on the simulator, which has no warp intrinsics.

The same functions as :mod:`devalloc.device.warp` (which imports these on
the simulator). By default every lane forms a group of one (mask 1, leader
0, rank 0, size 1): always correct, divergent code included, not
aggregated. Tests can make whole converged warps rendezvous instead
(``with simulate("warp"):``) so that groups of up to 32 lanes, and their one
atomic per group, are exercised too. There, ``group`` needs every lane of
the warp to reach it (convergent code); ``share`` and ``merge_bits`` need
only the lanes of the group. Reads the simulator's thread internals
(``threading.current_thread()._manager``, ``thread_id``, ``_block_dim``).
"""

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
WARP_SIZE = 32


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
    lane = t.thread_id % WARP_SIZE
    warp = t.thread_id // WARP_SIZE
    with _TABLE_LOCK:
        table = manager.__dict__.setdefault("_devalloc_warps", {})
        w = table.get(warp)
        if w is None:
            threads = math.prod(manager._block_dim)
            w = table[warp] = _Warp(min(WARP_SIZE, threads - WARP_SIZE * warp))
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
    """Return ``(mask, leader, rank, size)`` of the lanes sharing ``key``."""
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
    got = {other: w.values[other] for other in range(WARP_SIZE) if mask >> other & 1}
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
    """Take part in the rendezvous as a group of one ("warp" mode needs every
    lane of the warp at ``group``); a lane that needs no group on a GPU
    calls this instead."""
    group(solo_key())
