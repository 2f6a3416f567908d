"""The per-backend cost models: features computed by hand, a known model recovered from its own samples, the span
and roofline, the regimes."""

from __future__ import annotations

import math

import pytest

from profattn.analysis.selection.costmodel import (
    FEATURES, BackendModel, CostModels, Regime, Sample, features, fit, fit_all, regime_of,
)
from profattn.errors import WorkloadError
from profattn.workload import Workload

DECODE = dict(phase="decode", q_len=1, num_q_heads=16, num_kv_heads=4, head_dim=128, kv_layout="paged", page_size=16)


def test_decode_features_by_hand():
    w = Workload(batch=8, kv_len=8192, **DECODE)
    x, shape = features(w, "paged", 132)
    # K and V: 8 × 8192 tokens × 4 heads × 128 × 2 B each = 67,108,864 B; Q and O 8 × 16 × 128 × 2 B = 32,768 B each;
    # block table 8 × 512 pages × 4 B = 16,384 B; seq_lens 32 B
    assert x[0] == 1.0 and x[1] == pytest.approx((2 * 67_108_864 + 2 * 32_768 + 16_384 + 32) / 1e6)
    # B·Hkv = 32 items on 132 SMs: idle factor 132 / 32 − 1 = 3.125
    assert x[2] == pytest.approx(x[1] * 3.125)
    # 4 · Hq · pairs · d = 4 · 16 · (8 · 8192) · 128 FLOPs
    assert x[3] == pytest.approx(4 * 16 * 8 * 8192 * 128 / 1e9)
    # tiles: 1 row per sequence → 8 tiles × 16 heads = 128 < 132
    assert x[4] == pytest.approx(x[3] * (132 / 128 - 1))
    assert (shape.batch, shape.kv_len, shape.q_len, shape.head_dim, shape.group) == (8, 8192, 1, 128, 4)
    # a dense kernel reads the contiguous copy: no block table, no sequence lengths
    xd, _ = features(w, "dense", 132)
    assert xd[1] == pytest.approx((2 * 67_108_864 + 2 * 32_768) / 1e6)
    with pytest.raises(WorkloadError):
        features(Workload(batch=8, kv_len=8192, kv_len_dist="lognormal", kv_len_seed=1, **DECODE), "paged", 132)


def test_executed_pairs_are_what_a_padding_kernel_pays():
    w = Workload(phase="prefill", batch=2, q_len=256, kv_len=256, num_q_heads=8, num_kv_heads=2, head_dim=64)
    causal = 256 * 257 // 2 * 2
    assert features(w, "dense", 132)[0][3] == pytest.approx(4 * 8 * causal * 64 / 1e9)
    assert features(w, "dense", 132, executed_pairs=2 * 256 * 256)[0][3] == pytest.approx(4 * 8 * 2 * 65536 * 64 / 1e9)


def test_regimes():
    assert regime_of(Workload(batch=8, kv_len=512, **DECODE), "dense").key == "decode/dense/none/full/uniform/square/bfloat16/d128"
    chunk = Workload(phase="prefill", batch=2, q_len=512, kv_len=4096, num_q_heads=8, num_kv_heads=2, head_dim=64,
                     kv_layout="paged", page_size=16)
    assert regime_of(chunk, "paged").offset and not regime_of(chunk.with_(kv_len=512, q_len=512), "paged").offset
    assert regime_of(Workload(batch=8, kv_len=512, kv_len_dist="ragged", kv_len_seed=3, **DECODE), "paged") is None
    r = Regime("decode", "paged", "float8_e4m3fn", True, False, False)
    assert Regime.from_key(r.key) == r
    with pytest.raises(ValueError):
        Regime.from_key("decode/paged")


def samples_of(coef, batches, kvs):
    reg = Regime("decode", "paged", "none", False, False)
    out = []
    for b in batches:
        for n in kvs:
            w = Workload(batch=b, kv_len=n, **DECODE)
            x, shape = features(w, "paged", 132)
            out.append(Sample("k", reg, x, shape, sum(c * v for c, v in zip(coef, x)), w.tag))
    return reg, out


def test_a_known_model_is_recovered_and_generalizes():
    """t = 4 µs + 0.22 µs/MB (a 4.5 TB/s stream) + 0.05 µs/MB on idle SMs: fitted from a 3 × 3 grid, it predicts
    a shape outside the grid's batches (interpolated in kv) to 0.1 %."""
    true = (4.0, 0.22, 0.05, 0.0, 0.0)
    reg, rows = samples_of(true, (4, 16, 64), (1024, 4096, 16384))
    m = fit("k", reg, rows)
    assert m.coef == pytest.approx(true, abs=1e-6) and m.sigma == pytest.approx(0.03)  # the floor: a perfect fit
    w = Workload(batch=32, kv_len=8192, **DECODE)
    x, shape = features(w, "paged", 132)
    e = m.predict(x, shape)
    assert e.us == pytest.approx(sum(c * v for c, v in zip(true, x)), rel=1e-3) and not e.extrapolated
    far = Workload(batch=256, kv_len=65536, **DECODE)
    x, shape = features(far, "paged", 132)
    e = m.predict(x, shape)
    assert e.extrapolated and e.distance > 2 and e.sigma > m.sigma
    # batch 256 is 2 octaves above the largest fitted (64), kv 65,536 2 above the longest (16,384)
    out = {o.field: o for o in e.outside}
    assert (out["batch"].value, out["batch"].measured, out["batch"].octaves) == (256, 64, pytest.approx(2.0))
    assert (out["kv_len"].value, out["kv_len"].measured, out["kv_len"].octaves) == (65536, 16384, pytest.approx(2.0))
    assert out["kv_len"].above and "q_len" not in out  # q_len 1 is inside: every cell had it
    assert m.predict(*features(w, "paged", 132)).outside == ()
    below = m.predict(*features(Workload(batch=1, kv_len=8192, **DECODE), "paged", 132)).outside
    assert [(o.field, o.value, o.measured, o.above) for o in below if o.field == "batch"] == [("batch", 1, 4, False)]
    unseen = Workload(batch=16, kv_len=4096, **{**DECODE, "head_dim": 64})
    x, shape = features(unseen, "paged", 132)
    assert m.predict(x, shape).extrapolated  # a head_dim never measured
    d = m.to_dict()
    assert set(d["coef_us"]) == set(FEATURES) and BackendModel.from_dict(d) == m


def test_local_correction_follows_the_measured_neighbours():
    """Cells 20 % slower at batch 64 than the rest's line: the fit bends toward them, and the correction takes the
    prediction at batch 64 closer to its measurement than the terms alone; far away (batch 2) it stays the terms'."""
    true = (4.0, 0.22, 0.0, 0.0, 0.0)
    reg, rows = samples_of(true, (2, 4, 8, 16, 64), (4096,))
    rows = [Sample(s.backend, s.regime, s.x, s.shape, s.latency_us * (1.2 if s.shape.batch == 64 else 1.0), s.key)
            for s in rows]
    m = fit("k", reg, rows)
    x64, s64 = features(Workload(batch=64, kv_len=4096, **DECODE), "paged", 132)
    x2, s2 = features(Workload(batch=2, kv_len=4096, **DECODE), "paged", 132)
    measured64 = next(s.latency_us for s in rows if s.shape.batch == 64)
    assert abs(m.predict(x64, s64).us - measured64) < abs(m.terms_us(x64) - measured64)
    assert abs(m.predict(x2, s2).us / m.terms_us(x2) - 1) < 0.02


def test_roofline_floor():
    models = CostModels({}, 132, read_gbps=4600.0, matmul_tflops=690.0)
    # 100 MB at 4.6 TB/s = 21.7 µs; 1 GFLOP at 1.25 × 690 TFLOP/s = 1.16 µs
    assert models.floor_us((1.0, 100.0, 0.0, 1.0, 0.0)) == pytest.approx(100e6 / 4600e9 * 1e6)
    assert CostModels({}, 132).floor_us((1.0, 100.0, 0.0, 1.0, 0.0)) == 0.0
    reg, rows = samples_of((0.0, 0.01, 0.0, 0.0, 0.0), (8,), (1024, 2048))  # a "kernel" 20× faster than HBM
    m = fit_all(rows, 132, read_gbps=4600.0)
    x, shape = features(Workload(batch=8, kv_len=4096, **DECODE), "paged", 132)
    assert m.estimate("k", Workload(batch=8, kv_len=4096, **DECODE), "paged").us == pytest.approx(x[1] * 1e3 / 4600)
    assert math.isclose(m.model("k", reg).predict(x, shape).us, m.model("k", reg).terms_us(x) * math.exp(
        m.model("k", reg).correction(shape)))
