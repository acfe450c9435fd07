"""The sequential model of a history, and the invariants the explorer checks.

Pure Python over the metadata words (a list of ints laid out as in
:mod:`devalloc.layout`); nothing here runs device code.

The model follows the *operations* of the logical threads, not the device
code: an ``alloc`` that returned an offset made a live block, a ``free`` of
one of its own live blocks ends it, a free of an interior or bogus offset is
an invalid free. Operations overlap in time, so the model distinguishes:

* **untouched**: started, but no metadata access of it has executed yet. It
  has had no effect; the model treats it as not started.
* **in flight**: at least one access executed, not yet returned. A block
  being freed leaves the live set when its free is first touched (from then
  on another thread may be handed the same bytes).
* **done**: returned; its result is in the model's counts.

A state is **quiescent** when no operation is in flight. :func:`check_safe`
holds after every step; :func:`check_quiescent` adds the exact, strong
invariants that only hold at quiescent states (both check the page index:
:func:`check_index`); :func:`check_drained` is the end state once every
block has been freed.

Longer than 500 lines because the model and the invariant checks decode the
same metadata words (states, bitmaps, page index, counters) against the
same live blocks; apart, each would decode them again. Running the device
code is apart (:mod:`.machine`), so is choosing the runs (:mod:`.explorer`).
"""

import functools
from dataclasses import dataclass

import numpy as np

from .. import layout as L
from ..host.stats import usage_from_meta

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
#: Head of a bump chunk (devalloc.bump), if this layout has them: a run of
#: pages like a large block's, never counted as a block.
_TAG_BUMP = getattr(L, "TAG_BUMP", None)
_TAG_RETIRING = getattr(L, "TAG_RETIRING", None)


class Fault(AssertionError):
    """An invariant does not hold: ``invariant`` names it, ``detail`` says how."""

    def __init__(self, invariant, detail):
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


def span(nbytes, ps=L.PAGE_SHIFT):
    """Return the bytes the heap reserves for a request of ``nbytes`` (pages of ``2**ps`` bytes)."""
    if nbytes <= L.max_small(ps):
        return L.class_size(L.size_class(nbytes))
    return L.pages_for(nbytes, ps) << ps


def page_shift(words):
    """Return the page shift of the heap whose metadata words are ``words``
    (its length names it: ``layout.page_shift_of``)."""
    return L.page_shift_of(len(words))


def word_name(i, npages, ps=L.PAGE_SHIFT):
    """Return a readable name for metadata word ``i`` of a heap of ``npages``
    pages of ``2**ps`` bytes."""
    fixed = {
        L.H_PAGES_USED: "pages_used",
        L.H_PEAK_PAGES: "peak_pages",
        L.H_ALLOC_FOLD: "alloc_fold",
        L.H_ALLOC_UNDO: "alloc_undo",
    }
    for name in ("H_BUMP", "H_BUMP_DONE"):
        if hasattr(L, name):
            fixed[getattr(L, name)] = name[2:].lower()
    if i in fixed:
        return fixed[i]
    if L.STRIPE_BASE <= i < L.HINT_BASE:
        stripe, field = divmod(i - L.STRIPE_BASE, L.STRIPE_STRIDE)
        name = {L.S_FAILED: "failed", L.S_INVALID: "invalid"}.get(field, f"w{field}")
        return f"stripe{stripe}.{name}"
    if L.HINT_BASE <= i < L.STATE_BASE:
        # One line of HINT_STRIDE words per class: its spread word, then
        # HINT_SLOTS hints (layout.spread_word, hint_word), then padding.
        c, k = divmod(i - L.HINT_BASE, L.HINT_STRIDE)
        cls = f"c{c}={L.class_size(c)}B"
        if k == 0:
            return f"spread[{cls}]"
        if k <= L.HINT_SLOTS:
            return f"hint[{cls}][{k - 1}]"
        return f"hint[{cls}].pad[{k - 1 - L.HINT_SLOTS}]"
    if L.STATE_BASE <= i < L.bits_base(npages):
        return f"state[p{i - L.STATE_BASE}]"
    trees, end = L.free_tree(npages, ps), L.room_tree(npages, L.NCLASSES, ps)
    if L.bits_base(npages) <= i < trees:
        p, w = divmod(i - L.bits_base(npages), L.bitmap_words(ps))
        return f"bits[p{p}][w{w}]"
    if end <= i < L.meta_words(npages, ps):
        return f"pad[{i - end}]"
    if trees <= i < end:
        tree, k = divmod(i - trees, L.tree_stride(npages))
        name = "free" if tree == 0 else f"room[c{tree - 1}={L.class_size(tree - 1)}B]"
        for j in range(L.tree_levels(npages)):
            if k < L.level_start(npages, j + 1):
                return f"{name}[level {j}][{k - L.level_start(npages, j)}]"
        return f"{name}[unused {k}]"
    return f"meta[{i}] (out of range)"


def describe_state(s):
    """Return a state word as ``TAG n=.. count=..``."""
    t = L.state_tag(s)
    if t == L.TAG_FREE:
        tag = "FREE"
    elif t == L.TAG_HEAD:
        tag = "HEAD"
    elif t == L.TAG_TAIL:
        tag = "TAIL"
    elif t == _TAG_BUMP:
        tag = "BUMP"
    elif t == _TAG_RETIRING:
        tag = "RETIRING"
    elif 1 <= t <= L.NCLASSES:
        return (f"SLAB{L.class_size(t - 1)} live={L.slab_live(s)} "
                f"cursor={L.slab_cursor(s)} count={L.state_count(s)}")
    else:
        tag = f"tag{t}"
    return f"{tag} n={L.state_n(s)} count={L.state_count(s)}"


def pages_moved(nbytes, ps=L.PAGE_SHIFT):
    """Return the pages of ``2**ps`` bytes an allocation of ``nbytes`` takes (one for a slab)."""
    return L.pages_for(nbytes, ps) if nbytes > L.max_small(ps) else 1


@dataclass
class Op:
    """An operation in progress: its kind, the live blocks it frees, how
    many lanes (results) are still to return, and how many pages it may
    have between a state change and the page index's (``pages``)."""

    kind: str
    blocks: list
    lanes: int = 1
    pages: int = 1


@dataclass
class Block:
    """A block the model holds live: who allocated it, where, how big."""

    tid: int
    aidx: int  # the thread's allocation number
    off: int
    size: int  # requested bytes
    span: int  # reserved bytes
    chunk: bool = False  # a scoped-scratch chunk (usage() reports it apart)
    ps: int = L.PAGE_SHIFT  # the heap's page shift

    @property
    def small(self):
        return self.size <= L.max_small(self.ps)

    def __str__(self):
        return f"T{self.tid}'s block #{self.aidx} [{self.off}, {self.off + self.span})"


class Model:
    """The sequential model: live blocks and counts of completed operations."""

    def __init__(self, npages, base=0, ps=L.PAGE_SHIFT):
        self.npages = npages
        self.ps = ps  # the heap's page shift: pages of 2**ps bytes
        self.base = base  # allocations (all freed) before the history began
        self.live = {}  # offset -> Block
        self.allocs = 0  # allocs that returned an offset
        self.failed = 0  # allocs that returned NULL
        self.frees = 0  # valid frees done
        self.invalid = 0  # invalid frees done
        self.untouched = {}  # tid -> Op started, no access yet
        self.inflight = {}  # tid -> Op touched, not (wholly) returned
        self.bumped = {}  # offset -> Block: bump blocks, live until reset
        self.chunk_allocs = 0  # scoped chunks taken (in allocs) ...
        self.chunk_frees = 0  # ... and given back (in frees)
        self.in_scope = set()  # tids inside a scope operation

    # ---------------------------------------------------------- events
    def start(self, tid, kind, blocks=(), lanes=1, pages=None):
        """Thread ``tid`` starts an operation (``alloc``, ``free``, ``invalid``).

        ``lanes`` > 1: the thread acts for a group of that many lanes (the
        explorer's ``alloc_group``/``free_group``), one result per lane;
        ``blocks``: the live blocks a free ends (None for unknown ones);
        ``pages``: the pages it may hold in transit (default: a free's
        blocks' pages, else 1).
        """
        if pages is None:
            pages = max(1, sum(b.span >> self.ps for b in blocks
                               if b is not None and not b.small))
        self.untouched[tid] = Op(kind, list(blocks), lanes, pages)

    def touch(self, tid):
        """The first metadata access of ``tid``'s current operation executed."""
        op = self.untouched.pop(tid, None)
        if op is None:
            return
        if op.kind == "free":
            for block in op.blocks:
                if block is not None:
                    del self.live[block.off]
        self.inflight[tid] = op

    def alloc_done(self, tid, aidx, size, off, chunk=False):
        """Record ``alloc(size)`` returning ``off``; check the new block; return it.

        ``chunk``: the alloc was scoped scratch taking a chunk of its own.
        """
        self._finish(tid)
        if off == L.NULL:
            self.failed += 1
            return None
        page = 1 << self.ps
        b = Block(tid, aidx, off, size, span(size, self.ps), chunk, self.ps)
        cap = self.npages * page
        if off % L.ALIGN or off < 0 or off + b.span > cap:
            raise Fault("offset", f"alloc({size}) returned {off}: not aligned or "
                        f"[{off}, {off + b.span}) not inside the arena of {cap} bytes")
        rel = off % page
        if b.small and (rel % b.span or rel + b.span > page):
            raise Fault("offset", f"alloc({size}) returned {off}: not a slot of a "
                        f"{b.span}-byte slab")
        if not b.small and rel:
            raise Fault("offset", f"alloc({size}) returned {off}: not page aligned")
        self._no_overlap(b, f"alloc({size}) by T{tid}")
        self.live[off] = b
        self.allocs += 1
        self.chunk_allocs += chunk
        return b

    def bump_done(self, tid, aidx, size, off):
        """Record ``bump(size)`` returning ``off``: a block that lives until reset."""
        self._finish(tid)
        if off == L.NULL:
            self.failed += 1
            return None
        b = Block(tid, aidx, off, size, L.align_up(size), ps=self.ps)
        if off % L.ALIGN or off < 0 or off + b.span > self.npages << self.ps:
            raise Fault("offset", f"bump({size}) returned {off}: not aligned or "
                        "not inside the arena")
        self._no_overlap(b, f"bump({size}) by T{tid}")
        self.bumped[off] = b
        return b

    def _no_overlap(self, b, who):
        for o in list(self.live.values()) + list(self.bumped.values()):
            if o.off < b.off + b.span and b.off < o.off + o.span:
                raise Fault("no overlap", f"{who} returned [{b.off}, {b.off + b.span}), "
                            f"which overlaps live {o}")

    def free_done(self, tid, kind):
        """Record a free of kind ``free`` (valid) or ``invalid`` returning."""
        op = self._finish(tid)
        if kind == "free":
            if op is not None and any(b is not None for b in op.blocks):
                self.frees += 1
                self.chunk_frees += any(b is not None and b.chunk for b in op.blocks)
        else:
            self.invalid += 1

    def _finish(self, tid):
        # One lane's result: the operation is over when every lane returned.
        for table in (self.inflight, self.untouched):
            op = table.get(tid)
            if op is not None:
                op.lanes -= 1
                if op.lanes <= 0:
                    del table[tid]
                return op
        return None

    # ---------------------------------------------------------- figures
    def scoping(self, tid, inside):
        """Thread ``tid`` enters (``inside``) or leaves a scope operation.

        Not quiescent meanwhile: its chunks' striped counters, which
        ``usage()`` subtracts, follow the chunk's alloc and precede its free.
        """
        (self.in_scope.add if inside else self.in_scope.discard)(tid)

    @property
    def quiescent(self):
        return not self.inflight and not self.in_scope

    def counts(self):
        """(allocs, frees, failed, invalid_frees, live_blocks, in_use) as
        ``usage()`` reports them: scoped chunks apart."""
        live = [b for b in self.live.values() if not b.chunk]
        return (self.base + self.allocs - self.chunk_allocs,
                self.base + self.frees - self.chunk_frees, self.failed,
                self.invalid, len(live), sum(b.span for b in live))

    def inflight_pages(self):
        """Pages the operations in flight may hold in transit, and their number."""
        return sum(op.pages for op in self.inflight.values()), len(self.inflight)

    def inflight_kinds(self):
        """Lanes in flight: (allocs, frees, invalid frees)."""
        n = {"alloc": 0, "bump": 0, "free": 0, "invalid": 0}
        for op in self.inflight.values():
            n[op.kind] += op.lanes
        n["alloc"] += n["bump"]  # may fail and count it, like an alloc
        # A scope operation between its chunk's alloc and the counters that
        # follow it (or a failure it takes back) counts as one alloc more.
        n["alloc"] += len(self.in_scope)
        return n["alloc"], n["free"], n["invalid"]


# ------------------------------------------------------------------ checks

def _bitmap(words, npages, p):
    # Page p's bitmap words; their number follows the page (the words' length names it).
    nwords = L.bitmap_words(page_shift(words))
    base = L.bits_base(npages) + p * nwords
    return words[base:base + nwords]


def check_safe(words, npages, model, fits_int64=False):
    """Check what must hold after every step, operations in flight or not.

    Every word fits in int64; state words are well formed; per slab, freed
    bits only below the cursor and freed bits >= cursor - live (so a holder
    of a reserved slot always has a freed block to take); other pages have
    empty bitmaps (but a RETIRING one, being cleared); a HEAD's pages are its TAILs; pages-used never exceeds the
    pages held and the peak stays within [0, npages]; every block
    the model holds live is still pinned (its page's tag, below the cursor,
    its freed bit clear); the
    counters lie between the completed operations and what the operations in
    flight may add (allocs modulo a count fold in flight). Raises :class:`Fault`.

    ``fits_int64``: the caller knows that every word fits in int64 (the
    explorer's metadata counts the words outside at every write,
    ``SharedMeta.outside``), so the scan of every word for it is skipped.
    """
    if not fits_int64 and (max(words) > INT64_MAX or min(words) < INT64_MIN):
        i, v = next((i, v) for i, v in enumerate(words) if not INT64_MIN <= v <= INT64_MAX)
        raise Fault("int64", f"{word_name(i, npages, page_shift(words))} = {v} overflows int64")
    ps = page_shift(words)
    if model.ps != ps:
        raise Fault("page", f"the model has pages of {1 << model.ps} bytes, the metadata "
                    f"({len(words)} words) pages of {1 << ps}")
    held = 0
    count_sum = 0
    live_meta = 0
    for p in range(npages):
        s = words[L.STATE_BASE + p]
        t, n = L.state_tag(s), L.state_n(s)
        count_sum += L.state_count(s)
        bits = _bitmap(words, npages, p)
        where = f"page {p} ({describe_state(s)})"
        if s < 0:
            raise Fault("state word", f"{where}: negative")
        if any(w >> L.BITS_PER_WORD or w < 0 for w in bits):
            raise Fault("bitmap", f"page {p}: a bitmap word uses more than 32 bits")
        if t == L.TAG_FREE:
            if n:
                raise Fault("state word", f"{where}: a free page with n != 0")
        elif 1 <= t <= L.NCLASSES:
            c = t - 1
            live, cursor = L.slab_live(s), L.slab_cursor(s)
            if cursor > L.class_blocks(c, ps) or live > L.class_blocks(c, ps):
                raise Fault("state word", f"{where}: above the {L.class_blocks(c, ps)} slots")
            nbits = 0
            for w, word in enumerate(bits):
                if word & ~L.word_valid_mask(c, w, ps):
                    raise Fault("bitmap", f"{where}: bit set past the last slot in word {w}")
                for k in range(L.BITS_PER_WORD):
                    if word >> k & 1:
                        nbits += 1
                        if w * L.BITS_PER_WORD + k >= cursor:
                            raise Fault("freed <= cursor", f"{where}: block "
                                        f"{w * L.BITS_PER_WORD + k} marked freed, never bumped")
            if nbits < cursor - live:
                raise Fault("freed >= unreserved", f"{where}: {nbits} freed bits, but "
                            f"{cursor - live} bumped blocks are neither live nor reserved")
            held += 1
            live_meta += live
        elif t == _TAG_RETIRING:
            if n:
                raise Fault("state word", f"{where}: retiring with n != 0")
            held += 1
        elif t == L.TAG_HEAD or t == _TAG_BUMP:
            if n < 1 or p + n > npages:
                raise Fault("state word", f"{where}: head of {n} pages does not fit")
            for q in range(p + 1, p + n):
                if L.state_tag(words[L.STATE_BASE + q]) != L.TAG_TAIL:
                    raise Fault("large block", f"{where}: its page {q} is not a TAIL")
            held += 1
            live_meta += t == L.TAG_HEAD
        elif t == L.TAG_TAIL:
            if n:
                raise Fault("state word", f"{where}: a tail with n != 0")
            held += 1
        else:
            raise Fault("state word", f"{where}: unknown tag {t}")
        if not (1 <= t <= L.NCLASSES) and t != _TAG_RETIRING and any(bits):
            raise Fault("bitmap", f"{where}: bits set on a page that is not a slab")
    used, peak = words[L.H_PAGES_USED], words[L.H_PEAK_PAGES]
    if used > held:
        raise Fault("pages used", f"pages_used = {used} exceeds the {held} pages held")
    if not 0 <= peak <= npages:
        raise Fault("peak", f"peak = {peak}, pages_used = {used}, npages = {npages}")
    for b in model.live.values():
        _check_pinned(words, npages, b)
    for b in model.bumped.values():
        _check_bump_pinned(words, npages, b)
    check_index(words, npages, model, exact=False)
    a, f, i = model.inflight_kinds()
    failed, invalid = _stripes(words)
    allocs = count_sum + words[L.H_ALLOC_FOLD] - words[L.H_ALLOC_UNDO]
    lo = model.base + model.allocs
    if a and lo - a * L.COUNT_FOLD <= allocs < lo and (allocs - lo) % L.COUNT_FOLD <= a:
        # An alloc between the cas that folded its page's count and its add
        # to the fold word: the sum is short by COUNT_FOLD until the add.
        allocs += L.COUNT_FOLD * -((allocs - lo) // L.COUNT_FOLD)
    bounds = (
        ("allocs", allocs, lo, lo + a),
        ("failed", failed, model.failed, model.failed + a),
        ("invalid_frees", invalid, model.invalid, model.invalid + i),
        ("live blocks", live_meta, len(model.live), len(model.live) + a + f),
    )
    for name, got, lo, hi in bounds:
        if not lo <= got <= hi:
            raise Fault("counters", f"{name} = {got} in the metadata; the history "
                        f"allows [{lo}, {hi}] with {a} alloc(s) and {f + i} free(s) "
                        "in flight")


@functools.lru_cache(maxsize=None)
def _tree_geometry(npages):
    """Return ``(stride, words, [(start, end) of each level])`` of the page-index trees."""
    levels = [(L.level_start(npages, j), L.level_start(npages, j + 1))
              for j in range(L.tree_levels(npages))]
    return L.tree_stride(npages), L.tree_words(npages), levels


def _tree_levels(words, npages, tree):
    """Return the levels of page-index tree ``tree`` (0: free pages, 1 + c:
    class c's room) as lists of words, level 0 first."""
    stride, _, levels = _tree_geometry(npages)
    base = L.free_tree(npages, page_shift(words)) + tree * stride
    return [words[base + lo:base + hi] for lo, hi in levels]


def _tree_name(tree):
    return "free-page index" if tree == 0 else f"room index of class {L.class_size(tree - 1)} B"


def _popc(x):
    return bin(x).count("1")


def check_index(words, npages, model, exact):
    """Check the page index (layout.py, "page index") against the state words.

    Always: level-0 words use 32 bits and name only pages of the heap; a
    count is never below the bits under it; every FREE page is in the
    free-page index; the pages in it that are not FREE (a freer between its
    ``or`` and the state change that frees the page, a taker between its
    ``cas`` and its ``and``) and the slabs with a free slot missing from
    their class's room index (a taker or freer before its mark, a search
    between its clear and its look again) are no more than the operations
    in flight may have in transit. ``exact`` (a quiescent
    state): every count equals the bits under it, so with nothing in
    transit the free-page index is exactly the FREE pages and every slab
    with room is in its class's room index.
    """
    states = words[L.STATE_BASE:L.STATE_BASE + npages]
    ps = page_shift(words)
    stride, used, _ = _tree_geometry(npages)
    for tree in range(1 + L.NCLASSES):
        base = L.free_tree(npages, ps) + tree * stride
        if not any(words[base:base + stride]):
            continue  # nothing set, every count 0
        if any(words[base + used:base + stride]):
            raise Fault("page index", f"{_tree_name(tree)}: a word past its last level is set")
        levels = _tree_levels(words, npages, tree)
        bits = [_popc(x) for x in levels[0]]
        for w, x in enumerate(levels[0]):
            valid = (1 << min(L.BITS_PER_WORD, max(0, npages - w * L.BITS_PER_WORD))) - 1
            if x < 0 or x & ~valid:
                raise Fault("page index", f"{_tree_name(tree)}: level-0 word {w} = {x:#x} "
                            "names pages outside the heap")
        for j, level in enumerate(levels[1:], 1):
            span = 1 << (L.WORD_SHIFT * j)  # level-0 words under one word of level j
            for i, cnt in enumerate(level):
                under = sum(bits[i * span:(i + 1) * span])
                if cnt < under or (exact and cnt != under):
                    raise Fault("page index", f"{_tree_name(tree)}: count {cnt} at level {j} "
                                f"word {i}, {under} bit(s) set under it")
    free = _tree_levels(words, npages, 0)[0]
    missing = []  # FREE pages not in the free-page index
    for p in range(npages):
        if (L.state_tag(states[p]) == L.TAG_FREE
                and not free[p >> L.WORD_SHIFT] >> (p & (L.BITS_PER_WORD - 1)) & 1):
            missing.append(p)
    unmarked = []
    for p, s in enumerate(states):
        t = L.state_tag(s)
        if 1 <= t <= L.NCLASSES and L.slab_live(s) < L.class_blocks(t - 1, ps):
            room = _tree_levels(words, npages, t)[0]
            if not room[p >> L.WORD_SHIFT] >> (p & (L.BITS_PER_WORD - 1)) & 1:
                unmarked.append(p)
    pages, ops = model.inflight_pages()
    if len(missing) > pages:
        raise Fault("free page index", f"FREE page(s) {missing} are not in the free-page "
                    f"index, with {pages} page(s) in transit")
    if len(unmarked) > ops:
        raise Fault("room index", f"slab(s) with a free slot on page(s) {unmarked} are "
                    f"not in their class's room index, with {ops} operation(s) in flight")


def _check_pinned(words, npages, b):
    ps = b.ps
    p = b.off >> ps
    s = words[L.STATE_BASE + p]
    if b.small:
        c = L.size_class(b.size)
        if L.state_tag(s) != L.slab_tag(c):
            raise Fault("live block pinned", f"{b} lies on page {p}, now {describe_state(s)}")
        k = (b.off % (1 << ps)) // L.class_size(c)
        if k >= L.slab_cursor(s):
            raise Fault("live block pinned", f"{b}: block {k} on page {p} is past "
                        f"the cursor ({describe_state(s)})")
        word = _bitmap(words, npages, p)[k // L.BITS_PER_WORD]
        if (word >> (k % L.BITS_PER_WORD)) & 1:
            raise Fault("live block pinned", f"{b}: block {k} on page {p} is marked freed")
    elif L.state_tag(s) != L.TAG_HEAD or L.state_n(s) != L.pages_for(b.size, ps):
        raise Fault("live block pinned", f"{b}: its head page {p} is {describe_state(s)}")


def _bump_run(words, npages, p):
    """Return (head, pages) of the TAG_BUMP run covering page ``p``, or None."""
    q = p
    while q > 0 and L.state_tag(words[L.STATE_BASE + q]) == L.TAG_TAIL:
        q -= 1
    s = words[L.STATE_BASE + q]
    if L.state_tag(s) == _TAG_BUMP and p < q + L.state_n(s):
        return q, L.state_n(s)
    return None


def _check_bump_pinned(words, npages, b):
    for p in (b.off >> b.ps, (b.off + b.span - 1) >> b.ps):
        if _bump_run(words, npages, p) is None:
            raise Fault("live block pinned", f"bump block [{b.off}, {b.off + b.span}) "
                        f"lies on page {p}, which no bump chunk covers "
                        f"({describe_state(words[L.STATE_BASE + p])})")


def _stripes(words):
    failed = sum(words[L.stripe_word(s, L.S_FAILED)] for s in range(L.STRIPES))
    invalid = sum(words[L.stripe_word(s, L.S_INVALID)] for s in range(L.STRIPES))
    return failed, invalid


def check_quiescent(words, npages, model, pages_used_max):
    """Check the exact invariants of a state with no operation in flight.

    Every slab's freed bits are exactly its bumped blocks that the model does
    not hold live, and its live field their number; no slab is empty (the last free retired it); every
    HEAD is a live large block of the model and every TAIL belongs to one;
    pages-used equals the pages held; the peak equals the highest value the
    pages-used word ever held (``pages_used_max``); and ``usage_from_meta``
    agrees with the model: allocs, frees, failed, invalid_frees, live blocks
    and in_use. Raises :class:`Fault`.
    """
    ps = page_shift(words)
    page = 1 << ps
    small = {}
    heads = {}
    for b in model.live.values():
        p = b.off >> ps
        if b.small:
            c = L.size_class(b.size)
            small.setdefault(p, (c, set()))[1].add((b.off % page) // L.class_size(c))
        else:
            heads[p] = L.pages_for(b.size, ps)
    tails = {q for p, k in heads.items() for q in range(p + 1, p + k)}
    held = 0
    for p in range(npages):
        s = words[L.STATE_BASE + p]
        t, n = L.state_tag(s), L.state_n(s)
        where = f"page {p} ({describe_state(s)})"
        held += t != L.TAG_FREE
        if 1 <= t <= L.NCLASSES:
            want_c, want = small.get(p, (t - 1, set()))
            bits = _bitmap(words, npages, p)
            freed = {w * L.BITS_PER_WORD + k for w, word in enumerate(bits)
                     for k in range(L.BITS_PER_WORD) if (word >> k) & 1}
            got = set(range(L.slab_cursor(s))) - freed
            n = L.slab_live(s)
            if want_c != t - 1 or got != want or n != len(want):
                raise Fault("bit clear iff live", f"{where}: bumped and not freed "
                            f"{sorted(got)}, the history's live blocks of class "
                            f"{L.class_size(want_c)} are slots {sorted(want)}")
            if n == 0:
                raise Fault("empty slab retired", f"{where}: empty but not retired")
        elif p in small:
            raise Fault("bit clear iff live", f"{where} holds live blocks {sorted(small[p][1])}")
        elif t == L.TAG_HEAD and heads.get(p) != n:
            raise Fault("head iff live", f"{where}: the history has no live large "
                        f"block of {n} pages there")
        elif t == _TAG_RETIRING:
            raise Fault("empty slab retired", f"{where}: still retiring")
        elif t == _TAG_BUMP:
            current = L.bump_page(words[L.H_BUMP]) == p
            if not current and not any(p <= b.off >> ps < p + n for b in model.bumped.values()):
                raise Fault("head iff live", f"{where}: a bump chunk that is not the "
                            "current one and holds no bump block of the history")
            tails.update(range(p + 1, p + n))
        elif t == L.TAG_TAIL and p not in tails:
            raise Fault("tail owned", f"{where}: no live large block covers it")
        elif t == L.TAG_FREE and (p in heads or p in tails):
            raise Fault("head iff live", f"{where}: a live large block covers it")
    bump = words[L.H_BUMP]
    if bump and (L.state_tag(words[L.STATE_BASE + L.bump_page(bump)]) != _TAG_BUMP
                 or L.bump_cursor(bump) > L.bump_chunk_pages(npages) * page):
        raise Fault("bump word", f"H_BUMP names page {L.bump_page(bump)} "
                    f"({describe_state(words[L.STATE_BASE + L.bump_page(bump)])}), "
                    f"cursor {L.bump_cursor(bump)}")
    used, peak = words[L.H_PAGES_USED], words[L.H_PEAK_PAGES]
    if used != held:
        raise Fault("pages used", f"pages_used = {used}, pages held = {held}")
    if peak != pages_used_max:
        raise Fault("peak", f"peak = {peak}, but pages_used reached {pages_used_max}")
    u = usage_from_meta(np.array(words, np.int64), npages)
    got = (u.allocs, u.frees, u.failed, u.invalid_frees, u.live_blocks, u.in_use)
    want = model.counts()
    if u.bump_allocs != len(model.bumped):
        raise Fault("counters", f"usage() counts {u.bump_allocs} bump allocations, "
                    f"the history {len(model.bumped)}")
    if got != want:
        names = ("allocs", "frees", "failed", "invalid_frees", "live_blocks", "in_use")
        diff = ", ".join(f"{k} {g} != {w}" for k, g, w in zip(names, got, want) if g != w)
        raise Fault("counters", f"usage() disagrees with the history: {diff} "
                    "(metadata != model)")
    if u.reserved != held * page:
        raise Fault("counters", f"reserved = {u.reserved}, pages held = {held}")
    check_index(words, npages, model, exact=True)


def check_drained(words, npages):
    """Check that a heap whose blocks were all freed lost nothing.

    Every page FREE with n = 0 (but bump chunks, which only ``reset``
    frees), every bitmap zero, pages-used the bump chunks' pages, the
    free-page index as a new heap's (every page in it, exact counts; with
    bump chunks: every FREE page in it, exact counts), and
    ``usage_from_meta``: in_use 0, reserved the bump chunks', live 0,
    allocs == frees.
    """
    bump_pages = 0
    for p in range(npages):
        s = words[L.STATE_BASE + p]
        if _bump_run(words, npages, p) is not None:
            bump_pages += 1
            continue
        if L.state_tag(s) != L.TAG_FREE or L.state_n(s):
            raise Fault("nothing lost", f"page {p} is {describe_state(s)} after every "
                        "block was freed")
        if any(_bitmap(words, npages, p)):
            raise Fault("nothing lost", f"page {p} has bits set after every block was freed")
    if words[L.H_PAGES_USED] != bump_pages:
        raise Fault("nothing lost", f"pages_used = {words[L.H_PAGES_USED]} after every "
                    f"block was freed ({bump_pages} bump chunk pages)")
    free = [x for level in _tree_levels(words, npages, 0) for x in level]
    new = [L.free_tree_init(npages, j, i) for j in range(L.tree_levels(npages))
           for i in range(L.level_words(npages, j))]
    if bump_pages == 0 and free != new:
        raise Fault("nothing lost", f"the free-page index is {free} after every block "
                    "was freed, not every page")
    u = usage_from_meta(np.array(words, np.int64), npages)
    if ((u.in_use, u.reserved, u.live_blocks) != (0, bump_pages << page_shift(words), 0)
            or u.allocs != u.frees):
        raise Fault("nothing lost", f"usage after every block was freed: {u}")
