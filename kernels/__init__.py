"""User-facing example kernels: Monte-Carlo work with conditional, run-time-sized scratch.

Each module pairs a heap version (``devalloc.alloc``/``view``/``free``) with
its worst-case-preallocation twin, and its ``run(threads=, seed=)`` returns
the answer with its statistical error, ``identical`` (both versions agree
bit for bit), ``heap_peak_bytes``, ``worst_case_bytes`` and the heap's
``usage``:

* ``two_pass_variance``: a run-time number of samples, read twice;
* ``particle_transport``: secondaries on a per-history stack that grows
  (alloc bigger, copy, free the old block);
* ``barrier_option``: only paths near the barrier keep their points, in a
  chain of fixed-size chunks, for a second kernel launch;
* ``ragged_walks``: every thread emits a variable number of items into a
  block of exactly its size; a second kernel gathers them into one array.

``_mc`` holds the shared host helpers (RNG states, error bars). Run one with
``python -m devalloc demo --example NAME`` or ``python kernels/NAME.py``.
This folder is not installed: ``python -m devalloc`` finds it beside
``devalloc/``.
"""
