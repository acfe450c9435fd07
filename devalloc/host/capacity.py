"""A heap's size: the capacities and ``memory=`` buffers a heap may be made with.

Pure arithmetic over :mod:`devalloc.layout` (no device): what ``Heap(capacity)``,
``Heap(memory=...)``, ``Heap.run(ceiling=...)`` and ``distributed.attach``
accept (and ``spread=``, the hint slots it may use), and the exception that
says why when they do not.
"""

import numbers

import numpy as np

from .. import layout as L

#: Bytes a ``memory=`` buffer may spend aligning the metadata, then the
#: arena, to 256 bytes (at most 255 before each).
ALIGN_SLACK = 2 * 255
#: The smallest ``memory=`` buffer (or capacity inside one) a heap fits in,
#: whatever the buffer's address: one page, its metadata and the alignment.
MIN_MEMORY = L.MIN_MEMORY_BYTES + ALIGN_SLACK


def check_capacity(capacity, least=L.MIN_CAPACITY, ps=L.PAGE_SHIFT):
    """Return ``capacity`` as an int, or raise TypeError/ValueError saying why.

    ``least`` is :data:`MIN_MEMORY` for a heap inside a ``memory=`` buffer
    (then :func:`min_memory` of the heap's page); ``ps`` is the heap's page
    shift (the smallest capacity is one page).
    """
    if isinstance(capacity, (bool, np.bool_)) or not isinstance(
        capacity, numbers.Integral
    ):
        raise TypeError(
            "Heap capacity must be an integer number of bytes (int or NumPy "
            f"integer), got {type(capacity).__name__}: {capacity!r}"
        )
    capacity = int(capacity)
    inside = least != L.MIN_CAPACITY
    least = min_memory(ps) if inside else L.capacity_for_pages(1, ps)
    if capacity < least and not inside:
        raise ValueError(
            f"Heap capacity must be at least {least} bytes (one page; the "
            f"metadata is allocated beside it), got {capacity}"
        )
    if capacity < least:  # inside memory=
        raise ValueError(
            f"memory= is too small: a heap inside it needs at least {least} bytes "
            f"(metadata, one {1 << ps}-byte page and up to {ALIGN_SLACK} bytes of "
            f"256-byte alignment), got {capacity}"
        )
    most = (L.memory_for_pages(L.MAX_PAGES + 1, ps) if inside
            else L.capacity_for_pages(L.MAX_PAGES + 1, ps)) - 1
    if capacity > most:
        raise ValueError(
            f"Heap capacity must be at most {most} bytes ({L.MAX_PAGES} pages of "
            f"{1 << ps} bytes: page numbers must fit devalloc's packed words), got {capacity}"
        )
    return capacity


def min_memory(ps=L.PAGE_SHIFT):
    """Return the smallest ``memory=`` buffer a heap of pages of ``2**ps`` bytes fits in."""
    return L.memory_for_pages(1, ps) + ALIGN_SLACK


#: What ``Heap(page="auto")`` aims at: this many pages in the heap. Each size
#: class in use holds one partly used slab at least, so with pages of
#: capacity / 1024 the 32 classes' last slabs are at most 3 % of the heap.
AUTO_PAGES = 1024


def auto_page_shift(capacity):
    """Return the page shift ``Heap(capacity, page="auto")`` chooses.

    Pages of ``capacity / AUTO_PAGES`` bytes, rounded down to a power of two
    from ``layout.PAGE_MIN`` to ``layout.PAGE``: a small heap gets small
    pages (each size class in use holds a page at least, so the page bounds
    what a light workload costs), a heap of 16 MiB or more the largest
    (bench/RESULTS.md, "Heap vs count + scan").
    """
    ps = L.floor_log2(max(1, int(capacity) // AUTO_PAGES))
    return max(L.PAGE_SHIFT_MIN, min(L.PAGE_SHIFT, ps))


def check_page(page, capacity):
    """Return the page shift for ``Heap(capacity, page=page)``, or raise saying why.

    ``page``: None (the default, ``layout.PAGE``: 16 KiB), ``"auto"``
    (:func:`auto_page_shift` of ``capacity``), or a power of two from
    ``layout.PAGE_MIN`` (1 KiB) to ``layout.PAGE`` bytes.
    """
    allowed = (f"None (the default, {L.PAGE} bytes), 'auto' or a power of two "
               f"from {L.PAGE_MIN} to {L.PAGE} bytes")
    if page is None:
        return L.PAGE_SHIFT
    if isinstance(page, str):
        if page != "auto":
            raise ValueError(f"page= must be {allowed}, got {page!r}")
        if isinstance(capacity, numbers.Integral) and not isinstance(capacity, (bool, np.bool_)):
            return auto_page_shift(capacity)
        return L.PAGE_SHIFT  # check_capacity says what is wrong with it
    if isinstance(page, (bool, np.bool_)) or not isinstance(page, numbers.Integral):
        raise TypeError(f"page= must be {allowed}, got {type(page).__name__}: {page!r}")
    page = int(page)
    if page < L.PAGE_MIN or page > L.PAGE or page & (page - 1):
        raise ValueError(f"page= must be {allowed}, got {page}")
    return L.floor_log2(page)


def check_spread(spread):
    """Return ``spread`` (None or a positive int), or raise saying why."""
    if spread is None:
        return None
    if isinstance(spread, (bool, np.bool_)) or not isinstance(spread, numbers.Integral):
        raise TypeError(f"spread= must be a positive integer (hint slots) or None, "
                        f"got {type(spread).__name__}: {spread!r}")
    if spread < 1:
        raise ValueError(f"spread= must be at least 1 (one hint slot per class), got {spread}")
    return int(spread)


def ctx_type_for(capacity=None, *, page=None, debug=False, observed=False, outline=None):
    """Return the Numba type of ``Heap(capacity, page=page, debug=debug, ...).ctx``.

    For compiling kernels ahead of time (``devalloc.tools.aot.compile_ptx``)
    for a heap made with those options: ``page`` as ``Heap(page=)`` (None,
    a power of two, or ``"auto"``, which needs the ``capacity`` the heap
    will be made with), ``observed`` for a heap with ``profile=True`` or
    ``trace=``, ``outline`` as ``Heap(outline=)``. The same checks and
    errors as ``Heap``'s for ``page``.
    """
    from ..ctx import ctx_type_for as by_shift

    if page == "auto" and capacity is None:
        raise TypeError("ctx_type_for(page='auto') needs the capacity the heap will be made "
                        "with: ctx_type_for(capacity, page='auto')")
    for name, flag in (("debug", debug), ("observed", observed)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name}= must be True or False, got {type(flag).__name__}: {flag!r}")
    kind = "observed" if observed else "debug" if debug else "normal"
    return by_shift(check_page(page, capacity), kind, outline)
