"""Interleaving explorer: which schedules of a scenario to run, and the results.

Each run executes the real device functions one access at a time
(:mod:`devalloc.testing.machine` says how). This module chooses the runs:

* :func:`explore` (exhaustive): depth-first over schedules, replaying a
  prefix and then extending it. A thread's future depends only on the
  values its accesses returned (between operations, only on where it is in
  its program and what its allocations returned), so the state after a step
  is identified by the metadata words, those per-thread histories and the
  high-water mark of pages-used; a state already visited is not expanded
  again (state caching: two interleavings that reach the same state, such
  as independent accesses in either order, have the same futures). When the
  search finishes within its bound, every reachable state has been checked;
  the number of distinct complete schedules those states stand for is
  counted on the state graph.
* :func:`explore_pct`: PCT (Burckhardt et al., ASPLOS 2010), one schedule
  per seed: random distinct thread priorities, ``depth - 1`` random change
  points at which the running thread drops to the lowest priority; the
  highest-priority thread always runs. Seeds are fixed, so runs reproduce.
* :func:`replay`: one given schedule, e.g. a failing one.

After every step :func:`~devalloc.testing.invariants.check_safe` runs, and
at quiescent states :func:`~devalloc.testing.invariants.check_quiescent`; at
the end of each complete schedule the remaining blocks are freed serially
and :func:`~devalloc.testing.invariants.check_drained` runs, then one
allocation of the whole arena must succeed. The first broken invariant stops
the search; :meth:`Result.report` prints the failing schedule step by step.

``python -m devalloc.testing.explorer [--deep] [scenario ...]`` explores the
scenarios of :mod:`devalloc.testing.scenarios` and prints what it covered.
"""

import argparse
import random
import sys
import time
from dataclasses import dataclass, field

from .invariants import Fault
from .machine import (  # noqa: F401  (re-exported: the explorer's API)
    MAX_STEPS,
    FakeCuda,
    Machine,
    device_modules,
    Scenario,
    ThreadSpec,
    installed,
    op_str,
    rebind,
)


# ---------------------------------------------------------------- results

@dataclass
class Result:
    """What an exploration covered, and the first failure if any."""

    scenario: Scenario
    mode: str
    executions: int = 0
    states: int = 0
    steps: int = 0
    complete: bool = False  # exhaustive: every reachable state was checked
    schedules: int = 0  # exhaustive and complete: distinct complete schedules
    seconds: float = 0.0
    failure: Fault = None
    failing_schedule: list = field(default_factory=list)
    failing_trace: str = ""
    overrides: tuple = ()
    seed: object = None
    points: set = field(default_factory=set)  # access sites executed

    @property
    def ok(self):
        return self.failure is None

    def summary(self):
        s = (f"{self.scenario.name} [{self.mode}]: {self.executions} executions, "
             f"{self.steps} steps")
        if self.mode == "exhaustive":
            s += f", {self.states} states"
            if self.complete:
                s += f", complete: {self.schedules} schedules covered"
            elif self.failure is None:
                s += ", bound reached (not complete)"
        s += f", {self.seconds:.1f} s"
        if self.failure is not None:
            s += f"; FAILED: {self.failure}"
        return s

    def report(self):
        """Return the failure, the scenario and the failing schedule, printable."""
        if self.failure is None:
            return self.summary()
        out = [
            f"devalloc explorer: invariant broken: {self.failure}",
            self.scenario.describe(),
        ]
        if self.overrides:
            out.append("  with broken variant(s): " + ", ".join(self.overrides))
        if self.seed is not None:
            out.append(f"  PCT seed: {self.seed}")
        out.append(f"schedule (thread chosen at each step): {self.failing_schedule}")
        out.append("steps (the last step broke the invariant):")
        out.append(self.failing_trace)
        return "\n".join(out)


def _fail(result, machine, fault):
    result.failure = fault
    result.failing_schedule = list(machine.choices)
    result.failing_trace = machine.format_trace()
    return result


def _override_names(overrides):
    return tuple(f"{k}={getattr(v, '__name__', v)}" for k, v in (overrides or {}).items())


# ------------------------------------------------------------ exhaustive

def explore(scenario, max_executions=20000, overrides=None, cache=True):
    """Explore ``scenario`` exhaustively (DFS + state caching); return a :class:`Result`.

    Stops at the first broken invariant or after ``max_executions`` runs
    (then ``complete`` is False). ``cache=False`` turns state caching off:
    every complete schedule is then run on its own (for testing the cache).
    """
    result = Result(scenario, "exhaustive", overrides=_override_names(overrides))
    return _with_machine(scenario, result, overrides,
                         lambda m: _dfs(m, result, max_executions, cache))


def _with_machine(scenario, result, overrides, body):
    """Run ``body(machine)`` with the device code installed; fill in and
    return ``result`` (the access sites executed, the time taken)."""
    t0 = time.perf_counter()
    overrides = {**dict(scenario.constants), **dict(overrides or {})}
    with installed(overrides):
        m = Machine(scenario)
        try:
            body(m)
        finally:
            result.points = m.points
            m.close()
    result.seconds = time.perf_counter() - t0
    return result


def _dfs(m, result, max_executions, cache=True):
    visited = set() if cache else _Forgetful()
    edges = {} if cache else None  # without the cache, one run per schedule
    stack = [()]
    root = None
    while stack:
        if result.executions >= max_executions:
            result.states = len(visited)
            return
        prefix = stack.pop()
        result.executions += 1
        try:
            root = _dfs_run(m, prefix, root, visited, edges, stack)
        except Fault as f:
            result.states = len(visited)
            _fail(result, m, f)
            return
        finally:
            result.steps += len(m.choices)
            m.stop()
    result.states = len(visited)
    result.complete = True
    result.schedules = _count_paths(root, edges) if cache else result.executions


class _Forgetful(set):
    """A visited set that remembers nothing: no state is ever pruned."""

    def add(self, item):
        self.count = getattr(self, "count", 0) + 1

    def __len__(self):
        return getattr(self, "count", 0)


def _dfs_run(m, prefix, root, visited, edges, stack):
    """Replay ``prefix``, then extend it until a visited state or the end.

    At every state reached for the first time, the other enabled threads are
    pushed on ``stack`` as prefixes to explore later. Returns the root key.
    """
    m.reset()
    cur = m.key()
    if root is None:
        root = cur
        visited.add(cur)
        m.check()
    for k, c in enumerate(prefix):
        m.step(c)
        prev, cur = cur, m.key()
        if k == len(prefix) - 1 and edges is not None:
            edges.setdefault(prev, []).append(cur)
    if prefix:
        if cur in visited:
            return root
        visited.add(cur)
        m.check()
    last = prefix[-1] if prefix else None
    while True:
        en = m.enabled()
        if not en:
            m.finish()
            return root
        if len(m.choices) > MAX_STEPS:
            raise Fault("progress", f"no end after {MAX_STEPS} steps")
        c = last if last in en else en[0]
        for a in reversed(en):
            if a != c:
                stack.append(tuple(m.choices) + (a,))
        m.step(c)
        last = c
        prev, cur = cur, m.key()
        if edges is not None:
            edges.setdefault(prev, []).append(cur)
        if cur in visited:
            return root
        visited.add(cur)
        m.check()


def _count_paths(root, edges):
    """Return the number of root-to-leaf paths of the (acyclic) state graph."""
    memo = {}
    order = [(root, False)]
    while order:
        node, done = order.pop()
        if node in memo:
            continue
        kids = edges.get(node, ())
        if done:
            memo[node] = sum(memo[k] for k in kids) if kids else 1
            continue
        order.append((node, True))
        order.extend((k, False) for k in kids if k not in memo)
    return memo[root]


# ------------------------------------------------------------------- PCT

def explore_pct(scenario, seeds, depth=3, overrides=None):
    """Run one PCT schedule of ``scenario`` per seed; return a :class:`Result`.

    ``depth`` is PCT's d: d - 1 priority change points, spread over the
    number of steps of a first, round-robin run (which is checked too).
    """
    result = Result(scenario, f"pct d={depth}", overrides=_override_names(overrides))

    def body(m):
        nsteps = _one(m, result, _round_robin(), None)
        for seed in seeds:
            if not result.ok:
                break
            _one(m, result, _pct_chooser(seed, len(m.threads), nsteps, depth), seed)

    return _with_machine(scenario, result, overrides, body)


def replay(scenario, schedule, overrides=None):
    """Run ``scenario`` along ``schedule`` (thread numbers), then round robin."""
    result = Result(scenario, "replay", overrides=_override_names(overrides))
    sched = list(schedule)

    def choose(en, i):
        if i < len(sched) and sched[i] in en:
            return sched[i]
        return en[i % len(en)]

    return _with_machine(scenario, result, overrides, lambda m: _one(m, result, choose, None))


def _round_robin():
    def choose(en, i):
        return en[i % len(en)]
    return choose


def _pct_chooser(seed, nthreads, nsteps, depth):
    """Return PCT's scheduler for one seed: priorities and change points."""
    rng = random.Random(seed)
    prio = rng.sample(range(depth, depth + nthreads), nthreads)
    changes = sorted(rng.sample(range(1, max(nsteps, depth) + 1), depth - 1))

    def choose(en, i):
        best = max(en, key=prio.__getitem__)
        while changes and changes[0] == i + 1:
            changes.pop(0)
            prio[best] = len(changes) + 1  # below every initial priority
            best = max(en, key=prio.__getitem__)
        return best
    return choose


def _one(m, result, choose, seed):
    """Run one whole schedule chosen by ``choose(enabled, step)``; return its steps."""
    result.executions += 1
    try:
        m.reset()
        m.check()
        while True:
            en = m.enabled()
            if not en:
                m.finish()
                break
            if len(m.choices) > MAX_STEPS:
                raise Fault("progress", f"no end after {MAX_STEPS} steps")
            m.step(choose(en, len(m.choices)))
            m.check()
    except Fault as f:
        result.seed = seed
        _fail(result, m, f)
    finally:
        m.stop()
    result.steps += len(m.choices)
    return len(m.choices)


# --------------------------------------------------------------- coverage

def access_sites():
    """Return ``(file, line)`` of every metadata access in the device modules.

    Found in the source: each ``cuda.atomic.*`` call, each ``meta[...]`` and
    each call of an ordered atomic or relaxed access (``_acquire_cas(...)``,
    ``_load(...)``: :data:`devalloc.sim.ordered.KINDS`) of the modules of
    :func:`machine.device_modules`. Compare with :attr:`Result.points` to
    see which ones an exploration executed.
    """
    import ast
    import inspect

    from ..sim.ordered import KINDS

    sites = set()
    for mod in device_modules():
        path = inspect.getsourcefile(mod)
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "meta":
                sites.add((path, node.lineno))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Attribute)
                  and node.func.value.attr == "atomic"):
                sites.add((path, node.lineno))
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in KINDS:
                sites.add((path, node.lineno))
    return sites


# -------------------------------------------------------------------- CLI

def main(argv=None):
    from . import scenarios

    p = argparse.ArgumentParser(prog="python -m devalloc.testing.explorer",
                                description="Explore devalloc's device code's interleavings.")
    p.add_argument("names", nargs="*", help="scenarios to run (default: all); NAME@PAGE: "
                   "NAME on pages of PAGE bytes (1024 .. 16384), as reports name it")
    p.add_argument("--deep", action="store_true", help="the DEVALLOC_EXPLORE_DEEP bounds")
    args = p.parse_args(argv)
    known = {sc.name for sc in scenarios.EXHAUSTIVE + scenarios.EXHAUSTIVE_DEEP + scenarios.PCT}
    unknown = sorted(n for n in args.names if n.partition("@")[0] not in known)
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; known: {', '.join(sorted(known))}")
    try:
        paged = [scenarios.by_name(n) for n in args.names if "@" in n]
    except KeyError as e:
        p.error(str(e.args[0]))
    pct = {sc.name for sc in scenarios.PCT}
    deep = args.deep or scenarios.deep_requested()
    bounds = scenarios.bounds(deep)
    failed = False
    for sc in list(scenarios.exhaustive(deep)) + [
            sc for sc in paged if sc.name.partition("@")[0] not in pct]:
        if not args.names or sc.name in args.names:
            r = explore(sc, bounds.max_executions)
            print(r.summary() if r.ok else r.report(), flush=True)
            failed |= not r.ok
    for sc in list(scenarios.PCT) + [sc for sc in paged if sc.name.partition("@")[0] in pct]:
        if not args.names or sc.name in args.names:
            for depth in bounds.pct_depths:
                r = explore_pct(sc, bounds.pct_seeds, depth)
                print(r.summary() if r.ok else r.report(), flush=True)
                failed |= not r.ok
    return 1 if failed else 0


if __name__ == "__main__":
    # Run the package's copy of this module, not a second one named __main__.
    from devalloc.testing.explorer import main as _main

    sys.exit(_main())
