"""The simulator's convoy, before and after devalloc.sim.launch (issue 27).

Runs ``python -m devalloc demo`` commands on the CUDA simulator, each in a
fresh process, three ways: with the simulator's own kernel call ("plain":
a locked swap of the module's ``cuda`` at every device-function call), with
devalloc's (:mod:`devalloc.sim.launch`: one swap per module per launch; the
default), and with devalloc's and a 0.1 ms switch interval in launches
(``SWITCH_INTERVAL = 1e-4``, not the default: it changes the interleavings
tests see). Reports the wall time of each command, the minimum, median and
maximum of ``--repeats`` runs, and the least CPU time (user + system).

Run: ``.venv/bin/python bench/sim_launch.py [--repeats 3]`` (rewrites its
section of ``bench/RESULTS.md``; ``--no-write`` only prints). Takes a few
minutes: the plain step_scratch runs dominate.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from _results import header, markdown_table, simulator_environment, write_section

COMMANDS = {
    "demo (ragged_walks, 256 threads)": ["demo"],
    "step_scratch, 256 threads": ["demo", "--example", "step_scratch", "--threads", "256"],
    "particle_transport, 256 threads": ["demo", "--example", "particle_transport",
                                        "--threads", "256"],
}

# The plain variant: devalloc's launch wrapper is never installed.
_PLAIN = """
import runpy, sys
import devalloc.sim.launch as launch
launch.install = lambda: None
sys.argv = ["python -m devalloc"] + sys.argv[1:]
runpy.run_module("devalloc", run_name="__main__", alter_sys=True)
"""
_VARIANTS = {
    "plain": _PLAIN,
    "devalloc": _PLAIN.replace("launch.install = lambda: None\n", ""),
    "devalloc, 0.1 ms": _PLAIN.replace("launch.install = lambda: None\n",
                                       "launch.SWITCH_INTERVAL = 1e-4\n"),
}


def run_once(variant, args):
    """Return (wall seconds, CPU seconds) of one command in a fresh process."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    code = _VARIANTS[variant]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    rows = []
    for name, cmd in COMMANDS.items():
        for variant in _VARIANTS:
            runs = [run_once(variant, cmd) for _ in range(args.repeats)]
            walls = sorted(w for w, _ in runs)
            cpu = min(c for _, c in runs)
            row = [name, variant, f"{walls[0]:.1f}", f"{statistics.median(walls):.1f}",
                   f"{walls[-1]:.1f}", f"{cpu:.1f}"]
            print(" | ".join(row), flush=True)
            rows.append(row)
    load = os.getloadavg()[0]
    lines = header("Simulator launches: the convoy (issue 27)",
                   f"bench/sim_launch.py --repeats {args.repeats}",
                   simulator_environment() + f"; load average {load:.1f} at the end")
    lines += [markdown_table([("command", "l"), ("launch", "l"), ("wall min (s)", "r"),
                              ("wall median (s)", "r"), ("wall max (s)", "r"),
                              ("CPU min (s)", "r")], rows)]
    lines += ["", "\"plain\": the simulator's own kernel call; \"devalloc\": "
              "devalloc.sim.launch (one swap of a module's cuda per launch; the "
              "default); \"0.1 ms\": and a switch interval of at most 0.1 ms in "
              "launches. Whole commands, process start included."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section(text)


if __name__ == "__main__":
    main()
