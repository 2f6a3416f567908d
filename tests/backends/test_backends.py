"""Backends: mask semantics against an explicit-mask reference, GQA, unsupported reasons."""

from __future__ import annotations

import math

import pytest
import torch

from profattn.backends import Unsupported, all_backends, get_backend
from profattn.backends.masks import dense_mask, sdpa_mask_args
from profattn.errors import UnknownNameError
from profattn.workload import Workload


def explicit_reference(q, k, v, q_len, kv_len):
    """Row-by-row attention in fp64: query row i (bottom-right aligned) sees keys 0..kv_len-q_len+i."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            kh = h // group
            for i in range(q_len):
                last = kv_len - q_len + i
                s = (k[b, kh, : last + 1] @ q[b, h, i]) / math.sqrt(q.shape[-1])
                out[b, h, i] = torch.softmax(s, 0) @ v[b, kh, : last + 1]
    return out


CPU_BACKENDS = ["sdpa-math", "sdpa-flash", "eager"]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("q_len,kv_len", [(5, 12), (1, 9), (7, 7)])
def test_bottom_right_causal_on_every_cpu_backend(backend, q_len, kv_len, cpu):
    w = Workload(phase="prefill", batch=2, q_len=q_len, kv_len=kv_len, num_q_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")
    q = torch.randn(w.q_shape)
    k = torch.randn(w.kv_shape)
    v = torch.randn(w.kv_shape)
    prepared = get_backend(backend).prepare(w, cpu)
    with prepared.context():
        out = prepared.forward(q, k, v)
    ref = explicit_reference(q, k, v, q_len, kv_len)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)
    # The last query row sits at position kv_len - 1 and attends every key: changing the first key changes it.
    k2 = k.clone()
    k2[:, :, 0] += 5.0
    with prepared.context():
        out2 = prepared.forward(q, k2, v)
    assert not torch.allclose(out2[:, :, -1], out[:, :, -1])


@pytest.mark.slow
def test_flex_bottom_right_causal(cpu):
    w = Workload(phase="prefill", batch=1, q_len=5, kv_len=12, num_q_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")
    q, k, v = torch.randn(w.q_shape), torch.randn(w.kv_shape), torch.randn(w.kv_shape)
    try:
        prepared = get_backend("flex").prepare(w, cpu)
    except Unsupported as exc:
        pytest.skip(str(exc))
    out = prepared.forward(q, k, v)
    torch.testing.assert_close(out.double(), explicit_reference(q, k, v, 5, 12), rtol=1e-4, atol=1e-5)


def test_mask_arguments_pick_exact_semantics():
    square = Workload(phase="prefill", batch=1, q_len=8, kv_len=8, num_q_heads=2, num_kv_heads=1, head_dim=8)
    assert sdpa_mask_args(square).is_causal and sdpa_mask_args(square).attn_mask is None
    decode = square.with_(phase="decode", q_len=1)
    assert not sdpa_mask_args(decode).is_causal and sdpa_mask_args(decode).attn_mask is None
    chunk = square.with_(q_len=3)
    args = sdpa_mask_args(chunk)
    assert not args.is_causal and args.attn_mask is not None
    m = dense_mask(chunk, "cpu")
    assert m.shape == (3, 8)
    assert m[0].tolist() == [True] * 6 + [False] * 2  # row 0 sits at position 5
    assert m[-1].all()


def test_cuda_only_backends_unsupported_on_cpu_with_reason(cpu):
    w = Workload(phase="decode", batch=1, q_len=1, kv_len=16, num_q_heads=4, num_kv_heads=2, head_dim=16)
    for name in ("sdpa-efficient", "sdpa-cudnn"):
        b = get_backend(name)
        assert "CUDA" in b.unsupported_reason(w, cpu)
        with pytest.raises(Unsupported, match="CUDA"):
            b.prepare(w, cpu)


def test_registry_names_and_unknown():
    names = [b.name for b in all_backends()]
    assert names == ["sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "eager", "flex",
                     "triton-paged-decode", "torch-paged-reference", "flex-paged-decode", "flashinfer-decode",
                     "flashinfer-decode-tc", "flashinfer-prefill-paged", "flashinfer-prefill-ragged"]
    with pytest.raises(UnknownNameError, match="valid: sdpa-math"):
        get_backend("flashinfer")


def test_rejection_reason_keeps_only_the_pinned_kernels_reason():
    from profattn.backends.sdpa import _rejection_reasons

    warnings = [
        "Memory efficient kernel not used because: (Triggered internally at /pytorch/sdp_utils.cpp:986.)",
        "For dense input, both fused kernels require query, key and value to have the same num_heads. (Triggered internally at /pytorch/sdp_utils.cpp:1.)",
        "Flash attention kernel not used because: (Triggered internally at /pytorch/sdp_utils.cpp:988.)",
        "Flash attention has been runtime disabled. (Triggered internally at /pytorch/sdp_utils.cpp:2.)",
        "cuDNN attention kernel not used because:",
        "cuDNN attention has been runtime disabled.",
    ]
    assert _rejection_reasons(warnings) == (
        "Memory efficient kernel not used because: For dense input, both fused kernels require query, key and value "
        "to have the same num_heads."
    )


@pytest.mark.slow
@pytest.mark.parametrize("extra", [dict(kv_len_dist="ragged", kv_len_seed=2), dict(shared_prefix_len=32)])
def test_flex_paged_decode_matches_reference(cpu, extra):
    """FlexAttention over the physical pool: the block table as a mask, ragged lengths and shared pages."""
    from profattn.harness.inputs import make_inputs, reference, rel_err

    w = Workload(phase="decode", batch=3, q_len=1, kv_len=96, num_q_heads=8, num_kv_heads=2, head_dim=32,
                 dtype="float32", kv_layout="paged", page_size=16, **extra)
    inputs = make_inputs(w, cpu, seed=3)
    try:
        call = get_backend("flex-paged-decode").prepare(w, cpu).bound(inputs)
    except Unsupported as exc:
        pytest.skip(str(exc))
    assert rel_err(call(), reference(w, inputs).out) < 1e-5
    with pytest.raises(Unsupported, match="paged"):
        get_backend("flex-paged-decode").prepare(w.with_(kv_layout="dense", page_size=None, kv_len_dist="uniform", shared_prefix_len=0), cpu)
