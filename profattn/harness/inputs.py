"""Fresh random inputs for a workload, the high-precision reference, and the correctness check.

Never zeros: q, k, v and the output gradient are standard normal, drawn fresh for every workload
(seeded per run so a run is reproducible, different across workloads).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from profattn.backends.base import AttentionInputs
from profattn.backends.eager import eager_attention
from profattn.backends.masks import dense_mask
from profattn.results import Correctness
from profattn.workload.paged import PagedKVCache
from profattn.workload import KVLayout, Phase, Workload

#: ‖out − ref‖/‖ref‖ bound per dtype. bf16 keeps 8 mantissa bits (unit roundoff 2⁻⁸ ≈ 3.9e-3): attention
#: outputs from bf16 kernels land near 3e-3–8e-3 and their gradients near 1e-2, so 2e-2 / 3e-2 leaves
#: room for accumulation order without letting a wrong kernel (errors ~1) through. fp16 has 11 bits.
OUT_TOLERANCE: dict[str, float] = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4}
GRAD_TOLERANCE: dict[str, float] = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 1e-4}


@dataclass
class Reference:
    """The reference output ``[B, Hq, Lq, d]`` and, for train, gradients of q, k, v (high precision)."""

    out: torch.Tensor
    grads: dict[str, torch.Tensor] | None
    precision: str


def make_inputs(workload: Workload, device: torch.device, seed: int) -> AttentionInputs:
    """Standard-normal q, k, v (and dO for train) in the workload's dtype on ``device``."""
    # Drawn on the device itself (a CPU generator would spend seconds on a 4 GB decode cache);
    # reproducible for a given device type and seed.
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, workload.dtype)

    def draw(shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.float32, device=device).to(dtype)

    train = workload.phase is Phase.TRAIN
    q, k, v = draw(workload.q_shape), draw(workload.kv_shape), draw(workload.kv_shape)
    paged = None
    if workload.kv_layout is KVLayout.PAGED:
        p = workload.shared_prefix_len
        if p:  # every sequence starts with sequence 0's prefix, stored once in shared pages
            k[1:, :, :p] = k[:1, :, :p]
            v[1:, :, :p] = v[:1, :, :p]
        # Each sequence gets its own physical pages in a shuffled order (a long-running server's free
        # list), never one shared arange table that lets the whole batch hit the same lines.
        # Unused slots (the tail of each last page) hold a large finite poison, as a server's pool holds
        # stale tokens: a kernel that forgets the length mask gets a visibly wrong answer, while one that
        # loads whole blocks and masks scores (FlexAttention) stays correct. Unit tests use NaN instead.
        paged = PagedKVCache.from_dense(k, v, page_size=workload.page_size, seq_lens=list(workload.kv_lens),
                                        shared_prefix_len=p, generator=torch.Generator().manual_seed(seed + 1),
                                        fill=1e4)
    if train:
        for t in (q, k, v):
            t.requires_grad_(True)
    return AttentionInputs(q, k, v, draw(workload.q_shape) if train else None, paged)


def reference(workload: Workload, inputs: AttentionInputs) -> Reference:
    """Eager attention with an explicit mask on inputs upcast to fp32 (CUDA) or fp64 (CPU)."""
    hi = torch.float64 if inputs.q.device.type == "cpu" else torch.float32
    q, k, v = (t.detach().to(hi).requires_grad_(inputs.grad_out is not None) for t in (inputs.q, inputs.k, inputs.v))
    mask = dense_mask(workload, q.device)
    with torch.autocast(device_type=q.device.type, enabled=False):
        out = grouped_attention(q, k, v, mask=mask)
        grads = None
        if inputs.grad_out is not None:
            out.backward(inputs.grad_out.to(hi))
            grads = {"dq": q.grad.detach(), "dk": k.grad.detach(), "dv": v.grad.detach()}
    return Reference(out.detach(), grads, "fp64" if hi is torch.float64 else "fp32")


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | None) -> torch.Tensor:
    """Reference attention without materialising K/V per query head: the GQA group's queries are stacked
    as extra rows of their KV head (``q`` viewed as ``[B, Hkv, G·Lq, d]``), so memory stays at the size of
    K/V even for long caches. Same maths as :func:`~profattn.backends.eager.eager_attention`.

    Args:
        q: ``[B, Hq, Lq, d]``; k, v: ``[B, Hkv, Lk, d]``.
        mask: boolean ``[Lq, Lk]`` or ``[B, 1, Lq, Lk]`` (True = attend), or None.
    Returns:
        ``[B, Hq, Lq, d]``.
    """
    b, hq, lq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    qg = q.reshape(b, hkv, g * lq, d)
    m = None
    if mask is not None:
        m = mask if mask.dim() == 4 else mask.view(1, 1, *mask.shape)
        m = m.repeat(1, 1, g, 1)  # rows are (group member, query position), query position fastest
    out = eager_attention(qg, k, v, mask=m)
    return out.reshape(b, hq, lq, d)


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """‖x − ref‖₂ / ‖ref‖₂ computed in ref's precision; NaN/inf in ``x`` give ``inf``.

    Raises:
        ValueError: shapes differ.
    """
    if tuple(x.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(x.shape)} != reference shape {tuple(ref.shape)}")
    x = x.detach().to(ref.dtype)
    if not torch.isfinite(x).all():
        return float("inf")
    denom = torch.linalg.vector_norm(ref).item()
    return torch.linalg.vector_norm(x - ref).item() / (denom if denom else 1.0)


def check(workload: Workload, out: torch.Tensor, grads: dict[str, torch.Tensor] | None, ref: Reference) -> Correctness:
    """Compare a backend's output (and gradients) with the reference; see :data:`OUT_TOLERANCE`."""
    tol = OUT_TOLERANCE[workload.dtype]
    gtol = GRAD_TOLERANCE[workload.dtype]
    err = rel_err(out, ref.out)
    passed = err <= tol
    grad_err = None
    if ref.grads is not None:
        if grads is None or any(g is None for g in grads.values()):
            grad_err = {name: float("inf") for name in ref.grads}
        else:
            grad_err = {name: rel_err(grads[name], ref.grads[name]) for name in ref.grads}
        passed = passed and all(e <= gtol for e in grad_err.values())
    return Correctness(out_rel_err=err, tolerance=tol, passed=bool(passed), reference=ref.precision, grad_rel_err=grad_err)
