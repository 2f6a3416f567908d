"""Step cost: the physics of a call against the workload ledger, the measured-cells interpolation computed by hand
(along a level, between levels, beyond the cells, the launch floor, the longest sequence alone), its scalar and
vector evaluators held equal, the held-out validation, the FP8 factor, the errors, and the rest of the step."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import cell, run
from profattn.analysis.simulation.stepcost import (
    AttentionShape, CallPart, CallSums, Extrapolation, FloorRule, MeasuredCells, ONE_LAUNCH_MIXED, RestOfStep, StepCostError,
    call_physics, median_ceilings, small_call_floor,
)
from profattn.results import Ceilings
from profattn.store import measurements
from profattn.workload import Workload
from profattn.workload.models import parse_model_spec

#: 1,000 GB/s read (1e6 bytes per µs) and a GEMM rate so high that FLOPs never set the roof.
CEIL = Ceilings(copy_gbps=1000.0, copy_bytes=0, matmul_tflops=1e9, matmul_n=0, dtype="bfloat16", method="test",
                read_gbps=1000.0)
SHAPE = AttentionShape(4, 1, 128)  # Hq 4, Hkv 1, d 128, bf16: K+V 512 bytes per token, Q+O 2,048 per sequence
#: (batch, kv_len) -> µs of backend "X": two batch levels, two lengths each
CELLS = {(1, 1000): 10.0, (1, 4000): 20.0, (4, 1000): 16.0, (4, 4000): 40.0}


def roof(batch: int, kv: int) -> float:
    """µs at 1,000 GB/s for ``batch`` decode sequences of ``kv`` tokens each."""
    return (512 * batch * kv + 2048 * batch) / 1e6


def decode(b: int, kv: int, **kw) -> Workload:
    return Workload(phase="decode", batch=b, q_len=1, kv_len=kv, num_q_heads=4, num_kv_heads=1, head_dim=128,
                    kv_layout="paged", page_size=16, **kw)


def source(extra=(), shape: AttentionShape = SHAPE) -> MeasuredCells:
    cells = [cell(decode(b, kv), "X", t) for (b, kv), t in CELLS.items()] + list(extra)
    return MeasuredCells(measurements(run(cells)), shape, CEIL)


def one(src: MeasuredCells, kvs: list[int], backend: str = "X") -> tuple[float, int]:
    e = src.attention_us(backend, CallPart.DECODE, CallSums.of([1] * len(kvs), kvs, SHAPE.group))
    return float(e.us[0]), int(e.flags()[0])


def test_call_physics_is_the_workload_ledger():
    seqs = [(512, 4096), (1, 300), (1, 1), (2048, 2048)]
    w = Workload.varlen(None, seqs, num_q_heads=32, num_kv_heads=8, head_dim=128, kv_layout="paged", page_size=16)
    shape = AttentionShape(32, 8, 128)
    kv_bytes, flops, items, roof_us = call_physics(CallSums.of([q for q, _ in seqs], [k for _, k in seqs], 4), shape, CEIL)
    assert kv_bytes == w.kv_bytes and flops == w.forward_flops
    assert items == 8 * (16 + 1 + 1 + 64)  # ⌈q · 4 / 128⌉ query tiles per KV head
    assert roof_us == pytest.approx((w.kv_bytes + 2 * w.q_tokens * 32 * 128 * 2) / 1e6)
    run_ = CallSums.decode_run(3, 300, 200, 4, 4)  # 3 sequences over 300 tokens, the longest 200; 4 steps
    assert run_.kv_tokens.tolist() == [300, 303, 306, 309] and run_.top_kv.tolist() == [200, 201, 202, 203] and run_.run


def test_at_the_cells_and_along_a_level():
    src = source()
    for (b, kv), t in CELLS.items():
        assert one(src, [kv] * b) == (pytest.approx(t), 0)
    # between the two b=1 cells the latency is a power of the work through both: t1 (r / r1)^alpha
    alpha = math.log(20 / 10) / math.log(roof(1, 4000) / roof(1, 1000))
    assert one(src, [2000])[0] == pytest.approx(10 * (roof(1, 2000) / roof(1, 1000)) ** alpha)


def test_beyond_below_and_outside_the_cells():
    src = source()
    us, flags = one(src, [8000])  # more work than the largest b=1 cell: its efficiency held
    assert us == pytest.approx(20 * roof(1, 8000) / roof(1, 4000)) and flags == Extrapolation.ABOVE
    # less work than the smallest: on the line to the floor at zero work; the line through the b=1 cells meets zero
    # work at 10 − (10 / (r2 − r1)) · r1 = 6.65 µs, under X's fastest call (10 µs, no other phase): held at 10
    us, flags = one(src, [100])
    assert us == pytest.approx(10.0) and flags == Extrapolation.BELOW
    assert one(src, [1000] * 8)[1] & Extrapolation.PARALLELISM  # 8 sequences: more work items than any cell
    # b=2 lies halfway (in log items) between the levels; at kv 1000 it is below the b=4 level's first cell, at half
    # its roofline time: on the line from the 10 µs floor to 16 µs there, 13 µs
    e1 = math.log(10 / roof(1, 1000)) + (math.log(roof(2, 1000)) - math.log(roof(1, 1000))) / (
        math.log(roof(1, 4000)) - math.log(roof(1, 1000))) * (math.log(20 / roof(1, 4000)) - math.log(10 / roof(1, 1000)))
    assert roof(2, 1000) == pytest.approx(roof(4, 1000) / 2)
    e4 = math.log(13 / roof(2, 1000))
    assert one(src, [1000, 1000]) == (pytest.approx(roof(2, 1000) * math.exp(0.5 * e1 + 0.5 * e4)), 0)


def test_the_small_call_floor_by_hand():
    # the line through (1 µs, 10 µs) and (3 µs, 14 µs): slope 2, 8 µs at zero work
    assert small_call_floor([(1.0, 10.0, 3.0, 14.0), (0.5, 30.0)], 10.0) == (10.0, FloorRule.FASTEST)  # least roof: one cell
    assert small_call_floor([(1.0, 10.0, 3.0, 14.0), (2.0, 30.0)], 10.0, 10.0) == (10.0, FloorRule.LAUNCH)
    assert small_call_floor([(1.0, 10.0, 3.0, 14.0)], 10.0, 5.0) == (pytest.approx(8.0), FloorRule.SMALL_CELLS)
    assert small_call_floor([(1.0, 10.0, 3.0, 14.0)], 10.0, 9.0) == (9.0, FloorRule.LAUNCH)
    assert small_call_floor([(1.0, 10.0, 3.0, 40.0)], 10.0, 1.0) == (10.0, FloorRule.FASTEST)  # meets zero work below 0


def test_a_small_prefill_is_priced_from_its_backends_small_cells_not_its_fastest_call():
    # backend P: two prefill cells of 128 new tokens (4 query tiles) over kv 1000 and 4000, 30 and 45 µs, and one
    # decode cell of 5 µs (its launch floor). The line through the prefill cells meets zero work at
    # 30 − 15 / (r2 − r1) · r1 = 22.44 µs; a chunk at half the smaller cell's roofline time is on the line from it
    # to that cell: (22.44 + 30) / 2. Before: 30 µs (the prefill part's fastest cell).
    def pre(kv: int) -> Workload:
        return Workload(phase="prefill", batch=1, q_len=128, kv_len=kv, num_q_heads=4, num_kv_heads=1, head_dim=128,
                        kv_layout="paged", page_size=16)
    r = lambda kv: (512 * kv + 2048 * 128) / 1e6  # noqa: E731
    cells = [cell(pre(1000), "P", 30.0), cell(pre(4000), "P", 45.0), cell(decode(1, 100), "P", 5.0)]
    src = MeasuredCells(measurements(run(cells)), SHAPE, CEIL)
    t0 = 30 - 15 / (r(4000) - r(1000)) * r(1000)
    assert t0 == pytest.approx(22.44, abs=0.01) and r(244) == pytest.approx(r(1000) / 2)
    e = src.attention_us("P", CallPart.PREFILL, CallSums.of([128], [244], SHAPE.group))
    assert float(e.us[0]) == pytest.approx((t0 + 30) / 2) and int(e.flags()[0]) == Extrapolation.BELOW
    p = src.provenance("P", CallPart.PREFILL)
    assert p.floor_us == pytest.approx(t0) and p.floor_rule is FloorRule.SMALL_CELLS


def test_a_one_launch_mixed_step_is_one_call_through_prefill_and_mixed_cells():
    # triton-paged-prefill: prefill cells (128 new tokens over kv 1000 / 4000: 30, 45 µs) and one mixed cell, a
    # decode row over 1000 plus that 128-token chunk over 1000, 33 µs. The step joined is the mixed cell's own
    # coordinates: 4 + 1 work items, roof (512 · 2000 + 2048 · 129) / 1e6 µs, so it is priced at 33 µs; the prefill
    # part alone ignores the mixed cell (at 30 µs its own cell).
    def pre(kv: int) -> Workload:
        return Workload(phase="prefill", batch=1, q_len=128, kv_len=kv, num_q_heads=4, num_kv_heads=1, head_dim=128,
                        kv_layout="paged", page_size=16)
    mixed = Workload.varlen(None, [(1, 1000), (128, 1000)], num_q_heads=4, num_kv_heads=1, head_dim=128,
                            kv_layout="paged", page_size=16)
    b = "triton-paged-prefill"
    assert b in ONE_LAUNCH_MIXED and mixed.phase.value == "mixed"
    src = MeasuredCells(measurements(run([cell(pre(1000), b, 30.0), cell(pre(4000), b, 45.0), cell(mixed, b, 33.0)])),
                        SHAPE, CEIL)
    both = CallSums.of([128], [1000], SHAPE.group).joined(CallSums.of([1], [1000], SHAPE.group))
    assert (both.num_seqs, both.q_tokens, both.kv_tokens, both.pairs, both.tiles, both.top_q, both.top_kv) == (
        2.0, 129.0, 2000.0, 128 * 1000 - 128 * 127 / 2 + 1000, 5.0, 128.0, 1000.0)
    assert float(src.attention_us(b, CallPart.MIXED, both).us[0]) == pytest.approx(33.0)
    assert float(src.attention_us(b, CallPart.PREFILL, CallSums.of([128], [1000], SHAPE.group)).us[0]) == pytest.approx(30.0)
    p = src.provenance(b, CallPart.MIXED)
    assert p.cells == 3 and p.notes[0] == "mixed steps in one launch: 2 prefill and 1 mixed cells"


def test_a_call_is_never_faster_than_its_longest_sequence_alone():
    src = source()
    # three short sequences and one of 4,000: the 4-sequence level gives less than the b=1 cell at 4,000 (20 µs)
    assert one(src, [100, 100, 100, 4000])[0] == pytest.approx(20.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(1, 60_000)), min_size=1, max_size=12))
def test_scalar_vector_and_run_evaluators_agree(calls):
    src = source()
    n = np.array([c[0] for c in calls], dtype=np.float64)
    kv = np.array([c[0] * c[1] for c in calls], dtype=np.float64)
    top = np.array([c[1] for c in calls], dtype=np.float64)
    vec = src.attention_us("X", CallPart.DECODE, CallSums.decode(n, kv, top, 4))
    singles = [src.attention_us("X", CallPart.DECODE, CallSums.decode(n[i:i + 1], kv[i:i + 1], top[i:i + 1], 4))
               for i in range(len(calls))]
    assert np.allclose(vec.us, [s.us[0] for s in singles], rtol=1e-12)
    assert vec.flags().tolist() == [int(s.flags()[0]) for s in singles]
    b, L = calls[0]
    r = src.attention_us("X", CallPart.DECODE, CallSums.decode_run(b, b * L, L, 7, 4))
    steps = np.arange(7.0)
    each = src.attention_us("X", CallPart.DECODE, CallSums.decode(np.full(7, b), b * L + b * steps, L + steps, 4))
    assert np.allclose(r.us, each.us, rtol=1e-12) and r.flags().tolist() == each.flags().tolist()


def test_held_out_validation_by_hand():
    # one level, latency ∝ roof^0.5 through three cells. Held out, the middle one is predicted exactly (the power
    # law through its neighbours); the largest from its neighbour's efficiency (t ∝ r): sqrt(r3 / r2) − 1 too slow;
    # the smallest falls on the launch floor, which is then the middle cell: t2 / t1 − 1.
    kvs = (1000, 4000, 16000)
    t = [100 * math.sqrt(roof(1, kv)) for kv in kvs]
    cells = [cell(decode(1, kv), "Y", x) for kv, x in zip(kvs, t)]
    src = MeasuredCells(measurements(run(cells)), SHAPE, CEIL)
    v = src.provenance("Y", CallPart.DECODE).validation
    top = math.sqrt(roof(1, 16000) / roof(1, 4000)) - 1
    low = t[1] / t[0] - 1
    assert v.held_out == 3 and v.median_error == pytest.approx(min(top, low)) and v.worst_error == pytest.approx(max(top, low))
    assert v.worst == (decode(1, 16000).tag if top > low else decode(1, 1000).tag)


def test_fp8_cache_priced_from_bf16_cells_times_the_measured_factor():
    fp8 = SHAPE.__class__(4, 1, 128, "bfloat16", "float8_e4m3fn")
    bf16_src = source()
    # an FP8 cell at b=1, kv 4000 reads the bytes of bf16 at kv 2000; make it 1.25× what bf16 takes there
    t_bf16 = one(bf16_src, [2000])[0]
    w8 = decode(1, 4000, kv_dtype="float8_e4m3fn")
    src = source([cell(w8, "X", 1.25 * t_bf16)], shape=fp8)
    p = src.provenance("X", CallPart.DECODE)
    assert p.fp8_factor == pytest.approx(1.25, rel=1e-9) and p.fp8_cells == 1
    us, flags = one(src, [4000])
    assert us == pytest.approx(1.25 * t_bf16, rel=1e-9) and flags & Extrapolation.KV_DTYPE
    with pytest.raises(StepCostError, match="never measured with kv_dtype float8_e4m3fn in phase decode"):
        source(shape=fp8).provenance("X", CallPart.DECODE)


def test_a_backend_never_measured_in_a_phase_is_one_error():
    src = source()
    with pytest.raises(StepCostError) as info:
        src.attention_us("X", CallPart.PREFILL, CallSums.of([100], [100], 4))
    assert str(info.value) == ("backend X was never measured in phase prefill at dtype bfloat16 in this store "
                               "(measured only in decode); pair it with a prefill backend: --backend DECODE+PREFILL")
    with pytest.raises(StepCostError, match="backend nope was never measured in phase decode .* .no usable cell at all."):
        src.provenance("nope", CallPart.DECODE)


def test_rest_of_the_step_by_hand():
    m = parse_model_spec("layers=2,hq=4,hkv=1,d=8,hidden=32,intermediate=64,vocab=100")
    ceil = Ceilings(copy_gbps=1000.0, copy_bytes=0, matmul_tflops=1.0, matmul_n=0, dtype="bfloat16", method="t",
                    read_gbps=1000.0)  # 1e6 FLOPs and 1e6 bytes per µs
    rest = RestOfStep(m, ceil, max_tokens=2000, max_sampled=10)

    def gemm(mrows: int, k: int, n: int) -> float:
        return max(2 * mrows * k * n / 1e6, (k * n + mrows * (k + n)) * 2 / 1e6)

    def layer(t: int) -> float:  # qkv 32 → 48, o 32 → 32, gate+up 32 → 128, down 64 → 32
        return gemm(t, 32, 48) + gemm(t, 32, 32) + gemm(t, 32, 128) + gemm(t, 64, 32)

    for t, s in ((1, 1), (1000, 3), (2000, 10)):
        assert rest.at(t, s) == pytest.approx(2 * layer(t) + gemm(s, 32, 100))
    assert rest.us(np.array([1, 1000]), np.array([1, 3])).tolist() == pytest.approx([rest.at(1, 1), rest.at(1000, 3)])


def test_median_ceilings():
    a = Ceilings(4000.0, 0, 600.0, 0, "bfloat16", "a", read_gbps=4600.0)
    b = Ceilings(4200.0, 0, 700.0, 0, "bfloat16", "b", read_gbps=4700.0)
    c = Ceilings(4300.0, 0, 690.0, 0, "bfloat16", "c")  # no read ceiling: its copy figure stands in
    m = median_ceilings([a, b, c])
    assert (m.bandwidth_gbps, m.matmul_tflops) == (4600.0, 690.0)
    with pytest.raises(StepCostError, match="no run in the store recorded its ceilings"):
        median_ceilings([])


def test_shared_pages_priced_from_the_shared_prefix_cells():
    # a shared-prefix cell: 4 sequences of 4,000 tokens, the first 2,000 on one set of pages; the unshared call is
    # the (4, 4000) cell, 40 µs; measured 31 µs: (1 − 31/40) / (3 · 2000 / 16000) = 0.225 / 0.375 = 0.6 of a
    # duplicate read's cost saved
    w = decode(4, 4000, shared_prefix_len=2000)
    src = source([cell(w, "X", 31.0)])
    saving, n = src.shared_saving("X")
    assert saving == pytest.approx(0.6, rel=1e-9) and n == 1
    assert src.provenance("X", CallPart.DECODE).shared_saving == pytest.approx(0.6) and source().shared_saving("X") is None
    base = src.attention_us("X", CallPart.DECODE, CallSums.decode(np.array([4.0]), np.array([16000.0]), np.array([4000.0]), 4))
    half = CallSums.decode(np.array([4.0]), np.array([16000.0]), np.array([4000.0]), 4, shared_kv=np.array([6000.0]))
    assert float(base.us[0]) == pytest.approx(40.0, rel=1e-9)
    assert float(src.attention_us("X", CallPart.DECODE, half).us[0]) == pytest.approx(40.0 * (1 - 0.6 * 6000 / 16000))
    run_ = CallSums.decode_run(4, 16000, 4000, 3, 4, shared_kv=6000)  # the same in a decode run, and per step
    got = src.attention_us("X", CallPart.DECODE, run_).us
    plain = src.attention_us("X", CallPart.DECODE, CallSums.decode_run(4, 16000, 4000, 3, 4)).us
    assert got == pytest.approx(plain * (1 - 0.6 * 6000 / run_.kv_tokens))
    # a backend without shared-prefix cells prices shared pages as unshared; the prefill part never applies it
    assert float(source().attention_us("X", CallPart.DECODE, half).us[0]) == pytest.approx(40.0, rel=1e-9)
