"""Triton kernels (imported lazily by the backends that launch them)."""
