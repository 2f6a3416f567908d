"""Which backend for this workload on this GPU: ranked from the results store, or predicted by the selection
policy (:mod:`profattn.analysis.policy`), or unknown; and the same for every attention call of a trace. Typed
records only; :mod:`profattn.report.recommend` words them.

The rule (TransformerEngine's benchmark procedure, with profattn's noise rule): look the exact workload up
(:func:`~profattn.store.workload_key`) among the GPU's stored cells; only eligible cells rank (timed, correct,
their trace confirming their family — incorrect and NaN cells never do). The fastest is the *measured winner*
unless another backend is within :data:`NEAR_TIE_FRACTION` of it or ties it by
:func:`~profattn.analysis.verdict.judged_margin` — then a *near tie*, naming the kernels. Never measured there:
the policy's choice, *predicted* with its confidence, inside the domain it was learnt from; else *unknown* (the
report prints the ``profattn profile --workload …`` that measures it).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from profattn.analysis.policy import (
    Policy, Prediction, derive, features, policy_from_dict, policy_to_dict, pooled_time,
)
from profattn.analysis.verdict import JudgedTime, judged_margin
from profattn.errors import ProfattnError
from profattn.store import Measurement, ResultsStore, StoredRun, canonical_workload, workload_fields, workload_key
from profattn.workload import Workload

if TYPE_CHECKING:  # a trace's calls are advised on only with analyze --recommend
    from profattn.analysis.call_records import TraceCalls

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
    """One backend measured on the workload: its pooled judged ``time`` (µs; :func:`~profattn.analysis.policy.pooled_time`),
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
    counters) against the workload's requested bytes."""

    run_id: str
    dominant_kernel: str | None
    grid: str | None
    block: str | None
    ctas: int | None
    ctas_per_sm: float | None
    gpu_time_us: float | None
    dram_bytes: float | None
    requested_bytes: int | None


@dataclass(frozen=True)
class Recommendation:
    """The answer for one workload on one GPU: ``status``; ``ranked`` (fastest first; empty unless measured);
    ``tied``: the backends in a near tie with the winner; ``excluded`` cells; the winner's ``evidence``;
    ``prediction`` (status predicted) with the ``policy`` it came from; the ``runs`` behind the ranked cells."""

    workload: Workload
    gpu: str
    status: Status
    ranked: tuple[RankedBackend, ...] = ()
    tied: tuple[str, ...] = ()
    excluded: tuple[Excluded, ...] = ()
    evidence: Evidence | None = None
    prediction: Prediction | None = None
    policy: Policy | None = None
    runs: tuple[StoredRun, ...] = ()

    @property
    def best(self) -> str | None:
        """The recommended backend (measured or predicted), or None when unknown."""
        if self.ranked:
            return self.ranked[0].backend
        return self.prediction.backend if self.prediction else None


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
    or forget (the cached copy carries no validation; :func:`~profattn.analysis.policy.derive` computes it)."""
    cached = store.cached_policy(gpu)
    if cached is not None:
        return policy_from_dict(json.loads(cached))
    generation = store.generation()
    policy = derive(store.cells_on(gpu, eligible_only=True), gpu, with_validation=False)
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
                    c.requested_bytes)


def recommend(store: ResultsStore, workload: Workload, gpu: str, *, policy: Policy | None = None) -> Recommendation:
    """The :class:`Recommendation` for ``workload`` on ``gpu`` (a name the store holds: :func:`resolve_gpu`);
    ``policy`` given saves deriving it (:func:`policy_for`)."""
    w = canonical_workload(workload)
    cells = store.cells_for(gpu, workload_key(w))
    ranked, excluded = rank(cells)
    if ranked:
        runs = {r.run_id: r for r in store.runs()}
        used = tuple(runs[i] for i in sorted({c.run_id for r in ranked for c in r.cells}) if i in runs)
        tied = tuple(r.backend for r in ranked if r.tie)
        return Recommendation(workload, gpu, Status.NEAR_TIE if tied else Status.MEASURED_WINNER, ranked, tied,
                              excluded, _evidence(ranked[0], runs), runs=used)
    policy = policy if policy is not None else policy_for(store, gpu)
    if policy is not None:
        pred = policy.predict(features(workload_fields(w), policy.num_sms))
        if pred is not None:
            return Recommendation(workload, gpu, Status.PREDICTED, excluded=excluded, prediction=pred, policy=policy)
    return Recommendation(workload, gpu, Status.UNKNOWN, excluded=excluded, policy=policy)


# ---- a trace's calls --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CallAdvice:
    """One group of a trace's attention calls (same workload, same backend that ran): ``calls`` of them with
    ``gpu_time_us`` summed (µs); ``ran`` the trace's backend name and ``ran_backend`` the stored backend of that
    family measured on the workload (the fastest, when several: a conservative saving), with its time; the
    ``recommendation``; ``saving_us`` = ``gpu_time_us × (1 − best / ran)`` when both the best and the backend that ran
    were measured there (None otherwise; 0 when the one that ran is the best or ties it)."""

    workload: Workload
    ran: str
    calls: int
    gpu_time_us: float
    recommendation: Recommendation
    ran_backend: str | None
    ran_us: float | None
    saving_us: float | None


@dataclass(frozen=True)
class TraceAdvice:
    """:class:`CallAdvice` for one trace file: ``label``/``path`` of the file, the ``gpu`` looked up (None: no GPU
    named — then ``advice`` is empty), ``steps`` (``ProfilerStep`` windows; 0 when none), ``unshaped`` calls
    without a workload, and the totals: ``saving_us`` over the file, ``saving_per_step_us`` (None without steps)."""

    label: str
    path: str
    gpu: str | None
    advice: tuple[CallAdvice, ...]
    steps: int
    unshaped: int

    @property
    def saving_us(self) -> float:
        """Estimated GPU time saved over the whole trace (µs): the sum of the known savings."""
        return sum(a.saving_us for a in self.advice if a.saving_us)

    @property
    def saving_per_step_us(self) -> float | None:
        """:attr:`saving_us` per ``ProfilerStep`` (None when the trace marks no steps)."""
        return self.saving_us / self.steps if self.steps else None


def advise_trace(store: ResultsStore, calls: TraceCalls, gpu: str | None) -> TraceAdvice:
    """Advice for every attention call of one analyzed trace on ``gpu`` (the trace's device name resolved against
    the store, or the ``--gpu`` given; None: no advice)."""
    groups: dict[tuple[str, str], list] = {}
    unshaped = 0
    for c in calls.calls:
        if c.workload is None:
            unshaped += 1
            continue
        groups.setdefault((workload_key(c.workload), c.backend), []).append(c)
    out: list[CallAdvice] = []
    policy = policy_for(store, gpu) if gpu is not None else None
    for (key, ran), group in groups.items() if gpu is not None else ():
        w = group[0].workload
        rec = recommend(store, w, gpu, policy=policy)
        family = TRACE_FAMILY.get(ran, ran)
        mine = [r for r in rec.ranked if any(c.family == family for c in r.cells)]
        gpu_us = sum(c.gpu_time_us for c in group)
        ran_r = mine[0] if mine else None
        saving = None
        if ran_r is not None and rec.ranked:
            best = rec.ranked[0]
            saving = 0.0 if (ran_r is best or ran_r.tie) else gpu_us * (1.0 - best.time.median_us / ran_r.time.median_us)
        out.append(CallAdvice(w, ran, len(group), gpu_us, rec, ran_r.backend if ran_r else None,
                              ran_r.time.median_us if ran_r else None, saving))
    return TraceAdvice(calls.label, calls.path, gpu, tuple(out), len(calls.steps), unshaped)


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


__all__ = ["NEAR_TIE_FRACTION", "CallAdvice", "Evidence", "Excluded", "RankedBackend", "Recommendation", "Status",
           "TraceAdvice", "advise_trace", "policy_for", "rank", "recommend", "resolve_gpu", "trace_gpu"]
