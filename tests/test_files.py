"""Atomic output writes: a failure never leaves a truncated file at the final path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from profattn.errors import ProfattnError
from profattn.files import write_text_atomic


def test_replaces_atomically_and_keeps_the_old_file_on_failure(tmp_path: Path, monkeypatch):
    target = tmp_path / "sub" / "report.html"
    assert write_text_atomic(target, "old") == target and target.read_text() == "old"
    assert oct(target.stat().st_mode & 0o777) == "0o644"

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(ProfattnError, match=r"cannot write .*report\.html: No space left on device"):
        write_text_atomic(target, "new" * 1000)
    assert target.read_text() == "old"  # the previous report survives
    assert [p.name for p in target.parent.iterdir()] == ["report.html"]  # no temp file left behind


def test_device_targets_are_written_in_place():
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with pytest.raises(ProfattnError, match="cannot write /dev/full"):
        write_text_atomic("/dev/full", "x" * 100_000)
    assert Path("/dev/full").is_char_device()  # never replaced by a regular file


def test_paths_from_a_results_file_stay_inside_the_run(tmp_path):
    """Absolute paths, ``..`` escapes and symlinks out of the run are refused; paths inside are kept."""
    import os

    from profattn.files import inside_run

    run = tmp_path / "run"
    (run / "traces" / "decode").mkdir(parents=True)
    (run / "traces" / "decode" / "t.json.gz").write_bytes(b"x")
    assert inside_run(run, "traces/decode/t.json.gz") == run.resolve() / "traces/decode/t.json.gz"
    assert inside_run(run, "traces/decode/missing.json.gz") is not None  # inside, merely absent
    assert inside_run(run, "traces/../traces/decode/t.json.gz") is not None
    for bad in ("/etc/passwd", "../../../../etc/passwd", "traces/../../outside", "", "a\x00b"):
        assert inside_run(run, bad) is None, bad
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", run / "traces" / "link.json.gz")
    os.symlink(tmp_path, run / "up")
    assert inside_run(run, "traces/link.json.gz") is None
    assert inside_run(run, "up/secret") is None


def test_report_of_a_results_file_pointing_outside_or_at_a_truncated_trace(tmp_path):
    """issue: `profattn report` followed a cell's trace_file to /etc/passwd or ../../etc/passwd, and a
    truncated trace stopped the report from rendering. Now neither is read; the cells say why; it renders."""
    import gzip
    import json
    import shutil
    from pathlib import Path

    from click.testing import CliRunner

    from profattn.cli import main

    seed = Path(__file__).resolve().parents[1] / "examples" / "h200-seed"
    run = tmp_path / "run"
    shutil.copytree(seed, run, ignore=shutil.ignore_patterns("counters", "report.html"))
    data = json.loads((run / "results.json").read_text())
    traced = [c for c in data["cells"] if c.get("trace")]
    traced[0]["trace"]["trace_file"] = "/etc/passwd"
    traced[1]["trace"]["trace_file"] = "../../../../etc/passwd"
    (run / "results.json").write_text(json.dumps(data))
    decode = next((run / "traces" / "decode").glob("*.json.gz"))
    decode.write_bytes(gzip.compress(gzip.decompress(decode.read_bytes())[:5000]))  # truncated mid-document
    res = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "r.html").read_text()
    assert "root:x:0:0" not in html
    assert "is outside the run directory: not read" in html and "trace unreadable, stored summary kept" in html
    # and the terminal says so in one line (it was said only inside the HTML)
    warn = [x for x in res.output.splitlines() if x.startswith("warning: ")]
    assert len(warn) == 1 and "is outside the run directory: not read (and 25 more: see the report's trace warnings)" in warn[0]  # 1 more outside, 24 decode cells of the truncated trace
