"""issue 33, item 1: a comparison whose intervals are too wide is *inconclusive* (exit 3), never a pass: a doubled
backend across two loaded-CPU runs is a regression or inconclusive; an A/A comparison of identical runs still passes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.analysis.comparison.compare import CompareClass, NoiseCause, compare_runs
from profattn.cli import main
from profattn.files import MARKDOWN_MARKER
from profattn.results import RunResult, Timing, read_results, write_results

REPO = Path(__file__).resolve().parents[3]
CPU_AA = REPO / "tests" / "data" / "runs" / "cpu-aa"


def doubled(run: RunResult, backend: str, factor: float = 2.0) -> RunResult:
    """``run`` with every timing of ``backend`` multiplied by ``factor``."""
    def scale(t: Timing | None) -> Timing | None:
        return None if t is None else replace(t, median_us=t.median_us * factor, p10_us=t.p10_us * factor,
                                              p90_us=t.p90_us * factor, min_us=t.min_us * factor)
    cells = []
    for c in run.cells:
        if c.backend == backend and c.timing is not None:
            c = replace(c, timing=scale(c.timing), timing_repeats=tuple(scale(t) for t in c.timing_repeats),
                        graph_timing=scale(c.graph_timing),
                        graph_timing_repeats=tuple(scale(t) for t in c.graph_timing_repeats))
        cells.append(c)
    return replace(run, cells=tuple(cells))


def _compare(tmp_path: Path, base: RunResult, head: RunResult):
    b = write_results(base, tmp_path / "base" / "results.json").parent
    h = write_results(head, tmp_path / "head" / "results.json").parent
    res = CliRunner().invoke(main, ["compare", str(b), str(h), "--out", str(tmp_path / "c.html"),
                                    "--markdown", str(tmp_path / "c.md")])
    return res, (tmp_path / "c.md").read_text() if (tmp_path / "c.md").exists() else ""


@pytest.mark.parametrize("head_name", ["first", "second"])
def test_a_doubled_backend_across_two_cpu_runs_never_passes(tmp_path: Path, head_name: str):
    """Before: "✅ no regression", exit 0, every interval [−100.0 %, > +1,000 %]."""
    base = read_results(CPU_AA / "first")
    head = doubled(read_results(CPU_AA / head_name), "sdpa-flash")
    cmp = compare_runs(base, head)
    flash = [c for c in cmp.cells if c.backend == "sdpa-flash" and c.tested]
    assert flash and all(c.classification in (CompareClass.SLOWER, CompareClass.INCONCLUSIVE) for c in flash)
    assert not cmp.passed
    res, md = _compare(tmp_path, base, head)
    assert res.exit_code in (1, 3), res.output
    assert "✅" not in md and "no regression" not in md.split("\n")[2]
    if res.exit_code == 3:
        first = md.split("\n")[1]
        assert first.startswith(f"**inconclusive: the runs are too noisy to judge {cmp.inconclusive.cells} cell")
        assert "--ab" in first and "--repeat" in first and "--threads 1" in first


def test_the_loaded_cpu_aa_pair_is_inconclusive_with_why(tmp_path: Path):
    """Two processes of identical code on the loaded 2-core CPU: intervals of [−100 %, > +1,000 %] judge nothing."""
    base, head = read_results(CPU_AA / "first"), read_results(CPU_AA / "second")
    cmp = compare_runs(base, head)
    assert not cmp.regression and cmp.inconclusive is not None and not cmp.passed
    assert NoiseCause.FEW_SAMPLES in cmp.inconclusive.causes and NoiseCause.NOISY_MACHINE in cmp.inconclusive.causes
    assert cmp.inconclusive.fewest_samples == 3
    res, md = _compare(tmp_path, base, head)
    assert res.exit_code == 3, res.output
    assert md.split("\n")[0] == MARKDOWN_MARKER
    assert md.split("\n")[1].startswith("**inconclusive: the runs are too noisy to judge")
    assert "3 timing sample(s) a side" in md and "Cauchy" in md and "⚠️ inconclusive" in md
    assert "inconclusive: the runs are too noisy to judge" in res.output


@pytest.mark.parametrize("name", ["first", "second"])
def test_an_aa_compare_of_identical_runs_still_passes(tmp_path: Path, name: str):
    run = read_results(CPU_AA / name)
    cmp = compare_runs(run, run)
    assert cmp.passed and cmp.inconclusive is None
    res, md = _compare(tmp_path, run, run)
    assert res.exit_code == 0, res.output
    assert "✅ no regression" in md and "inconclusive" not in md


def test_the_readme_documents_the_exit_codes():
    readme = (REPO / "README.md").read_text()
    assert "3: inconclusive" in readme and "--ab" in readme


def test_runs_that_share_no_cell_are_inconclusive_not_a_pass(tmp_path: Path):
    """Two runs of disjoint backends, compared with --force: every cell is only in one run, nothing is compared;
    before, "✅ no regression" and exit 0 over 0 tested cells."""
    run = read_results(CPU_AA / "first")
    names = sorted({c.backend for c in run.cells})
    base = replace(run, cells=tuple(c for c in run.cells if c.backend == names[0]))
    head = replace(read_results(CPU_AA / "second"), cells=tuple(c for c in run.cells if c.backend != names[0]))
    cmp = compare_runs(base, head, force=True)
    assert cmp.shared == 0 and cmp.tested == 0 and not cmp.regression and not cmp.passed
    assert cmp.count(CompareClass.ONLY_BASE) == len(base.cells) and cmp.count(CompareClass.ONLY_HEAD) == len(head.cells)
    b = write_results(base, tmp_path / "base" / "results.json").parent
    h = write_results(head, tmp_path / "head" / "results.json").parent
    args = ["compare", str(b), str(h), "--out", str(tmp_path / "c.html"), "--markdown", str(tmp_path / "c.md")]
    res = CliRunner().invoke(main, [*args, "--force"])
    assert res.exit_code == 3, res.output
    assert "inconclusive: the runs share no cell, so nothing was compared: every cell is only in one run" in res.output
    md = (tmp_path / "c.md").read_text()
    assert "✅" not in md and "**⚠️ inconclusive**: inconclusive (no cell in both runs: nothing compared)" in md
    refused = CliRunner().invoke(main, args)  # without --force the head lacking the base's cells is refused
    assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
    same = CliRunner().invoke(main, ["compare", str(b), str(b), "--out", str(tmp_path / "d.html")])
    assert same.exit_code == 0, same.output  # a shared cell: the A/A pass is untouched
