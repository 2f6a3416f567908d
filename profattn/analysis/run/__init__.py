"""A run's evidence and verdicts: each cell's kernels and counters from its trace (:mod:`.cells`, :mod:`.reattach`),
byte and FLOP ledgers, the cache layout a kernel read, why one call trails another (:mod:`.mechanisms`), winners and
the verdict (:mod:`.verdict`), serving prompts and mixed steps, GQA head-count comparisons, noise findings, and the run
analysed once (:mod:`.analyze`, ``analyze_run``). In: a :class:`profattn.results.RunResult` with its traces; out:
:class:`.analyze.RunAnalysis` and the typed records in it, which the report only formats. May use
:mod:`profattn.analysis.common`, :mod:`~profattn.analysis.calls` and :mod:`~profattn.analysis.selection` (the run's
policy)."""
