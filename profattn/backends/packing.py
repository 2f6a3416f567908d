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


class PackedLeaves:
    """Packed copies of a training call's q/k/v as autograd leaves (for :class:`~profattn.backends.base.TrainLeaves`).

    ``q`` ``[Σ q_lens, Hq, d]``, ``k``/``v`` ``[Σ kv_lens, H, d]`` (``H = Hkv · kv_repeat``: K/V heads repeated
    ``kv_repeat`` times, each KV head's copies adjacent, as ``repeat_interleave`` on the head axis), detached copies
    of the padded ``[B, H, L_max, d]`` tensors with ``requires_grad``; made outside every timed window.
    """

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_lens: "list[int] | tuple[int, ...]",
                 kv_lens: "list[int] | tuple[int, ...]", *, kv_repeat: int = 1) -> None:
        self.q_lens, self.kv_lens, self.kv_repeat = tuple(q_lens), tuple(kv_lens), kv_repeat
        self.l_q, self.l_kv = q.shape[2], k.shape[2]
        self.q = pack_rows(q.detach(), q_lens).requires_grad_(True)
        k, v = pack_rows(k.detach(), kv_lens), pack_rows(v.detach(), kv_lens)
        if kv_repeat > 1:
            k, v = k.repeat_interleave(kv_repeat, dim=1), v.repeat_interleave(kv_repeat, dim=1)
        self.k, self.v = k.requires_grad_(True), v.requires_grad_(True)

    def grads(self) -> dict[str, "torch.Tensor | None"]:
        """``{"dq": [B, Hq, Lq_max, d], "dk"/"dv": [B, Hkv, Lk_max, d]}`` from the leaves' gradients (padding rows
        zero; repeated K/V heads summed back to their KV head, as autograd through ``repeat_interleave`` would)."""
        def kv(g: torch.Tensor | None) -> torch.Tensor | None:
            if g is None:
                return None
            if self.kv_repeat > 1:
                g = g.view(g.shape[0], -1, self.kv_repeat, g.shape[2]).sum(dim=2)
            return unpack_rows(g, self.kv_lens, self.l_kv)

        dq = None if self.q.grad is None else unpack_rows(self.q.grad, self.q_lens, self.l_q)
        return {"dq": dq, "dk": kv(self.k.grad), "dv": kv(self.v.grad)}

    def zero_grads(self) -> None:
        """Clear the leaves' gradients (``.grad = None``)."""
        for t in (self.q, self.k, self.v):
            t.grad = None
