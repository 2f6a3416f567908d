"""issue 33, item 11: compare lists a paged winner that flipped, and never says "the verdict did not change" when
the two verdicts name different winners."""

from __future__ import annotations

from pathlib import Path

from profattn.analysis.comparison.compare import compare_runs
from profattn.analysis.run.layout import CacheLayout
from profattn.report.compare import verdict_unchanged_text, winner_rows
from profattn.report.markdown import comparison_markdown
from profattn.results import read_results

RUNS = Path(__file__).resolve().parents[3] / "examples" / "compare" / "runs"


def test_a_flipped_paged_winner_is_listed():
    """base-a → head-fused-combine: the fused combine changes triton-paged-decode; the per-layout paged winners of
    the paged decode workloads are compared too (before, only the overall winner was)."""
    cmp = compare_runs(read_results(RUNS / "base-a"), read_results(RUNS / "head-fused-combine"))
    paged = [w for w in cmp.winners if w.layout is CacheLayout.PAGED]
    assert paged, "the paged decode workloads are answered per layout"
    rows = winner_rows(cmp)
    assert sum("(over the paged cache)" in r["label"] for r in rows) == len(paged)


def test_different_winners_never_read_as_an_unchanged_verdict():
    cmp = compare_runs(read_results(RUNS / "base-a"), read_results(RUNS / "head-fused-combine"))
    if not cmp.verdict_changes and any(w.flipped for w in cmp.winners):
        text = verdict_unchanged_text(cmp)
        assert text != "The verdict did not change." and "different winners" in text
        assert "The verdict did not change." not in comparison_markdown(cmp)
    same = compare_runs(read_results(RUNS / "base-a"), read_results(RUNS / "base-a"))
    assert verdict_unchanged_text(same) == "The verdict did not change."


def test_medians_that_moved_70x_are_never_a_pass_or_a_silent_plus_zero():
    """Before: "39.96 ms → 572.8 µs, +0.0 %" — samples split between two levels put the Hodges–Lehmann estimate at 1
    while the medians moved 70×; the reverse passed as within noise."""
    from dataclasses import replace as _replace

    from factories import SEED, cell, repeated, run, with_repeat

    from profattn.analysis.comparison.compare import CompareClass
    from profattn.report.compare import cell_rows
    from profattn.workload import Phase

    w = next(x for x in SEED.workloads if x.phase is Phase.DECODE)
    base = repeated(cell(w, "a", 600.0), (600.0, 600.0, 40_000.0, 40_000.0, 600.0))
    head = repeated(cell(w, "a", 40_000.0), (40_000.0, 40_000.0, 100.0, 100.0, 40_000.0))
    cmp = compare_runs(with_repeat(run([base]), 5), with_repeat(run([head]), 5))
    (c,) = cmp.cells
    assert c.estimate.ratio == 1.0 and c.classification is CompareClass.INCONCLUSIVE and not cmp.passed
    (row,) = cell_rows(cmp)
    assert "the medians moved +6566.7% (the samples disagree)" in row["change"]


def test_each_layout_row_describes_its_own_pair():
    """Before: the report's evidence for an "over the paged cache" row described the contiguous-copy pair."""
    from profattn.analysis.run.verdict import verdict
    from profattn.report.verdict import render_verdict

    rows = [r for r in render_verdict(verdict(read_results(RUNS / "base-a"))).rows if r.layout]
    paged = [r for r in rows if r.layout == "over the paged cache"]
    assert paged
    for r in paged:
        text = " ".join(r.reasons)
        assert f"{r.winner} streams" in text and (not r.runner_up or f"{r.runner_up} streams" in text), text
        assert "sdpa-cudnn streams" not in text
