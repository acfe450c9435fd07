"""Tools that look at devalloc from outside a kernel: compiled code, instruction paths, traces.

:mod:`.aot` compiles kernels that use devalloc without a GPU (PTX, ptxas,
nvdisasm); :mod:`.probes` measures what devalloc costs in registers, spills
and SASS (``python -m devalloc.probes``) on the kernels of
:mod:`.probe_kernels`; :mod:`.paths` walks the SASS instructions one call
executes; :mod:`.codesize` what each extra call site of the
device API costs; :mod:`.replayer` replays a recorded allocation trace on a fresh
heap (``devalloc.replay``); :mod:`.plot` draws the demo's ``--plot``. The heap itself does not need any of them.
"""
