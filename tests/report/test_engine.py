"""The serving-engine output of ``profattn analyze`` (profattn.report.engine): step rows, terminal lines, JSON and
HTML, and the CLI on the committed vLLM traces (with and without their capture)."""

from __future__ import annotations


import json
import subprocess
import sys
from pathlib import Path

from profattn.report.analyze import analysis_to_dict, render_html
from profattn.report.engine import RECIPE, achieved_text, engine_lines, step_rows
from profattn.results import Ceilings

from engine_data import DATA, analyze_paths



def _replay(name: str):
    analysis = analyze_paths([DATA / name])
    return analysis, next(f for f in analysis.files if f.path == "graph_execution.json.gz")


def test_piecewise_step_row() -> None:
    _, fa = _replay("vllm_prefilldecode_piecewise")
    (row,) = step_rows(fa)
    assert row["prefill"] == "9 seq, Σq 8,155, Σk 8,430, Σq² 7,475,785, Σq·k 7,671,310"
    assert row["decode"] == "37 seq, Σq 37, Σk 34,489, Σq² 37, Σq·k 34,489"
    assert row["prefill_ledger"].startswith("3,937,495 pairs/head, 64.51 GFLOP, 150.9 MB (Q 66.8 MB")
    assert row["decode_ledger"].startswith("34,489 pairs/head, 565.07 MFLOP, 71.2 MB")
    assert (row["attention_calls"], row["attention_time"], row["attention_share"]) == (24, "5,146.9 µs", "3.3 %")
    assert row["tflops"].startswith("353 TFLOP/s median (210 TFLOP/s – 508 TFLOP/s)")
    assert row["gpu_time"] == "156.01 ms" and row["format"] == "vllm-detailed"


def test_terminal_lines_list_calls_with_workload_time_and_launch_shape() -> None:
    _, fa = _replay("vllm_decode_full")
    lines = engine_lines(fa)
    assert lines[0].startswith("  step 0 (vllm-detailed): 32 sequence(s) — prefill none; decode 32 seq")
    groups = [line for line in lines if " × vllm::unified_attention_with_output" in line]
    assert len(groups) == 2 and all("[graph: launch order]" in g for g in groups)
    assert any("kernel_unified_attention_3d grid [48, 8, 8] block [128, 1, 1]; reduce_segments grid [32, 64, 1]" in g
               for g in groups)
    hints = [line for line in lines if "profattn profile --workload" in line]
    assert len(hints) == 2 and all("phase=decode" in h and "page_size=32" in h and "seqs=14x(q1,kv1722)+18x(q1,kv1721)" in h
                                   for h in hints)
    assert lines[-1].startswith("  graphs: 421 of 421 replayed kernel(s) matched")


def test_achieved_rates_against_ceilings() -> None:
    _, fa = _replay("vllm_decode_full")
    call = next(c for c in fa.calls if len(c.kernels) == 1)
    roof = Ceilings(copy_gbps=4000.0, copy_bytes=1, matmul_tflops=700.0, matmul_n=1, dtype="bfloat16", method="",
                    read_gbps=5000.0)
    text = achieved_text(call.step, roof)
    rate = call.step.ledger.total_bytes / (call.gpu_time_us * 1e-6) / 1e9
    assert text.startswith("902.53 MFLOP, 113.3 MB minimum → ") and f"({100 * rate / 5000:.0f}%)" in text


def test_json_and_html_carry_steps_graphs_and_engine_calls() -> None:
    analysis, fa = _replay("vllm_decode_full")
    doc = json.loads(json.dumps(analysis_to_dict(analysis), allow_nan=False))
    replay = next(f for f in doc["files"] if f["path"] == "graph_execution.json.gz")
    (step,) = replay["serving_steps"]
    assert step["annotation"]["generation"]["sum_k"] == 55086 and step["ledger"]["decode"]["flops"] == 902_529_024
    assert replay["graph_merge"]["placed_kernels"] == 421 and replay["graph_merge"]["launches"][0]["rule"] == "launch order"
    call = replay["attention_calls"][0]
    assert call["engine"]["kv_cache"]["layout"] == "[2, num_blocks, block_size, num_kv_heads, head_dim]"
    assert call["graph"]["rule"] == "launch order" and call["step"]["ledger"]["decode"]["pairs"] == 55086
    html = render_html(analysis)
    assert "Serving steps" in html and "CUDA graph replays" in html and "421 of 421 replayed kernel(s)" in html


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "profattn.cli", "analyze", *args, "--out", str(tmp_path / "r.html")]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_cli_without_the_capture_says_what_is_missing_and_the_recipe(tmp_path: Path) -> None:
    done = _cli(tmp_path, str(DATA / "vllm_decode_full" / "graph_execution.json.gz"))
    assert done.returncode == 0, done.stderr
    assert "no capture trace was given" in done.stderr
    assert "profile the graphs' capture too" in done.stdout and RECIPE[0] in done.stdout
    html = (tmp_path / "r.html").read_text()
    assert "capture_torch_profiler" in html


def test_cli_on_the_directory_merges_the_capture(tmp_path: Path) -> None:
    done = _cli(tmp_path, str(DATA / "vllm_decode_full"), "--json", str(tmp_path / "a.json"))
    assert done.returncode == 0, done.stderr
    assert "rank 0: 24 attention call(s), 425 kernels" in done.stdout
    assert "12 × vllm::unified_attention_with_output → vllm-triton, decode" in done.stdout
    assert "skipped capture_traces/execution_details.json" in done.stderr
    assert "profile the graphs' capture too" not in done.stdout


def test_a_rate_above_the_roof_says_the_ledger_overcounts() -> None:
    """The 2d-kernel layers of the decode step would read 113 MB at ~8.4 TB/s: above a 5 TB/s roof, so the ledger
    (all Σk keys) overcounts them — the model alternates sliding-window layers, whose window the trace lacks."""
    _, fa = _replay("vllm_decode_full")
    roof = Ceilings(copy_gbps=4000.0, copy_bytes=1, matmul_tflops=1300.0, matmul_n=1, dtype="bfloat16", method="",
                    read_gbps=5000.0)
    lines = engine_lines(fa, roof)
    flagged = [line for line in lines if "above the measured roof" in line]
    assert flagged == ["    12 of these 12 call(s) above the measured roof: this call did less work than the step "
                       "ledger counts (a layer with a sliding window, say: the window is not in the trace)"]
