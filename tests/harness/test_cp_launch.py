"""Context-parallel cells on gloo: every scheme's gathered output and gradients against the global reference, the
communication ledger against the traced sizes, and a failing rank (2 and 4 processes, small fp32 shapes)."""

from pathlib import Path

import pytest
import torch

from profattn.backends import get_backend
from profattn.harness import cp_launch
from profattn.harness.cp_launch import LaunchOutcome, run_cp_cell, run_cp_cells, static_reason
from profattn.harness.cp_worker import FAIL_ENV
from profattn.results import CellStatus
from profattn.workload import parse_workload_spec
from profattn.workload.cp import cp_ledger

CPU = torch.device("cpu")
FLASH = get_backend("sdpa-flash")


def _cells(specs, backend=FLASH):
    ws = [parse_workload_spec(s) for s in specs]
    return [(w, backend, f"{w.tag}.{backend.name}") for w in ws]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    base = "phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme="
    cells = _cells([base + s for s in ("ring", "allgather", "ulysses", "torch-cp")])
    cells += _cells(["phase=prefill,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=allgather"],
                    get_backend("sdpa-math"))
    # last, a cell whose rank 1 fails after its measurements (the test hook)
    cells += _cells(["phase=prefill,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=ring"])
    run = tmp_path_factory.mktemp("cp2")
    return run, run_cp_cells(cells, CPU, run, seed=3, profile_calls=2, reps=2, timeout_s=120,
                             env={FAIL_ENV: f"1:{cells[-1][2]}"})


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    base = "phase=train,b=1,q=64,kv=64,hq=8,hkv=4,d=8,dtype=fp32,cp=4,cp_scheme="
    run = tmp_path_factory.mktemp("cp4")
    return run, run_cp_cells(_cells([base + s for s in ("ring", "allgather", "ulysses")]), CPU, run, seed=5,
                             profile_calls=1, reps=1, timeout_s=120)


def _check_ok(run: Path, cell, ranks: int):
    assert cell.status == CellStatus.OK, cell.reason
    c = cell.correctness
    assert c.reference == "fp64" and c.out_rel_err < 1e-5
    if cell.workload.phase.value == "train":
        assert set(c.grad_rel_err) == {"dq", "dk", "dv"} and max(c.grad_rel_err.values()) < 1e-5
    assert [r.rank for r in cell.ranks] == list(range(ranks))
    ledger = cp_ledger(cell.workload).sent_bytes
    for r in cell.ranks:
        assert r.status == "ok" and r.step_us > 0
        assert r.sent_bytes == r.received_bytes == r.ledger_bytes == ledger  # traced == formula
        assert r.compute_us > 0 and r.comm_us > 0 and r.idle_us >= 0
        assert (run / r.trace_file).exists()
    assert cell.timing.reps >= 1 and cell.notes == ()


def test_two_ranks_every_scheme_matches_the_reference(two_ranks):
    run, cells = two_ranks
    by_scheme = {c.workload.cp_scheme + c.workload.phase.value: c for c in cells[:-1]}
    for key in ("ringtrain", "allgathertrain", "ulyssestrain", "allgatherprefill"):
        _check_ok(run, by_scheme[key], 2)
    torch_cp = by_scheme["torch-cptrain"]
    assert torch_cp.status == CellStatus.UNSUPPORTED
    assert torch_cp.reason.startswith("torch-cp on cpu: Operator aten._scaled_dot_product_flash_attention_for_cpu")


def test_four_ranks_every_scheme_matches_the_reference(four_ranks):
    run, cells = four_ranks
    for cell in cells:
        _check_ok(run, cell, 4)


def test_ring_needs_the_flash_block_kernel(tmp_path):
    (w, b, cid), = _cells(["phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=ring"],
                          get_backend("sdpa-math"))
    cell = run_cp_cell(w, b, CPU, tmp_path, cid, seed=0)
    assert cell.status == CellStatus.UNSUPPORTED and "sdpa-flash" in cell.reason


def test_a_failing_rank_ends_the_launch_with_one_line_and_keeps_what_was_measured(two_ranks):
    _, cells = two_ranks
    assert all(c.status != CellStatus.ERROR for c in cells[:-1])  # the cells before it are whole
    cell = cells[-1]
    assert cell.status == CellStatus.ERROR
    assert cell.reason == f"rank 1: RuntimeError: injected failure on rank 1 ({FAIL_ENV})"
    assert "\n" not in cell.reason
    r0, r1 = cell.ranks
    # both ranks measured before the failure: their timing and traces are kept, rank 1 marked failed
    assert r0.status == "ok" and r0.step_us > 0 and r0.sent_bytes == cp_ledger(cell.workload).sent_bytes
    assert r1.status == "failed" and r1.error == cell.reason and r1.step_us > 0
    assert cell.timing is not None and cell.correctness is None


def test_torch_cp_is_offered_only_to_the_fused_sdpa_backends():
    (w, _, _), = _cells(["phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=torch-cp"])
    for name in ("sdpa-math", "eager", "flex"):
        reason = static_reason(w, get_backend(name), CPU)
        assert reason is not None and reason.startswith("torch-cp shards only the fused SDPA kernels"), name
    assert static_reason(w, FLASH, CPU) is None


def test_each_torch_cp_cell_has_a_launch_of_its_own(tmp_path, monkeypatch):
    launches = []

    def fake(spec, ranks, work_dir, **_):
        ids = [c["cell_id"] for c in spec["cells"]]
        launches.append(ids)
        n = len(ids)
        return LaunchOutcome(((None,) * ranks,) * n, (None,) * n, ("torch-cp on cpu: no strategy",) * n, None)

    monkeypatch.setattr(cp_launch, "launch_ranks", fake)
    base = "phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme="
    cells = (_cells([base + "torch-cp"]) + _cells([base + "torch-cp"], get_backend("sdpa-math"))
             + _cells([base + "ring", base + "allgather"]) + _cells([base + "torch-cp"], get_backend("sdpa-efficient")))
    out = run_cp_cells(cells, CPU, tmp_path, seed=0)
    # the sdpa-math cell never launches; ring and allgather share one launch; each torch-cp cell is alone
    assert sorted(launches) == sorted([[cells[0][2]], [cells[2][2], cells[3][2]], [cells[4][2]]])
    assert [c.cell_id for c in out] == [c[2] for c in cells]
    assert out[1].status == CellStatus.UNSUPPORTED and "fused SDPA" in out[1].reason
    assert all(c.status == CellStatus.UNSUPPORTED for c in out)


def test_sigterm_stops_the_launch_and_removes_its_temporary_directory(tmp_path, monkeypatch):
    import os
    import signal
    import time

    seen = []

    def fake(spec, ranks, work_dir, **_):
        seen.append(work_dir)
        (work_dir / "spec.json").write_text("{}")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # never reached: the signal interrupts
        raise AssertionError("SIGTERM did not interrupt the launch")

    monkeypatch.setattr(cp_launch, "launch_ranks", fake)
    before = signal.getsignal(signal.SIGTERM)
    (w, b, cid), = _cells(["phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=ulysses"])
    with pytest.raises(KeyboardInterrupt):
        run_cp_cell(w, b, CPU, tmp_path, cid, seed=0)
    assert seen and not seen[0].exists()  # /tmp/profattn-cp-XXXX removed
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_failure_reported_is_the_rank_that_failed_first(tmp_path):
    """Rank 1's injected error brings rank 0 down ("Connection closed by peer"); when both are found exited in one
    poll, the cause is the error written first, not the lower rank (a CI run reported rank 0's consequence)."""
    import os

    from profattn.harness.cp_launch import first_failure

    (tmp_path / "rank0.error").write_text("RuntimeError: Connection closed by peer\n")
    (tmp_path / "rank1.error").write_text("RuntimeError: injected failure on rank 1\n")
    os.utime(tmp_path / "rank0.error", ns=(2_000_000_000, 2_000_000_000))
    os.utime(tmp_path / "rank1.error", ns=(1_000_000_000, 1_000_000_000))
    assert first_failure(tmp_path, [0, 1]) == 1
    assert first_failure(tmp_path, [0, 1, 2]) == 1  # rank 2 wrote nothing: last
    assert first_failure(tmp_path, [2, 3]) == 2  # none wrote an error: the lowest rank


def test_ranks_past_the_time_limit_are_stopped_and_said_so(tmp_path):
    """Two ranks still starting (importing torch) when the limit passes: both stopped, the error names the limit and
    them, and no rank is blamed for a failure it did not have."""
    from profattn.harness.cp_launch import launch_ranks

    out = launch_ranks({"cells": []}, 2, tmp_path, timeout_s=0.05, grace_s=0.05)
    assert out.error == "rank 0: no result after 0.05 s (ranks [0, 1] stopped)" and out.failed_rank == 0
    assert out.results == () and out.checks == ()
