"""Re-reading a stored run's traces: a trace that cannot be read is a typed problem of its cells (a warning in the
report and a note on the cell's row), never a silent fall-back to the stored summary."""

from __future__ import annotations

import html
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.analysis.run.reattach import TraceProblemKind, reattach_traces
from profattn.cli import main
from profattn.results import read_results

REPO = Path(__file__).resolve().parents[3]


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(REPO / "examples" / "h200-seed", run, ignore=shutil.ignore_patterns("*.html", "counters", "*.md"))
    decode = next((run / "traces" / "decode").glob("*.json.gz"))
    return run, decode


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_an_unreadable_trace_is_a_problem_of_its_cells(tmp_path: Path, kind: str):
    """issue 26: a trace_file that is missing, a FIFO or a directory was kept silently (the stored summary shown,
    no note), though the README says an unreadable trace is a warning. It is a typed problem (never an English note
    prefix) that the report words, in its warnings and on the cell's row."""
    run_dir, decode = _copy(tmp_path)
    decode.unlink()
    if kind == "directory":
        decode.mkdir()
    elif kind == "fifo":
        os.mkfifo(decode)
    run = read_results(run_dir)
    rel = str(decode.relative_to(run_dir))
    read = reattach_traces(run, run_dir)
    want = {"missing": TraceProblemKind.MISSING, "directory": TraceProblemKind.DIRECTORY,
            "fifo": TraceProblemKind.NOT_REGULAR}[kind]
    expected = {"missing": "is missing", "directory": "is a directory",
                "fifo": "is not a regular file (a FIFO, socket or device)"}[kind]
    named = {c.cell_id for c in run.cells if c.trace and c.trace.trace_file == rel}
    assert named and {p.cell_id for p in read.problems} == named
    assert all(p.kind is want and p.trace_file == rel for p in read.problems)
    for cell_id in named:
        stored = next(x for x in run.cells if x.cell_id == cell_id)
        after = next(x for x in read.run.cells if x.cell_id == cell_id)
        assert after.trace == stored.trace and after.notes == stored.notes  # the stored summary is what is shown
    res = CliRunner().invoke(main, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    page = html.unescape((run_dir / "report.html").read_text())
    sentence = f"trace_file {rel!r} {expected}: not read, stored summary kept"
    assert all(f"{cell_id}: {sentence}" in page for cell_id in named)  # the warning, per cell
    # the list below the verdict and the note on each cell's row; the one banner above the verdict quotes the first
    assert page.count(sentence) == 2 * len(named) + 1
