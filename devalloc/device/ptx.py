"""Inline-PTX intrinsics for the GPU: ordered atomics, relaxed loads, ``redux``.

numba's ``cuda.atomic.*`` are relaxed and its ``cuda.threadfence()`` is a
``fence.sc.gpu`` (SASS ``MEMBAR.SC.GPU``, which also invalidates the SM's
L1). devalloc needs acquire and release on single atomics instead
(docs/correctness.md, "Memory ordering"), and coherent loads for its
metadata guesses, so these are one PTX instruction each:

* ``_acquire_cas``, ``_release_cas``, ``_acquire_and``, ``_release_or``,
  ``_release_add``, ``_release_exch`` (``meta, i, ...``): ``atom.{acquire,
  release}.gpu.global`` on ``meta[i]``, returning the old value;
* ``_load(meta, i)``, ``_store(meta, i, v)``: ``ld``/``st.relaxed.gpu``;
* ``_fence_acq_rel()``: ``fence.acq_rel.gpu`` (``MEMBAR.ALL.GPU``, not SC);
* ``_opaque(x)``: ``x`` through a ``mov`` the optimiser cannot see through;
* ``_tie(x, anchor)``: ``x``, but computed after ``anchor`` (not hoisted);
* ``_get_word(arena, off)``, ``_put_word(arena, off, v)``: the int64 at a
  byte offset of a ``uint8`` array, one plain 8-byte load or store (scoped
  scratch's chunk headers; not inline PTX, and not ordered);
* ``_redux_or(mask, x)``: ``redux.sync.or.b32`` on sm_80 and later, chosen
  when NVVM compiles the kernel (``__nvvm_reflect("__CUDA_ARCH")``), and a
  ``shfl_sync`` loop before (:mod:`devalloc.device.warp`).

Every atomic and store is ``volatile`` with a memory clobber, so NVVM moves
no memory access across it; loads are ``volatile``, so none is hoisted out
of a loop or merged with another. Indices must be >= 0 (``_at``).
GPU only: on the simulator :mod:`devalloc.sim.ordered` gives the same names
with numba's plain atomics, and ``_meta`` picks one or the other.
"""

from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.cuda.extending import intrinsic

_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_WORD_PTR = ir.PointerType(_I64, 1)  # a global int64


def _word_pointer(context, builder, aryty, ary, idxty, idx):
    """Return the global-space pointer to ``ary[idx]`` (``idx`` >= 0)."""
    data = context.make_array(aryty)(context, builder, ary).data
    idx = context.cast(builder, idx, idxty, types.int64)
    return builder.addrspacecast(builder.gep(data, [idx]), _WORD_PTR)


def _check_word(ary, idx, vals):
    if not (isinstance(ary, types.Array) and ary.ndim == 1 and ary.dtype == types.int64):
        raise TypingError(f"devalloc metadata access needs a 1-D int64 array, got {ary}")
    for v in (idx, *vals):
        if not isinstance(v, types.Integer):
            raise TypingError(f"devalloc metadata access needs integers, got {v}")


def _word_op(asm, nvals, returns=True):
    """Return an intrinsic ``f(meta, i, *vals)`` running ``asm`` on ``&meta[i]``.

    ``asm`` names the result ``$0`` (if ``returns``), then the address, then
    the values, each a 64-bit register.
    """

    def codegen(context, builder, sig, args):
        ptr = _word_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        vals = [context.cast(builder, v, t, types.int64) for v, t in zip(args[2:], sig.args[2:])]
        load = asm.startswith("ld.")
        clobber = "" if load else ",~{memory}"
        ins = ",".join(["l"] * (1 + nvals))
        if returns:
            fnty = ir.FunctionType(_I64, [_WORD_PTR] + [_I64] * nvals)
            op = ir.InlineAsm(fnty, asm, f"=l,{ins}{clobber}", side_effect=True)
            return builder.call(op, [ptr, *vals])
        fnty = ir.FunctionType(ir.VoidType(), [_WORD_PTR] + [_I64] * nvals)
        builder.call(ir.InlineAsm(fnty, asm, f"{ins}{clobber}", side_effect=True), [ptr, *vals])
        return context.get_dummy_value()

    result = types.int64 if returns else types.none
    if nvals == 0:
        def typer(typingctx, ary, i):
            _check_word(ary, i, ())
            return result(ary, i), codegen
    elif nvals == 1:
        def typer(typingctx, ary, i, v):
            _check_word(ary, i, (v,))
            return result(ary, i, v), codegen
    else:
        def typer(typingctx, ary, i, a, b):
            _check_word(ary, i, (a, b))
            return result(ary, i, a, b), codegen
    return intrinsic(typer)


_load = _word_op("ld.relaxed.gpu.global.b64 $0, [$1];", 0)
_store = _word_op("st.relaxed.gpu.global.b64 [$0], $1;", 1, returns=False)
_acquire_cas = _word_op("atom.acquire.gpu.global.cas.b64 $0, [$1], $2, $3;", 2)
_release_cas = _word_op("atom.release.gpu.global.cas.b64 $0, [$1], $2, $3;", 2)
_acquire_and = _word_op("atom.acquire.gpu.global.and.b64 $0, [$1], $2;", 1)
_release_or = _word_op("atom.release.gpu.global.or.b64 $0, [$1], $2;", 1)
_release_add = _word_op("atom.release.gpu.global.add.u64 $0, [$1], $2;", 1)
_release_exch = _word_op("atom.release.gpu.global.exch.b64 $0, [$1], $2;", 1)


def _check_bytes(ary, off):
    if not (isinstance(ary, types.Array) and ary.ndim == 1 and ary.dtype == types.uint8):
        raise TypingError(f"a chunk header word needs a 1-D uint8 array, got {ary}")
    if not isinstance(off, types.Integer):
        raise TypingError(f"a chunk header word needs an integer offset, got {off}")


def _byte_word(context, builder, aryty, ary, offty, off):
    # The int64 pointer to byte off of a uint8 array (off >= 0, a multiple of 8).
    data = context.make_array(aryty)(context, builder, ary).data
    off = context.cast(builder, off, offty, types.int64)
    return builder.bitcast(builder.gep(data, [off]), ir.PointerType(_I64))


@intrinsic
def _get_word(typingctx, arena, off):
    """Return the int64 at byte ``off`` of ``arena``: one plain 8-byte load.

    ``off`` >= 0 and a multiple of 8 in an array whose data is 8-byte aligned
    (a heap's arena is 256-byte aligned; the chunk headers that use it sit
    at 16-aligned offsets, checked before a header is read). Little-endian,
    as the simulator's byte-wise version reads it. A plain access: NVVM may
    merge or move it like any load of the thread's own data.
    """
    _check_bytes(arena, off)

    def codegen(context, builder, sig, args):
        ptr = _byte_word(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        return builder.load(ptr, align=8)

    return types.int64(arena, off), codegen


@intrinsic
def _put_word(typingctx, arena, off, v):
    """Store ``v`` (as int64) at byte ``off`` of ``arena``: one plain 8-byte store.

    The same conditions as :func:`_get_word`.
    """
    _check_bytes(arena, off)
    if not isinstance(v, types.Integer):
        raise TypingError(f"a chunk header word stores an integer, got {v}")

    def codegen(context, builder, sig, args):
        ptr = _byte_word(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        builder.store(context.cast(builder, args[2], sig.args[2], types.int64), ptr, align=8)
        return context.get_dummy_value()

    return types.none(arena, off, v), codegen


@intrinsic
def _fence_acq_rel(typingctx):
    """``fence.acq_rel.gpu``: a release pattern for the strong writes after it."""

    def codegen(context, builder, sig, args):
        fence = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "fence.acq_rel.gpu;",
                             "~{memory}", side_effect=True)
        builder.call(fence, [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _opaque(typingctx, x):
    """Return ``x`` unchanged, through one ``mov`` NVVM cannot see through.

    For loop bounds that are constant when a kernel passes a constant size:
    NVVM would unroll the loop and keep every unrolled address live across
    the loops around it (``alloc(ctx, 64)``: 88 registers on sm_90 without
    it, 40 with it). And for ``npages`` at the top of each iteration of the
    page searches' loops: what derives from it (the index's bases and
    level sizes) is then computed where it is used, not hoisted out of the
    loop and kept live across it (53 registers without it, 40 with it).
    ptxas removes the ``mov``.
    """
    if not isinstance(x, types.Integer) or x.bitwidth not in (32, 64):
        raise TypingError(f"_opaque takes a 32- or 64-bit integer, got {x}")
    bits = x.bitwidth
    reg = "l" if bits == 64 else "r"

    def codegen(context, builder, sig, args):
        ty = ir.IntType(bits)
        mov = ir.InlineAsm(ir.FunctionType(ty, [ty]), f"mov.b{bits} $0, $1;", f"={reg},{reg}")
        return builder.call(mov, [args[0]])

    return x(x), codegen


@intrinsic
def _tie(typingctx, x, anchor):
    """Return ``x`` unchanged, as a value that depends on ``anchor`` too.

    For work that belongs to one branch inside loops: computed from
    loop-invariant values alone, NVVM hoists it out of every loop, onto every
    path; tied to a value the innermost loop changes, it stays where it is
    written. One ``mov`` (with ``anchor`` an unused operand) that ptxas drops.
    """
    if not isinstance(x, types.Integer) or x.bitwidth not in (32, 64):
        raise TypingError(f"_tie takes a 32- or 64-bit integer, got {x}")
    if not isinstance(anchor, types.Integer) or anchor.bitwidth != 64:
        raise TypingError(f"_tie's anchor is a 64-bit integer, got {anchor}")
    bits = x.bitwidth
    reg = "l" if bits == 64 else "r"

    def codegen(context, builder, sig, args):
        ty = ir.IntType(bits)
        mov = ir.InlineAsm(ir.FunctionType(ty, [ty, _I64]), f"mov.b{bits} $0, $1;",
                           f"={reg},{reg},l")
        return builder.call(mov, [args[0], args[1]])

    return x(x, anchor), codegen


@intrinsic
def _thread_tied(typingctx, anchor):
    """Return the thread's 1-D number in the grid (32 bits), read after ``anchor``.

    ``blockIdx.x * blockDim.x + threadIdx.x`` in one ``asm`` that takes
    ``anchor`` as an unused operand: the special registers are read where
    it is called, inside the loops that change ``anchor``. Through
    ``cuda.threadIdx`` NVVM reads them once, at the kernel's start (where
    ``cuda.grid`` reads them too), and keeps them (or what derives from
    them) live across every loop in between: a register for the whole
    search.
    """
    if not isinstance(anchor, types.Integer) or anchor.bitwidth != 64:
        raise TypingError(f"_thread_tied's anchor is a 64-bit integer, got {anchor}")

    def codegen(context, builder, sig, args):
        asm = ("{ .reg .b32 %dvc, %dvn, %dvt; mov.u32 %dvc, %ctaid.x; mov.u32 %dvn, %ntid.x; "
               "mov.u32 %dvt, %tid.x; mad.lo.u32 $0, %dvc, %dvn, %dvt; }")
        op = ir.InlineAsm(ir.FunctionType(_I32, [_I64]), asm, "=r,l")
        return builder.call(op, [args[0]])

    return types.uint32(anchor), codegen


@intrinsic
def _block_read(typingctx):
    """Return the thread's block number (``blockIdx.x``, 32 bits), read here.

    A volatile ``asm``: NVVM neither shares the read with ``cuda.grid``'s at
    the kernel's start nor hoists it (or what derives from it) out of the
    loops before it. For the failure and scope counters' stripes, counted
    after an ``alloc``'s search: read through ``cuda.blockIdx``, the stripe's
    metadata index was computed at the kernel's start and held across the
    whole search (a register; docs/outline.md, "Counter stripes read where
    they count"). One ``S2R``, on those rare paths only.
    """

    def codegen(context, builder, sig, args):
        op = ir.InlineAsm(ir.FunctionType(_I32, []), "mov.u32 $0, %ctaid.x;", "=r",
                          side_effect=True)
        return builder.call(op, [])

    return types.uint32(), codegen


def _cuda_arch(context, builder):
    """Return the i32 compute capability NVVM compiles for (e.g. 900)."""
    mod = builder.module
    fnty = ir.FunctionType(_I32, [ir.IntType(8).as_pointer()])
    reflect = mod.globals.get("__nvvm_reflect") or ir.Function(mod, fnty, "__nvvm_reflect")
    name = context.insert_const_string(mod, "__CUDA_ARCH")
    return builder.call(reflect, [builder.addrspacecast(name, ir.IntType(8).as_pointer())])


@intrinsic
def _has_redux(typingctx):
    """Return True when compiling for sm_80 or later (``redux.sync`` exists).

    A constant once NVVM knows the target: the branch it guards disappears,
    so the other architecture's instructions never reach ptxas.
    """

    def codegen(context, builder, sig, args):
        return builder.icmp_signed(">=", _cuda_arch(context, builder), ir.Constant(_I32, 800))

    return types.boolean(), codegen


@intrinsic
def _redux_or(typingctx, mask, x):
    """Return the OR of 32-bit ``x`` over the lanes of ``mask``: ``redux.sync.or``.

    sm_80 and later only: call it behind :func:`_has_redux`. Every lane of
    ``mask`` must call.
    """

    def codegen(context, builder, sig, args):
        m = context.cast(builder, args[0], sig.args[0], types.uint32)
        v = context.cast(builder, args[1], sig.args[1], types.uint32)
        op = ir.InlineAsm(ir.FunctionType(_I32, [_I32, _I32]), "redux.sync.or.b32 $0, $1, $2;",
                          "=r,r,r", side_effect=True)
        return builder.call(op, [v, m])

    return types.uint32(mask, x), codegen
