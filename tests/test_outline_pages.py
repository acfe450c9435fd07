"""A heap ctx's arena crosses an out-of-line call as its page count (issue 28).

``outline(f, pages=True)`` (``alloc``, ``free``'s body, ``bump``): the caller
passes the arena's data pointer and its length >> page shift in 32 bits; the
copy sees the length as ``pages << page shift`` (docs/outline.md, "The arena
as its page count"). Compiled for sm_90 in a subprocess with the real CUDA
target (no GPU); what the copy computes from it runs in the GPU check
(``python -m devalloc.gpucheck``, its ``outline=True`` heap).
"""

import json
import os
import re
import subprocess
import sys

SCRIPT = """
import json, sys
from numba import cuda, types
from devalloc.ctx import ctx_type_for
from devalloc.device import outline as O
from devalloc.tools import aot


@cuda.jit(device=True)
def length_pages(ctx, k):
    return ctx.arena.shape[0] + k


@cuda.jit(device=True)
def length_plain(ctx, k):
    return ctx.arena.shape[0] + k


by_pages = O.outline(length_pages, pages=True)
plain = O.outline(length_plain)


def k_pages(ctx, out):
    i = cuda.grid(1)
    out[i] = by_pages(ctx, out[i]) ^ by_pages(ctx, out[i] + 1)


def k_plain(ctx, out):
    i = cuda.grid(1)
    out[i] = plain(ctx, out[i]) ^ plain(ctx, out[i] + 1)


shift = int(sys.argv[1])
got = {}
for name, kernel in (("pages", k_pages), ("plain", k_plain)):
    sig = (ctx_type_for(page_shift=shift, outline=True), types.int64[::1])
    got[name] = aot.compile_ptx(kernel, sig, cc=(9, 0))[0]
kinds = {kind: O._arena_shift(ctx_type_for(page_shift=shift, kind=kind))
         for kind in ("normal", "debug", "observed")}
kinds["tuple"] = O._arena_shift(types.UniTuple(types.int64, 2))
kinds["array"] = O._arena_shift(types.int64[::1])
print(json.dumps({"ptx": got, "shift": kinds}))
"""


def _compiled(shift):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM",
                                                            "DEVALLOC_OUTLINE")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(shift)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _body(ptx, name):
    # The parameter list and the body of the one out-of-line copy of `name`.
    m = re.search(r"\.func\s+\(\.param \.b64 func_retval0\)\s+(devalloc_\w*" + name
                  + r"\w*)\(([^)]*)\)\s*\{(.*?)\n\}", ptx, re.S)
    assert m, f"no out-of-line body of {name}"
    return m.group(2), m.group(3)


#: The page count widened to the length (NVVM's choice of instruction).
_REBUILT = r"(mul\.wide\.u32\s+%rd\d+, %r\d+, {page};|shl\.b64\s+%rd\d+, %rd\d+, {shift};)"


def test_the_arena_crosses_as_its_page_count_in_32_bits():
    for shift in (14, 10):
        got = _compiled(shift)
        # The heap's three ctx kinds have their page shift; anything else none.
        assert got["shift"] == {"normal": shift, "debug": shift, "observed": shift,
                                "tuple": None, "array": None}
        params, body = _body(got["ptx"]["pages"], "length_pages")
        # Arena data, page count (32 bits), the metadata's pointer, length
        # and stride, k: one 32-bit parameter, and no arena length or stride.
        assert params.count(".param .b32") == 1, params
        assert params.count(".param .b64") == 5, params
        # The copy rebuilds the length from the count: a widening multiply
        # by the page's bytes (or a shift by the page's shift).
        assert re.search(_REBUILT.format(page=1 << shift, shift=shift), body), body
        # The caller computes the count once: the length >> page shift.
        kernel = got["ptx"]["pages"].split(".entry", 1)[1]
        assert re.search(r"sh[rf]\.\w+\s+%r\w*\d+, [^;]*" + str(shift) + ";", kernel), kernel
        params, body = _body(got["ptx"]["plain"], "length_plain")
        # Without pages=True: the arena's data, length and stride (64 bits each).
        assert ".param .b32" not in params and params.count(".param .b64") == 7, params
        assert not re.search(_REBUILT.format(page=1 << shift, shift=shift), body), body
