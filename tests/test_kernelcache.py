"""A kernel's compiled code kept on disk (devalloc.device.kernelcache).

The key is the kernel's text up to Numba's per-process numbers: the same
program compiled in another process (other numbers, modules in another
order) finds the entry; any other program does not. A second process that
launches a kernel links nothing (its cubin is read).
"""

import random

import pytest

import cuda_target
from devalloc.device import kernelcache
from test_bodycache import ONE_SITE  # (the one-site kernel the compile tests share)

KERNEL = '''; ModuleID = "heap$1"
define void @"_ZN6kernel4heapB2v1B3abcE"(i64 %".1") {
  %".2" = call i64 @"_ZN8devalloc4freeB2v9B3abcExx"(i64 %".1")
  %".3" = call i64 @"_ZN8devalloc5arrayB3v10B3abcExx"(i64 %".2")
  %".4" = call i64 @"devalloc_core_alloc_int64"(i64 %".3")
  ret void
}
'''
FREE = '''; ModuleID = "free$9"
@"_ZN08NumbaEnv8devalloc4freeB2v9B3abcExx" = common global i8* null
define linkonce_odr i64 @"_ZN8devalloc4freeB2v9B3abcExx"(i64 %".1") {
  ret i64 %".1"
}
'''
ARRAY = '''; ModuleID = "array$10"
define linkonce_odr i64 @"_ZN8devalloc5arrayB3v10B3abcExx"(i64 %".1") {
  %".2" = add i64 %".1", 1
  ret i64 %".2"
}
'''
BODY = '''; ModuleID = "devalloc_core_alloc_int64"
define linkonce_odr i64 @"devalloc_core_alloc_int64"(i64 %".1") {
  %".2" = call i64 @"_ZN4core5allocB3v98E_dv0123456789ab"(i64 %".1")
  ret i64 %".2"
}
define linkonce_odr i64 @"_ZN4core5allocB3v98E_dv0123456789ab"(i64 %".1") {
  ret i64 %".1"
}
'''


def _renumbered(texts, mapping):
    # texts as another process numbers them: v9 -> mapping[9], ... (the body's kept)
    import re

    def one(t):
        if "_dv" in t:
            return t
        t = re.sub(r"B(\d+)v(\d+)", lambda m: "B%dv%d" % (len(str(mapping[int(m.group(2))])) + 1,
                                                          mapping[int(m.group(2))]), t)
        return re.sub(r"\$(\d+)\"", lambda m: "$%d\"" % mapping[int(m.group(1))], t)
    return [one(t) for t in texts]


def test_the_same_program_numbered_by_another_process_has_the_same_key():
    texts = [KERNEL, FREE, ARRAY, BODY]
    other = _renumbered(texts, {1: 1, 9: 106, 10: 108, 98: 98})
    assert other != texts
    random.Random(1).shuffle(other)
    assert kernelcache.canonical(other) == kernelcache.canonical(texts)


def test_another_program_has_another_key():
    texts = [KERNEL, FREE, ARRAY, BODY]
    key = kernelcache.canonical(texts)
    # calls swapped between two functions: the numbers say which is which
    swapped = [KERNEL.replace("B2v9B3abcExx", "TMP").replace("B3v10B3abcExx", "B2v9B3abcExx")
               .replace("TMP", "B3v10B3abcExx"), FREE, ARRAY, BODY]
    assert kernelcache.canonical(swapped) != key
    # another constant, another body (its writer's numbers are part of its name)
    assert kernelcache.canonical([KERNEL, FREE, ARRAY.replace("1\n", "2\n"), BODY]) != key
    assert kernelcache.canonical([KERNEL, FREE, ARRAY, BODY.replace("v98", "v97")]) != key
    # the kernel's own name is kept as it is: the loader looks it up
    renamed = _renumbered(texts, {1: 2, 9: 9, 10: 10, 98: 98})
    assert kernelcache.canonical(renamed)[0] == key[0]
    assert kernelcache.canonical(renamed)[1] != key[1]
    assert key[1] == ["_ZN6kernel4heapB2v1B3abcE"]


def _lambdas(first, second):
    # two functions of one name (two lambdas a factory made), told apart by
    # their numbers only; the kernel calls `first` then `second`
    kernel = f'''define void @"_ZN6kernel1kB2v1E"(i64 %".1") {{
  %".2" = call i64 @"_ZN4free8lambdaB2v{first}E"(i64 %".1")
  %".3" = call i64 @"_ZN4free8lambdaB2v{second}E"(i64 %".2")
  ret void
}}
'''
    lam = '''define linkonce_odr i64 @"_ZN4free8lambdaB2v{n}E"(i64 %".1") {{
  %".2" = add i64 %".1", {k}
  ret i64 %".2"
}}
'''
    return [kernel, lam.format(n=5, k=1), lam.format(n=6, k=2)]


def test_functions_told_apart_only_by_their_numbers_keep_their_order():
    # add 1 then 2, or 2 then 1: the same result, but not the same program
    # text; the numbers alone say which lambda is called first
    one_then_two = kernelcache.canonical(_lambdas(5, 6))
    assert kernelcache.canonical(_lambdas(6, 5)) != one_then_two
    # the same program numbered otherwise (5, 6 -> 8, 7) keeps its key
    renumbered = [t.replace("v5E", "vAE").replace("v6E", "v7E").replace("vAE", "v8E")
                  for t in _lambdas(5, 6)]
    assert kernelcache.canonical(renumbered) == one_then_two


def test_comments_are_not_part_of_the_key():
    texts = [KERNEL, FREE, ARRAY, BODY]
    assert kernelcache.canonical([t.replace("; ModuleID", "; Module") for t in texts]) == \
        kernelcache.canonical(texts)


def test_only_libraries_that_link_a_body_are_kept():
    class Lib:
        def __init__(self, strs):
            self.llvm_strs = strs

    assert kernelcache.links_body(Lib([KERNEL, BODY]))
    assert not kernelcache.links_body(Lib([FREE, ARRAY]))


LAUNCH = """
import json, types as pytypes
from numba import cuda, float64, types
from numba.cuda import codegen
from numba.cuda.cudadrv import driver, nvvm
import devalloc
from devalloc.tools import aot

if not driver._have_nvjitlink():
    print(json.dumps({"skip": "no nvJitLink to link a cubin without a GPU"}))
    raise SystemExit

# No GPU here: what Numba asks the driver while it compiles and loads a kernel
# is answered for an sm_90 device; the cubin is made (nvJitLink) as a first
# launch makes it.
codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or (9, 0, "a")
loaded = pytypes.SimpleNamespace(module=pytypes.SimpleNamespace(initialized=True))
cubins = []
codegen.CUDACodeLibrary.get_cufunc = lambda self: (cubins.append(self.get_cubin()), loaded)[1]
links, calls = [], []
plain_complete = driver._Linker.complete
driver._Linker.complete = lambda self: (links.append(1), plain_complete(self))[1]
plain_compile_ir = nvvm.compile_ir
nvvm.compile_ir = lambda *a, **k: (calls.append(1), plain_compile_ir(*a, **k))[1]

""" + ONE_SITE + """
kernel = cuda.jit(one)
sig = (devalloc.ctx_type, types.int64[::1], types.float64[::1])
with aot.assume_device((9, 0)):
    kernel.compile(sig)
cubin = cubins[0]
code = getattr(cubin, "code", cubin)
print(json.dumps({"links": len(links), "nvvm": len(calls), "type": type(cubin).__name__,
                  "hash": __import__("hashlib").sha256(bytes(code)).hexdigest()}))
"""


@pytest.mark.slow
def test_a_second_process_links_nothing_and_loads_the_same_cubin(tmp_path):
    env = {"DEVALLOC_CACHE_DIR": str(tmp_path), "DEVALLOC_PTX_CACHE": None, "DEVALLOC_CACHE": None}
    first = cuda_target.last_json(LAUNCH, env=env)
    if first.get("skip"):
        pytest.skip(first["skip"])
    assert first["links"] == 1 and first["nvvm"] >= 1
    second = cuda_target.last_json(LAUNCH, env=env)
    assert second["links"] == 0 and second["nvvm"] == 0
    assert second["hash"] == first["hash"] and second["type"] == first["type"]


def test_a_library_without_what_the_cache_reads_is_compiled_as_numba_cuda_would():
    # (another numba-cuda: no _ltoir_cache, say) the wrappers step aside
    class Lib:
        llvm_strs = [KERNEL, BODY]

    lib = Lib()
    for f in kernelcache.FIELDS:
        setattr(lib, f, None)
    assert kernelcache.links_body(lib)
    del lib._ltoir_cache
    assert not kernelcache._usable(lib)


def test_numba_cudas_code_library_has_what_the_cache_reads():
    # the installed numba-cuda: every field there, and the compile steps wrapped
    out = cuda_target.last_json(
        "import json\n"
        "import devalloc\n"
        "from numba.cuda.codegen import CUDACodeLibrary\n"
        "from numba.cuda.descriptor import cuda_target as t\n"
        "from devalloc.device import kernelcache as K\n"
        "lib = CUDACodeLibrary(t.target_context.codegen(), 'x')\n"
        "print(json.dumps({'missing': [f for f in K.FIELDS if not hasattr(lib, f)],\n"
        "                  'wrapped': [m for m in ('get_asm_strs', 'get_ltoir', 'get_cubin')\n"
        "                              if getattr(getattr(CUDACodeLibrary, m), 'devalloc', 0)]}))\n")
    assert out == {"missing": [], "wrapped": ["get_asm_strs", "get_ltoir", "get_cubin"]}
