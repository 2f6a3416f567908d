"""``profattn recommend``, ``profattn db list``, ``analyze --recommend`` and the run report's "Selection policy"
section: the typed records of :mod:`profattn.analysis.selection.recommend` and :mod:`profattn.analysis.selection.policy` as text,
JSON and template rows."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import Any

from profattn.analysis.selection.costmodel import Estimate, Outside
from profattn.analysis.selection.policy import (
    BASELINES, Policy, Score, Validation, policy_to_dict, validation_dict,
)
from profattn.analysis.selection.recommend import (
    NEAR_TIE_FRACTION, CallAdvice, ChangeCost, Option, PlannedMeasurement, RankedBackend, Recommendation, Status,
    TraceAdvice,
)
from profattn.interfaces import Change, Interface
from profattn.report.format import MISSING, fmt_bytes, fmt_sig, fmt_span, fmt_us, short_kernel_name
from profattn.store import StoredRun
from profattn.workload import workload_spec

#: What each interface is, for a reader.
INTERFACE_TEXT = {
    Interface.SDPA: "torch SDPA on dense [B, H, L, d] tensors",
    Interface.SDPA_NESTED: "torch SDPA on jagged nested tensors",
    Interface.FLEX: "FlexAttention (compiled, a block mask)",
    Interface.EAGER: "eager matmul + softmax",
    Interface.PAGED: "a paged KV cache with a block table",
    Interface.FLASHINFER: "a FlashInfer plan/run wrapper over a paged cache (CSR page lists)",
    Interface.PACKED_VARLEN: "packed varlen tokens with cu_seqlens",
}
#: What each change asks of the caller.
CHANGE_TEXT = {
    Change.GATHER: "a contiguous cache (gather the pages per call, or keep a contiguous copy)",
    Change.PAGED_CACHE: "a paged KV cache with a block table",
    Change.PACK: "packed tokens with cu_seqlens",
    Change.NESTED: "jagged nested tensors",
    Change.PLAN_RUN: "a wrapper whose plan() runs on the host once per step",
    Change.BLOCK_MASK: "a FlexAttention block mask and torch.compile",
    Change.API: "another attention call",
}


def _pct(v: float | None) -> str:
    return MISSING if v is None else f"{fmt_sig(100 * v, 2)} %"


def cost_text(c: ChangeCost) -> str:
    """``gather ≈ 31.5 µs per call (134 MB at 4,263 GB/s; gather + SDPA measured 74.6 µs)``, ``plan-run: no per-call
    cost measured``."""
    if c.us is None:
        if c.change in (Change.PAGED_CACHE, Change.BLOCK_MASK):
            return f"{c.change.value}: no per-call cost"
        if c.change in (Change.GATHER, Change.PACK, Change.NESTED):
            measured = f"; gather + SDPA measured {fmt_us(c.path_us)}" if c.path_us is not None else ""
            return f"{c.change.value}: not estimated (no copy bandwidth measured on this GPU){measured}"
        return f"{c.change.value}: not measured"
    basis = f" ({fmt_bytes(c.bytes)} at {fmt_sig(c.gbps)} GB/s"
    basis += f"; gather + SDPA measured {fmt_us(c.path_us)})" if c.path_us is not None else ")"
    return f"{c.change.value} ≈ {fmt_us(c.us)} per call{basis}"


def option_text(o: Option) -> str:
    """``drop-in`` or ``needs: a paged KV cache with a block table`` with its costs."""
    if o.changes is None:
        return "interface not declared (a plugin)"
    if not o.changes:
        return "drop-in"
    costs = [cost_text(c) for c in o.costs if c.us is not None or c.path_us is not None]
    return "needs " + "; ".join(CHANGE_TEXT[c] for c in o.changes) + (f" — {', '.join(costs)}" if costs else "")


def _needs(rec: Recommendation, backend: str | None) -> str:
    """`` — not a drop-in: needs …`` when ``backend`` is not of the caller's interface (empty otherwise)."""
    o = next((x for x in rec.options if x.backend == backend), None)
    if o is None or o.drop_in:
        return ""
    return f" — not a drop-in for {INTERFACE_TEXT[rec.interface]}: {option_text(o)}"


def loo_text(e: Estimate) -> str:
    """``its model's leave-one-out error: median 1.9 %, worst 31 %`` (or ``not checked``)."""
    if e.loo_median is None or e.loo_worst is None:
        return "its model's leave-one-out error: not checked (fewer than 3 workloads)"
    return f"its model's leave-one-out error: median {_pct(e.loo_median)}, worst {_pct(e.loo_worst)}"


def _estimate_text(e: Estimate) -> str:
    bound = f"; bound {fmt_us(e.bound_us)}" if e.bound_us is not None else ""
    return (f"±{fmt_sig(100 * (math.exp(e.sigma) - 1), 2)} %; {loo_text(e)}{bound}"
            + ("; extrapolated" if e.extrapolated else ""))


def _time_text(o: Option) -> str:
    if o.measured is not None:
        return f"{fmt_us(o.measured.time.median_us)} measured"
    e = o.predicted.estimate  # type: ignore[union-attr]
    return f"{fmt_us(e.us)} predicted ({_estimate_text(e)})"


#: How each number a model's span bounds is named, and its largest and smallest ends, for a reader.
OUTSIDE_TEXT = {"bytes_mb": ("bytes read", "most", "fewest"), "gflop": ("GFLOP", "most", "fewest"),
                "batch": ("batch", "largest", "smallest"), "kv_len": ("kv_len", "longest", "shortest"),
                "q_len": ("q_len", "longest", "shortest")}


def _outside_value(x: Outside, v: float) -> str:
    if x.field == "bytes_mb":
        return fmt_bytes(v * 1e6)
    return fmt_sig(v) if x.field == "gflop" else f"{round(v):,}"


def outside_text(x: Outside) -> str:
    """``kv_len 1,000,000 is 31× (4.9 octaves) beyond the longest measured, 32,768``."""
    name, most, fewest = OUTSIDE_TEXT[x.field]
    factor = x.value / x.measured if x.above else x.measured / x.value
    return (f"{name} {_outside_value(x, x.value)} is {fmt_sig(factor, 2)}× ({x.octaves:.1f} octaves) "
            f"{'beyond' if x.above else 'below'} the {most if x.above else fewest} measured, {_outside_value(x, x.measured)}")


def extrapolated_line(rec: Recommendation) -> str | None:
    """``  extrapolated: kv_len 1,000,000 is 31× … beyond the longest measured, 32,768; …`` when something the
    answer offers is priced outside its model's cells (:attr:`Recommendation.extrapolated`), else None."""
    if not rec.extrapolated:
        return None
    beyond = rec.beyond_measured
    if not beyond:
        return "  extrapolated: priced by a model that never saw this head_dim or GQA group"
    first = ("batch", "kv_len", "q_len")  # the workload's own numbers before the bytes and FLOPs they make
    beyond = sorted(beyond, key=lambda x: (x.field not in first, x.field not in first or first.index(x.field)))
    return (f"  extrapolated: {'; '.join(outside_text(x) for x in beyond)} — the times below are predictions "
            "outside the measured range")


def _outside_json(x: Outside) -> dict[str, Any]:
    return {"field": x.field, "value": x.value, "measured": x.measured, "above": x.above, "octaves": x.octaves}


def _measure_line(w: Any, backend: str | None = None) -> str:
    return f"profattn profile --workload {shlex.quote(workload_spec(w))}" + (f" --backend {backend}" if backend else "")


def _unmeasured_why(rec: Recommendation) -> dict[str, str]:
    """Why each predicted backend of ``rec`` cannot be picked here (its unbounded reason, and whom it lost to)."""
    return {o.backend: o.predicted.unmeasured + (f"; measured slower than {', '.join(o.predicted.lost_to)} on every "
                                                 "workload both ran, none near this shape" if o.predicted.lost_to else "")
            for o in rec.options if o.predicted is not None and o.predicted.unmeasured}


def unmeasured_lines(rec: Recommendation) -> list[str]:
    """One line per backend that cannot be picked here for want of measurements (``unmeasured here: … — measure it
    with …``)."""
    why = _unmeasured_why(rec)
    return [f"  unmeasured here: {b} ({why.get(b) or 'no cell in this regime'}) — measure it with "
            f"{_measure_line(rec.workload, b)}" for b in rec.unmeasured]


def how_lines(o: Option, indent: str = "    ") -> list[str]:
    """The lines that switch a call to ``o``'s backend (its declared adoption), indented."""
    if o.adoption is None or not o.adoption.how:
        return [f"{indent}(no adoption declared for {o.backend})"]
    return [indent + line for line in o.adoption.how]


def _timing_kind(r: RankedBackend) -> str:
    return {"graph": "CUDA graph", "eager": "eager", "mixed": "graph/eager"}.get(r.timing_kind, r.timing_kind)


def _runs_text(rec: Recommendation, r: RankedBackend) -> str:
    by = {x.run_id: x for x in rec.runs}
    return ", ".join(f"{by[i].preset} {by[i].created_utc[:10]}" if i in by else i for i in r.runs)


def recommend_text(rec: Recommendation) -> str:
    """The human answer of ``profattn recommend``: the status line; what to use with the caller's interface (the
    ``how`` lines) and, when faster, what to change for; the ranked options (drop-ins first); the winner's evidence;
    the runs and versions behind it; for a prediction its estimate, and whether it extrapolates; for unknown the
    command that measures it."""
    w = rec.workload
    lines = [f"workload: {w.tag} on {rec.gpu}", f"caller: {INTERFACE_TEXT[rec.interface]}"]
    if rec.status is Status.MEASURED_WINNER:
        r = rec.ranked[1] if len(rec.ranked) > 1 else None
        after = f", {fmt_sig((r.ratio - 1) * 100, 2)} % ahead of {r.backend}" if r else " (the only backend measured)"
        lines.append(f"measured winner: {rec.best}{after}{_needs(rec, rec.best)}")
    elif rec.status is Status.NEAR_TIE:
        lines.append(f"near tie: {rec.best} ~ {', '.join(rec.tied)} (within {NEAR_TIE_FRACTION:.0%} or the measured "
                     f"noise; benchmark both in your setting){_needs(rec, rec.best)}")
    elif rec.status is Status.PREDICTED:
        c = rec.choice
        assert c is not None
        assert c.estimate is not None
        e = c.estimate
        why = (f"a near tie with {', '.join(c.near_tie_with)} (within each other's bound), decided by the measured "
               f"times at {', '.join(c.decided_on) or 'no shared measured shape: the least bound'}") \
            if c.near_tie_with else "the least pessimistic bound"
        lines.append(f"predicted: {c.backend}, {fmt_us(e.us)} ({_estimate_text(e)}), {why}" + _needs(rec, c.backend))
    elif rec.choice is not None and rec.choice.contested:
        c = rec.choice
        best = c.estimate_of(c.best_bounded) if c.best_bounded else None
        bound = f", bound {fmt_us(best.estimate.bound_us)}" if best is not None and best.estimate.bound_us else ""
        lines.append(f"unknown: the best bounded candidate is {c.best_bounded}{bound}, but {', '.join(c.contested_by)} "
                     f"— predicted below that bound by a model not checked here — may be faster: nothing is picked "
                     f"until {'it is' if len(c.contested_by) == 1 else 'they are'} measured")
    elif rec.choice is not None:
        lines.append("unknown: no backend is measured in this workload's regime with a model checked on its own "
                     "cells — nothing is picked (measure it)")
    else:
        lines.append("unknown: no measurement of this workload on this GPU and no cost model for its kind of call")
    extra = extrapolated_line(rec)
    if extra is not None:
        lines.append(extra)
    if rec.status in (Status.PREDICTED, Status.UNKNOWN):
        lines.append(f"  measure it: {_measure_line(w)}")
    drop, fast = rec.best_drop_in, rec.fastest
    if drop is None and rec.drop_in_contested_by:
        lines += ["", f"use (drop-in for {INTERFACE_TEXT[rec.interface]}): no pick yet — "
                      f"{', '.join(rec.drop_in_contested_by)} may beat the best bounded drop-in (a model not checked "
                      f"here predicts it below that bound): measure it"]
    if drop is not None:
        tie = rec.drop_in_pick.near_tie_with if rec.drop_in_pick else ()
        tie_text = (f" — a near tie with {', '.join(tie)}, decided by the measured times at "
                    f"{', '.join(rec.drop_in_pick.decided_on) or 'no shared measured shape (the least bound)'}"
                    if tie else "")  # type: ignore[union-attr]
        lines += ["", f"use (drop-in for {INTERFACE_TEXT[rec.interface]}): {drop.backend}, {_time_text(drop)}{tie_text}"]
        lines += how_lines(drop)
    if fast is not None and fast is not drop and (drop is None or fast.total_us * (1 + NEAR_TIE_FRACTION) < drop.total_us):
        gain = f", {fmt_sig((drop.total_us / fast.total_us - 1) * 100, 2)} % faster than the drop-in" if drop else ""
        lines += ["", f"faster with a change: {fast.backend}, {_time_text(fast)}{gain}", f"  {option_text(fast)}"]
        lines += how_lines(fast)
    if rec.options:
        lines.append("")
        lines.append(f"  {'#':>2} {'backend':<26} {'kernel':>11} {'with changes':>13} {'vs first':>9}  adoption")
        first = rec.options[0].total_us
        for i, o in enumerate(rec.options, 1):
            kind = "" if o.measured is not None else ("†" if o.predicted.dominated else "?" if o.predicted.unmeasured else "*")
            vs = "–" if i == 1 else f"{'+' if o.total_us >= first else ''}{fmt_sig((o.total_us / first - 1) * 100, 2)} %"
            lines.append(f"  {i:>2} {o.backend + kind:<26} {fmt_us(o.kernel_us):>11} {fmt_us(o.total_us):>13} {vs:>9}  "
                         f"{option_text(o)}")
        lines.append("  (drop-ins first; *: predicted, not measured on this workload; †: predicted, and measured slower than "
                     "another on every workload of its regime around this shape, so never the pick; ?: predicted by a model that cannot be "
                     "bounded here, never the pick; 'with changes': the kernel plus the per-call cost of the changes it "
                     "needs, what your call would pay)")
    lines += unmeasured_lines(rec)
    if rec.ranked:
        lines.append("")
        lines.append(f"  measured: {'backend':<24} {'latency':>11} {'vs best':>8}  {'p10–p90':<22} {'n':>3}  timing       runs")
        for i, r in enumerate(rec.ranked, 1):
            vs = "best" if i == 1 else f"+{fmt_sig((r.ratio - 1) * 100, 2)} %"
            mark = " ~" if r.tie else ""
            lines.append(f"  {i:>8}. {r.backend + mark:<24} {fmt_us(r.time.median_us):>11} {vs:>8}  "
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
        if e.host_us is not None:
            lat = rec.ranked[0].time.median_us if rec.ranked else None
            bound = (f": an eager loop is host-bound here, about {fmt_us(e.host_us)} a call" if lat and e.host_us > lat
                     else "")
            lines.append(f"  host {fmt_us(e.host_us)} to issue one call{bound}")
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


def _option_json(o: Option) -> dict[str, Any]:
    e = o.predicted.estimate if o.predicted is not None else None
    return {"backend": o.backend, "drop_in": o.drop_in,
            "changes": None if o.changes is None else [c.value for c in o.changes],
            "change_costs": [{"change": c.change.value, "us": c.us, "measured": c.measured, "bytes": c.bytes,
                              "gbps": c.gbps, "gather_sdpa_measured_us": c.path_us} for c in o.costs],
            "kernel_us": o.kernel_us, "total_us": o.total_us, "measured": o.measured is not None,
            "sigma": e.sigma if e else None, "extrapolated": e.extrapolated if e else None,
            "outside": [_outside_json(x) for x in e.outside] if e else [],
            "loo_error": {"median": e.loo_median, "worst": e.loo_worst} if e else None,
            "bound_us": o.bound_us, "pickable": o.pickable,
            "unmeasured": o.predicted.unmeasured if o.predicted is not None else None,
            "dominated": o.predicted.dominated if o.predicted is not None else False,
            "lost_to": list(o.predicted.lost_to) if o.predicted is not None else [],
            "interface": o.adoption.interface.value if o.adoption else None,
            "reads": o.adoption.reads.value if o.adoption else None, "how": list(o.adoption.how) if o.adoption else []}


def recommend_json(rec: Recommendation) -> dict[str, Any]:
    """The ``--json`` document of ``profattn recommend`` (``schema`` ``profattn.recommend``, version 3; times µs,
    ``ratio`` = latency / best latency, ``sigma`` a relative standard deviation; ``options`` drop-ins first, each
    prediction with its model's ``loo_error`` and ``bound_us``; ``unmeasured_here``: the backends to measure, each
    with ``why`` — null: no cell in this regime).
    Version 3 (issue 34): ``best`` and ``best_drop_in`` are measured or bounded picks (``best`` null when nothing
    measured in the regime can bound it), ``prediction`` drops ``kept_default`` and adds ``near_tie_with``; later
    additions: ``contested_by`` / ``best_bounded`` (no pick: an unbounded candidate is estimated below the best
    bounded one's bound) and ``drop_in_contested_by`` (the same for the drop-in pick); each option's ``dominated``
    (measured slower than another around this shape: never a pick) and ``lost_to`` (measured slower than these on every
    workload both ran, none near this shape: a candidate, but one that never contests).

    ``extrapolated`` is true whenever anything the answer offers is priced outside its model's cells: the predicted
    answer, a pickable option, or — with nothing measured on the workload — any option shown that is not dominated
    (until this addition it was the predicted answer alone: that is now ``answer_extrapolated``);
    ``beyond_measured``: when ``extrapolated``, each number of the workload outside those models' cells (``field``
    one of bytes_mb, gflop, batch, kv_len, q_len; ``value``; ``measured``, the nearest end any of them measured;
    ``above``; ``octaves`` between), else empty; each option's ``outside``: the same against its own model (empty
    when measured or inside)."""
    e = rec.evidence
    c = rec.choice
    why = _unmeasured_why(rec)
    return {
        "schema": "profattn.recommend", "version": 3, "gpu": rec.gpu, "workload": workload_spec(rec.workload),
        "workload_tag": rec.workload.tag, "status": rec.status.value, "interface": rec.interface.value,
        "best": rec.best, "best_drop_in": rec.best_drop_in.backend if rec.best_drop_in else None,
        "fastest": rec.fastest.backend if rec.fastest else None, "extrapolated": rec.extrapolated,
        "answer_extrapolated": rec.answer_extrapolated,
        "beyond_measured": [_outside_json(x) for x in rec.beyond_measured],
        "near_tie_with": list(rec.tied),
        "drop_in_near_tie_with": list(rec.drop_in_pick.near_tie_with) if rec.drop_in_pick else [],
        "contested_by": list(c.contested_by) if c is not None else [],
        "best_bounded": c.best_bounded if c is not None else None,
        "drop_in_contested_by": list(rec.drop_in_contested_by),
        "unmeasured_here": [{"backend": b, "why": why.get(b), "measure": _measure_line(rec.workload, b)}
                            for b in rec.unmeasured],
        "options": [_option_json(o) for o in rec.options],
        "ranked": [{"backend": r.backend, "latency_us": r.time.median_us, "p10_us": r.time.p10_us, "p90_us": r.time.p90_us,
                    "ratio": r.ratio, "tie": r.tie, "samples": r.samples, "timing": r.timing_kind,
                    "runs": list(r.runs)} for r in rec.ranked],
        "excluded": [{"backend": x.backend, "status": x.status, "correct": x.correct, "run": x.run_id} for x in rec.excluded],
        "evidence": None if e is None else {
            "run": e.run_id, "dominant_kernel": e.dominant_kernel, "grid": e.grid, "block": e.block, "ctas": e.ctas,
            "ctas_per_sm": e.ctas_per_sm, "gpu_time_us": e.gpu_time_us, "dram_bytes": e.dram_bytes,
            "requested_bytes": e.requested_bytes, "host_us": e.host_us},
        "prediction": None if c is None or rec.status is not Status.PREDICTED else {
            "backend": c.backend, "us": c.estimate.us if c.estimate else None,
            "sigma": c.estimate.sigma if c.estimate else None, "extrapolated": c.extrapolated, "modelled": c.modelled,
            "loo_error": {"median": c.estimate.loo_median, "worst": c.estimate.loo_worst} if c.estimate else None,
            "bound_us": c.estimate.bound_us if c.estimate else None, "near_tie_with": list(c.near_tie_with),
            "decided_on": list(c.decided_on), "default": c.default},
        "measure": f"profattn profile --workload {shlex.quote(workload_spec(rec.workload))}" if rec.status in (Status.PREDICTED, Status.UNKNOWN) else None,
        "runs": [{"run": r.run_id, "created_utc": r.created_utc, "preset": r.preset, "path": r.path, "torch": r.torch,
                  "cuda": r.cuda, "cudnn": r.cudnn, "triton": r.triton, "flashinfer": r.flashinfer} for r in rec.runs],
    }


def score_text(s: Score) -> str:
    """``38/40 hit, mean 0.41 %, worst 6.2 %`` (– without answers)."""
    if not s.answered:
        return "no answer"
    return f"{s.hits}/{s.answered} hit, mean {_pct(s.mean_regret)}, worst {_pct(s.worst_regret)}"


def slice_rows(v: Validation) -> list[dict[str, Any]]:
    """One row per held-out slice: its field and value, workloads, the policy's and the best constant's scores, and
    whether the policy is at least as good (hit rate and worst regret)."""
    rows = []
    for sl in (*v.slices, *((v.lowo,) if v.lowo else ())):
        p, i = sl.policy, sl.best_baseline
        b = sl.baseline(i)
        ok = (p.hit_rate or 0.0) >= (b.hit_rate or 0.0) - 1e-12 and (p.worst_regret or 0.0) <= (b.worst_regret or 0.0) + 1e-12
        rows.append({"field": sl.field.replace("_", " "), "value": sl.value, "n": p.n, "policy": score_text(p),
                     "baseline": BASELINES[i], "baseline_score": score_text(b), "ok": ok,
                     "extrapolated": sl.extrapolated})
    return rows


def validation_table(v: Validation) -> str:
    """The leave-one-slice-out table as GitHub Markdown (the README's and the benchmark's)."""
    lines = ["| held out | workloads | policy | best constant | its score | policy ≥ constant |", "|---|---|---|---|---|---|"]
    for r in slice_rows(v):
        lines.append(f"| {r['field']} = {r['value']} | {r['n']} | {r['policy']} | {r['baseline']} | "
                     f"{r['baseline_score']} | {'yes' if r['ok'] else '**no**'} |")
    p = v.pooled
    lines.append(f"| every slice, pooled | {p.n} | {score_text(p)} | | | |")
    return "\n".join(lines) + "\n"


def two_scores_table(v: Validation) -> str:
    """Issue 34's two scores per held-out slice as GitHub Markdown: the headline pick and the drop-in pick, each
    beside the constants "always sdpa-cudnn" and "always flashinfer-decode-tc" (the headline and both constants against
    the best measured, the drop-in pick against the best drop-in measured — FlashInfer's plan/run wrapper is no
    drop-in for a block-table caller, so its constant is scored as a headline; a constant not measured there gives
    no answer)."""
    cu, tc = BASELINES.index("always sdpa-cudnn"), BASELINES.index("always flashinfer-decode-tc")
    lines = ["| held out | workloads | headline pick | always sdpa-cudnn | drop-in pick | always flashinfer-decode-tc |",
             "|---|---|---|---|---|---|"]
    for sl in (*v.slices, *((v.lowo,) if v.lowo else ())):
        lines.append(f"| {sl.field.replace('_', ' ')} = {sl.value} | {sl.policy.n} | {score_text(sl.policy)} | "
                     f"{score_text(sl.baseline(cu))} | {score_text(sl.drop_in)} | {score_text(sl.baseline(tc))} |")
    return "\n".join(lines) + "\n"


def model_rows(p: Policy) -> list[dict[str, Any]]:
    """One row per cost model: backend, regime, cells/workloads, σ, and its coefficients as rates (µs per MB as
    GB/s, µs per GFLOP as TFLOP/s: the efficiency the fit found) and its launch floor. A rate above the GPU's
    measured roof (read stream; the matrix roof, :attr:`~profattn.analysis.selection.costmodel.CostModels.flops_roof_tflops`)
    is not an efficiency — the fit left that term almost unused, the others
    carry the time — and shows as "unused" rather than as an impossible rate."""
    def rate(per_unit: float, roof: float | None, unit: str) -> str:
        if per_unit <= 0:
            return MISSING
        r = 1e3 / per_unit
        return "unused" if roof and r > roof else f"{fmt_sig(r)} {unit}"

    read_roof = p.models.read_gbps
    gemm_roof = p.models.flops_roof_tflops
    rows = []
    for m in sorted(p.models.models.values(), key=lambda m: (m.regime.key, m.backend)):
        launch, per_mb, idle_mb, per_gf, idle_gf = m.coef
        rows.append({"backend": m.backend, "regime": m.regime.key, "cells": m.cells, "workloads": m.workloads,
                     "sigma": f"{fmt_sig(100 * m.sigma, 2)} %", "launch": fmt_us(launch),
                     "gbps": rate(per_mb, read_roof, "GB/s"), "tflops": rate(per_gf, gemm_roof, "TFLOP/s"),
                     "idle": "yes" if idle_mb > 0 or idle_gf > 0 else "no",
                     "loo": f"{_pct(m.loo_median)} / {_pct(m.loo_worst)}" if m.loo_median is not None else "not checked"})
    return rows


def policy_text(p: Policy) -> str:
    """The policy's models (one a line), regime defaults, and its validation when computed."""
    lines = [f"selection policy for {p.gpu} ({p.workloads} workloads, {p.cells} cells, {len(p.runs)} runs): "
             f"{len(p.models.models)} cost models"]
    for r in model_rows(p):
        lines.append(f"  {r['backend']:<26} {r['regime']:<46} {r['workloads']:>4} wl  σ {r['sigma']:>6}  launch "
                     f"{r['launch']:>9}  {r['gbps']:>14}  {r['tflops']:>16}  LOO median/worst {r['loo']}")
    lines.append("defaults (most workloads won): " + ", ".join(f"{k} → {b}" for k, b in sorted(p.defaults.items())))
    if p.dominated:
        lines.append("dominated (never a pick within the shapes it lost on): " + "; ".join(
            f"{k}: {', '.join(p.dominated_in(k))}" for k in sorted(p.dominated)))
    if p.validation is not None:
        lines.append("held out (leave one slice out; hit = within 3 % or noise of the measured best):")
        for r in slice_rows(p.validation):
            lines.append(f"  {r['field'] + ' = ' + r['value']:<28} n {r['n']:>4}  policy {r['policy']:<40} "
                         f"best constant ({r['baseline']}) {r['baseline_score']}{'' if r['ok'] else '  ← worse'}")
    return "\n".join(lines) + "\n"


def runs_text(runs: Sequence[StoredRun], gpus: dict[str, int], path: str) -> str:
    """``profattn db list``: the store's path, its GPUs and cells, and one line per run."""
    lines = [f"store: {path}",
             f"{len(runs)} run(s), {sum(gpus.values())} cell(s); GPUs: "
             + (", ".join(f"{g} ({n} cells)" for g, n in gpus.items()) or "none")]
    for r in runs:
        lines.append(f"  {r.run_id}  {r.created_utc}  {r.gpu:<14} {r.preset:<14} {r.cells:>5} cells  torch {r.torch}  {r.path}")
    return "\n".join(lines) + "\n"


def kv_range(kvs: Sequence[int]) -> str:
    """``kv 512`` or ``kv 17–76 (60 lengths)``."""
    if len(kvs) == 1:
        return f"kv {kvs[0]:,}"
    return f"kv {min(kvs):,}–{max(kvs):,} ({len(kvs)} lengths)"


def _advice_line(a: CallAdvice) -> list[str]:
    rec = a.recommendation
    w = a.workload
    shape = f"{w.phase.value} b{w.batch} q{w.q_len} hq{w.num_q_heads}/hkv{w.num_kv_heads} d{w.head_dim} {w.dtype}"
    head = f"  {a.calls}× {shape}, {kv_range(a.kv_lens)}: ran {a.ran} ({INTERFACE_TEXT[a.interface]})"
    head += f" = {a.ran_backend}, {fmt_us(a.ran_us)} at kv {max(a.kv_lens):,}" if a.ran_backend else ""
    statuses = sorted({st.value for _, st, _ in a.per_kv})
    drop = rec.best_drop_in
    lines = [head]
    if drop is not None:
        lines.append(f"    use: {drop.backend} (drop-in; {_time_text(drop)} at kv {max(a.kv_lens):,}; "
                     f"{' / '.join(statuses)} across the lengths)")
        lines += how_lines(drop, "      ")
    fast = rec.fastest
    if fast is not None and fast is not drop and (drop is None or fast.total_us * (1 + NEAR_TIE_FRACTION) < drop.total_us):
        lines.append(f"    faster with a change: {fast.backend}, {_time_text(fast)} — {option_text(fast)}")
    if drop is None and fast is None:
        lines.append(f"    unknown — measure it: profattn profile --workload {shlex.quote(workload_spec(w))}")
    if a.saving_us is not None:
        lines.append(f"    saves {fmt_us(a.saving_us)} of {fmt_us(a.gpu_time_us)} GPU time (measured lengths only)")
    return lines


def plan_lines(plan: Sequence[PlannedMeasurement]) -> list[str]:
    """``--plan``: one ``profattn profile --workload …`` line per workload worth measuring, with why."""
    if not plan:
        return ["plan: nothing to measure (every answer asked for is measured)"]
    out = [f"plan: the {len(plan)} measurement(s) that would most sharpen these answers (the asked workload first, then by "
           "the expected regret of today's answer"
           + (", weighted by the GPU time it stands for)" if any(p.weight != p.expected_regret for p in plan) else ")")]
    for p in plan:
        out.append(f"  profattn profile --workload {shlex.quote(workload_spec(p.workload))}    # risks {_pct(p.expected_regret)}"
                   + (f", {p.answers} call(s)" if p.answers > 1 else ""))
    return out


def trace_advice_text(advice: Sequence[TraceAdvice]) -> str:
    """``analyze --recommend``: per trace file, its calls grouped by workload but for the KV length (one entry per
    group, with its KV range), the drop-in to use and the saving, and with ``--plan`` what to measure next."""
    lines = []
    for t in advice:
        if t.gpu is None:
            lines.append(f"recommend: {t.label}: the trace's GPU is not in the store (give --gpu NAME)")
            continue
        lines.append(f"recommend: {t.label} on {t.gpu}")
        for a in t.advice:
            lines.extend(_advice_line(a))
        if t.unshaped:
            lines.append(f"  {t.unshaped} call(s) without a workload (shapes not recorded): no advice")
        if not any(a.saving_us is not None for a in t.advice):
            lines.append("  estimated saving: none to estimate (no call whose backend and best were both measured on this GPU)")
        else:
            per_step = f", {fmt_us(t.saving_per_step_us)} per step ({t.steps} steps)" if t.saving_per_step_us is not None else ""
            lines.append(f"  estimated saving: {fmt_us(t.saving_us)} of GPU time over the trace{per_step}")
        if t.plan or t.planned:
            lines.extend(plan_lines(t.plan))
    return "\n".join(lines) + "\n"


def trace_advice_json(advice: Sequence[TraceAdvice]) -> list[dict[str, Any]]:
    """``analyze --recommend`` as JSON: per file its advice (times µs)."""
    return [{"file": t.label, "gpu": t.gpu, "steps": t.steps, "saving_us": t.saving_us,
             "saving_per_step_us": t.saving_per_step_us,
             "calls": [{"workload": workload_spec(a.workload), "kv_lens": list(a.kv_lens), "ran": a.ran,
                        "interface": a.interface.value, "ran_backend": a.ran_backend, "ran_us": a.ran_us,
                        "calls": a.calls, "gpu_time_us": a.gpu_time_us, "status": a.recommendation.status.value,
                        "per_kv": [{"kv_len": kv, "status": st.value, "use": b} for kv, st, b in a.per_kv],
                        "best": a.recommendation.best,
                        "best_drop_in": a.recommendation.best_drop_in.backend if a.recommendation.best_drop_in else None,
                        "how": list(a.recommendation.best_drop_in.adoption.how)
                        if a.recommendation.best_drop_in and a.recommendation.best_drop_in.adoption else [],
                        "saving_us": a.saving_us} for a in t.advice],
             "plan": [{"workload": workload_spec(p.workload), "expected_regret": p.expected_regret, "weight": p.weight}
                      for p in t.plan]} for t in advice]


# ---- the run report's section -----------------------------------------------------------------------------------
def policy_section(policy: Policy | None) -> dict[str, Any] | None:
    """Rows of the run report's "Selection policy" section: the cost models learnt from this run's own cells
    (:attr:`profattn.analysis.run.analyze.RunAnalysis.policy`, derived once there) and their leave-one-workload-out validation
    beside the constant baselines; None when fewer than three workloads have an eligible cell (nothing to learn or
    check)."""
    if policy is None or policy.workloads < 3 or policy.validation is None:
        return None
    v = policy.validation
    lowo = v.lowo
    return {
        "gpu": policy.gpu, "workloads": policy.workloads, "cells": policy.cells, "models": model_rows(policy),
        "defaults": [{"regime": k, "backend": b} for k, b in sorted(policy.defaults.items())],
        "slices": slice_rows(Validation((), lowo)) if lowo else [],
        "json": policy_to_dict(policy), "validation_numbers": validation_dict(v),
    }
