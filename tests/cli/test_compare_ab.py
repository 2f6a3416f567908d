"""``profattn compare --ab BASE HEAD``: two implementations timed alternately in one process, round by round and
rep by rep, then judged on their paired rounds. It finds a 10 % slowdown injected into a plugin kernel on the CPU
(``tests/data/plugins/slowed_plugin.py``: the example plugin's schedule in PyTorch, loaded as ``module:object``), and
passes the same kernel against itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from profattn.backends import registry
from profattn.cli import main
from profattn.results import read_results

REPO = Path(__file__).resolve().parents[2]
#: Decode, B=2, Hq=4 over Hkv=2, kv 256 in pages of 16: ~0.3 ms a call on one CPU thread.
SMALL = "phase=decode,b=2,q=1,kv=256,hq=4,hkv=2,d=32,page=16"


@pytest.fixture
def plugins(monkeypatch):
    """The test plugins on ``sys.path``, and one intra-op thread: on a machine whose cores other processes also use,
    a parallel region waits for a descheduled thread at its barrier and a 0.3 ms call takes 20–80 ms (the scheduler's
    time slices), which no statistic can undo (README, Reviewing a kernel change)."""
    monkeypatch.syspath_prepend(str(REPO / "tests" / "data" / "plugins"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with registry.preserved():
        yield
    torch.set_num_threads(threads)
    sys.modules.pop("slowed_plugin", None)


def _ab(tmp_path: Path, head: str, *extra: str):
    return CliRunner().invoke(main, [
        "compare", "--ab", "slowed_plugin:base", f"slowed_plugin:{head}", "--workload", SMALL, "--device", "cpu",
        "--run-dir", str(tmp_path / "ab"), "--db", str(tmp_path / "store.sqlite"), "--out", str(tmp_path / "c.html"),
        "--markdown", str(tmp_path / "c.md"), *extra])


def test_ab_finds_a_ten_percent_slowdown_in_a_plugin_kernel(tmp_path: Path, plugins):
    res = _ab(tmp_path, "slow", "--repeat", "16")
    assert res.exit_code == 1, res.output
    (line,) = [x for x in res.output.splitlines() if x.startswith("regression: ")]
    assert "decode kv 256 (B=2, page 16) · onehead-torch → onehead-torch-slow: +" in line and "slower" in line
    run = read_results(tmp_path / "ab")
    assert (run.ab.base, run.ab.head, run.ab.rounds) == ("onehead-torch", "onehead-torch-slow", 16)
    assert run.repeat == 17 and all(len(c.timing_repeats) == 17 for c in run.cells)
    assert all("alternating with the other side" in t.method for c in run.cells for t in c.timing_repeats[1:])
    assert json.loads((tmp_path / "ab" / "results.json").read_text())["ab"] == {
        "base": "onehead-torch", "head": "onehead-torch-slow", "rounds": 16}
    md = (tmp_path / "c.md").read_text()
    assert "❌ regression" in md and "paired A/B rounds" in md
    html = (tmp_path / "c.html").read_text()
    assert "onehead-torch → onehead-torch-slow" in html and "timed alternately in one process" in html


def test_ab_of_a_kernel_against_itself_passes(tmp_path: Path, plugins):
    res = _ab(tmp_path, "copy", "--repeat", "8")
    assert res.exit_code == 0, res.output
    assert "no regression beyond ±5%" in res.output and "1 tested cell(s)" in res.output


def test_ab_usage_errors_are_one_line(tmp_path: Path, plugins):
    same = CliRunner().invoke(main, ["compare", "--ab", "eager", "eager", "--workload", SMALL, "--device", "cpu",
                                     "--run-dir", str(tmp_path / "x")])
    assert same.exit_code == 2 and "same backend (eager)" in same.output and same.output.count("\n") == 1
    loose = CliRunner().invoke(main, ["compare", "runs/a", "runs/b", "--preset", "small"])
    assert loose.exit_code == 2 and "--preset go with --ab" in loose.output
    unknown = CliRunner().invoke(main, ["compare", "--ab", "eager", "no-such-kernel", "--workload", SMALL, "--device",
                                        "cpu", "--run-dir", str(tmp_path / "y")])
    assert unknown.exit_code == 2 and "no-such-kernel" in unknown.output and not (tmp_path / "y").exists()
