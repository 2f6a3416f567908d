"""profattn: which attention kernel wins for this workload, and why.

Data path (see DESIGN.md): workload -> backends -> harness (timing, profiler) -> trace -> analysis
-> report -> cli.
"""

__version__ = "0.1.0"
