"""User-facing example kernels: Monte-Carlo work with conditional, run-time-sized scratch."""
