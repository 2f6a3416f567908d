"""Fresh random inputs for a workload, the high-precision reference, and the correctness check.

Never zeros: q, k, v and the output gradient are standard normal, drawn fresh for every workload
(seeded per run so a run is reproducible, different across workloads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from profattn.backends.base import AttentionInputs
from profattn.backends.masks import dense_mask, varlen_mask
from profattn.backends.memory import fit_reason
from profattn.results import Correctness
from profattn.workload import KVLayout, Mask, Phase, Workload
from profattn.workload.paged import CacheAppend, PagedKVCache, per_head_scales

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
    layout the page pool (K/V again, rounded up to whole pages per sequence). A variable-length call's dense
    tensors are padded to its longest sequence (``q_len``/``kv_len`` are the longest), plus its length tensors
    (int32, B each); an appending call adds the step's new K/V (``[Σ q_len_b, Hkv, d]`` each) and their slot
    mapping (int64); a quantized cache adds its FP8 pools and the fp32 quotient of one pool while quantizing."""
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
        if w.is_kv_quantized:  # the FP8 pools, and the fp32 quotient of one pool while it is quantized
            total += pages * w.page_size * w.num_kv_heads * w.head_dim * (2 * w.kv_itemsize + 4)
    if w.is_varlen or w.append:
        total += 2 * 4 * w.batch
    if w.append:
        total += 2 * w.q_tokens * w.num_kv_heads * w.head_dim * w.itemsize + 8 * w.q_tokens
    return total


def reference_bytes_needed(workload: Workload, device: torch.device) -> int:
    """Bytes :func:`reference` allocates: Q, K, V (and dO and three gradients for train) and the output in
    the reference precision (fp64 on CPU, fp32 on CUDA), the dense boolean mask, and one score-matrix
    chunk (at most :data:`REFERENCE_CHUNK_BYTES`); a quantized cache adds its dequantized K/V and a second output.
    A variable-length call's reference runs sequence by sequence
    on the padded tensors: its mask is one sequence's at most (``q_len · kv_len``, the longest)."""
    w = workload
    hi = _hi_itemsize(device)
    q = w.batch * w.num_q_heads * w.q_len * w.head_dim
    kv = w.batch * w.num_kv_heads * w.kv_len * w.head_dim
    n = 2 * q + 2 * kv  # q, out, k, v
    if w.phase is Phase.TRAIN:
        n += 2 * q + 2 * kv  # dO, dq, dk, dv
    mask = w.q_len * w.kv_len * (w.batch if w.is_ragged and not w.is_varlen else 1)  # [B, 1, Lq, Lk]; varlen: per sequence
    if w.is_kv_quantized:
        n += 2 * kv + q  # the dequantized K/V and the second (unquantized) output
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
    """The reference output ``[B, Hq, Lq, d]`` and, for train, gradients of q, k, v (high precision); for a
    quantized cache ``out`` is over the dequantized cache and ``unquantized_out`` over the values before quantizing."""

    out: torch.Tensor
    grads: dict[str, torch.Tensor] | None
    precision: str
    #: A quantized cache's reference over the unquantized K/V (``[B, Hq, Lq, d]``), else None.
    unquantized_out: torch.Tensor | None = None


def make_inputs(workload: Workload, device: torch.device, seed: int) -> AttentionInputs:
    """Standard-normal q, k, v (and dO for train) in the workload's dtype on ``device``.

    A variable-length call pads to its longest sequence (see :class:`AttentionInputs`; padding rows of dO are
    zero, so they add nothing to a gradient). An appending call also gets the step's new K/V (each sequence's
    last ``q_len_b`` tokens of ``k``/``v``, packed) and their pool slots, and its paged cache starts with those
    slots holding the fill: only the cached prefix is in the cache until the call appends. A quantized cache
    (``workload.kv_dtype``) holds the FP8 codes of ``k``/``v`` with per-KV-head scales ``amax / 448``
    (:func:`~profattn.workload.paged.per_head_scales`); its unused slots saturate to code 448. ``k``/``v`` keep the
    unquantized values (the reference over them gives ``quant_rel_err``)."""
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
        if workload.is_kv_quantized:  # FP8 codes + per-KV-head scales; k/v stay the unquantized values
            paged.quantize_fp8(per_head_scales(k, workload.kv_lens), per_head_scales(v, workload.kv_lens))
    q_lens = kv_lens = append = None
    if workload.is_varlen or workload.append:
        q_lens = torch.tensor(workload.q_lens, dtype=torch.int32, device=device)
        kv_lens = torch.tensor(workload.kv_lens, dtype=torch.int32, device=device)
    if workload.append:
        append = new_tokens(workload, k, v, paged)
        paged.clear_slots(append.slot_mapping)
    if train:
        for t in (q, k, v):
            t.requires_grad_(True)
    grad_out = draw(workload.q_shape) if train else None
    if grad_out is not None and workload.is_varlen:
        grad_out.masked_fill_(~_valid_rows(workload.q_lens, workload.q_len, device).view(workload.batch, 1, -1, 1), 0)
    return AttentionInputs(q, k, v, grad_out, paged, q_lens=q_lens, kv_lens=kv_lens, append=append)


def new_tokens(workload: Workload, k: torch.Tensor, v: torch.Tensor, cache: PagedKVCache) -> CacheAppend:
    """The step's new K/V, packed ``[Σ q_len_b, Hkv, d]``: sequence ``b``'s tokens ``kv_len_b − q_len_b …
    kv_len_b − 1`` of the dense ``k``/``v`` (``[B, Hkv, Lk_max, d]``), with their flat slots in ``cache``
    (:meth:`PagedKVCache.slot_mapping`, int64)."""
    parts_k, parts_v = [], []
    for b, (nq, nk) in enumerate(zip(workload.q_lens, workload.kv_lens)):
        parts_k.append(k[b, :, nk - nq:nk].transpose(0, 1))
        parts_v.append(v[b, :, nk - nq:nk].transpose(0, 1))
    return CacheAppend(torch.cat(parts_k).contiguous(), torch.cat(parts_v).contiguous(),
                       cache.slot_mapping(list(workload.q_lens)))


def _valid_rows(lens: "tuple[int, ...]", longest: int, device: torch.device) -> torch.Tensor:
    """``[B, longest]`` bool: position ``i`` of sequence ``b`` is one of its own (``i < lens[b]``), not padding."""
    return torch.arange(longest, device=device)[None, :] < torch.tensor(list(lens), device=device)[:, None]


def reference(workload: Workload, inputs: AttentionInputs, *, chunk_bytes: int = REFERENCE_CHUNK_BYTES) -> Reference:
    """Eager attention with an explicit mask on inputs upcast to fp32 (CUDA) or fp64 (CPU); a sliding window is
    part of that mask (:func:`~profattn.backends.masks.dense_mask`).

    The score matrix is built in chunks of whole sequences, then KV heads, then query rows, each chunk at
    most ``chunk_bytes`` of intermediates (one chunk when the whole call fits), so long prefills stay
    checkable: rows of a softmax are independent, and the gradients of K and V accumulate over the chunks
    (autograd sums into the leaves' ``.grad``).

    A quantized cache (``workload.kv_dtype``, forward only) is attended over its dequantized values
    (:meth:`PagedKVCache.dense`: ``code · scale`` in the reference precision) — the answer a kernel must give —
    and once more over the unquantized ``k``/``v`` (:attr:`Reference.unquantized_out`).

    A variable-length call is computed sequence by sequence on its own rows and keys (query row ``i`` of
    sequence ``b`` at position ``kv_len_b − q_len_b + i``, bottom-right); the padded output's padding rows are
    zero, as are the gradients' padding rows and key slots (dO is zero there, see :func:`make_inputs`).
    """
    hi = torch.float64 if inputs.q.device.type == "cpu" else torch.float32
    if workload.is_kv_quantized:
        k_deq, v_deq = inputs.paged.dense(hi)
        out = _reference_out(workload, inputs.q, k_deq, v_deq, hi, chunk_bytes)
        del k_deq, v_deq
        plain = _reference_out(workload, inputs.q, inputs.k, inputs.v, hi, chunk_bytes)
        return Reference(out, None, "fp64" if hi is torch.float64 else "fp32", unquantized_out=plain)
    train = inputs.grad_out is not None
    q, k, v = (t.detach().to(hi).requires_grad_(train) for t in (inputs.q, inputs.k, inputs.v))
    d_out = inputs.grad_out.to(hi) if train else None
    out = torch.zeros(q.shape, dtype=hi, device=q.device)
    unit = _score_row_bytes(workload, torch.finfo(hi).bits // 8)
    with torch.autocast(device_type=q.device.type, enabled=False):
        if not workload.is_varlen:
            _reference_chunks(q, k, v, d_out, out, dense_mask(workload, q.device), unit, chunk_bytes)
        else:
            causal = workload.mask is Mask.CAUSAL
            for b, (nq, nk) in enumerate(zip(workload.q_lens, workload.kv_lens)):
                rows, keys = slice(0, nq), slice(0, nk)
                mask = (varlen_mask((nq,), (nk,), causal=True, device=q.device, window=workload.window)[0, 0]
                        if causal else None)
                _reference_chunks(q[b:b + 1, :, rows], k[b:b + 1, :, keys], v[b:b + 1, :, keys],
                                  d_out[b:b + 1, :, rows] if train else None, out[b:b + 1, :, rows], mask, unit,
                                  chunk_bytes)
    grads = {"dq": q.grad.detach(), "dk": k.grad.detach(), "dv": v.grad.detach()} if train else None
    return Reference(out, grads, "fp64" if hi is torch.float64 else "fp32")


def _reference_out(workload: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hi: torch.dtype,
                   chunk_bytes: int) -> torch.Tensor:
    """The forward reference ``[B, Hq, Lq, d]`` in ``hi`` of ``q`` over ``k``/``v`` (``[B, Hkv, ≥ Lk, d]``; key slots
    past each sequence's length are masked or cut), without gradients."""
    q, k, v = (t.detach().to(hi) for t in (q, k, v))
    out = torch.zeros(q.shape, dtype=hi, device=q.device)
    unit = _score_row_bytes(workload, torch.finfo(hi).bits // 8)
    with torch.autocast(device_type=q.device.type, enabled=False):
        if not workload.is_varlen:
            n = workload.kv_len
            _reference_chunks(q, k[:, :, :n], v[:, :, :n], None, out, dense_mask(workload, q.device), unit, chunk_bytes)
        else:
            causal = workload.mask is Mask.CAUSAL
            for b, (nq, nk) in enumerate(zip(workload.q_lens, workload.kv_lens)):
                mask = varlen_mask((nq,), (nk,), causal=True, device=q.device)[0, 0] if causal else None
                _reference_chunks(q[b:b + 1, :, :nq], k[b:b + 1, :, :nk], v[b:b + 1, :, :nk], None,
                                  out[b:b + 1, :, :nq], mask, unit, chunk_bytes)
    return out


def _reference_chunks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d_out: torch.Tensor | None,
                      out: torch.Tensor, mask: torch.Tensor | None, unit: int, chunk_bytes: int) -> None:
    """Fill ``out`` (``[B, Hq, Lq, d]``, a view) with :func:`grouped_attention` of ``q``/``k``/``v`` in chunks of
    whole sequences, then KV heads, then query rows, each at most ``chunk_bytes`` (``unit`` bytes per (sequence,
    KV head, query row)); with ``d_out``, back-propagate each chunk into the leaves' gradients."""
    train = d_out is not None
    b, hq, lq, _ = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    rows = max(1, min(lq, chunk_bytes // unit))
    heads = max(1, min(hkv, chunk_bytes // (unit * lq))) if rows == lq else 1
    seqs = max(1, min(b, chunk_bytes // (unit * lq * hkv))) if heads == hkv else 1
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


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | None) -> torch.Tensor:
    """Reference attention without materialising K/V per query head: the GQA group's queries are stacked
    as extra rows of their KV head (``q`` viewed as ``[B, Hkv, G·Lq, d]``), so memory stays at the size of
    K/V even for long caches: ``softmax(Q Kᵀ / √d, masked) V`` in the inputs' (reference) precision, a row that sees
    no key giving zeros. Its own implementation: the ``eager`` backend under test is checked against it, not against
    itself (they share only the mask builder, :mod:`profattn.backends.masks`).

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
    scores = torch.matmul(qg, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    if mask is not None:
        m = mask if mask.dim() == 4 else mask.view(1, 1, *mask.shape)
        m = m.repeat(1, 1, g, 1)  # rows are (group member, query position), query position fastest
        scores = scores.masked_fill(~m, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if mask is not None:
        probs = torch.nan_to_num(probs, nan=0.0)  # a row without a visible key: zeros, not NaN
    return torch.matmul(probs, v).reshape(b, hq, lq, d)


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


def valid_part(workload: Workload, x: torch.Tensor, *, keys: bool = False) -> torch.Tensor:
    """The rows of ``x`` (``[B, H, L_max, d]``) that belong to the call's sequences, ``[Σ len_b, H, d]``: query
    rows (``keys`` False: ``q_len_b`` of sequence ``b``) or key slots (``kv_len_b``) of a variable-length call;
    ``x`` itself for a uniform call."""
    if not workload.is_varlen:
        return x
    lens, longest = (workload.kv_lens, workload.kv_len) if keys else (workload.q_lens, workload.q_len)
    return x.transpose(1, 2)[_valid_rows(lens, longest, x.device)]


#: Seed of the fresh values :func:`perturb_document` draws (apart from the run's seed: any values will do).
PERTURB_SEED = 20_240_601


def perturb_document(workload: Workload, inputs: AttentionInputs, doc: int) -> AttentionInputs:
    """A copy of ``inputs`` whose document ``doc`` (sequence ``doc`` of a variable-length call: its query rows
    ``0 … q_len_doc − 1``, key slots ``0 … kv_len_doc − 1`` and, for train, dO rows) holds fresh standard-normal
    values (:data:`PERTURB_SEED`); every other row, padding included, is copied unchanged. For train the copies
    are new leaves that require grad. Used by the document-isolation check.

    Raises:
        ValueError: ``doc`` is not one of the call's sequences, or the call is not variable-length.
    """
    if not workload.is_varlen or not 0 <= doc < workload.batch:
        raise ValueError(f"document {doc} is not one of the {workload.batch} sequences of a variable-length call")
    gen = torch.Generator(device=inputs.q.device).manual_seed(PERTURB_SEED)
    nq, nk = workload.q_lens[doc], workload.kv_lens[doc]

    def fresh(t: torch.Tensor, n: int) -> torch.Tensor:
        t = t.detach().clone()
        part = t[doc, :, :n]
        part.copy_(torch.randn(part.shape, generator=gen, dtype=torch.float32, device=t.device).to(t.dtype))
        return t

    train = inputs.grad_out is not None
    q, k, v = fresh(inputs.q, nq), fresh(inputs.k, nk), fresh(inputs.v, nk)
    if train:
        for t in (q, k, v):
            t.requires_grad_(True)
    grad_out = fresh(inputs.grad_out, nq) if train else None
    return AttentionInputs(q, k, v, grad_out, None, q_lens=inputs.q_lens, kv_lens=inputs.kv_lens)


#: How far another document's values may move when one document is replaced, as a multiple of how far they move
#: between two identical runs, for a kernel that is not bit-reproducible run to run (FlashAttention-2's and cuDNN's
#: backward accumulate dq with atomics in a run-dependent order): the same few ulps, with room for a second draw.
NONDETERMINISM_SLACK = 4.0


def document_changes(workload: Workload, doc: int | None, out: torch.Tensor,
                     grads: dict[str, torch.Tensor | None] | None, out2: torch.Tensor,
                     grads2: dict[str, torch.Tensor | None] | None) -> dict[str, list[float]]:
    """Largest absolute change of every sequence's own rows between two runs, per tensor: ``{"output": [Δ_0, …],
    "dq": …, "dk": …, "dv": …}`` (``out``/``out2`` ``[B, Hq, Lq_max, d]``; ``dq`` rows, ``dk``/``dv`` key slots;
    gradients only when ``grads`` is given), sequence ``doc`` reported as 0 (the replaced one); padding rows are not
    compared; NaN counts as infinity; a gradient missing in one run is infinity everywhere."""
    pairs = [("output", out, out2, False)]
    if grads is not None:
        pairs += [(name, grads.get(name), (grads2 or {}).get(name), name != "dq") for name in ("dq", "dk", "dv")]
    lens = {False: workload.q_lens, True: workload.kv_lens}
    changes: dict[str, list[float]] = {}
    for name, a, b, keys in pairs:
        row = []
        for s, n in enumerate(lens[keys]):
            if s == doc:
                row.append(0.0)
            elif a is None or b is None:
                row.append(float("inf"))
            else:
                x, y = a[s, :, :n].detach(), b[s, :, :n].detach()
                row.append(0.0 if torch.equal(x, y) else
                           (x.double() - y.double()).abs().nan_to_num(nan=float("inf")).max().item())
        changes[name] = row
    return changes


def isolation_error(workload: Workload, doc: int, out: torch.Tensor, grads: dict[str, torch.Tensor | None] | None,
                    out2: torch.Tensor, grads2: dict[str, torch.Tensor | None] | None,
                    allowed: "dict[str, float] | None" = None) -> str | None:
    """None when every sequence but ``doc`` has output rows and gradients (as :func:`document_changes`) within
    ``allowed[tensor]`` of the first run — bit-for-bit equal where ``allowed`` is None or 0 — else one line naming
    the first tensor and sequence that moved, with the largest absolute difference (and the bound when not 0)."""
    allowed = allowed or {}
    missing = {n for n in ("dq", "dk", "dv")
               if grads is not None and (grads.get(n) is None or (grads2 or {}).get(n) is None)}
    for name, row in document_changes(workload, doc, out, grads, out2, grads2).items():
        if name in missing:
            return f"{name}: no gradient in one of the two runs"
        bound = allowed.get(name, 0.0)
        for s, diff in enumerate(row):
            if s != doc and diff > bound:
                limit = (f", above the {bound:.3g} two identical runs differ by × {NONDETERMINISM_SLACK:g}"
                         if bound else "")
                return (f"{name} of document {s} changed (max |Δ| {diff:.3g}{limit}) when only document {doc}'s q, k, v"
                        + (", dO" if grads is not None else "") + " were replaced")
    return None


def check(workload: Workload, out: torch.Tensor, grads: dict[str, torch.Tensor] | None, ref: Reference) -> Correctness:
    """Compare a backend's output (and gradients) with the reference; see :data:`OUT_TOLERANCE`.

    A variable-length call is compared on its sequences' own rows only (:func:`valid_part`: padding rows,
    whatever a kernel wrote there, are not part of the answer; a wrong value in any valid row counts in full).
    The cache of an appending call is checked by the cell, after its timed runs (``cache_ok``). A quantized cache's
    output is judged against the dequantized-cache reference; its error against the unquantized one is
    ``quant_rel_err``, reported apart and not judged (it is the format's, not the kernel's).

    Raises:
        ValueError: the output's shape differs from the reference's.
    """
    tol = OUT_TOLERANCE[workload.dtype]
    gtol = GRAD_TOLERANCE[workload.dtype]
    if tuple(out.shape) != tuple(ref.out.shape):
        raise ValueError(f"output shape {tuple(out.shape)} != reference shape {tuple(ref.out.shape)}")
    err = rel_err(valid_part(workload, out), valid_part(workload, ref.out))
    passed = err <= tol
    grad_err = None
    if ref.grads is not None:
        if grads is None or any(g is None for g in grads.values()):
            grad_err = {name: float("inf") for name in ref.grads}
        else:
            grad_err = {name: rel_err(valid_part(workload, grads[name], keys=name != "dq"),
                                      valid_part(workload, ref.grads[name], keys=name != "dq")) for name in ref.grads}
        passed = passed and all(e <= gtol for e in grad_err.values())
    quant_err = None
    if ref.unquantized_out is not None:
        quant_err = rel_err(valid_part(workload, out), valid_part(workload, ref.unquantized_out))
    return Correctness(out_rel_err=err, tolerance=tol, passed=bool(passed), reference=ref.precision, grad_rel_err=grad_err,
                       quant_rel_err=quant_err)
