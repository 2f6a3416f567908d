"""The verdict on serving calls: does the unchunked prefill winner stay the winner per prompt at each chunk size
and in each mixed step? Prompt times summed by hand, a tie and a change on synthetic cells, and the standings
of the committed H200 serving run (``examples/h200-serving``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from factories import cell, kernel, repeated, run
from profattn.analysis.common.margins import JudgedTime, TieReason, judged_margin, judged_time, margin, summed_time
from profattn.analysis.run.serving import prompt_times
from profattn.analysis.run.verdict import ServingCall, Standing, serving_verdicts, verdict
from profattn.results import CellStatus, read_results
from profattn.workload import Workload

SERVING_RUN = Path(__file__).resolve().parents[3] / "examples" / "h200-serving"
COMMON = dict(num_q_heads=4, num_kv_heads=2, head_dim=32, dtype="bfloat16", kv_layout="paged", page_size=16,
              append=True)


def chunk(q: int, kv: int) -> Workload:
    return Workload(phase="prefill", batch=2, q_len=q, kv_len=kv, **COMMON)


def prompt(backend: str, size: int, us: list[float]) -> list:
    """One cell per chunk of a 128-token prompt cut into ``size``-token chunks, chunk ``i`` taking ``us[i]`` µs."""
    return [cell(chunk(size, (i + 1) * size), backend, t) for i, t in enumerate(us)]


STEP = Workload.varlen(None, [(32, 128), (1, 40), (1, 90)], **COMMON)
# a: wins the whole prompt (100 vs 130 µs), ties at chunk 64 (b 128 µs vs a 130 µs: 1.6 %), loses at chunk 32
# (b 4 × 25 = 100 µs vs a 4 × 40 = 160 µs), keeps the mixed step (50 vs 80 µs)
CELLS = [
    *prompt("a", 128, [100.0]), *prompt("b", 128, [130.0]),
    *prompt("a", 64, [60.0, 70.0]), *prompt("b", 64, [58.0, 70.0]),
    *prompt("a", 32, [40.0] * 4), *prompt("b", 32, [25.0] * 4),
    cell(STEP, "a", 50.0), cell(STEP, "b", 80.0),
]


def test_summed_time_adds_medians_spreads_and_repeat_rounds():
    a, b = cell(chunk(64, 64), "a", 60.0), cell(chunk(64, 128), "a", 70.0)
    t = summed_time([a, b])  # factories' spreads: p10 = 0.98 ×, p90 = 1.02 × the median
    assert (t.backend, t.median_us, t.samples_us) == ("a", 130.0, (130.0,))
    assert (t.p10_us, t.p90_us) == (pytest.approx(58.8 + 68.6), pytest.approx(61.2 + 71.4))
    ra, rb = repeated(a, [60.0, 61.0, 59.0]), repeated(b, [70.0, 72.0, 71.0])
    assert summed_time([ra, rb]).samples_us == (130.0, 133.0, 130.0)  # round i: repeat i of every chunk
    assert summed_time([ra, b]).samples_us == (130.0,)  # repeat counts differ: the summed median alone
    assert summed_time([a]) == judged_time(a)
    with pytest.raises(ValueError):
        summed_time([a, cell(chunk(64, 128), "b", 70.0)])
    with pytest.raises(ValueError):
        summed_time([])
    with pytest.raises(ValueError):
        judged_time(cell(chunk(64, 64), "a", None))


def test_margin_on_cells_is_judged_margin_on_their_times():
    a, b = cell(chunk(64, 64), "a", 100.0), cell(chunk(64, 64), "b", 101.9)
    assert margin(a, b) == judged_margin(judged_time(a), judged_time(b))
    m = judged_margin(JudgedTime("x", 130.0, 127.0, 133.0, (130.0,)), JudgedTime("y", 128.0, 125.0, 131.0, (128.0,)))
    assert (m.ahead, m.behind, m.tie, m.why) == ("y", "x", True, TieReason.CLOSE_MEDIANS)


def test_the_unchunked_winner_stays_ties_and_changes():
    (s,) = verdict(run(CELLS)).serving
    assert (s.prompt, s.prompt_len, s.reference_backend, s.reference_tied) == (chunk(128, 128), 128, "a", ())
    assert (s.reference_margin.behind, s.reference_margin.ratio, s.reference_margin.tie) == ("b", 1.3, False)
    assert [(r.call, r.chunk_size, r.chunks, r.standing, r.winner_backend) for r in s.rows] == [
        (ServingCall.CHUNKED, 64, 2, Standing.TIES, "b"),
        (ServingCall.CHUNKED, 32, 4, Standing.CHANGES, "b"),
        (ServingCall.MIXED, None, 1, Standing.STAYS, "a"),
    ]
    tie, change, step = s.rows
    assert (tie.winner.median_us, tie.reference_here.median_us) == (128.0, 130.0)
    assert tie.reference_margin.ratio == pytest.approx(130 / 128) and tie.reference_margin.why is TieReason.CLOSE_MEDIANS
    assert tie.tied == ("a",) and tie.stays is True
    assert (change.winner.median_us, change.reference_here.median_us) == (100.0, 160.0)
    assert change.reference_margin.ratio == 1.6 and not change.reference_margin.tie and change.stays is False
    assert (change.reference_vs_unchunked, change.winner_vs_unchunked) == (1.6, pytest.approx(100 / 130))
    assert (step.workload, step.reference_margin, step.margin.ratio) == (STEP, None, 1.6)
    assert step.reference_vs_unchunked is None


def swap(cells: list, new) -> list:
    """``cells`` with the cell of ``new``'s workload and backend replaced by ``new``."""
    return [new if (c.workload, c.backend) == (new.workload, new.backend) else c for c in cells]


def test_a_backend_counts_per_prompt_only_with_every_chunk_eligible():
    # a's chunk 2 of 4 (chunk 32) is incorrect: a has no time per prompt there, b wins without a margin over a
    (s,) = serving_verdicts(run(swap(CELLS, cell(chunk(32, 96), "a", 40.0, status=CellStatus.INCORRECT, err=0.5))))
    row = s.rows[1]
    assert (row.standing, row.winner_backend, row.reference_here, row.reference_margin) == (Standing.CHANGES, "b", None, None)
    # a chunk whose kernels contradict its backend's family cannot win either: b has no time at chunk 32
    foreign = cell(chunk(32, 64), "b", 25.0, kernels=(kernel("not_b", 8, 20.0),), family_ok=False)
    (s,) = serving_verdicts(run(swap(CELLS, foreign)))
    assert (s.rows[1].standing, s.rows[1].winner_backend, s.rows[1].margin) == (Standing.STAYS, "a", None)


def test_undecided_and_absent_verdicts():
    # no unchunked prompt: nothing to compare with, no verdict
    assert serving_verdicts(run([c for c in CELLS if c.workload != chunk(128, 128)])) == ()
    # the unchunked prompt alone: nothing to compare
    assert serving_verdicts(run(CELLS[:2])) == ()
    # no eligible unchunked cell: every call uncompared
    failed = [cell(chunk(128, 128), b, 100.0, status=CellStatus.INCORRECT, err=0.5) for b in "ab"] + CELLS[2:]
    (s,) = serving_verdicts(run(failed))
    assert s.reference is None and {r.standing for r in s.rows} == {Standing.UNCOMPARED}
    # every chunk cell pending: not run; one failed and the rest pending: no winner
    pending = [cell(chunk(64, kv), b, None, status=CellStatus.PENDING) for kv in (64, 128) for b in "ab"]
    (s,) = serving_verdicts(run(CELLS[:2] + pending))
    assert [r.standing for r in s.rows] == [Standing.NOT_RUN]
    (s,) = serving_verdicts(run(CELLS[:2] + swap(pending, cell(chunk(64, 64), "b", None, status=CellStatus.ERROR))))
    assert [r.standing for r in s.rows] == [Standing.NO_WINNER]
    # a mixed step of another head count is not compared with this prompt
    other = Workload.varlen(None, [(32, 128), (1, 40)], **{**COMMON, "num_q_heads": 8})
    (s,) = serving_verdicts(run(CELLS + [cell(other, "a", 10.0)]))
    assert [r.workload for r in s.rows if r.call is ServingCall.MIXED] == [STEP]


def test_h200_serving_run():
    """The committed H200 run: sdpa-cudnn wins the unchunked 8192-token prompt by 1.12×, but FlashInfer's paged
    prefill wins per prompt at chunk 2048 and 512 and our one-launch kernel both mixed steps, each beyond noise."""
    r = read_results(SERVING_RUN)
    (s,) = verdict(r).serving
    assert (s.prompt_len, s.prompt.batch, s.reference_backend) == (8192, 8, "sdpa-cudnn")
    assert s.reference.median_us == pytest.approx(3815.424, abs=1e-3)
    m = s.reference_margin
    assert (m.behind, m.behind_us, m.tie) == ("flashinfer-prefill-paged", pytest.approx(4271.216, abs=1e-3), False)
    assert m.ratio == pytest.approx(1.1195, abs=1e-4)
    assert [(r.call, r.chunk_size, r.chunks, r.standing, r.winner_backend) for r in s.rows] == [
        (ServingCall.CHUNKED, 2048, 4, Standing.CHANGES, "flashinfer-prefill-paged"),
        (ServingCall.CHUNKED, 512, 16, Standing.CHANGES, "flashinfer-prefill-paged"),
        (ServingCall.MIXED, None, 1, Standing.CHANGES, "triton-paged-prefill"),
        (ServingCall.MIXED, None, 1, Standing.CHANGES, "triton-paged-prefill"),
    ]
    # per prompt, the times are the serving section's Σ over the chunks
    table = {(t.plan.chunk_size, t.backend): t.attention_us for t in prompt_times(r.cells)}
    for row in s.rows[:2]:
        assert row.winner.median_us == table[row.chunk_size, "flashinfer-prefill-paged"]
        assert row.reference_here.median_us == table[row.chunk_size, "sdpa-cudnn"]
    got = [(round(r.winner.median_us, 1), round(r.reference_margin.ratio, 2), r.reference_margin.tie, r.tied) for r in s.rows]
    assert got == [(4369.3, 1.75, False, ()), (4540.8, 1.59, False, ()), (680.5, 21.24, False, ()), (135.4, 25.96, False, ())]
    # runners-up, each beyond noise: ours at chunk 2048, flex at 512, FlashInfer's one-call step in both mixed steps
    assert [r.margin.behind for r in s.rows] == ["triton-paged-prefill", "flex", "flashinfer-prefill-paged",
                                                 "flashinfer-prefill-paged"]
    assert [(r.workload.batch, r.workload.q_len, r.workload.kv_len) for r in s.rows[2:]] == [(34, 2048, 8192),
                                                                                           (65, 512, 4096)]
    # chunking doubles sdpa-cudnn's time per prompt (its bottom-right causal path) and barely moves FlashInfer's
    assert [(round(r.reference_vs_unchunked, 2), round(r.winner_vs_unchunked, 2)) for r in s.rows[:2]] == [
        (2.0, 1.02), (1.89, 1.06)]
