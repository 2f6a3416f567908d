"""FlexAttention (``torch.nn.attention.flex_attention``) compiled with ``torch.compile``.

The causal mask is a block mask built once in :meth:`FlexBackend.prepare` (``create_block_mask``), so fully
masked tiles are skipped; compilation happens there too (a trial call), outside timing. Where it cannot
compile, the cell is unsupported with the compiler's first error line.
"""

from __future__ import annotations

import torch

from profattn.interfaces import ADOPTIONS
from profattn.backends.base import (AttentionInputs, Prepared, TrainLeaves, Unsupported, paged_decode_reason,
                                    paged_only_forward)
from profattn.families import FLEX
from profattn.backends.masks import causal_mask_mod, document_mask_mod
from profattn.backends.packing import PackedLeaves, pack_rows, unpack_rows
from profattn.workload import Mask, Phase, Workload

_COMPILED = None


def _flex_missing() -> str | None:
    """Why FlexAttention cannot be imported here, or None."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as exc:  # pragma: no cover - torch < 2.5
        return f"FlexAttention is not in this torch ({exc})"
    return None


def _compiled_flex():
    """One ``torch.compile(flex_attention)`` shared by every cell (Dynamo caches per input shape)."""
    global _COMPILED
    if _COMPILED is None:
        from torch.nn.attention.flex_attention import flex_attention

        # Every workload shape (and train's grad mode) is its own graph; Dynamo's default limit of 8
        # recompiles would silently fall back to the unfused eager path for later cells.
        import torch._dynamo.config as dynamo_config

        for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo_config, knob):
                setattr(dynamo_config, knob, max(getattr(dynamo_config, knob), 256))
        _COMPILED = torch.compile(flex_attention, dynamic=False)
    return _COMPILED


class FlexBackend:
    """FlexAttention, compiled; GQA via ``enable_gqa=True``; causal via a block mask."""

    name = "flex"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS['flex']
    family = FLEX
    description = "FlexAttention compiled by Inductor into Triton (CPU: C++, forward only) with a causal block mask"
    #: Takes variable-length calls: a block mask from the per-sequence lengths (padding tiles skipped).
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        if workload.kv_len_dist.drawn:
            return "ragged KV lengths on the dense layout are not modelled for FlexAttention; see flex-paged-decode"
        return _flex_missing()

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        if workload.is_packed:
            return _prepare_packed(workload, device)
        from torch.nn.attention.flex_attention import create_block_mask

        block_mask = None
        if workload.is_varlen:
            block_mask = create_block_mask(varlen_mask_mod(workload, device), workload.batch, None, workload.q_len,
                                           workload.kv_len, device=str(device))
        elif workload.mask is Mask.CAUSAL:
            offset = workload.kv_len - workload.q_len
            block_mask = create_block_mask(
                causal_mask_mod(offset, workload.window), None, None, workload.q_len, workload.kv_len,
                device=str(device)
            )
        compiled = _compiled_flex()
        gqa = workload.is_gqa

        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa)

        dtype = getattr(torch, workload.dtype)
        q = torch.randn(workload.q_shape, device=device, dtype=dtype)
        k = torch.randn(workload.kv_shape, device=device, dtype=dtype)
        v = torch.randn(workload.kv_shape, device=device, dtype=dtype)
        _trial(workload, lambda: forward(q, k, v), (q, k, v))
        notes = ("block mask: causal (bottom-right)" if block_mask is not None else "no block mask",)
        if workload.window is not None:
            notes = (f"block mask: causal (bottom-right), sliding window of {workload.window} keys (tiles outside "
                     "every row's window skipped)",)
        if workload.is_varlen:
            notes = ("block mask from per-sequence lengths: padding rows and key slots masked, fully masked tiles "
                     "skipped" + (", bottom-right causal per sequence" if workload.mask is Mask.CAUSAL else "")
                     + (f", sliding window of {workload.window} keys" if workload.window is not None else ""),)
        return Prepared(forward=forward, notes=notes)


def _trial(workload: Workload, call, leaves: "tuple[torch.Tensor, ...]") -> None:
    """Compile and run ``call`` once (with its backward from ``leaves``, which are made to require grad, for train),
    outside every timing.

    Raises:
        Unsupported: FlexAttention cannot compile or run it here (e.g. no backward on a CPU); torch's first line.
    """
    try:
        if workload.phase is Phase.TRAIN:
            for t in leaves:
                t.requires_grad_(True)
            call().sum().backward()
        else:
            call()
    except Exception as exc:  # noqa: BLE001 - any compiler failure means "cannot compile here"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise Unsupported(f"FlexAttention cannot run this workload here: {type(exc).__name__}: {first}") from None


def _as_sequence(x: torch.Tensor) -> torch.Tensor:
    """Packed rows ``[T, H, d]`` as FlexAttention's one-sequence layout ``[1, H, T, d]`` (a view, no copy)."""
    return x.transpose(0, 1).unsqueeze(0)


def _prepare_packed(workload: Workload, device: torch.device) -> Prepared:
    """FlexAttention on a packed batch (``workload.is_packed``): the documents back to back as one sequence
    ``[1, H, T, d]`` (``T = Σ len``; q/k/v packed from the padded contract in ``bind``/``bind_train``, outside the
    timing, with :mod:`~profattn.backends.packing`), a block mask from :func:`~profattn.backends.masks.document_mask_mod`
    (fully masked tiles — across documents, above the diagonal — skipped), GQA via ``enable_gqa``. The output
    ``[1, Hq, T, d]`` is unpacked to ``[B, Hq, L_max, d]`` by ``to_contract``; for train the packed q/k/v are the
    autograd leaves (:class:`~profattn.backends.base.TrainLeaves`)."""
    from torch.nn.attention.flex_attention import create_block_mask

    w = workload
    lens, l_max, total = w.q_lens, w.q_len, w.q_tokens
    causal = w.mask is Mask.CAUSAL
    block_mask = create_block_mask(document_mask_mod(lens, device, causal=causal, window=w.window), None, None,
                                   total, total, device=str(device))
    compiled = _compiled_flex()
    gqa = w.is_gqa

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return compiled(_as_sequence(q), _as_sequence(k), _as_sequence(v), block_mask=block_mask, enable_gqa=gqa)

    def bind(inputs: AttentionInputs):
        q, k, v = (pack_rows(t.detach(), lens) for t in (inputs.q, inputs.k, inputs.v))
        return lambda: run(q, k, v)

    def to_contract(out: torch.Tensor) -> torch.Tensor:
        return unpack_rows(out[0].transpose(0, 1), lens, l_max)

    def bind_train(inputs: AttentionInputs) -> TrainLeaves:
        leaves = PackedLeaves(inputs.q, inputs.k, inputs.v, lens, lens)
        grad_out = _as_sequence(pack_rows(inputs.grad_out, lens))
        return TrainLeaves(lambda: run(leaves.q, leaves.k, leaves.v), grad_out, leaves.grads, leaves.zero_grads)

    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return to_contract(bind(AttentionInputs(q, k, v))())

    dtype = getattr(torch, w.dtype)
    tq = torch.randn(total, w.num_q_heads, w.head_dim, device=device, dtype=dtype)
    tk = torch.randn(total, w.num_kv_heads, w.head_dim, device=device, dtype=dtype)
    tv = torch.randn(total, w.num_kv_heads, w.head_dim, device=device, dtype=dtype)
    _trial(w, lambda: run(tq, tk, tv), (tq, tk, tv))
    mask = ("same document and kv ≤ q (causal within each document)" if causal else "same document")
    if w.window is not None:
        mask += f", sliding window of {w.window} keys"
    notes = (f"packed: {w.batch} documents back to back as one sequence [1, H, {total:,}, d] (offsets "
             f"{_offsets_text(w.doc_offsets)}), packed in bind outside the timed call; output unpacked for the check",
             f"block mask: document mask (document id per token from the cumulative offsets; keep = {mask}), tiles "
             "across documents skipped; GQA via enable_gqa")
    return Prepared(forward=forward, bind=bind, to_contract=to_contract, bind_train=bind_train, notes=notes)


def _offsets_text(offsets: "tuple[int, ...]") -> str:
    """``0, 64, 96, 192`` (the first and last three, with ``…``, beyond eight)."""
    shown = offsets if len(offsets) <= 8 else (*offsets[:3], "…", *offsets[-3:])
    return ", ".join(f"{x:,}" if isinstance(x, int) else x for x in shown)


def varlen_mask_mod(workload: Workload, device: torch.device):
    """FlexAttention ``mask_mod`` of a variable-length call padded to its longest sequence: sequence ``b`` keeps
    its own query rows (``q_idx < q_lens[b]``) and keys (``kv_idx < kv_lens[b]``), and with a causal mask
    ``kv_idx ≤ q_idx + kv_lens[b] − q_lens[b]`` (bottom-right per sequence), with a sliding window ``W`` also
    ``kv_idx > q_idx + kv_lens[b] − q_lens[b] − W``. The lengths are int32 tensors on
    ``device`` captured by the closure. Padding rows see no key (FlexAttention writes zeros there)."""
    q_lens = torch.tensor(workload.q_lens, dtype=torch.int32, device=device)
    kv_lens = torch.tensor(workload.kv_lens, dtype=torch.int32, device=device)
    causal = workload.mask is Mask.CAUSAL
    window = workload.window

    def mask_mod(b, h, q_idx, kv_idx):  # noqa: ANN001 - FlexAttention's signature
        keep = (q_idx < q_lens[b]) & (kv_idx < kv_lens[b])
        if causal:
            keep = keep & (kv_idx <= q_idx + kv_lens[b] - q_lens[b])
            if window is not None:
                keep = keep & (kv_idx > q_idx + kv_lens[b] - q_lens[b] - window)
        return keep

    return mask_mod


class FlexPagedDecode:
    """``flex-paged-decode``: FlexAttention over the physical page pool, the block table turned into a mask.

    The pool is one long KV sequence ``[1, Hkv, num_pages·page_size, d]`` (a strided view of the NHD pages,
    no copy); the batch's new tokens are the query rows ``[1, Hq, B, d]`` (query row ``b`` = sequence ``b``).
    ``mask_mod`` keeps physical slot ``j`` for query ``b`` when page ``j // page_size`` belongs to sequence
    ``b`` (a ``[B, num_pages]`` table of logical page numbers built from the block table, ``-1`` elsewhere;
    shared prefix pages belong to every sequence that maps them) and the slot lies before ``seq_lens[b]`` (and, with
    a sliding window ``W``, at or after ``seq_lens[b] − W``).
    The block mask is built once in ``bind`` (outside timing). Each K/V block is loaded once for all query
    rows — the pool is read once — at the price of B× the QK/PV arithmetic on masked entries.
    """

    name = "flex-paged-decode"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS['flex-paged-decode']
    family = FLEX
    description = "FlexAttention over the physical page pool, with a mask_mod built from the block table"
    #: Takes per-sequence KV lengths of a decode step (its mask reads ``seq_lens``) and appending calls.
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return paged_decode_reason(workload) or _flex_missing()

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        from torch.nn.attention.flex_attention import create_block_mask

        compiled = _compiled_flex()
        page = workload.page_size
        gqa = workload.is_gqa

        def bind(inputs):  # noqa: ANN001 - AttentionInputs
            cache = inputs.paged
            b = inputs.q.shape[0]
            pool_tokens = cache.num_pages * page
            # [B, num_pages]: logical page index of each physical page for each sequence, -1 if unmapped
            owner = torch.full((b, cache.num_pages), -1, dtype=torch.int32, device=inputs.q.device)
            table = cache.block_table.long()
            for s in range(b):
                n = -(-int(cache.seq_lens[s]) // page)
                owner[s, table[s, :n]] = torch.arange(n, dtype=torch.int32, device=owner.device)
            lens = cache.seq_lens
            window = workload.window

            def mask_mod(bb, h, q_idx, kv_idx):  # noqa: ANN001 - FlexAttention's signature
                lp = owner[q_idx, kv_idx // page]
                pos = lp * page + kv_idx % page
                keep = (lp >= 0) & (pos < lens[q_idx])
                if window is not None:
                    keep = keep & (pos >= lens[q_idx] - window)
                return keep

            block_mask = create_block_mask(mask_mod, 1, None, b, pool_tokens, device=str(inputs.q.device))
            q = inputs.q[:, :, 0, :].unsqueeze(0).transpose(1, 2)  # [1, Hq, B, d]
            k = cache.k_pages.view(pool_tokens, cache.num_kv_heads, cache.head_dim).transpose(0, 1).unsqueeze(0)
            v = cache.v_pages.view(pool_tokens, cache.num_kv_heads, cache.head_dim).transpose(0, 1).unsqueeze(0)

            def call() -> torch.Tensor:
                out = compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa)  # [1, Hq, B, d]
                return out[0].transpose(0, 1).unsqueeze(2)  # [B, Hq, 1, d]

            return call

        return Prepared(forward=paged_only_forward, bind=bind,
                        notes=("FlexAttention on the physical page pool; mask from the block table"
                               + (f" and a sliding window of {workload.window} keys" if workload.window else ""),))
