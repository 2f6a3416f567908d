"""``profattn analyze`` never shows a traceback: every malformed input the issue lists is either a one-line
error naming the file (exit 2) or a warning in the report and JSON (exit 0); a hypothesis fuzz over mutated
real fixtures finds nothing else."""

from __future__ import annotations

import functools
import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import AMD, FLASH, trace_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profattn.analysis.calls.traces import TraceSetAnalysis, analyze_paths
from profattn.errors import ProfattnError
from profattn.report.analyze import (
    analysis_to_dict,
    call_group_rows,
    call_rows,
    file_rows,
    launch_shape_rows,
    render_html,
)


@functools.cache
def _text(name: str) -> str:
    return gzip.decompress(trace_fixture(name).read_bytes()).decode()


def flash_doc() -> dict[str, Any]:
    """A fresh copy of the H200 flash-decode fixture (6 kernels, 3 attention calls)."""
    return json.loads(_text(FLASH))


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _write(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc))


def _huge_grid(p: Path) -> None:
    doc = flash_doc()
    _kernels(doc)[0]["args"]["grid"] = [2**64 + 1, 7, 32]
    _write(p, doc)


def _inf_ts(p: Path) -> None:
    doc = flash_doc()
    _kernels(doc)[0]["ts"] = "inf"
    _write(p, doc)


def _no_args(p: Path) -> None:
    doc = flash_doc()
    del _kernels(doc)[1]["args"]
    _write(p, doc)


def _no_dur(p: Path) -> None:
    doc = flash_doc()
    del _kernels(doc)[2]["dur"]
    _write(p, doc)


def _no_gpu(p: Path) -> None:
    doc = flash_doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_user_annotation")]
    _write(p, doc)


def _truncated_gz(p: Path) -> None:
    p.write_bytes(trace_fixture(FLASH).read_bytes()[:-100])


def _truncated_json(p: Path) -> None:
    p.write_text(_text(FLASH)[: len(_text(FLASH)) // 2])


#: name -> (writer, expected exit code, text in the one-line error or in a warning, warning code in JSON)
VARIANTS: dict[str, tuple[Callable[[Path], None], int, str, str | None]] = {
    "truncated.json.gz": (_truncated_gz, 2, "gzip stream is truncated", None),
    "truncated.json": (_truncated_json, 2, "JSON ends early (truncated?)", None),
    "not_json.json": (lambda p: p.write_text("<html>not a trace</html>"), 2, "not JSON", None),
    "invalid_utf8.json": (lambda p: p.write_bytes(_text(FLASH).encode().replace(b"aten::", b"\xff\xfe::", 1)), 2,
                          "not valid UTF-8", None),
    "empty_events.json": (lambda p: _write(p, {"schemaVersion": 1, "traceEvents": []}), 2, "'traceEvents' is empty", None),
    "huge_int.json": (_huge_grid, 0, "beyond 64 bits", "bad_kernel_arg"),
    "inf_string.json": (_inf_ts, 0, "ts not a number (1)", "kernel_skipped"),
    "missing_args.json": (_no_args, 0, "have no args", "kernel_without_args"),
    "no_dur.json": (_no_dur, 0, "dur missing (1)", "kernel_skipped"),
    "no_gpu_events.json": (_no_gpu, 0, "no GPU kernels", "no_gpu_kernels"),
}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "profattn.cli", "analyze", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_malformed_variant_is_an_error_or_a_warning(tmp_path: Path, name: str) -> None:
    write, code, text, warning = VARIANTS[name]
    path = tmp_path / name
    write(path)
    res = _cli(str(path), "--out", str(tmp_path / "r.html"), "--json", str(tmp_path / "a.json"))
    assert "Traceback" not in res.stderr
    assert res.returncode == code, res.stderr
    if code == 2:
        assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"profattn: error: {path}: ")
        assert text in res.stderr and not (tmp_path / "r.html").exists()
        return
    assert f"warning: {name}: " in res.stderr and text in res.stderr
    (doc,) = json.loads((tmp_path / "a.json").read_text())["files"]
    assert warning in [w["code"] for w in doc["warnings"]]
    html = (tmp_path / "r.html").read_text()
    assert 'class="file-warnings"' in html and "Warning: " in html


def test_duplicated_ranks_warn_in_report_and_json(tmp_path: Path) -> None:
    doc = flash_doc()
    doc["distributedInfo"] = {"rank": 3, "world_size": 2}
    for name in ("a.json", "b.json"):
        _write(tmp_path / name, doc)
    res = _cli(str(tmp_path), "--out", str(tmp_path / "r.html"), "--json", str(tmp_path / "a.out"))
    assert res.returncode == 0 and "warning: rank 3 appears in 2 files (a.json, b.json)" in res.stderr
    assert json.loads((tmp_path / "a.out").read_text())["warnings"] == [
        "rank 3 appears in 2 files (a.json, b.json): copies of one trace, or traces from different runs mixed together?"]


def test_warnings_in_rows_html_and_json(tmp_path: Path) -> None:
    doc = flash_doc()
    k = _kernels(doc)
    k[0]["ts"] = "inf"
    k[1]["args"]["correlation"] = 99_999_999  # no runtime event launched this one
    doc["traceEvents"] += [k[2], {"ph": "X", "cat": "made_up", "name": "x", "ts": 1, "dur": 1}, 17, k[3] | {"cat": "Kernel"}]
    _write(tmp_path / "odd.json", doc)
    analysis = analyze_paths([tmp_path / "odd.json"])
    (fa,) = analysis.files
    codes = {w.code: w.count for w in fa.warnings}
    assert codes == {"not_an_object": 1, "kernel_skipped": 1, "unknown_category": 1, "kernel_without_launch": 1,
                     "repeated_kernel": 2}
    assert fa.kernel_count == 6 - 1 + 2  # one skipped, two repeated
    assert file_rows(analysis)[0]["warnings"] == [w.message for w in fa.warnings]
    assert analysis_to_dict(analysis)["files"][0]["warnings"][0] == {"code": fa.warnings[0].code,
                                                                      "count": fa.warnings[0].count,
                                                                      "message": fa.warnings[0].message}


# ---- fuzz: mutated real fixtures -----------------------------------------------------------------

JUNK = st.one_of(
    st.none(), st.booleans(), st.sampled_from(["NaN", "inf", "-Infinity", "", "1e999", "[]"]),
    st.sampled_from([2**64, -(2**63) - 1, 10**40, 1.7e308, -1.0, 0]), st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(-(2**70), 2**70), max_size=4), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def mutated_trace(draw: st.DrawFn) -> bytes:
    """A real fixture with structural mutations (field deletions, type swaps, huge ints, NaN/inf as strings or
    literals, duplicated events), then possibly byte truncation and gzip."""
    doc = json.loads(_text(draw(st.sampled_from([FLASH, AMD]))))
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(events) - 1))
        kind = draw(st.sampled_from(["delete", "swap", "duplicate", "args"]))
        target = events[i]
        if not isinstance(target, dict):
            continue
        if kind == "duplicate":
            events.insert(draw(st.integers(0, len(events))), json.loads(json.dumps(target)))
            continue
        if kind == "args" and isinstance(target.get("args"), dict) and target["args"]:
            target = target["args"]
        key = draw(st.sampled_from(sorted(target)))
        if kind == "delete":
            del target[key]
        else:
            target[key] = draw(JUNK)
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["deviceProperties", "distributedInfo", "schemaVersion"]))] = draw(JUNK)
    raw = json.dumps(doc).encode()  # NaN/Infinity floats become the non-standard literals
    if draw(st.integers(0, 4)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return gzip.compress(raw, compresslevel=1) if draw(st.booleans()) else raw


def test_fuzz_analyze_gives_a_result_or_a_profattn_error(tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("fuzz-analyze")
    trace_fixture(FLASH), trace_fixture(AMD)  # skip early without the fixtures

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(payload=mutated_trace())
    def check(payload: bytes) -> None:
        path = directory / "fuzz.json"
        path.write_bytes(payload)
        try:
            analysis = analyze_paths([path])
        except ProfattnError as e:
            assert str(path) in str(e) and "\n" not in str(e)
            return
        assert isinstance(analysis, TraceSetAnalysis)
        json.dumps(analysis_to_dict(analysis), allow_nan=False)
        file_rows(analysis)
        for fa in analysis.files:
            call_rows(fa), call_group_rows(fa), launch_shape_rows(fa)
        assert render_html(analysis).count('<section id="file-') == 1

    check()
