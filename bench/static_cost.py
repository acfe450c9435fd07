"""Static cost of devalloc's device functions, no GPU needed.

Compiles the probe kernels of :mod:`devalloc.tools.probes` for sm_75, sm_80 and
sm_90, assembles them with ``ptxas -v`` and disassembles them with
``nvdisasm`` (both from the NVIDIA wheels), and writes two tables to
``bench/RESULTS.md``: per kernel, registers, spill bytes, SASS instructions,
atomic instructions and SC fences, the difference to the empty kernel and
the ratio to the floor (one ``cuda.atomic.add`` bump); per common path, the
SASS instructions it executes on sm_90 (:mod:`devalloc.tools.paths`), next to the
floor's, with its memory-ordering instructions and where most go.

Run: ``.venv/bin/python bench/static_cost.py`` (after ``pip install -e ".[test]"``).
"""

import os
import sys

from _results import add_root_to_path, environment, header, write_section

CCS = ((7, 5), (8, 0), (9, 0))


def table(rows):
    floor = {r["arch"]: r for r in rows if r["kernel"] == "atomic_floor"}
    out = ["| kernel | arch | registers | spill B | SASS instr. | + vs empty | x floor | atomics "
           "| SC fences |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        f = floor[r["arch"]]
        ratio = r["sass_instructions"] / f["sass_instructions"]
        out.append(f"| {r['kernel']} | {r['arch']} | {r['registers']} | {r['spill_bytes']} | "
                   f"{r['sass_instructions']} | {r['extra_instructions']} | {ratio:.1f} | "
                   f"{r['sass_atomics']} | {r['sass_membar_sc']} |")
    return "\n".join(out)


def path_table(walked, floor):
    out = ["| path | SASS executed | x floor | ordering instr. | most instructions in | what |",
           "|---|---:|---:|---|---|---|"]
    for name, r in walked.items():
        order = ", ".join(f"{op} {n}" for op, n in r["ordering"].items()) or "none"
        top = ", ".join(f"{f} {n}" for f, n in list(r["by_function"].items())[:3])
        out.append(f"| {name} | {r['instructions']} | {r['instructions'] / floor:.1f} | {order} "
                   f"| {top} | {r['what']} |")
    return "\n".join(out)


def main():
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("0", ""):
        sys.exit("static_cost needs the real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    add_root_to_path()
    from devalloc.tools import paths, probes

    rows = probes.measure(CCS)
    walked = paths.measure((9, 0))
    floor = paths.floor((9, 0))
    section = "\n".join(header(
        "Static cost (compile only, no GPU)", ".venv/bin/python bench/static_cost.py",
        environment()) + [
        "`atomics` counts SASS ATOM/ATOMG/RED instructions in the whole kernel "
        "(every code path, not per call). `x floor` is the SASS instruction "
        "count relative to the one-atomic bump kernel.",
        "",
        table(rows),
        "",
        "The kernels `alloc` (size from a kernel argument), `alloc_const` (a "
        "constant 64) and `alloc_per_thread` (read per thread) are the three ways "
        "of passing a size; `alloc_view_free_per_thread` uses a per-thread size.",
        "",
        f"SASS instructions executed on each common path, sm_90, walked through the "
        f"cubin's control flow (`python -m devalloc.probes`; the floor, one "
        f"`atomic.add` per thread, executes {floor}). Lone paths: one lane of its "
        f"warp calls. `ordering instr.`: the fences and what acquire (CCTL.IVALL "
        f"after the atomic) and release (MEMBAR.ALL.GPU, ERRBAR, CGAERRBAR before "
        f"it) atomics add.",
        "",
        path_table(walked, floor),
    ])
    write_section(section)
    print(section)


if __name__ == "__main__":
    main()
