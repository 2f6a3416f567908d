"""Mask semantics shared by every backend: one place that turns a workload's mask into call arguments.

profattn's causal mask is bottom-right aligned (see :mod:`profattn.workload`). SDPA's ``is_causal=True``
is top-left aligned (torch docs, ``torch.nn.functional.scaled_dot_product_attention``), so it is only
used where the two agree (``q_len == kv_len``); a single query row sees every key (no mask needed);
anything else gets ``torch.nn.attention.bias.causal_lower_right``. A sliding window (``Workload.window``) that
hides any key (:func:`window_applies`) is an explicit boolean mask: query ``t`` keeps keys ``j`` with
``Lk − Lq + t − W < j ≤ Lk − Lq + t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from profattn.workload import Mask, Workload


@dataclass(frozen=True)
class SdpaMaskArgs:
    """Keyword arguments for SDPA: ``attn_mask`` (None or a ``CausalBias``) and ``is_causal``."""

    attn_mask: object | None
    is_causal: bool
    how: str


def window_applies(workload: Workload) -> bool:
    """True when the workload's sliding window hides some key from some row: ``window < kv_len`` (the longest
    sequence; a row sees at most its sequence's ``kv_len`` keys). A window of ``kv_len`` or more is the causal mask."""
    return workload.window is not None and workload.window < workload.kv_len


def sdpa_mask_args(workload: Workload, device: torch.device | str = "cpu") -> SdpaMaskArgs:
    """SDPA arguments that implement the workload's (bottom-right) mask exactly; a sliding window that hides keys
    is an explicit boolean mask on ``device`` (:func:`dense_mask`)."""
    if window_applies(workload):
        return SdpaMaskArgs(dense_mask(workload, device), False,
                            f"explicit boolean mask: sliding window of {workload.window} keys (bottom-right)")
    if workload.mask is Mask.NONE:
        return SdpaMaskArgs(None, False, "no mask")
    if workload.q_len == workload.kv_len:
        return SdpaMaskArgs(None, True, "is_causal=True (square: top-left == bottom-right)")
    if workload.q_len == 1:
        return SdpaMaskArgs(None, False, "single query row sees every key: no mask")
    from torch.nn.attention.bias import causal_lower_right

    return SdpaMaskArgs(causal_lower_right(workload.q_len, workload.kv_len), False, "causal_lower_right bias")


def dense_mask(workload: Workload, device: torch.device | str) -> torch.Tensor | None:
    """Explicit boolean mask (True = attend), or None when nothing is masked.

    ``[q_len, kv_len]`` for uniform lengths; ``[batch, 1, q_len, kv_len]`` when lengths are ragged
    (keys past each sequence's length masked; its queries sit at its own last position) or per sequence
    (a variable-length call padded to the longest: see :func:`varlen_mask`). A sliding window ``W`` also drops
    keys ``j ≤ position − W``.
    """
    w = workload.window
    if workload.is_varlen:
        return varlen_mask(workload.q_lens, workload.kv_lens, causal=workload.mask is Mask.CAUSAL, device=device,
                           window=w)
    cols = torch.arange(workload.kv_len, device=device).unsqueeze(0)
    rows = torch.arange(workload.q_len, device=device).unsqueeze(1)
    if workload.is_ragged:
        lens = torch.tensor(workload.kv_lens, device=device).view(-1, 1, 1, 1)
        keep = cols.view(1, 1, 1, -1) < lens
        if workload.mask is Mask.CAUSAL:
            pos = rows.view(1, 1, -1, 1) + lens - workload.q_len
            keep = keep & (cols.view(1, 1, 1, -1) <= pos)
            if w is not None:
                keep = keep & (cols.view(1, 1, 1, -1) > pos - w)
        return keep
    if workload.mask is Mask.NONE:
        return None
    pos = rows + (workload.kv_len - workload.q_len)
    keep = cols <= pos
    return keep & (cols > pos - w) if w is not None else keep


def varlen_mask(q_lens: "tuple[int, ...] | list[int]", kv_lens: "tuple[int, ...] | list[int]", *, causal: bool,
                device: torch.device | str, window: int | None = None) -> torch.Tensor:
    """Boolean mask ``[B, 1, max q_len, max kv_len]`` (True = attend) of a variable-length call padded to its
    longest sequence: sequence ``b`` keeps keys ``< kv_lens[b]``, and with ``causal`` its query row ``i`` (at
    position ``kv_lens[b] − q_lens[b] + i``, bottom-right) keys ``≤`` that position. Padding rows
    (``i ≥ q_lens[b]``) then see all ``kv_lens[b]`` keys, so no row is empty (no NaN from a kernel that
    softmaxes an empty row); their output is ignored. With a sliding ``window`` (causal only) a valid row also
    drops keys ``≤ position − window``.

    Raises:
        ValueError: a window without ``causal``."""
    if window is not None and not causal:
        raise ValueError("a sliding window needs the causal mask")
    q = torch.tensor(list(q_lens), device=device).view(-1, 1, 1, 1)
    n = torch.tensor(list(kv_lens), device=device).view(-1, 1, 1, 1)
    rows = torch.arange(int(q.max()), device=device).view(1, 1, -1, 1)
    cols = torch.arange(int(n.max()), device=device).view(1, 1, 1, -1)
    keep = cols < n
    if causal:
        keep = keep & (cols <= rows + n - q)
        if window is not None:  # padding rows (rows >= q) keep every key, as above
            keep = keep & ((cols > rows + n - q - window) | (rows >= q))
    return keep


def padded_pairs(workload: Workload) -> int:
    """(query, key) pairs per query head a kernel computes on a variable-length call padded to
    ``B · Lq_max · Lk_max`` (every row against every key slot, masked or not); compare with
    ``workload.attended_pairs``, the pairs required. Example: ``2x(q4,kv8)+6x(q1,kv5)``: ``8 · 4 · 8 = 256``
    executed for ``2 · 26 + 6 · 5 = 82`` required (causal)."""
    return workload.batch * workload.q_len * workload.kv_len


def padding_note(workload: Workload) -> str:
    """The cell note of a backend that pads a variable-length call (see :func:`padded_pairs`)."""
    done, need = padded_pairs(workload), workload.attended_pairs
    return (f"padded to B·Lq_max·Lk_max = {workload.batch}·{workload.q_len}·{workload.kv_len}: executes {done:,} "
            f"(query, key) pairs per head for {need:,} required ({done / need:.1f}× the work)")


def document_mask_mod(doc_lens: "tuple[int, ...] | list[int]", device: torch.device | str, *, causal: bool,
                      window: int | None = None):
    """FlexAttention ``mask_mod`` of a packed batch on one sequence of ``T = Σ doc_lens`` tokens (attention-gym's
    ``generate_doc_mask_mod``): the document of every token (``[T]`` int32 on ``device``, from the cumulative
    offsets) is looked up for the query and the key, and ``keep = same document``, with ``causal`` also
    ``kv_idx ≤ q_idx`` (causal within the document: its tokens are contiguous, so packed positions order them as
    their own do) and a sliding ``window`` ``kv_idx > q_idx − window``.

    Raises:
        ValueError: a window without ``causal``."""
    if window is not None and not causal:
        raise ValueError("a sliding window needs the causal mask")
    lens = torch.tensor(list(doc_lens), device=device)
    doc = torch.repeat_interleave(torch.arange(len(lens), dtype=torch.int32, device=device), lens)

    def mask_mod(b, h, q_idx, kv_idx):  # noqa: ANN001 - FlexAttention's signature
        keep = doc[q_idx] == doc[kv_idx]
        if causal:
            keep = keep & (kv_idx <= q_idx)
            if window is not None:
                keep = keep & (kv_idx > q_idx - window)
        return keep

    return mask_mod


def causal_mask_mod(offset: int, window: int | None = None):
    """FlexAttention ``mask_mod`` for a bottom-right causal mask with ``offset = kv_len - q_len``; with a sliding
    ``window``, also ``kv_idx > q_idx + offset − window``."""

    if window is None:
        def mask_mod(b, h, q_idx, kv_idx):  # noqa: ANN001 - FlexAttention's signature
            return q_idx + offset >= kv_idx
    else:
        def mask_mod(b, h, q_idx, kv_idx):  # noqa: ANN001 - FlexAttention's signature
            return (q_idx + offset >= kv_idx) & (q_idx + offset - window < kv_idx)

    return mask_mod
