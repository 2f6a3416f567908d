"""Rates: what load a deployment sustains. Latency quantiles of a :class:`~profattn.analysis.simulation.replay.SimulationRun`
(:class:`LatencySummary`), its SLO attainment at one rate (:class:`RatePoint`), and the search for the highest rate
scale that still meets the SLO (:func:`search_rate` → :class:`RateSearch`).

In: simulation runs at scaled arrival rates and an :class:`~profattn.analysis.simulation.replay.SLO`; out: typed
records of latencies and rates. Nothing here schedules or prices a step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from profattn.analysis.simulation.replay import SLO, SimulationRun
from profattn.workload.requests import RequestTrace

__all__ = ["SEARCH_FLOOR", "LatencySummary", "RatePoint", "RateSearch", "rate_point", "search_rate",
           "weighted_quantiles"]

#: The lowest rate scale (of the trace's own rate) a rate search descends to: a deployment that misses the SLO at
#: 1/32 of the load it was asked about "meets it nowhere ≥ 1/32×" — the search stops there (each halving below costs
#: one more run, the slowest ones: a stopped run at a low rate simulates most of a long trace before it fails).
SEARCH_FLOOR = 1.0 / 32


def weighted_quantiles(values: np.ndarray, weights: np.ndarray | None, qs: Sequence[float]) -> list[float | None]:
    """Quantiles ``qs`` (0–1) of ``values`` (NaN left out) with optional ``weights`` (a value counted ``weight``
    times): the smallest value whose cumulative weight reaches ``q`` of the total. None for no values."""
    v = np.asarray(values, dtype=np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    keep = ~np.isnan(v) & (w > 0)
    v, w = v[keep], w[keep]
    if v.size == 0:
        return [None for _ in qs]
    order = np.argsort(v, kind="stable")
    v, cw = v[order], np.cumsum(w[order])
    total = cw[-1]
    return [float(v[min(int(np.searchsorted(cw, q * total, side="left")), v.size - 1)]) for q in qs]


@dataclass(frozen=True)
class LatencySummary:
    """p50 / p90 / p99 in seconds (None when there is no sample)."""

    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, values: np.ndarray, weights: np.ndarray | None = None) -> "LatencySummary":
        return cls(*weighted_quantiles(values, weights, (0.5, 0.9, 0.99)))


@dataclass(frozen=True)
class RatePoint:
    """A deployment at one rate scale: the arrival ``rate_per_s``, the share of requests meeting the SLO (a lower
    bound when ``stopped``), ``meets``, TTFT / TPOT p90 (None when stopped), ``goodput_per_s`` (requests meeting
    the SLO per second of arrivals), the simulation's ``steps`` and ``wall_s``, its preemptions and peak pages, and
    its steps' attention and rest time (seconds); ``ttft_failed`` / ``tpot_failed``: requests that missed each target
    (a stopped run: as counted until it stopped, the requests still waiting past their TTFT included); ``peak_running``:
    the most requests in one step (decoding plus prefilling)."""

    scale: float
    rate_per_s: float
    attainment: float
    meets: bool
    stopped: bool
    ttft_p90_s: float | None
    tpot_p90_s: float | None
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    goodput_per_s: float
    steps: int
    wall_s: float
    preemptions: int
    peak_pages: int
    attention_s: float = 0.0
    rest_s: float = 0.0
    ttft_failed: int = 0
    tpot_failed: int = 0
    peak_running: int = 0


@dataclass(frozen=True)
class RateSearch:
    """The highest rate scale found meeting the SLO: ``best_scale`` (None when even the lowest tried fails) and its
    rate, ``points`` in the order simulated, the search's relative resolution ``resolution`` (hi / lo − 1 at the end)
    and whether it hit ``ceiling`` (the largest scale tried still met the SLO: the answer is a lower bound);
    ``floor``: where nothing met the SLO, the lowest scale tried (the search's floor: it meets the SLO nowhere at or
    above it), else None."""

    best_scale: float | None
    best_rate_per_s: float | None
    points: tuple[RatePoint, ...]
    resolution: float
    ceiling: bool
    #: the simulation at ``best_scale`` (its steps are the schedule the findings price every deployment on)
    best_run: SimulationRun | None = field(default=None, repr=False, compare=False)
    floor: float | None = None


def rate_point(run: SimulationRun, slo: SLO, trace: RequestTrace) -> RatePoint:
    """``run`` (of ``trace`` at its scale) judged against ``slo``: attainment, latency quantiles (None when stopped),
    goodput per second of the trace's arrivals, the failures by target and the step counts."""
    att = run.attainment(slo)
    meets = not run.stopped and att >= slo.attainment - 1e-12
    ttft = LatencySummary.of(run.ttft_s) if not run.stopped else LatencySummary(None, None, None)
    tpot = LatencySummary.of(run.tpot_s) if not run.stopped else LatencySummary(None, None, None)
    span = trace.duration_s or 1.0
    st = run.steps
    attn = float(st.attn_decode_us.sum() + st.attn_prefill_us.sum()) * 1e-6
    if run.stopped:
        ttft_f, tpot_f = run.ttft_failures, run.tpot_failures
    else:
        ttft_f = int((~(run.ttft_s <= slo.ttft_s)).sum())
        tpot_f = int((run.tpot_s > slo.tpot_s).sum())
    running = int((st.num_decode + st.prefill_seqs).max()) if len(st) else 0
    return RatePoint(run.rate_scale, run.rate_per_s, att, meets, run.stopped, ttft.p90, tpot.p90, ttft.p99, tpot.p99,
                     float(run.meets(slo).sum()) / span, len(run.steps), run.wall_s, run.num_preemptions, run.peak_pages,
                     attn, float(st.rest_us.sum()) * 1e-6, ttft_f, tpot_f, running)


def search_rate(simulate_at: Callable[[float], SimulationRun], trace: RequestTrace, slo: SLO, *, start: float = 1.0,
                resolution: float = 0.05, max_scale: float = 256.0, min_scale: float = SEARCH_FLOOR,
                first: SimulationRun | None = None, hint: float | None = None) -> RateSearch:
    """The highest rate scale meeting ``slo``: from ``start``, steps of 2× up (or down) until the answer changes,
    then geometric bisection until the bracket is within ``resolution``. With ``hint`` (another deployment's answer)
    the first step goes to the hint and the next ones by 1 + 2 × ``resolution``, squared at every further step (up
    to 2×). ``simulate_at(scale)`` runs the
    deployment (with early stopping); ``first``: a finished run at ``start`` to reuse. Going down, the last step is
    cut to ``min_scale`` (default :data:`SEARCH_FLOOR`): a deployment that fails there is reported as meeting the SLO
    nowhere at or above it (``best_scale`` None, ``floor`` = the lowest scale tried), not searched lower. Assumes the
    share of requests within the SLO falls as the rate rises."""
    points: list[RatePoint] = []
    best: dict[float, SimulationRun] = {}

    def at(scale: float) -> bool:
        run = first if (first is not None and scale == start) else simulate_at(scale)
        p = rate_point(run, slo, trace.scaled(scale))
        points.append(p)
        if p.meets and (not best or scale > next(iter(best))):
            best.clear()
            best[scale] = run
        return p.meets

    def steps(x: float, up: bool):
        if hint is not None and (hint > x if up else hint < x):
            yield hint
            x = hint
        f = 2.0 if hint is None else 1.0 + 2.0 * resolution
        while True:
            x = x * f if up else x / f
            yield x
            if hint is not None:
                f = min(2.0, f * f)  # from a hint: steps that grow until they reach the plain search's

    lo: float | None
    hi: float | None
    if at(start):
        lo, hi = start, None
        for nxt in steps(start, True):
            if nxt > max_scale:
                return RateSearch(lo, lo * trace.rate_per_s, tuple(points), 1.0, True, best.get(lo))
            if at(nxt):
                lo = nxt
            else:
                hi = nxt
                break
    else:
        lo, hi = None, start
        for nxt in steps(start, False):
            if nxt < min_scale * (1 - 1e-12):
                if hi <= min_scale * (1 + 1e-12):
                    return RateSearch(None, None, tuple(points), 1.0, False, floor=hi)
                nxt = min_scale  # the last step down lands on the floor itself
            if at(nxt):
                lo = nxt
                break
            hi = nxt
    assert lo is not None and hi is not None
    while hi / lo > 1 + resolution:
        mid = math.sqrt(lo * hi)
        if at(mid):
            lo = mid
        else:
            hi = mid
    return RateSearch(lo, lo * trace.rate_per_s, tuple(points), hi / lo - 1, False, best.get(lo))
