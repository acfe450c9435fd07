"""Running a kernel until no allocation fails: ``Heap.run`` and its :class:`RunResult`.

The :class:`Running` part of :class:`devalloc.host.Heap`: each attempt resets
the heap, launches the kernel with this heap's current ``ctx`` and reads the
usage; a failed allocation grows the heap (``Heap.resize``) up to a ceiling.
"""

import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ctx import Ctx, DebugCtx, ObsCtx
from ..errors import HeapExhausted
from .capacity import check_capacity
from .stats import Usage


@dataclass(frozen=True)
class RunResult:
    """What :meth:`Heap.run` did: the final usage, launches, final capacity."""

    usage: Usage
    attempts: int
    capacity: int


class Running:
    """``Heap.run`` (mixed into :class:`~devalloc.host.Heap`)."""

    if TYPE_CHECKING:  # made by Heap (devalloc.host.heap)
        requested: int
        page_shift: int
        stream: Any
        _meta: Any
        _arena: Any
        _other: Any
        outline: bool | str

        @property
        def ctx(self) -> Any: ...

        def ctx_with(self, *, outline: bool | str) -> Any: ...

        def _live(self) -> None: ...

        def reset(self, stream: Any = None) -> None: ...

        def resize(self, capacity: int) -> None: ...

        def usage(self, stream: Any = None) -> Usage: ...

    def run(self, kernel: Any, griddim: Any, blockdim: Any, *args: Any, ceiling: int,
            growth: float = 2.0, max_attempts: int = 16) -> RunResult:
        """Launch ``kernel`` until no allocation fails, growing the heap.

        For kernels that are safe to re-run from scratch. Each attempt resets
        the heap, launches ``kernel[griddim, blockdim, stream](*args)`` with
        every argument that is this heap (or its ``heap.ctx`` from before the
        call) replaced by the current ``heap.ctx`` (a ``heap.ctx_with(outline=)``
        by the current one of the same choice), and reads the usage. If
        allocations failed, the capacity is multiplied by ``growth`` (doubling
        by default), capped at ``ceiling`` bytes, and the kernel is launched
        again. Raises :class:`HeapExhausted` when the heap is already at the
        ceiling and allocations still fail, or after ``max_attempts`` launches.

        A ctx of another heap (or of this heap before a ``resize``) among the
        arguments raises ValueError: ``run`` counts this heap's failures only,
        so that heap's failures would go uncounted and ``run`` would report
        success for a kernel whose allocations failed. ``ceiling`` below the
        heap's current size (``heap.requested``) raises ValueError: ``run``
        never shrinks a heap.

        :returns: a :class:`RunResult` (final usage, attempts, capacity).
        """
        self._live()
        ceiling = check_capacity(ceiling, ps=self.page_shift)
        if ceiling < self.requested:
            raise ValueError(
                f"ceiling={ceiling} is below the heap's current size of {self.requested} "
                "bytes: run() grows a heap, never shrinks it; pass a ceiling of at least "
                f"{self.requested}"
            )
        if not (isinstance(growth, numbers.Real) and 1 < growth < math.inf):
            raise ValueError(f"growth must be a finite number > 1, got {growth!r}")
        if isinstance(max_attempts, (bool, np.bool_)) or not isinstance(
            max_attempts, numbers.Integral
        ):
            raise TypeError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts}")
        mine = [self._is_mine(a, i) for i, a in enumerate(args)]
        for attempt in range(1, max_attempts + 1):
            self.reset()
            real = [a if m is None else self.ctx_with(outline=m) for a, m in zip(args, mine)]
            kernel[griddim, blockdim, self.stream](*real)
            u = self.usage()
            if u.failed == 0:
                return RunResult(u, attempt, self.requested)
            if self.requested >= ceiling:
                raise HeapExhausted(
                    f"{u.failed} allocation(s) failed with the heap at its ceiling "
                    f"of {ceiling} bytes after {attempt} attempt(s)", u, attempt)
            self.resize(min(ceiling, max(self.requested + 1, math.ceil(self.requested * growth))))
        raise HeapExhausted(
            f"allocations still failed after {max_attempts} attempts "
            f"(capacity {self.requested} bytes)", u, max_attempts)

    def _is_mine(self, arg, position):
        """Return the outline choice of ``arg`` if it is this heap or a current ctx
        of it (``ctx``, ``ctx_with``: run() swaps it), else None.

        Raise ValueError for a ctx of another heap, or of this heap before a
        resize: run() could not count its failures.
        """
        if arg is self:
            return self.outline
        if not isinstance(arg, (Ctx, DebugCtx, ObsCtx)):
            return None
        if arg.arena is self._arena:
            if arg.meta is self._meta:
                return self.outline
            for choice, other in (self._other or {}).items():
                if arg.meta is other.meta:
                    return choice
        raise ValueError(
            f"kernel argument {position} (from 0) is the ctx of another heap (or of this heap "
            "before a resize): run() counts only this heap's failures and would report "
            "success while that heap's allocations fail. Pass `heap` (run() passes the "
            "current heap.ctx to each attempt)"
        )
