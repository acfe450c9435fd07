"""What a kernel's first call costs to compile, in fresh processes, no GPU needed.

A first launch compiles the kernel: Numba types and lowers it (and, for a
kernel that calls devalloc, the allocator's bodies unless the compiled-body
cache has them: :mod:`devalloc.device.bodycache`), NVVM makes PTX, and the
driver assembles it to SASS. This script does the same for sm_90 without a
GPU (``cuda.compile_ptx``, then ``ptxas``), each compilation in a process of
its own, and compares, in the same run:

* ``twin``: a kernel that fills a per-thread ``cuda.local.array(64, float64)``
  with ``counts[i]`` values and sums them (``twin4``: four such arrays, the
  four-site kernel's twin);
* ``heap cold``: the same kernel on ``devalloc.array`` / ``free_array``, in
  a process whose body cache is empty (a new folder);
* ``heap warm``: the same in a second process on the folder the first filled;
* ``heap x4 cold`` / ``warm``: four arrays (four ``alloc`` and four ``free``
  sites) in one kernel; ``heap4 new``: that kernel in a process after the
  one-site kernel's two (the allocator's bodies on disk, not its own code:
  what a new or edited kernel costs), and ``heap new`` the one-site kernel
  after the four-site kernel's two;
* ``cache=True``: the twin and the heap kernel under ``@cuda.jit(cache=True)``,
  in a first process and in a second one that loads them from Numba's cache;
* ``launch``: the twin, the heap kernel and the four-site one built the way
  numba-cuda builds a kernel at its first launch (``kernel.compile``: Numba,
  NVVM to PTX, NVVM to LTO-IR, nvJitLink to a cubin; numba-cuda links with
  LTO whenever nvJitLink is there), the driver's questions answered for an
  sm_90 device.

Targets (issue 50): warm <= 3x the twin, cold <= 6x, four sites <= 1.2x one
site (warm), for both builds. Seconds are wall-clock of the compiling
process (Numba + NVVM) plus ptxas's (the launch rows: the whole build);
each figure the median of ``--runs`` rounds, the kinds of one round run one
after another. The second processes find the bodies and the kernel's
compiled code (:mod:`devalloc.device.kernelcache`) that the first wrote.

Run: ``.venv/bin/python bench/first_call.py [--runs 3] [--json] [--write]``
(``--write``: the section "First call" of bench/RESULTS.md).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, environment, header, markdown_table, write_section

#: Targets of issue 50: (figure, most allowed).
TARGETS = {"warm_over_twin": 3.0, "cold_over_twin": 6.0, "four_over_one": 1.2,
           "launch_warm_over_twin": 3.0, "launch_cold_over_twin": 6.0,
           "launch_four_over_one": 1.2}
KINDS = ("twin", "twin4", "heap_cold", "heap_warm", "heap4_new", "heap4_cold", "heap4_warm", "heap_new",
         "cached_twin", "cached_heap", "cached_twin_2", "cached_heap_2",
         "launch_twin", "launch_twin4", "launch_heap_cold", "launch_heap_warm", "launch_heap4_new",
         "launch_heap4_cold", "launch_heap4_warm", "launch_heap_new")
#: Kernels compiled on another kernel's cache (its bodies there, not its own code).
NEW_ON = {"heap4_new": "heap", "launch_heap4_new": "launch_heap",
          "heap_new": "heap4", "launch_heap_new": "launch_heap4"}
#: The processes of --breakdown and --separate, in order, on one cache.
BREAKDOWN_KINDS = ("breakdown_cold", "breakdown_warm")
SEPARATE_KINDS = ("heap_cold", "separate_build", "separate_kernel", "heap_warm")


def _no_driver():
    # No GPU here: what Numba asks the driver while it compiles, caches and
    # loads a cache=True kernel (the cache key's compute capability, the
    # cubin's, the loaded module) is answered for an sm_90 device. The cubin
    # is still made (nvJitLink), as a first launch makes it.
    import types as pytypes

    from numba.cuda import codegen

    loaded = pytypes.SimpleNamespace(module=pytypes.SimpleNamespace(initialized=True))
    codegen.JITCUDACodegen.magic_tuple = lambda self: ("no driver", (9, 0))
    codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or (9, 0, "a")
    codegen.CUDACodeLibrary.get_cufunc = lambda self: (self.get_cubin(), loaded)[1]


def breakdown(kind):
    """Compile the one-site heap kernel here; print where its seconds go, as JSON.

    Exclusive seconds per Numba compiler pass (summed over every function
    compiled: the kernel, and the allocator's device functions when the
    body cache is empty), the number of functions and compilations, NVVM's
    seconds and ptxas's. ``kind``: ``cold`` or ``warm`` (only a label: the
    cache folder says which).
    """
    import collections

    from numba import cuda, types
    from numba.cuda import compiler, dispatcher
    from numba.cuda.core import compiler_machinery as cm
    from numba.cuda.cudadrv import nvvm

    import devalloc
    from devalloc.tools import aot

    import _first_call_kernels as K

    passes, stack = collections.Counter(), [0.0]
    run_pass = cm.PassManager._runPass

    def timed_pass(self, index, pss, state):
        stack.append(0.0)
        t = time.perf_counter()
        try:
            return run_pass(self, index, pss, state)
        finally:
            dt = time.perf_counter() - t
            passes[pss.name()] += dt - stack.pop()
            stack[-1] += dt

    compiled = collections.Counter()
    compile_cuda = compiler.compile_cuda

    def counted(pyfunc, *args, **kwargs):
        compiled[f"{pyfunc.__module__}.{pyfunc.__qualname__}"] += 1
        return compile_cuda(pyfunc, *args, **kwargs)

    nvvm_s = [0.0]
    compile_ir = nvvm.compile_ir

    def timed_ir(*args, **kwargs):
        t = time.perf_counter()
        try:
            return compile_ir(*args, **kwargs)
        finally:
            nvvm_s[0] += time.perf_counter() - t

    cm.PassManager._runPass = timed_pass
    compiler.compile_cuda = dispatcher.compile_cuda = counted
    nvvm.compile_ir = timed_ir
    sig = (devalloc.ctx_type, types.int64[::1], types.float64[::1])
    with aot.assume_device((9, 0)):
        t0 = time.perf_counter()
        ptx, _ = cuda.compile_ptx(K.heap, sig, cc=(9, 0))
        total = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        t1 = time.perf_counter()
        subprocess.run([aot.tool_path("ptxas"), "-arch=sm_90", str(src), "-o",
                        str(Path(tmp) / "k.cubin")], check=True)
        ptxas_s = time.perf_counter() - t1
    allocator = sum(n for f, n in compiled.items() if f.startswith("devalloc."))
    print(json.dumps({
        "kind": kind, "numba_nvvm_s": total, "nvvm_s": nvvm_s[0], "ptxas_s": ptxas_s,
        "passes_s": dict(passes.most_common()), "in_passes_s": sum(passes.values()),
        "functions": len(compiled), "compilations": sum(compiled.values()),
        "devalloc_compilations": allocator,
        "devalloc_functions": sum(1 for f in compiled if f.startswith("devalloc."))}))


def separate(kind):
    """The alternative not taken: the bodies compiled once to a relocatable cubin, then linked.

    ``kind`` ``build``: compile the bodies this process's cache holds (the
    one-site heap kernel's ``alloc`` and ``free``) with NVVM, their wrappers
    external and ``noinline``, and ``ptxas -c``, into ``bodies.cubin``
    beside the cache. ``kernel``: compile the heap kernel with the bodies
    declared only (none of their text linked), and link its PTX with that
    cubin through nvJitLink, the way numba-cuda links a kernel's
    ``link=`` files at its first launch. Prints the seconds and the
    registers nvJitLink reports for the linked kernel, as JSON.
    """
    import re
    import zlib
    import pickle

    from numba import cuda, types
    from numba.cuda.codegen import CUDACodeLibrary
    from numba.cuda.cudadrv import nvvm

    import devalloc
    from devalloc.device import bodycache
    from devalloc.device import bodies
    from devalloc.tools import aot

    import _first_call_kernels as K

    sig = (devalloc.ctx_type, types.int64[::1], types.float64[::1])
    cubin = bodycache.cache_dir() / "bodies.cubin"
    if kind == "build":
        folder = bodycache.DiskCache(bodycache.cache_dir(), bodycache.toolchain()).folder
        texts = []
        for path in sorted(folder.glob("*" + bodycache.SUFFIX)):
            _, (body, _, _, symbol) = pickle.loads(zlib.decompress(path.read_bytes()))
            first = re.sub(r'define linkonce_odr (.*@"' + re.escape(symbol) + r'"\(.*\)) "[^"]*"',
                           r"define \1 noinline", body[0])
            texts += [first] + body[1:]
        t0 = time.perf_counter()
        ptx = nvvm.compile_ir(texts, arch="compute_90", opt=3).decode().strip("\x00")
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "b.ptx").write_text(ptx)
            subprocess.run([aot.tool_path("ptxas"), "-c", "-arch=sm_90", str(Path(tmp) / "b.ptx"),
                            "-o", str(cubin)], check=True)
        print(json.dumps({"kind": "separate_build", "nvvm_s": t1 - t0,
                          "ptxas_s": time.perf_counter() - t1}))
        return

    from cuda.bindings import nvjitlink

    def declared_only(context, key):  # the wrapper's text is not linked
        lib = CUDACodeLibrary(context.codegen(), "declared_only")
        lib.add_ir_module(context.codegen()._create_empty_module("declared_only"))
        lib.finalize()
        return lib

    bodies.library = declared_only
    with aot.assume_device((9, 0)):
        t0 = time.perf_counter()
        ptx, _ = cuda.compile_ptx(K.heap, sig, cc=(9, 0))
        t1 = time.perf_counter()
    handle = nvjitlink.create(2, ["-arch=sm_90", "-verbose"])
    for kind_, data, name in ((nvjitlink.InputType.PTX, ptx.encode(), "kernel"),
                              (nvjitlink.InputType.CUBIN, cubin.read_bytes(), "bodies")):
        nvjitlink.add_data(handle, kind_, data, len(data), name)
    nvjitlink.complete(handle)
    size = nvjitlink.get_linked_cubin_size(handle)
    nvjitlink.get_linked_cubin(handle, bytearray(size))
    t2 = time.perf_counter()
    log = bytearray(nvjitlink.get_info_log_size(handle))
    nvjitlink.get_info_log(handle, log)
    registers = [int(n) for n in re.findall(r"used (\d+) registers", log.decode(errors="replace"))]
    print(json.dumps({"kind": "separate_kernel", "numba_nvvm_s": t1 - t0, "link_s": t2 - t1,
                      "total_s": t2 - t0, "registers": max(registers)}))


def child(kind):
    """Compile one kernel in this (fresh) process; print its figures as JSON.

    ``kind``: a kernel of bench/_first_call_kernels.py and a state
    (``heap_cold``...); ``cached_<kernel>``: the kernel under
    ``@cuda.jit(cache=True)``, compiled to a cubin (or loaded from Numba's
    cache) the way a first launch does.
    """
    t0 = time.perf_counter()
    from numba import cuda, types

    import devalloc
    from devalloc.tools import aot

    import _first_call_kernels as K

    sig = (devalloc.ctx_type, types.int64[::1], types.float64[::1])
    imported = time.perf_counter() - t0
    if kind.startswith(("cached_", "launch_")):
        _no_driver()
        kernel = cuda.jit(cache=kind.startswith("cached_"))(K.KERNELS[kind.split("_")[1]])
        with aot.assume_device((9, 0)):
            t1 = time.perf_counter()
            kernel.compile(sig)
            numba_s = time.perf_counter() - t1
        print(json.dumps({"kind": kind, "import_s": imported, "numba_nvvm_s": numba_s,
                          "ptxas_s": 0.0, "total_s": numba_s, "ptx_lines": 0, "registers": 0,
                          "cache_hits": sum(kernel.stats.cache_hits.values())}))
        return
    kernel = K.KERNELS[kind.split("_")[0]]
    with aot.assume_device((9, 0)):
        t1 = time.perf_counter()
        ptx, _ = cuda.compile_ptx(kernel, sig, cc=(9, 0))
        numba_s = time.perf_counter() - t1
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        t2 = time.perf_counter()
        out = subprocess.run([aot.tool_path("ptxas"), "-v", "-arch=sm_90", str(src), "-o",
                              str(Path(tmp) / "k.cubin")], check=True, capture_output=True,
                             text=True)
        ptxas_s = time.perf_counter() - t2
    import re

    registers = max(int(n) for n in re.findall(r"Used (\d+) registers", out.stderr))
    print(json.dumps({"kind": kind, "import_s": imported, "numba_nvvm_s": numba_s,
                      "ptxas_s": ptxas_s, "total_s": numba_s + ptxas_s,
                      "ptx_lines": ptx.count("\n"), "registers": registers,
                      "cache_hits": 0}))


def _spawn(kind, cache, numba_cache):
    # (the disk cache is on unless DEVALLOC_CACHE=0: on, what is measured)
    env = dict(os.environ, DEVALLOC_CACHE_DIR=cache, NUMBA_CACHE_DIR=numba_cache,
               DEVALLOC_CACHE="1")
    for name in ("NUMBA_ENABLE_CUDASIM", "DEVALLOC_PTX_CACHE"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, __file__, "--child", kind], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(f"first_call --child {kind} failed:\n{proc.stderr[-3000:]}")
    out = proc.stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(runs=3, progress=None):
    """Return ``{"runs": [...], "median": {kind: row}, "ratios": {...}, "met": {...}}``."""
    rounds = []
    for r in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            rows = {}
            for kind in KINDS:
                # heap4 on a cache of its own (cold, then warm); the cache=True
                # kernels with both caches of their own, filled by the first
                # process (cached_heap) and read by the second (_2)
                if kind in NEW_ON:
                    folder = NEW_ON[kind]
                elif kind.startswith("cached"):
                    folder = kind.removesuffix("_2")
                elif kind.startswith("launch"):
                    folder = "_".join(kind.split("_")[:2])
                else:
                    folder = kind.split("_")[0]
                base = os.path.join(tmp, folder)
                rows[kind] = _spawn(kind.removesuffix("_2"), base + "-bodies", base + "-numba")
                if progress:
                    progress(r, kind, rows[kind])
            rounds.append(rows)
    median = {k: {f: statistics.median(rnd[k][f] for rnd in rounds)
                  for f in ("import_s", "numba_nvvm_s", "ptxas_s", "total_s", "ptx_lines",
                            "registers", "cache_hits")}
              for k in KINDS}
    t = {k: median[k]["total_s"] for k in KINDS}
    ratios = {"warm_over_twin": t["heap_warm"] / t["twin"],
              "cold_over_twin": t["heap_cold"] / t["twin"],
              "four_over_one": t["heap4_warm"] / t["heap_warm"],
              "four_over_one_cold": t["heap4_cold"] / t["heap_cold"],
              "new_kernel_over_twin": t["heap4_new"] / t["twin"],
              "four_over_one_new": t["heap4_new"] / t["heap_new"],
              "twin_four_over_one": t["twin4"] / t["twin"],
              "launch_twin_four_over_one": t["launch_twin4"] / t["launch_twin"],
              "launch_four_over_one_new": t["launch_heap4_new"] / t["launch_heap_new"],
              "launch_new_kernel_over_twin": t["launch_heap4_new"] / t["launch_twin"],
              "cached_second_over_twin": t["cached_heap_2"] / t["twin"],
              "cached_second_over_cached_twin": t["cached_heap_2"] / t["cached_twin_2"],
              "launch_warm_over_twin": t["launch_heap_warm"] / t["launch_twin"],
              "launch_cold_over_twin": t["launch_heap_cold"] / t["launch_twin"],
              "launch_four_over_one": t["launch_heap4_warm"] / t["launch_heap_warm"]}
    met = {k: ratios[k] <= v for k, v in TARGETS.items()}
    return {"runs": rounds, "median": median, "ratios": ratios, "met": met}


def section(result, runs):
    m, r = result["median"], result["ratios"]
    names = {"twin": "`cuda.local.array` twin", "twin4": "four sites' twin (four local arrays)",
             "launch_twin4": "launch build: four sites' twin", "heap_cold": "`devalloc.array`, empty cache",
             "heap_warm": "`devalloc.array`, second process",
             "heap4_new": "four sites, a new kernel in a later process",
             "heap_new": "`devalloc.array`, a new kernel in a later process",
             "heap4_cold": "four sites, empty cache", "heap4_warm": "four sites, second process",
             "cached_twin": "twin, `cache=True`, first process",
             "cached_heap": "`devalloc.array`, `cache=True`, first process",
             "cached_twin_2": "twin, `cache=True`, second process",
             "cached_heap_2": "`devalloc.array`, `cache=True`, second process",
             "launch_twin": "launch build: twin",
             "launch_heap_cold": "launch build: `devalloc.array`, empty cache",
             "launch_heap_warm": "launch build: `devalloc.array`, second process",
             "launch_heap4_new": "launch build: four sites, a new kernel in a later process",
             "launch_heap_new": "launch build: `devalloc.array`, a new kernel in a later process",
             "launch_heap4_cold": "launch build: four sites, empty cache",
             "launch_heap4_warm": "launch build: four sites, second process"}
    rows = [(names[k], f"{m[k]['numba_nvvm_s']:.2f}",
             f"{m[k]['ptxas_s']:.2f}" if not k.startswith(("cached", "launch")) else "in total",
             f"{m[k]['total_s']:.2f}", f"{m[k]['total_s'] / m['twin']['total_s']:.1f}",
             int(m[k]["ptx_lines"]) or "", int(m[k]["registers"]) or "") for k in KINDS]
    table = markdown_table([("kernel (fresh process each)", "l"), ("Numba + NVVM s", "r"),
                            ("ptxas s", "r"), ("total s", "r"), ("x twin", "r"),
                            ("PTX lines", "r"), ("registers", "r")], rows)
    verdict = ", ".join(
        f"{k} {r[k]:.2f} (target <= {v}: {'met' if result['met'][k] else 'MISSED'})"
        for k, v in TARGETS.items())
    return "\n".join(header("First call (compile time, fresh processes)",
                            f".venv/bin/python bench/first_call.py --runs {runs} --write",
                            f"{environment()}, {os.cpu_count()} CPU(s)") + [
        f"Medians of {runs} rounds; wall-clock seconds of the compiling process (Numba "
        "types and lowers, NVVM makes PTX for sm_90) plus ptxas's. A round runs the "
        f"{len(KINDS)} compilations one after another, each in a new process; each kernel "
        "has caches of its own (the second process reads what the first wrote).", "",
        table, "",
        f"Ratios: {verdict}; four sites over one on an empty cache "
        f"{r['four_over_one_cold']:.2f}; a new four-site kernel in a later process (the "
        f"bodies on disk, its own code compiled) {r['new_kernel_over_twin']:.2f}x the twin "
        f"({r['launch_new_kernel_over_twin']:.2f}x in the launch build), and four sites over "
        f"one when both are new kernels {r['four_over_one_new']:.2f} "
        f"({r['launch_four_over_one_new']:.2f}), where the twins' four arrays take "
        f"{r['twin_four_over_one']:.2f}x their one ({r['launch_twin_four_over_one']:.2f}x); with `@cuda.jit(cache=True)` a second process "
        f"loads the kernel from Numba's cache: {r['cached_second_over_twin']:.2f}x the twin's "
        f"first compile, {r['cached_second_over_cached_twin']:.2f}x the twin's own load. The "
        "`cache=True` and launch rows compile to a cubin with nvJitLink (the first launch's "
        "path; Numba's questions to the driver answered for an sm_90 device), so their "
        "first process includes what ptxas does in the other rows; the launch rows are "
        "what a first launch on a GPU with nvJitLink costs (numba-cuda compiles the kernel "
        "to PTX, then to LTO-IR, and links it with LTO).", ""])


def breakdown_section(rows):
    cold, warm = rows
    names = sorted(set(cold["passes_s"]) | set(warm["passes_s"]),
                   key=lambda n: -cold["passes_s"].get(n, 0))
    shown = names[:8]
    table = [(n, f"{cold['passes_s'].get(n, 0):.2f}", f"{warm['passes_s'].get(n, 0):.2f}")
             for n in shown]
    rest = lambda r: sum(v for n, v in r["passes_s"].items() if n not in shown)  # noqa: E731
    table += [("other passes", f"{rest(cold):.2f}", f"{rest(warm):.2f}")]
    for label, key in (("outside the passes (Numba's dispatch, libraries, NVVM input)", None),
                       ("NVVM (NVVM IR to PTX)", "nvvm_s")):
        if key:
            table.append((label, f"{cold[key]:.2f}", f"{warm[key]:.2f}"))
        else:
            out = lambda r: r["numba_nvvm_s"] - r["in_passes_s"] - r["nvvm_s"]  # noqa: E731
            table.append((label, f"{out(cold):.2f}", f"{out(warm):.2f}"))
    table += [("**Numba + NVVM**", f"**{cold['numba_nvvm_s']:.2f}**",
               f"**{warm['numba_nvvm_s']:.2f}**"),
              ("ptxas", f"{cold['ptxas_s']:.2f}", f"{warm['ptxas_s']:.2f}"),
              ("functions compiled by Numba (of devalloc)",
               f"{cold['functions']} ({cold['devalloc_functions']})",
               f"{warm['functions']} ({warm['devalloc_functions']})"),
              ("compilations (of devalloc's functions)",
               f"{cold['compilations']} ({cold['devalloc_compilations']})",
               f"{warm['compilations']} ({warm['devalloc_compilations']})")]
    return "\n".join(header("Where a first call's seconds go",
                            ".venv/bin/python bench/first_call.py --breakdown --write",
                            f"{environment()}, {os.cpu_count()} CPU(s)") + [
        "The one-site `devalloc.array` kernel of \"First call\", compiled for sm_90 in a "
        "process on an empty body cache and in a second one on the cache the first filled "
        "(one run each: wall-clock seconds, exclusive per Numba compiler pass, summed over "
        "every function compiled). On the empty cache the passes run for each of the "
        "allocator's device functions (typing a call to a device function compiles it); "
        "in the second process only for the kernel and the few inline functions between "
        "it and the allocator (the porting API's `array`, `free`'s NULL test), and NVVM's "
        "PTX is read from the kernel's cache (devalloc.device.kernelcache).", "",
        markdown_table([("where", "l"), ("empty cache s", "r"), ("second process s", "r")],
                       table), ""])


def separate_section(rows):
    cold, build, kernel, warm = rows
    return "\n".join(header("First call: bodies linked as a separate cubin (not taken)",
                            ".venv/bin/python bench/first_call.py --separate --write",
                            f"{environment()}, {os.cpu_count()} CPU(s)") + [
        "The alternative to linking the bodies' NVVM IR into each kernel: compile them "
        "once to a relocatable sm_90 cubin (NVVM, `ptxas -c`: "
        f"{build['nvvm_s'] + build['ptxas_s']:.2f} s, once) and let each kernel call them "
        "across the ABI, linked by nvJitLink at its first launch. One run each, the "
        "one-site heap kernel:", "",
        markdown_table([("build", "l"), ("first call s", "r"), ("registers", "r")], [
            ("NVVM IR linked (devalloc's), empty cache", f"{cold['total_s']:.2f}",
             cold["registers"]),
            ("NVVM IR linked (devalloc's), second process", f"{warm['total_s']:.2f}",
             warm["registers"]),
            ("separate cubin, second process (Numba + NVVM, then nvJitLink)",
             f"{kernel['total_s']:.2f}", kernel["registers"])]), "",
        "A separate cubin would meet the 3x target in a second process, but the calls "
        "cross the ABI: the linked kernel takes the registers of a function compiled "
        "without its caller (nvJitLink's report), against "
        f"{warm['registers']} when NVVM and ptxas see the kernel and its bodies whole, and a kernel of one site can no longer have its body "
        "inlined. numba-cuda 0.30 also refuses to pickle a kernel with link files "
        "(`cache=True`). Not taken; registers decide occupancy for every kernel, compile "
        "seconds only the first call.", ""])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--write", action="store_true", help="write the section of bench/RESULTS.md")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--breakdown", action="store_true",
                   help="only where a one-site kernel's seconds go, empty cache and second "
                        "process (Numba's passes, NVVM, ptxas)")
    p.add_argument("--separate", action="store_true",
                   help="only the alternative not taken: the bodies compiled once to a "
                        "relocatable cubin and linked with nvJitLink (seconds, registers)")
    args = p.parse_args(argv)
    if args.child:
        if args.child.startswith("breakdown_"):
            return breakdown(args.child.split("_")[1])
        if args.child.startswith("separate_"):
            return separate(args.child.split("_")[1])
        return child(args.child)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("0", ""):
        sys.exit("first_call compiles for a GPU: unset NUMBA_ENABLE_CUDASIM")

    def progress(r, kind, row):
        if not args.json:
            print(f"round {r + 1}: {kind:11s} {row['total_s']:6.2f} s", file=sys.stderr)

    for wanted, kinds, make in ((args.separate, SEPARATE_KINDS, separate_section),
                                (args.breakdown, BREAKDOWN_KINDS, breakdown_section)):
        if wanted:
            with tempfile.TemporaryDirectory() as tmp:
                rows = [_spawn(k, tmp + "/bodies", tmp + "/numba") for k in kinds]
            print(json.dumps(rows, indent=1) if args.json else make(rows))
            if args.write:
                write_section(make(rows))
            return None
    result = measure(args.runs, progress)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(section(result, args.runs))
    if args.write:
        write_section(section(result, args.runs))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
