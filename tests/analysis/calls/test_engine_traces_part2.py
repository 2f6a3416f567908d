"""Engine traces, part 2 (issue 35), on the synthetic traces of ``tests/data/engine-traces/synthetic/``
(``tests/data/scripts/engine_traces_part2.py``): SGLang's two annotations of one step merged, per-layer calls inside
one HIP graph replay from its capture, the index kernel no call, kernels without launch events placed by stream order,
and the ROCm kernels' families. Before these changes the same files gave 0 of 37 calls a workload, one call for the
whole replay, and 10 of 34 SDPA calls as kernel-only entries."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from profattn.analysis.calls.call_records import KVCacheLayout, StepFormat
from profattn.analysis.calls.call_shapes import attention_family
from profattn.analysis.calls.find import find_attention_calls
from profattn.analysis.calls.graphs import CaptureSource
from profattn.analysis.calls.steps import merge_steps, parse_step_annotation
from profattn.trace import load_trace
from profattn.workload import Phase
from tracebuild import cpu_op, kernel, launch, user_range, write_trace

SYN = Path(__file__).resolve().parents[2] / "data" / "engine-traces" / "synthetic"
BASE = "step[EXTEND bs=15 toks=15360]"
DETAILED = "step[EXTEND bs=15 toks=15360 c_sq=15360 c_sqsq=15728640 c_sqsk=15728640 c_sk=15360]"


def test_two_annotations_of_one_step_merge_and_say_where_each_field_came_from() -> None:
    a = parse_step_annotation(BASE, ts_us=0.0, dur_us=100.0, pid=1, tid=1)
    b = parse_step_annotation(DETAILED, ts_us=1.0, dur_us=98.0, pid=1, tid=1)
    (step,), disagree = merge_steps([a, b])
    assert disagree == [] and step.name == DETAILED and step.format is StepFormat.SGLANG_DETAILED
    assert (step.ts_us, step.dur_us) == (0.0, 100.0)  # the union of the two windows
    assert step.context.sum_k == 15360 and step.context.causal_pairs == 15_728_640 - (15_728_640 - 15360) // 2
    origin = dict(step.merged)
    assert origin["context.sum_q2"] == DETAILED and origin["tokens"] == DETAILED and origin["name"] == DETAILED
    # another process's range, or a later range, is its own step
    c = parse_step_annotation(BASE, ts_us=0.0, dur_us=100.0, pid=2, tid=1)
    d = parse_step_annotation(BASE, ts_us=150.0, dur_us=10.0, pid=1, tid=1)
    assert len(merge_steps([a, b, c, d])[0]) == 3


def test_overlapping_annotations_that_disagree_stay_apart_with_a_warning(tmp_path: Path) -> None:
    other = "step[EXTEND bs=14 toks=15360]"
    a = parse_step_annotation(DETAILED, ts_us=0.0, dur_us=100.0, pid=1, tid=1)
    b = parse_step_annotation(other, ts_us=1.0, dur_us=98.0, pid=1, tid=1)
    steps, disagree = merge_steps([a, b])
    assert len(steps) == 2 and disagree == [(DETAILED, other, "context sequences 15 vs 14")]
    q = [[15360, 32, 128], [1000, 8, 128], [1000, 8, 128], [16], [16], [15616], [], [], [], [], [], [], []]
    path = write_trace(tmp_path / "t.json", [
        user_range(DETAILED, 0, 100), user_range(other, 1, 98),
        cpu_op("aiter::mha_batch_prefill", 10, 20, dims=q, types=["c10::BFloat16"] * 3),
        launch(12, 5), kernel("ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<x>", 40, 30, 5)])
    fa = find_attention_calls(load_trace(path))
    assert [w.code for w in fa.warnings if w.code.startswith(("step_", "call_in"))] == [
        "step_annotations_disagree", "call_in_two_steps"]
    assert fa.calls[0].workload is None and fa.calls[0].step is None


def test_sglang_extend_step_every_layer_has_its_workload() -> None:
    fa = find_attention_calls(load_trace(SYN / "sglang_extend_aiter.json.gz"))
    assert len(fa.serving_steps) == 1 and not fa.warnings
    (step,) = fa.serving_steps
    assert step.annotation.name == DETAILED and len(step.attention_calls) == 36
    assert len(fa.calls) == 36  # the index kernel is no call
    assert {c.op_name for c in fa.calls} == {"aiter::mha_batch_prefill"} and {c.backend for c in fa.calls} == {"aiter"}
    for c in fa.calls:
        w = c.workload
        assert w is not None and c.phase is Phase.PREFILL
        assert w.q_lens == (1024,) * 15 and w.kv_lens == (1024,) * 15 and w.page_size == 1
        assert (w.num_q_heads, w.num_kv_heads, w.head_dim, w.dtype) == (32, 8, 128, "bfloat16")
        assert c.engine.sequences == 15 and c.engine.max_q == 1024 and c.engine.kv_cache.layout is KVCacheLayout.TOKENS
        # 4·Hq·d·pairs: 4 · 32 · 128 · (15,728,640 − (15,728,640 − 15,360)/2 = 7,872,000) = 128,974,848,000
        assert c.step.ledger.flops == 128_974_848_000 == w.forward_flops


def test_sglang_decode_graph_one_call_per_layer_from_the_capture() -> None:
    capture = load_trace(SYN / "sglang_decode_graph" / "capture.json.gz")
    fa = find_attention_calls(load_trace(SYN / "sglang_decode_graph" / "replay.json.gz"),
                              captures=(CaptureSource("capture.json.gz", capture),))
    assert fa.graph_merge.placed_kernels == fa.graph_merge.replayed_kernels == 544
    assert len(fa.calls) == 36 and all(c.source == "graph" for c in fa.calls)
    assert sum(c.workload is not None for c in fa.calls) == 36
    for c in fa.calls:
        assert c.op_name == "aiter::paged_attention_ragged" and c.phase is Phase.DECODE and len(c.kernels) == 2
        assert [k.family for k in c.kernels] == ["vllm-paged", "vllm-paged"]
        w = c.workload
        assert w.batch == 32 and sum(w.kv_lens) == 32_785 and set(w.q_lens) == {1}
        assert (w.num_q_heads, w.num_kv_heads, w.head_dim) == (32, 8, 128)
        assert c.engine.sequences == 32 and c.engine.kv_cache.num_blocks == 835_874
    assert sorted({round(c.gpu_time_us, 3) for c in fa.calls}) == [59.0]  # 54 µs QKV + 5 µs reduce


def test_kernels_without_launch_events_are_placed_by_stream_order() -> None:
    fa = find_attention_calls(load_trace(SYN / "hf_qwen_sdpa.json.gz"))
    assert len(fa.calls) == 34 and all(c.source == "op" and len(c.kernels) == 1 for c in fa.calls)
    assert all(c.workload is not None and c.workload.q_len == 128 for c in fa.calls)


def test_stream_order_leaves_a_kernel_two_calls_could_own(tmp_path: Path) -> None:
    q = [[1, 16, 128, 64]] * 3 + [[], [], []]
    events = [cpu_op("aten::scaled_dot_product_attention", 10, 20, dims=q, types=["c10::BFloat16"] * 3),
              cpu_op("aten::scaled_dot_product_attention", 40, 20, dims=q, types=["c10::BFloat16"] * 3),
              cpu_op("aten::mm", 0, 5), launch(1, 1), kernel("gemm", 2, 1, 1),
              kernel("flash_fwd_kernel", 70, 5, 99)]  # no launch event: either call's window meets (1, +inf)
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "t.json", events)))
    assert [c.source for c in fa.calls].count("kernels") == 1


def test_rocm_and_index_kernel_families() -> None:
    assert attention_family("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40Block") == "aiter"
    assert attention_family("ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<...>") == "aiter"
    assert attention_family("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>") == "vllm-paged"
    assert attention_family("create_flashinfer_kv_indices_triton") is None
    assert attention_family("create_flashmla_kv_indices_triton") is None
    assert attention_family("flashinfer::BatchPrefillWithPagedKVCacheKernel<x>") == "flashinfer"


def test_analyze_recommend_answers_the_sglang_calls(tmp_path: Path) -> None:
    from factories import cell, run

    from profattn.cli import main
    from profattn.store import open_store
    from profattn.workload import Workload

    w = Workload.varlen(None, [(1024, 1024)] * 15, num_q_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16",
                        mask="causal", kv_layout="paged", page_size=1)
    db = tmp_path / "s.sqlite"
    with open_store(db) as s:
        s.add_run(run([cell(w, "flashinfer-prefill-paged", 500.0, family="flashinfer")]), tmp_path)
    res = CliRunner().invoke(main, ["analyze", str(SYN / "sglang_extend_aiter.json.gz"), "--out",
                                    str(tmp_path / "r.html"), "--recommend", "--db", str(db), "--gpu", "H200"])
    assert res.exit_code == 0, res.output
    assert "36× prefill" in res.output and "flashinfer-prefill-paged" in res.output, res.output
