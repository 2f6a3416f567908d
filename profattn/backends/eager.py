"""The eager reference: attention written out as matmul, mask, softmax, matmul (the general dense path).

This is also the oracle: :func:`eager_attention` on inputs upcast to fp32 (CUDA) or fp64 (CPU) is the
high-precision reference every cell is checked against.
"""

from __future__ import annotations

import math

import torch

from profattn.backends.base import Prepared
from profattn.families import DENSE
from profattn.backends.masks import dense_mask
from profattn.workload import Workload


def eager_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | None, scale: float | None = None
) -> torch.Tensor:
    """softmax(Q Kᵀ · scale + mask) V with K/V heads repeated for GQA.

    Args:
        q: ``[B, Hq, Lq, d]``.
        k, v: ``[B, Hkv, Lk, d]``; ``Hq % Hkv == 0``.
        mask: boolean ``[Lq, Lk]`` (True = attend) or None.
        scale: defaults to ``1/sqrt(d)`` (as SDPA).

    Returns:
        ``[B, Hq, Lq, d]`` in q's dtype. The softmax runs in at least fp32. A row that sees no key
        yields zeros (SDPA's math backend yields NaN there; no preset has such rows).
    """
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    acc_dtype = torch.promote_types(scores.dtype, torch.float32)
    scores = scores.to(acc_dtype)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if mask is not None:
        probs = torch.nan_to_num(probs, nan=0.0)
    return torch.matmul(probs.to(v.dtype), v)


class EagerBackend:
    """Explicit matmul/softmax in PyTorch eager mode; K/V materialized at Hq heads (rereads for GQA)."""

    name = "eager"
    family = DENSE
    description = "explicit matmul + masked softmax + matmul in eager PyTorch (K/V repeated to Hq heads)"

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return None

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        mask = dense_mask(workload, device)

        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return eager_attention(q, k, v, mask=mask)

        return Prepared(forward=forward, notes=("mask: explicit boolean [Lq, Lk]" if mask is not None else "no mask",))
