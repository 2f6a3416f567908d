"""Markdown summaries for pull-request comments: ``profattn summary RUN_DIR`` and ``compare --markdown``.

GitHub-flavoured Markdown (pipe tables), under GitHub's 65,536-character comment limit: every table is
rendered with a row cap, and the cap is lowered (all rows, 200, 100, 50, 25, 10, 5) until the whole text
fits in :data:`MAX_CHARS`; a truncated table ends with "… N more rows". The first line is
:data:`profattn.files.MARKDOWN_MARKER` (an HTML comment GitHub does not show), so a later run may replace
the file and never a user's. Rows come from the same records
the HTML uses (one :class:`~profattn.analysis.run.analyze.RunAnalysis`; :mod:`profattn.report.compare`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from profattn.analysis.comparison.compare import CompareClass, Comparison, EnvField
from profattn.results import CellStatus
from profattn.files import MARKDOWN_MARKER
from profattn.report.format import Md, md_bold, md_code, md_text
from profattn.report.compare import (cell_rows, drift_text, inconclusive_headline, inconclusive_why, method_text, summary_line,
                                     verdict_change_text, verdict_unchanged_text, winner_rows)
from profattn.report.verdict import COMMAND_SPANS, summary as verdict_summary

if TYPE_CHECKING:  # pragma: no cover
    from profattn.analysis.run.analyze import RunAnalysis

#: GitHub rejects comments of 65,536 characters or more; stay a little below.
MAX_CHARS = 65_000
_CAPS: tuple[int | None, ...] = (None, 200, 100, 50, 25, 10, 5)


def _cell(v: Any) -> str:
    """A table cell: :class:`~profattn.report.format.Md` as it is, anything else through :func:`md_text`."""
    return v if isinstance(v, Md) else md_text(v)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], max_rows: int | None = None) -> str:
    """A GFM pipe table; with ``max_rows``, the first rows and a final "… N more rows" line."""
    shown = rows if max_rows is None else rows[:max_rows]
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in r) + " |" for r in shown]
    if len(shown) < len(rows):
        lines.append(f"\n… {len(rows) - len(shown)} more rows")
    return "\n".join(lines)


def fit(render: Callable[[int | None], str], limit: int = MAX_CHARS) -> str:
    """:data:`MARKDOWN_MARKER`, a newline and ``render(cap)`` for the largest row cap whose text (marker
    included) is shorter than ``limit`` characters; if even the
    smallest cap is too long, that text cut at ``limit`` with a closing note."""
    head = MARKDOWN_MARKER + "\n"
    text = ""
    for cap in _CAPS:
        text = head + render(cap)
        if len(text) < limit:
            return text
    note = "\n\n… (truncated to fit a GitHub comment)\n"
    return text[: limit - len(note) - 1] + note


def machine_text(e: Any) -> str:
    """``"; 2 CPUs, 1 intra-op thread, load 2.50 → 3.00"``: the machine's state results.json records ("" without it)."""
    parts = []
    if e.cpu_count:
        parts.append(f"{e.cpu_count} CPUs")
    if e.torch_threads is not None:
        parts.append(f"{e.torch_threads} intra-op thread{'s' if e.torch_threads != 1 else ''}")
    loads = [la[0] for la in (e.load_avg_start, e.load_avg_end) if la]
    if loads:
        parts.append("load " + " → ".join(f"{x:.2f}" for x in loads))
    return "; " + ", ".join(parts) if parts else ""


def run_markdown(a: RunAnalysis, *, limit: int = MAX_CHARS) -> str:
    """A run as Markdown, formatted from its one analysis (:func:`profattn.analysis.run.analyze.analyze_run`): environment
    line, verdict, the compact verdict table (workload, winner with what it read, margin, runner-up, why), the
    serving calls, GQA and context-parallel sections, and the result matrix (winners in bold; workloads by their
    short label; rates in the unit their header names, three significant digits; an eager column only where some
    cell was CUDA-graph replayed, so a CPU run shows none)."""
    from profattn.report.format import fmt_err, fmt_flops_rate, fmt_isolation, fmt_rate, fmt_us
    from profattn.report.cp import cp_markdown
    from profattn.report.gqa import gqa_section
    from profattn.report.run import matrix_columns, noise_texts, workload_labels
    from profattn.report.verdict import render_verdict

    run = a.run
    labels = workload_labels(a)
    v = render_verdict(a.verdict, labels)
    e = run.environment
    roof = run.ceilings.bandwidth_gbps if run.ceilings else None
    mm = run.ceilings.matmul_tflops if run.ceilings else None
    cols = matrix_columns(a)
    unit, eager = cols["flops_unit"], cols["eager"]
    table = []
    unsupported = [m for m in a.matrix if m.cell.status is CellStatus.UNSUPPORTED]
    for m in a.matrix:
        c = m.cell
        if c.status is CellStatus.UNSUPPORTED:  # counted under the table (39 of 60 rows on a CPU), in report.html
            continue
        t = c.judged_timing
        table.append([
            (Md("**" + md_text(c.backend) + "** 🏆" + (" (tie: " + md_text(", ".join(m.ties)) + ")" if m.ties else ""))
             if m.winner else c.backend), labels[c.workload.tag], c.status.value,
            (fmt_us(t.median_us) if t else "–") + (" (graph)" if c.graph_timing is not None else ""),
            *([fmt_us(c.eager_latency_us)] if eager else []), fmt_rate(c.achieved_gbps, "GB/s", roof, bare=True),
            fmt_flops_rate(c.achieved_tflops, mm, unit=unit, bare=True),
            fmt_err(c.correctness.out_rel_err if c.correctness else None)
            + (f" ({iso})" if c.correctness and (iso := fmt_isolation(c.correctness.isolated)) else ""), c.reason[:120]])
    headers = ["backend", "workload", "status", "latency", *(["eager"] if eager else []), "GB/s", unit, "out err", "reason"]
    verdict_headers = ["workload", "winner", "latency", "margin", "runner-up",
                       *(["training winner here"] if v.has_training else []), "why"]
    verdict_rows = [[r.label + (f" ({r.layout})" if r.layout else ""), r.winner_text, r.latency, r.margin,
                     " ".join(filter(None, [r.runner_up, r.runner_up_latency])),
                     *([r.standing] if v.has_training else []), r.mechanism] for r in v.rows]
    serving = [(title, [[x["call"], x["winner"], x["time"], x["margin"], " ".join(filter(None, [x["runner_up"], x["runner_up_time"]])),
                         x["vs"], x["mechanism"] + (f" Chunking: {x['chunking']}" if x["chunking"] else "")] for x in rows])
               for title, rows in v.serving]
    noise = noise_texts(a)  # the same warnings the report and `profile` print: the verdict's caveat
    gqa = gqa_section(a)
    cp = cp_markdown(a.cp) if a.cp else None

    def render(cap: int | None) -> str:
        parts = [
            f"## profattn: preset {md_code(run.preset)} on {md_text(e.device_name)}",
            (f"torch {md_text(e.torch)}, CUDA {md_text(e.cuda or 'n/a')}, cuDNN {md_text(e.cudnn or 'n/a')}, "
             f"triton {md_text(e.triton or 'n/a')}, driver {md_text(e.driver or 'n/a')}; "
             f"{len(run.cells)} cells, {run.samples_text()} timing sample(s) per cell; counters {run.counters_info.status}"
             + machine_text(e) + "."),
        ]
        parts += [f"> ⚠️ Noisy machine: {md_text(w)}" for w in noise]
        parts += ["### Verdict", md_bold(v.summary, code=COMMAND_SPANS)]
        if verdict_rows:
            parts.append(md_table(verdict_headers, verdict_rows, cap))
        for title, rows in serving:
            parts += [f"#### Serving calls: {md_text(title)}",
                      md_table(["call", "winner", "time / prompt", "margin", "runner-up", "against the unchunked winner", "why"], rows, cap)]
        if gqa is not None and (gqa["sentences"] or gqa["flags"]):
            lines = [f"- {md_text(t)}" for t in gqa["sentences"]] + [f"- ⚑ {md_text(t)}" for t in gqa["flags"]]
            parts += ["### GQA: cache traffic vs arithmetic", "\n".join(lines if cap is None else lines[:cap])]
        if cp is not None:
            parts += ["### Context parallelism", cp]
        parts += ["### Result matrix",
                  md_table(headers, table, cap)]
        if unsupported:
            names = sorted({m.cell.backend for m in unsupported})
            parts.append(f"{len(unsupported)} unsupported cell(s) left out ({md_text(', '.join(names[:12]))}"
                         f"{', …' if len(names) > 12 else ''}): report.html lists each with its reason.")
        return "\n\n".join(parts) + "\n"

    return fit(render, limit)


def comparison_markdown(cmp: Comparison, *, limit: int = MAX_CHARS, top: int = 10) -> str:
    """A comparison as Markdown: the outcome, warnings, environment differences, the verdict in both runs,
    flipped winners, the ``top`` largest changes, then every cell."""
    rows = cell_rows(cmp)
    top_rows = [r for r in rows if r["top"]][:top]
    env = [[d.field, d.base, d.head] for d in cmp.environment if d.differs or d.field is EnvField.DEVICE_NAME]
    flips = [[w["label"], w["base"], w["head"], "yes (tie in one run)" if w["noise_flip"] else "yes"] for w in winner_rows(cmp) if w["flipped"]]

    def cells_table(rs: list[dict[str, Any]], cap: int | None) -> str:
        return md_table(["workload", "backend", "result", "base", "head", "change [interval]", "correctness", "launch shape", "DRAM bytes", "why it fails"],
                        [[r["label"], r["backend"], Md("**" + r["classification"].value + "**") if r["regression"] else r["classification"].value,
                          r["base"], r["head"], r["change"], r["correctness"], r["launch"][:200], r["bytes"], r["reasons"][:200]] for r in rs], cap)

    def render(cap: int | None) -> str:
        outcome = "❌ regression" if cmp.regression else "✅ no regression" if cmp.passed else "⚠️ inconclusive"
        headline = inconclusive_headline(cmp)
        # profattn's own sentence (numbers and command lines only, no name from a run): its code spans kept
        parts = [f"**{headline}** — {inconclusive_why(cmp)}"] if headline else []
        parts += [f"## profattn compare: {md_text(cmp.base_label)} → {md_text(cmp.head_label)}",
                 f"**{outcome}**: {md_text(summary_line(cmp))}"]
        parts += [f"> ⚠️ {md_text(w)}" for w in cmp.warnings]
        parts += [md_text(t) for t in (drift_text(cmp),) if t]
        parts.append(md_text(method_text(cmp)).replace("\\*", "*"))  # profattn's own emphasis of the class names
        parts += ["### Environment", md_table(["field", cmp.base_label, cmp.head_label], env, cap) if env else "No differences."]
        parts += ["### Verdict", f"- **{md_text(cmp.base_label)}**: {md_text(verdict_summary(cmp.base_verdict))}",
                  f"- **{md_text(cmp.head_label)}**: {md_text(verdict_summary(cmp.head_verdict))}"]
        parts.append("Verdict changes: " + "; ".join(md_text(verdict_change_text(v)) for v in cmp.verdict_changes)
                     if cmp.verdict_changes else md_text(verdict_unchanged_text(cmp)))
        if flips:
            parts += ["Winners that flipped:", md_table(["workload", cmp.base_label, cmp.head_label, "flipped"], flips, cap)]
        parts += ["### Top changes", cells_table(top_rows, cap) if top_rows else "None beyond noise."]
        counts = ", ".join(f"{cmp.count(k)} {k.value}" for k in CompareClass if cmp.count(k))
        parts += [f"### All cells ({counts})", cells_table(rows, cap)]
        return "\n\n".join(parts) + "\n"

    return fit(render, limit)
