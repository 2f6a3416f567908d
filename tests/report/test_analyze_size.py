"""``profattn analyze`` output and memory proportional to what a reader needs (issue 26): a trace with one attention
call of 50,000 kernels (``benchmarks/many_calls_trace.py``, the generator of the 10⁶-kernel benchmark) analyses with
a small HTML and JSON and within a memory cap; the call keeps its heaviest kernels and summarises the rest."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KERNELS = 50_000


def _generator():
    spec = importlib.util.spec_from_file_location("many_calls_trace", REPO / "benchmarks" / "many_calls_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _analyze(trace: Path, out: Path) -> tuple[int, int]:
    """Run ``profattn analyze`` in a child; (exit code, the child's peak RSS in KiB from ``wait4``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-m", "profattn.cli", "analyze", str(trace), "--out", str(out / "r.html"),
                              "--json", str(out / "a.json")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="peak RSS of a child needs os.wait4 (POSIX)")
def test_a_call_of_many_kernels_is_summarised_under_a_memory_cap(tmp_path: Path):
    gen = _generator()
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    with open(small, "w") as f:
        gen.write_trace(f, 1, 10)
    with open(big, "w") as f:
        gen.write_trace(f, 1, KERNELS)
    (tmp_path / "s").mkdir()
    (tmp_path / "b").mkdir()
    code, baseline = _analyze(small, tmp_path / "s")
    assert code == 0
    code, peak = _analyze(big, tmp_path / "b")
    assert code == 0
    # Before: 250 MB more than the baseline, a 28 MB page and a 37 MB JSON (every kernel a row, every row a dict).
    assert peak - baseline < 100 * 1024, (peak, baseline)
    assert (tmp_path / "b" / "r.html").stat().st_size < 3_000_000  # plotly.js inline is ~2 MB of it
    assert (tmp_path / "b" / "a.json").stat().st_size < 200_000
    doc = json.loads((tmp_path / "b" / "a.json").read_text())
    assert doc["limits"] == {"call_kernels": 64, "attention_calls": 1000, "rows": 10000}
    (call,) = doc["files"][0]["attention_calls"]
    assert call["kernel_count"] == KERNELS and len(call["kernels"]) == 64
    omitted = call["kernels_omitted"]
    assert omitted["count"] == KERNELS - 64 and omitted["names"][0][1] == KERNELS - 64
    # durations 5 + (k % 7) µs: the 64 kept are the heaviest (11 µs), the rest sum to the total minus theirs
    total = sum(5.0 + (k % 7) for k in range(KERNELS))
    assert all(k["dur_us"] == 11.0 for k in call["kernels"])
    assert omitted["gpu_time_us"] == pytest.approx(total - 64 * 11.0) and call["gpu_time_us"] == pytest.approx(total)
    html = (tmp_path / "b" / "r.html").read_text()
    assert f"… and {KERNELS - 64:,} more kernels" in html and "at most 64 are listed per call, the heaviest" in html


def test_the_json_details_the_heaviest_calls_and_counts_the_rest(tmp_path: Path):
    from profattn.analysis.calls.traces import analyze_paths
    from profattn.report.analyze import JSON_CALL_LIMIT, analysis_to_dict, render_html

    calls = JSON_CALL_LIMIT + 200
    trace = tmp_path / "many.json"
    with open(trace, "w") as f:
        _generator().write_trace(f, calls, 1)
    analysis = analyze_paths([trace])
    doc = analysis_to_dict(analysis)["files"][0]
    assert len(doc["attention_calls"]) == JSON_CALL_LIMIT and doc["attention_calls_omitted"]["count"] == 200
    kept = [c["gpu_time_us"] for c in doc["attention_calls"]]
    assert min(kept) >= max(c.gpu_time_us for c in analysis.files[0].calls if c.index not in
                            {d["index"] for d in doc["attention_calls"]})
    assert [c["index"] for c in doc["attention_calls"]] == sorted(c["index"] for c in doc["attention_calls"])
    (group,) = doc["attention_call_groups"]
    assert group["calls"] == calls and group["kernels_per_call"] == 1
    assert "… and 1100 more call(s) (the JSON details the heaviest 1,000" in render_html(analysis)
