"""Serving simulation (``profattn simulate``): a request trace served through vLLM V1's scheduler (:mod:`.scheduler`)
with every step's attention priced from the store's cells (:mod:`.stepcost`), replayed step by step
(:mod:`.replay`), the highest rate that meets the SLO searched (:mod:`.rates`), and the driver with its step-shape and
per-call findings (:mod:`.simulate`). In: a request trace, a model, deployments (backend pairs, KV dtype, page size,
memory) and stored measurements; out: ``SimulationRun``, ``RateSearch``, ``SimulationReport``. May use
:mod:`profattn.analysis.common` and :mod:`~profattn.analysis.selection` (pooled times); never a run's verdict."""
