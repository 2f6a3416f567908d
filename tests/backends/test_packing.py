"""Packing a padded variable-length call into per-sequence rows and back."""

from __future__ import annotations

import torch

from profattn.backends.packing import pack_rows, row_offsets, unpack_rows


def test_row_offsets():
    off = row_offsets([5, 1, 3], "cpu")
    assert off.tolist() == [0, 5, 6, 9] and off.dtype == torch.int32
    assert row_offsets([], "cpu").tolist() == [0]


def test_pack_and_unpack_rows():
    x = torch.randn(3, 2, 5, 4)  # [B, H, L_max, d]
    lens = [5, 1, 3]
    packed = pack_rows(x, lens)
    assert packed.shape == (9, 2, 4) and packed.is_contiguous()
    assert torch.equal(packed[0:5], x[0].transpose(0, 1)) and torch.equal(packed[5], x[1, :, 0])
    assert torch.equal(packed[6:9], x[2, :, :3].transpose(0, 1))
    back = unpack_rows(packed, lens, 5)
    assert torch.equal(back[0], x[0]) and torch.equal(back[2, :, :3], x[2, :, :3]) and back[1, :, 1:].abs().sum() == 0
    uni = torch.randn(2, 3, 4, 8)
    p = pack_rows(uni, [4, 4])
    assert torch.equal(unpack_rows(p, [4, 4], 4), uni) and unpack_rows(p, [4, 4], 4).data_ptr() == p.data_ptr()  # a view


def test_packed_leaves_return_contract_gradients_with_repeated_heads_summed():
    """Two sequences (3 and 1 rows of 4) of 1 KV head repeated to 2: dK of a KV head is the sum of its copies'
    gradients; padding rows stay zero; zero_grads clears the leaves."""
    from profattn.backends.packing import PackedLeaves

    q = torch.arange(2 * 2 * 4 * 1, dtype=torch.float32).view(2, 2, 4, 1)
    k = torch.arange(2 * 1 * 4 * 1, dtype=torch.float32).view(2, 1, 4, 1)
    leaves = PackedLeaves(q, k, k.clone(), (3, 1), (3, 1), kv_repeat=2)
    assert leaves.q.shape == (4, 2, 1) and leaves.k.shape == (4, 2, 1) and leaves.q.requires_grad
    assert leaves.k[:, 0, 0].tolist() == leaves.k[:, 1, 0].tolist() == [0.0, 1.0, 2.0, 4.0]
    weights = torch.tensor([1.0, 10.0]).view(1, 2, 1)
    (leaves.q.sum() + (leaves.k * weights).sum() + leaves.v.sum()).backward()
    g = leaves.grads()
    assert g["dq"].shape == (2, 2, 4, 1) and g["dq"][0, :, :3].eq(1).all() and g["dq"][0, :, 3].eq(0).all()
    assert g["dk"].shape == (2, 1, 4, 1) and g["dk"][0, 0, :3, 0].tolist() == [11.0, 11.0, 11.0]
    assert g["dk"][1, 0, :, 0].tolist() == [11.0, 0.0, 0.0, 0.0] and g["dv"][1, 0, :, 0].tolist() == [2.0, 0.0, 0.0, 0.0]
    leaves.zero_grads()
    assert leaves.q.grad is None and leaves.grads() == {"dq": None, "dk": None, "dv": None}
