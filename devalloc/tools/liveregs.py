"""Where the registers go: live registers per SASS instruction, by source function.

ptxas reports one number per kernel (``Used N registers``); the issue of
per-site cost (docs/outline.md) asks which code holds them. This module
compiles one of :mod:`devalloc.tools.codesize`'s kernels with line info,
reads how many general registers are live at each SASS instruction
(``nvdisasm --life-range-mode=count``, the kernel and the functions it
calls) and which source lines each instruction comes from (``nvdisasm -gp``
and the PTX's ``.loc`` chains, :func:`devalloc.tools.paths.load`), and
returns:

* ``registers``: ptxas's count for this build, ``span``: the highest
  general register index used + 1 (ptxas's count is the span plus the
  registers it reserves), ``peak_live``: the most registers live at one
  instruction; ``span - peak_live`` is what the allocation's alignment
  and fixed registers (a call's arguments and return address, a 64-bit
  ``cas``'s register quad) cost on top of the live values;
* ``by_function``: per innermost source function, the most registers live
  at one of its instructions, highest first;
* ``peak``: the frames (innermost first, ``module.function:line``) of the
  first instruction at ``peak_live``.

Line info moves ptxas's allocation by a register or so (the measured build
is not byte for byte the plain one: :mod:`devalloc.tools.codesize` gives the
plain figures). Deterministic for a given toolchain. GPU compilation only:
run with ``NUMBA_ENABLE_CUDASIM`` unset. ``python -m devalloc.probes
--live-registers`` prints it under ``"live_registers"``.
"""

import re

from . import paths

#: ``nvdisasm --life-range-mode=count``: an instruction, then its live
#: general registers (the first count of the trailing column).
_COUNT = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+[^;]*;\s*//\s*\|\s*(\d+)\s*\|")
#: A general register operand (not RZ, not a uniform UR register).
_GPR = re.compile(r"(?<![A-Z])R(\d+)\b")


def live_counts(text):
    """Return ``{address: live general registers}`` of ``nvdisasm --life-range-mode=count`` text.

    Addresses run on across the functions of one section (a kernel and the
    functions it calls), so they key every instruction of the kernel.
    """
    return {int(m.group(1), 16): int(m.group(2))
            for m in map(_COUNT.match, text.splitlines()) if m}


#: An instruction's operands: after its address, up to ``;``, without a
#: branch or call target (a function's mangled name may hold ``R<digits>``).
_OPERANDS = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+([^;`]*)")


def span(sass):
    """Return the highest general register index used in ``sass`` + 1 (0 if none)."""
    return max((int(r) + 1 for m in map(_OPERANDS.match, sass.splitlines()) if m
                for r in _GPR.findall(m.group(1))), default=0)


def attribute(insns, counts):
    """Return ``(by_function, peak_index)`` of parsed instructions and live counts.

    ``insns``: :func:`devalloc.tools.paths.parse`'s instructions (their
    frames); ``counts``: :func:`live_counts`. ``by_function``: innermost
    function -> the most registers live at one of its instructions
    (instructions with no frames count as ``"(no line)"``), highest first;
    ``peak_index``: the index in ``insns`` of the first instruction with the
    most live registers (None if no instruction has a count).
    """
    by, peak = {}, None
    for k, ins in enumerate(insns):
        n = counts.get(ins.addr)
        if n is None:
            continue
        f = paths.function_of(ins.frames[0]) if ins.frames else "(no line)"
        by[f] = max(by.get(f, 0), n)
        if peak is None or n > counts[insns[peak].addr]:
            peak = k
    return dict(sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))), peak


_USED = re.compile(r"Used (\d+) registers")


def measure(op="alloc", sites=4, cc=(9, 0), outline=None, top=12):
    """Return the live-register report of codesize's ``op`` kernel with ``sites`` sites.

    ``op``/``sites``: a kernel of :data:`devalloc.tools.codesize.KERNELS`;
    ``outline``: the heap's choice (``Heap(outline=)``; None the process
    default); ``top``: how many functions ``by_function`` keeps.
    """
    from . import codesize
    from .probe_kernels import sig_for

    kernel = codesize.KERNELS[op][sites]
    ptx, (by_ptx, count_text), info = paths.assembled_with_lines(
        kernel, sig_for("normal", outline), cc, "-gp", "--life-range-mode=count")
    insns, _ = paths.parse(by_ptx, paths.ptx_frames(ptx))
    counts = live_counts(count_text)
    by, peak = attribute(insns, counts)
    used = _USED.search(info)
    return {
        "registers": int(used.group(1)) if used else 0,
        "span": span(count_text),
        "peak_live": counts[insns[peak].addr] if peak is not None else 0,
        "peak": [f"{paths.function_of(f)}:{f[1]}" for f in insns[peak].frames]
        if peak is not None else [],
        "by_function": dict(list(by.items())[:top]),
    }
