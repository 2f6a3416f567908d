"""The operating-point search (profattn.analysis.simulation.operating): the rate search's floor, the probe-once rule
where the defaults meet the SLO nowhere, the axes parser and the binding constraint."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from factories import LinearAttention
from profattn.analysis.simulation import operating
from profattn.analysis.simulation.operating import (
    Binding, binding_of, compare_operating, parse_axes, search_operating_point,
)
from profattn.analysis.simulation.rates import SEARCH_FLOOR, RatePoint, search_rate
from profattn.analysis.simulation.replay import SLO, BackendPair, Deployment, SimulationError
from profattn.analysis.simulation.scheduler import SchedulerConfig, kv_capacity
from profattn.analysis.simulation.stepcost import AttentionShape, RestOfStep
from profattn.report.simulate import operating_rows, operating_sentences
from profattn.results import Ceilings
from profattn.workload.models import parse_model_spec
from profattn.workload.requests import load_requests

SLICE = Path(__file__).resolve().parents[2] / "data" / "requests" / "azure_conv_first400.csv"
MODEL = parse_model_spec("layers=4,hq=8,hkv=2,d=64,hidden=512,intermediate=1024,vocab=1000")
CEIL = Ceilings(copy_gbps=100.0, copy_bytes=0, matmul_tflops=10.0, matmul_n=0, dtype="bfloat16", method="t", read_gbps=100.0)
GRID = {"max_num_batched_tokens": (1024, 2048, 4096), "max_num_seqs": (32, 64)}


def defaults(dec: str = "A") -> Deployment:
    cfg = SchedulerConfig(num_gpu_blocks=3000, max_num_batched_tokens=2048, max_num_seqs=64, block_size=16)
    return Deployment(BackendPair(dec, "P"), cfg, kv_capacity(MODEL, block_size=16, kv_budget_tokens=3000 * 16))


class NoSteps:
    attn_decode_us = attn_prefill_us = rest_us = num_decode = prefill_seqs = np.zeros(0)

    def __len__(self) -> int:
        return 0


class FakeRun:
    """A run of ``n`` requests at ``scale`` that meets the SLO iff ``ok`` (all within, or all over TTFT and stopped)."""

    def __init__(self, scale: float, rate: float, n: int, ok: bool) -> None:
        self.rate_scale, self.rate_per_s, self.requests = scale, rate, n
        self.ttft_s = np.full(n, 0.1 if ok else 9.0)
        self.tpot_s = np.full(n, 0.01)
        self.stopped, self.steps, self.wall_s, self.num_preemptions, self.peak_pages = not ok, NoSteps(), 0.0, 0, 0
        self.ttft_failures, self.tpot_failures = (0, 0) if ok else (n, 0)

    def meets(self, slo: SLO) -> np.ndarray:
        return (self.ttft_s <= slo.ttft_s) & (self.tpot_s <= slo.tpot_s)

    def attainment(self, slo: SLO) -> float:
        return float(self.meets(slo).mean())


def test_a_rate_search_that_fails_everywhere_stops_at_the_floor():
    tr = load_requests(SLICE)
    calls: list[float] = []
    s = search_rate(lambda x: calls.append(x) or FakeRun(x, 1.0, len(tr), False), tr, SLO())  # type: ignore[arg-type]
    assert calls == [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125] and SEARCH_FLOOR == 1 / 32
    assert s.best_scale is None and s.floor == 1 / 32 and len(s.points) == 6
    # from a hint the steps do not land on the floor: the last one is cut to it
    hinted: list[float] = []
    h = search_rate(lambda x: hinted.append(x) or FakeRun(x, 1.0, len(tr), False), tr, SLO(), hint=0.3,  # type: ignore[arg-type]
                    min_scale=0.25)
    assert hinted == [1.0, 0.3, pytest.approx(0.3 / 1.1), 0.25] and h.floor == 0.25  # 0.3 / 1.1 / 1.21 < 0.25
    # one that meets at the floor is a best, not a failure
    ok = search_rate(lambda x: FakeRun(x, 1.0, len(tr), x <= 0.04), tr, SLO())  # type: ignore[arg-type]
    assert ok.floor is None and ok.best_scale is not None and ok.best_scale <= 0.04 < ok.best_scale * 1.05


def test_a_trace_no_setting_serves_costs_the_floor_search_and_one_probe_per_setting():
    # TTFT 1 µs: no request can meet it, at any rate or setting (a real simulation, stopped after 41 failures)
    tr = load_requests(SLICE)
    slo = SLO(ttft_s=1e-6, tpot_s=0.02)
    def search(dec: str):  # noqa: ANN202
        return search_operating_point(tr, defaults(dec), ("max_num_batched_tokens", "max_num_seqs"),
                                      {None: LinearAttention({"A": 0.001, "B": 0.002, "P": 0.05})},
                                      {None: RestOfStep(MODEL, CEIL, 4096, 64)}, {None: AttentionShape.of_model(MODEL)},
                                      MODEL, slo, grid=GRID)

    op = search("A")
    assert [p.scale for p in op.defaults.points] == [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125]
    others = [r for r in op.tried if r is not op.defaults]
    # tokens 1024 and 4096 (2048 is the default), then seqs 32 (64 is): one run each, at the floor
    assert [(r.knobs.max_num_batched_tokens, r.knobs.max_num_seqs) for r in others] == [(1024, 64), (4096, 64), (2048, 32)]
    assert all([p.scale for p in r.points] == [1 / 32] and r.below_scale == 1 / 32 and r.best_scale is None for r in others)
    assert op.runs == 6 + 3 and op.best is op.defaults and op.floor == 1 / 32
    rep = SimpleNamespace(operating=(op,), operating_verdict=None, trace_rate_per_s=tr.rate_per_s)
    assert {r["best"] for r in operating_rows(rep)} == {"nowhere ≥ 1/32×"}  # type: ignore[arg-type]
    assert "meet the SLO nowhere ≥ 1/32× the trace" in operating_sentences(rep)[0]  # type: ignore[arg-type]
    ops = (op, search("B"))
    both = SimpleNamespace(operating=ops, operating_verdict=compare_operating(ops, 0.05), trace_rate_per_s=tr.rate_per_s)
    assert operating_sentences(both)[-1].startswith("None of the 2 deployments searched meets the SLO at 1/32×")  # type: ignore[arg-type]


def test_where_the_defaults_meet_the_slo_nowhere_a_setting_that_meets_the_floor_is_searched_upward(monkeypatch):
    tr = load_requests(SLICE)
    top = {2048: 0.01, 1024: 0.0, 4096: 0.1}  # each token budget meets the SLO up to this scale (2048: below the floor)
    calls: list[tuple[int, int, float]] = []

    def fake(trace, d, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        c = d.scheduler
        calls.append((c.max_num_batched_tokens, c.max_num_seqs, trace.rate_scale))
        return FakeRun(trace.rate_scale, trace.rate_per_s, len(trace), trace.rate_scale <= top[c.max_num_batched_tokens])

    monkeypatch.setattr(operating, "run_simulation", fake)
    op = search_operating_point(tr, defaults(), ("max_num_batched_tokens", "max_num_seqs"), {None: None},  # type: ignore[dict-item]
                                {None: None}, {None: None}, MODEL, SLO(), grid=GRID)  # type: ignore[dict-item]
    by = {(r.knobs.max_num_batched_tokens, r.knobs.max_num_seqs): r for r in op.tried}
    assert by[(2048, 64)].best_scale is None and [p.scale for p in by[(1024, 64)].points] == [1 / 32]
    assert by[(1024, 64)].below_scale == 1 / 32 and by[(1024, 64)].best_scale is None
    b = by[(4096, 64)]
    assert op.best is b and b.best_scale is not None and b.best_scale <= 0.1 < b.best_scale * 1.05
    assert [p.scale for p in b.points][:3] == [1 / 32, 1 / 16, 1 / 8]  # upward from the floor in 2× steps
    # seqs 32 is probed once at the best × 1.05 (> 0.1: it fails there)
    s32 = by[(4096, 32)]
    assert [p.scale for p in s32.points] == [pytest.approx(b.best_scale * 1.05)] and s32.best_scale is None
    assert sum(1 for c in calls if c[:2] == (1024, 64)) == 1 and len(op.tried) == 4


def test_parse_axes():
    assert parse_axes("max-num-seqs, page_size") == ("max_num_seqs", "page_size")
    for bad, words in (("kv_dtype,kv-dtype", "given twice"), ("block_size", "unknown knob"), (" , ", "at least one")):
        with pytest.raises(SimulationError, match=words):
            parse_axes(bad)


def point(**kw) -> RatePoint:  # noqa: ANN003
    base = dict(scale=2.0, rate_per_s=1.0, attainment=0.5, meets=False, stopped=True, ttft_p90_s=None, tpot_p90_s=None,
                ttft_p99_s=None, tpot_p99_s=None, goodput_per_s=0.0, steps=10, wall_s=0.0, preemptions=0, peak_pages=10,
                ttft_failed=5, tpot_failed=5, peak_running=10)
    return RatePoint(**{**base, **kw})  # type: ignore[arg-type]


def test_binding_of():
    d = defaults()  # 3,000 pages, max_num_seqs 64
    assert binding_of(None, d) is Binding.NONE
    assert binding_of(point(preemptions=1), d) is Binding.KV_CAPACITY
    assert binding_of(point(peak_pages=2940), d) is Binding.KV_CAPACITY  # 98 % of 3,000
    assert binding_of(point(peak_pages=2939, tpot_failed=6), d) is Binding.STALLED_DECODE
    assert binding_of(point(peak_running=64), d) is Binding.MAX_NUM_SEQS
    assert binding_of(point(peak_running=63), d) is Binding.COMPUTE
