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


def test_recommend_says_why_the_training_models_cannot_be_bounded():
    """The third draw's first training step, asked from the same 34 runs: no pick (as at 76b11e4), and cuDNN's line to
    measure says 5 of its 12 workloads are launch-bound."""
    from profattn.analysis.selection.recommend import policy_for, recommend
    from profattn.report.recommend import recommend_json
    from profattn.workload import parse_workload_spec

    w = parse_workload_spec("phase=train,batch=2,q_len=1024,kv_len=1024,num_q_heads=8,num_kv_heads=1,head_dim=128,"
                            "dtype=bfloat16")
    with script_module(REPO / "benchmarks" / "loo_target.py", "loo_target") as job:
        with job.one_gpu_store(job.committed_runs([REPO / "examples" / "h200-heldout-3"])) as (store, gpu):
            doc = recommend_json(recommend(store, w, gpu, policy=policy_for(store, gpu)))
    assert doc["best"] is None and doc["best_drop_in"] is None
    why = {u["backend"]: u["why"] for u in doc["unmeasured_here"]}
    assert why["sdpa-cudnn"].startswith("its model's leave-one-out error 30 % > 25 %; 5 of its 12 workloads are "
                                        "launch-bound, the kernels under 60 % of the latency")


@pytest.mark.parametrize("argv, message", [
    (["--min-workloads", "2"], "--min-workloads is at least 3"),
    (["--exclude", "/nonexistent-run-folder"], "not a directory: /nonexistent-run-folder"),
    (["--min-workloads", "abc"], "loo_target.py: error: argument --min-workloads: invalid int value: 'abc'"),
    (["--phase", "bogus"], "argument --phase: invalid choice: 'bogus'"),
])
def test_bad_input_is_one_line(argv, message, capsys, monkeypatch):
    with script_module(REPO / "benchmarks" / "loo_target.py", "loo_target") as job:
        monkeypatch.setattr("sys.argv", ["loo_target.py", *argv])
        try:
            code = job.main()
        except SystemExit as e:  # argparse's own errors exit from parse_args
            code = e.code
        assert code == 2
    out = capsys.readouterr()
    assert out.out == "" and message in out.err and len(out.err.strip().splitlines()) == 1


def test_h100_training_models_pass_the_gate_on_latency():
    """On the H100 corpus, timed with the host's stalls hidden (results schema 4), the training models' latency
    leave-one-out errors are within the 25 % gate and match their GPU-time errors (H200, old timing: 29.6 % vs 6.9 %)."""
    with script_module(REPO / "benchmarks" / "loo_target.py", "loo_target") as job:
        runs = job.committed_runs([REPO / "examples" / "h100-heldout-4", REPO / "examples" / "h100-heldout-5"], "H100")
        rows = {(r["backend"], r["regime"].rsplit("/", 1)[1]): r for r in job.loo_by_target(runs, ("train",))}
    for d in ("d64", "d128"):
        for b in ("sdpa-cudnn", "sdpa-flash"):
            lat, gpu = rows[(b, d)]["latency"][0], rows[(b, d)]["gpu"][0]
            assert lat < 0.10 and abs(lat - gpu) < 0.015, (b, d, lat, gpu)
    assert rows[("sdpa-cudnn", "d128")]["workloads"] == 12 and rows[("sdpa-cudnn", "d64")]["workloads"] == 22
    assert rows[("sdpa-cudnn", "d128")]["latency"][0] == pytest.approx(0.090, abs=5e-4)
