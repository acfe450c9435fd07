"""User-facing example kernels: Monte-Carlo work with conditional, run-time-sized scratch.

Each module pairs a heap version (``devalloc.alloc``/``view``/``free``) with
its worst-case-preallocation twin, and its ``run(threads=, seed=)`` returns
a dataclass (a subclass of ``_mc.Result``): the answer with its statistical
error, ``identical`` (both versions agree bit for bit),
``heap_peak_bytes``, ``worst_case_bytes``, the heap's ``usage`` and the
example's own figures:

* ``two_pass_variance``: a run-time number of samples, read twice;
* ``particle_transport``: secondaries on a per-history stack that grows
  (alloc bigger, copy, free the old block);
* ``barrier_option``: only paths near the barrier keep their points, in a
  chain of fixed-size chunks, for a second kernel launch;
* ``ragged_walks``: every thread emits a variable number of items into a
  block of exactly its size; a second kernel gathers them into one array;
* ``step_scratch``: per-time-step buffers, scoped scratch vs alloc/free.

Every example also runs a count + scan + exact twin (count, scan on the
device with ``_scan``, allocate exactly, redo the work) and, where NRT
allows, a twin whose scratch is ``np.empty`` (CUDA's malloc); the
``Result``'s ``methods`` holds one row per way (``_methods``: bytes,
launches, host synchronisations, work done twice, GPU time, identical),
filled by the runner (``_metering``).

``run`` is ``result(simulate(...))``: ``simulate`` runs a range of threads
(RNG states by global thread index) and returns their outputs, ``result``
computes the answer from them, so ``demo --workers N`` runs shards on
several workers and gets the same answer. ``_mc`` is the scaffold they
share (RNG states, launches, heaps, shards, the result type, signatures). Run one with ``python -m devalloc demo --example NAME``.
The folder stays at the top of the repository and is installed as
``devalloc.examples`` (pyproject's ``package-dir``); in a checkout without
an install, ``devalloc._examples.package()`` gives it that name.
"""
