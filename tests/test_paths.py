"""The path walker (devalloc.tools.paths) on hand-written SASS: no compiler needed.

The figures it gives for devalloc's own paths are pinned in
tests/test_compile.py (they need NVVM and ptxas).
"""

import pytest

from devalloc.tools import paths

F = "/src/k.py"

#: A kernel with a branch (line 2: skip or not), a loop (lines 3-4) and
#: a predicated EXIT, in ``nvdisasm -gi`` form.
SASS = f"""
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "{F}", line 2 inlined at "{F}", line 9
	//## File "{F}", line 9
        /*0010*/                   ISETP.NE.AND P0, PT, R0, RZ, PT ;
        /*0020*/              @P0 BRA `(.L_x_0) ;
	//## File "{F}", line 5
        /*0030*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0040*/                   IADD3 R2, R2, 0x1, RZ ;
.L_x_0:
	//## File "{F}", line 3
        /*0050*/                   ISETP.GT.AND P1, PT, R2, RZ, PT ;
	//## File "{F}", line 4
        /*0060*/                   IADD3 R2, R2, -0x1, RZ ;
        /*0070*/              @P1 BRA `(.L_x_0) ;
	//## File "{F}", line 6
        /*0080*/              @P2 EXIT ;
        /*0090*/                   BRA.DIV UR4, `(.L_x_1) ;
        /*00a0*/                   EXIT ;
.L_x_1:
	//## File "{F}", line 7
        /*00b0*/                   WARPSYNC.COLLECTIVE R0, `(.L_x_1) ;
        /*00c0*/                   EXIT ;
.L_x_2:
        /*00d0*/                   BRA `(.L_x_2) ;
"""


@pytest.fixture
def sass():
    return paths.parse(SASS)


def test_parse_reads_frames_labels_and_predicates(sass):
    insns, labels = sass
    assert len(insns) == 14 and labels == {".L_x_0": 5, ".L_x_1": 11, ".L_x_2": 13}
    assert insns[0].frames == ()
    assert insns[1].frames == ((F, 2), (F, 9)) and insns[2].frames == insns[1].frames
    assert insns[2].pred == "@P0" and insns[2].target == ".L_x_0"
    assert paths.successors(*sass, 13) == []  # the self-loop after the last EXIT
    assert paths.successors(*sass, 8) == [-1, 9]  # a predicated EXIT


def test_the_walk_is_the_cheapest_through_the_waypoints(sass):
    insns, labels = sass
    lines = lambda trail: [insns[i].frames[0][1] if insns[i].frames else 0 for i in trail]
    # No waypoint: skip line 5, run the loop body once (it is a do-while), exit early.
    assert lines(paths.walk(insns, labels, [])) == [0, 2, 2, 3, 4, 4, 6]
    # Line 5, then two loop iterations (line 4 twice), then past the early exit.
    trail = paths.walk(insns, labels, [(F, 5), (F, 4), (F, 4), (F, 6)])
    assert lines(trail) == [0, 2, 2, 5, 5, 3, 4, 4, 3, 4, 4, 6]
    # A waypoint matches an instruction inlined from its line (line 9).
    assert len(paths.walk(insns, labels, [(F, 9)])) == 7


def test_bra_div_is_taken_only_when_the_warp_is_diverged(sass):
    insns, labels = sass
    with pytest.raises(ValueError):  # converged: the collective version is never run
        paths.walk(insns, labels, [(F, 7)])
    last = paths.walk(insns, labels, [(F, 7)], diverged=True)
    assert [insns[i].addr for i in last[-4:]] == [0x80, 0x90, 0xB0, 0xC0]


def test_an_unreachable_waypoint_is_an_error(sass):
    with pytest.raises(ValueError, match="never reached"):
        paths.walk(*sass, [(F, 7), (F, 5)])


def test_waypoints_name_lines_by_their_text():
    path, line = paths.At("device/slab.py", "def _reserve(meta, npages, p, c, want, prof):").resolve()
    assert path.endswith("slab.py") and "_reserve" in open(path).read().splitlines()[line - 1]
    with pytest.raises(ValueError, match="0 lines"):
        paths.At("device/slab.py", "no such text anywhere").resolve()
    assert paths.function_of((path, line + 3)) == "slab._reserve"


#: A kernel that calls an out-of-line function (devalloc.device.outline) which
#: may return early (a predicated RET), in ``nvdisasm -gi`` form.
CALLS = f"""
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "{F}", line 2
        /*0010*/                   MOV R20, 0x40 ;
        /*0020*/                   CALL.REL.NOINC `($k$body) ;
	//## File "{F}", line 3
        /*0030*/                   STG.E.64 desc[UR4][R2.64], R4 ;
        /*0040*/                   EXIT ;
.L_x_0:
        /*0050*/                   BRA `(.L_x_0) ;
$k$body:
	//## File "{F}", line 10
        /*0060*/                   ISETP.NE.AND P0, PT, R4, RZ, PT ;
        /*0070*/              @!P0 RET.REL.NODEC R20 `(.text.k) ;
	//## File "{F}", line 11
        /*0080*/                   IADD3 R4, R4, 0x1, RZ ;
        /*0090*/                   RET.REL.NODEC R20 `(.text.k) ;
"""


def test_a_call_is_followed_into_its_function_and_back():
    insns, labels = paths.parse(CALLS)
    assert labels["$k$body"] == 6 and insns[2].target == "$k$body"
    addrs = lambda trail: [insns[i].addr for i in trail]
    # The cheapest walk returns early; through line 11 it runs the body.
    assert addrs(paths.walk(insns, labels, [])) == [0x0, 0x10, 0x20, 0x60, 0x70, 0x30, 0x40]
    assert addrs(paths.walk(insns, labels, [(F, 11), (F, 3)])) == [
        0x0, 0x10, 0x20, 0x60, 0x70, 0x80, 0x90, 0x30, 0x40]
    with pytest.raises(ValueError, match="unsupported control flow"):
        paths.successors(insns, labels, 2)  # only the walk knows where a RET goes


def test_a_ret_outside_a_call_is_an_error():
    insns, labels = paths.parse(CALLS.replace("CALL.REL.NOINC `($k$body)", "BRA `($k$body)"))
    with pytest.raises(ValueError, match="outside a call"):
        paths.walk(insns, labels, [(F, 11)])


#: PTX with an inlined chain (line 20 of G inlined at line 5 of F, inlined
#: at line 9 of F) and a later .loc that names only its innermost level.
PTX = """\t.file\t1 "/src/f.py"
\t.file\t2 "/src/g.py"
.visible .entry k(
{
\t.loc\t1 9 0
\tmov.u32 \t%r1, 0;
\t.loc\t1 5 1, function_name $L__info_string0, inlined_at 1 9 0
\t.loc\t2 20 1, function_name $L__info_string1, inlined_at 1 5 1
\tadd.s32 \t%r1, %r1, 1;
\t.loc\t2 21 1, function_name $L__info_string1, inlined_at 1 5 1
\tadd.s32 \t%r1, %r1, 2;
\t.loc\t1 0 1
\tret;
}
"""


def test_ptx_frames_follow_the_inlined_at_chain():
    frames = paths.ptx_frames(PTX)
    f, g = "/src/f.py", "/src/g.py"
    assert frames[6] == ((f, 9),)
    assert frames[9] == ((g, 20), (f, 5), (f, 9))
    assert frames[11] == ((g, 21), (f, 5), (f, 9))
    assert frames[13] == ()  # line 0: no source line
    # nvdisasm -gp names each instruction's PTX line.
    sass = f"""
	//## File "{paths.PTX_TEXT}", line 9
        /*0000*/                   IADD3 R1, R1, 0x1, RZ ;
	//## File "{paths.PTX_TEXT}", line 13
        /*0010*/                   EXIT ;
"""
    insns, _ = paths.parse(sass, frames)
    assert insns[0].frames == frames[9] and insns[1].frames == ()


def test_frames_must_name_a_source():
    with pytest.raises(ValueError, match="'auto', 'sass' or 'ptx'"):
        paths.load(None, None, frames="gi")
