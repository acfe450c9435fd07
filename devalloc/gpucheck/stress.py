"""The stress verification kernel: every SM full, hundreds of rounds in one launch.

Each thread runs ``rounds`` rounds of: draw a size (16 B .. 64 KiB, each
octave [2**e, 2**(e+1)) half as likely as the one below, so that every class
is drawn and the bytes written stay within what a full GPU writes in seconds;
1 in 64 a large block of up to ``max_large`` bytes), ``alloc``
it, write its key (thread and round) into every 4-byte word, read every word
back, then free the block, or keep it (1 in 4, blocks of at most
``MAX_HELD`` bytes) for 1..16 more rounds and check every word again when it
is freed. Every other round also takes 16 B..1 KiB of scoped scratch in a
scope of its own (``mark`` / ``scoped`` / ``release``, chunks from the same
heap), keyed and checked like the blocks, across the round's ``alloc``.
Even warps call ``alloc`` from one site, all lanes together
(converged); odd warps split their lanes over two call sites (divergent), one
third of the lanes after a detour. A quarter of the draws skip the round
(Monte-Carlo style: not every thread needs scratch).

What it catches that the simulator cannot (docs/correctness.md, "The GPU
stress check"): two blocks handed out over the same bytes by racing SMs
(relaxed atomics seen out of order, a stale L1 line read as a free slot),
which shows as a word holding another thread's key; a NULL returned while
the heap had room (a retry budget exhausted under a CAS pile-up of 132 SMs),
counted per thread; pages or slots lost (the drained heap is checked word by
word against a new heap's: :func:`devalloc.testing.invariants.check_drained`).

Host side: :func:`run` sizes the heap, launches once and returns the counts.
Kernels are module-level (the simulator needs it); imports numba: call
:func:`devalloc.target.choose` first.
"""

import time

import numpy as np
from numba import cuda

import devalloc
from .. import layout as L

#: Largest block a thread keeps across rounds (a held block pins at most
#: ``pages_for(MAX_HELD)`` pages).
MAX_HELD = 1 << 16
#: A draw is a large block with probability LARGE_IN / 32768.
LARGE_IN = 512
#: Words of the per-thread result rows: allocations served, NULLs, blocks
#: that read back another key, requests, bytes served.
R_ALLOCS, R_NULLS, R_BAD, R_REQUESTS, R_BYTES, R_SCOPED, R_SCOPED_NULLS = range(7)
ROW = 7
#: Largest scoped request; a thread's chunks then stay within SCOPE_PAGES pages.
MAX_SCOPED = 1024
SCOPE_PAGES = 4
MASK31 = 0x7FFFFFFF


@cuda.jit(device=True)
def _draw(x):
    """Advance the 31-bit LCG state ``x``; return (new state, 15 random bits)."""
    x = (x * 1103515245 + 12345) & MASK31
    return x, x >> 16


@cuda.jit(device=True)
def _size(x, max_large):
    """Return (state, size): 16 B..64 KiB (octave e with odds 2**-(e-3)), or 1 in 64 large."""
    x, u = _draw(x)
    if u < LARGE_IN and max_large > L.MAX_SMALL:
        x, a = _draw(x)
        x, b = _draw(x)
        return x, L.MAX_SMALL + 1 + (a * 32768 + b) % (max_large - L.MAX_SMALL)
    x, bits = _draw(x)
    e = 4
    while e < 15 and (bits >> (e - 4)) & 1:  # each octave half as likely: 2**4 .. 2**15
        e += 1
    x, m = _draw(x)
    return x, (1 << e) + (m * ((1 << e) // 32768 + 1)) % (1 << e)


@cuda.jit(device=True)
def _fill(ctx, off, n, key):
    """Write ``key`` into every whole 4-byte word of the block."""
    w = devalloc.view(ctx, off, n // 4, np.uint32)
    for j in range(w.shape[0]):
        w[j] = key


@cuda.jit(device=True)
def _intact(ctx, off, n, key):
    """Return 1 if every whole word of the block still holds ``key``."""
    w = devalloc.view(ctx, off, n // 4, np.uint32)
    if w.shape[0] != n // 4:
        return 0
    ok = 1
    for j in range(w.shape[0]):
        if w[j] != key:
            ok = 0
    return ok


@cuda.jit
def stress_kernel(ctx, rounds, seed, max_large, out):
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    warp = i // 32
    lane = i % 32
    x = (seed * 7919 + i * 2654435 + 1) & MASK31
    allocs = 0
    nulls = 0
    bad = 0
    requests = 0
    served = 0
    held = devalloc.NULL
    held_n = 0
    held_key = np.uint32(0)
    held_left = 0
    scoped_n = 0
    scoped_nulls = 0
    s = devalloc.mark(ctx, devalloc.SCOPE_NONE)  # the thread's outermost scope
    outer = s
    for r in range(rounds):
        if held != devalloc.NULL:
            held_left -= 1
            if held_left <= 0:
                if _intact(ctx, held, held_n, held_key) == 0:
                    bad += 1
                devalloc.free(ctx, held)
                held = devalloc.NULL
        x, u = _draw(x)
        if u % 4 == 0:
            continue  # this thread needs no scratch this round
        m = devalloc.mark(ctx, s)  # a scope for this round's scoped scratch
        s = m
        sc = devalloc.NULL
        sn = 0
        skey = np.uint32(0)
        if (u >> 2) % 2 == 0:
            x, d = _draw(x)
            sn = 16 + d % (MAX_SCOPED - 15)
            sc, s = devalloc.scoped(ctx, s, sn)
            if sc == devalloc.NULL:
                scoped_nulls += 1
            else:
                scoped_n += 1
                skey = np.uint32(((i << 8) | (r & 0xFF) | 0x80000000) & 0xFFFFFFFF)
                _fill(ctx, sc, sn, skey)
        x, n = _size(x, max_large)
        requests += 1
        if warp % 2 == 0:
            off = devalloc.alloc(ctx, n)  # converged: every active lane at one site
        elif lane % 3 == 0:
            off = devalloc.alloc(ctx, n)  # divergent: a third of the lanes here ...
        else:
            x, d = _draw(x)
            for _ in range(d % 8):  # ... the rest after a detour of their own length
                x, d = _draw(x)
            off = devalloc.alloc(ctx, n)
        if off == devalloc.NULL:
            nulls += 1
        else:
            allocs += 1
            served += n
            key = np.uint32(((i << 8) | (r & 0xFF)) & 0xFFFFFFFF)
            _fill(ctx, off, n, key)
            if _intact(ctx, off, n, key) == 0:
                bad += 1
            x, k = _draw(x)
            if held == devalloc.NULL and n <= MAX_HELD and k % 4 == 0:
                held = off
                held_n = n
                held_key = key
                held_left = 1 + (k >> 2) % 16
            else:
                devalloc.free(ctx, off)
        if sc != devalloc.NULL and _intact(ctx, sc, sn, skey) == 0:
            bad += 1  # the scoped block changed while the round's alloc ran
        s = devalloc.release(ctx, s, m)
    s = devalloc.release(ctx, s, outer)  # the chunks go back to the heap
    if held != devalloc.NULL:
        if _intact(ctx, held, held_n, held_key) == 0:
            bad += 1
        devalloc.free(ctx, held)
    out[i, R_ALLOCS] = allocs
    out[i, R_NULLS] = nulls
    out[i, R_BAD] = bad
    out[i, R_REQUESTS] = requests
    out[i, R_BYTES] = served
    out[i, R_SCOPED] = scoped_n
    out[i, R_SCOPED_NULLS] = scoped_nulls


@cuda.jit
def one_alloc(ctx, sizes, out):
    """One ``alloc`` site (and a ``free``): the kernel whose first-call latency is timed."""
    i = cuda.grid(1)
    if i < sizes.shape[0]:
        off = devalloc.alloc(ctx, sizes[i])
        out[i] = off
        if off != devalloc.NULL:
            devalloc.free(ctx, off)


def worst_case_capacity(threads, max_large, ps=L.PAGE_SHIFT):
    """Return a capacity no correct heap of pages of ``2**ps`` bytes can run out of.

    In :func:`stress_kernel`, a thread holds at most two blocks at once (the
    held one and the one of the round); each pins at most its own pages (a
    small block one page, as if every block sat alone in its slab), plus its
    scoped chunks (within SCOPE_PAGES default pages), plus one partly filled
    slab per class and hint slot.
    """
    pages = L.pages_for(MAX_HELD, ps) + max(1, L.pages_for(max(max_large, L.max_small(ps)), ps))
    per_thread = (pages << ps) + SCOPE_PAGES * L.PAGE
    return threads * per_thread + ((L.NCLASSES * L.HINT_SLOTS) << ps)


def resident_grid(kernel_args, block, want_per_sm):
    """Return (blocks, SMs, blocks per SM) so that every block is resident at once."""
    from numba import typeof

    if not _simulated():
        dev = cuda.get_current_device()
        sms = dev.MULTIPROCESSOR_COUNT
        k = stress_kernel.compile(tuple(typeof(a) for a in kernel_args))
        most = k.max_cooperative_grid_blocks(block)
        per_sm = max(1, min(want_per_sm, most // sms))
        return sms * per_sm, sms, per_sm
    return 1, 1, 1


def _simulated():
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def drained_problem(heap):
    """Return None if the heap is back to the empty state, else what is wrong."""
    from ..testing.invariants import Fault, check_drained

    words = heap._snapshot(heap._meta, None)
    try:
        check_drained([int(w) for w in words], heap.npages)
    except Fault as e:
        return str(e)
    return None


def run(threads=None, rounds=200, seed=1, max_large=1 << 17, capacity=None, warps_per_sm=16,
        block=256, page=None, outline=None):
    """Launch :func:`stress_kernel` once on a fresh heap; return a dict of counts.

    ``threads`` None: every SM full with ``warps_per_sm`` warps (at most what
    is resident at once). ``capacity`` None: :func:`worst_case_capacity`, so
    that any NULL is a NULL while the heap had room. ``page``: the heap's
    page (``Heap(page=)``; None: the default 16 KiB). ``outline``: the
    heap's ``Heap(outline=)`` (True: the kernel compiles ``alloc``, ``free``
    and scoped's chunk code as calls to one out-of-line copy each).
    """
    ps = L.PAGE_SHIFT if page is None else L.floor_log2(page)
    sized_for_room = capacity is None
    if threads is None:
        probe = devalloc.Heap(1 << 20)
        args = (probe.ctx, np.int64(rounds), np.int64(seed), np.int64(max_large),
                cuda.device_array((1, ROW), np.int64))
        blocks, sms, per_sm = resident_grid(args, block, max(1, warps_per_sm * 32 // block))
        probe.close()
        threads = blocks * block
    else:
        blocks, sms, per_sm = (threads + block - 1) // block, None, None
    cap = worst_case_capacity(threads, max_large, ps) if capacity is None else capacity
    heap = devalloc.Heap(cap, page=page, outline=outline)
    out = cuda.to_device(np.zeros((threads, ROW), np.int64))
    t0 = time.perf_counter()
    stress_kernel[blocks, block](heap.ctx, rounds, seed, max_large, out)
    cuda.synchronize()
    seconds = time.perf_counter() - t0
    rows = out.copy_to_host()
    u = heap.usage()
    problem = drained_problem(heap)
    heap.close()
    totals = rows.sum(axis=0)
    return {
        "threads": int(threads), "blocks": int(blocks), "block": block,
        "sms": sms, "blocks_per_sm": per_sm, "rounds": rounds, "seed": seed,
        "max_large": max_large, "capacity": int(u.capacity), "page": int(u.page),
        "outline": bool(heap.outline),
        "sized_for_room": sized_for_room,
        "requests": int(totals[R_REQUESTS]), "allocs": int(totals[R_ALLOCS]),
        "nulls": int(totals[R_NULLS]), "bad_blocks": int(totals[R_BAD]),
        "bytes_served": int(totals[R_BYTES]),
        "scoped": int(totals[R_SCOPED]), "scoped_nulls": int(totals[R_SCOPED_NULLS]),
        "scope_misuse": int(u.scope_misuse),
        "heap_allocs": int(u.allocs), "heap_frees": int(u.frees), "heap_failed": int(u.failed),
        "peak": int(u.peak), "in_use_after": int(u.in_use), "reserved_after": int(u.reserved),
        "live_after": int(u.live_blocks),
        "drained_problem": problem,
        "seconds": round(seconds, 3),
    }


def verdict(r):
    """Return the list of what is wrong in a :func:`run` result (empty: passed)."""
    wrong = []
    if r["bad_blocks"]:
        wrong.append(f"{r['bad_blocks']} blocks read back another block's key")
    if r["sized_for_room"] and r["nulls"] + r["scoped_nulls"]:
        wrong.append(f"{r['nulls']} NULLs ({r['scoped_nulls']} scoped) on a heap sized for "
                     "the worst case (the heap had room)")
    if r["scope_misuse"]:
        wrong.append(f"{r['scope_misuse']} scope misuses counted")
    if r["requests"] != r["allocs"] + r["nulls"]:
        wrong.append(f"requests {r['requests']} != served {r['allocs']} + NULLs {r['nulls']}")
    # A scoped NULL is a chunk the heap could not serve: counted in failed too.
    if (r["heap_allocs"] != r["allocs"] or
            not r["nulls"] <= r["heap_failed"] <= r["nulls"] + r["scoped_nulls"]):
        wrong.append(f"the heap counted {r['heap_allocs']} allocs and {r['heap_failed']} "
                     f"failures; the threads saw {r['allocs']} and {r['nulls']} "
                     f"(+{r['scoped_nulls']} scoped)")
    if r["heap_frees"] != r["heap_allocs"]:
        wrong.append(f"{r['heap_allocs']} allocs but {r['heap_frees']} frees")
    if (r["in_use_after"], r["reserved_after"], r["live_after"]) != (0, 0, 0):
        wrong.append(f"after the run: in use {r['in_use_after']}, reserved "
                     f"{r['reserved_after']}, live {r['live_after']} (want 0, 0, 0)")
    if r["drained_problem"]:
        wrong.append(f"heap consistency: {r['drained_problem']}")
    return wrong
