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
