"""Per-step scratch: scoped vs alloc/free vs worst case, on the simulator.

Runs ``kernels/step_scratch.py``, imported as ``devalloc.examples.step_scratch``
(three versions of a path simulation whose every time step needs a buffer
of a run-time size), and writes, per version,
the answer check, the heap's peak, the worst-case bytes and the atomics per
allocation counted by ``devalloc.sim.atomics.count_atomics``.

Run: ``.venv/bin/python bench/step_scratch.py`` (also a step of ``run_all.py``).
"""

import argparse
import sys

from _results import (add_root_to_path, header, markdown_table, simulator_environment,
                      use_simulator, write_section)

use_simulator()  # before numba is imported
add_root_to_path()

from devalloc.examples import step_scratch as S  # noqa: E402

COMMAND = ".venv/bin/python bench/step_scratch.py"
THREADS = (32, 96)


def section(results):
    cols = [("threads", "r"), ("version", "l"), ("heap peak", "r"), ("worst case", "r"),
            ("atomics / allocation", "r"), ("identical", "l")]
    rows = []
    for threads, r in results:
        for name, peak, atomics in (
                ("scoped", r.heap_peak_bytes, r.scoped_atomics_per_alloc),
                ("alloc/free", r.alloc_free_peak_bytes, r.alloc_free_atomics_per_alloc)):
            rows.append([threads, name, f"{peak:,} B", f"{r.worst_case_bytes:,} B",
                         f"{atomics:.2f}", str(r.identical)])
    lines = header("Per-step scratch (kernels/step_scratch.py)", COMMAND, simulator_environment())
    lines += [
        f"{S.NSTEPS} steps per path, each needing 1 to {S.MAX_K} floats. Scoped scratch "
        "takes one chunk per thread and reuses it at every step (atomics only for the "
        "chunk); alloc/free pays a slab `cas` and a free's `or` and `add` per step. The worst case is "
        f"threads x {S.MAX_K} floats. On the simulator one block runs at a time, so the "
        "heap's peak is about one block's need plus one page per size class in use.",
        "",
        markdown_table(cols, rows),
    ]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    a = p.parse_args(argv)
    results = [(n, S.run(threads=n, block=32)) for n in THREADS]
    text = section(results)
    if not a.no_write:
        write_section(text)
    print(text)
    return 0 if all(r.identical for _, r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
