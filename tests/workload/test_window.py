"""Sliding-window attention in the workload contract: validation, tag, ledgers (hand-computed), spec grammar."""

import pytest

from profattn.errors import WorkloadError
from profattn.workload import Phase, Workload, causal_pairs
from profattn.workload.contract import window_start
from profattn.workload.spec import parse_workload_spec, workload_spec


def decode(kv_len: int, window: int | None, **kw) -> Workload:
    return Workload(phase="decode", batch=8, q_len=1, kv_len=kv_len, num_q_heads=16, num_kv_heads=4, head_dim=128,
                    window=window, **kw)


def test_windowed_pairs_by_hand_and_brute_force():
    # square 4x4, window 2: rows see 1, 2, 2, 2 keys
    assert causal_pairs(4, 4, 2) == 1 + 2 + 2 + 2
    # window 1: each row sees only its own position
    assert causal_pairs(4, 4, 1) == 4
    assert causal_pairs(1, 32768, 4096) == 4096
    # chunk of 2 rows over 8 keys (positions 6, 7), window 3: 3 + 3
    assert causal_pairs(2, 8, 3) == 6
    # window >= kv equals full causal
    assert causal_pairs(5, 9, 9) == causal_pairs(5, 9) == causal_pairs(5, 9, 100)
    for lq in range(1, 9):
        for lk in range(1, 9):
            for w in range(1, 11):
                brute = sum(1 for i in range(lq) for j in range(lk) if lk - lq + i - w < j <= lk - lq + i)
                assert causal_pairs(lq, lk, w) == brute, (lq, lk, w)


def test_window_start():
    assert window_start(1, 32768, 4096) == 28672
    assert window_start(4, 10, 3) == 4  # first row at position 6 sees 4, 5, 6
    assert window_start(4, 10, 100) == 0
    assert window_start(4, 10, None) == 0


def test_validation_names_the_problem():
    with pytest.raises(WorkloadError, match="window must be a positive integer"):
        decode(64, 0)
    with pytest.raises(WorkloadError, match="window must be a positive integer"):
        decode(64, True)
    with pytest.raises(WorkloadError, match="needs mask='causal'"):
        decode(64, 16, mask="none")
    assert decode(64, 64).attended_pairs == decode(64, None).attended_pairs  # W = kv allowed: full causal
    assert decode(64, 1000).attended_pairs == decode(64, None).attended_pairs


def test_tag_unchanged_without_window_and_suffixed_with_one():
    assert decode(8192, None).tag == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal"
    assert decode(8192, 4096).tag == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_w4096"


def test_decode_kv32768_window4096_reads_4096_tokens_per_sequence():
    w, full = decode(32768, 4096), decode(32768, None)
    tokens = 8 * 4096
    assert w.kv_bytes == 2 * tokens * 4 * 128 * 2 == 67_108_864
    assert full.kv_bytes == 8 * w.kv_bytes
    q_bytes = 8 * 16 * 128 * 2
    assert w.requested_bytes == 67_108_864 + 2 * q_bytes
    assert w.flops == 4 * 16 * 8 * 4096 * 128
    assert w.logical_kv_tokens == tokens


def test_window_ledger_of_a_prefill_chunk():
    # 1 sequence, q 4 over kv 10, window 3: rows at 6..9 see {4,5,6} {5,6,7} {6,7,8} {7,8,9}: keys 4..9 read
    w = Workload(phase="prefill", batch=1, q_len=4, kv_len=10, num_q_heads=2, num_kv_heads=1, head_dim=16,
                 dtype="float16", window=3)
    assert w.attended_pairs == 12
    assert w.logical_kv_tokens == w.unique_kv_tokens == 6
    assert w.kv_bytes == 2 * 6 * 1 * 16 * 2


def test_paged_pages_touched_by_the_window():
    # kv 100, page 16, window 40: keys 60..99 lie on pages 3..6 (4 block-table entries per sequence)
    w = decode(100, 40, kv_layout="paged", page_size=16)
    assert w.pages_in_use == 8 * 4
    assert decode(100, None, kv_layout="paged", page_size=16).pages_in_use == 8 * 7
    # window starting exactly on a page edge: kv 96, window 32 -> keys 64..95 = pages 4, 5
    assert decode(96, 32, kv_layout="paged", page_size=16).pages_in_use == 8 * 2
    # one key past the edge: window 33 -> keys 63..95 = pages 3, 4, 5
    assert decode(96, 33, kv_layout="paged", page_size=16).pages_in_use == 8 * 3
    # window 1: only the last key's page
    assert decode(96, 1, kv_layout="paged", page_size=16).pages_in_use == 8
    block_table = next(t for t in w.traffic() if t.name == "block_table")
    assert block_table.bytes_read == 32 * 4
    assert w.kv_bytes == 2 * 8 * 40 * 4 * 128 * 2


def test_shared_prefix_slots_read_once_when_a_window_reaches_them():
    # 2 sequences of 64 sharing a 32-token prefix, window 40: each reads keys 24..63; prefix slots 24..31 once
    w = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=4, head_dim=16,
                 kv_layout="paged", page_size=16, shared_prefix_len=32, window=40)
    assert w.unique_kv_tokens == 8 + 2 * 32
    assert w.logical_kv_tokens == 2 * 40
    # window 16 never reaches the prefix
    assert w.with_(window=16).unique_kv_tokens == 2 * 16
    # no window: prefix once
    assert w.with_(window=None).unique_kv_tokens == 32 + 2 * 32


def test_varlen_window_ledger():
    w = Workload.varlen(None, [(4, 10), (1, 5)], num_q_heads=2, num_kv_heads=1, head_dim=16, window=3)
    assert w.phase is Phase.MIXED
    assert w.attended_pairs == 12 + 3
    assert w.window_starts == (4, 2)
    assert w.logical_kv_tokens == 6 + 3


def test_train_writes_whole_dk_dv():
    w = Workload(phase="train", batch=1, q_len=2, kv_len=8, num_q_heads=1, num_kv_heads=1, head_dim=16, window=2)
    by = {t.name: t for t in w.traffic()}
    assert by["K"].numel == 3 * 16  # keys 5, 6, 7
    assert by["dK"].numel == 8 * 16


def test_dict_round_trip_and_old_dicts():
    w = decode(4096, 1024, kv_layout="paged", page_size=16)
    d = w.to_dict()
    assert d["window"] == 1024
    assert Workload.from_dict(d) == w
    d.pop("window")
    assert Workload.from_dict(d).window is None  # a results file written before windows existed


def test_spec_grammar():
    w = parse_workload_spec("phase=decode,b=8,q=1,kv=32768,hq=16,hkv=4,d=128,page=16,window=4096")
    assert w.window == 4096 and w.kv_len == 32768
    assert parse_workload_spec("phase=decode,b=8,q=1,kv=32768,hq=16,hkv=4,d=128,w=4096") .window == 4096
    assert "window=4096" in workload_spec(w)
    assert parse_workload_spec(workload_spec(w)) == w
    assert "window" not in workload_spec(w.with_(window=None))
    with pytest.raises(WorkloadError, match=r"window must be an integer, got 'big'"):
        parse_workload_spec("phase=decode,b=8,q=1,kv=64,hq=16,hkv=4,d=128,window=big")
    with pytest.raises(WorkloadError, match="window given twice"):
        parse_workload_spec("phase=decode,b=8,q=1,kv=64,hq=16,hkv=4,d=128,window=4,w=8")
    with pytest.raises(WorkloadError, match="window must be a positive integer"):
        parse_workload_spec("phase=decode,b=8,q=1,kv=64,hq=16,hkv=4,d=128,w=0")
    mixed = parse_workload_spec("mix=2x(q4,kv10)+(q1,kv5),hq=2,hkv=1,d=16,w=3")
    assert mixed.window == 3 and parse_workload_spec(workload_spec(mixed)) == mixed
