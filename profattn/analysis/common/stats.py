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


# ---- paired samples: A/B rounds ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """Number of sign patterns of ``n`` distinct absolute values with Wilcoxon signed-rank statistic ``T+ = t``, for
    ``t = 0..n(n+1)/2`` (the coefficients of ``∏ (1 + q^i)``; they sum to ``2^n``)."""
    counts = [1]
    for i in range(1, n + 1):
        nxt = counts + [0] * i
        for t, c in enumerate(counts):
            nxt[t + i] += c
        counts = nxt
    return tuple(counts)


def signed_rank_cdf(k: int, n: int) -> float:
    """``P(T+ ≤ k)`` under the null (differences symmetric about 0), exact (``n`` up to a few hundred)."""
    if k < 0:
        return 0.0
    counts = _signed_rank_counts(n)
    return sum(counts[: k + 1]) / 2**n


def paired_ratio(base: Sequence[float], head: Sequence[float], *, level: float = 0.95) -> RatioEstimate:
    """Estimate ``head / base`` from *paired* positive samples (``head[i]`` taken next to ``base[i]``: one A/B round),
    with a ``level`` interval.

    Method (Hollander, Wolfe & Chicken 2014, §3.2–3.3 — R's ``wilcox.test(paired = TRUE, conf.int = TRUE)``):
    ``x_i = ln(head_i) − ln(base_i)``; the estimate is the one-sample Hodges–Lehmann shift, the median of the Walsh
    averages ``(x_i + x_j) / 2`` (``i ≤ j``); the interval ``[W_(k), W_(N+1−k)]`` of the ``N = n(n+1)/2`` sorted
    averages, ``k`` the largest with ``P(T+ ≤ k − 1) ≤ α/2`` under the exact signed-rank null (the widest,
    ``[min, max]``, with its own coverage when the level is out of reach: 5 rounds reach 93.8 %). A drift that moves
    both sides of a round alike cancels in ``x_i``.

    Raises:
        ValueError: different lengths, an empty side, a non-positive or non-finite sample, or ``level`` outside (0, 1).
    """
    if len(base) != len(head) or not base:
        raise ValueError("paired samples need the same positive number of samples a side")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if any(not (x > 0 and math.isfinite(x)) for x in (*base, *head)):
        raise ValueError("latency samples must be positive and finite")
    n = len(base)
    x = [math.log(h) - math.log(b) for b, h in zip(base, head)]
    walsh = sorted((x[i] + x[j]) / 2 for i in range(n) for j in range(i, n))
    est = math.exp(median(walsh))
    if n < MIN_SAMPLES:
        return RatioEstimate(est, None, None, None, n, n)
    alpha_half = (1 - level) / 2
    big = len(walsh)
    k = 0
    while k + 1 <= big // 2 and signed_rank_cdf(k, n) <= alpha_half:
        k += 1
    k = max(k, 1)
    coverage = 1 - 2 * signed_rank_cdf(k - 1, n)
    return RatioEstimate(est, math.exp(walsh[k - 1]), math.exp(walsh[big - k]), coverage, n, n)


# ---- many cells at once: the standard error, run-wide drift, a family-wise error rate ---------------------------


def log_se(est: RatioEstimate) -> tuple[float, float] | None:
    """Standard errors of ``ln(ratio)`` read off a rank interval, one per side: ``(ln ratio − ln lo) / z`` (how far
    the estimate may overstate the change: the one a *slower* test needs) and ``(ln hi − ln ratio) / z`` (for a
    *faster* test), ``z`` the normal quantile of the interval's exact coverage (``z = 1.645`` for the 90 % of 3 + 3
    samples). A rank interval is not symmetric when the noise is skewed (a slow outlier widens only its side), so each
    one-sided test reads its own side; outliers enlarge these errors instead of moving the estimate. None without an
    interval."""
    if est.lo is None or est.hi is None or est.confidence is None:
        return None
    z = NormalDist().inv_cdf((1 + est.confidence) / 2)
    centre = math.log(est.ratio)
    return max(centre - math.log(est.lo), 0.0) / z, max(math.log(est.hi) - centre, 0.0) / z


def median_interval(values: Sequence[float], *, level: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free interval for the median of ``values``: the order statistics ``[x_(k), x_(n+1−k)]``, ``k`` the
    largest with ``P(B ≤ k − 1) ≤ α/2`` for ``B ~ Binomial(n, 1/2)`` (Hollander, Wolfe & Chicken 2014, §3.6); returns
    ``(lo, hi, coverage)``, the widest ``[min, max]`` with its own coverage when the level is out of reach.

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    n = len(xs)

    def cdf(k: int) -> float:
        return sum(math.comb(n, i) for i in range(k + 1)) / 2**n

    k = 0
    while k + 1 <= n // 2 and cdf(k) <= (1 - level) / 2:
        k += 1
    k = max(k, 1)
    return xs[k - 1], xs[n - k], 1 - 2 * cdf(k - 1)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm, "A simple sequentially rejective multiple test procedure", Scand. J.
    Statist. 6 (1979) 65–70): rejecting every hypothesis whose adjusted p-value is below ``α`` keeps the probability of
    any false rejection among them at most ``α``, whatever their dependence. Same order as given."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz; Press et al., *Numerical Recipes*,
    3rd ed., §6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def _regularized_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b)``, the regularized incomplete beta function, for ``0 ≤ x ≤ 1``."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def student_t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom (through the incomplete beta function:
    ``P(|T| > t) = I_{df/(df+t²)}(df/2, 1/2)``); ``df`` ≥ 200 uses the normal distribution.

    Raises:
        ValueError: ``df`` not positive.
    """
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df >= 200:
        return 1 - NormalDist().cdf(t)
    tail = 0.5 * _regularized_beta(df / 2, 0.5, df / (df + t * t))
    return tail if t > 0 else 1 - tail


@functools.lru_cache(maxsize=1024)
def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`student_t_sf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    lo, hi = -1e7, 1e7
    for _ in range(120):
        mid = (lo + hi) / 2
        if 1 - student_t_sf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
