"""Walked path lengths: the SASS instructions one execution path of a kernel runs.

A static count of a kernel's SASS says how big it is, not what one call
costs. This module follows the cubin's control flow instead: it compiles a
probe kernel with line info (every devalloc device function too), reads the
SASS with ``nvdisasm -gi`` (each instruction's source line and the lines it
is inlined at), builds the control-flow graph and walks it from the entry to
``EXIT``.

A path is given by *waypoints*: source lines it must pass, in order, each
named by its file and a piece of its text (so that edits elsewhere do not
move it). The walk is the cheapest execution from the entry to ``EXIT`` that
executes an instruction of each waypoint's line in turn (a waypoint matches
an instruction inlined from it too). Branches no waypoint decides take the
cheaper side, loops run as often as the waypoints require: list a line in a
loop twice for two iterations (a waypoint equal to the one before it needs a
new visit of its line, not the next instruction of the same visit). Every
instruction on the walk counts once per
execution, predicated or not. :func:`measure` returns each path's count and
where it goes: instructions per device function (the innermost frame of
each instruction's line).

GPU compilation only: run with ``NUMBA_ENABLE_CUDASIM`` unset, like
:mod:`devalloc.tools.probes`.
"""

import ast
import contextlib
import heapq
import re
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from numba import cuda

import devalloc

from . import aot, probe_kernels

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class At:
    """A waypoint: the line of ``file`` (under devalloc/) holding ``text``."""

    file: str
    text: str

    def resolve(self):
        """Return ``(absolute path, line number)``; the text must occur once."""
        path = ROOT / self.file
        hits = [n for n, line in enumerate(path.read_text().splitlines(), 1)
                if self.text in line]
        if len(hits) != 1:
            raise ValueError(f"waypoint {self}: {len(hits)} lines of {self.file} hold the text")
        return str(path), hits[0]


@dataclass(frozen=True)
class Insn:
    """One SASS instruction: its address, opcode, predicate, branch target
    label and source frames (innermost first)."""

    addr: int
    op: str
    pred: str
    target: str
    frames: tuple
    operands: str = ""


_FRAME = re.compile(r'//## File "([^"]+)", line (\d+)')
_INSN = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_LABEL = re.compile(r"^(\.L_x_\d+|\$\S+):$")
_TARGET = re.compile(r"`\(([^)]+)\)")
#: The PTX file the ``nvdisasm -gp`` text names (its lines are the PTX's).
PTX_TEXT = ".nv_debug_ptx_txt"


def parse(sass, ptx_frames=None):
    """Return (instructions, {label: index}) of one kernel's ``nvdisasm -gi`` text.

    With ``ptx_frames`` (:func:`ptx_frames` of the PTX), ``sass`` is
    ``nvdisasm -gp`` text (each instruction's PTX line) and an instruction's
    frames are those of its PTX line.
    """
    insns, labels, frames, fresh = [], {}, (), True
    for line in sass.splitlines():
        m = _FRAME.search(line)
        if m and m.group(1) == PTX_TEXT and ptx_frames is not None:
            frames = ptx_frames.get(int(m.group(2)), ())
            continue
        if m:
            frames = (frames if not fresh else ()) + ((m.group(1), int(m.group(2))),)
            fresh = False
            continue
        m = _LABEL.match(line.strip())
        if m:
            labels[m.group(1)] = len(insns)
            continue
        m = _INSN.match(line)
        if m:
            fresh = True
            t = _TARGET.search(m.group(4))
            insns.append(Insn(int(m.group(1), 16), m.group(3), (m.group(2) or "").strip(),
                              t.group(1) if t else "", frames, m.group(4).strip()))
    return insns, labels


def successors(insns, labels, i, diverged=False):
    """Return the indices control may go to after instruction ``i`` (-1: exit).

    ``BRA.DIV`` (taken when the warp is not converged, to a slower
    ``WARPSYNC.COLLECTIVE`` version of a warp intrinsic) is taken exactly
    when ``diverged``. ``CALL`` and ``RET`` are :func:`walk`'s (a return
    goes where its call came from).
    """
    ins = insns[i]
    op = ins.op.split(".")[0]
    if op in ("CALL", "RET", "BRX", "JMX", "JMP"):
        raise ValueError(f"unsupported control flow at {ins.addr:#x}: {ins.op}")
    cond = ins.pred not in ("", "@PT")
    if op == "EXIT":
        return [-1, i + 1] if cond else [-1]
    if ins.op.startswith("BRA.DIV"):
        return [labels[ins.target] if diverged else i + 1]
    if op == "BRA":
        target = labels[ins.target]
        if ins.addr == insns[target].addr:  # the self-loop after the last EXIT
            return []
        return [target, i + 1] if cond else [target]
    return [i + 1]


#: Opcodes that never match a waypoint: branches and convergence bookkeeping.
_NO_MATCH = {"BRA", "BSSY", "BSYNC", "BREAK", "YIELD", "NOP"}


def walk(insns, labels, waypoints, diverged=False):
    """Return the cheapest walk from the entry to EXIT through ``waypoints``.

    ``waypoints`` are ``(path, line)`` pairs; an instruction matches one when
    any of its frames is that line. ``diverged``: the warp is not converged
    (one lane calls). A ``CALL`` to a function of the text
    (an out-of-line body, devalloc.device.outline) is followed into it and
    its ``RET`` back to the instruction after that call: the call's
    argument moves, the ``CALL``, the callee's instructions and its ``RET``
    all count. Returns the list of instruction indices executed. Raises
    ValueError when no walk exists.
    """
    n = len(waypoints)

    def nexts(i, stack):
        # (next instruction, return stack) pairs after instruction i.
        ins = insns[i]
        op = ins.op.split(".")[0]
        if op not in ("CALL", "RET"):
            return [(j, stack) for j in successors(insns, labels, i, diverged)]
        # A predicated call or return may also fall through.
        after = [] if ins.pred in ("", "@PT") else [(i + 1, stack)]
        if op == "RET":
            if not stack:
                raise ValueError(f"RET at {ins.addr:#x} outside a call")
            return [(stack[-1], stack[:-1])] + after
        if ins.target not in labels:
            raise ValueError(f"CALL at {ins.addr:#x} to {ins.target!r}: not in the text")
        return [(labels[ins.target], stack + (i + 1,))] + after

    def advance(k, run, i):
        # Consume the waypoints instruction i matches; a waypoint equal to
        # the one before it needs a new visit of its line (``run``: the
        # instruction before i matched the last consumed waypoint).
        # Control-flow bookkeeping matches nothing: a BSYNC where the branch
        # around a line's body reconverges carries that line too.
        frames = () if insns[i].op.split(".")[0] in _NO_MATCH else insns[i].frames
        while k < n and waypoints[k] in frames:
            if run and k and waypoints[k] == waypoints[k - 1]:
                break
            k += 1
            run = True
        return k, k > 0 and waypoints[k - 1] in frames

    start = (0, 0, False, ())
    best = {start: 0}
    back = {}
    heap = [(0, start)]
    reached = 0
    while heap:
        cost, state = heapq.heappop(heap)
        if best.get(state, None) != cost:
            continue
        i = state[0]
        k2, run = advance(state[1], state[2], i)
        reached = max(reached, k2)
        for j, stack in nexts(i, state[3]):
            if j == -1:
                if k2 == n:
                    path = [i]
                    while state in back:
                        state = back[state]
                        path.append(state[0])
                    return path[::-1]
                continue
            nxt = (j, k2, run, stack)
            if cost + 1 < best.get(nxt, 1 << 60):
                best[nxt] = cost + 1
                back[nxt] = state
                heapq.heappush(heap, (cost + 1, nxt))
    raise ValueError(f"no walk to EXIT through the waypoints: #{reached} ({waypoints[reached]}) "
                     "is never reached after the ones before it" if reached < n else
                     "no walk from the last waypoint to EXIT")


@lru_cache(maxsize=None)
def _functions(path):
    """Return [(first line, last line, name)] of the functions defined in ``path``."""
    tree = ast.parse(Path(path).read_text())
    return [(f.lineno, f.end_lineno, f.name) for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef)]


def function_of(frame):
    """Return ``module.function`` of a ``(path, line)`` frame (innermost function)."""
    path, line = frame
    inside = [(b - a, name) for a, b, name in _functions(path) if a <= line <= b]
    name = min(inside)[1] if inside else "?"
    return f"{Path(path).stem}.{name}"


@contextlib.contextmanager
def line_info():
    """Compile devalloc's device functions with line info while inside.

    Sets ``lineinfo`` on every device dispatcher of :mod:`devalloc.device`
    and drops their compiled versions, so that kernels compiled inside get
    the lines of every inlined device function; restores both on exit.
    """
    from ..testing.machine import device_modules

    disps = {id(v): v for m in device_modules() for v in vars(m).values()
             if hasattr(v, "py_func") and hasattr(v, "targetoptions")}
    saved = [(d, d.targetoptions.get("lineinfo", False), dict(d.overloads))
             for d in disps.values()]
    try:
        for d, _, _ in saved:
            d.targetoptions["lineinfo"] = True
            d.overloads.clear()
        yield
    finally:
        for d, flag, overloads in saved:
            d.targetoptions["lineinfo"] = flag
            d.overloads.clear()
            d.overloads.update(overloads)


def sass_with_lines(kernel, sig, cc=(9, 0)):
    """Return the ``nvdisasm -gi`` text of ``kernel`` compiled with line info."""
    return assembled_with_lines(kernel, sig, cc, "-gi")[1][0]


def assembled_with_lines(kernel, sig, cc, *options):
    """Return ``(PTX, [nvdisasm text per option], ptxas -v report)`` of ``kernel``.

    Compiled once with line info (devalloc's device functions too:
    :func:`line_info`), assembled with ``ptxas -v -lineinfo``, then
    disassembled once per nvdisasm option (one argument each, e.g. ``"-gi"``,
    ``"-gp"``, ``"--life-range-mode=count"``).
    """
    with line_info():
        ptx, _ = aot.compile_ptx(kernel, sig, cc=cc, lineinfo=True)
    arch = f"sm_{cc[0]}{cc[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        info = subprocess.run([aot.tool_path("ptxas"), "-v", f"-arch={arch}", "-lineinfo",
                               str(src), "-o", str(out)], check=True, capture_output=True,
                              text=True).stderr
        return ptx, [subprocess.run([aot.tool_path("nvdisasm"), "-c", o, str(out)], check=True,
                                    capture_output=True, text=True).stdout
                     for o in options], info


_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)"
                  r"(?:,\s*function_name\s+[^,]+,\s*inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_FUNC = re.compile(r"^\s*(\.visible\s+|\.weak\s+)?\.(entry|func)\b")


def ptx_frames(ptx):
    """Return ``{PTX line: frames}``: the source frames (innermost first) of
    each line of ``ptx``, from its ``.loc`` directives.

    A ``.loc`` with ``inlined_at`` names the call site's location; the
    call site's own frames are those of the last ``.loc`` of that location
    in the same function (NVVM states a chain outermost first).
    """
    lines = ptx.splitlines()
    files = {int(m.group(1)): m.group(2) for m in map(_FILE.match, lines) if m}
    out, chains, frames = {}, {}, ()
    for n, line in enumerate(lines, 1):
        if _FUNC.match(line):
            chains, frames = {}, ()
        m = _LOC.match(line)
        if m:
            f, ln, col = (int(g) for g in m.group(1, 2, 3))
            outer = ()
            if m.group(4):
                at = tuple(int(g) for g in m.group(4, 5, 6))
                outer = chains.get(at, ((files[at[0]], at[1]),))
            frames = (((files[f], ln),) if ln else ()) + outer
            chains[(f, ln, col)] = frames
            continue
        out[n] = frames
    return out


def load(kernel, sig, cc=(9, 0), frames="auto"):
    """Return ``parse``'s (instructions, labels) of ``kernel`` with line info.

    ``frames``: where each instruction's source frames come from. "sass":
    ``nvdisasm -gi``. "ptx": ``nvdisasm -gp`` (the instruction's PTX line)
    and that line's ``.loc`` chain (:func:`ptx_frames`). "auto" (default):
    "sass", or "ptx" when the kernel calls a function: in a called function
    nvdisasm 13's ``-gi`` names wrong files and lines for the frames an
    instruction is inlined at (the PTX's ``inlined_at`` are right).
    """
    if frames not in ("auto", "sass", "ptx"):
        raise ValueError(f"frames={frames!r}: 'auto', 'sass' or 'ptx'")
    ptx, (by_source, by_ptx), _ = assembled_with_lines(kernel, sig, cc, "-gi", "-gp")
    insns, labels = parse(by_source)
    if frames == "sass" or (frames == "auto"
                            and not any(i.op.startswith("CALL") for i in insns)):
        return insns, labels
    return parse(by_ptx, ptx_frames(ptx))


# ------------------------------------------------------------------ paths


def k_scoped_step(ctx, n, out):
    """One ``scoped`` call with the state a thread holds (``out[i]``)."""
    i = cuda.grid(1)
    off, s = devalloc.scoped(ctx, out[i], n)
    out[i] = off + s


@dataclass(frozen=True)
class PathSpec:
    """A path: the probe kernel it runs in, what it is, and its waypoints.

    ``lone``: one lane of its warp calls (the others are elsewhere), so warp
    intrinsics take their not-converged versions (``BRA.DIV``).
    """

    kernel: str
    what: str
    waypoints: tuple
    lone: bool = True


_S = "device/slab.py"
_C = "device/core.py"
_P = "tools/probe_kernels.py"
_B = "device/bumpalloc.py"
_SC = "device/scope.py"

#: The paths ``python -m devalloc.probes --json`` reports (sm_90).
PATHS = {
    "alloc_fresh_slab": PathSpec(
        "alloc", "alloc(ctx, 64) by one lane, from the hinted slab's never-used blocks", (
            At(_C, "return _alloc_small(meta, npages, c, mask, leader, rank, lanes, prof)"),
            At(_S, "first = uint32(_lo32(s >> L.CURSOR_SHIFT)"),
            At(_S, "glo = uint32((got << L.GRANT_COUNT_SHIFT) | first)"),
            At(_S, "return ((int64(p) + 1) << L.GRANT_PAGE_SHIFT)"),
            At(_S, "return _grant_offset(g, uint32(0), c, _pshift(meta))"),
        )),
    "alloc_reuse": PathSpec(
        "alloc", "alloc(ctx, 64) by one lane, from the hinted slab's freed blocks (all bumped)", (
            At(_C, "return _alloc_small(meta, npages, c, mask, leader, rank, lanes, prof)"),
            At(_S, "live = uint32(_lo32(s >> L.N_SHIFT)"),
            At(_S, "return w, _lowest(free, want)"),
            At(_S, "out = uint32(out | low)"),
            At(_S, "ghi = uint32(uint32(L.GRANT_REUSE >> 32) | w)"),
            At(_S, "return ((int64(p) + 1) << L.GRANT_PAGE_SHIFT)"),
            At(_S, "mine = _lo32(_take_bits("),
            At(_S, "return (g & ~L.WORD_MASK) | int64(mine)"),
            At(_S, "return _grant_offset(g, uint32(0), c, _pshift(meta))"),
        )),
    "free_lone": PathSpec(
        "free", "free of a live block by one lane; its slab keeps other live blocks", (
            At(_C, "s = _load(meta, _at(L.state_word(p)))"),
            At(_C, "ok = _free_small(meta, npages, p, s, rel, _prof_of(ctx))"),
            At(_S, "widx = _bitmap_word(meta, npages, p, int64(b >> L.WORD_SHIFT))"),
            At(_S, "old = _release_or(meta, _at(widx), int64(bits))"),
            At(_S, "_release_slots(meta, npages, p, freed, False, c, prof)"),
            At(_S, "if old & bit or dup:"),
        )),
    "free_warp32": PathSpec(
        "free", "a converged warp freeing 32 live blocks of one bitmap word (the leader's "
        "path, which the warp issues); the slab keeps other live blocks", (
            At(_C, "s = _load(meta, _at(L.state_word(p)))"),
            At(_C, "ok = _free_small(meta, npages, p, s, rel, _prof_of(ctx))"),
            At(_S, "widx = _bitmap_word(meta, npages, p, int64(b >> L.WORD_SHIFT))"),
            At(_S, "bits, dup = warp.merge_bits(mask, bit)"),
            At(_S, "old = _release_or(meta, _at(widx), int64(bits))"),
            At(_S, "_release_slots(meta, npages, p, freed, False, c, prof)"),
            At(_S, "old = warp.share(mask, leader, old)"),
            At(_S, "if old & bit or dup:"),
        ), lone=False),
    "bump": PathSpec(
        "bump", "bump(ctx, n) by one lane, from the current chunk", (
            At(_B, "base = _claim_fast(meta, npages, uint32(size * lanes), lanes, _prof_of(ctx))"),
            At(_B, "return cursor + (page << _pshift(meta))"),
            At(_B, "off = base + int64(uint32(rank * size))"),
        )),
    "scoped": PathSpec(
        "scoped_step", "scoped(ctx, s, n) served from the thread's current chunk", (
            # (No waypoint on the header's size read: NVVM merges it with
            # _chunk_ok's read of the same bytes.)
            At(_SC, "return size <= end - c"),
            At(_SC, "return chunk + cursor, L.scope_advance(s, int64(size))"),
        )),
}


def kernel_of(name):
    """Return the probe kernel named ``name`` (:data:`.probe_kernels.PROBES` or here)."""
    if name == "scoped_step":
        return k_scoped_step
    return probe_kernels.PROBES[name]


#: Opcodes that exist only for memory ordering: fences and what acquire and
#: release atomics lower to (``MEMBAR``, ``ERRBAR``, ``CGAERRBAR``, L1
#: invalidation ``CCTL.IVALL``).
ORDERING = {"MEMBAR", "ERRBAR", "CGAERRBAR", "CCTL", "FENCE"}


def measure(cc=(9, 0), paths=None, frames="auto", outline=None):
    """Return ``{path: {"instructions", "what", "by_function", "ordering"}}`` for ``cc``.

    ``ordering``: the memory-ordering instructions on the path, by opcode.
    ``frames``: :func:`load`'s. ``outline``: the heap's choice of
    out-of-line bodies the kernels compile for (``Heap(outline=)``; None:
    the process default, ``DEVALLOC_OUTLINE``).
    """
    out = {}
    sass = {}
    sig = probe_kernels.sig_for("normal", outline)
    for name, spec in (paths or PATHS).items():
        if spec.kernel not in sass:
            sass[spec.kernel] = load(kernel_of(spec.kernel), sig, cc, frames)
        insns, labels = sass[spec.kernel]
        try:
            trail = walk(insns, labels, [w.resolve() for w in spec.waypoints], spec.lone)
        except ValueError as e:
            raise ValueError(f"path {name}: {e}") from None
        by = {}
        fences = {}
        for i in trail:
            f = function_of(insns[i].frames[0]) if insns[i].frames else "(no line)"
            by[f] = by.get(f, 0) + 1
            if insns[i].op.split(".")[0] in ORDERING:
                fences[insns[i].op] = fences.get(insns[i].op, 0) + 1
        out[name] = {"instructions": len(trail), "what": spec.what,
                     "by_function": dict(sorted(by.items(), key=lambda kv: -kv[1])),
                     "ordering": fences}
    return out


def floor(cc=(9, 0)):
    """Return the instructions the floor kernel (one ``atomic.add``) executes."""
    insns, labels = load(probe_kernels.k_atomic_floor, probe_kernels.SIG, cc)
    return len(walk(insns, labels, []))


def trace(name, cc=(9, 0), frames="auto", outline=None):
    """Return the walk of path ``name`` as text: address, opcode, innermost line.

    ``outline``: as for :func:`measure`.
    """
    spec = PATHS[name]
    insns, labels = load(kernel_of(spec.kernel), probe_kernels.sig_for("normal", outline), cc,
                         frames)
    rows = []
    for i in walk(insns, labels, [w.resolve() for w in spec.waypoints], spec.lone):
        ins = insns[i]
        where = (f"{Path(ins.frames[0][0]).name}:{ins.frames[0][1]}" if ins.frames else "")
        rows.append(f"{ins.addr:05x} {ins.pred:5} {ins.op:20} {ins.operands:40} {where}")
    return "\n".join(rows)
