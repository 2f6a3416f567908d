"""Model configurations: published parameter counts from the config fields, per-GPU shapes under tensor
parallelism, KV bytes per token, the ``--model`` text and its errors."""

from __future__ import annotations

import pytest

from profattn.workload.models import MODELS, ModelConfig, ModelError, parse_model_spec


@pytest.mark.parametrize("name, published", [
    ("llama-3-8b", 8.03e9), ("llama-3-70b", 70.55e9), ("qwen2.5-7b", 7.61e9), ("qwen2.5-72b", 72.7e9),
    ("mistral-7b", 7.24e9),
])
def test_parameter_counts_match_the_model_cards(name: str, published: float):
    assert MODELS[name].num_params == pytest.approx(published, rel=1e-3)


def test_llama3_8b_by_hand():
    m = MODELS["llama-3-8b"]
    layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096  # q, o; k, v; gate, up, down; 2 norms
    assert m.num_params == 32 * layer + 2 * 128256 * 4096 + 4096 == 8_030_261_248
    assert m.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
    assert m.kv_bytes_per_token("float8_e4m3fn") == 65_536
    assert (m.q_heads_per_gpu, m.kv_heads_per_gpu, m.group_size) == (32, 8, 4)
    assert m.weight_bytes_per_gpu == 2 * 8_030_261_248


def test_tensor_parallel_shards_heads_and_replicates_kv_heads_beyond_them():
    m = parse_model_spec("llama-3-70b,tp=8")
    assert (m.q_heads_per_gpu, m.kv_heads_per_gpu, m.group_size, m.label) == (8, 1, 8, "llama-3-70b tp=8")
    assert m.kv_bytes_per_token() == 2 * 80 * 1 * 128 * 2
    g = {x.name: x for x in m.gemms()}
    assert (g["qkv_proj"].k, g["qkv_proj"].n) == (8192, (8 + 2) * 128)
    assert g["gate_up_proj"].n == 2 * 28672 // 8 and g["lm_head"].n == 128256 // 8
    m16 = parse_model_spec("llama-3-70b,tp=16")  # more GPUs than KV heads: one KV head each (replicated)
    assert (m16.q_heads_per_gpu, m16.kv_heads_per_gpu) == (4, 1)


def test_fields_spec_and_defaults():
    m = parse_model_spec("layers=2,hq=4,hkv=2,hidden=256,intermediate=512,vocab=1000")
    assert (m.name, m.head_dim, m.tensor_parallel, m.dtype) == ("custom", 64, 1, "bfloat16")
    assert parse_model_spec("llama-3-8b,layers=16").name == "llama-3-8b*"  # a changed shape is not the published one
    assert parse_model_spec("llama-3-8b,tp=2").name == "llama-3-8b"


@pytest.mark.parametrize("spec, msg", [
    ("layers=32,hidden=4096,intermediate=14336,vocab=128256", "num_q_heads (hq), num_kv_heads (hkv) are missing"),
    ("gpt-5", "unknown model 'gpt-5'"),
    ("llama-3-8b,heads=3", "unknown field 'heads'"),
    ("llama-3-8b,tp=x", "tp must be a positive integer"),
    ("llama-3-8b,tp=3", "num_q_heads 32 is not divisible by tp=3"),
    ("layers=2,hq=6,hkv=4,hidden=384,intermediate=8,vocab=10", "num_q_heads 6 is not a multiple of num_kv_heads 4"),
    ("layers=2,hq=3,hkv=1,hidden=100,intermediate=8,vocab=10", "hidden 100 is not a multiple of hq 3"),
    ("", "--model is empty"),
    ("llama-3-8b,tp=2,tp=4", "tensor_parallel given twice"),
    ("llama-3-8b,dtype=int4", "unsupported dtype"),
])
def test_bad_model_is_one_named_error(spec: str, msg: str):
    with pytest.raises(ModelError, match=None) as info:
        parse_model_spec(spec)
    assert msg in str(info.value) and "\n" not in str(info.value)


def test_zero_heads_refused():
    with pytest.raises(ModelError, match="num_q_heads must be a positive integer, got 0"):
        ModelConfig("x", 1, 0, 1, 8, 8, 8, 8)
