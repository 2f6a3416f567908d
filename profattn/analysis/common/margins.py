"""The one noise rule every "wins" in profattn uses: a backend's judged time (:class:`JudgedTime`) and how far the
slower of two trails the faster (:class:`Margin`, :func:`judged_margin`), with :data:`NOISE_FRACTION`.

Inputs are timed cells (:class:`profattn.results.CellResult`) or judged times summed over a prompt's chunks; outputs
are typed records. Shared by the verdict (:mod:`profattn.analysis.run.verdict`), the selection policy and the
simulator's head-to-head, so it sits below all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from profattn.analysis.common.stats import MIN_SAMPLES, hodges_lehmann_ratio
from profattn.results import CellResult

#: Medians closer than this relative difference are within noise (the first part of :func:`margin`'s rule).
NOISE_FRACTION = 0.02


class TieReason(Enum):
    """Which part of :func:`margin`'s rule made two cells a tie (None when the slower is clearly slower)."""

    CLOSE_MEDIANS = "medians under 2 % apart"  #: (slower − faster) / faster < :data:`NOISE_FRACTION`
    SPREADS_OVERLAP = "spreads overlap"  #: each median lies inside the other cell's p10–p90 range
    INTERVAL_REACHES_ONE = "interval reaches a tie"  #: with repeats, the 95 % interval of the ratio reaches 1 + NOISE_FRACTION


@dataclass(frozen=True)
class Margin:
    """How far ``behind`` (the slower cell) trails ``ahead`` (the faster), and whether that is noise.

    ``ratio`` = behind latency / ahead latency (≥ 1); ``lo``/``hi``: the Hodges–Lehmann 95 % interval of
    that ratio from the cells' repeat medians (None without ≥ 3 repeats a side, :mod:`profattn.analysis.common.stats`);
    ``tie``: the difference is within noise, ``why`` says by which part of the rule.
    """

    ahead: str
    behind: str
    ahead_us: float
    behind_us: float
    ratio: float
    tie: bool
    why: TieReason | None = None
    lo: float | None = None
    hi: float | None = None

    @property
    def percent(self) -> float:
        """The slower cell's extra time in % of the faster's (``(ratio − 1) · 100``)."""
        return (self.ratio - 1.0) * 100.0


@dataclass(frozen=True)
class JudgedTime:
    """The time one backend is judged on for one call, or for a sequence of calls (a prompt's chunks), µs:
    ``median_us`` and the ``p10_us``–``p90_us`` range of the reps behind it (graph replay where captured, else
    eager launches), and ``samples_us``, one median per repeat (``--repeat``; one sample without repeats)."""

    backend: str
    median_us: float
    p10_us: float
    p90_us: float
    samples_us: tuple[float, ...]


def judged_time(cell: CellResult) -> JudgedTime:
    """The :class:`JudgedTime` of one cell: its judged timing (:attr:`CellResult.latency_us`: the CUDA-graph
    replay where captured, else the eager launches) and :attr:`CellResult.latency_samples_us`.

    Raises:
        ValueError: the cell has no timing.
    """
    t = cell.judged_timing  # over all repeats (issue 33: the first sample alone named lucky winners)
    if t is None:
        raise ValueError(f"{cell.cell_id} has no timing")
    return JudgedTime(cell.backend, t.median_us, t.p10_us, t.p90_us, cell.latency_samples_us)


def summed_time(cells: Sequence[CellResult]) -> JudgedTime:
    """One backend's time over ``cells`` run one after another (a prompt's chunks), µs: the sum of their judged
    medians, of their p10s and of their p90s (quantiles add when the calls' times move together, so the band
    is never narrower than independent calls' would be: a sum is not called clearly slower on a narrower
    spread than its parts'), and per repeat ``i`` the sum of repeat ``i``'s medians (a regime's cells are timed
    round-robin, so repeat ``i`` of every call is one round); a single sample (the summed median) when the
    cells' repeat counts differ.

    Raises:
        ValueError: ``cells`` is empty, holds an untimed cell, or mixes backends.
    """
    if not cells:
        raise ValueError("summed_time needs at least one cell")
    parts = [judged_time(c) for c in cells]
    if len({p.backend for p in parts}) != 1:
        raise ValueError(f"summed_time over several backends: {sorted({p.backend for p in parts})}")
    median = sum(p.median_us for p in parts)
    n = {len(p.samples_us) for p in parts}
    samples = (tuple(sum(rep) for rep in zip(*(p.samples_us for p in parts))) if len(n) == 1 else (median,))
    return JudgedTime(parts[0].backend, median, sum(p.p10_us for p in parts), sum(p.p90_us for p in parts), samples)


def margin(a: CellResult, b: CellResult) -> Margin:
    """Compare two timed cells with the one noise rule every "wins" in profattn uses
    (:func:`judged_margin` on their :func:`judged_time`).

    Raises:
        ValueError: either cell has no latency.
    """
    if a.latency_us is None or b.latency_us is None:
        raise ValueError(f"margin needs two timed cells ({a.cell_id}, {b.cell_id})")
    return judged_margin(judged_time(a), judged_time(b))


def judged_margin(a: JudgedTime, b: JudgedTime) -> Margin:
    """The one noise rule every "wins" in profattn uses, on two judged times (cells, or prompts summed over
    their chunks).

    The slower of the two is *clearly* slower only when all of these hold: its median is at least
    :data:`NOISE_FRACTION` (2 %) above the faster's; the two medians do not each lie inside the other's
    p10–p90 range (the spreads of the judged timing — graph replay where captured — do not overlap; one cell's
    long tail alone does not make a 19× gap a tie); and, when both have
    ≥ 3 repeat samples (``--repeat``), the 95 % Hodges–Lehmann interval of the ratio lies wholly above
    1 + NOISE_FRACTION. Otherwise the two tie. Equal medians: ``a`` is the one ahead.
    """
    fast, slow = (a, b) if a.median_us <= b.median_us else (b, a)
    ratio = slow.median_us / fast.median_us
    lo = hi = None
    sf, ss = fast.samples_us, slow.samples_us
    if min(len(sf), len(ss)) >= MIN_SAMPLES:
        est = hodges_lehmann_ratio(sf, ss)
        lo, hi = est.lo, est.hi
    why = None
    if ratio - 1.0 < NOISE_FRACTION:
        why = TieReason.CLOSE_MEDIANS
    elif fast.p90_us >= slow.median_us and slow.p10_us <= fast.median_us:
        why = TieReason.SPREADS_OVERLAP
    elif lo is not None and lo <= 1.0 + NOISE_FRACTION:
        why = TieReason.INTERVAL_REACHES_ONE
    return Margin(fast.backend, slow.backend, fast.median_us, slow.median_us, ratio, why is not None, why, lo, hi)


def within_noise(a: CellResult, b: CellResult) -> bool:
    """Are ``a`` and ``b`` indistinguishable by :func:`margin`'s rule? False when either is untimed."""
    if a.latency_us is None or b.latency_us is None:
        return False
    return margin(a, b).tie
