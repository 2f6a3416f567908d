"""The committed vLLM engine traces (tests/data/engine-traces/, see its README) analyzed once per test process:
``analyze_paths`` as :func:`profattn.analysis.calls.traces.analyze_paths`, memoised (its records are frozen)."""

from __future__ import annotations

import functools
from pathlib import Path

from profattn.analysis.calls.traces import analyze_paths as _analyze_paths

DATA = Path(__file__).resolve().parent / "data" / "engine-traces"


@functools.lru_cache(maxsize=None)
def _cached(paths: tuple, captures: tuple = ()):
    return _analyze_paths(list(paths), captures=list(captures))


def analyze_paths(paths, captures=()):
    """The analysis of ``paths`` (and ``captures``), computed once."""
    return _cached(tuple(paths), tuple(captures))
