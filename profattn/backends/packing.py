"""Packing a padded variable-length call into per-sequence rows and back (the ragged layout of FlashInfer's
prefill wrappers and of torch's jagged nested tensors).

The harness pads a variable-length call to its longest sequence (``[B, H, L_max, d]``, sequence ``b``'s rows
``0 … lengths[b] − 1`` valid); kernels that take packed rows want ``[Σ lengths, H, d]`` plus CSR offsets.
Backends pack in ``bind`` and unpack in ``to_contract``, both outside every timed window.
"""

from __future__ import annotations

import torch


def row_offsets(lengths: "list[int] | tuple[int, ...]", device: torch.device | str) -> torch.Tensor:
    """CSR offsets ``[0, l0, l0 + l1, …]`` (int32, ``len(lengths) + 1``) on ``device``."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=device)


def pack_rows(x: torch.Tensor, lengths: "list[int] | tuple[int, ...]") -> torch.Tensor:
    """``[B, H, L_max, d]`` (rows ``0 … lengths[b]−1`` valid) → packed ``[Σ lengths, H, d]``, contiguous."""
    if all(n == x.shape[2] for n in lengths):
        return x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3]).contiguous()
    return torch.cat([x[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)]).contiguous()


def unpack_rows(o: torch.Tensor, lengths: "list[int] | tuple[int, ...]", l_max: int) -> torch.Tensor:
    """Packed ``[Σ lengths, H, d]`` → ``[B, H, l_max, d]`` (a view when every length is ``l_max``; else a
    copy whose padding rows are zero)."""
    b, h, d = len(lengths), o.shape[1], o.shape[2]
    if all(n == l_max for n in lengths):
        return o.view(b, l_max, h, d).transpose(1, 2)
    out = o.new_zeros(b, h, l_max, d)
    start = 0
    for i, n in enumerate(lengths):
        out[i, :, :n] = o[start:start + n].transpose(0, 1)
        start += n
    return out
