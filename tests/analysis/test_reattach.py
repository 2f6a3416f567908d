"""Re-reading a stored run's traces: a trace that cannot be read is a note on its cells (and a warning in the
report), never a silent fall-back to the stored summary."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.analysis.reattach import NOT_READ_NOTES, reattach_traces
from profattn.cli import main
from profattn.results import read_results

REPO = Path(__file__).resolve().parents[2]


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(REPO / "examples" / "h200-seed", run, ignore=shutil.ignore_patterns("*.html", "counters", "*.md"))
    decode = next((run / "traces" / "decode").glob("*.json.gz"))
    return run, decode


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_an_unreadable_trace_is_a_note_on_its_cells(tmp_path: Path, kind: str):
    """issue 26: a trace_file that is missing, a FIFO or a directory was kept silently (the stored summary shown,
    no note), though the README says an unreadable trace is a warning."""
    run_dir, decode = _copy(tmp_path)
    decode.unlink()
    if kind == "directory":
        decode.mkdir()
    elif kind == "fifo":
        os.mkfifo(decode)
    run = read_results(run_dir)
    rel = str(decode.relative_to(run_dir))
    after = reattach_traces(run, run_dir)
    noted = [c for c in after.cells if any(n.startswith(NOT_READ_NOTES) for n in c.notes)]
    expected = {"missing": "is missing", "directory": "is a directory", "fifo": "is not a regular file (a FIFO, socket or device)"}[kind]
    assert noted and all(c.trace is not None and c.trace.trace_file == rel for c in noted)
    assert {c.cell_id for c in noted} == {c.cell_id for c in run.cells if c.trace and c.trace.trace_file == rel}
    for c in noted:
        (note,) = c.notes[-1:]
        assert note == f"trace_file {rel!r} {expected}: not read, stored summary kept"
        stored = next(x for x in run.cells if x.cell_id == c.cell_id)
        assert c.trace == stored.trace  # the stored summary is what is shown
    res = CliRunner().invoke(main, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert f"{expected}: not read" in (run_dir / "report.html").read_text()
