"""One noise rule for every "wins": :func:`margin` on hand-made timings, and the verdict's standings and
sentences built from it (a training tie, a decode tie with the training winner, a real crossover)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from factories import SEED, cell, repeated, run
from profattn.analysis.common.margins import TieReason, margin, within_noise
from profattn.analysis.comparison.compare import compare_runs
from profattn.analysis.run.verdict import Standing, verdict
from profattn.report.verdict import headline, summary
from profattn.results import Timing

TRAIN, PREFILL, D512, D2048, D8192 = SEED.workloads

def only(phase: str) -> str:
    """issue 33: a one-regime run's verdict points to ``--regime all``."""
    return (f" Only {phase} was measured: `profattn profile --regime all` adds the other regimes, training among them, "
            "whose winner the verdict asks about.")



def spread(c, lo: float, hi: float):
    """``c`` with p10/p90 set (µs)."""
    t = c.timing
    return replace(c, timing=Timing(t.median_us, lo, hi, t.min_us, t.reps, t.method))


def test_two_percent_threshold():
    a, b = cell(D512, "a", 100.0), cell(D512, "b", 101.9)
    m = margin(b, a)  # argument order does not matter: the faster is "ahead"
    assert (m.ahead, m.behind, m.tie, m.why) == ("a", "b", True, TieReason.CLOSE_MEDIANS)
    assert m.ratio == pytest.approx(1.019) and m.percent == pytest.approx(1.9)
    m = margin(a, cell(D512, "c", 102.5))  # factories' spreads: p90 = 1.02 × median → 102.0 < 102.5
    assert (m.tie, m.why) == (False, None)


def test_overlapping_spreads_tie_beyond_two_percent():
    a = spread(cell(D512, "a", 100.0), 90.0, 110.0)  # noisy cells: each median inside the other's p10–p90
    b = spread(cell(D512, "b", 105.0), 95.0, 115.0)
    m = margin(a, b)
    assert (m.tie, m.why) == (True, TieReason.SPREADS_OVERLAP)
    # one cell's long tail is not an overlap: on a loaded CPU a 505 µs median with a 24 ms p90 made a cell
    # 19× (and 120×) slower "a tie"
    tail = spread(cell(D512, "fast", 505.0), 480.0, 24_000.0)
    m = margin(tail, spread(cell(D512, "slow", 9_600.0), 9_000.0, 10_500.0))
    assert not m.tie and m.ratio == pytest.approx(9_600 / 505)


def test_repeats_interval_decides_when_medians_and_spreads_do_not():
    """5 repeats a side; the medians are 3 % apart with tight per-repeat spreads, but the repeat medians
    interleave: the 95 % interval of the ratio reaches 1.02, so a tie; separated repeats are a clear win."""
    a = repeated(cell(D512, "a", 100.0), [100.0, 97.0, 103.0, 99.0, 104.0])
    b = repeated(cell(D512, "b", 103.0), [103.0, 98.0, 106.0, 101.0, 107.0])
    m = margin(a, b)
    # issue 33: the spread judged now holds the spread between the repeats too, so they tie on it first
    assert m.lo is not None and m.lo <= 1.02 and (m.tie, m.why) == (True, TieReason.SPREADS_OVERLAP)
    c = repeated(cell(D512, "c", 110.0), [110.0, 109.5, 110.5, 110.2, 109.8])
    a2 = repeated(cell(D512, "a", 100.0), [100.0, 99.5, 100.5, 100.2, 99.8])
    m = margin(a2, c)
    # 5 + 5 samples: the exact 95 % interval starts at the 3rd smallest of the 25 pairwise ratios
    # (P(U ≤ 2) = 4/252 ≤ 0.025 < P(U ≤ 3) = 7/252): 109.5/100.5, 109.8/100.5, then 109.5/100.2
    assert m.lo == pytest.approx(109.5 / 100.2) and not m.tie


def test_untimed_cells():
    assert not within_noise(cell(D512, "a", 5.0), cell(D512, "b", None))
    with pytest.raises(ValueError):
        margin(cell(D512, "a", 5.0), cell(D512, "b", None))


def test_a_training_tie_names_both_backends_and_is_stable():
    """On the CPU two identical runs crowned eager and sdpa-flash in turn, 1.2 % apart: both runs now say
    they tie, and `compare` does not call the swap a verdict change."""
    one = run([cell(TRAIN, "eager", 8000.0), cell(TRAIN, "sdpa-flash", 8096.0), cell(D512, "eager", 50.0), cell(D512, "sdpa-flash", 80.0)])
    two = run([cell(TRAIN, "eager", 8097.0), cell(TRAIN, "sdpa-flash", 8000.0), cell(D512, "eager", 50.0), cell(D512, "sdpa-flash", 80.0)])
    v1, v2 = verdict(one), verdict(two)
    assert (v1.training_winner, v1.training_tied) == ("eager", ("sdpa-flash",))
    assert (v2.training_winner, v2.training_tied) == ("sdpa-flash", ("eager",))
    assert summary(v1).startswith("eager and sdpa-flash tie in training (1.2 % apart, within noise); "
                                  "the comparisons below use eager, the faster median.")
    changes = compare_runs(one, two, force=True).verdict_changes
    assert [c for c in changes if c.workload is None] == []  # the swap inside noise is no verdict change
    # a backend outside the base's tie winning beyond noise is a change
    clear = run([cell(TRAIN, "eager", 8097.0), cell(TRAIN, "sdpa-flash", 8000.0), cell(TRAIN, "sdpa-cudnn", 6000.0)])
    assert [(c.base_winner, c.head_winner) for c in compare_runs(one, clear, force=True).verdict_changes
            if c.workload is None] == [("eager", "sdpa-cudnn")]


def test_depends_on_context_length_only_with_a_loss_beyond_noise():
    base = [cell(TRAIN, "a", 1000.0), cell(TRAIN, "b", 1500.0)]
    all_ties = run(base + [cell(D512, "a", 10.1), cell(D512, "b", 10.0), cell(D8192, "a", 40.0), cell(D8192, "b", 40.3)])
    v = verdict(all_ties)
    assert [r.standing for r in v.decode_rows] == [Standing.TIES, Standing.STAYS]
    s = summary(v)
    assert "depends on context length" not in s and "never beaten beyond noise" in s
    assert "kv 512 (b 1.0 % faster)" in s
    mixed = run(base + [cell(D512, "a", 20.0), cell(D512, "b", 10.0), cell(D8192, "a", 40.0), cell(D8192, "b", 60.0)])
    v = verdict(mixed)
    assert [r.standing for r in v.decode_rows] == [Standing.CHANGES, Standing.STAYS]
    assert summary(v) == ("a wins training, 1.50× ahead of b. At decode it holds at kv 8192, but is beaten beyond noise "
                          "at kv 512 (b, 2.00× faster): the verdict depends on context length.")
    h = headline(v.decode_rows[0], v)
    assert h == ("decode kv 512 (page 16): the training winner a does not stay the winner — b wins at 10.0 µs, "
                 "2.00× faster than a (20.0 µs)")


def test_no_headline_calls_a_tie_a_speedup():
    r = run([cell(TRAIN, "a", 1000.0), cell(TRAIN, "b", 1500.0), cell(D2048, "a", 10.0), cell(D2048, "b", 9.9)])
    v = verdict(r)
    h = headline(v.rows[0], v)
    assert "× faster" not in h and "wins" not in h and "a tie" in h
    assert h == ("decode kv 2048 (page 16): b is fastest (9.90 µs) but only 1.0 % ahead of the training winner a "
                 "(10.0 µs), within noise: a tie — the training winner is not beaten here")


def test_prefill_only_and_decode_only_runs_name_their_winners():
    pre = verdict(run([cell(PREFILL, "sdpa-cudnn", 280.0), cell(PREFILL, "flex", 415.0)]))
    assert summary(pre) == "This run has no training workload; winners: prefill kv 2048 → sdpa-cudnn." + only("prefill")
    dec = verdict(run([cell(D512, "x", 12.2), cell(D512, "y", 12.4), cell(D8192, "x", 40.0), cell(D8192, "y", 60.0)]))
    assert summary(dec) == ("This run has no training workload; winners: decode kv 512 (page 16) → x ≈ y (a tie); "
                            "decode kv 8192 (page 16) → x." + only("decode"))
    assert headline(dec.rows[0], dec) == ("decode kv 512 (page 16): x is fastest at 12.2 µs — a tie with y (12.4 µs, "
                                          "1.6 % slower, within noise)")  # no per-row "(this run has no training workload …)"
