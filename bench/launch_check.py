"""What refusing a stale ctx costs each launch, no GPU needed.

A kernel launched with the ctx of a closed or resized heap is refused
before it runs (issue 51): on a GPU the heap's metadata array checks its
lease when the launch asks for its Numba type (``_numba_type_``, which the
launch calls anyway), on the simulator the launch checks its arguments
(:func:`devalloc.ctx.check_launch_args`). Times, with ``timeit``, the type
with and without the lease's check, and the simulator's check of a
typical argument list, next to what numba-cuda's typing of that ctx costs
a launch anyway (``typeof``).

Run: ``.venv/bin/python bench/launch_check.py [--write]`` (``--write``: the
section "Launch check" of bench/RESULTS.md).
"""

import argparse
import os
import sys
import timeit

from _results import add_root_to_path, environment, header, markdown_table, write_section


def measure(number=200_000):
    """Return ``{name: nanoseconds per call}``."""
    add_root_to_path()
    import numpy as np
    from numba import typeof

    from devalloc.ctx import Ctx, Lease, check_launch_args
    from devalloc.host.paged import paged_array_class

    cls = paged_array_class()
    meta = object.__new__(cls)  # no device memory needed for its type
    meta.page_shift, meta.outline = 14, "auto"
    bare = object.__new__(cls)
    bare.page_shift, bare.outline = 14, "auto"
    meta._devalloc_lease = Lease("Heap(capacity=1)")
    args = (Ctx(np.zeros(16, np.uint8), meta), 16, np.zeros(4))
    ctx_tuple = Ctx(np.zeros(16, np.uint8), bare)

    def per_call(stmt, n=number):
        return min(timeit.repeat(stmt, number=n, repeat=5)) / n * 1e9

    return {
        "metadata type, no lease (before)": per_call(lambda: bare._numba_type_),
        "metadata type, lease checked (now)": per_call(lambda: meta._numba_type_),
        "simulator: check_launch_args, 3 arguments": per_call(lambda: check_launch_args(args)),
        "numba typeof of a ctx (every launch, for comparison)":
            per_call(lambda: typeof(ctx_tuple), number // 20),
    }


def section(rows):
    table = markdown_table([("what", "l"), ("ns per call", "r")],
                           [(k, f"{v:.0f}") for k, v in rows.items()])
    added = rows["metadata type, lease checked (now)"] - rows["metadata type, no lease (before)"]
    return "\n".join(header("Launch check (a stale ctx refused)",
                            ".venv/bin/python bench/launch_check.py --write",
                            f"{environment()}, {os.cpu_count()} CPU(s)") + [
        "Per launch, on the host, best of 5 `timeit` runs. On a GPU the check is in the "
        "heap's metadata type, which every launch asks for: it adds "
        f"{added:+.0f} ns (the timing's noise is larger) to a launch whose typing of the "
        "ctx alone costs "
        f"{rows['numba typeof of a ctx (every launch, for comparison)'] / 1e3:.1f} us "
        "(and a kernel launch some microseconds more).", "", table, ""])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="write the section of bench/RESULTS.md")
    args = p.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("0", ""):
        sys.exit("launch_check types for a GPU: unset NUMBA_ENABLE_CUDASIM")
    rows = measure()
    print(section(rows))
    if args.write:
        write_section(section(rows))


if __name__ == "__main__":
    main()
