"""The porting API's figures on the simulator: a growing list, three ways.

Each thread pushes PUSHES float64 items one at a time onto a list in one
heap block, written three ways: ``realloc`` at every push (it moves the
block only when the size class changes), capacity doubling with
``realloc`` (what ``kernels/particle_transport.py`` does), and by hand as
the issue's neutron port did it (``alloc`` a bigger block, copy, ``free``
the old one at every push, even when the class had room). Per version: the
moves (blocks copied) per thread, the atomics per push counted by
``devalloc.sim.atomics.count_atomics``, the bytes copied per thread, and
whether every list holds its items. Then the examples the porting guide
(docs/porting.md) quotes: heap peak against the worst case, and the
answers against the twin's.

Run: ``.venv/bin/python bench/porting.py`` (``--no-write``: print only).
"""

import argparse
import sys

from _results import (add_root_to_path, header, markdown_table, simulator_environment,
                      use_simulator, write_section)

use_simulator()  # before numba is imported
add_root_to_path()

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import devalloc  # noqa: E402
from devalloc.examples import particle_transport, ragged_walks  # noqa: E402
from devalloc.sim.atomics import count_atomics  # noqa: E402

COMMAND = ".venv/bin/python bench/porting.py"
THREADS = 32
PUSHES = 200


@cuda.jit
def k_push_realloc(ctx, pushes, out):
    # realloc to the list's exact size at every push.
    i = cuda.grid(1)
    off = devalloc.NULL
    moves = 0
    copied = 0
    for k in range(pushes):
        new = devalloc.realloc(ctx, off, (k + 1) * 8)
        if new == devalloc.NULL:
            break
        if new != off:
            moves += 1
            copied += k * 8
        off = new
        devalloc.view(ctx, off, k + 1, np.float64)[k] = k
    _check(ctx, off, pushes, out, i, moves, copied)


@cuda.jit
def k_push_doubling(ctx, pushes, out):
    # Capacity doubling with realloc (particle_transport's stack).
    i = cuda.grid(1)
    off = devalloc.NULL
    cap = 0
    moves = 0
    copied = 0
    for k in range(pushes):
        if k == cap:
            cap = 2 if cap == 0 else 2 * cap
            new = devalloc.realloc(ctx, off, cap * 8)
            if new == devalloc.NULL:
                break
            if new != off:
                moves += 1
                copied += k * 8
            off = new
        devalloc.view(ctx, off, cap, np.float64)[k] = k
    _check(ctx, off, pushes, out, i, moves, copied)


@cuda.jit
def k_push_by_hand(ctx, pushes, out):
    # alloc a bigger block, copy, free the old one, at every push.
    i = cuda.grid(1)
    off = devalloc.NULL
    moves = 0
    copied = 0
    for k in range(pushes):
        new = devalloc.alloc(ctx, (k + 1) * 8)
        if new == devalloc.NULL:
            break
        a = devalloc.view(ctx, new, k + 1, np.float64)
        b = devalloc.view(ctx, off, k, np.float64)
        for j in range(b.shape[0]):
            a[j] = b[j]
        devalloc.free(ctx, off)
        moves += 1
        copied += k * 8
        off = new
        a[k] = k
    _check(ctx, off, pushes, out, i, moves, copied)


@cuda.jit(device=True)
def _check(ctx, off, pushes, out, i, moves, copied):
    v = devalloc.view(ctx, off, pushes, np.float64)
    ok = v.shape[0] == pushes
    for j in range(v.shape[0]):
        if v[j] != j:
            ok = False
    out[i, 0] = 1 if ok else 0
    out[i, 1] = moves
    out[i, 2] = copied
    devalloc.free(ctx, off)


VERSIONS = (("realloc at every push", k_push_realloc),
            ("realloc, capacity doubling", k_push_doubling),
            ("by hand: alloc, copy, free at every push", k_push_by_hand))


def growing_lists():
    rows = []
    for name, kernel in VERSIONS:
        heap = devalloc.Heap(4 << 20)
        out = cuda.to_device(np.zeros((THREADS, 3), np.int64))
        with count_atomics() as n:
            kernel[1, THREADS](heap.ctx, PUSHES, out)
        o = out.copy_to_host()
        u = heap.usage()
        rows.append(dict(version=name, ok=bool(o[:, 0].all()) and u.in_use == 0 and u.failed == 0,
                         moves=o[:, 1].mean(), copied=o[:, 2].mean(),
                         atomics=n.total / (THREADS * PUSHES)))
    return rows


def examples():
    rows = []
    for name, module, threads in (("ragged_walks", ragged_walks, 256),
                                  ("particle_transport", particle_transport, 256)):
        r = module.run(threads=threads, seed=1)
        rows.append(dict(example=name, threads=threads, peak=r.heap_peak_bytes,
                         worst=r.worst_case_bytes, identical=r.identical))
    return rows


def section(lists, exs):
    lines = header("Porting API (simulator)", COMMAND, simulator_environment())
    lines += [
        f"A list of float64 grown one item at a time to {PUSHES} items by each of "
        f"{THREADS} threads (one warp). realloc moves the block only when the size class "
        "changes (at most 25 % apart above 128 B), so it copies far less than the "
        "hand-written port, which moved at every push; doubling moves log2 times.",
        "",
        markdown_table([("version", "l"), ("moves / thread", "r"), ("bytes copied / thread", "r"),
                        ("atomics / push", "r"), ("contents kept", "l")],
                       [[r["version"], f"{r['moves']:.0f}", f"{r['copied']:,.0f}",
                         f"{r['atomics']:.2f}", str(r["ok"])] for r in lists]),
        "",
        "The examples rewritten with the porting API (ragged_walks gathers with "
        "`heap.gather`, particle_transport grows its stack with `realloc`), seed 1: heap "
        "peak against the worst-case preallocation, and the answers against the twin's.",
        "",
        markdown_table([("example", "l"), ("threads", "r"), ("heap peak", "r"),
                        ("worst case", "r"), ("identical", "l")],
                       [[r["example"], r["threads"], f"{r['peak']:,} B", f"{r['worst']:,} B",
                         str(r["identical"])] for r in exs]),
    ]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    a = p.parse_args(argv)
    lists, exs = growing_lists(), examples()
    text = section(lists, exs)
    if not a.no_write:
        write_section(text)
    print(text)
    return 0 if all(r["ok"] for r in lists) and all(r["identical"] for r in exs) else 1


if __name__ == "__main__":
    sys.exit(main())
