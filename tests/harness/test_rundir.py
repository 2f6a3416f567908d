"""Run directories: nothing is ever overwritten or deleted; --force moves aside, --resume continues."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from profattn.backends import get_backend
from profattn.errors import ProfattnError
from profattn.harness import rundir
from profattn.harness.session import SessionConfig, resume_config, run_session
from profattn.results import CellStatus, read_results, write_results
from profattn.workload import Phase, Preset, Workload

NOW = dt.datetime(2026, 12, 1, 7, 30, 5, tzinfo=dt.timezone.utc)


def _fake_run(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "results.json").write_text('{"schema": "profattn.results"}')
    (path / "traces").mkdir()
    (path / "traces" / "mine.txt").write_text("a user's note")


def test_default_run_dirs_are_fresh(tmp_path: Path):
    first = rundir.default_run_dir(tmp_path / "runs", now=NOW)
    assert first == tmp_path / "runs" / "run-20261201-073005"
    first.mkdir(parents=True)
    assert rundir.default_run_dir(tmp_path / "runs", now=NOW).name == "run-20261201-073005-2"


def test_a_run_is_refused_resumed_or_moved_aside_never_deleted(tmp_path: Path):
    out = tmp_path / "X"
    _fake_run(out)
    with pytest.raises(ProfattnError, match="already holds a run; use --resume .* --force"):
        rundir.check_run_dir(out)
    assert rundir.check_run_dir(out, resume=True) == (out, rundir.RunDirMode.RESUME)
    with pytest.raises(ProfattnError, match="exclude each other"):
        rundir.check_run_dir(out, force=True, resume=True)
    path, mode, moved = rundir.prepare_run_dir(out, force=True)
    rundir.release_run_dir(path)
    assert mode is rundir.RunDirMode.REPLACE and path == out and not any(out.iterdir())
    assert moved is not None and moved.name.startswith("X.replaced-")
    assert (moved / "traces" / "mine.txt").read_text() == "a user's note"  # nothing deleted


def test_foreign_directories_files_and_missing_runs_are_refused(tmp_path: Path):
    (tmp_path / "mine").mkdir()  # a user's own results.json is no run: refused, even with --force (never moved)
    (tmp_path / "mine" / "results.json").write_text("my notes")
    for force in (False, True):
        with pytest.raises(ProfattnError, match="non-empty directory that holds no profattn run"):
            rundir.check_run_dir(tmp_path / "mine", force=force)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("x")
    with pytest.raises(ProfattnError, match="holds no profattn run"):
        rundir.check_run_dir(tmp_path / "docs")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ProfattnError, match="not a directory"):
        rundir.check_run_dir(tmp_path / "f")
    with pytest.raises(ProfattnError, match="parent .* is not a directory"):
        rundir.check_run_dir(tmp_path / "f" / "sub")
    with pytest.raises(ProfattnError, match="holds no run"):
        rundir.check_run_dir(tmp_path / "new", resume=True)
    with pytest.raises(ProfattnError, match="must name a directory"):
        rundir.check_run_dir("  ")
    assert rundir.check_run_dir(tmp_path / "new") == (tmp_path / "new", rundir.RunDirMode.NEW)


def test_a_locked_run_dir_is_refused(tmp_path: Path):
    out = tmp_path / "locked"
    out.mkdir()
    rundir.lock_run_dir(out)
    try:
        import subprocess
        import sys

        code = ("from pathlib import Path; from profattn.harness.rundir import lock_run_dir; "
                f"lock_run_dir(Path({str(out)!r}))")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        assert res.returncode != 0 and "in use by another profattn run" in res.stderr
    finally:
        rundir.release_run_dir(out)


def test_resume_keeps_measured_cells_and_runs_the_pending_ones(tmp_path: Path):
    cpu = torch.device("cpu")
    wl = (Workload(phase="decode", batch=2, q_len=1, kv_len=32, num_q_heads=4, num_kv_heads=2, head_dim=16),
          Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=16))
    backends = (get_backend("eager"), get_backend("sdpa-math"))
    cfg = SessionConfig(preset=Preset("p", "d", wl), regimes=(Phase.DECODE,), backends=backends, device=cpu,
                        out_dir=tmp_path / "run", measure_ceilings=False)
    full = run_session(cfg)
    assert all(c.status == CellStatus.OK for c in full.cells)
    # interrupt: the second workload's cells never ran
    kept = full.cells[0]
    interrupted = replace(full, cells=tuple(c if c.workload == wl[0] else replace(c, status=CellStatus.PENDING, timing=None,
                                                                                       correctness=None, trace=None)
                                            for c in full.cells))
    write_results(interrupted, tmp_path / "run" / "results.json")
    stored = read_results(tmp_path / "run" / "results.json")
    again = run_session(resume_config(stored, tmp_path / "run", cpu), resume=stored)
    assert [c.status for c in again.cells] == [CellStatus.OK] * 4
    first = next(c for c in again.cells if c.cell_id == kept.cell_id)
    assert first.timing == kept.timing and first.trace == kept.trace  # kept as measured, not re-run
    traces = sorted((tmp_path / "run" / "traces" / "decode").glob("*.json.gz"))
    assert len(traces) == 2  # the earlier trace stays; the resumed cells have their own
    assert json.loads((tmp_path / "run" / "results.json").read_text())["cells"][3]["status"] == "ok"


def test_resume_on_another_device_kind_is_refused(tmp_path: Path):
    from factories import cell, run
    from profattn.workload import get_preset

    gpu_run = run([cell(get_preset("seed").workloads[0], "eager", 10.0)], device="cuda")
    with pytest.raises(ProfattnError, match="measured on cuda, this run would use cpu"):
        resume_config(gpu_run, tmp_path, torch.device("cpu"))


def test_resume_measures_again_a_cell_timed_but_never_profiled(tmp_path: Path):
    """Ctrl-C between a cell's timing and the regime's profiler pass left it timed with no trace; --resume kept
    it as it was, so it could win without its kernels ever being read."""
    cpu = torch.device("cpu")
    wl = (Workload(phase="decode", batch=2, q_len=1, kv_len=32, num_q_heads=4, num_kv_heads=2, head_dim=16),)
    cfg = SessionConfig(preset=Preset("p", "d", wl), regimes=(Phase.DECODE,), backends=(get_backend("eager"),),
                        device=cpu, out_dir=tmp_path / "run", measure_ceilings=False)
    full = run_session(cfg)
    (c,) = full.cells
    assert c.trace is not None
    write_results(replace(full, cells=(replace(c, trace=None),)), tmp_path / "run" / "results.json")
    stored = read_results(tmp_path / "run" / "results.json")
    again = run_session(resume_config(stored, tmp_path / "run", cpu), resume=stored)
    (c2,) = again.cells
    assert c2.status == CellStatus.OK and c2.trace is not None and c2.timing != c.timing  # measured again
