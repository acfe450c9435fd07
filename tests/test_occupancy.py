"""Resident warps by registers (devalloc.tools.occupancy): plain arithmetic."""

import pytest

from devalloc.tools import occupancy as O


@pytest.mark.parametrize("regs, unit", [(1, 8), (8, 8), (9, 16), (32, 32), (33, 40), (36, 40),
                                        (37, 40), (40, 40), (41, 48), (44, 48), (48, 48),
                                        (255, 256)])
def test_registers_are_allocated_in_units_of_8(regs, unit):
    assert O.allocated(regs) == unit


@pytest.mark.parametrize("regs, warps", [(24, 64), (32, 64), (36, 48), (40, 48), (44, 40),
                                         (48, 40), (56, 32), (64, 32), (108, 16), (255, 8)])
def test_warps_per_sm_on_sm90_in_256_thread_blocks(regs, warps):
    # 65,536 registers per SM, whole blocks of 8 warps, at most 64 warps.
    assert O.warps_per_sm(regs, (9, 0)) == warps


def test_the_architecture_caps_warps_and_blocks():
    assert O.warps_per_sm(16, (7, 5)) == 32  # Turing: 32 warps per SM
    assert O.warps_per_sm(16, (8, 6)) == 48  # GA10x: 48
    assert O.warps_per_sm(16, (9, 0), block=32) == 32  # 32 blocks of one warp
    assert O.warps_per_sm(16, (8, 9), block=32) == 24  # Ada: 24 blocks
    assert O.warps_per_sm(255, (9, 0), block=1024) == 0  # a block does not fit


@pytest.mark.parametrize("bad", [0, 256, -1, 3.5, "40", True, None])
def test_a_register_count_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="registers must be an int from 1 to 255"):
        O.allocated(bad)


def test_an_unknown_architecture_or_block_is_refused():
    with pytest.raises(ValueError, match=r"unknown compute capability \(6, 1\)"):
        O.warps_per_sm(32, (6, 1))
    for block in (0, 48, 2048, 256.0):
        with pytest.raises(ValueError, match="block must be a multiple of 32"):
            O.warps_per_sm(32, (9, 0), block=block)
