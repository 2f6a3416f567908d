"""Memory a workload needs, checked before allocating; the chunked reference; failures that stay in their cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import profattn.harness.session as session_mod
from profattn.backends import get_backend
from profattn.backends import memory
from profattn.backends.eager import dense_path_bytes
from profattn.harness.inputs import (
    check, grouped_attention, inputs_bytes_needed, make_inputs, reference, reference_bytes_needed,
)
from profattn.harness.session import SessionConfig, run_session
from profattn.results import CellStatus
from profattn.workload import Preset, Workload, parse_workload_spec

CPU = torch.device("cpu")
HUGE = parse_workload_spec("phase=decode,batch=1024,q_len=1,kv_len=1048576,num_q_heads=64,num_kv_heads=8,head_dim=128")


def test_input_and_reference_bytes_hand_computed():
    w = Workload(phase="prefill", batch=2, q_len=8, kv_len=16, num_q_heads=4, num_kv_heads=2, head_dim=8, dtype="float16")
    q, kv = 2 * 4 * 8 * 8, 2 * 2 * 16 * 8  # 512, 512 elements
    assert inputs_bytes_needed(w) == (q + 2 * kv) * 2 + 4 * max(q, kv) == 5120
    # fp64 on the CPU: q, out, k, v; mask 8*16 bools; one chunk = B*Hkv*Lq rows of (G*Lk*8*2 + G*Lk) bytes
    chunk = 2 * 2 * 8 * (2 * 16 * 8 * 2 + 2 * 16)
    assert reference_bytes_needed(w, CPU) == (2 * q + 2 * kv) * 8 + 8 * 16 + chunk
    t = w.with_(phase="train")
    assert inputs_bytes_needed(t) == ((q + 2 * kv) * 2 + q) * 2 + 4 * max(q, kv)
    # the eager path: K/V repeated to Hq heads + 3 fp32 score matrices + the mask; train twice that
    assert dense_path_bytes(w) == 2 * 2 * 4 * 16 * 8 * 2 + 3 * 2 * 4 * 8 * 16 * 4 + 2 * 8 * 16
    assert dense_path_bytes(t) == 2 * dense_path_bytes(w)


def test_the_issue_workload_needs_terabytes_and_is_refused_with_the_estimate():
    need = inputs_bytes_needed(HUGE)
    assert need > 4.4e12  # K and V alone: 2 * 1024 * 1048576 * 8 * 128 * 2 B = 4.4 TB
    reason = memory.fit_reason(need, CPU, "inputs and reference")
    assert reason is not None and reason.startswith("inputs and reference need ~") and "TB" in reason
    assert "GiB free" in reason
    assert memory.fit_reason(1024, CPU, "x") is None


def test_human_bytes():
    assert memory.human_bytes(4.4e12) == "4.4 TB"
    assert memory.human_bytes(137e9) == "137 GB"
    assert memory.human_bytes(512) == "512 B"


@pytest.mark.parametrize("spec", [
    "phase=train,batch=2,q_len=24,kv_len=24,num_q_heads=4,num_kv_heads=2,head_dim=8,dtype=float32",
    "phase=prefill,batch=2,q_len=16,kv_len=40,num_q_heads=6,num_kv_heads=2,head_dim=8,dtype=float32",
    "phase=decode,batch=3,q_len=1,kv_len=64,num_q_heads=4,num_kv_heads=1,head_dim=8,dtype=float32,"
    "kv_layout=paged,page_size=16,kv_len_dist=ragged",
])
@pytest.mark.parametrize("chunk_bytes", [1, 3000, 1 << 30])
def test_chunked_reference_equals_one_shot(spec, chunk_bytes):
    """Chunks of rows, heads or sequences give the same output and gradients as one call over everything."""
    w = parse_workload_spec(spec)
    inputs = make_inputs(w, CPU, seed=3)
    ref = reference(w, inputs, chunk_bytes=chunk_bytes)
    hi = torch.float64
    train = inputs.grad_out is not None
    q, k, v = (t.detach().to(hi).requires_grad_(train) for t in (inputs.q, inputs.k, inputs.v))
    from profattn.backends.masks import dense_mask

    out = grouped_attention(q, k, v, mask=dense_mask(w, CPU))
    torch.testing.assert_close(ref.out, out.detach(), rtol=1e-12, atol=1e-12)
    if train:
        out.backward(inputs.grad_out.to(hi))
        for name, t in (("dq", q), ("dk", k), ("dv", v)):
            torch.testing.assert_close(ref.grads[name], t.grad, rtol=1e-10, atol=1e-12)
    assert check(w, out.to(inputs.q.dtype), None, ref).out_rel_err < 1e-6


def test_a_workload_too_large_is_unsupported_in_every_cell_and_the_run_goes_on(tmp_path: Path):
    small = Workload(phase="decode", batch=2, q_len=1, kv_len=32, num_q_heads=4, num_kv_heads=2, head_dim=16)
    preset = Preset("mixed", "test", (HUGE, small))
    cfg = SessionConfig(preset=preset, regimes=(small.phase,), backends=(get_backend("eager"), get_backend("sdpa-math")),
                        device=CPU, out_dir=tmp_path / "run", measure_ceilings=False)
    run = run_session(cfg)
    by = {(c.workload.tag, c.backend): c for c in run.cells}
    for b in ("eager", "sdpa-math"):
        huge = by[(HUGE.tag, b)]
        assert huge.status is CellStatus.UNSUPPORTED or huge.status == CellStatus.UNSUPPORTED
        assert "need ~" in huge.reason and "TB" in huge.reason
        assert by[(small.tag, b)].status == CellStatus.OK
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert not [c for c in data["cells"] if c["status"] == "pending"]


def test_out_of_memory_in_the_reference_is_that_workloads_error(tmp_path: Path, monkeypatch):
    """An allocation failure while building the reference marks that workload's cells ``error`` with the
    reason; the next workload is measured."""
    a = Workload(phase="prefill", batch=1, q_len=16, kv_len=16, num_q_heads=2, num_kv_heads=1, head_dim=16)
    b = a.with_(q_len=8, kv_len=8)
    real = session_mod.reference

    def fake_reference(w, inputs, **kw):
        if w == a:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 137438953472 bytes.")
        return real(w, inputs, **kw)

    monkeypatch.setattr(session_mod, "reference", fake_reference)
    cfg = SessionConfig(preset=Preset("two", "test", (a, b)), regimes=(a.phase,), backends=(get_backend("eager"),),
                        device=CPU, out_dir=tmp_path / "run", measure_ceilings=False)
    run = run_session(cfg)
    cells = {c.workload: c for c in run.cells}
    assert cells[a].status == CellStatus.ERROR
    assert cells[a].reason.startswith("inputs/reference failed: out of memory:")
    assert cells[b].status == CellStatus.OK
