"""The allocator's bodies compiled once: the disk cache (devalloc.device.bodycache) and its use.

The pure parts (folders, keys, entries, clearing) run here; the compile
checks run in subprocesses with the real CUDA target (no GPU needed): a
second process on a filled cache types none of the allocator and makes the
same code, a kernel of four sites reuses the bodies of one, and the
folder is keyed by devalloc's source, so that an edited tree never reads
another's bodies.
"""

import json
import os
import pickle
import warnings
from pathlib import Path

import pytest

import cuda_target
from devalloc import _version
from devalloc.device import bodycache


# ------------------------------------------------------------ where

def test_default_dir_follows_each_platforms_convention():
    home = Path("/home/u")
    assert bodycache.default_dir("linux", {}, home) == home / ".cache" / "devalloc"
    assert bodycache.default_dir("linux", {"XDG_CACHE_HOME": "/x"}, home) == Path("/x/devalloc")
    # a relative XDG_CACHE_HOME is ignored, as the XDG specification says
    assert bodycache.default_dir("linux", {"XDG_CACHE_HOME": "rel"}, home) == \
        home / ".cache" / "devalloc"
    assert bodycache.default_dir("darwin", {}, home) == home / "Library/Caches/devalloc"
    assert bodycache.default_dir("win32", {"LOCALAPPDATA": "C:/L"}, home) == \
        Path("C:/L/devalloc/Cache")
    assert bodycache.default_dir("win32", {}, home) == home / "AppData/Local/devalloc/Cache"


def test_cache_dir_is_the_environment_variable_when_set(tmp_path):
    assert bodycache.cache_dir({"DEVALLOC_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert bodycache.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "devalloc"


@pytest.mark.parametrize("value, on", [(None, True), ("1", True), ("0", False), ("off", False),
                                       ("False", False), ("no", False), ("yes", True),
                                       ("on", True), (" NO ", False)])
def test_the_disk_cache_is_on_unless_devalloc_cache_is_0(value, on):
    env = {} if value is None else {"DEVALLOC_CACHE": value}
    assert bodycache.enabled(env) is on


# ------------------------------------------------------------ keys

CHAIN = {"devalloc": "0.1.0", "source": "ab", "python": "3.11", "numba": "0.6",
         "numba-cuda": "0.30", "llvmlite": "0.5", "nvvm": "2.0", "nvvm-ir": "2.0.3",
         "format": "2"}


def test_every_part_of_the_toolchain_names_another_folder():
    name = bodycache.toolchain_key(CHAIN)
    assert name.startswith("0.1.0-") and len(name) == len("0.1.0-") + 32
    others = {bodycache.toolchain_key(dict(CHAIN, **{k: v + "x"})) for k, v in CHAIN.items()}
    assert len(others) == len(CHAIN) and name not in others
    # a version with characters a folder name should not hold
    assert "/" not in bodycache.toolchain_key(dict(CHAIN, devalloc="1.0/../x"))


def test_the_source_hash_covers_every_source_file():
    h = _version.source_hash()
    assert len(h) == 64 and h == _version.source_hash()  # computed once


# ------------------------------------------------------------ entries

def test_an_entry_is_read_back_and_others_are_misses(tmp_path):
    disk = bodycache.DiskCache(tmp_path, CHAIN)
    key = ("body", "alloc", (1, 2))
    assert disk.load(key) is None
    assert disk.store(key, {"texts": ["x" * 1000]}) is True
    assert disk.load(key) == {"texts": ["x" * 1000]}
    assert disk.load(("body", "alloc", (1, 3))) is None
    # compressed, and only the entry itself is left (no temporary file)
    files = list(disk.folder.iterdir())
    assert [f.name for f in files] == [disk.path(key).name] and files[0].stat().st_size < 200
    # another toolchain does not see it
    assert bodycache.DiskCache(tmp_path, dict(CHAIN, numba="0.7")).load(key) is None


def test_a_damaged_entry_is_a_miss_and_is_written_again(tmp_path):
    disk = bodycache.DiskCache(tmp_path, CHAIN)
    disk.store("k", 1)
    path = disk.path("k")
    path.write_bytes(path.read_bytes()[:10])  # truncated (a full disk)
    assert disk.load("k") is None
    path.write_bytes(b"not a cache entry")
    assert disk.load("k") is None
    # an entry whose file name collides with another key's holds that key
    import zlib
    path.write_bytes(zlib.compress(pickle.dumps((repr("other"), 2))))
    assert disk.load("k") is None
    assert disk.store("k", 3) and disk.load("k") == 3


def test_a_folder_that_cannot_be_written_warns_once_and_loses_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    disk = bodycache.DiskCache(blocker, CHAIN)
    with pytest.warns(RuntimeWarning, match="DEVALLOC_CACHE_DIR"):
        assert disk.store("k", 1) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert disk.store("k", 1) is False  # no second warning
    assert disk.load("k") is None and blocker.read_text().startswith("a file")


def test_a_full_cache_loses_its_least_recently_used_entries_first(tmp_path):
    import zlib

    size = len(zlib.compress(pickle.dumps((repr("k0"), os.urandom(1000)), protocol=5), 6))
    stale = bodycache.DiskCache(tmp_path, dict(CHAIN, source="old"), limit=10**9)
    stale.store("old", os.urandom(1000))  # a folder of another devalloc, used by nobody
    disk = bodycache.DiskCache(tmp_path, CHAIN, limit=10 * size + 64)
    for i in range(9):
        disk.store(f"k{i}", os.urandom(1000))
        os.utime(disk.path(f"k{i}"), (1000 + i, 1000 + i))  # k0 the oldest
    os.utime(stale.path("old"), (500, 500))
    assert disk.load("k0") is not None  # used now: the newest
    assert len(bodycache.entries(tmp_path)) == 10 and disk.trim() == 0  # at the bound
    disk.store("k9", os.urandom(1000))  # over it: trimmed to 3/4 of it
    left = bodycache.entries(tmp_path)
    assert sum(p.stat().st_size for p in left) <= 0.75 * disk.limit
    assert not stale.path("old").exists()  # the oldest went first
    assert disk.load("k0") is not None and disk.load("k9") is not None
    assert disk.load("k1") is None and disk.load("k2") is None  # then the least used
    assert stale.folder.is_dir()  # (a folder stays: another process may write into it)


@pytest.mark.parametrize("value, mb", [(None, bodycache.DEFAULT_MAX_MB), ("", bodycache.DEFAULT_MAX_MB),
                                       ("64", 64), (" 0.5 ", 0.5)])
def test_the_cache_bound_is_devalloc_cache_max_mb(value, mb):
    env = {} if value is None else {"DEVALLOC_CACHE_MAX_MB": value}
    assert bodycache.max_bytes(env) == int(mb * 2**20)


@pytest.mark.parametrize("value", ["0", "-3", "lots", "nan"])
def test_a_bound_that_is_not_a_positive_number_is_refused(value):
    with pytest.raises(ValueError, match=r"DEVALLOC_CACHE_MAX_MB=.*positive number of MiB"):
        bodycache.max_bytes({"DEVALLOC_CACHE_MAX_MB": value})


def test_clear_removes_devallocs_files_only(tmp_path):
    a = bodycache.DiskCache(tmp_path, CHAIN)
    b = bodycache.DiskCache(tmp_path, dict(CHAIN, source="cd"))
    for disk in (a, b):
        disk.store("k1", 1)
        disk.store("k2", 2)
    (a.folder / ".tmp-abandoned.body").write_bytes(b"")
    mine = tmp_path / "not-devallocs"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep")
    assert len(bodycache.entries(tmp_path)) == 4
    assert bodycache.clear(tmp_path) == 4
    assert bodycache.entries(tmp_path) == []
    assert not a.folder.exists() and not b.folder.exists()
    assert (mine / "keep.txt").read_text() == "keep"
    assert bodycache.clear(tmp_path / "absent") == 0


def test_the_cache_command_shows_and_clears(tmp_path, monkeypatch, capsys):
    import json

    from devalloc.__main__ import main

    monkeypatch.setenv("DEVALLOC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DEVALLOC_CACHE", "0")
    bodycache.DiskCache(tmp_path, CHAIN).store("k", "x" * 100)
    assert main(["cache", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["folder"] == str(tmp_path) and shown["entries"] == 1 and shown["removed"] == 0
    assert main(["cache", "--clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert bodycache.entries(tmp_path) == []
    assert main(["cache"]) == 0
    assert f"{tmp_path} (off: DEVALLOC_CACHE=0 is set): 0 entries" in capsys.readouterr().out
    monkeypatch.delenv("DEVALLOC_CACHE")  # (on: the default)
    assert main(["cache"]) == 0
    assert f"{tmp_path}: 0 entries" in capsys.readouterr().out


# ------------------------------------------------------------ compiled

#: The one-site kernel both compile scripts build on.
ONE_SITE = """
def one(ctx, counts, out):
    i = cuda.grid(1)
    a = devalloc.array(ctx, counts[i], float64)
    for j in range(a.size):
        a[j] = j
    devalloc.free_array(ctx, a)
    out[i] = a.size
"""

COMPILE = """
import json
from numba import cuda, float64, types
import devalloc
from devalloc.tools import aot
from devalloc.device import core
from devalloc import _version
from devalloc.device import bodycache
from numba.cuda.cudadrv import nvvm

nvvm_calls = []
plain_compile_ir = nvvm.compile_ir
nvvm.compile_ir = lambda *a, **k: (nvvm_calls.append(1), plain_compile_ir(*a, **k))[1]

{one_site}
def four(ctx, counts, out):
    i = cuda.grid(1)
    n = counts[i]
    a = devalloc.array(ctx, n, float64)
    b = devalloc.array(ctx, n + 1, float64)
    c = devalloc.array(ctx, n + 2, float64)
    d = devalloc.array(ctx, n + 3, float64)
    devalloc.free_array(ctx, d)
    devalloc.free_array(ctx, c)
    devalloc.free_array(ctx, b)
    devalloc.free_array(ctx, a)
    out[i] = a.size + b.size + c.size + d.size

sig = (devalloc.ctx_type, types.int64[::1], types.float64[::1])
ptx, _ = aot.compile_ptx(one if {sites} == 1 else four, sig)
r = aot.assemble(ptx)
print(json.dumps({{"typed_alloc": len(core.alloc.overloads), "typed_free": len(core._free_live.overloads),
                  "registers": r.registers, "sass": r.sass_instructions, "calls": r.sass_calls,
                  "spill": r.spill_bytes, "ptx_lines": ptx.count("\\n"), "nvvm": len(nvvm_calls),
                  "ptx_hash": __import__("hashlib").sha256(ptx.encode()).hexdigest(),
                  "keyed_by_source": bodycache.toolchain()["source"] == _version.source_hash()}}))
"""


def _compile(tmp_path, sites=1):
    env = {"DEVALLOC_CACHE_DIR": str(tmp_path), "DEVALLOC_PTX_CACHE": None,
           "DEVALLOC_CACHE": "1"}
    return cuda_target.last_json(COMPILE.format(sites=sites, one_site=ONE_SITE), env=env)


def test_a_second_process_types_none_of_the_allocator_and_makes_the_same_code(tmp_path):
    cold = _compile(tmp_path)
    assert cold["typed_alloc"] == 1 and cold["typed_free"] == 1  # compiled here
    assert cold["keyed_by_source"]  # an edited tree uses a folder of its own
    assert cold["nvvm"] == 1
    # alloc's body, free's, and the kernel's PTX (devalloc.device.kernelcache)
    assert len(bodycache.entries(tmp_path)) == 3
    warm = _compile(tmp_path)
    assert warm["typed_alloc"] == 0 and warm["typed_free"] == 0  # read from the disk
    # the kernel's text is the same up to Numba's numbers: its PTX is read, not compiled
    assert warm["nvvm"] == 0 and len(bodycache.entries(tmp_path)) == 3
    assert warm["ptx_hash"] == cold["ptx_hash"]
    for k in ("registers", "sass", "calls", "spill"):
        assert warm[k] == cold[k], (k, cold, warm)
    # a kernel of four sites uses the same two bodies (out of line there)
    four = _compile(tmp_path, 4)
    assert four["typed_alloc"] == 0 and four["nvvm"] == 1
    assert len(bodycache.entries(tmp_path)) == 4  # its own PTX
    assert four["calls"] > cold["calls"] and four["spill"] == 0


def test_with_the_cache_off_nothing_is_written(tmp_path):
    env = {"DEVALLOC_CACHE_DIR": str(tmp_path), "DEVALLOC_PTX_CACHE": None, "DEVALLOC_CACHE": "0"}
    off = cuda_target.last_json(COMPILE.format(sites=1, one_site=ONE_SITE), env=env)
    assert off["typed_alloc"] == 1 and off["nvvm"] == 1 and off["spill"] == 0
    assert bodycache.entries(tmp_path) == []


def test_a_heap_ctx_type_names_the_devalloc_it_was_compiled_with(monkeypatch):
    # Numba's cache=True stores a kernel with its argument types: a ctx type
    # pickled by another devalloc build is another type (no match, compiled
    # again); one of this build is the same type.
    from devalloc import ctx

    t = ctx.ctx_type_for()
    assert pickle.loads(pickle.dumps(t)) == t
    assert t.types[1].build == _version.source_hash()[:16]
    monkeypatch.setattr(ctx, "source_hash", lambda: "f" * 64)
    other = ctx.ctx_type_for()
    assert other.types[1].build == "f" * 16
    assert other != t and str(other) == str(t)  # the name stays readable: same text
    back = pickle.loads(pickle.dumps(other))
    assert back == other and back != t


NUMBA_CACHE = """
import json, types as pytypes
from numba import cuda, float64, types
from numba.cuda import codegen
import devalloc
from devalloc.tools import aot
from devalloc.device import core

# No GPU here: what Numba asks the driver while it compiles, caches and loads
# a kernel (the cache key's compute capability, the cubin's, a loaded module)
# is answered for an sm_90 device.
codegen.JITCUDACodegen.magic_tuple = lambda self: ("no driver", (9, 0))
codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or (9, 0, "a")
loaded = pytypes.SimpleNamespace(module=pytypes.SimpleNamespace(initialized=True))
codegen.CUDACodeLibrary.get_cufunc = lambda self: (self.get_cubin(), loaded)[1]

{one_site}
kernel = cuda.jit(cache=True)(one)

sig = (devalloc.ctx_type, types.int64[::1], types.float64[::1])
with aot.assume_device((9, 0)):
    kernel.compile(sig)
print(json.dumps({{"hits": sum(kernel.stats.cache_hits.values()),
                  "misses": sum(kernel.stats.cache_misses.values()),
                  "typed_alloc": len(core.alloc.overloads)}}))
"""


@pytest.mark.slow
def test_numba_cache_true_keeps_a_kernel_that_takes_a_ctx(tmp_path):
    # A second process loads the kernel from Numba's cache: nothing typed,
    # nothing compiled (on a GPU it still loads the cubin).
    script = tmp_path / "user_kernels.py"
    script.write_text(NUMBA_CACHE.format(one_site=ONE_SITE))
    env = {"DEVALLOC_CACHE_DIR": str(tmp_path / "bodies"), "NUMBA_CACHE_DIR": None,
           "DEVALLOC_PTX_CACHE": None, "DEVALLOC_CACHE": "1"}
    run = f"import runpy; runpy.run_path({str(script)!r}, run_name='user_kernels')"
    first = cuda_target.last_json(run, env=env)
    assert first == {"hits": 0, "misses": 1, "typed_alloc": 1}
    second = cuda_target.last_json(run, env=env)
    assert second == {"hits": 1, "misses": 0, "typed_alloc": 0}


# ------------------------------------------------ names of an entry from disk

WRAPPER_TEXT = '''define linkonce_odr i64 @"devalloc_w"(i64 %".1") {
  %".3" = call i64 @"_ZN4core5allocB3v98E"(i64 %".1")
  ret i64 %".3"
}
declare i64 @"_ZN4core5allocB3v98E"(i64 %".1")
'''
BODY_TEXT = '''define linkonce_odr i64 @"_ZN4core5allocB3v98E"(i64 %".1") {
  %".2" = call i64 @"_ZN5index11_counts_addB2v5E"(i64 %".1")
  %".3" = call i64 @"_ZN5index11_counts_addB2v51E"(i64 %".2")
  %".4" = call i64 @"__nv_popcll"(i64 %".3")
  ret i64 %".4"
}
define linkonce_odr i64 @"_ZN5index11_counts_addB2v5E"(i64 %".1") {
  ret i64 %".1"
}
declare i64 @"_ZN5index11_counts_addB2v51E"(i64 %".1")
declare i64 @"__nv_popcll"(i64 %".1")
'''


def test_an_entry_from_another_process_gets_names_of_its_own():
    # Numba's names carry a per-process counter (v5, v51): the same name in
    # two processes' texts need not be the same function. Every function
    # the entry defines gets the writer's suffix, in definitions, calls and
    # call graphs; the wrapper keeps its symbol; declared-only names (here
    # one that is a prefix of a defined one's: v5 and v51) are left alone.
    from devalloc.device import bodies

    graphs = [({"devalloc_w": {"_ZN4core5allocB3v98E": 1}}, {"devalloc_w": 2}, {"devalloc_w"},
               set()),
              ({"_ZN4core5allocB3v98E": {"_ZN5index11_counts_addB2v5E": 1, "__nv_popcll": 1},
                "_ZN5index11_counts_addB2v5E": {}}, {"_ZN4core5allocB3v98E": 4,
                                                     "_ZN5index11_counts_addB2v5E": 1},
               set(), set())]
    entry = ([WRAPPER_TEXT, BODY_TEXT], graphs, "int64", "devalloc_w")
    texts, new_graphs, rettype, symbol = bodies.own_names(entry, "abc123")
    assert symbol == "devalloc_w" and rettype == "int64"
    assert '@"devalloc_w"(' in texts[0]
    assert texts[0].count('@"_ZN4core5allocB3v98E_dvabc123"') == 2  # the call and the declaration
    body = texts[1]
    assert body.count('@"_ZN5index11_counts_addB2v5E_dvabc123"') == 2
    assert '@"_ZN5index11_counts_addB2v51E"' in body and "v51E_dv" not in body
    assert '@"__nv_popcll"' in body and "popcll_dv" not in body
    calls = new_graphs[1][0]
    assert calls["_ZN4core5allocB3v98E_dvabc123"] == {"_ZN5index11_counts_addB2v5E_dvabc123": 1,
                                                      "__nv_popcll": 1}
    assert new_graphs[0][0] == {"devalloc_w": {"_ZN4core5allocB3v98E_dvabc123": 1}}
    assert new_graphs[0][2] == {"devalloc_w"}
    # one process's entries keep their shared helpers' names together
    again = bodies.own_names(entry, "abc123")
    assert again[0] == texts


# -------------------------------------- bodies of processes that wrote at once

WRITER = """
import json, sys
from numba import cuda, types
import devalloc
from devalloc.tools import aot
from devalloc.device import bodies, core

def alloc_only(ctx, counts, out):
    i = cuda.grid(1)
    out[i] = devalloc.alloc(ctx, counts[i] * 8)

def free_only(ctx, counts, out):
    i = cuda.grid(1)
    devalloc.free(ctx, counts[i])

kernel = alloc_only if sys.argv[1] == "alloc" else free_only
sig = (devalloc.ctx_type, types.int64[::1], types.int64[::1])
r = aot.assemble(aot.compile_ptx(kernel, sig)[0])
print(json.dumps({"writer": bodies.WRITER, "spill": r.spill_bytes}))
"""


@pytest.mark.slow
def test_one_kernel_links_bodies_that_two_processes_wrote_at_the_same_time(tmp_path):
    # Two processes fill one empty folder at the same time, one with alloc's
    # body, the other with free's: each entry's helpers (join_alone, the
    # counters...) carry their own writer's numbers. A third process links
    # both into one kernel: every name its writer's, nothing unresolved, the
    # code what a single process makes.
    import subprocess
    import sys

    folder = tmp_path / "shared"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(DEVALLOC_CACHE_DIR=str(folder))
    env.pop("DEVALLOC_PTX_CACHE", None)
    env.pop("DEVALLOC_CACHE", None)  # (on: the default)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, which], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for which in ("alloc", "free")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    writers = {json.loads(o[0].strip().splitlines()[-1])["writer"] for o in outs}
    assert len(writers) == 2
    both = _compile(folder)
    assert both["typed_alloc"] == 0 and both["typed_free"] == 0  # both read from disk
    alone = _compile(tmp_path / "alone")  # one process, nothing on disk
    assert alone["typed_alloc"] == 1
    for k in ("registers", "sass", "calls", "spill"):
        assert both[k] == alone[k], (k, both, alone)


def test_a_wrapper_an_entry_calls_keeps_its_name():
    # scoped's new chunk calls the chain of frees through its wrapper: the
    # kernel's own call to that body names the same wrapper, so that the
    # "auto" decision sees one function with copies in both places. The
    # chain's texts, inside the chunk's, keep the names they were given.
    from devalloc.device import bodies

    outer = '''define linkonce_odr i64 @"devalloc_auto_scope_chunk_i64"(i64 %".1") {
  %".2" = call i64 @"devalloc_auto_scope_chain_i64"(i64 %".1")
  ret i64 %".2"
}
define linkonce_odr i64 @"devalloc_auto_scope_chain_i64"(i64 %".1") "devalloc-auto-shared" {
  %".2" = call i64 @"_ZN5scope5chainB2v7E"(i64 %".1")
  ret i64 %".2"
}
define linkonce_odr i64 @"_ZN5scope5chainB2v7E"(i64 %".1") {
  %".2" = call i64 @"_ZN5scope4stepB2v3E_dvfedcba987654"(i64 %".1")
  ret i64 %".2"
}
define linkonce_odr i64 @"_ZN5scope4stepB2v3E_dvfedcba987654"(i64 %".1") {
  ret i64 %".1"
}
'''
    graphs = [({"devalloc_auto_scope_chunk_i64": {"devalloc_auto_scope_chain_i64": 1},
                "devalloc_auto_scope_chain_i64": {"_ZN5scope5chainB2v7E": 1},
                "_ZN5scope5chainB2v7E": {}},
               {"devalloc_auto_scope_chunk_i64": 2, "devalloc_auto_scope_chain_i64": 2,
                "_ZN5scope5chainB2v7E": 1},
               {"devalloc_auto_scope_chain_i64"}, {"devalloc_auto_scope_chain_i64"})]
    entry = ([outer], graphs, "int64", "devalloc_auto_scope_chunk_i64")
    (text,), (graph,), _, _ = bodies.own_names(entry, "0123456789ab")
    assert text.count('@"devalloc_auto_scope_chain_i64"') == 2
    assert '@"_ZN5scope5chainB2v7E_dv0123456789ab"' in text
    assert graph[3] == {"devalloc_auto_scope_chain_i64"}
    # a name another writer gave (a body's texts as this process read them) stays
    assert text.count('@"_ZN5scope4stepB2v3E_dvfedcba987654"') == 2 and "54_dv" not in text
