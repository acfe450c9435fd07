"""The simulator's ordered atomics and relaxed loads: plain numba atomics.

On a GPU, :mod:`devalloc.device._meta` gives these names inline-PTX
intrinsics (``atom.acquire.gpu``, ``atom.release.gpu``, ``ld.relaxed.gpu``,
``st.relaxed.gpu``). The simulator's threads share one memory in program
order, so here each is the simulator's own atomic (``FakeCUDAAtomic``, under
the lock :mod:`devalloc.sim` unifies, and counted by
:func:`devalloc.sim.atomics.count_atomics`) or a plain load or store, with
the same Python semantics. Plain functions, called outside the simulator's
swap of the ``cuda`` global, so they reach the atomics directly.

The interleaving explorer replaces every name of :data:`KINDS` in the
device modules with one scheduling point of that kind
(:func:`devalloc.testing.machine.installed`).
"""

from numba.cuda.simulator.kernelapi import FakeCUDAAtomic

_ATOMIC = FakeCUDAAtomic()

#: Each name's access kind, as the explorer's metadata records it.
KINDS = {
    "_load": "load",
    "_store": "store",
    "_acquire_cas": "cas",
    "_release_cas": "cas",
    "_acquire_and": "and",
    "_release_or": "or",
    "_release_add": "add",
    "_release_exch": "exch",
}


def _load(meta, i):
    """Return ``meta[i]`` (GPU: ``ld.relaxed.gpu``)."""
    return meta[i]


def _store(meta, i, v):
    """Set ``meta[i]`` (GPU: ``st.relaxed.gpu``)."""
    meta[i] = v


def _acquire_cas(meta, i, old, new):
    """``cas`` (GPU: ``atom.acquire.gpu.cas``); return the old value."""
    return _ATOMIC.cas(meta, i, old, new)


def _release_cas(meta, i, old, new):
    """``cas`` (GPU: ``atom.release.gpu.cas``); return the old value."""
    return _ATOMIC.cas(meta, i, old, new)


def _acquire_and(meta, i, v):
    """``and`` (GPU: ``atom.acquire.gpu.and``); return the old value."""
    return _ATOMIC.and_(meta, i, v)


def _release_or(meta, i, v):
    """``or`` (GPU: ``atom.release.gpu.or``); return the old value."""
    return _ATOMIC.or_(meta, i, v)


def _release_add(meta, i, v):
    """``add`` (GPU: ``atom.release.gpu.add``); return the old value."""
    return _ATOMIC.add(meta, i, v)


def _release_exch(meta, i, v):
    """``exch`` (GPU: ``atom.release.gpu.exch``); return the old value."""
    return _ATOMIC.exch(meta, i, v)


def _fence_acq_rel():
    """Nothing: the simulator's threads share memory in program order."""
