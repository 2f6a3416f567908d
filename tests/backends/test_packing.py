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
