"""Context-parallel workload fields: validation, tag, --workload text, layout and the communication ledger."""

import pytest

from profattn.errors import WorkloadError
from profattn.workload import Workload, parse_workload_spec, workload_spec
from profattn.workload.cp import cp_ledger, shard_chunks

BASE = "phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32"


def test_spec_round_trip_tag_and_dict():
    w = parse_workload_spec(BASE + ",cp=2,cp_scheme=ring")
    assert (w.cp_ranks, w.cp_scheme, w.is_context_parallel) == (2, "ring", True)
    assert w.tag == "train_b1_q32_kv32_hq4_hkv2_d16_fp32_causal_cp2ring"
    assert workload_spec(w).endswith(",cp_ranks=2,cp_scheme=ring")
    assert parse_workload_spec(workload_spec(w)) == w
    assert Workload.from_dict(w.to_dict()) == w
    assert w.single_process == parse_workload_spec(BASE)
    # files written before the fields read as one process
    d = w.single_process.to_dict()
    del d["cp_ranks"], d["cp_scheme"]
    assert Workload.from_dict(d).cp_ranks == 1


@pytest.mark.parametrize("extra, message", [
    (",cp=2", "needs cp_scheme"),
    (",cp_scheme=ring", "needs cp_ranks >= 2"),
    (",cp=2,cp_scheme=zigzag", "^cp_scheme 'zigzag' is not a context-parallel scheme; one of: ring, allgather"),
    (",cp=3,cp_scheme=ring", "divisible by 6"),
    (",cp=4,cp_scheme=ulysses", "num_kv_heads 2"),
    (",cp=0,cp_scheme=ring", "^cp must be an integer"),
])
def test_invalid_combinations(extra, message):
    with pytest.raises(WorkloadError, match=message):
        parse_workload_spec(BASE + extra)


def test_messages_name_the_fields_as_typed():
    with pytest.raises(WorkloadError, match=r"^cp=2 needs cp_scheme, one of: ring, allgather, ulysses, torch-cp$"):
        parse_workload_spec(BASE + ",cp=2")
    with pytest.raises(WorkloadError, match=r"^cp_ranks=2 needs cp_scheme"):
        parse_workload_spec(BASE + ",cp_ranks=2")
    with pytest.raises(WorkloadError, match=r"must be divisible by cp=4$"):
        parse_workload_spec(BASE + ",cp=4,cp_scheme=ulysses")
    with pytest.raises(WorkloadError, match=r"^context parallelism splits a dense K/V, not a paged cache \(page=16\)"):
        parse_workload_spec(BASE.replace("phase=train", "phase=prefill") + ",page=16,cp=2,cp_scheme=ring")


def test_decode_and_windows_are_refused():
    with pytest.raises(WorkloadError, match="train or prefill"):
        parse_workload_spec("phase=decode,b=1,q=1,kv=32,hq=4,hkv=2,d=16,cp=2,cp_scheme=ring")
    with pytest.raises(WorkloadError, match="without seqs/docs or a window"):
        parse_workload_spec(BASE + ",w=8,cp=2,cp_scheme=ring")


def test_shard_chunks_balance_causal_work():
    w = parse_workload_spec(BASE + ",cp=2,cp_scheme=ring")
    assert shard_chunks(w, 0) == ((0, 8), (24, 32))
    assert shard_chunks(w, 1) == ((8, 16), (16, 24))
    u = w.with_(cp_scheme="ulysses")
    assert shard_chunks(u, 1) == ((16, 32),)
    with pytest.raises(ValueError):
        shard_chunks(w, 2)


def test_ledger_by_hand():
    # n_kv = B·Hkv·(L/R)·d = 1·2·16·16 = 512 elements; n_q = 1·4·16·16 = 1024; fp32
    ring = cp_ledger(parse_workload_spec(BASE + ",cp=2,cp_scheme=ring"))
    assert ring.sent_bytes == 2 * 1 * 512 * 4 + 2 * 1 * 512 * 4 + 2 * 2 * 512 * 4 == 16384
    assert ring.received_bytes == ring.sent_bytes
    ag = cp_ledger(parse_workload_spec(BASE + ",cp=2,cp_scheme=allgather"))
    assert ag.sent_bytes == 2 * 512 * 4 * 2 == 8192
    uly = cp_ledger(parse_workload_spec(BASE + ",cp=2,cp_scheme=ulysses"))
    assert uly.sent_bytes == 2 * ((2 * 1024 + 2 * 512) // 2 * 4) == 12288
    prefill = cp_ledger(parse_workload_spec("phase=prefill,b=1,q=64,kv=64,hq=4,hkv=2,d=16,cp=4,cp_scheme=ring"))
    # bf16, n_kv = 2·16·16 = 512: K and V passed R − 1 = 3 times
    assert prefill.sent_bytes == 2 * 3 * 512 * 2 == 6144
    assert not cp_ledger(parse_workload_spec(BASE + ",cp=2,cp_scheme=torch-cp")).counted
