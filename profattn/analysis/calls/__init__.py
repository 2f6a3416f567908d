"""Attention calls in any Kineto trace (a profattn cell's, a training job's, a serving engine's): which ops are
attention, the kernels each launched (eager or replayed from a CUDA graph), the shape, phase and workload inferred from
the recorded inputs, serving steps, engine ops, a rank's collectives, and ``profattn analyze`` over many files. In: a
parsed trace (:mod:`profattn.trace`) and its capture traces; out: :class:`.call_records.TraceCalls` with its
:class:`.call_records.AttentionCall` records (:mod:`.find`, ``find_attention_calls``), ``RankTimeline``,
``TraceSetAnalysis``. Uses only :mod:`profattn.analysis.common` of the analysis rooms."""
