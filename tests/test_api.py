"""The public Python API on the committed H200 runs and traces: ``profattn.load_run`` (+ ``to_pandas``) and
``profattn.analyze_trace``, torch-free."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import profattn
from conftest import FLASH, REPO, trace_fixture
from profattn.errors import ResultsError, TraceError

SEED = REPO / "examples" / "h200-seed"
SWEEP = REPO / "examples" / "h200-sweep"
SEED_DECODE_TRACE = SEED / "traces" / "decode" / "profattn.1795945653947183810.pt.trace.json.gz"
KV8192 = "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_paged16"


@pytest.fixture(scope="module")
def seed() -> pd.DataFrame:
    return profattn.load_run(SEED).to_pandas()


def _cell(df: pd.DataFrame, backend: str, tag: str = KV8192) -> pd.Series:
    rows = df[(df.tag == tag) & (df.backend == backend)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_seed_frame_one_row_per_cell(seed: pd.DataFrame):
    run = profattn.load_run(SEED)
    assert isinstance(run, profattn.RunResult)
    assert seed.shape[0] == len(run.cells) == 45
    assert list(seed.cell_id) == [c.cell_id for c in run.cells]
    assert seed.status.value_counts().to_dict() == {"ok": 34, "unsupported": 11}
    assert set(seed.phase) == {"train", "prefill", "decode"}
    for col in ("latency_us", "eager_median_us", "graph_median_us", "gpu_time_us", "tokens_per_s", "achieved_gbps",
                "achieved_tflops", "peak_mem_bytes", "error", "dominant_kernel", "dominant_grid", "dominant_block",
                "dominant_registers_per_thread", "dominant_shared_mem_bytes", "dominant_ctas_per_sm"):
        assert col in seed.columns


def test_decode_kv8192_latencies(seed: pd.DataFrame):
    """The H200 decode at kv 8192 (B=8, Hq=16, Hkv=4, d=128, bf16): eager and graph-replay medians (µs)."""
    flash = _cell(seed, "sdpa-flash")
    assert flash.eager_median_us == pytest.approx(58.304001)
    assert flash.graph_median_us == pytest.approx(48.767999)
    assert flash.latency_us == flash.graph_median_us  # decode is judged on the graph replay
    assert flash.gpu_time_us == pytest.approx(44.554667, abs=1e-5)
    assert _cell(seed, "sdpa-cudnn").graph_median_us == pytest.approx(40.832002)
    triton = _cell(seed, "triton-paged-decode")
    assert triton.graph_median_us == pytest.approx(40.736001)
    assert triton.eager_median_us == pytest.approx(108.096004)
    assert _cell(seed, "sdpa-math").graph_median_us == pytest.approx(1564.095974)


def test_decode_kv8192_rates_from_the_workload_ledgers(seed: pd.DataFrame):
    flash = _cell(seed, "sdpa-flash")
    # K/V: 2 x 8 x 8192 x 4 x 128 x 2 B; Q and O 8 x 16 x 128 x 2 B each; block table 8 x 512 pages + 8 lengths, int32
    assert flash.kv_bytes == 134_217_728
    assert flash.requested_bytes == 134_217_728 + 2 * 32_768 + 4 * (8 * 512 + 8)
    assert flash.achieved_gbps == pytest.approx(flash.requested_bytes / (48.767999e-6) / 1e9)
    assert flash.achieved_gbps == pytest.approx(2753.85, abs=0.01)
    assert flash.flops == 4 * 16 * 8 * 8192 * 128  # 4 · Hq · pairs · d (query heads, not KV heads)
    assert flash.achieved_tflops == pytest.approx(flash.flops / 48.767999e-6 / 1e12)
    assert flash.tokens_per_s == pytest.approx(8 / 48.767999e-6)  # B new tokens per step
    assert flash.peak_mem_bytes == 1_159_968_768


def test_dominant_kernel_launch_shape(seed: pd.DataFrame):
    flash = _cell(seed, "sdpa-flash")
    assert "flash_fwd_splitkv_kernel" in flash.dominant_kernel
    assert flash.dominant_grid == (1, 7, 32) and flash.dominant_block == (128, 1, 1)
    assert flash.dominant_registers_per_thread == 246 and flash.dominant_shared_mem_bytes == 81_920
    assert flash.dominant_ctas == 224 and flash.dominant_ctas_per_sm == pytest.approx(224 / 132)
    triton = _cell(seed, "triton-paged-decode")
    assert triton.dominant_kernel == "_paged_decode_split_kernel" and triton.dominant_grid == (8, 4, 16)


def test_unsupported_cell_carries_its_error(seed: pd.DataFrame):
    eff = _cell(seed, "sdpa-efficient")
    assert eff.status == "unsupported" and eff.error.startswith("EFFICIENT_ATTENTION rejected this workload")
    assert pd.isna(eff.latency_us) and pd.isna(eff.peak_mem_bytes) and eff.dominant_grid is None
    assert seed[seed.status == "ok"].error.isna().all()


def test_results_json_path_and_missing_traces(tmp_path: Path, seed: pd.DataFrame):
    assert profattn.load_run(SEED / "results.json").to_pandas().equals(seed)
    shutil.copy(SEED / "results.json", tmp_path / "results.json")  # no traces beside it: stored summaries stay
    alone = profattn.load_run(tmp_path).to_pandas()
    pd.testing.assert_frame_equal(alone, seed, check_exact=False, rtol=1e-12)
    with pytest.raises(ResultsError):
        profattn.load_run(tmp_path / "nowhere")


def test_sweep_loads():
    df = profattn.load_run(SWEEP).to_pandas()
    assert len(df) == 152 and set(df.phase) == {"decode"}


def test_run_gpu_time_matches_the_trace_calls():
    """The run's flash kv-8192 GPU time per call is the mean of its three profiled calls in the trace."""
    t = profattn.analyze_trace(SEED_DECODE_TRACE)
    calls = t.attention_calls
    assert calls.backend.value_counts().to_dict() == {"flex": 54, "cudnn": 18, "triton": 18, "math": 9, "flash": 9}
    flash = calls[(calls.backend == "flash") & (calls.kv_len == 8192)]
    assert list(flash.gpu_time_us) == pytest.approx([43.872, 44.480, 45.312])
    assert (flash.range == f"{KV8192}.sdpa-flash").all()
    run = profattn.load_run(SEED).to_pandas()
    assert _cell(run, "sdpa-flash").gpu_time_us == pytest.approx(flash.gpu_time_us.mean())


def test_analyze_trace_fixture():
    t = profattn.analyze_trace(trace_fixture(FLASH))
    assert isinstance(t, profattn.TraceAnalysis)
    assert len(t.kernels) == 6 and len(t.ops) == 99 and len(t.attention_calls) == 3
    assert t.kernels is t.trace.kernels and len(t.calls.calls) == 3
    c = t.attention_calls.iloc[0]
    assert (c.backend, c.direction, c.phase) == ("flash", "forward", "decode")
    assert (c.batch, c.num_q_heads, c.num_kv_heads, c.q_len, c.kv_len, c.head_dim) == (8, 16, 4, 1, 8192, 128)
    assert c["dtype"] == "bfloat16" and c.workload_tag == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_none"
    assert c.kernel_count == 2 and c.gpu_time_us == pytest.approx(48.768)
    assert "flash_fwd_splitkv_kernel" in c.dominant_kernel and c.dominant_kernel_us == pytest.approx(44.320)
    assert c.dominant_grid == (1, 7, 32) and c.dominant_registers_per_thread == 246
    assert c.dominant_shared_mem_bytes == 81_920 and c.dominant_ctas == 224
    with pytest.raises(TraceError):
        profattn.analyze_trace(REPO / "no-such-trace.json.gz")


def test_api_never_imports_torch():
    code = (
        "import sys, profattn\n"
        f"df = profattn.load_run({str(SEED)!r}).to_pandas()\n"
        f"t = profattn.analyze_trace({str(SEED_DECODE_TRACE)!r})\n"
        "assert len(df) == 45 and len(t.attention_calls) == 108\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


def test_readme_example_runs():
    """The one-liner of the issue, from the repository root."""
    code = "import profattn; print(profattn.load_run('examples/h200-seed').to_pandas().shape)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip().startswith("(45, ")


def test_readme_python_api_block_runs(monkeypatch):
    """The README's notebook-style example runs as written (from the repository root)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    code = text.split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(REPO)
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own documentation
    assert len(scope["df"]) == 45 and len(scope["t"].attention_calls) == 108
