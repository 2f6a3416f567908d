"""The read-ceiling kernels read every element exactly once (checked under TRITON_INTERPRET=1 on the CPU)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from profattn.harness.read_stream import StreamConfig, _kernels, stream_fn  # noqa: E402


@pytest.mark.parametrize("n", [1, 1023, 5000])
def test_grid_and_persistent_kernels_sum_every_element_once(n):
    grid_read, persistent_read = _kernels()
    x = torch.randint(-1000, 1000, (n,), dtype=torch.int32)
    want = int(x.sum())
    out = torch.zeros(-(-n // 256), dtype=torch.int32)
    grid_read[(out.numel(),)](x, out, n, BLOCK=256, CG=False)
    assert int(out.sum()) == want
    for programs, unroll in ((1, 1), (3, 2), (7, 4)):
        out = torch.zeros(programs, dtype=torch.int32)
        persistent_read[(programs,)](x, out, n, BLOCK=128, UNROLL=unroll, CG=True)
        assert int(out.sum()) == want


def test_labels_and_unknown_kind():
    assert StreamConfig("triton-grid", block_bytes=32768, num_warps=8, cache=".cg").label == "triton-grid 32KiB w8 .cg"
    assert StreamConfig("triton-persistent", 16384, 8, 4, 4).label == "triton-persistent 16KiB w8 ppsm4 x4"
    with pytest.raises(ValueError, match="unknown stream kind"):
        stream_fn(torch.zeros(4, dtype=torch.int32), StreamConfig("nope"))
