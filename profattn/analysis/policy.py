"""A kernel-selection policy learnt from stored measurements: a small decision tree over workload fields whose
leaves name a backend, readable as rules ("decode, B·Hkv/SMs < 0.5, kv_len ≥ 4096 → triton-paged-decode"), and
its leave-one-workload-out validation. Typed records only; :mod:`profattn.report.recommend` words them.

The learner (hand-written: the rules being readable is the point, and a library tree optimizes impurity, not the
latency a wrong choice loses):

* Each workload (one :func:`~profattn.store.workload_key` on one GPU) with its eligible backends' pooled times
  (:func:`pooled_time`). The *cost* of choosing backend ``b`` for workload ``w`` is 0 when ``b`` is within noise of
  ``w``'s best by the project's one rule (:func:`~profattn.analysis.verdict.judged_margin`), else its regret
  ``t_b / t_best − 1``; :data:`UNRUNNABLE_COST` when ``b`` has no eligible cell on ``w`` (it did not run, or ran
  wrong).
* A leaf names the backend of least summed cost over its workloads. A node splits on the test — ``field ≥ t`` for
  a number (``t`` the geometric mean of two neighbouring values seen), ``field == v`` for a category — that lowers
  the summed cost most, while each side keeps :data:`MIN_LEAF` workloads and the depth stays within
  :data:`MAX_DEPTH`; a split that saves nothing is not made.
* Fields: the workload's (``phase``, ``batch``, ``q_len``, ``kv_len``, ``num_q_heads``, ``num_kv_heads``,
  ``head_dim``, ``dtype``, ``mask``, ``kv_layout``, ``page_size`` (0: dense), ``kv_len_dist``,
  ``shared_prefix_len``, ``append``, ``kv_dtype``, ``window`` (0: none), ``varlen``) and two derived ones:
  ``group_size`` = Hq/Hkv and ``bhkv_per_sm`` = B·Hkv / the GPU's SM count (the work items a
  one-CTA-per-(sequence, KV head) kernel launches, per SM: below 1 part of the GPU idles unless the kernel splits
  the KV length).
* A prediction is made only inside the policy's *domain*: the (phase, dtype, kv_layout, kv_dtype, kv_len_dist)
  combinations it was learnt from (a dense call is not answered from paged measurements, a ragged batch not from
  uniform ones: other kernels can run there); elsewhere the answer is "unknown".

Validation (:func:`validate`): every workload with at least two eligible backends is held out in turn, the tree is
learnt from the others, and its choice for the held-out workload is compared with what was measured there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profattn.analysis.verdict import JudgedTime, judged_margin
from profattn.store import Measurement, row_features

if TYPE_CHECKING:  # numpy is imported where a tree is grown: answering from a cached policy needs none of it
    import numpy as np

#: ``schema`` and ``version`` of the exported policy (``profattn recommend --export``).
POLICY_SCHEMA = "profattn.policy"
POLICY_VERSION = 1
MAX_DEPTH = 4
MIN_LEAF = 1
#: The cost of choosing a backend that has no eligible cell on a workload (10× its time, as a regret).
UNRUNNABLE_COST = 10.0
#: Fields of the domain: a prediction is made only for a combination the policy saw.
DOMAIN_FIELDS = ("phase", "dtype", "kv_layout", "kv_dtype", "kv_len_dist")
NUMERIC_FIELDS = ("kv_len", "batch", "bhkv_per_sm", "q_len", "group_size", "head_dim", "num_q_heads", "num_kv_heads",
                  "page_size", "window", "shared_prefix_len")
CATEGORICAL_FIELDS = ("phase", "kv_layout", "dtype", "kv_dtype", "mask", "kv_len_dist", "append", "varlen")
#: What each field a rule may test means (exported with the policy).
FIELD_DOC: dict[str, str] = {
    "phase": "train | prefill | decode | mixed", "batch": "sequences per call B", "q_len": "query rows per sequence",
    "kv_len": "keys per sequence (the longest, for ragged or variable-length calls)",
    "num_q_heads": "Hq", "num_kv_heads": "Hkv", "head_dim": "d", "dtype": "bfloat16 | float16 | float32",
    "mask": "causal | none (a one-row call's none is stored as causal)", "kv_layout": "dense | paged",
    "page_size": "tokens per KV page; 0 for a dense cache", "kv_len_dist": "uniform | ragged | lognormal",
    "shared_prefix_len": "tokens shared by every sequence", "append": "the call also appends its new K/V",
    "kv_dtype": "KV-cache storage dtype, 'none' when it is dtype", "window": "sliding window; 0 for none",
    "varlen": "per-sequence lengths given (a serving step)", "group_size": "Hq / Hkv",
    "bhkv_per_sm": "B·Hkv / streaming multiprocessors of the GPU",
}


def features(row: Mapping[str, Any], num_sms: int | None) -> dict[str, Any]:
    """The fields a rule may test, from a workload's fields (:func:`~profattn.store.row_features` or the same
    keys): categories as text, numbers as floats (``page_size``/``window`` None → 0; ``bhkv_per_sm`` None when
    the SM count is unknown)."""
    out: dict[str, Any] = {k: str(row[k]) if row[k] is not None else "none" for k in CATEGORICAL_FIELDS}
    out["append"] = str(bool(row["append"])).lower()
    out["varlen"] = str(bool(row["varlen"])).lower()
    for k in ("kv_len", "batch", "q_len", "head_dim", "num_q_heads", "num_kv_heads", "shared_prefix_len"):
        out[k] = float(row[k])
    out["page_size"] = float(row["page_size"] or 0)
    out["window"] = float(row["window"] or 0)
    out["group_size"] = row["num_q_heads"] / row["num_kv_heads"]
    out["bhkv_per_sm"] = row["batch"] * row["num_kv_heads"] / num_sms if num_sms else None
    return out


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
    """One workload's eligible backends on one GPU: ``times`` by backend (pooled, fastest first), ``features``
    (:func:`features`), ``key`` its workload key and ``cells`` the stored cells behind ``times``."""

    key: str
    features: dict[str, Any]
    times: tuple[JudgedTime, ...]
    cells: int

    @property
    def best(self) -> JudgedTime:
        """The fastest backend's time."""
        return self.times[0]

    @property
    def costs(self) -> dict[str, float]:
        """:func:`choice_cost` of each backend measured here (computed once)."""
        memo = self.__dict__.get("_costs")
        if memo is None:
            memo = {t.backend: choice_cost(self, t.backend) for t in self.times}
            object.__setattr__(self, "_costs", memo)
        return memo

    def time_of(self, backend: str) -> JudgedTime | None:
        """``backend``'s time here, or None when it has no eligible cell."""
        return next((t for t in self.times if t.backend == backend), None)


def workload_times(cells: Iterable[Measurement]) -> tuple[WorkloadTimes, ...]:
    """Group eligible cells (ineligible ones never rank) by workload key and backend, pooled (:func:`pooled_time`),
    sorted by key."""
    by_key: dict[str, dict[str, list[Measurement]]] = {}
    for c in cells:
        if c.eligible and c.latency_us is not None and math.isfinite(c.latency_us):
            by_key.setdefault(c.workload_key, {}).setdefault(c.backend, []).append(c)
    out = []
    for key in sorted(by_key):
        per = by_key[key]
        first = next(iter(per.values()))[0]
        times = sorted((pooled_time(v) for v in per.values()), key=lambda t: (t.median_us, t.backend))
        out.append(WorkloadTimes(key, features(row_features(first), first.num_sms), tuple(times),
                                 sum(len(v) for v in per.values())))
    return tuple(out)


def choice_cost(w: WorkloadTimes, backend: str) -> float:
    """The cost of choosing ``backend`` for ``w`` (see the module docstring): 0 within noise of the best, else its
    regret, :data:`UNRUNNABLE_COST` without an eligible cell."""
    t = w.time_of(backend)
    if t is None:
        return UNRUNNABLE_COST
    if t.backend == w.best.backend or judged_margin(w.best, t).tie:
        return 0.0
    return t.median_us / w.best.median_us - 1.0


def cost_matrix(ws: Sequence[WorkloadTimes], backends: Sequence[str]) -> np.ndarray:
    """:func:`choice_cost` of every backend (columns) for every workload (rows), memoized per workload."""
    import numpy as np

    return np.array([[w.costs.get(b, UNRUNNABLE_COST) for b in backends] for w in ws], dtype=float).reshape(len(ws), len(backends))


def regret(w: WorkloadTimes, backend: str) -> float | None:
    """Latency lost by choosing ``backend`` for ``w``: ``t_backend / t_best − 1`` (0 for the best), None when the
    backend has no eligible cell there."""
    t = w.time_of(backend)
    return None if t is None else t.median_us / w.best.median_us - 1.0


@dataclass(frozen=True)
class Condition:
    """One test of a rule: ``field op value`` with ``op`` one of ``<``, ``>=`` (numbers), ``==``, ``!=``
    (categories, as text)."""

    field: str
    op: str
    value: float | str

    def holds(self, feats: Mapping[str, Any]) -> bool | None:
        """Whether the test holds for ``feats`` (None: the field is unknown there, e.g. no SM count)."""
        v = feats.get(self.field)
        if v is None:
            return None
        if self.op == ">=":
            return v >= self.value
        if self.op == "<":
            return v < self.value
        if self.op == "==":
            return v == self.value
        return v != self.value


@dataclass(frozen=True)
class Node:
    """A node of the tree: a leaf (``test`` None) names ``backend``; an inner node sends a workload to ``then`` when
    ``test`` holds, else to ``otherwise``. ``support``: training workloads that reached it; ``within_noise``: those
    where its leaf's backend was within noise of their best; ``mean_regret``: their mean :func:`regret` (unrunnable
    ones counted at :data:`UNRUNNABLE_COST`)."""

    backend: str
    support: int
    within_noise: int
    mean_regret: float
    test: Condition | None = None
    then: "Node | None" = None
    otherwise: "Node | None" = None


@dataclass(frozen=True)
class Rule:
    """A leaf as a rule: every ``conditions`` holds → ``backend`` (the leaf's support and record alongside)."""

    conditions: tuple[Condition, ...]
    backend: str
    support: int
    within_noise: int
    mean_regret: float


@dataclass(frozen=True)
class Prediction:
    """The policy's choice for a workload: ``backend``, the ``rule`` that chose it, and its confidence: the
    fraction of the rule's training workloads where that backend was within noise of the best
    (``rule.within_noise / rule.support``)."""

    backend: str
    rule: Rule

    @property
    def confidence(self) -> float:
        """``rule.within_noise / rule.support`` (0..1)."""
        return self.rule.within_noise / self.rule.support if self.rule.support else 0.0


def _leaf(ws: Sequence[WorkloadTimes], costs: np.ndarray, backends: Sequence[str]) -> Node:
    import numpy as np

    total = costs.sum(axis=0)
    b = int(np.argmin(total + 1e-9 * np.arange(len(backends))))
    name = backends[b]
    regrets = [regret(w, name) for w in ws]
    within = sum(1 for c in costs[:, b] if c == 0.0)
    mean = float(np.mean([UNRUNNABLE_COST if r is None else r for r in regrets])) if ws else 0.0
    return Node(name, len(ws), within, mean)


def _best_split(ws: Sequence[WorkloadTimes], costs: np.ndarray) -> tuple[float, Condition, np.ndarray] | None:
    import numpy as np

    n = len(ws)
    best: tuple[float, Condition, np.ndarray] | None = None
    for name in (*CATEGORICAL_FIELDS, *NUMERIC_FIELDS):
        vals = [w.features.get(name) for w in ws]
        if any(v is None for v in vals):
            continue
        if name in CATEGORICAL_FIELDS:
            for v in sorted(set(vals)):
                mask = np.array([x == v for x in vals])
                k = int(mask.sum())
                if k < MIN_LEAF or n - k < MIN_LEAF:
                    continue
                cost = costs[mask].sum(axis=0).min() + costs[~mask].sum(axis=0).min()
                if best is None or cost < best[0] - 1e-12:
                    best = (float(cost), Condition(name, "==", v), mask)
            continue
        arr = np.array(vals, dtype=float)
        order = np.argsort(arr, kind="stable")
        sorted_vals = arr[order]
        cum = np.cumsum(costs[order], axis=0)
        # splitting after sorted position i (left: 0..i): every such cost at once
        split_cost = cum[:-1].min(axis=1) + (cum[-1] - cum[:-1]).min(axis=1)
        valid = sorted_vals[1:] != sorted_vals[:-1]
        valid[: MIN_LEAF - 1] = False
        valid[n - MIN_LEAF:] = False
        if not valid.any():
            continue
        i = int(np.argmin(np.where(valid, split_cost, np.inf)))
        cost = split_cost[i]
        if best is None or cost < best[0] - 1e-12:
            lo, hi = sorted_vals[i], sorted_vals[i + 1]
            t = math.sqrt(lo * hi) if lo > 0 else (lo + hi) / 2
            best = (float(cost), Condition(name, ">=", float(t)), arr >= t)
    return best


def _grow(ws: Sequence[WorkloadTimes], costs: np.ndarray, backends: Sequence[str], depth: int) -> Node:
    """The subtree over ``ws`` (``costs``: their rows of the cost matrix, workloads × backends)."""
    import numpy as np

    leaf = _leaf(ws, costs, backends)
    if depth >= MAX_DEPTH or len(ws) < 2 * MIN_LEAF:
        return leaf
    split = _best_split(ws, costs)
    if split is None or split[0] >= costs.sum(axis=0).min() - 1e-9:
        return leaf
    _, cond, mask = split
    left = [w for w, m in zip(ws, mask) if m]
    right = [w for w, m in zip(ws, mask) if not m]
    return Node(leaf.backend, leaf.support, leaf.within_noise, leaf.mean_regret, cond,
                _grow(left, costs[mask], backends, depth + 1), _grow(right, costs[~mask], backends, depth + 1))


@dataclass(frozen=True)
class Policy:
    """A selection policy for one GPU: the tree, the domain it may answer for, and where it came from.

    ``workloads``: training workloads; ``cells``: the cells behind them; ``runs``: their run ids;
    ``backends``: every backend it may choose; ``validation``: its :func:`validate` numbers when computed."""

    gpu: str
    num_sms: int | None
    root: Node
    domain: tuple[tuple[str, ...], ...]
    backends: tuple[str, ...]
    workloads: int
    cells: int
    runs: tuple[str, ...] = ()
    validation: "Validation | None" = None

    def covers(self, feats: Mapping[str, Any]) -> bool:
        """Whether ``feats`` fall inside the domain (a combination of :data:`DOMAIN_FIELDS` it was learnt from)."""
        return tuple(str(feats[f]) for f in DOMAIN_FIELDS) in self.domain

    def predict(self, feats: Mapping[str, Any]) -> Prediction | None:
        """The backend for ``feats`` (:func:`features`), or None outside the domain."""
        if not self.covers(feats):
            return None
        node, conds = self.root, []
        while node.test is not None:
            holds = node.test.holds(feats)
            if holds is None:
                break  # a field this workload lacks: answer from this node
            conds.append(node.test if holds else _negate(node.test))
            node = node.then if holds else node.otherwise  # type: ignore[assignment]
        return Prediction(node.backend, Rule(tuple(conds), node.backend, node.support, node.within_noise, node.mean_regret))

    def rules(self) -> tuple[Rule, ...]:
        """Every leaf as a :class:`Rule`, in tree order (then-branch first)."""
        out: list[Rule] = []

        def walk(node: Node, conds: tuple[Condition, ...]) -> None:
            if node.test is None:
                out.append(Rule(conds, node.backend, node.support, node.within_noise, node.mean_regret))
                return
            walk(node.then, (*conds, node.test))  # type: ignore[arg-type]
            walk(node.otherwise, (*conds, _negate(node.test)))  # type: ignore[arg-type]

        walk(self.root, ())
        return tuple(out)


def _negate(c: Condition) -> Condition:
    return Condition(c.field, {">=": "<", "<": ">=", "==": "!=", "!=": "=="}[c.op], c.value)


def learn(ws: Sequence[WorkloadTimes], gpu: str, num_sms: int | None, *, cells: int | None = None,
          runs: Sequence[str] = ()) -> Policy | None:
    """Learn a :class:`Policy` from ``ws`` (one GPU's workloads), or None when there is none."""
    if not ws:
        return None
    backends = tuple(sorted({t.backend for w in ws for t in w.times}))
    root = _grow(ws, cost_matrix(ws, backends), backends, 0)
    domain = tuple(sorted({tuple(str(w.features[f]) for f in DOMAIN_FIELDS) for w in ws}))
    return Policy(gpu, num_sms, root, domain, backends, len(ws), cells if cells is not None else sum(w.cells for w in ws),
                  tuple(runs))


@dataclass(frozen=True)
class HeldOut:
    """One held-out workload: ``key``, its ``phase``, the measured ``best`` backend, the ``predicted`` one (None:
    outside the domain learnt from the others), ``within_noise`` (the predicted backend ties the best by the one
    noise rule), ``regret`` (:func:`regret`; None when the predicted backend has no eligible cell there)."""

    key: str
    phase: str
    best: str
    predicted: str | None
    within_noise: bool
    regret: float | None


@dataclass(frozen=True)
class Validation:
    """Leave-one-workload-out numbers over ``held_out`` (workloads with ≥ 2 eligible backends), optionally of one
    phase: ``within_noise`` count (the predicted kernel ties the measured best), ``exact`` (it is the best),
    ``uncovered`` (no prediction: outside the domain the others span), ``unrunnable`` (predicted a backend with no
    eligible cell there), ``mean_regret`` and ``worst`` over the held-out workloads with a regret."""

    phase: str | None
    held_out: tuple[HeldOut, ...]

    @property
    def n(self) -> int:
        """Held-out workloads."""
        return len(self.held_out)

    @property
    def within_noise(self) -> int:
        return sum(h.within_noise for h in self.held_out)

    @property
    def exact(self) -> int:
        return sum(h.predicted == h.best for h in self.held_out)

    @property
    def uncovered(self) -> int:
        return sum(h.predicted is None for h in self.held_out)

    @property
    def unrunnable(self) -> int:
        return sum(h.predicted is not None and h.regret is None for h in self.held_out)

    @property
    def within_noise_fraction(self) -> float | None:
        """``within_noise / n`` (None when nothing was held out)."""
        return self.within_noise / self.n if self.n else None

    @property
    def mean_regret(self) -> float | None:
        """Mean regret over held-out workloads with one (None without any)."""
        rs = [h.regret for h in self.held_out if h.regret is not None]
        return sum(rs) / len(rs) if rs else None

    @property
    def worst(self) -> HeldOut | None:
        """The held-out workload of largest regret (None without any)."""
        rs = [h for h in self.held_out if h.regret is not None]
        return max(rs, key=lambda h: h.regret) if rs else None  # type: ignore[arg-type, return-value]

    def of_phase(self, phase: str) -> "Validation":
        """The same numbers over one phase's held-out workloads."""
        return Validation(phase, tuple(h for h in self.held_out if h.phase == phase))


def validate(ws: Sequence[WorkloadTimes], gpu: str, num_sms: int | None) -> Validation:
    """Leave-one-workload-out validation (see the module docstring)."""
    held: list[HeldOut] = []
    for i, w in enumerate(ws):
        if len(w.times) < 2:
            continue
        policy = learn([x for j, x in enumerate(ws) if j != i], gpu, num_sms)
        pred = policy.predict(w.features) if policy else None
        name = pred.backend if pred else None
        t = w.time_of(name) if name else None
        within = t is not None and (t.backend == w.best.backend or judged_margin(w.best, t).tie)
        held.append(HeldOut(w.key, str(w.features["phase"]), w.best.backend, name, within,
                            regret(w, name) if name else None))
    return Validation(None, tuple(held))


def derive(cells: Sequence[Measurement], gpu: str, *, with_validation: bool = True) -> Policy | None:
    """The policy for ``gpu`` from its stored ``cells`` (other GPUs' cells ignored), with its validation; None when
    no workload on that GPU has an eligible cell."""
    mine = [c for c in cells if c.gpu == gpu]
    ws = workload_times(mine)
    sms = next((c.num_sms for c in mine if c.num_sms), None)
    policy = learn(ws, gpu, sms, cells=sum(w.cells for w in ws), runs=sorted({c.run_id for c in mine}))
    if policy is None or not with_validation:
        return policy
    from dataclasses import replace

    return replace(policy, validation=validate(ws, gpu, sms))


# ---- the exported format ------------------------------------------------------------------------------------
def _cond_dict(c: Condition) -> dict[str, Any]:
    return {"field": c.field, "op": c.op, "value": c.value}


def _node_dict(n: Node) -> dict[str, Any]:
    d: dict[str, Any] = {"backend": n.backend, "support": n.support, "within_noise": n.within_noise,
                         "mean_regret": round(n.mean_regret, 6)}
    if n.test is not None:
        d.update({"test": _cond_dict(n.test), "then": _node_dict(n.then), "else": _node_dict(n.otherwise)})  # type: ignore[arg-type]
    return d


def _node(d: Mapping[str, Any]) -> Node:
    test = d.get("test")
    return Node(d["backend"], int(d["support"]), int(d["within_noise"]), float(d["mean_regret"]),
                Condition(test["field"], test["op"], test["value"]) if test else None,
                _node(d["then"]) if test else None, _node(d["else"]) if test else None)


def validation_dict(v: Validation | None) -> dict[str, Any] | None:
    """The validation numbers as plain JSON values (None stays None)."""
    if v is None:
        return None
    worst = v.worst
    return {"method": "leave one workload out", "held_out": v.n, "within_noise": v.within_noise, "exact": v.exact,
            "uncovered": v.uncovered, "unrunnable": v.unrunnable, "within_noise_fraction": v.within_noise_fraction,
            "mean_regret": v.mean_regret, "worst_regret": worst.regret if worst else None,
            "worst_workload": worst.key if worst else None,
            "by_phase": {p: validation_dict(v.of_phase(p)) for p in sorted({h.phase for h in v.held_out})}
            if v.phase is None else None}


def policy_to_dict(p: Policy) -> dict[str, Any]:
    """The exported, versioned policy (``schema`` :data:`POLICY_SCHEMA`, ``version`` :data:`POLICY_VERSION`)::

        {"schema": "profattn.policy", "version": 1, "gpu": "NVIDIA H200", "num_sms": 132,
         "fields": {name: meaning},               # what a condition may test (two derived: group_size, bhkv_per_sm)
         "domain": [{"phase":…, "dtype":…, "kv_layout":…, "kv_dtype":…, "kv_len_dist":…}],  # answer only there
         "rules": [{"when": [{"field": "kv_len", "op": ">=", "value": 4096.0}, …],
                    "backend": "…", "support": 12, "within_noise": 11, "mean_regret": 0.004}],
         "tree": {"backend", "support", "within_noise", "mean_regret", ["test", "then", "else"]},
         "backends": [...], "derived_from": {"workloads", "cells", "runs"}, "validation": {...} | null}

    A selector takes the first rule whose every condition holds (the rules are the tree's leaves: exactly one
    holds inside the domain). ``mean_regret`` is a fraction (0.01 = 1 % slower than the best)."""
    return {
        "schema": POLICY_SCHEMA, "version": POLICY_VERSION, "gpu": p.gpu, "num_sms": p.num_sms,
        "fields": dict(FIELD_DOC),
        "domain": [dict(zip(DOMAIN_FIELDS, d)) for d in p.domain],
        "rules": [{"when": [_cond_dict(c) for c in r.conditions], "backend": r.backend, "support": r.support,
                   "within_noise": r.within_noise, "mean_regret": round(r.mean_regret, 6)} for r in p.rules()],
        "tree": _node_dict(p.root), "backends": list(p.backends),
        "derived_from": {"workloads": p.workloads, "cells": p.cells, "runs": list(p.runs)},
        "validation": validation_dict(p.validation),
    }


def policy_from_dict(d: Mapping[str, Any]) -> Policy:
    """Inverse of :func:`policy_to_dict` (the validation is not read back).

    Raises:
        ValueError: not a policy of a version this code reads.
    """
    if d.get("schema") != POLICY_SCHEMA or d.get("version") != POLICY_VERSION:
        raise ValueError(f"not a {POLICY_SCHEMA} version {POLICY_VERSION} document")
    return Policy(d["gpu"], d.get("num_sms"), _node(d["tree"]),
                  tuple(tuple(str(x[f]) for f in DOMAIN_FIELDS) for x in d["domain"]), tuple(d["backends"]),
                  int(d["derived_from"]["workloads"]), int(d["derived_from"]["cells"]), tuple(d["derived_from"]["runs"]))
