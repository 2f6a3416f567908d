"""``profattn analyze``: attention calls, workloads and GPU time from real Kineto fixtures and small
synthetic traces; the CLI's files and one-line errors; HTML escaping of trace strings."""

from __future__ import annotations

import functools
import gzip
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ALEXNET, AMD, CPU_ONLY, FLASH, MATH, OLD_SCHEMA, trace_fixture

from profattn.analysis.calls.call_records import CausalAlignment, TraceCalls
from profattn.analysis.calls.call_shapes import attention_family
from profattn.analysis.calls.find import find_attention_calls
from profattn.analysis.calls.traces import RankClash, TraceSetAnalysis, analyze_paths, find_trace_files
from profattn.errors import ProfattnError
from profattn.report.analyze import (
    analysis_to_dict,
    call_group_rows,
    call_rows,
    file_rows,
    kernel_rows,
    launch_shape_rows,
    mask_text,
    op_rows,
    render_html,
    set_warnings,
    step_rows,
)
from tracebuild import BF16, cpu_op, kernel, launch, sdpa_call, write_trace
from profattn.trace.kineto import load_trace
from profattn.workload import Phase, Workload, parse_workload_spec

SEED_DECODE = {"batch": 8, "num_q_heads": 16, "num_kv_heads": 4, "q_len": 1, "kv_len": 8192, "head_dim": 128, "dtype": "bfloat16"}


@functools.cache
def _analyzed(path: Path) -> TraceCalls:
    return find_attention_calls(load_trace(path))


def analyzed(name: str) -> TraceCalls:
    """The fixture's analysis (computed once per session; records are frozen)."""
    return _analyzed(trace_fixture(name))


# ---- synthetic traces ----------------------------------------------------------------------------


def test_flash_decode_fixture_three_gqa_calls_with_splitkv_kernels():
    fa = analyzed(FLASH)
    assert len(fa.calls) == 3 and fa.num_sms == 132 and fa.device_name == "NVIDIA H200"
    for call in fa.calls:
        s = call.shape
        assert (s.batch, s.num_q_heads, s.num_kv_heads, s.q_len, s.kv_len, s.head_dim, s.dtype) == tuple(SEED_DECODE.values())
        assert call.source == "op" and call.op_name == "aten::scaled_dot_product_attention"
        assert call.backend == "flash" and call.backend_op == "aten::_scaled_dot_product_flash_attention"
        assert call.phase is Phase.DECODE and call.direction == "forward"
        assert call.causal is False and call.causal_alignment is CausalAlignment.NONE and mask_text(call) == "none"  # Concrete Inputs re-read: is_causal=False
        assert call.range == "decode_FLASH_ATTENTION"
        split, combine = call.kernels
        assert "flash_fwd_splitkv_kernel" in split.name and split.grid == (1, 7, 32) and split.block == (128, 1, 1)
        assert split.ctas == 224 and split.ctas_per_sm == pytest.approx(224 / 132)
        assert split.registers_per_thread == 246 and split.shared_mem_bytes == 81920
        assert "flash_fwd_splitkv_combine_kernel" in combine.name and combine.grid == (32, 1, 1)
        assert call.kernel_families == ("flash",)
        assert call.gpu_time_us == pytest.approx(split.dur_us + combine.dur_us)
        assert call.workload == Workload(phase="decode", mask="none", **SEED_DECODE)
        assert eval(call.workload_constructor, {"Workload": Workload}) == call.workload
        cmd = shlex.split(call.profile_hint)
        assert cmd[:3] == ["profattn", "profile", "--workload"]
        assert parse_workload_spec(cmd[3]) == call.workload  # the command benchmarks exactly this workload
    assert [c.index for c in fa.calls] == [0, 1, 2]
    (row,) = call_group_rows(fa)
    assert (row["calls"], row["backend"], row["phase"], row["heads"], row["kernels_per_call"]) == (3, "flash", "decode", "16/4", 2)
    rows = call_rows(fa)
    assert rows[0]["kernels"][0]["grid"] == "[1, 7, 32]" and rows[0]["causal"] == "no"


def test_flash_fixture_gpu_time_by_kernel_and_by_op():
    fa = analyzed(FLASH)
    by_kernel = kernel_rows(fa)
    assert [r["count"] for r in by_kernel] == [3, 3] and "flash_fwd_splitkv_kernel" in by_kernel[0]["kernel"]
    assert fa.kernels[0].total_us + fa.kernels[1].total_us == pytest.approx(fa.gpu_time_us)
    (op,) = fa.ops
    assert (op.name, op.op_calls, op.kernels) == ("aten::scaled_dot_product_attention", 3, 6)
    assert op.total_us == pytest.approx(fa.gpu_time_us)
    assert {r["grid"] for r in launch_shape_rows(fa)} == {"[1, 7, 32]", "[32, 1, 1]"}


def test_math_fixture_three_calls_dispatched_to_math_with_many_kernels():
    fa = analyzed(MATH)
    assert len(fa.calls) == 3
    for call in fa.calls:
        assert call.backend == "math" and call.backend_op == "aten::_scaled_dot_product_attention_math"
        assert call.phase is Phase.DECODE and call.shape.num_kv_heads == 4
        assert len(call.kernels) == 16 and call.kernel_families == ()  # GEMV, softmax, copies: no fused kernel
        assert any("softmax" in k.name.lower() for k in call.kernels)
    assert sum(len(c.kernels) for c in fa.calls) == fa.kernel_count == 48


def test_cpu_only_fixture_no_calls_and_a_no_gpu_kernels_warning():
    fa = analyzed(CPU_ONLY)
    assert fa.calls == () and not fa.has_gpu_kernels and fa.rank == 34 and fa.label == "rank 34"
    assert [w.code for w in fa.warnings] == ["no_gpu_kernels"] and "no GPU kernels" in fa.warnings[0].message
    assert file_rows(TraceSetAnalysis((fa,)))[0]["warnings"] == [fa.warnings[0].message]
    assert kernel_rows(fa) == [] and op_rows(fa) == []
    assert [r["step"] for r in step_rows(fa)] == ["ProfilerStep#551"]
    html = render_html(TraceSetAnalysis((fa,)))
    assert "no GPU kernels" in html


def test_amd_fixture_launch_shapes_from_the_launch_events():
    """The kernel events carry no grid/block; the ROCm launch events do. hipExtModuleLaunchKernel records the global
    work size (threads): the GEMM's [512, 8, 1] threads in blocks of 256 is a grid of [2, 8, 1] blocks."""
    fa = analyzed(AMD)
    assert fa.calls == () and fa.kernel_count == 14
    shapes = {(r["kernel"][:25], r["grid"], r["block"], r["ctas"]) for r in launch_shape_rows(fa)}
    assert ("Cijk_Ailk_Bjlk_SB_Bias_AS", "[2, 8, 1]", "[256, 1, 1]", "16") in shapes
    assert ("void at::native::elementw", "[3, 1, 1]", "[128, 1, 1]", "3") in shapes
    assert not any("grid/block" in n for n in fa.notes)
    steps = {s.name: s for s in fa.steps}
    assert steps["ProfilerStep#1"].kernels == 14 and steps["ProfilerStep#2"].kernels == 0
    assert "AMD" in (fa.device_name or "")
    render_html(TraceSetAnalysis((fa,)))


@pytest.mark.parametrize("name", [OLD_SCHEMA, ALEXNET])
def test_old_schema_and_alexnet_analyzed_without_attention_calls(name: str):
    fa = analyzed(name)
    assert fa.calls == () and fa.has_gpu_kernels
    assert sum(k.count for k in fa.kernels) == fa.kernel_count
    assert sum(o.kernels for o in fa.ops) == fa.kernel_count  # every kernel charged somewhere
    # cuDNN convolution kernels are not attention, though profattn's cuDNN family pattern says "cudnn".
    assert all(k.family is None for k in fa.kernels)
    render_html(TraceSetAnalysis((fa,)))


def test_directory_of_two_copies_gives_two_sections_and_a_duplicated_rank_warning(tmp_path: Path):
    source = trace_fixture(OLD_SCHEMA)
    (tmp_path / "worker0").mkdir()
    shutil.copy(source, tmp_path / "worker0" / "a.pt.trace.json.gz")
    shutil.copy(source, tmp_path / "b.pt.trace.json.gz")
    (tmp_path / "notes.txt").write_text("not a trace")
    analysis = analyze_paths([tmp_path])
    assert [Path(f.path).name for f in analysis.files] == ["b.pt.trace.json.gz", "a.pt.trace.json.gz"]
    assert [r["label"] for r in file_rows(analysis)] == ["rank 1", "rank 1"]
    assert analysis.rank_clashes == (RankClash(1, ("b.pt.trace.json.gz", "worker0/a.pt.trace.json.gz")),)
    (warning,) = set_warnings(analysis)
    assert "rank 1" in warning and "a.pt.trace.json.gz" in warning and "b.pt.trace.json.gz" in warning
    assert render_html(analysis).count('<section id="file-') == 2


def test_files_without_rank_are_labelled_by_name_and_not_warned(tmp_path: Path):
    for name in ("x.json.gz", "y.json.gz"):
        shutil.copy(trace_fixture(FLASH), tmp_path / name)
    analysis = analyze_paths([tmp_path / "x.json.gz", tmp_path / "y.json.gz", tmp_path / "x.json.gz"])
    assert [f.label for f in analysis.files] == ["x.json.gz", "y.json.gz"] and analysis.rank_clashes == () and set_warnings(analysis) == []


def test_missing_path_and_empty_directory_are_errors(tmp_path: Path):
    with pytest.raises(ProfattnError, match="nope.json"):
        find_trace_files([tmp_path / "nope.json"])
    with pytest.raises(ProfattnError, match="no trace files"):
        find_trace_files([tmp_path])


# ---- synthetic traces: regimes, masks, CUDA graphs -----------------------------------------------


def test_train_forward_and_backward_calls(tmp_path: Path):
    q = [2, 8, 256, 64]
    k = [2, 2, 256, 64]
    events = sdpa_call(1000, 1, q=q, k=k, causal=True, kernel_name="void pytorch_flash::flash_fwd_kernel<>")
    events += [
        cpu_op("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", 2000, 300, tid=2),
        cpu_op("aten::_scaled_dot_product_flash_attention_backward", 2010, 200, tid=2,
               dims=[q, q, k, k, q, [2, 8, 256]] + [[]] * 9, types=BF16 + ["c10::BFloat16"] * 3,
               concrete=[""] * 11 + ["True"] + [""] * 3),
        launch(2050, 2, tid=2),
        kernel("void pytorch_flash::flash_bwd_dq_dk_dv_loop_kernel<>", 2400, 80, 2),
        launch(2150, 3, tid=2),
        kernel("void at::native::vectorized_elementwise_kernel<>", 2500, 5, 3),
    ]
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "train.json", events)))
    fwd, bwd = fa.calls
    assert (fwd.direction, fwd.phase, fwd.backend) == ("forward", Phase.TRAIN, "flash")
    assert (fwd.causal, fwd.causal_alignment, mask_text(fwd)) == (True, CausalAlignment.TOP_LEFT, "causal (top-left)")  # Lq == Lk: top-left and bottom-right agree
    assert fwd.workload == Workload(phase="train", batch=2, q_len=256, kv_len=256, num_q_heads=8, num_kv_heads=2,
                                    head_dim=64, dtype="bfloat16", mask="causal")
    assert (bwd.direction, bwd.phase, bwd.backend) == ("backward", Phase.TRAIN, "flash")
    assert bwd.op_name == "aten::_scaled_dot_product_flash_attention_backward" and bwd.causal is True
    assert [kk.name for kk in bwd.kernels] == ["void pytorch_flash::flash_bwd_dq_dk_dv_loop_kernel<>",
                                             "void at::native::vectorized_elementwise_kernel<>"]
    assert bwd.shape == fwd.shape and bwd.kernels[0].ctas_per_sm == pytest.approx(8 / 100)
    assert {o.name for o in fa.ops} == {"aten::scaled_dot_product_attention",
                                        "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0"}


def test_top_left_causal_with_unequal_lengths_gets_no_workload(tmp_path: Path):
    events = sdpa_call(1000, 1, q=[1, 8, 16, 64], k=[1, 8, 1024, 64], causal=True, kernel_name="flash_fwd_kernel")
    (call,) = find_attention_calls(load_trace(write_trace(tmp_path / "tl.json", events))).calls
    assert call.phase is Phase.DECODE and call.causal is True and call.workload is None
    assert any("top-left" in n for n in call.notes) and "no profattn Workload" in call.profile_hint


def test_causal_unknown_without_concrete_inputs(tmp_path: Path):
    path = write_trace(tmp_path / "plain.json", sdpa_call(1000, 1, q=[4, 8, 512, 64], k=[4, 8, 512, 64], causal=None,
                                                          kernel_name="fmha_cutlassF_bf16_aligned_64x64_rf_sm80",
                                                          backend_op="aten::_scaled_dot_product_efficient_attention"))
    fa = find_attention_calls(load_trace(path))
    (call,) = fa.calls
    assert call.backend == "efficient" and call.kernel_families == ("efficient",) and call.phase is Phase.PREFILL
    assert call.causal is None and call.causal_alignment is CausalAlignment.UNKNOWN and mask_text(call) == "unknown" and call.workload is None
    assert any("Concrete Inputs" in n for n in call.notes) and "no profattn Workload: mask unknown" in call.profile_hint
    assert call_rows(fa)[0]["causal"] == "unknown"


def test_concrete_inputs_read_back_from_a_gzipped_trace(tmp_path: Path):
    events = sdpa_call(1000, 1, q=[4, 8, 512, 64], k=[4, 8, 512, 64], causal=True, kernel_name="flash_fwd_kernel")
    plain = write_trace(tmp_path / "t.json", events)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    (call,) = find_attention_calls(load_trace(gz)).calls
    assert call.causal is True and call.workload is not None and call.workload.mask.value == "causal"


def test_cuda_graph_attention_kernels_become_a_kernel_only_call(tmp_path: Path):
    events = [
        cpu_op("CUDAGraph::replay", 1000, 50),
        launch(1010, 9, name="cudaGraphLaunch"),
        kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", 1100, 20, 9),
        kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", 1130, 20, 9),
        kernel("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", 1160, 20, 9),  # a convolution: not attention
    ]
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "graph.json", events)))
    (call,) = fa.calls
    assert call.source == "kernels" and call.graph_launched and call.backend == "cudnn" and len(call.kernels) == 2
    assert call.shape is None and call.workload is None and call.phase is None
    assert any("CUDA graph" in n for n in call.notes) and any("CUDA graphs" in n for n in fa.notes)
    (op,) = fa.ops
    assert (op.name, op.kernels, op.graph_kernels) == ("CUDAGraph::replay", 3, 3)


def test_flex_attention_op_backend_flex_and_mask_unknown(tmp_path: Path):
    events = [
        cpu_op("flex_attention", 1000, 100, dims=[[2, 8, 128, 64], [2, 8, 128, 64], [2, 8, 128, 64], []],
               types=["c10::Half"] * 3 + [""]),
        launch(1010, 1),
        kernel("triton_tem_fused_flex_attention_0", 1200, 40, 1),
    ]
    (call,) = find_attention_calls(load_trace(write_trace(tmp_path / "flex.json", events))).calls
    assert (call.backend, call.backend_op, call.kernel_families, call.phase) == ("flex", "flex_attention", ("flex",), Phase.PREFILL)
    assert call.shape.dtype == "float16" and call.causal is None and call.workload is None
    assert any("block mask" in n for n in call.notes)


def test_attention_family_needs_an_attention_kernel_name():
    assert attention_family("void pytorch_flash::flash_fwd_splitkv_kernel<>") == "flash"
    assert attention_family("triton_tem_fused_flex_attention_0") == "flex"
    assert attention_family("flashinfer::BatchDecodeWithPagedKVCacheKernel<>") == "flashinfer"
    assert attention_family("triton_tem_fused_mm_0") is None
    assert attention_family("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1") is None


def test_trace_strings_are_escaped_in_html(tmp_path: Path):
    evil = "<script>alert('k')</script>"
    events = [cpu_op("aten::<b>op</b>", 1000, 50), launch(1010, 1), kernel(evil, 1100, 20, 1)]
    analysis = analyze_paths([write_trace(tmp_path / "evil.json", events)])
    html = render_html(analysis)
    assert evil not in html and "<b>op</b>" not in html
    assert "&lt;script&gt;alert(&#39;k&#39;)&lt;/script&gt;" in html and "aten::&lt;b&gt;op&lt;/b&gt;" in html
    # plotly.js once (gzipped, base64), the chart loader once; nothing else runs
    assert html.count('<script type="application/octet-stream" id="plotly-js-gz">') == 1 and html.count("<script>") == 1


def test_json_document_is_versioned_and_finite():
    analysis = TraceSetAnalysis((analyzed(FLASH), analyzed(AMD)))
    doc = json.loads(json.dumps(analysis_to_dict(analysis), allow_nan=False))
    assert (doc["schema"], doc["schema_version"]) == ("profattn.analysis", 3)
    call = doc["files"][0]["attention_calls"][0]
    assert call["workload"]["tag"] == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_none"
    assert call["kernels"][0]["grid"] == [1, 7, 32] and call["phase"] == "decode"
    amd = doc["files"][1]["launch_shapes"][0]  # the GEMM: 512 threads of hipExtModuleLaunchKernel in blocks of 256
    assert amd["grid"] == [2, 1, 1] and amd["blocks_per_sm"] is None  # ROCm writes no blocks-per-SM figure: null


# ---- the CLI -------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "profattn.cli", "analyze", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_cli_writes_html_and_json(tmp_path: Path):
    out, js = tmp_path / "r" / "report.html", tmp_path / "a.json"
    res = _cli(str(trace_fixture(FLASH)), "--out", str(out), "--json", str(js))
    assert res.returncode == 0, res.stderr
    assert "3 attention call(s)" in res.stdout
    assert out.stat().st_size > 1_000_000  # plotly.js inline
    assert json.loads(js.read_text())["files"][0]["attention_calls"][2]["backend"] == "flash"


def test_cli_truncated_gzip_and_missing_path_exit_2(tmp_path: Path):
    bad = tmp_path / "cut.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": []}' * 50)[:-12])
    res = _cli(str(bad), "--out", str(tmp_path / "r.html"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("profattn: error:") and "cut.pt.trace.json.gz" in res.stderr
    assert not (tmp_path / "r.html").exists()
    res = _cli(str(tmp_path / "missing"), "--out", str(tmp_path / "r.html"))
    assert res.returncode == 2 and "missing" in res.stderr and res.stderr.count("\n") == 1


def test_cli_analyze_does_not_import_torch(tmp_path: Path):
    """``profattn analyze`` reads traces without torch (1.2 s and ~190 MB of RSS saved per run)."""
    script = (
        "import sys\n"
        "import profattn.cli as cli\n"
        f"sys.argv = ['profattn', 'analyze', {str(trace_fixture(FLASH))!r}, '--out', {str(tmp_path / 'r.html')!r}]\n"
        "try:\n    cli.main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert "3 attention call(s)" in res.stdout


def test_decode_call_beside_a_training_step_of_the_same_backend_stays_decode(tmp_path: Path):
    """A decode-shaped forward call (no backward of its shapes) in a trace that also trains with the same
    backend: the backward op's recorded shapes decide, not the backend's autograd node alone (seen on the
    H200 training traces of benchmarks/trace_parse.py: cuDNN train steps plus a decode-style call)."""
    q, k = [8, 8, 512, 64], [8, 2, 512, 64]
    cudnn = "aten::_scaled_dot_product_cudnn_attention"
    events = sdpa_call(1000, 1, q=q, k=k, causal=True, kernel_name="cudnn_generated_fort_native_sdpa_sm90_flash_fprop",
                       backend_op=cudnn)
    events += sdpa_call(5000, 3, q=[8, 8, 1, 64], k=k, causal=False,
                        kernel_name="cudnn_generated_fort_native_sdpa_sm90_flash_fprop", backend_op=cudnn)
    events += [
        cpu_op("autograd::engine::evaluate_function: ScaledDotProductCudnnAttentionBackward0", 2000, 300, tid=2),
        cpu_op(f"{cudnn}_backward", 2010, 200, tid=2, dims=[q, q, k, k] + [[]] * 11, types=BF16 + ["c10::BFloat16"] * 12,
               concrete=[""] * 14 + ["True"]),
        launch(2050, 2, tid=2),
        kernel("cudnn_generated_fort_native_sdpa_sm90_flash_bprop", 2400, 80, 2),
    ]
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "mixed.json", events)))
    train_fwd, bwd, decode = fa.calls
    assert (train_fwd.direction, train_fwd.phase, train_fwd.shape.q_len) == ("forward", Phase.TRAIN, 512)
    assert (bwd.direction, bwd.phase) == ("backward", Phase.TRAIN)
    assert (decode.direction, decode.phase, decode.shape.q_len, decode.backend) == ("forward", Phase.DECODE, 1, "cudnn")
    assert decode.workload is not None and decode.workload.phase is Phase.DECODE


# ---- directories: run directories, unreadable files, privacy of paths ----------------------------


def _run_dir(root: Path) -> Path:
    """A profattn-like run directory: results.json (no traceEvents), a trace under traces/decode/, an empty
    x.json and a notes file."""
    run = root / "run"
    (run / "traces" / "decode").mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"schema": "profattn.results", "schema_version": 3, "cells": []}))
    shutil.copy(trace_fixture(FLASH), run / "traces" / "decode" / "w.pt.trace.json.gz")
    (run / "x.json").write_text("")
    (run / "notes.txt").write_text("not a trace")
    return run


def test_cli_run_directory_skips_non_traces_and_unreadable_files_with_warnings(tmp_path: Path):
    run = _run_dir(tmp_path)
    out, js = tmp_path / "r.html", tmp_path / "a.json"
    res = _cli(str(run), "--out", str(out), "--json", str(js))
    assert res.returncode == 0, res.stderr
    assert "w.pt.trace.json.gz: 3 attention call(s)" in res.stdout
    assert res.stderr.splitlines() == [
        "warning: skipped results.json: not a Chrome trace (no 'traceEvents' key)",
        "warning: skipped x.json: file is empty",
    ]
    doc = json.loads(js.read_text())
    assert [f["path"] for f in doc["files"]] == ["traces/decode/w.pt.trace.json.gz"]
    assert doc["skipped"] == [{"path": "results.json", "reason": "not a Chrome trace (no 'traceEvents' key)"},
                              {"path": "x.json", "reason": "file is empty"}]
    assert doc["warnings"] == ["skipped results.json: not a Chrome trace (no 'traceEvents' key)", "skipped x.json: file is empty"]
    html = out.read_text()
    assert "skipped x.json: file is empty" in html and "skipped results.json: not a Chrome trace" in html


def test_cli_directory_without_a_readable_trace_is_one_line_exit_2(tmp_path: Path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.json").write_text("")
    (tmp_path / "d" / "results.json").write_text("{}")
    res = _cli(str(tmp_path / "d"), "--out", str(tmp_path / "r.html"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr == ("profattn: error: no trace could be read (2 file(s) skipped: results.json: not a Chrome trace "
                          "(no 'traceEvents' key); x.json: file is empty)\n")
    assert not (tmp_path / "r.html").exists()


def test_cli_unreadable_file_named_explicitly_stays_an_error(tmp_path: Path):
    run = _run_dir(tmp_path)
    res = _cli(str(run / "traces" / "decode" / "w.pt.trace.json.gz"), str(run / "x.json"), "--out", str(tmp_path / "r.html"))
    assert res.returncode == 2 and res.stderr == f"profattn: error: {run / 'x.json'}: file is empty\n"
    assert not (tmp_path / "r.html").exists()


def test_cli_outputs_carry_no_absolute_path_unless_keep_host_info(tmp_path: Path):
    run = _run_dir(tmp_path)
    single = shutil.copy(trace_fixture(FLASH), tmp_path / "single.pt.trace.json.gz")
    for keep in (False, True):
        out, js = tmp_path / f"r{keep}.html", tmp_path / f"a{keep}.json"
        res = _cli(str(run), str(single), "--out", str(out), "--json", str(js), *(["--keep-host-info"] if keep else []))
        assert res.returncode == 0, res.stderr
        paths = [f["path"] for f in json.loads(js.read_text())["files"]]
        html = out.read_text()
        if keep:
            assert paths == [str(run / "traces" / "decode" / "w.pt.trace.json.gz"), str(single)]
            assert str(tmp_path) in html
        else:
            assert paths == ["traces/decode/w.pt.trace.json.gz", "single.pt.trace.json.gz"]
            listing = [line for line in res.stdout.splitlines() if not line.startswith(("report:", "json:"))]
            assert str(tmp_path) not in html and str(tmp_path) not in js.read_text() and str(tmp_path) not in "".join(listing)


def test_host_and_user_names_are_scrubbed_from_the_analysis(tmp_path: Path, monkeypatch):
    from profattn import privacy

    monkeypatch.setattr("platform.node", lambda: "vm")
    monkeypatch.setattr("getpass.getuser", lambda: "alice-dev")
    privacy.host_identifiers.cache_clear()
    try:
        events = [cpu_op("aten::copy_ vm", 1000, 50), launch(1010, 1), kernel("kernel_from_alice-dev", 1100, 20, 1)]
        path = write_trace(tmp_path / "vm_4242.1795.pt.trace.json", events)
        fa, = analyze_paths([path]).files
        assert fa.path == fa.label == "<host>_4242.1795.pt.trace.json"
        assert [o.name for o in fa.ops] == ["aten::copy_ <host>"] and [k.name for k in fa.kernels] == ["kernel_from_alice-dev"]
        kept, = analyze_paths([path], keep_host_info=True).files
        assert kept.path == str(path) and [o.name for o in kept.ops] == ["aten::copy_ vm"]
    finally:
        privacy.host_identifiers.cache_clear()


def test_math_sdpa_training_calls_say_they_may_be_training():
    """SDPA's math path has no attention backward op to pair with: in a training trace (the committed H200
    run's, which holds BmmBackward0 and SafeSoftmaxBackward0 nodes) its forward calls carry that note."""
    train = Path(__file__).resolve().parents[2] / "examples" / "h200-seed" / "traces" / "train"
    traces = sorted(train.glob("*.json.gz"))
    if not traces:
        pytest.skip("no committed H200 training trace")
    fa = find_attention_calls(load_trace(traces[0]))
    math_calls = [c for c in fa.calls if c.backend == "math"]
    assert math_calls and all(c.phase is Phase.PREFILL for c in math_calls)
    assert all(any(n.startswith("may be training") and "BmmBackward0" in n for n in c.notes) for c in math_calls)
    assert all(not any(n.startswith("may be training") for n in c.notes) for c in fa.calls if c.backend != "math")


def test_an_attention_op_without_kernels_has_no_gpu_time_in_the_json(tmp_path: Path):
    """An SDPA op whose kernels ran elsewhere (e.g. replayed from a CUDA graph) is 'no kernels', not 0 µs."""
    events = [cpu_op("aten::scaled_dot_product_attention", 1000, 50,
                     dims=[[2, 8, 1, 64], [2, 8, 128, 64], [2, 8, 128, 64]], types=["c10::Half"] * 3)]
    path = write_trace(tmp_path / "nokernels.json", events)
    doc = analysis_to_dict(analyze_paths([path]))
    (call,) = doc["files"][0]["attention_calls"]
    assert call["kernels"] == [] and call["gpu_time_us"] is None
