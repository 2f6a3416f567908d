"""Tests for profattn.analysis.calls.find (find_attention_calls): op grouping, kernel attribution, phase and
workload inference, refusals and ProfilerStep windows — on the committed H200 traces and small
hand-written ones."""

from __future__ import annotations

import functools
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import FLASH, trace_fixture
from profattn.analysis.calls.call_records import AttentionCall, CausalAlignment, PackedBatch, RecordedWindow, TraceCalls
from profattn.analysis.calls.find import find_attention_calls
from profattn.trace import load_trace
from profattn.workload import Phase, Workload, parse_workload_spec
from tracebuild import BF16, cpu_op, kernel, launch, sdpa_call, write_trace

SEED_TRACES = Path(__file__).resolve().parents[3] / "examples" / "h200-seed" / "traces"


@functools.cache
def seed(phase: str) -> TraceCalls:
    """The committed H200 seed trace of ``phase`` (decode, prefill, train), analyzed once."""
    (path,) = sorted((SEED_TRACES / phase).glob("*.json.gz"))
    return find_attention_calls(load_trace(path))


def by_kind(tc: TraceCalls) -> dict[tuple[str, str, str, str | None], int]:
    return dict(Counter((c.source, c.backend, c.direction, c.phase.value if c.phase else None) for c in tc.calls))


# ---- the H200 flash decode fixture -----------------------------------------------------------------


def test_flash_fixture_three_calls_each_with_its_two_kernels() -> None:
    tc = find_attention_calls(load_trace(trace_fixture(FLASH)))
    assert len(tc.calls) == 3 and tc.kernel_count == 6
    assert (tc.device_name, tc.num_sms) == ("NVIDIA H200", 132)
    assert tc.gpu_time_us == pytest.approx(138.815)
    for i, call in enumerate(tc.calls):
        assert call.index == i and call.source == "op"
        assert (call.op_name, call.backend_op) == ("aten::scaled_dot_product_attention",
                                                   "aten::_scaled_dot_product_flash_attention")
        assert (call.backend, call.direction, call.phase) == ("flash", "forward", Phase.DECODE)
        assert call.shape.key() == (8, 16, 4, 1, 8192, 128) and call.shape.dtype == "bfloat16"
        assert (call.causal, call.causal_alignment, call.mask_dims, call.varlen) == (False, CausalAlignment.NONE, None, False)
        split, combine = call.kernels
        assert "flash_fwd_splitkv_kernel" in split.name and split.family == "flash"
        assert (split.grid, split.block, split.ctas) == ((1, 7, 32), (128, 1, 1), 224)
        assert split.ctas_per_sm == pytest.approx(224 / 132)
        assert "flash_fwd_splitkv_combine_kernel" in combine.name and (combine.grid, combine.ctas) == ((32, 1, 1), 32)
        assert call.workload == Workload(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4,
                                         head_dim=128, dtype="bfloat16", mask="none")
    assert [c.kernels[0].dur_us for c in tc.calls] == pytest.approx([44.32, 40.031, 40.64])
    (op,) = tc.ops
    assert (op.name, op.op_calls, op.kernels) == ("aten::scaled_dot_product_attention", 3, 6)
    assert op.total_us == pytest.approx(138.815) and tc.steps == ()


# ---- the committed H200 seed run: decode, prefill, train -------------------------------------------


def test_seed_decode_calls_by_backend_and_phase() -> None:
    tc = seed("decode")
    assert (len(tc.calls), tc.kernel_count) == (108, 453)
    assert tc.gpu_time_us == pytest.approx(15880.842, abs=1e-3)
    assert by_kind(tc) == {
        ("kernels", "triton", "forward", None): 18,  # profattn's Triton paged decode: no attention op
        ("op", "cudnn", "forward", "decode"): 18,  # sdpa-cudnn and torch-paged-reference
        ("op", "flash", "forward", "decode"): 9,
        ("op", "math", "forward", "decode"): 9,
        ("op", "flex", "forward", "decode"): 18,
        ("op", "flex", "forward", "prefill"): 18,
        ("op", "flex", "forward", None): 18,
    }
    tags = Counter(c.workload.tag for c in tc.calls if c.workload)
    assert tags == {f"decode_b8_q1_kv{kv}_hq16_hkv4_d128_bf16_none": 12 for kv in (512, 2048, 8192)}
    triton = next(c for c in tc.calls if c.source == "kernels")
    assert triton.op_name is None and triton.range.endswith("kv512_hq16_hkv4_d128_bf16_causal_paged16.triton-paged-decode")
    (k,) = triton.kernels
    assert (k.name, k.grid, k.block, k.family) == ("_paged_decode_split_kernel", (8, 4, 8), (128, 1, 1), "triton")
    assert triton.workload is None and triton.causal_alignment is CausalAlignment.UNKNOWN
    flex = [c for c in tc.calls if c.backend == "flex"]
    assert all(c.causal_alignment is CausalAlignment.UNKNOWN and c.workload is None for c in flex)
    flash = next(c for c in tc.calls if c.backend == "flash")
    assert [(k.grid, k.registers_per_thread, k.shared_mem_bytes) for k in flash.kernels] == [
        ((1, 4, 32), 246, 81920), ((32, 1, 1), 54, 80)]


def test_seed_prefill_calls_and_launch_shapes() -> None:
    tc = seed("prefill")
    assert (len(tc.calls), tc.kernel_count) == (12, 123)
    assert by_kind(tc) == {("op", b, "forward", "prefill"): 3 for b in ("math", "flash", "cudnn", "flex")}
    causal = [c for c in tc.calls if c.backend != "flex"]
    assert all(c.causal_alignment is CausalAlignment.TOP_LEFT and c.shape.q_len == c.shape.kv_len for c in causal)
    assert Counter(c.workload.tag for c in tc.calls if c.workload) == {"prefill_b8_q2048_kv2048_hq16_hkv4_d128_bf16_causal": 9}
    flash = next(c for c in tc.calls if c.backend == "flash")
    (k,) = flash.kernels
    assert "flash_fwd_kernel" in k.name
    assert (k.grid, k.block, k.ctas, k.registers_per_thread, k.shared_mem_bytes) == ((16, 8, 16), (128, 1, 1), 2048, 255, 65536)
    math_call = next(c for c in tc.calls if c.backend == "math")
    assert math_call.backend_op == "aten::_scaled_dot_product_attention_math" and len(math_call.kernels) == 22


def test_seed_train_forward_paired_with_backward() -> None:
    tc = seed("train")
    assert (len(tc.calls), tc.kernel_count) == (24, 258)
    assert by_kind(tc) == {
        ("op", "math", "forward", "prefill"): 3,  # math backward is generic autograd: not paired
        ("op", "flash", "forward", "train"): 3, ("op", "flash", "backward", "train"): 3,
        ("op", "cudnn", "forward", "train"): 3, ("op", "cudnn", "backward", "train"): 3,
        ("op", "flex", "forward", "train"): 3, ("op", "flex", "backward", "train"): 6,
    }
    flash_fwd = next(c for c in tc.calls if c.backend == "flash" and c.direction == "forward")
    assert flash_fwd.workload.tag == "train_b8_q2048_kv2048_hq16_hkv4_d128_bf16_causal"
    assert "a train Workload times forward and backward together" in flash_fwd.notes
    flash_bwd = next(c for c in tc.calls if c.backend == "flash" and c.direction == "backward")
    assert len(flash_bwd.kernels) == 7 and flash_bwd.gpu_time_us == pytest.approx(1663.076, abs=1e-3)
    assert any("flash_bwd_dot_do_o_kernel" in k.name for k in flash_bwd.kernels)
    math_call = next(c for c in tc.calls if c.backend == "math")
    assert math_call.workload.tag == "prefill_b8_q2048_kv2048_hq16_hkv4_d128_bf16_causal"
    assert any(n.startswith("may be training") for n in math_call.notes)


# ---- refusals: no Workload where profattn's semantics cannot express the call ----------------------


def flash_forward(ts: float, correlation: int, *, q: list[int], k: list[int], causal: bool,
                  cu_seqlens: list[int] | None = None) -> list[dict[str, Any]]:
    """``aten::_flash_attention_forward`` (q ``[B, L, H, d]``; bottom-right causal; ``cu_seqlens_q`` at
    argument 3) with one kernel."""
    dims = [q, k, k, cu_seqlens or [], cu_seqlens or [], [], [], [], [], [], []]
    concrete = [""] * 8 + [str(causal), "False", ""]
    return [
        cpu_op("aten::_flash_attention_forward", ts, 100, dims=dims, types=BF16 + [""] * 8, concrete=concrete),
        launch(ts + 10, correlation),
        kernel("void pytorch_flash::flash_fwd_kernel<>", ts + 200, 30, correlation),
    ]


def calls_of(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> TraceCalls:
    return find_attention_calls(load_trace(write_trace(tmp_path / name, events)))


def test_top_left_causal_with_lq_ne_lk_is_refused(tmp_path: Path) -> None:
    events = sdpa_call(1000, 1, q=[2, 8, 64, 64], k=[2, 2, 512, 64], causal=True, kernel_name="flash_fwd_kernel")
    (call,) = calls_of(tmp_path, events).calls
    assert (call.causal, call.causal_alignment, call.phase) == (True, CausalAlignment.TOP_LEFT, Phase.PREFILL)
    assert call.workload is None
    assert call.notes[-1] == ("no profattn Workload: SDPA's is_causal is top-left aligned and profattn's causal mask "
                              "bottom-right: they differ for Lq 64 != Lk 512")


def test_bottom_right_causal_with_lq_ne_lk_is_a_workload(tmp_path: Path) -> None:
    (call,) = calls_of(tmp_path, flash_forward(1000, 1, q=[2, 64, 8, 64], k=[2, 512, 2, 64], causal=True)).calls
    assert (call.backend, call.causal_alignment, call.varlen) == ("flash", CausalAlignment.BOTTOM_RIGHT, False)
    assert call.workload == Workload(phase="prefill", batch=2, q_len=64, kv_len=512, num_q_heads=8, num_kv_heads=2,
                                     head_dim=64, dtype="bfloat16", mask="causal")


def test_packed_variable_length_batch_is_refused(tmp_path: Path) -> None:
    # q [1, 300, 8, 64] with cu_seqlens of 4 entries: 3 sequences packed into 300 tokens, max_q not recorded
    events = flash_forward(1000, 1, q=[1, 300, 8, 64], k=[1, 300, 2, 64], causal=True, cu_seqlens=[4])
    (call,) = calls_of(tmp_path, events).calls
    assert call.varlen is True and call.shape.key() == (3, 8, 2, None, None, 64) and call.phase is Phase.PREFILL
    assert call.packed == PackedBatch(sequences=3, q_tokens=300, kv_tokens=300, max_q=None, max_k=None, seqs=None)
    assert call.workload is None and call.notes[-1] == (
        "no profattn Workload: packed variable-length batch: 3 sequences, 300 query tokens, longest not recorded; "
        "per-sequence lengths are tensor values the trace does not record")


# ---- packed variable-length calls and local windows: a real torch 2.13 CPU trace -------------------
# tests/data/traces/cpu_varlen_window_torch213.pt.trace.json.gz, recorded by
# tests/data/scripts/record_cpu_varlen_window.py (one record_function range per call).


@functools.cache
def varlen_calls() -> dict[str, AttentionCall]:
    tc = find_attention_calls(load_trace(trace_fixture("cpu_varlen_window_torch213.pt.trace.json.gz")))
    return {c.range: c for c in tc.calls}


COMMON = dict(num_q_heads=8, num_kv_heads=2, head_dim=64, dtype="bfloat16", mask="causal")


def test_ragged_packed_batch_says_what_the_trace_knows() -> None:
    c = varlen_calls()["flash_varlen_ragged_window"]  # sequences 5, 3, 8 packed into 16 tokens; max 8
    assert c.packed == PackedBatch(sequences=3, q_tokens=16, kv_tokens=16, max_q=8, max_k=8, seqs=None)
    assert c.shape.key() == (3, 8, 2, 8, 8, 64) and c.window == RecordedWindow(3, 0, "window_size_left/right")
    assert c.workload is None and c.notes[-1] == (
        "no profattn Workload: packed variable-length batch: 3 sequences, 16 query tokens, longest 8; "
        "per-sequence lengths are tensor values the trace does not record")
    assert c.profile_hint.startswith("no profattn Workload for this call")


def test_uniform_packed_batch_with_flash_window_is_a_varlen_workload() -> None:
    c = varlen_calls()["flash_varlen_uniform_window"]  # 4 x 8 tokens, window_size_left 3 -> 4 keys
    assert c.workload == Workload.varlen("prefill", [(8, 8)] * 4, window=4, **COMMON)
    assert c.notes == (
        "packed variable-length batch of 4 sequence(s), each q 8 / kv 8: the packed totals are the sequence count "
        "times the longest, so every sequence is that long",
        "sliding window from window_size_left/right (left 3, right 0): each query sees at most its last 4 keys "
        "(profattn window=4)")
    assert c.profile_hint == ("profattn profile --workload 'phase=prefill,num_q_heads=8,num_kv_heads=2,head_dim=64,"
                              "dtype=bfloat16,window=4,seqs=4x(q8,kv8)' --out profattn-traced")
    assert eval(c.workload_constructor, {"Workload": Workload}) == c.workload
    assert parse_workload_spec(shlex.split(c.profile_hint)[3]) == c.workload  # the line as a shell reads it


def test_one_sequence_and_uniform_decode_are_determined() -> None:
    one, dec = varlen_calls()["flash_varlen_one_sequence"], varlen_calls()["flash_varlen_decode"]
    assert one.workload == Workload.varlen("prefill", [(16, 16)], **COMMON)
    assert "one sequence, whose lengths are the packed totals" in one.notes[0]
    # 4 queries for 4 sequences (one each), 64 keys = 4 x max_k 16
    assert dec.phase is Phase.DECODE and dec.workload == Workload.varlen("decode", [(1, 16)] * 4, **COMMON)


def test_dense_flash_window_and_a_two_sided_window() -> None:
    dense, two = varlen_calls()["flash_dense_window"], varlen_calls()["flash_dense_two_sided"]
    assert dense.packed is None and dense.workload == Workload(phase="prefill", batch=2, q_len=8, kv_len=8, window=4,
                                                               **COMMON)
    assert two.workload is None and two.notes[-1] == (
        "no profattn Workload: a two-sided local window (window_size_left/right left 2, right 2): profattn's window "
        "is a causal sliding window (right 0)")


def test_efficient_window_size_counts_keys() -> None:
    c = varlen_calls()["efficient_varlen_window"]  # xformers window_size 4 = its last 4 keys; q [1, 16, 8, 64]
    assert c.window == RecordedWindow(3, 0, "window_size") and c.causal_alignment is CausalAlignment.BOTTOM_RIGHT
    assert c.workload == Workload.varlen("prefill", [(8, 8)] * 2, window=4, **{**COMMON, "num_kv_heads": 8})


def test_explicit_mask_sdpa_names_the_path_that_ran() -> None:
    default, math = varlen_calls()["sdpa_mask_default"], varlen_calls()["sdpa_mask_math"]
    mask = ("explicit mask: an attn_mask/bias tensor [8, 8] (bool) was passed; its pattern (a sliding window, say) "
            "is not in the trace")
    assert default.backend == "flash-cpu" and default.workload is None
    assert default.notes[:2] == (mask, "SDPA ran flash-cpu (aten::_scaled_dot_product_flash_attention_for_cpu); "
                                       "no GPU kernels recorded")
    assert math.backend == "math" and math.notes[:2] == (
        mask, "SDPA ran the math path (aten::_scaled_dot_product_attention_math: matmul + softmax; no GPU kernels recorded)")


def test_masked_sdpa_on_a_gpu_names_the_fused_kernel(tmp_path: Path) -> None:
    events = sdpa_call(1000, 1, q=[2, 8, 64, 64], k=[2, 8, 64, 64], causal=False,
                       kernel_name="fmha_cutlassF_bf16_aligned_64x64_rf_sm80(AttentionKernel<>::Params)",
                       backend_op="aten::_scaled_dot_product_efficient_attention")
    events[0]["args"]["Input Dims"][3] = [64, 64]
    events[1]["args"]["Input Dims"] = [[2, 8, 64, 64]] * 3 + [[64, 64], [], [], [], []]
    (call,) = calls_of(tmp_path, events).calls
    assert call.notes[1] == ("SDPA ran a fused kernel: efficient (aten::_scaled_dot_product_efficient_attention), "
                             "efficient kernel fmha_cutlassF_bf16_aligned_64x64_rf_sm80")


def test_real_h200_sdpa_flash_trace_records_no_window() -> None:
    # torch 2.11 records window_size_left/right as "" (None) in the nested _flash_attention_forward
    tc = find_attention_calls(load_trace(trace_fixture(FLASH)))
    assert all(c.window is None and c.packed is None and c.workload.window is None for c in tc.calls)


# ---- op grouping and kernel attribution ------------------------------------------------------------


def test_nested_attention_ops_are_one_call_and_other_threads_keep_their_kernels(tmp_path: Path) -> None:
    events = sdpa_call(1000, 1, q=[1, 8, 1, 64], k=[1, 8, 256, 64], causal=False, kernel_name="flash_fwd_splitkv_kernel")
    events += [
        launch(1050, 2, tid=9),  # another thread launches during the call's window: not the call's
        kernel("void at::native::vectorized_elementwise_kernel<>", 1300, 4, 2),
        launch(1100, 3),  # the call's own thread, at the window's end (closed window): the call's
        kernel("void at::native::elementwise_kernel<>", 1310, 4, 3),
        launch(1101, 4),  # just past the window
        kernel("void at::native::reduce_kernel<>", 1320, 4, 4),
    ]
    tc = calls_of(tmp_path, events)
    (call,) = tc.calls
    assert call.backend_op == "aten::_scaled_dot_product_flash_attention"
    assert [k.name for k in call.kernels] == ["flash_fwd_splitkv_kernel", "void at::native::elementwise_kernel<>"]


def test_kernel_without_launcher_joins_through_external_id(tmp_path: Path) -> None:
    events = [
        cpu_op("aten::scaled_dot_product_attention", 1000, 100, dims=[[1, 8, 1, 64], [1, 8, 256, 64], [1, 8, 256, 64]],
               types=BF16, concrete=["", "", "", "", "0.", "False", "", "False"]),
        cpu_op("aten::_scaled_dot_product_flash_attention", 1010, 80, ext=77),
        {"ph": "X", "cat": "kernel", "name": "flash_fwd_splitkv_kernel", "ts": 1200, "dur": 9, "pid": 0, "tid": 7,
         "args": {"External id": 77, "correlation": 5, "device": 0, "stream": 7, "grid": [1, 8, 8], "block": [128, 1, 1]}},
    ]
    tc = calls_of(tmp_path, events)
    (call,) = tc.calls
    assert [k.name for k in call.kernels] == ["flash_fwd_splitkv_kernel"] and call.kernels[0].grid == (1, 8, 8)
    (op,) = tc.ops  # charged through the External id to the top-level op
    assert (op.name, op.op_calls, op.kernels) == ("aten::scaled_dot_product_attention", 1, 1)


def test_profiler_step_windows_count_kernels_of_their_process(tmp_path: Path) -> None:
    step = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}
    events = [
        {**step, "name": "ProfilerStep#1", "ts": 0, "dur": 900, "args": {}},
        {**step, "name": "ProfilerStep#2", "ts": 900, "dur": 2000, "args": {}},  # shares ts 900 with step 1
        launch(100, 10), kernel("k_a", 150, 5, 10),
        launch(900, 11, tid=2), kernel("k_b", 950, 7, 11),  # autograd's thread, on the boundary: both steps
        {**launch(1000, 12), "pid": 2}, kernel("k_c", 1050, 100, 12),  # another process: no step
        *sdpa_call(1500, 13, q=[1, 8, 1, 64], k=[1, 8, 256, 64], causal=False, kernel_name="flash_fwd_splitkv_kernel"),
    ]
    tc = calls_of(tmp_path, events)
    s1, s2 = tc.steps
    assert (s1.name, s1.ts_us, s1.dur_us, s1.kernels, s1.attention_calls) == ("ProfilerStep#1", 0.0, 900.0, 2, 0)
    assert s1.gpu_time_us == pytest.approx(12.0)
    assert (s2.name, s2.kernels, s2.attention_calls) == ("ProfilerStep#2", 2, 1)
    assert s2.gpu_time_us == pytest.approx(7.0 + 30.0)


# ---- hostile but readable traces ---------------------------------------------------------------------


@pytest.mark.parametrize("batch", [10**7, 10**19])
def test_a_recorded_batch_beyond_its_limit_is_unknown_with_a_warning(tmp_path: Path, batch: int) -> None:
    """A batch of 1e7 built a per-sequence list of 1e7 lengths (10 s, 1 GB for ``analyze --json``); 1e19 an
    OverflowError traceback. The batch is now unknown, the rest of the call is read."""
    events = sdpa_call(0, 1, q=[batch, 8, 1, 64], k=[batch, 8, 128, 64], causal=False,
                       kernel_name="pytorch_flash::flash_fwd_splitkv_kernel")
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "t.json", events)))
    (call,) = fa.calls
    s = call.shape
    assert (s.batch, s.num_q_heads, s.q_len, s.kv_len, s.head_dim) == (None, 8, 1, 128, 64)
    assert s.beyond_limits == (("batch", batch),)
    assert call.phase is Phase.DECODE and call.workload is None and len(call.kernels) == 1
    assert any("batch beyond its limit" in n for n in call.notes)
    (w,) = [w for w in fa.warnings if w.code == "shape_beyond_limit"]
    assert w.count == 1 and "limit 65,536" in w.message


def test_a_length_beyond_its_limit_leaves_the_phase_unknown(tmp_path: Path) -> None:
    events = sdpa_call(0, 1, q=[2, 8, 2**30, 64], k=[2, 8, 2**30, 64], causal=True, kernel_name="pytorch_flash::flash_fwd_kernel")
    (call,) = find_attention_calls(load_trace(write_trace(tmp_path / "t.json", events))).calls
    assert call.shape.q_len is None and call.shape.kv_len is None and call.phase is None and call.workload is None


def test_a_cuda_graph_replay_of_several_backends_is_split_by_family(tmp_path: Path) -> None:
    """One cudaGraphLaunch replaying 29 flash, 38 cuDNN and 38 FlexAttention kernels was one call labelled
    flash; now one entry per family, each saying that the calls inside the replay cannot be told apart."""
    names = (["pytorch_flash::flash_fwd_kernel"] * 29 + ["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma"] * 38
             + ["triton_tem_fused_flex_attention_0"] * 38)
    events = [cpu_op("aten::linear", 0, 5), launch(10, 100, name="cudaGraphLaunch")]
    events += [kernel(n, 100 + 10 * i, 5, 100) for i, n in enumerate(names)]
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "t.json", events)))
    assert [(c.backend, len(c.kernels), c.graph_launched) for c in fa.calls] == [
        ("flash", 29, True), ("cudnn", 38, True), ("flex", 38, True)]
    note = fa.calls[1].notes[-1]
    assert "these 38 cudnn kernel(s) of one graph replay" in note and "per-call boundaries inside the graph are unknown" in note
    assert "also ran flash, flex attention kernels" in note


def test_an_mtia_trace_is_not_called_cpu_only(tmp_path: Path) -> None:
    events = [cpu_op("aten::mm", 0, 5)]
    events += [{"ph": "X", "cat": "mtia_ccp_events", "name": "job", "ts": i, "dur": 1, "pid": 5, "tid": 1} for i in range(1313)]
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "t.json", events)))
    codes = [w.code for w in fa.warnings]
    assert codes[:2] == ["no_gpu_kernels", "other_accelerator"]
    assert "CPU-only" not in fa.warnings[0].message and "no CUDA/ROCm kernels" in fa.warnings[0].message
    assert fa.warnings[1].message.startswith("1,313 MTIA device event(s)")


def test_family_patterns_take_linear_time_on_a_hostile_name() -> None:
    """``fmha_.*(fprop|bprop)`` took 25 s on a 64 KiB name repeating ``fmha_`` (quadratic backtracking)."""
    import time

    from profattn.analysis.calls.call_shapes import attention_family
    from profattn.families import CUDNN

    name = ("fmha_" * 13_108)[:65_536]
    start = time.perf_counter()
    assert attention_family(name) == "attention" and not CUDNN.matches_kernel(name)
    assert time.perf_counter() - start < 2.0  # generous: about 20 ms now
    assert CUDNN.matches_kernel("fmha_cudnn_x_fmha_y_FPROP") and not CUDNN.matches_kernel("fprop_fmha_")


def test_analyze_summary_line_of_an_mtia_trace(tmp_path: Path) -> None:
    """The command's one-line summary said "no GPU kernels" for a trace full of MTIA device events."""
    from click.testing import CliRunner

    from profattn.cli import main

    events = [cpu_op("aten::mm", 0, 5)]
    events += [{"ph": "X", "cat": "mtia_ccp_events", "name": "job", "ts": i, "dur": 1, "pid": 5, "tid": 1} for i in range(20)]
    trace = write_trace(tmp_path / "t.json", events)
    res = CliRunner().invoke(main, ["analyze", str(trace), "--out", str(tmp_path / "a.html")])
    assert res.exit_code == 0, res.output
    assert "no CUDA/ROCm kernels (another accelerator's device events: see the warning)" in res.output
