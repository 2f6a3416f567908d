"""profattn as a library: a run or a trace as typed records and ``pandas`` DataFrames.

    >>> import profattn
    >>> run = profattn.load_run("examples/h200-seed")
    >>> df = run.to_pandas()                       # one row per cell
    >>> df[df.phase == "decode"].pivot_table(index="kv_len", columns="backend", values="latency_us")
    >>> t = profattn.analyze_trace("examples/h200-seed/traces/decode/profattn.1795945653947183810.pt.trace.json.gz")
    >>> t.attention_calls[["backend", "direction", "kv_len", "gpu_time_us"]]

Importing :mod:`profattn` and loading a run or a trace never imports torch; pandas is imported on first use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from profattn.results import RunResult, read_results

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from profattn.analysis.calls.find import TraceCalls
    from profattn.analysis.run.analyze import RunAnalysis
    from profattn.trace.kineto import Trace

__all__ = ["ATTENTION_CALL_COLUMNS", "RunResult", "TraceAnalysis", "analyze_trace", "load_run"]


@overload
def load_run(path: str | os.PathLike[str], *, reattach: bool = True, analysis: Literal[False] = False) -> RunResult: ...
@overload
def load_run(path: str | os.PathLike[str], *, reattach: bool = True, analysis: Literal[True]) -> RunAnalysis: ...


def load_run(path: str | os.PathLike[str], *, reattach: bool = True, analysis: bool = False) -> RunResult | RunAnalysis:
    """A profattn run: ``path`` is a run directory or its ``results.json``.

    With ``reattach`` (default), each cell's trace evidence (kernels, launch shapes, GPU time) is rebuilt
    from the traces the run names, as ``profattn report`` does; cells whose trace file is absent keep the
    summary stored in ``results.json``. Use :meth:`RunResult.to_pandas` for a DataFrame.

    With ``analysis``, the run analysed once as the report sees it (:func:`profattn.analysis.run.analyze.analyze_run`):
    a :class:`~profattn.analysis.run.analyze.RunAnalysis` — winners, the verdict with its mechanisms and per-layout answers,
    ledgers, serving/GQA/context-parallel sections, noise findings, and the traces that could not be read
    (``trace_problems``); ``.run`` is the :class:`RunResult`.

    Raises:
        ResultsError: no ``results.json``, or one that is not a profattn results file of a readable version.
        (A trace that cannot be read is not an error: its cells keep their stored summary, and with ``analysis`` it
        is listed in ``trace_problems``.)
    """
    path = Path(path)
    run = read_results(path)
    problems: tuple = ()
    if reattach:
        from profattn.analysis.run.reattach import reattach_traces

        read = reattach_traces(run, path if path.is_dir() else path.parent)
        run, problems = read.run, read.problems
    if not analysis:
        return run
    from profattn.analysis.run.analyze import analyze_run

    return analyze_run(run, traces=problems)


#: Columns of :attr:`TraceAnalysis.attention_calls`, in order (units in the names: ``_us`` µs, ``_bytes`` bytes).
ATTENTION_CALL_COLUMNS: tuple[str, ...] = (
    "index", "source", "op_name", "backend", "backend_op", "direction", "phase", "range",
    "batch", "num_q_heads", "num_kv_heads", "q_len", "kv_len", "head_dim", "dtype", "causal", "causal_alignment", "varlen", "workload_tag",
    "ts_us", "dur_us", "gpu_time_us", "kernel_count", "graph_launched",
    "dominant_kernel", "dominant_kernel_us", "dominant_grid", "dominant_block", "dominant_registers_per_thread",
    "dominant_shared_mem_bytes", "dominant_ctas", "dominant_ctas_per_sm", "notes",
    # serving-engine calls (profattn.analysis.calls.engine_ops / steps / graphs): None elsewhere
    "q_tokens", "page_size", "serving_step", "step_flops", "step_bytes", "achieved_tflops", "achieved_gbps", "graph_rule",
)

_CALL_INT_COLUMNS = ("index", "batch", "num_q_heads", "num_kv_heads", "q_len", "kv_len", "head_dim", "kernel_count",
                     "dominant_registers_per_thread", "dominant_shared_mem_bytes", "dominant_ctas", "q_tokens", "page_size",
                     "serving_step", "step_flops", "step_bytes")


@dataclass(frozen=True, eq=False)
class TraceAnalysis:
    """One PyTorch profiler (Kineto) trace, analyzed.

    Attributes:
        trace: the parsed :class:`~profattn.trace.Trace` (typed access to its frames and metadata).
        calls: the analysis of its attention calls and GPU time (:class:`~profattn.analysis.calls.find.TraceCalls`).
        kernels: one row per GPU kernel launch (``Trace.kernels``: ``name``, ``ts_us``, ``dur_us``,
            ``grid_x/y/z``, ``block_x/y/z``, ``registers_per_thread``, ``shared_mem_bytes``, ...).
        ops: one row per CPU operator event (``Trace.ops``: ``name``, ``ts_us``, ``dur_us``, recorded shapes).
        attention_calls: one row per attention call, columns :data:`ATTENTION_CALL_COLUMNS`: the recorded
            shape (None when not recorded), backend, direction, phase, the call's CPU window and its summed
            kernel time (µs), and the launch shape of its longest kernel; for a serving engine's call its query tokens,
            page size, step (index into ``calls.serving_steps``), the step ledger's FLOPs and minimum bytes, the
            achieved TFLOP/s and GB/s, and the rule that matched a graph-replayed call to its capture.
    """

    trace: Trace
    calls: TraceCalls
    kernels: pd.DataFrame = field(repr=False)
    ops: pd.DataFrame = field(repr=False)
    attention_calls: pd.DataFrame = field(repr=False)

    @property
    def path(self) -> str:
        """The file the trace was read from."""
        return self.trace.path


def analyze_trace(path: str | os.PathLike[str], *, captures: "tuple[str | os.PathLike[str], ...]" = ()) -> TraceAnalysis:
    """Read and analyze one Kineto trace (``.json`` or ``.json.gz``): its kernels, CPU ops and attention
    calls as DataFrames (see :class:`TraceAnalysis`). ``captures``: traces that profiled the capture of the CUDA
    graphs this one replays (:func:`profattn.analysis.calls.graphs.merge_graphs`).

    Raises:
        TraceError: the file (or a capture) is missing, unreadable, not a trace, or holds no events.
    """
    import pandas as pd

    from profattn.analysis.calls.find import find_attention_calls
    from profattn.analysis.calls.graphs import CaptureSource
    from profattn.trace.kineto import load_trace

    trace = load_trace(path)
    sources = [CaptureSource(os.fspath(c), load_trace(c)) for c in captures]
    calls = find_attention_calls(trace, captures=sources)
    frame = pd.DataFrame([_call_row(c) for c in calls.calls], columns=list(ATTENTION_CALL_COLUMNS))
    frame = frame.astype({c: "Int64" for c in _CALL_INT_COLUMNS})
    return TraceAnalysis(trace, calls, trace.kernels, trace.ops, frame)


def _call_row(call: Any) -> dict[str, Any]:
    """One :class:`~profattn.analysis.calls.find.AttentionCall` as a flat dict keyed by ATTENTION_CALL_COLUMNS."""
    s = call.shape
    k = max(call.kernels, key=lambda k: k.dur_us, default=None)
    return {
        "index": call.index,
        "source": call.source,
        "op_name": call.op_name,
        "backend": call.backend,
        "backend_op": call.backend_op,
        "direction": call.direction,
        "phase": call.phase.value if call.phase is not None else None,
        "range": call.range,
        "batch": s.batch if s else None,
        "num_q_heads": s.num_q_heads if s else None,
        "num_kv_heads": s.num_kv_heads if s else None,
        "q_len": s.q_len if s else None,
        "kv_len": s.kv_len if s else None,
        "head_dim": s.head_dim if s else None,
        "dtype": s.dtype if s else None,
        "causal": call.causal,
        "causal_alignment": call.causal_alignment.value,
        "varlen": call.varlen,
        "workload_tag": call.workload.tag if call.workload is not None else None,
        "ts_us": call.ts_us,
        "dur_us": call.dur_us,
        "gpu_time_us": call.gpu_time_us,
        "kernel_count": call.kernel_count,
        "graph_launched": call.graph_launched,
        "dominant_kernel": k.name if k else None,
        "dominant_kernel_us": k.dur_us if k else None,
        "dominant_grid": k.grid if k else None,
        "dominant_block": k.block if k else None,
        "dominant_registers_per_thread": k.registers_per_thread if k else None,
        "dominant_shared_mem_bytes": k.shared_mem_bytes if k else None,
        "dominant_ctas": k.ctas if k else None,
        "dominant_ctas_per_sm": k.ctas_per_sm if k else None,
        "notes": "; ".join(call.notes),
        "q_tokens": call.engine.q_tokens if call.engine else None,
        "page_size": call.engine.kv_cache.block_size if call.engine and call.engine.kv_cache else None,
        "serving_step": call.step.step if call.step else None,
        "step_flops": call.step.ledger.flops if call.step and call.step.ledger else None,
        "step_bytes": call.step.ledger.total_bytes if call.step and call.step.ledger else None,
        "achieved_tflops": call.step.tflops if call.step else None,
        "achieved_gbps": call.step.gbps if call.step else None,
        "graph_rule": call.graph.rule.value if call.graph else None,
    }
