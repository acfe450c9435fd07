"""Out-of-line device functions: one copy per kernel, a call at each site.

``outline(f)`` (``f`` a ``@cuda.jit(device=True)`` function) returns a device
callable with ``f``'s parameters and result that, when a kernel is typed,
is either ``f`` itself (NVVM inlines it at every site), a call to one
out-of-line copy of ``f`` per kernel, or (``"auto"``, the default) a call
to a body that each kernel's code keeps out of line when it has enough
copies to matter and lets NVVM inline otherwise. Which one is read from the
heap's metadata among the arguments (the first one: a ctx with a ``meta``
field, or the metadata array itself): its Numba type
(:class:`devalloc.ctx.PagedMeta`) says ``outline``, chosen per heap
(``Heap(outline=)``) or per launch (``heap.ctx_with(outline=)``); for a
plain ``int64`` array, :data:`ENABLED` (the process default,
``DEVALLOC_OUTLINE``). It is one intrinsic either way: inline, its code is
the call Numba emits for ``f`` itself, typed as the caller would type it
(literal arguments first), so the inline build is what it was before the
choice existed (same PTX).

Out of line, every call site calls one ``noinline`` function
``devalloc_<module>_<name>_<types>`` (the wrapper) whose body is ``f``
compiled by Numba; the kernel declares it and links the text that defines
it (Numba links device functions ``linkonce_odr``: a kernel keeps one
copy). That text is made once per (``f``, argument types, line info) and
kept in the process and on disk (:mod:`devalloc.device.bodies`,
:mod:`devalloc.device.bodycache`): a second kernel, or a second process, types
none of the allocator; typing a call to it only looks its result type up.
NVVM inlines ``f`` into the wrapper, so Numba's calling convention (the
result written through a pointer to the caller's stack) stays inside it,
where NVVM promotes the slot to a register; the wrapper itself takes its
arguments and returns its result as LLVM values (PTX ``.param``, registers
in SASS), with no stack frame. docs/outline.md has the measurements behind it.

Automatic (``"auto"``), the same body is emitted without ``noinline``,
marked instead (:data:`devalloc.device.outline_choice.AUTO_MARK`). When a
kernel's (or device function's) LLVM modules become the text NVVM compiles
(numba-cuda's ``CUDACodeLibrary.llvm_strs``, wrapped by :func:`_install`),
the calls are counted over the whole call graph, each device function as
many times as NVVM will copy it, and each marked body gets ``noinline``
when its extra copies would hold ``outline_choice.SAVING`` instructions or
more (:func:`devalloc.device.outline_choice.decide`); otherwise the mark is
dropped and NVVM inlines the body, as it inlines ``f`` itself. A kernel
with one ``alloc`` compiles as it does inline; one with two or more, as out
of line. The modules are shared between kernels (a device function's
library is linked into each kernel that calls it), so the decision is made
in each library's own text, never in the modules.

Who may call: the device paths (``core.alloc_site``/``free_site``,
``bumpalloc.bump_site``, scoped's new chunk and chain of frees, the latter
with ``auto="shared"``: under ``"auto"`` out of line only beside a body out
of line that holds a copy of it). What the
call adds to a walked path (argument
moves, ``CALL``, ``RET``, the callee's code) is measured by
:mod:`devalloc.tools.paths`, which follows the call (docs/outline.md): alloc's
paths +7 and +9 instructions, free's +20 and +21. With line info (the walker's builds) the wrapper gets a debug
scope in ``f``'s file, so the body it inlines keeps its source lines. Warp intrinsics inside ``f`` keep their
meaning: the lanes that enter the call together are the lanes active at the
call site, and a lane that does not call is not waited for.

On the simulator ``outline(f)`` is ``f`` itself (the same Python code either
way; the interleaving explorer relies on the alias being the same object).
"""

import os

from numba import config

from ..ctx import OUTLINE_DEFAULT

#: The process default (:data:`devalloc.ctx.OUTLINE_DEFAULT`: ``"auto"``,
#: or ``DEVALLOC_OUTLINE=0``/``1`` in the environment when devalloc is
#: imported): what kernels given plain arrays compile with. A heap's ctx
#: carries its own choice in its type (``Heap(outline=)``, whose default is this).
ENABLED = OUTLINE_DEFAULT

if config.ENABLE_CUDASIM:

    def outline(f, auto=True, pages=False):
        """``f`` itself: on the simulator there is no code size to save."""
        return f

else:
    import re

    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.core.errors import TypingError
    try:  # numba-cuda's own extension API (its `intrinsic` takes no options)
        from numba.cuda.extending import _intrinsic as _make_intrinsic
    except ImportError:  # older numba-cuda: numba's, for the CUDA target
        from numba.core.extending import intrinsic as _make_intrinsic

    #: An intrinsic for the CUDA target typed with literal arguments first.
    _literal_first = _make_intrinsic(target="cuda", prefer_literal=True)

    from ..ctx import PagedMeta
    from . import bodies, kernelcache
    from .outline_choice import AUTO_MARK, MARKS, SHARED_MARK, decide, decided

    def _symbol(pyfunc, sig, prefix="devalloc"):
        # A deterministic, valid symbol for (function, argument types).
        where = pyfunc.__module__.rsplit(".", 1)[-1]
        types_ = "_".join(re.sub(r"\W+", "", str(t)) for t in sig.args)
        return f"{prefix}_{where}_{pyfunc.__name__}_{types_}"

    def _global(ptrty):
        # The global-space (addrspace 1) pointer type to what ptrty points to.
        return ir.PointerType(ptrty.pointee, 1)

    def _arena_shift(ty):
        # A heap's ctx (a named tuple whose arena, 1-D uint8, comes first and
        # whose metadata is a PagedMeta): its page shift. Else None.
        fields = getattr(ty, "fields", ())
        if not isinstance(ty, types.BaseTuple) or tuple(fields[:2]) != ("arena", "meta"):
            return None
        arena, meta = ty.types[0], ty.types[1]
        if (isinstance(meta, PagedMeta) and isinstance(arena, types.Array)
                and arena.ndim == 1 and arena.dtype == types.uint8):
            return meta.page_shift
        return None

    def _flatten(context, builder, ty, val, pages=False):
        # The scalars that carry value val of type ty across the call: an
        # array's data pointer, shape and strides (not its meminfo and
        # parent, unused on a device); a tuple's members'; nothing for None.
        # pages: a heap ctx's arena is its data pointer and its page count
        # (32 bits: the length >> page shift; the heap's arena is whole
        # pages), not its 64-bit length and stride (see outline()).
        if pages and _arena_shift(ty) is not None:
            arena = context.make_array(ty.types[0])(context, builder, builder.extract_value(val, 0))
            length = cgutils.unpack_tuple(builder, arena.shape, 1)[0]
            npages = builder.lshr(length, length.type(_arena_shift(ty)))
            return ([builder.addrspacecast(arena.data, _global(arena.data.type)),
                     builder.trunc(npages, ir.IntType(32))]
                    + [v for i, t in enumerate(ty) if i > 0
                       for v in _flatten(context, builder, t, builder.extract_value(val, i))])
        if isinstance(ty, types.Array):
            a = context.make_array(ty)(context, builder, val)
            # Its data pointer crosses as a global-space pointer: every
            # array that crosses is one of the heap's (device allocations).
            # As a generic one, each numba atomic in the body would test
            # the space at run time (QSPC, a shared-memory CAS loop
            # beside the global atomic), as NVVM knows only for a kernel's
            # own parameters that they point to global memory.
            return ([builder.addrspacecast(a.data, _global(a.data.type))]
                    + cgutils.unpack_tuple(builder, a.shape, ty.ndim)
                    + cgutils.unpack_tuple(builder, a.strides, ty.ndim))
        if isinstance(ty, types.BaseTuple):
            return [v for i, t in enumerate(ty)
                    for v in _flatten(context, builder, t, builder.extract_value(val, i))]
        if isinstance(ty, (types.NoneType, types.Omitted)):
            return []
        return [val]

    def _rebuild(context, builder, ty, vals, pages=False):
        # The inverse of _flatten, taking from the iterator vals.
        if pages and _arena_shift(ty) is not None:
            arena = context.make_array(ty.types[0])(context, builder)
            g = next(vals)
            npages = builder.zext(next(vals), ir.IntType(64))
            length = builder.shl(npages, npages.type(_arena_shift(ty)))
            one = context.get_constant(types.intp, 1)  # uint8: item size and stride
            context.populate_array(
                arena, data=builder.addrspacecast(g, ir.PointerType(g.type.pointee)),
                shape=cgutils.pack_array(builder, [length]),
                strides=cgutils.pack_array(builder, [one]), itemsize=one, meminfo=None)
            return context.make_tuple(builder, ty, [arena._getvalue()]
                                      + [_rebuild(context, builder, t, vals) for t in ty.types[1:]])
        if isinstance(ty, types.Array):
            a = context.make_array(ty)(context, builder)
            g = next(vals)  # global space (_flatten): generic, as Numba's arrays hold
            data = builder.addrspacecast(g, ir.PointerType(g.type.pointee))
            shape = [next(vals) for _ in range(ty.ndim)]
            strides = [next(vals) for _ in range(ty.ndim)]
            context.populate_array(
                a, data=data, shape=cgutils.pack_array(builder, shape),
                strides=cgutils.pack_array(builder, strides),
                itemsize=context.get_constant(types.intp, context.get_abi_sizeof(
                    context.get_data_type(ty.dtype))),
                meminfo=None)
            return a._getvalue()
        if isinstance(ty, types.BaseTuple):
            return context.make_tuple(builder, ty, [_rebuild(context, builder, t, vals)
                                                    for t in ty])
        if isinstance(ty, (types.NoneType, types.Omitted)):
            return context.get_dummy_value()
        return next(vals)

    def _out_of_line(f, mark=None, pages=False):
        """Return the code generation of a call to device function ``f`` out of line.

        ``mark``: the body is marked for the kernel's decision
        (:data:`~devalloc.device.outline_choice.AUTO_MARK` or ``SHARED_MARK``)
        instead of ``noinline``. ``pages``: a heap ctx's arena crosses as its
        page count (:func:`outline`). The body's text comes from
        :mod:`devalloc.device.bodies` (compiled once per process, or read
        from disk); the kernel declares the wrapper and links the text.
        """
        pyfunc = f.py_func

        def codegen(context, builder, sig, args):
            flat = [v for t, a in zip(sig.args, args)
                    for v in _flatten(context, builder, t, a, pages)]
            fnty = ir.FunctionType(context.get_value_type(sig.return_type),
                                   [v.type for v in flat])
            symbol, lib = bodies.get(
                context, f, sig, fnty, _symbol(pyfunc, sig, "devalloc_auto" if mark else "devalloc"),
                mark, pages, lambda c, b, t, vals: _rebuild(c, b, t, vals, pages), ENABLED)
            context.add_linking_libs([lib])
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
            return builder.call(fn, flat)
        return codegen

    def _inline(f):
        """Return the code generation of a call to ``f`` itself (NVVM inlines it).

        What Numba emits for a call to the dispatcher ``f`` in the caller's
        own code (the user function that typing ``f`` registered): the same
        LLVM call, so the inline build is what it was without the choice.
        """
        def codegen(context, builder, sig, args):
            fnty = context.typing_context.resolve_value_type(f)
            # f compiled for sig.args, as typing a call to f does each time:
            # Numba caches this intrinsic's typing, and f's compiled
            # versions may have been dropped since (paths.line_info does).
            fnty.get_call_type(context.typing_context, sig.args, {})
            return context.get_function(fnty, sig)(builder, args)

        return codegen

    def outlined(ty):
        """Return whether a call whose first argument has Numba type ``ty`` goes out of line.

        ``ty``: a heap's ctx (a named tuple with a ``meta`` field) or its
        metadata array. A :class:`PagedMeta` says (the heap's choice); a
        plain array (or anything else) takes the process default
        :data:`ENABLED`, read when the kernel is typed.
        """
        fields = getattr(ty, "fields", ())
        if isinstance(ty, types.BaseTuple) and "meta" in fields:
            ty = ty.types[fields.index("meta")]
        if isinstance(ty, PagedMeta):
            return ty.outline
        return ENABLED

    def _install():
        # Every CUDA code library's IR text (what NVVM compiles, for PTX,
        # LTO-IR and the cache) gets the automatic bodies decided for it:
        # the modules are shared between kernels, so the decision lives in
        # each library's own text, not in the modules.
        from numba.cuda.codegen import CUDACodeLibrary

        plain = CUDACodeLibrary.llvm_strs
        if getattr(plain.fget, "devalloc", False):
            return

        def llvm_strs(self):
            if self._llvm_strs is None:
                modules = self.modules
                texts = [str(mod) for mod in modules]
                if any(mark in t for t in texts for mark in MARKS):
                    away = decide(modules)
                    texts = [decided(t, away) for t in texts]
                self._llvm_strs = texts
            return self._llvm_strs

        llvm_strs.devalloc = True
        CUDACodeLibrary.llvm_strs = property(llvm_strs, doc=plain.__doc__)

    _install()
    kernelcache.install()

    def outline(f, auto=True, pages=False):
        """Return an intrinsic with ``f``'s parameters that calls ``f`` inline or out of line.

        Chosen when the kernel is typed, by :func:`outlined` of the first
        argument's type: a call to ``f`` itself, as the caller would emit
        naming ``f`` (NVVM inlines it), a call to the one out-of-line copy,
        or (``"auto"``) a call to a body that each kernel's code keeps out of
        line or lets NVVM inline, by how much code its copies would take
        (:func:`devalloc.device.outline_choice.decide`). ``auto="shared"``:
        under ``"auto"``, out of line only when a copy of it lies in a body
        that goes out of line and it has another (scoped's chain of frees:
        small, and its sites sit where a call costs registers; docs/outline.md).

        ``pages=True``: out of line, a heap ctx's arena (its first argument)
        crosses the call as its data pointer and its page count in 32 bits,
        and the copy sees the length ``pages << page shift`` (a heap's arena
        is whole pages): for a body that reads the length only as the page
        count (``_meta._npages``), the caller computes it once and the copy
        keeps one register for it, not the 64-bit length's high word beside
        the count (docs/outline.md, "The arena as its page count").
        """
        if auto not in (True, "shared"):
            raise ValueError(f"outline({f!r}, auto={auto!r}): auto is True or 'shared'")
        pyfunc = f.py_func
        name = pyfunc.__name__
        gens = {True: _out_of_line(f, None, pages), False: _inline(f),
                "auto": _out_of_line(f, SHARED_MARK if auto == "shared" else AUTO_MARK, pages)}

        marks = {True: None, "auto": SHARED_MARK if auto == "shared" else AUTO_MARK}

        def resolve(typingctx, args):
            away = outlined(args[0])
            if away and any(isinstance(a, types.Literal) for a in args):
                return None  # typed again without literals (prefer_literal below)
            if away:
                # A body compiled before (this process, or the disk cache)
                # is not typed again: its result type is known.
                entry = bodies.lookup(bodies.key(f, marks[away], pages, args, ENABLED))
                if entry is not None:
                    return entry[2](*args), gens[away]
            fnty = typingctx.resolve_value_type(f)
            sig = typingctx.resolve_function_type(fnty, args, {})
            if sig is None:
                raise TypingError(f"outline({name}): no signature for {args}")
            return sig, gens[away]

        # Numba's intrinsics take named parameters (no *args): f's own.
        # Literal arguments first: a call to f itself types f with them as
        # the caller would (a literal count compiles f for that constant);
        # the out-of-line copy takes them as plain values (its one copy).
        params = ", ".join(pyfunc.__code__.co_varnames[:pyfunc.__code__.co_argcount])
        scope = {"resolve": resolve}
        exec(f"def {name}_site(typingctx, {params}):\n"
             f"    return resolve(typingctx, ({params},))\n", scope)
        return _literal_first(scope[f"{name}_site"])
