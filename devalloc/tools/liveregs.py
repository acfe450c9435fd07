"""Where the registers go: live registers per SASS instruction, by source function.

ptxas reports one number per kernel (``Used N registers``); the issue of
per-site cost (docs/outline.md) asks which code holds them. This module
compiles one of :mod:`devalloc.tools.codesize`'s kernels with line info,
reads which general registers are live at each SASS instruction
(``nvdisasm --print-life-ranges``, the kernel and the functions it calls)
and which source lines each instruction comes from (``nvdisasm -gp`` and
the PTX's ``.loc`` chains, :func:`devalloc.tools.paths.load`), and
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
  first instruction at ``peak_live``;
* ``at_peak``: each register live there (``"R12"``) and where its value
  was last written: the two innermost frames of the nearest instruction
  above the peak in its function, in address order, that writes it (on a
  path that joins others it may be another path's write: a lead, not a
  proof); none in a called function for its arguments, its return address
  and what the caller keeps across the call.

Line info moves ptxas's allocation by a register or so (the measured build
is not byte for byte the plain one: :mod:`devalloc.tools.codesize` gives the
plain figures). Deterministic for a given toolchain. GPU compilation only:
run with ``NUMBA_ENABLE_CUDASIM`` unset. ``python -m devalloc.probes
--live-registers`` prints it under ``"live_registers"``.
"""

import re

from . import paths

#: ``nvdisasm --print-life-ranges`` (either mode): an instruction, then
#: its live general registers (the first count of the trailing column).
_COUNT = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+[^;]*;\s*//\s*\|\s*(\d+)")
#: The same with the trailing column (the GPR group first).
_RANGES = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+[^;]*;\s*//\s*(\|.*)$")
#: A general register operand (not RZ, not a uniform UR register).
_GPR = re.compile(r"(?<![A-Z])R(\d+)\b")


def live_counts(text):
    """Return ``{address: live general registers}`` of ``nvdisasm --print-life-ranges`` text.

    Addresses run on across the functions of one section (a kernel and the
    functions it calls), so they key every instruction of the kernel.
    """
    return {int(m.group(1), 16): int(m.group(2))
            for m in map(_COUNT.match, text.splitlines()) if m}


#: An instruction's operands: after its address, up to ``;``, without a
#: branch or call target (a function's mangled name may hold ``R<digits>``).
_OPERANDS = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+([^;`]*)")


def live_registers(text):
    """Return ``{address: {register: mark}}`` of ``nvdisasm --print-life-ranges`` text.

    The wide mode (the default): a column per general register under the
    header's ``# 0 1 2 ...``; a register is live at an instruction when its
    column holds a mark: ``:`` live across, ``^`` written here, ``v`` read
    here for the last time, ``x`` both.
    """
    cols, out = None, {}
    for line in text.splitlines():
        if cols is None and "# 0 1" in line:
            gpr = line[line.index("|"):].split("|")[1]
            cols = {int(m.group(1)): m.end(1) - 1 for m in re.finditer(r"(\d+)", gpr)}
            continue
        m = _RANGES.match(line)
        if m and cols:
            gpr = m.group(2).split("|")[1]
            out[int(m.group(1), 16)] = {r: gpr[c] for r, c in cols.items()
                                        if c < len(gpr) and gpr[c] != " "}
    return out


def function_start(labels, k):
    """Return the index of the first instruction of the function holding
    instruction ``k``: the kernel's (0) or a called function's, whose label
    starts with ``$`` (:func:`devalloc.tools.paths.parse`'s labels)."""
    return max([0] + [i for name, i in labels.items() if name.startswith("$") and i <= k])


def written_at(insns, ranges, k, start=0):
    """Return ``{register: index}``: for each register live at instruction ``k``
    of ``insns``, the nearest instruction from ``k`` back to ``start`` (its
    function's first, :func:`function_start`) that writes it (``^`` or
    ``x`` in :func:`live_registers`), or None if none does there (in a
    called function: an argument, the return address or a value the caller
    keeps across the call)."""
    live = ranges.get(insns[k].addr, {})
    out = {}
    for r in live:
        out[r] = next((j for j in range(k, start - 1, -1)
                       if ranges.get(insns[j].addr, {}).get(r) in ("^", "x")), None)
    return out


def _where(ins, depth=2):
    # "module.function:line < ..." of an instruction's innermost frames.
    return " < ".join(f"{paths.function_of(f)}:{f[1]}" for f in ins.frames[:depth]) or "(no line)"


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
    ptx, (by_ptx, range_text), info = paths.assembled_with_lines(
        kernel, sig_for("normal", outline), cc, "-gp", "--print-life-ranges")
    insns, labels = paths.parse(by_ptx, paths.ptx_frames(ptx))
    counts = live_counts(range_text)
    by, peak = attribute(insns, counts)
    at_peak = {}
    if peak is not None:
        ranges = live_registers(range_text)
        start = function_start(labels, peak)
        for r, j in sorted(written_at(insns, ranges, peak, start).items()):
            at_peak[f"R{r}"] = (_where(insns[j]) if j is not None
                                else "(not written above it in its function)")
    used = _USED.search(info)
    return {
        "registers": int(used.group(1)) if used else 0,
        "span": span(range_text),
        "peak_live": counts[insns[peak].addr] if peak is not None else 0,
        "peak": [f"{paths.function_of(f)}:{f[1]}" for f in insns[peak].frames]
        if peak is not None else [],
        "at_peak": at_peak,
        "by_function": dict(list(by.items())[:top]),
    }
