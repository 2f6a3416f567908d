"""Mask construction: the sliding window in every mask form, checked against the definition by brute force."""

from __future__ import annotations

import pytest
import torch

from profattn.errors import WorkloadError

from profattn.backends.masks import causal_mask_mod, dense_mask, sdpa_mask_args, varlen_mask, window_applies
from profattn.workload import Workload


def visible(q_len: int, kv_len: int, window: int | None) -> torch.Tensor:
    """[q_len, kv_len] bool from the definition: row t sees j with Lk−Lq+t−W < j ≤ Lk−Lq+t."""
    w = window if window is not None else 10**9
    return torch.tensor([[kv_len - q_len + t - w < j <= kv_len - q_len + t for j in range(kv_len)]
                         for t in range(q_len)])


def wl(q_len: int, kv_len: int, window: int | None, **kw) -> Workload:
    return Workload(phase="prefill", batch=2, q_len=q_len, kv_len=kv_len, num_q_heads=2, num_kv_heads=1, head_dim=8,
                    window=window, **kw)


@pytest.mark.parametrize("q_len,kv_len", [(4, 4), (3, 10), (1, 9), (6, 3)])
@pytest.mark.parametrize("window", [1, 2, 4, 9, 50, None])
def test_dense_and_flex_masks_follow_the_definition(q_len, kv_len, window):
    want = visible(q_len, kv_len, window)
    if q_len > kv_len:  # rows with no key: the workload contract refuses the shape; the mask_mod alone is checked
        with pytest.raises(WorkloadError, match="would see no key"):
            wl(q_len, kv_len, window)
    else:
        assert torch.equal(dense_mask(wl(q_len, kv_len, window), "cpu"), want)
    rows, cols = torch.arange(q_len)[:, None], torch.arange(kv_len)[None, :]
    assert torch.equal(causal_mask_mod(kv_len - q_len, window)(0, 0, rows, cols), want)


def test_varlen_and_ragged_masks_with_a_window():
    m = varlen_mask((3, 1), (7, 5), causal=True, device="cpu", window=2)
    assert torch.equal(m[0, 0, :3], visible(3, 7, 2))
    assert torch.equal(m[1, 0, 0, :5], visible(1, 5, 2)[0]) and not m[1, 0, 0, 5:].any()
    assert m[1, 0, 1:, :5].all()  # padding rows see all of their sequence's keys (no empty row)
    with pytest.raises(ValueError, match="causal"):
        varlen_mask((1,), (4,), causal=False, device="cpu", window=2)
    ragged = Workload(phase="decode", batch=3, q_len=1, kv_len=40, num_q_heads=2, num_kv_heads=1, head_dim=8,
                      kv_layout="paged", page_size=8, kv_len_dist="ragged", kv_len_seed=1, window=5)
    m = dense_mask(ragged, "cpu")
    for b, n in enumerate(ragged.kv_lens):
        assert torch.equal(m[b, 0, 0], torch.arange(40).ge(n - 5) & torch.arange(40).lt(n))


def test_sdpa_arguments_with_a_window():
    assert window_applies(wl(4, 4, 3)) and not window_applies(wl(4, 4, 4)) and not window_applies(wl(4, 4, None))
    args = sdpa_mask_args(wl(4, 4, 2))
    assert not args.is_causal and torch.equal(args.attn_mask, visible(4, 4, 2)) and "sliding window of 2" in args.how
    assert sdpa_mask_args(wl(4, 4, 4)).is_causal  # W ≥ kv: the causal mask itself


def test_document_mask_mod_is_block_diagonal_and_causal_within_each_document():
    """docs 2 + 3 packed into 5 tokens: keep (q, kv) when both lie in one document and kv <= q (window 2: and
    kv > q - 2); evaluated on the whole grid with tensors, as FlexAttention's vmap does."""
    from profattn.backends.masks import document_mask_mod

    q = torch.arange(5).view(-1, 1)
    kv = torch.arange(5).view(1, -1)
    keep = document_mask_mod((2, 3), "cpu", causal=True)(0, 0, q, kv).int().tolist()
    assert keep == [[1, 0, 0, 0, 0],
                    [1, 1, 0, 0, 0],
                    [0, 0, 1, 0, 0],
                    [0, 0, 1, 1, 0],
                    [0, 0, 1, 1, 1]]
    full = document_mask_mod((2, 3), "cpu", causal=False)(0, 0, q, kv).int()
    assert full[:2, :2].eq(1).all() and full[2:, 2:].eq(1).all() and full[:2, 2:].eq(0).all() and full[2:, :2].eq(0).all()
    win = document_mask_mod((2, 3), "cpu", causal=True, window=2)(0, 0, q, kv).int().tolist()
    assert win[4] == [0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="needs the causal mask"):
        document_mask_mod((2, 3), "cpu", causal=False, window=2)
