"""Which automatic bodies a kernel calls out of line (devalloc.device.outline_choice).

Plain unit tests of the pure decision (no Numba, no NVVM): call graphs as
dicts, then llvmlite modules and their text. What it compiles to for real
kernels (sm_90) is tests/test_codesize.py (``test_auto_*``).
"""

import llvmlite.ir as ir

from devalloc.device import outline_choice as oc

BIG, SMALL = 40_000, 7_000  # sizes like alloc's and free's (docs/outline.md)


def graph(**edges):
    # calls from name=[callee, ...] (a callee listed twice: two call sites)
    calls = {}
    for name, callees in edges.items():
        calls[name] = {}
        for c in callees:
            calls[name][c] = calls[name].get(c, 0) + 1
    for callees in list(calls.values()):
        for c in callees:
            calls.setdefault(c, {})
    return calls


def sizes_of(calls, **given):
    return {name: given.get(name, 10) for name in calls}


def test_one_site_is_inlined_and_two_go_out_of_line():
    for sites, away in ((1, set()), (2, {"A"}), (4, {"A"})):
        calls = graph(kernel=["A"] * sites)
        assert oc.decide_graph(calls, sizes_of(calls, A=BIG), {"A"}) == away, sites


def test_a_small_body_goes_out_of_line_only_when_its_copies_add_up():
    # (copies - 1) * size >= SAVING: 7,000 from four copies (21,000), not three (14,000).
    for sites, away in ((2, set()), (3, set()), (4, {"F"})):
        calls = graph(kernel=["F"] * sites)
        assert oc.decide_graph(calls, sizes_of(calls, F=SMALL), {"F"}) == away, sites
    calls = graph(kernel=["F"] * 3)
    assert oc.decide_graph(calls, sizes_of(calls, F=SMALL), {"F"}, saving=14_000) == {"F"}


def test_a_site_in_a_function_inlined_twice_counts_twice():
    # The kernel calls a device function g from two places; g has one alloc site.
    calls = graph(kernel=["g", "g"], g=["A"])
    assert oc.decide_graph(calls, sizes_of(calls, A=BIG), {"A"}) == {"A"}
    calls = graph(kernel=["g"], g=["A"])
    assert oc.decide_graph(calls, sizes_of(calls, A=BIG), {"A"}) == set()


def test_a_body_out_of_line_is_one_copy_for_what_it_calls():
    # Four sites of N (scoped's new chunk, which calls A once): N goes out of
    # line, and A inside it is then one copy: inlined into N's one copy.
    calls = graph(kernel=["N"] * 4, N=["A"])
    assert oc.decide_graph(calls, sizes_of(calls, N=BIG, A=BIG), {"N", "A"}) == {"N"}
    # ... and with one more A site in the kernel, A has two copies.
    calls = graph(kernel=["N"] * 4 + ["A"], N=["A"])
    assert oc.decide_graph(calls, sizes_of(calls, N=BIG, A=BIG), {"N", "A"}) == {"N", "A"}


def test_size_includes_what_a_body_inlines():
    # F is small itself but inlines B (big): two copies of F save B's size too.
    calls = graph(kernel=["F", "F"], F=["B"])
    assert oc.decide_graph(calls, sizes_of(calls, F=10, B=BIG), {"F"}) == {"F"}


def test_unmarked_functions_never_go_out_of_line_and_cycles_do():
    calls = graph(kernel=["A"] * 4)
    assert oc.decide_graph(calls, sizes_of(calls, A=BIG), set()) == set()
    # X and Y call each other, reached from the kernel: every function is
    # still ordered (a visited function is not visited again), A is one copy.
    calls = graph(kernel=["X"], X=["Y"], Y=["X", "A"])
    assert oc.decide_graph(calls, sizes_of(calls, A=BIG), {"A"}) == set()
    # A marked body reachable only through a cycle of its own: out of line.
    loop = {"L": {"L": 1}}
    assert oc.decide_graph(loop, {"L": 5}, {"L"}) == {"L"}


def test_a_shared_body_follows_the_bodies_out_of_line():
    # scoped's chain of frees S: called by its new chunk N and by release (in
    # the kernel). Never out of line for its size alone; out of line when a
    # copy lies in a body out of line and another elsewhere: one copy serves both.
    for sites, away in ((1, set()), (2, {"N", "S"}), (4, {"N", "S"})):
        calls = graph(kernel=["N"] * sites + ["S"], N=["S"])
        sizes = sizes_of(calls, N=BIG, S=BIG)
        assert oc.decide_graph(calls, sizes, {"N", "S"}, shared={"S"}) == away, sites
    # Many copies of S in the kernel alone (scope loops): inline, whatever its size.
    calls = graph(kernel=["S"] * 6)
    assert oc.decide_graph(calls, sizes_of(calls, S=BIG), {"S"}, shared={"S"}) == set()
    # One copy, inside a body out of line (no release in the kernel): inline in it.
    calls = graph(kernel=["N"] * 4, N=["S"])
    assert oc.decide_graph(calls, sizes_of(calls, N=BIG, S=BIG), {"N", "S"}, shared={"S"}) == {"N"}
    # Two copies, both inside a body out of line: one copy (a call from each).
    calls = graph(kernel=["N"] * 4, N=["S", "S"])
    assert oc.decide_graph(calls, sizes_of(calls, N=BIG, S=BIG), {"N", "S"}, shared={"S"}) == {"N", "S"}
    # A copy inside a function that an out-of-line body inlines counts as inside.
    calls = graph(kernel=["N"] * 2 + ["S"], N=["g"], g=["S"])
    assert oc.decide_graph(calls, sizes_of(calls, N=BIG, S=BIG), {"N", "S"}, shared={"S"}) == {"N", "S"}


def module_with(sites, marked=True, mark=oc.AUTO_MARK):
    # A module like Numba's: a kernel calling an automatic body `sites` times.
    m = ir.Module("k")
    i64 = ir.IntType(64)
    body = ir.Function(m, ir.FunctionType(i64, [i64]), "devalloc_auto_core_alloc_x")
    body.linkage = "linkonce_odr"
    if marked:
        set.add(body.attributes, mark)
    b = ir.IRBuilder(body.append_basic_block("entry"))
    v = body.args[0]
    for _ in range(3):
        v = b.add(v, v)
    b.ret(v)
    kernel = ir.Function(m, ir.FunctionType(ir.VoidType(), [i64]), "kernel")
    k = ir.IRBuilder(kernel.append_basic_block("entry"))
    for _ in range(sites):
        k.call(body, [kernel.args[0]])
    k.ret_void()
    return m


def test_call_graph_reads_llvmlite_modules_and_counts_a_shared_body_once():
    a, b = module_with(2), module_with(1)
    calls, sizes, marked, shared = oc.call_graph([a, b])
    assert marked == {"devalloc_auto_core_alloc_x"} and shared == set()
    assert calls["kernel"] == {"devalloc_auto_core_alloc_x": 2}  # the first module's
    assert sizes["devalloc_auto_core_alloc_x"] == 4  # three adds and the ret
    assert oc.decide([a], saving=4) == {"devalloc_auto_core_alloc_x"}
    assert oc.decide([module_with(1)], saving=4) == set()
    assert oc.decide([module_with(2)], saving=5) == set()


def test_decided_text_says_noinline_or_nothing_on_the_define_line_only():
    text = str(module_with(2))
    assert text.count(oc.AUTO_MARK) == 1
    away = oc.decided(text, {"devalloc_auto_core_alloc_x"})
    inline = oc.decided(text, set())
    assert oc.AUTO_MARK not in away and oc.AUTO_MARK not in inline
    define = [line for line in away.split("\n") if line.startswith("define linkonce_odr")]
    assert len(define) == 1 and define[0].endswith(") noinline"), define
    assert "noinline" not in inline
    assert away.replace(" noinline", "") == inline  # nothing else changes
    assert oc.decided(str(module_with(1, marked=False)), {"x"}) == str(module_with(1, marked=False))


def test_a_shared_mark_is_read_and_decided_like_the_other():
    shared = module_with(2, mark=oc.SHARED_MARK)
    calls, sizes, marked, names = oc.call_graph([shared])
    assert marked == names == {"devalloc_auto_core_alloc_x"}
    assert oc.decide([shared], saving=1) == set()  # two copies, none inside a body out of line
    text = str(shared)
    assert oc.SHARED_MARK in text and oc.AUTO_MARK not in text
    away = oc.decided(text, {"devalloc_auto_core_alloc_x"})
    assert oc.SHARED_MARK not in away and away.count(" noinline") == 1
    assert oc.decided(text, set()) == away.replace(" noinline", "")
