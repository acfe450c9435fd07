"""Warp groups in the explorer: one logical thread acts for a group of lanes.

On a GPU, lanes of a warp that call ``alloc`` for one size class at the same
time, or ``free`` blocks of one bitmap word, form a group
(:mod:`devalloc.warp`). Only the group's leader touches the metadata: it
wins blocks for every lane (a grant per round, broadcast with ``share``), or
sets every lane's freed bit with one ``or`` and gives their slots back with
one ``add``. The other lanes only compute their result from what the leader
shares (and count their own failure).

So, as far as the shared metadata is concerned, a group is one thread: the
leader. The explorer's ``alloc_group``/``free_group`` operations run it as
one logical thread:

* ``alloc_group(n, k)``: the leader runs ``alloc`` (its accesses are the
  scheduling points), every ``share`` it makes is recorded; then each other
  lane runs ``alloc`` with ``share`` replaying the leader's values, as the
  lanes do on a GPU after the leader. A lane that asks for more or fewer
  shares than the leader made is a fault (on a GPU: a hang).
* ``free_group(i, j, ...)``: the blocks are grouped by bitmap word as
  ``match_any_sync`` groups them; each group's leader runs ``free`` with
  ``merge_bits`` returning the group's bits. Every other lane's block must
  then be valid: its bit clear in the old word the leader shares.

:class:`FakeWarp` stands in for :mod:`devalloc.warp` while exploring; a
thread not running a group operation is a lane alone (a group of one).
"""

from .. import layout as L
from .invariants import Fault


class GroupRun:
    """The group a lane belongs to during a group operation.

    ``shares`` is the leader's list of shared values: rank 0 appends to it,
    the other ranks replay it in order. ``bits`` is what ``merge_bits``
    returns (the group's OR) in a free.
    """

    def __init__(self, mask, rank, lanes, shares, bits=0):
        self.mask = mask
        self.rank = rank
        self.lanes = lanes
        self.shares = shares
        self.bits = bits
        self.replayed = 0

    def share(self, value):
        if self.rank == 0:
            self.shares.append(int(value))
            return value
        if self.replayed >= len(self.shares):
            raise Fault("group", f"lane {self.rank} waits for share "
                        f"#{self.replayed + 1}, but its leader made {len(self.shares)}")
        value = self.shares[self.replayed]
        self.replayed += 1
        return value


class FakeWarp:
    """:mod:`devalloc.warp` as explored device code sees it.

    ``current()`` returns the running logical thread; its ``group`` attribute
    is a :class:`GroupRun` during a group operation and None otherwise (then
    every call behaves like a lone lane's).
    """

    def __init__(self, current):
        self._current = current

    def _run(self):
        return getattr(self._current(), "group", None)

    def group(self, key):
        g = self._run()
        if g is None:
            return 1, 0, 0, 1
        return g.mask, 0, g.rank, g.lanes

    def share(self, mask, leader, value):
        g = self._run()
        return value if g is None else g.share(value)

    def merge_bits(self, mask, value):
        g = self._run()
        if g is None:
            return value, False
        return g.bits, False  # the explorer's group frees name distinct blocks

    def solo_key(self):
        return -2

    def sync(self, mask):
        pass

    def join_alone(self):
        pass


def alloc_group(machine, t, nbytes, lanes):
    """Run ``alloc(nbytes)`` for a group of ``lanes`` lanes; return their offsets."""
    mask = (1 << lanes) - 1
    shares = []
    offs = []
    try:
        for rank in range(lanes):
            t.group = run = GroupRun(mask, rank, lanes, shares)
            offs.append(int(machine.alloc(machine.ctx, nbytes)))
            if rank and run.replayed != len(shares):
                raise Fault("group", f"lane {rank} returned after {run.replayed} of "
                            f"its leader's {len(shares)} shares")
    finally:
        t.group = None
    return offs


def word_groups(blocks, ps=L.PAGE_SHIFT):
    """Split ``blocks`` ((offset, size) of small blocks, in lane order, in
    pages of ``2**ps`` bytes) as ``match_any_sync`` would: by bitmap word.
    Returns a list of groups, each a list of ``(offset, bit)`` in lane order
    (the first is the leader)."""
    groups = {}
    for off, size in blocks:
        c = L.size_class(size)
        b = (off % (1 << ps)) // L.class_size(c)
        key = (off >> ps, b // L.BITS_PER_WORD)
        groups.setdefault(key, []).append((off, 1 << (b % L.BITS_PER_WORD)))
    return list(groups.values())


def free_word_group(machine, t, lanes):
    """Run the ``free`` of one bitmap word's group (``(offset, bit)`` per
    lane): its leader's, then check that the old word the leader shared
    shows every other lane's block as live (bit clear). A group of one lane
    shares nothing (there is nobody to tell)."""
    bits = 0
    for _, bit in lanes:
        bits |= bit
    shares = []
    try:
        t.group = GroupRun((1 << len(lanes)) - 1, 0, len(lanes), shares, bits)
        machine.free(machine.ctx, lanes[0][0])
    finally:
        t.group = None
    want = 1 if len(lanes) > 1 else 0
    if len(shares) != want:
        raise Fault("group", f"the leader of a group free of {len(lanes)} blocks made "
                    f"{len(shares)} shares, not {want} (the old bitmap word)")
    if not shares:
        return
    old = shares[0]
    for off, bit in lanes[1:]:
        if old & bit:
            raise Fault("group", f"block {off} of a group free was already marked "
                        f"freed (old word {old:#x}): its lane would count an invalid free")
