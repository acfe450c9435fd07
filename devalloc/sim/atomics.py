"""Count every simulated atomic operation: ``with count_atomics() as n:``.

Public: the tests, ``bench/`` and the examples use it to pin atomics per
operation, which the simulator measures exactly and a GPU cannot show.
"""

import threading

from numba import config

from . import install


class AtomicCounts:
    """Counts of simulated atomic operations, by kind (``add``, ``cas``...).

    ``cas_failed`` counts the ``cas`` (and ``compare_and_swap``) calls that
    found another value than the one they expected and so changed nothing:
    CAS retries and lost races.
    """

    def __init__(self):
        self.by_kind = {}
        self.cas_failed = 0

    @property
    def total(self):
        return sum(self.by_kind.values())

    def __repr__(self):
        return (f"AtomicCounts(total={self.total}, by_kind={self.by_kind}, "
                f"cas_failed={self.cas_failed})")


#: Atomic kinds counted by :func:`count_atomics` (FakeCUDAAtomic methods).
ATOMIC_KINDS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch",
                "max", "min", "cas", "compare_and_swap")

#: For the compare-and-swap kinds, the position of the expected value among
#: the method's arguments: ``cas(array, index, old, val)``,
#: ``compare_and_swap(array, old, val)``.
EXPECTED_ARG = {"cas": 2, "compare_and_swap": 1}

_COUNT_LOCK = threading.Lock()


class count_atomics:
    """Context manager: count every simulated atomic operation while active.

    Simulator only (a GPU has no such hook). Wraps the simulator's atomic
    methods; each count is taken under a lock of its own, so it is exact.
    ``with count_atomics() as n: kernel[...](...)`` then ``n.total`` (and
    ``n.cas_failed``: the ``cas`` calls that lost, i.e. the retries).
    """

    def __enter__(self):
        if not config.ENABLE_CUDASIM:
            raise RuntimeError("count_atomics() needs the CUDA simulator")
        install()
        from numba.cuda.simulator import kernelapi

        self.counts = AtomicCounts()
        self._saved = {}
        cls = kernelapi.FakeCUDAAtomic
        for kind in ATOMIC_KINDS:
            original = getattr(cls, kind)
            self._saved[kind] = original

            def counted(this, *args, _kind=kind, _original=original):
                result = _original(this, *args)
                at = EXPECTED_ARG.get(_kind)
                failed = at is not None and result != args[at]
                with _COUNT_LOCK:
                    self.counts.by_kind[_kind] = self.counts.by_kind.get(_kind, 0) + 1
                    self.counts.cas_failed += failed
                return result

            setattr(cls, kind, counted)
        return self.counts

    def __exit__(self, *exc):
        from numba.cuda.simulator import kernelapi

        for kind, original in self._saved.items():
            setattr(kernelapi.FakeCUDAAtomic, kind, original)
        return False
