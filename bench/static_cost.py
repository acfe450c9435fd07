"""Static cost of devalloc's device functions, no GPU needed.

Compiles the probe kernels of :mod:`devalloc.probes` for sm_75, sm_80 and
sm_90, assembles them with ``ptxas -v`` and disassembles them with
``nvdisasm`` (both from the NVIDIA wheels), and writes a table to
``bench/RESULTS.md``: registers, spill bytes, SASS instructions and atomic
instructions, the difference to the empty kernel and the ratio to the floor
(one ``cuda.atomic.add`` bump).

Run: ``.venv/bin/python bench/static_cost.py`` (after ``pip install -e ".[test]"``).
"""

import os
import sys

from _results import add_root_to_path, environment, header, write_section

CCS = ((7, 5), (8, 0), (9, 0))


def table(rows):
    floor = {r["arch"]: r for r in rows if r["kernel"] == "atomic_floor"}
    out = ["| kernel | arch | registers | spill B | SASS instr. | + vs empty | x floor | atomics |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        f = floor[r["arch"]]
        ratio = r["sass_instructions"] / f["sass_instructions"]
        out.append(f"| {r['kernel']} | {r['arch']} | {r['registers']} | {r['spill_bytes']} | "
                   f"{r['sass_instructions']} | {r['extra_instructions']} | {ratio:.1f} | "
                   f"{r['sass_atomics']} |")
    return "\n".join(out)


def main():
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("0", ""):
        sys.exit("static_cost needs the real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    add_root_to_path()
    from devalloc import probes

    rows = probes.measure(CCS)
    section = "\n".join(header(
        "Static cost (compile only, no GPU)", ".venv/bin/python bench/static_cost.py",
        environment()) + [
        "`atomics` counts SASS ATOM/ATOMG/RED instructions in the whole kernel "
        "(every code path, not per call). `x floor` is the SASS instruction "
        "count relative to the one-atomic bump kernel.",
        "",
        table(rows),
    ])
    write_section(section)
    print(section)


if __name__ == "__main__":
    main()
