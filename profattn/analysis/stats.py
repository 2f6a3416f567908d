"""The latency-change estimate ``profattn compare`` reasons with: a Hodges–Lehmann ratio with an exact
distribution-free confidence interval from the Mann–Whitney (Wilcoxon rank-sum) statistic.

Why this and not a bootstrap: a comparison has few samples per cell (``--repeat 5`` gives five medians per
side). A percentile bootstrap of the median ratio from 5 + 5 samples takes only a handful of distinct
values and under-covers; the rank-sum interval is exact for any continuous distribution at any sample size
(its coverage is a known number, reported with the interval).

Method (Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed., Wiley 2014, §4.2–4.3;
Bauer, "Constructing confidence sets using rank statistics", JASA 67 (1972) 687–690 — the same interval as
R's ``wilcox.test(conf.int = TRUE)``):

1. Work on log latencies, so a shift is a ratio: ``d_ij = ln(head_i) − ln(base_j)`` for all ``n·m`` pairs.
2. Estimate: the Hodges–Lehmann shift ``median(d_ij)``; ratio = ``exp`` of it.
3. Interval: with the ``d`` sorted, ``[d_(k), d_(nm+1−k)]`` where ``k`` is the largest integer with
   ``P(U ≤ k − 1) ≤ α/2`` under the null distribution of the Mann–Whitney ``U`` (exact, by counting the
   arrangements with the Gaussian-binomial recursion, for ``n·m ≤ 2500``; normal approximation with
   continuity correction above). Coverage = ``1 − 2·P(U ≤ k − 1)`` ≥ the nominal level. When even ``k = 1``
   cannot reach the nominal level (e.g. 3 + 3 samples: at most 90 %), the widest interval ``[min d, max d]``
   is used and its lower coverage is reported.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist, median

#: Fewest samples per side for an interval: below it the comparison says "too few repeats".
MIN_SAMPLES = 3
#: Largest n·m for the exact null distribution of U (the counts are Python ints, exact).
EXACT_LIMIT = 2500


@functools.lru_cache(maxsize=256)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """Number of arrangements of ``n`` + ``m`` distinct values with Mann–Whitney ``U = u``, for ``u = 0..nm``
    (the coefficients of the Gaussian binomial ``[n+m choose n]_q``; they sum to ``C(n+m, n)``)."""
    # c[j][u] for sizes (i, j): recurrence f(i, j, u) = f(i-1, j, u-j) + f(i, j-1, u).
    prev = [[1] for _ in range(m + 1)]  # i = 0: one arrangement, U = 0, for every j
    for i in range(1, n + 1):
        cur: list[list[int]] = [[1]]  # j = 0
        for j in range(1, m + 1):
            size = i * j + 1
            row = [0] * size
            a = prev[j]  # f(i-1, j, ·), shifted by j
            for u, c in enumerate(a):
                row[u + j] += c
            b = cur[j - 1]  # f(i, j-1, ·)
            for u, c in enumerate(b):
                row[u] += c
            cur.append(row)
        prev = cur
    return tuple(prev[m])


def u_cdf(k: int, n: int, m: int) -> float:
    """``P(U ≤ k)`` under the null (no shift), exact for ``n·m ≤`` :data:`EXACT_LIMIT`, else the normal
    approximation with continuity correction (mean ``nm/2``, variance ``nm(n+m+1)/12``)."""
    if k < 0:
        return 0.0
    if n * m <= EXACT_LIMIT:
        counts = _u_counts(n, m)
        return sum(counts[: k + 1]) / math.comb(n + m, n)
    mu, sigma = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
    return NormalDist().cdf((k + 0.5 - mu) / sigma)


@dataclass(frozen=True)
class RatioEstimate:
    """head / base latency: the Hodges–Lehmann ratio and its rank-sum confidence interval.

    ``ratio`` = exp(median of ln head_i − ln base_j); ``lo``/``hi``: the interval on the ratio (None when
    either side has fewer than :data:`MIN_SAMPLES` samples); ``confidence``: its exact coverage (e.g. 0.968
    for 5 + 5 samples at a nominal 0.95); ``n_base``/``n_head``: samples per side.
    """

    ratio: float
    lo: float | None
    hi: float | None
    confidence: float | None
    n_base: int
    n_head: int

    @property
    def change(self) -> float:
        """Relative change of the estimate: ``ratio − 1`` (+0.10 = 10 % slower)."""
        return self.ratio - 1.0


def hodges_lehmann_ratio(base: Sequence[float], head: Sequence[float], *, level: float = 0.95) -> RatioEstimate:
    """Estimate ``head / base`` from independent positive samples (latencies, µs) with a ``level`` interval.

    Raises:
        ValueError: an empty side, a non-positive or non-finite sample, or ``level`` outside (0, 1).
    """
    if not base or not head:
        raise ValueError("both sides need at least one sample")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if any(not (x > 0 and math.isfinite(x)) for x in (*base, *head)):
        raise ValueError("latency samples must be positive and finite")
    n, m = len(head), len(base)
    diffs = sorted(math.log(h) - math.log(b) for h in head for b in base)
    est = math.exp(median(diffs))
    if n < MIN_SAMPLES or m < MIN_SAMPLES:
        return RatioEstimate(est, None, None, None, m, n)
    alpha_half = (1 - level) / 2
    k = 0
    while k + 1 <= n * m // 2 and u_cdf(k, n, m) <= alpha_half:  # P(U <= (k+1) - 1) <= alpha/2 -> k+1 admissible
        k += 1
    k = max(k, 1)  # nominal level unreachable: the widest interval, with its own (lower) coverage
    nm = n * m
    lo, hi = diffs[k - 1], diffs[nm - k]
    coverage = 1 - 2 * u_cdf(k - 1, n, m)
    return RatioEstimate(est, math.exp(lo), math.exp(hi), coverage, m, n)
