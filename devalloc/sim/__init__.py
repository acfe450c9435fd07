"""The CUDA simulator's side of devalloc, and what it reads of numba-cuda.

:mod:`devalloc.sim.compat` checks that the numba-cuda internals devalloc
reads are where it expects them.
"""
