"""Per-backend cost models: a backend's latency on a workload predicted from the physics that decides a kernel's
time, fitted on every measured cell of that backend, with an uncertainty. The selection policy
(:mod:`profattn.analysis.selection.policy`) picks the lowest predicted latency among a workload's candidates.

The model (one per backend and :class:`Regime`): latency in µs is a non-negative combination of

* ``launch`` — 1: the launch floor (a kernel launch, a host-side dispatch, a combine);
* ``bytes`` — MB (10⁶ bytes) the kernel must move, the workload's byte ledger as the kernel read it (a dense
  kernel on a paged workload reads the contiguous copy: :func:`~profattn.store.read_workload`);
* ``bytes_idle`` — ``bytes × max(0, SMs / items − 1)``: the same bytes when fewer work items than SMs exist to
  move them (``items``: sequences × KV heads for a decode-like call of ≤ 16 query rows per sequence, the
  one-CTA-per-(sequence, KV head) kernel's grid; query tiles of 128 rows × query heads otherwise) — a kernel that
  splits the KV length gets a small coefficient here, one that does not a large one;
* ``flops`` — GFLOP executed (:meth:`~profattn.workload.Workload.flops_for_pairs` of the pairs the kernel
  computed: a padding backend's ``executed_pairs``, so a padded or masked cell explains its own time and teaches
  nothing false about plain calls);
* ``flops_idle`` — ``flops × max(0, SMs / tiles − 1)`` (tiles: 128-row query tiles × query heads): a compute-bound
  call too small to fill the GPU.

The sum is the additive form of a roofline (launch + transfer + compute) with a per-kernel efficiency on each
term (Williams, Waterman and Patterson, "Roofline", CACM 2009, for the two roofs; the idle terms are the wave
under-fill of a grid smaller than the SM count). Coefficients minimise the squared *relative* error (each cell's
row divided by its measured time), by non-negative least squares (``scipy.optimize.lsq_linear``, method bvls).

Local correction: what the terms miss (a library's internal split or tile heuristic switching at some batch or
head count) is left in the cells' residuals; a prediction is multiplied by ``exp(Σ wᵢ rᵢ / (Σ wᵢ + λ))`` over the
model's cells, ``rᵢ = log(measured / model)``, ``wᵢ = exp(−dᵢ² / 2h²)`` with ``dᵢ`` the distance in octaves of
(batch, kv_len, q_len, group, bytes) and :data:`HEAD_DIM_WEIGHT` times that of head_dim (kernels change tiles
with the head size, so a head_dim of 256 is answered from 256s) (Nadaraya–Watson kernel regression of the
residual; :data:`BANDWIDTH_OCTAVES` = h, :data:`SHRINK` = λ): near measured shapes the answer follows them, far from
them it is the terms' alone.

Uncertainty: ``sigma`` is the model's relative error, the RMS of ``log(measured / model)`` over its cells scaled by
``sqrt(n / (n − k))`` for ``k`` fitted coefficients (the usual degrees-of-freedom correction), floored at
:data:`MIN_SIGMA` and, for models of fewer than :data:`FEW_CELLS` workloads, at :data:`FEW_CELLS_SIGMA`. A prediction
outside the cells' span — a byte or FLOP count, batch, KV length or query length beyond the fitted range (distance
in octaves), or a head_dim / GQA group the model never saw — is marked *extrapolated* and its σ grows with the
distance (:data:`SIGMA_PER_OCTAVE`, :data:`UNSEEN_SIGMA`).

Regimes (:class:`Regime`): a backend runs different kernels per phase, layout, dtype and head size, so it gets one
model per (phase, layout read, KV dtype, sliding window or not, per-sequence lengths or not, a chunk after a cached
prefix or not, compute dtype, head_dim class: ≤ 64, ≤ 128, larger). No model learnt in one regime prices another. Ragged batches (lengths drawn
at random) are no regime: their lengths are not known without torch, so only an exact measurement answers them.

A prediction is never below the roofline (:meth:`CostModels.floor_us`): the bytes at the GPU's measured read
ceiling, the FLOPs at its measured GEMM rate (× :data:`ROOF_RATE_FACTOR`).

Its own measured error (:attr:`BackendModel.loo_median`, :attr:`BackendModel.loo_worst`): every workload of the
model left out in turn, the model fitted again on the rest (terms and local correction) and asked for the left-out
workload; the error is ``|predicted / measured − 1|`` (the median over the workload's cells), summarised over the
workloads by its median and its worst. Fewer than :data:`MIN_LOO_WORKLOADS` workloads: not checked (None). The
pessimistic bound of an estimate (:attr:`Estimate.bound_us`) is its time × (1 + the worst leave-one-out error) ×
``exp(SIGMA_PER_OCTAVE × octaves outside the span)``: what the model, judged on its own cells, could be wrong by.

Torch-free; numpy and scipy only at fit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION
from profattn.errors import WorkloadError
from profattn.interfaces import Layout
from profattn.store import Measurement, read_workload
from profattn.workload import Phase, Workload

#: The model's terms, in order (see the module docstring); every coefficient is ≥ 0.
FEATURES = ("launch", "bytes", "bytes_idle", "flops", "flops_idle")
FEATURE_DOC: dict[str, str] = {
    "launch": "1 (µs of launch floor per unit)",
    "bytes": "MB (1e6 bytes) of the byte ledger as the kernel read it (µs per MB)",
    "bytes_idle": "MB × max(0, SMs / items − 1); items = B·Hkv (≤ 16 query rows per sequence) else 128-row tiles × Hq",
    "flops": "GFLOP executed (the executed pairs at the phase's FLOP rule; µs per GFLOP)",
    "flops_idle": "GFLOP × max(0, SMs / tiles − 1); tiles = ceil(q_len / 128) × Hq summed over sequences",
}
#: Query rows per sequence at or below which a call is decode-like (one CTA per sequence and KV head).
DECODE_ROWS = 16
#: Rows of a query tile of a prefill kernel.
TILE_ROWS = 128
#: σ floors: the run-to-run noise of one measurement, and a model of few cells.
MIN_SIGMA = 0.03
FEW_CELLS = 4
FEW_CELLS_SIGMA = 0.25
#: σ added per octave outside the fitted span, and for each categorical value (head_dim, GQA group) never seen.
SIGMA_PER_OCTAVE = 0.15
UNSEEN_SIGMA = 0.3
#: Kernel bandwidth (octaves) and shrinkage of the local residual correction (see the module docstring).
BANDWIDTH_OCTAVES = 1.0
HEAD_DIM_WEIGHT = 4.0
SHRINK = 0.1
#: How far above the measured GEMM rate an attention kernel's FLOP rate is allowed in the roofline floor.
ROOF_RATE_FACTOR = 1.25
#: Anchors a model keeps at most before merging neighbours, and the width of the merge's bins (octaves).
MAX_ANCHORS = 256
ANCHOR_BIN_OCTAVES = 0.5
#: SM count assumed when a measurement names none (the H200's).
DEFAULT_SMS = 132
#: Workloads a model needs before its leave-one-out error is measured (fit on two, predict the third).
MIN_LOO_WORKLOADS = 3


def head_dim_class(head_dim: int) -> str:
    """The head-size class a model covers: ``d64`` (≤ 64), ``d128`` (≤ 128) or ``d256`` (larger) — kernels change
    tiles with the head size, so one class never prices another."""
    return "d64" if head_dim <= 64 else "d128" if head_dim <= 128 else "d256"


@dataclass(frozen=True)
class Regime:
    """What a backend's model covers: the ``phase``, the layout its kernel ``reads``, the KV-cache storage dtype
    (``none``: the compute dtype), whether a sliding ``window`` applies, whether the call gives per-sequence
    lengths (``varlen``: serving steps, packed documents), and for a many-query call whether its queries sit after
    earlier keys (``offset``: a prefill chunk over a cached prefix, ``q_len < kv_len``, whose bottom-right causal
    mask SDPA kernels take another path for) or cover them all (``square``; decode is never offset: one query row
    sees every key), the compute ``dtype`` and the ``head_dim_class`` (:func:`head_dim_class`)."""

    phase: str
    reads: str
    kv_dtype: str
    window: bool
    varlen: bool
    offset: bool = False
    dtype: str = "bfloat16"
    head_dim_class: str = "d128"

    @property
    def key(self) -> str:
        """``decode/dense/none/full/uniform/square/bfloat16/d128``-style text (the exported policy's key)."""
        return "/".join((self.phase, self.reads, self.kv_dtype, "window" if self.window else "full",
                         "varlen" if self.varlen else "uniform", "offset" if self.offset else "square", self.dtype,
                         self.head_dim_class))

    @classmethod
    def from_key(cls, key: str) -> "Regime":
        """Inverse of :attr:`key`.

        Raises:
            ValueError: not eight ``/``-separated parts.
        """
        parts = key.split("/")
        if len(parts) != 8:
            raise ValueError(f"not a regime key: {key!r}")
        return cls(parts[0], parts[1], parts[2], parts[3] == "window", parts[4] == "varlen", parts[5] == "offset",
                   parts[6], parts[7])


def regime_of(w: Workload, reads: Layout | str) -> Regime | None:
    """The :class:`Regime` of workload ``w`` read as ``reads``, or None for a batch of drawn lengths (no model: see the
    module docstring) or a context-parallel call."""
    if w.kv_len_dist.drawn or w.is_context_parallel:
        return None
    offset = w.phase is not Phase.DECODE and any(q < k for q, k in zip(w.q_lens, w.kv_lens))
    return Regime(w.phase.value, str(reads), w.kv_dtype or "none", w.window is not None, bool(w.seqs), offset,
                  w.dtype, head_dim_class(w.head_dim))


@dataclass(frozen=True)
class Shape:
    """The numbers a prediction's span check reads: ``bytes_mb``, ``gflop``, ``batch``, ``kv_len``, ``q_len``,
    ``head_dim``, GQA ``group``; ``items``: the work items a kernel's grid spreads over the SMs (the idle terms'
    ``items``: B·Hkv for a decode-like call, 128-row query tiles × Hq otherwise), which a dominance's span reads."""

    bytes_mb: float
    gflop: float
    batch: int
    kv_len: int
    q_len: int
    head_dim: int
    group: int
    items: int = 1

    @cached_property
    def coords(self) -> tuple[float, ...]:
        """Where the shape sits for the local correction: log2 of batch, kv_len, q_len, GQA group and bytes, and
        :data:`HEAD_DIM_WEIGHT` × log2 head_dim (computed once per shape: a leave-one-out error reads it per fit)."""
        return (math.log2(self.batch), math.log2(self.kv_len), math.log2(self.q_len), math.log2(max(self.group, 1)),
                math.log2(max(self.bytes_mb, 1e-9)), HEAD_DIM_WEIGHT * math.log2(self.head_dim))

    @cached_property
    def span_logs(self) -> tuple[float, ...]:
        """log2 of ``bytes_mb``, ``gflop``, ``batch``, ``kv_len``, ``q_len`` (each at least 1e-9): the numbers a
        :class:`Span` bounds (computed once per shape)."""
        return tuple(math.log2(max(v, 1e-9)) for v in (self.bytes_mb, self.gflop, self.batch, self.kv_len, self.q_len))


def features(w: Workload, reads: Layout | str, num_sms: int | None, executed_pairs: int | None = None
             ) -> tuple[tuple[float, ...], Shape]:
    """The model's terms (:data:`FEATURES`) for ``w`` read as ``reads`` on a GPU of ``num_sms`` SMs, and its
    :class:`Shape`. ``executed_pairs``: the pairs the kernel computed when it padded (None: the required ones).

    Raises:
        WorkloadError: a batch of drawn lengths (``kv_len_dist`` ragged or lognormal: they need torch).
    """
    if w.kv_len_dist.drawn:
        raise WorkloadError("a batch of drawn lengths has no cost-model features (its lengths are drawn with torch)")
    sms = num_sms or DEFAULT_SMS
    r = read_workload(w, reads)
    mb = r.requested_bytes / 1e6
    pairs = executed_pairs if executed_pairs is not None else w.attended_pairs
    gflop = w.flops_for_pairs(pairs) / 1e9
    q_lens = w.q_lens
    tiles = sum(-(-q // TILE_ROWS) for q in q_lens) * w.num_q_heads
    items = w.batch * w.num_kv_heads if max(q_lens) <= DECODE_ROWS else tiles
    idle = max(0.0, sms / max(items, 1) - 1.0)
    tile_idle = max(0.0, sms / max(tiles, 1) - 1.0)
    x = (1.0, mb, mb * idle, gflop, gflop * tile_idle)
    return x, Shape(mb, gflop, w.batch, w.kv_len, w.q_len, w.head_dim, w.group_size, max(items, 1))


#: The numbers a :class:`Span` bounds, in its order.
SPAN_FIELDS = ("bytes_mb", "gflop", "batch", "kv_len", "q_len")


@dataclass(frozen=True)
class Outside:
    """One number of a shape outside a model's span: its ``field`` (of :data:`SPAN_FIELDS`), the shape's ``value``,
    the ``measured`` end of the span nearest it (the largest measured when ``value`` lies above, else the smallest)
    and the ``octaves`` between them (> 0)."""

    field: str
    value: float
    measured: float
    octaves: float

    @property
    def above(self) -> bool:
        """Whether ``value`` lies above the span (else below)."""
        return self.value > self.measured


@dataclass(frozen=True)
class Estimate:
    """A predicted latency: ``us`` (µs), ``sigma`` (the relative uncertainty, as a standard deviation of
    ``log(measured / predicted)``), ``extrapolated`` (outside the model's span) and ``distance`` (octaves beyond the
    span plus unseen categories counted, 0 inside), ``octaves`` (the numeric part of that distance) and the model's
    own leave-one-out error (``loo_median``, ``loo_worst``: fractions, None when the model was not checked; see the
    module docstring); ``outside``: each number of the shape outside the span, how far (empty inside);
    ``launch_bound``: the model's :attr:`BackendModel.launch_bound`."""

    us: float
    sigma: float
    extrapolated: bool
    distance: float
    octaves: float = 0.0
    loo_median: float | None = None
    loo_worst: float | None = None
    outside: tuple[Outside, ...] = ()
    launch_bound: int | None = None

    @property
    def bound_us(self) -> float | None:
        """The pessimistic bound (µs): ``us × (1 + loo_worst) × exp(SIGMA_PER_OCTAVE × octaves)`` — the estimate
        as wrong as the model ever was on its own cells, grown outside its span; None for an unchecked model."""
        if self.loo_worst is None:
            return None
        return self.us * (1 + self.loo_worst) * math.exp(SIGMA_PER_OCTAVE * self.octaves)

    @property
    def low_us(self) -> float:
        """``us · exp(−σ)`` (one σ below)."""
        return self.us * math.exp(-self.sigma)

    @property
    def high_us(self) -> float:
        """``us · exp(σ)`` (one σ above)."""
        return self.us * math.exp(self.sigma)


@dataclass(frozen=True)
class Span:
    """The range a model was fitted on: ``lo``/``hi`` of log2 ``bytes_mb``, ``gflop``, ``batch``, ``kv_len``,
    ``q_len``, and the ``head_dims`` and ``groups`` seen."""

    lo: tuple[float, ...]
    hi: tuple[float, ...]
    head_dims: tuple[int, ...]
    groups: tuple[int, ...]

    @staticmethod
    def _logs(s: Shape) -> tuple[float, ...]:
        return s.span_logs

    @classmethod
    def of(cls, shapes: Sequence[Shape]) -> "Span":
        """The span of ``shapes`` (at least one)."""
        logs = [cls._logs(s) for s in shapes]
        return cls(tuple(min(c) for c in zip(*logs)), tuple(max(c) for c in zip(*logs)),
                   tuple(sorted({s.head_dim for s in shapes})), tuple(sorted({s.group for s in shapes})))

    def distance(self, s: Shape) -> tuple[float, float]:
        """(octaves outside the numeric span, summed over the five numbers; unseen categories, counted)."""
        octaves = sum(max(0.0, lo - v, v - hi) for v, lo, hi in zip(self._logs(s), self.lo, self.hi))
        unseen = float(s.head_dim not in self.head_dims) + float(s.group not in self.groups)
        return octaves, unseen

    def outside(self, s: Shape) -> tuple[Outside, ...]:
        """Each of ``s``'s numbers (:data:`SPAN_FIELDS`) outside the span, with the nearest measured end (empty inside)."""
        out = []
        values = (s.bytes_mb, s.gflop, s.batch, s.kv_len, s.q_len)
        for name, value, v, lo, hi in zip(SPAN_FIELDS, values, self._logs(s), self.lo, self.hi):
            if v > hi or v < lo:
                end = hi if v > hi else lo
                out.append(Outside(name, float(value), float(f"{2.0 ** end:.12g}"), abs(v - end)))
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON values."""
        return {"log2_lo": list(self.lo), "log2_hi": list(self.hi), "head_dims": list(self.head_dims),
                "groups": list(self.groups), "of": list(SPAN_FIELDS)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Span":
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(float(x) for x in d["log2_lo"]), tuple(float(x) for x in d["log2_hi"]),
                   tuple(int(x) for x in d["head_dims"]), tuple(int(x) for x in d["groups"]))


@dataclass(frozen=True)
class BackendModel:
    """One backend's model in one regime: ``coef`` (µs per unit of each of :data:`FEATURES`), ``sigma`` (its
    relative error, see the module docstring), ``cells`` and ``workloads`` it was fitted on, their ``span``, the
    ``anchors`` of the local correction (each cell's :attr:`Shape.coords` and residual ``log(measured / terms)``)
    and its leave-one-out error over its workloads (``loo_median``, ``loo_worst``: fractions; None when it has fewer
    than :data:`MIN_LOO_WORKLOADS`); ``launch_bound``: how many of its workloads are launch-bound — the median over
    the workload's cells with a trace of GPU time per call / latency under
    :data:`~profattn.analysis.common.bounds.LAUNCH_BOUND_FRACTION`, a time mostly outside the kernels (None: no cell
    has a trace)."""

    backend: str
    regime: Regime
    coef: tuple[float, ...]
    sigma: float
    cells: int
    workloads: int
    span: Span
    anchors: tuple[tuple[tuple[float, ...], float], ...] = ()
    loo_median: float | None = None
    loo_worst: float | None = None
    launch_bound: int | None = None

    def terms_us(self, x: Sequence[float]) -> float:
        """The terms' prediction (µs), without the local correction."""
        return _predict_us(self.coef, x)

    def correction(self, shape: Shape) -> float:
        """The local correction's log factor at ``shape`` (0 without anchors): the anchors' residuals weighted by
        a Gaussian of their distance (:data:`BANDWIDTH_OCTAVES`), shrunk toward 0 by :data:`SHRINK`."""
        c = shape.coords
        num = den = 0.0
        scale = 2 * BANDWIDTH_OCTAVES ** 2
        for a, r in self.anchors:
            w = math.exp(-math.dist(a, c) ** 2 / scale)
            num += w * r
            den += w
        return num / (den + SHRINK) if den else 0.0

    def predict(self, x: Sequence[float], shape: Shape, floor_us: float = 0.0) -> Estimate:
        """The :class:`Estimate` for terms ``x`` (:func:`features`) of a workload of ``shape``, never below
        ``floor_us`` (the roofline: :meth:`CostModels.floor_us`)."""
        us = max(self.terms_us(x) * math.exp(self.correction(shape)), floor_us)
        octaves, unseen = self.span.distance(shape)
        sigma = math.sqrt(self.sigma ** 2 + (SIGMA_PER_OCTAVE * octaves) ** 2 + (UNSEEN_SIGMA * unseen) ** 2)
        return Estimate(us, sigma, octaves > 0 or unseen > 0, octaves + unseen, octaves, self.loo_median, self.loo_worst,
                        self.span.outside(shape) if octaves > 0 else (), self.launch_bound)

    def to_dict(self) -> dict[str, Any]:
        """JSON values (``coef`` by feature name)."""
        return {"backend": self.backend, "regime": self.regime.key, "coef_us": dict(zip(FEATURES, self.coef)),
                "sigma": self.sigma, "cells": self.cells, "workloads": self.workloads, "span": self.span.to_dict(),
                "anchors": [{"at": list(a), "log_residual": r} for a, r in self.anchors],
                "loo_error": {"median": self.loo_median, "worst": self.loo_worst},
                "launch_bound_workloads": self.launch_bound}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BackendModel":
        """Inverse of :meth:`to_dict`.

        Raises:
            KeyError, ValueError: a malformed entry.
        """
        coef = d["coef_us"]
        return cls(d["backend"], Regime.from_key(d["regime"]), tuple(float(coef[f]) for f in FEATURES),
                   float(d["sigma"]), int(d["cells"]), int(d["workloads"]), Span.from_dict(d["span"]),
                   tuple((tuple(float(v) for v in a["at"]), float(a["log_residual"])) for a in d.get("anchors", ())),
                   _opt_float(d["loo_error"]["median"]), _opt_float(d["loo_error"]["worst"]),
                   None if d.get("launch_bound_workloads") is None else int(d["launch_bound_workloads"]))


@dataclass(frozen=True)
class Sample:
    """One measured cell as the model sees it: ``backend``, ``regime``, terms ``x``, ``shape``, the judged
    ``latency_us``, its workload ``key`` (a workload's cells are left out together in validation) and ``gpu_us``, the
    trace's GPU time per call (µs; None without a trace)."""

    backend: str
    regime: Regime
    x: tuple[float, ...]
    shape: Shape
    latency_us: float
    key: str
    gpu_us: float | None = None


def sample(m: Measurement, workload: Workload | None = None, memo: dict | None = None) -> Sample | None:
    """The :class:`Sample` of a stored cell (``workload``: its parsed workload, when the caller has it; ``memo``: a
    dict the caller keeps so cells of one workload read the same way share their terms), or None when it cannot
    teach a model (not eligible, untimed, a ragged batch, a context-parallel call, a stored workload that no longer
    parses)."""
    if not m.eligible or m.latency_us is None or not math.isfinite(m.latency_us) or m.latency_us <= 0:
        return None
    try:
        w = workload if workload is not None else m.workload()
    except WorkloadError:
        return None
    reads = m.read_layout or w.kv_layout.value
    reg = regime_of(w, reads)
    if reg is None:
        return None
    key = (m.workload_json, reads, m.num_sms, m.executed_pairs)
    if memo is not None and key in memo:
        x, shape = memo[key]
    else:
        x, shape = features(w, reads, m.num_sms, m.executed_pairs)
        if memo is not None:
            memo[key] = (x, shape)
    g = m.gpu_time_us
    return Sample(m.backend, reg, x, shape, float(m.latency_us), m.workload_key,
                  float(g) if g is not None and math.isfinite(g) and g > 0 else None)


def _design(rows: Sequence[Sample]) -> tuple[Any, Any]:
    """The terms ``[n, len(FEATURES)]`` and measured µs ``[n]`` of ``rows`` as float64 arrays."""
    import numpy as np

    return np.array([s.x for s in rows], dtype=float).reshape(len(rows), len(FEATURES)), \
        np.array([s.latency_us for s in rows], dtype=float)


def _solve(x: Any, y: Any) -> tuple[float, ...]:
    """Bounded least squares of the relative error over terms ``x`` ``[n, len(FEATURES)]`` and measured µs ``y``
    ``[n]`` (see the module docstring)."""
    import numpy as np
    from scipy.optimize import nnls

    a = x / y[:, None]
    # an all-zero column (e.g. no idle term in these cells) stays 0: no information, no coefficient
    used = np.abs(a).sum(axis=0) > 0
    coef = np.zeros(len(FEATURES))
    if used.any():  # non-negative least squares (Lawson–Hanson): the bounds (0, ∞) of a bounded least squares
        coef[used] = nnls(a[:, used], np.ones(len(y)))[0]
    return tuple(float(c) for c in coef)


def _predict_us(coef: Sequence[float], x: Sequence[float]) -> float:
    return max(sum(c * v for c, v in zip(coef, x)), 1e-3)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def fit(backend: str, regime: Regime, rows: Sequence[Sample], *, loo: bool = True) -> BackendModel:
    """The :class:`BackendModel` of ``backend`` in ``regime`` from its ``rows`` (at least one), with its
    leave-one-out error when ``loo`` and it has at least :data:`MIN_LOO_WORKLOADS` workloads (module docstring).

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError(f"no cells to fit {backend} in {regime.key}")
    x, y = _design(rows)
    return replace(_fit(backend, regime, rows, x, y, loo), launch_bound=_launch_bound_workloads(rows))


def _launch_bound_workloads(rows: Sequence[Sample]) -> int | None:
    """How many workloads of ``rows`` are launch-bound: the median of their traced cells' GPU time / latency under
    :data:`~profattn.analysis.common.bounds.LAUNCH_BOUND_FRACTION` (None: no cell has a trace)."""
    shares: dict[str, list[float]] = {}
    for s in rows:
        if s.gpu_us:
            shares.setdefault(s.key, []).append(s.gpu_us / s.latency_us)
    return sum(statistics.median(v) < LAUNCH_BOUND_FRACTION for v in shares.values()) if shares else None


def _fit(backend: str, regime: Regime, rows: Sequence[Sample], x: Any, y: Any, loo: bool) -> BackendModel:
    """:func:`fit` over ``rows`` whose :func:`_design` arrays are ``x``, ``y`` (a leave-one-out refit slices them)."""
    import numpy as np

    coef = _solve(x, y)
    resid = np.log(y / np.maximum(x @ np.array(coef), 1e-3)).tolist()
    n, k = len(rows), sum(1 for c in coef if c != 0.0)
    sigma = math.sqrt(sum(r * r for r in resid) / n * n / max(n - k, 1))
    workloads = len({s.key for s in rows})
    sigma = max(sigma, MIN_SIGMA, FEW_CELLS_SIGMA if workloads < FEW_CELLS else 0.0)
    model = BackendModel(backend, regime, coef, sigma, n, workloads, Span.of([s.shape for s in rows]),
                         _anchors(rows, resid))
    if not loo or workloads < MIN_LOO_WORKLOADS:
        return model
    errs = _loo_errors(backend, regime, rows, x, y)
    return replace(model, loo_median=statistics.median(errs.values()), loo_worst=max(errs.values()))


def loo_errors(backend: str, regime: Regime, rows: Sequence[Sample]) -> dict[str, float]:
    """Each workload of ``rows`` left out in turn: ``|predicted / measured − 1|`` of the model fitted on the rest
    (terms and local correction, no roofline), the median over the workload's cells — by workload key. Workloads
    of ``rows`` must number at least two.

    Raises:
        ValueError: fewer than two workloads.
    """
    x, y = _design(rows)
    return _loo_errors(backend, regime, rows, x, y)


def _loo_errors(backend: str, regime: Regime, rows: Sequence[Sample], x: Any, y: Any) -> dict[str, float]:
    """:func:`loo_errors` over ``rows`` whose :func:`_design` arrays are ``x``, ``y`` (built once, sliced per
    workload left out)."""
    import numpy as np

    keys = sorted({s.key for s in rows})
    if len(keys) < 2:
        raise ValueError("a leave-one-out error needs two workloads")
    of = np.array([s.key for s in rows], dtype=object)
    out = {}
    for k in keys:
        keep = of != k
        rest = [s for s, kept in zip(rows, keep) if kept]
        m = _fit(backend, regime, rest, x[keep], y[keep], False)
        out[k] = statistics.median(abs(m.predict(s.x, s.shape).us / s.latency_us - 1.0) for s in rows if s.key == k)
    return out


def _anchors(rows: Sequence[Sample], resid: Sequence[float]) -> tuple[tuple[tuple[float, ...], float], ...]:
    """The local correction's anchors: one per workload (its cells' mean residual); beyond :data:`MAX_ANCHORS`,
    workloads in one bin of the coordinates merge (their mean coordinates and residual), bins of
    :data:`ANCHOR_BIN_OCTAVES` octaves widened ×2 until at most :data:`MAX_ANCHORS` remain — so a model's size and
    a prediction's cost stay bounded however many cells a store holds."""
    by: dict[str, list[tuple[tuple[float, ...], float]]] = {}
    for s, r in zip(rows, resid):
        by.setdefault(s.key, []).append((s.shape.coords, r))
    points = [(v[0][0], sum(r for _, r in v) / len(v)) for v in by.values()]
    width = ANCHOR_BIN_OCTAVES
    merged = points
    while len(merged) > MAX_ANCHORS:
        cells: dict[tuple[int, ...], list[tuple[tuple[float, ...], float]]] = {}
        for c, r in points:
            cells.setdefault(tuple(int(math.floor(v / width)) for v in c), []).append((c, r))
        merged = [(tuple(sum(c[i] for c, _ in v) / len(v) for i in range(len(v[0][0]))), sum(r for _, r in v) / len(v))
                  for v in cells.values()]
        width *= 2
    return tuple(sorted(merged))


@dataclass(frozen=True)
class CostModels:
    """Every backend's models on one GPU, by (backend, regime key), with the GPU's measured roofs: ``read_gbps``
    (the fastest read-only stream its runs measured) and ``matmul_tflops`` (their bf16 GEMM rate); None when no run
    measured them."""

    models: dict[tuple[str, str], BackendModel] = field(default_factory=dict)
    num_sms: int | None = None
    read_gbps: float | None = None
    matmul_tflops: float | None = None

    @property
    def flops_roof_tflops(self) -> float | None:
        """The matrix rate no attention kernel exceeds: :data:`ROOF_RATE_FACTOR` × :attr:`matmul_tflops` (an
        attention kernel's matrix rate may exceed the GEMM measured beside it, not by that much); None unmeasured."""
        return ROOF_RATE_FACTOR * self.matmul_tflops if self.matmul_tflops else None

    def floor_us(self, x: Sequence[float]) -> float:
        """The roofline floor of terms ``x`` (µs): its MB at :attr:`read_gbps` and its GFLOP at
        :attr:`flops_roof_tflops`, whichever is longer; 0 without measured roofs."""
        t_bytes = x[1] * 1e3 / self.read_gbps if self.read_gbps else 0.0
        roof = self.flops_roof_tflops
        t_flops = x[3] * 1e3 / roof if roof else 0.0
        return max(t_bytes, t_flops)

    def model(self, backend: str, regime: Regime) -> BackendModel | None:
        """``backend``'s model in ``regime`` (None: it was never measured there)."""
        return self.models.get((backend, regime.key))

    def backends_in(self, regime: Regime) -> tuple[str, ...]:
        """The backends with a model in ``regime``, sorted."""
        return tuple(sorted(b for b, r in self.models if r == regime.key))

    def estimate(self, backend: str, w: Workload, reads: Layout | str) -> Estimate | None:
        """``backend``'s :class:`Estimate` on ``w`` read as ``reads`` (None: no model for that regime, or a ragged
        batch)."""
        reg = regime_of(w, reads)
        m = self.model(backend, reg) if reg is not None else None
        if m is None:
            return None
        x, shape = features(w, reads, self.num_sms)
        return m.predict(x, shape, self.floor_us(x))


def fit_all(samples: Iterable[Sample], num_sms: int | None, *, read_gbps: float | None = None,
            matmul_tflops: float | None = None) -> CostModels:
    """One :class:`BackendModel` per (backend, regime) of ``samples``, with the GPU's roofs (see :class:`CostModels`)."""
    groups: dict[tuple[str, str], list[Sample]] = {}
    regimes: dict[str, Regime] = {}
    for s in samples:
        groups.setdefault((s.backend, s.regime.key), []).append(s)
        regimes[s.regime.key] = s.regime
    return CostModels({k: fit(k[0], regimes[k[1]], v) for k, v in sorted(groups.items())}, num_sms, read_gbps,
                      matmul_tflops)


__all__ = ["BackendModel", "CostModels", "Estimate", "FEATURES", "FEATURE_DOC", "MIN_LOO_WORKLOADS", "Regime", "Sample",
           "Shape", "Span", "features", "fit", "fit_all", "head_dim_class", "loo_errors", "regime_of", "sample"]
