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
