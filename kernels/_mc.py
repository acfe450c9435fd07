"""Host helpers shared by the example kernels: RNG states and error bars.

``rng_states(n, seed)`` returns, as a host array, exactly the states that
``numba.cuda.random.create_xoroshiro128p_states(n, seed)`` puts on the
device: thread ``i`` gets the generator seeded by SplitMix64(``seed``) and
jumped ``i`` times by 2**64 steps, so every thread has its own independent
stream. Each example uploads one copy of it for the heap version and one for
its worst-case twin, so both draw the very same numbers.

Why not call ``create_xoroshiro128p_states`` twice? On the CUDA simulator
numba runs its host seeding in object mode, about 12 ms per thread (3 s for
256 threads); the same arithmetic on Python integers takes well under a
millisecond per thread. On a GPU numba's compiled seeding is used.

Importing this module imports numba: call ``devalloc.target.choose()`` first.
"""

import math
import warnings

import numpy as np
from numba import config
from numba.cuda.random import init_xoroshiro128p_states_cpu, xoroshiro128p_dtype

if config.ENABLE_CUDASIM:
    # The simulator runs numba.cuda.random's wrapping uint64 arithmetic on
    # NumPy scalars (overflow warnings) and its host seeding in object mode.
    from numba.core.errors import NumbaWarning

    warnings.filterwarnings("ignore", message="overflow encountered")
    warnings.filterwarnings("ignore", category=NumbaWarning)

_M64 = (1 << 64) - 1
#: numba.cuda.random's jump polynomial: advance a xoroshiro128+ state by 2**64.
_JUMP = (0xBEAC0467EBA5FACB, 0xD86B048B86AA9922)


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & _M64


def _next(s0, s1):
    s1 ^= s0
    return _rotl(s0, 55) ^ s1 ^ ((s1 << 14) & _M64), _rotl(s1, 36)


def _jump(s0, s1):
    t0 = t1 = 0
    for word in _JUMP:
        for b in range(64):
            if (word >> b) & 1:
                t0 ^= s0
                t1 ^= s1
            s0, s1 = _next(s0, s1)
    return t0, t1


def _splitmix64(seed):
    z = (seed + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def rng_states(n, seed):
    """Return ``n`` xoroshiro128+ states (host array) equal to numba's for ``seed``."""
    states = np.empty(n, dtype=xoroshiro128p_dtype)
    if not config.ENABLE_CUDASIM:
        init_xoroshiro128p_states_cpu(states, seed, 0)  # compiled: fast
        return states
    s0 = s1 = _splitmix64(int(seed) & _M64)
    for i in range(n):
        if i:
            s0, s1 = _jump(s0, s1)
        states[i]["s0"] = s0
        states[i]["s1"] = s1
    return states


def mean_stderr(x):
    """Return the mean of ``x`` and its standard error (0.0 for fewer than 2)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return 0.0, 0.0
    if x.size == 1:
        return float(x[0]), 0.0
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def launch_shape(threads, block):
    """Return ``(grid, block)`` covering ``threads`` threads."""
    block = max(1, min(block, threads))
    return (threads + block - 1) // block, block
