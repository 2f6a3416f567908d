"""Which backend for this workload on this GPU — an answer the caller can act on: measured from the results store,
or predicted by the selection policy (:mod:`profattn.analysis.selection.policy`), ranked drop-ins first; and the same for every
attention call of a trace. Typed records only; :mod:`profattn.report.recommend` words them.

The rule (TransformerEngine's benchmark procedure, with profattn's noise rule): look the exact workload up
(:func:`~profattn.store.workload_key`) among the GPU's stored cells — for a dense workload also the cells whose kernel
read it on another workload's data (a dense backend on a paged workload reads its contiguous copy: the store's
``read_key``); only eligible cells rank (timed, correct, their trace confirming their family — incorrect and NaN
cells never do). The fastest is the *measured winner* unless another backend is within :data:`NEAR_TIE_FRACTION` of
it or ties it by :func:`~profattn.analysis.common.margins.judged_margin` — then a *near tie*. Never measured there: the
policy's choice, *predicted*, with its estimate and whether it extrapolates; outside every model, *unknown* (the
report prints the ``profattn profile --workload …`` that measures it).

Every answer is ranked for the caller's :class:`~profattn.interfaces.Interface` (the workload's own — a paged cache,
dense SDPA tensors, packed documents — or the traced call's): **drop-in** options first (same interface: for SDPA the
``sdpa_kernel`` line), then options that need a change, each with its :class:`~profattn.interfaces.Change` list and
what the change costs per call where it has one (:class:`ChangeCost`: a page gather into a contiguous cache, packing
the tokens), measured where a cell has it and estimated from bytes at the copy bandwidth otherwise.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from profattn.analysis.common.margins import JudgedTime, judged_margin
from profattn.analysis.selection.costmodel import SPAN_FIELDS, Outside
from profattn.analysis.selection.policy import (
    Choice, Contender, Pick, Policy, Predicted, contesting, learn, policy_from_dict, policy_to_dict, pooled_time, store_ceilings,
)
from profattn.errors import ProfattnError
from profattn.interfaces import Adoption, Change, Interface, adoption_of, caller_interface, changes
from profattn.store import Measurement, ResultsStore, StoredRun, canonical_workload, workload_key
from profattn.workload import KVLayout, Workload

if TYPE_CHECKING:  # the trace records pull pandas in; recommend answers without them
    from profattn.analysis.calls.call_records import AttentionCall, TraceCalls

#: Another backend within this fraction of the winner's median makes a near tie (TransformerEngine's 3 %).
NEAR_TIE_FRACTION = 0.03
#: The attention backends a trace names (:attr:`AttentionCall.backend`) → the kernel family of the stored cells
#: that ran the same kernels (a trace's ``math`` is the ``dense`` family: SDPA's math path and eager).
TRACE_FAMILY = {"math": "dense", "flash-cpu": "dense"}


class Status(enum.Enum):
    """What :func:`recommend` could say."""

    MEASURED_WINNER = "measured winner"
    NEAR_TIE = "near tie"
    PREDICTED = "predicted"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class RankedBackend:
    """One backend measured on the workload: its pooled judged ``time`` (µs; :func:`~profattn.analysis.selection.policy.pooled_time`),
    ``timing_kind`` (``graph``: the decode cells' CUDA-graph replay; ``eager``; ``mixed`` across runs), ``ratio``
    to the winner's median (1 for the winner), ``tie`` (within noise of the winner by the one rule, or within
    :data:`NEAR_TIE_FRACTION`), ``cells`` behind it and the ids of their ``runs``."""

    backend: str
    time: JudgedTime
    timing_kind: str
    ratio: float
    tie: bool
    cells: tuple[Measurement, ...]
    runs: tuple[str, ...]

    @property
    def samples(self) -> int:
        """Independent samples behind the median (one per repeat per run)."""
        return len(self.time.samples_us)

    @property
    def reps(self) -> int:
        """Timed repetitions behind those samples' spread (summed over cells)."""
        return sum(c.reps or 0 for c in self.cells)


@dataclass(frozen=True)
class ChangeCost:
    """What one :class:`~profattn.interfaces.Change` costs per call: ``us`` (None: no per-call cost — e.g. keeping the
    cache paged — or none known, e.g. FlashInfer's host-side ``plan()``), ``measured`` (a stored cell timed it) and
    ``basis``: for a gather, ``bytes`` (K/V read and written once at the copy bandwidth ``gbps``) or the measured
    gather + SDPA path (``torch-paged-reference``, ``path_us``)."""

    change: Change
    us: float | None
    measured: bool
    bytes: int | None = None
    gbps: float | None = None
    path_us: float | None = None


@dataclass(frozen=True)
class Option:
    """One backend as the caller could adopt it: its ``changes`` from the caller's interface (empty: a drop-in;
    None: a backend whose interface nobody declared), their ``costs``, its ``adoption`` (the lines that switch to it),
    the kernel's time — ``measured`` on the workload, or ``predicted`` — and ``total_us``: that time plus the
    changes' per-call costs (what the caller would pay)."""

    backend: str
    changes: tuple[Change, ...] | None
    costs: tuple[ChangeCost, ...]
    adoption: Adoption | None
    measured: RankedBackend | None = None
    predicted: Predicted | None = None

    @property
    def drop_in(self) -> bool:
        """Same interface as the caller's."""
        return self.changes == ()

    @property
    def kernel_us(self) -> float:
        """The kernel's time (µs): measured where it was, else predicted."""
        if self.measured is not None:
            return self.measured.time.median_us
        return self.predicted.estimate.us  # type: ignore[union-attr]

    @property
    def total_us(self) -> float:
        """:attr:`kernel_us` plus every known per-call change cost (µs)."""
        return self.kernel_us + sum(c.us for c in self.costs if c.us is not None)

    @property
    def pickable(self) -> bool:
        """Measured on the workload, or predicted by a bounded model (:attr:`Predicted.pickable`)."""
        return self.measured is not None or self.predicted.pickable  # type: ignore[union-attr]

    @property
    def bound_us(self) -> float | None:
        """The kernel's pessimistic time (µs): measured, else the prediction's bound (None: unbounded)."""
        if self.measured is not None:
            return self.measured.time.median_us
        return self.predicted.estimate.bound_us if self.predicted.pickable else None  # type: ignore[union-attr]

    def contender(self) -> Contender:
        """This option as :meth:`Policy.pick` compares it (its kernel time and bound plus its change costs).

        Raises:
            ValueError: not pickable.
        """
        if self.bound_us is None:
            raise ValueError(f"{self.backend} is not bounded here")
        extra = self.total_us - self.kernel_us
        return Contender(self.backend, self.total_us, self.bound_us + extra)


@dataclass(frozen=True)
class Excluded:
    """A stored cell of the workload that does not rank: its backend, status and why (correctness failed, NaN,
    its trace showed another family, unsupported, error)."""

    backend: str
    status: str
    correct: bool | None
    run_id: str


@dataclass(frozen=True)
class Evidence:
    """Why the winner wins, as its newest cell recorded it: the dominant kernel, its launch (``grid``/``block``
    ``"x,y,z"``), CTAs per launch and per SM, kernel time per call (µs), DRAM bytes measured (None without
    counters) against the workload's requested bytes; ``host_us``: the host's time to issue one eager call (µs; None
    for a cell timed before it was measured, results schema ≤ 3) — an eager caller pays about the larger of it and the
    latency per call."""

    run_id: str
    dominant_kernel: str | None
    grid: str | None
    block: str | None
    ctas: int | None
    ctas_per_sm: float | None
    gpu_time_us: float | None
    dram_bytes: float | None
    requested_bytes: int | None
    host_us: float | None = None


@dataclass(frozen=True)
class Recommendation:
    """The answer for one workload on one GPU: ``status``; the caller's ``interface``; ``ranked`` (measured, fastest
    first; empty unless measured); ``tied``: the backends in a near tie with the winner; ``excluded`` cells; the
    winner's ``evidence``; ``options`` — every backend as the caller could adopt it, drop-ins first, each group by
    :attr:`Option.total_us`; ``choice`` (status predicted) with the ``policy`` it came from; the ``runs`` behind the
    ranked cells; the ``drop_in_pick`` and, when an unbounded drop-in contests it (then no pick),
    ``drop_in_contested_by``."""

    workload: Workload
    gpu: str
    status: Status
    interface: Interface
    ranked: tuple[RankedBackend, ...] = ()
    tied: tuple[str, ...] = ()
    excluded: tuple[Excluded, ...] = ()
    evidence: Evidence | None = None
    options: tuple[Option, ...] = ()
    choice: Choice | None = None
    policy: Policy | None = None
    runs: tuple[StoredRun, ...] = ()
    drop_in_pick: Pick | None = None
    drop_in_contested_by: tuple[str, ...] = ()

    @property
    def best(self) -> str | None:
        """The fastest backend (measured, else the bounded prediction), or None when unknown or unmeasured here."""
        if self.ranked:
            return self.ranked[0].backend
        return self.choice.backend if self.choice else None

    @property
    def best_drop_in(self) -> Option | None:
        """The drop-in pick (:attr:`drop_in_pick`: measured, or bounded, by the pick rule of
        :meth:`~profattn.analysis.selection.policy.Policy.pick`); None: no drop-in measured or bounded here."""
        if self.drop_in_pick is None:
            return None
        return next(o for o in self.options if o.backend == self.drop_in_pick.backend)

    @property
    def unmeasured(self) -> tuple[str, ...]:
        """The backends that cannot be picked here for want of measurements: predicted by an unbounded model, or
        known to the policy with no model in this regime (each is a `profattn profile` line to run)."""
        out = [o.backend for o in self.options if o.predicted is not None and o.predicted.unmeasured is not None]
        return tuple(out) + (self.choice.unmodelled if self.choice is not None else ())

    @property
    def fastest(self) -> Option | None:
        """The option of least pessimistic time (its bound, or measured time, plus its change costs), among the
        measured ones and the bounded, undominated predictions; None: no such option."""
        usable = [o for o in self.options if o.pickable]
        return min(usable, key=lambda o: o.contender().bound_us, default=None)

    @property
    def answer_extrapolated(self) -> bool:
        """A predicted answer outside its model's span (or from no model: the regime's default)."""
        return self.status is Status.PREDICTED and self.choice is not None and self.choice.extrapolated

    @property
    def priced_outside(self) -> tuple[Option, ...]:
        """The options shown that count toward :attr:`extrapolated`: priced outside their model's cells and either
        pickable (one :attr:`fastest` may name) or — with nothing measured on the workload, so that every time
        shown is a prediction — not dominated (a possible pick once measured)."""
        out = [o for o in self.options if o.predicted is not None and o.predicted.estimate.extrapolated]
        return tuple(o for o in out if o.pickable or (not self.ranked and not o.predicted.dominated))  # type: ignore[union-attr]

    @property
    def extrapolated(self) -> bool:
        """Whether anything this answer offers is priced outside its model's cells: the predicted answer
        (:attr:`answer_extrapolated`) or an option of :attr:`priced_outside`."""
        return self.answer_extrapolated or bool(self.priced_outside)

    @property
    def beyond_measured(self) -> tuple[Outside, ...]:
        """When :attr:`extrapolated`, each number of the workload outside the cells of the answer's and
        :attr:`priced_outside`'s models (:data:`~profattn.analysis.selection.costmodel.SPAN_FIELDS` order), against
        the nearest end any of them measured (the least distance); empty otherwise."""
        if not self.extrapolated:
            return ()
        estimates = [o.predicted.estimate for o in self.priced_outside]  # type: ignore[union-attr]
        if self.answer_extrapolated and self.choice is not None and self.choice.estimate is not None:
            estimates.append(self.choice.estimate)
        nearest: dict[str, Outside] = {}
        for x in (x for e in estimates for x in e.outside):
            if x.field not in nearest or x.octaves < nearest[x.field].octaves:
                nearest[x.field] = x
        return tuple(nearest[f] for f in SPAN_FIELDS if f in nearest)


def resolve_gpu(store: ResultsStore, name: str | None) -> str:
    """The store's GPU name ``name`` means: an exact (case-insensitive) name, else the one stored name containing it
    (``H200`` → ``NVIDIA H200``); with ``name`` None, the store's only device, else its only GPU (CPU runs, which
    store their processor's name, are then left aside: the README's main job on a CPU adds one).

    Raises:
        ProfattnError: the store is empty, ``name`` matches none or several, or None with several GPUs stored.
    """
    gpus = list(store.gpus())
    if not gpus:
        raise ProfattnError(f"the results store {store.path} is empty: add runs with `profattn db import RUN_DIR`")
    if name is None:
        cuda = [g for g in store.cuda_gpus() if g in gpus]
        if len(gpus) == 1 or len(cuda) == 1:
            return gpus[0] if len(gpus) == 1 else cuda[0]
        raise ProfattnError(f"the store holds several devices ({', '.join(gpus)}): choose one with --gpu")
    exact = [g for g in gpus if g.lower() == name.strip().lower()]
    if exact:
        return exact[0]
    part = [g for g in gpus if name.strip().lower() in g.lower()]
    if len(part) == 1:
        return part[0]
    which = f"matches several ({', '.join(part)})" if part else f"is not in the store (GPUs: {', '.join(gpus)})"
    raise ProfattnError(f"--gpu {name!r} {which}")


def policy_for(store: ResultsStore, gpu: str) -> Policy | None:
    """The selection policy for ``gpu`` from every stored cell on it, cached in the store until its next import
    or forget (the cached copy carries no validation; :func:`~profattn.analysis.selection.policy.derive` computes it)."""
    cached = store.cached_policy(gpu)
    if cached is not None:
        try:
            return policy_from_dict(json.loads(cached))
        except ValueError:  # a cache written by another version: derive it again
            pass
    generation = store.generation()
    policy = learn(store.cells_on(gpu), gpu, ceilings=store_ceilings(store.runs(), gpu))
    if policy is not None:
        store.cache_policy(gpu, json.dumps(policy_to_dict(policy)), generation)
    return policy


def rank(cells: Sequence[Measurement]) -> tuple[tuple[RankedBackend, ...], tuple[Excluded, ...]]:
    """The eligible cells ranked by backend (pooled over runs, fastest first, ties to the winner marked) and the
    cells that do not rank."""
    excluded = tuple(Excluded(c.backend, c.status, c.correct, c.run_id) for c in cells if not c.eligible)
    per: dict[str, list[Measurement]] = {}
    for c in cells:
        if c.eligible:
            per.setdefault(c.backend, []).append(c)
    timed = sorted(((pooled_time(v), v) for v in per.values()), key=lambda p: (p[0].median_us, p[0].backend))
    out = []
    for i, (t, v) in enumerate(timed):
        best = timed[0][0]
        ratio = t.median_us / best.median_us
        tie = i > 0 and (ratio - 1.0 < NEAR_TIE_FRACTION or judged_margin(best, t).tie)
        kinds = {c.timing_kind for c in v}
        out.append(RankedBackend(t.backend, t, kinds.pop() if len(kinds) == 1 else "mixed", ratio, tie, tuple(v),
                                 tuple(sorted({c.run_id for c in v}))))
    return tuple(out), excluded


def _evidence(r: RankedBackend, runs: dict[str, StoredRun]) -> Evidence:
    c = max(r.cells, key=lambda c: runs[c.run_id].created_utc if c.run_id in runs else "")
    return Evidence(c.run_id, c.dominant_kernel, c.grid, c.block, c.ctas, c.ctas_per_sm, c.gpu_time_us, c.dram_bytes,
                    c.requested_bytes, c.host_us)


def _copy_gbps(runs: Sequence[StoredRun], gpu: str) -> float | None:
    """The median copy bandwidth the GPU's stored runs measured (GB/s; values that are not positive and finite
    ignored), or None when none did (a CPU run: the changes' costs are then not estimated)."""
    vals = sorted(r.copy_gbps for r in runs
                  if r.gpu == gpu and isinstance(r.copy_gbps, (int, float)) and math.isfinite(r.copy_gbps) and r.copy_gbps > 0)
    return vals[len(vals) // 2] if vals else None


def _change_costs(w: Workload, chg: tuple[Change, ...] | None, gbps: float | None,
                  gather_path: RankedBackend | None) -> tuple[ChangeCost, ...]:
    """Per-call costs of ``chg`` on ``w``: a gather moves the K/V once each way (estimated at the measured copy
    bandwidth ``gbps``; the measured gather + SDPA path beside it when ``gather_path`` ran); packing moves Q, K and V
    once each way; the rest have no per-call cost profattn measures. Without a measured ``gbps`` nothing is estimated."""
    out = []
    for c in chg or ():
        if gbps is None:
            out.append(ChangeCost(c, None, False, path_us=gather_path.time.median_us
                                  if gather_path and c is Change.GATHER else None))
        elif c is Change.GATHER and not w.kv_len_dist.drawn:
            nbytes = 2 * w.logical_kv_bytes
            out.append(ChangeCost(c, nbytes / (gbps * 1e3), False, nbytes, gbps,
                                  gather_path.time.median_us if gather_path else None))
        elif c in (Change.PACK, Change.NESTED) and not w.kv_len_dist.drawn:
            nbytes = 2 * w.input_bytes
            out.append(ChangeCost(c, nbytes / (gbps * 1e3), False, nbytes, gbps))
        else:
            out.append(ChangeCost(c, None, False))
    return tuple(out)


def _adoptions(cells: Sequence[Measurement]) -> dict[str, Adoption]:
    """Each backend's adoption as its first cell recorded it (:meth:`~profattn.store.Measurement.adoption`)."""
    out: dict[str, Adoption] = {}
    for c in cells:
        if c.backend not in out and (a := c.adoption()) is not None:
            out[c.backend] = a
    return out


def _order(options: Sequence[Option]) -> tuple[Option, ...]:
    """Drop-ins first, then the rest, each by pessimistic time (measured, else the bound, plus the change costs;
    then name) — a prediction that is dominated or unbounded after the others of its group (it is never the pick;
    its estimate is shown for what it is)."""
    return tuple(sorted(options, key=lambda o: (not o.drop_in, not o.pickable,
                                                o.contender().bound_us if o.pickable else o.total_us, o.backend)))


def _drop_in_pick(policy: Policy | None, w: Workload, options: Sequence[Option]) -> tuple[Pick | None, tuple[str, ...]]:
    """The drop-in pick among ``options`` (the measured and bounded drop-ins) by :meth:`Policy.pick`, or None when an
    unbounded drop-in contests it (:func:`~profattn.analysis.selection.policy.contesting`); without a policy the
    fastest measured drop-in. Second: the contesting backends."""
    cands = [o.contender() for o in options if o.drop_in and o.pickable]
    if policy is None:
        return (Pick(min(cands, key=lambda c: c.us).backend) if cands else None), ()
    p = policy.pick(w, cands)
    if p is None:
        return None, ()
    bound = next(c.bound_us for c in cands if c.backend == p.backend)
    rivals = contesting([o.predicted for o in options if o.drop_in and o.predicted is not None], bound)
    return (None, rivals) if rivals else (p, ())


def recommend(store: ResultsStore, workload: Workload, gpu: str, *, policy: Policy | None = None,
              interface: Interface | None = None) -> Recommendation:
    """The :class:`Recommendation` for ``workload`` on ``gpu`` (a name the store holds: :func:`resolve_gpu`) for a
    caller of ``interface`` (default: :func:`~profattn.interfaces.caller_interface` of the workload's layout);
    ``policy`` given saves deriving it (:func:`policy_for`). The options hold every measured backend and, beside
    them, the policy's prediction for each modelled backend that was not measured on the workload (a paged kernel
    for a dense call, say), so the caller sees what each interface would give."""
    w = canonical_workload(workload)
    caller = interface or caller_interface(w.kv_layout.value, packed=w.is_packed)
    cells = store.cells_for(gpu, workload_key(w), as_read=w.kv_layout is KVLayout.DENSE)
    ranked, excluded = rank(cells)
    runs_all = store.runs()
    gbps = _copy_gbps(runs_all, gpu)
    adoptions = _adoptions(cells)
    policy = policy if policy is not None else policy_for(store, gpu)
    gather = next((r for r in ranked if r.backend == "torch-paged-reference"), None)
    options = []
    for r in ranked:
        a = adoption_of(r.backend, adoptions.get(r.backend))
        chg = changes(caller, a)
        options.append(Option(r.backend, chg, _change_costs(w, chg, gbps, gather), a, measured=r))
    measured = {r.backend for r in ranked}
    choice = policy.choose(w) if policy is not None else None
    for p in choice.candidates if choice is not None else ():
        if p.backend in measured:
            continue
        a = adoption_of(p.backend, policy.adoptions.get(p.backend))  # type: ignore[union-attr]
        chg = changes(caller, a)
        options.append(Option(p.backend, chg, _change_costs(w, chg, gbps, gather), a, predicted=p))
    if ranked:
        runs = {r.run_id: r for r in runs_all}
        used = tuple(runs[i] for i in sorted({c.run_id for r in ranked for c in r.cells}) if i in runs)
        tied = tuple(r.backend for r in ranked if r.tie)
        return Recommendation(workload, gpu, Status.NEAR_TIE if tied else Status.MEASURED_WINNER, caller, ranked, tied,
                              excluded, _evidence(ranked[0], runs), _order(options), choice, policy, used,
                              *_drop_in_pick(policy, w, options))
    status = Status.UNKNOWN if choice is None or choice.backend is None else Status.PREDICTED
    drop, rivals = _drop_in_pick(policy, w, options)
    return Recommendation(workload, gpu, status, caller, excluded=excluded, options=_order(options), choice=choice,
                          policy=policy, drop_in_pick=drop, drop_in_contested_by=rivals)


# ---- what to measure next ---------------------------------------------------------------------------------------
def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def expected_regret(choice: Choice | None) -> float:
    """The regret a choice risks (a fraction, 0.05 = 5 % slower than the best): with each candidate's latency
    lognormal around its estimate (σ from its model), ``E[max(0, log t_pick − log t_c)]`` for the closest
    competitor ``c`` — ``m Φ(m/s) + s φ(m/s)`` with ``m = log(μ_pick / μ_c)``, ``s = √(σ_pick² + σ_c²)`` (the mean of a
    normal's positive part), over the bounded competitors (:attr:`Predicted.pickable`).
    1.0 for no choice (nothing bounded here: measuring is what answers it)."""
    if choice is None or choice.estimate is None:
        return 1.0
    pick = choice.estimate
    worst = 0.0
    rivals = [c for c in choice.candidates if c.backend != choice.backend and c.pickable]
    for c in rivals:
        m = math.log(pick.us / c.estimate.us)
        s = math.hypot(pick.sigma, c.estimate.sigma)
        worst = max(worst, m * _cdf(m / s) + s * _phi(m / s))
    return worst if rivals else pick.sigma * _phi(0.0)


@dataclass(frozen=True)
class PlannedMeasurement:
    """A workload worth measuring: its ``workload``, the ``expected_regret`` of today's answer there, the ``weight``
    it is ranked by (the regret times the GPU time it answers for, µs, or the regret alone) and the workloads it
    answers for (``answers``: the traced calls or the asked workload)."""

    workload: Workload
    expected_regret: float
    weight: float
    answers: int


def neighbours(w: Workload) -> tuple[Workload, ...]:
    """``w`` and the workloads one step away in batch and kv_len (×2, ÷2) and GQA group (Hkv ×2, ÷2): where a
    measurement would also narrow the answer for ``w``. Invalid neighbours are left out."""
    from profattn.errors import WorkloadError

    out = [w]
    steps = [dict(batch=w.batch * 2), dict(batch=w.batch // 2), dict(kv_len=w.kv_len * 2), dict(kv_len=w.kv_len // 2),
             dict(num_kv_heads=w.num_kv_heads * 2), dict(num_kv_heads=w.num_kv_heads // 2)]
    if w.q_len == w.kv_len:
        steps[2:4] = [dict(q_len=w.q_len * 2, kv_len=w.kv_len * 2), dict(q_len=w.q_len // 2, kv_len=w.kv_len // 2)]
    for ch in steps:
        if any(v < 1 for v in ch.values()) or w.seqs:
            continue
        try:
            n = w.with_(**ch)
        except (WorkloadError, ValueError):
            continue
        if n.num_q_heads % n.num_kv_heads == 0:
            out.append(n)
    return tuple(dict.fromkeys(out))


def plan(store: ResultsStore, gpu: str, asked: Sequence[tuple[Workload, float]], n: int, *,
         policy: Policy | None = None) -> tuple[PlannedMeasurement, ...]:
    """The ``n`` unmeasured workloads whose measurement would most reduce the uncertainty of the answers asked for:
    ``asked`` pairs each workload with the GPU time it stands for (µs; 0 for a workload asked for itself, which then
    also brings its :func:`neighbours`). Each candidate is ranked by :func:`expected_regret` of today's answer
    there, times that GPU time when known; a workload asked for itself comes first (measuring it answers it). A measured
    workload is never proposed (its answer is exact)."""
    policy = policy if policy is not None else policy_for(store, gpu)
    pool: dict[str, list] = {}
    for w, us in asked:
        for cand in (neighbours(w) if us == 0 else (w,)):
            key = workload_key(cand)
            if key in pool:
                pool[key][1] += us
                pool[key][2] += 1
                continue
            pool[key] = [cand, us, 1]
    out = []
    for key, (cand, us, count) in pool.items():
        c = canonical_workload(cand)
        if rank(store.cells_for(gpu, key, as_read=c.kv_layout is KVLayout.DENSE))[0]:
            continue
        er = expected_regret(policy.choose(c) if policy is not None else None)
        out.append(PlannedMeasurement(cand, er, er * us if us else er, count))
    asked_keys = [workload_key(w) for w, us in asked if us == 0]
    out.sort(key=lambda p: (workload_key(p.workload) not in asked_keys, -p.weight, p.workload.tag))
    return tuple(out[:n])


# ---- a trace's calls --------------------------------------------------------------------------------------------
def call_interface(call: AttentionCall) -> Interface:
    """The interface a traced call used: a serving engine's op reads a paged cache, a packed variable-length call
    packed tokens, FlashInfer's its wrapper, FlexAttention's flex, anything else SDPA's dense tensors."""
    if call.engine is not None:
        return Interface.PAGED
    if call.backend == "flashinfer":
        return Interface.FLASHINFER
    if call.varlen:
        return Interface.PACKED_VARLEN
    if call.backend == "flex":
        return Interface.FLEX
    return Interface.SDPA


@dataclass(frozen=True)
class CallAdvice:
    """One group of a trace's attention calls (the same workload but for its KV length, the same backend that ran):
    ``calls`` of them with ``gpu_time_us`` summed (µs), the ``kv_lens`` they span; ``ran`` the trace's backend name
    and ``interface`` the caller's; ``ran_backend`` the stored backend of that family measured on the workload (the
    fastest, when several: a conservative saving), with its time; the ``recommendation`` for the group's longest KV
    length (``workload``), ``per_kv``: each KV length's status; ``saving_us`` = ``gpu_time_us × (1 − best / ran)``
    when both the best drop-in and the backend that ran were measured there (None otherwise; 0 when the one that ran
    is the best or ties it)."""

    workload: Workload
    ran: str
    interface: Interface
    calls: int
    gpu_time_us: float
    kv_lens: tuple[int, ...]
    recommendation: Recommendation
    per_kv: tuple[tuple[int, Status, str | None], ...]
    ran_backend: str | None
    ran_us: float | None
    saving_us: float | None


@dataclass(frozen=True)
class TraceAdvice:
    """:class:`CallAdvice` for one trace file: ``label``/``path`` of the file, the ``gpu`` looked up (None: no GPU
    named — then ``advice`` is empty), ``steps`` (``ProfilerStep`` windows; 0 when none), ``unshaped`` calls
    without a workload, the ``plan`` (workloads worth measuring) and whether one was asked for (``planned``), and the totals: ``saving_us`` over
    the file, ``saving_per_step_us`` (None without steps)."""

    label: str
    path: str
    gpu: str | None
    advice: tuple[CallAdvice, ...]
    steps: int
    unshaped: int
    plan: tuple[PlannedMeasurement, ...] = ()
    planned: bool = False

    @property
    def saving_us(self) -> float:
        """Estimated GPU time saved over the whole trace (µs): the sum of the known savings."""
        return sum(a.saving_us for a in self.advice if a.saving_us)

    @property
    def saving_per_step_us(self) -> float | None:
        """:attr:`saving_us` per ``ProfilerStep`` (None when the trace marks no steps)."""
        return self.saving_us / self.steps if self.steps else None


def _group_key(w: Workload) -> str:
    """A workload's key with its KV length left out: decode calls of one sequence growing step by step group."""
    if w.seqs:
        return workload_key(w)
    return workload_key(w.with_(kv_len=max(w.q_len, 1), window=None)) + f"|w{w.window}"


def advise_trace(store: ResultsStore, calls: TraceCalls, gpu: str | None, *, plan_n: int = 0) -> TraceAdvice:
    """Advice for every attention call of one analyzed trace on ``gpu`` (the trace's device name resolved against
    the store, or the ``--gpu`` given; None: no advice), calls grouped by workload but for the KV length (one line
    per group, its KV range); with ``plan_n`` the workloads whose measurement would most sharpen these answers."""
    groups: dict[tuple[str, str], list[AttentionCall]] = {}
    unshaped = 0
    for c in calls.calls:
        if c.workload is None:
            unshaped += 1
            continue
        groups.setdefault((_group_key(c.workload), c.backend), []).append(c)
    out: list[CallAdvice] = []
    policy = policy_for(store, gpu) if gpu is not None else None
    asked: list[tuple[Workload, float]] = []
    for (_, ran), group in groups.items() if gpu is not None else ():
        caller = call_interface(group[0])
        by_kv: dict[int, list[AttentionCall]] = {}
        for c in group:
            by_kv.setdefault(c.workload.kv_len, []).append(c)  # type: ignore[union-attr]
        per_kv = []
        saving_total: float | None = None
        ran_r = None
        for kv in sorted(by_kv):
            w = by_kv[kv][0].workload
            rec = recommend(store, w, gpu, policy=policy, interface=caller)  # type: ignore[arg-type]
            adoptions = {o.backend: o.adoption for o in rec.options if o.adoption is not None}
            pick = rec.best_drop_in or rec.fastest
            per_kv.append((kv, rec.status, pick.backend if pick is not None else rec.best))
            gpu_us = sum(c.gpu_time_us for c in by_kv[kv])
            asked.append((w, gpu_us))  # type: ignore[arg-type]
            family = TRACE_FAMILY.get(ran, ran)
            # the stored backend of the family that ran, of the call's own interface first (a traced SDPA math call
            # is sdpa-math's cells, not eager's, though both are the dense family)
            mine = sorted((r for r in rec.ranked if any(c.family == family for c in r.cells)),
                          key=lambda r: (adoption_of(r.backend, adoptions.get(r.backend)) is None
                                         or adoption_of(r.backend, adoptions.get(r.backend)).interface is not caller,
                                         r.time.median_us))
            if mine:
                ran_r = mine[0]
                best = rec.best_drop_in.measured if rec.best_drop_in and rec.best_drop_in.measured else rec.ranked[0]
                s = 0.0 if (ran_r is best or ran_r.tie or best.time.median_us >= ran_r.time.median_us) else \
                    gpu_us * (1.0 - best.time.median_us / ran_r.time.median_us)
                saving_total = (saving_total or 0.0) + s
        longest = by_kv[max(by_kv)][0].workload
        rec = recommend(store, longest, gpu, policy=policy, interface=caller)  # type: ignore[arg-type]
        out.append(CallAdvice(longest, ran, caller, len(group), sum(c.gpu_time_us for c in group),  # type: ignore[arg-type]
                              tuple(sorted(by_kv)), rec, tuple(per_kv), ran_r.backend if ran_r else None,
                              ran_r.time.median_us if ran_r else None, saving_total))
    planned = plan(store, gpu, asked, plan_n, policy=policy) if plan_n and gpu is not None else ()
    return TraceAdvice(calls.label, calls.path, gpu, tuple(out), len(calls.steps), unshaped, planned, bool(plan_n))


def trace_gpu(store: ResultsStore, calls: TraceCalls, override: str | None) -> str | None:
    """The stored GPU a trace's calls are looked up on: ``override`` (``--gpu``) when given, else the trace's
    device name (``deviceProperties``) when the store holds it; None otherwise.

    Raises:
        ProfattnError: ``override`` matches no stored GPU (:func:`resolve_gpu`).
    """
    if override is not None:
        return resolve_gpu(store, override)
    if calls.device_name:
        try:
            return resolve_gpu(store, calls.device_name)
        except ProfattnError:
            return None
    return None


__all__ = ["NEAR_TIE_FRACTION", "CallAdvice", "ChangeCost", "Evidence", "Excluded", "Option", "PlannedMeasurement",
           "RankedBackend", "Recommendation", "Status", "TraceAdvice", "advise_trace", "call_interface",
           "expected_regret", "neighbours", "plan", "policy_for", "rank", "recommend", "resolve_gpu", "trace_gpu"]
