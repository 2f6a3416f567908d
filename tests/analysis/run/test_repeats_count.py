"""issue 33, item 3: with ``--repeat N`` a cell is ranked on the median of all its samples, not its first one —
in the verdict, the summary, the report and compare — and ties are judged on the repeats' spread."""

from __future__ import annotations

from profattn.analysis.run.analyze import analyze_run
from profattn.analysis.comparison.compare import compare_runs
from profattn.analysis.run.verdict import margin, verdict, winners
from profattn.report.markdown import run_markdown
from profattn.results import cell_row
from profattn.workload import Phase
from factories import SEED, cell, repeated, run, with_repeat

DECODE = next(w for w in SEED.workloads if w.phase is Phase.DECODE)


def _run():
    eager = repeated(cell(DECODE, "eager", 138.8, family="eager"), (138.8, 40_003.9, 40_023.5))
    flash = repeated(cell(DECODE, "sdpa-flash", 5_000.0), (5_000.0, 5_010.0, 4_990.0))
    return with_repeat(run([eager, flash]), 3)


def test_the_lucky_first_sample_does_not_win():
    """Before: eager "won" at 138.8 µs with samples 138.8, 40,003.9 and 40,023.5."""
    r = _run()
    eager = next(c for c in r.cells if c.backend == "eager")
    assert eager.latency_us == 40_003.9 and cell_row(eager)["latency_us"] == 40_003.9
    assert winners(r)[DECODE.tag].backend == "sdpa-flash"
    a = analyze_run(r)
    won = [m.cell.backend for m in a.matrix if m.winner]
    assert won == ["sdpa-flash"]
    md = run_markdown(a)
    assert "**sdpa-flash** 🏆" in md and "**eager** 🏆" not in md and "40.00 ms" in md
    assert verdict(r).rows[0].winner_backend == "sdpa-flash" if verdict(r).rows else True


def test_compare_uses_all_samples():
    r = _run()
    cmp = compare_runs(r, r)
    eager = next(c for c in cmp.cells if c.backend == "eager")
    assert eager.base_latency_us == 40_003.9
    assert {w.base_winner for w in cmp.winners} == {"sdpa-flash"}


def test_ties_are_judged_on_the_repeats_spread():
    """Medians 1.0 ms and 1.1 ms apart by 10 %, but one cell's repeats range over 0.9–1.3 ms: a tie, not a win."""
    a = repeated(cell(DECODE, "sdpa-flash", 1000.0), (1000.0, 1001.0, 999.0))
    b = repeated(cell(DECODE, "eager", 1100.0, family="eager"), (900.0, 1100.0, 1300.0))
    assert margin(a, b).tie
    steady = repeated(cell(DECODE, "eager", 1100.0, family="eager"), (1100.0, 1101.0, 1099.0))
    assert not margin(a, steady).tie
