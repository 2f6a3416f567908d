"""``sdpa-nested``: SDPA on jagged nested tensors against the fp64 reference on the CPU, the calls torch cannot
express exactly (and that torch really refuses them), the reasons on CUDA, and the serving-small preset."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend

from profattn.backends import Unsupported, get_backend
from profattn.backends.base import call_shape_reason
from profattn.backends.sdpa import _nested_trial, nested_call_reason
from profattn.harness.inputs import check, make_inputs, reference
from profattn.workload import Workload, get_preset, parse_workload_spec

HEADS = "hq=4,hkv=2,d=16"


def _run(spec: str, cpu):
    """(workload, prepared, correctness) of ``sdpa-nested`` on ``spec``: bound, called once under its kernel
    pin (after the append, for appending calls), unpacked by ``to_contract`` and checked as the harness does."""
    w = parse_workload_spec(spec)
    b = get_backend("sdpa-nested")
    assert call_shape_reason(b, w) is None
    assert b.unsupported_reason(w, cpu) is None, b.unsupported_reason(w, cpu)
    inputs = make_inputs(w, cpu, seed=5)
    ref = reference(w, inputs)
    prepared = b.prepare(w, cpu)
    if w.append:
        prepared.appender(inputs)()
    with prepared.context():
        out = prepared.bound(inputs)()
    assert out.is_nested and out.shape[0] == w.batch and out.shape[1] == w.num_q_heads  # [B, Hq, j, d], jagged
    return w, prepared, check(w, prepared.to_contract(out), None, ref)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("spec,executed,required", [
    # a ragged packed prefill, q_len != kv_len per sequence, no mask: padded 3 · 6 · 20 = 360 pairs per head for
    # 6·20 + 2·9 + 5·5 = 163 required
    (f"mix=1x(q6,kv20)+1x(q2,kv9)+1x(q5,kv5),{HEADS},mask=none", 360, 163),
    # a mixed step, no mask: 5 · 6 · 20 = 600 for 6·20 + 5·5 + 3·9 = 172
    (f"mix=1x(q6,kv20)+1x(q5,kv5)+3x(q1,kv9),{HEADS},page=4,mask=none", 600, 172),
    # a decode step over ragged cached lengths, causal (one query row sees all its keys: no mask), appending:
    # 4 · 1 · 30 = 120 for 3·9 + 30 = 57
    (f"mix=3x(q1,kv9)+1x(q1,kv30),{HEADS},page=4,append=true", 120, 57),
])
def test_nested_matches_the_fp64_reference_on_cpu(spec, executed, required, dtype, cpu):
    w, prepared, c = _run(f"{spec},dtype={dtype}", cpu)
    assert c.passed and c.reference == "fp64", (c.out_rel_err, prepared.notes)
    assert w.attended_pairs == required
    # torch's nested matmul pads both GEMMs on the CPU's math path: the padded pairs are recorded
    assert prepared.executed_pairs == executed
    assert any(f"executes {executed} (query, key) pairs per head for {required} required" in n for n in prepared.notes)
    assert any("K/V expanded from Hkv=2 to Hq=4 heads in bind" in n and "(2×;" in n for n in prepared.notes)
    if w.append:  # the attention read the tokens the append wrote (the dense copy holds them too)
        assert "no mask: every sequence has one query row" in prepared.notes[1]


def test_nested_reads_only_each_sequence_own_keys(cpu):
    """Changing a key slot past a sequence's length (padding of the dense copy) changes nothing; changing its
    last real key changes its output."""
    w = parse_workload_spec(f"mix=1x(q3,kv8)+1x(q2,kv4),{HEADS},mask=none,dtype=float32")
    inputs = make_inputs(w, cpu, seed=1)
    prepared = get_backend("sdpa-nested").prepare(w, cpu)
    with prepared.context():
        out = prepared.forward(inputs.q, inputs.k, inputs.v)
        k = inputs.k.clone()
        k[1, :, 4:] += 100.0  # sequence 1 has 4 keys: slots 4..7 are padding
        assert torch.equal(prepared.forward(inputs.q, k, inputs.v), out)
        k[1, :, 3] += 5.0
        changed = prepared.forward(inputs.q, k, inputs.v)
    assert not torch.allclose(changed[1, :, :2], out[1, :, :2]) and torch.equal(changed[0], out[0])
    assert out[1, :, 2:].abs().sum() == 0  # padding rows of the contract are zeros


@pytest.mark.parametrize("spec,rows,batch", [
    (f"mix=2x(q7,kv7)+1x(q4,kv4),{HEADS}", 3, 3),  # a ragged packed prefill, q_len == kv_len, causal
    (f"mix=1x(q6,kv20)+1x(q5,kv5)+3x(q1,kv9),{HEADS},page=4,append=true", 2, 5),  # a mixed chunked step
    (f"phase=prefill,b=2,q=8,kv=24,{HEADS},page=4,append=true", 2, 2),  # one chunk of a chunked prefill
])
def test_causal_calls_with_query_blocks_are_unsupported_on_cpu(spec, rows, batch, cpu):
    w = parse_workload_spec(spec)
    b = get_backend("sdpa-nested")
    reason = b.unsupported_reason(w, cpu)
    assert reason.startswith(f"causal, with {rows} of {batch} sequences holding more than one query row")
    assert "refuses is_causal=True" in reason and "no attn_mask" in reason
    with pytest.raises(Unsupported, match="refuses is_causal=True"):
        b.prepare(w, cpu)


def test_torch_really_refuses_causal_jagged_sdpa_on_cpu(cpu):
    """The static reason is torch's behaviour, not a guess: its jagged math path rejects is_causal=True (and its
    log lines become the cell's reason instead of stderr)."""
    w = parse_workload_spec(f"mix=2x(q7,kv7)+1x(q4,kv4),{HEADS},dtype=float32")
    with pytest.raises(Unsupported) as exc:
        _nested_trial(w, cpu, SDPBackend.MATH, causal=True)
    assert str(exc.value) == ("jagged SDPA with MATH rejected this workload: Nested tensors for query / key are not "
                              "supported when is_causal=True.")
    _nested_trial(w, cpu, SDPBackend.MATH, causal=False)  # the same call without the mask runs


def test_reasons_by_device_and_phase():
    mixed = parse_workload_spec(f"mix=1x(q6,kv20)+1x(q5,kv5)+3x(q1,kv9),{HEADS},page=4,append=true")
    assert nested_call_reason(mixed, "cuda") is None  # FlashAttention-2 varlen: bottom-right causal per sequence
    assert "float16/bfloat16, not float32" in nested_call_reason(mixed.with_(dtype="float32"), "cuda")
    assert nested_call_reason(mixed.with_(mask="none", dtype="float32"), "cpu") is None
    assert "neither" in nested_call_reason(mixed, "mps")
    train = Workload(phase="train", batch=2, q_len=8, kv_len=8, num_q_heads=4, num_kv_heads=2, head_dim=16)
    # train: the jagged tensors are views of packed leaves (bind_train), so torch's reason is the only limit
    assert nested_call_reason(train, "cuda") is None
    assert nested_call_reason(train, "cpu").startswith("causal, with 2 of 2 sequences")
    assert nested_call_reason(train.with_(mask="none"), "cpu") is None


def test_nested_trains_on_packed_leaves_on_the_cpu_math_path(cpu):
    """docs=6+3 (mask none: the CPU's jagged math path refuses is_causal) with GQA: forward and backward through
    jagged views of the packed leaves; dK/dV summed back to Hkv heads match the reference, padding zero."""
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference

    w = parse_workload_spec("phase=train,docs=6+3,hq=4,hkv=2,d=8,dtype=fp32,mask=none")
    inputs = make_inputs(w, cpu, seed=3)
    cell, _ = run_cell(w, get_backend("sdpa-nested"), inputs, reference(w, inputs), cpu)
    assert cell.status.value == "ok", cell.reason
    assert max(cell.correctness.grad_rel_err.values()) < 1e-5 and cell.correctness.isolated is True
    assert any("the packed q/k/v are the autograd leaves" in n for n in cell.notes)
    assert inputs.q.grad is None  # the contract's tensors are not the leaves


def test_serving_small_offers_sdpa_nested_where_it_applies(cpu):
    """Every serving-small call reaches the backend (varlen), on CUDA every one is expressible exactly; on the
    CPU the two decode steps run and every call with a causal query block says why not."""
    b = get_backend("sdpa-nested")
    workloads = get_preset("serving-small").workloads
    assert len(workloads) == 13
    assert all(call_shape_reason(b, w) is None for w in workloads)
    assert all(nested_call_reason(w, "cuda") is None for w in workloads)
    runs = [w for w in workloads if b.unsupported_reason(w, cpu) is None]
    assert [(w.phase.value, w.batch, w.kv_len) for w in runs] == [("decode", 8, 128), ("decode", 6, 40)]
    for w in workloads:
        if w not in runs:
            assert "refuses is_causal=True" in b.unsupported_reason(w, cpu), w.tag


def test_cpu_trace_evidence_belongs_to_the_nested_family(cpu):
    """The operators the CPU's jagged math path records under the profiler are the ``nested`` family's, and no
    fused attention family's."""
    from torch.profiler import profile

    from profattn.analysis.run.cells import family_check
    from profattn.families import FLASH, NESTED

    w = parse_workload_spec(f"mix=3x(q1,kv9)+1x(q1,kv30),{HEADS},page=4,dtype=float32")
    inputs = make_inputs(w, cpu, seed=2)
    prepared = get_backend("sdpa-nested").prepare(w, cpu)
    with prepared.context():
        call = prepared.bound(inputs)
        with profile() as prof:
            call()
    ops = [e.name for e in prof.events()]
    ok, note = family_check(NESTED, [], ops, gpu=False)
    assert ok is True and "aten::_scaled_dot_product_attention_math" in note
    assert family_check(FLASH, [], ops, gpu=False)[0] is False
