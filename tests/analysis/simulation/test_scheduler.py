"""The scheduler under a fixed step time (1 ms, attention free): hand-computed schedules — a token budget that
splits a prompt, time to first token and per output token, a preemption by recompute — page accounting at every
step, every request finishing with exactly its output tokens, the decode-run fast path equal to the step-by-step
path, and the KV capacity arithmetic (an FP8 cache holds twice the tokens)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from factories import drive
from profattn.analysis.simulation.replay import BackendPair, Deployment, run_simulation
from profattn.analysis.simulation.scheduler import Scheduler, SchedulerConfig, SchedulerError, activation_bytes, kv_capacity
from profattn.analysis.simulation.stepcost import AttentionEstimate, AttentionShape, CallSums, Provenance
from profattn.workload.models import MODELS, parse_model_spec
from profattn.workload.requests import RequestTrace, load_requests

SLICE = Path(__file__).resolve().parents[2] / "data" / "requests" / "azure_conv_first400.csv"
MODEL = parse_model_spec("layers=1,hq=4,hkv=1,d=8,hidden=32,intermediate=64,vocab=100")
SHAPE = AttentionShape.of_model(MODEL)


class FreeAttention:
    """A step-cost source whose attention takes no time (the step is the fixed rest)."""

    name = "free"

    def attention_us(self, backend: str, part, calls: CallSums) -> AttentionEstimate:  # noqa: ANN001
        return AttentionEstimate(np.zeros(calls.k), 0, 0.0)

    def provenance(self, backend: str, part) -> Provenance:  # noqa: ANN001
        raise NotImplementedError


class FixedStep:
    """The rest of every step: 1 ms, whatever it computes (``RestOfStep``'s two look-ups)."""

    def at(self, tokens: int, sampled: int) -> float:
        return 1000.0

    def us(self, tokens: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        return np.full(np.shape(tokens), 1000.0)


def trace(rows: list[tuple[float, int, int]]) -> RequestTrace:
    a = np.array(rows, dtype=np.float64)
    return RequestTrace(a[:, 0], a[:, 1].astype(np.int64), a[:, 2].astype(np.int64),
                        np.arange(2, len(rows) + 2, dtype=np.int64), "hand")


def simulate(tr: RequestTrace, cfg: SchedulerConfig, audit: bool):
    cap = kv_capacity(MODEL, block_size=cfg.block_size, kv_budget_tokens=cfg.num_gpu_blocks * cfg.block_size)
    d = Deployment(BackendPair("a", "b"), cfg, cap)
    return run_simulation(tr, d, FreeAttention(), FixedStep(), MODEL, SHAPE, audit=audit)  # type: ignore[arg-type]


@pytest.mark.parametrize("audit", [True, False])
def test_budget_splits_a_prompt(audit: bool):
    # A: prompt 10, 3 out; B: prompt 3, 2 out (both at 0); C: prompt 4, 1 out at 2.5 ms. Budget 8 tokens, page 4.
    tr = trace([(0.0, 10, 3), (0.0, 3, 2), (0.0025, 4, 1)])
    cfg = SchedulerConfig(num_gpu_blocks=100, max_num_batched_tokens=8, max_num_seqs=4, block_size=4)
    run = simulate(tr, cfg, audit)
    st = run.steps
    # step 0: A's first chunk of 8; step 1: A's last 2 + B's 3; step 2: A and B decode; step 3: A decodes, C prefills
    assert len(st) == 4
    assert st.prefill_tokens.tolist() == [8, 5, 0, 4] and st.prefill_seqs.tolist() == [1, 2, 0, 1]
    assert st.prefill_kv.tolist() == [8, 10 + 3, 0, 4]  # the chunk over A's first 8 ends at kv 10
    assert st.num_decode.tolist() == [0, 0, 2, 1] and st.decode_kv.tolist() == [0, 0, 11 + 4, 12]
    assert st.start_s.tolist() == pytest.approx([0.0, 0.001, 0.002, 0.003])
    # pages after each step's allocation: A 2 → 3 (ceil 10/4) + B 1; A's kv 11, 12 stay in 3 pages; C takes 1
    assert st.pages_used.tolist() == [2, 4, 4, 4] and run.final_pages == 0 and run.peak_pages == 4
    assert run.ttft_s.tolist() == pytest.approx([0.002, 0.002, 0.0015])
    assert run.tpot_s[:2].tolist() == pytest.approx([0.001, 0.001]) and np.isnan(run.tpot_s[2])
    assert run.e2e_s.tolist() == pytest.approx([0.004, 0.003, 0.0015])
    assert run.tokens_scheduled == (10 + 2) + (3 + 1) + (4 + 0) and run.num_preemptions == 0


@pytest.mark.parametrize("audit", [True, False])
def test_preemption_by_recompute_conserves_tokens(audit: bool):
    # 5 pages of 4 tokens. A: prompt 8, 10 out (17 tokens cached at the end); B: prompt 8, 4 out. Both prefill in
    # step 0 (4 pages); in step 1 both open a page, one is free: B (the last admitted) is preempted, its 8 tokens
    # thrown away. B waits for 9 tokens' pages (prompt + its first output) until A finishes after step 9, is
    # recomputed in step 10 (its second token), decodes in 11 and 12.
    tr = trace([(0.0, 8, 10), (0.0, 8, 4)])
    cfg = SchedulerConfig(num_gpu_blocks=5, max_num_batched_tokens=16, max_num_seqs=4, block_size=4)
    run = simulate(tr, cfg, audit)
    assert len(run.steps) == 13 and run.num_preemptions == 1 and run.preemptions.tolist() == [0, 1]
    assert run.tokens_discarded == 8
    assert run.tokens_scheduled == (8 + 10 - 1) + (8 + 4 - 1) + 8 == 36  # every token once, plus the recomputed
    assert run.ttft_s.tolist() == pytest.approx([0.001, 0.001])
    assert run.e2e_s.tolist() == pytest.approx([0.010, 0.013])
    assert run.tpot_s.tolist() == pytest.approx([0.009 / 9, 0.012 / 3])
    st = run.steps
    assert st.prefill_tokens.tolist() == [16] + [0] * 9 + [9, 0, 0]
    assert st.num_decode.tolist() == [0] + [1] * 9 + [0, 1, 1]
    assert run.peak_pages == 5 and run.final_pages == 0
    # the resumed request waited from its first token (1 ms) to its second (11 ms): one 10 ms gap in the ITLs
    assert sorted(run.itl_s.tolist())[-1] == pytest.approx(0.010)


@pytest.mark.parametrize("scale, blocks", [(8.0, 600), (1.0, 4000)])
def test_every_request_of_the_slice_finishes_with_its_tokens_and_the_pages_add_up(scale: float, blocks: int):
    # 8×: a tight cache (preemptions, requests waiting); 1×: room for all, nothing waiting between arrivals
    tr = load_requests(SLICE).scaled(scale)
    cfg = SchedulerConfig(num_gpu_blocks=blocks, max_num_batched_tokens=2048, max_num_seqs=64, block_size=16)
    audit = simulate(tr, cfg, audit=True)  # checks pages = Σ ⌈len / page⌉ after every step
    fast = simulate(tr, cfg, audit=False)
    assert (audit.num_preemptions > 0) == (scale > 1)
    need = int((tr.prompt_tokens + tr.output_tokens - 1).sum())
    for run in (audit, fast):
        assert not np.isnan(run.e2e_s).any() and run.final_pages == 0
        assert run.tokens_scheduled == need + run.tokens_discarded
    assert len(audit.steps) == len(fast.steps) and audit.num_preemptions == fast.num_preemptions
    assert audit.peak_pages == fast.peak_pages
    for f in ("num_decode", "decode_kv", "decode_max_kv", "prefill_tokens"):
        assert np.array_equal(getattr(audit.steps, f), getattr(fast.steps, f)), f
    assert np.allclose(audit.e2e_s, fast.e2e_s, rtol=0, atol=1e-9)


def test_scheduler_emits_exactly_the_output_tokens():
    tr = load_requests(SLICE).head(60)
    s = Scheduler(tr, SchedulerConfig(num_gpu_blocks=400, max_num_batched_tokens=512, max_num_seqs=8, block_size=16),
                  audit=True)
    for _ in drive(s, 0.001):
        pass
    assert s.generated == tr.output_tokens.tolist() and s.pages_in_use == 0


def test_no_chunked_prefill_waits_for_room():
    tr = trace([(0.0, 6, 2), (0.0, 6, 2)])
    cfg = SchedulerConfig(num_gpu_blocks=100, max_num_batched_tokens=8, max_num_seqs=4, enable_chunked_prefill=False,
                          block_size=4)
    run = simulate(tr, cfg, audit=True)
    # step 0: A alone (B's 6 do not fit the 2 left); step 1: A decodes, B prefills (1 + 6 ≤ 8); step 2: B decodes
    assert run.steps.prefill_tokens.tolist() == [6, 6, 0] and run.ttft_s.tolist() == pytest.approx([0.001, 0.002])


def test_requests_the_configuration_cannot_serve_are_named():
    cfg = SchedulerConfig(num_gpu_blocks=2, max_num_batched_tokens=8, max_num_seqs=4, block_size=4)
    with pytest.raises(SchedulerError, match="the request at row 3 needs 9 tokens of KV cache .3 pages.; the budget holds 8"):
        Scheduler(trace([(0.0, 2, 2), (0.0, 5, 5)]), cfg)
    nochunk = SchedulerConfig(num_gpu_blocks=100, max_num_batched_tokens=8, max_num_seqs=4, enable_chunked_prefill=False)
    with pytest.raises(SchedulerError, match="without chunked prefill the request at row 2"):
        Scheduler(trace([(0.0, 9, 1)]), nochunk)
    with pytest.raises(SchedulerError, match="max-num-batched-tokens 8 is below max-num-seqs 16"):
        SchedulerConfig(num_gpu_blocks=1, max_num_batched_tokens=8, max_num_seqs=16)
    with pytest.raises(SchedulerError, match=r"page-size \(vLLM's block_size\) must be a positive integer"):
        SchedulerConfig(num_gpu_blocks=1, block_size=0)


def test_kv_capacity_by_hand_and_fp8_doubles_tokens():
    m = MODELS["llama-3-8b"]
    act = activation_bytes(m, 8192, 1024)
    assert act == 8192 * ((32 + 16) * 128 + 3 * 14336) * 2 + 1024 * 128256 * 4
    page = 131_072 * 16
    mem = m.weight_bytes_per_gpu + act + 1000 * page  # room for exactly 1000 bf16 pages
    bf16 = kv_capacity(m, block_size=16, gpu_memory_bytes=mem, gpu_memory_utilization=1.0)
    fp8 = kv_capacity(m, block_size=16, kv_dtype="float8_e4m3fn", gpu_memory_bytes=mem, gpu_memory_utilization=1.0)
    assert (bf16.num_blocks, bf16.tokens, bf16.page_bytes) == (1000, 16_000, page)
    assert (fp8.num_blocks, fp8.tokens) == (2000, 32_000) and fp8.kv_budget_bytes == bf16.kv_budget_bytes
    h200 = kv_capacity(m, block_size=16, gpu_memory_bytes=150_109_880_320)  # the committed runs' H200, × 0.9
    assert h200.num_blocks == (int(150_109_880_320 * 0.9) - m.weight_bytes_per_gpu - act) // page == 56_127
    given = kv_capacity(m, block_size=16, kv_budget_tokens=1000)
    assert (given.num_blocks, given.tokens) == (62, 992)
    with pytest.raises(SchedulerError, match="no room for the KV cache"):
        kv_capacity(MODELS["llama-3-70b"], block_size=16, gpu_memory_bytes=150_109_880_320)
    with pytest.raises(SchedulerError, match="give the GPU memory"):
        kv_capacity(m, block_size=16)
