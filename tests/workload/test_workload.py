"""Workload contract: FLOPs and bytes against hand-computed values."""

import pytest

from profattn.errors import UnknownNameError, WorkloadError
from profattn.workload import Mask, Phase, Workload, causal_pairs, get_preset


def seed_decode(kv_len: int) -> Workload:
    return Workload(phase="decode", batch=8, q_len=1, kv_len=kv_len, num_q_heads=16, num_kv_heads=4, head_dim=128)


def test_causal_pairs_square_and_rectangular():
    assert causal_pairs(4, 4) == 1 + 2 + 3 + 4
    # Lq < Lk, bottom-right: rows see 7, 8 keys (offset 6 -> row 0 at position 6).
    assert causal_pairs(2, 8) == 7 + 8
    assert causal_pairs(1, 8192) == 8192
    # Lq > Lk: rows 0..3 see nothing, then 1..4.
    assert causal_pairs(8, 4) == 1 + 2 + 3 + 4
    assert causal_pairs(5, 1) == 1
    # brute force over small shapes
    for lq in range(1, 9):
        for lk in range(1, 9):
            brute = sum(1 for i in range(lq) for j in range(lk) if j <= i + lk - lq)
            assert causal_pairs(lq, lk) == brute, (lq, lk)


def test_seed_decode_kv8192_bytes_and_flops():
    w = seed_decode(8192)
    # K/V: 2 tensors x 8 seqs x 8192 positions x 4 KV heads x 128 dims x 2 bytes
    assert w.kv_bytes == 2 * 8 * 8192 * 4 * 128 * 2 == 134_217_728
    q_bytes = 8 * 16 * 1 * 128 * 2  # 32,768
    assert w.requested_bytes == 134_217_728 + 2 * q_bytes  # Q read + O written
    assert w.flops == 4 * 8 * 16 * 8192 * 128  # every key is visible to the single query
    assert w.group_size == 4 and w.is_gqa
    assert w.tokens_per_call == 8


def test_gqa_uses_kv_heads_for_kv_bytes():
    gqa = seed_decode(2048)
    mha = gqa.with_(num_kv_heads=16)
    assert mha.kv_bytes == 4 * gqa.kv_bytes
    assert mha.flops == gqa.flops  # query-head arithmetic does not shrink with GQA


def test_train_flops_and_ledger():
    w = Workload(phase="train", batch=8, q_len=2048, kv_len=2048, num_q_heads=16, num_kv_heads=4, head_dim=128)
    pairs = 2048 * 2049 // 2
    fwd = 4 * 8 * 16 * pairs * 128
    assert w.forward_flops == fwd
    assert w.flops == fwd + fwd * 5 // 2  # backward = 2.5x forward
    assert round(w.flops / 1e9) == 481  # baselines.md: "training fwd+bwd causal ~ 481 GFLOP"
    q = 8 * 16 * 2048 * 128 * 2
    kv = 8 * 4 * 2048 * 128 * 2
    lse = 8 * 16 * 2048 * 4
    # fwd: Q,K,V read, O written; bwd: Q,K,V,O,dO,LSE read, dQ,dK,dV written; LSE written by fwd.
    expected = (q + 2 * kv + q) + (q + 2 * kv + q + q + lse + q + 2 * kv) + lse
    assert w.requested_bytes == expected


def test_prefill_flops_matches_baseline():
    w = Workload(phase="prefill", batch=8, q_len=2048, kv_len=2048, num_q_heads=16, num_kv_heads=4, head_dim=128)
    assert w.flops / 1e9 == pytest.approx(137.5, abs=0.01)  # baselines.md: "prefill ~ 137 GFLOP"
    assert w.arithmetic_intensity == pytest.approx(w.flops / w.requested_bytes)


def test_noncausal_flops():
    w = Workload(phase="prefill", batch=2, q_len=3, kv_len=5, num_q_heads=4, num_kv_heads=2, head_dim=8, mask="none")
    assert w.flops == 4 * 2 * 4 * 3 * 5 * 8


def test_validation_errors_list_valid_values():
    with pytest.raises(WorkloadError, match="valid: train, prefill, decode"):
        Workload(phase="inference", batch=1, q_len=1, kv_len=1, num_q_heads=1, num_kv_heads=1, head_dim=8)
    with pytest.raises(WorkloadError, match="multiple"):
        Workload(phase="decode", batch=1, q_len=1, kv_len=1, num_q_heads=6, num_kv_heads=4, head_dim=8)
    with pytest.raises(WorkloadError, match="positive"):
        Workload(phase="decode", batch=0, q_len=1, kv_len=1, num_q_heads=4, num_kv_heads=4, head_dim=8)
    with pytest.raises(WorkloadError, match="dtype"):
        Workload(phase="decode", batch=1, q_len=1, kv_len=1, num_q_heads=4, num_kv_heads=4, head_dim=8, dtype="int8")
    with pytest.raises(UnknownNameError, match="valid: seed, small"):
        get_preset("huge")


def test_presets_and_roundtrip():
    seed = get_preset("seed")
    assert [w.phase for w in seed.workloads] == [Phase.TRAIN, Phase.PREFILL, Phase.DECODE, Phase.DECODE, Phase.DECODE]
    assert [w.kv_len for w in seed.regime("decode")] == [512, 2048, 8192]
    assert all(w.batch == 8 and w.num_q_heads == 16 and w.num_kv_heads == 4 and w.head_dim == 128 for w in seed.workloads)
    assert all(w.mask is Mask.CAUSAL and w.dtype == "bfloat16" for w in seed.workloads)
    for w in get_preset("small").workloads:
        assert Workload.from_dict(w.to_dict()) == w
    assert seed_decode(8192).tag == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal"


def test_from_dict_without_a_shape_field_names_it():
    d = seed_decode(512).to_dict()
    del d["batch"], d["head_dim"]
    with pytest.raises(WorkloadError, match="^workload fields missing: batch, head_dim$"):
        Workload.from_dict(d)


def test_gqa_presets_differ_only_in_kv_heads():
    big, small = get_preset("gqa"), get_preset("gqa-small")
    assert [(w.kv_len, w.num_kv_heads) for w in big.workloads] == [(n, h) for n in (512, 2048, 8192, 32768) for h in (32, 8, 1)]
    assert all(w.batch == 8 and w.num_q_heads == 32 and w.head_dim == 128 and w.dtype == "bfloat16" and w.page_size == 16
               and w.phase is Phase.DECODE and w.q_len == 1 for w in big.workloads)
    assert [(w.kv_len, w.num_kv_heads) for w in small.workloads] == [(n, h) for n in (64, 256) for h in (8, 2, 1)]
    assert all(w.batch == 2 and w.num_q_heads == 8 and w.head_dim == 32 and w.page_size == 16 for w in small.workloads)
    # K + V at kv 8192, Hkv 8: 2 · 8 · 8 · 8192 · 128 · 2 bytes; 4× and 32× fewer than at Hkv 32
    kv = {(w.kv_len, w.num_kv_heads): w.kv_bytes for w in big.workloads}
    assert kv[(8192, 8)] == 268_435_456 and kv[(8192, 32)] == 4 * kv[(8192, 8)] == 32 * kv[(8192, 1)]


def test_workload_spec_round_trips_and_rejects_bad_text():
    from profattn.workload import get_preset, parse_workload_spec, workload_spec

    for w in (*get_preset("seed").workloads, *get_preset("decode-sweep").workloads[-2:]):
        assert parse_workload_spec(workload_spec(w)) == w
    assert workload_spec(get_preset("seed").workloads[2]) == (
        "phase=decode,batch=8,q_len=1,kv_len=512,num_q_heads=16,num_kv_heads=4,head_dim=128,dtype=bfloat16,"
        "kv_layout=paged,page_size=16")
    for bad, msg in (("phase=decode,batch=8", "missing q_len"), ("phase=decode,bogus=1", "unknown field 'bogus'"),
                     ("phase=train,batch=x", "batch must be an integer"), ("phase=train,phase=decode", "phase given twice"),
                     ("phase", "is not field=value")):
        with pytest.raises(WorkloadError, match=msg):
            parse_workload_spec(bad)
