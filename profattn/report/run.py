"""The run report (``profattn profile``/``report``): display rows formatted here from one
:class:`~profattn.analysis.run.analyze.RunAnalysis` (tests assert on them), charts by plotly, the page rendered by
:func:`profattn.report.render.render` (``report.html.j2``, autoescaped, plotly.js embedded once, so the file opens
offline). Numbers are formatted by :mod:`profattn.report.format`. Nothing here ranks, compares or re-derives: the
winners, ties, verdict, mechanisms, ledgers and sections all come from the analysis.

Rows are plain dicts of display-ready values; every string that came from a trace or an exception is
escaped by jinja2's autoescape, and chart data travels as JSON through ``|tojson`` (which escapes
``<``, ``>`` and ``&``), never as raw HTML.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profattn.analysis.run.analyze import MatrixCell, RunAnalysis, analyze_run
from profattn.analysis.run.noise import NoiseKind
from profattn.analysis.run.reattach import TraceProblem, TraceProblemKind
from profattn.interfaces import Layout
from profattn.report.format import (
    chart_text,
    flops_unit,
    fmt_bytes,
    fmt_count,
    fmt_isolation,
    fmt_err,
    fmt_flops_rate,
    fmt_opt,
    fmt_rate,
    fmt_shape,
    fmt_sig,
    fmt_span,
    fmt_us,
    safe_chart,
    launch_cells,
    short_kernel_name,
)
from profattn.report.render import render, write_html_file
from profattn.results import CellResult, CellStatus, RunResult
from profattn.workload import KVLayout, Phase

#: A table with more rows than this opens collapsed (its summary line says what it holds), so a long run's page
#: stays readable; the verdict carries the findings these tables hold.
COLLAPSE_ROWS = 12


# ---- rows ----------------------------------------------------------------------------------------


def workload_labels(a: RunAnalysis) -> dict[str, str]:
    """Workload tag → its short label (:func:`profattn.report.verdict.workload_label`, e.g.
    ``"decode kv 8192 (B=4, page 16)"``); where two workloads of the run share a label (they differ in a
    field the label leaves out, such as heads or dtype) that field is appended
    (:func:`profattn.report.verdict.distinct_labels`)."""
    from profattn.report.verdict import distinct_labels

    return distinct_labels(a.workloads)


def workload_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """One row per workload of the run: the shape contract and its FLOP and byte ledgers. Not
    :func:`profattn.report.analyze.call_group_rows` (attention calls found in a trace, grouped)."""
    labels = workload_labels(a)
    return [{
        "tag": w.tag, "label": labels[w.tag], "phase": w.phase.value, "batch": w.batch, "q_len": w.q_len,
        "kv_len": w.kv_len, "heads": f"{w.num_q_heads}/{w.num_kv_heads}", "group": w.group_size,
        "head_dim": w.head_dim, "dtype": w.dtype, "mask": w.mask.value, "layout": w.kv_layout.value,
        "flops": fmt_count(w.flops), "requested": fmt_bytes(w.requested_bytes), "kv_bytes": fmt_bytes(w.kv_bytes),
        "intensity": f"{w.arithmetic_intensity:,.1f}",
    } for w in a.workloads]


def matrix_columns(a: RunAnalysis) -> dict[str, Any]:
    """Which of the detail table's optional columns carry anything in this run, and the FLOP-rate unit
    of its rate column: ``eager`` (some cell was CUDA-graph replayed, so eager differs from latency),
    ``gpu_time`` and ``kernels`` (some trace recorded device kernels), ``peak_mem`` (some cell measured
    its peak), ``grad_err`` (some cell checked gradients), ``family`` (some cell has trace evidence);
    ``flops_unit``: ``"TFLOP/s"`` or ``"GFLOP/s"`` (:func:`profattn.report.format.flops_unit`), the unit
    of every value under the header. A CPU run shows none of the device-only columns."""
    cells = a.run.cells
    return {
        "eager": any(c.graph_timing is not None for c in cells),
        "gpu_time": any(c.trace is not None and c.trace.gpu_time_per_call_us is not None for c in cells),
        "kernels": any(c.trace is not None and c.trace.kernels_per_call for c in cells),
        "peak_mem": any(c.peak_mem_over_inputs_bytes is not None for c in cells),
        "grad_err": any(c.correctness is not None and c.correctness.grad_rel_err for c in cells),
        "family": any(c.trace is not None for c in cells),
        "flops_unit": flops_unit(c.achieved_tflops for c in cells),
    }


def layout_text(m: MatrixCell) -> str:
    """What a cell's kernel read (:func:`profattn.report.mechanisms.layout_name`)."""
    from profattn.report.mechanisms import layout_name

    return layout_name(m.layout, paged_workload=m.cell.workload.kv_layout is KVLayout.PAGED)


def matrix_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """The per-cell detail table under the result matrix: one row per cell, display-ready, winners
    marked; ``spread`` and ``grad_err`` are lists of lines. Rates are bare numbers in the unit their header carries (:func:`matrix_columns`:
    ``flops_unit`` for ``tflops``, GB/s for ``gbps``), three significant digits, with the fraction of the
    run's measured ceiling where one exists."""
    run = a.run
    roof = run.ceilings.bandwidth_gbps if run.ceilings else None  # the read stream where measured
    mm = run.ceilings.matmul_tflops if run.ceilings else None
    unit = matrix_columns(a)["flops_unit"]
    labels = workload_labels(a)
    not_read: dict[str, list[str]] = {}
    for p in a.trace_problems:
        not_read.setdefault(p.cell_id, []).append(trace_problem_text(p))
    rows = []
    for m in a.matrix:
        c = m.cell
        t = c.judged_timing
        corr = c.correctness
        grads = [f"{k} {v:.1e}" for k, v in (corr.grad_rel_err or {}).items()] if corr else []
        rows.append({
            "cell_id": c.cell_id, "workload": labels[c.workload.tag], "tag": c.workload.tag,
            "phase": c.workload.phase.value, "kv_len": c.workload.kv_len, "backend": c.backend,
            "status": c.status.value, "reason": c.reason, "winner": m.winner, "layout": layout_text(m),
            "latency": fmt_us(t.median_us) if t else "–",
            "latency_kind": "graph" if c.graph_timing else ("eager" if t else ""),
            "eager": fmt_us(c.eager_latency_us),
            "spread": [fmt_span(t.p10_us, t.p90_us, t.median_us), f"{t.reps} reps"] + (
                [f"{len(c.latency_samples_us)} repeats' medians {fmt_span(min(c.latency_samples_us), max(c.latency_samples_us), t.median_us)}"]
                if len(c.latency_samples_us) > 1 else []) if t else [],
            "latency_us": t.median_us if t else None,
            "gpu_time": fmt_us(c.trace.gpu_time_per_call_us) if c.trace else "–",
            "tokens_per_s": fmt_count(c.tokens_per_s),
            "peak_mem": (fmt_bytes(c.peak_mem_over_inputs_bytes + c.workload.input_bytes)
                         if c.peak_mem_over_inputs_bytes is not None else ("n/a" if t else "–")),
            "peak_mem_device": fmt_bytes(c.peak_mem_bytes) if c.peak_mem_bytes is not None else "",
            "tflops": fmt_flops_rate(c.achieved_tflops, mm, unit=unit, bare=True),
            "gbps": fmt_rate(c.achieved_gbps, "GB/s", roof, bare=True),
            "out_err": fmt_err(corr.out_rel_err if corr else None),
            "quant_err": fmt_err(corr.quant_rel_err) if corr and corr.quant_rel_err is not None else "",
            "isolation": fmt_isolation(corr.isolated) if corr else "",
            "grad_err": grads,
            "tolerance": f"{corr.tolerance:g}" if corr else "",
            "kernels_per_call": f"{c.trace.kernels_per_call:g}" if c.trace else "–",
            "family_ok": None if c.trace is None else c.trace.family_ok,
            "family_note": c.trace.family_note if c.trace else "",
            "notes": "; ".join([*c.notes, *filter(None, [sdpa_mask_path_text(m)]), *not_read.get(c.cell_id, ())]),
        })
    return rows


def sdpa_mask_path_text(m: MatrixCell) -> str | None:
    """For an SDPA cell whose workload reaches SDPA as an explicit boolean mask (a sliding window, or a
    variable-length call padded to the longest sequence), which SDPA path ran, read from the cell's trace
    (:attr:`profattn.analysis.run.analyze.MatrixCell.sdpa`): e.g. ``sliding window 4096 as an explicit mask: SDPA ran the
    math path (aten::_scaled_dot_product_attention_math; dominant kernel gemvx::kernel)``. None for other cells, or
    when the trace names no SDPA backend op."""
    p = m.sdpa
    if p is None:
        return None
    what = " and ".join(filter(None, [f"sliding window {p.window}" if p.window is not None else "",
                                      "per-sequence lengths" if p.varlen else ""]))
    ran = "the math path" if p.path == "math" else p.path
    top = f"; dominant kernel {short_kernel_name(p.dominant_kernel)}" if p.dominant_kernel else ""
    return f"{what} as an explicit mask: SDPA ran {ran} ({p.op}{top})"


def _grid_cell(m: MatrixCell, label: str, graph: bool, winner_backend: str | None) -> dict[str, Any]:
    """One cell of the result matrix: ``kind`` (its CSS class: winner, tie, ok, incorrect, flagged,
    error, pending, unsupported), ``latency`` (first line), ``sub`` (the compact second line as pieces that
    never break inside: ratio to the workload's winner, ties, error or status) and ``title`` (everything, on
    hover)."""
    c = m.cell
    t = c.judged_timing
    corr = c.correctness
    err = fmt_err(corr.out_rel_err if corr else None)
    how = (" (CUDA-graph replay; eager " + fmt_us(c.eager_latency_us) + ")") if c.graph_timing else (
        " (eager launches)" if graph and t else "")
    title = [f"{c.backend} on {label}: {c.status.value}; reads the {layout_text(m)}"]
    if t:
        title.append(f"latency {fmt_us(t.median_us)}{how}, p10–p90 {fmt_span(t.p10_us, t.p90_us, t.median_us)}")
    if corr:
        title.append(f"error {err} (tolerance {corr.tolerance:g})")
    if c.trace is not None and c.trace.family_ok is False:
        title.append("kernels outside the backend's family: " + c.trace.family_note)
    if (path := sdpa_mask_path_text(m)) is not None:
        title.append(path)
    if c.reason:
        title.append(c.reason)
    cell: dict[str, Any] = {"backend": c.backend, "cell_id": c.cell_id, "latency": fmt_us(t.median_us) if t else "",
                            "sub": [], "footnote": None}
    if c.status is CellStatus.UNSUPPORTED:
        cell.update(kind="unsupported", latency="n/s")
    elif c.status is CellStatus.PENDING:
        cell.update(kind="pending", latency="pending")
    elif c.status is CellStatus.ERROR:
        reason = c.reason.split(":", 1)[0][:40]
        cell.update(kind="error", latency="error", sub=[reason])
    elif c.status is CellStatus.INCORRECT:
        cell.update(kind="incorrect", sub=["incorrect", f"err {err}"])
    elif c.trace is not None and c.trace.family_ok is False:
        cell.update(kind="flagged", sub=["✗ family", f"err {err}"])
    elif m.winner and m.ties:
        title.append(f"fastest, but within noise of {', '.join(m.ties)}: a tie, not a win")
        cell.update(kind="winner", sub=["tie", f"err {err}"])
    elif m.winner:
        title.append("winner: the fastest correct cell of this workload whose kernels belong to its backend's family")
        cell.update(kind="winner", sub=[f"err {err}"])
    elif m.ratio is not None:
        if m.tie:
            title.append(f"within noise of the winner {winner_backend}")
        cell.update(kind="tie" if m.tie else "ok", sub=[f"{'≈ ' if m.tie else ''}{m.ratio:.2f}×", f"err {err}"])
    else:
        cell.update(kind="ok", sub=[f"err {err}"])
    cell["title"] = "\n".join(title)
    return cell


def matrix_grid(a: RunAnalysis) -> dict[str, Any]:
    """The result matrix as it fits a screen: one row per workload (its short label), one column per
    backend, each cell its latency with the winner marked and a compact second line (see
    :func:`_grid_cell`). Unsupported cells collapse into a per-workload footnote (identical footnotes
    share a number); a backend unsupported for every workload gets no column and is listed in ``hidden``.

    Returns:
        ``backends`` (column order), ``colors`` (:func:`profattn.report.palette.backend_colors`),
        ``rows`` (``label``, ``tag``, ``footnote`` number or None, ``cells`` aligned with ``backends``; a
        backend not run for a workload has ``kind`` "absent"), ``footnotes`` (``n``, ``workloads``,
        ``text``), ``hidden`` (``backend``, ``text``), ``graph`` (some cell was CUDA-graph replayed).
    """
    from profattn.report.palette import backend_colors

    run = a.run
    all_backends = list(a.backends)
    unsupported_everywhere = [b for b in all_backends
                              if all(c.status is CellStatus.UNSUPPORTED for c in run.cells if c.backend == b)]
    backends = [b for b in all_backends if b not in unsupported_everywhere]
    labels = workload_labels(a)
    graph = any(c.graph_timing is not None for c in run.cells)
    by_tag: dict[str, dict[str, MatrixCell]] = {}
    for m in a.matrix:
        by_tag.setdefault(m.cell.workload.tag, {})[m.cell.backend] = m
    footnotes: dict[str, dict[str, Any]] = {}
    rows = []
    for wl in a.workloads:
        label = labels[wl.tag]
        cells = by_tag.get(wl.tag, {})
        best = a.winners.get(wl.tag)
        out = []
        for b in backends:
            if b not in cells:
                out.append({"backend": b, "cell_id": "", "kind": "absent", "latency": "·", "sub": [],
                            "title": f"{b} was not run on {label}", "footnote": None})
                continue
            out.append(_grid_cell(cells[b], label, graph, best.backend if best else None))
        reasons: dict[str, list[str]] = {}
        for b in backends:
            if b in cells and cells[b].cell.status is CellStatus.UNSUPPORTED:
                reasons.setdefault(cells[b].cell.reason or "no reason given", []).append(b)
        n = None
        if reasons:
            text = "; ".join(f"{', '.join(bs)}: {r}" for r, bs in reasons.items())
            note = footnotes.setdefault(text, {"n": len(footnotes) + 1, "workloads": [], "text": text})
            note["workloads"].append(label)
            n = note["n"]
            for cell in out:
                if cell["kind"] == "unsupported":
                    cell["footnote"] = n
        rows.append({"label": label, "tag": wl.tag, "footnote": n, "cells": out})
    hidden = []
    for b in unsupported_everywhere:
        first = next(m.cell for m in a.matrix if m.cell.backend == b)
        others = {c.reason for c in run.cells if c.backend == b} - {first.reason}
        hidden.append({"backend": b, "text": (first.reason or "no reason given") + (
            f" (on {labels[first.workload.tag]}; the detail table has each workload's reason)" if others else "")})
    return {
        "backends": backends, "colors": backend_colors(all_backends), "rows": rows, "graph": graph,
        "footnotes": [{**f, "workloads": ", ".join(f["workloads"])} for f in footnotes.values()],
        "hidden": hidden,
    }


#: The dominant kernels shown per cell: the top one, and the second when it holds at least this share of
#: the cell's GPU time.
SECOND_KERNEL_SHARE = 0.10


def launch_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Per traced cell (matrix order): its dominant kernels — the top one by GPU time per call, and the
    second when it holds at least :data:`SECOND_KERNEL_SHARE` of the cell's GPU time — with the name
    shortened (:func:`profattn.report.format.short_kernel_name`), grid, block, CTAs per SM (CTAs / the
    run's SMs; Kineto's blocks per SM without an SM count) and share of the cell's GPU time; ``kernels``:
    every kernel the cell launched per call with its full launch shape from the trace; ``workload_span``:
    the table rows the workload's label spans on its first cell (0 on the others). Not
    :func:`profattn.report.analyze.launch_shape_rows` (distinct shapes in any one trace file)."""
    sms = a.run.environment.num_sms
    labels = workload_labels(a)
    out = []
    for m in a.matrix:
        c = m.cell
        if c.trace is None or not c.trace.kernels:
            continue
        total = c.trace.gpu_time_per_call_us or sum(k.dur_us_per_call for k in c.trace.kernels)
        ranked = sorted(c.trace.kernels, key=lambda k: -k.dur_us_per_call)
        top = ranked[:1] + [k for k in ranked[1:2] if total and k.dur_us_per_call / total >= SECOND_KERNEL_SHARE]
        out.append({
            "cell_id": c.cell_id, "workload": labels[c.workload.tag], "backend": c.backend,
            "phase": c.workload.phase.value, "trace_file": c.trace.trace_file, "gpu_time": fmt_us(total),
            "dominant": [{
                "kernel": short_kernel_name(k.name), "full_name": k.name, "count": f"{k.count_per_call:g}",
                "time": fmt_us(k.dur_us_per_call), "grid": fmt_shape(k.grid), "block": fmt_shape(k.block),
                "ctas_per_sm": fmt_opt(k.ctas / sms if k.ctas is not None and sms else k.blocks_per_sm, ".2f"),
                "share": f"{k.dur_us_per_call / total:.0%}" if total else "–",
            } for k in top],
            "kernels": [{
                "kernel": k.name, "count": f"{k.count_per_call:g}", "time": fmt_us(k.dur_us_per_call),
                **launch_cells(k.grid, k.block, ctas=k.ctas, registers=k.registers_per_thread,
                               smem_bytes=k.shared_mem_bytes, blocks_per_sm=k.blocks_per_sm),
                # Kineto writes 0 for some kernels that ran (seen with 131–219 kB of shared memory): unknown, not 0
                "occupancy": "n/a" if not k.est_occupancy_pct else f"{k.est_occupancy_pct:.0f}%",
            } for k in ranked],
        })
    # the workload label spans all rows of its cells (each cell: its dominant kernels + the "all kernels" row)
    for i, r in enumerate(out):
        first = i == 0 or out[i - 1]["workload"] != r["workload"]
        r["workload_span"] = sum(len(x["dominant"]) + 1 for x in out[i:] if x["workload"] == r["workload"]) if first else 0
    return out


def ledger_rows(a: RunAnalysis) -> dict[str, list[dict[str, Any]]]:
    """Per regime: the byte ledger (requested vs DRAM vs L2→SM) and the FLOP ledger of every timed cell
    (:attr:`RunAnalysis.ledgers`). Transferred columns stay "not measured" unless counters were read for that cell."""
    from profattn.report.verdict import ledger_note

    labels = workload_labels(a)
    return {phase.value: [{
        "cell_id": e.cell.cell_id, "workload": labels[e.cell.workload.tag], "backend": e.cell.backend,
        "requested": fmt_bytes(bl.requested_bytes), "kv": fmt_bytes(bl.kv_bytes),
        "kv_extra": f"+ scales {fmt_bytes(bl.scale_bytes)}" if bl.scale_bytes else "",
        "flops_extra": "; ".join(
            ([f"+ {fmt_count(fl.dequant_ops)} dequant multiplies"] if fl.dequant_ops else [])
            + ([f"{fmt_count(fl.executed_flops)} executed (padding: {fl.executed_flops / fl.flops:.2f}× the work)"]
               if fl.executed_flops is not None and fl.flops else [])),
        "dram": fmt_bytes(bl.dram_bytes) if bl.dram_bytes is not None else "not measured",
        "l2": fmt_bytes(bl.l2_to_sm_bytes) if bl.l2_to_sm_bytes is not None else "not measured",
        "dram_ratio": f"{bl.dram_ratio:.2f}×" if bl.dram_ratio is not None else "–",
        "l2_ratio": f"{bl.l2_ratio:.2f}×" if bl.l2_ratio is not None else "–",
        "redundant": bl.redundant, "l2_rereads": bl.l2_rereads, "note": ledger_note(bl) if e.cell.counters else "",
        "flops": fmt_count(fl.flops), "tflops": fmt_flops_rate(fl.achieved_tflops),
        "tflops_frac": f"{fmt_sig(100 * fl.fraction_of_ceiling, 2)}%" if fl.fraction_of_ceiling is not None else "–",
    } for e in entries for bl, fl in [(e.bytes, e.flops)]] for phase, entries in a.ledgers.items()}


def counter_kernel_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """Kernel-level counters, with ncu's launch shape beside the trace's (they must agree:
    :attr:`RunAnalysis.counters`)."""
    labels = workload_labels(a)
    rows = []
    for m in a.counters:
        k, t, c = m.kernel, m.traced, m.cell
        rows.append({
            "workload": labels[c.workload.tag], "backend": c.backend, "kernel": k.name,
            "ncu_grid": fmt_shape(k.grid), "ncu_block": fmt_shape(k.block),
            "ncu_regs": "n/a" if k.registers_per_thread is None else str(k.registers_per_thread),
            "ncu_smem": fmt_bytes((k.shared_mem_dynamic_bytes or 0) + (k.shared_mem_static_bytes or 0)),
            "trace_grid": (fmt_shape(k.grid) if m.agree else fmt_shape(t.grid)) if t else "not in trace",
            "trace_block": (fmt_shape(k.block) if m.agree else fmt_shape(t.block)) if t else "",
            "agree": m.agree, "dram": fmt_bytes((k.dram_read_bytes or 0) + (k.dram_write_bytes or 0)),
            "l2": fmt_bytes(k.l2_to_sm_read_bytes), "time": fmt_us(k.gpu_time_us),
            "waves": fmt_opt(k.waves_per_sm, ".2f"),
        })
    return rows


def crossover_rows(a: RunAnalysis) -> list[dict[str, Any]]:
    """For each (batch, page_size) series of uniform decode workloads (:attr:`RunAnalysis.series`): the winner at
    each kv_len (with the backends tied with it by the verdict's noise rule) and where the winner changes. A change
    counts as a crossover only beyond noise: the new winner is not tied with the old one at either kv_len. ``kernels``:
    which ranking (all kernels, or one cache layout's where the workloads are answered per layout)."""
    rows = []
    for s in a.series:
        changes = [f"{x} → {y} between kv {ka} and {kb}" for ka, kb, x, y in s.changes]
        noisy = [f"{x} → {y} between kv {ka} and {kb}" for ka, kb, x, y in s.noisy]
        text = "; ".join(changes) if changes else "none beyond noise"
        if noisy:
            text += " (the fastest changes only within noise: " + "; ".join(noisy) + ")"
        elif not changes:
            text = "none: the same winner at every kv_len"
        rows.append({
            "batch": s.batch, "page_size": s.page_size or "dense",
            "kernels": {None: "all", Layout.PAGED: "paged kernels (page pool)",
                        Layout.CONTIGUOUS: "contiguous-copy kernels"}.get(s.layout, s.layout.value if s.layout else "all"),
            "winners": ", ".join(f"kv {p.kv_len}: {p.winner or 'none'}" + (f" {fmt_us(p.latency_us)}" if p.latency_us else "")
                                 + (f" ≈ {', '.join(p.tied)}" if p.tied else "") for p in s.points),
            "crossovers": text,
        })
    return rows


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
    def load(la: tuple[float, float, float] | None) -> str:
        return "n/a" if la is None else " / ".join(f"{x:.2f}" for x in la)

    rows += [("CPUs", str(e.cpu_count or "n/a")),
             ("intra-op threads", f"{e.torch_threads if e.torch_threads is not None else 'n/a'}"
              + (f" (OMP_NUM_THREADS={e.omp_num_threads})" if e.omp_num_threads else "")),
             ("load (1 / 5 / 15 min)", f"{load(e.load_avg_start)} at the start, {load(e.load_avg_end)} at the end")]
    if run.repeat > 1:
        rows.append(("timing samples", f"{run.samples_text()} independent samples per cell (--repeat), each a median of many reps"))
    if e.hostname or e.user:
        rows.append(("host", " / ".join(x for x in (e.hostname, e.user) if x) + " (--keep-host-info)"))
    if run.ceilings:
        c = run.ceilings
        if c.read_gbps:
            rows.append(("read ceiling", f"{c.read_gbps:,.0f} GB/s ({fmt_bytes(c.read_bytes)} read-only stream, {c.read_method}): "
                         "the roof every bandwidth fraction uses"))
        rows.append(("copy ceiling", f"{c.copy_gbps:,.0f} GB/s ({fmt_bytes(c.copy_bytes)} device-to-device copy, read + write)"
                     + ("" if c.read_gbps else ": the roof bandwidth fractions use (no read ceiling in this run)")))
        rows.append(("GEMM ceiling", f"{c.matmul_tflops:,.0f} TFLOP/s ({c.dtype} {c.matmul_n}³)"))
    else:
        rows.append(("ceilings", "not measured (CPU run): rates are shown without a fraction of a ceiling"))
    return rows


# ---- charts --------------------------------------------------------------------------------------


def _decode_groups(a: RunAnalysis) -> dict[tuple[int, int, str], list[CellResult]]:
    """Timed uniform-length decode cells grouped by (batch, page_size, backend); sliding-window cells and
    variable-length calls are left out (their kv_len is not what they read)."""
    groups: dict[tuple[int, int, str], list[CellResult]] = {}
    for c in a.timed_cells():
        w = c.workload
        if w.phase is Phase.DECODE and not w.is_ragged and not w.is_varlen and not w.shared_prefix_len and w.window is None:
            groups.setdefault((w.batch, w.page_size or 0, c.backend), []).append(c)
    return {k: sorted(v, key=lambda c: c.workload.kv_len) for k, v in groups.items()}


def chart_figures(a: RunAnalysis) -> list[dict[str, Any]]:
    """Plotly figures as JSON-ready dicts: latency per backend and workload; decode latency and K/V GB/s
    against kv_len (one panel per batch size, each panel's roof line labelled); the page-size effect; the roofline.
    Every backend has one colour in all of them (:func:`profattn.report.palette.backend_colors` over the run's
    backends)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from profattn.report.palette import backend_colors

    run = a.run
    figs: list[tuple[str, str, go.Figure]] = []
    backends = list(a.backends)
    colors = backend_colors(backends)
    labels = workload_labels(a)
    tags = [w.tag for w in a.workloads]
    timed = a.timed_cells()
    if len(tags) <= 12:
        lat = go.Figure()
        for b in backends:
            cells = {c.workload.tag: c for c in timed if c.backend == b}
            if cells:
                xs = [t for t in tags if t in cells]
                lat.add_bar(name=b, x=[labels[t] for t in xs], y=[cells[t].latency_us for t in xs], marker_color=colors[b],
                            hovertemplate="%{x}<br>" + chart_text(b) + ": %{y:.1f} µs<extra></extra>")
        lat.update_layout(barmode="group", yaxis_type="log", yaxis_title="median latency (µs, log)",
                          title="Latency per backend and workload", legend_title="backend")
        figs.append(("latency", "Latency per backend and workload", lat))
    groups = _decode_groups(a)
    if groups:
        batches = sorted({b for b, _, _ in groups})
        page = min(p for _, p, _ in groups)  # panels at the smallest page size; its effect has its own chart
        dl = make_subplots(rows=1, cols=len(batches), subplot_titles=[f"batch {b}" for b in batches], shared_yaxes=True)
        bw = make_subplots(rows=1, cols=len(batches), subplot_titles=[f"batch {b}" for b in batches], shared_yaxes=True)
        for i, batch in enumerate(batches, start=1):
            for b in backends:
                pts = groups.get((batch, page, b))
                if not pts:
                    continue
                x = [c.workload.kv_len for c in pts]
                common = dict(name=b, legendgroup=b, showlegend=i == 1, mode="lines+markers", line=dict(color=colors[b]))
                dl.add_scatter(x=x, y=[c.latency_us for c in pts], row=1, col=i, **common)
                bw.add_scatter(x=x, y=[c.kv_gbps for c in pts], row=1, col=i, **common)
            if run.ceilings:
                ceil = run.ceilings
                # every panel's line is labelled: plotly writes its "new text" placeholder on an annotation without text
                bw.add_hline(y=ceil.bandwidth_gbps, line_dash="dash", row=1, col=i,
                             annotation_text=f"{ceil.bandwidth_kind} {ceil.bandwidth_gbps:,.0f} GB/s",
                             annotation_position="bottom right")
        kv_ticks = sorted({c.workload.kv_len for cs in groups.values() for c in cs})
        for fig in (dl, bw):
            fig.update_xaxes(type="log", tickvals=kv_ticks, ticktext=[str(t) for t in kv_ticks], title_text="kv_len")
        dl.update_yaxes(type="log", title_text="median latency (µs)", col=1)
        bw.update_yaxes(title_text="unique K/V bytes / latency (GB/s)", col=1)
        suffix = f" (page size {page})" if page else ""
        dl.update_layout(title=f"Decode latency vs KV length{suffix}")
        bw.update_layout(title=f"Decode: achieved K/V bandwidth vs KV length{suffix}")
        figs.append(("decode-latency", "Decode latency vs KV length", dl))
        figs.append(("decode-bandwidth", "Decode K/V bandwidth vs KV length", bw))
        pages = sorted({p for _, p, _ in groups})
        if len(pages) > 1:
            ps = go.Figure()
            by: dict[tuple[str, int, int], dict[int, float]] = {}
            for (batch, p_, b), cells in groups.items():
                for c in cells:
                    by.setdefault((b, batch, c.workload.kv_len), {})[p_] = c.latency_us  # type: ignore[assignment]
            dashes = {batch: d for batch, d in zip(batches, ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot") * 4)}
            for (b, batch, kv), vals in sorted(by.items()):
                if len(vals) > 1 and kv == max(k for (_, bb, k) in by if bb == batch):
                    ps.add_scatter(x=[str(p_) for p_ in sorted(vals)], y=[vals[p_] for p_ in sorted(vals)], mode="lines+markers",
                                   name=f"{b}, B={batch}, kv {kv}", line=dict(color=colors[b], dash=dashes[batch]))
            ps.update_layout(title="Page-size effect (longest kv_len of each batch)", xaxis_title="page_size (tokens)",
                             yaxis_title="median latency (µs)", yaxis_type="log")
            figs.append(("page-size", "Page-size effect", ps))
    roof = _roofline(a, colors, labels)
    if roof is not None:
        figs.append(("roofline", "Roofline", roof))
    return [{"id": fid, "title": title, "figure": safe_chart(json.loads(fig.to_json()))} for fid, title, fig in figs]


def ledger_figures(a: RunAnalysis) -> list[dict[str, Any]]:
    """Per regime, requested vs DRAM vs L2→SM bytes per cell (bars, one per cell, named by backend and the
    workload's distinct label); only cells with counters."""
    import plotly.graph_objects as go

    labels_of = workload_labels(a)
    out = []
    for phase, entries in a.ledgers.items():
        measured = [e for e in entries if e.bytes.measured]
        if not measured:
            continue
        fig = go.Figure()
        labels = [f"{e.cell.backend} · {labels_of[e.cell.workload.tag]}" for e in measured]
        fig.add_bar(name="requested", x=labels, y=[e.bytes.requested_bytes for e in measured])
        fig.add_bar(name="DRAM (read + write)", x=labels, y=[e.bytes.dram_bytes for e in measured])
        fig.add_bar(name="L2 → SM reads", x=labels, y=[e.bytes.l2_to_sm_bytes for e in measured])
        fig.update_layout(barmode="group", yaxis_type="log", yaxis_title="bytes per call (log)",
                          title=f"{phase.value}: requested vs transferred bytes (Nsight Compute, cold caches)")
        out.append({"id": f"bytes-{phase.value}", "title": f"{phase.value} bytes", "figure": safe_chart(json.loads(fig.to_json()))})
    return out


def _roofline(a: RunAnalysis, colors: dict[str, str], labels: dict[str, str]):
    """Arithmetic intensity (FLOP per requested byte; per measured DRAM byte where counters exist) against
    achieved TFLOP/s, with the two measured ceilings. None without ceilings (CPU runs)."""
    run = a.run
    if run.ceilings is None:
        return None
    import plotly.graph_objects as go

    c = run.ceilings
    cells = [x for x in a.timed_cells() if x.achieved_tflops]
    if not cells:
        return None
    fig = go.Figure()
    ai = [x.workload.flops / (x.counters.dram_bytes if x.counters and x.counters.dram_bytes else x.workload.requested_bytes) for x in cells]
    lo, hi = min(ai + [1.0]) / 2, max(ai + [1e3]) * 2
    bw_roof = c.bandwidth_gbps
    ridge = c.matmul_tflops * 1e12 / (bw_roof * 1e9)
    xs = [lo, ridge, hi]
    fig.add_scatter(x=xs, y=[min(c.matmul_tflops, x * bw_roof * 1e9 / 1e12) for x in xs], mode="lines",
                    name=f"roof: {c.bandwidth_kind} {bw_roof:,.0f} GB/s, GEMM {c.matmul_tflops:,.0f} TFLOP/s", line=dict(color="black", dash="dash"))
    for b in dict.fromkeys(x.backend for x in cells):
        pts = [(ai_, x) for ai_, x in zip(ai, cells) if x.backend == b]
        fig.add_scatter(x=[p for p, _ in pts], y=[x.achieved_tflops for _, x in pts], mode="markers", name=b,
                        marker=dict(color=colors[b], size=9), text=[labels[x.workload.tag] for _, x in pts],
                        hovertemplate="%{text}<br>%{x:.1f} FLOP/B, %{y:.2f} TFLOP/s<extra>" + chart_text(b) + "</extra>")
    fig.update_layout(title="Roofline (ceilings measured in this run; x uses measured DRAM bytes where counters exist)",
                      xaxis_type="log", yaxis_type="log", xaxis_title="arithmetic intensity (FLOP/byte)",
                      yaxis_title="achieved TFLOP/s")
    return fig


# ---- rendering -----------------------------------------------------------------------------------


def render_html(a: RunAnalysis, *, title: str = "profattn report") -> str:
    """The whole report of one analysed run as one self-contained HTML string (plotly.js inline, no network
    access). Every row is a format of ``a``; nothing here ranks or compares."""
    from profattn.report.cp import cp_section
    from profattn.report.gqa import gqa_section
    from profattn.report.recommend import policy_section
    from profattn.report.serving import serving_section
    from profattn.report.verdict import render_verdict

    run = a.run
    labels = workload_labels(a)
    ledgers = ledger_rows(a)
    launches = launch_rows(a)
    ctx = {
        "title": title,
        "run": run,
        "environment": environment_rows(run),
        "workloads": workload_rows(a),
        "labels": labels,
        "grid": matrix_grid(a),
        "columns": matrix_columns(a),
        "matrix": matrix_rows(a),
        "launches": launches,
        "verdict": render_verdict(a.verdict, labels),
        "charts": chart_figures(a),
        "serving": serving_section(a),
        "gqa": gqa_section(a),
        "cp": cp_section(a),
        "policy": policy_section(a.policy),
        "ledgers": ledgers,
        "counter_kernels": counter_kernel_rows(a),
        "crossovers": crossover_rows(a),
        "counters_info": run.counters_info,
        "ledger_charts": ledger_figures(a),
        "trace_warnings": trace_warnings(a),
        "noise_warnings": noise_texts(a),
        "pending": a.pending,
        "collapse": COLLAPSE_ROWS,
        "default_note": "the default preset for this device" if run.preset == ("seed" if run.environment.device == "cuda" else "small") else "chosen explicitly",
    }
    return render("report", ctx)


def trace_problem_text(p: TraceProblem) -> str:
    """Why one cell's trace was not read (a :class:`~profattn.analysis.run.reattach.TraceProblem`), as a sentence:
    ``trace_file 'traces/x.json.gz' is missing: not read, stored summary kept``."""
    if p.kind is TraceProblemKind.OUTSIDE_RUN:
        return f"trace_file {p.trace_file!r} is outside the run directory: not read"
    if p.kind is TraceProblemKind.UNREADABLE:
        return f"trace unreadable, stored summary kept: {p.detail}"
    return f"trace_file {p.trace_file!r} is {p.kind.value}: not read, stored summary kept"


def trace_warnings(a: RunAnalysis) -> list[str]:
    """``<cell id>: <why>`` (:func:`trace_problem_text`) for every cell whose trace could not be read when the report
    was built (:attr:`RunAnalysis.trace_problems`: outside the run directory, missing, not a regular file, or
    unreadable); the cell keeps its stored summary."""
    return [f"{p.cell_id}: {trace_problem_text(p)}" for p in a.trace_problems]


def noise_texts(a: RunAnalysis) -> list[str]:
    """The run's noise findings (:attr:`RunAnalysis.noise`) as warnings."""
    out = []
    for f in a.noise:
        if f.kind is NoiseKind.SPREAD:
            out.append(f"{f.count} of {f.of} timed cells spread widely (p90/p10 > {f.threshold:g}, worst {f.worst:.2f}): "
                       "the machine was noisy; small differences are not evidence")
        else:
            out.append(f"the load average reached {f.worst:g} on {f.threshold:g} logical CPUs during the run: "
                       "other processes competed for the cores, timings are suspect (CPU medians can then sit on the "
                       "scheduler's time slices, e.g. ~8 ms steps; measure on an idle machine, or with fewer torch "
                       "threads than cores: OMP_NUM_THREADS)")
    return out


def report_analysis(run: RunResult, *, traces: Sequence[Any] = (), keep_host_info: bool = False) -> RunAnalysis:
    """``run`` analysed once for display (:func:`profattn.analysis.run.analyze.analyze_run`; ``traces``: the
    :class:`~profattn.analysis.run.reattach.TraceProblem` records of the traces not read). Unless ``keep_host_info``, host
    and user names and absolute paths are scrubbed from the run and the problems first (:mod:`profattn.privacy`), so
    nothing shown carries them."""
    if not keep_host_info:
        from profattn.privacy import scrub

        run, traces = scrub(run), scrub(tuple(traces))
    return analyze_run(run, traces=traces)


def write_report(report: "RunAnalysis | RunResult", path: str | os.PathLike[str], *, traces: Sequence[Any] = (),
                 keep_host_info: bool = False) -> Path:
    """Render and write the report of an analysed run (:func:`report_analysis`); a bare ``RunResult`` is analysed
    first (``traces`` and ``keep_host_info`` as there). Returns the path."""
    a = report if isinstance(report, RunAnalysis) else report_analysis(report, traces=traces, keep_host_info=keep_host_info)
    return write_html_file(render_html(a), path)
