"""Faster simulated launches: no lock and no scan at every device-function call.

The simulator runs each thread of a block as a Python thread, and every
device-function call goes through ``swapped_cuda_module``, a generator that
takes a lock shared by all modules, then the module's own lock twice, and,
when no other thread is inside the module, scans the module's globals for
``cuda`` (all of them: the devalloc device modules have hundreds). Under
the GIL a thread switched out while it holds the module's lock stops every
thread of the block that calls into the module: they block on the lock one
after the other, and each hand-over waits for the holder's switch interval
(5 ms by default) while the simulator's block manager polls the threads in
a busy loop. The threads of a block convoy (bench/RESULTS.md, "Simulator
launches", measured by ``bench/sim_launch.py``).

:func:`install` (run by :func:`devalloc.sim.install`, on the simulator
only) wraps ``FakeCUDAKernel.__call__``, once, so that inside a launch a
device function's module has its ``cuda`` swapped for the launch's
simulated module the first time any thread calls into it, and given back
when the launch ends (also when a thread raised), instead of a swap and a
give-back under locks at every call: a device-function call costs a dict
lookup. The simulator runs one launch at a time (it asserts so), so one
swap per module per launch is what every call would have seen. A device
function called outside a launch (from host code) keeps the simulator's
own path.

A shorter thread switch interval would cut the remaining hand-overs (of
the atomics' lock) further, but it changes which interleavings a kernel's
threads show: with 0.1 ms, tests that pin what a near-serial run gives (one
slab for ten 100 B blocks, a peak of 13 pages) saw the legitimate
outcomes of racing threads instead. So launches keep the caller's interval
unless :data:`SWITCH_INTERVAL` is set (``bench/sim_launch.py`` measures
both); tests that want races set a short one themselves
(``fine_interleaving``).

The simulator internals read here are checked by :mod:`devalloc.sim.compat`.
What a kernel computes is the simulator's.
"""

import functools
import sys
import threading

from ..ctx import check_launch_args

#: None: a launch runs with the caller's thread switch interval. A number
#: of seconds: the longest interval a launch runs with (a shorter one set by
#: the caller is kept); the caller's is restored when the launch returns.
SWITCH_INTERVAL = None

# Guards _SWAPPED (written by the first thread of a launch to call into a
# module, read without the lock by every later call: a dict lookup is
# atomic under the GIL, and a module appears in it only after its swap is
# done).
_SWAP_LOCK = threading.Lock()
#: id(module globals) -> (globals, {name: real cuda}) swapped in this launch.
_SWAPPED: dict = {}


def _swap_in(globs, fake):
    # Swap ``globs``' names bound to the real cuda for ``fake``, once per launch.
    from numba import cuda

    with _SWAP_LOCK:
        if id(globs) in _SWAPPED:
            return
        orig = {k: v for k, v in globs.items() if v is cuda}
        for k in orig:
            globs[k] = fake
        _SWAPPED[id(globs)] = (globs, orig)


def _give_back():
    # Restore every module swapped during the launch that just ended.
    with _SWAP_LOCK:
        for globs, orig in _SWAPPED.values():
            globs.update(orig)
        _SWAPPED.clear()


def installed():
    """Return True when simulated launches take the fast path."""
    from numba.cuda.simulator import kernel

    return getattr(kernel.FakeCUDAKernel.__call__, "_devalloc_launch", False)


def uninstall():
    """Give the simulator its own kernel call back (for measurements: bench/sim_launch.py)."""
    from numba.cuda.simulator import kernel

    call = kernel.FakeCUDAKernel.__call__
    if getattr(call, "_devalloc_launch", False):
        kernel.FakeCUDAKernel.__call__ = call.__wrapped__


def install():
    """Wrap the simulator's kernel call once (see the module docstring)."""
    from numba.cuda.simulator import kernel

    cls = kernel.FakeCUDAKernel
    original = cls.__call__
    if getattr(original, "_devalloc_launch", False):
        return

    @functools.wraps(original)
    def __call__(self, *args):
        fake = kernel._kernel_context
        if fake is not None:  # a device function (or a kernel) called inside a launch
            fn = self.fn
            if id(fn.__globals__) not in _SWAPPED:
                _swap_in(fn.__globals__, fake)
            return fn(*args)
        if self._device:  # called from host code: the simulator's own path
            return original(self, *args)
        check_launch_args(args)  # a closed or resized heap's ctx: refused, as on a GPU
        old = sys.getswitchinterval()
        shorter = SWITCH_INTERVAL is not None and old > SWITCH_INTERVAL
        if shorter:
            sys.setswitchinterval(SWITCH_INTERVAL)
        try:
            return original(self, *args)
        finally:
            _give_back()
            if shorter:
                sys.setswitchinterval(old)

    __call__._devalloc_launch = True
    cls.__call__ = __call__
