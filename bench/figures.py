"""The examples' figures that README.md and docs/porting.md quote, from the current code.

Runs every example (``devalloc.examples``) at 256 threads, seed 1, on the
CUDA simulator, and writes what the docs quote about it to
``docs/figures.json``: the heap's peak and the worst case preallocated,
whether the heap version's answers are its twin's bit for bit, and the
heap's usage rows. ``tests/test_figures.py`` fails when a doc quotes a
figure this file does not hold (fast tier), and when this script no longer
produces the file's figures (full tier): a quoted figure cannot go stale.

Run: ``.venv/bin/python bench/figures.py`` (``--check``: compare with the
file and exit 1 on a difference; ``--json``: print only).

A heap's peak depends on how the simulator interleaves its threads where
blocks are freed inside the kernel (``two_pass_variance``: 1 to 2 KiB;
``particle_transport``: 3 or 4 KiB on a loaded machine): ``--check``
compares the peaks within a factor of :data:`PEAK_FACTOR`, every other
figure exactly. The file holds one run's; the docs quote the file.
"""

import argparse
import json
import sys
from pathlib import Path

from _results import add_root_to_path, use_simulator

use_simulator()  # before numba is imported
add_root_to_path()

from devalloc import _examples  # noqa: E402

FILE = Path(__file__).resolve().parents[1] / "docs" / "figures.json"
THREADS = 256
SEED = 1
EXAMPLES = ("ragged_walks", "particle_transport", "barrier_option", "two_pass_variance",
            "step_scratch")
#: The figure that depends on the simulator's interleaving, and how far
#: (a factor) --check lets it move from the file's.
VARIES = ("heap_peak_bytes",)
PEAK_FACTOR = 2


def measure(names=EXAMPLES):
    """Return ``{example: figures}`` for each of ``names`` (the simulator's runs)."""
    out = {}
    for name in names:
        r = _examples.load(name).run(threads=THREADS, seed=SEED)
        out[name] = {"threads": THREADS, "seed": SEED, "heap_peak_bytes": int(r.heap_peak_bytes),
                     "worst_case_bytes": int(r.worst_case_bytes),
                     "identical": bool(r.identical), "page": int(r.usage.page)}
    return out


def differences(old, new):
    """Return lines naming each figure of ``new`` that ``old`` does not hold."""
    lines = []
    for name, figs in new.items():
        for key, value in figs.items():
            have = old.get(name, {}).get(key)
            if key in VARIES and have:
                if not have / PEAK_FACTOR <= value <= have * PEAK_FACTOR:
                    lines.append(f"{name}.{key}: the file says {have}, the code gives {value} "
                                 f"(more than {PEAK_FACTOR}x apart)")
            elif have != value:
                lines.append(f"{name}.{key}: the file says {have}, the code gives {value}")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="compare with docs/figures.json")
    g.add_argument("--json", action="store_true", help="print the figures only")
    a = p.parse_args(argv)
    figures = measure()
    if a.json:
        print(json.dumps(figures, indent=1))
        return 0
    if a.check:
        lines = differences(json.loads(FILE.read_text()), figures)
        print("\n".join(lines) or "docs/figures.json holds what the code gives")
        return 1 if lines else 0
    FILE.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
