"""Re-reading a stored run's traces: a trace that cannot be read is a typed problem of its cells (a warning in the
report and a note on the cell's row), never a silent fall-back to the stored summary."""

from __future__ import annotations

import html
import os
import shutil
from dataclasses import replace
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


def test_a_trace_file_leaving_the_run_directory_is_never_opened(tmp_path: Path, monkeypatch):
    """A results.json naming ``../../etc/passwd`` (or an absolute path, or a link out) as a cell's trace: the file is
    never handed to the trace loader, the cell is an OUTSIDE_RUN problem, and the run's own traces are still read."""
    import profattn.analysis.run.reattach as reattach_module

    run_dir, decode = _copy(tmp_path)
    (tmp_path / "secret.json.gz").write_bytes(b"not for the report")
    os.symlink(tmp_path / "secret.json.gz", run_dir / "traces" / "out.json.gz")
    run = read_results(run_dir)
    traced = [c for c in run.cells if c.trace is not None]
    bad = {traced[0].cell_id: "../../etc/passwd", traced[1].cell_id: "/etc/passwd", traced[2].cell_id: "traces/out.json.gz"}
    for c in traced[:3]:
        run = run.with_cell(replace(c, trace=replace(c.trace, trace_file=bad[c.cell_id])))
    opened: list[Path] = []
    real = reattach_module.load_trace
    monkeypatch.setattr(reattach_module, "load_trace", lambda p: opened.append(Path(p)) or real(p))
    read = reattach_traces(run, run_dir)
    assert sorted((p.cell_id, p.trace_file, p.kind) for p in read.problems) == sorted(
        (cid, f, TraceProblemKind.OUTSIDE_RUN) for cid, f in bad.items())
    assert opened and all(p.resolve().is_relative_to(run_dir.resolve()) for p in opened), opened
    assert decode.resolve() in [p.resolve() for p in opened]  # the run's own traces are read
