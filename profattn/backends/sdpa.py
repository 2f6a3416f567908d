"""``torch.nn.functional.scaled_dot_product_attention`` pinned to one kernel family.

Each backend enters ``torch.nn.attention.sdpa_kernel([one backend])`` so PyTorch cannot fall back to
another kernel. GQA is passed natively with ``enable_gqa=True``; where the pinned kernel refuses it,
the cell is "unsupported" with PyTorch's own reason (collected from the warnings SDPA emits when it
rejects a kernel), never run on another kernel.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from profattn.backends.base import KernelFamily, Prepared, Unsupported
from profattn.families import CUDNN, DENSE, EFFICIENT, FLASH
from profattn.backends.eager import dense_path_reason
from profattn.backends.masks import SdpaMaskArgs, dense_mask, padded_pairs, padding_note, sdpa_mask_args, varlen_mask
from profattn.workload import Workload


@dataclass(frozen=True)
class SdpaBackend:
    """SDPA restricted to ``sdpa_backend`` (MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION)."""

    name: str
    sdpa_backend: SDPBackend
    family: KernelFamily
    description: str
    cuda_only: bool
    #: Takes variable-length calls (padded to the longest sequence, an explicit boolean mask; kernels that
    #: refuse an arbitrary mask are unsupported with PyTorch's reason from the trial call) and appending ones.
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        if workload.is_ragged:
            return "ragged KV lengths need a per-sequence key-padding mask on a padded dense cache; see the paged backends"
        if self.cuda_only and device.type != "cuda":
            return f"{self.sdpa_backend.name} runs on CUDA only (device is {device.type})"
        if self.sdpa_backend is SDPBackend.CUDNN_ATTENTION and device.type == "cuda" and not torch.backends.cudnn.is_available():
            return "cuDNN is not available in this torch build"
        if self.sdpa_backend is SDPBackend.MATH:
            return dense_path_reason(workload, device)
        return None

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        margs = sdpa_mask_args(workload)
        if workload.is_varlen:
            margs = SdpaMaskArgs(dense_mask(workload, device), False,
                                 "explicit boolean mask [B, 1, Lq_max, Lk_max] from per-sequence lengths")
        gqa = workload.is_gqa
        backend = self.sdpa_backend

        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=margs.attn_mask, is_causal=margs.is_causal, enable_gqa=gqa
            )

        # Trial call on tiny tensors of the same head layout, dtype and mask class: PyTorch's kernel
        # selection depends on those, not on the lengths; a rejection raises "No available kernel".
        _trial(workload, device, backend)
        varlen = workload.is_varlen
        return Prepared(
            forward=forward,
            context=lambda: sdpa_kernel([backend]),
            notes=(margs.how, "enable_gqa=True" if gqa else "MHA") + ((padding_note(workload),) if varlen else ()),
            executed_pairs=padded_pairs(workload) if varlen else None,
        )


def _trial(workload: Workload, device: torch.device, backend: SDPBackend) -> None:
    """Run SDPA once on small inputs under ``sdpa_kernel([backend])``; raise Unsupported on rejection."""
    lq, lk = workload.q_len, workload.kv_len
    if lq == lk:
        lq = lk = min(lk, 16)
    elif lq == 1:
        lk = min(lk, 16)
    else:  # keep Lq < Lk (bottom-right bias) or Lq > Lk
        lq, lk = (min(lq, 8), min(lk, 16)) if lq < lk else (min(lq, 16), min(lk, 8))
    phase = "prefill" if workload.phase.value == "mixed" else workload.phase
    small = Workload(phase=phase, batch=1, q_len=lq, kv_len=lk, num_q_heads=workload.num_q_heads,
                     num_kv_heads=workload.num_kv_heads, head_dim=workload.head_dim, dtype=workload.dtype, mask=workload.mask)
    margs = sdpa_mask_args(small)
    if workload.is_varlen:  # the same mask class as the real call: an arbitrary boolean tensor
        margs = SdpaMaskArgs(varlen_mask((lq,), (lk,), causal=True, device=device), False, "")
    dtype = getattr(torch, workload.dtype)
    q = torch.randn(small.q_shape, device=device, dtype=dtype)
    k = torch.randn(small.kv_shape, device=device, dtype=dtype)
    v = torch.randn(small.kv_shape, device=device, dtype=dtype)

    def forward(q, k, v):  # noqa: ANN001
        return F.scaled_dot_product_attention(q, k, v, attn_mask=margs.attn_mask, is_causal=margs.is_causal,
                                              enable_gqa=small.is_gqa)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([backend]):
                if workload.phase.value == "train":
                    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
                    forward(q, k, v).sum().backward()
                else:
                    forward(q, k, v)
        except RuntimeError as exc:
            detail = _rejection_reasons([str(w.message) for w in caught]) or str(exc).splitlines()[0]
            raise Unsupported(f"{backend.name} rejected this workload: {detail[:600]}") from None


def _rejection_reasons(messages: list[str]) -> str:
    """PyTorch's reasons for rejecting the pinned kernel, from SDPA's warnings.

    SDPA warns a header ("Memory efficient kernel not used because:") then the reason, for every
    kernel it considered; the kernels we disabled on purpose ("... has been runtime disabled.") are
    dropped with their headers, as is each "(Triggered internally at file:line)" suffix. The sizes in
    the text are those of the small trial call (same heads, head_dim and dtype; lengths capped at 16).
    """
    cleaned = [_clean(m) for m in messages]
    out: list[str] = []
    for i, m in enumerate(cleaned):
        if not m or "runtime disabled" in m:
            continue
        nxt = cleaned[i + 1] if i + 1 < len(cleaned) else ""
        if m.endswith(":") and (not nxt or "runtime disabled" in nxt):
            continue
        out.append(m)
    return " ".join(dict.fromkeys(out))


def _clean(message: str) -> str:
    """A PyTorch kernel-selection warning without its "(Triggered internally at file:line.)" suffix."""
    return re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", message).strip()


SDPA_BACKENDS: tuple[SdpaBackend, ...] = (
    SdpaBackend("sdpa-math", SDPBackend.MATH, DENSE, "SDPA math backend: composite aten ops (K/V expanded for GQA)", False),
    SdpaBackend("sdpa-flash", SDPBackend.FLASH_ATTENTION, FLASH, "SDPA FlashAttention-2 kernels on CUDA (split-KV for decode); on a CPU, ATen's flash-attention CPU kernel", False),
    SdpaBackend("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION, EFFICIENT, "SDPA memory-efficient (xFormers CUTLASS) kernels", True),
    SdpaBackend("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION, CUDNN, "SDPA cuDNN fused attention", True),
)
