"""The main command: ``python -m devalloc demo``.

Runs one of the example kernels of the repository's ``kernels/`` folder (a
heap version and its worst-case-preallocation twin, same seed) on the GPU
when one is usable and on Numba's CUDA simulator otherwise, and prints the
answer with its statistical error, the heap usage report and the memory
saved against worst-case preallocation::

    python -m devalloc demo [--example NAME] [--threads N] [--seed S]
                            [--json] [--plot FILE.png]
                            [--workers N | --scheduler ADDRESS]

Progress goes to stderr, a line per phase, with tqdm bars for simulator
launches longer than BAR_DELAY seconds and a warning with an estimate when
the simulator needs more than a minute; ``--json`` prints one JSON object
on stdout instead of the report. ``--plot`` needs matplotlib
(``pip install 'devalloc[plot]'``). ``--workers N`` runs the threads in
shards on a local Dask cluster of N worker processes (``--scheduler`` on a
running cluster; ``pip install 'devalloc[distributed]'``): the same answer
as one process, and the report adds each worker's heap usage
(:func:`devalloc.host.distributed.run_demo`). The report ends with one table
comparing the heap with count + scan + exact allocation, CUDA's malloc
through NRT (on a GPU) and the worst case (``kernels/_methods.py``;
``--json``: ``methods``). Exit status 0 when the heap version and its twins
agree exactly, 1 when they do not, 2 on a usage error, 3 when the
example's module is not installed.

Order matters: :func:`devalloc.target.choose` must run before anything
imports numba (numba reads ``NUMBA_ENABLE_CUDASIM`` once, at import), so this
module imports neither numba nor ``kernels`` at the top, and the package's
``__init__`` is lazy.

Where the examples come from: the repository's top-level ``kernels/``
folder is installed as ``devalloc.examples`` (see ``devalloc._examples``),
so the demo works from any directory after ``pip install`` (or ``-e``), and
from a checkout on ``PYTHONPATH``.

Longer than 500 lines because it is one command whose parts read one
summary: the arguments and their checks, running an example (GPU,
simulator or Dask workers) and its outputs (text, ``--json``); the plot is
:mod:`devalloc.tools.plot`, the examples themselves are in ``kernels/``.
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

#: Example name -> one line saying what needs scratch.
EXAMPLES = {
    "ragged_walks": "random walks of random length, gathered into one array",
    "particle_transport": "secondary particles on a per-history stack that grows",
    "barrier_option": "only paths near the barrier keep their points for a second pass",
    "two_pass_variance": "a run-time number of samples, read twice",
    "step_scratch": "per-time-step buffers: scoped scratch vs alloc/free vs worst case",
}
#: Exit statuses of ``demo`` (2 is also argparse's, for a bad option).
EXIT_IDENTICAL, EXIT_DIFFERENT, EXIT_USAGE, EXIT_NOT_INSTALLED = 0, 1, 2, 3
EXIT_STATUSES = (
    "exit status: 0 the heap version and its twins agree bit for bit; 1 they differ; "
    "2 a usage error (a bad option, a --plot file that cannot be written); "
    "3 the example is not installed (a broken installation)"
)
#: The fastest example on the simulator (about 2 s at its defaults).
DEFAULT_EXAMPLE = "ragged_walks"
DEFAULT_THREADS = 256
DEFAULT_SEED = 1


#: Seconds a simulator launch runs before its progress bar appears: short
#: runs show none.
BAR_DELAY = 2.0
#: The demo warns when it expects the simulator to need more than this.
SIM_BUDGET_SECONDS = 60.0


class _Progress:
    """Phase lines on stderr, stamped with the seconds since the start; tqdm bars."""

    def __init__(self, stream=None):
        self.start = time.monotonic()
        self.stream = stream or sys.stderr

    def elapsed(self):
        return time.monotonic() - self.start

    def __call__(self, msg):
        print(f"[{self.elapsed():6.1f}s] {msg}", file=self.stream, flush=True)

    def bar(self, total, desc):
        """Return a tqdm bar on stderr counting ``total`` threads; shown after BAR_DELAY s."""
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=" threads", unit_scale=True,
                    file=self.stream, delay=BAR_DELAY, leave=False, mininterval=0.5)


def _duration(seconds):
    """Return ``seconds`` in words: 45 s, 12 min, 3.2 h, 4.1 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.2g} {unit}" if seconds < 10 * size else \
                f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def slow_warning(example, seconds_per_thread, threads):
    """Return a warning when the simulator needs far more than a minute, else None.

    The estimate is ``threads`` times the example's measured
    ``SIM_SECONDS_PER_THREAD``.
    """
    seconds = seconds_per_thread * threads
    if seconds <= SIM_BUDGET_SECONDS:
        return None
    in_budget = max(1, int(SIM_BUDGET_SECONDS / seconds_per_thread))
    each = (f"{seconds_per_thread:.3g} s" if seconds_per_thread >= 1
            else f"{1e3 * seconds_per_thread:.3g} ms")
    return (f"warning: {threads:,} threads of {example} take about {_duration(seconds)} on "
            f"the CUDA simulator ({each} per thread, measured), "
            f"--threads {in_budget:,} about a minute; progress bars follow, Ctrl-C stops it")


def _integer(text, low, high, allowed):
    """Return ``text`` as an int in [low, high); else say what is ``allowed``.

    argparse names a ``type=`` function in its message when it raises
    ValueError ("invalid _positive_int value"): every bad value is an
    ArgumentTypeError that says what was given and what is allowed.
    """
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or not low <= n < high:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
    return n


def _positive_int(text):
    return _integer(text, 1, math.inf, "a positive integer")


def _seed(text):
    return _integer(text, 0, 1 << 64, "an integer in [0, 2**64)")


def build_parser():
    """Return the argument parser of ``python -m devalloc``."""
    p = argparse.ArgumentParser(
        prog="python -m devalloc",
        description="devalloc: a lock-free device heap for Numba-CUDA kernels.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser(
        "demo",
        help="run an example kernel against its worst-case twin",
        description=(
            "Run an example kernel (heap version and worst-case-preallocation "
            "twin, same seed) on the GPU if one is usable, else on the CUDA "
            "simulator; print the answer, the heap usage report and the memory "
            "saved. Examples: "
            + "; ".join(f"{k}: {v}" for k, v in EXAMPLES.items())
        ),
        epilog=EXIT_STATUSES,
    )
    d.add_argument("--example", choices=sorted(EXAMPLES), default=DEFAULT_EXAMPLE,
                   help=f"which example (default: {DEFAULT_EXAMPLE})")
    d.add_argument("--threads", type=_positive_int, default=DEFAULT_THREADS,
                   help=f"threads, one Monte-Carlo history each (default: {DEFAULT_THREADS})")
    d.add_argument("--seed", type=_seed, default=DEFAULT_SEED,
                   help=f"RNG seed (default: {DEFAULT_SEED})")
    d.add_argument("--json", action="store_true",
                   help="print one JSON object instead of the report")
    d.add_argument("--plot", metavar="FILE.png",
                   help="also draw size-class occupancy and footprints to FILE.png (any "
                        "extension matplotlib writes; a folder gets EXAMPLE.png; needs "
                        "matplotlib)")
    d.add_argument("--profile", action="store_true",
                   help="give the heap profile counters and print them with the usage "
                        "(not with --workers or --scheduler)")
    where = d.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_positive_int, metavar="N",
                       help="split the threads into shards on a local Dask cluster of N "
                            "worker processes (needs devalloc[distributed])")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="the same on the running Dask cluster at ADDRESS "
                            "(tcp://host:8786), one shard per worker")
    r = sub.add_parser(
        "replay",
        help="replay an allocation trace on a fresh heap and print its usage",
        description=(
            "Replay a trace written by devalloc.host.observed.write_csv (Heap(trace=N), "
            "heap.trace()) on a fresh heap of CAPACITY bytes, one event at a time in "
            "sequence order, on the GPU if one is usable, else on the CUDA simulator; "
            "print the usage report. For sizing a heap: replay with smaller capacities "
            "until allocations fail."
        ),
        epilog="exit status: 0 done, 2 a usage error (no such file, not a trace, a bad capacity)",
    )
    r.add_argument("file", metavar="FILE.csv", help="the trace, in RMM's replay-log columns")
    r.add_argument("--capacity", type=_positive_int, required=True,
                   help="bytes of the heap to replay on (metadata included)")
    r.add_argument("--debug", action="store_true",
                   help="replay on a debug heap (reports misuse beyond the trace's own)")
    r.add_argument("--json", action="store_true",
                   help="print the usage as one JSON object instead of the report")
    c = sub.add_parser(
        "cache",
        help="show or clear the cache of compiled allocator bodies and kernels",
        description=(
            "A kernel that calls devalloc compiles the allocator's bodies once and keeps "
            "them on disk, with the kernel's compiled code (PTX, LTO-IR, cubin), so that "
            "later processes type only the kernel's own code and compile nothing they "
            "compiled before. Print where that cache is and what it holds, or remove it "
            "(--clear). The folder is $DEVALLOC_CACHE_DIR, else the user's cache folder; "
            "DEVALLOC_CACHE=0 turns it off; past DEVALLOC_CACHE_MAX_MB MiB (1024) the "
            "least recently used entries go."
        ),
        epilog="exit status: 0 done",
    )
    c.add_argument("--clear", action="store_true", help="remove every entry")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def cache(args):
    """Run ``python -m devalloc cache``; return the exit status."""
    from .device import bodycache

    root = bodycache.cache_dir()
    files = bodycache.entries(root)
    size = sum(f.stat().st_size for f in files)
    removed = bodycache.clear(root) if args.clear else 0
    if args.json:
        print(json.dumps({"folder": str(root), "entries": len(files), "bytes": size,
                          "limit_bytes": bodycache.max_bytes(),
                          "enabled": bodycache.enabled(), "removed": removed}))
    elif args.clear:
        print(f"removed {removed} entries ({size / 2**20:.1f} MiB) from {root}")
    else:
        state = "" if bodycache.enabled() else f" (off: {bodycache.ENV_SWITCH}=0 is set)"
        print(f"{root}{state}: {len(files)} entries, {size / 2**20:.1f} MiB "
              f"(at most {bodycache.max_bytes() / 2**20:.0f} MiB: {bodycache.ENV_MAX})")
    return 0


def replay(args):
    """Run ``python -m devalloc replay``; return the exit status."""
    from .host import observed
    from . import target as _target  # imports no numba

    try:
        events = observed.read_csv(args.file)
    except (OSError, ValueError) as e:
        print(f"devalloc replay: {e}", file=sys.stderr)
        return EXIT_USAGE
    _target.choose()
    from .tools.replayer import replay as run_replay

    try:
        u = run_replay(events, args.capacity, debug=args.debug)
    except (TypeError, ValueError) as e:
        print(f"devalloc replay: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps({"file": str(args.file), "events": len(events), "usage": u.to_dict()}))
    else:
        from .host.report import format_usage

        print(format_usage(u, f"heap usage after replaying {len(events)} events of {args.file}"))
    return 0


def _require_distributed():
    """Return None, or an error message when dask's distributed cannot be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError as e:
        return (f"--workers and --scheduler need dask's distributed, which cannot be "
                f"imported ({e}): pip install 'devalloc[distributed]'")
    return None


def _require_matplotlib():
    """Return None, or an error message when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return (
            f"--plot needs matplotlib, which cannot be imported ({e}). Install "
            "the plotting extra: pip install 'devalloc[plot]' (from a clone: "
            "pip install -e '.[plot]')"
        )
    return None


def plot_path(text, example):
    """Return the file ``--plot text`` writes; raise ValueError saying why it cannot.

    A folder gets ``<example>.png`` in it; a name without an extension gets
    ``.png`` (matplotlib would append it without saying so). The extension
    must be one matplotlib writes, and the folder must exist and be
    writable: checked before the simulation, not after it.
    """
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(text).expanduser()
    if path.is_dir():
        path = path / f"{example}.png"
    elif not path.suffix:
        path = path.with_name(path.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    ext = path.suffix[1:].lower()
    if ext not in formats:
        raise ValueError(f"--plot {text}: matplotlib cannot write .{ext} files (it writes "
                         + ", ".join("." + f for f in sorted(formats)) + ")")
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"--plot {text}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--plot {text}: {path} cannot be written (permissions)")
    return path


class ExampleNotInstalled(Exception):
    """The module of a known example cannot be found (a broken installation)."""


def import_example(name):
    """Import example ``name`` (``devalloc.examples.<name>``); call after choose().

    Raises :class:`ExampleNotInstalled` when its module is missing.
    """
    from . import _examples

    try:
        return _examples.load(name)
    except ModuleNotFoundError as e:
        if e.name not in (_examples.NAME, f"{_examples.NAME}.{name}"):
            raise
        raise ExampleNotInstalled(
            f"the example {name} is not installed with this devalloc ({e}); "
            "reinstall devalloc (pip install devalloc, or pip install -e . in a clone)"
        ) from e


def example_script(path):
    """Run the demo for the example in file ``path`` with the script's arguments; exit."""
    sys.exit(main(["demo", "--example", Path(path).stem, *sys.argv[1:]]))


def _finite(x):
    """Return ``x`` as a float, or None when it is not finite (JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _json_value(v):
    """Return ``v`` as JSON data, or raise TypeError for what is not reported."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return _finite(v)
    if isinstance(v, (list, tuple)) and all(isinstance(e, (int, float)) for e in v):
        return [_json_value(e) for e in v]
    raise TypeError(type(v).__name__)


def summary(name, target, threads, seed, r, seconds):
    """Return the JSON-ready summary of one run."""
    saved = int(r.worst_case_bytes) - int(r.heap_peak_bytes)
    details = {}
    for k, v in r.details().items():
        try:
            details[k] = _json_value(v)
        except TypeError:
            pass  # arrays and Usage objects: not part of the summary
    return {
        "example": name,
        "target": target,
        "threads": threads,
        "seed": seed,
        "answer_name": r.answer_name,
        "answer": _finite(r.answer),
        "stderr": _finite(r.stderr),
        "expected": _finite(r.expected),
        "expected_label": r.expected_label,
        "identical": bool(r.identical),
        "heap_peak_bytes": int(r.heap_peak_bytes),
        "worst_case_bytes": int(r.worst_case_bytes),
        "saved_bytes": saved,
        "saved_fraction": saved / r.worst_case_bytes if r.worst_case_bytes else 0.0,
        "usage": r.usage.to_dict(),
        "snapshot": None if r.snapshot is None
        else {"label": r.snapshot_label, "usage": r.snapshot.to_dict()},
        "details": details,
        "methods": _method_rows(r),
        "seconds": round(seconds, 3),
    }


def _method_rows(r):
    """Return the comparison's rows (heap, count + scan, NRT, worst case) as JSON data."""
    from ._examples import load

    order = load("_methods").ORDER
    methods = getattr(r, "methods", None) or {}
    return [methods[k].to_dict() for k in order if k in methods]


def _where(target):
    if target == "gpu":
        return "the GPU"
    return "the CUDA simulator (no usable CUDA GPU; kernels run as Python threads)"


def format_text(s, r):
    """Return the human-readable report of one run (``s`` from :func:`summary`)."""
    from .host.report import format_usage, human_bytes

    lines = [f"devalloc demo: {s['example']}, {s['threads']} threads, seed {s['seed']}, "
             f"on {_where(s['target'])}"]
    lines += r.summary_lines()
    lines.append("identical to the worst-case version: "
                 + ("yes, bit for bit (every method below)" if s["identical"] else "NO"))
    if getattr(r, "methods", None):
        from ._examples import load

        lines += ["", "the same work, every way (device memory peak: the scratch each "
                  "method holds at once)"]
        lines += ["  " + x for x in load("_methods").format_table(r.methods, s["target"])]
    if r.snapshot is not None:
        lines += ["", format_usage(r.snapshot, f"heap usage {r.snapshot_label}")]
    lines += ["", format_usage(r.usage, "heap usage at the end"), ""]
    peak, worst, saved = s["heap_peak_bytes"], s["worst_case_bytes"], s["saved_bytes"]
    lines.append(f"heap peak {peak} B ({human_bytes(peak)}) vs worst-case "
                 f"preallocation {worst} B ({human_bytes(worst)})")
    if saved >= 0:
        lines.append(f"memory saved: {saved} B ({human_bytes(saved)}, "
                     f"{100 * s['saved_fraction']:.1f} % of the worst case)")
    else:
        lines.append(f"the heap needed {-saved} B ({human_bytes(-saved)}) more than "
                     "the worst case at this size: whole pages per size class "
                     "outweigh small worst cases")
    if s["target"] == "simulator" and r.snapshot is None:
        lines.append("(the simulator runs one block of threads at a time, so blocks "
                     "freed inside a kernel overlap less than on a GPU, and by how much "
                     "depends on Python's thread switching: this peak varies between runs)")
    return "\n".join(lines)


def demo(args):
    """Run ``python -m devalloc demo``; return the exit status."""
    plot_to = None
    if args.plot:
        problem = _require_matplotlib()
        if not problem:
            try:
                plot_to = plot_path(args.plot, args.example)
            except ValueError as e:
                problem = str(e)
        if problem:
            print(f"devalloc demo: {problem}", file=sys.stderr)
            return EXIT_USAGE
    sharded = args.workers is not None or args.scheduler is not None
    problem = _require_distributed() if sharded else None
    if sharded and args.profile:
        problem = "--profile works on one process only, not with --workers or --scheduler"
    if problem:
        print(f"devalloc demo: {problem}", file=sys.stderr)
        return EXIT_USAGE
    progress = _Progress()
    from . import target as _target  # imports no numba

    target = _target.choose()  # before numba is imported, by kernels below
    progress(f"{args.example} on {_where(target)}")
    try:
        module = import_example(args.example)
    except ExampleNotInstalled as e:
        print(f"devalloc demo: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"example": args.example, "error": str(e)}))
        return EXIT_NOT_INSTALLED
    if target == "simulator":
        warning = slow_warning(args.example, module.SIM_SECONDS_PER_THREAD, args.threads)
        if warning:
            progress(warning)
    run = None
    if sharded:
        from .host.distributed import run_demo

        r, run = run_demo(args.example, args.threads, args.seed, workers=args.workers,
                          scheduler=args.scheduler, progress=progress)
        target = run.target()
    else:
        if target == "gpu":  # so that the time column counts no compilation
            from ._examples import load

            progress("compiling the kernels")
            load("_mc").precompile(module)
        r = module.run(threads=args.threads, seed=args.seed, progress=progress,
                       profile=args.profile)
    s = summary(args.example, target, args.threads, args.seed, r, progress.elapsed())
    if run is not None:
        s["distributed"] = run.to_dict()
    progress(f"done in {s['seconds']:.1f} s")
    if plot_to:
        from .tools.plot import plot

        plot(plot_to, s, r)
        progress(f"plot written to {plot_to}")
    if args.json:
        print(json.dumps(s))
    else:
        print("\n".join([format_text(s, r), *([""] + run.report() if run else [])]))
    return EXIT_IDENTICAL if s["identical"] else EXIT_DIFFERENT


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "replay":
        return replay(args)
    if args.command == "cache":
        return cache(args)
    if args.command != "demo":
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
