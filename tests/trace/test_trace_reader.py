"""The streaming trace reader: batch boundaries anywhere give the same frames, every layout of a valid
trace reads the same, oddities in any batch become warnings, broken files name the place they break."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import FLASH, MATH, NCCL, trace_fixture

import profattn.trace.reader as reader
from profattn.errors import TraceError
from profattn.trace.kineto import Trace, load_trace


@functools.cache
def _document(name: str) -> dict[str, Any]:
    return json.loads(gzip.decompress(trace_fixture(name).read_bytes()))


def document(name: str) -> dict[str, Any]:
    """A fresh copy of a fixture's JSON document (tests may change it)."""
    return json.loads(json.dumps(_document(name)))


def assert_same(a: Trace, b: Trace) -> None:
    for frame in ("kernels", "ranges", "ops"):
        pd.testing.assert_frame_equal(getattr(a, frame), getattr(b, frame))
    assert a.metadata == b.metadata and a.event_count == b.event_count and a.warnings == b.warnings


@pytest.fixture
def tiny_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of a few events, blocks of a few hundred bytes: every boundary case happens often."""
    monkeypatch.setattr(reader, "BATCH_BYTES", 2048)
    monkeypatch.setattr(reader, "_BLOCK_BYTES", 300)
    monkeypatch.setattr(reader, "_TAIL_BYTES", 512)


@functools.cache
def _default(name: str) -> Trace:
    return load_trace(trace_fixture(name))


# ---- batches and layouts -------------------------------------------------------------------------


@pytest.mark.parametrize("name", [FLASH, NCCL])
def test_tiny_batches_give_the_same_trace(name: str, tiny_batches: None) -> None:
    trace = load_trace(trace_fixture(name))
    assert_same(trace, _default(name))
    if name == NCCL:
        assert (trace.event_count, len(trace.kernels), len(trace.ops)) == (40573, 2700, 14346)


def test_untyped_decoding_gives_the_same_trace(monkeypatch: pytest.MonkeyPatch, tiny_batches: None) -> None:
    """The stdlib path (taken for batches with NaN, huge ints, odd types) equals the typed fast path."""
    class Refusing:
        def __init__(self, *args: Any) -> None:
            pass

        def decode(self, data: bytes) -> Any:
            raise reader.msgspec.ValidationError("forced")

    monkeypatch.setattr(reader.msgspec.json, "Decoder", Refusing)
    assert_same(load_trace(trace_fixture(MATH)), _default(MATH))


def _variants(doc: dict[str, Any]) -> dict[str, bytes]:
    events = doc["traceEvents"]
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    key_last = {**meta, "traceName": "run [3] {odd]", "traceEvents": events}
    raw = json.dumps(doc).encode()
    return {
        "minified": json.dumps(doc, separators=(",", ":")).encode(),
        "one event per line": ("{" + ",".join(f'"{k}": {json.dumps(v)}' for k, v in meta.items()) + ',\n"traceEvents": [\n'
                               + ",\n".join(json.dumps(e) for e in events) + "\n]}\n").encode(),
        "events key last, brackets after it": json.dumps(key_last, indent=3).encode(),
        "BOM": b"\xef\xbb\xbf" + raw,
        "gzip in two members": gzip.compress(raw[:5000]) + gzip.compress(raw[5000:]),
    }


@pytest.mark.parametrize("variant", ["minified", "one event per line", "events key last, brackets after it", "BOM",
                                     "gzip in two members"])
def test_layouts_read_the_same(tmp_path: Path, tiny_batches: None, variant: str) -> None:
    doc = document(FLASH)
    path = tmp_path / "t.json"
    path.write_bytes(_variants(doc)[variant])
    trace = load_trace(path)
    expected = _default(FLASH)
    for frame in ("kernels", "ranges", "ops"):
        pd.testing.assert_frame_equal(getattr(trace, frame), getattr(expected, frame))
    assert trace.metadata["deviceProperties"][0]["numSms"] == 132 and trace.num_sms == 132
    if variant.startswith("events key last"):
        assert trace.metadata["traceName"] == "run [3] {odd]"


def test_bare_event_list_and_events_key_nested_in_metadata(tmp_path: Path, tiny_batches: None) -> None:
    doc = document(FLASH)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc["traceEvents"]))
    assert len(load_trace(bare).kernels) == 6 and load_trace(bare).metadata == {}
    # a nested "traceEvents" before the real one: the prefix check sends the file down the whole-document path
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"meta": {"traceEvents": [{"ph": "X", "cat": "kernel"}]}, **doc}))
    trace = load_trace(nested)
    assert len(trace.kernels) == 6 and trace.metadata["meta"] == {"traceEvents": [{"ph": "X", "cat": "kernel"}]}


# ---- oddities inside a long file -----------------------------------------------------------------


def test_oddities_in_middle_batches_are_skipped_and_counted(tmp_path: Path, tiny_batches: None) -> None:
    doc = document(MATH)
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels[10]["ts"] = "inf"  # a string where a number belongs
    kernels[20]["dur"] = float("nan")  # json.dumps writes the literal NaN (not strict JSON)
    kernels[30]["args"]["grid"] = [2**70, 1, 1]  # beyond 64 bits
    del kernels[40]["args"]
    del kernels[45]["dur"]
    text = json.dumps(doc).replace('"ts": "inf"', '"ts": "inf"')
    path = tmp_path / "odd.json"
    path.write_text(text)
    trace = load_trace(path)
    assert len(trace.kernels) == 48 - 3
    warnings = {w.code: w for w in trace.warnings}
    assert warnings["kernel_skipped"].count == 3
    assert "ts not a number (1)" in warnings["kernel_skipped"].message
    assert "dur not finite (1)" in warnings["kernel_skipped"].message and "dur missing (1)" in warnings["kernel_skipped"].message
    assert warnings["kernel_without_args"].count == 1 and warnings["bad_kernel_arg"].count == 1
    assert warnings["kernel_without_launch"].count == 1  # the kernel whose args (and correlation) were deleted
    big = trace.kernels[trace.kernels["correlation"] == kernels[30]["args"]["correlation"]].iloc[0]
    assert pd.isna(big["grid_x"]) and big["grid_y"] == 1 and pd.isna(big["ctas"])
    assert len(trace.ops) == len(_default(MATH).ops)


# ---- errors with their place ---------------------------------------------------------------------


def _raw(name: str) -> bytes:
    return gzip.decompress(trace_fixture(name).read_bytes())


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.97])
def test_truncated_files_end_early(tmp_path: Path, tiny_batches: None, cut: float) -> None:
    raw = _raw(MATH)
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: int(len(raw) * cut)])
    with pytest.raises(TraceError, match=r"cut\.json: JSON ends early \(truncated\?\)"):
        load_trace(path)


def test_invalid_utf8_in_a_middle_batch_names_its_byte_offset(tmp_path: Path, tiny_batches: None) -> None:
    raw = _raw(MATH)
    at = raw.index(b'"name": "', len(raw) // 2) + len(b'"name": "')
    path = tmp_path / "latin1.json"
    path.write_bytes(raw[:at] + b"\xe9" + raw[at + 1 :])
    with pytest.raises(TraceError, match=rf"latin1\.json: not valid UTF-8 \(byte offset {at}\)"):
        load_trace(path)


@pytest.mark.parametrize(("text", "message"), [
    ('{"traceEvents": [{"ph": "X"},]}', "not JSON"),
    ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "not JSON"),
    ('{"traceEvents": [{"ph": "X"}], "traceEvents": [{"ph": "X"}]}', "'traceEvents' appears twice"),
    ('{"traceEvents": [{"ph": "X"}]', "JSON ends early"),
    ('{"traceEvents": [{"ph": "X"}]} trailing', "not JSON"),
    ('[{"ph": "X"}] trailing', "extra data after the event list"),
    ('{"traceEvents": [1, 2, 3]}', "events are not JSON objects"),
    ("[" + "[" * 50_000 + "]" * 50_000 + "]", "nested too deeply"),
])
def test_broken_structure_is_one_line_trace_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value) and "\n" not in str(info.value)


def test_gzip_with_trailing_garbage_is_bad_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}') + b"garbage")
    with pytest.raises(TraceError, match="bad gzip data"):
        load_trace(path)


def test_gzip_zero_padding_after_a_member_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "padded.json.gz"
    path.write_bytes(trace_fixture(FLASH).read_bytes() + b"\x00" * 1000)
    assert len(load_trace(path).kernels) == 6


def test_a_gz_name_on_plain_json_is_read_by_its_content(tmp_path: Path) -> None:
    plain = tmp_path / "renamed.pt.trace.json.gz"
    plain.write_text(json.dumps(document(FLASH)))
    assert_same(load_trace(plain), _default(FLASH))
    junk = tmp_path / "junk.json.gz"
    junk.write_bytes(b"\x00\x01not a trace")
    with pytest.raises(TraceError, match="named .gz but is neither gzip-compressed nor JSON"):
        load_trace(junk)


# ---- elements longer than a batch ------------------------------------------------------------------


def _long_last_kernel(path: Path, name_chars: int) -> Path:
    """A trace whose last event is a kernel with a name of ``name_chars`` characters, metadata after it."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5, "pid": 1, "tid": 1, "args": {}},
              {"ph": "X", "cat": "kernel", "name": "k" * name_chars, "ts": 10, "dur": 2, "pid": 0, "tid": 7,
               "args": {"correlation": 1}}]
    path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return path


def test_a_last_element_longer_than_a_batch_is_read_with_the_metadata_after_it(tmp_path: Path) -> None:
    """The element reached the array's ']' in a non-final read; the ']' was then read again as the end of
    the file and the valid trace was reported as 'JSON ends early (truncated?)'."""
    t = load_trace(_long_last_kernel(tmp_path / "t.json", 3 * reader.BATCH_BYTES))
    assert len(t.kernels) == 1 and t.metadata == {"displayTimeUnit": "ms"}
    assert len(t.kernels["name"][0]) == 65_536  # cut (MAX_NAME_CHARS), with a warning (tests/trace/test_trace.py)


def test_an_element_longer_than_a_batch_is_decoded_a_logarithmic_number_of_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An element of n bytes used to be decoded again after every 1 MiB block (quadratic time: 45 s for a
    100 MB kernel name); now the buffer doubles before each new try."""
    monkeypatch.setattr(reader, "BATCH_BYTES", 4096)
    monkeypatch.setattr(reader, "_BLOCK_BYTES", 1024)
    calls = []
    exact = reader.TraceReader._exact

    def counted(self: reader.TraceReader, buf: bytes, offset: int, *, final: bool) -> Any:
        calls.append(len(buf))
        return exact(self, buf, offset, final=final)

    monkeypatch.setattr(reader.TraceReader, "_exact", counted)
    path = _long_last_kernel(tmp_path / "t.json", 1024 * 1024)  # 1 MiB element: 1024 blocks
    events = json.loads(path.read_text())["traceEvents"]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 20, "dur": 1, "pid": 1, "tid": 1, "args": {}})
    path.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(path)
    assert len(t.kernels) == 1 and list(t.ops["name"]) == ["aten::mm", "aten::add"]
    assert len(calls) <= 12  # log2(1 MiB / 4 KiB) = 8 doublings (+ the final read); was about 1024


# ---- bounded buffering ---------------------------------------------------------------------------


def _peak_bytes(path: Path) -> tuple[Trace, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        trace = load_trace(path)
        return trace, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("where", ["before the document", "between events", "before the first event"])
def test_whitespace_is_dropped_not_buffered(tmp_path: Path, tiny_batches: None, where: str) -> None:
    """8 MiB of newlines (gzipped to ~8 KB) read in 2 KiB batches with a peak under 1 MiB (it was all held:
    8+ MiB); line numbers in errors still count the dropped lines."""
    ws = "\n" * (8 * 2**20)
    events = '{"ph": "X", "name": "a", "ts": 1, "dur": 2}'
    text = {"before the document": ws + '{"traceEvents": [' + events + "]}",
            "between events": '{"traceEvents": [' + events + "," + ws + events + "]}",
            "before the first event": '{"traceEvents": [' + ws + events + "]}"}[where]
    path = tmp_path / "ws.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    trace, peak = _peak_bytes(path)
    assert trace.event_count == (2 if where == "between events" else 1)
    assert peak < 2**20, peak
    if where == "before the document":
        path.write_bytes(gzip.compress((ws + "{oops}").encode()))
        with pytest.raises(TraceError, match=f"line {8 * 2**20 + 1} column 2"):
            load_trace(path)


def test_an_element_or_document_over_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "MAX_EVENT_BYTES", 2**20)
    monkeypatch.setattr(reader, "BATCH_BYTES", 2**18)
    long_event = '{"traceEvents": [{"ph": "X", "name": "' + "a" * (3 * 2**20) + '"}]}'
    (tmp_path / "long.json").write_text(long_event)
    with pytest.raises(TraceError, match="an element of 'traceEvents' longer than 1 MB at byte offset 17"):
        load_trace(tmp_path / "long.json")
    (tmp_path / "doc.json").write_text('{"other": "' + "a" * (3 * 2**20) + '"}')
    with pytest.raises(TraceError, match="over 1 MB of JSON without a 'traceEvents' array"):
        load_trace(tmp_path / "doc.json")


def test_a_fifo_or_device_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)  # open() would block until a writer came
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(TraceError, match="not a regular file"):
            load_trace(path)
