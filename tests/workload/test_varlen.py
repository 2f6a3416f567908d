"""Variable-length calls: the contract, the ``--workload`` grammar, and the ledgers of a mixed batch
computed by hand."""

from __future__ import annotations

import pytest

from profattn.errors import WorkloadError
from profattn.workload import KVLayout, Phase, Workload, parse_workload_spec, workload_spec
from profattn.workload.contract import seqs_tag
from profattn.workload.spec import parse_seqs, seqs_spec

MIX = "mix=2x(q2048,kv8192)+32x(q1,kv4096),hq=32,hkv=8,d=128,page=16"


def test_the_issue_example_parses_to_a_mixed_call():
    w = parse_workload_spec(MIX)
    assert w.phase is Phase.MIXED and (w.batch, w.q_len, w.kv_len) == (34, 2048, 8192)
    assert w.kv_layout is KVLayout.PAGED and w.page_size == 16 and not w.append
    assert w.q_lens == (2048, 2048) + (1,) * 32 and w.kv_lens == (8192, 8192) + (4096,) * 32
    assert w.tag == "mixed_b34_q2048_kv8192_hq32_hkv8_d128_bf16_causal_paged16_s2xq2048kv8192-32xq1kv4096"
    assert parse_workload_spec(workload_spec(w)) == w


def test_mixed_ledgers_by_hand():
    """Two prefill chunks (2048 new tokens after 6144 cached: rows see 6145..8192 keys) and 32 decodes over 4096.
    pairs = 2 · (6145 + 8192) · 2048 / 2 + 32 · 4096 = 29,362,176 + 131,072 = 29,493,248 per query head;
    FLOPs = 4 · Hq 32 · pairs · d 128 = 483,217,375,232."""
    w = parse_workload_spec(MIX)
    assert w.attended_pairs == 29_493_248 and w.flops == 483_217_375_232
    # bytes (bf16): Q and O: (2·2048 + 32) tokens · 32 heads · 128 · 2 B = 33,816,576 each;
    # K and V: unique slots 2·8192 + 32·4096 = 147,456 tokens · 8 · 128 · 2 B = 301,989,888 each;
    # block table: 2·512 + 32·256 = 9,216 pages · 4 B; seq_lens 34 · 4 B; query offsets 35 · 4 B
    t = {x.name: x.bytes_total for x in w.traffic()}
    assert t == {"Q": 33_816_576, "O": 33_816_576, "K": 301_989_888, "V": 301_989_888,
                 "block_table": 36_864, "seq_lens": 136, "q_offsets": 140}
    assert w.requested_bytes == sum(t.values()) == 671_650_068
    assert w.kv_bytes == 603_979_776 and w.pages_in_use == 9_216
    assert w.tokens_per_call == 4_128 and w.append_bytes == 0


def test_append_ledger_by_hand():
    w = parse_workload_spec(MIX + ",append=true")
    # new tokens 4,128 · 8 heads · 128 · 2 B = 8,454,144 per K or V, read once and written once; slots int64
    t = {x.name: (x.bytes_read, x.bytes_written) for x in w.append_traffic()}
    assert t == {"K_new": (8_454_144, 8_454_144), "V_new": (8_454_144, 8_454_144), "slot_mapping": (33_024, 0)}
    assert w.append_bytes == 4 * 8_454_144 + 33_024
    assert w.requested_bytes == 671_650_068  # the attention kernel's ledger is unchanged
    assert w.tag.endswith("_append")


def test_chunked_prefill_chunk_is_uniform_or_varlen_alike():
    """Chunk 3 of an 8192-token prompt at chunk 2048: q 2048 over kv 8192, as a uniform call or one seq each."""
    uni = Workload(phase="prefill", batch=8, q_len=2048, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128,
                   kv_layout="paged", page_size=16)
    var = Workload.varlen(None, [(2048, 8192)] * 8, num_q_heads=16, num_kv_heads=4, head_dim=128,
                          kv_layout="paged", page_size=16)
    assert var.phase is Phase.PREFILL
    assert var.flops == uni.flops and var.kv_bytes == uni.kv_bytes
    # Q/O are the same bytes; the varlen call adds its 9 query offsets
    assert var.requested_bytes == uni.requested_bytes + 9 * 4


@pytest.mark.parametrize("spec, message", [
    ("mix=2x(q2048,kv8192)+3y(q1,kv5),hq=2,hkv=1,d=8", "mix group '3y(q1,kv5)' is not [N x](qINT,kvINT)"),
    ("mix=2x(q2048,kv8192,hq=2,hkv=1,d=8", "unbalanced '('"),
    ("mix=(q1,kv8)),hq=2,hkv=1,d=8", "unbalanced ')'"),
    ("mix=0x(q1,kv8),hq=2,hkv=1,d=8", "mix group '0x(q1,kv8)': count, q and kv must be positive"),
    ("mix=(q0,kv8),hq=2,hkv=1,d=8", "mix group '(q0,kv8)': count, q and kv must be positive"),
    ("mix=(q9,kv8),hq=2,hkv=1,d=8", "sequence 0: q_len 9 > kv_len 8"),
    ("mix=(q5,kv8),b=3,hq=2,hkv=1,d=8", "b follows from mix=...; give either mix or b"),
    ("mix=(q5,kv8),hkv=1,d=8", "missing num_q_heads"),
    ("hq=2,num_q_heads=3", "num_q_heads given twice ('hq' and 'num_q_heads')"),
    ("phase=decode,mix=(q5,kv8)+(q1,kv3),hq=2,hkv=1,d=8", "a decode call has q_len 1 in every sequence"),
    ("phase=mixed,mix=(q5,kv8),hq=2,hkv=1,d=8", "a mixed call has both decoding sequences"),
    ("phase=mixed,b=2,q=1,kv=8,hq=2,hkv=1,d=8", "a mixed call needs per-sequence lengths"),
    ("mix=(q5,kv8),hq=2,hkv=1,d=8,append=maybe", "append must be true or false, got 'maybe'"),
    ("mix=(q5,kv8),hq=2,hkv=1,d=8,append=1", "append (writing new K/V into the cache) needs kv_layout='paged'"),
    ("mix=70000x(q1,kv8),hq=2,hkv=1,d=8", "more than 65,536 sequences in one call"),
    ("mix=(q5,kv8),hq=2,hkv=1,d=8,kv_len_dist=ragged,page=16", "ragged KV lengths are defined for decode"),
    ("zz=3", "unknown field 'zz'"),
])
def test_grammar_errors_name_the_bad_token(spec, message):
    with pytest.raises(WorkloadError) as exc:
        parse_workload_spec(spec)
    assert message in str(exc.value)


def test_aliases_and_page_implies_paged():
    w = parse_workload_spec("phase=decode,b=8,q=1,kv=8192,hq=16,hkv=4,d=128,page=16")
    assert (w.batch, w.kv_len, w.kv_layout, w.page_size) == (8, 8192, KVLayout.PAGED, 16) and not w.is_varlen
    assert parse_workload_spec(workload_spec(w)) == w


def test_seqs_text_round_trips_and_long_tags_fall_back_to_a_digest():
    seqs = ((2048, 8192),) * 2 + ((1, 4096),) * 32
    assert seqs_spec(seqs) == "2x(q2048,kv8192)+32x(q1,kv4096)" and parse_seqs(seqs_spec(seqs)) == seqs
    ragged = tuple((1, 100 + i) for i in range(40))
    tag = seqs_tag(ragged)
    assert tag.startswith("s") and len(tag) == 13 and tag == seqs_tag(list(ragged))


def test_round_trip_through_results_json():
    w = parse_workload_spec(MIX + ",append=yes")
    assert Workload.from_dict(w.to_dict()) == w
    with pytest.raises(WorkloadError):
        Workload.from_dict({**w.to_dict(), "seqs": 5})


@pytest.mark.parametrize("field, value", [("batch", 10**23), ("batch", 3_000_000_000), ("kv_len", 10**20),
                                          ("num_q_heads", 1 << 17), ("head_dim", 1 << 20)])
def test_shape_fields_are_bounded_before_anything_is_sized(field, value):
    """batch=1e23 raised OverflowError from kv_lens, 3e9 a MemoryError, 1e8 ran for minutes: now one line."""
    fields = dict(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=8)
    fields[field] = value
    if field == "num_q_heads":
        fields["num_kv_heads"] = 1
    with pytest.raises(WorkloadError, match=f"{field} {value:,} is beyond profattn's bound"):
        Workload(**fields)


def test_a_results_file_claiming_a_huge_batch_is_a_one_line_error(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "examples" / "h200-seed-2026-12-01" / "results.json"
    for batch, message in ((2**40, "beyond profattn's bound"), (10**30, "beyond a 64-bit integer")):
        doc = json.loads(src.read_text())
        doc["cells"][0]["workload"]["batch"] = batch  # within 64 bits: the workload's bound; beyond: the reader's
        (tmp_path / "results.json").write_text(json.dumps(doc))
        proc = subprocess.run([sys.executable, "-m", "profattn.cli", "summary", str(tmp_path)], capture_output=True,
                              text=True)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1
