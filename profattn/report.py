"""The HTML report: rows computed here (tests assert on them), HTML rendered by jinja2 (autoescaped),
charts by plotly with plotly.js embedded once, so the file opens offline.

Rows are plain dicts of display-ready values; every string that came from a trace or an exception is
escaped by jinja2's autoescape, and chart data travels as JSON through ``|tojson`` (which escapes
``<``, ``>`` and ``&``), never as raw HTML.
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from profattn.analysis import Verdict, verdict, winners
from profattn.results import CellResult, CellStatus, RunResult
from profattn.workload import Phase

PHASE_ORDER = [p.value for p in Phase]


# ---- formatting ----------------------------------------------------------------------------------


def fmt_us(v: float | None) -> str:
    """µs with a unit that keeps 3–4 significant digits ("55.8 µs", "2.21 ms"); "–" for None."""
    if v is None:
        return "–"
    if v >= 10_000:
        return f"{v / 1000:,.2f} ms"
    return f"{v:,.1f} µs" if v >= 10 else f"{v:.2f} µs"


def fmt_bytes(v: float | None) -> str:
    """Bytes in decimal units (MB = 1e6), "n/a" for None (e.g. peak memory on CPU)."""
    if v is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.1f} {unit}"
    return f"{v:,.0f} B"


def fmt_rate(v: float | None, unit: str, ceiling: float | None = None) -> str:
    """A rate with its unit and, when a measured ceiling exists, its fraction of it."""
    if v is None:
        return "–"
    s = f"{v:,.1f} {unit}" if v < 1000 else f"{v:,.0f} {unit}"
    return f"{s} ({v / ceiling:.0%})" if ceiling else s


def fmt_count(v: float | None) -> str:
    """Large counts with SI suffixes (tokens/s, FLOPs)."""
    if v is None:
        return "–"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.2f} {unit}"
    return f"{v:,.0f}"


def _shape(t: tuple[int, ...] | None) -> str:
    return "n/a" if t is None else "[" + ", ".join(str(x) for x in t) + "]"


# ---- rows ----------------------------------------------------------------------------------------


def workload_rows(run: RunResult) -> list[dict[str, Any]]:
    """One row per workload: the shape contract and its FLOP and byte ledgers."""
    seen: dict[str, dict[str, Any]] = {}
    for c in run.cells:
        w = c.workload
        if w.tag in seen:
            continue
        seen[w.tag] = {
            "tag": w.tag, "phase": w.phase.value, "batch": w.batch, "q_len": w.q_len, "kv_len": w.kv_len,
            "heads": f"{w.num_q_heads}/{w.num_kv_heads}", "group": w.group_size, "head_dim": w.head_dim,
            "dtype": w.dtype, "mask": w.mask.value, "layout": w.kv_layout.value,
            "flops": fmt_count(w.flops), "requested": fmt_bytes(w.requested_bytes), "kv_bytes": fmt_bytes(w.kv_bytes),
            "intensity": f"{w.arithmetic_intensity:,.1f}",
        }
    return list(seen.values())


def matrix_rows(run: RunResult) -> list[dict[str, Any]]:
    """The result matrix: one row per cell, display-ready, winners marked."""
    win = winners(run)
    copy = run.ceilings.copy_gbps if run.ceilings else None
    mm = run.ceilings.matmul_tflops if run.ceilings else None
    rows = []
    for c in sorted(run.cells, key=lambda c: (PHASE_ORDER.index(c.workload.phase.value), c.workload.kv_len)):
        t = c.graph_timing or c.timing
        corr = c.correctness
        grad = ", ".join(f"{k} {v:.1e}" for k, v in (corr.grad_rel_err or {}).items()) if corr else ""
        w_cell = win.get(c.workload.tag)
        rows.append({
            "cell_id": c.cell_id, "workload": c.workload.tag, "phase": c.workload.phase.value,
            "kv_len": c.workload.kv_len, "backend": c.backend, "status": c.status, "reason": c.reason,
            "winner": w_cell is not None and w_cell.cell_id == c.cell_id,
            "latency": fmt_us(t.median_us) if t else "–",
            "latency_kind": "graph" if c.graph_timing else ("eager" if t else ""),
            "eager": fmt_us(c.eager_latency_us),
            "spread": f"{fmt_us(t.p10_us)} – {fmt_us(t.p90_us)}, {t.reps} reps" if t else "",
            "latency_us": t.median_us if t else None,
            "gpu_time": fmt_us(c.trace.gpu_time_per_call_us) if c.trace else "–",
            "tokens_per_s": fmt_count(c.tokens_per_s),
            "peak_mem": fmt_bytes(c.peak_mem_bytes) if t else "–",
            "tflops": fmt_rate(c.achieved_tflops, "TFLOP/s", mm),
            "gbps": fmt_rate(c.achieved_gbps, "GB/s", copy),
            "out_err": f"{corr.out_rel_err:.1e}" if corr else "–",
            "grad_err": grad,
            "tolerance": f"{corr.tolerance:g}" if corr else "",
            "kernels_per_call": f"{c.trace.kernels_per_call:g}" if c.trace else "–",
            "family_ok": None if c.trace is None else c.trace.family_ok,
            "family_note": c.trace.family_note if c.trace else "",
            "notes": "; ".join(c.notes),
        })
    return rows


def launch_rows(run: RunResult) -> dict[str, list[dict[str, Any]]]:
    """Per regime: every kernel each cell launched, with its launch shape from the trace."""
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in PHASE_ORDER}
    for c in run.cells:
        if c.trace is None:
            continue
        for k in c.trace.kernels:
            out[c.workload.phase.value].append({
                "cell_id": c.cell_id, "workload": c.workload.tag, "backend": c.backend, "kernel": k.name,
                "count": f"{k.count_per_call:g}", "time": fmt_us(k.dur_us_per_call), "grid": _shape(k.grid),
                "block": _shape(k.block), "ctas": "n/a" if k.ctas is None else f"{k.ctas:,}",
                "registers": "n/a" if k.registers_per_thread is None else str(k.registers_per_thread),
                "smem": fmt_bytes(k.shared_mem_bytes),
                "blocks_per_sm": "n/a" if k.blocks_per_sm is None else f"{k.blocks_per_sm:.2f}",
                "occupancy": "n/a" if k.est_occupancy_pct is None else f"{k.est_occupancy_pct:.0f}%",
                "trace_file": c.trace.trace_file,
            })
    return {p: rows for p, rows in out.items() if rows}


def environment_rows(run: RunResult) -> list[tuple[str, str]]:
    """(label, value) pairs for the environment table."""
    e = run.environment
    rows = [
        ("device", f"{e.device_name} ({e.device})"), ("SMs", str(e.num_sms or "n/a")),
        ("L2 cache", fmt_bytes(e.l2_cache_bytes)), ("memory", fmt_bytes(e.total_memory_bytes)),
        ("driver", e.driver or "n/a"), ("torch", e.torch), ("CUDA", e.cuda or "n/a"), ("cuDNN", e.cudnn or "n/a"),
        ("triton", e.triton or "n/a"), ("python", e.python), ("platform", e.platform),
        ("profattn", e.profattn), ("measured (UTC)", e.created_utc),
        ("preset", f"{run.preset}: {run.preset_description}"),
    ]
    if run.ceilings:
        c = run.ceilings
        rows.append(("copy ceiling", f"{c.copy_gbps:,.0f} GB/s ({fmt_bytes(c.copy_bytes)} device-to-device copy, read + write)"))
        rows.append(("GEMM ceiling", f"{c.matmul_tflops:,.0f} TFLOP/s ({c.dtype} {c.matmul_n}³)"))
    else:
        rows.append(("ceilings", "not measured (CPU run): rates are shown without a fraction of a ceiling"))
    return rows


# ---- charts --------------------------------------------------------------------------------------


def _ok(c: CellResult) -> bool:
    return c.timing is not None and c.status in (CellStatus.OK, CellStatus.INCORRECT)


def chart_figures(run: RunResult) -> list[dict[str, Any]]:
    """Plotly figures as JSON-ready dicts: latency per backend per regime; decode latency and K/V GB/s vs kv_len."""
    import plotly.graph_objects as go

    figs: list[tuple[str, str, go.Figure]] = []
    backends = list(dict.fromkeys(c.backend for c in run.cells))
    tags = list(dict.fromkeys(c.workload.tag for c in sorted(run.cells, key=lambda c: (PHASE_ORDER.index(c.workload.phase.value), c.workload.kv_len))))
    lat = go.Figure()
    for b in backends:
        cells = {c.workload.tag: c for c in run.cells if c.backend == b and _ok(c)}
        if cells:
            lat.add_bar(name=b, x=[t for t in tags if t in cells], y=[cells[t].latency_us for t in tags if t in cells],
                        hovertemplate="%{x}<br>" + b + ": %{y:.1f} µs<extra></extra>")
    lat.update_layout(barmode="group", yaxis_type="log", yaxis_title="median latency (µs, log)", title="Latency per backend and workload",
                      legend_title="backend", margin=dict(b=160))
    figs.append(("latency", "Latency per backend and workload", lat))
    decode = [c for c in run.cells if c.workload.phase is Phase.DECODE and _ok(c)]
    if decode:
        dl, bw = go.Figure(), go.Figure()
        for b in backends:
            pts = sorted((c for c in decode if c.backend == b), key=lambda c: c.workload.kv_len)
            if not pts:
                continue
            x = [c.workload.kv_len for c in pts]
            dl.add_scatter(name=b, x=x, y=[c.latency_us for c in pts], mode="lines+markers")
            bw.add_scatter(name=b, x=x, y=[c.kv_gbps for c in pts], mode="lines+markers")
        if run.ceilings:
            bw.add_hline(y=run.ceilings.copy_gbps, line_dash="dash", annotation_text=f"measured copy {run.ceilings.copy_gbps:,.0f} GB/s")
        dl.update_layout(title="Decode latency vs KV length", xaxis_type="log", yaxis_type="log", xaxis_title="kv_len", yaxis_title="median latency (µs)")
        bw.update_layout(title="Decode: achieved K/V bandwidth vs KV length", xaxis_type="log", xaxis_title="kv_len", yaxis_title="K/V bytes / latency (GB/s)")
        figs.append(("decode-latency", "Decode latency vs KV length", dl))
        figs.append(("decode-bandwidth", "Decode K/V bandwidth vs KV length", bw))
    return [{"id": fid, "title": title, "figure": json.loads(fig.to_json())} for fid, title, fig in figs]


# ---- rendering -----------------------------------------------------------------------------------


def templates_dir() -> Path:
    """Where ``report.html.j2`` lives: inside the installed package (``profattn/templates``, mapped from the
    repository's top-level ``templates/`` by pyproject), else the repository's ``templates/``."""
    try:
        pkg = resources.files("profattn.templates")
        if pkg.joinpath("report.html.j2").is_file():
            return Path(str(pkg))
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[1] / "templates"


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


@functools.lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render_html(run: RunResult, *, title: str = "profattn report") -> str:
    """The whole report as one self-contained HTML string (plotly.js inline, no network access)."""
    v: Verdict = verdict(run)
    ctx = {
        "title": title,
        "run": run,
        "environment": environment_rows(run),
        "workloads": workload_rows(run),
        "matrix": matrix_rows(run),
        "launches": launch_rows(run),
        "verdict": v,
        "charts": chart_figures(run),
        "plotly_js": _plotly_js(),
        "statuses": CellStatus,
        "default_note": "the default preset for this device" if run.preset == ("seed" if run.environment.device == "cuda" else "small") else "chosen explicitly",
    }
    return _env().get_template("report.html.j2").render(**ctx)


def write_report(run: RunResult, path: str | os.PathLike[str]) -> Path:
    """Render and write the report; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(run), encoding="utf-8")
    return path
