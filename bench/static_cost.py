"""Static cost of devalloc's device functions, no GPU needed.

Compiles the probe kernels of :mod:`devalloc.probes` for sm_75, sm_80 and
sm_90, assembles them with ``ptxas -v`` and disassembles them with
``nvdisasm`` (both from the NVIDIA wheels), and writes a table to
``bench/RESULTS.md``: registers, spill bytes, SASS instructions and atomic
instructions, the difference to the empty kernel and the ratio to the floor
(one ``cuda.atomic.add`` bump).

Run: ``.venv/bin/python bench/static_cost.py`` (after ``pip install -e ".[test]"``).
"""

import datetime
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
CCS = ((7, 5), (8, 0), (9, 0))


def environment():
    def ver(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "absent"

    return (f"Python {platform.python_version()}, {platform.machine()}, "
            f"numba-cuda {ver('numba-cuda')}, NVVM {ver('nvidia-nvvm')}, "
            f"ptxas {ver('nvidia-cuda-nvcc')}, nvdisasm {ver('nvidia-cuda-nvdisasm')}")


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
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from devalloc import probes

    rows = probes.measure(CCS)
    section = "\n".join([
        "## Static cost (compile only, no GPU)",
        "",
        "Command: `.venv/bin/python bench/static_cost.py`  ",
        f"Date: {datetime.date.today().isoformat()}  ",
        f"Environment: {environment()}",
        "",
        "`atomics` counts SASS ATOM/ATOMG/RED instructions in the whole kernel "
        "(every code path, not per call). `x floor` is the SASS instruction "
        "count relative to the one-atomic bump kernel.",
        "",
        table(rows),
        "",
        "",
    ])
    text = RESULTS.read_text() if RESULTS.exists() else "# devalloc benchmark results\n\n"
    start = text.find("## Static cost")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)
    print(section)


if __name__ == "__main__":
    main()
