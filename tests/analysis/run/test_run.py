"""The one run analysis (:func:`profattn.analysis.run.analyze.analyze_run`) and the per-layout answer of a paged decode
workload (:mod:`profattn.analysis.run.layout`, :func:`profattn.analysis.run.verdict.layout_split`), on hand-picked numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from factories import SEED, cell, kernel, run
from profattn.analysis.run.analyze import analyze_run
from profattn.analysis.run.layout import CacheLayout, cache_layout
from profattn.analysis.run.reattach import TraceProblem, TraceProblemKind
from profattn.analysis.run.verdict import Standing
from profattn.report.run import crossover_rows, trace_warnings
from profattn.report.verdict import render_verdict
from profattn.workload import Workload

TRAIN, PREFILL, D512, D2048, D8192 = SEED.workloads  # decode: paged, page 16
GATHER = "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)"
CUDNN = "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0"


def test_the_layout_a_cell_read():
    dense = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    assert cache_layout("triton-paged-decode", D512) is CacheLayout.PAGED
    assert cache_layout("torch-paged-reference", D512) is CacheLayout.PAGED  # it gathers inside its call
    assert cache_layout("sdpa-cudnn", D512) is CacheLayout.CONTIGUOUS  # the harness's copy of the paged cache
    assert cache_layout("flashinfer-decode", dense) is CacheLayout.CONTIGUOUS
    varlen = Workload.varlen(None, [(8, 8), (4, 4)], num_q_heads=4, num_kv_heads=2, head_dim=32)
    assert cache_layout("sdpa-nested", varlen) is CacheLayout.PACKED and cache_layout("sdpa-nested", dense) is CacheLayout.CONTIGUOUS
    assert cache_layout("my.plugin:Backend", D512) is None  # unknown: not guessed


def seed_like():
    """Training won by sdpa-cudnn; at decode kv 8192 our paged kernel 40 µs, cuDNN on its contiguous copy 41 µs
    (2.5 % apart and the factory's ±2 % spreads do not overlap: beyond noise), sdpa-flash 50 µs, the gather + SDPA
    path 110 µs of which its gather kernel 70 µs."""
    return run([
        cell(TRAIN, "sdpa-cudnn", 1200.0), cell(TRAIN, "flex", 1600.0),
        cell(D8192, "triton-paged-decode", 40.0), cell(D8192, "sdpa-cudnn", 41.0), cell(D8192, "sdpa-flash", 50.0),
        cell(D8192, "torch-paged-reference", 110.0, kernels=(kernel(GATHER, 16384, 70.0), kernel(CUDNN, 256, 38.0))),
    ])


def test_a_paged_decode_workload_is_answered_per_layout():
    a = analyze_run(seed_like())
    (row,) = a.verdict.decode_rows
    s = row.layouts
    assert s is not None
    assert (s.paged.winner.backend, s.paged.runner_up.backend) == ("triton-paged-decode", "torch-paged-reference")
    assert s.paged.margin.ratio == pytest.approx(110.0 / 40.0)
    assert (s.contiguous.winner.backend, s.contiguous.runner_up.backend) == ("sdpa-cudnn", "sdpa-flash")
    # the training winner competes among the contiguous-copy kernels: it stays the winner there
    assert (row.standing, row.winner.backend, row.runner_up.backend) == (Standing.STAYS, "sdpa-cudnn", "sdpa-flash")
    assert s.between.ratio == pytest.approx(41.0 / 40.0) and not s.between.tie
    # the gather is torch-paged-reference's layout-copy kernel time per call, from its trace
    assert (s.gather_backend, s.gather_us, s.gather_latency_us) == ("torch-paged-reference", 70.0, 110.0)
    assert s.dense_on_paged_us == 41.0 + 70.0
    # the matrix still marks the fastest cell overall
    assert a.winners[D8192.tag].backend == "triton-paged-decode"
    text = render_verdict(a.verdict)
    assert [(r.layout, r.winner) for r in text.rows] == [("over the paged cache", "triton-paged-decode"),
                                                          ("over a contiguous copy", "sdpa-cudnn")]
    assert text.rows[0].winner_text == "triton-paged-decode (paged cache)"
    assert "over the paged cache ≈ 111.0 µs, 2.77× the paged winner" in text.rows[1].mechanism
    assert ("Over the paged cache a serving engine holds, the fastest paged kernel is triton-paged-decode at kv 8192: "
            "40.0 µs") in text.summary
    assert ("A contiguous kernel on the paged cache first gathers it at kv 8192: 70.0 µs per call measured "
            "(torch-paged-reference's gather kernels), so sdpa-cudnn there ≈ 111.0 µs.") in text.summary
    # the crossover table ranks each layout apart
    assert [r["kernels"] for r in crossover_rows(a)] == ["paged kernels (page pool)", "contiguous-copy kernels"]


def test_one_layout_only_is_not_split():
    r = run([cell(D8192, "sdpa-cudnn", 41.0), cell(D8192, "sdpa-flash", 50.0)])
    (row,) = analyze_run(r).verdict.decode_rows
    assert row.layouts is None and row.winner.backend == "sdpa-cudnn"
    assert row.winner.layout is CacheLayout.CONTIGUOUS


def test_analysis_in_matrix_order_with_ranks_and_typed_trace_problems():
    cells = [cell(D512, "b", 12.0), cell(TRAIN, "a", 100.0), cell(D512, "a", 10.0), cell(TRAIN, "b", 101.0)]
    problems = (TraceProblem("x.a", "/etc/passwd", TraceProblemKind.OUTSIDE_RUN),
                TraceProblem("y.b", "traces/t.json.gz", TraceProblemKind.UNREADABLE, "truncated gzip"))
    a = analyze_run(run(cells), traces=problems)
    assert [w.tag for w in a.workloads] == [TRAIN.tag, D512.tag] and a.backends == ("b", "a")
    assert [(m.cell.workload.tag, m.cell.backend, m.winner) for m in a.matrix] == [
        (TRAIN.tag, "b", False), (TRAIN.tag, "a", True), (D512.tag, "b", False), (D512.tag, "a", True)]
    train_b, train_a = a.matrix[0], a.matrix[1]
    assert train_a.ties == ("b",) and train_b.tie and train_b.ratio == pytest.approx(1.01)
    assert a.matrix[2].ratio == pytest.approx(1.2) and not a.matrix[2].tie
    assert a.cell(f"{D512.tag}.a").winner and a.trace_problems == problems
    assert trace_warnings(a) == ["x.a: trace_file '/etc/passwd' is outside the run directory: not read",
                                 "y.b: trace unreadable, stored summary kept: truncated gzip"]
    assert set(a.ledgers) == {TRAIN.phase, D512.phase}


def test_load_run_exposes_the_analysis(tmp_path):
    from profattn.api import load_run
    from profattn.results import write_results

    write_results(seed_like(), tmp_path / "results.json")
    a = load_run(tmp_path, analysis=True)
    assert a.run.cells == load_run(tmp_path).cells and a.verdict.training_winner == "sdpa-cudnn"
    assert a.verdict.decode_rows[0].layouts.paged.winner.backend == "triton-paged-decode"
    broken = replace(a.run.cells[-1], trace=replace(a.run.cells[-1].trace, trace_file="../outside.json"))
    write_results(a.run.with_cell(broken), tmp_path / "results.json")
    again = load_run(tmp_path, analysis=True)
    assert [(p.cell_id, p.kind) for p in again.trace_problems] == [(broken.cell_id, TraceProblemKind.OUTSIDE_RUN)]
