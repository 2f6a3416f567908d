"""Packed batches (documents of different lengths in one call): the ``docs=`` grammar, ``Workload.is_packed``
and the ledgers of a packed training batch computed by hand."""

from __future__ import annotations

import pytest

from profattn.errors import WorkloadError
from profattn.workload import KVLayout, Phase, Workload, parse_workload_spec, workload_spec

TRAIN = "phase=train,docs=64+32+96,hq=4,hkv=2,d=32,dtype=float32"


def test_docs_parse_to_a_packed_train_call_and_round_trip():
    w = parse_workload_spec(TRAIN)
    assert w.phase is Phase.TRAIN and w.seqs == ((64, 64), (32, 32), (96, 96))
    assert (w.batch, w.q_len, w.kv_len) == (3, 96, 96) and w.is_packed and w.doc_offsets == (0, 64, 96, 192)
    # the tag scheme of every variable-length call, unchanged
    assert w.tag == "train_b3_q96_kv96_hq4_hkv2_d32_fp32_causal_sq64kv64-q32kv32-q96kv96"
    assert parse_workload_spec(workload_spec(w)) == w and Workload.from_dict(w.to_dict()) == w
    assert w == Workload.packed("train", (64, 32, 96), num_q_heads=4, num_kv_heads=2, head_dim=32, dtype="float32")
    counted = parse_workload_spec("docs=2x16+8,hq=2,hkv=1,d=8")
    assert counted.phase is Phase.PREFILL and counted.q_lens == (16, 16, 8) and counted.is_packed


def test_what_is_and_is_not_packed():
    common = dict(num_q_heads=2, num_kv_heads=1, head_dim=8)
    assert Workload.packed("prefill", (5, 3), **common).is_packed
    assert not Workload.varlen("prefill", ((3, 5), (3, 3)), **common).is_packed  # a cached prefix: not a document
    assert not Workload.varlen(None, ((2, 2), (1, 4)), **common).is_packed  # mixed
    # the same documents as separate sequences over a paged cache are a variable-length prefill, not packed
    assert not Workload.varlen("prefill", ((5, 5), (3, 3)), kv_layout=KVLayout.PAGED, page_size=16, **common).is_packed
    assert not Workload(phase="train", batch=2, q_len=8, kv_len=8, **common).is_packed  # uniform: no seqs


@pytest.mark.parametrize("spec, message", [
    ("docs=64+x,hq=2,hkv=1,d=8", "docs item 'x' is not [N x]INT"),
    ("docs=0x4,hq=2,hkv=1,d=8", "docs item '0x4': count and length must be positive"),
    ("docs=4+0,hq=2,hkv=1,d=8", "docs item '0': count and length must be positive"),
    ("phase=decode,docs=4,hq=2,hkv=1,d=8", "packed documents (docs=) are a train or prefill call, not decode"),
    ("docs=4,mix=(q1,kv2),hq=2,hkv=1,d=8", "seqs given twice ('docs' and 'mix')"),
    ("docs=4,q=4,hq=2,hkv=1,d=8", "q follows from docs=...; give either docs or q"),
    ("docs=70000x4,hq=2,hkv=1,d=8", "more than 65,536 documents in one call"),
])
def test_docs_errors_are_one_line(spec, message):
    with pytest.raises(WorkloadError) as exc:
        parse_workload_spec(spec)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_packed_train_ledgers_by_hand():
    """Causal pairs per document n(n+1)/2: 2,080 + 528 + 4,656 = 7,264 per query head.
    forward = 4 · d 32 · Hq 4 · 7,264 = 3,719,168 FLOPs; backward = 2.5 × that (``backward_flops``) = 9,297,920;
    the call = 13,017,088 = 7,264 · 4 · 32 · 4 · (1 + 2.5)."""
    w = parse_workload_spec(TRAIN)
    assert w.attended_pairs == 7_264
    assert w.forward_flops == 3_719_168 and w.backward_flops == 9_297_920
    assert w.flops == 13_017_088 == 7_264 * 4 * 32 * 4 * 7 // 2
    # bytes, fp32, T = 192 packed tokens: Q/O/dO/dQ [192, 4, 32] = 98,304 B; K/V/dK/dV [192, 2, 32] = 49,152 B;
    # LSE fp32 [4, 192] = 3,072 B; offsets 4 · 4 B = 16 B.
    t = {x.name: (x.bytes_read, x.bytes_written) for x in w.traffic()}
    assert t == {"Q": (196_608, 0), "K": (98_304, 0), "V": (98_304, 0), "O": (98_304, 98_304),
                 "LSE": (3_072, 3_072), "dO": (98_304, 0), "dQ": (0, 98_304), "dK": (0, 49_152),
                 "dV": (0, 49_152), "q_offsets": (32, 0)}
    assert w.requested_bytes == 890_912
    assert w.tokens_per_call == 192
    # the same documents as a prefill: Q, K, V read once, O written once, offsets once
    p = w.with_(phase="prefill")
    assert p.flops == 3_719_168 and p.requested_bytes == 2 * 98_304 + 2 * 49_152 + 16 == 294_928


def test_packed_documents_and_training_refuse_a_paged_layout():
    """`phase=train,docs=8+8,...,page=16` ran as a paged training call (no packing, no isolation check) and exited 0:
    packed documents are one dense sequence, and training has no KV cache to page."""
    with pytest.raises(WorkloadError, match=r"packed documents \(docs=\) are one dense sequence"):
        parse_workload_spec("phase=train,docs=8+8,hq=4,hkv=2,d=32,page=16")
    with pytest.raises(WorkloadError, match=r"packed documents \(docs=\) are one dense sequence"):
        parse_workload_spec("docs=8+8,hq=4,hkv=2,d=32,kv_layout=paged,page=16")
    with pytest.raises(WorkloadError, match="training reads dense K/V"):
        parse_workload_spec("phase=train,b=1,q=16,kv=16,hq=4,hkv=2,d=32,page=16")
    assert parse_workload_spec("phase=prefill,mix=2x(q8,kv8),hq=4,hkv=2,d=32,page=16").kv_layout.value == "paged"
