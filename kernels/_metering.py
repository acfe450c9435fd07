"""What the comparison measures: a runner's rows, the scan with its launches counted, NRT.

:class:`Meter` is the part of ``_mc.Runner`` that fills the rows of the
comparison (:mod:`._methods`): :meth:`Meter.begin`/:meth:`Meter.end` around
each method count its launches (``Runner.launch`` calls ``_counted``) and
the host synchronisations it needs (:meth:`Meter.synced`), and time it on
a GPU; :meth:`Meter.scan` and :meth:`Meter.exact` are count + scan's
middle (the device scan, the total read back, the exact buffer);
:meth:`Meter.nrt` runs an NRT twin. Also: compiling NRT kernels
(:func:`nrt_enabled`), compiling every kernel before anything is timed
(:func:`precompile`), and the sizes that NRT and local memory need.

Importing this module imports numba: call ``devalloc.target.choose()`` first.
"""

import time
from contextlib import contextmanager

import numpy as np
from numba import config, cuda

from . import _methods, _scan


class Meter:
    """The rows of one run's comparison (``methods``), filled as its methods run."""

    def __init__(self):
        #: Method name -> :class:`_methods.Method`: the rows of the comparison.
        self.methods = {}
        self._method = None
        self._untimed = 0.0
        self._t0 = 0.0
        #: Run the NRT twins on the simulator too (np.empty is NumPy's there):
        #: the tests do, to check their answers; the demo does not.
        self.nrt_on_simulator = False

    def begin(self, name, **fields):
        """Start method ``name``'s row: count its launches and syncs; time it on a GPU.

        Returns the :class:`_methods.Method` (``fields`` set on it), which the
        caller completes (bytes, ``identical``) and closes with :meth:`end`.
        On a GPU the time is the wall clock between two device
        synchronisations, less what ran under :meth:`untimed`.
        """
        m = _methods.Method(name=name, **fields)
        self.methods[name] = m
        if not config.ENABLE_CUDASIM:
            cuda.synchronize()
        self._method, self._untimed = m, 0.0
        self._t0 = time.perf_counter()
        return m

    def end(self):
        """Close the current method's row; return it."""
        m = self._method
        if not config.ENABLE_CUDASIM:
            cuda.synchronize()
            m.seconds = time.perf_counter() - self._t0 - self._untimed
        self._method = None
        return m

    @contextmanager
    def method(self, name, **fields):
        """:meth:`begin` and :meth:`end` around a ``with`` block; yields the row."""
        m = self.begin(name, **fields)
        try:
            yield m
        finally:
            self.end()

    @contextmanager
    def untimed(self):
        """Leave what runs inside (figures the demo reads, not the method) out of its time."""
        gpu = not config.ENABLE_CUDASIM
        if gpu:
            cuda.synchronize()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if gpu:
                cuda.synchronize()
            self._untimed += time.perf_counter() - t0

    def synced(self, n=1):
        """Count ``n`` host synchronisations that the current method needs."""
        if self._method is not None:
            self._method.syncs += n

    def launched(self, n=1):
        """Count ``n`` kernel launches made for the current method elsewhere (a library call)."""
        if self._method is not None:
            self._method.launches += n

    def _counted(self):
        if self._method is not None:
            self._method.launches += 1

    def _scan_launch(self, kernel, blocks, *args):
        self._counted()
        kernel[blocks, _scan.BLOCK](*args)

    def scan(self, counts):
        """Return ``(offsets, total)``: the exclusive prefix sum of device ``counts``.

        The scan runs on the device (:mod:`._scan`, its launches counted);
        reading the total back is one host synchronisation, counted.
        """
        offsets, _ = _scan.exclusive_scan(counts, self._scan_launch)
        self.synced()
        return offsets, _scan.total(offsets)

    def exact(self, m, total, dtype, counts):
        """Return a device array of exactly ``total`` items (one at least); fill ``m``'s bytes.

        ``m`` (the count + scan row) gets the buffer's bytes as ``exact_bytes``
        and the counts' and the scan's arrays as ``scan_bytes``.
        """
        item = np.dtype(dtype).itemsize
        m.exact_bytes = total * item
        m.scan_bytes = counts.nbytes + _scan.scratch_bytes(counts.shape[0])
        m.peak_bytes = m.exact_bytes + m.scan_bytes + (m.peak_bytes or 0)
        return cuda.device_array(max(total, 1), dtype)

    def check(self, reference, outputs):
        """Set each row's ``identical``; return whether every method that ran agrees.

        ``reference`` is the worst case's output (an array, or a tuple of
        them); ``outputs`` maps a method's name to its own, alike (device
        arrays are copied to the host). A name mapped to None did not run.
        """
        def host(x):
            x = x if isinstance(x, tuple) else (x,)
            return [v if isinstance(v, np.ndarray) else v.copy_to_host() for v in x]

        ref = host(reference)
        for name, out in outputs.items():
            if out is not None:
                self.methods[name].identical = all(
                    np.array_equal(a, b) for a, b in zip(host(out), ref, strict=True))
        return all(m.identical is not False for m in self.methods.values())

    def nrt(self, heap_bytes, body):
        """Run an NRT twin: ``body(m)`` with ``m`` its row; return what it returns, or None.

        On a GPU, CUDA's malloc heap is first set to ``heap_bytes`` (it is
        reserved whole, so that is the row's peak; it cannot change once a
        kernel has used ``malloc``, in which case the current size is kept
        and the twin runs only if that is enough: NRT does not check
        ``malloc``'s result). On the simulator the row says "needs a GPU"
        and ``body`` runs only if :attr:`nrt_on_simulator` (NumPy's
        ``np.empty`` then; no figures).
        """
        if config.ENABLE_CUDASIM:
            m = _methods.Method(name=_methods.NRT, note="needs a GPU")
            self.methods[_methods.NRT] = m
            if not self.nrt_on_simulator:
                return None
            with self.method(_methods.NRT, note="needs a GPU") as m:
                return body(m)
        limit, problem = _malloc_heap(heap_bytes)
        if problem:
            self.methods[_methods.NRT] = _methods.Method(name=_methods.NRT, note=problem)
            return None
        with nrt_enabled(), self.method(_methods.NRT, peak_bytes=limit,
                                        note="CUDA's malloc heap, reserved whole") as m:
            return body(m)


@contextmanager
def nrt_enabled():
    """Compile and launch NRT kernels (``np.empty`` in a kernel) inside this ``with`` only.

    numba-cuda compiles a kernel with its runtime (NRT: CUDA's ``malloc``
    behind ``np.empty``, reference counts) while ``config.CUDA_ENABLE_NRT``
    is true; every other kernel is compiled without it.
    """
    old = getattr(config, "CUDA_ENABLE_NRT", False)
    config.CUDA_ENABLE_NRT = True
    try:
        yield
    finally:
        config.CUDA_ENABLE_NRT = old


def precompile(module):
    """On a GPU, compile ``module``'s kernels and the scan's before anything is timed.

    ``module.SIGNATURES`` and the scan's, for a normal heap's ctx;
    ``module.NRT_SIGNATURES`` under :func:`nrt_enabled`. Does nothing on the
    simulator (nothing is compiled there).
    """
    if config.ENABLE_CUDASIM:
        return
    for mod in (module, _scan):
        for name, sig in signatures(mod.SIGNATURES).items():
            getattr(mod, name).compile(sig)
    for name, words in _scan.MORE_SIGNATURES:
        getattr(_scan, name).compile(signatures({name: words})[name])
    with nrt_enabled():
        for name, sig in signatures(getattr(module, "NRT_SIGNATURES", {})).items():
            getattr(module, name).compile(sig)


def _malloc_heap(nbytes):
    """Set CUDA's malloc heap to at least ``nbytes``; return ``(size, problem or None)``."""
    from numba.cuda.cudadrv.driver import binding, driver

    which = binding.CUlimit.CU_LIMIT_MALLOC_HEAP_SIZE
    cuda.current_context()  # the context must exist
    try:
        driver.cuCtxSetLimit(which, int(nbytes))
    except Exception:  # noqa: BLE001 (in use already: keep what is there, checked below)
        pass
    size = int(driver.cuCtxGetLimit(which))
    if size < nbytes:
        return size, (f"not run: CUDA's malloc heap is {size:,} B, {nbytes:,} B needed, "
                      "and it cannot grow once used")
    return size, None


def malloc_bytes(exact_bytes, blocks, header=64):
    """Return a malloc heap size for an NRT twin: twice its bytes and headers, 8 MiB at least.

    CUDA does not document its ``malloc``'s overhead; NRT adds a header
    (MemInfo) to every array.
    """
    return max(8 << 20, 2 * (exact_bytes + blocks * header))


def resident_threads(threads):
    """Return how many of ``threads`` threads can be resident at once on this device.

    Local memory is set aside per resident thread (SMs x threads per SM on
    a GPU), not per thread launched. The simulator has no SMs: every thread
    counts.
    """
    if config.ENABLE_CUDASIM:
        return threads
    dev = cuda.get_current_device()
    return min(threads, dev.MULTIPROCESSOR_COUNT * dev.MAX_THREADS_PER_MULTIPROCESSOR)


#: Argument words of :func:`signatures`: 1-D arrays of these element types.
_ELEMENTS = ("float32", "float64", "int32", "int64", "boolean")


def signatures(table):
    """Return ``{kernel: argument types}`` for :func:`devalloc.tools.aot.compile_ptx`.

    ``table`` maps a kernel name to its arguments as words: ``ctx`` (a
    heap's ctx), ``states`` (RNG states), an element type (``int32``,
    ``float64``, ...: a 1-D C array) or an element type followed by ``[2]``
    (a 2-D C array).
    """
    from numba import types
    from numba.cuda.random import xoroshiro128p_type

    import devalloc

    words = {"ctx": devalloc.ctx_type, "states": types.Array(xoroshiro128p_type, 1, "C")}
    for name in _ELEMENTS:
        words[name] = types.Array(getattr(types, name), 1, "C")
        words[name + "[2]"] = types.Array(getattr(types, name), 2, "C")
    return {kernel: tuple(words[w] for w in args.split()) for kernel, args in table.items()}
