"""Cells and sessions on the CPU: correctness is enforced, a wrong backend cannot win, failures stay local."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from profattn.analysis.run.verdict import winners
from profattn.backends import Prepared, register, unregister
from profattn.backends.eager import eager_attention
from profattn.families import DENSE, FLASH
from profattn.harness.cell import run_cell
from profattn.harness.inputs import check, make_inputs, reference
from profattn.harness.session import SessionConfig, run_session
from profattn.results import CellStatus, read_results
from profattn.workload import Phase, Preset, Workload, get_preset

TINY = Preset("tiny", "test", (
    Workload(phase="train", batch=1, q_len=32, kv_len=32, num_q_heads=4, num_kv_heads=2, head_dim=16),
    Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=1, head_dim=16),
))


class WrongBackend:
    """Fast and wrong: returns zeros. Must fail correctness and never win."""

    name = "test-wrong"
    family = DENSE
    description = "returns zeros"

    def unsupported_reason(self, workload, device):
        return None

    def prepare(self, workload, device):
        return Prepared(forward=lambda q, k, v: q * 0)


class LiarBackend:
    """Claims the flash family but runs the eager path: its trace must flag it."""

    name = "test-liar"
    family = FLASH
    description = "eager under a flash label"

    def unsupported_reason(self, workload, device):
        return None

    def prepare(self, workload, device):
        return Prepared(forward=lambda q, k, v: eager_attention(q, k, v, mask=None))


class ExplodingBackend:
    name = "test-boom"
    family = DENSE
    description = "raises"

    def unsupported_reason(self, workload, device):
        return None

    def prepare(self, workload, device):
        def forward(q, k, v):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return Prepared(forward=forward)


@pytest.fixture
def test_backends():
    backends = [WrongBackend(), LiarBackend(), ExplodingBackend()]
    for b in backends:
        register(b, replace=True)
    yield backends
    for b in backends:
        unregister(b.name)


def test_session_wrong_backend_cannot_win(tmp_path: Path, cpu, test_backends):
    from profattn.backends import get_backend

    backends = (get_backend("eager"), get_backend("sdpa-math"), *test_backends)
    run = run_session(SessionConfig(preset=TINY, regimes=(Phase.TRAIN, Phase.DECODE), backends=backends, device=cpu, out_dir=tmp_path))
    by = {(c.workload.phase.value, c.backend): c for c in run.cells}
    wrong = by[("decode", "test-wrong")]
    assert wrong.status == CellStatus.INCORRECT and wrong.correctness.out_rel_err == pytest.approx(1.0)
    assert by[("train", "test-wrong")].status == CellStatus.INCORRECT  # dk, dv never computed: inf
    boom = by[("decode", "test-boom")]
    assert boom.status == CellStatus.ERROR and boom.reason.startswith("out of memory")
    liar = by[("decode", "test-liar")]
    assert liar.status == CellStatus.OK and liar.trace.family_ok is False and "no flash operator" in liar.trace.family_note
    for tag, w in winners(run).items():
        assert w is not None and w.backend in ("eager", "sdpa-math"), tag
    # eager/math pass in both regimes, gradients included
    for phase in ("train", "decode"):
        for b in ("eager", "sdpa-math"):
            c = by[(phase, b)]
            assert c.status == CellStatus.OK, (phase, b, c.reason)
            assert c.trace is not None and c.trace.calls == 3 and c.trace.family_ok is True
    assert set(by[("train", "eager")].correctness.grad_rel_err) == {"dq", "dk", "dv"}
    # results.json on disk is the same run, and traces are in the TensorBoard layout
    assert read_results(tmp_path).cells == run.cells
    traces = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("traces/*/*.pt.trace.json.gz"))
    assert [t.split("/")[1] for t in traces] == ["decode", "train"]
    assert all(Path(t).name.startswith("profattn.") for t in traces)


def test_results_written_as_cells_finish(tmp_path: Path, cpu):
    """After an interruption, results.json holds the finished cells and the rest as pending."""
    from profattn.backends import get_backend

    seen = []

    def progress(event, cell, done, total):
        if event == "done":
            data = json.loads((tmp_path / "results.json").read_text())
            seen.append(sorted(c["status"] for c in data["cells"]))
            if done == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_session(SessionConfig(preset=TINY, regimes=(Phase.DECODE,), backends=(get_backend("eager"), get_backend("sdpa-math"), get_backend("sdpa-cudnn")),
                                  device=cpu, out_dir=tmp_path), progress)
    assert seen[0] == ["ok", "pending", "pending"] and seen[1] == ["ok", "ok", "pending"]
    assert [c.status for c in read_results(tmp_path).cells] == ["ok", "ok", "pending"]


def test_correctness_check_catches_small_errors(cpu):
    w = get_preset("small").workloads[2]
    inputs = make_inputs(w, cpu, seed=1)
    ref = reference(w, inputs)
    assert ref.precision == "fp64"
    good = eager_attention(inputs.q, inputs.k, inputs.v, mask=None)
    assert check(w, good, None, ref).passed
    assert not check(w, good * 1.05, None, ref).passed  # 5% off: far above bf16 noise
    nan = good.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert not check(w, nan, None, ref).passed and check(w, nan, None, ref).out_rel_err == float("inf")


def test_inputs_are_random_not_zero(cpu):
    w = get_preset("small").workloads[0]
    a, b = make_inputs(w, cpu, seed=1), make_inputs(w, cpu, seed=2)
    assert a.q.float().std() > 0.5 and a.grad_out is not None and a.q.requires_grad
    assert not torch.equal(a.k, b.k)


def test_unsupported_cell_has_reason(cpu):
    from profattn.backends import get_backend

    w = TINY.workloads[1]
    inputs = make_inputs(w, cpu, seed=0)
    cell, profiled = run_cell(w, get_backend("sdpa-efficient"), inputs, reference(w, inputs), cpu)
    assert cell.status == CellStatus.UNSUPPORTED and "CUDA" in cell.reason and profiled is None
