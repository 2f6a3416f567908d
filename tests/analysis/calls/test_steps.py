"""Serving-step annotations (profattn.analysis.calls.steps): the formats, the exact causal ledger from the four sums
(checked against per-sequence counts), malformed annotations, and the real vLLM steps with hand-computed figures
and the peer tool's (TraceLens) per-call answer beside ours."""

from __future__ import annotations


import csv
import random
from pathlib import Path

import pytest

from profattn.analysis.calls.call_records import Engine, PhaseSums, StepAnnotation, StepFormat
from profattn.analysis.calls.find import find_attention_calls
from profattn.analysis.calls.steps import MalformedStep, parse_step_annotation, uniform_seqs
from profattn.trace import load_trace
from profattn.workload import causal_pairs
from engine_data import DATA, analyze_paths
from tracebuild import cpu_op, kernel, launch, user_range, write_trace

PIECEWISE = ("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)"
             "_generation_37(sq37sk34489sqsq37sqsk34489)")


def test_vllm_detailed_annotation() -> None:
    a = parse_step_annotation(PIECEWISE, ts_us=5.0, dur_us=2.0, pid=1, tid=1)
    assert isinstance(a, StepAnnotation) and a.format is StepFormat.VLLM_DETAILED and a.engine is Engine.VLLM
    assert a.tokens == 8192 and a.requests == 46 and a.query_tokens == 8192
    assert a.context == PhaseSums(9, 8155, 8430, 7_475_785, 7_671_310)
    assert a.generation == PhaseSums(37, 37, 34_489, 37, 34_489)
    # pairs = Σq·k − (Σq² − Σq)/2: 7,671,310 − (7,475,785 − 8,155)/2 = 3,937,495; decode: Σk
    assert a.context.causal_pairs == 3_937_495 and a.generation.causal_pairs == 34_489


def test_other_formats() -> None:
    native = parse_step_annotation("execute_context_2(6144)_generation_3(3)")
    assert native.format is StepFormat.VLLM_NATIVE and native.context == PhaseSums(2, 6144)
    assert native.context.causal_pairs is None and not native.has_sums
    mixed = parse_step_annotation("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 "
                                  "g_sqsq=1 g_sqsk=12]")
    assert mixed.format is StepFormat.SGLANG_DETAILED and mixed.engine is Engine.SGLANG
    assert mixed.context == PhaseSums(1, 5, 8, 25, 40) and mixed.generation == PhaseSums(1, 1, 12, 1, 12)
    assert mixed.context.causal_pairs == causal_pairs(5, 8) == 30
    decode = parse_step_annotation("step[DECODE bs=64]")
    assert decode.format is StepFormat.SGLANG_NATIVE and decode.generation == PhaseSums(64, 64)
    atom = parse_step_annotation("decode[bs=117/128 tok=117 d=117 sqsq=117 sqsk=480000 sk=480000]")
    assert atom.format is StepFormat.ATOM_DETAILED and atom.generation == PhaseSums(117, 117, 480_000, 117, 480_000)
    assert parse_step_annotation("ProfilerStep#3") is None and parse_step_annotation("execute_model") is None


@pytest.mark.parametrize("name, reason", [
    ("execute_10_context_1(sq5sk3sqsq25sqsk15)_generation_0(sq0sk0sqsq0sqsk0)", "Σk 3 < Σq 5"),
    ("execute_10_context_2(sq5sk20sqsq14sqsk60)_generation_0(sq0sk0sqsq0sqsk0)", "Σq² − Σq = 9 is odd"),
    ("execute_10_context_2(sq5sk20sqsq9sqsk60)_generation_0(sq0sk0sqsq0sqsk0)", "Σq² 9 impossible"),
    ("execute_10_context_1(sq5sk20sqsq25sqsk200)_generation_0(sq0sk0sqsq0sqsk0)", "Σq·k 200 impossible"),
    ("execute_3_context_1(sq5sk20sqsq25sqsk100)_generation_0(sq0sk0sqsq0sqsk0)", "3 step tokens < Σq 5"),
    ("execute_8_context_0(sq4sk4sqsq4sqsk4)_generation_1(sq1sk9sqsq1sqsk9)", "0 requests with non-zero sums"),
    ("execute_8_context_1(sq4sk4sqsq16sqsk16)_generation_1(sq1sk9sqsq1", "does not follow a known annotation format"),
    ("execute_1_context_1(sq" + "9" * 25 + "sk4sqsq16sqsk16)_generation_0(sq0sk0sqsq0sqsk0)", "known annotation format"),
])
def test_malformed_annotations(name: str, reason: str) -> None:
    got = parse_step_annotation(name)
    assert isinstance(got, MalformedStep) and reason in got.reason


def test_the_pair_formula_matches_per_sequence_counts() -> None:
    rng = random.Random(7)
    for _ in range(200):
        seqs = []
        for _ in range(rng.randint(1, 12)):
            q = rng.randint(1, 300)
            seqs.append((q, q + rng.randint(0, 500)))
        sums = PhaseSums(len(seqs), sum(q for q, _ in seqs), sum(k for _, k in seqs), sum(q * q for q, _ in seqs),
                         sum(q * k for q, k in seqs))
        assert sums.causal_pairs == sum(causal_pairs(q, k) for q, k in seqs)


def test_uniform_sequences_keep_the_sums() -> None:
    seqs = uniform_seqs(PhaseSums(9, 8155, 8430))
    assert seqs == ((907, 937),) + ((906, 937),) * 5 + ((906, 936),) * 3
    assert sum(q for q, _ in seqs) == 8155 and sum(k for _, k in seqs) == 8430
    assert uniform_seqs(PhaseSums(37, 37, 34489)) == ((1, 933),) * 5 + ((1, 932),) * 32
    assert uniform_seqs(PhaseSums(2, 10, 10)) == ((5, 5), (5, 5)) and uniform_seqs(PhaseSums(0, 0, 0)) is None


def _step_trace(tmp_path: Path, name: str) -> Path:
    dims = [[6, 8, 64], [6, 2, 64], [6, 2, 64], [6, 8, 64], [], [], [], [0]]
    types = ["c10::BFloat16"] * 4 + [""] * 3 + ["c10::BFloat16"]
    events = [user_range(name, 0, 500), cpu_op("vllm::unified_attention_with_output", 10, 50, dims=dims, types=types),
              launch(20, 1, name="cuLaunchKernel"), kernel("kernel_unified_attention_2d", 100, 40, 1)]
    return write_trace(tmp_path / "step.json", events)


def test_a_malformed_step_is_a_warning_and_no_ledger(tmp_path: Path) -> None:
    fa = find_attention_calls(load_trace(_step_trace(
        tmp_path, "execute_6_context_1(sq5sk3sqsq25sqsk15)_generation_1(sq1sk9sqsq1sqsk9)")))
    (w,) = [w for w in fa.warnings if w.code == "step_annotation_malformed"]
    assert w.count == 1 and "Σk 3 < Σq 5" in w.message
    (call,) = fa.calls
    assert call.step is None and call.workload is None and fa.serving_steps == ()


def test_a_mixed_step_gives_the_call_its_exact_workload(tmp_path: Path) -> None:
    """One prefill chunk (q 5 over 8 keys) and one decoding sequence (kv 9): the lengths are the sums."""
    fa = find_attention_calls(load_trace(_step_trace(
        tmp_path, "execute_6_context_1(sq5sk8sqsq25sqsk40)_generation_1(sq1sk9sqsq1sqsk9)")))
    (call,) = fa.calls
    assert call.phase.value == "mixed" and call.workload.seqs == ((5, 8), (1, 9)) and call.step.exact_lengths
    led = call.step.ledger  # pairs: 5*8 − 5*4/2 = 30, and 9; FLOPs 4*8*64*pairs; bf16
    assert (led.prefill.pairs, led.decode.pairs) == (30, 9)
    assert led.flops == 4 * 8 * 64 * 39 == call.workload.forward_flops
    assert led.prefill.kv_bytes == 2 * 8 * 2 * 64 * 2 and led.decode.q_bytes == 1 * 8 * 64 * 2
    assert call.step.tflops == pytest.approx(led.flops / 40e-6 / 1e12)
    (step,) = fa.serving_steps
    assert step.kernels == 1 and step.gpu_time_us == 40 and step.attention_share == 1.0


# ---- the real vLLM steps ------------------------------------------------------------------------------------------


def _tracelens(name: str) -> list[dict[str, str]]:
    with open(DATA / name / "tracelens_csvs" / "InferenceAttention_fwd.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_piecewise_step_24_calls_and_its_9_plus_37_composition() -> None:
    fa = next(f for f in analyze_paths([DATA / "vllm_prefilldecode_piecewise"]).files if f.path == "graph_execution.json.gz")
    (step,) = fa.serving_steps
    assert (step.annotation.context.requests, step.annotation.generation.requests) == (9, 37)
    assert len(fa.calls) == 24 and len(step.attention_calls) == 24
    for c in fa.calls:
        s = c.shape
        assert (s.num_q_heads, s.num_kv_heads, s.head_dim, s.dtype) == (64, 8, 64, "bfloat16")
        assert c.op_name == "vllm::unified_attention_with_output" and c.backend == "vllm-triton"
        assert c.phase.value == "mixed" and c.engine.q_tokens == 8192 and c.source == "op"
        assert c.engine.kv_cache.dims == (2, 224304, 32, 8, 64) and c.engine.kv_cache.block_size == 32
        (k,) = c.kernels
        assert (k.name, k.grid, k.block, k.shared_mem_bytes) == ("kernel_unified_attention_2d", (8, 558, 1),
                                                                 (256, 1, 1), 16384)
        assert c.workload.page_size == 32 and c.workload.batch == 46 and c.workload.q_tokens == 8192
        assert sum(c.workload.kv_lens) == 8430 + 34489
    led = step.ledger
    # hand-computed: FLOPs 4·Hq·d·pairs = 16,384 · pairs; bytes: Q = O = Σq·Hq·d·2, K/V = 2·Σk·Hkv·d·2
    assert (led.prefill.pairs, led.prefill.flops) == (3_937_495, 16_384 * 3_937_495)
    assert (led.decode.pairs, led.decode.flops) == (34_489, 16_384 * 34_489)
    assert (led.prefill.q_bytes, led.prefill.kv_bytes) == (8155 * 8192, 2 * 8430 * 1024)
    assert (led.decode.q_bytes, led.decode.kv_bytes) == (37 * 8192, 2 * 34489 * 1024)
    assert led.flops == 65_076_985_856 and led.total_bytes == 222_115_840
    assert step.attention_gpu_us == pytest.approx(5146.906, abs=1e-3)
    # the peer's per-call figures (TraceLens): FLOPs +0.10 % (it counts Σq·k − Σq²/2 for the prefill part, leaving out
    # each sequence's diagonal, Σq/2 = 4,077.5 pairs per head); bytes equal (its "MB" is MiB); times equal
    (row,) = _tracelens("vllm_prefilldecode_piecewise")
    assert float(row["GFLOPS_first"]) * 1e9 == pytest.approx(16_384 * (7_671_310 - 7_475_785 / 2 + 34_489))
    assert led.flops / (float(row["GFLOPS_first"]) * 1e9) - 1 == pytest.approx(0.001028, abs=2e-6)
    assert float(row["Data Moved (MB)_first"]) * 2**20 == pytest.approx(led.total_bytes)
    ours = sorted(c.gpu_time_us for c in fa.calls)  # 24 calls: the median is the mean of the middle two
    assert (ours[11] + ours[12]) / 2 == pytest.approx(float(row["Kernel Time (µs)_median"]), rel=0.001)
    assert sum(ours) == pytest.approx(float(row["Kernel Time (µs)_sum"]), rel=1e-6)
    tflops = sorted(c.step.tflops for c in fa.calls)
    assert (tflops[11] + tflops[12]) / 2 == pytest.approx(float(row["TFLOPS/s_median"]), rel=0.005)


def test_full_decode_step_against_the_peer() -> None:
    fa = next(f for f in analyze_paths([DATA / "vllm_decode_full"]).files if f.path == "graph_execution.json.gz")
    (step,) = fa.serving_steps
    assert step.annotation.generation == PhaseSums(32, 32, 55_086, 32, 55_086) and step.annotation.context.requests == 0
    led = step.ledger
    assert led.prefill is None and (led.decode.pairs, led.flops) == (55_086, 4 * 64 * 64 * 55_086)
    assert led.total_bytes == 2 * 32 * 64 * 64 * 2 + 2 * 55_086 * 8 * 64 * 2 == 113_340_416
    rows = _tracelens("vllm_decode_full")  # one row per kernel set: [3d, reduce] and [2d]
    by_kernels = {len(c.kernels): [] for c in fa.calls}
    for c in fa.calls:
        by_kernels[len(c.kernels)].append(c)
    for row in rows:
        mine = by_kernels[int(row["num_kernels"])]
        assert len(mine) == int(row["name_count"]) == 12
        assert float(row["GFLOPS_first"]) * 1e9 == led.flops  # decode: q = 1, no diagonal term: identical
        assert float(row["Data Moved (MB)_first"]) * 2**20 == pytest.approx(led.total_bytes)
        times = sorted(c.gpu_time_us for c in mine)
        assert (times[5] + times[6]) / 2 == pytest.approx(float(row["Kernel Time (µs)_median"]), rel=0.01)
        rates = sorted(c.step.gbps for c in mine)
        assert (rates[5] + rates[6]) / 2 / 1000 == pytest.approx(float(row["TB/s_median"]), rel=0.01)
