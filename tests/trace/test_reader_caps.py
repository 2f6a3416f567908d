"""issue 33, item 14: the reader caps what it inflates, how many events it reads and what it keeps after the
``traceEvents`` array — one line each, never unbounded memory or minutes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profattn.errors import TraceError
from profattn.trace import load_trace, reader


def _events(n: int) -> list[dict]:
    return [{"ph": "X", "name": f"k{i}", "cat": "kernel", "ts": i, "dur": 1, "pid": 0, "tid": 0} for i in range(n)]


def test_bytes_after_the_array_are_capped(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_SUFFIX_BYTES", 2**20)
    doc = json.dumps({"traceEvents": _events(10)})[:-1] + ', "tail": "' + "x" * (3 * 2**20) + '"}'
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(doc.encode()))
    with pytest.raises(TraceError, match="after the 'traceEvents' array"):
        load_trace(path)
    spaces = tmp_path / "s.json.gz"
    spaces.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(10)}).encode())
                       + gzip.compress(b" " * (3 * 2**20)))
    with pytest.raises(TraceError, match="after the 'traceEvents' array"):
        load_trace(spaces)


def test_the_event_count_and_the_inflated_size_are_capped(tmp_path: Path, monkeypatch):
    path = tmp_path / "many.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(5000)}).encode()))
    monkeypatch.setattr(reader, "MAX_EVENTS", 1000)
    with pytest.raises(TraceError, match="more than 1,000 events"):
        load_trace(path)
    monkeypatch.setattr(reader, "MAX_EVENTS", 10**8)
    monkeypatch.setattr(reader, "MAX_TRACE_BYTES", 100_000)
    with pytest.raises(TraceError, match="GiB of JSON"):
        load_trace(path)
    monkeypatch.setattr(reader, "MAX_TRACE_BYTES", 32 * 2**30)
    assert load_trace(path) is not None
