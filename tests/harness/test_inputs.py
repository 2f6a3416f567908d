"""Inputs, reference and check of variable-length and appending calls: padded tensors with per-sequence lengths,
a per-sequence fp64 reference checked on valid rows only, the new tokens and their slots, and honest memory
estimates."""

from __future__ import annotations

import math

import pytest
import torch

from profattn.harness.inputs import (
    OUT_TOLERANCE, check, inputs_bytes_needed, make_inputs, reference, reference_bytes_needed, valid_part,
)
from profattn.workload import Workload

#: Three sequences: a prefill chunk of 3 rows after 2 cached tokens, a decode over 4, a fresh 2-token prompt.
SEQS = ((3, 5), (1, 4), (2, 2))


def varlen(**kw) -> Workload:
    fields = dict(num_q_heads=2, num_kv_heads=1, head_dim=4, dtype="float32") | kw
    return Workload.varlen(None, SEQS, **fields)


def rowwise(q, k, v, seqs, window=None):
    """fp64 attention one query row at a time: row i of sequence b sits at position kv_b - q_b + i and sees keys
    0..that position (with a window W, only the last W of them)."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    g = q.shape[1] // k.shape[1]
    for b, (nq, nk) in enumerate(seqs):
        for h in range(q.shape[1]):
            for i in range(nq):
                last = nk - nq + i
                first = 0 if window is None else max(0, last - window + 1)
                kk, vv = k[b, h // g, first:last + 1].double(), v[b, h // g, first:last + 1].double()
                s = kk @ q[b, h, i].double() / math.sqrt(q.shape[-1])
                out[b, h, i] = torch.softmax(s, 0) @ vv
    return out


def test_padded_inputs_with_lengths_and_a_per_sequence_reference(cpu):
    w = varlen()
    inputs = make_inputs(w, cpu, seed=4)
    assert inputs.q.shape == (3, 2, 3, 4) and inputs.k.shape == (3, 1, 5, 4)
    assert inputs.q_lens.dtype == torch.int32 and inputs.q_lens.tolist() == [3, 1, 2]
    assert inputs.kv_lens.tolist() == [5, 4, 2] and inputs.append is None and inputs.paged is None
    ref = reference(w, inputs)
    assert ref.precision == "fp64"
    torch.testing.assert_close(ref.out, rowwise(inputs.q, inputs.k, inputs.v, SEQS))
    assert (ref.out[1, :, 1:] == 0).all() and (ref.out[2, :, 2:] == 0).all()  # padding rows
    # valid rows: 3 + 1 + 2 query rows, [6, Hq, d]
    assert valid_part(w, ref.out).shape == (6, 2, 4)
    assert valid_part(w, inputs.k, keys=True).shape == (11, 1, 4)


def test_the_check_ignores_padding_rows_and_fails_a_wrong_valid_row(cpu):
    w = varlen()
    inputs = make_inputs(w, cpu, seed=4)
    ref = reference(w, inputs)
    good = ref.out.float().clone()
    good[1, :, 1:] = float("nan")  # garbage where sequence 1 has no query: not part of the answer
    good[2, :, 2] = 1e6
    c = check(w, good, None, ref)
    assert c.passed and c.out_rel_err < 1e-6 and c.cache_ok is None
    bad = good.clone()
    bad[2, 0, 1] += 1.0  # one valid row of one head wrong
    c = check(w, bad, None, ref)
    assert not c.passed and c.out_rel_err > OUT_TOLERANCE["float32"]
    nan = good.clone()
    nan[0, 1, 2] = float("nan")
    assert check(w, nan, None, ref).out_rel_err == float("inf")
    with pytest.raises(ValueError, match="shape"):
        check(w, good[:, :, :2], None, ref)


def test_train_gradients_are_compared_on_valid_rows_and_key_slots(cpu):
    w = Workload.varlen("train", SEQS, num_q_heads=2, num_kv_heads=1, head_dim=4, dtype="float32")
    inputs = make_inputs(w, cpu, seed=5)
    assert (inputs.grad_out[1, :, 1:] == 0).all()  # padding rows of dO are zero: they add nothing to dK/dV
    ref = reference(w, inputs)
    from profattn.backends import get_backend

    out = get_backend("eager").prepare(w, cpu).forward(inputs.q, inputs.k, inputs.v)
    out.backward(inputs.grad_out)
    grads = {"dq": inputs.q.grad, "dk": inputs.k.grad, "dv": inputs.v.grad}
    c = check(w, out, grads, ref)
    assert c.passed and max(c.grad_rel_err.values()) < 1e-5


def test_an_appending_call_gets_its_new_tokens_slots_and_a_cache_of_prefixes(cpu):
    w = varlen(kv_layout="paged", page_size=2, append=True)
    inputs = make_inputs(w, cpu, seed=4)
    new, cache = inputs.append, inputs.paged
    assert new.k_new.shape == (6, 1, 4) and new.slot_mapping.tolist() == cache.slot_mapping([3, 1, 2]).tolist()
    torch.testing.assert_close(new.k_new[:3], inputs.k[0, :, 2:5].transpose(0, 1))  # sequence 0's tokens 2..4
    torch.testing.assert_close(new.v_new[3], inputs.v[1, :, 3])  # sequence 1's one new token, position 3
    flat = cache.k_pages.view(-1, 1, 4)
    assert (flat[new.slot_mapping] == cache.fill).all()  # before the call appends: the fill (1e4), not the tokens
    assert cache.check_contents(inputs.k, inputs.v) == "sequence 0: 3 of 5 tokens differ (first at position 2)"


def test_memory_estimates_by_hand_and_above_what_is_allocated(cpu):
    w = varlen(kv_layout="paged", page_size=2, append=True)
    # q 3·2·3·4 = 72, k = v = 3·1·5·4 = 60 elements: (72 + 120) · 4 B = 768, fp32 draw 4 · 72 = 288; pool: pages
    # 3 + 2 + 1 = 6 of 2 tokens, K and V: 2 · 6 · 2 · 1 · 4 · 4 B = 384; lengths 2 · 3 · 4 B = 24;
    # new K/V 2 · 6 tokens · 1 · 4 · 4 B = 192 and 6 slots · 8 B = 48
    assert inputs_bytes_needed(w) == 768 + 288 + 384 + 24 + 192 + 48
    inputs = make_inputs(w, cpu, seed=4)
    held = [inputs.q, inputs.k, inputs.v, inputs.paged.k_pages, inputs.paged.v_pages, inputs.q_lens, inputs.kv_lens,
            inputs.append.k_new, inputs.append.v_new, inputs.append.slot_mapping]
    assert sum(t.numel() * t.element_size() for t in held) <= inputs_bytes_needed(w) - 288
    # reference (fp64): q, out 72 each, k, v 60 each: 264 · 8 B = 2,112; the longest sequence's mask 3 · 5 = 15;
    # one chunk: B 3 · Hkv 1 · Lq 3 · (G 2 · Lk 5 · 8 B · 2 + 10) = 9 · 170 = 1,530
    assert reference_bytes_needed(w, cpu) == 2_112 + 15 + 1_530


# ---- a quantized (FP8) paged cache ----------------------------------------------------------------------------
def test_fp8_reference_is_over_the_dequantized_cache_and_quant_error_is_apart():
    from profattn.workload.paged import dequantize, quantize

    w = Workload(phase="decode", batch=3, q_len=1, kv_len=40, num_q_heads=4, num_kv_heads=2, head_dim=16,
                 dtype="float32", kv_layout="paged", page_size=16, kv_len_dist="ragged", kv_len_seed=1, kv_dtype="fp8")
    inputs = make_inputs(w, torch.device("cpu"), seed=0)
    cache = inputs.paged
    assert cache.k_pages.dtype is torch.float8_e4m3fn and tuple(cache.k_scale.shape) == (2,)
    # scale = amax / 448 per KV head over every sequence's valid tokens
    lens = w.kv_lens
    for h in range(2):
        amax = max(float(inputs.k[b, h, :n].abs().max()) for b, n in enumerate(lens))
        assert float(cache.k_scale[h]) == pytest.approx(amax / 448, rel=1e-6)
    ref = reference(w, inputs)
    # by hand: rowwise fp64 attention over code * scale, and over the unquantized values
    kq = dequantize(quantize(inputs.k, cache.k_scale, head_axis=1), cache.k_scale, head_axis=1, dtype=torch.float64)
    vq = dequantize(quantize(inputs.v, cache.v_scale, head_axis=1), cache.v_scale, head_axis=1, dtype=torch.float64)
    seqs = tuple((1, n) for n in lens)
    assert torch.allclose(ref.out, rowwise(inputs.q, kq, vq, seqs), rtol=0, atol=1e-12)
    assert torch.allclose(ref.unquantized_out, rowwise(inputs.q, inputs.k, inputs.v, seqs), rtol=0, atol=1e-12)
    c = check(w, ref.out.float(), None, ref)
    assert c.passed and c.out_rel_err < 1e-6
    # the format's own error, reported apart: E4M3's 3 mantissa bits give a few percent on the output
    assert c.quant_rel_err == pytest.approx(float(torch.linalg.vector_norm(ref.out - ref.unquantized_out)
                                                  / torch.linalg.vector_norm(ref.unquantized_out)), rel=1e-3)
    assert 1e-3 < c.quant_rel_err < 0.1
    # an unquantized workload has none
    plain = w.with_(kv_dtype=None)
    pin = make_inputs(plain, torch.device("cpu"), seed=0)
    assert check(plain, inputs.q, None, reference(plain, pin)).quant_rel_err is None


def test_fp8_memory_estimates_by_hand(cpu):
    w = Workload(phase="decode", batch=3, q_len=1, kv_len=40, num_q_heads=4, num_kv_heads=2, head_dim=16,
                 dtype="float32", kv_layout="paged", page_size=16, kv_len_dist="ragged", kv_len_seed=1, kv_dtype="fp8")
    assert w.kv_lens == (6, 40, 5)  # 1 + 3 + 1 = 5 pages of 16
    # q 3·4·16 = 192, k = v = 3·2·40·16 = 3,840: (192 + 7,680) · 4 B = 31,488; fp32 draw 4 · 3,840 = 15,360;
    # pool in fp32: 2 · 5 · 16 · 2 · 16 · 4 B = 20,480; FP8 pools 2 · 2,560 · 1 B + one fp32 quotient 2,560 · 4 B
    assert inputs_bytes_needed(w) == 31_488 + 15_360 + 20_480 + 2 * 2_560 + 4 * 2_560
    # reference (fp64): q, out, k, v = 8,064 elements, + dequantized k, v and the second output 7,872: 15,936 · 8 B;
    # ragged mask 3 · 40 = 120; one chunk: B 3 · Hkv 2 · (G 2 · Lk 40 · 8 B · 2 + 80) = 6 · 1,360 = 8,160
    assert reference_bytes_needed(w, cpu) == 127_488 + 120 + 8_160


@pytest.mark.parametrize("window", [1, 2, 5])
def test_the_reference_honours_a_sliding_window_whole_and_in_chunks(window, cpu):
    w = varlen(window=window)
    inputs = make_inputs(w, cpu, seed=4)
    torch.testing.assert_close(reference(w, inputs).out, rowwise(inputs.q, inputs.k, inputs.v, SEQS, window))
    # a uniform chunk (Lq 3 over Lk 7), the score matrix in one-row chunks
    u = Workload(phase="prefill", batch=2, q_len=3, kv_len=7, num_q_heads=2, num_kv_heads=1, head_dim=4,
                 dtype="float32", window=window)
    ins = make_inputs(u, cpu, seed=6)
    want = rowwise(ins.q, ins.k, ins.v, [(3, 7)] * 2, window)
    torch.testing.assert_close(reference(u, ins).out, want)
    torch.testing.assert_close(reference(u, ins, chunk_bytes=1).out, want)


def test_the_reference_has_its_own_attention_not_the_eager_backends():
    """The eager backend is one of the backends under test, so the reference must not be its function (a bug in it
    would pass its own check): the harness's grouped attention, on numbers checked by hand."""
    import ast
    from pathlib import Path

    import profattn.harness.inputs as inputs_mod
    from profattn.harness.inputs import grouped_attention

    tree = ast.parse(Path(inputs_mod.__file__).read_text())
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not any(m and m.startswith("profattn.backends.eager") for m, _ in imported)
    # one sequence, Hq 2 sharing one KV head, d 1: scores q·k; query 0 sees key 0 only (mask), query 1 both keys
    q = torch.tensor([[[[1.0], [2.0]], [[0.5], [1.0]]]], dtype=torch.float64)  # [B 1, Hq 2, Lq 2, d 1]
    k = torch.tensor([[[[1.0], [3.0]]]], dtype=torch.float64)  # [1, Hkv 1, Lk 2, 1]
    v = torch.tensor([[[[10.0], [20.0]]]], dtype=torch.float64)
    mask = torch.tensor([[True, False], [True, True]])
    out = grouped_attention(q, k, v, mask=mask)
    # head 0, row 1: softmax(2·1, 2·3) = (1, e^4)/(1 + e^4) → 10 + 10·e^4/(1 + e^4); head 1, row 1: scores 1, 3
    expected = [[10.0, 10 + 10 * math.exp(4) / (1 + math.exp(4))], [10.0, 10 + 10 * math.exp(2) / (1 + math.exp(2))]]
    torch.testing.assert_close(out[0, :, :, 0], torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    # a row that sees no key gives zeros, not NaN
    none = grouped_attention(q, k, v, mask=torch.zeros(2, 2, dtype=torch.bool))
    assert torch.equal(none, torch.zeros_like(none))
