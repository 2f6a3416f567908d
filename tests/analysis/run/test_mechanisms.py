"""Mechanisms as typed findings (:mod:`profattn.analysis.run.mechanisms`): kernel roles from real kernel names, executed
against required work, the gap's parts and the findings that explain it, all on hand-computed numbers; and the one
sentence :mod:`profattn.report.mechanisms` writes from them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from factories import cell, kernel, run
from profattn.analysis.run.mechanisms import (
    Bound, ExtraKernels, ExtraWork, GapPart, Grid, HostGap, KernelRole, Rate, Traffic, WorkCause, bound_of, call_profile,
    cell_gap, executed_pairs, findings, gap, kernel_roles, layout_copy_us,
)
from profattn.report.mechanisms import mechanism_text
from profattn.results import Ceilings, CounterSummary
from profattn.workload import Workload

# names as the committed H200 traces record them
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1"
TRIL = "void at::native::triu_tril_kernel<bool, int, false, 8, false>(at::cuda::detail::TensorInfo<bool, int>)"
WHERE = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::where_kernel_impl>>"
FILL_BOOL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<bool>, std::array<char*, 1>>"
FILL_BF16 = "void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1>>"
GATHER = "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)"
SPLIT = "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>"
COMBINE = "void pytorch_flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>"
INDICES = "void flashinfer::BlockSparseIndicesToVectorSparseOffsetsKernel<int>(int*, int*, int*, unsigned int)"
MUL = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, MulFunctor>>>"

CHUNK = Workload(phase="prefill", batch=2, q_len=4, kv_len=8, num_q_heads=2, num_kv_heads=1, head_dim=16,
                 kv_layout="paged", page_size=4, append=True)
CEIL = Ceilings(4000.0, 1 << 30, 500.0, 8192, "bfloat16", "test", read_gbps=5000.0)


def roles(c) -> dict[str, KernelRole]:
    return {k.name: r for k, r in kernel_roles(c)}


def test_kernel_roles_from_names():
    masked = cell(CHUNK, "sdpa-cudnn", 100.0, family="cudnn",
                  kernels=(kernel(CUDNN, 132, 80.0), kernel(TRIL, 64, 4.0), kernel(WHERE, 64, 3.0),
                           kernel(FILL_BOOL, 16, 1.0), kernel(FILL_BF16, 1, 0.5)))
    r = roles(masked)
    # the where and the scalar fill turn the built mask into a bias: part of the mask build in this call
    assert r == {CUDNN: KernelRole.ATTENTION, TRIL: KernelRole.MASK, WHERE: KernelRole.MASK,
                 FILL_BOOL: KernelRole.MASK, FILL_BF16: KernelRole.MASK}
    plain = cell(CHUNK, "x", 10.0, kernels=(kernel(SPLIT, 224, 6.0), kernel(COMBINE, 32, 2.0), kernel(FILL_BF16, 1, 1.0),
                                          kernel(GATHER, 1024, 3.0), kernel(INDICES, 132, 1.0), kernel(MUL, 8, 0.5)))
    assert roles(plain) == {SPLIT: KernelRole.ATTENTION, COMBINE: KernelRole.COMBINE, FILL_BF16: KernelRole.FILL,
                            GATHER: KernelRole.LAYOUT, INDICES: KernelRole.INDEX, MUL: KernelRole.OTHER}
    # in the dense composite (eager, SDPA's math path) PyTorch's element-wise kernels are the attention itself
    eager = replace(plain, family="dense")
    assert roles(eager)[MUL] is KernelRole.ATTENTION
    assert layout_copy_us(plain) == 3.0 and layout_copy_us(masked) is None
    assert kernel_roles(cell(CHUNK, "x", 10.0)) == ()  # no trace: no roles


def test_executed_pairs_padding_and_an_explicit_mask():
    # bottom-right causal, q 4 over kv 8: rows see 5, 6, 7, 8 keys → 26 pairs per sequence, 52 for B = 2
    assert CHUNK.attended_pairs == 52
    masked = cell(CHUNK, "sdpa-cudnn", 100.0, family="cudnn", kernels=(kernel(CUDNN, 132, 80.0), kernel(TRIL, 64, 4.0)))
    assert executed_pairs(masked) == (64, WorkCause.DENSE_MASK)  # the 4 × 8 rectangle, twice
    assert executed_pairs(cell(CHUNK, "x", 100.0, kernels=(kernel(CUDNN, 132, 80.0),))) is None  # no mask built
    padded = replace(cell(CHUNK, "x", 100.0), executed_pairs=80)
    assert executed_pairs(padded) == (80, WorkCause.PADDING)
    assert executed_pairs(replace(padded, executed_pairs=52)) is None  # nothing beyond the required pairs
    # decode: the rectangle of one query row is its causal pairs, so a mask adds no work
    dec = Workload(phase="decode", batch=2, q_len=1, kv_len=8, num_q_heads=2, num_kv_heads=1, head_dim=16)
    assert executed_pairs(cell(dec, "eager", 5.0, kernels=(kernel(TRIL, 1, 1.0),))) is None


def test_a_prompts_profile_sums_its_chunks():
    a = cell(CHUNK.with_(q_len=4, kv_len=4), "b", 50.0, kernels=(kernel(CUDNN, 132, 40.0),))
    b = cell(CHUNK, "b", 100.0, kernels=(kernel(CUDNN, 132, 80.0), kernel(TRIL, 64, 4.0), kernel(WHERE, 64, 6.0)))
    r = replace(run([a, b]), ceilings=CEIL)
    p = call_profile([a, b], r)
    assert (p.calls, p.latency_us, p.gpu_us, p.launches) == (2, 150.0, 130.0, 4)
    assert [(x.role, x.launches, x.gpu_us) for x in p.roles] == [(KernelRole.ATTENTION, 2, 120.0), (KernelRole.MASK, 2, 10.0)]
    assert (p.attention_us, p.extra_us, p.host_us) == (120.0, 10.0, 20.0)
    # required: chunk 0 (4 × 4 causal: 10 pairs/seq) + chunk 1 (26/seq), × B 2 → 72 pairs; the masked chunk executes 64
    four_hq_d = 4 * CHUNK.num_q_heads * CHUNK.head_dim  # FLOPs per pair
    assert p.flops == 72 * four_hq_d and p.executed_flops == (20 + 64) * four_hq_d and p.work_cause is WorkCause.DENSE_MASK
    assert p.kernel_tflops == pytest.approx(84 * four_hq_d / 120e-6 / 1e12)
    assert p.ctas == (132,) and p.waves == () and p.dram_bytes is None
    with pytest.raises(ValueError):
        call_profile([a, cell(CHUNK, "other", 1.0)], r)


def test_gap_parts_and_what_explains_them():
    w = Workload(phase="decode", batch=8, q_len=1, kv_len=4096, num_q_heads=16, num_kv_heads=4, head_dim=128,
                 kv_layout="paged", page_size=16)
    fast = cell(w, "triton-paged-decode", 30.0, kernels=(kernel("_paged_decode_split_kernel", 512, 26.0),))
    slow = cell(w, "torch-paged-reference", 100.0, kernels=(kernel(CUDNN, 32, 45.0), kernel(GATHER, 4096, 45.0)))
    req = w.requested_bytes
    fast = replace(fast, counters=CounterSummary(req * 1.02, 0.0, req * 1.02, None, None, ()))
    slow = replace(slow, counters=CounterSummary(req * 2.0, 0.0, req * 2.0, None, None, ()))
    r = replace(run([fast, slow]), ceilings=CEIL)
    g = cell_gap(fast, slow, r)
    # Δ 70 µs: the gather 45 (extra kernels), the attention kernel +19 (45 − 26), launch gaps +6 (10 − 4)
    assert g.delta_us == 70.0
    assert [(p, round(us, 6)) for p, us in g.parts] == [(GapPart.EXTRA, 45.0), (GapPart.ATTENTION, 19.0), (GapPart.HOST, 6.0)]
    kinds = [type(f) for f in g.explains]
    # extra kernels first (the largest part), then the attention kernel's evidence: traffic 2.00× vs 1.02× and the
    # 32 CTAs that leave 100 of 132 SMs idle; both rates last. The host part (6 µs) is under 10 % of the gap
    assert kinds == [ExtraKernels, Traffic, Grid, Rate, Rate]
    extra, traffic, grid = g.explains[:3]
    assert (extra.role, extra.gpu_us, extra.share) == (KernelRole.LAYOUT, 45.0, 0.5)
    assert traffic.dram_ratio == pytest.approx(2.0) and (grid.ctas_min, grid.idle_sms) == (32, 100)
    rate = g.explains[4]
    assert rate.backend == "torch-paged-reference" and rate.gbps == pytest.approx(req / 100e-6 / 1e9)
    assert rate.gbps_fraction == pytest.approx(rate.gbps / 5000.0) and rate.roof_kind == "read"
    assert rate.floor_us == pytest.approx(max(w.flops / 500e12, req / 5000e9) * 1e6) and rate.floor_kind == "bytes"
    text = mechanism_text(g, w.phase)
    assert text.startswith("torch-paged-reference adds a layout copy (1 launch, 45.0 µs, 50 % of its GPU time); it moves ")
    assert "launches 32 CTAs on 132 SMs, 100 SMs idle against 512 for triton-paged-decode" in text
    assert "it streams" in text and "of the read roof" in text


def test_no_ceilings_no_trace_no_finding():
    w = CHUNK
    a, b = cell(w, "a", 10.0), cell(w, "b", 20.0)
    g = cell_gap(a, b, run([a, b]))  # a CPU-like run: no ceilings, no traces
    assert g.parts == () and g.explains == () and findings(g.behind) == ()
    assert mechanism_text(g, w.phase) == ""  # nothing to explain the gap with: nothing is said


def test_bound_rule():
    assert bound_of(0.6, 0.1, 9.0, 10.0) is Bound.COMPUTE
    assert bound_of(0.1, 0.55, 9.0, 10.0) is Bound.BANDWIDTH
    assert bound_of(0.1, 0.1, 5.0, 10.0) is Bound.LAUNCH  # kernels under 60 % of the latency
    assert bound_of(0.1, 0.1, 9.0, 10.0, at_floor=True) is Bound.LAUNCH
    assert bound_of(0.1, 0.1, 9.0, 10.0) is Bound.NEITHER
    assert bound_of(None, None, None, 10.0, measured=False) is Bound.UNKNOWN and bound_of(None, None, None, None) is Bound.UNKNOWN


def test_host_gap_and_extra_work_findings():
    masked = cell(CHUNK, "sdpa-cudnn", 100.0, family="cudnn", kernels=(kernel(CUDNN, 132, 30.0), kernel(TRIL, 64, 4.0)))
    p = call_profile([masked], replace(run([masked]), ceilings=CEIL))
    fs = findings(p)
    host = next(f for f in fs if isinstance(f, HostGap))
    assert (host.host_us, host.launch_bound) == (66.0, True)  # 34 µs of kernels in 100
    work = next(f for f in fs if isinstance(f, ExtraWork))
    assert (work.executed_flops, work.required_flops) == (CHUNK.flops_for_pairs(64), CHUNK.flops) and work.ratio == 64 / 52
    other = cell(CHUNK, "b", 50.0, kernels=(kernel(CUDNN, 132, 45.0),))
    g = gap(call_profile([other], replace(run([other]), ceilings=CEIL)), p)
    assert GapPart.HOST is g.main_part and isinstance(g.explains[0], HostGap)
