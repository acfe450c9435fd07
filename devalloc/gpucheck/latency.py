"""The GPU check's latency part: what a first call costs, cold and in a second process.

A first call compiles the kernel (and, the first time on a machine, the
allocator's bodies, which then stay in the compiled-body cache:
:mod:`devalloc.device.bodycache`), loads it and launches it. Measured in fresh
processes, each timing its own first call and two later ones:

* the one-``alloc`` kernel (:func:`devalloc.gpucheck.stress.one_alloc`) on
  an empty body cache (a new folder), then in a second process on the same
  folder;
* each example's first run in a fresh process on the user's own cache
  (filled by the examples part before it, or by earlier runs): what a user
  waits for the second time they start a program. Issue 50's target: at
  most :data:`EXAMPLE_WARM_TARGET_S` seconds.
"""

import json
import os
import subprocess
import sys
import tempfile

#: Issue 50: an example's first call in a second process, at most (seconds).
EXAMPLE_WARM_TARGET_S = 2.0
#: Threads of an example's timed first run (small: the compile is the point).
EXAMPLE_THREADS = 4096

_ONE_ALLOC = """
import json, statistics, time
import numpy as np
from numba import cuda
import devalloc
from devalloc.gpucheck.stress import one_alloc

heap = devalloc.Heap(1 << 22)
sizes = cuda.to_device(np.full(256, 48, np.int64))
out = cuda.device_array(256, np.int64)
times = []
for _ in range(3):
    t0 = time.perf_counter()
    one_alloc[1, 256](heap.ctx, sizes, out)
    cuda.synchronize()
    times.append(time.perf_counter() - t0)
# (a second process runs the cubin it read from the cache: its answers checked too)
got = out.copy_to_host()
bad = int(((got == devalloc.NULL) | (got < 0) | (got >= heap.capacity) | (got % 16 != 0)).sum())
heap.close()
print(json.dumps({"first_s": times[0], "later_s": statistics.median(times[1:]), "bad": bad}))
"""

_EXAMPLE = """
import json, time
from devalloc import _examples
module = _examples.load({name!r})
t0 = time.perf_counter()
module.run(threads={threads}, seed=1)
first = time.perf_counter() - t0
t1 = time.perf_counter()
module.run(threads={threads}, seed=1)
print(json.dumps({{"first_s": first, "later_s": time.perf_counter() - t1}}))
"""


def _run(script, cache=None, timeout=300):
    # script in a fresh process (the parent's target: GPU or simulator);
    # cache: the body cache folder it uses (None: the user's own).
    env = dict(os.environ, DEVALLOC_CACHE="1")  # (on unless the caller's is 0)
    if cache is not None:
        env["DEVALLOC_CACHE_DIR"] = cache
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"a first-call process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(examples, threads=EXAMPLE_THREADS):
    """Return ``{"cold": row, "warm": row, "examples": {name: row}}``; a row has
    ``first_s`` and ``later_s`` (one-alloc: the median of two later calls;
    an example: its second run, in the same process)."""
    with tempfile.TemporaryDirectory() as tmp:
        cold = _run(_ONE_ALLOC, tmp)
        warm = _run(_ONE_ALLOC, tmp)
    rows = {name: _run(_EXAMPLE.format(name=name, threads=threads)) for name in examples}
    return {"cold": cold, "warm": warm, "examples": rows}


def summary_and_problems(m):
    """Return the part's one-line summary and its problems (examples over the target)."""
    slow = {n: r["first_s"] for n, r in m["examples"].items()
            if r["first_s"] > EXAMPLE_WARM_TARGET_S}
    text = (f"one-alloc kernel: first call {m['cold']['first_s']:.2f} s on an empty body cache, "
            f"{m['warm']['first_s']:.2f} s in a second process, later calls "
            f"{m['warm']['later_s'] * 1e3:.2f} ms; examples' first calls in a second process "
            f"{min(r['first_s'] for r in m['examples'].values()):.2f}-"
            f"{max(r['first_s'] for r in m['examples'].values()):.2f} s "
            f"(target <= {EXAMPLE_WARM_TARGET_S:.0f} s: "
            f"{'met' if not slow else 'missed by ' + ', '.join(sorted(slow))})")
    problems = [f"{n}: first call {s:.2f} s in a second process (target <= "
                f"{EXAMPLE_WARM_TARGET_S:.0f} s)" for n, s in sorted(slow.items())]
    problems += [f"one-alloc kernel ({which}): {m[which]['bad']} of its offsets NULL, outside "
                 "the arena or misaligned" for which in ("cold", "warm")
                 if m[which].get("bad")]
    return text, problems
