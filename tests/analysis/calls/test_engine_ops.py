"""Serving engines' attention ops (profattn.analysis.calls.engine_ops): what their recorded inputs determine — token
count, heads, head_dim, dtype, the paged cache's layout and page size, a backend op's sequence count and longest
lengths — and what they do not, on hand-built op rows with the argument positions of the engines' sources."""

from __future__ import annotations

from profattn.analysis.calls.call_records import CausalAlignment, Engine, KVCacheLayout
from profattn.analysis.calls.engine_ops import kv_cache_shape, read_engine_call

BF16 = "c10::BFloat16"


def op(name: str, dims: list, types: list | None = None, concrete: list | None = None) -> dict:
    return {"name": name, "input_dims": dims, "input_types": types or [BF16] * len(dims),
            "concrete_inputs": concrete or [""] * len(dims), "pid": 1, "tid": 1, "ts_us": 0.0, "_dur": 1.0}


ENTRY = op("vllm::unified_attention_with_output", [[40, 32, 128], [40, 8, 128], [40, 8, 128], [40, 32, 128], [], [], [],
                                                    [0]])


def test_the_v1_entry_op_alone_gives_heads_but_no_lengths() -> None:
    read = read_engine_call([ENTRY])
    e, s = read.engine, read.shape
    assert (e.engine, e.q_tokens, e.kv_new_tokens, e.sequences, e.kv_cache) == (Engine.VLLM, 40, 40, None, None)
    assert (s.num_q_heads, s.num_kv_heads, s.head_dim, s.dtype, s.batch, s.q_len, s.kv_len) == (
        32, 8, 128, "bfloat16", None, None, None)
    assert read.causal is True and read.alignment is CausalAlignment.BOTTOM_RIGHT
    assert any("attention metadata" in n for n in read.notes) and any("page size unknown" in n for n in read.notes)


def test_the_flash_attention_backend_op_gives_sequences_and_the_cache() -> None:
    """_vllm_fa2_C::varlen_fwd(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, leftpad_k, block_table, alibi,
    max_seqlen_q, max_seqlen_k, dropout, scale, zero_tensors, causal, window_left, window_right, ...)."""
    dims = [[40, 32, 128], [1000, 16, 8, 128], [1000, 16, 8, 128], [40, 32, 128], [6], [6], [5], [], [5, 64], [],
            [], [], [], [], [], [], [], []]
    concrete = [""] * 10 + ["20", "900", "0.", "0.088", "False", "True", "-1", "-1"]
    backend = op("_vllm_fa2_C::varlen_fwd", dims, [BF16] * 4 + ["int"] * 5 + [""] * 9, concrete)
    read = read_engine_call([ENTRY, backend])
    e = read.engine
    assert (e.backend_op, e.sequences, e.max_q, e.max_k) == ("_vllm_fa2_C::varlen_fwd", 5, 20, 900)
    assert e.kv_cache.layout is KVCacheLayout.SEPARATE and (e.kv_cache.num_blocks, e.kv_cache.block_size) == (1000, 16)
    assert e.kv_cache.source == "_vllm_fa2_C::varlen_fwd" and read.window is None and read.causal is True
    assert read.shape.batch == 5 and (read.shape.q_len, read.shape.kv_len) == (20, 900)
    # a block table whose rows are not the sequences: this build's positions differ, nothing is read from them
    wrong = op("_vllm_fa2_C::varlen_fwd", dims[:8] + [[7, 64]] + dims[9:], concrete=concrete)
    assert read_engine_call([ENTRY, wrong]).engine.sequences is None


def test_cache_layouts_from_views_and_cache_writes() -> None:
    view_kv_first = op("aten::unbind", [[2, 500, 32, 8, 128], []])
    view_blocks_first = op("aten::select", [[500, 2, 32, 8, 128], [], []])
    write = op("_C_cache_ops::reshape_and_cache_flash", [[40, 8, 128], [40, 8, 128], [500, 32, 8, 128],
                                                        [500, 32, 8, 128], [40], [], [], []])
    assert read_engine_call([ENTRY], [write], [view_kv_first]).engine.kv_cache.layout is KVCacheLayout.KV_FIRST
    assert read_engine_call([ENTRY], [write], [view_blocks_first]).engine.kv_cache.layout is KVCacheLayout.BLOCKS_FIRST
    cache = read_engine_call([ENTRY], [write]).engine.kv_cache
    assert (cache.layout, cache.block_size, cache.capacity_tokens, cache.dtype) == (
        KVCacheLayout.SEPARATE, 32, 16_000, "bfloat16")
    # vLLM's split key cache [num_blocks, Hkv, d / x, block_size, x] (reshape_and_cache), an fp8 cache (uint8)
    split = kv_cache_shape([500, 8, 16, 32, 8], 8, 128, dtype="unsigned char", source="_C_cache_ops::reshape_and_cache")
    assert (split.layout, split.block_size, split.num_blocks) == (KVCacheLayout.SPLIT_X, 32, 500)
    assert kv_cache_shape([2, 2, 32, 8, 128], 8, 128, dtype=None, source="x") is None  # which dim is K/V: unknown
    assert kv_cache_shape([500, 32, 4, 128], 8, 128, dtype=None, source="x") is None  # another model's heads


def test_v0_ops_flattened_heads_and_their_kv_cache_input() -> None:
    v0 = op("vllm::unified_attention_with_output", [[40, 4096], [40, 1024], [40, 1024], [40, 4096], [2, 500, 16, 8, 128],
                                                    [], []])
    read = read_engine_call([v0])
    assert (read.shape.num_q_heads, read.shape.num_kv_heads, read.shape.head_dim) == (32, 8, 128)
    assert read.engine.kv_cache.layout is KVCacheLayout.KV_FIRST and read.engine.kv_cache.block_size == 16


def test_mla_and_unreadable_dims_give_no_shape() -> None:
    mla = op("vllm::unified_mla_attention_with_output", [[40, 16, 576], [40, 512], [40, 1, 64], [40, 16, 512], []])
    read = read_engine_call([mla])
    assert read.shape is None and read.engine.mla and any("latent attention" in n for n in read.notes)
    sglang = op("sglang::unified_attention_with_output", [[40, 4096], [40, 1024], [40, 1024], [40, 4096], [], []])
    read = read_engine_call([sglang])
    assert read.engine.engine is Engine.SGLANG and read.shape is None
