"""The allocator's out-of-line bodies compiled once: per process, and on disk.

:mod:`devalloc.device.outline` calls each out-of-line body (``alloc``,
``free`` past its NULL test, ``bump``, scoped's new chunk and chain of
frees) through a wrapper function. This module makes that wrapper and
everything its body needs into NVVM IR text once per (body, argument types,
line info, process default): :func:`compile_body` types and lowers the body
with Numba in a code library of its own, :func:`lookup` finds an entry made
before (in this process, or on disk: :mod:`devalloc.device.bodycache`), and
:func:`library` turns an entry into the code library a kernel links. NVVM
compiles the text with the kernel, so a kernel's code is what it was when
each kernel typed the body itself; a later process types none of the
allocator (about 5 s on a 2-core machine, bench/first_call.py).

An entry is ``(texts, graphs, return type, symbol)``: one text per Numba
module (every definition ``linkonce_odr``, as a kernel's ``finalize`` makes
a linked library's), in an order NVVM links them all in
(:func:`linking_order`), each with its part of the call graph that
``outline="auto"`` decides on (:func:`devalloc.device.outline_choice.call_graph`).
Names in the texts are Numba's mangled names, unique per function,
argument types and process-wide counter: two texts from different
processes that define the same name define the same function of the same
source (the source hash keys the folder), so a kernel may link both.

Who calls: :mod:`devalloc.device.outline`, while a kernel is typed
(:func:`lookup`) and lowered (the rest). Not used on the simulator.
"""

import os
import re

from llvmlite import ir
from numba.core import cgutils

from . import bodycache
from .outline_choice import call_graph


def flags_of(f):
    """Return the Numba flags ``f``'s body compiles with.

    Those a device function gets from ``@cuda.jit`` (numba.cuda.compiler):
    NumPy's error model (no exception paths: the default "python" one adds
    them) and ``f``'s line info (:mod:`devalloc.tools.paths` walks by it).
    """
    try:
        from numba.cuda.flags import CUDAFlags as Flags
    except ImportError:  # numba-cuda releases that use numba's own flags
        from numba.core.compiler import Flags

    flags = Flags()
    flags.error_model = "numpy"
    if f.targetoptions.get("lineinfo"):
        flags.debuginfo = True
        flags.dbg_directives_only = True
    return flags


def _scope(mod, fn, pyfunc):
    # With line info: a debug scope for wrapper fn in pyfunc's own file
    # (its own compile unit, line directives only), and the location of
    # the call to pyfunc's body: its def line. Without one NVVM drops
    # the locations of the body it inlines into the wrapper, and the
    # path walker (devalloc.tools.paths) could not find its waypoints there.
    code = pyfunc.__code__
    path = os.path.abspath(code.co_filename)
    difile = mod.add_debug_info("DIFile", {"directory": os.path.dirname(path),
                                           "filename": os.path.basename(path)})
    unit = mod.add_debug_info("DICompileUnit", {
        "language": ir.DIToken("DW_LANG_C_plus_plus"), "file": difile,
        "producer": "clang (Numba)", "runtimeVersion": 0, "isOptimized": True,
        "emissionKind": ir.DIToken("DebugDirectivesOnly")}, is_distinct=True)
    cus = cgutils.get_or_insert_named_metadata(mod, "llvm.dbg.cu")
    cus.add(unit)
    # (LLVM drops the debug information of a module without its version:
    # Numba's DIBuilder sets these flags in the modules it finalizes.)
    mflags = cgutils.get_or_insert_named_metadata(mod, "llvm.module.flags")
    for key, value in (("Dwarf Version", 4), ("Debug Info Version", 3)):
        flag = mod.add_metadata([ir.IntType(32)(2), key, ir.IntType(32)(value)])
        if flag not in mflags.operands:
            mflags.add(flag)
    subprogram = mod.add_debug_info("DISubprogram", {
        "name": fn.name, "linkageName": fn.name, "scope": difile, "file": difile,
        "line": code.co_firstlineno, "scopeLine": code.co_firstlineno,
        "type": mod.add_debug_info("DISubroutineType", {"types": mod.add_metadata([])}),
        "isLocal": False, "isDefinition": True, "isOptimized": True, "unit": unit},
        is_distinct=True)
    fn.set_metadata("dbg", subprogram)
    return mod.add_debug_info("DILocation", {"line": code.co_firstlineno, "column": 1,
                                             "scope": subprogram})


class _TextModule:
    """A module of a cached body: its NVVM IR text, as a code library holds a module.

    ``graph``: its part of :func:`outline_choice.call_graph` (its text is
    not parsed again). ``functions``: one stand-in whose ``linkage`` a
    library's ``finalize`` sets (``linkonce_odr``, or ``weak_odr`` for
    a ``-g`` build) and the text then carries on its definitions.
    """

    def __init__(self, text, graph):
        self.text, self.graph, self.linkage = text, graph, "linkonce_odr"
        self.functions = (self,)
        self.is_declaration = False

    def __str__(self):
        if self.linkage == "linkonce_odr":
            return self.text
        return self.text.replace("\ndefine linkonce_odr ", f"\ndefine {self.linkage} ")


#: key -> (texts, graphs, return type, symbol): the bodies this process
#: compiled or read from disk (:mod:`devalloc.device.bodycache`).
_entries = {}
#: key -> the code library of entry key's texts (made when first linked).
_libraries = {}
#: The disk cache of this process's toolchain (None when off), once made.
_disk = []


def _disk_cache():
    if not _disk:
        on = bodycache.enabled()
        _disk.append(bodycache.DiskCache(bodycache.cache_dir(), bodycache.toolchain())
                     if on else None)
    return _disk[0]


def key(f, mark, pages, args, default):
    """Return the key of ``f``'s body for argument types ``args``.

    What the body's text depends on besides the toolchain (the folder's
    key): which body, from which file, its mark, ``pages``, its line info,
    the argument types, and ``default`` (``outline.ENABLED``, the process
    default that the body's own calls with plain arrays would follow).
    """
    pyfunc = f.py_func
    return ("body", pyfunc.__module__, pyfunc.__qualname__,
            os.path.abspath(pyfunc.__code__.co_filename), mark, bool(pages),
            bool(f.targetoptions.get("lineinfo")), str(default),
            tuple(str(a) for a in args))


#: What every wrapper's symbol starts with (``devalloc_`` or ``devalloc_auto_``,
#: :func:`devalloc.device.outline._symbol`).
WRAPPER_PREFIX = "devalloc_"
#: This process's mark on the entries it writes to disk (:func:`own_names`).
WRITER = os.urandom(6).hex()


def lookup(key):
    """Return the entry of ``key`` made in this process or read from disk, or None.

    An entry gets names of its writer's (:func:`own_names`), in the process
    that compiled it as in any that reads it.
    """
    entry = _entries.get(key)
    if entry is None:
        disk = _disk_cache()
        stored = disk.load(key) if disk is not None else None
        if stored is not None and len(stored) == 5:
            *entry, writer = stored
            entry = _entries[key] = own_names(tuple(entry), writer)
    return entry


#: A name :func:`own_names` gave (``_dv`` and a writer's 12 hex digits, :data:`WRITER`).
_TAGGED = re.compile(r"_dv[0-9a-f]{12}$")
_DEFINED = re.compile(r'^define [^@\n]*@"([^"]+)"\(', re.M)


def own_names(entry, writer):
    """Return ``entry`` (compiled by process ``writer``) with names of its own.

    Numba's mangled names carry a per-process counter: the same name in
    texts written by two processes, or in one of them and this process's
    own code, need not be the same function (another variant, calling
    callees of other names). Every function the entry's texts define is
    renamed, in its definitions, its calls and its call graph, with a
    suffix of ``writer``'s: entries one process wrote share their helpers
    among themselves (as in that process), and nothing else. Wrappers keep
    their symbols, the entry's own and those of bodies its body calls
    (scoped's new chunk calls the chain of frees): a wrapper's name says
    which body for which argument types, with no counter in it, so it
    names one function in every process, and the kernel's own call to a
    body shares its one copy with the bodies that call it (the ``"auto"``
    decision counts them together). Names that carry a writer's suffix
    already keep it (a body that calls another holds that body's texts as
    this process named them, from its own compile or from disk: one
    function of that writer's in every process). Names the texts only
    declare are left alone.
    """
    texts, graphs, rettype, symbol = entry
    defined = set()
    for t in texts:
        defined.update(_DEFINED.findall(t))
    defined = {n for n in defined if n != symbol and not n.startswith(WRAPPER_PREFIX)
               and not _TAGGED.search(n)}
    if not defined:
        return entry
    tag = "_dv" + writer
    new = {n: n + tag for n in defined}

    def rename_text(t):
        return re.sub(r'@"([^"]+)"', lambda m: f'@"{new.get(m.group(1), m.group(1))}"', t)

    def r(n):
        return new.get(n, n)

    def rename_graph(g):
        calls, sizes, marked, shared = g
        return ({r(f): {r(c): k for c, k in cs.items()} for f, cs in calls.items()},
                {r(f): v for f, v in sizes.items()},
                type(marked)(r(f) for f in marked), type(shared)(r(f) for f in shared))

    return ([rename_text(t) for t in texts], [rename_graph(g) for g in graphs], rettype, symbol)


def library(context, key):
    """Return the code library of entry ``key`` (made once per process), for a kernel to link.

    One library per text, the first (the wrapper's) linking the second, and
    so on: a kernel's text holds them in the entry's order (the libraries a
    library links are a set, in no order).
    """
    lib = _libraries.get(key)
    if lib is None:
        texts, graphs, _, symbol = _entries[key]
        from numba.cuda.codegen import CUDACodeLibrary

        lib = None
        for i in reversed(range(len(texts))):
            one = CUDACodeLibrary(context.codegen(), f"{symbol}_{i}")
            one.add_ir_module(_TextModule(texts[i], graphs[i]))
            if lib is not None:
                one.add_linking_library(lib)
            one.finalize()
            lib = one
        _libraries[key] = lib
    return lib


def compile_body(context, fnty, symbol, f, sig, mark, rebuild):
    """Compile ``f`` for ``sig`` into a wrapper ``symbol`` of type ``fnty``; return its entry.

    The wrapper takes the flattened arguments (``rebuild(context, builder,
    type, values)`` makes each of ``sig``'s arguments from them), calls
    ``f``'s body and returns its result; it is ``noinline``, or carries
    ``mark`` for the kernel's decision. The entry: the texts of the
    wrapper's module and of every module its body needs, their call
    graphs, the return type and the symbol. Compiled in a code library of
    its own, so that a kernel links the texts alone.
    """
    pyfunc = f.py_func
    # (as every module of Numba's: the triple, the data layout and the
    # NVVM IR version NVVM checks)
    mod = context.codegen()._create_empty_module(symbol)
    fn = ir.Function(mod, fnty, symbol)
    fn.linkage = "linkonce_odr"
    if mark:
        set.add(fn.attributes, mark)  # (llvmlite knows no string attributes)
    else:
        fn.attributes.add("noinline")
    body = ir.IRBuilder(fn.append_basic_block("entry"))
    vals = iter(fn.args)
    inner = [rebuild(context, body, t, vals) for t in sig.args]
    # Numba's cache of subroutines does not key the flags: a
    # compilation with line info (devalloc.tools.paths) is not cached.
    flags = flags_of(f)
    scratch = context.codegen().create_library(symbol + "_build")
    with context.push_code_library(scratch):
        cres = context.compile_subroutine(body, pyfunc, sig, flags=flags,
                                          caching=not flags.debuginfo)
    if flags.debuginfo:
        body.debug_metadata = _scope(mod, fn, pyfunc)
    # Device code raises no exceptions: the status is always OK.
    _, res = context.call_internal_no_propagate(body, cres.fndesc, sig, inner)
    body.ret(res)
    modules, seen = [mod], {id(mod)}
    # (the body's library, and what its lowering linked into the
    # active library: its callees)
    for m in cres.library.modules + scratch.modules:
        if m is not None and id(m) not in seen:
            seen.add(id(m))
            modules.append(m)
    for m in modules[1:]:
        for g in m.functions:
            if not g.is_declaration:
                # (what a kernel's finalize makes of a linked library's
                # functions: one copy per kernel, whichever text has it)
                g.linkage = "linkonce_odr"
    graphs = [call_graph([m]) for m in modules]
    order = linking_order(graphs)
    return ([str(modules[i]) for i in order], [graphs[i] for i in order],
            sig.return_type, symbol)


def linking_order(graphs):
    """Return the modules' indices, given their call graphs, in an order NVVM links them all in.

    NVVM links a ``linkonce_odr`` definition only when a module linked
    before it calls it: each module comes after one that calls a
    function it defines (depth first from the first module, the wrapper's).
    """
    where = {}
    for i, (calls, _, _, _) in enumerate(graphs):
        for name in calls:
            where.setdefault(name, i)
    order, seen, stack = [], set(), [0]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        order.append(i)
        called = [c for counts in graphs[i][0].values() for c in counts]
        stack.extend(where[c] for c in reversed(called) if where.get(c, i) != i)
    return order


def get(context, f, sig, fnty, symbol, mark, pages, rebuild, default):
    """Return ``(symbol, library)`` of ``f``'s body for ``sig``: looked up, else compiled and stored.

    What a kernel's call site needs: the wrapper's name (to declare and
    call it with type ``fnty``) and the code library to link. ``symbol``
    names a wrapper compiled here (one read from disk keeps its own).
    """
    k = key(f, mark, pages, sig.args, default)
    if lookup(k) is None:
        entry = compile_body(context, fnty, symbol, f, sig, mark, rebuild)
        # (the names a later process gives the entry it reads: a kernel's
        # text is then the same in this process and in that one, and so is
        # its compiled code, which devalloc.device.kernelcache keeps)
        _entries[k] = own_names(entry, WRITER)
        disk = _disk_cache()
        if disk is not None:
            disk.store(k, (*entry, WRITER))
    return _entries[k][3], library(context, k)
