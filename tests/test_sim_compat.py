"""devalloc.sim.compat: every numba-cuda internal devalloc reads is checked.

The installed numba-cuda passes, on the simulator and on the real CUDA target
(a subprocess without the simulator, as in tests/test_compile.py); an
internal taken away is reported with the installed version, what moved and
what in devalloc reads it.
"""

import contextlib
import json
import os
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest
from numba import cuda
from numba.cuda.simulator import kernel, kernelapi

import devalloc
from devalloc.sim import compat

ROOT = Path(__file__).resolve().parents[1]
VERSION = metadata.version("numba-cuda")


def test_installed_numba_cuda_passes_on_the_simulator():
    devalloc.Heap  # the shim is installed: its locks are what is checked
    assert compat.problems() == []
    compat.check()


def test_real_target_internals_are_checked_apart():
    with pytest.raises(ValueError, match="only the simulator's needs"):
        compat.problems(simulator=False)


def _method_in_kernelapi(source, name):
    # A function defined as if in kernelapi (its globals, its __module__).
    ns = dict(vars(kernelapi))
    exec(source, ns)
    return ns[name]


def _without_block_dim(monkeypatch):
    init = kernel.BlockManager.__init__

    def renamed(self, *args):
        init(self, *args)
        self._shape = self.__dict__.pop("_block_dim")

    monkeypatch.setattr(kernel.BlockManager, "__init__", renamed)


def _without_thread_id(monkeypatch):
    init = kernel.BlockThread.__init__

    def renamed(self, *args):
        init(self, *args)
        self.tid = self.__dict__.pop("thread_id")

    monkeypatch.setattr(kernel.BlockThread, "__init__", renamed)


@contextlib.contextmanager
def _plain_swap(fn, fake):
    # numba-cuda 0.24's swap: the first thread to leave restores the real cuda.
    globs = fn.__globals__
    orig = {k: v for k, v in globs.items() if v is cuda}
    globs.update({k: fake for k in orig})
    try:
        yield
    finally:
        globs.update(orig)


MOVES = {
    "lock": (lambda mp: mp.delattr(kernelapi, "caslock"),
             "kernelapi has no lock(s) ['caslock']", "the simulator shim"),
    "new_lock": (lambda mp: mp.setattr(kernelapi.FakeCUDAAtomic, "add", _method_in_kernelapi(
        "def add(self, array, index, val):\n    with newaddlock:\n        pass\n", "add")),
        "FakeCUDAAtomic.add takes lock(s) ['newaddlock']", "the simulator shim"),
    "atomic_method": (lambda mp: mp.delattr(kernelapi.FakeCUDAAtomic, "exch"),
                      "FakeCUDAAtomic has no method exch", "count_atomics"),
    "cas_arguments": (lambda mp: mp.setattr(kernelapi.FakeCUDAAtomic, "cas",
                                            lambda self, array, index, val, old: 0),
                      "expected value 'old' is not argument 2",
                      "count_atomics"),
    "block_dim": (_without_block_dim, "_block_dim", "the simulator's warp groups"),
    "thread_id": (_without_thread_id, "BlockThread.thread_id is not the linear thread index",
                  "the simulator's warp groups"),
    "swap": (lambda mp: mp.setattr(kernelapi, "swapped_cuda_module", _plain_swap),
             "gives a module its real cuda back while another thread still runs",
             "every device function"),
    "kernel_context": (lambda mp: mp.delattr(kernel, "_kernel_context"),
                       "numba.cuda.simulator.kernel has no _kernel_context",
                       "devalloc.sim.launch"),
    "device_array": (lambda mp: mp.delattr(cuda.devicearray, "FakeCUDAArray"),
                     "numba.cuda.devicearray.FakeCUDAArray is gone", "Heap(memory=...)"),
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_moved_internal_is_named(monkeypatch, move):
    take_away, what, reader = MOVES[move]
    devalloc.Heap
    take_away(monkeypatch)
    with pytest.raises(compat.NumbaCudaMismatch) as e:
        compat.check()
    message = str(e.value)
    assert f"numba-cuda {VERSION}" in message
    assert what in message and f"read by {reader}" in message, message
    assert len(e.value.problems) == 1, e.value.problems
    assert isinstance(e.value, ImportError) and isinstance(e.value, devalloc.DevallocError)


def test_reads_global_tells_a_global_from_an_attribute():
    mod = types.ModuleType("fake_compiler")
    exec("def by_name():\n    return get_current_device()\n"
         "def by_attribute(api):\n    return api.get_current_device()\n", vars(mod))
    assert compat.reads_global(mod, "get_current_device")
    del mod.by_name
    assert not compat.reads_global(mod, "get_current_device")


REAL_TARGET = """
import json
from devalloc.sim import compat
compat.check()
before = compat.problems()
import numba.cuda.compiler as c
del c.get_current_device
print(json.dumps([before, compat.problems()]))
"""


def test_real_target_internals_pass_and_a_moved_one_is_named():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", REAL_TARGET], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert before == []
    assert after == ["get_current_device in numba.cuda.dispatcher and numba.cuda.compiler: "
                     "numba.cuda.compiler has no get_current_device "
                     "(read by aot.compile_ptx: compiling without a GPU)"]


def test_the_dependency_range_starts_where_testing_starts():
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in ("cu12", "cu13", "test")
             for r in project["optional-dependencies"][extra]]
    ranges = {str(r.specifier) for r in reqs if r.name == "numba-cuda"}
    assert len(ranges) == 1, ranges  # one range, in the dependencies and every extra
    (spec,) = [r.specifier for r in reqs if r.name == "numba-cuda"][:1]
    assert spec.contains(compat.TESTED[0]) and spec.contains(compat.TESTED[1])
    assert not spec.contains("0.24.0")  # the newest release that fails (README)


FIRST_USE = """
import sys
from numba.cuda.simulator import kernel
del kernel.BlockManager.run  # as if numba-cuda ran a block's threads some other way
import devalloc
from devalloc.sim.compat import NumbaCudaMismatch
try:
    devalloc.Heap
except NumbaCudaMismatch as e:
    print(e.problems)
    sys.exit(3)
"""


def test_first_use_of_devalloc_checks_numba_cuda():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-c", FIRST_USE], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert "BlockManager.run no longer runs a block's threads as BlockThreads" in proc.stdout
