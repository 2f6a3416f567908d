"""``profattn recommend``, ``profattn db list``, ``analyze --recommend`` and the run report's "Selection policy"
section: the typed records of :mod:`profattn.analysis.recommend` and :mod:`profattn.analysis.policy` as text,
JSON and template rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profattn.analysis.policy import (
    Condition, Policy, Rule, Validation, policy_to_dict, validation_dict,
)
from profattn.analysis.recommend import (
    NEAR_TIE_FRACTION, CallAdvice, RankedBackend, Recommendation, Status, TraceAdvice,
)
from profattn.report.format import MISSING, fmt_bytes, fmt_sig, fmt_span, fmt_us, short_kernel_name
from profattn.store import StoredRun
from profattn.workload import workload_spec

#: Numeric fields whose thresholds are shown as integers (lengths, counts).
_INTEGER_FIELDS = {"kv_len", "batch", "q_len", "head_dim", "num_q_heads", "num_kv_heads", "page_size", "window",
                   "shared_prefix_len"}
_FIELD_NAMES = {"bhkv_per_sm": "B·Hkv/SMs", "group_size": "GQA group", "kv_len": "kv_len", "batch": "batch"}


def condition_text(c: Condition) -> str:
    """``kv_len ≥ 2,290``, ``B·Hkv/SMs < 0.485``, ``phase = decode``, ``kv_layout ≠ dense``."""
    name = _FIELD_NAMES.get(c.field, c.field)
    op = {">=": "≥", "<": "<", "==": "=", "!=": "≠"}[c.op]
    if isinstance(c.value, str):
        return f"{name} {op} {c.value}"
    value = f"{round(c.value):,}" if c.field in _INTEGER_FIELDS else fmt_sig(c.value)
    return f"{name} {op} {value}"


def rule_text(r: Rule) -> str:
    """``phase = decode, batch ≥ 3 → sdpa-cudnn`` (``always → X`` for a one-leaf policy)."""
    return f"{', '.join(condition_text(c) for c in r.conditions) or 'always'} → {r.backend}"


def _pct(v: float | None) -> str:
    return MISSING if v is None else f"{fmt_sig(100 * v, 2)} %"


def validation_text(v: Validation) -> str:
    """One sentence of leave-one-workload-out numbers."""
    if not v.n:
        return "no workload with two or more eligible backends to hold out"
    worst = v.worst
    parts = [f"{v.within_noise}/{v.n} held-out workloads ({_pct(v.within_noise_fraction)}) within noise of the measured best "
             f"({v.exact} exactly the best)",
             f"mean regret {_pct(v.mean_regret)}",
             (f"worst {_pct(worst.regret)} ({worst.key}: {worst.predicted} instead of {worst.best})"
              if worst and worst.regret else "worst 0 %" if worst else "worst –")]
    if v.uncovered:
        parts.append(f"{v.uncovered} outside the domain the others span (no prediction)")
    if v.unrunnable:
        parts.append(f"{v.unrunnable} predicted a backend that did not run there")
    return "; ".join(parts)


def _timing_kind(r: RankedBackend) -> str:
    return {"graph": "CUDA graph", "eager": "eager", "mixed": "graph/eager"}.get(r.timing_kind, r.timing_kind)


def _runs_text(rec: Recommendation, r: RankedBackend) -> str:
    by = {x.run_id: x for x in rec.runs}
    return ", ".join(f"{by[i].preset} {by[i].created_utc[:10]}" if i in by else i for i in r.runs)


def recommend_text(rec: Recommendation) -> str:
    """The human answer of ``profattn recommend``: the status line, the ranked table, the winner's evidence, the
    runs and versions behind it; for a prediction its rule and confidence; for unknown the command that measures it."""
    w = rec.workload
    lines = [f"workload: {w.tag} on {rec.gpu}"]
    if rec.status is Status.MEASURED_WINNER:
        r = rec.ranked[1] if len(rec.ranked) > 1 else None
        after = f", {fmt_sig((r.ratio - 1) * 100, 2)} % ahead of {r.backend}" if r else " (the only backend measured)"
        lines.append(f"measured winner: {rec.best}{after}")
    elif rec.status is Status.NEAR_TIE:
        lines.append(f"near tie: {rec.best} ~ {', '.join(rec.tied)} (within {NEAR_TIE_FRACTION:.0%} or the measured "
                     "noise; benchmark both in your setting)")
    elif rec.status is Status.PREDICTED:
        p = rec.prediction
        assert p is not None
        lines.append(f"predicted: {p.backend} (not measured for this workload; confidence {_pct(p.confidence)}: "
                     f"within noise of the best on {p.rule.within_noise} of the {p.rule.support} measured workloads "
                     f"this rule covers)")
        lines.append(f"  rule: {rule_text(p.rule)}")
    else:
        why = ("no measurement of this workload on this GPU, and no policy learnt from a similar one "
               "(same phase, dtype, layout, KV dtype and length distribution)")
        lines.append(f"unknown: {why}")
    if rec.status in (Status.PREDICTED, Status.UNKNOWN):
        lines.append(f"  measure it: profattn profile --workload {workload_spec(w)}")
    if rec.ranked:
        lines.append("")
        lines.append(f"  {'#':>2} {'backend':<24} {'latency':>11} {'vs best':>8}  {'p10–p90':<22} {'n':>3}  timing       runs")
        for i, r in enumerate(rec.ranked, 1):
            vs = "best" if i == 1 else f"+{fmt_sig((r.ratio - 1) * 100, 2)} %"
            mark = " ~" if r.tie else ""
            lines.append(f"  {i:>2} {r.backend + mark:<24} {fmt_us(r.time.median_us):>11} {vs:>8}  "
                         f"{fmt_span(r.time.p10_us, r.time.p90_us, r.time.median_us):<22} {r.samples:>3}  "
                         f"{_timing_kind(r):<12} {_runs_text(rec, r)}")
        lines.append("  (~: within noise of the best or 3 %; n: independent samples; latency: the CUDA-graph replay "
                     "where the cell was captured, else eager launches)")
    if rec.excluded:
        seen: dict[str, int] = {}
        for e in rec.excluded:
            text = f"{e.backend} ({e.status}{', incorrect' if e.correct is False and e.status != 'incorrect' else ''}"
            seen[text] = seen.get(text, 0) + 1
        ex = ", ".join(f"{t}{f' in {n} runs' if n > 1 else ''})" for t, n in seen.items())
        lines.append(f"  not ranked: {ex}")
    if rec.evidence is not None:
        e = rec.evidence
        lines.append("")
        lines.append(f"evidence for {rec.best} (run {e.run_id}):")
        lines.append(f"  kernel {short_kernel_name(e.dominant_kernel) if e.dominant_kernel else MISSING}, grid "
                     f"[{e.grid or MISSING}] block [{e.block or MISSING}], {e.ctas if e.ctas is not None else MISSING} CTAs "
                     f"({fmt_sig(e.ctas_per_sm) if e.ctas_per_sm is not None else MISSING} per SM), "
                     f"kernel time {fmt_us(e.gpu_time_us)}")
        traffic = (f"DRAM {fmt_bytes(e.dram_bytes)} vs {fmt_bytes(e.requested_bytes)} requested "
                   f"({e.dram_bytes / e.requested_bytes:.2f}×)" if e.dram_bytes is not None and e.requested_bytes
                   else f"requested {fmt_bytes(e.requested_bytes)} (no counters: DRAM bytes not measured)")
        lines.append(f"  {traffic}")
    if rec.runs:
        lines.append("")
        lines.append("runs:")
        for r in rec.runs:
            lines.append(f"  {r.run_id}  {r.created_utc}  {r.preset:<14} torch {r.torch}, CUDA {r.cuda or MISSING}, "
                         f"cuDNN {r.cudnn or MISSING}, Triton {r.triton or MISSING}, FlashInfer {r.flashinfer or 'not recorded'}"
                         f"  ({r.path})")
    return "\n".join(lines) + "\n"


def recommend_json(rec: Recommendation) -> dict[str, Any]:
    """The ``--json`` document of ``profattn recommend`` (``schema`` ``profattn.recommend``, version 1; times µs,
    ``ratio`` = latency / best latency, ``confidence`` 0..1)."""
    e = rec.evidence
    return {
        "schema": "profattn.recommend", "version": 1, "gpu": rec.gpu, "workload": workload_spec(rec.workload),
        "workload_tag": rec.workload.tag, "status": rec.status.value, "best": rec.best, "near_tie_with": list(rec.tied),
        "ranked": [{"backend": r.backend, "latency_us": r.time.median_us, "p10_us": r.time.p10_us, "p90_us": r.time.p90_us,
                    "ratio": r.ratio, "tie": r.tie, "samples": r.samples, "timing": r.timing_kind,
                    "runs": list(r.runs)} for r in rec.ranked],
        "excluded": [{"backend": x.backend, "status": x.status, "correct": x.correct, "run": x.run_id} for x in rec.excluded],
        "evidence": None if e is None else {
            "run": e.run_id, "dominant_kernel": e.dominant_kernel, "grid": e.grid, "block": e.block, "ctas": e.ctas,
            "ctas_per_sm": e.ctas_per_sm, "gpu_time_us": e.gpu_time_us, "dram_bytes": e.dram_bytes,
            "requested_bytes": e.requested_bytes},
        "prediction": None if rec.prediction is None else {
            "backend": rec.prediction.backend, "confidence": rec.prediction.confidence,
            "rule": rule_text(rec.prediction.rule), "support": rec.prediction.rule.support},
        "measure": f"profattn profile --workload {workload_spec(rec.workload)}" if rec.status in (Status.PREDICTED, Status.UNKNOWN) else None,
        "runs": [{"run": r.run_id, "created_utc": r.created_utc, "preset": r.preset, "path": r.path, "torch": r.torch,
                  "cuda": r.cuda, "cudnn": r.cudnn, "triton": r.triton, "flashinfer": r.flashinfer} for r in rec.runs],
    }


def policy_text(p: Policy) -> str:
    """The policy's rules, one a line, and its validation when computed."""
    lines = [f"selection policy for {p.gpu} ({p.workloads} workloads, {p.cells} cells, {len(p.runs)} runs):"]
    for r in p.rules():
        lines.append(f"  {rule_text(r)}    [{r.within_noise}/{r.support} within noise, mean regret {_pct(r.mean_regret)}]")
    if p.validation is not None:
        lines.append(f"leave one workload out: {validation_text(p.validation)}")
        for phase in sorted({h.phase for h in p.validation.held_out}):
            lines.append(f"  {phase}: {validation_text(p.validation.of_phase(phase))}")
    return "\n".join(lines) + "\n"


def runs_text(runs: Sequence[StoredRun], gpus: dict[str, int], path: str) -> str:
    """``profattn db list``: the store's path, its GPUs and cells, and one line per run."""
    lines = [f"store: {path}",
             f"{len(runs)} run(s), {sum(gpus.values())} cell(s); GPUs: "
             + (", ".join(f"{g} ({n} cells)" for g, n in gpus.items()) or "none")]
    for r in runs:
        lines.append(f"  {r.run_id}  {r.created_utc}  {r.gpu:<14} {r.preset:<14} {r.cells:>5} cells  torch {r.torch}  {r.path}")
    return "\n".join(lines) + "\n"


def _advice_line(a: CallAdvice) -> str:
    rec = a.recommendation
    head = f"  {a.calls}× {a.workload.tag} ran {a.ran}"
    head += f" ({a.ran_backend}, {fmt_us(a.ran_us)})" if a.ran_backend else " (not measured in the store)"
    if rec.status in (Status.MEASURED_WINNER, Status.NEAR_TIE):
        best = rec.ranked[0]
        tie = f" ~ {', '.join(rec.tied)}" if rec.tied else ""
        what = f"{rec.status.value}: {best.backend}{tie} {fmt_us(best.time.median_us)}"
    elif rec.status is Status.PREDICTED:
        what = f"predicted: {rec.best} (confidence {_pct(rec.prediction.confidence)})"  # type: ignore[union-attr]
    else:
        what = f"unknown — measure it: profattn profile --workload {workload_spec(a.workload)}"
    save = "" if a.saving_us is None else f"; saves {fmt_us(a.saving_us)} of {fmt_us(a.gpu_time_us)} GPU time"
    return f"{head} → {what}{save}"


def trace_advice_text(advice: Sequence[TraceAdvice]) -> str:
    """``analyze --recommend``: per trace file, its calls grouped by workload and backend, and the saving."""
    lines = []
    for t in advice:
        if t.gpu is None:
            lines.append(f"recommend: {t.label}: the trace's GPU is not in the store (give --gpu NAME)")
            continue
        lines.append(f"recommend: {t.label} on {t.gpu}")
        lines.extend(_advice_line(a) for a in t.advice)
        if t.unshaped:
            lines.append(f"  {t.unshaped} call(s) without a workload (shapes not recorded): no advice")
        if not any(a.saving_us is not None for a in t.advice):
            lines.append("  estimated saving: none to estimate (no call whose backend and best were both measured on this GPU)")
            continue
        per_step = f", {fmt_us(t.saving_per_step_us)} per step ({t.steps} steps)" if t.saving_per_step_us is not None else ""
        lines.append(f"  estimated saving: {fmt_us(t.saving_us)} of GPU time over the trace{per_step}")
    return "\n".join(lines) + "\n"


def trace_advice_json(advice: Sequence[TraceAdvice]) -> list[dict[str, Any]]:
    """``analyze --recommend`` as JSON: per file its advice (times µs)."""
    return [{"file": t.label, "gpu": t.gpu, "steps": t.steps, "saving_us": t.saving_us,
             "saving_per_step_us": t.saving_per_step_us,
             "calls": [{"workload": workload_spec(a.workload), "ran": a.ran, "ran_backend": a.ran_backend, "ran_us": a.ran_us,
                        "calls": a.calls, "gpu_time_us": a.gpu_time_us, "status": a.recommendation.status.value,
                        "best": a.recommendation.best, "saving_us": a.saving_us} for a in t.advice]} for t in advice]


# ---- the run report's section -----------------------------------------------------------------------------------
def policy_section(policy: Policy | None) -> dict[str, Any] | None:
    """Rows of the run report's "Selection policy" section: the policy learnt from this run's own cells
    (:attr:`profattn.analysis.run.RunAnalysis.policy`, derived once there), its rules and its leave-one-workload-out
    validation; None when fewer than three workloads have an eligible cell (no rule to learn or check)."""
    if policy is None or policy.workloads < 3:
        return None
    v = policy.validation
    return {
        "gpu": policy.gpu, "workloads": policy.workloads, "cells": policy.cells,
        "rules": [{"when": ", ".join(condition_text(c) for c in r.conditions) or "always", "backend": r.backend,
                   "record": f"{r.within_noise}/{r.support}", "regret": _pct(r.mean_regret)} for r in policy.rules()],
        "validation": validation_text(v) if v else None,
        "by_phase": [{"phase": p, "text": validation_text(v.of_phase(p))} for p in sorted({h.phase for h in v.held_out})]
        if v else [],
        "json": policy_to_dict(policy), "validation_numbers": validation_dict(v),
    }
