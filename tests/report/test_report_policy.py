"""The run report's "Selection policy" section: the committed sweep's rules and validation in its HTML; a run
with too few workloads has none."""

from __future__ import annotations

from pathlib import Path

from factories import cell, run
from profattn.analysis.run import analyze_run
from profattn.report.recommend import condition_text, policy_section
from profattn.report.run import render_html
from profattn.results import read_results
from profattn.analysis.policy import Condition
from profattn.workload import Workload

REPO = Path(__file__).resolve().parents[2]


def test_sweep_report_shows_the_policy_and_its_validation():
    sweep = read_results(REPO / "examples" / "h200-sweep")
    section = policy_section(analyze_run(sweep).policy)
    assert section["workloads"] == 38
    assert {"when": "kv_len_dist ≠ lognormal, batch < 3", "backend": "triton-paged-decode", "record": "11/12",
            "regret": "0.28 %"} in section["rules"]
    assert section["validation"].startswith("32/38 held-out workloads (84 %) within noise of the measured best")
    html = render_html(analyze_run(sweep))
    assert '<h2 id="policy">Selection policy</h2>' in html and "32/38 held-out workloads (84 %)" in html


def test_no_section_for_fewer_than_three_workloads():
    w = Workload(phase="decode", batch=8, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    assert policy_section(analyze_run(run([cell(w, "eager", 10.0), cell(w, "sdpa-math", 12.0)])).policy) is None


def test_condition_text():
    assert condition_text(Condition("kv_len", ">=", 2289.73)) == "kv_len ≥ 2,290"
    assert condition_text(Condition("bhkv_per_sm", "<", 0.4848)) == "B·Hkv/SMs < 0.485"
    assert condition_text(Condition("kv_layout", "!=", "dense")) == "kv_layout ≠ dense"
