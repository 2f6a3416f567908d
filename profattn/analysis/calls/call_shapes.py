"""What an attention operator's recorded arguments say: which ops are attention (their argument
positions), which kernels are fused attention, the call's shapes and causal mask, and the regime and
profattn :class:`~profattn.workload.Workload` inferred from them (rules: :mod:`profattn.analysis.calls.find`).

Sources: PyTorch's ``native_functions.yaml`` for the argument positions; the op's ``Input Dims``,
``Input type`` and ``Concrete Inputs`` as the trace parser keeps them. Torch-free; no display text
beyond the notes that explain a missing workload.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from profattn.analysis.calls.call_records import (
    AttentionCall, AttentionShape, CausalAlignment, Engine, PackedBatch, RecordedWindow,
)
from profattn.errors import WorkloadError
from profattn.families import ATTENTION_FAMILIES, ENGINE_FAMILIES, INDEX_KERNEL_PATTERN, KernelFamily
from profattn.workload import Phase, Workload

__all__ = [
    "ATTENTION_KERNEL_FAMILIES",
    "ATTENTION_OPS",
    "ENGINE_OPS",
    "EngineOpSignature",
    "concrete_int",
    "FLASHINFER",
    "OpSignature",
    "SHAPE_LIMITS",
    "attention_family",
    "is_attention_op",
    "is_engine_op",
    "kernel_direction",
    "op_dims",
    "op_packed",
    "op_shape",
    "packed_text",
    "read_causal",
    "read_window",
    "recorded_dtype",
    "signature",
    "with_phases",
]

#: FlashInfer's kernels (``BatchDecodeWithPagedKVCacheKernel``, ``BatchPrefillWith…``, ``SinglePrefill…``),
#: which :data:`profattn.families.ATTENTION_FAMILIES` does not list (profattn does not run them).
FLASHINFER = KernelFamily(
    "flashinfer",
    kernel_patterns=(r"flashinfer", r"Batch(Decode|Prefill)With", r"Single(Decode|Prefill)With"),
    op_patterns=(r"flashinfer",),
)
#: Kernel families that identify a fused attention kernel by name, checked in this order (the serving engines'
#: families first: FlashMLA's ``flash_fwd_splitkv_mla`` is not FLASH's ``flash_fwd``).
ATTENTION_KERNEL_FAMILIES: tuple[KernelFamily, ...] = (*ENGINE_FAMILIES, *ATTENTION_FAMILIES, FLASHINFER)

#: Names that mark a fused attention kernel in an arbitrary trace. The family patterns are written for
#: profattn's own cells, where only attention runs (``cudnn`` there is cuDNN's SDPA engine, ``triton_tem``
#: Inductor's FlexAttention template); in any other trace they also match cuDNN convolutions and batch norms
#: and Inductor's GEMM templates, so a kernel must match this as well to count as attention.
_ATTENTION_KERNEL = re.compile(
    r"flash_fwd|flash_bwd|flash_attn|pytorch_flash|fmha|AttentionKernel|AttentionBackwardKernel|mem_eff|sdpa"
    r"|sm\d+_flash_(fprop|bprop)|flex_attention|flex_decoding|flashinfer|Batch(Decode|Prefill)With"
    r"|Single(Decode|Prefill)With|_paged_decode"
    # serving engines' kernels (profattn.families.ENGINE_FAMILIES)
    r"|^kernel_unified_attention_[23]d$|^reduce_segments$|^kernel_paged_attention_2d$|^_fwd_kernel_stage[12]$"
    r"|^_fwd_grouped_kernel_stage1$|^_fwd_kernel$|paged_attention_v[12]_|paged_attention_ll4mi|FlashAttnFwd"
    r"|flash_fwd_combine|flash_fwd_splitkv_mla|mla_combine|flashmla|Fmha(Fwd|Bwd)|fmha_v3|aiter.*(mha_|pa_|paged|mla)"
    r"|\bpa_(bf16|fp16|fp8)|mla_(a8w8|dec)",
    re.IGNORECASE,
)
_INDEX_KERNEL = re.compile(INDEX_KERNEL_PATTERN)
#: The largest plausible value of each recorded dimension. A trace is any user's file: a recorded batch of
#: 1e19 would size a per-sequence list of that length (:attr:`Workload.kv_lens`). A value beyond its limit
#: is read as unknown (None) with a warning. Batch: 65,536 sequences per call (windowed attention folds
#: windows into it: thousands); lengths: 16,777,216 tokens; heads and head_dim: 65,536.
SHAPE_LIMITS: dict[str, int] = {
    "batch": 2**16, "q_len": 2**24, "kv_len": 2**24, "num_q_heads": 2**16, "num_kv_heads": 2**16, "head_dim": 2**16,
}
_DTYPES = {"c10::BFloat16": "bfloat16", "c10::Half": "float16", "float": "float32", "double": "float64"}
_AUTOGRAD_SDPA_BACKWARD = re.compile(r"ScaledDotProduct(Flash|Efficient|Cudnn)Attention\w*Backward", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------------
# Attention operators
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpSignature:
    """Where an attention operator's arguments sit in its recorded ``Input Dims``/``Concrete Inputs``.

    ``backend`` is the kernel family the op commits to (None for the SDPA front door, which dispatches);
    ``layout`` is ``"BHLD"`` (q ``[B, H, L, d]``) or ``"BLHD"`` (q ``[B, L, H, d]``); ``causal_index``
    points at ``is_causal`` (``causal_kind="bool"``) or at xformers' ``custom_mask_type``
    (``"mask_type"``: 0 none, 1 top-left causal, 2 bottom-right causal); ``causal_alignment`` is what a
    true ``is_causal`` means; ``mask_index`` is the optional mask/bias tensor and ``varlen_index`` the
    optional ``cu_seqlens_q`` tensor (present: packed variable-length batch, q ``[total_q, H, d]`` or, for
    xformers' ops, ``[1, total_q, H, d]``); ``max_index`` the ``(max_q, max_k)`` scalars (the longest
    sequence); ``window_index`` flash's ``(window_size_left, window_size_right)`` (``window_kind="flash"``:
    query row i sees keys ``[i - left, i + right]`` of its bottom-right diagonal, -1 unbounded) or xformers'
    one ``window_size`` (``"keys"``: the last ``window_size`` keys, 0 none); ``paged_index`` flash's
    ``block_table`` and ``seqused_index`` its ``seqused_k`` (per-sequence KV lengths as a tensor).
    """

    backend: str | None
    direction: str
    layout: str = "BHLD"
    q_index: int = 0
    k_index: int = 1
    causal_index: int | None = None
    causal_kind: str = "bool"
    causal_alignment: CausalAlignment = CausalAlignment.TOP_LEFT
    mask_index: int | None = None
    varlen_index: int | None = None
    max_index: tuple[int, int] | None = None
    window_index: tuple[int, ...] | None = None
    window_kind: str = "flash"
    paged_index: int | None = None
    seqused_index: int | None = None


_BR = CausalAlignment.BOTTOM_RIGHT
#: Attention operators by exact name, with their argument positions: read from the op schemas of torch 2.13
#: (``torch.ops.aten.<op>.default._schema``; PyTorch's ``native_functions.yaml``). The positions of the
#: ``_flash_attention_forward`` arguments up to ``window_size_right`` (12) are the same in torch 2.11's traces.
ATTENTION_OPS: dict[str, OpSignature] = {
    "aten::scaled_dot_product_attention": OpSignature(None, "forward", causal_index=5, mask_index=3),
    "aten::_scaled_dot_product_attention_math": OpSignature("math", "forward", causal_index=5, mask_index=3),
    "aten::_scaled_dot_product_flash_attention": OpSignature("flash", "forward", causal_index=4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": OpSignature("flash-cpu", "forward", causal_index=4, mask_index=5),
    "aten::_scaled_dot_product_efficient_attention": OpSignature("efficient", "forward", causal_index=6, mask_index=3),
    "aten::_scaled_dot_product_cudnn_attention": OpSignature("cudnn", "forward", causal_index=6, mask_index=3),
    "aten::_flash_attention_forward": OpSignature(
        "flash", "forward", layout="BLHD", causal_index=8, causal_alignment=_BR, varlen_index=3, max_index=(5, 6),
        window_index=(11, 12), seqused_index=13, paged_index=15,
    ),
    "aten::_flash_attention_forward_no_dropout_inplace": OpSignature(
        "flash", "forward", layout="BLHD", q_index=1, k_index=2, causal_index=9, causal_alignment=_BR, varlen_index=4,
        max_index=(6, 7), window_index=(12, 13), seqused_index=14, paged_index=16,
    ),
    "aten::_efficient_attention_forward": OpSignature(
        "efficient", "forward", layout="BLHD", causal_index=9, causal_kind="mask_type", mask_index=3, varlen_index=4,
        max_index=(6, 7), window_index=(13,), window_kind="keys",
    ),
    "aten::_cudnn_attention_forward": OpSignature(
        "cudnn", "forward", causal_index=10, mask_index=3, varlen_index=4, max_index=(6, 7)
    ),
    "aten::_scaled_dot_product_flash_attention_backward": OpSignature(
        "flash", "backward", q_index=1, k_index=2, causal_index=11, varlen_index=6, max_index=(8, 9)
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": OpSignature(
        "flash-cpu", "backward", q_index=1, k_index=2, causal_index=7, mask_index=8
    ),
    "aten::_scaled_dot_product_efficient_attention_backward": OpSignature(
        "efficient", "backward", q_index=1, k_index=2, causal_index=11, mask_index=4
    ),
    "aten::_scaled_dot_product_cudnn_attention_backward": OpSignature(
        "cudnn", "backward", q_index=1, k_index=2, causal_index=14, mask_index=8, varlen_index=9, max_index=(11, 12)
    ),
    "aten::_cudnn_attention_backward": OpSignature(
        "cudnn", "backward", q_index=1, k_index=2, causal_index=14, mask_index=8, varlen_index=9, max_index=(11, 12)
    ),
    "aten::_flash_attention_backward": OpSignature(
        "flash", "backward", layout="BLHD", q_index=1, k_index=2, causal_index=11, causal_alignment=_BR,
        varlen_index=6, max_index=(8, 9), window_index=(15, 16),
    ),
    "aten::_efficient_attention_backward": OpSignature(
        "efficient", "backward", layout="BLHD", q_index=1, k_index=2, causal_index=14, causal_kind="mask_type",
        mask_index=4, varlen_index=6, max_index=(8, 9), window_index=(18,), window_kind="keys",
    ),
}
_FLEX_FORWARD = OpSignature("flex", "forward")
_FLEX_BACKWARD = OpSignature("flex", "backward", q_index=0, k_index=1)


@dataclass(frozen=True)
class EngineOpSignature:
    """Where a serving engine's attention op keeps its arguments in ``Input Dims``/``Concrete Inputs``.

    ``role`` is ``entry`` (the engine's own op around one layer's attention, which dispatches to a backend) or
    ``backend`` (a kernel library's op called beneath it); ``backend`` is the kernel family a backend op commits to
    (None for entry ops). Tensors are token-major: q ``[T, Hq, d]`` (or ``[T, Hq·d]``), k ``[T, Hkv, d]`` for the
    new tokens, or the paged cache (``cache_indices``: inputs that may hold it, e.g. the V0 ops' ``kv_cache``, a
    backend op's k/v cache). ``cu_seqlens_q_index`` is the query offsets tensor (``[num_seqs + 1]``),
    ``block_table_index`` the ``[num_seqs, max_pages]`` block table, ``max_index`` the ``(max_seqlen_q,
    max_seqlen_k)`` scalars, ``causal_index``/``window_index`` as in :class:`OpSignature`; ``mla``: latent attention
    (query/key and value head dims differ). Positions are validated against the dims before use (the signatures
    move between engine releases): a tensor of the wrong rank is not read."""

    engine: Engine
    role: str
    backend: str | None = None
    q_index: int = 0
    k_index: int = 1
    cache_indices: tuple[int, ...] = ()
    cu_seqlens_q_index: int | None = None
    block_table_index: int | None = None
    max_index: tuple[int, int] | None = None
    causal_index: int | None = None
    window_index: tuple[int, int] | None = None
    mla: bool = False


_VLLM, _SGL = Engine.VLLM, Engine.SGLANG
#: Serving engines' attention ops by exact name. Sources: vLLM ``vllm/model_executor/layers/attention/attention.py``
#: (``unified_attention(query, key, value, layer_name)``, ``unified_attention_with_output(query, key, value, output,
#: layer_name, output_scale, output_block_scale, kv_cache_dummy_dep)``; V0's took ``kv_cache`` as input 3 / 4),
#: ``vllm/vllm_flash_attn/flash_attn_interface.py`` (``_vllm_fa2_C::varlen_fwd(q, k, v, out, cu_seqlens_q,
#: cu_seqlens_k, seqused_k, leftpad_k, block_table, alibi_slopes, max_seqlen_q, max_seqlen_k, dropout_p,
#: softmax_scale, zero_tensors, causal, window_size_left, window_size_right, ...)``; ``_vllm_fa3_C::fwd(q, k, v,
#: k_new, v_new, q_v, out, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q, seqused_k, max_seqlen_q,
#: max_seqlen_k, page_table, ..., softmax_scale (23), causal, window_size_left, window_size_right, ...)``),
#: ``csrc/torch_bindings.cpp`` (``paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads, scale,
#: block_tables, ...)``, ``paged_attention_v2(out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache,
#: num_kv_heads, scale, block_tables, ...)``); SGLang ``python/sglang/srt/layers/radix_attention.py``
#: (``unified_attention_with_output(query, key, value, output, save_kv_cache, layer_id, ...)``) and sgl-kernel's
#: FlashAttention-3 ``sgl_kernel::fwd`` (the FA3 hopper interface, positions as ``_vllm_fa3_C::fwd``); ROCm/aiter
#: ``aiter/ops/mha.py`` (``mha_batch_prefill(q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q,
#: max_seqlen_k, dropout_p, softmax_scale, logits_soft_cap, zero_tensors, is_causal, window_size_left,
#: window_size_right, ...)``, k/v SGLang's token pool ``[num_tokens, Hkv, d]``) and ``aiter/ops/attention.py``
#: (``paged_attention_ragged(out, workspace_buffer, query, key_cache, value_cache, scale, kv_indptr, kv_page_indices,
#: kv_last_page_lens, block_size, ...)``: a decode, one query token per sequence, so ``kv_indptr [num_seqs + 1]`` counts
#: the sequences as ``cu_seqlens_q`` would), the two SGLang's aiter backend runs.
ENGINE_OPS: dict[str, EngineOpSignature] = {
    "vllm::unified_attention": EngineOpSignature(_VLLM, "entry", cache_indices=(3,)),
    "vllm::unified_attention_with_output": EngineOpSignature(_VLLM, "entry", cache_indices=(4,)),
    "vllm::unified_mla_attention": EngineOpSignature(_VLLM, "entry", mla=True),
    "vllm::unified_mla_attention_with_output": EngineOpSignature(_VLLM, "entry", mla=True),
    "sglang::unified_attention_with_output": EngineOpSignature(_SGL, "entry"),
    "_vllm_fa2_C::varlen_fwd": EngineOpSignature(
        _VLLM, "backend", "flash", cache_indices=(1,), cu_seqlens_q_index=4, block_table_index=8, max_index=(10, 11),
        causal_index=15, window_index=(16, 17),
    ),
    "_vllm_fa3_C::fwd": EngineOpSignature(
        _VLLM, "backend", "flash3", cache_indices=(1,), cu_seqlens_q_index=7, block_table_index=14, max_index=(12, 13),
        causal_index=24, window_index=(25, 26),
    ),
    "sgl_kernel::fwd": EngineOpSignature(
        _SGL, "backend", "flash3", cache_indices=(1,), cu_seqlens_q_index=7, block_table_index=14, max_index=(12, 13),
        causal_index=24, window_index=(25, 26),
    ),
    "_flashmla_C::fwd_kvcache_mla": EngineOpSignature(_VLLM, "backend", "flashmla", mla=True),
    "_C::paged_attention_v1": EngineOpSignature(_VLLM, "backend", "vllm-paged", q_index=1, k_index=2,
                                                cache_indices=(2,), block_table_index=6),
    "_C::paged_attention_v2": EngineOpSignature(_VLLM, "backend", "vllm-paged", q_index=4, k_index=5,
                                                cache_indices=(5,), block_table_index=9),
    "_rocm_C::paged_attention": EngineOpSignature(_VLLM, "backend", "vllm-paged", q_index=4, k_index=5,
                                                  cache_indices=(5,), block_table_index=9),
    "aiter::mha_varlen_fwd": EngineOpSignature(_VLLM, "backend", "aiter"),
    "aiter::fmha_v3_varlen_fwd": EngineOpSignature(_VLLM, "backend", "aiter"),
    "aiter::mha_fwd": EngineOpSignature(_VLLM, "backend", "aiter"),
    "aiter::mha_batch_prefill": EngineOpSignature(
        _SGL, "backend", "aiter", cache_indices=(1,), cu_seqlens_q_index=3, max_index=(6, 7), causal_index=12,
        window_index=(13, 14),
    ),
    "aiter::paged_attention_ragged": EngineOpSignature(
        _SGL, "backend", "aiter", q_index=2, k_index=3, cache_indices=(3,), cu_seqlens_q_index=6,
    ),
}


def is_engine_op(name: str) -> bool:
    """Whether a CPU operator name is a serving engine's attention op (:data:`ENGINE_OPS`)."""
    return name in ENGINE_OPS


def is_attention_op(name: str) -> bool:
    """Whether a CPU operator name is an attention operator (:data:`ATTENTION_OPS`, :data:`ENGINE_OPS` or
    FlexAttention)."""
    return name in ATTENTION_OPS or name in ENGINE_OPS or "flex_attention" in name.lower()


def signature(name: str) -> OpSignature:
    """The :class:`OpSignature` of an attention operator (FlexAttention: q, k first; mask unknown; an engine op:
    its backend, its layout ``THD`` — read by :mod:`profattn.analysis.calls.engine_ops`, not by :func:`op_shape`)."""
    if name in ATTENTION_OPS:
        return ATTENTION_OPS[name]
    engine = ENGINE_OPS.get(name)
    if engine is not None:
        return OpSignature(engine.backend, "forward", layout="THD", q_index=engine.q_index, k_index=engine.k_index)
    return _FLEX_BACKWARD if "backward" in name.lower() else _FLEX_FORWARD


def attention_family(kernel_name: str) -> str | None:
    """The attention family of a kernel: None unless the name marks a fused attention kernel
    (:data:`_ATTENTION_KERNEL`) and is no index-building kernel (:data:`profattn.families.INDEX_KERNEL_PATTERN`:
    ``create_flashinfer_kv_indices_triton`` is a step's metadata work); then the first :data:`ATTENTION_KERNEL_FAMILIES` family whose patterns
    match, or ``attention`` when none does."""
    if not _ATTENTION_KERNEL.search(kernel_name) or _INDEX_KERNEL.search(kernel_name):
        return None
    return next((f.name for f in ATTENTION_KERNEL_FAMILIES if f.matches_kernel(kernel_name)), "attention")


def kernel_direction(names: Iterable[str]) -> str:
    """``backward`` when any kernel name says so (``flash_bwd``, ``bprop``, ``Backward``), else ``forward``."""
    return "backward" if any(re.search(r"bwd|bprop|backward", n, re.IGNORECASE) for n in names) else "forward"


# ----------------------------------------------------------------------------------------------------
# Shapes and mask
# ----------------------------------------------------------------------------------------------------


def op_dims(op: Mapping[str, Any], index: int) -> list[Any] | None:
    """The ``Input Dims`` entry ``index`` of an op row (a list), or None when not recorded or not a list."""
    dims = op.get("input_dims")
    if not isinstance(dims, list) or index >= len(dims) or not isinstance(dims[index], list):
        return None
    return dims[index]


def op_shape(op: Mapping[str, Any], sig: OpSignature) -> AttentionShape | None:
    """The call's shapes from ``Input Dims``/``Input type``; None unless q and k are 4-D lists of positive
    ints that agree (batch, head_dim). A dimension beyond :data:`SHAPE_LIMITS` is None in the shape and
    listed in its ``beyond_limits``."""
    q, k = op_dims(op, sig.q_index), op_dims(op, sig.k_index)
    if q is None or k is None or len(q) != 4 or len(k) != 4:
        return None
    if not _pos_ints([*q, *k]):
        return None
    if sig.layout == "THD":
        return None  # token-major engine ops: profattn.analysis.calls.engine_ops
    if sig.layout == "BLHD":
        (b, lq, hq, d), (bk, lk, hkv, dk) = q, k
    else:
        (b, hq, lq, d), (bk, hkv, lk, dk) = q, k
    if b != bk or d != dk:
        return None
    return _shape(op, sig, b, hq, hkv, lq, lk, d)


def recorded_dtype(raw: Any) -> str | None:
    """A recorded ``Input type`` as profattn names dtypes (``c10::BFloat16`` → ``bfloat16``, ``c10::Half`` →
    ``float16``, ``float`` → ``float32``); another type name as recorded; None when not a non-empty string."""
    return _DTYPES.get(raw, raw) if isinstance(raw, str) and raw else None


def _shape(op: Mapping[str, Any], sig: OpSignature, b: int | None, hq: int, hkv: int, lq: int | None,
           lk: int | None, d: int) -> AttentionShape:
    types = op.get("input_types")
    raw = types[sig.q_index] if isinstance(types, list) and sig.q_index < len(types) else None
    dtype = recorded_dtype(raw)
    dims = {"batch": b, "num_q_heads": hq, "num_kv_heads": hkv, "q_len": lq, "kv_len": lk, "head_dim": d}
    beyond = tuple((f, v) for f, v in dims.items() if v is not None and v > SHAPE_LIMITS[f])
    for f, _ in beyond:
        dims[f] = None
    return AttentionShape(**dims, dtype=dtype, beyond_limits=beyond)


def _pos_ints(values: list[Any]) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in values)


def concrete_int(concrete: Any, index: int | None) -> int | None:
    """The integer scalar at ``index`` of ``Concrete Inputs`` (``"4096"``, ``"-1"``), or None when not
    recorded (``""``: a tensor, None, or an older trace) or not an integer of at most 18 digits."""
    if not isinstance(concrete, list) or index is None or index >= len(concrete):
        return None
    value = str(concrete[index]).strip()
    return int(value) if re.fullmatch(r"-?\d{1,18}", value) else None


def op_packed(op: Mapping[str, Any], sig: OpSignature) -> tuple[AttentionShape, PackedBatch] | None:
    """A packed variable-length call's shape and :class:`PackedBatch`; None unless ``cu_seqlens_q`` is a
    recorded 1-D tensor of at least 2 entries and q, k are packed ``[total, H, d]`` (or xformers'
    ``[1, total, H, d]``; with a ``block_table``, k is the cache's ``[pages, page_size, Hkv, d]``) with
    matching head_dim. The shape's ``batch`` is the number of sequences, ``q_len``/``kv_len`` the longest
    (the determined lengths' longest, else the recorded ``max_q``/``max_k``, else None)."""
    cu = op_dims(op, sig.varlen_index) if sig.varlen_index is not None else None
    q, k = op_dims(op, sig.q_index), op_dims(op, sig.k_index)
    if not cu or len(cu) != 1 or not _pos_ints(cu) or cu[0] < 2 or q is None or k is None:
        return None
    paged = bool(op_dims(op, sig.paged_index)) if sig.paged_index is not None else False
    seqused = bool(op_dims(op, sig.seqused_index)) if sig.seqused_index is not None else False

    def packed(t: list[Any]) -> list[Any] | None:
        if len(t) == 3:
            return t
        return t[1:] if len(t) == 4 and t[0] == 1 and sig.layout == "BLHD" else None

    pq = packed(q)
    pk = [k[0] * k[1], k[2], k[3]] if paged and len(k) == 4 and _pos_ints(k) else packed(k)
    if pq is None or pk is None or not _pos_ints([*pq, *pk]) or pq[2] != pk[2]:
        return None
    (tq, hq, d), (tk, hkv, _) = pq, pk
    n = cu[0] - 1
    concrete = op.get("concrete_inputs")
    mq, mk = (concrete_int(concrete, i) for i in (sig.max_index or (None, None)))
    mq, mk = (m if m is not None and m > 0 else None for m in (mq, mk))
    seqs = None
    if n <= SHAPE_LIMITS["batch"] and not paged and not seqused:
        q_each = tq if n == 1 else 1 if tq == n else mq if mq is not None and tq == n * mq else None
        k_each = tk if n == 1 else 1 if tk == n else mk if mk is not None and tk == n * mk else None
        if q_each is not None and k_each is not None:
            seqs = ((q_each, k_each),) * n
    lq, lk = (seqs[0] if seqs else (mq, mk))
    batch = PackedBatch(sequences=n if n <= SHAPE_LIMITS["batch"] else None, q_tokens=tq, kv_tokens=tk, max_q=mq,
                        max_k=mk, seqs=seqs, paged=paged, seqused_k=seqused)
    return _shape(op, sig, n, hq, hkv, lq, lk, d), batch


def read_window(concrete: Any, sig: OpSignature) -> RecordedWindow | None:
    """The local window an op recorded in ``Concrete Inputs`` (:class:`RecordedWindow`), or None when the op
    takes none, none was passed (``""``: None), or it is unbounded (flash ``(-1, -1)``, xformers 0)."""
    if sig.window_index is None:
        return None
    if sig.window_kind == "keys":
        w = concrete_int(concrete, sig.window_index[0])
        return RecordedWindow(w - 1, 0, "window_size") if w is not None and w > 0 else None
    left, right = (concrete_int(concrete, i) for i in sig.window_index)
    if left is None and right is None:
        return None
    left, right = (-1 if v is None or v < 0 else v for v in (left, right))
    return None if left == right == -1 else RecordedWindow(left, right, "window_size_left/right")


def read_causal(concrete: list[Any] | None, sig: OpSignature) -> tuple[bool | None, CausalAlignment]:
    """(is_causal, its alignment) from ``Concrete Inputs``; (None, ``UNKNOWN``) when not recorded."""
    unknown = (None, CausalAlignment.UNKNOWN)
    if concrete is None or sig.causal_index is None or sig.causal_index >= len(concrete):
        return unknown
    value = str(concrete[sig.causal_index]).strip()
    if sig.causal_kind == "mask_type":
        return {"0": (False, CausalAlignment.NONE), "1": (True, CausalAlignment.TOP_LEFT),
                "2": (True, CausalAlignment.BOTTOM_RIGHT)}.get(value, unknown)
    if value in ("True", "False"):
        return value == "True", (sig.causal_alignment if value == "True" else CausalAlignment.NONE)
    return unknown


# ----------------------------------------------------------------------------------------------------
# Phase and workload
# ----------------------------------------------------------------------------------------------------


#: Autograd nodes of the ops SDPA's math path is made of (``autograd::engine::evaluate_function: BmmBackward0``).
_MATH_BACKWARD = re.compile(r"(?:^|: )(?:Bmm|(?:Safe)?Softmax|UnsafeView|Baddbmm)Backward\d*$")


def with_phases(calls: list[AttentionCall], ops: pd.DataFrame) -> list[AttentionCall]:
    """Calls with ``phase`` and ``workload`` filled in (see the module docstring)."""
    backward: set[tuple[str, Any]] = set()
    for c in calls:
        if c.direction == "backward":
            backward.add((c.backend, c.shape.key() if c.shape else None))
    shaped = {backend for backend, key in backward if key is not None}
    op_names = set(ops["name"].tolist())
    for name in op_names:
        m = _AUTOGRAD_SDPA_BACKWARD.search(name)
        if m and m.group(1).lower() not in shaped:  # the node stands for a backward op we could not match
            backward.add((m.group(1).lower(), None))
    # A math-path SDPA is bmm + softmax; its backward is their autograd nodes, not one attention op.
    math_grads = sorted(n for n in op_names if _MATH_BACKWARD.search(n))
    out = []
    for c in calls:
        if c.shape is None or c.engine is not None:  # an engine call's phase is its step's (analysis.steps)
            out.append(c)
            continue
        s = c.shape
        p = c.packed
        if c.direction == "backward" or (c.backend, s.key()) in backward or (c.backend, None) in backward:
            phase = Phase.TRAIN
        elif p is not None and p.q_tokens == p.sequences:  # every sequence has one query: decode
            phase = Phase.DECODE
        elif p is not None and (s.q_len is None or s.kv_len is None) and not s.beyond_limits:
            phase = Phase.PREFILL  # some sequence has more than one query (prefill, or a mixed step)
        elif s.q_len is None or s.kv_len is None:  # beyond its limit: the regime is unknown
            out.append(replace(c, notes=(*c.notes, "phase unknown: a length is beyond its limit")))
            continue
        elif s.q_len == 1 or (s.q_len <= 16 and s.kv_len >= 8 * s.q_len):
            phase = Phase.DECODE
        else:
            phase = Phase.PREFILL
        workload, notes = _workload(c, phase)
        if c.backend == "math" and phase is not Phase.TRAIN and math_grads:
            notes = (*notes, f"may be training: the trace holds the autograd backward nodes of a math-path SDPA's "
                             f"ops ({', '.join(n.rsplit(': ', 1)[-1] for n in math_grads[:3])}), which profattn "
                             "cannot pair with this call")
        out.append(replace(c, phase=phase, workload=workload, notes=notes))
    return out


def packed_text(p: PackedBatch) -> str:
    """What a packed batch records, e.g. ``packed variable-length batch: 8 sequences, 16,384 query tokens,
    longest 4,096; per-sequence lengths are tensor values the trace does not record``."""
    n = "an unknown number of" if p.sequences is None else f"{p.sequences:,}"
    def longest(m: int | None) -> str:
        return f"longest {m:,}" if m is not None else "longest not recorded"
    keys = ("" if (p.kv_tokens, p.max_k) == (p.q_tokens, p.max_q) and not p.paged
            else f"; keys: {p.kv_tokens:,} token slots of KV pages (block_table)" if p.paged
            else f"; {p.kv_tokens:,} key tokens, {longest(p.max_k)}")
    why = ("per-sequence lengths are tensor values the trace does not record"
           + (" (seqused_k: KV lengths passed as a tensor)" if p.seqused_k and not p.paged else ""))
    return f"packed variable-length batch: {n} sequences, {p.q_tokens:,} query tokens, {longest(p.max_q)}{keys}; {why}"


def _workload(call: AttentionCall, phase: Phase) -> tuple[Workload | None, tuple[str, ...]]:
    """The call as a :class:`Workload`, or None with the reason appended to its notes.

    A packed variable-length call becomes a variable-length Workload (``seqs``, the ``mix=`` grammar) only
    when its recorded numbers determine every sequence's lengths (:class:`PackedBatch`); a recorded local
    window becomes :attr:`Workload.window` = ``window_size_left + 1`` (flash) or ``window_size`` (xformers)
    when it is a causal sliding window (right side 0) on a causal call."""
    notes = list(call.notes)
    s = call.shape
    assert s is not None
    p, win = call.packed, call.window
    reason = None
    if s.beyond_limits:
        reason = f"{', '.join(f for f, _ in s.beyond_limits)} beyond its limit (unknown)"
    elif p is not None and p.seqs is None:
        reason = packed_text(p)
    elif s.dtype is None:
        reason = "dtype not recorded"
    elif call.causal is None:
        reason = "mask unknown"
    elif call.causal_alignment is CausalAlignment.TOP_LEFT and s.q_len != s.kv_len:
        reason = ("SDPA's is_causal is top-left aligned and profattn's causal mask bottom-right: they differ "
                  f"for Lq {s.q_len} != Lk {s.kv_len}")
    elif call.varlen and p is None:
        reason = "packed variable-length batch"
    elif win is not None and win.keys is None:
        reason = (f"a two-sided local window ({win.arg} left {win.left}, right {win.right}): profattn's window is a "
                  "causal sliding window (right 0)")
    elif win is not None and not call.causal:
        reason = (f"a local window ({win.arg} left {win.left}, right {win.right}) on a call without a causal mask: "
                  "profattn's window is a causal sliding window")
    if reason is not None:
        return None, (*notes, f"no profattn Workload: {reason}")
    shape = dict(num_q_heads=s.num_q_heads, num_kv_heads=s.num_kv_heads, head_dim=s.head_dim, dtype=s.dtype,
                 mask="causal" if call.causal else "none", window=win.keys if win is not None else None)
    try:
        if p is not None:
            workload = Workload.varlen(phase, p.seqs, **shape)  # type: ignore[arg-type]
        else:
            workload = Workload(phase=phase, batch=s.batch, q_len=s.q_len, kv_len=s.kv_len, **shape)  # type: ignore[arg-type]
    except WorkloadError as e:
        return None, (*notes, f"no profattn Workload: {e}")
    if p is not None and p.seqs:
        (q, k), n = p.seqs[0], len(p.seqs)
        notes.append(f"packed variable-length batch of {n:,} sequence(s), each q {q:,} / kv {k:,}: "
                     + ("one sequence, whose lengths are the packed totals" if n == 1
                        else "the packed totals are the sequence count times the longest, so every sequence is that long"))
    if win is not None:
        notes.append(f"sliding window from {win.arg} (left {win.left}, right {win.right}): each query sees at most its "
                     f"last {win.keys:,} keys (profattn window={win.keys})")
    if not call.causal and s.q_len == 1:
        notes.append("with Lq = 1 a bottom-right causal mask equals no mask (profattn's decode presets say causal)")
    if phase is Phase.TRAIN:
        notes.append("a train Workload times forward and backward together")
    return workload, tuple(notes)
