"""Selection: which backend to use for a workload, measured or not. Per-backend cost models fitted on the store's cells
(:mod:`.costmodel`), the selection policy over them with its leave-one-slice-out validation (:mod:`.policy`), and the
answer for a caller or a trace's calls (:mod:`.recommend`: measured winner, near tie, predicted, what to measure
next). In: stored measurements (:mod:`profattn.store`) and a trace's attention calls (:mod:`profattn.analysis.calls`);
out: ``Policy``, ``Choice``, ``Recommendation``, ``TraceAdvice`` records. Judges ties with
:mod:`profattn.analysis.common.margins`."""
