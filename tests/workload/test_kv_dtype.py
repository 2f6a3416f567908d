"""The FP8 KV-cache field: validation, tag, ``--workload`` grammar, byte ledger and dequantization work."""

import pytest

from profattn.errors import WorkloadError
from profattn.workload import Workload, parse_workload_spec, workload_spec


def fp8_decode(**changes) -> Workload:
    fields = dict(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128,
                  kv_layout="paged", page_size=16, kv_dtype="fp8")
    fields.update(changes)
    return Workload(**fields)


def test_alias_canonical_and_tag():
    w = fp8_decode()
    assert w.kv_dtype == "float8_e4m3fn"
    assert w.tag == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_paged16_kvfp8"
    # unset: the tag is the one every existing run has
    assert fp8_decode(kv_dtype=None).tag == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_paged16"
    assert fp8_decode(kv_dtype="none").kv_dtype is None


@pytest.mark.parametrize("changes, words", [
    (dict(kv_dtype="int8"), "unsupported kv_dtype 'int8'"),
    (dict(kv_layout="dense", page_size=None), "needs kv_layout='paged'"),
    (dict(phase="prefill", q_len=16, kv_len=64), "decode calls only, not prefill"),
    (dict(append=True), "with append is not offered yet"),
])
def test_invalid_combinations(changes, words):
    with pytest.raises(WorkloadError, match=words):
        fp8_decode(**changes)


def test_ledger_one_byte_per_element_scales_apart_and_dequant_work():
    w = fp8_decode()
    lines = {t.name: t for t in w.traffic()}
    # K and V: 8 seqs x 8192 tokens x 4 KV heads x 128 dims x 1 byte each = 33,554,432 bytes
    assert lines["K"].bytes_total == lines["V"].bytes_total == 8 * 8192 * 4 * 128 == 33_554_432
    assert w.kv_bytes == 67_108_864  # half of the bf16 cache's 134,217,728
    assert fp8_decode(kv_dtype=None).kv_bytes == 134_217_728
    # scales: fp32 [Hkv] for K and for V, 16 bytes each
    assert lines["k_scale"].bytes_total == lines["v_scale"].bytes_total == 16
    # Q and O stay bf16 [8, 16, 1, 128]: 32,768 bytes each; block table 8 x 512 pages x 4 B; seq_lens 32 B
    assert lines["Q"].bytes_total == lines["O"].bytes_total == 32_768
    assert w.requested_bytes == 67_108_864 + 32 + 2 * 32_768 + 4096 * 4 + 32 == 67_190_848
    # one multiply per loaded K/V element, apart from the 4*B*Hq*Lk*d attention FLOPs
    assert w.dequant_ops == 2 * 8 * 8192 * 4 * 128 == 67_108_864
    assert w.flops == 4 * 8 * 16 * 8192 * 128
    assert fp8_decode(kv_dtype=None).dequant_ops == 0
    assert "k_scale" not in {t.name for t in fp8_decode(kv_dtype=None).traffic()}


def test_spec_round_trip_and_errors_name_the_token():
    w = parse_workload_spec("phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=32,page=16,kv_dtype=fp8")
    assert w.kv_dtype == "float8_e4m3fn"
    assert workload_spec(w).endswith(",kv_dtype=float8_e4m3fn")
    assert parse_workload_spec(workload_spec(w)) == w
    plain = parse_workload_spec("phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=32,page=16")
    assert "kv_dtype" not in workload_spec(plain)
    with pytest.raises(WorkloadError, match=r"--workload: kv_dtype=fp4: unsupported kv_dtype 'fp4'"):
        parse_workload_spec("phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=32,page=16,kv_dtype=fp4")
    with pytest.raises(WorkloadError, match="needs kv_layout='paged'"):
        parse_workload_spec("phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=32,kv_dtype=fp8")


def test_dict_round_trip_and_old_dicts():
    w = fp8_decode(batch=2, kv_len=64)
    d = w.to_dict()
    assert d["kv_dtype"] == "float8_e4m3fn" and d["dequant_ops"] == 2 * 2 * 64 * 4 * 128
    assert Workload.from_dict(d) == w
    old = fp8_decode(kv_dtype=None).to_dict()
    del old["kv_dtype"], old["dequant_ops"]  # a results.json written before the field existed
    assert Workload.from_dict(old).kv_dtype is None
