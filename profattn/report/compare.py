"""``profattn compare`` on the page: rows, sentences, the forest chart and the HTML of a
:class:`profattn.analysis.comparison.compare.Comparison` (the typed result; this module only displays it).

The Markdown comment (:func:`profattn.report.markdown.comparison_markdown`) uses the same rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from profattn.analysis.common.stats import RatioEstimate
from profattn.analysis.comparison.compare import (
    INCONCLUSIVE_SPAN,
    MIN_DRIFT_CELLS,
    CellChange,
    CompareClass,
    CompareMode,
    Comparison,
    LaunchChange,
    NoiseCause,
    RegressionKind,
    RegressionReason,
    VerdictChange,
)
from profattn.report.format import fmt_bytes, fmt_us, safe_chart
from profattn.report.render import render, write_html_file
from profattn.report.verdict import summary as verdict_summary
from profattn.report.verdict import workload_label


def run_label(path: str | os.PathLike[str]) -> str:
    """A short name for a run given on the command line: its directory's name (never an absolute path)."""
    p = Path(path)
    if p.name == "results.json":
        p = p.parent
    try:
        return p.resolve().name or "run"
    except (RuntimeError, OSError):  # a loop of symbolic links (RuntimeError in Python 3.11)
        return p.name or "run"


def fmt_change(est: RatioEstimate | None) -> str:
    """``+10.2% [+8.1 %, +11.5 %]``-style text of a ratio estimate (its interval when it has one, ends beyond a
    1,000 % change shown as a bound); "–" without one."""
    if est is None:
        return "–"
    s = f"{est.change:+.1%}"
    if est.lo is not None and est.hi is not None:
        s += f" [{_bound(est.lo)}, {_bound(est.hi)}]"
    return s


#: Interval ends beyond this change are shown as a bound ("> +1,000 %"): a simultaneous interval from a few noisy
#: samples can span many orders of magnitude, and its digits say nothing.
_SHOWN_CHANGE = 10.0


def _bound(ratio: float) -> str:
    """One end of a ratio interval as a change in %: ``+8.1%``, ``-100.0%`` (a ratio of 0), ``> +1,000%``."""
    change = ratio - 1
    if change > _SHOWN_CHANGE:
        return f"> +{_SHOWN_CHANGE * 100:,.0f}%"
    return f"{change * 100:+.1f}%"


def fmt_p(p: float | None) -> str:
    """A p-value: ``0.031``, ``< 0.0001``; "–" without one."""
    if p is None:
        return "–"
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def drift_text(cmp: Comparison) -> str | None:
    """The run-wide shift as a sentence (None when no cell was tested): its size and interval, over how many cells,
    and how the cells were judged."""
    d = cmp.drift
    if d is None:
        return None
    size = f"{d.change:+.1%} [{d.lo - 1:+.1%}, {d.hi - 1:+.1%}] over {d.cells} cell(s)"
    if cmp.mode is CompareMode.AB:
        return (f"Median change {size}: base and head were timed alternately in one process (A/B), so a drift of the "
                "machine cancels within each round; every cell is judged on its own pairs.")
    if not d.applied:
        return (f"Median change {size}: too few cells to tell a drift of the machine from a change (it needs "
                f"{MIN_DRIFT_CELLS}); cells are judged on their own samples.")
    scatter = f"; single cells scatter ±{d.spread:.1%} around it (one σ)" if d.spread > 0.0005 else ""
    if d.heavy:
        scatter += (", and a run's machine was noisy (load above its CPUs, or many spread cells): a single cell can be "
                    "starved for all its samples, so the scatter is read with heavy (Cauchy) tails")
    if d.detected:
        return (f"Run-wide shift {size}: most cells moved together — the machine drifted between the two processes (or "
                f"every kernel changed alike, which two runs cannot tell apart: compare --ab can){scatter}. Every cell is "
                "judged relative to it.")
    return f"No run-wide shift: median change {size}{scatter}; every cell is judged relative to it."


def inconclusive_headline(cmp: Comparison) -> str | None:
    """``inconclusive: the runs are too noisy to judge N cells``, or ``inconclusive: the runs share no cell, so
    nothing was compared`` (None: they share one and every tested cell was judged)."""
    inc = cmp.inconclusive
    if inc is None:
        return None if cmp.shared else "inconclusive: the runs share no cell, so nothing was compared"
    return f"inconclusive: the runs are too noisy to judge {inc.cells} cell{'s' if inc.cells != 1 else ''}"


def inconclusive_why(cmp: Comparison) -> str | None:
    """Why the inconclusive cells could not be judged (or nothing was compared) and what gives a conclusive answer
    (None: none)."""
    inc = cmp.inconclusive
    if inc is None:
        return None if cmp.shared else (
            "every cell is only in one run (another --regime, --backend, preset or workload selection); profile the "
            "same selection on both sides and compare again.")
    causes = {
        NoiseCause.FEW_SAMPLES: f"{inc.fewest_samples} timing sample(s) a side (a simultaneous interval from so few is wide)",
        NoiseCause.NOISY_MACHINE: ("a run's machine was noisy (load above its CPUs, or many spread cells), so the cells' "
                                   "scatter is read with heavy (Cauchy) tails"),
        NoiseCause.SCATTER: (f"single cells scatter ±{inc.scatter:.0%} between the two processes"
                             if inc.scatter is not None else "single cells scatter between the two processes"),
        NoiseCause.OWN_SPREAD: "a cell's own samples differ by more than 2× (threads descheduled by other work)",
    }
    why = "; ".join(causes[c] for c in inc.causes) or "the cells' samples are too spread"
    return (f"Their changes lie beyond ±{cmp.threshold:.0%} but their intervals span {INCONCLUSIVE_SPAN:g}× or more "
            f"(widest [{_bound(inc.widest.lo)}, {_bound(inc.widest.hi)}]), so a {INCONCLUSIVE_SPAN:g}× regression could not "
            f"be told from none: {why}. For a conclusive answer time both sides in one process (`profattn compare --ab "
            "BASE_BACKEND HEAD_BACKEND`), take more samples (`profile --repeat 10`), and on a CPU time with fewer "
            "threads (`profile --threads 1`, the CPU default) on a quieter machine.")


def method_text(cmp: Comparison) -> str:
    """How cells are classified, with the family-wise false-alarm rate and the threshold (HTML, Markdown, CLI)."""
    t = f"{cmp.threshold:.0%}"
    samples = ("the paired A/B rounds (Hodges–Lehmann of the per-round log ratios, exact signed-rank interval)"
               if cmp.mode is CompareMode.AB else
               "each cell's timing samples (Hodges–Lehmann over the per-repeat medians, exact Mann–Whitney interval)")
    relative = "" if cmp.mode is CompareMode.AB or not (cmp.drift and cmp.drift.applied) else \
        (", relative to the run-wide shift; a cell is tested against its own samples and against the other cells' "
         "scatter, and the larger p-value counts")
    return (f"Change = head/base − 1 from {samples}{relative}. Each of the {cmp.tested} tested cell(s) is tested for a "
            f"change beyond ±{t}, Holm-adjusted so the chance of any false alarm in the comparison is at most "
            f"{cmp.alpha:.0%} (family-wise); *slower* / *faster* = adjusted p below {cmp.alpha:.0%}, else *within noise*. "
            f"Intervals are simultaneous at {cmp.level:.0%} over the tested cells. A correctness pass → fail, or a cell "
            "that ran in the base and errors in the head, is a regression whatever its speed.")


def _fmt_value(v: object) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return "n/a" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def launch_change_text(ch: LaunchChange) -> str:
    """``"_paged_decode_split_kernel: grid [8, 4, 16] → [8, 4, 5]"`` or ``"kernel: only in base"``."""
    if ch.only is not None:
        return f"{ch.kernel}: only in {ch.only.value}"
    return f"{ch.kernel}: {ch.prop.value} {_fmt_value(ch.base)} → {_fmt_value(ch.head)}"  # type: ignore[union-attr]


def correctness_text(c: CellChange) -> str:
    """``pass → fail``-style text; "" when neither side was checked."""
    def word(p: bool | None) -> str:
        return "–" if p is None else ("pass" if p else "fail")
    if c.base_passed is None and c.head_passed is None:
        return ""
    return word(c.base_passed) if c.base_passed == c.head_passed else f"{word(c.base_passed)} → {word(c.head_passed)}"


def regression_text(c: CellChange, r: RegressionReason) -> str:
    """One reason ``c`` fails the comparison, as a sentence."""
    if r.kind is RegressionKind.SLOWER:
        est = c.judged
        return (f"{est.change:+.1%} slower (interval {_bound(est.lo)} … {_bound(est.hi)}, beyond +{c.threshold:.0%}; "  # type: ignore[union-attr,arg-type]
                f"adjusted p {fmt_p(c.p_slower)})")
    if r.kind is RegressionKind.CORRECTNESS:
        return f"correctness pass → fail ({r.reason or 'failed'})"
    return f"ran in the base run, {r.head_status} in the head run" + (f": {r.reason}" if r.reason else "")


def regression_texts(c: CellChange) -> tuple[str, ...]:
    """Every reason ``c`` fails, as sentences (empty when it does not)."""
    return tuple(regression_text(c, r) for r in c.regression_reasons)


def verdict_change_text(ch: VerdictChange) -> str:
    """``"training winner: a → b"`` or ``"decode kv 512: the training winner stays the winner (or ties) → is beaten beyond noise (a → b)"``."""
    if ch.workload is None:
        return f"training winner: {ch.base_winner or 'none'} → {ch.head_winner or 'none'}"
    word = {True: "stays the winner (or ties)", False: "is beaten beyond noise"}
    return (f"{workload_label(ch.workload)}: the training winner {word[ch.base_stays]} → {word[ch.head_stays]} "  # type: ignore[index]
            f"({ch.base_winner} → {ch.head_winner})")


def verdict_unchanged_text(cmp: Comparison) -> str:
    """What to say when no :class:`VerdictChange` was found: "The verdict did not change." only when both verdicts
    name the same winners; otherwise which winners differ and why that is no change beyond noise."""
    diffs = []
    if cmp.base_training_winner != cmp.head_training_winner:
        diffs.append(f"the training winner is {cmp.base_training_winner or 'none'} in {cmp.base_label} and "
                     f"{cmp.head_training_winner or 'none'} in {cmp.head_label}")
    flipped = [w for w in cmp.winners if w.flipped]
    if flipped:
        diffs.append(f"{len(flipped)} workload winner(s) differ (listed below)")
    if not diffs:
        return "The verdict did not change."
    tie = ("the training winners tie within noise, and " if cmp.base_training_winner != cmp.head_training_winner
           else "")
    return ("The verdicts name different winners — " + "; ".join(diffs) + f" — but their answers did not change: {tie}"
            "on every workload the training winner stays, ties or loses as before.")


def _order(c: CellChange) -> tuple:
    est = c.judged or c.estimate
    return (not c.regression, list(CompareClass).index(c.classification), -abs(est.change) if est else 0)


def cell_rows(cmp: Comparison) -> list[dict[str, Any]]:
    """Display-ready rows of the cell table (regressions first, then by class and |change|).
    ``classification`` stays the :class:`CompareClass` (the renderers print its value)."""
    rows = []
    for c in sorted(cmp.cells, key=_order):
        br = c.bytes_ratio
        rows.append({
            "cell_id": c.cell_id, "label": workload_label(c.workload), "phase": c.phase.value, "backend": c.backend,
            "classification": c.classification, "regression": c.regression,
            "faster": c.classification is CompareClass.FASTER,
            "top": c.regression or c.classification in (CompareClass.SLOWER, CompareClass.FASTER)
                   or bool(c.launch_changes) or c.correctness_changed,
            "base": fmt_us(c.base_latency_us), "head": fmt_us(c.head_latency_us),
            "change": fmt_change(c.judged or c.estimate) + _samples_disagree(c),
            "raw": fmt_change(c.estimate) if c.judged else "",
            "samples": f"{len(c.base_samples_us)} / {len(c.head_samples_us)}",
            "correctness": correctness_text(c),
            "status": _status(c),
            "launch": "; ".join(launch_change_text(x) for x in c.launch_changes),
            "bytes": (f"{fmt_bytes(c.base_dram_bytes)} → {fmt_bytes(c.head_dram_bytes)} ({br - 1:+.1%})" if br is not None else ""),
            "reasons": "; ".join(regression_texts(c)),
        })
    return rows


def _samples_disagree(c: CellChange) -> str:
    """A note when the base → head medians shown beside a change lie outside its raw interval (or, without one, more
    than 2× from its estimate): the samples split between levels, and the two figures would read as a contradiction."""
    est, b, h = c.estimate, c.base_latency_us, c.head_latency_us
    if est is None or not b or not h:
        return ""
    ratio = h / b
    outside = (not est.lo <= ratio <= est.hi) if est.lo is not None and est.hi is not None else (
        max(ratio / est.ratio, est.ratio / ratio) > 2)
    return f"; the medians moved {ratio - 1:+.1%} (the samples disagree)" if outside else ""


def _status(c: CellChange) -> str:
    b = c.base_status.value if c.base_status is not None else None
    h = c.head_status.value if c.head_status is not None else None
    return f"{b}" if b == h else f"{b} → {h}"


def winner_rows(cmp: Comparison) -> list[dict[str, Any]]:
    """Display-ready rows of the winner table: each workload's winner in both runs, ties marked."""
    return [{"label": workload_label(w.workload) + (" (over the paged cache)" if w.layout is not None else ""),
             "phase": w.phase.value,
             "base": (w.base_winner or "none") + (" (tie)" if w.close_base else ""),
             "head": (w.head_winner or "none") + (" (tie)" if w.close_head else ""), "flipped": w.flipped,
             "noise_flip": w.flipped and (w.close_base or w.close_head)} for w in cmp.winners]


def summary_line(cmp: Comparison) -> str:
    """One sentence: counts per class, whether the comparison fails, and the false-alarm rate it is held to."""
    parts = [f"{cmp.count(k)} {k.value}" for k in CompareClass if cmp.count(k)]
    if cmp.regression:
        head = f"{len(cmp.regressions)} regression(s)"
    elif cmp.inconclusive is not None:
        head = f"inconclusive ({cmp.inconclusive.cells} cell(s) too noisy to judge), no regression"
    elif not cmp.shared:
        head = "inconclusive (no cell in both runs: nothing compared), no regression"
    else:
        head = "no regression"
    shift = ""
    if cmp.drift is not None and cmp.drift.detected:
        shift = f"; run-wide shift {cmp.drift.change:+.1%} (machine drift, judged relative to it)"
    return (f"{head} beyond ±{cmp.threshold:.0%} — " + ", ".join(parts)
            + f" (family-wise false-alarm rate ≤ {cmp.alpha:.0%} over {cmp.tested} tested cell(s), Holm{shift}).")


def forest_figure(cmp: Comparison) -> dict[str, Any] | None:
    """Plotly figure (JSON-ready): head/base ratio with its interval per timed cell, the threshold band."""
    import plotly.graph_objects as go

    cells = [c for c in cmp.cells if (c.judged or c.estimate) is not None]
    if not cells:
        return None
    C = CompareClass
    colors = {C.SLOWER: "#c0392b", C.FASTER: "#1e8449", C.NOISE: "#7f8c8d", C.INCONCLUSIVE: "#8e44ad", C.FEW: "#b9770e"}
    fig = go.Figure()
    for cls in (C.SLOWER, C.FASTER, C.NOISE, C.INCONCLUSIVE, C.FEW):
        sel = [c for c in cells if c.classification is cls]
        if not sel:
            continue
        est = [c.judged or c.estimate for c in sel]
        fig.add_scatter(
            x=[e.ratio for e in est], y=[f"{workload_label(c.workload)} · {c.backend}" for c in sel], mode="markers",
            name=cls.value, marker={"color": colors[cls], "size": 8},
            error_x={"type": "data", "symmetric": False, "array": [(e.hi - e.ratio) if e.hi else 0 for e in est],
                     "arrayminus": [(e.ratio - e.lo) if e.lo else 0 for e in est]},
            hovertemplate="%{y}<br>head/base %{x:.3f}<extra>" + cls.value + "</extra>")
    for x, dash in ((1.0, "solid"), (1 + cmp.threshold, "dash"), (1 / (1 + cmp.threshold), "dash")):
        fig.add_vline(x=x, line_dash=dash, line_color="black", line_width=1)
    relative = " relative to the run-wide shift" if cmp.drift is not None and cmp.drift.applied and cmp.mode is not CompareMode.AB else ""
    fig.update_layout(title=f"Latency head / base{relative}, {cmp.level:.0%} simultaneous intervals; dashed: ±{cmp.threshold:.0%}",
                      xaxis_type="log", xaxis_title="head / base latency (log)", height=max(320, 22 * len(cells) + 120),
                      yaxis={"autorange": "reversed"})
    return safe_chart(json.loads(fig.to_json()))


def render_html(cmp: Comparison) -> str:
    """The comparison as one self-contained HTML page (plotly.js inline)."""
    return render("compare", dict(
        cmp=cmp, summary=summary_line(cmp), method=method_text(cmp), inconclusive=inconclusive_headline(cmp),
        inconclusive_why=inconclusive_why(cmp), drift=drift_text(cmp), rows=cell_rows(cmp),
        winners=winner_rows(cmp),
        env=[d for d in cmp.environment], chart=forest_figure(cmp),
        base_verdict=verdict_summary(cmp.base_verdict), head_verdict=verdict_summary(cmp.head_verdict),
        verdict_changes=[verdict_change_text(v) for v in cmp.verdict_changes], verdict_unchanged=verdict_unchanged_text(cmp),
    ))


def write_html(cmp: Comparison, path: str | os.PathLike[str]) -> Path:
    """Render ``cmp`` and write it to ``path`` atomically; returns the path.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    return write_html_file(render_html(cmp), path)
