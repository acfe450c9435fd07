"""The GPU check: one command that validates devalloc on real hardware.

``python -m devalloc.gpucheck [--quick | --simulate] [--out DIR]`` runs, in
order and each in a process of its own with a time limit, the parts of
:mod:`devalloc.gpucheck.parts` (environment, kernel tests on the GPU, the
stress kernel of :mod:`devalloc.gpucheck.stress`, compute-sanitizer,
throughput, the examples at a million threads, first-call latency) and writes
``gpu-<gpu>-<date>.md`` and ``.json`` (and the parts' output, ``.log``) to
``bench/results/`` of the checkout. Exit status: :data:`EXIT_PASSED` when
every verification part passed, :data:`EXIT_FAILED` when one failed (a wrong
answer, a sanitizer error, a hang), :data:`EXIT_NO_GPU` without a usable GPU
(``--simulate`` then runs every part at a tiny scale on the simulator).
Runs from a plain checkout (``PYTHONPATH=. python3 -m devalloc.gpucheck``).
"""

#: Exit statuses (2 is argparse's, for a usage error).
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 4
