"""Comparison of two runs, or of two backends timed alternately in one run (:mod:`.compare`): cells judged together
against the run-wide shift, per-cell intervals, Holm-adjusted tests, launch-shape and verdict changes. In: two
:class:`profattn.results.RunResult` records; out: a typed ``Comparison`` (``CompareClass`` per cell, ``Drift``,
``VerdictChange``). Uses :mod:`profattn.analysis.common` (statistics), :mod:`~profattn.analysis.run` (winners, the
verdict, noise findings); nothing imports it but the report and the command line."""
