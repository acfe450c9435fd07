"""The handles kernels receive, and their Numba types.

A ``Ctx`` bundles a heap's two device arrays (the arena bytes and the
``int64`` metadata); a ``DebugCtx`` adds the debug record words and the
requested-size table; an ``ObsCtx`` (a heap made with ``profile=True`` or
``trace=N``) adds the profile counters and the trace, with the debug arrays
empty unless ``debug=True`` too. They are
plain named tuples, so kernels take them as ordinary arguments and the
device code can tell a debug heap from its type when it compiles. Shared by
the host (:class:`devalloc.Heap` builds them) and the device code, which
imports nothing else from the host side.
"""

import collections
import os

import numpy as np
from numba import types

from ._version import source_hash
from .layout import PAGE_SHIFT, PAGE_SHIFT_MIN

#: The handle kernels receive: the arena bytes and the metadata words.
Ctx = collections.namedtuple("Ctx", ["arena", "meta"])

#: The handle of a debug heap: also the debug record words and the table of
#: requested sizes (layout.py, "debug record").
DebugCtx = collections.namedtuple("DebugCtx", ["arena", "meta", "debug", "sizes"])

#: The handle of an observed heap (profile counters, allocation trace; debug
#: arrays of length 0 unless it is a debug heap too).
ObsCtx = collections.namedtuple("ObsCtx", ["arena", "meta", "debug", "sizes", "prof", "trace"])

#: The choices of the out-of-line build (docs/outline.md): inline at every
#: site, one out-of-line copy per kernel, or chosen per kernel from its sites.
OUTLINE_CHOICES = (False, True, "auto")


def _outline_env(value):
    # DEVALLOC_OUTLINE: unset or "auto" -> "auto"; "", "0", "false", "no",
    # "off" -> False; anything else -> True (as "1" always meant).
    word = "auto" if value is None else value.strip().lower()
    return "auto" if word == "auto" else word not in ("", "0", "false", "no", "off")


#: The process default of the out-of-line build (docs/outline.md):
#: ``"auto"`` (each kernel calls one out-of-line copy of a body it has
#: several sites of, and inlines a body it has one site of), or
#: ``DEVALLOC_OUTLINE=0`` (inline) / ``1`` (out of line) in the environment
#: when devalloc is imported. What ``Heap(outline=None)`` and
#: ``ctx_type_for(outline=None)`` take, and what a kernel given plain arrays
#: (no :class:`PagedMeta`) compiles with (``devalloc.device.outline.ENABLED``
#: is this value).
OUTLINE_DEFAULT = _outline_env(os.environ.get("DEVALLOC_OUTLINE"))


def _is_auto(outline):
    return isinstance(outline, str) and outline == "auto"


class PagedMeta(types.Array):
    """The Numba type of a heap's metadata: a 1-D C ``int64`` array that names its page.

    ``Heap(page=)`` chooses the page per heap; kernels learn it from this
    type when they compile (``page_shift``, log2 of the page bytes), so the
    page is a constant in the compiled code, as it was when every heap had
    16 KiB pages: no register, no instruction. A kernel launched on heaps of
    two page sizes is compiled once for each. Anything derived from such an
    array (a slice, a view) is a plain array. Device code reads the page with
    ``devalloc.device._meta._pshift``, which also serves plain ``int64``
    arrays, from their length (layout.page_shift_of).

    ``outline``: whether the kernel calls the allocator's bodies out of line
    (True: one copy per kernel, a call per site: :mod:`devalloc.device.outline`,
    docs/outline.md), inlines them at every site (False) or chooses per
    kernel from how many sites it has (``"auto"``). Chosen per heap
    (``Heap(outline=)``) or per launch (``heap.ctx_with(outline=)``); like
    the page, a kernel launched with both is compiled once for each.

    ``build``: the hash of devalloc's source (:func:`devalloc._version.source_hash`),
    part of the type's key but not its name: a kernel that Numba's
    ``cache=True`` stored with another devalloc (an upgrade, an edited
    tree) does not match this type, and is compiled again rather than
    loaded with the old allocator's code.
    """

    def __init__(self, page_shift, outline=False):
        if not PAGE_SHIFT_MIN <= page_shift <= PAGE_SHIFT:
            raise ValueError(
                f"page shift must be {PAGE_SHIFT_MIN} to {PAGE_SHIFT}, got {page_shift}")
        if not (isinstance(outline, bool) or _is_auto(outline)):
            raise TypeError(f"outline must be True, False or 'auto', got {outline!r}")
        self.page_shift = int(page_shift)
        self.outline = outline
        self.build = source_hash()[:16]
        suffix = {True: ", outline", False: "", "auto": ", outline=auto"}[outline]
        name = f"array(int64, 1d, C, page={1 << page_shift}{suffix})"
        super().__init__(types.int64, 1, "C", name=name)

    @property
    def key(self):
        return super().key + (self.page_shift, self.outline, self.build)

    def copy(self, dtype=None, ndim=None, layout=None, readonly=None):
        plain = types.Array(self.dtype, self.ndim, self.layout)
        return plain.copy(dtype=dtype, ndim=ndim, layout=layout, readonly=readonly)


def _register_model():
    # The data model of every Numba array (pointer, shape, strides, ...), in
    # the CUDA target's registry (numba-cuda's own since it vendors the
    # core; numba's before).
    try:
        from numba.cuda.extending import core_models, register_model
        models = core_models
    except ImportError:  # an older numba-cuda: numba's registry is the CUDA target's
        from numba.core.extending import models, register_model
    register_model(PagedMeta)(models.ArrayModel)


_register_model()

class Lease:
    """Whether kernels may still be launched with a heap's ctx: ended by ``close`` and ``resize``.

    Each build of a heap's memory has one, carried by its metadata array
    (``_devalloc_lease``): on a GPU the array's Numba type is asked for at
    every launch (:mod:`devalloc.host.paged`), on the simulator the launch
    checks its arguments (:func:`check_launch_args`). ``heap`` names the
    heap in the errors.
    """

    __slots__ = ("heap", "ended")

    def __init__(self, heap):
        self.heap = heap
        self.ended = None  # None, "closed" or "resized"

    def end(self, why):
        """Refuse later launches: ``why`` is ``"closed"`` or ``"resized"``."""
        self.ended = why

    def check(self):
        """Raise HeapClosedError or StaleCtxError if the lease has ended; else nothing."""
        if self.ended is None:
            return
        from .errors import HeapClosedError, StaleCtxError

        if self.ended == "resized":
            raise StaleCtxError(
                f"a kernel was launched with a ctx from before {self.heap}.resize(): resize "
                "replaces the heap's memory; pass heap.ctx again (the new one)")
        raise HeapClosedError(
            f"a kernel was launched with the ctx of {self.heap}, which is closed: its memory "
            "is freed; create a new Heap and pass its heap.ctx")


#: The classes of a heap's ctx (what ``heap.ctx`` is, by kind of heap).
CTX_CLASSES = (Ctx, DebugCtx, ObsCtx)


def check_launch_args(args):
    """Raise if any of a launch's arguments is the ctx of a closed or resized heap.

    One ``isinstance`` per argument, and an attribute read per ctx.
    """
    for a in args:
        if isinstance(a, CTX_CLASSES):
            lease = getattr(a.meta, "_devalloc_lease", None)
            if lease is not None and lease.ended is not None:
                lease.check()


def not_a_ctx(value, where="devalloc"):
    """Return the TypeError for ``value`` passed where a heap's ctx belongs."""
    what = str(value) if isinstance(value, types.Type) else type(value).__name__
    return TypeError(
        f"{where}: the first argument must be a heap's ctx (pass heap.ctx, a "
        f"devalloc.Ctx, DebugCtx or ObsCtx), got {what}")


_BYTES = types.Array(types.uint8, 1, "C")
_WORDS = types.Array(types.int64, 1, "C")
_SIZES = types.Array(types.uint16, 1, "C")


def is_outline_choice(value):
    """Return whether ``value`` is True, False or ``"auto"`` (``outline=``'s choices but None)."""
    return isinstance(value, (bool, np.bool_)) or _is_auto(value)


def outline_option(outline):
    """Return ``outline`` as the heap's choice: None is :data:`OUTLINE_DEFAULT`.

    Raise TypeError for anything but None, True, False or ``"auto"``.
    """
    if outline is None:
        return OUTLINE_DEFAULT
    if not is_outline_choice(outline):  # (not 0 or 1: as debug=)
        raise TypeError(f"outline= must be None (the process default, DEVALLOC_OUTLINE), "
                        f"True, False or 'auto', got {type(outline).__name__}: {outline!r}")
    return "auto" if _is_auto(outline) else bool(outline)


def ctx_type_for(page_shift=PAGE_SHIFT, kind="normal", outline=None):
    """Return the Numba type of the ``ctx`` of a heap of pages of ``2**page_shift`` bytes.

    ``kind``: ``"normal"``, ``"debug"`` (``debug=True``) or ``"observed"``
    (``profile=True`` or ``trace=``). ``outline``: the heap's choice of
    out-of-line bodies (``Heap(outline=)``, ``heap.ctx_with(outline=)``);
    None is the process default (:data:`OUTLINE_DEFAULT`), as for ``Heap``.
    For compiling kernels ahead of time for a heap made with ``Heap(page=)``
    or ``outline=``; ``ctx_type`` and its siblings are the default page's,
    with the process default.
    """
    meta = PagedMeta(page_shift, outline_option(outline))
    if kind == "normal":
        return types.NamedTuple([_BYTES, meta], Ctx)
    if kind == "debug":
        return types.NamedTuple([_BYTES, meta, _WORDS, _SIZES], DebugCtx)
    if kind == "observed":
        return types.NamedTuple([_BYTES, meta, _WORDS, _SIZES, _WORDS, _WORDS], ObsCtx)
    raise ValueError(f"kind must be 'normal', 'debug' or 'observed', got {kind!r}")


#: The Numba type of ``Heap.ctx``, for compiling kernels ahead of time
#: (its ``outline`` is the process default, :data:`OUTLINE_DEFAULT`).
ctx_type = ctx_type_for(PAGE_SHIFT, "normal")
#: The Numba type of a debug heap's ``ctx``.
debug_ctx_type = ctx_type_for(PAGE_SHIFT, "debug")
#: The Numba type of an observed heap's ``ctx``.
obs_ctx_type = ctx_type_for(PAGE_SHIFT, "observed")
