"""The simulation around the scheduler: the rate search on a known threshold, weighted latency quantiles, the
per-call head-to-head from hand-made cells, the step-shape table priced on one schedule, the sampled steps as
``--workload`` text that reads back, early stopping, and the findings of two deployments whose only difference is
their decode kernel's speed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from factories import LinearAttention, cell, run, simulation
from profattn.analysis.simulation.rates import search_rate, weighted_quantiles
from profattn.analysis.simulation.replay import SLO, BackendPair, Deployment, StepKind, StepShape, run_simulation
from profattn.analysis.simulation.scheduler import SchedulerConfig, kv_capacity
from profattn.analysis.simulation.simulate import ShapeClass, head_to_head, sample_steps, shape_rows
from profattn.analysis.simulation.stepcost import AttentionShape, RestOfStep
from profattn.results import Ceilings
from profattn.store import measurements
from profattn.workload import Workload, parse_workload_spec
from profattn.workload.models import parse_model_spec
from profattn.workload.requests import load_requests

SLICE = Path(__file__).resolve().parents[2] / "data" / "requests" / "azure_conv_first400.csv"
MODEL = parse_model_spec("layers=4,hq=8,hkv=2,d=64,hidden=512,intermediate=1024,vocab=1000")
SHAPE = AttentionShape.of_model(MODEL)
CEIL = Ceilings(copy_gbps=100.0, copy_bytes=0, matmul_tflops=10.0, matmul_n=0, dtype="bfloat16", method="t", read_gbps=100.0)


def deployment(dec: str, cfg: SchedulerConfig) -> Deployment:
    cap = kv_capacity(MODEL, block_size=cfg.block_size, kv_budget_tokens=cfg.num_gpu_blocks * cfg.block_size)
    return Deployment(BackendPair(dec, "P"), cfg, cap)


def test_weighted_quantiles():
    assert weighted_quantiles(np.array([3.0, 1.0, 2.0]), None, (0.5, 1.0)) == [2.0, 3.0]
    # 1.0 counted 8 times, 10.0 twice: p50 = 1, p90 = 10
    assert weighted_quantiles(np.array([1.0, 10.0]), np.array([8.0, 2.0]), (0.5, 0.8, 0.9)) == [1.0, 1.0, 10.0]
    assert weighted_quantiles(np.array([np.nan, 5.0]), None, (0.5,)) == [5.0]
    assert weighted_quantiles(np.array([np.nan]), None, (0.5,)) == [None]


class NoSteps:
    attn_decode_us = attn_prefill_us = rest_us = num_decode = prefill_seqs = np.zeros(0)

    def __len__(self) -> int:
        return 0


def test_rate_search_brackets_a_known_threshold():
    tr = load_requests(SLICE)
    threshold = 3.3  # the "deployment" meets the SLO up to 3.3× the trace's rate
    calls = []

    class Fake:
        def __init__(self, scale: float) -> None:
            self.rate_scale, self.rate_per_s, self.requests = scale, tr.rate_per_s * scale, len(tr)
            ok = scale <= threshold
            self.ttft_s = np.full(len(tr), 0.1 if ok else 9.0)
            self.tpot_s = np.full(len(tr), 0.01)
            self.stopped, self.steps, self.wall_s, self.num_preemptions, self.peak_pages = not ok, NoSteps(), 0.0, 0, 0
            self.ttft_failures, self.tpot_failures = (0, 0) if ok else (len(tr), 0)

        def meets(self, slo: SLO) -> np.ndarray:
            return (self.ttft_s <= slo.ttft_s) & (self.tpot_s <= slo.tpot_s)

        def attainment(self, slo: SLO) -> float:
            return float(self.meets(slo).mean())

    def at(scale: float):
        calls.append(scale)
        return Fake(scale)

    s = search_rate(at, tr, SLO(), start=1.0, resolution=0.05)  # type: ignore[arg-type]
    assert s.best_scale is not None and s.best_scale <= threshold < s.best_scale * (1 + s.resolution) * (1 + 1e-9)
    assert s.resolution <= 0.05 and calls[:3] == [1.0, 2.0, 4.0] and not s.ceiling
    hinted = []
    s2 = search_rate(lambda x: hinted.append(x) or Fake(x), tr, SLO(), start=1.0, resolution=0.05, hint=3.2)  # type: ignore[arg-type]
    assert hinted[:3] == [1.0, 3.2, pytest.approx(3.2 * 1.1)] and len(hinted) < len(calls)
    assert s2.best_scale <= threshold < s2.best_scale * 1.05
    low = search_rate(lambda x: Fake(x * 10), tr, SLO(), start=1.0)  # type: ignore[arg-type]  # meets up to 0.33×
    assert low.best_scale <= 0.33 < low.best_scale * 1.05 and low.best_rate_per_s == pytest.approx(low.best_scale * tr.rate_per_s)


def test_head_to_head_from_hand_made_cells():
    def w(b: int, kv: int, hq: int = 16, hkv: int = 4) -> Workload:
        return Workload(phase="decode", batch=b, q_len=1, kv_len=kv, num_q_heads=hq, num_kv_heads=hkv, head_dim=128,
                        kv_layout="paged", page_size=16)
    cells = [cell(w(1, 512), "A", 10.0), cell(w(1, 512), "B", 12.0),  # A ahead by 20 %: beyond noise
             cell(w(8, 512), "A", 10.0), cell(w(8, 512), "B", 10.1),  # 1 %: a tie
             cell(w(8, 4096, 32, 8), "A", 20.0), cell(w(8, 4096, 32, 8), "B", 15.0),  # B ahead, at the model's heads
             cell(w(64, 512), "A", 30.0)]  # only A measured: not counted
    h = head_to_head(measurements(run(cells)), "A", "B", AttentionShape(32, 8, 128))
    assert (h.workloads, h.a_wins, h.b_wins, h.ties, h.at_shape) == (3, 1, 1, 1, (0, 1, 0)) and h.winner is None
    assert h.geomean_b_over_a == pytest.approx((1.2 * 1.01 * 0.75) ** (1 / 3))


def test_step_shapes_read_back_as_workloads():
    s = StepShape(7, 1.5, (300, 100, 100), ((512, 2048),))
    assert s.kind is StepKind.MIXED
    specs = s.specs(SHAPE, 16)
    assert set(specs) == {"step", "decode", "prefill"}
    step = parse_workload_spec(specs["step"])
    assert step.seqs == ((512, 2048), (1, 100), (1, 100), (1, 300)) and step.append and step.page_size == 16
    assert (step.num_q_heads, step.num_kv_heads, step.head_dim) == (8, 2, 64)
    assert parse_workload_spec(specs["decode"]).seqs == ((1, 100), (1, 100), (1, 300))
    assert parse_workload_spec(specs["prefill"]).seqs == ((512, 2048),)
    fp8 = AttentionShape(8, 2, 64, kv_dtype="float8_e4m3fn")
    f = s.specs(fp8, 16)  # an FP8 cache has no appending call: its decode part alone carries the KV dtype
    assert set(f) == {"decode", "prefill"} and parse_workload_spec(f["decode"]).kv_dtype == "float8_e4m3fn"
    assert not parse_workload_spec(f["prefill"]).kv_dtype


def simulated(us_per_token: dict[str, float], decoders=("A", "B"), search: bool = True, blocks: int = 3000):
    return simulation(us_per_token, decoders, search=search, blocks=blocks)


def test_a_faster_decode_kernel_serves_more_and_says_where():
    rep = simulated({"A": 0.001, "B": 0.004, "P": 0.05})
    a, b = rep.results
    assert a.search.best_rate_per_s > b.search.best_rate_per_s * 1.05  # type: ignore[union-attr]
    f = rep.findings
    assert f.deployment_winner == "A + P" and not f.deployment_tie and f.rate_ratio > 1.05
    assert (f.fastest_on_steps, f.next_on_steps, f.schedule_of) == ("A + P", "B + P", "A + P")
    # on one schedule B's attention is exactly 4× A's in decode and equal in prefill: the difference is 3× A's decode
    on = f.attention_on_steps
    dec_a = sum(r.attention_us["A + P"] for r in f.shapes) * 1e-6
    assert f.attention_delta_s == pytest.approx(on["B + P"] - on["A + P"])
    rows = {r.cls: r for r in f.shapes}
    for cls, r in rows.items():
        if cls.kind is StepKind.DECODE:
            assert r.attention_us["B + P"] == pytest.approx(4 * r.attention_us["A + P"])
    assert f.dominant is not None and f.dominant.kind in (StepKind.DECODE, StepKind.MIXED) and 0 < f.dominant_share <= 1
    best = a.search.best_run  # type: ignore[union-attr]
    assert f.schedule_scale == best.rate_scale == a.search.best_scale  # type: ignore[union-attr]
    assert sum(r.steps for r in f.shapes) == len(best.steps) and dec_a > 0 and 0 < f.attention_share < 1
    assert sum(r.step_share for r in f.shapes) == pytest.approx(1.0)
    assert f.per_call is not None and f.per_call.workloads == 0  # no cells: no per-call answer
    assert 1 <= len(rep.steps) <= 6 and {s.kind for s in rep.steps} <= set(StepKind)
    # the breakdown adds up to the run's step time
    st = a.run.steps
    assert a.attention_decode_s + a.attention_prefill_s + a.rest_s == pytest.approx(float(st.dur_s.sum()), rel=1e-5)
    assert a.attainment == pytest.approx(float(a.run.meets(SLO(0.5, 0.02)).mean()))


def test_equal_kernels_tie_and_capacity_is_reported():
    rep = simulated({"A": 0.002, "B": 0.002, "P": 0.05}, blocks=700)
    f = rep.findings
    assert f.deployment_tie and f.deployment_winner is None and f.rate_ratio == pytest.approx(1.0)
    assert f.attention_delta_s == pytest.approx(0.0, abs=1e-9) and f.dominant is None
    assert f.capacity_tokens == {"A + P": 700 * 16, "B + P": 700 * 16}
    assert all(f.capacity_bound.values())  # 11,200 tokens fill at the highest rate served: preemptions


def test_stopping_early_once_the_slo_is_lost():
    tr = load_requests(SLICE).scaled(50.0)
    cfg = SchedulerConfig(num_gpu_blocks=3000, max_num_batched_tokens=2048, max_num_seqs=64, block_size=16)
    src = LinearAttention({"A": 0.01, "P": 0.5})
    full = run_simulation(tr, deployment("A", cfg), src, RestOfStep(MODEL, CEIL, 2048, 64), MODEL, SHAPE)  # type: ignore[arg-type]
    cut = run_simulation(tr, deployment("A", cfg), src, RestOfStep(MODEL, CEIL, 2048, 64), MODEL, SHAPE,  # type: ignore[arg-type]
                         slo=SLO(0.05, 0.001, 0.9), stop_on_failure=True)
    assert cut.stopped and not full.stopped and len(cut.steps) < len(full.steps)
    assert cut.slo_failures + int(np.isnan(cut.ttft_s).sum()) > 0.1 * len(tr) and cut.attainment(SLO(0.05, 0.001)) < 0.9


def test_shape_classes():
    rep = simulated({"A": 0.001, "B": 0.001, "P": 0.05}, decoders=("A",), search=False)
    rows = shape_rows(rep.results[0].run.steps, {"A + P": np.zeros(len(rep.results[0].run.steps))})
    kinds = {r.cls.kind for r in rows}
    assert StepKind.DECODE in kinds and StepKind.MIXED in kinds
    assert all(isinstance(r.cls, ShapeClass) and r.cls.batch_lo < r.cls.batch_hi for r in rows)
    assert rows == tuple(sorted(rows, key=lambda r: -r.time_share))
    assert rep.results[0].search is None and rep.findings.deployment_winner == "A + P"
    assert math.isclose(sum(r.time_share for r in rows), 1.0)
    picked = sample_steps([rep.results[0].run], 3)
    assert len(picked) == 3 and len({(s.decode_kv, s.chunks) for s in picked}) == 3


def test_more_kv_capacity_moves_the_operating_point():
    from profattn.analysis.simulation.simulate import simulate
    from profattn.results import Ceilings
    from profattn.workload.requests import load_requests as load

    model = parse_model_spec("layers=4,hq=8,hkv=2,d=64,hidden=512,intermediate=1024,vocab=1000")
    ceil = Ceilings(100.0, 0, 10.0, 0, "bfloat16", "t", read_gbps=100.0)
    deps = []
    for blocks in (500, 4000):  # the same kernels; one cache 8× the other
        cfg = SchedulerConfig(num_gpu_blocks=blocks, max_num_batched_tokens=2048, max_num_seqs=64, block_size=16)
        deps.append(Deployment(BackendPair("A", "P"), cfg, kv_capacity(model, block_size=16, kv_budget_tokens=blocks * 16)))
    deps[1] = Deployment(BackendPair("A", "P2"), deps[1].scheduler, deps[1].capacity)
    rep = simulate(load(SLICE).scaled(2.0), deps, {None: LinearAttention({"A": 0.002, "P": 0.05, "P2": 0.05})}, model,
                   rest={None: RestOfStep(model, ceil, 2048, 64)}, shapes={None: AttentionShape.of_model(model)},
                   slo=SLO(0.5, 0.02), resolution=0.05, sample=2, ceilings=ceil)
    f = rep.findings
    assert f.deployment_winner == "A + P2" and f.runner_up == "A + P" and f.capacity_decides
    assert f.capacity_bound["A + P"] and f.preemptions_at_best["A + P"] > 0


def test_a_source_may_read_every_sequence_of_a_call():
    """A source that wants each sequence's own lengths (a cost model on workload fields) gets them through
    ``CallSums.sequences``, consistent with the sums it is asked to price."""
    seen = []

    class Checking(LinearAttention):
        def attention_us(self, backend, part, calls):  # noqa: ANN001, ANN201
            q, kv = calls.sequences(calls.k - 1)
            kv_sum = calls.kv_tokens if isinstance(calls.kv_tokens, float) else calls.kv_tokens[-1]
            assert float(kv.sum()) == float(kv_sum) and len(q) == float(calls.num_seqs if isinstance(calls.num_seqs, float) else calls.num_seqs[-1])
            seen.append(part)
            return super().attention_us(backend, part, calls)

    tr = load_requests(SLICE).head(60)
    cfg = SchedulerConfig(num_gpu_blocks=3000, max_num_batched_tokens=2048, max_num_seqs=64, block_size=16)
    run_simulation(tr, deployment("A", cfg), Checking({"A": 0.001, "P": 0.01}), RestOfStep(MODEL, CEIL, 2048, 64),  # type: ignore[arg-type]
                   MODEL, SHAPE)
    assert {p.value for p in seen} == {"decode", "prefill"}
