"""``profattn analyze``'s outputs: a :class:`~profattn.analysis.calls.traces.TraceSetAnalysis` (any PyTorch
profiler trace files, analyzed by :func:`profattn.analysis.calls.traces.analyze_paths`) as one self-contained
HTML page and as versioned JSON.

Here the analysis becomes rows of display-ready values (tests assert on rows); the page is rendered by
:func:`profattn.report.render.render` (``analyze.html.j2``, autoescaped: every string from a trace is
escaped; chart data travels through ``|tojson``; plotly.js inline once), and ``--json`` writes the
versioned document :data:`SCHEMA` v:data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from profattn.analysis.calls.call_records import AttentionCall, CallKernel, CausalAlignment, TraceCalls
from profattn.analysis.calls.comm import RankTimeline
from profattn.analysis.calls.kernels import CALL_KERNEL_LIMIT
from profattn.analysis.calls.traces import RankClash, SkippedFile, TraceSetAnalysis, trace_group
from profattn.analysis.common.names import kernel_stem
from profattn.files import write_text_atomic
from profattn.report.engine import achieved_text, call_engine_dict, engine_call_text, engine_dict, engine_section
from profattn.report.format import MISSING, causal_text, fmt_bytes, fmt_opt, fmt_us, launch_cells, safe_chart
from profattn.report.render import render, write_html_file
from profattn.results import Ceilings
from profattn.workload import Workload

__all__ = [
    "CHART_TOP",
    "SCHEMA",
    "SCHEMA_VERSION",
    "JSON_CALL_LIMIT",
    "JSON_LIST_LIMIT",
    "TABLE_LIMIT",
    "analysis_to_dict",
    "call_group_rows",
    "call_rows",
    "comm_lines",
    "file_rows",
    "kernel_chart",
    "kernel_rows",
    "launch_shape_rows",
    "omitted_text",
    "op_rows",
    "rank_clash_text",
    "render_html",
    "set_warnings",
    "skipped_text",
    "step_rows",
    "write_html",
    "write_json",
]

SCHEMA = "profattn.analysis"
#: 2: a call's workload leaves out kv_lens (always [kv_len] × batch for a traced call); 3: output proportional to what
#: a reader needs — a call's kernels beyond :data:`~profattn.analysis.calls.kernels.CALL_KERNEL_LIMIT` are summarised
#: (``kernels_omitted``), the attention calls beyond :data:`JSON_CALL_LIMIT` (the heaviest are kept) and every other
#: list beyond :data:`JSON_LIST_LIMIT` too (``<list>_omitted``: count and GPU time), with the caps in ``limits``.
SCHEMA_VERSION = 3
#: Most rows a table shows in the HTML (the JSON keeps up to its own limits); the table says how many it left out.
TABLE_LIMIT = 100
#: Attention calls the JSON details (the heaviest, by GPU time, in trace order); the rest are counted and totalled.
JSON_CALL_LIMIT = 1_000
#: Rows the JSON keeps of every other list (kernels by name, launch shapes, ops, steps, call groups).
JSON_LIST_LIMIT = 10_000
#: Kernels in the GPU-time chart.
CHART_TOP = 20


# ---- rows ----------------------------------------------------------------------------------------


def skipped_text(s: SkippedFile) -> str:
    """The warning for a file of a directory that could not be analyzed: ``skipped <path>: <reason>``."""
    return f"skipped {s.path}: {s.reason}"


def rank_clash_text(c: RankClash) -> str:
    """The warning for a rank that several files claim, naming the files (base names)."""
    return (f"rank {c.rank} appears in {len(c.paths)} files ({', '.join(os.path.basename(n) for n in c.paths)}): "
            "copies of one trace, or traces from different runs mixed together?")


def set_warnings(analysis: TraceSetAnalysis) -> list[str]:
    """The warnings about the set of files as a whole, as the page, the JSON and the CLI show them: one per
    file skipped (in the order found), then one per rank claimed by several files."""
    return [skipped_text(s) for s in analysis.skipped] + [rank_clash_text(c) for c in analysis.rank_clashes]


def file_rows(analysis: TraceSetAnalysis) -> list[dict[str, Any]]:
    """One summary row per file: label, path, device, SMs, kernels, GPU time, attention calls, notes, and
    the file's warnings (recoverable oddities of the input: one message each)."""
    return [{
        "id": f"file-{i}", "label": f.label, "path": f.path, "rank": f.rank,
        "device": f.device_name or "n/a", "sms": fmt_opt(f.num_sms, "d"), "kernels": f.kernel_count,
        "gpu_time": fmt_us(f.gpu_time_us) if f.has_gpu_kernels else MISSING,
        "gpu_busy": fmt_us(f.gpu_busy_us) if f.has_gpu_kernels else MISSING,
        "attention_calls": len(f.calls),
        "attention_time": fmt_us(sum(c.gpu_time_us for c in f.calls)) if f.has_gpu_kernels else MISSING,
        "notes": list(f.notes), "warnings": [w.message for w in f.warnings],
    } for i, f in enumerate(analysis.files)]


def _kernel_row(k: CallKernel) -> dict[str, Any]:
    return {
        "kernel": k.name, "family": k.family or "", "time": fmt_us(k.dur_us),
        **launch_cells(k.grid, k.block, ctas=k.ctas, registers=k.registers_per_thread, smem_bytes=k.shared_mem_bytes,
                       ctas_per_sm=k.ctas_per_sm),
        "graph": k.graph_launched,
    }


def mask_text(c: AttentionCall) -> str:
    """The call's mask as shown: ``none``, ``causal (top-left)``, ``causal (bottom-right)``,
    ``attn_mask tensor [...]`` or ``unknown``."""
    if c.mask_dims is not None:
        return f"attn_mask tensor {list(c.mask_dims)}"
    if c.causal_alignment in (CausalAlignment.TOP_LEFT, CausalAlignment.BOTTOM_RIGHT):
        return f"causal ({c.causal_alignment.value})"
    return c.causal_alignment.value


def call_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """One row per attention call: what was called and dispatched, the inferred workload and regime, the
    kernels it launched (``kernels``: one row each), the ``Workload(...)`` text and profile snippet."""
    return [_call_row(c) for c in fa.calls]


def _dim(value: int | None) -> int | str:
    """A recorded dimension as shown: ``?`` when unknown (not recorded, or beyond its limit)."""
    return "?" if value is None else value


def omitted_text(c: AttentionCall) -> str:
    """What a call's kernels beyond the per-call cap were: ``"… and 999,936 more kernels (7.5 s, 99.99 % of the
    call's GPU time; at most 64 are listed, the heaviest): flash_fwd_splitkv_kernel ×999,936"``; "" when none."""
    o = c.omitted
    if o is None:
        return ""
    total = c.gpu_time_us
    share = f", {o.gpu_time_us / total:.2%} of the call's GPU time" if total > 0 else ""
    names = ", ".join(f"{kernel_stem(n)[:80]} ×{k:,}" for n, k, _ in o.names[:5])
    return (f"… and {o.count:,} more kernels ({fmt_us(o.gpu_time_us)}{share}; at most {len(c.kernels)} are listed per "
            f"call, the heaviest): {names}")


def _call_row(c: AttentionCall) -> dict[str, Any]:
    s = c.shape
    return {
        "index": c.index, "source": c.source, "op": c.op_name or "(none)", "backend": c.backend,
        "backend_op": c.backend_op or "", "direction": c.direction,
        "phase": c.phase.value if c.phase else "unknown", "range": c.range or "",
        "batch": _dim(s.batch) if s else "?", "q_len": _dim(s.q_len) if s else "?",
        "kv_len": _dim(s.kv_len) if s else "?",
        "heads": f"{_dim(s.num_q_heads)}/{_dim(s.num_kv_heads)}" if s else "?", "head_dim": _dim(s.head_dim) if s else "?",
        "dtype": (s.dtype or "unknown") if s else "?", "causal": causal_text(c.causal), "mask": mask_text(c),
        "gpu_time": fmt_us(c.gpu_time_us) if c.kernels else MISSING, "cpu_time": fmt_us(c.dur_us),
        "kernel_count": c.kernel_count, "families": ", ".join(c.kernel_families),
        "graph": c.graph_launched, "kernels": [_kernel_row(k) for k in c.kernels], "kernels_omitted": omitted_text(c),
        "workload": c.workload_constructor, "workload_tag": c.workload.tag if c.workload else "",
        "profile_hint": c.profile_hint, "notes": list(c.notes),
        "engine": engine_call_text(c.engine), "achieved": achieved_text(c.step) if c.step else "",
        "origin": c.graph.rule.value if c.graph else "", "captured_in": c.captured_in,
    }


_WORKLOAD_KEYS = ("op", "backend", "backend_op", "direction", "phase", "batch", "q_len", "kv_len", "heads", "head_dim",
                  "dtype", "causal", "mask", "families", "workload", "workload_tag")


def _signature(c: AttentionCall) -> tuple[Any, ...]:
    names = [*(k.name for k in c.kernels), *(n for n, _, _ in (c.omitted.names if c.omitted else ()))]
    return (c.op_name, c.backend, c.direction, c.phase, c.shape, mask_text(c), tuple(names))


def call_group_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """One trace file's attention calls grouped by what they are (op, backend, direction, phase, shapes, mask, kernel
    names), largest total GPU time first: ``calls`` of each, ``first`` call index, mean GPU time per call.
    Not the run report's :func:`profattn.report.run.workload_rows` (the shape contract of each benchmarked
    workload)."""
    groups: dict[tuple[Any, ...], list[AttentionCall]] = {}
    for c in fa.calls:
        groups.setdefault(_signature(c), []).append(c)
    rows = []
    for calls in groups.values():
        c = calls[0]
        total = sum(x.gpu_time_us for x in calls)
        row = {k: v for k, v in _call_row(c).items() if k in _WORKLOAD_KEYS}
        row.update({"calls": len(calls), "first": c.index, "total_us": total,
                    "mean_gpu_time": fmt_us(total / len(calls)) if c.kernels else MISSING,
                    "kernels_per_call": c.kernel_count})
        rows.append(row)
    return sorted(rows, key=lambda r: -r["total_us"])


def kernel_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """GPU time by kernel name, largest first: count, total, mean, share of the file's kernel time."""
    return [{
        "kernel": k.name, "family": k.family or "", "count": k.count, "total": fmt_us(k.total_us),
        "mean": fmt_us(k.mean_us), "share": f"{k.share:.1%}", "total_us": k.total_us,
    } for k in fa.kernels]


def launch_shape_rows(fa: TraceCalls) -> list[dict[str, Any]]:
    """Distinct launch shapes per kernel name in one trace file (``n/a`` where the trace records none, e.g.
    ROCm), with launches and total time of each. Not the run report's :func:`profattn.report.run.launch_rows`
    (every kernel of every cell, per call)."""
    return [{
        "kernel": s.name,
        **launch_cells(s.grid, s.block, ctas=s.ctas, registers=s.registers_per_thread, smem_bytes=s.shared_mem_bytes,
                       blocks_per_sm=s.blocks_per_sm, ctas_per_sm=s.ctas_per_sm),
        "count": s.count, "total": fmt_us(s.total_us),
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
        "gpu_time": fmt_us(s.gpu_time_us) if s.kernels else MISSING, "attention_calls": s.attention_calls,
    } for s in fa.steps]


def kernel_chart(fa: TraceCalls, top: int = CHART_TOP) -> dict[str, Any] | None:
    """A plotly bar chart (JSON-ready dict, the figure format plotly.js draws: ``data`` traces and ``layout``; built
    without importing plotly, whose import would double the start-up of ``analyze`` on a small trace) of the ``top``
    kernel names by GPU time; None without kernels. Bars are labelled by the kernel's stem (numbered when stems
    repeat); hover shows the full name."""
    if not fa.kernels:
        return None
    shown = fa.kernels[:top][::-1]  # largest at the top of a horizontal bar chart
    seen: Counter[str] = Counter()
    labels = []
    for k in shown:
        stem = kernel_stem(k.name)[:60] or "(unnamed)"
        seen[stem] += 1
        labels.append(stem if seen[stem] == 1 else f"{stem} #{seen[stem]}")
    bars = {"type": "bar", "x": [k.total_us for k in shown], "y": labels, "orientation": "h",
            "customdata": [k.name[:400] for k in shown], "text": [f"{k.count}×" for k in shown],
            "hovertemplate": "%{customdata}<br>%{x:,.1f} µs in %{text}<extra></extra>"}
    layout = {"title": {"text": f"GPU time by kernel (top {len(shown)} of {len(fa.kernels)})"},
              "xaxis": {"title": {"text": "summed kernel time (µs)"}}, "height": max(360, 28 * len(shown) + 120),
              "margin": {"l": 320}}
    return safe_chart({"data": [bars], "layout": layout})


# ---- JSON ----------------------------------------------------------------------------------------


def _workload_dict(w: Workload, memo: dict[Workload, dict[str, Any]]) -> dict[str, Any]:
    """:meth:`Workload.to_dict` without ``kv_lens`` (a traced call's sequences all have ``kv_len`` keys:
    the list would be ``[kv_len] * batch``, repeated in every call), computed once per distinct workload."""
    out = memo.get(w)
    if out is None:
        out = memo[w] = {k: v for k, v in w.to_dict().items() if k != "kv_lens"}
    return out


def _call_dict(c: AttentionCall, memo: dict[Workload, dict[str, Any]]) -> dict[str, Any]:
    return {
        "index": c.index, "source": c.source, "op_name": c.op_name, "backend": c.backend, "backend_op": c.backend_op,
        "direction": c.direction, "ts_us": c.ts_us, "dur_us": c.dur_us, "pid": c.pid, "tid": c.tid, "range": c.range,
        "shape": asdict(c.shape) if c.shape else None, "causal": c.causal, "mask": mask_text(c),
        "phase": c.phase.value if c.phase else None,
        "workload": _workload_dict(c.workload, memo) if c.workload else None, "workload_constructor": c.workload_constructor,
        "gpu_time_us": c.gpu_time_us if c.kernels else None, "kernel_families": list(c.kernel_families), "graph_launched": c.graph_launched,
        "kernel_count": c.kernel_count,
        "kernels": [{**asdict(k), "launch_shape": k.launch_shape} for k in c.kernels],
        "kernels_omitted": asdict(c.omitted) if c.omitted else None, "notes": list(c.notes),
        **call_engine_dict(c),
    }


def comm_row(tl: "RankTimeline | None") -> dict[str, Any] | None:
    """A file's communication against its attention compute as display strings (None: no collectives)."""
    if tl is None:
        return None
    share = tl.overlap_share
    return {"rank": "–" if tl.rank is None else str(tl.rank), "source": tl.comm_source, "span": fmt_us(tl.span_us),
            "compute": fmt_us(tl.compute_us), "comm": fmt_us(tl.comm_us), "overlap": fmt_us(tl.overlap_us),
            "overlap_share": "n/a" if share is None else f"{100 * share:.0f} %", "idle": fmt_us(tl.idle_us),
            "collectives": str(len(tl.ops)), "sent": fmt_bytes(tl.sent_bytes) if tl.sent_bytes is not None
            else f"{tl.sent_elements:,.0f} elements"}


def comm_text(label: str, tl: "RankTimeline") -> str:
    """One line for the terminal: a rank's communication, compute and their overlap."""
    r = comm_row(tl)
    return (f"{label}: communication {r['comm']} ({r['source']}, {r['collectives']} collectives, "
            f"sent {r['sent']}), attention {r['compute']}, overlap {r['overlap']} ({r['overlap_share']} of the "
            f"communication), idle {r['idle']} of {r['span']}")


def comm_lines(analysis: TraceSetAnalysis) -> list[str]:
    """One :func:`comm_text` line per file with collectives, labelled by its directory when the files lie in more
    than one (``"<cell> rank 0: communication …"``: profattn's ``traces/cp/<cell>/rank<r>…``)."""
    comm = analysis.comm or (None,) * len(analysis.files)
    groups = {trace_group(f.path) for f in analysis.files}
    lines = []
    for f, tl in zip(analysis.files, comm):
        if tl is None:
            continue
        group = trace_group(f.path)
        lines.append(comm_text(f"{group} {f.label}" if len(groups) > 1 and group else f.label, tl))
    return lines


def _comm_dict(tl: "RankTimeline | None") -> dict[str, Any] | None:
    if tl is None:
        return None
    d = asdict(tl)
    d.pop("path")
    return d


def analysis_to_dict(analysis: TraceSetAnalysis) -> dict[str, Any]:
    """The versioned JSON document: ``{"schema": "profattn.analysis", "schema_version": 2, "warnings": [...],
    "skipped": [...], "files": [...]}``; times in µs, sizes in bytes, missing values null. Top-level
    ``warnings`` are about the set of files (files skipped, duplicated ranks); ``skipped`` lists the files of
    a directory that could not be analyzed as ``{"path", "reason"}``; each file's ``warnings`` are ``{"code", "count", "message"}`` objects
    about that file (:class:`~profattn.trace.TraceWarning`). A call's ``workload`` is :meth:`Workload.to_dict`
    without ``kv_lens`` (``[kv_len] * batch`` for every call read from a trace)."""
    files = []
    memo: dict[Workload, dict[str, Any]] = {}
    comm = analysis.comm or (None,) * len(analysis.files)
    for f, tl in zip(analysis.files, comm):
        doc = {
            "communication": _comm_dict(tl),
            "path": f.path, "label": f.label, "rank": f.rank, "device_name": f.device_name, "num_sms": f.num_sms,
            "kernel_count": f.kernel_count, "gpu_time_us": f.gpu_time_us, "gpu_busy_us": f.gpu_busy_us,
            "notes": list(f.notes),
            "warnings": [asdict(w) for w in f.warnings],
        }
        for key, items, time in (("kernels", f.kernels, "total_us"), ("launch_shapes", f.launch_shapes, "total_us"),
                                 ("ops", f.ops, "total_us"), ("steps", f.steps, "gpu_time_us")):
            doc[key] = [asdict(x) for x in items[:JSON_LIST_LIMIT]]
            doc[f"{key}_omitted"] = _omitted(items[JSON_LIST_LIMIT:], lambda x, t=time: getattr(x, t))
        engine = engine_dict(f)
        steps = engine.pop("serving_steps")
        doc["serving_steps"] = steps[:JSON_LIST_LIMIT]
        doc["serving_steps_omitted"] = _omitted(steps[JSON_LIST_LIMIT:], lambda x: x["gpu_time_us"])
        merge = engine.get("graph_merge")
        if merge is not None and len(merge["launches"]) > JSON_LIST_LIMIT:
            launches = merge["launches"]
            merge["launches"] = launches[:JSON_LIST_LIMIT]
            merge["launches_omitted"] = {"count": len(launches) - JSON_LIST_LIMIT,
                                         "kernels": sum(m["kernels"] for m in launches[JSON_LIST_LIMIT:])}
        doc.update(engine)
        shown = _heaviest_calls(f.calls)
        doc["attention_calls"] = [_call_dict(c, memo) for c in shown]
        kept = {c.index for c in shown}
        doc["attention_calls_omitted"] = _omitted([c for c in f.calls if c.index not in kept], lambda c: c.gpu_time_us)
        groups = call_group_rows(f)
        doc["attention_call_groups"] = [{k: g[k] for k in ("op", "backend", "direction", "phase", "workload_tag", "calls",
                                                            "first", "total_us", "kernels_per_call")}
                                        for g in groups[:JSON_LIST_LIMIT]]
        doc["attention_call_groups_omitted"] = _omitted(groups[JSON_LIST_LIMIT:], lambda g: g["total_us"])
        files.append(doc)
    limits = {"call_kernels": CALL_KERNEL_LIMIT, "attention_calls": JSON_CALL_LIMIT, "rows": JSON_LIST_LIMIT}
    return _finite({"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "limits": limits,
                    "warnings": set_warnings(analysis), "skipped": [asdict(s) for s in analysis.skipped], "files": files})


def _heaviest_calls(calls: "tuple[AttentionCall, ...]", limit: int = JSON_CALL_LIMIT) -> list[AttentionCall]:
    """At most ``limit`` calls: the heaviest by GPU time (ties: the earliest), in trace order."""
    if len(calls) <= limit:
        return list(calls)
    keep = sorted(sorted(calls, key=lambda c: (-c.gpu_time_us, c.index))[:limit], key=lambda c: c.index)
    return keep


def _omitted(items: "list[Any] | tuple[Any, ...]", gpu_time: Any) -> dict[str, Any] | None:
    """``{"count", "gpu_time_us"}`` of the rows a list left out beyond its limit; None when it left none out."""
    if not items:
        return None
    return {"count": len(items), "gpu_time_us": float(sum(gpu_time(x) for x in items))}


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


def write_json(analysis: TraceSetAnalysis, path: str | os.PathLike[str]) -> Path:
    """Write :func:`analysis_to_dict` as JSON (no NaN: every missing value is null), atomically; returns
    the path.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    return write_text_atomic(path, json.dumps(analysis_to_dict(analysis), indent=1, allow_nan=False))


# ---- HTML ----------------------------------------------------------------------------------------


def _limited(rows: list[dict[str, Any]], limit: int = TABLE_LIMIT) -> dict[str, Any]:
    return {"rows": rows[:limit], "more": max(0, len(rows) - limit)}


def _first_rows(rows: Any, fa: TraceCalls, field: str, limit: int = TABLE_LIMIT) -> dict[str, Any]:
    """``rows(fa)`` for the first ``limit`` entries of ``fa.<field>`` only (a trace of 10⁶ distinct kernel names
    makes no 10⁶ rows to show 100), and how many it left out."""
    items = getattr(fa, field)
    return {"rows": rows(replace(fa, **{field: items[:limit]})), "more": max(0, len(items) - limit)}


def render_html(analysis: TraceSetAnalysis, *, title: str = "profattn trace analysis",
                ceilings: Ceilings | None = None) -> str:
    """The whole report as one self-contained HTML string (plotly.js inline once, no network access); ``ceilings``:
    a profattn run's measured roof, against which the serving steps' achieved rates are shown."""
    sections = []
    comm = analysis.comm or (None,) * len(analysis.files)
    for summary, fa, tl in zip(file_rows(analysis), analysis.files, comm):
        sections.append({
            **summary,
            "comm": comm_row(tl),
            "has_kernels": fa.has_gpu_kernels,
            "workloads": _limited(call_group_rows(fa)),
            "calls": {"rows": [_call_row(c) for c in fa.calls[:TABLE_LIMIT]], "more": max(0, len(fa.calls) - TABLE_LIMIT)},
            "chart": kernel_chart(fa),
            "kernel_table": _first_rows(kernel_rows, fa, "kernels"),
            "launch_table": _first_rows(launch_shape_rows, fa, "launch_shapes"),
            "op_table": _first_rows(op_rows, fa, "ops"),
            "steps": _first_rows(step_rows, fa, "steps"),
            "engine": engine_section(fa, ceilings, limit=TABLE_LIMIT),
        })
    ctx = {
        "title": title,
        "files": sections,
        "warnings": set_warnings(analysis),
        "schema_version": SCHEMA_VERSION,
        "json_call_limit": f"{JSON_CALL_LIMIT:,}",
    }
    return render("analyze", ctx)


def write_html(analysis: TraceSetAnalysis, path: str | os.PathLike[str], *, ceilings: Ceilings | None = None) -> Path:
    """Render and write the report; returns the path."""
    return write_html_file(render_html(analysis, ceilings=ceilings), path)
