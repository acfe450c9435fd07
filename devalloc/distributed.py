"""Dask: one devalloc heap per worker, and Monte-Carlo sharded over workers.

Install with ``pip install 'devalloc[distributed]'`` (dask and distributed;
on GPU nodes also dask-cuda, whose ``LocalCUDACluster`` starts one worker per
GPU, each pinned to its GPU with CUDA_VISIBLE_DEVICES)::

    from distributed import Client
    from devalloc import distributed as dd

    client = Client(cluster_or_scheduler_address)
    dd.attach(client, 256 << 20)        # every worker, present and future

    def task(lo, hi):                   # runs on a worker
        heap = dd.worker_heap()         # this worker's heap, kept across tasks
        heap.reset()
        ...launch kernels with heap.ctx...

    client.gather(client.map(task, ...))
    print(format_worker_usage(dd.usage(client)))   # devalloc.report

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
"""

import threading

try:
    from distributed import WorkerPlugin, get_worker
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "devalloc.distributed needs dask and distributed: "
        "pip install 'devalloc[distributed]'"
    ) from e

from .errors import WorkerHeapError

__all__ = ["HeapPlugin", "PLUGIN_NAME", "WorkerHeapError", "attach", "detach",
           "grow_worker_heap", "usage", "worker_heap"]

#: The name the heap plugin is registered under on every worker.
PLUGIN_NAME = "devalloc-heap"

#: Keyword arguments of ``Heap`` that make sense on another process.
_HEAP_KWARGS = ("debug", "device")


class HeapPlugin(WorkerPlugin):
    """Give a worker one :class:`devalloc.Heap`: made at setup, closed at teardown.

    Registered by :func:`attach`. The plugin is pickled once and unpickled
    on every worker, so each worker's copy holds that worker's heap.
    """

    name = PLUGIN_NAME

    def __init__(self, capacity, debug=False, device=None):
        self.capacity = capacity
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
        from . import target

        self.target = target.choose()
        import devalloc  # its first public name installs the simulator's atomic shim

        self.lock = threading.RLock()
        self.heap = devalloc.Heap(self.capacity, debug=self.debug, device=self.device)

    def teardown(self, worker):
        """Close the heap (its device memory is freed)."""
        if self.heap is not None:
            self.heap.close()


def attach(client, capacity, **heap_kwargs):
    """Give every worker of ``client``'s cluster, present and future, one heap.

    ``capacity`` is each worker's heap capacity in bytes; ``heap_kwargs``
    may be ``debug=`` and ``device=`` (default: the worker's current device,
    its own GPU under dask-cuda). Calling it again replaces every worker's
    heap (the old ones are closed). Raises TypeError or ValueError for a bad
    capacity or keyword before anything is registered.
    """
    from .host import check_capacity

    capacity = check_capacity(capacity)
    unknown = sorted(set(heap_kwargs) - set(_HEAP_KWARGS))
    if unknown:
        raise TypeError(
            f"attach() got {', '.join(unknown)}: a worker's heap takes only "
            f"{' and '.join(_HEAP_KWARGS)} (stream= and memory= are objects of one "
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
            "devalloc.distributed.attach(client, capacity) first"
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
    heap. ``devalloc.report.format_worker_usage`` prints the result as one
    table with a total row.
    """
    return dict(sorted(client.run(_usage_here).items()))
