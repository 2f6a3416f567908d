"""profattn: which attention kernel wins for this workload, and why.

Data path (see DESIGN.md): workload -> backends -> harness (timing, profiler) -> trace -> analysis
-> report -> cli. As a library: :func:`load_run` (a run as :class:`RunResult`, ``.to_pandas()``) and
:func:`analyze_trace` (a trace's kernels, ops and attention calls as DataFrames); importing profattn
never imports torch.
"""

from profattn.api import RunResult, TraceAnalysis, analyze_trace, load_run

__version__ = "0.1.0"

__all__ = ["RunResult", "TraceAnalysis", "__version__", "analyze_trace", "load_run"]
