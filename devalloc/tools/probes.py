"""Probe kernels: what devalloc costs in registers, spills and SASS, no GPU needed.

``python -m devalloc.probes [--cc 75 90] [--json]`` compiles user-style
kernels with :func:`devalloc.tools.aot.compile_ptx`, assembles them with ``ptxas
-v`` and disassembles them with ``nvdisasm``, and prints registers, spill
bytes, SASS instructions, atomic instructions and SC fences per kernel,
with the difference to the empty kernel; then the SASS instructions
executed on the common paths on sm_90 (:mod:`devalloc.tools.paths`; JSON key
``"paths"``); with ``--code-size``, the cost of each extra call site of
``alloc``, ``free``, ``view``, ``bump`` and ``scoped`` (:mod:`devalloc.tools.codesize`;
JSON key ``"code_size"``); with ``--live-registers OP:SITES`` (repeatable, e.g.
``alloc:4``), where the registers of that code-size kernel go: live
registers per source function (:mod:`devalloc.tools.liveregs`; JSON key
``"live_registers"``, keyed ``"OP:SITES"``); with ``--register-floor OP:SITES``
(repeatable), the fewest registers that kernel fits in without spilling
(:func:`devalloc.tools.codesize.register_floor`; JSON key ``"register_floor"``). With ``--outline`` (or ``--outline on``) all of
it is compiled for heaps made with ``outline=True`` (one out-of-line copy of
each body per kernel, :mod:`devalloc.device.outline`), with ``--outline off``
for ``outline=False`` (inline at every site), with ``--outline auto`` for
``outline="auto"``, instead of the process default (``DEVALLOC_OUTLINE``;
``"auto"`` unless set). The test suite and ``bench/`` both use it.

Must run with the real CUDA target (``NUMBA_ENABLE_CUDASIM`` unset), and
needs NVVM, ``ptxas`` and ``nvdisasm``: the test extra
(``pip install 'devalloc[test]'``). Without them it says which one is
missing, in one line, and exits 3.

``python -m devalloc.probes --contention [--leaders 32,64,128,256] [--sizes
16,256,4096,8192] [--variants thread,warp] [--waves N] [--seed S] [--jobs N]
[--json]`` runs the contention model instead (:mod:`devalloc.tools.contention`,
issue 49: W warp leaders in lockstep on the real device code): the
simulator's device modules only, no GPU, no NVVM (it sets, or re-runs
itself with, ``NUMBA_ENABLE_CUDASIM=1``).
"""

import argparse
import json
import re
import sys

import numpy as np
from numba import cuda, types

import devalloc
from devalloc.device import warp
from devalloc.tools import aot

from .probe_kernels import (  # noqa: F401 (the probes, read as probes.X too)
    DEBUG_SIG, OBSERVED_SIG, PROBES, SIG, signature,
    k_empty, k_atomic_floor, k_alloc, k_alloc_const, k_alloc_per_thread, k_alloc_view_free,
    k_alloc_view_free_per_thread, k_free, k_conditional, k_bump, k_scoped,
)


#: ``--outline``'s values: the ``Heap(outline=)`` each names.
OUTLINE_FLAG = {"on": True, "off": False, "auto": "auto"}


def measure(ccs=((7, 5), (9, 0)), probes=None, outline=None):
    """Return one dict per (probe, cc) with the :class:`aot.Resources` figures.

    ``outline``: the heaps' choice of out-of-line bodies the probes compile
    for (``Heap(outline=)``; None: the process default, ``DEVALLOC_OUTLINE``).
    """
    rows = []
    for cc in ccs:
        base = None
        for name, fn in (probes or PROBES).items():
            sig = signature(name, outline)
            ptx, _ = aot.compile_ptx(fn, sig, cc=cc)
            r = aot.assemble(ptx, cc)
            row = {"kernel": name, "arch": r.arch, "registers": r.registers,
                   "spill_bytes": r.spill_bytes, "stack_bytes": r.stack_bytes,
                   "sass_instructions": r.sass_instructions,
                   "sass_atomics": r.sass_atomics, "sass_membar_sc": r.sass_membar_sc}
            if name == "empty":
                base = r
            if base is not None:
                row["extra_instructions"] = r.sass_instructions - base.sass_instructions
            rows.append(row)
    return rows


def check_traps():
    """Return the two compile traps, as observed now (see tests/test_compile.py).

    * ``device_call_needs_device``: compiling a kernel that calls a device
      function with plain ``cuda.compile_ptx`` fails when there is no driver
      (None when a driver is present, so the trap cannot be observed).
    * ``return_created_array_rejected``: a device function that returns an
      array it created does not compile.
    * ``merge_mask_zero_extended``: ``match_any_sync``'s mask is an int32;
      ``warp.merge_bits`` must widen it without sign extension (a group with
      lane 31 would otherwise shuffle from lanes outside the group). True
      when the PTX zero-extends the match result and never sign-extends it.
    * ``observed_path_only_when_observed``: a kernel compiled for a normal
      heap's ctx contains no code of :mod:`devalloc.device.observe` (so
      profiling costs normal heaps nothing), one for an observed heap does.
    * ``replay_kernel_spills``: spill bytes of :func:`devalloc.replay`'s
      kernel on sm_90 (it compiles for the GPU, not only the simulator).
    * ``merge_bits_redux``: per architecture ("75", "90"), whether
      ``merge_bits`` compiled to ``redux.sync.or`` (sm_80 and later) rather
      than the shuffle loop.
    * ``bump_ordering``: in the sm_90 PTX of the bump probe, the
      ``bar.warp.sync`` after the leader's claim, the acquire ``cas`` of
      the claim and the release ``cas`` that installs a chunk.
    """
    out = {}

    @cuda.jit(device=True)
    def fresh(x):  # never compiled before, so Numba must ask for the device
        return x + 1

    def k_call(ctx, n, out):
        out[0] = fresh(n)

    try:
        cuda.compile_ptx(k_call, SIG, cc=(9, 0))
        out["device_call_needs_device"] = None
    except Exception as e:  # CudaSupportError without a driver
        out["device_call_needs_device"] = type(e).__name__

    @cuda.jit(device=True)
    def make(ctx):
        return ctx.arena[0:16].view(np.int32)

    def k(ctx, n, out):
        out[0] = make(ctx)[0]

    try:
        aot.compile_ptx(k, SIG, cc=(9, 0))
        out["return_created_array_rejected"] = False
    except Exception as e:
        out["return_created_array_rejected"] = "Only accept returning of array" in str(e)
    out["merge_mask_zero_extended"] = _merge_mask_zero_extended(_merge_ptx((7, 5)))
    out["merge_bits_redux"] = {f"{cc[0]}{cc[1]}": "redux.sync.or.b32" in _merge_ptx(cc)
                               for cc in ((7, 5), (9, 0))}
    bump_ptx, _ = aot.compile_ptx(k_bump, SIG, cc=(9, 0))
    out["bump_ordering"] = {
        "bar_warp_sync": bump_ptx.count("bar.warp.sync"),
        "acquire_cas": bump_ptx.count("atom.acquire.gpu.global.cas"),
        "release_cas": bump_ptx.count("atom.release.gpu.global.cas"),
    }
    normal, _ = aot.compile_ptx(k_alloc_view_free, SIG, cc=(9, 0))
    observed, _ = aot.compile_ptx(k_alloc_view_free, OBSERVED_SIG, cc=(9, 0))
    out["observed_path_only_when_observed"] = "observe" not in normal and "observe" in observed
    from devalloc.tools import replayer

    words = types.int64[::1]
    ptx, _ = aot.compile_ptx(replayer._replay_kernel.py_func, (devalloc.ctx_type,) + (words,) * 7,
                             cc=(9, 0))
    out["replay_kernel_spills"] = aot.assemble(ptx, (9, 0)).spill_bytes
    return out


def k_merge(ctx, n, out):
    """``warp.merge_bits`` alone, in a group keyed by ``out[i]``."""
    i = cuda.grid(1)
    mask, leader, rank, lanes = warp.group(out[i])
    acc, dup = warp.merge_bits(mask, n)
    out[i] = acc + dup


def _merge_ptx(cc):
    return aot.compile_ptx(k_merge, SIG, cc=cc)[0]


def _merge_mask_zero_extended(ptx):
    m = re.search(r"match\.any\.sync\.b(?:32|64)\s+(%r\d+),", ptx)
    if m is None:
        return False
    reg = re.escape(m.group(1))
    widened = re.findall(rf"cvt\.([su])64\.[su]32\s+%rd\d+, {reg};", ptx)
    return "u" in widened and "s" not in widened


#: What installs NVVM, ptxas and nvdisasm.
EXTRA = "pip install 'devalloc[test]'"
#: Exit status when the real CUDA target or a tool is missing.
EXIT_MISSING = 3


def missing():
    """Return one line naming the first thing the probes lack and how to get it, or None."""
    from numba import config

    if config.ENABLE_CUDASIM:
        return ("the probes compile for the real CUDA target: unset NUMBA_ENABLE_CUDASIM "
                "(no GPU is needed)")
    from numba.cuda.cudadrv import nvvm

    try:
        found, why = nvvm.is_available(), "not available"
    except Exception as e:  # cuda.pathfinder's DynamicLibNotFoundError, say
        found, why = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if not found:
        return f"NVVM (libnvvm, numba-cuda's cu13 extra) not found ({why}): {EXTRA}"
    for tool in ("ptxas", "nvdisasm"):
        try:
            aot.tool_path(tool)
        except FileNotFoundError as e:
            return str(e)
    return None


def _op_sites(text):
    # argparse type of --live-registers and --register-floor: "OP:SITES", a codesize kernel.
    from .codesize import KERNELS

    op, _, k = text.partition(":")
    if op not in KERNELS or not k.isdigit() or int(k) not in KERNELS[op]:
        kinds = ", ".join(f"{o}:{n}" for o in KERNELS for n in KERNELS[o])
        raise argparse.ArgumentTypeError(f"{text!r} is not a code-size kernel; one of {kinds}")
    return op, int(k)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m devalloc.probes", description=__doc__.split("\n")[0],
                                epilog=f"Needs the test extra ({EXTRA}); exit status "
                                       f"{EXIT_MISSING} when a tool is missing.")
    p.add_argument("--cc", nargs="+", default=["75", "90"], help="compute capabilities, e.g. 75 80 90")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--traps", action="store_true", help="also report the compile traps")
    p.add_argument("--code-size", action="store_true",
                   help="also measure the cost per extra call site (devalloc.tools.codesize, the "
                        "first --cc)")
    p.add_argument("--live-registers", action="append", default=[], metavar="OP:SITES",
                   type=_op_sites,
                   help="also report where the registers of a code-size kernel go, e.g. alloc:4 "
                        "(devalloc.tools.liveregs, sm_90; repeatable)")
    p.add_argument("--register-floor", action="append", default=[], metavar="OP:SITES",
                   type=_op_sites,
                   help="also report the fewest registers a code-size kernel fits in without "
                        "spilling, e.g. scoped:4 (devalloc.tools.codesize.register_floor, the "
                        "first --cc; repeatable)")
    p.add_argument("--no-paths", action="store_true",
                   help="skip the walked path lengths (devalloc.tools.paths, sm_90)")
    p.add_argument("--contention", action="store_true",
                   help="run the contention model instead (devalloc.tools.contention: warp "
                        "leaders in lockstep on the device code; the simulator, no GPU or NVVM)")
    from . import contention

    contention.add_arguments(p.add_argument_group("--contention options"))
    p.add_argument("--outline", nargs="?", const="on", choices=sorted(OUTLINE_FLAG),
                   help="compile for heaps made with outline=True (on, the default of the flag: "
                        "the allocator's bodies out of line, one copy per kernel: "
                        "devalloc.device.outline), outline=False (off: inline at every site) or "
                        "outline='auto' instead of the process default (DEVALLOC_OUTLINE)")
    a = p.parse_args(argv)
    if a.contention:
        from numba import config

        if not config.ENABLE_CUDASIM:  # numba was imported for the real target
            args = list(sys.argv[1:] if argv is None else argv)
            return contention.ensure_simulator([x for x in args if x != "--contention"])
        return contention.run(a)
    outline = OUTLINE_FLAG[a.outline] if a.outline else None
    ccs = [(int(c[:-1]), int(c[-1])) for c in a.cc]
    problem = missing()
    if problem:
        print(f"python -m devalloc.probes: {problem}", file=sys.stderr)
        return EXIT_MISSING
    rows = measure(ccs, outline=outline)
    result = {"probes": rows}
    if not a.no_paths:
        from . import paths

        result["paths"] = paths.measure((9, 0), outline=outline)
        result["paths_floor"] = paths.floor((9, 0))
    if a.traps:
        result["traps"] = check_traps()
    if a.code_size:
        from . import codesize

        result["code_size"] = codesize.measure(ccs[0], outline=outline)
    if a.register_floor:
        from . import codesize

        result["register_floor"] = {f"{op}:{k}": codesize.register_floor(op, k, ccs[0], outline)
                                    for op, k in a.register_floor}
    if a.live_registers:
        from . import liveregs

        result["live_registers"] = {f"{op}:{k}": liveregs.measure(op, k, outline=outline)
                                    for op, k in a.live_registers}
    if a.json:
        json.dump(result, sys.stdout)
        print()
        return 0
    cols = ["kernel", "arch", "registers", "spill_bytes", "sass_instructions", "sass_atomics",
            "sass_membar_sc", "extra_instructions"]
    print("  ".join(f"{c:>17}" for c in cols))
    for r in rows:
        print("  ".join(f"{r.get(c, ''):>17}" for c in cols))
    if "paths" in result:
        print(f"\nSASS instructions executed on sm_90 (floor, one atomic add: "
              f"{result['paths_floor']}):")
        for name, r in result["paths"].items():
            top = ", ".join(f"{f} {n}" for f, n in list(r["by_function"].items())[:4])
            print(f"{name:>17}  {r['instructions']:4}  {r['what']}\n{'':>23}{top}")
    if a.traps:
        print(result["traps"])
    if a.code_size:
        print(f"\nPer call site ({ccs[0][0]}{ccs[0][1]}; sites: SASS instructions/registers/stack "
              f"bytes, compile CPU seconds):")
        for op, e in result["code_size"].items():
            sites = "  ".join(f"{k}: {r['sass_instructions']}/{r['registers']}/{r['stack_bytes']} "
                              f"{r['numba_seconds'] + r['ptxas_seconds']:.2f}s"
                              for k, r in e["sites"].items())
            print(f"{op:>8}  +{e['per_extra_site']:5} per extra site  {sites}")
    for key, r in result.get("register_floor", {}).items():
        print(f"\n{key} ({ccs[0][0]}{ccs[0][1]}): {r['registers']} registers as ptxas picks "
              f"({r['sass_instructions']} SASS), fits in {r['floor']} without spilling "
              f"({r['sass_at_floor']} SASS; asked for {r['floor'] - 1}: {r['registers_below']} "
              f"registers, {r['spill_below']} spill bytes, "
              f"{r['stack_below']} stack bytes)")
    for key, r in result.get("live_registers", {}).items():
        print(f"\n{key} (sm_90, line info): {r['registers']} registers, span {r['span']}, "
              f"at most {r['peak_live']} live; peak in "
              f"{' < '.join(r['peak'][:4])}")
        for f, n in r["by_function"].items():
            print(f"{n:>8}  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
