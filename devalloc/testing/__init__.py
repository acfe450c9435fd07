"""Checking tools for devalloc's device algorithms; not needed to use the heap.

* :mod:`devalloc.testing.explorer`: explores the interleavings of 2-4
  logical threads running the real device functions (their ``py_func``),
  exhaustively (DFS with state caching) or with PCT random-priority
  schedules, and reports the first broken invariant with its schedule.
* :mod:`devalloc.testing.machine`: one run, one step at a time: the fake
  ``cuda`` module, the instrumented metadata, the baton-passing threads.
* :mod:`devalloc.testing.groups`: warp groups in the explorer (one logical
  thread acting for a group of lanes: its leader, then its lanes).
* :mod:`devalloc.testing.invariants`: the sequential model of a history and
  the invariants checked after every step.
* :mod:`devalloc.testing.scenarios`: the configurations the test suite
  explores, and their bounds (``DEVALLOC_EXPLORE_DEEP=1`` raises them).
* :mod:`devalloc.testing.broken`: deliberately broken copies of device
  functions, to show that the explorer catches what it should.

``python -m devalloc.testing.explorer [--deep] [scenario ...]`` explores the
scenarios and prints what it covered. See docs/correctness.md, "How this is
checked".
"""
