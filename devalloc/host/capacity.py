"""A heap's size: the capacities and ``memory=`` buffers a heap may be made with.

Pure arithmetic over :mod:`devalloc.layout` (no device): what ``Heap(capacity)``,
``Heap(memory=...)``, ``Heap.run(ceiling=...)`` and ``distributed.attach``
accept, and the exception that says why when they do not.
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


def check_capacity(capacity, least=L.MIN_CAPACITY):
    """Return ``capacity`` as an int, or raise TypeError/ValueError saying why.

    ``least`` is :data:`MIN_MEMORY` for a heap inside a ``memory=`` buffer.
    """
    if isinstance(capacity, (bool, np.bool_)) or not isinstance(
        capacity, numbers.Integral
    ):
        raise TypeError(
            "Heap capacity must be an integer number of bytes (int or NumPy "
            f"integer), got {type(capacity).__name__}: {capacity!r}"
        )
    capacity = int(capacity)
    if capacity < least and least == L.MIN_CAPACITY:
        raise ValueError(
            f"Heap capacity must be at least {least} bytes (one page; the "
            f"metadata is allocated beside it), got {capacity}"
        )
    if capacity < least:  # inside memory=
        raise ValueError(
            f"memory= is too small: a heap inside it needs at least {least} bytes "
            f"(metadata, one {L.PAGE}-byte page and up to {ALIGN_SLACK} bytes of "
            f"256-byte alignment), got {capacity}"
        )
    most = (L.capacity_for_pages if least == L.MIN_CAPACITY else L.memory_for_pages)(
        L.MAX_PAGES + 1) - 1
    if capacity > most:
        raise ValueError(
            f"Heap capacity must be at most {most} bytes ({L.MAX_PAGES} pages: "
            f"page numbers must fit devalloc's packed words), got {capacity}"
        )
    return capacity
