"""``profattn analyze``: any PyTorch profiler (Kineto) trace → one self-contained HTML report (and JSON).

Trace files are found (a file, or every ``*.json``/``*.json.gz`` under a directory, one per rank or
worker), parsed by :func:`profattn.trace.load_trace` (a :class:`~profattn.errors.TraceError` names the
file that cannot be used: an error for a file given itself, a warning and a skip for a file found in a
directory, e.g. a run's ``results.json``) and analyzed by :func:`profattn.analysis.calls.find_attention_calls`.
Unless ``keep_host_info``, paths are shown relative to the directory given (or as the file's name) and the
analysis is scrubbed of absolute paths, host and user names (:mod:`profattn.privacy`). Here the results
become rows of display-ready values (tests assert on rows), the HTML is rendered by jinja2 with autoescape
(every string from a trace is escaped; chart data travels through ``|tojson``), plotly.js is inlined once,
and ``--json`` writes the versioned document :data:`SCHEMA` v:data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
import re
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from profattn.analysis.cells import kernel_stem
from profattn.analysis.call_records import AttentionCall, CallKernel, CausalAlignment, TraceCalls
from profattn.analysis.calls import find_attention_calls
from profattn.errors import ProfattnError
from profattn.files import write_text_atomic
from profattn.report.run import (
    _plotly_js,
    _shape,
    fmt_bytes,
    fmt_us,
    template_env,
    write_html_file,
)
from profattn.trace.kineto import load_trace

__all__ = [
    "CHART_TOP",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TABLE_LIMIT",
    "Analysis",
    "SkippedFile",
    "TraceInput",
    "analysis_to_dict",
    "analyze_paths",
    "call_rows",
    "file_rows",
    "find_trace_files",
    "find_trace_inputs",
    "kernel_chart",
    "kernel_rows",
    "launch_rows",
    "op_rows",
    "rank_warnings",
    "render_html",
    "step_rows",
    "workload_rows",
    "write_html",
    "write_json",
]

SCHEMA = "profattn.analysis.cells"
SCHEMA_VERSION = 1
#: Most rows a table shows in the HTML (the JSON keeps everything); the table says how many it left out.
TABLE_LIMIT = 100
#: Kernels in the GPU-time chart.
CHART_TOP = 20


@dataclass(frozen=True)
class SkippedFile:
    """A file found in a directory that could not be analyzed: its shown path and why (e.g. ``not a Chrome
    trace (no 'traceEvents' key)`` for a ``results.json``, ``file is empty``)."""

    path: str
    reason: str

    @property
    def message(self) -> str:
        """The warning shown for it: ``skipped <path>: <reason>``."""
        return f"skipped {self.path}: {self.reason}"


@dataclass(frozen=True)
class Analysis:
    """The analysis of every trace file given: one :class:`TraceCalls` per file (in the order found),
    warnings about the set as a whole (files skipped, duplicated ranks) and the files of a directory that
    could not be analyzed (``skipped``)."""

    files: tuple[TraceCalls, ...]
    warnings: tuple[str, ...] = ()
    skipped: tuple[SkippedFile, ...] = ()


@dataclass(frozen=True)
class TraceInput:
    """One file to analyze: ``path`` as found, ``shown`` the path the outputs show, ``in_directory`` whether
    it was found by searching a directory (then a file that cannot be read is skipped, not an error)."""

    path: Path
    shown: str
    in_directory: bool


# ---- finding and analyzing files -----------------------------------------------------------------


def find_trace_inputs(paths: Iterable[str | os.PathLike[str]], *, keep_host_info: bool = False) -> list[TraceInput]:
    """Trace files named by ``paths``: a file as given; a directory searched recursively for ``*.json``
    and ``*.json.gz`` (sorted). Each file once, in the order found.

    The path shown for a file is, by default, its path relative to the directory it was found in, or its
    name when it was given itself, never an absolute path; with ``keep_host_info`` it is the path as found.

    Raises:
        ProfattnError: a path does not exist, or a directory holds no trace file.
    """
    found: dict[Path, TraceInput] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted((p for p in path.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))),
                            key=_natural_key)  # rank_2 before rank_10
            if not inside:
                raise ProfattnError(f"{path}: no trace files (*.json, *.json.gz) in this directory")
            for p in inside:
                shown = os.fspath(p) if keep_host_info else p.relative_to(path).as_posix()
                found.setdefault(p, TraceInput(p, shown, True))
        elif path.exists():
            found.setdefault(path, TraceInput(path, os.fspath(path) if keep_host_info else path.name, False))
        else:
            raise ProfattnError(f"{path}: no such file or directory")
    if not found:
        raise ProfattnError("no trace path given")
    return list(found.values())


def find_trace_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The paths of :func:`find_trace_inputs`: a file as given; a directory searched recursively for
    ``*.json`` and ``*.json.gz`` (sorted). Each file once, in the order found.

    Raises:
        ProfattnError: a path does not exist, or a directory holds no trace file.
    """
    return [t.path for t in find_trace_inputs(paths, keep_host_info=True)]


def _reason(error: ProfattnError, path: Path) -> str:
    """The message of ``error`` without the leading ``<path>: `` that trace errors start with."""
    text = str(error)
    prefix = f"{os.fspath(path)}: "
    return text.removeprefix(prefix)


def analyze_paths(paths: Iterable[str | os.PathLike[str]], *, keep_host_info: bool = False) -> Analysis:
    """Find, parse and analyze every trace under ``paths``.

    A file found in a directory that cannot be analyzed (not a trace, e.g. a run's ``results.json``;
    empty; truncated; ...) is skipped with a warning naming it and the problem; a file given itself
    that cannot be analyzed is an error. Unless ``keep_host_info``, file paths are shown relative to the
    directory given (or as the file's name) and every string is scrubbed of absolute paths, host and user
    names (:mod:`profattn.privacy`).

    Raises:
        ProfattnError: a missing path or an empty directory (:func:`find_trace_inputs`), or no file that
            could be analyzed at all (the message names the files and their problems).
        TraceError: a file given itself that cannot be read as a trace (the message names it).
    """
    inputs = find_trace_inputs(paths, keep_host_info=keep_host_info)
    files: list[TraceCalls] = []
    skipped: list[SkippedFile] = []
    for item in inputs:
        try:
            fa = find_attention_calls(load_trace(item.path))
        except ProfattnError as exc:
            if not item.in_directory:
                raise
            skipped.append(SkippedFile(item.shown, _reason(exc, item.path)))
            continue
        fa = replace(fa, path=item.shown)
        if not keep_host_info:
            from profattn.privacy import scrub

            fa = scrub(fa)
        files.append(fa)
    if not files:
        listed = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3])
        more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        raise ProfattnError(f"no trace could be read ({len(skipped)} file(s) skipped: {listed}{more})")
    return Analysis(files=tuple(files), warnings=tuple(s.message for s in skipped) + rank_warnings(files),
                    skipped=tuple(skipped))


def rank_warnings(files: Sequence[TraceCalls]) -> tuple[str, ...]:
    """One warning per rank that more than one file claims (``distributedInfo.rank``)."""
    by_rank: dict[int, list[str]] = {}
    for f in files:
        if f.rank is not None:
            by_rank.setdefault(f.rank, []).append(f.path)
    return tuple(
        f"rank {rank} appears in {len(names)} files ({', '.join(os.path.basename(n) for n in names)}): "
        "copies of one trace, or traces from different runs mixed together?"
        for rank, names in by_rank.items() if len(names) > 1
    )


# ---- rows ----------------------------------------------------------------------------------------


def _opt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def mask_text(c: AttentionCall) -> str:
    """The call's mask as shown: ``none``, ``causal (top-left)``, ``causal (bottom-right)``,
    ``attn_mask tensor [...]`` or ``unknown``."""
    if c.mask_dims is not None:
        return f"attn_mask tensor {list(c.mask_dims)}"
    if c.causal_alignment in (CausalAlignment.TOP_LEFT, CausalAlignment.BOTTOM_RIGHT):
        return f"causal ({c.causal_alignment.value})"
    return c.causal_alignment.value


def _causal_text(causal: bool | None) -> str:
    return "unknown" if causal is None else ("yes" if causal else "no")


def file_rows(analysis: Analysis) -> list[dict[str, Any]]:
    """One summary row per file: label, path, device, SMs, kernels, GPU time, attention calls, notes, and
    the file's warnings (recoverable oddities of the input: one message each)."""
    return [{
        "id": f"file-{i}", "label": f.label, "path": f.path, "rank": f.rank,
        "device": f.device_name or "n/a", "sms": _opt(f.num_sms, "d"), "kernels": f.kernel_count,
        "gpu_time": fmt_us(f.gpu_time_us) if f.has_gpu_kernels else "–",
        "gpu_busy": fmt_us(f.gpu_busy_us) if f.has_gpu_kernels else "–",
        "attention_calls": len(f.calls),
        "attention_time": fmt_us(sum(c.gpu_time_us for c in f.calls)) if f.has_gpu_kernels else "–",
        "notes": list(f.notes), "warnings": [w.message for w in f.warnings],
    } for i, f in enumerate(analysis.files)]


def _kernel_row(k: CallKernel) -> dict[str, Any]:
    return {
        "kernel": k.name, "family": k.family or "", "time": fmt_us(k.dur_us),
        "grid": _shape(k.grid), "block": _shape(k.block), "ctas": _opt(k.ctas, ","),
        "ctas_per_sm": _opt(k.ctas_per_sm, ".2f"), "registers": _opt(k.registers_per_thread, "d"),
        "smem": fmt_bytes(k.shared_mem_bytes), "graph": k.graph_launched,
    }


def call_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """One row per attention call: what was called and dispatched, the inferred workload and regime, the
    kernels it launched (``kernels``: one row each), the ``Workload(...)`` text and profile snippet."""
    return [_call_row(c) for c in fa.calls]


def _call_row(c: AttentionCall) -> dict[str, Any]:
    s = c.shape
    return {
        "index": c.index, "source": c.source, "op": c.op_name or "(none)", "backend": c.backend,
        "backend_op": c.backend_op or "", "direction": c.direction,
        "phase": c.phase.value if c.phase else "unknown", "range": c.range or "",
        "batch": s.batch if s else "?", "q_len": s.q_len if s else "?", "kv_len": s.kv_len if s else "?",
        "heads": f"{s.num_q_heads}/{s.num_kv_heads}" if s else "?", "head_dim": s.head_dim if s else "?",
        "dtype": (s.dtype or "unknown") if s else "?", "causal": _causal_text(c.causal), "mask": mask_text(c),
        "gpu_time": fmt_us(c.gpu_time_us) if c.kernels else "–", "cpu_time": fmt_us(c.dur_us),
        "kernel_count": len(c.kernels), "families": ", ".join(c.kernel_families),
        "graph": c.graph_launched, "kernels": [_kernel_row(k) for k in c.kernels],
        "workload": c.workload_constructor, "workload_tag": c.workload.tag if c.workload else "",
        "profile_hint": c.profile_hint, "notes": list(c.notes),
    }


_WORKLOAD_KEYS = ("op", "backend", "backend_op", "direction", "phase", "batch", "q_len", "kv_len", "heads", "head_dim",
                  "dtype", "causal", "mask", "families", "workload", "workload_tag")


def _signature(c: AttentionCall) -> tuple[Any, ...]:
    return (c.op_name, c.backend, c.direction, c.phase, c.shape, mask_text(c), tuple(k.name for k in c.kernels))


def workload_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """Attention calls grouped by what they are (op, backend, direction, phase, shapes, mask, kernel
    names), largest total GPU time first: ``calls`` of each, ``first`` call index, mean GPU time per call."""
    groups: dict[tuple[Any, ...], list[AttentionCall]] = {}
    for c in fa.calls:
        groups.setdefault(_signature(c), []).append(c)
    rows = []
    for calls in groups.values():
        c = calls[0]
        total = sum(x.gpu_time_us for x in calls)
        row = {k: v for k, v in _call_row(c).items() if k in _WORKLOAD_KEYS}
        row.update({"calls": len(calls), "first": c.index, "total_us": total,
                    "mean_gpu_time": fmt_us(total / len(calls)) if c.kernels else "–",
                    "kernels_per_call": len(c.kernels)})
        rows.append(row)
    return sorted(rows, key=lambda r: -r["total_us"])


def kernel_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """GPU time by kernel name, largest first: count, total, mean, share of the file's kernel time."""
    return [{
        "kernel": k.name, "family": k.family or "", "count": k.count, "total": fmt_us(k.total_us),
        "mean": fmt_us(k.mean_us), "share": f"{k.share:.1%}", "total_us": k.total_us,
    } for k in fa.kernels]


def launch_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """Distinct launch shapes per kernel name (``n/a`` where the trace records none, e.g. ROCm)."""
    return [{
        "kernel": s.name, "grid": _shape(s.grid), "block": _shape(s.block), "registers": _opt(s.registers_per_thread, "d"),
        "smem": fmt_bytes(s.shared_mem_bytes), "ctas": _opt(s.ctas, ","), "ctas_per_sm": _opt(s.ctas_per_sm, ".2f"),
        "blocks_per_sm": _opt(s.blocks_per_sm, ".2f"), "count": s.count, "total": fmt_us(s.total_us),
    } for s in fa.launch_shapes]


def op_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """GPU time by top-level CPU op name, largest first."""
    return [{
        "op": o.name, "op_calls": o.op_calls, "kernels": o.kernels, "total": fmt_us(o.total_us), "mean": fmt_us(o.mean_us),
        "graph_kernels": o.graph_kernels,
    } for o in fa.ops]


def step_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """One row per ``ProfilerStep#N`` window."""
    return [{
        "step": s.name, "cpu_time": fmt_us(s.dur_us), "kernels": s.kernels,
        "gpu_time": fmt_us(s.gpu_time_us) if s.kernels else "–", "attention_calls": s.attention_calls,
    } for s in fa.steps]


def kernel_chart(fa: TraceCalls, top: int = CHART_TOP) -> dict[str, Any] | None:
    """A plotly bar chart (JSON-ready dict) of the ``top`` kernel names by GPU time; None without kernels.
    Bars are labelled by the kernel's stem (numbered when stems repeat); hover shows the full name."""
    if not fa.kernels:
        return None
    import plotly.graph_objects as go

    shown = fa.kernels[:top][::-1]  # largest at the top of a horizontal bar chart
    seen: Counter[str] = Counter()
    labels = []
    for k in shown:
        stem = kernel_stem(k.name)[:60] or "(unnamed)"
        seen[stem] += 1
        labels.append(stem if seen[stem] == 1 else f"{stem} #{seen[stem]}")
    fig = go.Figure(go.Bar(
        x=[k.total_us for k in shown], y=labels, orientation="h", customdata=[k.name[:400] for k in shown],
        text=[f"{k.count}×" for k in shown], hovertemplate="%{customdata}<br>%{x:,.1f} µs in %{text}<extra></extra>",
    ))
    fig.update_layout(title=f"GPU time by kernel (top {len(shown)} of {len(fa.kernels)})", xaxis_title="summed kernel time (µs)",
                      height=max(360, 28 * len(shown) + 120), margin={"l": 320})
    return json.loads(fig.to_json())


# ---- JSON ----------------------------------------------------------------------------------------


def _call_dict(c: AttentionCall) -> dict[str, Any]:
    return {
        "index": c.index, "source": c.source, "op_name": c.op_name, "backend": c.backend, "backend_op": c.backend_op,
        "direction": c.direction, "ts_us": c.ts_us, "dur_us": c.dur_us, "pid": c.pid, "tid": c.tid, "range": c.range,
        "shape": asdict(c.shape) if c.shape else None, "causal": c.causal, "mask": mask_text(c),
        "phase": c.phase.value if c.phase else None,
        "workload": c.workload.to_dict() if c.workload else None, "workload_constructor": c.workload_constructor,
        "gpu_time_us": c.gpu_time_us if c.kernels else None, "kernel_families": list(c.kernel_families), "graph_launched": c.graph_launched,
        "kernels": [{**asdict(k), "launch_shape": k.launch_shape} for k in c.kernels], "notes": list(c.notes),
    }


def analysis_to_dict(analysis: Analysis) -> dict[str, Any]:
    """The versioned JSON document: ``{"schema": "profattn.analysis.cells", "schema_version": 1, "warnings": [...],
    "skipped": [...], "files": [...]}``; times in µs, sizes in bytes, missing values null. Top-level
    ``warnings`` are about the set of files (files skipped, duplicated ranks); ``skipped`` lists the files of
    a directory that could not be analyzed as ``{"path", "reason"}``; each file's ``warnings`` are ``{"code", "count", "message"}`` objects
    about that file (:class:`~profattn.trace.TraceWarning`)."""
    files = []
    for f in analysis.files:
        files.append({
            "path": f.path, "label": f.label, "rank": f.rank, "device_name": f.device_name, "num_sms": f.num_sms,
            "kernel_count": f.kernel_count, "gpu_time_us": f.gpu_time_us, "gpu_busy_us": f.gpu_busy_us,
            "notes": list(f.notes),
            "warnings": [asdict(w) for w in f.warnings],
            "kernels": [asdict(k) for k in f.kernels],
            "launch_shapes": [asdict(s) for s in f.launch_shapes],
            "ops": [asdict(o) for o in f.ops],
            "steps": [asdict(s) for s in f.steps],
            "attention_calls": [_call_dict(c) for c in f.calls],
        })
    return _finite({"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "warnings": list(analysis.warnings),
                    "skipped": [asdict(s) for s in analysis.skipped], "files": files})


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (a trace's absurd but finite times, e.g.
    ``ts`` 1.7e308, can add up to ``inf``; JSON has no such number)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _natural_key(path: Path) -> list[object]:
    """Sort key that orders the numbers inside a path by value (``rank_2`` before ``rank_10``)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def write_json(analysis: Analysis, path: str | os.PathLike[str]) -> Path:
    """Write :func:`analysis_to_dict` as JSON (no NaN: every missing value is null), atomically; returns
    the path.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    return write_text_atomic(path, json.dumps(analysis_to_dict(analysis), indent=1, allow_nan=False))


# ---- HTML ----------------------------------------------------------------------------------------


def _limited(rows: list[dict[str, Any]], limit: int = TABLE_LIMIT) -> dict[str, Any]:
    return {"rows": rows[:limit], "more": max(0, len(rows) - limit)}


def render_html(analysis: Analysis, *, title: str = "profattn trace analysis") -> str:
    """The whole report as one self-contained HTML string (plotly.js inline once, no network access)."""
    sections = []
    for summary, fa in zip(file_rows(analysis), analysis.files):
        sections.append({
            **summary,
            "has_kernels": fa.has_gpu_kernels,
            "workloads": workload_rows(fa),
            "calls": _limited(call_rows(fa)),
            "chart": kernel_chart(fa),
            "kernel_table": _limited(kernel_rows(fa)),
            "launch_table": _limited(launch_rows(fa)),
            "op_table": _limited(op_rows(fa)),
            "steps": step_rows(fa),
        })
    ctx = {
        "title": title,
        "files": sections,
        "warnings": list(analysis.warnings),
        "schema_version": SCHEMA_VERSION,
        "plotly_js": _plotly_js(),
    }
    return template_env().get_template("analyze.html.j2").render(**ctx)


def write_html(analysis: Analysis, path: str | os.PathLike[str]) -> Path:
    """Render and write the report; returns the path."""
    return write_html_file(render_html(analysis), path)
