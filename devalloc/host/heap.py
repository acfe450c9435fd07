"""The :class:`Heap`: making a heap and owning (or borrowing) its device memory.

A heap is two device arrays: the arena (the bytes handed to threads) and the
``int64`` metadata (layout in :mod:`devalloc.layout`). ``heap.ctx`` bundles
both into a named tuple, the cheap immutable handle kernels receive.

Which calls synchronize the host:

=================  ==========================================================
``Heap(...)``      no kernel launch; zeroes the metadata on the heap's stream
``reset``          never; a memset of the metadata ordered on the stream
``usage``          synchronizes the given stream (default: the heap's) only
``live``/``check`` like ``usage``
``resize``/``run`` ``resize`` never; ``run`` synchronizes after every attempt
``close``          never
=================  ==========================================================

Here: making the memory (allocated, or carved out of ``memory=``), owning it
(``ctx``, ``arena``, ``reset``, ``resize``, ``close``) and copying it back
(``_snapshot``). What reads it is :class:`~devalloc.host.reading.Reading`
(``usage``, ``trace``, ``live``, ``check``), what runs kernels on it
:class:`~devalloc.host.run.Running` (``run``): both are parts of ``Heap``.
"""

import math
import numbers
import os
from typing import Any, Literal

import numpy as np
from numba import config, cuda

from .. import layout as L
from ..ctx import Ctx, DebugCtx, ObsCtx, ctx_type, debug_ctx_type  # noqa: F401 (re-exported)
from ..ctx import OUTLINE_DEFAULT, Lease, is_outline_choice, outline_option
from ..errors import HeapClosedError, NoCudaError, OutOfMemoryError
from . import observed
from .paged import paged_meta
from .capacity import ALIGN_SLACK, MIN_MEMORY, check_capacity  # noqa: F401 (re-exported)
from .capacity import check_page, check_spread
from .reading import Reading
from .run import RunResult, Running  # noqa: F401 (re-exported)


def free_index_template(npages):
    """Return the free-page index of a heap with every page free (int64 words).

    Level 0: a bit per page, set; above: the pages under each word
    (layout.py, "page index"; :func:`layout.free_tree_init` word by word).
    """
    levels = []
    for j in range(L.tree_levels(npages)):
        span = 1 << (L.WORD_SHIFT * (j + 1))
        lo = np.arange(L.level_words(npages, j), dtype=np.int64) * span
        n = np.minimum(span, npages - lo)
        levels.append((np.left_shift(1, n) - 1) if j == 0 else n)
    return np.concatenate(levels).astype(np.int64)


def _zero(array, nbytes, stream):
    """Zero ``array`` on ``stream`` without synchronizing the host."""
    if config.ENABLE_CUDASIM:
        array.copy_to_device(np.zeros(array.shape, array.dtype), stream=stream)
    else:
        from numba.cuda.cudadrv.driver import device_memset

        device_memset(array, 0, nbytes, stream=stream)


def _device_bytes(memory):
    """Return a 1-D uint8 device view of ``memory`` and its device address."""
    if config.ENABLE_CUDASIM:
        # Simulated device arrays wrap a NumPy array; no CUDA array interface.
        arr = memory if isinstance(memory, cuda.devicearray.FakeCUDAArray) else None
        if arr is None or not arr.is_c_contiguous():
            raise TypeError(
                "memory= must be a C-contiguous device array (on the simulator: "
                f"a numba device array), got {type(memory).__name__}"
            )
        raw = arr.reshape(arr.size).view(np.uint8)
        return raw, raw._ary.__array_interface__["data"][0]
    if not hasattr(memory, "__cuda_array_interface__"):
        raise TypeError(
            "memory= must expose __cuda_array_interface__ (a Numba device "
            f"array, CuPy, PyTorch or RMM buffer), got {type(memory).__name__}"
        )
    arr = cuda.as_cuda_array(memory)
    if not arr.is_c_contiguous():
        raise TypeError("memory= must be C-contiguous")
    raw = arr.reshape(arr.size).view(np.uint8)
    return raw, raw.__cuda_array_interface__["data"][0]


def _host_memory():
    """Return the host's physical memory in bytes (inf if the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return math.inf


def _check_stream(stream, name):
    """Return ``stream`` if it is 0 or a Numba CUDA stream; raise TypeError otherwise."""
    if config.ENABLE_CUDASIM:
        kinds = (cuda.stream,)  # the simulator's stream class
    else:
        from numba.cuda.cudadrv.driver import Stream

        kinds = (Stream,)
    if isinstance(stream, kinds) or (
        isinstance(stream, numbers.Integral) and not isinstance(stream, (bool, np.bool_))
        and stream == 0
    ):
        return stream
    raise TypeError(
        f"{name} must be 0 (the default stream) or a Numba CUDA stream "
        "(cuda.stream(), cuda.default_stream(), cuda.external_stream(ptr)), "
        f"got {type(stream).__name__}: {stream!r}"
    )


_PASS_CTX = (
    "a kernel was given a devalloc.Heap: pass heap.ctx to kernels "
    "(kernel[grid, block](heap.ctx, ...)), or pass the heap to heap.run(), "
    "which passes heap.ctx"
)


#: What ``_build`` makes: ``resize`` keeps them to put back if it fails.
_BUILT = ("_arena", "_meta", "_debug", "_sizes", "_prof", "_trace", "_ctx", "_other",
          "requested", "npages", "_index", "_spread_max", "page_shift", "_lease", "spread")


class Heap(Reading, Running):
    """A device heap of ``capacity`` bytes that kernels allocate from.

    :param capacity: bytes kernels can be served, rounded down to whole
        pages (``heap.capacity``). The metadata is allocated beside
        them (``heap.meta_bytes``: a 37 KiB header and about 1.7 % with
        16 KiB pages), so a small heap loses no page to it. With
        ``memory=``: the bytes of the buffer the heap uses, metadata
        included (the whole buffer by default).
    :param page: the page size in bytes: a power of two from 1 KiB to
        16 KiB (default: 16 KiB), or ``"auto"`` (capacity / 1024, within
        those bounds). Slabs and large blocks take whole pages, and each
        size class in use holds at least one slab, so a light workload in
        small pages holds far less memory (bench/RESULTS.md, "Heap vs
        count + scan"); requests above half a page take whole pages, and
        ``alloc_aligned`` aligns to at most one page. The page is part of
        ``heap.ctx``'s Numba type (:class:`devalloc.ctx.PagedMeta`): a
        kernel compiles with it as a constant, once per page size it meets
        (``heap.page`` says which).
    :param stream: the stream the heap's own work (zeroing, ``reset``,
        ``usage``) is ordered on; 0 is the default stream.
    :param memory: a device buffer exposing ``__cuda_array_interface__`` to
        build the heap in instead of allocating; the heap never frees it. At
        least :data:`MIN_MEMORY` bytes, whatever its address.
    :param device: the device number to allocate on (default: current).
    :param debug: True to build a debug heap: every block gets guard bytes,
        freed blocks are poisoned, misuse is recorded; see :meth:`check` and
        :meth:`live`. Kernels compiled for a normal heap are unaffected.
    :param profile: True to keep device-side profile counters (failures by
        cause; see ``usage().profile``).
    :param spread: the most hint slots a size class may spread its slabs
        over under contention (rounded up to a power of two, at most
        ``layout.HINT_SLOTS``, at most one per ``layout.PAGES_PER_SLOT``
        pages); default: the GPU's SM count. A class starts with one slot
        and widens only after lost ``cas``; ``heap.spread`` is the bound
        this heap got.
    :param trace: record the first ``trace`` events (alloc, free, bump, mark,
        scoped, release) in device memory; see :meth:`trace`. With
        ``profile`` or ``trace`` the heap is *observed*: its ``ctx`` has its
        own type, so kernels compiled for a normal heap are unaffected.
    :param outline: True: kernels call the allocator's bodies out of line (one copy
        per kernel, a call per site), False: inline at every site, ``"auto"``: out of
        line the bodies a kernel has several sites of; None (default): the process
        default (``"auto"``; ``DEVALLOC_OUTLINE=0``/``1``). Part of ``heap.ctx``'s
        Numba type (``heap.outline``); :meth:`ctx_with` for one kernel. docs/outline.md.

    Creating a heap allocates and zeroes device memory; it launches no
    kernel. Use it as a context manager, or call :meth:`close`, to free its
    memory deterministically.
    """

    def __init__(self, capacity: int | None = None, *, stream: Any = 0, memory: Any = None,
                 device: int | None = None, debug: bool = False, profile: bool = False,
                 trace: int = 0, spread: int | None = None,
                 page: int | str | None = None, outline: bool | str | None = None) -> None:
        self.stream = _check_stream(stream, "stream=")
        self.outline = outline_option(outline)  # None: the process default
        self._sms = check_spread(spread)
        self.device = device
        if not isinstance(debug, (bool, np.bool_)):
            raise TypeError(f"debug= must be True or False, got {type(debug).__name__}: {debug!r}")
        self.debug = bool(debug)
        self.profile, self.trace_room = observed.check_options(profile, trace)
        self._memory = memory
        self._page_option = page
        self._closed = False
        if memory is None and capacity is None:
            raise TypeError("Heap() needs a capacity in bytes, or memory=")
        try:
            with self._on_device():
                self._build(capacity)
        except Exception as e:  # numba-cuda's CudaSupportError: no driver, no GPU
            if type(e).__name__ != "CudaSupportError":
                raise
            raise NoCudaError.about(e) from e

    # ------------------------------------------------------------ building
    def _on_device(self):
        if self.device is None:
            return _NullContext()
        if isinstance(self.device, bool) or not isinstance(self.device, numbers.Integral):
            raise TypeError(f"device= must be a device number, got {self.device!r}")
        n = len(cuda.gpus)
        if not 0 <= self.device < n:
            raise ValueError(f"device={self.device} does not exist: {n} device(s), 0..{n - 1}")
        return cuda.gpus[self.device]

    def _build(self, capacity):
        if self._sms is None:
            # The simulator's device has no SM count: one slot, as on a calm heap.
            self._sms = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)
        if self._memory is not None:
            raw, address = _device_bytes(self._memory)
            if capacity is None:
                capacity = raw.size
            ps = check_page(self._page_option, capacity)
            capacity = check_capacity(capacity, MIN_MEMORY, ps)
            if capacity > raw.size:
                raise ValueError(
                    f"Heap capacity {capacity} exceeds the {raw.size} bytes of memory="
                )
            self._arena, self._meta = self._carve(raw, address, capacity, ps)
        else:
            ps = check_page(self._page_option, capacity)
            capacity = check_capacity(capacity, ps=ps)
            geo = L.geometry(L.pages_for_capacity(capacity, ps), ps, self._sms)
            self._check_free_memory(capacity, geo.memory_bytes)
            try:
                self._arena = cuda.device_array(geo.arena_bytes, np.uint8, stream=self.stream)
                self._meta = cuda.device_array(geo.meta_words, np.int64, stream=self.stream)
            except Exception as e:  # CudaAPIError(CUDA_ERROR_OUT_OF_MEMORY)
                # The simulator's device memory is host memory: NumPy's MemoryError.
                if isinstance(e, MemoryError) or "OUT_OF_MEMORY" in str(e) or (
                    "out of memory" in str(e)
                ):
                    raise OutOfMemoryError(
                        f"the device could not allocate {capacity} bytes for the heap: {e}"
                    ) from e
                raise
        self.requested = capacity
        #: log2 of the page size (kernels read it from the metadata's type or length).
        self.page_shift = ps
        self._lease = Lease(f"Heap(capacity={capacity})")  # (ends with close, resize)
        self._meta = paged_meta(self._meta, ps, self.outline, self._lease)
        self._other = {}  # ctx_with's ctxs of the other outline choices, made on first use
        #: The heap's geometry (pages, metadata words, where the free-page
        #: index starts, the spread's bound, debug slots), computed once.
        self.geometry = geo = L.geometry(self._arena.size >> ps, ps, self._sms)
        self.npages = geo.npages
        # The free-page index starts with every page free: kept on the device
        # so that reset copies it without the host (a device-to-device copy).
        self._index = cuda.to_device(free_index_template(self.npages), stream=self.stream)
        self.spread = 1 << geo.spread_log_max
        self._spread_max = cuda.to_device(np.array([geo.spread_log_max], np.int64),
                                          stream=self.stream)
        self._clear_meta(self.stream)
        if self.debug:
            self._debug = cuda.device_array(L.DEBUG_WORDS, np.int64, stream=self.stream)
            _zero(self._debug, L.DEBUG_WORDS * 8, self.stream)
            # Written by alloc before it is read: zeroed once, not by reset.
            self._sizes = cuda.device_array(geo.debug_slots, np.uint16,
                                            stream=self.stream)
            _zero(self._sizes, self._sizes.size * 2, self.stream)
            self._ctx = DebugCtx(self._arena, self._meta, self._debug, self._sizes)
        else:
            self._debug = self._sizes = None
            self._ctx = Ctx(self._arena, self._meta)
        self._prof = self._trace = None
        if self.profile or self.trace_room:
            self._build_observed()

    def _build_observed(self):
        # Unused arrays have length 0: the observed path tests their length.
        def words(n):
            a = cuda.device_array(n, np.int64, stream=self.stream)
            if n:
                _zero(a, n * 8, self.stream)
            return a

        self._prof = words(L.PROF_WORDS if self.profile else 0)
        self._trace = words(L.trace_words(self.trace_room) if self.trace_room else 0)
        debug = self._debug if self.debug else words(0)
        sizes = self._sizes if self.debug else cuda.device_array(0, np.uint16, stream=self.stream)
        self._ctx = ObsCtx(self._arena, self._meta, debug, sizes, self._prof, self._trace)

    @staticmethod
    def _carve(raw, address, capacity, ps):
        """Lay the metadata then the arena (pages of ``2**ps`` bytes) out in ``raw[:capacity]``."""
        skip = (-address) % 256  # both regions 256-byte aligned
        # At most 255 more bytes align the arena: min_memory(ps) gives one page.
        npages = L.pages_for_memory(capacity - skip - 255, ps)
        assert npages >= 1, (capacity, address)
        meta_bytes = L.meta_words(npages, ps) * 8
        arena_at = skip + meta_bytes + (-(address + skip + meta_bytes)) % 256
        meta = raw[skip:skip + meta_bytes].view(np.int64)
        arena = raw[arena_at:arena_at + (npages << ps)]
        return arena, meta

    @staticmethod
    def _check_free_memory(capacity, nbytes):
        free, total = cuda.current_context().get_memory_info()
        where = "the device's free memory"
        if math.isinf(free):
            # The simulator reports infinite memory; its device is the host's RAM.
            free = total = _host_memory()
            where = "the host's memory (the simulator's device memory)"
        if nbytes > free:
            raise OutOfMemoryError(
                f"Heap capacity {capacity} bytes needs {nbytes} bytes (arena and "
                f"metadata), more than {where} "
                f"({int(free)} of {int(total)} bytes free)"
            )

    def _live(self):
        if self._closed:
            raise HeapClosedError(f"{self!r} is closed: create a new Heap")

    # -------------------------------------------------------------- public
    @property
    def ctx(self) -> Ctx | DebugCtx:
        """The handle to pass to kernels (type: ``devalloc.ctx_type``)."""
        self._live()
        return self._ctx

    def ctx_with(self, *, outline: bool | str) -> Ctx | DebugCtx | ObsCtx:
        """Return this heap's ctx typed for kernels that call its bodies out of line (or inline).

        The same heap (memory, counters, trace) whose metadata's Numba type says ``outline``
        (True, False or ``"auto"``; ``heap.ctx`` keeps ``heap.outline``); ``run`` swaps it
        like ``heap.ctx``. On the simulator: the heap's own arrays."""
        self._live()
        if not is_outline_choice(outline):
            raise TypeError(f"ctx_with(outline=) must be True, False or 'auto', "
                            f"got {type(outline).__name__}: {outline!r}")
        if (outline := outline_option(outline)) == self.outline:
            return self._ctx
        if outline not in self._other:  # (made once per choice and build)
            self._other[outline] = self._ctx._replace(
                meta=paged_meta(self._meta, self.page_shift, outline, self._lease))
        return self._other[outline]

    @property
    def capacity(self) -> int:
        """Bytes the heap can hand out (whole pages of the arena)."""
        return self.npages << self.page_shift

    @property
    def page(self) -> int:
        """The heap's page size in bytes (``Heap(page=)``; 16 KiB by default)."""
        return 1 << self.page_shift

    @property
    def meta_bytes(self) -> int:
        """Device bytes the heap's metadata takes beside the arena (inside
        ``memory=``, within the buffer): header, page states, bitmaps, index."""
        return self.geometry.meta_bytes

    @property
    def arena(self) -> Any:
        """The heap's bytes as a device array (``__cuda_array_interface__``).

        Offsets returned by ``alloc`` index it, so results left in heap
        blocks can be read by other libraries without a copy.
        """
        self._live()
        return self._arena

    def gather(self, offsets: Any, counts: Any, dtype: Any, *, free: bool = True,
               fill: Any = None, item_shape: tuple = ()) -> tuple[Any, Any]:
        """Return ``(values, starts)``: the rows at ``offsets`` in one device array (CSR).

        Row ``i`` is ``counts[i]`` items of ``dtype`` (each of ``item_shape``)
        at ``offsets[i]``; ``free=True`` frees the blocks. Computed on the GPU; see
        :func:`devalloc.host.gather.gather` (NULL rows, ``fill``, errors).
        """
        from .gather import gather
        return gather(self, offsets, counts, dtype, free=free, fill=fill, item_shape=item_shape)

    def array(self, off: int, shape: Any, dtype: Any) -> Any:
        """Return the block at ``off`` as a device array of ``shape`` and ``dtype``, no copy.

        See :func:`devalloc.host.gather.block_array` (checks and lifetime).
        """
        from .gather import block_array
        return block_array(self, off, shape, dtype)

    @property
    def meta(self):
        """Not a heap attribute: a kernel was given the heap instead of ``heap.ctx``."""
        raise AttributeError(_PASS_CTX)

    @property
    def _numba_type_(self):
        # Numba types a kernel argument by this attribute: a heap passed to a
        # kernel on a GPU fails here, at launch, with the same advice.
        raise TypeError(_PASS_CTX)

    def reset(self, stream: Any = None) -> None:
        """Free every allocation and clear every counter, ordered on ``stream``.

        Does not synchronize the host. Costs one memset of the metadata
        (about 1.6 % of the capacity); the arena is not touched, so blocks keep
        their bytes but every offset handed out before is invalid.
        """
        self._live()
        with self._on_device():
            self._clear_meta(self._stream(stream))
            for array in (self._debug, self._prof, self._trace):
                if array is not None and array.size:
                    _zero(array, array.size * 8, self._stream(stream))

    def _clear_meta(self, stream: Any) -> None:
        """Zero the metadata but the words a new heap sets: the free-page
        index (every page free) and the spread's bound, from device copies
        made once (device-to-device: no host synchronization)."""
        _zero(self._meta, self._meta.size * 8, stream)
        at = self.geometry.free_tree_at
        self._meta[at:at + self._index.size].copy_to_device(self._index, stream=stream)
        self._meta[L.H_SPREAD_MAX:L.H_SPREAD_MAX + 1].copy_to_device(self._spread_max, stream=stream)

    def _stream(self, stream):
        return self.stream if stream is None else _check_stream(stream, "stream")

    def _snapshot(self, array, stream):
        self._live()
        s = self._stream(stream)
        with self._on_device():
            host = array.copy_to_host(stream=s)
            (s if s else cuda.default_stream()).synchronize()
        return host

    def resize(self, capacity: int) -> None:
        """Replace the heap by an empty one of ``capacity`` bytes.

        **Discards the contents**: every block is freed and every counter
        cleared, and ``heap.ctx`` changes (pass the new one to kernels). With
        ``memory=``, the new capacity must fit in that buffer. The page size
        follows ``page=``: the same, or with ``"auto"`` the new capacity's;
        ``heap.outline`` stays (a ``ctx_with`` ctx changes too: ask again).
        """
        self._live()
        old = {name: getattr(self, name) for name in _BUILT}
        try:
            with self._on_device():
                self._build(capacity)
        except Exception:
            for name, value in old.items():
                setattr(self, name, value)
            raise
        old["_lease"].end("resized")  # the old ctx is refused at launch from now on

    def close(self) -> None:
        """Release the heap's device memory (not ``memory=``'s). Idempotent."""
        if not self._closed:
            self._closed = True
            self._lease.end("closed")  # launches with any of its ctxs are refused
            self._arena = self._meta = self._ctx = self._other = self._debug = None
            self._sizes = self._prof = self._trace = None
            self._index = self._spread_max = None

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Heap":
        self._live()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pages={self.npages}"
        if not self._closed and self.page_shift != L.PAGE_SHIFT:
            state += f", page={self.page}"
        if not self._closed and self.outline != OUTLINE_DEFAULT:
            state += ", outline" if self.outline is True else f", outline={self.outline!r}"
        return f"Heap(capacity={self.requested}, {state})"


class _NullContext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
