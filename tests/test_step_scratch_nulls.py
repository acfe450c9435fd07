"""step_scratch reports every NULL of both heap versions, as allocations.

The H100 run at ca8e2fd (bench/results/gpu-nvidia-h100-80gb-hbm3-2026-11-24.md)
showed step_scratch "not identical, 0 failed allocations": the row's count was
the scoped version's heap alone, while the alloc/free version had NULLs (16 in
the same run's 100,000-thread table), each of which skips a step and changes
the path. ``StepResult.failed`` is what the GPU check reports now: it must
count the NULLs of both versions, and count allocations (as its docstring
says), not the threads that met one.

On a heap whose every page is taken before each version runs, every request
returns NULL whatever the interleaving: each of the ``NSTEPS`` steps of each
thread fails once in each version (the scoped version's smaller retry is the
same request, counted once).
"""

import devalloc
from devalloc import layout as L
from devalloc.examples import _methods, _mc
from devalloc.examples import step_scratch as ss
from devalloc.testing.churn import fill_pages

PAGES = 4


class FullHeap(devalloc.Heap):
    """A heap whose pages are all taken again after each ``reset``."""

    def reset(self, stream=None):
        super().reset(stream)
        fill_pages(self, self.capacity // L.PAGE)


def test_every_null_of_both_heap_versions_is_counted_as_an_allocation():
    threads = 8
    lc = _mc.Runner(threads, 1, threads)
    heap = FullHeap(PAGES * L.PAGE)
    r = ss.result(ss.simulate(lc, heap))
    per_version = threads * ss.NSTEPS
    assert (r.usage.failed, r.alloc_free_usage.failed) == (per_version, per_version)
    assert r.failed == r.usage.failed + r.alloc_free_usage.failed == 2 * per_version
    assert not r.identical
    assert r.methods[_methods.HEAP].identical is False
    assert r.methods[_methods.HEAP_ALLOC_FREE].identical is False
    assert r.methods[_methods.EXACT].identical is True
