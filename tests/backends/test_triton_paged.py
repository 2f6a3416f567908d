"""Our Triton paged decode kernel against a torch reference (TRITON_INTERPRET=1 on CPU), and the split rule.

The interpreter runs tl.dot on bf16 wrongly (triton 3.9's numpy path), so CPU runs use fp16 and fp32;
bf16 is checked on the GPU by the profile run's correctness check.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from profattn.backends.eager import eager_attention  # noqa: E402
from profattn.backends.triton_paged import choose_num_splits, paged_decode  # noqa: E402
from profattn.workload.paged import PagedKVCache  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def reference(q, cache):
    outs = []
    for b in range(q.shape[0]):
        k, v = cache.gather(b)
        outs.append(eager_attention(q[b:b + 1, :, None].double(), k[None].double(), v[None].double(), mask=None)[0, :, 0])
    return torch.stack(outs)


@pytest.mark.parametrize("page_size", [16, 64, 256])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (16, 2)])  # GQA groups 1, 4, 8
@pytest.mark.parametrize("combine", ["separate", "fused"])
def test_kernel_matches_reference(page_size, hq, hkv, combine):
    g = torch.Generator().manual_seed(page_size * 100 + hq)
    d, dtype = 32, torch.float16
    lens = [1, 300, page_size * 2, 129]  # a length-1 sequence, a partial last page, an exact multiple
    n = max(lens)
    q = torch.randn(len(lens), hq, d, generator=g).to(DEVICE, dtype)
    k = torch.randn(len(lens), hkv, n, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(len(lens), hkv, n, d, generator=g).to(DEVICE, dtype)
    cache = PagedKVCache.from_dense(k, v, page_size=page_size, seq_lens=lens, extra_pages=4, generator=g)
    out = paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=n, num_sms=132,
                       combine=combine)
    assert out.shape == q.shape and torch.isfinite(out).all()  # NaN-filled free pages and tails were never read
    ref = reference(q, cache)
    err = (out.double() - ref).norm() / ref.norm()
    assert err < 2e-3, err


def test_kernel_shared_prefix_fp32_single_and_many_splits():
    g = torch.Generator().manual_seed(5)
    d, hq, hkv, page = 64, 8, 2, 16
    lens = [96, 64, 200]
    n = max(lens)
    q = torch.randn(3, hq, d, generator=g).to(DEVICE)
    k = torch.randn(3, hkv, n, d, generator=g).to(DEVICE)
    v = torch.randn(3, hkv, n, d, generator=g).to(DEVICE)
    k[1:, :, :64] = k[:1, :, :64]
    v[1:, :, :64] = v[:1, :, :64]
    cache = PagedKVCache.from_dense(k, v, page_size=page, seq_lens=lens, shared_prefix_len=64, generator=g)
    ref = reference(q, cache)
    ws: dict = {}
    for sms, combine in ((1, "fused"), (132, "separate"), (132, "fused"), (132, "fused")):
        # one split (direct write, no combine), then several; the fused combine twice on one workspace:
        # the last-arriving program must re-arm the arrival counters for the next step
        out = paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=n,
                           num_sms=sms, combine=combine, workspace=ws)
        assert ((out.double() - ref).norm() / ref.norm()) < 1e-5
    assert (ws["arrivals"] == 0).all()


def test_split_rule_hand_checked():
    """The wave-quantization rule, by hand (132 SMs, 32-token tiles, W = 4 x 132 = 528 programs per wave):
    cost(s) = ceil(P*s/W) * (ceil(T/s) + 2) + [s > 1] * (1 + s/64)."""
    # seed decode at kv 8192: P = 32, T = 256. s=16: 1 wave x (16+2) + 1.25 = 19.25; s=32: 2 waves x (8+2) + 1.5
    # = 21.5; s=14 (19 tiles): 21 + 1.22 -> 16 splits of 512 tokens, 512 programs
    p = choose_num_splits(batch=8, num_kv_heads=4, max_kv_len=8192, num_sms=132)
    assert (p.num_splits, p.tokens_per_split, p.ctas) == (16, 512, 512)
    # kv 512: T = 16; s=16: 1 x (1+2) + 1.25 = 4.25 beats s=8: 1 x (2+2) + 1.125 -> one-tile splits
    p = choose_num_splits(batch=8, num_kv_heads=4, max_kv_len=512, num_sms=132)
    assert (p.num_splits, p.tokens_per_split, p.ctas) == (16, 32, 512)
    # B=64: P = 256. s=1: 258; s=2: 1 wave x 130 + 1.03; s=3: 768 programs = 2 waves x 88; s=4: 2 x 66 + 1.06
    # -> 2 splits (the old "fill the GPU" rule took 3: 1.45 waves, measured 1.24x slower at kv 8192)
    p = choose_num_splits(batch=64, num_kv_heads=4, max_kv_len=8192, num_sms=132)
    assert (p.num_splits, p.tokens_per_split, p.ctas) == (2, 4096, 512)
    # B=96, Hkv=8: P = 768. s=1: 2 waves x 258 = 516; s=2: 3 waves x 130 + 1.03 = 391; s=4: 6 x 66 + 1.06 = 397
    p = choose_num_splits(batch=96, num_kv_heads=8, max_kv_len=8192, num_sms=132)
    assert (p.num_splits, p.ctas) == (2, 1536)
    # P = 2048 >= 2 waves: one split, whatever the model (s=9 would model 35 waves x 116 + 1.14 = 4061 < 4 x 1026)
    p = choose_num_splits(batch=256, num_kv_heads=8, max_kv_len=32768, num_sms=132)
    assert (p.num_splits, p.ctas) == (1, 2048)
    assert choose_num_splits(batch=256, num_kv_heads=16, max_kv_len=32768, num_sms=132).num_splits == 1
    # ties: B=1, Hkv=2, kv 32768 (T = 1024): s=205 (5 tiles, 410 programs) models 7 + 1 + 3.2 = 11.2, s=256 (4 tiles,
    # 512 programs) 6 + 1 + 4 = 11.0: 1.8 % apart, beyond the 1.5 % tie -> 256 (measured 22.3 vs 24.1 us)
    assert choose_num_splits(batch=1, num_kv_heads=2, max_kv_len=32768, num_sms=132).num_splits == 256
    # one short sequence: T = 4 -> s=4: 3 + 1.06 beats s=2: 4 + 1.03
    p = choose_num_splits(batch=1, num_kv_heads=4, max_kv_len=100, num_sms=132)
    assert (p.num_splits, p.tokens_per_split) == (4, 32)
    # other knobs: 64-token tiles, 2 per SM (W = 264): T = 128; s=8: 1 wave x (16+2) + 1.125 = 19.1; s=16: 2 x 10 + 1.25
    p = choose_num_splits(batch=8, num_kv_heads=4, max_kv_len=8192, num_sms=132, block_n=64, ctas_per_sm=2)
    assert (p.num_splits, p.tokens_per_split, p.ctas) == (8, 1024, 256)
    # at least 2 tiles per split: kv 512 -> 8 splits of 64
    p = choose_num_splits(batch=8, num_kv_heads=4, max_kv_len=512, num_sms=132, min_blocks_per_split=2)
    assert (p.num_splits, p.tokens_per_split) == (8, 64)
    with pytest.raises(ValueError, match="must be >= 1"):
        choose_num_splits(batch=0, num_kv_heads=4, max_kv_len=512, num_sms=132)


def test_split_rule_counts_only_busy_programs_of_a_ragged_batch():
    """B=64, Hkv=4, one sequence of 8192 keys and 63 of 512 (T = 256 tiles): as if uniform, 2 splits (512 programs);
    with the lengths only busy programs run (a work list): busy(s) = 4 * sum(ceil(len / (32 ceil(256/s)))).
    s=2: 260 busy, 1 wave x 130 + 1.03; s=16: 4 x (16 + 63) = 316 busy, 1 wave x 18 + 1.25 = 19.25;
    s=43 (6 tiles, 192 tokens): 4 x (43 + 63 x 3) = 928 busy, 2 waves x 8 + 1.67 = 17.67 -> 43 splits of 192."""
    from profattn.backends.triton_paged import work_list

    lens = (8192,) + (512,) * 63
    assert choose_num_splits(batch=64, num_kv_heads=4, max_kv_len=8192, num_sms=132).num_splits == 2
    p = choose_num_splits(batch=64, num_kv_heads=4, max_kv_len=8192, num_sms=132, kv_lens=lens)
    assert (p.num_splits, p.tokens_per_split) == (43, 192)
    assert len(work_list(lens, p)) * 4 == 928
    with pytest.raises(ValueError, match="kv_lens must hold 64 lengths"):
        choose_num_splits(batch=64, num_kv_heads=4, max_kv_len=4096, num_sms=132, kv_lens=lens)


def test_work_list_packs_busy_items():
    from profattn.backends.triton_paged import split_plan, work_list

    plan = split_plan(batch=3, num_kv_heads=1, max_kv_len=100, num_splits=4)  # 32-token splits
    assert work_list((100, 20, 64), plan) == [0, 1, 2, 3, 65536, 131072, 131073]
    assert work_list((100, 20, 64), plan, window=40) == [0, 1, 65536, 131072, 131073]


@pytest.mark.parametrize("combine", ["separate", "fused"])
@pytest.mark.parametrize("window", [None, 40])
def test_ragged_batch_through_a_work_list_matches_reference(combine, window):
    """Only the busy (sequence, split) programs run; the combine reads each sequence's own split count."""
    from profattn.backends.triton_paged import split_plan, work_list

    g = torch.Generator().manual_seed(11)
    d, hq, hkv, page = 32, 8, 2, 16
    lens = [300, 1, 45, 128, 17]
    n = max(lens)
    q = torch.randn(len(lens), hq, d, generator=g).to(DEVICE, torch.float16)
    k = torch.randn(len(lens), hkv, n, d, generator=g).to(DEVICE, torch.float16)
    v = torch.randn(len(lens), hkv, n, d, generator=g).to(DEVICE, torch.float16)
    cache = PagedKVCache.from_dense(k, v, page_size=page, seq_lens=lens, extra_pages=4, generator=g)
    spans = tuple(x if window is None else min(x, window) for x in lens)
    plan = split_plan(batch=len(lens), num_kv_heads=hkv, max_kv_len=max(spans), num_splits=4, block_n=16)
    assert plan.num_splits > 1
    items = work_list(spans, plan)
    assert len(items) < len(lens) * plan.num_splits  # the short sequences' empty splits are not launched
    work = torch.tensor(items, dtype=torch.int32, device=DEVICE)
    out = paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=n,
                       num_sms=132, plan=plan, combine=combine, window=window, work=work)
    outs = []
    for b, nk in enumerate(lens):
        kk, vv = cache.gather(b)
        lo = 0 if window is None else max(0, nk - window)
        outs.append(eager_attention(q[b:b + 1, :, None].double(), kk[None, :, lo:].double(), vv[None, :, lo:].double(),
                                    mask=None)[0, :, 0])
    ref = torch.stack(outs)
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()) < 2e-3


def test_launch_choice():
    from profattn.backends.triton_paged import FP8_BLOCK_N, choose_launch

    seed = choose_launch(batch=8, num_kv_heads=4, max_kv_len=8192, num_sms=132, head_dim=128)
    assert (seed.plan.num_splits, seed.plan.block_n, seed.num_warps, seed.num_stages) == (16, 32, 4, 3)
    # no split and long sequences: 64-token tiles, 2 stages
    big = choose_launch(batch=128, num_kv_heads=4, max_kv_len=8192, num_sms=132, head_dim=128)
    assert (big.plan.num_splits, big.plan.tokens_per_split, big.plan.block_n, big.num_stages) == (1, 8192, 64, 2)
    # no split, one wave of short sequences: stays on 32-token tiles; more than a wave: 64
    assert choose_launch(batch=128, num_kv_heads=4, max_kv_len=512, num_sms=132, head_dim=128).plan.block_n == 32
    assert choose_launch(batch=256, num_kv_heads=4, max_kv_len=512, num_sms=132, head_dim=128).plan.block_n == 64
    # a split plan whose programs exceed a wave takes 4 stages (B=96, Hkv=8: 2 splits, 1,536 programs)
    assert choose_launch(batch=96, num_kv_heads=8, max_kv_len=8192, num_sms=132, head_dim=128).num_stages == 4
    ragged = choose_launch(batch=64, num_kv_heads=4, max_kv_len=8192, num_sms=132, head_dim=128,
                           kv_lens=(8192,) + (512,) * 63)
    assert (ragged.plan.num_splits, ragged.num_stages) == (43, 4)  # 928 busy programs > 528
    fp8 = choose_launch(batch=8, num_kv_heads=4, max_kv_len=8192, num_sms=132, head_dim=128, quantized=True)
    assert (fp8.plan.block_n, fp8.num_warps, fp8.num_stages) == (FP8_BLOCK_N, 2, 3)


def test_tiles_are_counted_in_bytes():
    """head_dim 64 takes twice the tokens per tile (the bytes of a head_dim-128 tile), capped at 128 tokens."""
    from profattn.backends.triton_paged import choose_launch, tile_tokens

    assert [tile_tokens(32, d) for d in (32, 64, 128, 256)] == [128, 64, 32, 32]
    assert [tile_tokens(64, d) for d in (32, 64, 128, 256)] == [128, 128, 64, 64]
    with pytest.raises(ValueError):
        tile_tokens(32, 0)
    # B=65, Hkv=8, kv 5392, d 64: 64-token tiles, 85 of them; one split (520 programs, one wave: 87 tile-times
    # against 2 waves x (43 + 2) + 1.03 for two splits) and a long sequence: the direct launch, 128-token tiles
    one = choose_launch(batch=65, num_kv_heads=8, max_kv_len=5392, num_sms=132, head_dim=64)
    assert (one.plan.num_splits, one.plan.block_n, one.num_stages) == (1, 128, 2)
    # the same call counted at head_dim 128: 32-token tiles, one split, the direct launch's 64-token tiles
    tok = choose_launch(batch=65, num_kv_heads=8, max_kv_len=5392, num_sms=132, head_dim=128)
    assert (tok.plan.num_splits, tok.plan.block_n) == (1, 64)
    # B=60, Hkv=4, kv 8960, d 64: 140 tiles of 64; two splits of 70 (480 programs in one wave: 73.03 against 142)
    two = choose_launch(batch=60, num_kv_heads=4, max_kv_len=8960, num_sms=132, head_dim=64)
    assert (two.plan.num_splits, two.plan.tokens_per_split, two.plan.block_n, two.num_stages) == (2, 4480, 64, 3)


def test_split_plan_rounds_to_whole_tiles_and_drops_empty_splits():
    from profattn.backends.triton_paged import split_plan

    p = split_plan(batch=64, num_kv_heads=4, max_kv_len=8192, num_splits=3)
    assert (p.num_splits, p.tokens_per_split, p.ctas) == (3, 86 * 32, 768)
    p = split_plan(batch=1, num_kv_heads=4, max_kv_len=100, num_splits=3)  # 4 tiles: 2 per split, 2 splits
    assert (p.num_splits, p.tokens_per_split) == (2, 64)
    assert split_plan(batch=1, num_kv_heads=1, max_kv_len=40, num_splits=9).num_splits == 2  # never more than tiles
    with pytest.raises(ValueError):
        split_plan(batch=1, num_kv_heads=1, max_kv_len=40, num_splits=0)


def test_combine_schedule_by_split_count():
    from profattn.backends.triton_paged import FUSED_MAX_SPLITS, combine_for

    assert combine_for(1) == "direct" and combine_for(1, "separate") == "direct"
    assert combine_for(2) == combine_for(FUSED_MAX_SPLITS) == "fused"
    assert combine_for(FUSED_MAX_SPLITS + 1) == "separate" and combine_for(16, "fused") == "fused"
    with pytest.raises(ValueError, match="combine must be one of"):
        combine_for(2, "tree")


def test_schedule_settings_from_the_environment(monkeypatch):
    """The two review knobs: the split rule's CTAs per SM and the combine schedule; bad values -> Unsupported."""
    from profattn.backends.base import Unsupported
    from profattn.backends.triton_paged import (CTAS_PER_SM, TritonPagedDecode, combine_setting,
                                                ctas_per_sm_setting)
    from profattn.workload import Workload

    monkeypatch.delenv("PROFATTN_PAGED_COMBINE", raising=False)
    monkeypatch.delenv("PROFATTN_PAGED_CTAS_PER_SM", raising=False)
    assert combine_setting() == "auto" and ctas_per_sm_setting() == CTAS_PER_SM
    monkeypatch.setenv("PROFATTN_PAGED_COMBINE", "fused")
    monkeypatch.setenv("PROFATTN_PAGED_CTAS_PER_SM", "1")
    w = Workload(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128,
                 kv_layout="paged", page_size=16)
    notes = " ".join(TritonPagedDecode().prepare(w, torch.device(DEVICE)).notes)
    assert "4 splits x 2048 tokens, 128 CTAs = 0.97 waves of 1 per SM" in notes and "last-arriving" in notes and "$PROFATTN_PAGED_COMBINE" in notes
    for var, bad in (("PROFATTN_PAGED_COMBINE", "both"), ("PROFATTN_PAGED_CTAS_PER_SM", "0"),
                     ("PROFATTN_PAGED_CTAS_PER_SM", "33"), ("PROFATTN_PAGED_CTAS_PER_SM", "99999999999999999999"),
                     ("PROFATTN_PAGED_CTAS_PER_SM", "\uff11"), ("PROFATTN_PAGED_CTAS_PER_SM", "1.5")):
        monkeypatch.setenv(var, bad)
        with pytest.raises(Unsupported, match=var):
            TritonPagedDecode().prepare(w, torch.device(DEVICE))
        monkeypatch.setenv(var, "fused" if var.endswith("COMBINE") else "4")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's bf16 path is a CPU-only concern")
def test_bf16_cell_under_the_interpreter_runs_in_fp16_and_says_so():
    """The README's example (``TRITON_INTERPRET=1 profattn profile --regime decode --backend
    triton-paged-decode``) used to report every bf16 cell incorrect (rel err ~4e9): the interpreter's bf16
    dot is wrong, not the kernel. The cell now runs in fp16 (cast outside the timed call), passes, and says so."""
    from profattn.backends import get_backend
    from profattn.backends.triton_paged import interpreter_dtype
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference as high_precision
    from profattn.results import CellStatus
    from profattn.workload import Workload

    cpu = torch.device("cpu")
    assert interpreter_dtype(cpu, "bfloat16") == "float16"
    assert interpreter_dtype(cpu, "float32") == "float32"
    w = Workload(phase="decode", batch=2, q_len=1, kv_len=100, num_q_heads=8, num_kv_heads=2, head_dim=16,
                 kv_layout="paged", page_size=16, dtype="bfloat16")
    inputs = make_inputs(w, cpu, seed=1)
    cell, _ = run_cell(w, get_backend("triton-paged-decode"), inputs, high_precision(w, inputs), cpu)
    assert cell.status == CellStatus.OK, cell.reason
    assert cell.correctness.out_rel_err < 1e-2
    assert any("ran in float16 under TRITON_INTERPRET=1" in n for n in cell.notes)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's launch range is a CPU-only concern")
def test_a_profiled_interpreter_cell_passes_the_family_check(tmp_path, monkeypatch):
    """The README's example on a CPU flagged every triton-paged-decode cell "✗ family: no triton operator among the
    9 that ran": the interpreter records no operator naming the kernel. Each launch now runs inside a
    ``triton-interpreter::<kernel>`` range, the evidence TRITON matches; the eager cell beside it stays dense."""
    from profattn.analysis.run.cells import attach_trace
    from profattn.backends import get_backend
    from profattn.families import TRITON
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference as high_precision
    from profattn.harness.profiler import profile_cells
    from profattn.trace import load_trace
    from profattn.workload import Workload

    cpu = torch.device("cpu")
    w = Workload(phase="decode", batch=2, q_len=1, kv_len=400, num_q_heads=8, num_kv_heads=2, head_dim=16,
                 kv_layout="paged", page_size=16, dtype="float32")  # kv 400, d16: 4 splits of 128 tokens; the combine kernel runs too
    monkeypatch.setenv("PROFATTN_PAGED_COMBINE", "separate")
    inputs = make_inputs(w, cpu, seed=1)
    ref = high_precision(w, inputs)
    ran = [(get_backend(b), *run_cell(w, get_backend(b), inputs, ref, cpu)) for b in ("triton-paged-decode", "eager")]
    trace = load_trace(profile_cells([p for _, _, p in ran], tmp_path, device=cpu, calls=2))
    ours, eager = (attach_trace(c, trace, "t", b.family).trace for b, c, _ in ran)
    split, combine = "triton-interpreter::_paged_decode_split_kernel", "triton-interpreter::_paged_decode_combine_kernel"
    assert (ours.calls, ours.family_ok, ours.family_note) == (2, True, f"triton operators ran: {combine}, {split}")
    assert ours.ops[:2] == (split, combine)
    assert eager.family_ok is True and eager.family_note.startswith("dense operators ran")
    assert [op for op in eager.ops if TRITON.matches_op(op)] == []


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_ragged_appending_decode_step_cell(dtype):
    """A decode step given per sequence (``mix=``, each sequence appending its new token first): the kernel reads
    the appended token through the block table (a bf16 cell casts after the append, under the interpreter)."""
    from profattn.backends import get_backend
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference as high_precision
    from profattn.results import CellStatus
    from profattn.workload import parse_workload_spec

    dev = torch.device(DEVICE)
    w = parse_workload_spec(f"mix=(q1,kv70)+2x(q1,kv17)+(q1,kv33),hq=8,hkv=2,d=16,page=16,append=true,dtype={dtype}")
    inputs = make_inputs(w, dev, seed=3)
    cell, _ = run_cell(w, get_backend("triton-paged-decode"), inputs, high_precision(w, inputs), dev)
    assert cell.status == CellStatus.OK, cell.reason
    assert cell.correctness.cache_ok is True and cell.append_timing is not None


# ---- FP8 E4M3 cache (Workload.kv_dtype) --------------------------------------------------------------------------
@pytest.mark.parametrize("combine,fp8_dot", [("separate", "float16"), ("fused", "float16"), ("separate", "query")])
def test_fp8_kernel_matches_the_dequantized_fp64_reference(combine, fp8_dot):
    """Triton's interpreter loads float8_e4m3fn on the CPU (checked: codes come back bit-exact), so the FP8 path
    runs here: FP8 pages with per-KV-head scales against fp64 attention over code · scale."""
    from profattn.workload.paged import per_head_scales

    g = torch.Generator().manual_seed(11)
    d, hq, hkv, page = 32, 8, 2, 16
    lens = [1, 150, 32, 77]
    n = max(lens)
    q = torch.randn(len(lens), hq, d, generator=g).to(DEVICE, torch.float16)
    # the two KV heads at very different magnitudes: one shared scale would flatten head 1 into a few codes
    mag = torch.tensor([1.0, 30.0]).view(1, 2, 1, 1)
    k = (torch.randn(len(lens), hkv, n, d, generator=g) * mag).to(DEVICE)
    v = (torch.randn(len(lens), hkv, n, d, generator=g) * mag).to(DEVICE)
    cache = PagedKVCache.from_dense(k, v, page_size=page, seq_lens=lens, extra_pages=3, generator=g)  # NaN fill
    cache.quantize_fp8(per_head_scales(k, lens), per_head_scales(v, lens))
    assert cache.k_pages.dtype is torch.float8_e4m3fn
    out = paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=n, num_sms=132,
                       combine=combine, k_scale=cache.k_scale, v_scale=cache.v_scale, fp8_dot=fp8_dot)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    dk, dv = cache.dense(torch.float64)
    ref = torch.stack([eager_attention(q[b:b + 1, :, None].double(), dk[b:b + 1, :, :nb], dv[b:b + 1, :, :nb],
                                       mask=None)[0, :, 0] for b, nb in enumerate(lens)])
    err = (out.double() - ref).norm() / ref.norm()
    assert err < 2e-3, err
    # the same kernel reading the codes as if they were values (scales dropped) is far off: the scales are applied
    raw = paged_decode(q, cache.k_pages.to(torch.float16), cache.v_pages.to(torch.float16), cache.block_table,
                       cache.seq_lens, max_kv_len=n, num_sms=132, combine=combine)
    assert (raw.double() - ref).norm() / ref.norm() > 1.0


def test_fp8_pages_without_scales_are_refused():
    k = torch.zeros(1, 1, 16, 16)
    cache = PagedKVCache.from_dense(k, k, page_size=16)
    cache.quantize_fp8(torch.ones(1), torch.ones(1))
    q = torch.zeros(1, 1, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="need k_scale and v_scale"):
        paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=16, num_sms=132)
    with pytest.raises(ValueError, match="fp8_dot must be"):
        paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=16, num_sms=132,
                     k_scale=cache.k_scale, v_scale=cache.v_scale, fp8_dot="bfloat16")


@pytest.mark.parametrize("backend", ["triton-paged-decode", "torch-paged-reference"])
def test_fp8_decode_cells_pass_against_the_dequantized_cache(backend):
    """Whole cells (ragged lengths, GQA 4, unused slots holding saturated code 448): judged against the reference
    over the dequantized cache; the quantization's own error is reported apart and is far above the kernel's."""
    from profattn.backends import get_backend
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference as high_precision
    from profattn.results import CellStatus
    from profattn.workload import parse_workload_spec

    dev = torch.device(DEVICE)
    w = parse_workload_spec("phase=decode,b=3,q=1,kv=90,hq=8,hkv=2,d=16,page=16,dist=ragged,seed=2,dtype=float16,"
                            "kv_dtype=fp8")
    inputs = make_inputs(w, dev, seed=5)
    cell, _ = run_cell(w, get_backend(backend), inputs, high_precision(w, inputs), dev)
    assert cell.status == CellStatus.OK, cell.reason
    c = cell.correctness
    assert c.out_rel_err < 2e-3 and c.quant_rel_err is not None and 5 * c.out_rel_err < c.quant_rel_err < 0.1
    assert any("FP8" in n for n in cell.notes)
    if backend == "triton-paged-decode":  # the FP8 launch: 64-token tiles, 2 warps (the bf16 path keeps 32 and 4)
        assert any("BLOCK_N 64, 2 warps" in n for n in cell.notes), cell.notes


def _poison_before(cache, lens, starts):
    """NaN into every slot of sequence b before starts[b] (through the block table): a read of one shows."""
    page = cache.page_size
    for b, lo in enumerate(starts):
        for pos in range(lo):
            p = int(cache.block_table[b, pos // page])
            cache.k_pages[p, pos % page] = float("nan")
            cache.v_pages[p, pos % page] = float("nan")


@pytest.mark.parametrize("window", [1, 16, 32, 33, 100, 1000])  # 1 key, page edges (page 16), W ≥ kv
@pytest.mark.parametrize("combine", ["separate", "fused"])
def test_sliding_window_reads_only_the_window(window, combine):
    g = torch.Generator().manual_seed(window)
    d, hq, hkv, page, dtype = 32, 8, 2, 16, torch.float16
    lens = [1, 300, 128, 129, 40]
    n = max(lens)
    q = torch.randn(len(lens), hq, d, generator=g).to(DEVICE, dtype)
    k = torch.randn(len(lens), hkv, n, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(len(lens), hkv, n, d, generator=g).to(DEVICE, dtype)
    cache = PagedKVCache.from_dense(k, v, page_size=page, seq_lens=lens, extra_pages=2, generator=g)
    starts = [max(0, L - window) for L in lens]
    ref = torch.stack([eager_attention(q[b:b + 1, :, None].double(), k[b:b + 1, :, lo:L].double(),
                                       v[b:b + 1, :, lo:L].double(), mask=None)[0, :, 0]
                       for b, (lo, L) in enumerate(zip(starts, lens))])
    _poison_before(cache, lens, starts)  # keys before each window: never read
    out = paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=n,
                       num_sms=132, combine=combine, window=window)
    assert torch.isfinite(out).all()
    err = (out.double() - ref).norm() / ref.norm()
    assert err < 2e-3, err
    with pytest.raises(ValueError, match="window must be >= 1"):
        paged_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, max_kv_len=n, num_sms=132,
                     window=0)


def test_sliding_window_split_plan_covers_only_the_window():
    from profattn.backends import get_backend

    w = __import__("profattn.workload", fromlist=["Workload"]).Workload(
        phase="decode", batch=8, q_len=1, kv_len=32768, num_q_heads=16, num_kv_heads=4, head_dim=128,
        kv_layout="paged", page_size=16, window=4096)
    if get_backend("triton-paged-decode").unsupported_reason(w, torch.device(DEVICE)):
        pytest.skip("no Triton here")
    notes = get_backend("triton-paged-decode").prepare(w, torch.device(DEVICE)).notes
    # 4096 tokens = 128 tiles of 32, 32 pairs: s=16 is one wave x (8+2) + 1.25 = 11.25, s=32 two waves x 6 + 1.5
    p = choose_num_splits(batch=8, num_kv_heads=4, max_kv_len=4096, num_sms=132)
    assert (p.num_splits, p.tokens_per_split) == (16, 256)
    assert any("split plan: 16 splits x 256 tokens" in x for x in notes), notes
    assert any("sliding window of 4096 keys" in x and "4,096 tokens" in x for x in notes), notes


@pytest.mark.parametrize("spec", [
    "mix=(q1,kv70)+2x(q1,kv17)+(q1,kv33),hq=8,hkv=2,d=16,page=16,append=true,dtype=float16,w=20",
    "phase=decode,b=3,q=1,kv=100,hq=8,hkv=2,d=16,page=16,dist=ragged,seed=2,dtype=float16,window=32",
])
def test_a_sliding_window_decode_cell_through_the_harness(spec):
    """A spec-driven decode cell with a window (ragged, appending): the fp64 reference honours the window, the kernel
    matches it; the same cell without the window differs from the windowed reference (the window matters)."""
    from profattn.backends import get_backend
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference as high_precision, rel_err
    from profattn.results import CellStatus
    from profattn.workload import parse_workload_spec

    dev = torch.device(DEVICE)
    w = parse_workload_spec(spec)
    inputs = make_inputs(w, dev, seed=3)
    ref = high_precision(w, inputs)
    cell, _ = run_cell(w, get_backend("triton-paged-decode"), inputs, ref, dev)
    assert cell.status == CellStatus.OK, cell.reason
    assert cell.correctness.out_rel_err < 5e-3
    assert cell.workload.tag.endswith(f"_w{w.window}")
    full = high_precision(w.with_(window=None), make_inputs(w.with_(window=None), dev, seed=3))
    assert rel_err(full.out, ref.out) > 0.05


def _evaluated(script: str, data: str) -> list[dict]:
    """``benchmarks/SCRIPT.py``'s ``evaluate`` of the committed measurement ``examples/DATA``."""
    from pathlib import Path

    from conftest import script_module

    repo = Path(__file__).resolve().parents[2]
    with script_module(repo / "benchmarks" / f"{script}.py", script) as mod:
        return mod.evaluate(str(repo / "examples" / data))


def test_split_rule_against_the_measured_h200_exploration():
    """The split rule's regret on the committed H200 exploration (58 decode points, every split count timed): the
    rule's count (nearest measured) against the fastest — mean 0.10 %, worst 3.5 % (batch 64, kv 512, group 4)."""
    rows = _evaluated("decode_split_rule", "h200-decode-benchmark/split_rule_exploration.jsonl")
    assert len(rows) == 58
    regrets = [r["regret"] for r in rows]
    assert sum(regrets) / len(regrets) < 0.002 and max(regrets) < 0.035
    seed = next(r for r in rows if (r["group"], r["batch"], r["kv"]) == (4, 8, 8192))
    assert (seed["rule"], seed["best"]) == (16, 16)
    # the fused combine never lost more than 1 % at the <= 4 splits it is used for
    assert max(r["fused_over_separate"] for r in rows if r["fused_over_separate"] and r["rule"] <= 4) < 1.011


def test_tile_rule_against_the_measured_h200_grid():
    """The tile counted in bytes against the committed H200 grid (examples/h200-decode-tile: 56 head_dim-64 decode
    points, 18-27 launches each): on the 20 held-out points (the second draw's) mean regret 6.5 % -> 2.4 %, 6 -> 15
    within 3 % of the fastest launch; at head_dim 128 both rules pick the same launch."""
    rows = _evaluated("decode_tile_rule", "h200-decode-tile/tile_rule.jsonl")
    held = [r for r in rows if r["set"] == "check" and r["head_dim"] == 64]
    assert len(rows) == 64 and len(held) == 20

    def regrets(sub, rule):
        return [r["rules"][rule]["regret"] for r in sub]

    tok, byt = regrets(held, "tokens"), regrets(held, "bytes")
    assert round(sum(tok) / 20, 3) == 0.065 and round(sum(byt) / 20, 3) == 0.024
    assert sum(x <= 0.03 for x in tok) == 6 and sum(x <= 0.03 for x in byt) == 15
    fit = [r for r in rows if r["set"] == "fit"]
    assert sum(regrets(fit, "bytes")) < sum(regrets(fit, "tokens")) / 3
    # the second draw's drop-in miss (B=111, kv 4064, Hq 8 / Hkv 2): 78.7 -> 67.9 µs (FlashInfer cuDNN paged: 66.8)
    miss = next(r for r in held if (r["batch"], r["kv_len"]) == (111, 4064))
    assert miss["rules"]["bytes"]["launch"] == (64, 2, 3) and round(miss["rules"]["bytes"]["us"], 1) == 67.9
    assert round(miss["rules"]["tokens"]["us"], 1) == 78.7
    assert all(r["rules"]["tokens"]["launch"] == r["rules"]["bytes"]["launch"] for r in rows if r["head_dim"] == 128)


def test_tile_rule_on_the_third_draw():
    """The same grid on the third held-out draw's decodes, after adoption: the tile in bytes still wins on mean (8.1 ->
    4.8 %) and points within 3 % (3 -> 14 of 20), and its worst is the multi-wave split plan (b143 kv544: 3 splits
    38.8 µs against one split's 28.0)."""
    rows = _evaluated("decode_tile_rule", "h200-decode-tile/tile_rule-draw3.jsonl")
    d64 = [r for r in rows if r["head_dim"] == 64]
    assert len(rows) == 32 and len(d64) == 20
    tok = [r["rules"]["tokens"]["regret"] for r in d64]
    byt = [r["rules"]["bytes"]["regret"] for r in d64]
    assert round(sum(tok) / 20, 3) == 0.081 and round(sum(byt) / 20, 3) == 0.048
    assert sum(x <= 0.03 for x in tok) == 3 and sum(x <= 0.03 for x in byt) == 14
    worst = max(d64, key=lambda r: r["rules"]["bytes"]["regret"])
    assert (worst["batch"], worst["kv_len"], worst["rules"]["bytes"]["launch"]) == (143, 544, (64, 3, 4))
    assert worst["best"] == (64, 1, 3) and round(worst["best_us"], 1) == 28.0
