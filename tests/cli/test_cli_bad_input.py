"""Every command that reads a results.json answers a corrupt one the same way: one line, exit 2 (never compare's
regression code 1), and what it reads past (unknown fields, unpaired surrogates) one ``warning:`` line each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.cli import main

REPO = Path(__file__).resolve().parents[2]
SEED_RUN = REPO / "examples" / "h200-seed"


def _corrupt(tmp_path: Path, name: str, literal: str) -> Path:
    """A copy of the committed seed run whose first timed cell's median is ``literal`` (raw JSON text)."""
    run = tmp_path / name
    run.mkdir()
    data = json.loads((SEED_RUN / "results.json").read_text())
    c = next(c for c in data["cells"] if c.get("timing"))
    c["timing"]["median_us"] = "@@"
    (run / "results.json").write_text(json.dumps(data).replace('"@@"', literal))
    return run


@pytest.mark.parametrize("literal", [str(10**400), "NaN"])
def test_five_commands_refuse_a_corrupt_number_in_one_line(tmp_path: Path, literal: str):
    """issue 26: 10**400 in timing.median_us tracebacked in compare, report, summary, db import and profile --resume,
    and compare exited 1 (its regression code) for a corrupt file."""
    bad = _corrupt(tmp_path, "bad", literal)
    db = tmp_path / "store.sqlite"
    commands = [
        ["compare", str(SEED_RUN), str(bad), "--out", str(tmp_path / "c.html")],
        ["compare", str(bad), str(SEED_RUN), "--out", str(tmp_path / "c.html")],
        ["report", str(bad), "--out", str(tmp_path / "r.html")],
        ["summary", str(bad)],
        ["db", "import", str(bad), "--db", str(db)],
        ["profile", "--resume", "--out", str(bad), "--device", "cpu", "--db", str(db)],
    ]
    for args in commands:
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output.count("\n") == 1 and "Traceback" not in res.output, (args, res.output)
        assert "timing.median_us' is " in res.output and "results.json" in res.output, (args, res.output)
    assert not (tmp_path / "c.html").exists() and not (tmp_path / "r.html").exists()


def test_unknown_fields_and_surrogates_are_warnings_and_the_command_runs(tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(SEED_RUN, run, ignore=shutil.ignore_patterns("traces", "*.html", "counters"))
    data = json.loads((run / "results.json").read_text())
    data["environment"]["gpu_power_w"] = 700
    data["environment"]["torch"] += " \ud800"
    (run / "results.json").write_text(json.dumps(data))
    res = CliRunner().invoke(main, ["summary", str(run), "--out", str(tmp_path / "s.md")])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("warning: ") and "1 unknown field(s) ignored" in lines[0] and "environment.gpu_power_w" in lines[0]
    assert lines[1].startswith("warning: ") and "1 unpaired UTF-16 surrogate(s)" in lines[1]
    assert "\ufffd" in (tmp_path / "s.md").read_text(encoding="utf-8")


def test_a_run_compared_with_its_own_results_file_is_called_the_same_run(tmp_path: Path):
    res = CliRunner().invoke(main, ["compare", str(SEED_RUN), str(SEED_RUN / "results.json"), "--out", str(tmp_path / "c.html")])
    assert res.exit_code == 0, res.output
    assert "warning: BASE_RUN and HEAD_RUN are the same run: every cell will be within noise" in res.stderr


def test_backend_all_is_given_alone(tmp_path: Path):
    res = CliRunner().invoke(main, ["profile", "--device", "cpu", "--preset", "small", "--backend", "all", "--backend", "eager",
                                    "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "--backend all runs every backend: give it alone" in res.output
    assert not (tmp_path / "r").exists()  # refused before the run directory is made


def test_default_run_names_what_it_leaves_out(small_cpu_run):
    from profattn.backends.registry import left_out_of_default

    res = small_cpu_run  # the default backends on the small preset, every regime: what it printed
    # On a CPU the left-out FlashInfer backends could not run anyway: the line is printed on a CUDA device only.
    assert not any(l.startswith("default backends:") for l in res.output.splitlines())
    assert set(left_out_of_default()) == {"flashinfer-decode", "flashinfer-prefill-paged", "flashinfer-prefill-ragged",
                                          "flashinfer-prefill-paged-fa2", "flashinfer-prefill-paged-fa3",
                                          "flashinfer-cudnn-decode", "flashinfer-cudnn-prefill", "flashinfer-xqa-decode"}
    timeline = next(l for l in res.output.splitlines() if l.startswith("time: "))
    assert "cells (timing, check, profiler)" in timeline and "total" in timeline and "JIT builds" not in timeline  # CPU
