"""Check that the numba-cuda internals devalloc reads are where it expects them.

devalloc reads a few things numba-cuda does not document: on the CUDA
simulator, the atomic locks and atomic methods (the one-lock shim and
``count_atomics``), the attributes of a block's threads (the warp
rendezvous), the swap of a module's ``cuda`` for the simulator's while any
thread runs a device function of it, the kernel call and the launch's
simulated module (the fast launches of :mod:`.launch`), its device array class
(``Heap(memory=...)``) and device functions' ``py_func`` (the interleaving
explorer); on the real CUDA target, the name through which the compiler
asks for the current device (:func:`devalloc.tools.aot.assume_device`) and the
driver's memset. Each is one
:class:`Need` in :data:`NEEDS`, with what reads it and a probe that says what
moved. :func:`check` runs the probes for the target in use and raises
:class:`NumbaCudaMismatch` naming the installed numba-cuda and every need
that failed, instead of a wrong count or a hang deep inside a kernel launch.

The probes construct objects and read attributes and code; they launch no
kernel and start no thread.
"""

import dis
import importlib
import inspect
import threading
import types
from dataclasses import dataclass
from importlib import metadata
from typing import Callable

from ..errors import DevallocError

#: The numba-cuda releases devalloc's tests have passed with (docs/guide.md, "Versions, drivers and the public API").
TESTED = ("0.28.0", "0.30.4")


class NumbaCudaMismatch(DevallocError, ImportError):
    """The installed numba-cuda lacks an internal devalloc reads.

    ``problems`` lists one line per need that failed: what moved, and what
    in devalloc reads it.
    """

    def __init__(self, message, problems):
        super().__init__(message)
        self.problems = problems


@dataclass(frozen=True)
class Need:
    """One numba-cuda internal devalloc reads."""

    #: What is read, spelled as numba-cuda spells it.
    what: str
    #: What in devalloc reads it, and what for.
    reader: str
    #: "simulator", "gpu" (the real CUDA target) or "both".
    target: str
    #: Returns what is wrong (empty when the need is met); may raise.
    probe: Callable[[], list[str]]


def _shim_names():
    # The lock names the simulator shim replaces, the atomic kinds
    # count_atomics wraps, and where each cas kind takes its expected value.
    from . import LOCK_NAMES
    from .atomics import ATOMIC_KINDS, EXPECTED_ARG

    return LOCK_NAMES, ATOMIC_KINDS, EXPECTED_ARG


def _kernelapi():
    return importlib.import_module("numba.cuda.simulator.kernelapi")


def _globals_read(code):
    # Global names that ``code``, or a function nested in it, loads.
    names = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_read(const)
    return names


def _functions(namespace):
    # The plain functions of a module or class namespace, unwrapping
    # static/class methods and properties.
    for value in namespace.values():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            yield from (f for f in (value.fget, value.fset) if f is not None)
        elif isinstance(value, types.FunctionType):
            yield value


def reads_global(module, name):
    """Return True when a function or method defined in ``module`` loads global ``name``."""
    funcs = list(_functions(vars(module)))
    for cls in vars(module).values():
        if isinstance(cls, type) and cls.__module__ == module.__name__:
            funcs.extend(_functions(vars(cls)))
    return any(name in _globals_read(f.__code__)
               for f in funcs if f.__module__ == module.__name__)


def _lock_names_read(method):
    # Global names ending in "lock" that ``method`` takes.
    return {n for n in _globals_read(method.__code__) if n.endswith("lock")}


def _probe_atomic_locks():
    lock_names = set(_shim_names()[0])
    api = _kernelapi()
    problems = []
    missing = sorted(n for n in lock_names if not hasattr(api, n))
    if missing:
        problems.append(f"kernelapi has no lock(s) {missing}")
    atomic = getattr(api, "FakeCUDAAtomic", None)
    if atomic is None:
        return problems + ["kernelapi has no FakeCUDAAtomic"]
    for name, method in sorted(vars(atomic).items()):
        if (name.startswith("_") or not isinstance(method, types.FunctionType)
                or method.__module__ != api.__name__):  # count_atomics' wrappers
            continue
        read = _lock_names_read(method)
        if not read:
            problems.append(f"FakeCUDAAtomic.{name} takes no module lock by name "
                            "(the shim cannot make it atomic with the other kinds)")
        elif read - lock_names:
            problems.append(f"FakeCUDAAtomic.{name} takes lock(s) "
                            f"{sorted(read - lock_names)}, which the shim "
                            "does not know")
    return problems


def _probe_atomic_methods():
    _, kinds, expected_arg = _shim_names()
    atomic = getattr(_kernelapi(), "FakeCUDAAtomic", None)
    if atomic is None:
        return ["kernelapi has no FakeCUDAAtomic"]
    problems = []
    for kind in kinds:
        method = getattr(atomic, kind, None)
        if not callable(method):
            problems.append(f"FakeCUDAAtomic has no method {kind}")
            continue
        at = expected_arg.get(kind)
        if at is None:
            continue
        params = list(inspect.signature(method).parameters)[1:]  # after self
        if len(params) <= at or params[at] != "old":
            problems.append(f"FakeCUDAAtomic.{kind}{tuple(params)}: expected value "
                            f"'old' is not argument {at}")
    return problems


def _probe_block_threads():
    kernel = importlib.import_module("numba.cuda.simulator.kernel")
    problems = []
    run = getattr(getattr(kernel, "BlockManager", None), "run", None)
    if run is None or "BlockThread" not in _globals_read(run.__code__):
        problems.append("BlockManager.run no longer runs a block's threads as BlockThreads")
    block = (4, 2, 1)
    manager = kernel.BlockManager(None, (1, 1, 1), block, False)
    thread = kernel.BlockThread(lambda: None, manager, (0, 0, 0), (1, 1, 0), False)
    if getattr(thread, "_manager", None) is not manager:
        problems.append("BlockThread has no _manager (its BlockManager)")
    if getattr(thread, "thread_id", None) != 5:
        problems.append("BlockThread.thread_id is not the linear thread index "
                        f"(thread (1, 1, 0) of a {block} block: "
                        f"{getattr(thread, 'thread_id', 'missing')}, expected 5)")
    if tuple(getattr(manager, "_block_dim", ())) != block:
        problems.append("BlockManager has no _block_dim (the block's shape)")
    return problems


def _probe_swap():
    # Two simulated threads in one device function: the first to leave must
    # not give the function's module back its real ``cuda`` while the other
    # still runs (a plain swap-and-restore did, before numba-cuda 0.26).
    from numba import cuda

    swapped = _kernelapi().swapped_cuda_module
    fake = object()
    globs = {"__name__": "devalloc_swap_probe", "cuda": cuda}
    fn = types.FunctionType(compile("def f(): return cuda", "<probe>", "exec").co_consts[0], globs)
    first, second = swapped(fn, fake), swapped(fn, fake)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    still = globs["cuda"] is fake
    second.__exit__(None, None, None)
    problems = []
    if not still:
        problems.append("swapped_cuda_module gives a module its real cuda back while "
                        "another thread still runs a function of it")
    if globs["cuda"] is not cuda:
        problems.append("swapped_cuda_module does not restore cuda when the last thread leaves")
    return problems


def _probe_launch():
    # What devalloc.sim.launch wraps and reads: the kernel call, the launch's
    # simulated module, and the per-call swap it replaces inside a launch.
    kernel = importlib.import_module("numba.cuda.simulator.kernel")
    problems = []
    cls = getattr(kernel, "FakeCUDAKernel", None)
    if cls is None:
        return ["numba.cuda.simulator.kernel has no FakeCUDAKernel"]
    call = getattr(cls.__call__, "__wrapped__", cls.__call__)
    read = _globals_read(call.__code__)
    for name in ("swapped_cuda_module", "_kernel_context", "_push_kernel_context"):
        if name not in read:
            problems.append(f"FakeCUDAKernel.__call__ no longer reads {name}")
    if not hasattr(kernel, "_kernel_context"):
        problems.append("numba.cuda.simulator.kernel has no _kernel_context "
                        "(the launch's simulated cuda module)")
    k = cls(lambda: None, device=True)
    for attr in ("fn", "_device"):
        if not hasattr(k, attr):
            problems.append(f"FakeCUDAKernel has no {attr}")
    return problems


def _probe_device_array():
    import numpy as np
    from numba import cuda

    cls = getattr(getattr(cuda, "devicearray", None), "FakeCUDAArray", None)
    if cls is None:
        return ["numba.cuda.devicearray.FakeCUDAArray is gone"]
    arr = cuda.device_array(2, np.uint8)
    if not isinstance(arr, cls):
        return [f"cuda.device_array makes a {type(arr).__name__}, not a FakeCUDAArray"]
    if not isinstance(getattr(arr, "_ary", None), np.ndarray):
        return ["FakeCUDAArray no longer keeps its NumPy array as _ary"]
    return []


def _probe_py_func():
    from numba import cuda

    def f():
        return 0

    if getattr(cuda.jit(device=True)(f), "py_func", None) is not f:
        return ["a simulated device function has no py_func (its Python function)"]
    return []


def _probe_as_dtype():
    from numba.np import numpy_support

    return [] if callable(getattr(numpy_support, "as_dtype", None)) else [
        "numba.np.numpy_support.as_dtype is gone"]


def _probe_current_device():
    problems = []
    for name in ("numba.cuda.dispatcher", "numba.cuda.compiler"):
        module = importlib.import_module(name)
        if not callable(getattr(module, "get_current_device", None)):
            problems.append(f"{name} has no get_current_device")
        elif not reads_global(module, "get_current_device"):
            problems.append(f"{name} no longer calls get_current_device by that name "
                            "(patching it would not answer the compiler)")
    return problems


def _probe_shared():
    shared = getattr(_kernelapi(), "FakeCUDAShared", None)
    if shared is None or not callable(getattr(shared, "array", None)):
        return ["kernelapi has no FakeCUDAShared.array"]
    try:
        probe = shared(16)
    except TypeError as e:
        return [f"FakeCUDAShared(dynshared_size) fails: {e}"]
    missing = [n for n in ("_allocations", "_dynshared_size", "_dynshared")
               if not hasattr(probe, n)]
    return [f"FakeCUDAShared has no {', '.join(missing)}"] if missing else []


def _probe_memset():
    driver = importlib.import_module("numba.cuda.cudadrv.driver")
    return [] if callable(getattr(driver, "device_memset", None)) else [
        "numba.cuda.cudadrv.driver.device_memset is gone"]


def _probe_extending():
    ext = importlib.import_module("numba.cuda.extending")
    return [f"numba.cuda.extending has no {n}"
            for n in ("intrinsic", "overload", "register_jitable") if not hasattr(ext, n)]


NEEDS = (
    Need("numba.cuda.simulator.kernelapi: the atomic locks (addlock ... exchlock), "
         "taken by name by every FakeCUDAAtomic method",
         "the simulator shim: one lock for every atomic kind", "simulator",
         _probe_atomic_locks),
    Need("numba.cuda.simulator.kernelapi.FakeCUDAAtomic: add ... cas, compare_and_swap "
         "(expected value as 'old')",
         "count_atomics: atomics and lost cas counted", "simulator",
         _probe_atomic_methods),
    Need("numba.cuda.simulator.kernel: BlockThread._manager, BlockThread.thread_id, "
         "BlockManager._block_dim (threading.current_thread() in a kernel)",
         "the simulator's warp groups (a rendezvous of a warp's threads)", "simulator",
         _probe_block_threads),
    Need("numba.cuda.simulator.kernelapi.swapped_cuda_module: a module's cuda stays "
         "the simulator's while any thread runs a function of it",
         "every device function, run by a block's threads at once", "simulator",
         _probe_swap),
    Need("numba.cuda.simulator.kernel.FakeCUDAKernel.__call__ (fn, _device, "
         "swapped_cuda_module) and kernel._kernel_context",
         "devalloc.sim.launch: simulated launches without a convoy", "simulator",
         _probe_launch),
    Need("numba.cuda.simulator.kernelapi.FakeCUDAShared: array, _allocations (by "
         "calling line), _dynshared_size, _dynshared",
         "devalloc.sim.shared: one shared array per block and line", "simulator",
         _probe_shared),
    Need("numba.cuda.devicearray.FakeCUDAArray and its NumPy array _ary",
         "Heap(memory=...) on the simulator", "simulator",
         _probe_device_array),
    Need("py_func of a simulated device function",
         "the interleaving explorer (devalloc.testing)", "simulator",
         _probe_py_func),
    Need("numba.np.numpy_support.as_dtype (numba)",
         "view on the simulator: numba dtypes", "simulator", _probe_as_dtype),
    Need("get_current_device in numba.cuda.dispatcher and numba.cuda.compiler",
         "aot.compile_ptx: compiling without a GPU", "gpu",
         _probe_current_device),
    Need("numba.cuda.cudadrv.driver.device_memset",
         "Heap: zeroing the metadata, reset", "gpu", _probe_memset),
    Need("numba.cuda.extending: intrinsic, overload, register_jitable",
         "view, alloc, free and the layout arithmetic", "both", _probe_extending),
)


def _version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def numba_cuda_version():
    """Return the installed numba-cuda's (major, minor), or None if unknown."""
    parts = _version("numba-cuda").split(".")[:2]
    try:
        return tuple(int(p) for p in parts)
    except ValueError:  # not installed, or not a release number
        return None


def problems(simulator: bool | None = None) -> list[str]:
    """Return one line per need of ``simulator``'s target that is not met.

    ``simulator`` defaults to numba's ``ENABLE_CUDASIM``. The real target's
    needs can only be probed with the simulator off (numba then imports the
    real ``numba.cuda``): asking for them on the simulator raises ValueError.
    """
    from numba import config

    sim = bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]
    if simulator is None:
        simulator = sim
    if simulator != sim:
        raise ValueError(
            f"numba is running with NUMBA_ENABLE_CUDASIM={int(sim)}: only the "
            f"{'simulator' if sim else 'real CUDA target'}'s needs can be checked")
    target = "simulator" if simulator else "gpu"
    found: list[str] = []
    with _PROBE_LOCK:
        for need in NEEDS:
            if need.target not in (target, "both"):
                continue
            try:
                wrong = need.probe()
            except Exception as e:  # a probe that cannot even run: it moved
                wrong = [f"{type(e).__name__}: {e}"]
            found.extend(f"{need.what}: {w} (read by {need.reader})" for w in wrong)
    return found


def check(simulator: bool | None = None) -> None:
    """Raise :class:`NumbaCudaMismatch` unless every numba-cuda internal devalloc reads is there.

    Checks the needs of the simulator or of the real CUDA target, whichever
    numba runs (``simulator`` overrides; see :func:`problems`). The message
    names the installed numba-cuda and numba, every need that failed and the
    releases devalloc is tested with.
    """
    found = problems(simulator)
    if not found:
        return
    from .._version import __version__

    lines = "\n".join(f"  - {p}" for p in found)
    raise NumbaCudaMismatch(
        f"devalloc {__version__} cannot use numba-cuda {_version('numba-cuda')} "
        f"(numba {_version('numba')}): what it relies on there has moved or changed:\n"
        f"{lines}\n"
        f"devalloc is tested with numba-cuda {TESTED[0]} to {TESTED[1]}: "
        f"pip install 'numba-cuda>={TESTED[0]},<={TESTED[1]}'",
        found,
    )


#: NumPy names that numba-cuda (up to at least 0.30.4) reads when it first
#: compiles a kernel (``numba.cuda.np.arrayobj`` overloads them at import),
#: which a newer NumPy removed, and what each was an alias of. NumPy 2.5
#: dropped ``row_stack`` (deprecated in 2.0 as an alias of ``vstack``); with
#: it missing, every kernel compile on the real target fails with
#: ``AttributeError: module 'numpy' has no attribute 'row_stack'`` (seen on a
#: GPU machine with numba-cuda 0.30.4 and NumPy 2.5.2).
NUMPY_ALIASES = {"row_stack": "vstack"}


def restore_numpy_aliases() -> list[str]:
    """Put back the NumPy aliases numba-cuda reads and the installed NumPy dropped.

    Each restored name is the very function it was an alias of, so NumPy
    behaves as the release that still had it. Returns the names restored
    (empty with a NumPy that has them all). Called before numba-cuda
    compiles anything (``devalloc``'s first use, :func:`devalloc.target.choose`).
    """
    import numpy as np

    restored = []
    for old, new in NUMPY_ALIASES.items():
        if not hasattr(np, old) and hasattr(np, new):
            setattr(np, old, getattr(np, new))
            restored.append(old)
    return restored

# One check at a time: the probes read module state the shim also changes.
_PROBE_LOCK = threading.Lock()
