"""Which automatic bodies a kernel calls out of line (``Heap(outline="auto")``).

Pure: llvmlite IR objects and IR text, no Numba, no NVVM. With the choice
``"auto"`` (:mod:`devalloc.device.outline`, the default) each body that
could go out of line (``alloc``, ``free``'s past its NULL test, ``bump``,
scoped's new chunk) is emitted once per LLVM module as a function marked
:data:`AUTO_MARK` instead of ``noinline``; when a kernel's modules become
the text NVVM compiles, :func:`decide` counts how many copies of each body
the kernel would hold inline and :func:`decided` rewrites the mark in that
text: ``noinline`` (one copy, a call at each site) or nothing (NVVM
inlines it at its one site, as it inlines the body itself). A body marked
:data:`SHARED_MARK` instead follows the bodies out of line: it goes out of
line only to share one copy between one of them and the rest. A device
function's modules are shared by every kernel that calls it, so the
decision is made in each kernel's own text, never in the modules.
docs/outline.md, "Automatic: chosen per kernel".
"""

#: The mark of an automatic body: a string attribute on its definition
#: (``define ... @"devalloc_auto_..."(...) "devalloc-auto"``). NVVM ignores
#: an unknown string attribute, so a text left undecided inlines the body.
AUTO_MARK = '"devalloc-auto"'

#: The mark of a body that follows the bodies out of line
#: (``outline(f, auto="shared")``): out of line only when one of its copies
#: lies in a body that goes out of line and it has another copy, so that the
#: out-of-line body and the rest of the kernel share one copy of it; never
#: for its size alone (scoped's chain of frees: its copies sit in scope
#: loops, where a call costs registers; docs/outline.md).
SHARED_MARK = '"devalloc-auto-shared"'

#: Both marks (neither is part of the other: each ends with its quote).
MARKS = (AUTO_MARK, SHARED_MARK)

#: How much code an automatic body must save to go out of line: the
#: instructions of Numba's LLVM IR that its extra copies hold, (copies - 1)
#: times its size with its callees inlined (about 1,400 SASS instructions
#: on sm_90). Measured sizes (normal heap): ``alloc`` 40,700, ``bump``
#: 21,200 and scoped's new chunk 54,500 go out of line from two copies;
#: ``free`` (7,200) from four, so that a scope loop's few frees stay inline
#: (docs/outline.md).
SAVING = 16000


def call_graph(modules):
    """Return ``(calls, sizes, marked, shared)`` of the functions defined in ``modules``.

    ``calls[f]``: ``{callee: number of call instructions in f}``;
    ``sizes[f]``: f's own instructions; ``marked``: the functions with
    :data:`AUTO_MARK` or :data:`SHARED_MARK`; ``shared``: those with the
    latter. A function defined in several modules (Numba links
    device functions ``linkonce_odr``: the same body) counts once. A module
    with a ``graph`` (a cached body's text, :mod:`devalloc.device.outline`)
    contributes that graph, as this function returned it for the module.
    """
    calls, sizes, marked, shared = {}, {}, set(), set()
    for mod in modules:
        graph = getattr(mod, "graph", None)
        if graph is not None:  # a cached body's text: its graph, stored with it
            g_calls, g_sizes, g_marked, g_shared = graph
            for name in g_calls:
                if name not in calls:
                    calls[name], sizes[name] = dict(g_calls[name]), g_sizes[name]
                    marked.update({name} & set(g_marked))
                    shared.update({name} & set(g_shared))
            continue
        for fn in mod.functions:
            if fn.is_declaration or fn.name in calls:
                continue
            if AUTO_MARK in fn.attributes:
                marked.add(fn.name)
            if SHARED_MARK in fn.attributes:
                marked.add(fn.name)
                shared.add(fn.name)
            counts = calls[fn.name] = {}
            sizes[fn.name] = 0
            for block in fn.blocks:
                sizes[fn.name] += len(block.instructions)
                for ins in block.instructions:
                    callee = getattr(ins, "callee", None)
                    if ins.opname == "call" and hasattr(callee, "is_declaration"):
                        counts[callee.name] = counts.get(callee.name, 0) + 1
    return calls, sizes, marked, shared


def decide_graph(calls, sizes, marked, saving=SAVING, shared=frozenset()):
    """Return the marked functions of a call graph that go out of line.

    Roots (functions nobody calls: the kernel, or the device function being
    compiled) are one copy each; NVVM inlines device functions, so a
    function's copies are the sum over its callers of their copies times
    their calls to it. Callers are decided before callees: a marked body
    goes out of line when ``(copies - 1) * size >= saving`` (``size``: its
    instructions with its callees', inlined), and then counts as one copy
    for its own callees. A marked body in ``shared`` goes out of line
    instead when it has two copies or more and one of them lies in a body
    out of line (the copies inside out-of-line bodies are counted apart,
    ``inner``). A marked body that no root reaches in order (a
    call cycle, which device code does not have) goes out of line.
    """
    order, seen = [], set()

    def visit(name):  # depth first: order is callees before callers
        seen.add(name)
        for callee in calls[name]:
            if callee in calls and callee not in seen:
                visit(callee)
        order.append(name)

    called = {c for counts in calls.values() for c in counts}
    roots = [name for name in calls if name not in called]
    for name in roots:
        if name not in seen:
            visit(name)
    size = {}
    for name in order:
        size[name] = sizes[name] + sum(k * size.get(c, 0) for c, k in calls[name].items())
    copies = {name: (1 if name in roots else 0) for name in calls}
    inner = dict.fromkeys(calls, 0)  # of copies: those inside out-of-line bodies
    away = set(marked) - set(order)
    for name in reversed(order):  # callers before callees
        if name in shared:
            out = name in marked and copies[name] >= 2 and inner[name] >= 1
        else:
            out = name in marked and (copies[name] - 1) * size[name] >= saving
        if out:
            away.add(name)
            copies[name] = inner[name] = 1
        for callee, k in calls[name].items():
            if callee in copies:
                copies[callee] += copies[name] * k
                inner[callee] += inner[name] * k
    return away


def decide(modules, saving=SAVING):
    """Return the names of the automatic bodies that go out of line in ``modules``' code.

    ``modules``: the llvmlite modules of one code library (a kernel or a
    device function compiled alone, with every library it links).
    """
    calls, sizes, marked, shared = call_graph(modules)
    return decide_graph(calls, sizes, marked, saving=saving, shared=shared)


def decided(text, away):
    """Return module text ``text`` with each automatic body's mark replaced.

    ``noinline`` for the bodies named in ``away``, nothing for the others
    (NVVM inlines them). Only ``define`` lines carry a mark.
    """
    lines = text.split("\n")
    for i, line in enumerate(lines):
        for mark in MARKS:
            if line.startswith("define ") and mark in line:
                name = line.split("@", 1)[1].split("(", 1)[0].strip('"')
                lines[i] = line.replace(" " + mark, " noinline" if name in away else "", 1)
    return "\n".join(lines)
