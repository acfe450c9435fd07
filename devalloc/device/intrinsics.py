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
        f"np.float32 or numba.int64, got {dtype}"
    )


def check_view_args(off, count, dtype):
    """Return the element type of a view, given its arguments' Numba types.

    Raises the TypingError a kernel gets (on the GPU, at compile time; on the
    simulator, at the call) when ``off`` or ``count`` is not an integer or
    ``dtype`` is not a scalar type.
    """
    if not isinstance(off, types.Integer) or not isinstance(count, types.Integer):
        raise TypingError(
            f"devalloc.view: off and count must be integers, got {off} and {count}")
    return element_type(dtype)


@intrinsic
def view(typingctx, ctx, off, count, dtype):
    """Return a 1-D array of ``count`` items of ``dtype`` at byte ``off``.

    Any thread may call. No atomics, no memory access. If the range
    ``[off, off + count * itemsize)`` is not inside the arena (for example
    ``off`` is NULL), the result is an empty array at offset 0.
    """
    elem = check_view_args(off, count, dtype)
    arena_ty = ctx[0]
    retty = types.Array(elem, 1, "C")
    sig = retty(ctx, off, count, dtype)

    def codegen(context, builder, sig, args):
        ctx_v, off_v, count_v, _ = args
        arena = context.make_array(arena_ty)(
            context, builder, builder.extract_value(ctx_v, 0)
        )
        i64 = ir.IntType(64)
        off_v = context.cast(builder, off_v, sig.args[1], types.int64)
        count_v = context.cast(builder, count_v, sig.args[2], types.int64)
        itemsize = context.get_abi_sizeof(context.get_data_type(elem))
        size = builder.extract_value(arena.shape, 0)
        zero = ir.Constant(i64, 0)
        # In range when 0 <= off <= size and 0 <= count <= (size - off) / itemsize.
        off_ok = builder.and_(
            builder.icmp_signed(">=", off_v, zero),
            builder.icmp_signed("<=", off_v, size),
        )
        room = builder.select(off_ok, builder.sub(size, off_v), zero)
        max_count = builder.sdiv(room, ir.Constant(i64, itemsize))
        ok = builder.and_(
            off_ok,
            builder.and_(
                builder.icmp_signed(">=", count_v, zero),
                builder.icmp_signed("<=", count_v, max_count),
            ),
        )
        off_v = builder.select(ok, off_v, zero)
        count_v = builder.select(ok, count_v, zero)
        data = builder.gep(arena.data, [off_v])
        data = builder.bitcast(data, context.get_data_type(elem).as_pointer())
        out = context.make_array(retty)(context, builder)
        context.populate_array(
            out,
            data=data,
            shape=[count_v],
            strides=[ir.Constant(i64, itemsize)],
            itemsize=ir.Constant(i64, itemsize),
            meminfo=None,
        )
        return out._getvalue()

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
    count = int(count)
    if not (0 <= off <= size and 0 <= count <= (size - off) // itemsize):
        off = 0
        count = 0
    return arena[off:off + count * itemsize].view(dtype)
