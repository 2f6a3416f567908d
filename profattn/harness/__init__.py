"""The harness: inputs and reference, timing, peak memory, measured ceilings and the profiler pass.

Depends on :mod:`profattn.workload`, :mod:`profattn.backends` and :mod:`profattn.results` (records) only.
"""
