"""The run report's context-parallelism section: per scheme and rank count, the step against one process, the
communication share and overlap, and a per-rank timeline summary (compute vs communication vs idle)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from profattn.analysis.calls.comm import CpSummary
from profattn.report.format import fmt_bytes, fmt_us, md_text

if TYPE_CHECKING:  # pragma: no cover
    from profattn.analysis.run.analyze import RunAnalysis


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f} %"


def cp_rows(summaries: Sequence[CpSummary]) -> list[dict[str, str]]:
    """One row of display strings per context-parallel cell's :class:`~profattn.analysis.calls.comm.CpSummary`."""
    rows = []
    for s in summaries:
        rows.append({
            "cell": s.cell_id, "scheme": s.scheme, "ranks": str(s.ranks), "phase": s.phase, "backend": s.backend,
            "status": s.status, "step": fmt_us(s.step_us), "single": fmt_us(s.single_us),
            "efficiency": _pct(s.efficiency), "comm": _pct(s.comm_share), "overlap": _pct(s.overlap_share),
            "idle": _pct(s.idle_share),
            "ledger": {True: "matches", False: "differs", None: "n/a"}[s.ledger_ok],
        })
    return rows


def rank_rows(cells) -> list[dict[str, str]]:
    """Per rank of every context-parallel cell: the timed median step (``step``), and from its trace, per profiled
    call, that call's step (``profiled``) with its compute, communication, overlap and idle (compute + comm − overlap +
    idle = profiled), bytes sent."""
    rows = []
    for c in cells:
        for r in c.ranks:
            rows.append({"cell": c.cell_id, "rank": str(r.rank), "status": r.status if not r.error else r.error,
                         "step": fmt_us(r.step_us), "profiled": fmt_us(r.profiled_step_us), "compute": fmt_us(r.compute_us), "comm": fmt_us(r.comm_us),
                         "overlap": fmt_us(r.overlap_us), "idle": fmt_us(r.idle_us), "sent": fmt_bytes(r.sent_bytes),
                         "ledger": fmt_bytes(r.ledger_bytes), "peak": fmt_bytes(r.peak_mem_bytes)})
    return rows


def cp_section(a: "RunAnalysis") -> dict[str, Any] | None:
    """The section's context (None: the run has no context-parallel cell)."""
    rows = cp_rows(a.cp)
    if not rows:
        return None
    return {"rows": rows, "ranks": rank_rows(a.run.cells)}


def cp_markdown(summaries: Sequence[CpSummary]) -> str:
    """The context-parallel cells' summaries as a GitHub Markdown table (the summary and the benchmark print it)."""
    head = ("| scheme | ranks | phase | backend | status | step | 1 process | scaling eff. | comm share | overlap | "
            "idle | ledger |")
    lines = [head, "|---" * 12 + "|"]
    for r in cp_rows(summaries):
        lines.append("| " + " | ".join(md_text(r[k]) for k in ("scheme", "ranks", "phase", "backend", "status", "step",
                                                               "single", "efficiency", "comm", "overlap", "idle",
                                                               "ledger")) + " |")
    return "\n".join(lines)
