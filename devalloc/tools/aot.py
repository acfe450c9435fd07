"""Ahead-of-time compilation of kernels that use devalloc, with or without a GPU.

``numba.cuda.compile_ptx`` compiles a kernel for a given compute capability
without a driver, but a kernel that calls an ordinary device function (such
as ``devalloc.alloc``) or an ``@overload`` makes Numba ask the *current
device* for its compute capability, which fails on a machine with no GPU or
driver. :func:`compile_ptx` installs a documented stand-in for that query,
answering with the requested ``cc``, for the duration of the compilation.

:func:`ptxas` and :func:`sass` assemble and disassemble the PTX with the
tools from the ``nvidia-cuda-nvcc`` and ``nvidia-cuda-nvdisasm`` wheels (the
system ``ptxas`` is usually older than the PTX that current NVVM emits) and
report registers, spill bytes and SASS instruction counts.
"""

import contextlib
import hashlib
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from numba import cuda


class _DeviceStandIn:
    """What Numba reads from the current device while compiling: its cc."""

    def __init__(self, cc):
        self.compute_capability = tuple(cc)


@contextlib.contextmanager
def assume_device(cc):
    """Make Numba's compiler see a current device of compute capability ``cc``.

    Patches ``get_current_device`` in the two numba-cuda modules that call
    it while compiling (``numba.cuda.dispatcher``, ``numba.cuda.compiler``)
    and restores them on exit. Only for compilation: nothing is launched.
    """
    from numba.cuda import compiler as _compiler
    from numba.cuda import dispatcher as _dispatcher

    stand_in = _DeviceStandIn(cc)
    saved = [(m, m.get_current_device) for m in (_dispatcher, _compiler)]
    try:
        for module, _ in saved:
            module.get_current_device = lambda: stand_in
        yield stand_in
    finally:
        for module, original in saved:
            module.get_current_device = original


def compile_ptx(pyfunc, sig, cc=(9, 0), **kwargs):
    """Compile kernel ``pyfunc`` for ``sig`` to PTX for compute capability ``cc``.

    Works without a GPU. Pass ``devalloc.ctx_type`` in ``sig`` for a heap
    context argument. Returns ``(ptx, resty)`` like ``numba.cuda.compile_ptx``.
    With ``$DEVALLOC_PTX_CACHE`` set, a compilation already made with the
    same sources is read from that folder (:data:`PTX_CACHE_ENV`).
    """
    from .. import _load

    _load()  # register alloc/free's overloads before Numba types the kernel
    func = getattr(pyfunc, "py_func", pyfunc)
    folder = os.environ.get(PTX_CACHE_ENV)
    key = _cache_key(func, sig, cc, kwargs) if folder else None
    if key is not None:
        hit = _cache_get(folder, key)
        if hit is not None:
            return hit
    with assume_device(cc):
        result = cuda.compile_ptx(func, sig, cc=tuple(cc), **kwargs)
    if key is not None:
        _cache_put(folder, key, result)
    return result


#: Environment variable naming a folder where :func:`compile_ptx` keeps what
#: it compiled, for every process that names the same folder. Unset: no
#: cache. The test session sets one of its own (tests/conftest.py), so that
#: a kernel compiled by several test files (in their subprocesses, on any
#: pytest-xdist worker) is compiled once per session.
PTX_CACHE_ENV = "DEVALLOC_PTX_CACHE"

_SOURCES = {}  # folder -> hash of its .py files, once per process


def _sources_hash(folder, recursive=False):
    folder = Path(folder)
    if folder not in _SOURCES:
        h = hashlib.sha256()
        for f in sorted(folder.rglob("*.py") if recursive else folder.glob("*.py")):
            h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes())
        _SOURCES[folder] = h.hexdigest()
    return _SOURCES[folder]


def _cache_key(func, sig, cc, kwargs):
    """Return the cache key of a compilation, or None when it must not be cached.

    The key covers what the PTX depends on: this Python environment (its
    numba, numba-cuda and NVVM), the process default of devalloc.device.outline
    (``DEVALLOC_OUTLINE``: ctxs of plain arrays follow it; a heap's ctx type
    names its own choice, in the signature), the compute capability, the signature and
    options, the kernel's name and code, and every source file of devalloc
    and of the kernel's folder (the device functions it may call). Kernels
    without a source file (typed at a prompt, ``python -c``) or closing
    over anything but plain constants are not cached.
    """
    import inspect

    from numba import __version__ as numba_version

    try:
        source = inspect.getsourcefile(func)
    except TypeError:
        return None
    if not source or not os.path.isfile(source):
        return None
    for cell in func.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            return None
        if not isinstance(value, (int, float, str, bytes, bool, type(None))):
            return None
    try:
        from importlib.metadata import version

        numba_cuda = version("numba-cuda")
    except Exception:
        return None
    from ..device import outline

    # outline.ENABLED (DEVALLOC_OUTLINE): the same sources compile to other PTX.
    parts = [sys.prefix, sys.version, numba_version, numba_cuda, f"outline={outline.ENABLED}",
             repr(tuple(cc)), repr(sig),
             repr(sorted(kwargs.items())), func.__module__, func.__qualname__,
             repr([c.cell_contents for c in func.__closure__ or ()]),
             _sources_hash(Path(__file__).parents[1], recursive=True),
             _sources_hash(Path(source).parent)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _cache_get(folder, key):
    try:
        with open(Path(folder) / f"{key}.pickle", "rb") as f:
            return pickle.load(f)
    except Exception:  # absent, half-written by no one (written whole), unreadable
        return None


def _cache_put(folder, key, result):
    # Written to a file of its own, then renamed: a reader sees all or nothing,
    # and two processes writing the same key write the same bytes.
    try:
        data = pickle.dumps(result)
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, Path(folder) / f"{key}.pickle")
    except Exception:  # an unpicklable type, a full disk: compile next time
        pass


def _wheel_bin(tool):
    """Return the path of ``tool`` from the NVIDIA wheels, or None."""
    for root in sys.path:
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_nvcc/bin", "nvidia/cu12/bin"):
            cand = Path(root) / sub / tool
            if cand.is_file():
                return str(cand)
    return None


def tool_path(tool):
    """Return the path of ``ptxas`` or ``nvdisasm``, preferring the wheels.

    ``DEVALLOC_PTXAS`` / ``DEVALLOC_NVDISASM`` override. A CUDA toolkit's
    copy is not taken on its own: it may be older than the PTX that NVVM
    writes (see :func:`toolkit_path`). Raises FileNotFoundError naming the
    wheel to install when the tool cannot be found.
    """
    env = os.environ.get("DEVALLOC_" + tool.upper())
    if env:
        return env
    found = _wheel_bin(tool)
    if found:
        return found
    wheel = "nvidia-cuda-nvcc" if tool == "ptxas" else "nvidia-cuda-nvdisasm"
    raise FileNotFoundError(
        f"{tool} not found: install the {wheel} wheel (pip install "
        f"'devalloc[test]') or set DEVALLOC_{tool.upper()}"
    )


def toolkit_path(tool):
    """Return a CUDA toolkit's ``tool`` (PATH, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``) or None.

    For machines with a toolkit and no wheels (GPU machines without a
    package registry): :mod:`devalloc.gpucheck` passes it as
    ``DEVALLOC_PTXAS`` / ``DEVALLOC_NVDISASM`` to the tests it runs there.
    """
    found = shutil.which(tool)
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if found or not home:
            continue
        candidate = os.path.join(home, "bin", tool)
        if os.access(candidate, os.X_OK):
            found = candidate
    return found


@dataclass(frozen=True)
class Resources:
    """What ``ptxas -v`` and ``nvdisasm`` say about one kernel."""

    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    sass_instructions: int
    sass_atomics: int
    #: ``MEMBAR.SC`` instructions: sequentially consistent fences
    #: (``fence.sc``, numba's ``cuda.threadfence()``), which also invalidate L1.
    sass_membar_sc: int = 0
    #: ``CALL`` instructions: out-of-line calls (the allocator's shared slow
    #: paths, devalloc.device.outline).
    sass_calls: int = 0

    @property
    def spill_bytes(self):
        return self.spill_stores + self.spill_loads


_REG = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_INSN = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", re.M)


def assemble(ptx, cc=(9, 0), max_registers=None):
    """Assemble ``ptx`` with ptxas -v and disassemble it; return :class:`Resources`.

    Counts SASS instructions, global/generic atomic instructions (ATOM,
    ATOMG, RED, REDG), ``CALL`` instructions and ``MEMBAR.SC`` fences of the
    kernel and the functions it calls. ``max_registers``: ptxas's
    ``-maxrregcount``, what ``@cuda.jit(max_registers=N)`` asks of the
    driver's assembler. The stack frame is the largest of any
    function's, spills are summed over them (ptxas reports each function
    it keeps out of line on its own). Raises RuntimeError with ptxas's
    message if assembly fails.
    """
    arch = f"sm_{cc[0]}{cc[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        out = Path(tmp) / "k.cubin"
        src.write_text(ptx)
        cap = [f"-maxrregcount={max_registers}"] if max_registers else []
        res = subprocess.run(
            [tool_path("ptxas"), "-v", f"-arch={arch}", *cap, str(src), "-o", str(out)],
            capture_output=True, text=True,
        )
        if res.returncode:
            raise RuntimeError(f"ptxas failed for {arch}:\n{res.stderr}")
        info = res.stderr
        dis = subprocess.run(
            [tool_path("nvdisasm"), "-c", str(out)], capture_output=True, text=True
        )
        if dis.returncode:
            raise RuntimeError(f"nvdisasm failed for {arch}:\n{dis.stderr}")
    regs = _REG.search(info)
    spills = [tuple(map(int, m.groups())) for m in _SPILL.finditer(info)]
    ops = [m.group(2) for m in _INSN.finditer(dis.stdout)]
    atomics = [o for o in ops if o.split(".")[0] in ("ATOM", "ATOMG", "RED", "REDG")]
    return Resources(
        arch=arch,
        registers=int(regs.group(1)) if regs else 0,
        stack_bytes=max((f[0] for f in spills), default=0),
        spill_stores=sum(f[1] for f in spills),
        spill_loads=sum(f[2] for f in spills),
        sass_instructions=len(ops),
        sass_atomics=len(atomics),
        sass_membar_sc=sum(o.startswith("MEMBAR.SC") for o in ops),
        sass_calls=sum(o.split(".")[0] == "CALL" for o in ops),
    )


def ptxas_seconds(ptx, cc=(9, 0)):
    """Return the CPU seconds ``ptxas`` takes to assemble ``ptx`` (a report figure).

    CPU (user + system) seconds of the ptxas process, not wall-clock: a
    figure that other work on the machine does not inflate.
    """
    import resource

    def children():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        t0 = children()
        subprocess.run([tool_path("ptxas"), f"-arch=sm_{cc[0]}{cc[1]}", str(src), "-o",
                        str(Path(tmp) / "k.cubin")], capture_output=True, check=True)
        return children() - t0
