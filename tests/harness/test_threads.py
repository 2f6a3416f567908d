"""issue 33, item 2: a CPU run times with one intra-op thread by default (recorded in results.json's environment),
``profile --threads N`` changes it, and the caller's thread count is restored after the run."""

from __future__ import annotations

from pathlib import Path

import torch
from click.testing import CliRunner

from profattn.cli import main
from profattn.results import read_results

ARGS = ["profile", "--device", "cpu", "--regime", "decode", "--backend", "eager", "--preset", "small"]


def test_a_cpu_run_times_with_one_thread_by_default(tmp_path: Path):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        res = CliRunner().invoke(main, [*ARGS, "--out", str(tmp_path / "one")])
        assert res.exit_code == 0, res.output
        assert read_results(tmp_path / "one").environment.torch_threads == 1
        assert "timing with 1 intra-op thread (the CPU default; --threads N to change)" in res.output
        assert torch.get_num_threads() == 2  # restored
        res = CliRunner().invoke(main, [*ARGS, "--out", str(tmp_path / "two"), "--threads", "2"])
        assert res.exit_code == 0, res.output
        assert read_results(tmp_path / "two").environment.torch_threads == 2
    finally:
        torch.set_num_threads(before)


def test_threads_is_checked_and_not_given_with_resume(tmp_path: Path):
    res = CliRunner().invoke(main, [*ARGS, "--out", str(tmp_path / "x"), "--threads", "0"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["profile", "--resume", "--out", str(tmp_path / "x"), "--threads", "2"])
    assert res.exit_code == 2


def test_a_gap_swamped_by_spread_names_no_winner():
    """Two training cells 1.5× apart whose repeats range over each other: before, "a, b tie in training"; now the
    verdict says no winner can be called, and why."""
    from factories import SEED, cell, repeated, run, with_repeat

    from profattn.analysis.run.verdict import verdict
    from profattn.report.verdict import summary
    from profattn.workload import Phase

    train = next(w for w in SEED.workloads if w.phase is Phase.TRAIN)
    a = repeated(cell(train, "sdpa-flash", 8000.0), (8000.0, 8_100.0, 40_000.0))
    b = repeated(cell(train, "flex", 12_000.0, family="flex"), (12_000.0, 40_100.0, 3_000.0))
    text = summary(verdict(with_repeat(run([a, b], device="cpu"), 3)))
    assert text.startswith("No training winner can be called: sdpa-flash and flex are")
    assert "within noise" in text and "--threads 1" in text and "wins training" not in text
