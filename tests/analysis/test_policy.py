"""The selection policy: rules on a tiny synthetic store, its leave-one-workload-out numbers computed by hand,
the exported format, and the numbers on the committed H200 decode sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import cell, run
from profattn.analysis.policy import (
    POLICY_SCHEMA, derive, policy_from_dict, policy_to_dict, workload_times,
)
from profattn.results import read_results
from profattn.store import measurements
from profattn.workload import Workload

REPO = Path(__file__).resolve().parents[2]

#: batch -> (A µs, B µs): A wins clearly up to batch 16, B from 32 (the factory's p10/p90 are ±2 %, so any gap
#: of 5 % or more is beyond noise).
TIMES = {1: (10.0, 12.0), 2: (10.0, 13.0), 4: (10.0, 11.0), 16: (10.0, 10.5), 32: (15.0, 10.0), 64: (20.0, 10.0)}


def tiny_cells():
    cells = []
    for b, (a, bb) in TIMES.items():
        w = Workload(phase="decode", batch=b, q_len=1, kv_len=4096, num_q_heads=16, num_kv_heads=4, head_dim=128,
                     kv_layout="paged", page_size=16)
        cells += [cell(w, "A", a, family="triton"), cell(w, "B", bb, family="cudnn")]
    return measurements(run(cells))


def test_rules_and_leave_one_out_by_hand():
    p = derive(tiny_cells(), "NVIDIA H200")
    assert p is not None and p.workloads == 6 and p.backends == ("A", "B")
    # All six: A on 1..16, B on 32, 64 -> one split between 16 and 32, at their geometric mean sqrt(512).
    (r_b, r_a) = p.rules()
    assert r_b.conditions[0].field == "batch" and r_b.conditions[0].op == ">=" and r_b.conditions[0].value == pytest.approx(512 ** 0.5)
    assert (r_b.backend, r_b.support, r_b.within_noise) == ("B", 2, 2)
    assert (r_a.backend, r_a.support, r_a.within_noise) == ("A", 4, 4)
    # Held out in turn: batch 16 is the one miss — without it the split falls between 4 and 32 (sqrt(128) = 11.3),
    # so batch 16 is sent to B: 10.5 / 10.0 - 1 = 5 % lost. Every other held-out workload is predicted right.
    v = p.validation
    assert (v.n, v.within_noise, v.exact, v.uncovered, v.unrunnable) == (6, 5, 5, 0, 0)
    assert v.mean_regret == pytest.approx(0.05 / 6)
    assert v.worst.key.startswith("decode_b16_") and v.worst.predicted == "B" and v.worst.best == "A"
    assert v.worst.regret == pytest.approx(0.05)


def test_prediction_confidence_and_domain():
    p = derive(tiny_cells(), "NVIDIA H200")
    from profattn.analysis.policy import features
    from profattn.store import workload_fields

    w8 = Workload(phase="decode", batch=8, q_len=1, kv_len=4096, num_q_heads=16, num_kv_heads=4, head_dim=128,
                  kv_layout="paged", page_size=16)
    pred = p.predict(features(workload_fields(w8), 132))
    assert pred.backend == "A" and pred.confidence == 1.0 and pred.rule.support == 4
    dense = Workload(phase="decode", batch=8, q_len=1, kv_len=4096, num_q_heads=16, num_kv_heads=4, head_dim=128)
    assert p.predict(features(workload_fields(dense), 132)) is None  # no paged-to-dense guess


def test_exported_policy_round_trips():
    p = derive(tiny_cells(), "NVIDIA H200")
    d = json.loads(json.dumps(policy_to_dict(p)))
    assert d["schema"] == POLICY_SCHEMA and d["version"] == 1 and d["num_sms"] == 132
    assert [r["backend"] for r in d["rules"]] == ["B", "A"]
    assert d["rules"][0]["when"] == [{"field": "batch", "op": ">=", "value": pytest.approx(22.627, abs=1e-3)}]
    assert d["validation"]["held_out"] == 6 and d["validation"]["within_noise"] == 5
    back = policy_from_dict(d)
    assert back.rules() == p.rules() and back.domain == p.domain
    with pytest.raises(ValueError):
        policy_from_dict({**d, "version": 2})


def test_incorrect_cells_never_rank():
    cells = list(tiny_cells())
    from dataclasses import replace

    wrong = [replace(c, eligible=False, status="incorrect", correct=False) if c.backend == "A" and c.batch == 1 else c
             for c in cells]
    ws = {w.key: w for w in workload_times(wrong)}
    b1 = next(w for k, w in ws.items() if k.startswith("decode_b1_"))
    assert [t.backend for t in b1.times] == ["B"]


def test_policy_on_the_committed_h200_decode_sweep():
    """The issue's target: within noise on >= 90 % of held-out decode workloads, mean regret <= 3 %. Measured: 32
    of 38 (84 %), mean 2.0 %, worst 29 % (batch 64, kv 512, page 16: triton-paged-decode predicted, sdpa-cudnn best)."""
    run = read_results(REPO / "examples" / "h200-sweep")
    p = derive(measurements(run), "NVIDIA H200")
    v = p.validation.of_phase("decode")
    assert (v.n, v.within_noise, v.exact, v.uncovered) == (38, 32, 27, 1)
    assert v.mean_regret == pytest.approx(0.0199, abs=5e-4)
    assert v.worst.key == "decode_b64_q1_kv512_hq16_hkv4_d128_bf16_causal_paged16"
    assert v.worst.regret == pytest.approx(0.294, abs=1e-3)
    texts = [r.backend for r in p.rules()]
    assert "sdpa-cudnn" in texts and "triton-paged-decode" in texts
