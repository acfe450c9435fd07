"""Code size per call site: what each extra ``alloc``/``free``/... in a kernel costs.

A kernel with k call sites of one operation is compiled for a compute
capability (no GPU needed) for k = 1, 2 and 4, with per-thread sizes and
offsets so that nothing folds; each is assembled with ``ptxas -v`` and
disassembled (:func:`devalloc.tools.aot.assemble`). :func:`measure` returns, per
operation, the rows (SASS instructions, registers, spills, stack frame,
compile CPU seconds: Numba + NVVM, then ptxas) and the cost of an extra site:
``(sass(k_max) - sass(1)) / (k_max - 1)``. ``python -m devalloc.probes
--code-size --json`` prints it under ``"code_size"``. Compile seconds are CPU
seconds, not wall-clock (reported, never asserted); the rest is deterministic for a
given toolchain.

GPU compilation only: run with ``NUMBA_ENABLE_CUDASIM`` unset, like
:mod:`devalloc.tools.probes`.
"""

import time

import numpy as np
from numba import cuda

import devalloc
from devalloc.tools import aot, occupancy

# The kernels: k sites of one operation, per-thread arguments (out[i]).


def k_alloc_1(ctx, n, out):
    """One ``alloc`` of a per-thread size."""
    i = cuda.grid(1)
    out[i] = devalloc.alloc(ctx, out[i])


def k_alloc_2(ctx, n, out):
    """Two ``alloc`` sites of per-thread sizes."""
    i = cuda.grid(1)
    a = devalloc.alloc(ctx, out[i])
    b = devalloc.alloc(ctx, out[i] + n)
    out[i] = a ^ b


def k_alloc_4(ctx, n, out):
    """Four ``alloc`` sites of per-thread sizes."""
    i = cuda.grid(1)
    a = devalloc.alloc(ctx, out[i])
    b = devalloc.alloc(ctx, out[i] + n)
    c = devalloc.alloc(ctx, out[i] * n)
    d = devalloc.alloc(ctx, out[i] - n)
    out[i] = a ^ b ^ c ^ d


def k_free_1(ctx, n, out):
    """One ``free`` of a per-thread offset."""
    i = cuda.grid(1)
    devalloc.free(ctx, out[i])


def k_free_2(ctx, n, out):
    """Two ``free`` sites of per-thread offsets."""
    i = cuda.grid(1)
    devalloc.free(ctx, out[i])
    devalloc.free(ctx, out[i] + n)


def k_free_4(ctx, n, out):
    """Four ``free`` sites of per-thread offsets."""
    i = cuda.grid(1)
    devalloc.free(ctx, out[i])
    devalloc.free(ctx, out[i] + n)
    devalloc.free(ctx, out[i] * n)
    devalloc.free(ctx, out[i] - n)


@cuda.jit(device=True)
def _use(ctx, off, n, out, i):
    # Scratch use of a block: alloc'd or NULL; write through view, free.
    if off != devalloc.NULL:
        a = devalloc.view(ctx, off, n, np.float32)
        a[0] = i
        out[i] += int(a[0])
        devalloc.free(ctx, off)


def k_view_1(ctx, n, out):
    """One alloc, view, free of a per-thread size."""
    i = cuda.grid(1)
    _use(ctx, devalloc.alloc(ctx, out[i]), 4, out, i)


def k_view_2(ctx, n, out):
    """Two alloc, view, free sequences of per-thread sizes."""
    i = cuda.grid(1)
    _use(ctx, devalloc.alloc(ctx, out[i]), 4, out, i)
    _use(ctx, devalloc.alloc(ctx, out[i] + n), 8, out, i)


def k_view_4(ctx, n, out):
    """Four alloc, view, free sequences of per-thread sizes."""
    i = cuda.grid(1)
    _use(ctx, devalloc.alloc(ctx, out[i]), 4, out, i)
    _use(ctx, devalloc.alloc(ctx, out[i] + n), 8, out, i)
    _use(ctx, devalloc.alloc(ctx, out[i] * n), 12, out, i)
    _use(ctx, devalloc.alloc(ctx, out[i] - n), 16, out, i)


def k_bump_1(ctx, n, out):
    """One ``bump`` of a per-thread size."""
    i = cuda.grid(1)
    out[i] = devalloc.bump(ctx, out[i])


def k_bump_2(ctx, n, out):
    """Two ``bump`` sites of per-thread sizes."""
    i = cuda.grid(1)
    out[i] = devalloc.bump(ctx, out[i]) ^ devalloc.bump(ctx, out[i] + n)


def k_bump_4(ctx, n, out):
    """Four ``bump`` sites of per-thread sizes."""
    i = cuda.grid(1)
    out[i] = (devalloc.bump(ctx, out[i]) ^ devalloc.bump(ctx, out[i] + n)
              ^ devalloc.bump(ctx, out[i] * n) ^ devalloc.bump(ctx, out[i] - n))


def k_scoped_1(ctx, n, out):
    """One ``scoped`` site (between a ``mark`` and its ``release``)."""
    i = cuda.grid(1)
    m = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    a, s = devalloc.scoped(ctx, m, out[i])
    devalloc.release(ctx, s, m)
    out[i] = a


def k_scoped_2(ctx, n, out):
    """Two ``scoped`` sites in one scope."""
    i = cuda.grid(1)
    m = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    a, s = devalloc.scoped(ctx, m, out[i])
    b, s = devalloc.scoped(ctx, s, out[i] + n)
    devalloc.release(ctx, s, m)
    out[i] = a ^ b


def k_scoped_4(ctx, n, out):
    """Four ``scoped`` sites in one scope."""
    i = cuda.grid(1)
    m = devalloc.mark(ctx, devalloc.SCOPE_NONE)
    a, s = devalloc.scoped(ctx, m, out[i])
    b, s = devalloc.scoped(ctx, s, out[i] + n)
    c, s = devalloc.scoped(ctx, s, out[i] * n)
    d, s = devalloc.scoped(ctx, s, out[i] - n)
    devalloc.release(ctx, s, m)
    out[i] = a ^ b ^ c ^ d


#: Operation -> {sites: kernel}.
KERNELS = {
    op: {k: globals()[f"k_{op}_{k}"] for k in (1, 2, 4)}
    for op in ("alloc", "free", "view", "bump", "scoped")
}


def _compile(fn, sig, cc, timing):
    # Numba + NVVM, then ptxas (and nvdisasm, outside the timing). No PTX
    # cache: the time is the point. Compiled twice, the second one timed:
    # the first also types and compiles the library's device functions,
    # once per process, whichever kernel comes first. CPU seconds (NVVM runs
    # in this process), so that a loaded machine does not move the ratio.
    from .. import _load

    _load()
    with aot.assume_device(cc):
        if timing:
            cuda.compile_ptx(fn, sig, cc=tuple(cc))
        t0 = time.process_time()
        ptx, _ = cuda.compile_ptx(fn, sig, cc=tuple(cc))
        numba_s = time.process_time() - t0
    return ptx, aot.assemble(ptx, cc), numba_s, aot.ptxas_seconds(ptx, cc) if timing else 0.0


def measure(cc=(9, 0), ops=None, sig=None, timing=True, max_registers=None, outline=None):
    """Return ``{op: {"sites": {k: row}, "per_extra_site": n, ...}}`` for ``cc``.

    ``ops`` picks operations of :data:`KERNELS` (all by default); ``sig``
    the kernels' signature (:data:`devalloc.tools.probe_kernels.SIG`: a normal heap);
    ``outline``, without ``sig``: a normal heap's ctx with that choice
    (``Heap(outline=)``: True out of line, False inline; None the process
    default, ``DEVALLOC_OUTLINE``).
    A row: ``sass_instructions``, ``registers``, ``spill_bytes``,
    ``stack_bytes``, ``calls`` (SASS ``CALL`` instructions),
    ``allocated_registers`` and ``warps_per_sm`` (what the registers cost in
    resident warps: :mod:`devalloc.tools.occupancy`; None for a cc it does
    not know) and, with
    ``timing``, ``numba_seconds`` and ``ptxas_seconds``. ``max_registers``
    assembles as ``@cuda.jit(max_registers=N)`` would (ptxas
    ``-maxrregcount``).
    """
    from .probe_kernels import sig_for

    sig = sig or sig_for("normal", outline)
    out = {}
    for op in ops or KERNELS:
        rows = {}
        for k, fn in KERNELS[op].items():
            ptx, r, numba_s, ptxas_s = _compile(fn, sig, cc, timing)
            if max_registers:
                r = aot.assemble(ptx, cc, max_registers)
            row = {"sass_instructions": r.sass_instructions, "registers": r.registers,
                   "spill_bytes": r.spill_bytes, "stack_bytes": r.stack_bytes,
                   "calls": r.sass_calls,
                   # What the registers cost: the SM's allocation (units of
                   # 8 per thread) and the warps it keeps resident (256-thread
                   # blocks, registers alone): tools/occupancy.py.
                   "allocated_registers": occupancy.allocated(r.registers),
                   "warps_per_sm": (occupancy.warps_per_sm(r.registers, cc)
                                    if tuple(cc) in occupancy.MAX_WARPS else None)}
            if timing:
                row["numba_seconds"] = round(numba_s, 3)
                row["ptxas_seconds"] = round(ptxas_s, 3)
            rows[k] = row
        top = max(rows)
        entry = {"sites": rows,
                 "per_extra_site": (rows[top]["sass_instructions"]
                                    - rows[1]["sass_instructions"]) // (top - 1)}
        if timing:
            t = {k: r["numba_seconds"] + r["ptxas_seconds"] for k, r in rows.items()}
            entry["compile_ratio"] = round(t[top] / t[1], 2)
        out[op] = entry
    return out


#: ptxas's smallest ``-maxrregcount``.
FLOOR_LOW = 16


def _fits(r, n=None):
    # Assembled with no spill and no local-memory stack frame (and in at
    # most n registers: ptxas takes more than a cap below its own least,
    # 24 on sm_90, without a word).
    return r.spill_bytes == 0 and r.stack_bytes == 0 and (n is None or r.registers <= n)


def lowest_fitting(fits, low, high):
    """Return the least ``n`` in ``[low, high]`` with ``fits(n)``, by bisection.

    ``fits(high)`` must be true; ``fits`` is assumed monotonic (true from
    some ``n`` up), and is called only inside ``[low, high)``.
    """
    while low < high:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return high


def register_floor(op, k, cc=(9, 0), outline=None):
    """Return the fewest registers code-size kernel ``k_{op}_{k}`` fits in without spilling.

    The code's register pressure as ptxas sees it, apart from the count it
    picks when nothing is asked (``registers``), which may be more than it
    needs where that costs no occupancy (the SM allocates registers 8 per
    thread: :mod:`devalloc.tools.occupancy`). Found by bisection
    (:func:`lowest_fitting`) of ptxas's ``-maxrregcount`` (what
    ``@cuda.jit(max_registers=N)`` asks) between :data:`FLOOR_LOW` and
    ``registers``, assembling the kernel's PTX, compiled once, each time:
    ``floor`` assembles in at most ``floor`` registers with no spill and no
    stack frame, and ``floor - 1``, tried by the bisection, does not
    (``registers_below``, ``spill_below`` and ``stack_below`` are what it
    took: more registers than asked where ptxas will not take fewer, or
    spill and stack bytes; all 0 when ``floor`` is FLOOR_LOW). ``sass_at_floor`` is the SASS instruction
    count at ``floor``. Deterministic for a given toolchain; ``outline`` as
    in :func:`measure`. Raises ValueError for a kernel :data:`KERNELS` does
    not have, RuntimeError if the kernel spills with no cap.
    """
    if op not in KERNELS or k not in KERNELS[op]:
        kinds = ", ".join(f"{o}:{n}" for o in KERNELS for n in KERNELS[o])
        raise ValueError(f"no code-size kernel {op}:{k}; one of {kinds}")
    from .probe_kernels import sig_for

    ptx, plain, _, _ = _compile(KERNELS[op][k], sig_for("normal", outline), cc, False)
    if not _fits(plain):
        raise RuntimeError(f"{op}:{k} spills with no register cap: "
                           f"{plain.spill_bytes} spill bytes, {plain.stack_bytes} stack bytes")
    at = {plain.registers: plain}

    def fits(n):
        at[n] = aot.assemble(ptx, cc, n)
        return _fits(at[n], n)

    floor = lowest_fitting(fits, FLOOR_LOW, plain.registers)
    # Above FLOOR_LOW, the bisection ended by finding floor - 1 too few.
    below = at[floor - 1] if floor > FLOOR_LOW else None
    return {"registers": plain.registers, "floor": floor,
            "sass_instructions": plain.sass_instructions,
            "sass_at_floor": at[floor].sass_instructions,
            "registers_below": below.registers if below else 0,
            "spill_below": below.spill_bytes if below else 0,
            "stack_below": below.stack_bytes if below else 0}
