"""Where the registers go (devalloc.tools.liveregs): live registers by source function.

The parsers on hand-written ``nvdisasm`` text (no compiler needed); one
compiled kernel (slow: NVVM and ptxas, in a subprocess with the real CUDA
target) whose report must agree with ptxas and with itself.
"""

import json
import os
import subprocess
import sys

import pytest

from devalloc.tools import liveregs, paths

F = "/src/k.py"

#: ``nvdisasm --life-range-mode=count`` text: a kernel, then a function it
#: calls in the same section (addresses run on).
COUNTS = """
        .text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          // |   1 |     |
        /*0010*/                   IADD3 R12, R2, 0x1, RZ ;                        // |   3 |   1 |
        /*0020*/                   CALL.REL.NOINC `($k$f) ;                        // |   4 |     |
        /*0030*/                   EXIT ;                                          // |     |     |
$k$f:
        /*0040*/                   IMAD.WIDE R14, R12, 0x8, R4 ;                   // |  11 |     |
        /*0050*/                   RET.REL.NODEC R20 `(k) ;                        // |   2 |     |
"""

#: The same instructions as ``nvdisasm -gi`` text, with their lines.
SASS = f"""
	//## File "{F}", line 2
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   IADD3 R12, R2, 0x1, RZ ;
        /*0020*/                   CALL.REL.NOINC `($k$f) ;
	//## File "{F}", line 3
        /*0030*/                   EXIT ;
$k$f:
	//## File "{F}", line 6
        /*0040*/                   IMAD.WIDE R14, R12, 0x8, R4 ;
	//## File "{F}", line 7
        /*0050*/                   RET.REL.NODEC R20 `(k) ;
"""


#: ``nvdisasm --print-life-ranges`` (wide) text of the same instructions:
#: a column per register under the header's numbers (R0..R21 here), each
#: mark under its register number's last digit, as nvdisasm lays them out.
_HEADER = "|  # 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21  |"


def _row(count, marks):
    cells = [" "] * (len(_HEADER) - 2)
    for r, m in marks.items():
        cells[_HEADER.index(f" {r} ") + len(str(r))] = m
    return f"| {count:>2}" + "".join(cells)[4:] + "|"


def _ranges(rows):
    lines = ["        //                      " + _HEADER]
    for ins, count, marks in rows:
        lines.append(ins if count is None else f"{ins:50} // {_row(count, marks)}")
    return "\n".join(lines) + "\n"


RANGES = _ranges([
    ("        /*0000*/  LDC R1, c[0x0][0x28] ;", 1, {1: "^"}),
    ("        /*0010*/  IADD3 R12, R2, 0x1, RZ ;", 3, {1: ":", 2: "v", 12: "^"}),
    ("        /*0020*/  CALL.REL.NOINC `($k$f) ;", 4, {1: ":", 12: ":", 4: ":", 5: ":"}),
    ("        /*0030*/  EXIT ;", 0, {}),
    ("$k$f:", None, None),
    ("        /*0040*/  IMAD.WIDE R14, R12, 0x8, R4 ;", 4,
     {1: ":", 4: ":", 12: "v", 14: "^", 15: "^"}),
    ("        /*0050*/  RET.REL.NODEC R20 `(k) ;", 2, {1: ":", 20: "v"}),
])


def test_live_registers_read_each_registers_column():
    got = liveregs.live_registers(RANGES)
    assert got[0x0] == {1: "^"}
    assert got[0x10] == {1: ":", 2: "v", 12: "^"}
    assert got[0x40] == {1: ":", 4: ":", 12: "v", 14: "^", 15: "^"}
    assert got[0x50] == {1: ":", 20: "v"}
    assert got[0x30] == {}
    # The wide text carries the counts too.
    assert liveregs.live_counts(RANGES) == {0x0: 1, 0x10: 3, 0x20: 4, 0x30: 0, 0x40: 4,
                                            0x50: 2}


def test_a_live_register_is_traced_to_its_write_within_its_function():
    insns, labels = paths.parse(SASS)
    ranges = liveregs.live_registers(RANGES)
    k = [i.addr for i in insns].index(0x40)
    start = liveregs.function_start(labels, k)
    assert insns[start].addr == 0x40  # the called function's first instruction
    assert liveregs.function_start(labels, 1) == 0  # the kernel's
    # R14 and R15 are written here; R1 and R4 above the function (the
    # kernel's stack pointer, an argument): no write inside it.
    assert liveregs.written_at(insns, ranges, k, start) == {1: None, 4: None, 12: None,
                                                            14: k, 15: k}
    # From the kernel's own start, R1 is its first instruction's.
    assert liveregs.written_at(insns, ranges, 1)[1] == 0


def test_live_counts_read_the_first_count_of_each_instruction():
    # An instruction with no live register has no count (EXIT here).
    assert liveregs.live_counts(COUNTS) == {0x0: 1, 0x10: 3, 0x20: 4, 0x40: 11, 0x50: 2}


def test_span_is_the_highest_general_register_plus_one():
    # R20 is the highest; RZ and uniform registers (UR4) do not count.
    assert liveregs.span(COUNTS) == 21
    assert liveregs.span("        /*0000*/  ULDC UR4, c[0x0][0x0] ;\n") == 0
    # Only operands count: not a comment, a call's target or a label.
    assert liveregs.span("        /*0000*/  MOV R3, RZ ;  // R9 in a comment\n"
                         "        /*0010*/  CALL.REL.NOINC `($_Z1fR77_) ;\n"
                         "$_Z1fR66_:\n") == 4


def test_attribute_keeps_each_functions_most_and_the_first_peak(tmp_path):
    src = tmp_path / "k.py"
    src.write_text("def kernel():\n    x = 1\n    return f(x)\n\n\ndef f(x):\n"
                   "    y = x + 1\n    return y\n")
    insns, _ = paths.parse(SASS.replace(F, str(src)))
    by, peak = liveregs.attribute(insns, liveregs.live_counts(COUNTS))
    assert by == {"k.f": 11, "k.kernel": 4}
    assert insns[peak].addr == 0x40
    # Nothing counted: no peak, nothing by function.
    assert liveregs.attribute(insns, {}) == ({}, None)


MEASURE = """
import json, sys
from devalloc.tools import codesize, liveregs
op, k = sys.argv[1], int(sys.argv[2])
print(json.dumps({"live": liveregs.measure(op, k, top=50),
                  "plain": codesize.measure((9, 0), [op], timing=False)[op]["sites"][k]}))
"""


@pytest.mark.slow
def test_the_out_of_line_alloc_kernel_has_its_peak_in_the_search():
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM",
                                                            "DEVALLOC_OUTLINE")}
    proc = subprocess.run([sys.executable, "-c", MEASURE, "alloc", "2"], capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    live, plain = got["live"], got["plain"]
    # ptxas's count is the span plus what it reserves, the span at least
    # the live peak; line info moves the allocation by a register or so.
    assert live["peak_live"] <= live["span"] < live["registers"]
    assert abs(live["registers"] - plain["registers"]) <= 2, (live, plain)
    # The peak is the most of some function's, and the slab search that the
    # out-of-line body holds reaches it (measured: slab._pick under the
    # hinted page's _reserve, 38 of 42; since index passes start at the
    # warp's own word (issue 49), 37 of 40, tied with the large path's
    # _find_run, whose frames liveregs names as the peak's).
    assert max(live["by_function"].values()) == live["peak_live"]
    assert any(f.startswith("slab.") and n == live["peak_live"]
               for f, n in live["by_function"].items()), live
    assert any(frame.startswith(("slab._find:", "pages._alloc_large:"))
               for frame in live["peak"]), live
    # Every register live there is traced to a write or said not to be.
    assert len(live["at_peak"]) == live["peak_live"], live


def test_probes_take_a_code_size_kernel_as_op_and_sites():
    import argparse

    from devalloc.tools import probes

    assert probes._op_sites("alloc:4") == ("alloc", 4)
    for bad in ("alloc:3", "alloc", "malloc:1", "bump:x"):
        with pytest.raises(argparse.ArgumentTypeError, match="one of alloc:1"):
            probes._op_sites(bad)
