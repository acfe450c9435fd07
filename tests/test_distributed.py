"""devalloc.host.distributed on a local Dask cluster of 2 worker processes (simulator).

The workers are spawned processes: they inherit NUMBA_ENABLE_CUDASIM=1 from
tests/conftest.py and import this module to run its task functions, so
every kernel a task launches is defined here at module level. The sharding
of the examples is checked in one process first (shards joined = the whole
run), then on the cluster, with a worker that dies, and through the
command (``demo --workers 2``, ``demo --scheduler``).
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import dask
import distributed  # in the [test] extra
import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import __main__ as cli
from devalloc import _examples
from devalloc.host import distributed as dd
from devalloc import layout as L
from devalloc.errors import DevallocError, WorkerHeapError

_examples.package()  # workers import this module too, without tests/conftest.py
from devalloc.examples import _mc  # noqa: E402
from devalloc.examples import ragged_walks as rw  # noqa: E402

CAPACITY = L.capacity_for_pages(4)

#: Per worker process: a heap seen by an earlier task (see test_teardown...).
_SEEN = {}


@cuda.jit
def grab(ctx, nbytes, offs):
    i = cuda.grid(1)
    if i < offs.shape[0]:
        offs[i] = devalloc.alloc(ctx, nbytes)


@pytest.fixture(scope="module")
def client():
    # No heartbeat deadline (worker-ttl): on a loaded machine a worker busy
    # in a simulated launch once missed its heartbeats for 562 s, and the
    # scheduler restarted it, its heap and counts with it, mid-test (a demo
    # reported 8 allocations of 16). A worker that dies is still seen at once:
    # its connection closes.
    with dask.config.set({"distributed.scheduler.worker-ttl": None}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture
def attached(client):
    dd.attach(client, CAPACITY)
    yield client
    dd.detach(client)


def workers(client):
    return sorted(client.nthreads())


# ----------------------------------------------------------------- tasks
def heap_facts():
    heap = dd.worker_heap()
    _SEEN["heap"] = heap
    return id(heap), heap.requested, heap.closed, distributed.get_worker().address


def seen_heap_closed():
    return _SEEN["heap"].closed


def simulated():
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def run_growing(threads, nbytes, ceiling):
    """Each of ``threads`` threads takes ``nbytes``; Heap.run grows until none fails."""
    heap = dd.worker_heap()
    offs = cuda.device_array(threads, np.int64)
    r = heap.run(grab, 1, threads, heap, nbytes, offs, ceiling=ceiling)
    return r.attempts, r.capacity, r.usage.failed, r.usage.allocs


def alloc_or_grow(threads, nbytes):
    """Allocate; on failure ask for a heap twice as big and redo. Return the capacities seen."""
    heap = dd.worker_heap()
    seen = [heap.requested]
    while True:
        heap.reset()
        offs = cuda.device_array(threads, np.int64)
        grab[1, threads](heap.ctx, nbytes, offs)
        if heap.usage().failed == 0:
            return seen
        heap = dd.grow_worker_heap()
        seen.append(heap.requested)


def capacity_here():
    return dd.worker_heap().requested


def shard_then_die_once(marker, *args):
    """Run a shard; the first time, die before returning it (its heap used, its result lost)."""
    shard = dd.run_shard(*args)
    if not os.path.exists(marker):
        Path(marker).write_text(distributed.get_worker().address)
        os._exit(1)
    return shard


# ------------------------------------------- sharding, in one process
def answer_of(r):
    """Return what a run computes, without the figures of the heaps it ran on."""
    memory = ("peak", "in_use", "usage", "atomics")  # heaps' figures, interleaving-dependent
    out = {"answer": r.answer, "stderr": r.stderr, "expected": r.expected,
           "identical": r.identical, "threads": r.threads}
    for k, v in r.details().items():
        if not any(m in k for m in memory):
            out[k] = v.tolist() if isinstance(v, np.ndarray) else v
    return out


def test_rng_states_of_a_shard_are_the_whole_runs_from_its_start():
    # (numba's own seeding from a start, the GPU path: tests/test_examples.py)
    whole = _mc.rng_states(9, 11)
    for start, n in ((0, 9), (4, 5), (8, 1)):
        assert np.array_equal(_mc.rng_states(n, 11, start=start), whole[start:start + n])


def test_split_covers_the_threads_in_order():
    for threads, shards in ((10, 3), (2, 5), (7, 1), (64, 2)):
        parts = dd.split(threads, shards)
        assert len(parts) == min(threads, shards)
        assert [a for a, _ in parts] == list(np.cumsum([0] + [n for _, n in parts[:-1]]))
        assert sum(n for _, n in parts) == threads
        assert max(n for _, n in parts) - min(n for _, n in parts) <= 1


@pytest.mark.parametrize("example", sorted(cli.EXAMPLES) + ["step_scratch"])
def test_shards_joined_give_the_answer_of_one_run(example):
    module = _examples.load(example)
    whole = module.run(threads=8, seed=5, block=4)
    parts = []
    for start, n in ((6, 2), (0, 3), (3, 3)):  # out of order: combine sorts them
        lc = _mc.Runner(n, 5, 4, start=start)
        parts.append(module.simulate(lc, lc.heap(None)))
    joined = _mc.combine(parts)
    r = module.result(joined)
    assert answer_of(r) == answer_of(whole)
    assert r.identical and joined.failed() == 0
    assert r.usage.allocs == sum(p.usages["end"].allocs for p in parts)
    assert r.heap_peak_bytes == sum(p.usages["end"].peak for p in parts)


def test_combine_refuses_a_gap_or_an_overlap():
    lc = _mc.Runner(4, 5, 4, start=4)
    part = rw.simulate(lc, lc.heap(None))
    with pytest.raises(ValueError, match="thread 0 is followed by a shard starting at 4"):
        _mc.combine([part])
    with pytest.raises(ValueError, match="thread 8 is followed by a shard starting at 4"):
        _mc.combine([dataclasses.replace(part, start=0), part, part])


# ---------------------------------------------------- heaps on workers
def test_worker_heap_outside_a_worker_says_where_it_works():
    with pytest.raises(WorkerHeapError, match="inside a task running on a Dask worker"):
        dd.worker_heap()
    with pytest.raises(WorkerHeapError, match="inside a task"):
        dd.grow_worker_heap()
    assert issubclass(WorkerHeapError, DevallocError)


def test_workers_run_on_the_simulator(client):
    assert set(client.run(simulated).values()) == {True}


def test_before_attach_a_task_is_told_to_attach(client):
    with pytest.raises(WorkerHeapError,
                       match=r"has no devalloc heap; call devalloc\.host\.distributed\.attach"):
        client.submit(heap_facts, pure=False).result()
    with pytest.raises(WorkerHeapError, match="attach"):
        dd.usage(client)


def test_every_worker_owns_one_heap_kept_across_tasks(attached):
    client = attached
    ws = workers(client)
    assert len(ws) == 2
    for w in ws:
        first = client.submit(heap_facts, workers=[w], pure=False).result()
        again = client.submit(heap_facts, workers=[w], pure=False).result()
        assert first == again  # the same Heap object, open, on that worker
        assert first[1:] == (CAPACITY, False, w)
    u = dd.usage(client)
    assert list(u) == ws
    assert all(isinstance(x, devalloc.Usage) and x.capacity == 4 * L.PAGE for x in u.values())


def test_teardown_closes_each_heap(client):
    dd.attach(client, CAPACITY)
    ws = workers(client)
    for w in ws:
        client.submit(heap_facts, workers=[w], pure=False).result()
    dd.detach(client)
    for w in ws:
        assert client.submit(seen_heap_closed, workers=[w], pure=False).result() is True


def test_attach_again_replaces_the_heaps(attached):
    client = attached
    old = {w: client.submit(heap_facts, workers=[w], pure=False).result() for w in workers(client)}
    dd.attach(client, 2 * CAPACITY)
    for w in workers(client):
        assert client.submit(seen_heap_closed, workers=[w], pure=False).result() is True
        new = client.submit(heap_facts, workers=[w], pure=False).result()
        assert new[1:3] == (2 * CAPACITY, False) and new[0] != old[w][0]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"stream": 0}, TypeError, "takes only debug, device, page"),
    ({"page": 3000}, ValueError, "page= must be"),
    ({"memory": None}, TypeError, "cannot be sent to workers"),
    ({"outline": "yes"}, TypeError, "outline= must be None"),
])
def test_attach_refuses_what_a_worker_cannot_use(client, kwargs, error, match):
    with pytest.raises(error, match=match):
        dd.attach(client, CAPACITY, **kwargs)


@pytest.mark.parametrize("capacity, error", [(100, ValueError), (1.5e6, TypeError)])
def test_attach_checks_the_capacity_before_registering(client, capacity, error):
    with pytest.raises(error, match="Heap capacity"):
        dd.attach(client, capacity)
    with pytest.raises(WorkerHeapError):  # nothing was registered
        dd.usage(client)


def test_heap_run_grows_a_workers_heap_for_later_tasks(attached):
    client = attached
    a, b = workers(client)
    # 8 threads x 2 large pages: 16 pages, the heap has 4.
    attempts, capacity, failed, allocs = client.submit(
        run_growing, 8, 2 * L.PAGE, 1 << 22, workers=[a], pure=False).result()
    assert failed == 0 and allocs == 8 and attempts == 3  # 4 -> 8 -> 16 pages
    assert capacity > CAPACITY
    assert client.submit(capacity_here, workers=[a], pure=False).result() == capacity
    assert client.submit(capacity_here, workers=[b], pure=False).result() == CAPACITY
    u = dd.usage(client)
    assert u[a].capacity >= 16 * L.PAGE and u[a].allocs == 8
    assert u[b].capacity == 4 * L.PAGE


def test_grow_worker_heap_keeps_the_new_capacity(attached):
    client = attached
    a, b = workers(client)
    seen = client.submit(alloc_or_grow, 6, 2 * L.PAGE, workers=[b], pure=False).result()
    assert seen == [CAPACITY, 2 * CAPACITY, 4 * CAPACITY]  # 12 pages needed
    assert client.submit(capacity_here, workers=[b], pure=False).result() == 4 * CAPACITY
    assert client.submit(capacity_here, workers=[a], pure=False).result() == CAPACITY
    # Asked again on a heap that is already large enough: left alone.
    assert client.submit(alloc_or_grow, 6, 2 * L.PAGE, workers=[b],
                         pure=False).result() == [4 * CAPACITY]


# ------------------------------------------- sharding, on the cluster
def test_sharded_run_on_the_cluster_gives_the_answer_of_one_process(attached):
    client = attached
    whole = rw.run(threads=24, seed=9, block=8)
    r, parts = dd.run_sharded(client, "ragged_walks", 24, 9, shards=3, block=8)
    assert answer_of(r) == answer_of(whole)
    assert [(p.start, p.threads) for p in parts] == [(0, 8), (8, 8), (16, 8)]
    # Shard k is asked of worker k round robin, loosely: Dask's work stealing
    # may move a waiting shard to an idle worker (seen on a loaded 2-core CI
    # machine), so only "some worker of the cluster ran it" is promised.
    used = {p.worker for p in parts}
    assert used <= set(workers(client))
    # The 4-page heaps were too small for a shard: each worker that ran one
    # grew its own; its usage is its last shard's (a walk, a block per thread).
    u = dd.usage(client)
    for w in used:
        assert u[w].capacity > CAPACITY and u[w].failed == 0 and u[w].allocs == 8, w


def test_a_shard_that_cannot_grow_enough_says_so(attached):
    client = attached
    with pytest.raises(devalloc.HeapExhausted, match=r"threads 0\.\.7 still failed"):
        client.submit(dd.run_shard, "ragged_walks", 0, 8, 4, 8, 0, pure=False).result()


def test_a_worker_that_dies_has_its_shard_rerun_elsewhere(attached, tmp_path):
    client = attached
    whole = rw.run(threads=16, seed=4, block=8)
    before = workers(client)
    marker = str(tmp_path / "died")
    (a, first), (b, second) = dd.split(16, 2)
    futures = [client.submit(shard_then_die_once, marker, "ragged_walks", a, first, 4, 8,
                             pure=False),
               client.submit(dd.run_shard, "ragged_walks", b, second, 4, 8, pure=False)]
    parts = client.gather(futures)
    dead = Path(marker).read_text()
    assert parts[0].worker != dead  # rerun on another worker
    assert answer_of(rw.result(_mc.combine(parts))) == answer_of(whole)
    # The nanny restarted the dead worker: a new worker, with a fresh heap of
    # its own (a task runs on a worker only once its plugins are set up).
    client.wait_for_workers(2, timeout=120)
    new = sorted(set(workers(client)) - set(before))
    assert len(new) == 1 and dead in before
    assert client.submit(capacity_here, workers=new, pure=False).result() == CAPACITY
    assert set(dd.usage(client)) == set(workers(client))


def test_demo_with_workers_gives_the_json_of_one_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-m", "devalloc", "demo", "--workers", "2",
                           "--threads", "24", "--seed", "3", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads(proc.stdout)
    one = cli.summary(cli.DEFAULT_EXAMPLE, s["target"], 24, 3, rw.run(threads=24, seed=3), 0)
    for key in ("answer", "stderr", "expected", "identical", "details", "worst_case_bytes"):
        assert s[key] == one[key], key
    d = s["distributed"]
    assert [(x["start"], x["threads"]) for x in d["shards"]] == [(0, 12), (12, 12)]
    assert set(d["workers"]) == {x["worker"] for x in d["shards"]}
    assert s["usage"]["allocs"] == 24  # the shards' heaps added up
    # Each worker's heap after its last shard (one shard may have been stolen
    # by the other worker, so not "one shard each"): 12 walks, a block each.
    assert all(u["allocs"] == 12 for u in d["workers"].values())
    assert set(d["targets"].values()) == {s["target"]}


def test_demo_on_a_running_scheduler_reports_each_workers_heap(client, capsys):
    address = client.scheduler.address
    assert cli.main(["demo", "--scheduler", address, "--threads", "16", "--seed", "2"]) == 0
    text = capsys.readouterr().out
    assert "identical to the worst-case version: yes" in text
    assert f"2 shards on 2 workers (scheduler {address})" in text
    table = text[text.index("heap usage per worker"):].splitlines()
    rows = {line.split()[0]: line.split() for line in table[2:]}
    assert set(rows) == set(workers(client)) | {"total"}
    assert int(rows["total"][6]) == 16  # allocs: one block per walk
    # The demo detached again: the cluster is left as it was found.
    with pytest.raises(WorkerHeapError):
        dd.usage(client)


@pytest.mark.parametrize("args", [["--workers", "0"], ["--workers", "2", "--scheduler", "x"]])
def test_demo_workers_usage_errors_exit_2(args):
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", *args])
    assert e.value.code == 2


def test_demo_workers_without_distributed_says_what_to_install(tmp_path):
    fake = tmp_path / "fake" / "distributed"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no distributed here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "devalloc", "demo", "--workers", "2"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "pip install 'devalloc[distributed]'" in proc.stderr
    assert "no distributed here" in proc.stderr
