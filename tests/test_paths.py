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
