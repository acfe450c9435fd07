"""Faster simulated launches: no convoy of a block's threads.

The simulator runs each thread of a block as a Python thread, and every
device-function call goes through ``swapped_cuda_module``, which takes a
module-wide lock twice (three lock operations and a generator per call) to
swap the function module's ``cuda`` for the simulator's. Under the GIL a
thread that is switched out while it holds such a lock (or devalloc's
atomic lock) stops every other thread that needs it until it runs again,
and with the default switch interval (5 ms) that wait is a whole interval
per hand-over: the threads of a block convoy behind each other, while the
simulator's block manager polls them in a busy loop. Measured on
``python -m devalloc demo --example step_scratch --threads 256``: 70 s
with the default interval, about 20 s with 0.1 ms (README, "Tests").

:func:`install` (run by :func:`devalloc.sim.install`, on the simulator
only) wraps ``FakeCUDAKernel.__call__``, once, so that

* a kernel launch runs with the thread switch interval at most
  :data:`SWITCH_INTERVAL` (a shorter one set by a test, to make races show,
  is kept), restored when the launch returns;
* inside a launch, a device function's module has its ``cuda`` swapped for
  the launch's simulated module the first time any thread calls into it,
  and given back when the launch ends, instead of a swap and a give-back
  under locks at every call. The simulator runs one launch at a time (it
  asserts so), so one swap per module per launch is what every call would
  have seen. A device function called outside a launch (from host code)
  keeps the simulator's own path.

The simulator internals read here are checked by :mod:`devalloc.sim.compat`.
Only scheduling changes: what a kernel computes, and which interleavings
it can see, are the simulator's.
"""

import functools
import sys
import threading

#: The longest thread switch interval (seconds) a simulated launch runs
#: with. Shorter is not faster: 20 us cost about as much as 0.1 ms on
#: step_scratch at 256 threads, and more switching overhead elsewhere.
SWITCH_INTERVAL = 1e-4

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
        old = sys.getswitchinterval()
        shorter = old > SWITCH_INTERVAL
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
