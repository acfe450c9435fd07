"""devalloc.distributed on a local Dask cluster of 2 worker processes (simulator).

The workers are spawned processes: they inherit NUMBA_ENABLE_CUDASIM=1 from
tests/conftest.py and import this module to run its task functions, so
every kernel a task launches is defined here at module level.
"""

import distributed  # in the [test] extra
import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import distributed as dd
from devalloc import layout as L
from devalloc.errors import DevallocError, WorkerHeapError

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
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture
def attached(client):
    dd.attach(client, CAPACITY)
    yield client
    dd.detach(client)


def workers(client):
    return sorted(client.scheduler_info()["workers"])


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


# ----------------------------------------------------------------- tests
def test_worker_heap_outside_a_worker_says_where_it_works():
    with pytest.raises(WorkerHeapError, match="inside a task running on a Dask worker"):
        dd.worker_heap()
    with pytest.raises(WorkerHeapError, match="inside a task"):
        dd.grow_worker_heap()
    assert issubclass(WorkerHeapError, DevallocError)


def test_workers_run_on_the_simulator(client):
    assert set(client.run(simulated).values()) == {True}


def test_before_attach_a_task_is_told_to_attach(client):
    with pytest.raises(WorkerHeapError, match=r"has no devalloc heap; call devalloc\.distributed\.attach"):
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
    ({"stream": 0}, TypeError, "takes only debug and device"),
    ({"memory": None}, TypeError, "cannot be sent to workers"),
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
