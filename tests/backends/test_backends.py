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
    assert names == ["sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-nested", "eager", "flex",
                     "triton-paged-decode", "triton-paged-prefill", "torch-paged-reference", "flex-paged-decode",
                     "flashinfer-decode",
                     "flashinfer-decode-tc", "flashinfer-prefill-paged", "flashinfer-prefill-ragged",
                     "flashinfer-prefill-paged-fa2", "flashinfer-prefill-paged-fa3", "flashinfer-cudnn-decode",
                     "flashinfer-cudnn-prefill", "flashinfer-xqa-decode"]
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


# ---- variable-length and appending calls -------------------------------------------------------------------
#: A mixed step: a prefill chunk of 6 rows after 14 cached tokens, a fresh 5-token prompt, three decodes.
MIXED = "mix=1x(q6,kv20)+1x(q5,kv5)+3x(q1,kv9),hq=4,hkv=2,d=16,page=4"


def _varlen_case(spec: str, backend: str, cpu):
    from profattn.backends.base import call_shape_reason
    from profattn.harness.inputs import check, make_inputs, reference
    from profattn.workload import parse_workload_spec

    w = parse_workload_spec(spec)
    b = get_backend(backend)
    assert call_shape_reason(b, w) is None
    assert b.unsupported_reason(w, cpu) is None, b.unsupported_reason(w, cpu)
    inputs = make_inputs(w, cpu, seed=11)
    ref = reference(w, inputs)
    prepared = b.prepare(w, cpu)
    if w.append:
        prepared.appender(inputs)()
    with prepared.context():
        out = prepared.bound(inputs)()
    return w, prepared, check(w, out, None, ref)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("backend", ["eager", "sdpa-math", "sdpa-flash", "torch-paged-reference"])
@pytest.mark.parametrize("extra", ["", ",append=true", ",mask=none"])
def test_every_varlen_backend_matches_the_fp64_reference(backend, dtype, extra, cpu):
    w, prepared, c = _varlen_case(f"{MIXED},dtype={dtype}{extra}", backend, cpu)
    assert c.passed and c.reference == "fp64", (c.out_rel_err, prepared.notes)
    if backend == "torch-paged-reference":
        assert prepared.executed_pairs is None  # one sequence at a time: no padding computed
    else:  # padded: 5 · 6 · 20 = 600 pairs per head for 6·(15+20)/2 + 5·6/2 + 3·9 = 105 + 15 + 27 = 147 (causal)
        assert prepared.executed_pairs == 600
        need = 147 if "mask=none" not in extra else 6 * 20 + 5 * 5 + 3 * 9
        assert w.attended_pairs == need
        assert any(f"executes 600 (query, key) pairs per head for {need} required" in n for n in prepared.notes)


def test_varlen_calls_reach_only_backends_that_declare_them(cpu):
    from profattn.backends.base import call_shape_reason
    from profattn.workload import parse_workload_spec

    w = parse_workload_spec(MIXED)

    class Plain:
        name, description = "plain", ""

    assert "per-sequence lengths" in call_shape_reason(Plain(), w)
    assert "a cache append" in call_shape_reason(Plain(), parse_workload_spec("phase=prefill,b=2,q=4,kv=8,hq=2,hkv=1,d=8,"
                                                                               "page=4,append=true"))
    # the decode-only paged kernels take per-sequence decode lengths but say why not for a mixed step
    assert "decode" in get_backend("triton-paged-decode").unsupported_reason(w, cpu)
    assert "dense" in get_backend("torch-paged-reference").unsupported_reason(
        parse_workload_spec("mix=1x(q6,kv20)+3x(q1,kv9),hq=4,hkv=2,d=16"), cpu)


@pytest.mark.parametrize("spec", [
    "phase=prefill,b=2,q=8,kv=24,hq=4,hkv=2,d=16,page=4,append=true,dtype=fp32",  # one chunk of a chunked prefill
    "mix=3x(q1,kv9)+1x(q1,kv30),hq=4,hkv=2,d=16,page=4,append=true,dtype=fp32",  # a decode step, ragged lengths
])
def test_torch_paged_reference_on_chunks_and_decode_steps(spec, cpu):
    _, _, c = _varlen_case(spec, "torch-paged-reference", cpu)
    assert c.passed, c.out_rel_err


@pytest.mark.slow
@pytest.mark.parametrize("extra", ["", ",mask=none"])
def test_flex_block_mask_from_per_sequence_lengths(extra, cpu):
    try:
        _, prepared, c = _varlen_case(f"{MIXED},dtype=float32{extra}", "flex", cpu)
    except Unsupported as exc:
        pytest.skip(str(exc))
    assert c.passed, c.out_rel_err
    assert "block mask from per-sequence lengths" in prepared.notes[0]


def test_fp8_cache_reaches_only_backends_that_declare_it(cpu):
    """An FP8 cache holds codes: a backend that does not dequantize would read them as values. Every built-in but
    ours, FlashInfer's decode (per-head scales applied around its per-tensor API) and the torch reference says why
    not; on this CPU FlashInfer's decode is refused for the device only."""
    from profattn.backends.base import call_shape_reason
    from profattn.workload import parse_workload_spec

    w = parse_workload_spec("phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=64,page=16,kv_dtype=fp8")
    readers = set()
    for b in all_backends():
        reason = call_shape_reason(b, w) or b.unsupported_reason(w, cpu)
        if reason is None or "TRITON_INTERPRET" in reason or "Triton" in reason:
            readers.add(b.name)
        elif b.name.startswith("flashinfer-decode"):
            assert reason == "FlashInfer runs on CUDA GPUs only", reason
        else:
            assert "no float8_e4m3fn cache" in reason, (b.name, reason)
    assert readers == {"triton-paged-decode", "torch-paged-reference"}

    class Plain:  # a plugin that says nothing about cache dtypes
        name, description = "plain", ""

    assert "no float8_e4m3fn cache with per-KV-head scales" in call_shape_reason(Plain(), w)
    assert call_shape_reason(Plain(), w.with_(kv_dtype=None)) is None


# ---- sliding-window attention --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("q_len,kv_len,window", [(5, 12, 3), (1, 9, 4), (7, 7, 1), (7, 7, 7), (4, 10, 100)])
def test_sliding_window_on_every_cpu_backend(backend, q_len, kv_len, window, cpu):
    from profattn.harness.inputs import check, make_inputs, reference

    w = Workload(phase="prefill", batch=2, q_len=q_len, kv_len=kv_len, num_q_heads=4, num_kv_heads=2, head_dim=16,
                 dtype="float32", window=window)
    inputs = make_inputs(w, cpu, seed=5)
    prepared = get_backend(backend).prepare(w, cpu)
    with prepared.context():
        out = prepared.forward(inputs.q, inputs.k, inputs.v)
    assert check(w, out, None, reference(w, inputs)).passed
    # by hand: the last row of sequence 0 against its own window of keys
    lo = max(0, kv_len - window)
    want = explicit_reference(inputs.q[:1, :, -1:], inputs.k[:1, :, lo:], inputs.v[:1, :, lo:], 1, kv_len - lo)
    torch.testing.assert_close(out[:1, :, -1:].double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("spec", [
    "phase=decode,b=3,q=1,kv=40,hq=4,hkv=2,d=16,page=8,dist=ragged,seed=1,dtype=fp32,w=9",  # decode, ragged
    "phase=decode,b=2,q=1,kv=40,hq=4,hkv=2,d=16,page=8,dtype=fp32,w=16",  # uniform decode, page edge
    "phase=prefill,b=2,q=8,kv=24,hq=4,hkv=2,d=16,page=4,append=true,dtype=fp32,w=5",  # a chunk
    f"{MIXED},dtype=float32,w=3",  # a mixed step
])
def test_sliding_window_on_the_paged_torch_reference_and_padded_backends(spec, cpu):
    _, prepared, c = _varlen_case(spec, "torch-paged-reference", cpu)
    assert c.passed, (c.out_rel_err, prepared.notes)
    assert any("window" in n for n in prepared.notes)
    if "mix=" in spec:
        for backend in ("eager", "sdpa-math"):
            assert _varlen_case(spec, backend, cpu)[2].passed


def test_backends_without_a_window_say_so(cpu):
    from profattn.backends.flashinfer import window_left
    from profattn.workload import parse_workload_spec

    chunk = parse_workload_spec("phase=prefill,b=2,q=8,kv=24,hq=4,hkv=2,d=16,page=4,w=5")
    assert get_backend("triton-paged-prefill").unsupported_reason(chunk, cpu).startswith("window not implemented")
    mixed = parse_workload_spec("mix=3x(q1,kv9)+(q1,kv30),hq=4,hkv=2,d=16,w=4")
    assert "sliding window of 4 keys" in get_backend("sdpa-nested").unsupported_reason(mixed, cpu)
    assert get_backend("sdpa-nested").unsupported_reason(mixed.with_(window=30), cpu) is None  # W ≥ kv: causal
    assert (window_left(chunk), window_left(chunk.with_(window=None))) == (4, -1)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["phase=prefill,b=1,q=5,kv=12,hq=4,hkv=2,d=16,dtype=fp32,w=3",
                                  f"{MIXED},dtype=float32,w=3"])
def test_flex_sliding_window(spec, cpu):
    try:
        _, prepared, c = _varlen_case(spec, "flex", cpu)
    except Unsupported as exc:
        pytest.skip(str(exc))
    assert c.passed, c.out_rel_err
    assert "sliding window of 3 keys" in prepared.notes[0]


@pytest.mark.slow
def test_flex_paged_decode_sliding_window(cpu):
    from profattn.harness.inputs import make_inputs, reference, rel_err

    w = Workload(phase="decode", batch=3, q_len=1, kv_len=96, num_q_heads=8, num_kv_heads=2, head_dim=32,
                 dtype="float32", kv_layout="paged", page_size=16, kv_len_dist="ragged", kv_len_seed=2, window=20)
    inputs = make_inputs(w, cpu, seed=3)
    try:
        call = get_backend("flex-paged-decode").prepare(w, cpu).bound(inputs)
    except Unsupported as exc:
        pytest.skip(str(exc))
    assert rel_err(call(), reference(w, inputs).out) < 1e-5


@pytest.mark.parametrize("interpret", [False, True])
def test_backend_info_probes_the_serving_calls_too(interpret, monkeypatch, cpu):
    """``profattn backends`` probed only the ``small`` preset's first workload per phase: triton-paged-prefill (paged
    prefill / mixed calls only) was "unavailable" even under TRITON_INTERPRET=1, torch-paged-reference "(decode
    only)", and an unavailable backend's reason joined every refusal with "; ". The serving-small preset's calls
    are probed now, mixed is a phase, and the reason is the one refusal that blocks the backend's own phases."""
    pytest.importorskip("triton")
    from profattn.backends import backend_info

    if interpret:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    info = {i.name: (i.available, i.phases, i.reason) for i in backend_info(cpu)}
    no_triton = "Triton kernels run on CUDA (on a CPU, only under TRITON_INTERPRET=1)"
    expected = {
        "eager": (True, ("train", "prefill", "decode", "mixed"), ""),
        "sdpa-cudnn": (False, (), "CUDNN_ATTENTION runs on CUDA only (device is cpu)"),
        # causal prefill rows of jagged tensors have no CPU kernel: only decode steps reach it here
        "sdpa-nested": (True, ("decode",), ""),
        "torch-paged-reference": (True, ("prefill", "decode", "mixed"), ""),
        "flex-paged-decode": (True, ("decode",), ""),
        "triton-paged-decode": (True, ("decode",), "") if interpret else (False, (), no_triton),
        "triton-paged-prefill": (True, ("prefill", "mixed"), "") if interpret else (False, (), no_triton),
    }
    assert {name: info[name] for name in expected} == expected


def test_eager_note_names_the_per_sequence_mask_of_a_ragged_batch():
    """A lognormal-ragged decode batch's eager mask is [B, 1, Lq, Lk]; the note used to say [Lq, Lk]."""
    import torch

    from profattn.backends import get_backend
    from profattn.workload import Workload

    common = dict(phase="decode", batch=8, q_len=1, kv_len=300, num_q_heads=8, num_kv_heads=2, head_dim=16)
    ragged = Workload(kv_layout="paged", page_size=16, kv_len_dist="lognormal", kv_len_seed=7, **common)
    assert get_backend("eager").prepare(ragged, torch.device("cpu")).notes == (
        "mask: explicit boolean [B, 1, Lq, Lk] (each sequence's own length)",)
    assert get_backend("eager").prepare(Workload(**common), torch.device("cpu")).notes == ("mask: explicit boolean [Lq, Lk]",)


def test_counter_pass_leaves_out_the_unfused_paths_only_beside_a_fused_one():
    from profattn.backends.registry import COUNTER_PASS_SKIPS, DEFAULT_BACKENDS, counter_pass_backends

    assert set(COUNTER_PASS_SKIPS) == {"sdpa-math", "eager", "torch-paged-reference"}
    kept = counter_pass_backends(DEFAULT_BACKENDS)
    assert kept == tuple(n for n in DEFAULT_BACKENDS if n not in ("sdpa-math", "eager", "torch-paged-reference"))
    assert len(kept) == 9 and kept[0] == "sdpa-flash"
    # a run of only unfused paths still gets its counters; repeated names once, in run order
    assert counter_pass_backends(["eager", "sdpa-math", "eager"]) == ("eager", "sdpa-math")
    assert counter_pass_backends(["eager", "triton-paged-decode"]) == ("triton-paged-decode",)
