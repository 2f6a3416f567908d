"""``benchmarks/loo_target.py``: on the committed H200 runs (the third draw left out, as it was asked), cuDNN's and
the other training models fail the policy's 25 % leave-one-out gate on latency and pass it on the trace's GPU time."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import script_module

REPO = Path(__file__).resolve().parents[1]


def test_training_models_on_gpu_time_pass_the_gate():
    with script_module(REPO / "benchmarks" / "loo_target.py", "loo_target") as job:
        runs = job.committed_runs([REPO / "examples" / "h200-heldout-3"])
        rows = {(r["backend"], r["regime"].rsplit("/", 1)[1]): r for r in job.loo_by_target(runs, ("train",))}
    cudnn = rows[("sdpa-cudnn", "d128")]
    assert cudnn["workloads"] == 12
    assert cudnn["latency"][0] == pytest.approx(0.296, abs=5e-4) and cudnn["gpu"][0] == pytest.approx(0.069, abs=5e-4)
    assert rows[("sdpa-cudnn", "d64")]["latency"][0] > 0.25 > 0.06 > rows[("sdpa-cudnn", "d64")]["gpu"][0]
    assert all(r["gpu"][1] < r["latency"][1] for k, r in rows.items() if k[0].startswith("sdpa-"))
