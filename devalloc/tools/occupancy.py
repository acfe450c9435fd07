"""What a kernel's register count costs in resident warps (pure arithmetic).

``ptxas -v`` reports the registers a kernel uses, but an SM hands them out
in units: 256 registers per warp (8 per thread) on every architecture
devalloc compiles for (sm_70 to sm_90), so a kernel of 33 to 40 registers
keeps as many warps resident as one of 40, and 41 to 48 as many as 48.
:func:`allocated` gives that figure and :func:`warps_per_sm` the warps an SM
can keep resident as far as registers allow (blocks of ``block`` threads,
each block's registers taken whole, at most the architecture's warps and
blocks per SM; shared memory, the kernel's own, is not counted). The
constants are the architectures' published limits (CUDA C++ Programming
Guide, "Compute Capabilities").
No GPU, no Numba: :mod:`devalloc.tools.codesize` reports both beside each
register count.
"""

#: Registers per SM (every cc from 7.0 to 9.0).
REGISTERS_PER_SM = 65536
#: Registers are allocated per warp in units of this many (8 per thread).
WARP_UNIT = 256
#: Threads per warp.
WARP = 32
#: Resident warps per SM, by compute capability (major, minor).
MAX_WARPS = {(7, 0): 64, (7, 5): 32, (8, 0): 64, (8, 6): 48, (8, 7): 48, (8, 9): 48,
             (9, 0): 64}
#: Resident blocks per SM, by compute capability.
MAX_BLOCKS = {(7, 0): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24,
              (9, 0): 32}


def allocated(registers):
    """Return the registers per thread an SM sets aside for a kernel using ``registers``.

    Rounded up to the allocation unit (8 per thread). Raises ValueError for a
    count that is not an int from 1 to 255 (ptxas's range).
    """
    if not isinstance(registers, int) or isinstance(registers, bool) or not 1 <= registers <= 255:
        raise ValueError(f"registers must be an int from 1 to 255, got {registers!r}")
    per_thread = WARP_UNIT // WARP
    return -(-registers // per_thread) * per_thread


def warps_per_sm(registers, cc=(9, 0), block=256):
    """Return the warps an SM of compute capability ``cc`` keeps resident, by registers.

    For blocks of ``block`` threads (a multiple of 32, at most 1024): as
    many whole blocks as the register file holds, at most the cc's warp
    limit. Raises ValueError for an unknown ``cc`` (known: :data:`MAX_WARPS`)
    or a block size out of range.
    """
    cc = tuple(cc)
    if cc not in MAX_WARPS:
        raise ValueError(f"unknown compute capability {cc}; known: {sorted(MAX_WARPS)}")
    if not isinstance(block, int) or block % WARP or not WARP <= block <= 1024:
        raise ValueError(f"block must be a multiple of 32 from 32 to 1024, got {block!r}")
    warps = block // WARP
    per_block = allocated(registers) * WARP * warps
    blocks = min(REGISTERS_PER_SM // per_block, MAX_WARPS[cc] // warps, MAX_BLOCKS[cc])
    return blocks * warps
