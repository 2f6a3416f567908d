"""What a serving engine's attention op records in a trace, and what it does not.

vLLM runs every layer's attention through one custom op, ``vllm::unified_attention_with_output(query, key,
value, output, layer_name, ...)`` (``vllm::unified_attention`` without the output argument; the MLA variants
``vllm::unified_mla_attention[_with_output]``); SGLang through ``sglang::unified_attention_with_output`` where it
compiles the model. Beneath them a backend runs: FlashAttention (``_vllm_fa2_C::varlen_fwd``,
``_vllm_fa3_C::fwd``, sgl-kernel's ``sgl_kernel::fwd``), vLLM's paged attention (``_C::paged_attention_v1/v2``),
ROCm's aiter ops, or kernels launched directly with no op of their own (vLLM's Triton unified attention,
FlashInfer's JIT kernels, SGLang's Triton backend). Their argument positions are :data:`ENGINE_OPS`
(:mod:`profattn.analysis.calls.call_shapes`).

**What the inputs determine.** q is token-major, ``[T, Hq, d]``: the step's query tokens of all sequences packed
(``T`` = Σ q over the step), Hq and head_dim; the k/v passed to the entry op are the new tokens' keys and values
``[T, Hkv, d]`` (they are written into the cache beside the call: ``vllm::unified_kv_cache_update`` →
``_C_cache_ops::reshape_and_cache_flash``), giving Hkv; the dtype is q's ``Input type``. The paged KV cache is an
input of the cache-write op (``key_cache [num_blocks, block_size, Hkv, d]``) and of the ops nested inside the
attention op that split it (``aten::unbind`` of vLLM's ``[2, num_blocks, block_size, Hkv, d]``), of V0's
attention op itself (its ``kv_cache`` input), and of backend ops called with a block table: from it, the page
size (``block_size``), the pool's capacity and the cache dtype (:class:`KVCacheShape`). A backend op's
``cu_seqlens_q [num_seqs + 1]`` gives the number of sequences, its ``max_seqlen_q``/``max_seqlen_k`` scalars the
longest ones.

**What they do not.** Each sequence's query and KV lengths are the *values* of the engine's attention-metadata
tensors (``query_start_loc``, ``seq_lens``, the block table), which a trace never records; neither is a layer's
sliding window or its attention type (decoder layers are causal). vLLM's step annotation
(:mod:`profattn.analysis.calls.steps`) supplies the lengths' sums per step.

Torch-free; no display text beyond the notes that explain what a call lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profattn.analysis.calls.call_records import (
    AttentionShape, CausalAlignment, EngineCall, KVCacheLayout, KVCacheShape, RecordedWindow,
)
from profattn.analysis.calls.call_shapes import (
    ENGINE_OPS, SHAPE_LIMITS, OpSignature, concrete_int, op_dims, read_causal, read_window, recorded_dtype,
)

_BR = CausalAlignment.BOTTOM_RIGHT

__all__ = ["CACHE_WRITE_OPS", "CacheOpIndex", "EngineRead", "kv_cache_shape", "read_engine_call"]

#: Ops that write new K/V into the paged cache, and the position of their (key) cache input: vLLM's
#: ``reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)``
#: and ``reshape_and_cache(...)`` (``csrc/torch_bindings.cpp``). One runs before each layer's attention.
CACHE_WRITE_OPS: dict[str, int] = {
    "_C_cache_ops::reshape_and_cache_flash": 2,
    "_C_cache_ops::reshape_and_cache": 2,
}
#: Ops nested in an attention op whose first input may be the whole paged cache (vLLM's backends split
#: ``[2, num_blocks, ...]`` with ``kv_cache.unbind(0)``; FlashInfer's ``[num_blocks, 2, ...]`` with a select).
_CACHE_VIEW_OPS = frozenset({"aten::unbind", "aten::select", "aten::chunk", "aten::split"})


@dataclass(frozen=True)
class EngineRead:
    """What :func:`read_engine_call` read from one engine op group: the :class:`EngineCall`, the call's
    :class:`AttentionShape` (heads, head_dim, dtype; ``batch`` the sequence count where recorded, lengths None),
    its causal flag and alignment, a recorded sliding window, and notes on what the inputs left unknown."""

    engine: EngineCall
    shape: AttentionShape | None
    causal: bool | None
    alignment: CausalAlignment
    window: RecordedWindow | None
    notes: tuple[str, ...]


def _dims(op: Mapping[str, Any], index: int | None) -> list[int] | None:
    """Input ``index``'s dims (:func:`~profattn.analysis.calls.call_shapes.op_dims`) when they are positive ints, else None."""
    d = op_dims(op, index) if index is not None else None
    return d if d is not None and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in d) else None


def _type(op: Mapping[str, Any], index: int) -> str | None:
    types = op.get("input_types")
    return recorded_dtype(types[index]) if isinstance(types, list) and index < len(types) else None


def kv_cache_shape(dims: Sequence[int] | None, num_kv_heads: int, head_dim: int, *, dtype: str | None,
                   source: str) -> KVCacheShape | None:
    """The :class:`KVCacheShape` a recorded tensor shape describes when it is a paged cache of ``num_kv_heads``
    heads of ``head_dim`` (:class:`KVCacheLayout`): ``[2, N, bs, Hkv, d]`` (K/V first), ``[N, 2, bs, Hkv, d]``
    (blocks first), ``[N, bs, Hkv, d]`` (one of K/V), ``[N, Hkv, d / x, bs, x]`` (vLLM's split key cache), ``[N, Hkv, d]``
    (a token pool, page size 1: only where a backend op takes it as its cache input); None
    for any other shape, or for ``[2, 2, ...]`` (which dim holds K/V is then not recorded)."""
    if dims is None:
        return None
    d = list(dims)
    if len(d) == 5 and d[3:] == [num_kv_heads, head_dim]:
        if d[0] == 2 and d[1] != 2:
            return KVCacheShape(tuple(d), KVCacheLayout.KV_FIRST, d[1], d[2], num_kv_heads, head_dim, dtype, source)
        if d[1] == 2 and d[0] != 2:
            return KVCacheShape(tuple(d), KVCacheLayout.BLOCKS_FIRST, d[0], d[2], num_kv_heads, head_dim, dtype, source)
        return None
    if len(d) == 4 and d[2:] == [num_kv_heads, head_dim]:
        return KVCacheShape(tuple(d), KVCacheLayout.SEPARATE, d[0], d[1], num_kv_heads, head_dim, dtype, source)
    if len(d) == 3 and d[1:] == [num_kv_heads, head_dim]:
        return KVCacheShape(tuple(d), KVCacheLayout.TOKENS, d[0], 1, num_kv_heads, head_dim, dtype, source)
    if len(d) == 5 and d[1] == num_kv_heads and d[2] * d[4] == head_dim:
        return KVCacheShape(tuple(d), KVCacheLayout.SPLIT_X, d[0], d[3], num_kv_heads, head_dim, dtype, source)
    return None


def _heads(q: list[int] | None, k: list[int] | None) -> tuple[int, int, int, int, int | None] | None:
    """(T, Hq, Hkv, d, k rows) from token-major q/k dims: 3-D ``[T, H, d]`` each, or q ``[T, Hq·d]`` beside a
    3-D k (d from k). None when they do not describe one attention call."""
    if q is None or k is None:
        return None
    if len(q) == 3 and len(k) == 3 and q[2] == k[2]:
        return q[0], q[1], k[1], q[2], k[0]
    if len(q) == 2 and len(k) == 3 and q[1] % k[2] == 0:
        return q[0], q[1] // k[2], k[1], k[2], k[0]
    return None


def read_engine_call(group: Sequence[Mapping[str, Any]], cache_ops: Sequence[Mapping[str, Any]] = (),
                     views: Sequence[Mapping[str, Any]] = ()) -> EngineRead:
    """Read one engine attention call: ``group`` is its attention ops, the outermost (an :data:`ENGINE_OPS` op)
    first and the attention ops nested in it after; ``cache_ops`` the cache-write ops (:data:`CACHE_WRITE_OPS`) run
    for this layer before it, ``views`` the ops inside it that split the cache (``aten::unbind``, ...), both from
    :class:`CacheOpIndex`. The cache is read from, in order: the op's own cache input, the backend op's, a view
    (which shows the whole ``[2, N, ...]`` / ``[N, 2, ...]`` tensor), the cache write (one of K or V). See the module
    docstring for what is read where."""
    outer = group[0]
    sig = ENGINE_OPS[outer["name"]]
    backend_row = outer if sig.role == "backend" else next(
        (r for r in group[1:] if r["name"] in ENGINE_OPS and ENGINE_OPS[r["name"]].role == "backend"), None)
    bsig = ENGINE_OPS[backend_row["name"]] if backend_row is not None else None
    notes: list[str] = []

    # heads and head_dim: the entry op's q / k (new tokens), else the backend op's q and its cache's last dims
    found = _heads(_dims(outer, sig.q_index), _dims(outer, sig.k_index))
    q_row, q_index = outer, sig.q_index
    # a backend op's k may be its cache (a token pool [N, Hkv, d]), not the step's new tokens
    kv_new: int | None = found[4] if found and sig.k_index not in sig.cache_indices else None
    if found is None and backend_row is not None and bsig is not None:
        q, k = _dims(backend_row, bsig.q_index), _dims(backend_row, bsig.k_index)
        if q is not None and len(q) == 3 and k is not None and len(k) >= 3 and k[-1] == q[2]:
            found = (q[0], q[1], k[-2], q[2], None)
            q_row, q_index = backend_row, bsig.q_index
    if found is None:  # V0: q [T, Hq·d] and k [T, Hkv·d] beside a 5-D kv_cache input, which names Hkv and d
        q, k = _dims(outer, sig.q_index), _dims(outer, sig.k_index)
        for index in sig.cache_indices:
            cache = _dims(outer, index)
            if q is None or k is None or cache is None or len(q) != 2 or len(k) != 2 or len(cache) != 5:
                continue
            hkv, d = cache[3], cache[4]
            if k[1] == hkv * d and q[1] % d == 0:
                found, kv_new = (q[0], q[1] // d, hkv, d, k[0]), k[0]
                break
    shape = None
    tokens = None
    if found is not None:
        tokens, hq, hkv, d, _ = found
        if hq % hkv:
            found = None
    mla = sig.mla or (bsig is not None and bsig.mla)
    if found is None:
        notes.append("q/k dims are not token-major [tokens, heads, head_dim] here: heads and head_dim not read, no "
                     "workload" if not mla else "multi-head latent attention (MLA): its query/key head dim differs "
                     "from the value's, which profattn's workload does not express: no workload")
    # the paged cache
    kv_cache = None
    if found is not None and not mla:
        _, hq, hkv, d, _ = found
        candidates: list[tuple[Mapping[str, Any], int]] = [(outer, i) for i in sig.cache_indices]
        if backend_row is not None and bsig is not None:
            candidates += [(backend_row, i) for i in bsig.cache_indices]
        candidates += [(r, 0) for r in views if r["name"] in _CACHE_VIEW_OPS]
        candidates += [(r, CACHE_WRITE_OPS[r["name"]]) for r in reversed(cache_ops) if r["name"] in CACHE_WRITE_OPS]
        for row, index in candidates:
            kv_cache = kv_cache_shape(_dims(row, index), hkv, d, dtype=_type(row, index), source=row["name"])
            if kv_cache is not None:
                break
        if kv_cache is None:
            notes.append("the paged KV cache's shape is not in the trace (no cache tensor among the op's or its cache "
                         "write's inputs): page size unknown")
    # sequences and longest lengths, from a backend op's offsets
    sequences = max_q = max_k = None
    if backend_row is not None and bsig is not None:
        cu = _dims(backend_row, bsig.cu_seqlens_q_index)
        if cu is not None and len(cu) == 1 and cu[0] >= 2:
            sequences = cu[0] - 1
            bt = _dims(backend_row, bsig.block_table_index)
            if bt is not None and (len(bt) != 2 or bt[0] != sequences):
                sequences = None  # the positions do not fit this build's signature: read nothing from them
        if bsig.max_index is not None:
            max_q, max_k = (concrete_int(backend_row.get("concrete_inputs"), i) for i in bsig.max_index)
            max_q, max_k = (m if m is not None and m > 0 else None for m in (max_q, max_k))
    elif backend_row is None and bsig is None and sig.block_table_index is not None:
        bt = _dims(outer, sig.block_table_index)
        sequences = bt[0] if bt is not None and len(bt) == 2 else None
    if sequences is not None and sequences > SHAPE_LIMITS["batch"]:
        sequences = None
    # causal mask and window
    causal = None
    if backend_row is not None and bsig is not None:
        causal, _ = read_causal(backend_row.get("concrete_inputs"),
                                OpSignature(None, "forward", causal_index=bsig.causal_index, causal_alignment=_BR))
    window = None
    if backend_row is not None and bsig is not None and bsig.window_index is not None:
        window = read_window(backend_row.get("concrete_inputs"), OpSignature(None, "forward",
                                                                               window_index=bsig.window_index))
    if causal is None:
        causal = True
        notes.append("causal (bottom-right) as the engine runs decoder attention (vLLM's Triton backend asserts it); "
                     "is_causal is not among the op's recorded inputs")
    if window is None and found is not None:
        notes.append("a layer's sliding window is engine configuration, not an op input: a windowed layer would "
                     "compute fewer pairs than its step ledger counts")
    if found is not None:
        tokens, hq, hkv, d, _ = found
        shape = AttentionShape(batch=sequences, num_q_heads=hq, num_kv_heads=hkv, q_len=max_q, kv_len=max_k,
                               head_dim=d, dtype=_type(q_row, q_index))
        beyond = tuple((f, v) for f, v in (("num_q_heads", hq), ("num_kv_heads", hkv), ("head_dim", d))
                       if v > SHAPE_LIMITS[f])
        if beyond:
            shape = AttentionShape(batch=sequences, num_q_heads=None if hq > SHAPE_LIMITS["num_q_heads"] else hq,
                                   num_kv_heads=None if hkv > SHAPE_LIMITS["num_kv_heads"] else hkv,
                                   q_len=max_q, kv_len=max_k, head_dim=None if d > SHAPE_LIMITS["head_dim"] else d,
                                   dtype=shape.dtype, beyond_limits=beyond)
    engine = EngineCall(
        engine=sig.engine, entry_op=outer["name"], backend_op=backend_row["name"] if backend_row is not None else None,
        q_tokens=tokens, kv_new_tokens=kv_new, sequences=sequences, max_q=max_q, max_k=max_k, kv_cache=kv_cache,
        mla=mla,
    )
    if sequences is None:
        notes.append("per-sequence query and KV lengths are the engine's attention metadata (query_start_loc, seq_lens "
                     "tensors), whose values a trace does not record")
    return EngineRead(engine, shape, causal, CausalAlignment.BOTTOM_RIGHT if causal else CausalAlignment.NONE, window,
                      tuple(notes))


class CacheOpIndex:
    """The cache-write ops (:data:`CACHE_WRITE_OPS`) and cache-view ops (``aten::unbind``, ``aten::select``, ...) of a
    trace's ops frame, per thread in start order: :meth:`between` finds the cache writes a layer ran before its
    attention op, :meth:`views` the splits of the cache inside it."""

    def __init__(self, ops: pd.DataFrame) -> None:
        self._writes = self._per_thread(ops, set(CACHE_WRITE_OPS))
        self._views = self._per_thread(ops, set(_CACHE_VIEW_OPS), five_d=True)

    @staticmethod
    def _per_thread(ops: pd.DataFrame, names: set[str], five_d: bool = False
                    ) -> dict[tuple[Any, Any], tuple[np.ndarray, list[dict[str, Any]]]]:
        if not len(ops):
            return {}
        rows = ops[ops["name"].isin(list(names)).to_numpy(dtype=bool)]
        if five_d and len(rows):  # only views of a 4-D/5-D tensor can be a cache: keeps the many other selects out
            keep = [isinstance(d, list) and bool(d) and isinstance(d[0], list) and len(d[0]) in (4, 5)
                    for d in rows["input_dims"].tolist()]
            rows = rows[np.array(keep, dtype=bool)]
        grouped: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for r in rows.sort_values("ts_us", kind="stable").to_dict("records"):
            grouped.setdefault((r["pid"], r["tid"]), []).append(r)
        return {key: (np.array([r["ts_us"] for r in items], dtype="float64"), items) for key, items in grouped.items()}

    @staticmethod
    def _range(table: dict[tuple[Any, Any], tuple[np.ndarray, list[dict[str, Any]]]], pid: Any, tid: Any,
               after_us: float, before_us: float) -> list[dict[str, Any]]:
        found = table.get((pid, tid))
        if found is None:
            return []
        ts, items = found
        lo, hi = np.searchsorted(ts, after_us, side="right"), np.searchsorted(ts, before_us, side="right")
        return items[int(lo):int(hi)]

    def between(self, pid: Any, tid: Any, after_us: float, before_us: float) -> list[dict[str, Any]]:
        """Cache-write op rows on the thread with ``after_us < ts <= before_us``, in start order."""
        return self._range(self._writes, pid, tid, after_us, before_us)

    def views(self, pid: Any, tid: Any, start_us: float, end_us: float) -> list[dict[str, Any]]:
        """Cache-view op rows (a 4-D/5-D first input) on the thread starting inside ``[start_us, end_us]``."""
        return self._range(self._views, pid, tid, start_us - 1e-9, end_us)
