"""Deliberately broken copies of device functions, for testing the explorer.

Each is a plain function written like the device code it replaces, with one
bug. They never run on a device: the explorer installs one in place of the
real function (``explore(..., overrides={"_claim_bit": CLAIM_CHECK_THEN_SET})``)
and rebinds it to the device module's globals, so ``cuda`` is the explorer's
fake module and ``_release_slot`` etc. are the real ``py_func``s. The
imports below only make the source readable and checkable.

:data:`VARIANTS` maps a short name to ``(device function name, broken copy)``.
"""

from numba import cuda, int64

from .. import layout as L
from ..device import BIT_PASSES, _release_slot
from ..device_large import RETRIES, _fold, _pages_changed
from ..layout import bits_base, class_blocks, class_size, class_words, slab_tag, word_valid_mask


def claim_bit_check_then_set(meta, npages, p, c):
    """``_claim_bit`` with a plain load then a plain store, not an atomic ``or``.

    Two holders of reserved slots can both see the same clear bit and both
    take it: the same block handed out twice.
    """
    base = bits_base(npages) + p * L.BITMAP_WORDS
    nw = class_words(c)
    start = cuda.grid(1) % nw
    for i in range(nw * BIT_PASSES):
        w = (start + i) % nw
        valid = word_valid_mask(c, w)
        word = meta[base + w]
        clear = ~word & valid
        if clear != 0:
            b = int64(cuda.ffs(clear)) - 1
            meta[base + w] = word | (int64(1) << b)  # BUG: check-then-set
            return w * L.BITS_PER_WORD + b
    return -1


def free_small_release_first(meta, npages, p, c, rel):
    """``_free_small`` that gives the slot back before it clears the bit.

    Breaks bits <= live: between the two, the slab may be retired (or its
    slot reserved by another thread) while the bit is still set.
    """
    size = class_size(c)
    b = rel // size
    if rel - b * size != 0 or b >= class_blocks(c):
        return 0
    w = b // L.BITS_PER_WORD
    bit = int64(1) << (b % L.BITS_PER_WORD)
    _release_slot(meta, p, False)  # BUG: the slot goes back first
    old = cuda.atomic.and_(meta, bits_base(npages) + p * L.BITMAP_WORDS + w,
                           ~bit & L.WORD_MASK)
    if old & bit == 0:
        return 0
    return 1


def release_slot_plain_retire(meta, p, undo):
    """``_release_slot`` that retires an empty slab with a plain store, not a ``cas``.

    A reservation made between the ``add`` that emptied the slab and the
    store is wiped out: its holder owns a slot of a page that is now free.
    """
    idx = L.STATE_BASE + p
    old = cuda.atomic.add(meta, idx, -L.N_ONE)
    if undo:
        cuda.atomic.add(meta, L.H_ALLOC_UNDO, 1)
    new = old - L.N_ONE
    if ((new >> L.N_SHIFT) & L.N_MASK) == 0:
        _pages_changed(meta, -1)
        meta[idx] = new & L.COUNT_MASK  # BUG: plain store, no cas


def reserve_plain_update(meta, p, c):
    """``_reserve`` with a plain load and a plain store in place of the ``cas``.

    Two reservers of the same page can read the same state word and both
    write their increment: one reservation (or a concurrent release) is lost.
    """
    idx = L.STATE_BASE + p
    tag = slab_tag(c)
    cap = class_blocks(c)
    for _ in range(RETRIES):
        s = meta[idx]
        t = s & L.TAG_MASK
        taken = False
        if t == L.TAG_FREE:
            new = (s & L.COUNT_MASK) + L.COUNT_ONE + L.N_ONE + tag
            taken = True
        elif t == tag and ((s >> L.N_SHIFT) & L.N_MASK) < cap:
            new = s + L.COUNT_ONE + L.N_ONE
        else:
            return 0
        new, folded = _fold(new)
        meta[idx] = new  # BUG: plain read-modify-write
        if folded:
            cuda.atomic.add(meta, L.H_ALLOC_FOLD, folded)
        if taken:
            _pages_changed(meta, 1)
        return 1
    return 2


#: name -> (device function replaced, broken copy)
VARIANTS = {
    "claim_check_then_set": ("_claim_bit", claim_bit_check_then_set),
    "free_release_first": ("_free_small", free_small_release_first),
    "retire_plain_store": ("_release_slot", release_slot_plain_retire),
    "reserve_plain_update": ("_reserve", reserve_plain_update),
}
