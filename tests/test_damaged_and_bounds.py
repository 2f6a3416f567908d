"""issue 33, items 9, 7 and 13: a cell whose own numbers disagree is damaged (one line), never a winner; one numeric
bound at the writer and the readers; a symbolic-link loop is one line, never a traceback."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from factories import SEED, cell, run
from profattn.analysis.run.analyze import analyze_run
from profattn.analysis.run.verdict import winners
from profattn.cli import main
from profattn.errors import ProfattnError, ProfattnWarning, ResultsError
from profattn.files import check_output, inside_run
from profattn.results import Correctness, Damage, Timing, read_results, write_results
from profattn.workload import Phase

DECODE = next(w for w in SEED.workloads if w.phase is Phase.DECODE)


def _damaged_run():
    good = cell(DECODE, "sdpa-flash", 100.0)
    wrong = replace(cell(DECODE, "eager", 10.0, family="eager"),
                    correctness=Correctness(0.9, 0.02, True, "fp32"))
    flipped = replace(cell(DECODE, "flex", 5.0, family="flex"), timing=Timing(5.0, 9.0, 4.0, 3.0, 50, "test"))
    return run([good, wrong, flipped])


def test_a_damaged_cell_is_never_a_winner(tmp_path: Path):
    """Before: a hand-edited cell with passed: true and out_rel_err 0.9 (tolerance 0.02) was crowned in summary."""
    r = _damaged_run()
    by = {c.backend: c for c in r.cells}
    assert by["eager"].damage == (Damage.PASSED_ABOVE_TOLERANCE,)
    assert by["flex"].damage == (Damage.QUANTILES_OUT_OF_ORDER,)
    assert not by["eager"].eligible and not by["flex"].eligible and by["sdpa-flash"].eligible
    assert winners(r)[DECODE.tag].backend == "sdpa-flash"
    assert [m.cell.backend for m in analyze_run(r).matrix if m.winner] == ["sdpa-flash"]
    path = write_results(r, tmp_path / "r" / "results.json")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        read_results(path)
    (w,) = [x for x in got if issubclass(x.category, ProfattnWarning)]
    assert "2 damaged cell(s)" in str(w.message) and "\n" not in str(w.message)
    res = CliRunner().invoke(main, ["summary", str(path.parent), "--out", str(tmp_path / "s.md")])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("damaged cell(s)") == 1
    md = (tmp_path / "s.md").read_text()
    assert "**eager** 🏆" not in md and "**flex** 🏆" not in md and "**sdpa-flash** 🏆" in md


def test_one_bound_at_the_writer_and_the_readers(tmp_path: Path):
    """Before: profile wrote a 24-digit logical_kv_bytes its own readers refused; now the writer refuses it first."""
    r = run([cell(DECODE, "sdpa-flash", 100.0)])
    huge = replace(r, seed=10**23)
    with pytest.raises(ResultsError, match=r"field 'seed' is .*beyond a 64-bit integer"):
        write_results(huge, tmp_path / "h" / "results.json")
    assert not (tmp_path / "h" / "results.json").exists()
    (tmp_path / "x").mkdir()
    text = json.dumps({"schema": "profattn.results"})[:-1] + ', "schema_version": 3, "seed": 100000000000000000000000}'
    (tmp_path / "x" / "results.json").write_text(text)
    with pytest.raises(ResultsError, match="beyond a 64-bit integer"):
        read_results(tmp_path / "x")


def test_a_symbolic_link_loop_is_one_line(tmp_path: Path):
    """Before: Python 3.11's Path.resolve() raised RuntimeError (not OSError) through check_output and inside_run."""
    loop = tmp_path / "loop.html"
    loop.symlink_to(loop)
    with pytest.raises(ProfattnError, match="loop of symbolic links"):
        check_output(loop, "--out")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "t").symlink_to(tmp_path / "run" / "t")
    assert inside_run(tmp_path / "run", "t/x.json") is None
    r = run([cell(DECODE, "sdpa-flash", 100.0)])
    d = write_results(r, tmp_path / "a" / "results.json").parent
    res = CliRunner().invoke(main, ["compare", str(d), str(d), "--out", str(loop)])
    assert res.exit_code == 2 and "Traceback" not in res.output and res.stderr.count("\n") == 1, res.output
