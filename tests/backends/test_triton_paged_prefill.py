"""Our one-launch paged prefill / mixed-batch kernel against an fp64 reference (TRITON_INTERPRET=1 on CPU, fp16
and fp32: the interpreter's bf16 dot is wrong), and its work list."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from profattn.backends.eager import eager_attention  # noqa: E402
from profattn.backends.triton_paged_prefill import (  # noqa: E402
    LaunchConfig,
    WorkItem,
    block_g,
    items_tensor,
    paged_varlen_attention,
    plan_items,
)
from profattn.workload.paged import PagedKVCache  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_work_list_hand_checked():
    # group 4: sequence 0 has 3 queries → 12 group rows (≤ 16): group items; sequence 1 (q 5 → 20 rows) is cut
    # into query tiles of 2 rows: m0 0, 2, 4 per query head; causal keys up to the tile's last diagonal:
    # prefix 5 → tile 0 sees 7 keys, tile 1 9, tile 2 min(10, 11) = 10. Costs ∝ 4·2·keys·d / rate.
    items = plan_items([3, 5], [10, 10], num_q_heads=8, num_kv_heads=2, head_dim=16, causal=True, block_m=2,
                       group_rows=16)
    tiles = [(it.seq, it.m0, it.head) for it in items if it.m0 >= 0]
    groups = [(it.seq, it.head) for it in items if it.m0 < 0]
    assert groups == [(0, 0), (0, 1)]
    assert len(tiles) == 3 * 8
    assert [t[1] for t in tiles[:8]] == [4] * 8 and [t[1] for t in tiles[8:16]] == [2] * 8  # heaviest first
    assert [it.cost_us for it in items if it.m0 >= 0][0] / [it.cost_us for it in items if it.m0 >= 0][-1] == 10 / 7
    # group item cost: 2 (K and V) · 10 keys · 16 · 2 bytes = 640 bytes at 6e4 bytes/µs
    assert [it.cost_us for it in items if it.m0 < 0][0] == pytest.approx(640 / 6e4)
    assert block_g(4) == 16 and block_g(4, 5) == 32 and block_g(32) == 32
    with pytest.raises(ValueError, match="q_len 11 > kv_len 10"):
        plan_items([11], [10], num_q_heads=2, num_kv_heads=1, head_dim=16, causal=True)
    with pytest.raises(ValueError, match="not a multiple"):
        plan_items([1], [10], num_q_heads=3, num_kv_heads=2, head_dim=16, causal=True)
    assert items_tensor([WorkItem(1, -1, 0, 1.0)], torch.device("cpu")).tolist() == [[1, -1, 0]]


def _reference(q, cache, q_lens, kv_lens, causal):
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b, (nq, nk) in enumerate(zip(q_lens, kv_lens)):
        k, v = cache.gather(b)
        mask = None
        if causal:
            mask = torch.arange(nk)[None, :] <= (nk - nq + torch.arange(nq))[:, None]
        out[b, :, :nq] = eager_attention(q[b:b + 1, :, :nq].double().cpu(), k[None].double().cpu(),
                                         v[None].double().cpu(), mask=mask)[0]
    return out


@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (16, 2)])  # GQA groups 1, 4, 8
@pytest.mark.parametrize("causal", [True, False])
def test_mixed_batch_matches_reference(hq, hkv, causal):
    """A mixed step: a prefill chunk over a cached prefix (partial last page), a whole prompt, two decoding
    tokens of ragged lengths and a 3-token run (group path for small groups, tiles for MHA)."""
    g = torch.Generator().manual_seed(hq * 10 + causal)
    d, page, dtype = 32, 16, torch.float16
    q_lens, kv_lens = [37, 50, 1, 1, 3], [100, 50, 70, 17, 40]
    lq, lk = max(q_lens), max(kv_lens)
    q = torch.randn(len(q_lens), hq, lq, d, generator=g).to(DEVICE, dtype)
    k = torch.randn(len(q_lens), hkv, lk, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(len(q_lens), hkv, lk, d, generator=g).to(DEVICE, dtype)
    cache = PagedKVCache.from_dense(k, v, page_size=page, seq_lens=kv_lens, extra_pages=3, generator=g)
    cfg = LaunchConfig(block_m=16, block_n=16, block_n_group=16, num_warps=4, num_stages=2)
    rows = block_g(hq // hkv)
    items = plan_items(q_lens, kv_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, causal=causal,
                       block_m=cfg.block_m, group_rows=rows)
    dev = torch.device(DEVICE)
    out = torch.full_like(q, 7.0)
    paged_varlen_attention(q, cache.k_pages, cache.v_pages, cache.block_table,
                           torch.tensor(q_lens, dtype=torch.int32, device=dev),
                           torch.tensor(kv_lens, dtype=torch.int32, device=dev), items_tensor(items, dev),
                           causal=causal, has_tiles=any(i.m0 >= 0 for i in items),
                           has_groups=any(i.m0 < 0 for i in items), group_rows=rows, out=out, config=cfg)
    ref = _reference(q, cache, q_lens, kv_lens, causal)
    for b, nq in enumerate(q_lens):
        got = out[b, :, :nq].double().cpu()
        assert torch.isfinite(got).all()  # NaN-filled free pages and tails were never read
        err = (got - ref[b, :, :nq]).norm() / ref[b, :, :nq].norm()
        assert err < 2e-3, (b, err)
        assert (out[b, :, nq:] == 7.0).all()  # rows past q_len untouched


def test_a_chunked_appending_cell_and_a_decode_refusal():
    """Through the harness: a chunked-prefill chunk beside decoding sequences that appends first; the cell's
    output and the cache after the append are checked. Decode steps belong to the split-KV kernel."""
    from profattn.backends import get_backend
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference as high_precision
    from profattn.results import CellStatus
    from profattn.workload import Workload, parse_workload_spec

    dev = torch.device(DEVICE)
    backend = get_backend("triton-paged-prefill")
    w = parse_workload_spec("mix=(q40,kv72)+3x(q1,kv33),hq=8,hkv=2,d=16,page=16,append=true,dtype=float16")
    inputs = make_inputs(w, dev, seed=4)
    cell, _ = run_cell(w, backend, inputs, high_precision(w, inputs), dev)
    assert cell.status == CellStatus.OK, cell.reason
    assert cell.correctness.cache_ok is True and cell.append_timing is not None
    assert any("query tiles" in n for n in cell.notes)
    assert any("cache append: ours" in n for n in cell.notes)
    dec = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=8, num_kv_heads=2, head_dim=16,
                   kv_layout="paged", page_size=16, dtype="float16")
    assert "triton-paged-decode" in backend.unsupported_reason(dec, dev)


@pytest.mark.parametrize("order", ["lpt", "grouped"])
def test_page_loads_and_orders_match_reference(order):
    """Whole-page loads (one block-table entry per page) and both work-list orders give the same output."""
    g = torch.Generator().manual_seed(11)
    d, page, dtype, hq, hkv = 16, 8, torch.float16, 4, 2
    q_lens, kv_lens = [20, 1, 17], [52, 40, 17]
    q = torch.randn(3, hq, max(q_lens), d, generator=g).to(DEVICE, dtype)
    k = torch.randn(3, hkv, max(kv_lens), d, generator=g).to(DEVICE, dtype)
    v = torch.randn(3, hkv, max(kv_lens), d, generator=g).to(DEVICE, dtype)
    cache = PagedKVCache.from_dense(k, v, page_size=page, seq_lens=kv_lens, extra_pages=2, generator=g)
    cfg = LaunchConfig(block_m=16, block_n=16, block_n_group=16, num_warps=4, num_stages=2, page_loads=True,
                       order=order)
    items = plan_items(q_lens, kv_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, causal=True, block_m=16,
                       group_rows=16, order=order)
    dev = torch.device(DEVICE)
    out = paged_varlen_attention(q, cache.k_pages, cache.v_pages, cache.block_table,
                                 torch.tensor(q_lens, dtype=torch.int32, device=dev),
                                 torch.tensor(kv_lens, dtype=torch.int32, device=dev), items_tensor(items, dev),
                                 causal=True, has_tiles=True, has_groups=True, group_rows=16, config=cfg)
    ref = _reference(q, cache, q_lens, kv_lens, True)
    for b, nq in enumerate(q_lens):
        err = (out[b, :, :nq].double().cpu() - ref[b, :, :nq]).norm() / ref[b, :, :nq].norm()
        assert err < 2e-3, (b, err)


def test_grouped_order_keeps_a_kv_heads_tiles_together():
    items = plan_items([4, 1], [8, 9], num_q_heads=4, num_kv_heads=2, head_dim=16, causal=True, block_m=2,
                       group_rows=1, order="grouped")
    # seq 0: kv head 0 (q heads 0, 1), tiles m0 2 (heavier) then 0; then kv head 1; then seq 1 (q_len 1 x group 2
    # > 1 group row: query tiles too)
    assert [(i.seq, i.m0, i.head) for i in items[:4]] == [(0, 2, 0), (0, 2, 1), (0, 0, 0), (0, 0, 1)]
    assert [(i.seq, i.head // 2) for i in items[4:8]] == [(0, 1)] * 4
    with pytest.raises(ValueError, match="order"):
        plan_items([1], [1], num_q_heads=1, num_kv_heads=1, head_dim=16, causal=True, order="random")


def test_launch_configuration_follows_the_step():
    """Hand-computed: the serving preset's mixed step 1×(q512, kv4096) + 64 decodes (kv 2048 each here) has
    query-tile FLOPs 4·(512·3584 + 512·513/2)·128·16 = 16.1 GFLOP (35.8 µs at 450 TFLOP/s) against 64·4 KV heads
    · 2·2048·128·2 bytes = 268 MB (67.1 µs at 4000 GB/s): streaming-bound. A chunk of 2048 over kv 8192 has no
    decoding sequence: compute-bound."""
    from profattn.backends.triton_paged_prefill import STREAMING, choose_config

    kw = dict(num_q_heads=16, num_kv_heads=4, head_dim=128, causal=True)
    cfg, why = choose_config([512] + [1] * 64, [4096] + [2048] * 64, **kw)
    assert cfg == STREAMING and cfg.num_warps == 4 and cfg.block_m == 64
    assert "~67 us" in why and "~36 us" in why
    cfg, why = choose_config([2048] * 8, [8192] * 8, **kw)
    assert cfg == LaunchConfig() and cfg.block_n == 128 and cfg.page_loads and "compute-bound" in why
