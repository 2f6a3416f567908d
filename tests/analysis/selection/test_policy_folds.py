"""issue 33, item 16: the workload-held-out validation learns once per fold, at most LOWO_FOLDS of them, so a run of
thousands of cells is analysed in seconds (4,500 cells took 44 s: one learn per workload)."""

from __future__ import annotations

from dataclasses import replace

from factories import SEED, cell, run
from profattn.analysis.selection import policy as policy_module
from profattn.store import measurements
from profattn.workload import Phase


def _cells(workloads: int):
    base = next(w for w in SEED.workloads if w.phase is Phase.DECODE)
    out = []
    for i in range(workloads):
        w = replace(base, kv_len=64 + 16 * i)
        out += [cell(w, "sdpa-flash", 10.0 + i % 3), cell(w, "eager", 12.0 + i % 5, family="eager")]
    return measurements(run(out))


def test_leave_one_out_folds_are_bounded(monkeypatch):
    calls = []
    learn = policy_module.learn
    monkeypatch.setattr(policy_module, "learn", lambda *a, **k: calls.append(1) or learn(*a, **k))
    v = policy_module.validate(_cells(60), "NVIDIA H200", slices={})
    assert v.lowo is not None and v.lowo.value == f"{policy_module.LOWO_FOLDS} folds"
    assert len(calls) == policy_module.LOWO_FOLDS and v.lowo.policy.n == 60
    calls.clear()
    small = policy_module.validate(_cells(8), "NVIDIA H200", slices={})
    assert small.lowo.value == "each" and len(calls) == 8
