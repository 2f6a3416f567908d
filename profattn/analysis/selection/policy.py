"""The selection policy: which backend for a workload nobody measured, from per-backend cost models
(:mod:`profattn.analysis.selection.costmodel`) fitted on every stored cell of one GPU, and its validation on data it was not
fitted to. Typed records only; :mod:`profattn.report.recommend` words them.

The pick (:meth:`Policy.choose`):

1. **Candidates**: every backend with a model in the regime the workload would be read in by that backend (a dense
   backend reads a paged workload's contiguous copy: :func:`~profattn.interfaces.layout_read`; a regime includes
   phase, layout, KV dtype, dtype and head_dim class, so no model learnt in one prices another), minus those the
   store saw refuse the same kind of call (:func:`refusal_key`) and those **dominated** in that regime — slower
   beyond noise than one other candidate on every one (at least :data:`MIN_DOMINANCE`) of the regime's measured
   workloads where both ran, and the workload lies within the span of those workloads (:class:`Dominance`: a
   measured ordering is not carried beyond the shapes it was measured on, as a cost model is not). The backends with
   no model in the regime are listed as unmeasured (``unmodelled``).
2. **Bounded only** (issue 34): a candidate makes a pick only when its model's own leave-one-out error is known
   (≥ 3 workloads), its median at most :data:`MAX_LOO_ERROR`, and the shape lies within :data:`MAX_OUTSIDE_OCTAVES`
   of its cells; the others are listed, with why, as unmeasured here. Among the rest, the least **pessimistic bound**
   (estimate × (1 + worst leave-one-out error), grown outside the span). None left: no pick (measure it).
3. **Near ties** (:meth:`Policy.pick`): candidates within each other's bound are decided by the measurements on the
   nearest measured shapes of the same kind and head_dim, and the answer says it is a near tie.

Validation (:func:`validate`): whole slices are held out — every value of head_dim, GQA group, batch decade, kv
decade, page size and phase in turn — the policy is learnt from the rest and scored on the slice against what was
measured there, beside constant baselines learnt from the same rest (:data:`BASELINES`: the most frequent winner
of the workload's regime, the best single backend, and a fixed priority list like vLLM's), plus leave one workload
out. A pick *hits* when it is within :data:`HIT_FRACTION` of the measured best or within noise of it
(:func:`~profattn.analysis.common.margins.judged_margin`); regret is ``t_pick / t_best − 1``. Only backends measured on a
held-out workload can be scored, so picks are made among those (for the policy and the baselines alike). Two scores:
the headline pick against the best measured, and the drop-in pick (the same rule among the backends of the
workload's own interface) against the best drop-in measured; the baselines include the constants "always
sdpa-cudnn" and "always flashinfer-decode-tc" (a vLLM FlashInfer deployment's paged decode).
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION
from profattn.analysis.common.margins import JudgedTime, judged_margin
from profattn.analysis.selection.costmodel import (
    BANDWIDTH_OCTAVES, FEATURE_DOC, FEATURES, SHRINK, BackendModel, CostModels, Estimate, Regime, Shape, Span, features,
    fit_all, regime_of, sample,
)
from profattn.errors import ProfattnWarning, WorkloadError
from profattn.interfaces import Adoption, Layout, adoption_of, caller_interface, changes, layout_read
from profattn.store import Measurement
from profattn.workload import Workload

#: ``schema`` and ``version`` of the exported policy (``profattn recommend --export``).
POLICY_SCHEMA = "profattn.policy"
POLICY_VERSION = 4
#: A model whose median leave-one-out error on its own workloads exceeds this never makes a pick (issue 34).
MAX_LOO_ERROR = 0.25
#: A shape more octaves than this beyond a model's cells (summed over bytes, FLOPs, batch, kv, q) is not bounded by
#: the model's own error: unmeasured there, never a pick.
MAX_OUTSIDE_OCTAVES = 1.0
#: Measured workloads a near tie is decided on.
NEAREST_SHAPES = 3
#: Workloads two backends must share before "slower on every one" makes one dominated.
MIN_DOMINANCE = 3
#: Octaves (summed over bytes, FLOPs, batch, kv, q and GQA group) a shape may lie beyond the workloads a dominance
#: was measured on and still be ruled by it.
DOMINANCE_OCTAVES = 0.5
#: A pick within this fraction of the measured best hits (TransformerEngine's 3 %), as does one within noise.
HIT_FRACTION = 0.03
#: The cost of choosing a backend with no eligible cell on a workload (as a regret: 10× its time).
UNRUNNABLE_COST = 10.0
#: vLLM's attention-backend priority on Hopper as profattn's backends (FlashAttention first, then FlashInfer, then
#: Triton; ``vllm/platforms/cuda.py``, ``get_attn_backend_cls``), then the rest: the fixed-list baseline.
VLLM_PRIORITY = ("sdpa-flash", "flashinfer-decode-tc", "flashinfer-decode", "flashinfer-prefill-paged",
                 "flashinfer-prefill-ragged", "triton-paged-decode", "triton-paged-prefill", "flex-paged-decode",
                 "sdpa-cudnn", "sdpa-efficient", "flex", "sdpa-nested", "torch-paged-reference", "sdpa-math", "eager")
#: The constant baselines every slice is scored for: three learnt from the rest, two fixed (issue 34: a vLLM
#: FlashInfer deployment's paged decode, and cuDNN SDPA).
BASELINES = ("most frequent winner", "best single backend", "fixed priority (vLLM-like)", "always sdpa-cudnn",
             "always flashinfer-decode-tc")


def pooled_time(cells: Sequence[Measurement]) -> JudgedTime:
    """One backend's judged time on one workload over every stored cell of it (several runs): one cell's own
    judged time; for several, the median of all their samples (one median per repeat) and the median of their p10s
    and of their p90s (the typical spread of one measurement, not the spread between runs).

    Raises:
        ValueError: no cell, an untimed cell, or cells of several backends.
    """
    if not cells or any(c.latency_us is None for c in cells):
        raise ValueError("pooled_time needs timed cells")
    if len({c.backend for c in cells}) != 1:
        raise ValueError(f"pooled_time over several backends: {sorted({c.backend for c in cells})}")
    if len(cells) == 1:
        c = cells[0]
        return JudgedTime(c.backend, c.latency_us, c.p10_us or c.latency_us, c.p90_us or c.latency_us,  # type: ignore[arg-type]
                          c.samples_us or (c.latency_us,))  # type: ignore[arg-type]
    samples = tuple(s for c in cells for s in (c.samples_us or (c.latency_us,)))  # type: ignore[arg-type]
    return JudgedTime(cells[0].backend, statistics.median(samples),
                      statistics.median(c.p10_us or c.latency_us for c in cells),  # type: ignore[misc]
                      statistics.median(c.p90_us or c.latency_us for c in cells), samples)  # type: ignore[misc]


@dataclass(frozen=True)
class WorkloadTimes:
    """One workload's eligible backends on one GPU: ``times`` by backend (pooled, fastest first), the ``workload``,
    its ``key``, the ``cells`` behind ``times`` and ``regime``: its regime read in its own layout (None: ragged)."""

    key: str
    workload: Workload
    times: tuple[JudgedTime, ...]
    cells: int
    regime: Regime | None

    @property
    def best(self) -> JudgedTime:
        """The fastest backend's time."""
        return self.times[0]

    def time_of(self, backend: str) -> JudgedTime | None:
        """``backend``'s time here, or None when it has no eligible cell."""
        return next((t for t in self.times if t.backend == backend), None)

    def cost(self, backend: str) -> float:
        """The cost of choosing ``backend`` here: 0 within noise of the best, else its regret; :data:`UNRUNNABLE_COST`
        without an eligible cell."""
        t = self.time_of(backend)
        if t is None:
            return UNRUNNABLE_COST
        if t.backend == self.best.backend or judged_margin(self.best, t).tie:
            return 0.0
        return t.median_us / self.best.median_us - 1.0

    def best_of(self, among: Iterable[str] | None = None) -> JudgedTime:
        """The fastest backend's time among ``among`` (None: all; at least one of them measured here)."""
        if among is None:
            return self.best
        names = set(among)
        return next(t for t in self.times if t.backend in names)

    def hits(self, backend: str, among: Iterable[str] | None = None) -> bool:
        """Whether ``backend`` is within :data:`HIT_FRACTION` or within noise of the best here (of ``among``)."""
        t = self.time_of(backend)
        best = self.best_of(among)
        return t is not None and (t.median_us <= best.median_us * (1 + HIT_FRACTION) or judged_margin(best, t).tie)

    def regret(self, backend: str, among: Iterable[str] | None = None) -> float | None:
        """``t_backend / t_best − 1`` (None: no eligible cell), the best of ``among`` (None: all)."""
        t = self.time_of(backend)
        return None if t is None else t.median_us / self.best_of(among).median_us - 1.0


def workload_times(cells: Iterable[Measurement]) -> tuple[WorkloadTimes, ...]:
    """Group eligible cells (ineligible ones never rank) by workload key and backend, pooled (:func:`pooled_time`),
    sorted by key; workloads whose stored fields no longer parse are left out."""
    by_key: dict[str, dict[str, list[Measurement]]] = {}
    for c in cells:
        if c.eligible and c.latency_us is not None and math.isfinite(c.latency_us):
            by_key.setdefault(c.workload_key, {}).setdefault(c.backend, []).append(c)
    out = []
    for key in sorted(by_key):
        per = by_key[key]
        first = next(iter(per.values()))[0]
        try:
            w = first.workload()
        except WorkloadError:
            continue
        times = sorted((pooled_time(v) for v in per.values()), key=lambda t: (t.median_us, t.backend))
        out.append(WorkloadTimes(key, w, tuple(times), sum(len(v) for v in per.values()), regime_of(w, w.kv_layout.value)))
    return tuple(out)


def _parsed(cells: Iterable[Measurement]) -> tuple[dict[str, Workload], dict[str, str]]:
    """Each distinct stored workload parsed once (a store repeats one workload in every backend's cell), and why each
    one that no longer parses (a hand-edited or damaged store) does not, by its stored JSON (:func:`learn` warns)."""
    out: dict[str, Workload] = {}
    bad: dict[str, str] = {}
    for c in cells:
        if c.workload_json not in out and c.workload_json not in bad:
            try:
                out[c.workload_json] = c.workload()
            except WorkloadError as exc:
                bad[c.workload_json] = str(exc)
    return out, bad


def _warn_unparsed(cells: Sequence[Measurement], bad: Mapping[str, str]) -> None:
    """One :class:`ProfattnWarning` counting the stored cells whose workload no longer parses, naming the first."""
    n = sum(c.workload_json in bad for c in cells)
    if n:
        first = next(bad[c.workload_json] for c in cells if c.workload_json in bad)
        warnings.warn(f"{n} stored cell(s) whose workload no longer parses teach nothing; the first: {first[:400]}",
                      ProfattnWarning, stacklevel=3)


def refusal_key(w: Workload) -> tuple:
    """What makes calls alike for "the store saw this backend refuse such a call": phase, layout, head_dim, GQA
    group, dtype, KV dtype, window or not, per-sequence lengths or not, ragged or not."""
    return (w.phase.value, w.kv_layout.value, w.head_dim, w.group_size, w.dtype, w.kv_dtype, w.window is not None,
            bool(w.seqs), w.is_ragged)


@dataclass(frozen=True)
class Dominance:
    """``backend`` measured slower beyond noise than ``by`` on every one of the ``workloads`` (at least
    :data:`MIN_DOMINANCE`) of one regime where both ran; ``span``: those workloads' :class:`Span` as ``backend`` read
    them, and ``items``: the (least, most) work items of their grids (:attr:`Shape.items`). It rules a shape only
    within them (:meth:`covers`): a 2-head prefill of 192 query tiles is not ruled by 4–32-head ones of thousands."""

    backend: str
    by: str
    workloads: int
    span: Span
    items: tuple[int, int] = (1, 1)

    def octaves_outside(self, shape: Shape) -> float:
        """How far ``shape`` lies beyond the workloads (octaves, summed over the span's five numbers, the log2 GQA
        group against the groups measured and the log2 work items against :attr:`items`; 0 inside)."""
        octaves, _ = self.span.distance(shape)
        g, groups = math.log2(max(shape.group, 1)), [math.log2(max(x, 1)) for x in self.span.groups]
        n, lo, hi = math.log2(shape.items), math.log2(self.items[0]), math.log2(self.items[1])
        return octaves + max(0.0, min(groups) - g, g - max(groups)) + max(0.0, lo - n, n - hi)

    def covers(self, shape: Shape) -> bool:
        """Whether ``shape`` lies within :data:`DOMINANCE_OCTAVES` of the workloads (:meth:`octaves_outside`)."""
        return self.octaves_outside(shape) <= DOMINANCE_OCTAVES

    def to_dict(self) -> dict[str, Any]:
        """JSON values."""
        return {"backend": self.backend, "by": self.by, "workloads": self.workloads, "span": self.span.to_dict(),
                "items": list(self.items)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Dominance":
        """Inverse of :meth:`to_dict`.

        Raises:
            KeyError, ValueError: a malformed entry.
        """
        lo, hi = (int(x) for x in d["items"])
        return cls(str(d["backend"]), str(d["by"]), int(d["workloads"]), Span.from_dict(d["span"]), (lo, hi))


@dataclass(frozen=True)
class Predicted:
    """One candidate of a :class:`Choice`: its ``backend``, the layout its kernel ``reads``, its ``estimate``, whether
    it is ``dominated`` in its regime at this shape (estimated and shown, never the pick; :class:`Dominance`) and, when its model cannot bound the
    estimate, why (``unmeasured``: too few workloads to check its error, a leave-one-out error above
    :data:`MAX_LOO_ERROR`, or a shape beyond :data:`MAX_OUTSIDE_OCTAVES` of its cells; never the pick).
    ``lost_to``: the backends it was measured slower than on every workload both ran in its regime, all beyond this
    shape (a :class:`Dominance` that does not reach here): it stays a candidate, and a pick when its own model bounds it
    here, but an unbounded one never contests a pick (:func:`contesting`) — the only measurements of the pair say it
    loses."""

    backend: str
    reads: Layout
    estimate: Estimate
    dominated: bool = False
    unmeasured: str | None = None
    lost_to: tuple[str, ...] = ()

    @property
    def pickable(self) -> bool:
        """Neither dominated nor unmeasured: its bound may be the pick."""
        return not self.dominated and self.unmeasured is None


@dataclass(frozen=True)
class Contender:
    """One backend a pick compares: its time ``us`` and pessimistic ``bound_us`` (µs; equal for a measured time)."""

    backend: str
    us: float
    bound_us: float


@dataclass(frozen=True)
class Pick:
    """The outcome of :meth:`Policy.pick`: the ``backend``, the others within each other's bound (``near_tie_with``;
    empty: a clear pick by the bound) and the measured workloads (tags) that decided a near tie (``decided_on``)."""

    backend: str
    near_tie_with: tuple[str, ...] = ()
    decided_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class MeasuredShape:
    """One measured workload as a near tie reads it: its ``tag``, ``kind`` (phase, KV dtype, window, per-sequence
    lengths, offset, dtype, head_dim), :attr:`~profattn.analysis.selection.costmodel.Shape.coords` (``coords``,
    head_dim left out) and each backend's pooled median (``times``, µs)."""

    tag: str
    kind: tuple
    coords: tuple[float, ...]
    times: dict[str, float]


def shape_kind(w: Workload) -> tuple:
    """What two workloads share for one to stand in for the other in a near tie: phase, KV dtype, window or not,
    per-sequence lengths or not, a chunk after a prefix or not, dtype and head_dim (the same head size)."""
    reg = regime_of(w, w.kv_layout.value)
    return (w.phase.value, w.kv_dtype or "none", w.window is not None, bool(w.seqs),
            bool(reg and reg.offset), w.dtype, w.head_dim)


@dataclass(frozen=True)
class Choice:
    """The policy's answer for one workload: the chosen ``backend`` with its estimate (both None: no candidate is
    measured in the workload's regime and bounded — the answer is to measure), every candidate (lowest bound first,
    then the unbounded ones), the ``regime`` of the workload as read in its own layout, its ``default`` backend (the
    regime's most frequent measured winner, for reference), the candidates left out as ``dominated`` or ``refused``,
    the backends the policy knows with no model in this regime (``unmodelled``: to measure), and the near tie of the
    pick (:class:`Pick`). ``contested_by``: the unbounded candidates whose estimate lies below the best bounded
    candidate's bound (``best_bounded``); with any, there is no pick (``backend`` None): the best bounded time is not
    shown to be the best, and a guess is never the answer."""

    backend: str | None
    estimate: Estimate | None
    candidates: tuple[Predicted, ...]
    regime: Regime | None
    default: str | None
    dominated: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    unmodelled: tuple[str, ...] = ()
    near_tie_with: tuple[str, ...] = ()
    decided_on: tuple[str, ...] = ()
    contested_by: tuple[str, ...] = ()
    best_bounded: str | None = None

    @property
    def contested(self) -> bool:
        """No pick because an unbounded candidate may beat the best bounded one (:attr:`contested_by`, each estimated
        below :attr:`best_bounded`'s bound by a model too little checked to trust): measuring it answers."""
        return bool(self.contested_by)

    @property
    def modelled(self) -> bool:
        """Whether a bounded cost model made the choice (False: nothing measured here could)."""
        return self.estimate is not None

    @property
    def extrapolated(self) -> bool:
        """The chosen estimate lies outside its model's span (within :data:`MAX_OUTSIDE_OCTAVES`), or no pick."""
        return self.estimate is None or self.estimate.extrapolated

    def estimate_of(self, backend: str) -> Predicted | None:
        """``backend``'s candidate entry (None: not a candidate)."""
        return next((c for c in self.candidates if c.backend == backend), None)


@dataclass(frozen=True)
class Policy:
    """A selection policy for one GPU: its cost ``models``, each backend's ``adoptions``, the regimes' ``defaults``
    and the :class:`Dominance` records of each regime (``dominated``), the calls the store saw refused (``refused``: backend → refusal keys), where it came
    from (``workloads``, ``cells``, ``runs``), the ``measured`` shapes a near tie reads, and its ``validation`` when
    computed."""

    gpu: str
    num_sms: int | None
    models: CostModels
    adoptions: dict[str, Adoption]
    defaults: dict[str, str]
    dominated: dict[str, tuple[Dominance, ...]]
    refused: dict[str, frozenset] = field(default_factory=dict)
    fallback: tuple[str, ...] = ()
    workloads: int = 0
    cells: int = 0
    runs: tuple[str, ...] = ()
    validation: "Validation | None" = None
    measured: tuple[MeasuredShape, ...] = ()

    @property
    def backends(self) -> tuple[str, ...]:
        """Every backend with a model."""
        return tuple(sorted({b for b, _ in self.models.models}))

    def dominated_in(self, regime_key: str) -> tuple[str, ...]:
        """The backends dominated somewhere in the regime (sorted; each only within its :class:`Dominance` span)."""
        return tuple(sorted({d.backend for d in self.dominated.get(regime_key, ())}))

    @property
    def regimes(self) -> tuple[str, ...]:
        """Every regime key some model covers."""
        return tuple(sorted({r for _, r in self.models.models}))

    def covers(self, w: Workload) -> bool:
        """Whether some backend has a model for ``w`` (in the layout it would read it)."""
        return bool(self._candidates(w, None)[0])

    def _candidates(self, w: Workload, among: Iterable[str] | None
                    ) -> tuple[list[Predicted], list[str], list[str], list[str]]:
        names = sorted(set(among) if among is not None else {b for b, _ in self.models.models})
        out: list[Predicted] = []
        dominated: list[str] = []
        refused: list[str] = []
        unmodelled: list[str] = []
        rk = refusal_key(w)
        for b in names:
            adoption = self.adoptions.get(b) or adoption_of(b)
            reads = layout_read(adoption, w.kv_layout.value, packed=w.is_packed)
            reg = regime_of(w, reads)
            model = self.models.model(b, reg) if reg is not None else None
            if rk in self.refused.get(b, frozenset()):
                refused.append(b)
                continue
            if model is None:
                if reg is not None:
                    unmodelled.append(b)
                continue
            x, shape = features(w, reads, self.num_sms)
            mine = [d for d in self.dominated.get(reg.key, ()) if d.backend == b]  # type: ignore[union-attr]
            beaten = any(d.covers(shape) for d in mine)
            if beaten:
                dominated.append(b)
            est = model.predict(x, shape, self.models.floor_us(x))
            lost = () if beaten else tuple(sorted({d.by for d in mine}))
            out.append(Predicted(b, reads, est, beaten, unbounded_reason(est, model.workloads), lost))
        out.sort(key=lambda p: (not p.pickable, p.estimate.bound_us or math.inf, p.estimate.us, p.backend))
        return out, dominated, refused, unmodelled

    def choose(self, w: Workload, among: Iterable[str] | None = None) -> Choice | None:
        """The :class:`Choice` for ``w`` among ``among`` (default: every backend the policy knows), or None when
        it knows none of them or ``w`` is context-parallel. The pick (:meth:`pick`) is among the candidates measured in
        the regime and bounded (:attr:`Predicted.pickable`), by their pessimistic bound
        (:attr:`~profattn.analysis.selection.costmodel.Estimate.bound_us`); with none, no backend is chosen
        (``Choice.backend`` None: measure it)."""
        if w.is_context_parallel:  # a question of its own (communication): no single-process model answers it
            return None
        names = set(among) if among is not None else None
        cands, dominated, refused, unmodelled = self._candidates(w, names)
        if not cands and not unmodelled:
            return None
        reg = regime_of(w, w.kv_layout.value)
        default = self.defaults.get(reg.key) if reg is not None else None
        pickable = [c for c in cands if c.pickable]
        p = self.pick(w, [Contender(c.backend, c.estimate.us, c.estimate.bound_us) for c in pickable])  # type: ignore[arg-type]
        if p is None:
            return Choice(None, None, tuple(cands), reg, default, tuple(dominated), tuple(refused), tuple(unmodelled))
        chosen = next(c for c in pickable if c.backend == p.backend)
        rivals = contesting(cands, chosen.estimate.bound_us or chosen.estimate.us)
        if rivals:
            return Choice(None, None, tuple(cands), reg, default, tuple(dominated), tuple(refused), tuple(unmodelled),
                          contested_by=rivals, best_bounded=p.backend)
        return Choice(p.backend, chosen.estimate, tuple(cands), reg, default, tuple(dominated), tuple(refused),
                      tuple(unmodelled), p.near_tie_with, p.decided_on)

    def pick(self, w: Workload, contenders: Sequence[Contender]) -> Pick | None:
        """The pick among ``contenders`` for ``w`` (None: no contender): the least bound; when others lie within each
        other's bound of it (``a.us ≤ b.bound_us`` and ``b.us ≤ a.bound_us``), a **near tie**, decided by the
        measurements: the one measured faster on the :data:`NEAREST_SHAPES` nearest measured workloads of the same
        kind and head_dim where all the tied backends ran (:func:`shape_kind`; nearest by
        :attr:`~profattn.analysis.selection.costmodel.Shape.coords`), by the geometric mean of each one's time over
        the fastest's there — kept as the least bound when no such workload was measured."""
        if not contenders:
            return None
        first = min(contenders, key=lambda c: (c.bound_us, c.us, c.backend))
        tied = [c for c in contenders if c is not first and c.us <= first.bound_us and first.us <= c.bound_us]
        if not tied:
            return Pick(first.backend)
        group = [first, *tied]
        names = {c.backend for c in group}
        kind = shape_kind(w)
        _, shape = features(w, w.kv_layout.value, self.num_sms)
        here = shape.coords[:-1]
        near = sorted((m for m in self.measured if m.kind == kind and names <= m.times.keys()),
                      key=lambda m: (math.dist(m.coords, here), m.tag))[:NEAREST_SHAPES]
        others = tuple(sorted(names - {first.backend}))
        if not near:
            return Pick(first.backend, others)

        def score(b: str) -> float:
            return sum(math.log(m.times[b] / min(m.times[n] for n in names)) for m in near)

        win = min(sorted(names), key=score)
        return Pick(win, tuple(sorted(names - {win})), tuple(m.tag for m in near))


def contesting(candidates: Iterable[Predicted], bound_us: float, extra_us: Mapping[str, float] | None = None
               ) -> tuple[str, ...]:
    """The ``candidates`` that contest a pick whose pessimistic time is ``bound_us`` (µs): unbounded
    (:attr:`Predicted.unmeasured`), neither dominated here nor measured slower than another wherever both ran
    (:attr:`Predicted.lost_to`), and estimated below it — plus ``extra_us[backend]`` (µs: the
    per-call cost of the changes it needs, when the pick compares whole calls). A model too little checked to be a
    pick cannot rule out that such a candidate is faster, so the pick is not an answer until it is measured."""
    extra = extra_us or {}
    return tuple(c.backend for c in candidates
                 if c.unmeasured is not None and not c.dominated and not c.lost_to
                 and c.estimate.us + extra.get(c.backend, 0.0) < bound_us)


def unbounded_reason(e: Estimate, workloads: int) -> str | None:
    """Why an estimate cannot be bounded (None: it can): its model has fewer than
    :data:`~profattn.analysis.selection.costmodel.MIN_LOO_WORKLOADS` workloads, its leave-one-out median error is
    above :data:`MAX_LOO_ERROR` (said with how many of its workloads are launch-bound:
    :attr:`~profattn.analysis.selection.costmodel.BackendModel.launch_bound`), or the shape lies more than
    :data:`MAX_OUTSIDE_OCTAVES` beyond its cells."""
    if e.loo_median is None:
        return f"{workloads} measured workload{'s' * (workloads != 1)} in this regime: too few to check its model"
    if e.loo_median > MAX_LOO_ERROR:
        why = f"its model's leave-one-out error {100 * e.loo_median:.0f} % > {100 * MAX_LOO_ERROR:.0f} %"
        if e.launch_bound:
            n = e.launch_bound
            why += (f"; {n} of its {workloads} workloads {'is' if n == 1 else 'are'} launch-bound, the kernels under "
                    f"{100 * LAUNCH_BOUND_FRACTION:.0f} % of the latency: host dispatch and launch gaps, not the kernels, "
                    f"set {'that time' if n == 1 else 'those times'}")
        return why
    if e.octaves > MAX_OUTSIDE_OCTAVES:
        return f"{e.octaves:.1f} octaves beyond the shapes it was measured on"
    return None


def _defaults(ws: Sequence[WorkloadTimes]) -> dict[str, str]:
    """Per regime (of the workloads read in their own layout), the backend that won most of its workloads (ties:
    least summed cost)."""
    by: dict[str, list[WorkloadTimes]] = {}
    for w in ws:
        if w.regime is not None:
            by.setdefault(w.regime.key, []).append(w)
    out = {}
    for key, group in by.items():
        names = sorted({t.backend for w in group for t in w.times})
        wins = {b: sum(w.best.backend == b for w in group) for b in names}
        out[key] = min(names, key=lambda b: (-wins[b], sum(w.cost(b) for w in group), b))
    return out


def _dominated(ws: Sequence[WorkloadTimes], adoptions: Mapping[str, Adoption], sms: int | None
               ) -> dict[str, tuple[Dominance, ...]]:
    """Per regime a backend reads in, a :class:`Dominance` for each pair (backend, other) where the backend is slower
    beyond noise than the other on every one (at least :data:`MIN_DOMINANCE`) of the workloads where both ran
    (workloads of that regime as the backend read them), with those workloads' span."""
    by: dict[str, dict[str, list[tuple[WorkloadTimes, Shape]]]] = {}
    for w in ws:
        read_as: dict[str, tuple[Regime | None, Shape | None]] = {}  # the backends reading one layout share both
        for t in w.times:
            reads = str(layout_read(adoptions.get(t.backend) or adoption_of(t.backend), w.workload.kv_layout.value,
                                    packed=w.workload.is_packed))
            if reads not in read_as:
                reg = regime_of(w.workload, reads)
                read_as[reads] = (reg, features(w.workload, reads, sms)[1] if reg is not None else None)
            reg, shape = read_as[reads]
            if reg is not None:
                by.setdefault(reg.key, {}).setdefault(t.backend, []).append((w, shape))  # type: ignore[arg-type]
    out: dict[str, tuple[Dominance, ...]] = {}
    for key, members in by.items():
        dom = []
        for b, wls in sorted(members.items()):
            for c in sorted(members):
                if c == b:
                    continue
                both = [(w, shape) for w, shape in wls if w.time_of(c) is not None]
                if len(both) >= MIN_DOMINANCE and all(_beats(w, c, b) for w, _ in both):
                    shapes = [shape for _, shape in both]
                    dom.append(Dominance(b, c, len(both), Span.of(shapes), (min(x.items for x in shapes),
                                                                            max(x.items for x in shapes))))
        if dom:
            out[key] = tuple(dom)
    return out


def _beats(w: WorkloadTimes, a: str, b: str) -> bool:
    ta, tb = w.time_of(a), w.time_of(b)
    return ta is not None and tb is not None and ta.median_us < tb.median_us and not judged_margin(ta, tb).tie


def _refused(cells: Iterable[Measurement]) -> dict[str, frozenset]:
    """Per backend, the refusal keys of calls it was unsupported on and never ran."""
    refused: dict[str, set] = {}
    ran: dict[str, set] = {}
    keys: dict[str, tuple | None] = {}
    for c in cells:
        if c.workload_json not in keys:
            try:
                keys[c.workload_json] = refusal_key(c.workload())
            except WorkloadError:
                keys[c.workload_json] = None
        k = keys[c.workload_json]
        if k is None:
            continue
        if c.status == "unsupported":
            refused.setdefault(c.backend, set()).add(k)
        elif c.eligible:
            ran.setdefault(c.backend, set()).add(k)
    return {b: frozenset(ks - ran.get(b, set())) for b, ks in refused.items() if ks - ran.get(b, set())}


def learn(cells: Sequence[Measurement], gpu: str, *, runs: Sequence[str] = (),
          ceilings: tuple[float | None, float | None] = (None, None), warn: bool = True) -> Policy | None:
    """The :class:`Policy` for ``gpu`` from its stored ``cells`` (every status: eligible ones teach the models,
    unsupported ones the refusals), or None when none is eligible. ``ceilings``: the GPU's measured (read GB/s,
    GEMM TFLOP/s), the roofline under every prediction. With ``warn``, stored workloads that no longer parse (left
    out) are counted in one :class:`ProfattnWarning` (validation, learning on subsets, passes False)."""
    mine = [c for c in cells if c.gpu == gpu]
    parsed, unparsed = _parsed(mine)
    if warn:
        _warn_unparsed(mine, unparsed)
    memo: dict = {}
    samples = [s for s in (sample(c, parsed.get(c.workload_json), memo) for c in mine) if s is not None]
    if not samples:
        return None
    sms = next((c.num_sms for c in mine if c.num_sms), None)
    adoptions: dict[str, Adoption] = {}
    for c in mine:
        if c.backend not in adoptions:
            a = c.adoption()
            if a is not None:
                adoptions[c.backend] = a
    ws = workload_times(mine)
    names = sorted({t.backend for w in ws for t in w.times})
    wins = {b: sum(w.best.backend == b for w in ws) for b in names}
    fallback = tuple(sorted(names, key=lambda b: (-wins[b], sum(w.cost(b) for w in ws), b)))
    models = fit_all(samples, sms, read_gbps=ceilings[0], matmul_tflops=ceilings[1])
    return Policy(gpu, sms, models, adoptions, _defaults(ws), _dominated(ws, adoptions, sms), _refused(mine),
                  fallback, len(ws), sum(w.cells for w in ws), tuple(runs or sorted({c.run_id for c in mine})),
                  measured=_measured_shapes(ws, sms))


def _measured_shapes(ws: Sequence[WorkloadTimes], sms: int | None) -> tuple[MeasuredShape, ...]:
    """The measured workloads a near tie reads (:class:`MeasuredShape`; ragged batches left out)."""
    out = []
    for w in ws:
        if w.regime is None:
            continue
        _, shape = features(w.workload, w.workload.kv_layout.value, sms)
        out.append(MeasuredShape(w.workload.tag, shape_kind(w.workload), shape.coords[:-1],
                                 {t.backend: t.median_us for t in w.times}))
    return tuple(out)


# ---- validation -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scored:
    """One held-out workload scored: the ``pick`` (None: no prediction), whether it ``hit``, its ``regret``."""

    pick: str | None
    hit: bool
    regret: float | None


@dataclass(frozen=True)
class HeldOut:
    """One held-out workload: its ``key`` and ``phase``, the measured ``best``, the policy's score (``policy``)
    and whether its answer was ``extrapolated``, and each baseline's score (:data:`BASELINES` order); the same for
    the drop-in pick (``drop_in``, ``drop_in_baselines``: scored against the best measured backend of the
    workload's own interface; a baseline that is no drop-in there gives no answer)."""

    key: str
    phase: str
    best: str
    policy: Scored
    extrapolated: bool
    baselines: tuple[Scored, ...]
    drop_in: Scored = Scored(None, False, None)
    drop_in_baselines: tuple[Scored, ...] = ()


@dataclass(frozen=True)
class Score:
    """Hit count, mean and worst regret of one chooser over ``n`` held-out workloads (``answered``: those it gave an
    answer for; the means are over those)."""

    n: int
    answered: int
    hits: int
    mean_regret: float | None
    worst_regret: float | None

    @property
    def hit_rate(self) -> float | None:
        """``hits / answered``."""
        return self.hits / self.answered if self.answered else None

    @classmethod
    def of(cls, scores: Sequence[Scored]) -> "Score":
        """Summarise ``scores``."""
        rs = [s.regret for s in scores if s.regret is not None]
        return cls(len(scores), len(rs), sum(s.hit for s in scores if s.regret is not None),
                   sum(rs) / len(rs) if rs else None, max(rs) if rs else None)


@dataclass(frozen=True)
class SliceResult:
    """One held-out slice: ``field`` and ``value`` (text: ``"64"``, ``"10–99"``), its ``held_out`` workloads."""

    field: str
    value: str
    held_out: tuple[HeldOut, ...]

    @property
    def policy(self) -> Score:
        """The policy's :class:`Score` on the slice."""
        return Score.of([h.policy for h in self.held_out])

    @property
    def drop_in(self) -> Score:
        """The drop-in pick's :class:`Score` on the slice."""
        return Score.of([h.drop_in for h in self.held_out])

    def drop_in_baseline(self, i: int) -> Score:
        """Baseline ``i``'s drop-in :class:`Score` (:data:`BASELINES` order)."""
        return Score.of([h.drop_in_baselines[i] for h in self.held_out])

    def baseline(self, i: int) -> Score:
        """Baseline ``i``'s :class:`Score` (:data:`BASELINES` order)."""
        return Score.of([h.baselines[i] for h in self.held_out])

    @property
    def best_baseline(self) -> int:
        """The index of the best baseline on this slice: most hits, then least worst regret, then least mean."""
        def rank(i: int) -> tuple:
            s = self.baseline(i)
            return (-(s.hit_rate or 0.0), s.worst_regret if s.worst_regret is not None else math.inf,
                    s.mean_regret if s.mean_regret is not None else math.inf)
        return min(range(len(BASELINES)), key=rank)

    @property
    def extrapolated(self) -> int:
        """Held-out workloads whose answer was extrapolated."""
        return sum(h.extrapolated for h in self.held_out)


@dataclass(frozen=True)
class Validation:
    """Leave-one-slice-out ``slices`` and leave-one-workload-out ``lowo`` (a :class:`SliceResult` with field
    ``workload``) of one policy's data."""

    slices: tuple[SliceResult, ...]
    lowo: SliceResult | None

    @property
    def pooled(self) -> Score:
        """The policy's score over every held-out workload of every slice (a workload counts once per slice field)."""
        return Score.of([h.policy for s in self.slices for h in s.held_out])


def _decade(v: int, unit: str) -> str:
    if v < 10:
        return f"1–9{unit}"
    lo = 10 ** int(math.log10(v))
    return f"{lo:,}–{10 * lo - 1:,}{unit}"


def _kv_decade(v: int) -> str:
    return "< 1k" if v < 1000 else "1k–10k" if v < 10_000 else "≥ 10k"


#: The slice fields (name → the slice value of a workload).
SLICES: dict[str, Any] = {
    "head_dim": lambda w: str(w.head_dim),
    "gqa_group": lambda w: str(w.group_size),
    "batch_decade": lambda w: _decade(w.batch, ""),
    "kv_decade": lambda w: _kv_decade(w.kv_len),
    "page_size": lambda w: str(w.page_size) if w.page_size else "dense",
    "phase": lambda w: w.phase.value,
}


def _baseline_picks(train: Sequence[WorkloadTimes]) -> tuple[dict[str, list[str]], list[str]]:
    """Per regime the backends in order of wins (then summed cost) on ``train``; and the global order by summed cost."""
    by: dict[str, list[WorkloadTimes]] = {}
    for w in train:
        by.setdefault(w.regime.key if w.regime else "ragged", []).append(w)
    names = sorted({t.backend for w in train for t in w.times})
    per = {}
    for key, group in by.items():
        wins = {b: sum(w.best.backend == b for w in group) for b in names}
        per[key] = sorted(names, key=lambda b: (-wins[b], sum(x.cost(b) for x in group), b))
    overall = sorted(names, key=lambda b: (sum(x.cost(b) for x in train), b))
    return per, overall


def _score(w: WorkloadTimes, pick: str | None, among: Sequence[str] | None = None) -> Scored:
    if pick is None or (among is not None and pick not in among):
        return Scored(None, False, None)
    return Scored(pick, w.hits(pick, among), w.regret(pick, among))


def _first(order: Sequence[str], measured: Sequence[str]) -> str | None:
    return next((b for b in order if b in measured), None) or (measured[0] if measured else None)


def drop_ins(policy: Policy | None, w: Workload, backends: Iterable[str]) -> list[str]:
    """The ``backends`` that are drop-ins for a caller of ``w``'s own interface
    (:func:`~profattn.interfaces.caller_interface`), by their adoption in ``policy`` (else the built-in one)."""
    caller = caller_interface(w.kv_layout.value, packed=w.is_packed)
    adoptions = policy.adoptions if policy is not None else {}
    return [b for b in backends if changes(caller, adoption_of(b, adoptions.get(b))) == ()]


def _held_out(policy: Policy | None, w: WorkloadTimes, per: Mapping[str, list[str]], overall: Sequence[str]) -> HeldOut:
    measured = [t.backend for t in w.times]
    choice = policy.choose(w.workload, among=measured) if policy is not None else None
    reg = w.regime.key if w.regime else "ragged"
    fixed = ["sdpa-cudnn", "flashinfer-decode-tc"]
    picks = [_first(per.get(reg, overall), measured), _first(overall, measured), _first(VLLM_PRIORITY, measured),
             *(b if b in measured else None for b in fixed)]
    drops = drop_ins(policy, w.workload, measured)
    drop_pick = None
    if policy is not None and drops:
        dc = policy.choose(w.workload, among=drops)
        drop_pick = dc.backend if dc is not None else None
    dpicks = [_first(per.get(reg, overall), drops) if drops else None, _first(overall, drops) if drops else None,
              _first(VLLM_PRIORITY, drops) if drops else None, *(b if b in drops else None for b in fixed)]
    return HeldOut(w.key, w.workload.phase.value, w.best.backend,
                   _score(w, choice.backend if choice else None), bool(choice is None or choice.extrapolated),
                   tuple(_score(w, b) for b in picks),
                   _score(w, drop_pick, drops) if drops else Scored(None, False, None),
                   tuple(_score(w, b, drops) if drops else Scored(None, False, None) for b in dpicks))


#: Most folds of the workload-held-out validation: up to this many workloads each is held out alone; beyond, the
#: workloads are dealt into this many folds (every LOWO_FOLDS-th in one), each held out in turn.
LOWO_FOLDS = 20


def validate(cells: Sequence[Measurement], gpu: str, *, slices: Mapping[str, Any] = SLICES,
             lowo: bool = True, ceilings: tuple[float | None, float | None] = (None, None)) -> Validation:
    """Leave each slice out in turn (and, with ``lowo``, each workload), learn from the rest, score the held-out
    workloads with two or more eligible backends (see the module docstring)."""
    mine = [c for c in cells if c.gpu == gpu]
    ws = [w for w in workload_times(mine) if len(w.times) >= 2]
    out: list[SliceResult] = []

    def fold(held: list[WorkloadTimes]) -> list[HeldOut]:
        keys = {w.key for w in held}
        rest = [c for c in mine if c.workload_key not in keys]
        policy = learn(rest, gpu, ceilings=ceilings, warn=False)
        per, overall = _baseline_picks([w for w in ws if w.key not in keys])
        return [_held_out(policy, w, per, overall) for w in held]

    for name, of in slices.items():
        values = sorted({of(w.workload) for w in ws})
        if len(values) < 2:
            continue
        for v in values:
            held = [w for w in ws if of(w.workload) == v]
            out.append(SliceResult(name, v, tuple(fold(held))))
    loo = None
    if lowo and len(ws) > 1:
        if len(ws) <= LOWO_FOLDS:
            loo = SliceResult("workload", "each", tuple(h for w in ws for h in fold([w])))
        else:  # one learn per fold, not per workload: leave-one-out grew quadratically (4,500 cells: 44 s)
            groups = [ws[i::LOWO_FOLDS] for i in range(LOWO_FOLDS)]
            loo = SliceResult("workload", f"{LOWO_FOLDS} folds", tuple(h for g in groups for h in fold(g)))
    return Validation(tuple(out), loo)


def derive(cells: Sequence[Measurement], gpu: str, *, with_validation: bool = True, lowo: bool = True,
           slices: Mapping[str, Any] = SLICES, ceilings: tuple[float | None, float | None] = (None, None)) -> Policy | None:
    """The policy for ``gpu`` from its stored ``cells`` (other GPUs' cells ignored), with its validation (``slices``
    held out in turn, and each workload with ``lowo``); None when no cell on that GPU is eligible."""
    policy = learn(cells, gpu, ceilings=ceilings)
    if policy is None or not with_validation:
        return policy
    return replace(policy, validation=validate(cells, gpu, slices=slices, lowo=lowo, ceilings=ceilings))


def store_ceilings(runs: Iterable[Any], gpu: str) -> tuple[float | None, float | None]:
    """The roofs of ``gpu`` from its stored runs (:class:`~profattn.store.StoredRun`): the fastest read stream and
    GEMM rate any of them measured (None when none did)."""
    reads = [r.read_gbps for r in runs if r.gpu == gpu and r.read_gbps]
    gemms = [r.matmul_tflops for r in runs if r.gpu == gpu and r.matmul_tflops]
    return (max(reads) if reads else None, max(gemms) if gemms else None)


# ---- the exported format ------------------------------------------------------------------------------------
def _score_dict(s: Score) -> dict[str, Any]:
    return {"n": s.n, "answered": s.answered, "hits": s.hits, "hit_rate": s.hit_rate, "mean_regret": s.mean_regret,
            "worst_regret": s.worst_regret}


def _slice_dict(s: SliceResult) -> dict[str, Any]:
    return {"field": s.field, "value": s.value, "policy": _score_dict(s.policy), "extrapolated": s.extrapolated,
            "baselines": {name: _score_dict(s.baseline(i)) for i, name in enumerate(BASELINES)},
            "best_baseline": BASELINES[s.best_baseline], "drop_in": _score_dict(s.drop_in),
            "drop_in_baselines": {name: _score_dict(s.drop_in_baseline(i)) for i, name in enumerate(BASELINES)}}


def validation_dict(v: Validation | None) -> dict[str, Any] | None:
    """The validation numbers as plain JSON values (regrets as fractions: 0.01 = 1 % slower than the best)."""
    if v is None:
        return None
    return {"method": "leave one slice out (and one workload out)", "hit": f"within {HIT_FRACTION:.0%} or within noise",
            "slices": [_slice_dict(s) for s in v.slices], "pooled": _score_dict(v.pooled),
            "leave_one_workload_out": _slice_dict(v.lowo) if v.lowo else None}


def policy_to_dict(p: Policy) -> dict[str, Any]:
    """The exported, versioned policy (``schema`` :data:`POLICY_SCHEMA`, ``version`` :data:`POLICY_VERSION`)::

        {"schema": "profattn.policy", "version": 4, "gpu": "NVIDIA H200", "num_sms": 132,
         "features": {name: meaning},                  # the terms, in the order of every model's coef_us
         "correction": {"bandwidth_octaves", "shrink"}, # the local residual correction
         "models": [{"backend", "regime", "coef_us": {feature: µs per unit}, "sigma", "cells", "workloads",
                     "span": {...}, "anchors": [{"at": [coords], "log_residual"}],
                     "loo_error": {"median", "worst"},   # fractions; null: fewer than 3 workloads
                     "launch_bound_workloads"}],  # workloads whose kernels run < 60 % of the latency; null/absent: no trace
         "defaults": {regime: backend},
         "dominated": {regime: [{"backend", "by", "workloads", "span": {...}, "items": [lo, hi]}]},  # within them only
         "refused": {backend: [[refusal key]]},
         "adoptions": {backend: {"interface", "reads", "plan_run", "how"}},
         "fallback": [backend],
         "selection": {"max_loo_error", "max_outside_octaves", "dominance_octaves", "min_dominance",
                       "nearest_shapes", "hit_fraction"},
         "measured": [{"tag", "kind", "coords", "times_us": {backend: µs}}],  # what a near tie is decided on
         "derived_from": {"workloads", "cells", "runs"},
         "validation": {...} | null}

    Version 3 (issue 34): regime keys have eight parts (dtype and head_dim class added), models carry their
    leave-one-out error, and the pick is by the pessimistic bound. Version 4: a dominance carries the span of the
    workloads it was measured on and rules a shape only within ``dominance_octaves`` of it (its five numbers,
    the log2 GQA group and the log2 work items of the grid: B·Hkv for ≤ 16 query rows, 128-row tiles × Hq otherwise). To apply it without profattn: a candidate is a
    backend with a model in the regime of the workload as that backend reads it; its time is ``Σ coef · feature``
    times the correction; it may be picked when its ``loo_error.median`` ≤ ``max_loo_error`` and the shape lies
    within ``max_outside_octaves`` of its span; take the least ``time × (1 + loo_error.worst) × exp(0.15 ×
    octaves outside)``, and decide candidates within each other's bound on the ``nearest_shapes`` nearest
    ``measured`` workloads of the same kind."""
    return {
        "schema": POLICY_SCHEMA, "version": POLICY_VERSION, "gpu": p.gpu, "num_sms": p.num_sms,
        "features": {f: FEATURE_DOC[f] for f in FEATURES},
        "correction": {"bandwidth_octaves": BANDWIDTH_OCTAVES, "shrink": SHRINK,
                       "coords": "log2 batch, kv_len, q_len, group, bytes_mb; 2·log2 head_dim"},
        "roofs": {"read_gbps": p.models.read_gbps, "matmul_tflops": p.models.matmul_tflops},
        "models": [m.to_dict() for m in p.models.models.values()],
        "defaults": dict(sorted(p.defaults.items())), "dominated": {k: [d.to_dict() for d in v] for k, v in sorted(p.dominated.items())},
        "refused": {b: sorted([list(k) for k in ks], key=str) for b, ks in sorted(p.refused.items())},
        "adoptions": {b: a.to_dict() for b, a in sorted(p.adoptions.items())},
        "fallback": list(p.fallback),
        "selection": {"max_loo_error": MAX_LOO_ERROR, "max_outside_octaves": MAX_OUTSIDE_OCTAVES,
                      "dominance_octaves": DOMINANCE_OCTAVES, "min_dominance": MIN_DOMINANCE,
                      "nearest_shapes": NEAREST_SHAPES, "hit_fraction": HIT_FRACTION},
        "measured": [{"tag": m.tag, "kind": list(m.kind), "coords": list(m.coords), "times_us": m.times}
                     for m in p.measured],
        "derived_from": {"workloads": p.workloads, "cells": p.cells, "runs": list(p.runs)},
        "validation": validation_dict(p.validation),
    }


def policy_from_dict(d: Mapping[str, Any]) -> Policy:
    """Inverse of :func:`policy_to_dict` (the validation is not read back).

    Raises:
        ValueError: not a policy of a version this code reads, or a malformed entry.
    """
    if d.get("schema") != POLICY_SCHEMA or d.get("version") != POLICY_VERSION:
        raise ValueError(f"not a {POLICY_SCHEMA} version {POLICY_VERSION} document")
    try:
        models = [BackendModel.from_dict(m) for m in d["models"]]
        return Policy(
            d["gpu"], d.get("num_sms"), CostModels({(m.backend, m.regime.key): m for m in models}, d.get("num_sms"),
                                                   d.get("roofs", {}).get("read_gbps"), d.get("roofs", {}).get("matmul_tflops")),
            {b: Adoption.from_dict(a) for b, a in d.get("adoptions", {}).items()}, dict(d.get("defaults", {})),
            {k: tuple(Dominance.from_dict(x) for x in v) for k, v in d.get("dominated", {}).items()},
            {b: frozenset(tuple(k) for k in ks) for b, ks in d.get("refused", {}).items()},
            tuple(d.get("fallback", ())), int(d["derived_from"]["workloads"]), int(d["derived_from"]["cells"]), tuple(d["derived_from"]["runs"]),
            measured=tuple(MeasuredShape(m["tag"], tuple(m["kind"]), tuple(float(c) for c in m["coords"]),
                                         {b: float(t) for b, t in m["times_us"].items()}) for m in d.get("measured", ())))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed {POLICY_SCHEMA} document: {exc}") from None


__all__ = ["BASELINES", "HIT_FRACTION", "MAX_LOO_ERROR", "MAX_OUTSIDE_OCTAVES", "NEAREST_SHAPES", "DOMINANCE_OCTAVES", "MIN_DOMINANCE", "Dominance", "POLICY_SCHEMA", "POLICY_VERSION", "SLICES", "VLLM_PRIORITY", "Choice", "Contender", "MeasuredShape", "Pick", "drop_ins", "shape_kind",
           "contesting", "unbounded_reason",
           "HeldOut", "Policy", "Predicted", "Score", "Scored", "SliceResult", "Validation", "WorkloadTimes", "derive",
           "learn", "policy_from_dict", "policy_to_dict", "pooled_time", "refusal_key", "store_ceilings", "validate",
           "validation_dict",
           "workload_times"]
