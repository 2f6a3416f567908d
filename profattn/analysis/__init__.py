"""The analysis layer, torch-free: typed records, never display text. Its rooms, lowest first — ``common`` (the
noise rule, statistics, kernel names), ``calls`` (attention calls in any trace), ``selection`` (cost models, the
policy, recommendations), then ``run`` (a run's evidence and verdicts) and ``simulation`` (serving a request trace),
and ``comparison`` (two runs). A room imports only rooms below it (``tests/test_layers.py``)."""
