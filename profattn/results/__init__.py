"""Typed records of a run and the versioned ``results.json`` that carries them from measuring to rendering.

``results.json`` is the contract between ``profattn profile`` (writes it as cells finish) and
``profattn report`` (reads it, plus the traces it names). Schema, version 4::

    {"schema": "profattn.results", "schema_version": 4, "repeat": 1,
     "environment": {...Environment...}, "preset": "seed", "preset_description": "...",
     "ceilings": {...Ceilings...} | null,
     "cells": [{...CellResult...}, ...]}

Units live in field names: ``_us`` microseconds, ``_bytes`` bytes, ``_gbps`` GB/s (GB = 1e9),
``_tflops`` TFLOP/s (1e12 FLOP/s). Version 2 added ``graph_timing`` (decode cells, CUDA-graph replay)
and the counter fields; version 3 added the repeated timing samples (``timing_repeats``,
``graph_timing_repeats`` per cell, ``repeat`` per run: ``profattn profile --repeat N``) and the optional
``hostname``/``user`` of the environment (``--keep-host-info`` only); version 4 times CUDA calls with the host's
stalls hidden (a GPU spin before each rep: :func:`profattn.harness.timing.time_cuda`) and adds each timing's
``host_us``, the host's time to issue one call — a v3 file's CUDA latencies of a launch-bound call include the host's
stalls, so readers know the two methods apart by the version (and the store by ``host_us``). Versions 1–3 are still read.
Optional fields added within version 3 (absent, hence None, in files written before them; readers of earlier
profattn ignore them): the workload's ``seqs`` and ``append``, a cell's ``append_timing`` and
``executed_pairs``, ``correctness.cache_ok`` and ``correctness.isolated``; the workload's ``cp_ranks`` and
``cp_scheme`` and a context-parallel cell's ``ranks`` (one :class:`RankRecord` per rank); a graph-timed cell's
``trace.graph`` (its profiled CUDA-graph replays, :class:`GraphReplaySummary`) and the environment's ``flashinfer`` and
``cudnn_frontend`` versions; a run's ``ab`` (:class:`ABRun`: ``profattn compare --ab``) and ``plugins`` (its ``--backend module:object``
specs, which ``profile --resume`` loads again). profattn before the graph and
version fields cannot read a file holding them (it refused unknown environment and trace fields).

Reading is strict about values and lenient about names: every number must be finite and fit 64 bits, every field
have its type (one line naming the field otherwise); a field this version does not know is ignored, at any level,
and named in one :class:`~profattn.errors.ProfattnWarning`, so later additions stay readable.
"""

from profattn.results.io import read_results, run_from_dict, run_to_dict, write_results
from profattn.results.records import (
    CELL_COLUMNS, CELL_INT_COLUMNS, READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION, ABRun, Ceilings, CellResult, CellStatus,
    Correctness, CounterKernel, Damage, CountersInfo, CountersStatus, CounterSummary, Environment, GraphReplaySummary,
    KernelLaunch, RankRecord, RankStatus, RunResult, StrEnum, Timing, TraceSummary, cell_row, cells_by_workload,
    dominant_launch,
)

__all__ = [
    "ABRun", "CELL_COLUMNS", "CELL_INT_COLUMNS", "READABLE_VERSIONS", "SCHEMA", "SCHEMA_VERSION", "Ceilings", "CellResult",
    "CellStatus", "Correctness", "CounterKernel", "CountersInfo", "Damage", "CountersStatus", "CounterSummary", "Environment",
    "GraphReplaySummary", "KernelLaunch", "RankRecord", "RankStatus", "RunResult", "StrEnum", "Timing", "TraceSummary",
    "cell_row", "cells_by_workload",
    "dominant_launch", "read_results", "run_from_dict", "run_to_dict", "write_results",
]
