"""PagedKVCache against a dense K/V: allocation, appends across page boundaries, shared prefixes."""

from __future__ import annotations

import pytest
import torch

from profattn.workload.paged import PagedKVCache, ragged_lengths


def dense(b=3, hkv=2, n=40, d=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(b, hkv, n, d, generator=g, dtype=dtype), torch.randn(b, hkv, n, d, generator=g, dtype=dtype)


def test_from_dense_roundtrip_partial_last_page_and_shuffled_pages():
    k, v = dense()
    lens = [40, 17, 16]  # 3 pages (last partial), 2 pages (last holds 1 token), exactly 1 page
    c = PagedKVCache.from_dense(k, v, page_size=16, seq_lens=lens, extra_pages=2, generator=torch.Generator().manual_seed(3))
    assert c.k_pages.shape == (3 + 2 + 1 + 2, 16, 2, 8)
    assert c.block_table.dtype == torch.int32 and c.seq_lens.tolist() == lens
    assert [len(c.pages_of(b)) for b in range(3)] == [3, 2, 1]
    assert (c.block_table[2, 1:] == -1).all()  # past the last page
    pages = [p for b in range(3) for p in c.pages_of(b)]
    assert len(set(pages)) == 6 and pages != sorted(pages)  # own pages, scattered
    for b, n in enumerate(lens):
        kk, vv = c.gather(b)
        torch.testing.assert_close(kk, k[b, :, :n])
        torch.testing.assert_close(vv, v[b, :, :n])
    # unused slots are NaN: the tail of sequence 1's second page, and the free pages
    last = c.pages_of(1)[-1]
    assert torch.isnan(c.k_pages[last, 1:]).all() and not torch.isnan(c.k_pages[last, 0]).any()
    assert all(torch.isnan(c.k_pages[p]).all() for p in c.free_pages)


def test_append_across_page_boundary():
    k, v = dense(b=1, n=20)
    c = PagedKVCache.from_dense(k[:, :, :14], v[:, :, :14], page_size=8, extra_pages=2)
    c.append(0, k[0, :, 14:20], v[0, :, 14:20])  # 2 tokens fill page 1, 4 go to a new page
    assert int(c.seq_lens[0]) == 20 and len(c.pages_of(0)) == 3
    kk, vv = c.gather(0)
    torch.testing.assert_close(kk, k[0])
    torch.testing.assert_close(vv, v[0])
    with pytest.raises(RuntimeError, match="full|slot"):
        c.append(0, torch.zeros(2, 20, 8), torch.zeros(2, 20, 8))


def test_shared_prefix_pages_are_shared_and_copy_on_write():
    k, v = dense(b=3, n=40)
    k[1:, :, :16] = k[:1, :, :16]
    v[1:, :, :16] = v[:1, :, :16]
    c = PagedKVCache.from_dense(k, v, page_size=8, seq_lens=[40, 20, 16], shared_prefix_len=16, extra_pages=2)
    assert c.block_table[0, :2].tolist() == c.block_table[1, :2].tolist() == c.block_table[2, :2].tolist()
    assert len(c.unique_pages()) == 2 + 3 + 1 + 0
    for b, n in enumerate([40, 20, 16]):
        torch.testing.assert_close(c.gather(b)[0], k[b, :, :n])
    # sequence 2 ends exactly at the prefix; appending opens a fresh page (shared pages stay immutable)
    c.append(2, torch.ones(2, 1, 8), torch.ones(2, 1, 8))
    assert c.pages_of(2)[:2] == c.pages_of(0)[:2] and c.pages_of(2)[2] not in c.shared_pages
    torch.testing.assert_close(c.gather(0)[0], k[0])  # untouched


def test_shared_prefix_validation():
    k, v = dense()
    with pytest.raises(ValueError, match="multiple"):
        PagedKVCache.from_dense(k, v, page_size=16, shared_prefix_len=10)


def test_ragged_lengths_are_reproducible_and_bounded():
    a = ragged_lengths(8192, 64, "lognormal", 7)
    assert a == ragged_lengths(8192, 64, "lognormal", 7) and max(a) == 8192 and min(a) >= 1 and len(set(a)) > 10
    assert ragged_lengths(100, 4, "uniform", 0) == [100] * 4
    with pytest.raises(ValueError, match="valid: uniform"):
        ragged_lengths(100, 4, "zipf", 0)


def _prefix_cache(dtype=torch.float32, fill=float("nan")):
    """Three sequences of 40, 17 and 5 tokens (pages of 16) whose last 7, 2 and 5 tokens are the step's new
    ones: the pool holds each cached prefix only (33, 15 and 0 tokens), the new tokens' slots the fill."""
    from profattn.workload.paged import CacheAppend

    k, v = dense(dtype=dtype)
    lens, q_lens = [40, 17, 5], [7, 2, 5]
    c = PagedKVCache.from_dense(k, v, page_size=16, seq_lens=lens, generator=torch.Generator().manual_seed(3), fill=fill)
    slots = c.slot_mapping(q_lens)
    new_k = torch.cat([k[b, :, n - q:n].transpose(0, 1) for b, (n, q) in enumerate(zip(lens, q_lens))])
    new_v = torch.cat([v[b, :, n - q:n].transpose(0, 1) for b, (n, q) in enumerate(zip(lens, q_lens))])
    c.clear_slots(slots)
    return c, k, v, CacheAppend(new_k.contiguous(), new_v.contiguous(), slots)


def test_slot_mapping_by_hand_and_the_cached_prefix_only_before_the_append():
    c, k, v, new = _prefix_cache()
    t = c.block_table.long()
    # sequence 0: positions 33..39 -> page 2, offsets 1..7; sequence 1: 15 -> page 0 offset 15, 16 -> page 1 offset 0;
    # sequence 2: 0..4 -> page 0 offsets 0..4
    want = ([int(t[0, 2]) * 16 + o for o in range(1, 8)] + [int(t[1, 0]) * 16 + 15, int(t[1, 1]) * 16]
            + [int(t[2, 0]) * 16 + o for o in range(5)])
    assert new.slot_mapping.dtype == torch.int64 and new.slot_mapping.tolist() == want and new.tokens == 14
    assert c.check_contents(k, v) == "sequence 0: 7 of 40 tokens differ (first at position 33)"
    assert torch.isnan(c.k_pages[int(t[2, 0])]).all()  # sequence 2 has no cached prefix: its page is all fill
    with pytest.raises(ValueError, match="q_lens"):
        c.slot_mapping([7, 2, 6])  # more new tokens than sequence 2 holds


def test_append_through_the_block_table_partial_last_page_unused_slots_nan_and_idempotent():
    from profattn.workload.paged import reshape_and_cache

    c, k, v, new = _prefix_cache()
    reshape_and_cache(new.k_new, new.v_new, c.k_pages, c.v_pages, new.slot_mapping)
    assert c.check_contents(k, v) is None
    for b, n in enumerate([40, 17, 5]):
        torch.testing.assert_close(c.gather(b)[0], k[b, :, :n])
        torch.testing.assert_close(c.gather(b)[1], v[b, :, :n])
    last = c.pages_of(1)[-1]  # sequence 1's second page holds one token (the appended position 16)
    torch.testing.assert_close(c.k_pages[last, 0], k[1, :, 16])
    assert torch.isnan(c.k_pages[last, 1:]).all() and torch.isnan(c.v_pages[last, 1:]).all()
    assert torch.isnan(c.k_pages[c.pages_of(2)[0], 5:]).all()  # sequence 2's partial page past its 5 tokens
    before = (c.k_pages.clone(), c.v_pages.clone())
    reshape_and_cache(new.k_new, new.v_new, c.k_pages, c.v_pages, new.slot_mapping)  # a second timed rep
    assert torch.equal(c.k_pages.nan_to_num(7.0), before[0].nan_to_num(7.0))
    assert torch.equal(c.v_pages.nan_to_num(7.0), before[1].nan_to_num(7.0))
    # a stray write into an unused slot, and a write one slot off, are both caught
    c.v_pages[last, 3] = 0.0
    assert c.check_contents(k, v) == "1 unused pool slots were written"
    c2, k2, v2, new2 = _prefix_cache()
    reshape_and_cache(new2.k_new, new2.v_new, c2.k_pages, c2.v_pages, new2.slot_mapping + 1)
    assert c2.check_contents(k2, v2).startswith("sequence 0: 7 of 40 tokens differ")


def test_check_contents_compares_a_finite_fill_as_the_pool_stores_it():
    from profattn.workload.paged import reshape_and_cache

    c, k, v, new = _prefix_cache(dtype=torch.bfloat16, fill=1e4)  # 1e4 is stored as 9984 in bf16
    reshape_and_cache(new.k_new, new.v_new, c.k_pages, c.v_pages, new.slot_mapping)
    assert c.check_contents(k, v) is None


# ---- FP8 E4M3 quantization (Workload.kv_dtype) ----------------------------------------------------------------
def test_fp8_round_trip_hand_computed():
    from profattn.workload.paged import dequantize, per_head_scales, quantize

    # head 0 holds 0.5, -3.0, 1.1 (amax 3 -> scale 3/448); head 1 holds only zeros (scale 1.0)
    x = torch.zeros(1, 2, 3, 1)
    x[0, 0, :, 0] = torch.tensor([0.5, -3.0, 1.1])
    scale = per_head_scales(x, [3])
    assert scale.tolist() == pytest.approx([3 / 448, 1.0])
    codes = quantize(x, scale, head_axis=1)
    assert codes.dtype is torch.float8_e4m3fn
    # 0.5/(3/448) = 74.67 -> E4M3 spacing 8 in [64, 128): 72; -3 -> -448 exactly; 1.1 -> 164.27, spacing 16: 160
    assert codes[0, 0, :, 0].float().tolist() == [72.0, -448.0, 160.0]
    back = dequantize(codes, scale, head_axis=1, dtype=torch.float64)
    assert back[0, 0, :, 0].tolist() == pytest.approx([72 * 3 / 448, -3.0, 160 * 3 / 448])
    assert back[0, 1].abs().sum() == 0
    # the amax is over each sequence's own tokens: a larger value past the length does not count
    y = torch.ones(1, 1, 4, 1)
    y[0, 0, 3, 0] = 100.0
    assert per_head_scales(y, [3]).tolist() == pytest.approx([1 / 448])


def test_fp8_cache_dense_dequantizes_through_the_block_table():
    from profattn.workload.paged import dequantize, per_head_scales, quantize

    k, v = dense()
    lens = [40, 17, 16]
    c = PagedKVCache.from_dense(k, v, page_size=16, seq_lens=lens, generator=torch.Generator().manual_seed(3), fill=1e4)
    ks, vs = per_head_scales(k, lens), per_head_scales(v, lens)
    c.quantize_fp8(ks, vs)
    assert c.k_pages.dtype is torch.float8_e4m3fn and c.fill == 448.0
    dk, dv = c.dense(torch.float64)
    want_k = dequantize(quantize(k, ks, head_axis=1), ks, head_axis=1, dtype=torch.float64)
    want_v = dequantize(quantize(v, vs, head_axis=1), vs, head_axis=1, dtype=torch.float64)
    for b, n in enumerate(lens):
        assert torch.equal(dk[b, :, :n], want_k[b, :, :n]) and torch.equal(dv[b, :, :n], want_v[b, :, :n])
        assert dk[b, :, n:].abs().sum() == 0
    # E4M3 keeps 3 mantissa bits: each value within half a spacing, |x| * 2^-4 (plus the subnormal floor)
    err = (dk[0] - k[0].double()).abs()
    assert bool((err <= k[0].double().abs() / 16 + ks.double().view(-1, 1, 1) * 2 ** -10).all())
    with pytest.raises(ValueError, match="already quantized"):
        c.quantize_fp8(ks, vs)
