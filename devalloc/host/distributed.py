"""Dask: one devalloc heap per worker, and Monte-Carlo sharded over workers.

Install with ``pip install 'devalloc[distributed]'`` (dask and distributed;
on GPU nodes also dask-cuda, whose ``LocalCUDACluster`` starts one worker per
GPU, each pinned to its GPU with CUDA_VISIBLE_DEVICES)::

    from distributed import Client
    from devalloc.host import distributed as dd

    client = Client(cluster_or_scheduler_address)
    dd.attach(client, 256 << 20)        # every worker, present and future

    def task(lo, hi):                   # runs on a worker
        heap = dd.worker_heap()         # this worker's heap, kept across tasks
        heap.reset()
        ...launch kernels with heap.ctx...

    client.gather(client.map(task, ...))
    print(format_worker_usage(dd.usage(client)))   # devalloc.host.report

A heap belongs to one worker: blocks are never shared between workers, and
each worker holds its whole capacity. Run one task at a time per worker
(``threads_per_worker=1``, dask-cuda's default): ``reset``, ``run`` and
``grow_worker_heap`` assume nobody else uses the heap meanwhile.

**Kernels that a task launches must be defined at module level** of a module
the workers can import. On the CUDA simulator a kernel reaches the simulated
``cuda`` through its function's globals, which the simulator swaps; a kernel
defined (closed over) inside a task function does not get it and fails on
the workers. Functions from importable modules are also sent to workers by
reference, not by value.

Workers choose the GPU or the simulator for themselves when the heap is made
(:func:`devalloc.target.choose`, which keeps an explicit
NUMBA_ENABLE_CUDASIM); for a local cluster on the simulator, set
``NUMBA_ENABLE_CUDASIM=1`` in the environment before the cluster starts.

The second half runs the examples sharded (``python -m devalloc demo
--workers N``): :func:`split` cuts the threads into ranges, :func:`run_shard`
runs one range of any example on a worker's heap (the example's
``simulate``, with RNG states chosen by global thread index), and
:func:`run_sharded` joins the shards in thread order and computes the
example's result from them: the answer one process gives for the seed.
"""

import threading
from dataclasses import dataclass

try:
    from distributed import WorkerPlugin, get_worker
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "devalloc.host.distributed needs dask and distributed: "
        "pip install 'devalloc[distributed]'"
    ) from e

from ..errors import HeapExhausted, WorkerHeapError

__all__ = ["DEMO_CAPACITY", "HeapPlugin", "PLUGIN_NAME", "ShardedRun", "WorkerHeapError",
           "attach", "detach", "grow_worker_heap", "run_demo", "run_shard", "run_sharded",
           "split", "usage", "worker_heap"]

#: The name the heap plugin is registered under on every worker.
PLUGIN_NAME = "devalloc-heap"

#: Keyword arguments of ``Heap`` that make sense on another process.
_HEAP_KWARGS = ("debug", "device", "page", "outline")


class HeapPlugin(WorkerPlugin):
    """Give a worker one :class:`devalloc.Heap`: made at setup, closed at teardown.

    Registered by :func:`attach`. The plugin is pickled once and unpickled
    on every worker, so each worker's copy holds that worker's heap.
    """

    name = PLUGIN_NAME

    def __init__(self, capacity, debug=False, device=None, page=None, outline=None):
        self.capacity = capacity
        self.page = page
        self.outline = outline
        self.debug = debug
        self.device = device
        self.heap = None
        self.target = None
        self.lock = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(heap=None, lock=None, target=None)  # a heap stays on its worker
        return state

    def setup(self, worker):
        """Choose GPU or simulator (before numba is imported) and make the heap."""
        from .. import target

        self.target = target.choose()
        import devalloc  # its first public name installs the simulator's atomic shim

        self.lock = threading.RLock()
        self.heap = devalloc.Heap(self.capacity, debug=self.debug, device=self.device,
                                  page=self.page, outline=getattr(self, "outline", None))

    def teardown(self, worker):
        """Close the heap (its device memory is freed)."""
        if self.heap is not None:
            self.heap.close()


def attach(client, capacity, **heap_kwargs):
    """Give every worker of ``client``'s cluster, present and future, one heap.

    ``capacity`` is each worker's heap capacity in bytes; ``heap_kwargs``
    may be ``debug=``, ``page=``, ``outline=`` (None, the default: each
    worker's process default, its ``DEVALLOC_OUTLINE``) and ``device=``
    (default: the worker's current device,
    its own GPU under dask-cuda; with ``device=N`` tasks must launch their
    kernels under ``with cuda.gpus[N]``). Calling it again replaces every worker's
    heap (the old ones are closed). Raises TypeError or ValueError for a bad
    capacity or keyword before anything is registered.
    """
    from .capacity import check_capacity

    from .capacity import check_page
    from ..ctx import outline_option

    ps = check_page(heap_kwargs.get("page"), capacity)
    outline_option(heap_kwargs.get("outline"))  # None, True, False or "auto" (None: the worker's default)
    capacity = check_capacity(capacity, ps=ps)
    unknown = sorted(set(heap_kwargs) - set(_HEAP_KWARGS))
    if unknown:
        raise TypeError(
            f"attach() got {', '.join(unknown)}: a worker's heap takes only "
            f"{', '.join(_HEAP_KWARGS)} (stream= and memory= are objects of one "
            "process and cannot be sent to workers)"
        )
    client.register_plugin(HeapPlugin(capacity, **heap_kwargs), name=PLUGIN_NAME)


def detach(client):
    """Remove the heap plugin from every worker: each closes its heap."""
    client.unregister_worker_plugin(PLUGIN_NAME)


def _plugin_of(worker, what):
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None or plugin.heap is None:
        raise WorkerHeapError(
            f"{what}: worker {worker.address} has no devalloc heap; call "
            "devalloc.host.distributed.attach(client, capacity) first"
        )
    return plugin


def _this_plugin(what):
    try:
        worker = get_worker()
    except ValueError:
        raise WorkerHeapError(
            f"{what} works only inside a task running on a Dask worker (a function "
            "given to client.submit or client.map); no worker is running this code"
        ) from None
    return _plugin_of(worker, what)


def worker_heap():
    """Return the heap of the worker running this task.

    The same :class:`devalloc.Heap` for every task on that worker until it
    is grown or the plugin is replaced. ``heap.run(kernel, grid, block,
    heap, ..., ceiling=...)`` grows it in place when allocations fail, and
    the new capacity stays for later tasks on that worker. Raises
    :class:`WorkerHeapError` outside a task or before :func:`attach`.
    """
    return _this_plugin("worker_heap()").heap


def grow_worker_heap(capacity=None):
    """Make this worker's heap at least ``capacity`` bytes; return the heap.

    For tasks whose kernels reported failed allocations
    (``usage().failed``) and are not a single re-runnable launch for
    :meth:`Heap.run`: grow, then redo the work. ``capacity`` defaults to
    twice the current one. A heap already that large is left alone (another
    task may have grown it); otherwise it is resized, which **discards its
    contents** and changes ``heap.ctx``. The new capacity stays for later
    tasks on this worker.
    """
    plugin = _this_plugin("grow_worker_heap()")
    with plugin.lock:
        heap = plugin.heap
        want = 2 * heap.requested if capacity is None else capacity
        if want > heap.requested:
            heap.resize(want)
        return heap


def _usage_here(dask_worker):
    return _plugin_of(dask_worker, "usage()").heap.usage()


def usage(client):
    """Return ``{worker address: Usage}`` of every worker's heap, by address.

    Synchronizes each worker's heap stream (call it between runs, not while
    tasks launch kernels). Raises :class:`WorkerHeapError` if a worker has no
    heap. ``devalloc.host.report.format_worker_usage`` prints the result as one
    table with a total row.
    """
    return dict(sorted(client.run(_usage_here).items()))


# ------------------------------------------------------- the sharded demo
def split(threads, shards):
    """Return ``shards`` ranges ``(start, count)`` covering ``threads`` threads in order.

    Counts differ by one at most; there are no empty shards (fewer shards
    than asked when there are fewer threads).
    """
    shards = max(1, min(shards, threads))
    size, extra = divmod(threads, shards)
    out, start = [], 0
    for k in range(shards):
        count = size + (k < extra)
        out.append((start, count))
        start += count
    return out


def run_shard(example, start, threads, seed, block=64, max_growths=8):
    """Task: run threads ``start .. start + threads - 1`` of ``example`` on this worker's heap.

    The example's ``simulate`` runs with RNG states chosen by global thread
    index (``Runner(start=...)``), so every thread draws what it draws in a
    single process with ``seed``. The heap is reset first; if allocations
    failed, it is grown (:func:`grow_worker_heap`, kept for later tasks) and
    the shard run again, up to ``max_growths`` times (then
    :class:`HeapExhausted`). ``block`` is the launch's block size (it does
    not change the answer). Returns the example's ``Shard``, naming the
    worker that ran it.
    """
    heap = worker_heap()
    from .. import _examples

    module = _examples.load(example)
    lc = _examples.load("_mc").Runner(threads, seed, block, start=start)
    for attempt in range(max_growths + 1):
        heap.reset()
        shard = module.simulate(lc, heap)
        if not shard.failed():
            shard.worker = get_worker().address
            return shard
        if attempt < max_growths:
            heap = grow_worker_heap()
    raise HeapExhausted(
        f"{shard.failed()} allocation(s) of {example} threads {start}..{start + threads - 1} "
        f"still failed with a heap of {heap.requested} bytes after {max_growths} growths",
        shard.usages["end"], max_growths + 1)


def run_sharded(client, example, threads, seed, shards=None, block=64):
    """Run ``example`` on ``client``'s workers in shards; return ``(result, shards)``.

    ``shards`` defaults to one per worker; shard ``k`` is asked of worker
    ``k`` (by address, round robin) loosely: another worker runs it if that
    one is gone, or if Dask's work stealing moves it to an idle worker.
    The shards' outputs are joined in thread order and the example's
    ``result`` computed from them: the answer of a single process with the
    same ``seed``. The result's usage figures add up the shards' heaps
    (``devalloc.host.stats.total_usage``). Needs :func:`attach` first; kernels
    are the example modules', which workers import (``devalloc.examples``).
    """
    from .. import _examples

    module = _examples.load(example)  # here too: the shards come back as its types
    ws = sorted(client.nthreads())
    futures = [client.submit(run_shard, example, start, count, seed, block, pure=False,
                             workers=[ws[k % len(ws)]], allow_other_workers=True)
               for k, (start, count) in enumerate(split(threads, shards or len(ws)))]
    parts = client.gather(futures)
    return module.result(_examples.load("_mc").combine(parts)), parts


#: Each worker's heap in ``python -m devalloc demo --workers``; a shard that
#: needs more grows its worker's heap.
DEMO_CAPACITY = 2 << 20


def _target_here(dask_worker):
    return _plugin_of(dask_worker, "run_demo()").target


@dataclass
class ShardedRun:
    """Where a sharded demo ran: the shards, their workers, each worker's heap."""

    scheduler: str
    #: ``(start, threads, worker address)`` of every shard, in thread order.
    shards: list
    #: Worker address -> its heap's Usage after its last shard.
    workers: dict
    #: Worker address -> "gpu" or "simulator".
    targets: dict

    def target(self):
        """Return where the workers ran ("gpu", "simulator", or both joined by '+')."""
        return "+".join(sorted(set(self.targets.values())))

    def to_dict(self):
        """Return the run as JSON data (the demo's ``distributed`` key)."""
        return {
            "scheduler": self.scheduler,
            "shards": [{"start": a, "threads": n, "worker": w} for a, n, w in self.shards],
            "workers": {w: u.to_dict() for w, u in self.workers.items()},
            "targets": dict(self.targets),
        }

    def report(self):
        """Return the lines the demo's text report adds."""
        from .report import format_worker_usage

        return [
            f"{len(self.shards)} shards on {len(self.workers)} workers (scheduler "
            f"{self.scheduler}); the heap figures above add up the shards' heaps",
            *(f"  threads {a}..{a + n - 1} on {w}" for a, n, w in self.shards),
            "",
            format_worker_usage(self.workers, "heap usage per worker (after its last shard)"),
        ]


def run_demo(example, threads, seed, *, workers=None, scheduler=None, progress=None):
    """Run the demo's ``example`` on Dask; return ``(result, ShardedRun)``.

    On a new local cluster of ``workers`` worker processes (one thread
    each), or on the running cluster at ``scheduler``: attach a heap of
    :data:`DEMO_CAPACITY` to every worker, run one shard per worker, read
    the workers' usage, and detach again (on a running cluster this replaces,
    then removes, any devalloc heap attached there). Call
    :func:`devalloc.target.choose` first: a local cluster's workers inherit
    its choice through the environment.
    """
    from distributed import Client, LocalCluster

    say = progress or (lambda msg: None)
    if scheduler is None:
        say(f"starting a local cluster of {workers} worker processes")
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    else:
        cluster = None
    try:
        with Client(cluster if cluster is not None else scheduler) as client:
            if cluster is not None:
                client.wait_for_workers(workers)
            attach(client, DEMO_CAPACITY)
            try:
                n = len(client.nthreads())
                say(f"{example}: {threads} threads in {n} shards on {n} workers")
                result, parts = run_sharded(client, example, threads, seed, shards=n)
                run = ShardedRun(
                    scheduler=client.scheduler.address,
                    shards=[(p.start, p.threads, p.worker) for p in parts],
                    workers=usage(client),
                    targets=dict(sorted(client.run(_target_here).items())))
            finally:
                detach(client)
    finally:
        if cluster is not None:
            cluster.close()
    return result, run
