"""A heap's metadata array, typed with the heap's page and its outline choice.

``Heap(page=)`` chooses the page per heap, ``Heap(outline=)`` (or
``heap.ctx_with(outline=)``, per launch) whether kernels call the
allocator's bodies out of line. The heap's ``ctx`` carries both in the Numba
type of its metadata array (:class:`devalloc.ctx.PagedMeta`), so that
kernels compile with them as constants; this module makes that array:
numba-cuda's device array with a ``_numba_type_`` of its own.
"""

import functools

from numba import config

from .. import layout as L
from ..ctx import outline_option


def paged_meta(meta, ps, outline=None, lease=None):
    """Return the metadata array ``meta`` typed with its heap's page (:class:`ctx.PagedMeta`).

    Kernels given the heap's ``ctx`` then compile with the page as a
    constant (devalloc.device._meta._pshift) and with the bodies out of line
    if ``outline`` (devalloc.device.outline; None: the process default,
    devalloc.ctx.OUTLINE_DEFAULT). The same device memory, no
    copy. On the simulator, which does not type arguments, ``meta`` itself
    (the device code reads the page from the length there, and is the same
    Python code either way). ``lease``: the heap's :class:`devalloc.ctx.Lease`,
    checked at every launch (here in the array's Numba type, which the
    launch asks for; on the simulator by the launch itself).
    """
    if config.ENABLE_CUDASIM:
        meta._devalloc_lease = lease
        return meta
    paged = paged_array_class()(meta.shape, meta.strides, meta.dtype, stream=meta.stream,
                                 gpu_data=meta.gpu_data)
    paged.page_shift = ps
    paged.outline = outline_option(outline)
    paged._devalloc_lease = lease
    return paged


@functools.lru_cache(maxsize=None)
def paged_array_class():
    """The device-array class of a heap's metadata (made on first use: numba-cuda's class)."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from ..ctx import PagedMeta

    class PagedMetaArray(DeviceNDArray):
        """A heap's metadata on the device; its Numba type names the page and the outline choice."""

        page_shift = L.PAGE_SHIFT
        outline = False
        _devalloc_lease = None

        @property
        def _numba_type_(self):
            # Asked for at every launch (numba-cuda types a tuple argument
            # in Python each time): a closed or resized heap's ctx is
            # refused here, before the kernel runs.
            lease = self._devalloc_lease
            if lease is not None and lease.ended is not None:
                lease.check()
            return PagedMeta(self.page_shift, self.outline)

    return PagedMetaArray
