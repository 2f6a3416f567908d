"""The run report's "Selection policy" section and the recommend texts: models, held-out scores, drop-in first."""

from __future__ import annotations

from pathlib import Path

from factories import cell, run
from profattn.analysis.run.analyze import analyze_run
from profattn.report.recommend import option_text, policy_section, validation_table
from profattn.report.run import render_html
from profattn.results import read_results
from profattn.workload import Workload

REPO = Path(__file__).resolve().parents[2]


def test_seed_report_section_has_models_and_the_held_out_score():
    seed = read_results(REPO / "examples" / "h200-seed")
    section = policy_section(analyze_run(seed).policy)
    assert section["workloads"] == 5 and section["gpu"] == "NVIDIA H200"
    rows = {(r["backend"], r["regime"]) for r in section["models"]}
    assert ("sdpa-cudnn", "train/dense/none/full/uniform/square/bfloat16/d128") in rows
    assert ("triton-paged-decode", "decode/paged/none/full/uniform/square/bfloat16/d128") in rows
    (lowo,) = section["slices"]
    assert lowo["field"] == "workload" and lowo["n"] == 5 and lowo["baseline"] in (
        "most frequent winner", "best single backend", "fixed priority (vLLM-like)")
    html = render_html(analyze_run(seed))
    assert '<h2 id="policy">Selection policy</h2>' in html and "Leave one workload out" in html


def test_no_section_for_fewer_than_three_workloads():
    w = Workload(phase="decode", batch=8, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    assert policy_section(analyze_run(run([cell(w, "eager", 10.0), cell(w, "sdpa-math", 12.0)])).policy) is None


def test_option_and_table_texts():
    from profattn.analysis.selection.recommend import ChangeCost, Option
    from profattn.interfaces import ADOPTIONS, Change

    o = Option("sdpa-cudnn", (Change.GATHER,), (ChangeCost(Change.GATHER, 62.6, False, 268_435_456, 4287.0, 117.6),),
               ADOPTIONS["sdpa-cudnn"])
    assert option_text(o) == ("needs a contiguous cache (gather the pages per call, or keep a contiguous copy) — gather "
                              "≈ 62.6 µs per call (268.4 MB at 4,287 GB/s; gather + SDPA measured 117.6 µs)")
    assert option_text(Option("x", (), (), None)) == "drop-in" and "plugin" in option_text(Option("x", None, (), None))
    from profattn.analysis.selection.policy import BASELINES, HeldOut, Scored, SliceResult, Validation

    h = HeldOut("k", "decode", "a", Scored("a", True, 0.0), False, (Scored("b", False, 0.1),) * len(BASELINES))
    table = validation_table(Validation((SliceResult("head_dim", "64", (h,)),), None))
    assert "| head dim = 64 | 1 | 1/1 hit, mean 0 %, worst 0 % | most frequent winner | 0/1 hit, mean 10 %, worst 10 % | yes |" in table


def test_a_rate_above_the_measured_roof_reads_unused():
    """A coefficient so small its rate would beat the GPU's read stream (or matrix roof) is a term the fit left
    unused, not an efficiency: 1e3 / (µs per MB) = GB/s, 1e3 / (µs per GFLOP) = TFLOP/s."""
    from dataclasses import replace

    from profattn.report.recommend import model_rows

    policy = analyze_run(read_results(REPO / "examples" / "h200-seed-2026-12-01")).policy  # its run measured both roofs
    roof = policy.models.read_gbps
    assert roof and 4_500 < roof < 4_800 and policy.models.flops_roof_tflops
    key, m = next(iter(policy.models.models.items()))
    for coef, gbps, tflops in (((1.0, 1e3 / 2_000, 0.0, 1e3 / 400, 0.0), "2,000 GB/s", "400 TFLOP/s"),
                               ((1.0, 1e3 / (2 * roof), 0.0, 1e-9, 0.0), "unused", "unused"),
                               ((1.0, 0.0, 0.0, 0.0, 0.0), "–", "–")):
        p = replace(policy, models=replace(policy.models, models={key: replace(m, coef=coef)}))
        (row,) = model_rows(p)
        assert (row["gbps"], row["tflops"]) == (gbps, tflops)
