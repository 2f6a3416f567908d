"""The eager backend: attention written out as matmul, mask, softmax, matmul (the general dense path).

It is one of the backends under test; the high-precision reference every cell is checked against is the harness's
own (:func:`profattn.harness.inputs.grouped_attention` on inputs upcast to fp32 on CUDA, fp64 on a CPU), which shares
only the mask builder with it.
"""

from __future__ import annotations

import math

import torch

from profattn.interfaces import ADOPTIONS
from profattn.backends.base import Prepared
from profattn.backends.masks import dense_mask, padded_pairs, padding_note
from profattn.backends.memory import fit_reason
from profattn.families import DENSE
from profattn.workload import Phase, Workload


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


def dense_path_bytes(workload: Workload) -> int:
    """Peak bytes the explicit (eager / SDPA math) path allocates beyond its inputs, in bytes.

    K and V repeated to ``Hq`` heads (``2·B·Hq·Lk·d`` elements in the input dtype), the score matrix
    ``B·Hq·Lq·Lk`` in fp32 held three times (scores, masked scores, probabilities; the boolean mask once),
    and for train twice that again (the autograd graph keeps them, and the backward pass builds gradients of
    the same size). An estimate that errs high: used to refuse a cell before it allocates, never to time.
    """
    w = workload
    repeated_kv = 2 * w.batch * w.num_q_heads * w.kv_len * w.head_dim * w.itemsize
    scores = w.batch * w.num_q_heads * w.q_len * w.kv_len * 4
    peak = repeated_kv + 3 * scores + w.batch * w.q_len * w.kv_len
    return 2 * peak if w.phase is Phase.TRAIN else peak


def dense_path_reason(workload: Workload, device: torch.device) -> str | None:
    """None when the eager/math path's intermediates (:func:`dense_path_bytes`) fit next to the cell's
    inputs on ``device``, else why not (with the estimate)."""
    return fit_reason(dense_path_bytes(workload), device, "the explicit score matrix and repeated K/V")


class EagerBackend:
    """Explicit matmul/softmax in PyTorch eager mode; K/V materialized at Hq heads (rereads for GQA)."""

    name = "eager"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS['eager']
    family = DENSE
    description = "explicit matmul + masked softmax + matmul in eager PyTorch (K/V repeated to Hq heads)"
    #: Takes variable-length calls: padded to the longest sequence, with a per-sequence boolean mask.
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return dense_path_reason(workload, device)

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        mask = dense_mask(workload, device)

        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return eager_attention(q, k, v, mask=mask)

        if workload.is_varlen:
            return Prepared(forward=forward, executed_pairs=padded_pairs(workload),
                            notes=("mask: explicit boolean [B, 1, Lq_max, Lk_max] from per-sequence lengths",
                                   padding_note(workload)))
        shape = "[B, 1, Lq, Lk] (each sequence's own length)" if workload.is_ragged else "[Lq, Lk]"
        note = f"mask: explicit boolean {shape}" if mask is not None else "no mask"
        if workload.window is not None and mask is not None:
            note += f", sliding window of {workload.window} keys"
        return Prepared(forward=forward, notes=(note,))
