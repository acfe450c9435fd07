"""Scoped scratch's chunk header words are one 8-byte access each on the GPU (issue 28).

``scope._word`` / ``scope._set_word`` are ``ptx._get_word`` / ``ptx._put_word``
when compiled for a GPU: one plain 64-bit load or store of the heap's uint8
arena, where the byte-wise loop they replace was 8 loads and 14 shifts and
ors, or 8 stores (docs/outline.md, "Chunk headers in words"). The simulator
keeps the byte-wise version; both read and write the same little-endian
bytes, which the tests below check on the simulator's side against NumPy
and on the compiler's side in the PTX (sm_90, a subprocess with the real
CUDA target, no GPU).
"""

import os

import numpy as np
import pytest
from cuda_target import last_json, run

SCRIPT = """
import json
from numba import cuda, types
from devalloc.device import scope
from devalloc.tools import aot


def k_words(arena, out):
    i = cuda.grid(1)
    off = out[i]
    v = scope._word(arena, off + 8)
    scope._set_word(arena, off + 16, v + 1)
    out[i] = v


sig = (types.uint8[::1], types.int64[::1])
print(json.dumps(aot.compile_ptx(k_words, sig, cc=(9, 0))[0]))
"""


def test_a_header_word_is_one_8_byte_load_and_one_8_byte_store_on_the_gpu():
    ptx = last_json(SCRIPT)
    body = [line.strip() for line in ptx.splitlines()]
    loads = [line for line in body if line.startswith("ld.") and not line.startswith("ld.param")]
    stores = [line for line in body if line.startswith("st.")]
    # out[i], then the header word: both 64-bit; no byte access at all.
    assert len(loads) == 2 and all(".u64" in x or ".b64" in x for x in loads), loads
    assert len(stores) == 2 and all(".u64" in x or ".b64" in x for x in stores), stores
    assert not [line for line in body if ".u8" in line or ".b8" in line], body


def test_the_gpu_intrinsics_refuse_what_is_not_a_byte_array():
    script = """
from numba import cuda, types
from devalloc.device import ptx
from devalloc.tools import aot

def k(meta, out):
    out[0] = ptx._get_word(meta, 8)

try:
    aot.compile_ptx(k, (types.int64[::1], types.int64[::1]), cc=(9, 0))
except Exception as e:
    print("refused:", "1-D uint8 array" in str(e))
"""
    out = run(script)
    assert "refused: True" in out, out[-2000:]


@pytest.mark.parametrize("v", [0, 1, -1, 0x0123456789ABCDEF, -(2**63), 2**63 - 1])
def test_the_simulators_words_are_little_endian_int64(v):
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("the simulator's byte-wise words")
    from numba import cuda

    from devalloc.device import scope

    @cuda.jit
    def k(arena, out):
        scope._set_word(arena, 16, out[0])
        out[1] = scope._word(arena, 16)

    arena = np.zeros(64, np.uint8)
    out = np.array([v, 0], np.int64)
    k[1, 1](arena, out)
    assert out[1] == v
    assert arena[16:24].view("<i8")[0] == v
    assert not arena[:16].any() and not arena[24:].any()
