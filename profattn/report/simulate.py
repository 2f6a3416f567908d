"""``profattn simulate``'s outputs from one :class:`~profattn.analysis.simulation.simulate.SimulationReport`: display rows, the
verdict sentences (built here from the typed :class:`~profattn.analysis.simulation.simulate.Findings`), plotly charts, the HTML
page (``simulate.html.j2``, whose section ``simulation.html.j2`` another page can include), GitHub Markdown, the
console text and the versioned JSON (:data:`SCHEMA` v:data:`SCHEMA_VERSION`).

Every renderer reads the same rows, so the page, the Markdown and the JSON cannot disagree.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from profattn.analysis.simulation.operating import Binding, Knobs, OperatingPoint, SettingResult
from profattn.analysis.simulation.rates import LatencySummary, RatePoint
from profattn.analysis.simulation.replay import StepKind, StepLog
from profattn.analysis.simulation.simulate import DeploymentResult, Findings, ShapeClass, SimulationReport
from profattn.analysis.simulation.stepcost import Provenance
from profattn.analysis.simulation.validate import PriceCheck
from profattn.files import write_text_atomic
from profattn.report.format import MISSING, chart_text, fmt_latency_s, fmt_us, md_text, safe_chart
from profattn.report.markdown import fit, md_table
from profattn.report.palette import backend_colors
from profattn.report.render import render, write_html_file

__all__ = [
    "SCHEMA", "SCHEMA_VERSION", "batch_chart", "breakdown_chart", "class_text", "deployment_rows", "export_lines",
    "latency_chart", "knobs_text", "operating_rows", "operating_sentences", "provenance_rows", "rate_rows",
    "render_html", "shape_table", "simulation_markdown",
    "simulation_to_dict", "text_report", "validation_lines", "verdict_sentences", "write_html", "write_json", "write_markdown",
]

SCHEMA = "profattn.simulation"
SCHEMA_VERSION = 1
#: Points per deployment in the batch-over-time chart and the JSON's time series.
SERIES_POINTS = 400


# ---- words and numbers -------------------------------------------------------------------------------------


def _pct(v: float | None, digits: int = 0) -> str:
    return MISSING if v is None or v != v else f"{100 * v:.{digits}f} %"


def _rate(v: float | None) -> str:
    return MISSING if v is None else f"{v:.3g} req/s"


def _x(v: float | None) -> str:
    return MISSING if v is None or v != v or v == math.inf else f"{v:.2f}×"


def _lat3(s: LatencySummary) -> str:
    return " / ".join(fmt_latency_s(v) for v in (s.p50, s.p90, s.p99))


def class_text(c: ShapeClass) -> str:
    """``decode, 2–7 seqs``, ``mixed, 32–127 seqs``, ``prefill only``, ``decode, 512+ seqs``."""
    if c.kind is StepKind.PREFILL:
        return "prefill only"
    span = f"{c.batch_lo}" if c.batch_hi == c.batch_lo + 1 else (
        f"{c.batch_lo}+" if c.batch_hi >= 1 << 29 else f"{c.batch_lo}–{c.batch_hi - 1}")
    return f"{c.kind.value}, {span} seq{'s' if span != '1' else ''}"


def _label_short(report: SimulationReport) -> dict[str, str]:
    return {r.deployment.label: r.deployment.label for r in report.results}


# ---- rows ---------------------------------------------------------------------------------------------------


def knobs_text(k: Knobs) -> str:
    """``tokens 2,048, seqs 512`` plus chunked prefill off, the page size and the KV dtype where they are not vLLM's
    defaults."""
    parts = [f"tokens {k.max_num_batched_tokens:,}", f"seqs {k.max_num_seqs:,}"]
    if not k.chunked_prefill:
        parts.append("no chunked prefill")
    if k.page_size != 16:
        parts.append(f"page {k.page_size}")
    if k.kv_dtype:
        parts.append("fp8 KV" if "float8" in k.kv_dtype else f"{k.kv_dtype} KV")
    return ", ".join(parts)


_BINDING_WORDS = {Binding.KV_CAPACITY: "KV capacity (the cache fills or preempts)",
                  Binding.STALLED_DECODE: "a stalled decode (TPOT: decodes wait behind the prefill chunks in their steps)",
                  Binding.MAX_NUM_SEQS: "max_num_seqs (the running count reaches it)",
                  Binding.COMPUTE: "compute (requests queue past their TTFT)",
                  Binding.NONE: "nothing up to the highest rate tried"}


def _scale_text(x: float) -> str:
    """A rate scale: ``0.5×``; a unit fraction as such (``1/32×``)."""
    n = round(1.0 / x) if x < 1 else 0
    return f"1/{n}×" if n > 1 and abs(n * x - 1.0) < 1e-9 else f"{x:.3g}×"


def _nowhere(floor: float) -> str:
    return f"nowhere ≥ {_scale_text(floor)}"


def _best_text(r: SettingResult, floor: float) -> str:
    if r.refused:
        return "cannot serve the trace"
    if r.best_scale is not None:
        return f"{r.best_scale:.3g}×"
    if r.below_scale is not None and r.below_scale <= floor * (1 + 1e-9):
        return _nowhere(floor)
    return f"< {r.below_scale:.3g}×" if r.below_scale is not None else "none"


def _serves(r: SettingResult, floor: float, verb: str) -> str:
    """``serve(s) X× the trace within the SLO``, or ``meet(s) the SLO nowhere ≥ 1/32× the trace``."""
    t = _best_text(r, floor)
    if t.startswith("nowhere"):
        return f"{'meet' if verb == 'serve' else 'meets'} the SLO {t} the trace"
    return f"{verb} {t} the trace within the SLO"


def operating_rows(report: SimulationReport) -> list[dict[str, Any]]:
    """One row per setting tried per searched deployment (``--search KNOBS``): its role (vLLM's defaults, the best
    found, tried), the knobs, the highest rate scale within the SLO (``< X`` when it failed the probe at X), TTFT /
    TPOT p90 there, the binding constraint above it, and for the defaults and the best their share within the SLO,
    goodput and TTFT / TPOT p90 at the trace's rate."""
    rows = []
    for op in report.operating:
        for r in op.tried:
            role = "vLLM defaults" if r is op.defaults else ("best" if r is op.best else "tried")
            at1 = op.at_trace_defaults if r is op.defaults else (op.at_trace_best if r is op.best else None)
            b = r.at_best
            rows.append(dict(
                deployment=op.label, role=role, knobs=knobs_text(r.knobs),
                kv=f"{r.deployment.capacity.tokens:,}" if r.deployment else MISSING, best=_best_text(r, op.floor),
                best_rate=_rate(r.best_scale * report.trace_rate_per_s) if r.best_scale is not None else MISSING,
                at_best=(f"{fmt_latency_s(b.ttft_p90_s)} / {fmt_latency_s(b.tpot_p90_s)}" if b is not None else MISSING),
                binding=str(r.binding) if r.binding is not None else (r.refused or MISSING),
                at_trace=_pct(at1.attainment, 1) if at1 else MISSING,
                goodput=f"{at1.goodput_per_s:.3g} req/s" if at1 else MISSING,
                at_trace_lat=(f"{fmt_latency_s(at1.ttft_p90_s)} / {fmt_latency_s(at1.tpot_p90_s)}" if at1 else MISSING)))
    return rows


def operating_sentences(report: SimulationReport) -> list[str]:
    """The operating-point verdict: per searched deployment its defaults against the best setting found (rates,
    the binding constraints, the trace's rate), then whether the faster kernel moves the operating point."""
    out = []
    for op in report.operating:
        d, b = op.defaults, op.best
        a1, b1 = op.at_trace_defaults, op.at_trace_best
        s = (f"{op.label}: vLLM's defaults ({knobs_text(d.knobs)}) {_serves(d, op.floor, 'serve')} "
             f"(at 1×: {_pct(a1.attainment, 1)} within, TTFT p90 {fmt_latency_s(a1.ttft_p90_s)}, TPOT p90 "
             f"{fmt_latency_s(a1.tpot_p90_s)}), bound above it by {_BINDING_WORDS[d.binding or Binding.NONE]}")
        if b is d:
            s += f"; no other setting of {', '.join(op.axes)} serves more ({len(op.tried)} settings tried)."
        else:
            g = report.operating_verdict.gain.get(op.label) if report.operating_verdict else None
            s += (f"; the best of {len(op.tried)} settings, {knobs_text(b.knobs)}, serves {_best_text(b, op.floor)} "
                  f"({_x(g)} the defaults), bound above it by {_BINDING_WORDS[b.binding or Binding.NONE]}; at 1× it "
                  f"holds {_pct(b1.attainment, 1)} within (TTFT p90 {fmt_latency_s(b1.ttft_p90_s)}, TPOT p90 "
                  f"{fmt_latency_s(b1.tpot_p90_s)}).")
        s += f" Search: {op.runs} simulations, {op.wall_s:.1f} s."
        out.append(s)
    v = report.operating_verdict
    if v is not None and v.runner_up is not None:
        ops = {op.label: op for op in report.operating}
        top = ops[v.winner] if v.winner else max(report.operating, key=lambda o: o.best.best_scale or 0.0)
        run = ops[v.runner_up]
        if all(op.best.best_scale is None for op in report.operating):
            out.append(f"None of the {len(report.operating)} deployments searched meets the SLO at "
                       f"{_scale_text(top.floor)} the trace or above with any setting tried: at this SLO there is no "
                       "operating point for a faster kernel to move.")
        elif v.tie:
            same = (f"at the same setting ({knobs_text(top.best.knobs)})" if v.same_knobs
                    else f"at {knobs_text(top.best.knobs)} and {knobs_text(run.best.knobs)}")
            out.append(f"The faster kernel does not move the operating point: {top.label} and {run.label} serve "
                       f"{_best_text(top.best, top.floor)} and {_best_text(run.best, run.floor)} the trace at their best "
                       f"{same}, within the "
                       "search's resolution of each other.")
        else:
            out.append(f"The operating point moves with the kernel: {top.label} serves {_best_text(top.best, top.floor)} "
                       f"the trace at {knobs_text(top.best.knobs)} against {_best_text(run.best, run.floor)} for "
                       f"{run.label} at "
                       f"{knobs_text(run.best.knobs)} ({_x(v.best_ratio)}; with vLLM's defaults "
                       f"{_x(v.defaults_ratio)}).")
    return out


def _operating_dict(op: OperatingPoint) -> dict[str, Any]:
    def point(p: RatePoint | None) -> dict[str, Any] | None:
        return None if p is None else _point_dict(p)

    def setting(r: SettingResult) -> dict[str, Any]:
        k = r.knobs
        return {"max_num_batched_tokens": k.max_num_batched_tokens, "max_num_seqs": k.max_num_seqs,
                "enable_chunked_prefill": k.chunked_prefill, "block_size": k.page_size, "kv_dtype": k.kv_dtype,
                "kv_tokens": r.deployment.capacity.tokens if r.deployment else None, "best_scale": r.best_scale,
                "below_scale": r.below_scale, "binding": None if r.binding is None else r.binding.value,
                "refused": r.refused, "points": [_point_dict(p) for p in r.points]}

    return {"deployment": op.label, "axes": list(op.axes), "defaults": setting(op.defaults), "best": setting(op.best),
            "tried": [setting(r) for r in op.tried], "at_trace_defaults": point(op.at_trace_defaults),
            "at_trace_best": point(op.at_trace_best), "runs": op.runs, "wall_s": op.wall_s, "floor_scale": op.floor}


def deployment_rows(report: SimulationReport) -> list[dict[str, Any]]:
    """One row per deployment: capacity, latencies (p50 / p90 / p99), throughput, SLO attainment, goodput, the
    highest rate within the SLO, preemptions, the step-time breakdown and the share priced by extrapolation."""
    rows = []
    for r in report.results:
        d = r.deployment
        total = r.attention_decode_s + r.attention_prefill_s + r.rest_s or 1.0
        s = r.search
        best = MISSING
        if s is not None:
            best = (_nowhere(s.floor) if s.floor is not None else MISSING) if s.best_rate_per_s is None else (
                ("≥ " if s.ceiling else "") + f"{_rate(s.best_rate_per_s)} ({s.best_scale:.3g}×)")
        rows.append(dict(
            deployment=d.label, decode=d.pair.decode, prefill=d.pair.prefill,
            kv=f"{d.capacity.tokens:,} tokens ({d.capacity.num_blocks:,} pages of {d.scheduler.block_size})",
            ttft=_lat3(r.ttft), tpot=_lat3(r.tpot), itl_p99=fmt_latency_s(r.itl.p99), e2e=_lat3(r.e2e),
            tokens_per_s=f"{r.output_tokens_per_s:,.0f}", attainment=_pct(r.attainment, 1),
            goodput=_rate(r.goodput_per_s), best_rate=best, preemptions=f"{r.run.num_preemptions:,}",
            attn_decode=f"{r.attention_decode_s:,.1f} s ({_pct(r.attention_decode_s / total)})",
            attn_prefill=f"{r.attention_prefill_s:,.1f} s ({_pct(r.attention_prefill_s / total)})",
            rest=f"{r.rest_s:,.1f} s ({_pct(r.rest_s / total)})",
            extrapolated=_pct(r.extrapolated.get("any"), 1), steps=f"{len(r.run.steps):,}",
            mean_batch=f"{r.mean_decode_batch:.1f}", peak_use=_pct(r.run.peak_pages / d.scheduler.num_gpu_blocks, 1),
        ))
    return rows


def rate_rows(report: SimulationReport) -> list[dict[str, Any]]:
    """Every rate scale simulated per deployment (ascending): rate, share within the SLO, p90/p99 TTFT and TPOT."""
    out = []
    for r in report.results:
        pts: list[RatePoint] = sorted(r.search.points, key=lambda p: p.scale) if r.search else []
        for p in pts:
            out.append(dict(deployment=r.deployment.label, scale=f"{p.scale:.3g}×", rate=_rate(p.rate_per_s),
                            attainment=("≤ " if p.stopped else "") + _pct(p.attainment, 1),
                            meets="yes" if p.meets else "no", ttft=f"{fmt_latency_s(p.ttft_p90_s)} / {fmt_latency_s(p.ttft_p99_s)}",
                            tpot=f"{fmt_latency_s(p.tpot_p90_s)} / {fmt_latency_s(p.tpot_p99_s)}",
                            preemptions=f"{p.preemptions:,}", note="stopped once the SLO could not be met" if p.stopped else ""))
    return out


def shape_table(report: SimulationReport, limit: int | None = None) -> tuple[list[str], list[list[str]]]:
    """The step-shape table (most time first): class, steps, share of steps and time, median K/V tokens decoded
    and prefill tokens, each deployment's attention on these steps (s) and the rest of them (s)."""
    f = report.findings
    labels = [r.deployment.label for r in report.results]
    head = [f"steps (the schedule of {f.schedule_of} at {f.schedule_scale:.3g}× the trace)", "count", "of steps", "of time", "median decode K/V",
            "median prefill tokens", *(f"attention: {lb}" for lb in labels), "rest (estimate)"]
    rows = []
    for r in f.shapes[:limit]:
        rows.append([class_text(r.cls), f"{r.steps:,}", _pct(r.step_share, 1), _pct(r.time_share, 1),
                     f"{r.median_decode_kv:,.0f}", f"{r.median_prefill_tokens:,.0f}",
                     *(f"{r.attention_us[lb] * 1e-6:,.1f} s" for lb in labels), f"{r.rest_us * 1e-6:,.1f} s"])
    return head, rows


def provenance_rows(report: SimulationReport) -> list[dict[str, Any]]:
    """What each backend's part was priced from (one row per backend and part, once)."""
    seen = set()
    out = []
    for r in report.results:
        for p in r.provenance:
            key = (p.backend, p.part, r.deployment.kv_dtype)
            if key in seen:
                continue
            seen.add(key)
            v = p.validation
            err = MISSING if v.median_error is None else (
                f"{_pct(v.median_error, 1)} / {_pct(v.p90_error, 1)} / {_pct(v.worst_error, 0)}")
            notes = list(p.notes)
            if p.fp8_factor is not None:
                notes.append(f"FP8 factor {p.fp8_factor:.2f} from {p.fp8_cells} FP8 cells")
            if p.part.value == "decode" and any(d.deployment.scheduler.enable_prefix_caching for d in report.results):
                notes.append(f"a read of a page another sequence shares costs {_pct(1.0 - p.shared_saving, 0)} of an "
                             f"unshared one ({p.shared_cells} shared-prefix cell{'s' * (p.shared_cells != 1)})"
                             if p.shared_saving is not None else
                             "no shared-prefix cell: pages shared by prefix caching priced as unshared")
            out.append(dict(backend=p.backend, part=p.part.value, cells=p.cells, runs=len(p.runs),
                            items=f"{p.items[0]:,.0f}–{p.items[1]:,.0f}", roof=f"{fmt_us(p.roof_us[0])} – {fmt_us(p.roof_us[1])}",
                            floor=f"{fmt_us(p.floor_us)} ({p.floor_rule})", held_out=f"{v.held_out}", error=err,
                            uncertainty=f"±{_pct(math.expm1(p.uncertainty), 1)}", notes="; ".join(notes), worst=v.worst or ""))
    return out


def export_lines(report: SimulationReport) -> list[str]:
    """The sampled step shapes as a file a GPU run can replay: per step a comment naming it, then one line per call
    (``step``, ``decode``, ``prefill``) holding its ``profattn profile --workload`` text."""
    page = report.results[0].deployment.scheduler.block_size if report.results else 16
    shape = report.shapes[report.results[0].deployment.kv_dtype] if report.results else None
    lines = [f"# profattn simulate: {len(report.steps)} step shapes of {report.model.label} on {report.gpu} "
             f"({os.path.basename(report.trace_source)}); replay each line with: profattn profile --workload '<line>' --backend NAME"]
    for s in report.steps:
        lines.append(f"# {s.kind.value} step {s.index:,} at {s.start_s:,.2f} s: {len(s.decode_kv)} decoding, "
                     f"{len(s.chunks)} prefill chunk(s) ({sum(q for q, _ in s.chunks):,} tokens)")
        for part, spec in s.specs(shape, page).items():  # type: ignore[arg-type]
            lines.append(f"{part}\t{spec}")
    return lines


# ---- the verdict -------------------------------------------------------------------------------------------


def verdict_sentences(report: SimulationReport) -> list[str]:
    """The verdict, from :class:`Findings`: whether the per-call winner also serves the most load within the SLO,
    and why — which step shapes make the attention difference, what the KV capacity did, where the prices
    extrapolate and how much of each step the rest-of-step estimate is."""
    f: Findings = report.findings
    res = {r.deployment.label: r for r in report.results}
    out: list[str] = []
    slo = report.slo
    slo_text = (f"TTFT ≤ {fmt_latency_s(slo.ttft_s)} and TPOT ≤ {fmt_latency_s(slo.tpot_s)} for "
                f"{_pct(slo.attainment)} of requests")
    h = f.per_call
    if h is not None and h.workloads:
        w = h.winner
        if w is None:
            head = (f"Per call, {h.a} and {h.b} split the {h.workloads} decode workloads the store measured for both "
                    f"({h.a_wins} wins each way, {h.ties} ties).")
        else:
            other = h.b if w == h.a else h.a
            wins, losses = (h.a_wins, h.b_wins) if w == h.a else (h.b_wins, h.a_wins)
            geo = h.geomean_b_over_a if w == h.a else (1 / h.geomean_b_over_a if h.geomean_b_over_a else None)
            head = (f"Per call, {w} is the winner: it beats {other} beyond noise on {wins} of the {h.workloads} decode "
                    f"workloads the store measured for both ({losses} the other way, {h.ties} ties; {other} takes "
                    f"{_x(geo)} its time, geometric mean).")
        out.append(head)
    elif h is not None:
        out.append(f"The store holds no decode workload measured for both {h.a} and {h.b}: no per-call winner.")
    searched = all(r.search is not None for r in report.results)
    ranked = sorted(report.results, key=lambda r: -((r.search.best_rate_per_s or 0.0) if r.search else r.attainment))
    if len(ranked) >= 2:
        a, b = ranked[0], ranked[1]
        if searched:
            served = (f"{_rate(a.search.best_rate_per_s)} for {a.deployment.label} against "  # type: ignore[union-attr]
                      f"{_rate(b.search.best_rate_per_s)} for {b.deployment.label}")  # type: ignore[union-attr]
            if f.deployment_tie:
                res_ = max(a.search.resolution, b.search.resolution)  # type: ignore[union-attr]
                lead = ("The per-call winner does not serve measurably more: at" if f.per_call_winner else "At")
                s = (f"{lead} the declared load ({report.model.label}, {slo_text}) the highest rates within the SLO are "
                     f"{served}, within the rate search's resolution (±{_pct(res_)}) of each other.")
            elif f.same is True:
                s = (f"It is also the deployment winner: at the declared load ({report.model.label}, {slo_text}) "
                     f"it serves the most requests within the SLO, {served} ({_x(f.rate_ratio)}).")
            elif f.same is False:
                s = (f"The per-call winner is not the deployment winner: at the declared load ({report.model.label}, "
                     f"{slo_text}) {f.deployment_winner} serves the most requests within the SLO, {served} "
                     f"({_x(f.rate_ratio)}).")
            else:
                s = (f"At the declared load ({report.model.label}, {slo_text}) {f.deployment_winner or a.deployment.label} "
                     f"serves the most requests within the SLO: {served} ({_x(f.rate_ratio)}).")
            out.append(s)
        else:
            out.append(f"At {report.rate_scale:.3g}× the trace's rate (no rate search), "
                       + "; ".join(f"{r.deployment.label} meets the SLO for {_pct(r.attainment, 1)} of requests"
                                   for r in ranked) + ".")
    elif ranked:
        r = ranked[0]
        if r.search and r.search.best_rate_per_s:
            out.append(f"{r.deployment.label} serves up to {_rate(r.search.best_rate_per_s)} "
                       f"({r.search.best_scale:.3g}× the trace) within the SLO ({slo_text}).")
    if f.capacity_decides and f.deployment_winner and f.runner_up:
        w, r = f.deployment_winner, f.runner_up
        out.append(f"Capacity moved the operating point: {r} fills its {f.capacity_tokens[r]:,} tokens of KV cache and "
                   f"preempts {f.preemptions_at_best.get(r, 0):,} requests by recompute at the highest rate it serves; "
                   f"{w} holds {f.capacity_tokens[w] / f.capacity_tokens[r]:.2f}× the tokens.")
    if f.fastest_on_steps and f.next_on_steps and f.attention_delta_s is not None:
        fast, slow = f.fastest_on_steps, f.next_on_steps
        t_fast = f.attention_on_steps[fast]
        lead = "The kernels alone" if f.capacity_decides else "Why"
        why = (f"{lead}: priced on the same {sum(r.steps for r in f.shapes):,} steps (the schedule of {f.schedule_of} at "
               f"{f.schedule_scale:.3g}× the trace), {slow} spends {f.attention_delta_s:,.1f} s more in attention than "
               f"{fast} ({_pct(f.attention_delta_s / t_fast if t_fast else None)} more; "
               f"{_pct(f.attention_delta_s / f.steps_time_s if f.steps_time_s else None, 1)} of those steps' time)")
        if f.dominant is not None and f.dominant_share is not None:
            row = next(r for r in f.shapes if r.cls == f.dominant)
            why += (f", {_pct(f.dominant_share)} of it in {class_text(f.dominant)} steps ({_pct(row.step_share)} of "
                    f"the steps, {_pct(row.time_share)} of the time, median {row.median_decode_kv:,.0f} K/V tokens decoded)")
        out.append(why + ".")
        share = f.attention_share
        out.append(f"Attention is {_pct(share)} of the step time on that schedule; the rest of each step (projections, "
                   f"MLP, logits: {_pct(1 - share)}) is the same estimate for every backend, so a difference in attention "
                   f"moves the served load by at most about that share.")
    caps = []
    where = "the highest rate served" if searched else f"{report.rate_scale:.3g}× the trace"
    for r in report.results:
        lb = r.deployment.label
        bound = f.capacity_bound.get(lb)
        peak = f.peak_use.get(lb, 0.0)
        tokens = f.capacity_tokens.get(lb, 0)
        if bound:
            caps.append(f"{lb}: {tokens:,} tokens of KV cache, bound at {where} "
                        f"({_pct(peak, 1)} in use at the peak, {f.preemptions_at_best.get(lb, 0):,} preemptions by recompute)")
        else:
            caps.append(f"{lb}: {tokens:,} tokens, never full at {where} ({_pct(peak, 1)} in use at the peak, "
                        "no preemption)")
    if caps:
        out.append("KV capacity — " + "; ".join(caps) + ".")
    pcs = [(r.deployment.label, r.run.prefix, r.decode_shared_share) for r in report.results if r.run.prefix is not None]
    if pcs:
        out.append("Prefix caching at the trace's rate — " + "; ".join(
            f"{lb}: {_pct(p.hit_rate, 1)} of the full prompt blocks looked up were cached, {p.hit_tokens:,} prefill "
            f"tokens saved ({_pct(p.saved_share, 1)} of the tokens asked at admission; first admissions "
            f"{_pct(p.first_hit_tokens / p.first_queried_tokens if p.first_queried_tokens else None, 1)}), "
            f"{p.evicted_blocks:,} cached blocks of {p.block_tokens} tokens evicted, {_pct(sh, 2)} of the decode K/V "
            f"reads on pages another running request shares" for lb, p, sh in pcs) + ".")
    if f.fp8_capacity_ratio:
        out.append(f"The FP8 cache holds {f.fp8_capacity_ratio:.2f}× the tokens of the bf16 cache in the same memory.")
    ext = [(r.deployment.label, r.extrapolated) for r in report.results if r.extrapolated.get("any", 0) > 0.005]
    if ext:
        parts = []
        for lb, e in ext:
            why = max((k for k in e if k != "any"), key=lambda k: e[k])
            parts.append(f"{lb} {_pct(e['any'], 1)} (mostly {_EXTRAPOLATION_WORDS[why]})")
        out.append("Attention priced outside the measured cells: " + "; ".join(parts) + ".")
    return out


_EXTRAPOLATION_WORDS = {"above": "more work than the largest cell", "below": "less work than the smallest cell",
                        "parallelism": "more or fewer sequences × heads than any cell",
                        "kv_dtype": "FP8 priced from bf16 cells"}


# ---- charts -------------------------------------------------------------------------------------------------


def _colors(report: SimulationReport) -> dict[str, str]:
    by_backend = backend_colors(r.deployment.pair.decode for r in report.results)
    out = {}
    used: set[str] = set()
    palette = ["#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880"]
    for r in report.results:
        c = by_backend[r.deployment.pair.decode]
        if c in used:  # several deployments of one decode backend (KV dtypes, page sizes)
            c = next((p for p in palette if p not in used), c)
        used.add(c)
        out[r.deployment.label] = c
    return out


def latency_chart(report: SimulationReport) -> dict[str, Any] | None:
    """TTFT p90, TPOT p90 and the share within the SLO against the arrival rate, per deployment (the rate search's
    points; a run stopped once the SLO could not be met shows only its share, an upper bound), with the SLO lines."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not any(r.search for r in report.results):
        return None
    fig = make_subplots(rows=1, cols=3, subplot_titles=("TTFT p90", "TPOT p90", "requests within the SLO"))
    colors = _colors(report)
    for r in report.results:
        pts = sorted(r.search.points, key=lambda p: p.rate_per_s) if r.search else []
        lb = r.deployment.label
        done = [p for p in pts if not p.stopped]
        for col, attr in ((1, "ttft_p90_s"), (2, "tpot_p90_s")):
            fig.add_scatter(x=[p.rate_per_s for p in done], y=[getattr(p, attr) * 1e3 for p in done], mode="lines+markers",
                            name=lb, legendgroup=lb, showlegend=col == 1, line={"color": colors[lb]}, row=1, col=col,
                            hovertemplate="%{x:.3g} req/s: %{y:.3g} ms<extra>" + chart_text(lb) + "</extra>")
        fig.add_scatter(x=[p.rate_per_s for p in pts], y=[100 * p.attainment for p in pts], mode="lines+markers",
                        name=lb, legendgroup=lb, showlegend=False, line={"color": colors[lb]}, row=1, col=3,
                        marker={"symbol": ["circle-open" if p.stopped else "circle" for p in pts]},
                        hovertemplate="%{x:.3g} req/s: %{y:.1f} %<extra>" + chart_text(lb) + "</extra>")
    fig.add_hline(y=report.slo.ttft_s * 1e3, line_dash="dash", line_color="black", row=1, col=1)
    fig.add_hline(y=report.slo.tpot_s * 1e3, line_dash="dash", line_color="black", row=1, col=2)
    fig.add_hline(y=100 * report.slo.attainment, line_dash="dash", line_color="black", row=1, col=3)
    fig.update_yaxes(title_text="ms", type="log", row=1, col=1)
    fig.update_yaxes(title_text="ms", type="log", row=1, col=2)
    fig.update_yaxes(title_text="%", range=[0, 101], row=1, col=3)
    fig.update_xaxes(title_text="arrival rate (req/s)")
    fig.update_layout(height=380, title="Latency against request rate (dashed: the SLO)", legend={"orientation": "h", "y": -0.25})
    return safe_chart(json.loads(fig.to_json()))


def breakdown_chart(report: SimulationReport) -> dict[str, Any]:
    """Stacked bars per deployment: seconds of attention (decode part, prefill part) and of the rest (the estimate)
    over the run at the trace's rate."""
    import plotly.graph_objects as go

    labels = [r.deployment.label for r in report.results]
    fig = go.Figure()
    for name, attr, color in (("attention: decode", "attention_decode_s", "#2E91E5"),
                              ("attention: prefill", "attention_prefill_s", "#E15F99"),
                              ("rest of the step (estimate)", "rest_s", "#BBBBBB")):
        fig.add_bar(y=labels, x=[getattr(r, attr) for r in report.results], name=name, orientation="h",
                    marker={"color": color}, hovertemplate="%{x:,.1f} s<extra>" + chart_text(name) + "</extra>")
    fig.update_layout(barmode="stack", height=max(240, 60 * len(labels) + 160), xaxis_title="seconds over the trace",
                      title=f"Step time at {report.rate_scale:.3g}× the trace's rate", yaxis={"autorange": "reversed"},
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1.0, "xanchor": "right"})
    return safe_chart(json.loads(fig.to_json()))


def _series(log: StepLog, points: int = SERIES_POINTS) -> dict[str, list[float]]:
    """The run's steps in ``points`` time bins: bin start (s), mean decoding sequences and prefill tokens per step
    (weighted by step time) and the largest page count."""
    if not len(log):
        return {"t_s": [], "decode_seqs": [], "prefill_tokens": [], "pages": []}
    t0, t1 = float(log.start_s[0]), float(log.start_s[-1] + log.dur_s[-1])
    edges = np.linspace(t0, t1, points + 1)
    b = np.clip(np.searchsorted(edges, log.start_s, side="right") - 1, 0, points - 1)
    w = np.bincount(b, weights=log.dur_s, minlength=points)
    dec = np.bincount(b, weights=log.dur_s * log.num_decode, minlength=points)
    pre = np.bincount(b, weights=log.dur_s * log.prefill_tokens, minlength=points)
    pages = np.zeros(points)
    np.maximum.at(pages, b, log.pages_used)
    keep = w > 0
    return {"t_s": [round(float(x), 3) for x in edges[:-1][keep]],
            "decode_seqs": [round(float(x), 2) for x in (dec[keep] / w[keep])],
            "prefill_tokens": [round(float(x), 1) for x in (pre[keep] / w[keep])],
            "pages": [int(x) for x in pages[keep]]}


def batch_chart(report: SimulationReport) -> dict[str, Any]:
    """Decoding sequences per step and KV cache use over simulated time, per deployment (time-weighted bins)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=("decoding sequences per step", "KV cache in use"))
    colors = _colors(report)
    for r in report.results:
        s = _series(r.run.steps)
        lb = r.deployment.label
        fig.add_scatter(x=s["t_s"], y=s["decode_seqs"], mode="lines", name=lb, legendgroup=lb, line={"color": colors[lb]},
                        row=1, col=1)
        blocks = r.deployment.scheduler.num_gpu_blocks
        fig.add_scatter(x=s["t_s"], y=[100 * p / blocks for p in s["pages"]], mode="lines", name=lb, legendgroup=lb,
                        showlegend=False, line={"color": colors[lb]}, row=2, col=1)
    fig.update_yaxes(title_text="sequences", row=1, col=1)
    fig.update_yaxes(title_text="% of pages", row=2, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=2, col=1)
    fig.update_layout(height=520, title=f"Batch over time at {report.rate_scale:.3g}× the trace's rate",
                      legend={"orientation": "h", "y": -0.15})
    return safe_chart(json.loads(fig.to_json()))


# ---- JSON ---------------------------------------------------------------------------------------------------


def _lat(s: LatencySummary) -> dict[str, float | None]:
    return {"p50_s": s.p50, "p90_s": s.p90, "p99_s": s.p99}


def _prov(p: Provenance) -> dict[str, Any]:
    v = p.validation
    return {"source": p.source, "backend": p.backend, "part": p.part.value, "cells": p.cells, "runs": list(p.runs),
            "items": list(p.items), "roof_us": list(p.roof_us), "floor_us": p.floor_us, "floor_rule": p.floor_rule.value, "uncertainty": p.uncertainty,
            "validation": {"held_out": v.held_out, "median_error": v.median_error, "p90_error": v.p90_error,
                           "worst_error": v.worst_error, "worst": v.worst},
            "fp8_factor": p.fp8_factor, "fp8_cells": p.fp8_cells, "shared_saving": p.shared_saving,
            "shared_cells": p.shared_cells, "notes": list(p.notes)}


def _point_dict(p: RatePoint) -> dict[str, Any]:
    return {"scale": p.scale, "rate_per_s": p.rate_per_s, "attainment": p.attainment, "meets": p.meets,
            "stopped": p.stopped, "ttft_p90_s": p.ttft_p90_s, "ttft_p99_s": p.ttft_p99_s,
            "tpot_p90_s": p.tpot_p90_s, "tpot_p99_s": p.tpot_p99_s, "goodput_per_s": p.goodput_per_s,
            "steps": p.steps, "wall_s": p.wall_s, "preemptions": p.preemptions, "peak_pages": p.peak_pages,
            "attention_s": p.attention_s, "rest_s": p.rest_s, "ttft_failed": p.ttft_failed,
            "tpot_failed": p.tpot_failed, "peak_running": p.peak_running}


def _result_dict(r: DeploymentResult) -> dict[str, Any]:
    d = r.deployment
    c = d.capacity
    return {
        "deployment": d.label, "decode_backend": d.pair.decode, "prefill_backend": d.pair.prefill,
        "kv_dtype": d.kv_dtype, "page_size": d.scheduler.block_size,
        "scheduler": {"max_num_batched_tokens": d.scheduler.max_num_batched_tokens, "max_num_seqs": d.scheduler.max_num_seqs,
                      "enable_chunked_prefill": d.scheduler.enable_chunked_prefill, "block_size": d.scheduler.block_size,
                      "num_gpu_blocks": d.scheduler.num_gpu_blocks,
                      "enable_prefix_caching": d.scheduler.enable_prefix_caching},
        "kv_capacity": {"tokens": c.tokens, "pages": c.num_blocks, "bytes_per_token": c.bytes_per_token,
                        "kv_budget_bytes": c.kv_budget_bytes, "weight_bytes": c.weight_bytes,
                        "activation_bytes": c.activation_bytes, "gpu_memory_bytes": c.gpu_memory_bytes,
                        "gpu_memory_utilization": c.gpu_memory_utilization},
        "ttft": _lat(r.ttft), "tpot": _lat(r.tpot), "itl": _lat(r.itl), "e2e": _lat(r.e2e),
        "output_tokens_per_s": r.output_tokens_per_s, "requests_per_s": r.requests_per_s, "attainment": r.attainment,
        "goodput_per_s": r.goodput_per_s, "preemptions": r.run.num_preemptions, "peak_pages": r.run.peak_pages,
        "tokens_scheduled": r.run.tokens_scheduled, "tokens_recomputed": r.run.tokens_discarded,
        "steps": len(r.run.steps), "makespan_s": r.run.makespan_s, "simulation_wall_s": r.run.wall_s,
        "mean_decode_batch": r.mean_decode_batch, "peak_concurrency": r.concurrency_peak,
        "time_s": {"attention_decode": r.attention_decode_s, "attention_prefill": r.attention_prefill_s,
                   "rest_estimate": r.rest_s},
        "extrapolated_attention_share": r.extrapolated,
        "prefix_caching": None if r.run.prefix is None else {
            "block_tokens": r.run.prefix.block_tokens, "queried_blocks": r.run.prefix.queried_blocks,
            "hit_blocks": r.run.prefix.hit_blocks, "hit_rate": r.run.prefix.hit_rate,
            "queried_tokens": r.run.prefix.queried_tokens, "saved_prefill_tokens": r.run.prefix.hit_tokens,
            "saved_share": r.run.prefix.saved_share, "first_queried_tokens": r.run.prefix.first_queried_tokens,
            "first_saved_tokens": r.run.prefix.first_hit_tokens, "evicted_blocks": r.run.prefix.evicted_blocks,
            "decode_shared_share": r.decode_shared_share},
        "rate_search": None if r.search is None else {
            "best_scale": r.search.best_scale, "best_rate_per_s": r.search.best_rate_per_s,
            "resolution": r.search.resolution, "ceiling": r.search.ceiling, "floor_scale": r.search.floor,
            "points": [_point_dict(p) for p in r.search.points]},
        "priced_from": [_prov(p) for p in r.provenance],
        "series": _series(r.run.steps),
    }


def simulation_to_dict(report: SimulationReport) -> dict[str, Any]:
    """The versioned JSON document (:data:`SCHEMA` v:data:`SCHEMA_VERSION`): inputs, one entry per deployment, the
    findings as data, the verdict sentences and the sampled step shapes with their ``--workload`` text."""
    m = report.model
    f = report.findings
    h = f.per_call
    page = report.results[0].deployment.scheduler.block_size if report.results else 16
    shape = report.shapes[report.results[0].deployment.kv_dtype] if report.results else None
    return {
        "schema": SCHEMA, "version": SCHEMA_VERSION,
        "trace": {"source": os.path.basename(report.trace_source) if not report.trace_source.startswith("poisson:")
                  else report.trace_source, "requests": report.requests, "rate_per_s": report.trace_rate_per_s,
                  "duration_s": report.trace_duration_s, "rate_scale": report.rate_scale,
                  "prompt_tokens_p10_p50_p90": list(report.prompt_tokens),
                  "output_tokens_p10_p50_p90": list(report.output_tokens)},
        "model": {"name": m.name, "tensor_parallel": m.tensor_parallel, "num_layers": m.num_layers,
                  "num_q_heads": m.num_q_heads, "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
                  "hidden_size": m.hidden_size, "intermediate_size": m.intermediate_size, "vocab_size": m.vocab_size,
                  "dtype": m.dtype, "params": m.num_params, "source": m.source},
        "slo": {"ttft_s": report.slo.ttft_s, "tpot_s": report.slo.tpot_s, "attainment": report.slo.attainment},
        "gpu": report.gpu, "cost_source": report.source,
        "ceilings": {"read_gbps": report.read_gbps, "gemm_tflops": report.gemm_tflops},
        "deployments": [_result_dict(r) for r in report.results],
        "findings": {
            "per_call": None if h is None else {"a": h.a, "b": h.b, "workloads": h.workloads, "a_wins": h.a_wins,
                                                "b_wins": h.b_wins, "ties": h.ties, "geomean_b_over_a": h.geomean_b_over_a,
                                                "at_model_shape": list(h.at_shape), "winner": h.winner},
            "per_call_winner": f.per_call_winner, "deployment_winner": f.deployment_winner,
            "deployment_tie": f.deployment_tie, "rate_ratio": None if f.rate_ratio in (None, math.inf) else f.rate_ratio,
            "same": f.same, "schedule_of": f.schedule_of, "schedule_scale": f.schedule_scale,
            "attention_share": f.attention_share, "attention_on_steps_s": f.attention_on_steps,
            "fastest_on_steps": f.fastest_on_steps, "next_on_steps": f.next_on_steps,
            "dominant": None if f.dominant is None else class_text(f.dominant), "dominant_share": f.dominant_share,
            "attention_delta_s": f.attention_delta_s, "steps_time_s": f.steps_time_s,
            "capacity_tokens": f.capacity_tokens, "peak_use": f.peak_use, "preemptions": f.preemptions,
            "preemptions_at_best": f.preemptions_at_best, "capacity_bound": f.capacity_bound,
            "capacity_decides": f.capacity_decides, "runner_up": f.runner_up,
            "fp8_capacity_ratio": f.fp8_capacity_ratio,
            "step_shapes": [{"class": class_text(r.cls), "kind": r.cls.kind.value, "batch_lo": r.cls.batch_lo,
                             "batch_hi": r.cls.batch_hi, "steps": r.steps, "step_share": r.step_share,
                             "time_share": r.time_share, "median_decode_kv": r.median_decode_kv,
                             "median_prefill_tokens": r.median_prefill_tokens,
                             "attention_s": {k: v * 1e-6 for k, v in r.attention_us.items()}, "rest_s": r.rest_us * 1e-6}
                            for r in f.shapes],
        },
        "verdict": verdict_sentences(report),
        "operating_point": [_operating_dict(op) for op in report.operating],
        "operating_verdict": operating_sentences(report),
        "sampled_steps": [{"index": s.index, "start_s": s.start_s, "kind": s.kind.value,
                           "decode_seqs": len(s.decode_kv), "prefill_chunks": [list(c) for c in s.chunks],
                           "workloads": s.specs(shape, page),  # type: ignore[arg-type]
                           "priced_us_per_layer": report.step_prices[i] if i < len(report.step_prices) else {}}
                          for i, s in enumerate(report.steps)] if shape else [],
        "notes": list(report.notes),
        "simulation_wall_s": report.wall_s,
    }


def write_json(report: SimulationReport, path: str | os.PathLike[str]) -> Path:
    """:func:`simulation_to_dict` to ``path`` (atomic; NaN written as null)."""
    doc = json.loads(json.dumps(simulation_to_dict(report), default=_jsonable).replace("NaN", "null"))
    return write_text_atomic(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return None if v != v else float(v)
    raise TypeError(f"not JSON: {type(v).__name__}")


# ---- pages --------------------------------------------------------------------------------------------------


def _context(report: SimulationReport) -> dict[str, Any]:
    head, shapes = shape_table(report)
    m = report.model
    return dict(
        title=f"profattn simulate — {m.label} on {report.gpu}", report=report, verdict=verdict_sentences(report),
        deployments=deployment_rows(report), rates=rate_rows(report), operating=operating_rows(report),
        operating_verdict=operating_sentences(report), shape_head=head, shape_rows=shapes,
        provenance=provenance_rows(report), inputs=_inputs(report),
        latency_chart=latency_chart(report), breakdown_chart=breakdown_chart(report), batch_chart=batch_chart(report),
        steps=[dict(kind=s.kind.value, index=f"{s.index:,}", start=f"{s.start_s:,.2f} s", decode=len(s.decode_kv),
                    chunks=", ".join(f"{q:,}/{kv:,}" for q, kv in s.chunks) or MISSING,
                    specs=s.specs(report.shapes[report.results[0].deployment.kv_dtype],
                                  report.results[0].deployment.scheduler.block_size))
               for s in report.steps] if report.results else [],
        schema=SCHEMA, schema_version=SCHEMA_VERSION,
    )


def _inputs(report: SimulationReport) -> list[tuple[str, str]]:
    m = report.model
    r0 = report.results[0].deployment if report.results else None
    rows = [("requests", f"{report.requests:,} from {os.path.basename(report.trace_source)}: {report.trace_rate_per_s:.3g} req/s "
                         f"over {report.trace_duration_s:,.0f} s, simulated at {report.rate_scale:.3g}× "
                         f"({report.trace_rate_per_s * report.rate_scale:.3g} req/s); prompt p10/p50/p90 "
                         + "/".join(f"{x:,.0f}" for x in report.prompt_tokens) + " tokens, output "
                         + "/".join(f"{x:,.0f}" for x in report.output_tokens)),
            ("model", f"{m.label}: {m.num_layers} layers, {m.q_heads_per_gpu}/{m.kv_heads_per_gpu} query/KV heads per GPU, "
                      f"d {m.head_dim}, hidden {m.hidden_size:,}, MLP {m.intermediate_size:,}, vocabulary "
                      f"{m.vocab_size:,}, {m.num_params / 1e9:.2f} B parameters, {m.dtype} ({m.source})"),
            ("SLO", f"TTFT ≤ {fmt_latency_s(report.slo.ttft_s)}, TPOT ≤ {fmt_latency_s(report.slo.tpot_s)}, "
                    f"met by {_pct(report.slo.attainment)} of requests"),
            ("GPU and prices", f"{report.gpu}: attention from {report.source}; the rest of each step from the model's "
                               f"FLOPs and bytes at {report.gemm_tflops:,.0f} TFLOP/s GEMM and {report.read_gbps:,.0f} GB/s "
                               "read (the runs' median ceilings) — an estimate, shown apart")]
    if r0 is not None:
        s = r0.scheduler
        c = r0.capacity
        mem = ("KV budget given in tokens" if c.gpu_memory_bytes is None else
               f"{c.gpu_memory_bytes / (1 << 30):.1f} GiB × {c.gpu_memory_utilization:g} − {c.weight_bytes / (1 << 30):.1f} GiB "
               f"weights − {c.activation_bytes / (1 << 30):.2f} GiB activations")
        rows.append(("scheduler", f"max_num_batched_tokens {s.max_num_batched_tokens:,}, max_num_seqs {s.max_num_seqs:,}, "
                                  f"chunked prefill {'on' if s.enable_chunked_prefill else 'off'}, block_size "
                                  f"{s.block_size}; KV cache: {mem}"))
    return rows


def render_html(report: SimulationReport) -> str:
    """The simulation as one self-contained HTML page (plotly.js inline once)."""
    return render("simulate", _context(report))


def write_html(report: SimulationReport, path: str | os.PathLike[str]) -> Path:
    """:func:`render_html` to ``path`` atomically.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    return write_html_file(render_html(report), path)


def simulation_markdown(report: SimulationReport) -> str:
    """The simulation as GitHub Markdown (first line :data:`profattn.files.MARKDOWN_MARKER`, under GitHub's comment
    limit): the verdict, the deployment table, the rate search, the step shapes and what the prices rest on."""
    dep = deployment_rows(report)
    rates = rate_rows(report)
    head, shapes = shape_table(report)
    prov = provenance_rows(report)

    def body(cap: int | None) -> str:
        parts = [f"## profattn simulate: {md_text(report.model.label)} on {md_text(report.gpu)}", ""]
        parts += [f"- {md_text(s)}" for s in verdict_sentences(report)]
        parts += ["", md_table(["input", ""], _inputs(report)), ""]
        parts += [md_table(["deployment", "KV capacity", "TTFT p50/p90/p99", "TPOT p50/p90/p99", "ITL p99", "output tok/s",
                            "within SLO", "highest rate within SLO", "preemptions", "attention decode", "attention prefill",
                            "rest (estimate)", "extrapolated"],
                           [[r["deployment"], r["kv"], r["ttft"], r["tpot"], r["itl_p99"], r["tokens_per_s"], r["attainment"],
                             r["best_rate"], r["preemptions"], r["attn_decode"], r["attn_prefill"], r["rest"],
                             r["extrapolated"]] for r in dep]), ""]
        ops = operating_rows(report)
        if ops:
            parts += ["### Operating point (scheduler knobs)", ""]
            parts += [f"- {md_text(x)}" for x in operating_sentences(report)]
            parts += ["", md_table(["deployment", "setting", "role", "KV tokens", "max rate within SLO", "TTFT/TPOT p90 there",
                                    "binding above it", "within SLO at 1×", "goodput at 1×", "TTFT/TPOT p90 at 1×"],
                                   [[r["deployment"], r["knobs"], r["role"], r["kv"], r["best"], r["at_best"], r["binding"],
                                     r["at_trace"], r["goodput"], r["at_trace_lat"]] for r in ops], cap), ""]
        if rates:
            parts += ["### Rate search", "", md_table(["deployment", "scale", "rate", "within SLO", "meets", "TTFT p90/p99",
                                                       "TPOT p90/p99", "preemptions"],
                                                      [[r["deployment"], r["scale"], r["rate"], r["attainment"], r["meets"],
                                                        r["ttft"], r["tpot"], r["preemptions"]] for r in rates], cap), ""]
        parts += ["### Step shapes", "", md_table(head, shapes, cap), ""]
        parts += ["### What the prices rest on", "",
                  md_table(["backend", "part", "cells", "runs", "work items", "roofline time", "small-call floor", "held out",
                            "error median / p90 / worst", "±", "notes"],
                           [[r["backend"], r["part"], r["cells"], r["runs"], r["items"], r["roof"], r["floor"], r["held_out"],
                             r["error"], r["uncertainty"], r["notes"]] for r in prov], cap), ""]
        return "\n".join(parts)

    return fit(body)


def write_markdown(report: SimulationReport, path: str | os.PathLike[str]) -> Path:
    """:func:`simulation_markdown` to ``path`` atomically."""
    return write_text_atomic(path, simulation_markdown(report))


def text_report(report: SimulationReport) -> str:
    """The console answer: one line per deployment, then the verdict."""
    dep = deployment_rows(report)
    w = max(len(r["deployment"]) for r in dep) if dep else 10
    lines = [f"{report.model.label} on {report.gpu}, {report.requests:,} requests at "
             f"{report.trace_rate_per_s * report.rate_scale:.3g} req/s ({report.rate_scale:.3g}× the trace), SLO TTFT ≤ "
             f"{fmt_latency_s(report.slo.ttft_s)}, TPOT ≤ {fmt_latency_s(report.slo.tpot_s)} for {_pct(report.slo.attainment)}",
             "",
             f"{'deployment':<{w}}  {'KV tokens':>10}  {'TTFT p50/p90/p99':>26}  {'TPOT p50/p90/p99':>26}  "
             f"{'within SLO':>10}  {'max rate within SLO':>22}  {'attention':>10}  {'rest':>10}"]
    for r, res in zip(dep, report.results):
        lines.append(f"{r['deployment']:<{w}}  {res.deployment.capacity.tokens:>10,}  {r['ttft']:>26}  {r['tpot']:>26}  "
                     f"{r['attainment']:>10}  {r['best_rate']:>22}  "
                     f"{res.attention_decode_s + res.attention_prefill_s:>8,.1f} s  {res.rest_s:>8,.1f} s")
    lines.append("")
    lines += verdict_sentences(report)
    ops = [r for r in operating_rows(report) if r["role"] != "tried"]
    if ops:
        w = max(len(r["deployment"]) for r in ops)
        k = max(len(r["knobs"]) for r in ops)
        lines += ["", f"operating point (--search {','.join(report.operating[0].axes)})", "",
                  f"{'deployment':<{w}}  {'setting':<{k}}  {'role':<13}  {'max within SLO':>14}  {'binding above it':<16}  "
                  f"{'at 1×: within':>13}  {'goodput':>11}  {'TTFT/TPOT p90':>19}"]
        for r in ops:
            lines.append(f"{r['deployment']:<{w}}  {r['knobs']:<{k}}  {r['role']:<13}  {r['best']:>14}  {r['binding']:<16}  "
                         f"{r['at_trace']:>13}  {r['goodput']:>11}  {r['at_trace_lat']:>19}")
        lines += [""] + operating_sentences(report)
    return "\n".join(lines)


# ---- the price checked (``simulate --validate RUN``) ---------------------------------------------------------


def validation_lines(check: PriceCheck) -> list[str]:
    """The check as Markdown: one row per priced part (priced, measured with its samples, measured / priced, kernels
    read, off its band), one per step and deployment (Σ of parts, and the whole step as one call where measured),
    then the summary: median and worst ratio, how many within 10 % and 25 %, how many off their band."""
    out = ["| step | part | backend | priced µs | measured µs (samples) | measured / priced | kernels read | band |",
           "|---|---|---|---:|---:|---:|---|---|"]
    for p in check.parts:
        band = MISSING if p.band is None else f"±{100 * p.band:.0f} %" + (" **off**" if p.off_band else "")
        if p.measured_us is None:
            out.append(f"| {p.step:,} {p.kind} | {p.part} | {p.backend} | {p.priced_us:.1f} | not measured "
                       f"({p.status}) | — | — | {band} |")
            continue
        out.append(f"| {p.step:,} {p.kind} | {p.part} | {p.backend} | {p.priced_us:.1f} | {p.measured_us:.1f} "
                   f"({p.samples}) | {p.ratio:.2f} | {'yes' if p.traced else 'no (timed only)'} | {band} |")
    out += ["", "| step | deployment | priced µs (Σ parts) | measured µs (Σ parts) | measured / priced | whole step, one call |",
            "|---|---|---:|---:|---:|---|"]
    for s in check.steps:
        one = MISSING if s.one_call_us is None else f"{s.one_call_us:.1f} µs ({s.one_call_backend})"
        m = "not measured" if s.measured_us is None else f"{s.measured_us:.1f}"
        r = MISSING if s.ratio is None else f"{s.ratio:.2f}"
        out.append(f"| {s.step:,} {s.kind} | {s.deployment} | {s.priced_us:.1f} | {m} | {r} | {one} |")
    out.append("")
    if check.measured:
        out.append(f"{check.measured} priced parts measured ({check.unmeasured} not): measured / priced median "
                   f"{check.median_ratio:.3f}, min {check.min_ratio:.2f}, max {check.max_ratio:.2f}; "
                   f"{check.within_10} within 10 %, {check.within_25} within 25 %; {check.off_band} off their band "
                   f"(the held-out p90 error of that backend's part)"
                   + (f"; per step (Σ parts) median {check.step_median_ratio:.3f}, worst {check.step_worst_ratio:.2f}"
                      if check.step_median_ratio is not None else ""))
    else:
        out.append(f"no priced part was measured ({check.unmeasured} not)")
    return out
