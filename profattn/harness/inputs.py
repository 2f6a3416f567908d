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
from profattn.backends.memory import fit_reason
from profattn.results import Correctness
from profattn.workload import KVLayout, Phase, Workload
from profattn.workload.paged import PagedKVCache

#: ‖out − ref‖/‖ref‖ bound per dtype. bf16 keeps 8 mantissa bits (unit roundoff 2⁻⁸ ≈ 3.9e-3): attention
#: outputs from bf16 kernels land near 3e-3–8e-3 and their gradients near 1e-2, so 2e-2 / 3e-2 leaves
#: room for accumulation order without letting a wrong kernel (errors ~1) through. fp16 has 11 bits.
OUT_TOLERANCE: dict[str, float] = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4}
GRAD_TOLERANCE: dict[str, float] = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 1e-4}


#: Upper bound on the reference's score-matrix chunk (bytes in the reference precision, times the
#: intermediates it keeps): larger workloads are checked in chunks of batch, KV heads and query rows.
REFERENCE_CHUNK_BYTES = 1 << 30


def _hi_itemsize(device: torch.device) -> int:
    return 8 if device.type == "cpu" else 4


def inputs_bytes_needed(workload: Workload) -> int:
    """Bytes :func:`make_inputs` allocates for ``workload``: Q, K, V (and dO plus the gradients of Q, K, V for
    train) in the workload's dtype, the fp32 draw of the largest tensor before its cast, and for a paged
    layout the page pool (K/V again, rounded up to whole pages per sequence)."""
    w = workload
    q = w.batch * w.num_q_heads * w.q_len * w.head_dim
    kv = w.batch * w.num_kv_heads * w.kv_len * w.head_dim
    n = q + 2 * kv
    if w.phase is Phase.TRAIN:
        n *= 2  # gradients of q, k, v
        n += q  # dO
    total = n * w.itemsize + 4 * max(q, kv)
    if w.kv_layout is KVLayout.PAGED:
        pages = sum(-(-length // w.page_size) for length in w.kv_lens)
        total += 2 * pages * w.page_size * w.num_kv_heads * w.head_dim * w.itemsize
    return total


def reference_bytes_needed(workload: Workload, device: torch.device) -> int:
    """Bytes :func:`reference` allocates: Q, K, V (and dO and three gradients for train) and the output in
    the reference precision (fp64 on CPU, fp32 on CUDA), the dense boolean mask, and one score-matrix
    chunk (at most :data:`REFERENCE_CHUNK_BYTES`)."""
    w = workload
    hi = _hi_itemsize(device)
    q = w.batch * w.num_q_heads * w.q_len * w.head_dim
    kv = w.batch * w.num_kv_heads * w.kv_len * w.head_dim
    n = 2 * q + 2 * kv  # q, out, k, v
    if w.phase is Phase.TRAIN:
        n += 2 * q + 2 * kv  # dO, dq, dk, dv
    mask = w.q_len * w.kv_len * (w.batch if w.is_ragged else 1)
    unit = _score_row_bytes(w, hi)
    return n * hi + mask + min(REFERENCE_CHUNK_BYTES, w.batch * w.num_kv_heads * w.q_len * unit)


def memory_reason(workload: Workload, device: torch.device) -> str | None:
    """None when the workload's inputs and its reference fit in the free memory of ``device``, else why
    not, e.g. ``"inputs and reference need ~4.4 TB; cuda has 139 GiB free"`` (checked before allocating)."""
    need = inputs_bytes_needed(workload) + reference_bytes_needed(workload, device)
    return fit_reason(need, device, "inputs and reference")


def _score_row_bytes(workload: Workload, itemsize: int) -> int:
    """Bytes the reference keeps per (sequence, KV head, query row): the GQA group's score, probability
    and (train) gradient rows over all keys, plus the group's boolean mask row."""
    rows = workload.group_size * workload.kv_len
    return rows * itemsize * (4 if workload.phase is Phase.TRAIN else 2) + rows


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


def reference(workload: Workload, inputs: AttentionInputs, *, chunk_bytes: int = REFERENCE_CHUNK_BYTES) -> Reference:
    """Eager attention with an explicit mask on inputs upcast to fp32 (CUDA) or fp64 (CPU).

    The score matrix is built in chunks of whole sequences, then KV heads, then query rows, each chunk at
    most ``chunk_bytes`` of intermediates (one chunk when the whole call fits), so long prefills stay
    checkable: rows of a softmax are independent, and the gradients of K and V accumulate over the chunks
    (autograd sums into the leaves' ``.grad``).
    """
    hi = torch.float64 if inputs.q.device.type == "cpu" else torch.float32
    train = inputs.grad_out is not None
    q, k, v = (t.detach().to(hi).requires_grad_(train) for t in (inputs.q, inputs.k, inputs.v))
    d_out = inputs.grad_out.to(hi) if train else None
    mask = dense_mask(workload, q.device)
    b, hq, lq, _ = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    unit = _score_row_bytes(workload, torch.finfo(hi).bits // 8)
    rows = max(1, min(lq, chunk_bytes // unit))
    heads = max(1, min(hkv, chunk_bytes // (unit * lq))) if rows == lq else 1
    seqs = max(1, min(b, chunk_bytes // (unit * lq * hkv))) if heads == hkv else 1
    out = torch.empty(q.shape, dtype=hi, device=q.device)
    with torch.autocast(device_type=q.device.type, enabled=False):
        for b0 in range(0, b, seqs):
            bs = slice(b0, b0 + seqs)
            for h0 in range(0, hkv, heads):
                hs, qh = slice(h0, h0 + heads), slice(h0 * g, (h0 + heads) * g)
                for r0 in range(0, lq, rows):
                    rs = slice(r0, r0 + rows)
                    m = None if mask is None else mask[rs] if mask.dim() == 2 else mask[bs, :, rs]
                    o = grouped_attention(q[bs, qh, rs], k[bs, hs], v[bs, hs], mask=m)
                    out[bs, qh, rs] = o.detach()
                    if train:
                        o.backward(d_out[bs, qh, rs])
                    del o
    grads = {"dq": q.grad.detach(), "dk": k.grad.detach(), "dv": v.grad.detach()} if train else None
    return Reference(out, grads, "fp64" if hi is torch.float64 else "fp32")


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
