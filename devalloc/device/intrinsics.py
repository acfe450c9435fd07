"""``view``: the one place devalloc needs an ``@intrinsic``.

A device function may not return an array it created ("Only accept returning
of array passed into the function as argument"), so ``view`` cannot be an
ordinary device function. An intrinsic is inlined at the LLVM level and
builds the array structure (data pointer, shape, strides) directly over the
arena, with no allocation and no call. On the simulator, where intrinsics do
not run, :func:`view_simulated` stands in (``devalloc.view`` picks it there);
it refuses the arguments the GPU's typing refuses, with the same TypingError.
"""

from llvmlite import ir
from numba import types
from numba.core.errors import TypingError
from numba.cuda.extending import intrinsic


def element_type(dtype):
    """Return the Numba element type named by ``dtype`` (a view argument)."""
    if isinstance(dtype, (types.NumberClass, types.TypeRef)):
        return dtype.instance_type
    if isinstance(dtype, types.DType):
        return dtype.dtype
    raise TypingError(
        "devalloc.view: dtype must be a NumPy or Numba scalar type such as "
        "np.float32 or numba.int64, or a NumPy record dtype (np.dtype([('x', np.float64), "
        f"('n', np.int32)], align=True)), got {dtype}"
    )


def _dims(count):
    """Return the number of dimensions of a view's ``count`` (an integer or a
    tuple of 1..3 integers), or 0 if it is neither."""
    if isinstance(count, types.Integer):
        return 1
    if (isinstance(count, types.BaseTuple) and 1 <= len(count) <= 3
            and all(isinstance(t, types.Integer) for t in count)):
        return len(count)
    return 0


def check_view_args(off, count, dtype):
    """Return the element type of a view, given its arguments' Numba types.

    Raises the TypingError a kernel gets (on the GPU, at compile time; on the
    simulator, at the call) when ``off`` is not an integer, ``count`` is
    neither an integer nor a tuple of 1 to 3 integers (a shape), or
    ``dtype`` is not a scalar type.
    """
    if not isinstance(off, types.Integer) or not _dims(count):
        raise TypingError(
            "devalloc.view: off and count must be integers (count: an integer, or a tuple "
            f"of 1 to 3 integers for a shape), got {off} and {count}")
    return element_type(dtype)


#: Bytes of an empty view's sink: a kernel's own global memory, outside every
#: heap, where an unchecked write through an empty view lands (on a GPU
#: nothing checks an array's bounds).
SINK_BYTES = 1024

_SINK_NAME = "_devalloc_empty_view_sink"


def _sink(builder):
    """Return a generic ``i8*`` to the module's sink (made on first use).

    A ``global`` (address space 1) array of :data:`SINK_BYTES` bytes,
    internal to the kernel's module: no heap's block is ever inside it.
    """
    module = builder.module
    gv = module.globals.get(_SINK_NAME)
    if gv is None:
        gv = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), SINK_BYTES), _SINK_NAME,
                               addrspace=1)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(gv.type.pointee, None)
        gv.align = 16
    first = builder.gep(gv, [ir.Constant(ir.IntType(32), 0)] * 2)
    return builder.addrspacecast(first, ir.PointerType(ir.IntType(8)))


@intrinsic
def view(typingctx, ctx, off, count, dtype):
    """Return an array of ``count`` items of ``dtype`` at byte ``off``.

    ``count`` an integer gives a 1-D array; a tuple of 1 to 3 integers (a
    shape) a C-contiguous array of that shape. Any thread may call. No
    atomics, no memory access. If the range ``[off, off + size * itemsize)``
    is not inside the arena (for example ``off`` is NULL), or a dimension is
    negative, the result is an empty array (every dimension 0) over the
    kernel's sink (:data:`SINK_BYTES` bytes of global memory outside every
    heap): a write through it that its size does not stop (no bounds check
    on a GPU) lands in the sink, never in a block, for any index below
    ``SINK_BYTES // itemsize``. The offset's alignment is the caller's to
    keep (``devalloc.view`` on a debug heap checks it).
    """
    elem = check_view_args(off, count, dtype)
    ndim = _dims(count)
    arena_ty = ctx[0]
    retty = types.Array(elem, ndim, "C")
    sig = retty(ctx, off, count, dtype)

    def codegen(context, builder, sig, args):
        ctx_v, off_v, count_v, _ = args
        arena = context.make_array(arena_ty)(
            context, builder, builder.extract_value(ctx_v, 0)
        )
        i64 = ir.IntType(64)
        off_v = context.cast(builder, off_v, sig.args[1], types.int64)
        if isinstance(sig.args[2], types.Integer):
            dims = [context.cast(builder, count_v, sig.args[2], types.int64)]
        else:
            dims = [context.cast(builder, builder.extract_value(count_v, d), sig.args[2][d],
                                 types.int64) for d in range(ndim)]
        itemsize = context.get_abi_sizeof(context.get_data_type(elem))
        size = builder.extract_value(arena.shape, 0)
        zero = ir.Constant(i64, 0)
        # In range when 0 <= off <= size, every dimension is >= 0 and their
        # product is <= (size - off) / itemsize. Each dimension is checked
        # against that bound, and each product's overflow flag is kept, so
        # no wrapped product passes.
        off_ok = builder.and_(
            builder.icmp_signed(">=", off_v, zero),
            builder.icmp_signed("<=", off_v, size),
        )
        room = builder.select(off_ok, builder.sub(size, off_v), zero)
        max_count = builder.sdiv(room, ir.Constant(i64, itemsize))
        ok = off_ok
        total = dims[0]
        for d, dim in enumerate(dims):
            ok = builder.and_(ok, builder.and_(
                builder.icmp_signed(">=", dim, zero),
                builder.icmp_signed("<=", dim, max_count)))
            if d:
                prod = builder.umul_with_overflow(total, dim)
                total = builder.extract_value(prod, 0)
                ok = builder.and_(ok, builder.not_(builder.extract_value(prod, 1)))
        if ndim > 1:
            ok = builder.and_(ok, builder.icmp_signed("<=", total, max_count))
        dims = [builder.select(ok, dim, zero) for dim in dims]
        strides = []
        stride = ir.Constant(i64, itemsize)
        for dim in reversed(dims):
            strides.insert(0, stride)
            stride = builder.mul(stride, dim)
        # Out of range: the sink, not arena byte 0 (which a block owns).
        data = builder.select(ok, builder.gep(arena.data, [off_v]), _sink(builder))
        data = builder.bitcast(data, context.get_data_type(elem).as_pointer())
        out = context.make_array(retty)(context, builder)
        context.populate_array(
            out,
            data=data,
            shape=dims,
            strides=strides,
            itemsize=ir.Constant(i64, itemsize),
            meminfo=None,
        )
        return out._getvalue()

    return sig, codegen


def _aliases_the_heap(lhs, args, alias_map, arg_aliases):
    # A view's items are the heap's bytes: memory the caller's arguments
    # reach, as an argument array's are. (Numba's alias-analysis hook:
    # name of the call's result, its arguments, the maps it updates.)
    arg_aliases.add(lhs)


def register_view_alias():
    """Tell Numba's dead-code elimination that a view's writes are visible outside.

    Numba drops a ``setitem`` on an array that is not live afterwards and
    aliases no argument (``remove_dead_block`` in numba's ``ir_utils``). To
    its alias analysis the result of an intrinsic is a fresh array, so
    ``a = devalloc.view(...); a[i] = x`` as a function's last use of ``a``
    compiled to nothing on the GPU (found by the first GPU check with the
    fixes of issue 25: a one-byte overrun test wrote nothing; the simulator
    runs the Python and cannot show it). Registering ``view`` as a call whose
    result aliases an argument keeps every such write. Idempotent; done at
    import, for numba-cuda's own IR utilities and, where numba-cuda still
    uses them, numba's.
    """
    import importlib

    # What find_callname returns for the call: the intrinsic's own module
    # where it unwraps numba-cuda's intrinsics, the wrapper's module where
    # it does not (numba's own ir_utils).
    keys = {(view._name, view._defn.__module__), (view._name, type(view).__module__)}
    for name in ("numba.cuda.core.ir_utils", "numba.core.ir_utils"):
        try:
            table = importlib.import_module(name).alias_func_extensions
        except (ImportError, AttributeError):
            continue
        for key in keys:
            table[key] = _aliases_the_heap


register_view_alias()


@intrinsic
def offset_of(typingctx, ctx, arr):
    """Return the byte offset of ``arr``'s first item in the arena of ``ctx``.

    Any thread may call; no memory access. Meaningful for arrays made by
    ``view`` or ``devalloc.array`` over this heap; an array of size 0 gives
    NULL (it holds no block).
    """
    if not isinstance(arr, types.Array):
        raise TypingError(f"devalloc.offset_of: expected an array, got {arr}")
    arena_ty = ctx[0]
    sig = types.int64(ctx, arr)

    def codegen(context, builder, sig, args):
        ctx_v, arr_v = args
        i64 = ir.IntType(64)
        arena = context.make_array(arena_ty)(context, builder, builder.extract_value(ctx_v, 0))
        a = context.make_array(sig.args[1])(context, builder, arr_v)
        diff = builder.sub(builder.ptrtoint(a.data, i64), builder.ptrtoint(arena.data, i64))
        empty = builder.icmp_signed("==", a.nitems, ir.Constant(i64, 0))
        return builder.select(empty, ir.Constant(i64, -1), diff)

    return sig, codegen


def _typeof(value):
    """Return the Numba type of ``value``, or its repr if Numba has none."""
    from numba import typeof

    try:
        return typeof(value)
    except ValueError:
        return repr(value)


def view_simulated(ctx, off, count, dtype):
    """Simulator stand-in for :func:`view`: the same range rule, the same typing errors."""
    from numba.np.numpy_support import as_dtype

    from ..ctx import Ctx, DebugCtx, ObsCtx

    if not isinstance(ctx, (Ctx, DebugCtx, ObsCtx)):
        raise TypeError(f"devalloc.view: ctx must be heap.ctx, got {type(ctx).__name__}")
    arena = ctx.arena
    dtype = as_dtype(check_view_args(_typeof(off), _typeof(count), _typeof(dtype)))
    itemsize = dtype.itemsize
    size = arena.shape[0]
    off = int(off)
    shape = tuple(int(d) for d in count) if isinstance(count, tuple) else (int(count),)
    total = 1
    for d in shape:
        total *= d
    if not (0 <= off <= size and min(shape) >= 0 and total <= (size - off) // itemsize):
        off = 0
        shape = (0,) * len(shape)
        total = 0
    out = arena[off:off + total * itemsize].view(dtype)
    return out.reshape(shape) if len(shape) > 1 else out


def offset_of_simulated(ctx, arr):
    """Simulator stand-in for :func:`offset_of`: NULL for an empty array."""
    if arr.size == 0:
        return -1
    return arr.__array_interface__["data"][0] - ctx.arena.__array_interface__["data"][0]
