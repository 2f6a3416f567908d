"""issue 33, item 12: what a reviewer reads — a one-regime verdict points to ``--regime all``; a spread tie never
reads "tie (14.04×)"; the Markdown leaves unsupported cells out (counted); one banner for traces not read, above the
verdict; the environment table shows CPUs, threads and load."""

from __future__ import annotations

from dataclasses import replace

from factories import SEED, cell, repeated, run
from profattn.analysis.run.reattach import TraceProblem, TraceProblemKind
from profattn.analysis.run.analyze import analyze_run
from profattn.analysis.run.verdict import verdict
from profattn.report.markdown import run_markdown
from profattn.report.run import environment_rows, render_html
from profattn.report.verdict import render_verdict, summary
from profattn.results import CellStatus
from profattn.workload import Phase

DECODE = [w for w in SEED.workloads if w.phase is Phase.DECODE]


def test_a_decode_only_verdict_points_to_regime_all():
    assert "`profattn profile --regime all`" in summary(verdict(run([cell(DECODE[0], "a", 10.0)])))


def test_a_spread_tie_never_reads_tie_with_a_large_ratio():
    a = repeated(cell(DECODE[0], "a", 100.0), (100.0, 101.0, 1500.0))
    b = repeated(cell(DECODE[0], "b", 1404.0), (1404.0, 90.0, 1500.0))
    (row,) = render_verdict(verdict(run([a, b]))).rows
    assert not row.margin.startswith("tie (") and "within noise" in row.margin and "×" in row.margin, row.margin


def test_markdown_counts_unsupported_cells_instead_of_listing_them():
    cells = [cell(DECODE[0], "a", 10.0)] + [cell(w, f"u{i}", None, status=CellStatus.UNSUPPORTED, reason="no")
                                            for i, w in enumerate(DECODE[:3])]
    md = run_markdown(analyze_run(run(cells)))
    assert "| u0 |" not in md and "3 unsupported cell(s) left out (u0, u1, u2)" in md


def test_one_banner_for_traces_not_read_and_the_machine_in_the_environment():
    r = run([cell(w, "a", 10.0 + i) for i, w in enumerate(DECODE[:3])])
    r = replace(r, environment=replace(r.environment, cpu_count=2, torch_threads=1, load_avg_start=(2.5, 2.0, 1.0),
                                       load_avg_end=(3.0, 2.1, 1.1)))
    problems = tuple(TraceProblem(c.cell_id, f"traces/{i}.json", TraceProblemKind.MISSING) for i, c in enumerate(r.cells))
    page = render_html(replace(analyze_run(r), trace_problems=problems))
    head = page[:page.index('id="verdict"')]
    assert head.count("traces not read") == 1 and head.count("Trace not read:") == 0
    assert page.count("Trace not read:") == 3
    rows = dict(environment_rows(r))
    assert rows["CPUs"] == "2" and rows["intra-op threads"] == "1" and "2.50 / 2.00 / 1.00" in rows["load (1 / 5 / 15 min)"]


def test_the_markdown_and_compare_show_the_machine_state():
    from profattn.analysis.comparison.compare import EnvField, compare_runs

    r = run([cell(w, "a", 10.0 + i) for i, w in enumerate(DECODE[:3])], device="cpu")
    r = replace(r, environment=replace(r.environment, cpu_count=2, torch_threads=1, load_avg_start=(2.5, 2.0, 1.0),
                                       load_avg_end=(3.0, 2.1, 1.1)))
    assert "; 2 CPUs, 1 intra-op thread, load 2.50 → 3.00." in run_markdown(analyze_run(r))
    h = replace(r, environment=replace(r.environment, torch_threads=2))
    env = {d.field: d for d in compare_runs(r, h).environment}
    assert env[EnvField.CPUS].base == "2" and env[EnvField.THREADS].differs and env[EnvField.LOAD].base == "2.50 → 3.00"
