"""``profattn simulate``, the driver: attention backends served through a scheduler at a declared load — a request
trace, a KV memory budget, a page size, a KV dtype — with every step's attention priced by a :class:`StepCostSource`.

Torch-free; typed records only (sentences are made in :mod:`profattn.report.simulate`).

A *deployment* (:class:`~profattn.analysis.simulation.replay.Deployment`) is a decode backend paired with the
prefill backend that takes the step's prompt chunks (as engines pair a decode kernel with a prefill one: vLLM's
FlashInfer backend plans a decode and a prefill wrapper per step), a KV dtype and a page size, with the KV capacity
that follows from the memory budget. :func:`~profattn.analysis.simulation.replay.run_simulation` replays the trace
(:mod:`profattn.analysis.simulation.replay`); :func:`~profattn.analysis.simulation.rates.search_rate` finds the
highest rate that meets the SLO (:mod:`profattn.analysis.simulation.rates`). :func:`simulate` runs every deployment
at the trace's rate (times ``rate_scale``), searches the highest rate scale that still meets the SLO, prices every
deployment's attention on the *same* steps (the first deployment's schedule) to say which step shapes make the
difference (:func:`shape_rows`, :func:`cross_cost`), and puts the per-call head-to-head of the decode backends in the
store beside the deployment answer (:class:`Findings`, :class:`SimulationReport`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from profattn.analysis.common.margins import judged_margin
from profattn.analysis.selection.policy import pooled_time
from profattn.analysis.simulation.operating import (
    OperatingPoint, OperatingVerdict, compare_operating, search_operating_point,
)
from profattn.analysis.simulation.rates import SEARCH_FLOOR, LatencySummary, RateSearch, search_rate
from profattn.analysis.simulation.replay import (
    SLO, Deployment, SimulationError, SimulationRun, StepKind, StepLog, StepShape, run_simulation,
)
from profattn.analysis.simulation.stepcost import (
    ONE_LAUNCH_MIXED, AttentionShape, CallPart, CallSums, Extrapolation, Provenance, RestOfStep, StepCostSource,
    causal_pairs_array,
)
from profattn.store.records import Measurement
from profattn.workload.models import ModelConfig
from profattn.workload.requests import RequestTrace

__all__ = [
    "BATCH_BINS", "DeploymentResult", "Findings", "HeadToHead", "ShapeClass", "ShapeRow", "SimulationReport",
    "cross_cost", "head_to_head", "sample_steps", "shape_rows", "simulate",
]

#: Decode batch bins of the step-shape table (sequences decoding in the step): [lo, hi) each.
BATCH_BINS: tuple[tuple[int, int], ...] = ((0, 1), (1, 2), (2, 8), (8, 32), (32, 128), (128, 512), (512, 1 << 30))


# ---- step shapes --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeClass:
    """A class of steps: ``kind`` and the decode batch bin ``[batch_lo, batch_hi)`` (:data:`BATCH_BINS`)."""

    kind: StepKind
    batch_lo: int
    batch_hi: int


@dataclass(frozen=True)
class ShapeRow:
    """How often one :class:`ShapeClass` occurred in a run: ``steps``, its share of steps and of simulated time, the
    median decode K/V tokens and prefill tokens of its steps, and per deployment label its attention time on these
    very steps (µs, all layers; :func:`cross_cost`) — ``attention_us`` — with the time of the rest (``rest_us``)."""

    cls: ShapeClass
    steps: int
    step_share: float
    time_share: float
    median_decode_kv: float
    median_prefill_tokens: float
    attention_us: dict[str, float]
    rest_us: float


def _classes(log: StepLog) -> np.ndarray:
    """Class index per step: kind × len(BATCH_BINS) + batch bin."""
    edges = np.array([lo for lo, _ in BATCH_BINS[1:]])
    b = np.searchsorted(edges, log.num_decode, side="right")
    return log.kind.astype(np.int64) * len(BATCH_BINS) + b


def shape_rows(log: StepLog, attention: dict[str, np.ndarray]) -> tuple[ShapeRow, ...]:
    """The step-shape table of ``log`` (most time first), ``attention``: per deployment label its attention µs of
    every step of ``log`` (:func:`cross_cost`)."""
    if not len(log):
        return ()
    cls = _classes(log)
    total_t = float(log.dur_s.sum()) or 1.0
    rows = []
    kinds = list(StepKind)
    for c in np.unique(cls):
        m = cls == c
        kind, b = kinds[int(c) // len(BATCH_BINS)], int(c) % len(BATCH_BINS)
        lo, hi = BATCH_BINS[b]
        rows.append(ShapeRow(ShapeClass(kind, lo, hi), int(m.sum()), float(m.mean()), float(log.dur_s[m].sum()) / total_t,
                             float(np.median(log.decode_kv[m])), float(np.median(log.prefill_tokens[m])),
                             {k: float(v[m].sum()) for k, v in attention.items()}, float(log.rest_us[m].sum())))
    return tuple(sorted(rows, key=lambda r: -r.time_share))


def cross_cost(log: StepLog, deployments: Sequence[Deployment], sources: dict[str | None, StepCostSource],
               model: ModelConfig, shapes: dict[str | None, AttentionShape]) -> dict[str, np.ndarray]:
    """Each deployment's attention time (µs, all layers) on every step of ``log`` — one schedule priced by every
    pair, so the difference is the kernels' alone. ``sources`` / ``shapes``: the step-cost source and attention shape
    per KV dtype."""
    out = {}
    for d in deployments:
        shape = shapes[d.kv_dtype]
        source = sources[d.kv_dtype]
        t = np.zeros(len(log))
        has_d, has_p = log.num_decode > 0, log.prefill_seqs > 0
        one = has_d & has_p if d.pair.prefill in ONE_LAUNCH_MIXED else np.zeros(len(log), dtype=bool)
        if has_d.any():
            dec = source.attention_us(d.pair.decode, CallPart.DECODE, log.decode_calls(shape.group)).us
            t[has_d] += np.where(one[has_d], 0.0, dec) * model.num_layers
        if has_p.any():
            calls = log.prefill_calls(shape.group)
            pre = source.attention_us(d.pair.prefill, CallPart.PREFILL, calls).us
            if one.any():  # a mixed step on a one-launch backend: one call over its decode rows and chunks
                sel = one[has_p]
                both = calls.select(sel).joined(log.decode_calls(shape.group).select(one[has_d]))
                pre = pre.copy()
                pre[sel] = source.attention_us(d.pair.prefill, CallPart.MIXED, both).us
            t[has_p] += pre * model.num_layers
        out[d.label] = t
    return out


def sample_steps(runs: Sequence[SimulationRun], n: int) -> tuple[StepShape, ...]:
    """Up to ``n`` distinct step shapes from the runs' snapshots covering the kinds and sizes that occurred: for each
    kind (decode-only, mixed, prefill-only) the smallest, median and largest by attention work (decode K/V tokens +
    prefill pairs), then evenly in log work over the rest; deterministic."""
    pool = sorted({(s.decode_kv, s.chunks): s for r in runs for s in r.snapshots}.values(), key=lambda s: s.index)
    if not pool or n <= 0:
        return ()

    def work(s: StepShape) -> float:
        return float(sum(s.decode_kv)) + sum(causal_pairs_array(np.float64(q), np.float64(kv)) for q, kv in s.chunks)

    picked: list[StepShape] = []
    for kind in StepKind:
        ks = sorted((s for s in pool if s.kind is kind), key=work)
        for i in ((0, len(ks) // 2, len(ks) - 1) if ks else ()):
            if ks[i] not in picked and len(picked) < n:
                picked.append(ks[i])
    rest = sorted((s for s in pool if s not in picked), key=work)
    if rest and len(picked) < n:  # then evenly in log work between the smallest and the largest left
        w = np.log(np.maximum([work(s) for s in rest], 1.0))
        for target in np.linspace(w[0], w[-1], num=min(n - len(picked), len(rest))):
            i = int(np.argmin(np.abs(w - target)))
            if rest[i] not in picked:
                picked.append(rest[i])
    return tuple(picked[:n])


# ---- the per-call answer -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadToHead:
    """Two decode backends on the decode workloads the store measured for both (eligible cells, the simulation's
    dtype and KV dtype): ``a_wins`` / ``b_wins`` beyond noise (:func:`profattn.analysis.common.margins.judged_margin`),
    ``ties``; ``geomean_b_over_a``: the geometric mean of b's time over a's; ``at_shape``: the same counts on the
    workloads of the simulated model's own heads (Hq, Hkv, d) — (a wins, b wins, ties)."""

    a: str
    b: str
    workloads: int
    a_wins: int
    b_wins: int
    ties: int
    geomean_b_over_a: float | None
    at_shape: tuple[int, int, int]

    @property
    def winner(self) -> str | None:
        """The backend that wins more workloads beyond noise (None: as many each, or none measured)."""
        if self.a_wins == self.b_wins:
            return None
        return self.a if self.a_wins > self.b_wins else self.b


def head_to_head(cells: Sequence[Measurement], a: str, b: str, shape: AttentionShape) -> HeadToHead:
    """:class:`HeadToHead` of decode backends ``a`` and ``b`` over ``cells`` (one GPU's store)."""
    by: dict[str, dict[str, list[Measurement]]] = {}
    for m in cells:
        if (m.phase == "decode" and m.eligible and m.latency_us and m.backend in (a, b) and m.dtype == shape.dtype
                and m.kv_dtype == shape.kv_dtype):
            by.setdefault(m.workload_key, {}).setdefault(m.backend, []).append(m)
    wins = {a: 0, b: 0}
    shape_wins = {a: 0, b: 0}
    ties = shape_ties = 0
    ratios = []
    for key, both in sorted(by.items()):
        if a not in both or b not in both:
            continue
        ta, tb = pooled_time(both[a]), pooled_time(both[b])
        mg = judged_margin(ta, tb)
        ratios.append(math.log(tb.median_us / ta.median_us))
        m0 = both[a][0]
        own = (m0.num_q_heads, m0.num_kv_heads, m0.head_dim) == (shape.num_q_heads, shape.num_kv_heads, shape.head_dim)
        if mg.tie:
            ties += 1
            shape_ties += own
        else:
            wins[mg.ahead] += 1
            shape_wins[mg.ahead] += own
    geo = math.exp(sum(ratios) / len(ratios)) if ratios else None
    return HeadToHead(a, b, len(ratios), wins[a], wins[b], ties, geo, (shape_wins[a], shape_wins[b], shape_ties))


# ---- the whole simulation ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentResult:
    """One deployment: its run at the trace's rate (``run``), latency summaries of it (``ttft``, ``tpot``, ``itl``,
    ``e2e``: seconds), throughput (``output_tokens_per_s``, ``requests_per_s`` over the makespan), ``attainment``
    and ``goodput_per_s`` at the SLO, the step-time breakdown (``attention_decode_s``, ``attention_prefill_s``,
    ``rest_s``: sums over the run's steps), the share of attention time priced by extrapolation per
    :class:`Extrapolation` bit (``extrapolated``), the rate search (``search``, None when not asked) and the
    provenance of its two backends' prices."""

    deployment: Deployment
    run: SimulationRun
    ttft: LatencySummary
    tpot: LatencySummary
    itl: LatencySummary
    e2e: LatencySummary
    output_tokens_per_s: float
    requests_per_s: float
    attainment: float
    goodput_per_s: float
    attention_decode_s: float
    attention_prefill_s: float
    rest_s: float
    extrapolated: dict[str, float]
    search: RateSearch | None
    provenance: tuple[Provenance, ...]
    concurrency_peak: int
    mean_decode_batch: float
    #: of the decode K/V tokens read over the run, the share read from pages another running request shares
    #: (prefix caching; priced at each backend's shared-prefix saving, :meth:`MeasuredCells.shared_saving`)
    decode_shared_share: float = 0.0


@dataclass(frozen=True)
class Findings:
    """What the verdict is built from (typed, no sentences).

    ``per_call``: the store's head-to-head of the first two decode backends (None with fewer than two);
    ``per_call_winner``: its winning decode backend (None: as many wins each, or unmeasured); ``deployment_winner``: the
    label serving the highest rate within the SLO (None when the top two are within the search's resolution:
    ``deployment_tie``) and ``rate_ratio`` (best / runner-up max rate); ``same``: the per-call winner is the
    deployment winner's decode backend; ``shapes``: the step-shape table on the first deployment's schedule, every deployment's
    attention on it; ``dominant``: the class contributing most to the attention difference between the top two
    deployments on those steps, with its share of that difference (``dominant_share``) and the difference in all
    (``attention_delta_s``, runner-up − winner, seconds); capacity: per label ``capacity_tokens``, ``peak_use``
    (peak pages / pages at the highest rate served within the SLO, else at the trace's rate), ``preemptions`` at the trace's rate and at the best rate found,
    ``capacity_bound`` (the cache filled or preempted at the best rate); ``capacity_decides``: the deployment
    winner holds more KV tokens than the ``runner_up``, whose cache was bound at the best rate it served;
    ``fp8_capacity_ratio``: an FP8 deployment's tokens over a bf16 one's."""

    per_call: HeadToHead | None
    per_call_winner: str | None
    deployment_winner: str | None
    deployment_tie: bool
    rate_ratio: float | None
    same: bool | None
    shapes: tuple[ShapeRow, ...]
    schedule_of: str
    schedule_scale: float
    attention_share: float
    attention_on_steps: dict[str, float]
    fastest_on_steps: str | None
    next_on_steps: str | None
    dominant: ShapeClass | None
    dominant_share: float | None
    attention_delta_s: float | None
    steps_time_s: float
    capacity_tokens: dict[str, int]
    peak_use: dict[str, float]
    preemptions: dict[str, int]
    preemptions_at_best: dict[str, int]
    capacity_bound: dict[str, bool]
    capacity_decides: bool
    runner_up: str | None
    fp8_capacity_ratio: float | None


@dataclass(frozen=True)
class SimulationReport:
    """The one record the HTML, Markdown and JSON of ``profattn simulate`` read: the inputs (trace, model, SLO,
    the scheduler's knobs, the cost source and the ceilings), each :class:`DeploymentResult`, the
    :class:`Findings` and the sampled step shapes (``steps``) with their attention shape."""

    trace_source: str
    requests: int
    trace_rate_per_s: float
    trace_duration_s: float
    rate_scale: float
    prompt_tokens: tuple[float, float, float]
    output_tokens: tuple[float, float, float]
    model: ModelConfig
    slo: SLO
    gpu: str
    source: str
    read_gbps: float
    gemm_tflops: float
    results: tuple[DeploymentResult, ...]
    findings: Findings
    steps: tuple[StepShape, ...]
    shapes: dict[str | None, AttentionShape]
    wall_s: float
    #: per sampled step, per deployment label, one layer's priced attention (µs) of its ``decode`` and ``prefill``
    #: calls: what a measured replay of :attr:`steps` checks
    step_prices: tuple[dict[str, dict[str, float]], ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    #: ``--search``: per deployment its operating-point search over the scheduler's knobs, and the verdict across them
    operating: tuple[OperatingPoint, ...] = field(default=())
    operating_verdict: OperatingVerdict | None = None


def _result(run: SimulationRun, slo: SLO, trace: RequestTrace, search: RateSearch | None,
            provenance: tuple[Provenance, ...]) -> DeploymentResult:
    st = run.steps
    attn = st.attn_decode_us.astype(np.float64) + st.attn_prefill_us
    total = float(attn.sum()) or 1.0
    ext = {}
    for bit in (Extrapolation.ABOVE, Extrapolation.BELOW, Extrapolation.PARALLELISM, Extrapolation.KV_DTYPE):
        m = (st.extrapolation & np.int8(bit)) != 0
        ext[bit.name.lower()] = float(attn[m].sum()) / total
    m = st.extrapolation != 0
    ext["any"] = float(attn[m].sum()) / total
    makespan = run.makespan_s or 1.0
    conc = int((st.num_decode + st.prefill_seqs).max()) if len(st) else 0
    mean_b = float(np.average(st.num_decode, weights=st.dur_s)) if len(st) and st.dur_s.sum() > 0 else 0.0
    return DeploymentResult(
        run.deployment, run, LatencySummary.of(run.ttft_s), LatencySummary.of(run.tpot_s),
        LatencySummary.of(run.itl_s, run.itl_weight), LatencySummary.of(run.e2e_s),
        float(run.output_tokens.sum()) / makespan, run.requests / makespan, run.attainment(slo),
        float(run.meets(slo).sum()) / (trace.duration_s or 1.0), float(st.attn_decode_us.sum()) * 1e-6,
        float(st.attn_prefill_us.sum()) * 1e-6, float(st.rest_us.sum()) * 1e-6, ext, search, provenance, conc, mean_b,
        float(st.decode_shared_kv.sum()) / float(st.decode_kv.sum()) if len(st) and st.decode_kv.sum() > 0 else 0.0)


def simulate(trace: RequestTrace, deployments: Sequence[Deployment], sources: dict[str | None, StepCostSource],
             model: ModelConfig, *, rest: dict[str | None, RestOfStep], shapes: dict[str | None, AttentionShape], slo: SLO,
             cells: Sequence[Measurement] = (), gpu: str = "", ceilings=None, search: bool = True,
             resolution: float = 0.05, sample: int = 8, progress: Callable[[str, float], None] | None = None,
             knob_axes: Sequence[str] = (), knob_grid: dict[str, tuple] | None = None,
             floor: float = SEARCH_FLOOR) -> SimulationReport:
    """Every deployment at ``trace``'s rate (its ``rate_scale`` already applied), then (``search``) the highest rate
    scale meeting ``slo`` per deployment, the cross-costed step-shape table and the :class:`Findings`.

    ``sources`` / ``rest`` / ``shapes``: the step-cost source (built for that cache's dtype), the rest-of-step
    estimate and the attention shape per KV dtype of the deployments; ``cells``: the store's cells
    on the GPU (for the per-call head-to-head); ``progress(label, fraction)`` for long simulations; ``knob_axes``:
    the scheduler knobs to search per deployment for its operating point
    (:func:`~profattn.analysis.simulation.operating.search_operating_point`, over ``knob_grid``; the trace at its own
    rate); ``floor``: the lowest rate scale any search descends to (of the trace's own rate; below it a deployment
    meets the SLO "nowhere ≥ floor").

    Raises:
        StepCostError, SchedulerError: as :func:`run_simulation`; SimulationError: no deployment.
    """
    if not deployments:
        raise SimulationError("nothing to simulate: give at least one --backend")
    t0 = time.perf_counter()
    base_scale = trace.rate_scale
    base = trace.scaled(1.0 / base_scale) if base_scale != 1.0 else trace  # the trace at its own rate
    results = []
    hint: float | None = None
    for d in deployments:  # every backend priced before anything runs: a missing one is an error up front
        sources[d.kv_dtype].provenance(d.pair.decode, CallPart.DECODE)
        sources[d.kv_dtype].provenance(d.pair.prefill, CallPart.PREFILL)
    for d in deployments:
        source = sources[d.kv_dtype]
        prov = (source.provenance(d.pair.decode, CallPart.DECODE), source.provenance(d.pair.prefill, CallPart.PREFILL))
        if d.pair.prefill in ONE_LAUNCH_MIXED:  # its mixed steps are one launch: say what those rest on
            prov += (source.provenance(d.pair.prefill, CallPart.MIXED),)
        cb = (lambda f, label=d.label: progress(label, f)) if progress else None
        run = run_simulation(trace, d, source, rest[d.kv_dtype], model, shapes[d.kv_dtype], slo=slo, progress=cb)
        found = None
        if search:
            def at(scale: float, d: Deployment = d) -> SimulationRun:
                if progress:
                    progress(f"{d.label}: rate search at {scale:.3g}× the trace", 0.0)
                return run_simulation(base.scaled(scale), d, source, rest[d.kv_dtype], model, shapes[d.kv_dtype],
                                      slo=slo, stop_on_failure=True)
            found = search_rate(at, base, slo, start=base_scale, resolution=resolution, min_scale=floor, first=run,
                                hint=hint)
            hint = found.best_scale if found.best_scale and not found.ceiling else hint
        results.append(_result(run, slo, trace, found, prov))
    operating = []
    for r in results if knob_axes else ():
        d = r.deployment
        at_one = r.run if base_scale == 1.0 else None
        reuse = r.search if base_scale == 1.0 else None
        operating.append(search_operating_point(base, d, knob_axes, sources, rest, shapes, model, slo,
                                                resolution=resolution, floor=floor, grid=knob_grid,
                                                defaults_search=reuse,
                                                defaults_at_trace=at_one, progress=progress))
    findings = _findings(results, cells, sources, model, shapes, slo)
    best_runs = [r.search.best_run for r in results if r.search is not None and r.search.best_run is not None]
    steps = sample_steps([r.run for r in results] + best_runs, sample)  # the trace's rate and the busiest served
    p = trace.prompt_tokens
    o = trace.output_tokens
    q3 = lambda a: tuple(float(x) for x in np.percentile(a, (10, 50, 90)))  # noqa: E731
    bw = ceilings.bandwidth_gbps if ceilings is not None else float("nan")
    tf = ceilings.matmul_tflops if ceilings is not None else float("nan")
    prices = tuple(_step_prices(st, deployments, sources, shapes) for st in steps)
    name = next(iter(sources.values())).name
    return SimulationReport(trace.source, len(trace), base.rate_per_s, base.duration_s, base_scale, q3(p), q3(o), model,
                            slo, gpu, name, bw, tf, tuple(results), findings, steps, dict(shapes),
                            time.perf_counter() - t0, prices, operating=tuple(operating),
                            operating_verdict=compare_operating(operating, resolution))


def _step_prices(step: StepShape, deployments: Sequence[Deployment], sources: dict[str | None, StepCostSource],
                 shapes: dict[str | None, AttentionShape]) -> dict[str, dict[str, float]]:
    """One layer's priced attention (µs) of ``step``'s decode and prefill calls for every deployment (a mixed step
    whose prefill backend runs it in one launch, :data:`ONE_LAUNCH_MIXED`: one ``step`` call over all its rows)."""
    out: dict[str, dict[str, float]] = {}
    for d in deployments:
        g = shapes[d.kv_dtype].group
        src = sources[d.kv_dtype]
        parts: dict[str, float] = {}
        if step.decode_kv and step.chunks and d.pair.prefill in ONE_LAUNCH_MIXED:  # one launch: the whole step
            rows = [(1, kv) for kv in step.decode_kv] + list(step.chunks)
            parts["step"] = float(src.attention_us(d.pair.prefill, CallPart.MIXED,
                                                   CallSums.of([q for q, _ in rows], [k for _, k in rows], g)).us[0])
            out[d.label] = parts
            continue
        if step.decode_kv:
            parts["decode"] = float(src.attention_us(d.pair.decode, CallPart.DECODE,
                                                     CallSums.of([1] * len(step.decode_kv), step.decode_kv, g)).us[0])
        if step.chunks:
            parts["prefill"] = float(src.attention_us(d.pair.prefill, CallPart.PREFILL,
                                                      CallSums.of([q for q, _ in step.chunks], [k for _, k in step.chunks], g)).us[0])
        out[d.label] = parts
    return out


def _findings(results: Sequence[DeploymentResult], cells: Sequence[Measurement], sources: dict[str | None, StepCostSource],
              model: ModelConfig, shapes: dict[str | None, AttentionShape], slo: SLO) -> Findings:
    deps = [r.deployment for r in results]
    decoders = list(dict.fromkeys(d.pair.decode for d in deps))
    h2h = None
    per_call_winner = None
    if len(decoders) >= 2:
        h2h = head_to_head(cells, decoders[0], decoders[1], shapes[deps[0].kv_dtype])
        per_call_winner = h2h.winner

    def served(r: DeploymentResult) -> float:
        return (r.search.best_rate_per_s or 0.0) if r.search else r.attainment

    ranked = sorted(results, key=served, reverse=True)
    winner = None
    tie = False
    ratio = None
    if len(ranked) >= 2:
        a, b = ranked[0], ranked[1]
        if a.search is not None and b.search is not None:
            ra, rb = a.search.best_rate_per_s, b.search.best_rate_per_s
            if ra and rb:
                ratio = ra / rb
                tie = ratio <= 1 + max(a.search.resolution, b.search.resolution) + 1e-9 or (a.search.ceiling and b.search.ceiling)
            else:
                ratio = math.inf if ra else None
                tie = not ra
        else:  # no rate search: the share of requests within the SLO at the trace's rate, 1 point apart at least
            tie = abs(a.attainment - b.attainment) < 0.01
            ratio = a.goodput_per_s / b.goodput_per_s if b.goodput_per_s else None
        winner = None if tie else a.deployment.label
    elif ranked:
        winner = ranked[0].deployment.label
    top = ranked[0] if ranked else results[0]
    sched_run = top.search.best_run if top.search is not None and top.search.best_run is not None else top.run
    log = sched_run.steps
    attn = cross_cost(log, deps, sources, model, shapes)
    rows = shape_rows(log, attn)
    shared = {label: float(t.sum()) * 1e-6 for label, t in attn.items()}
    by_time = sorted(shared, key=lambda label: shared[label])
    dominant = share = delta = None
    fast = slow = None
    pair_of = {d.label: (d.pair, d.kv_dtype) for d in deps}
    # the next-cheapest deployment that prices attention differently (another kernel pair or KV dtype): two
    # deployments of one pair (prefix caching on and off) are priced alike on the same steps, nothing to compare
    other = [label for label in by_time[1:] if pair_of[label] != pair_of[by_time[0]]] if by_time else []
    if other:
        fast, slow = by_time[0], other[0]
        diffs = [(r.attention_us[slow] - r.attention_us[fast], r) for r in rows]
        total = sum(d for d, _ in diffs)
        delta = total * 1e-6
        if diffs and total > 0:
            d, row = max(diffs, key=lambda t: t[0])
            dominant, share = row.cls, d / total
    cap = {r.deployment.label: r.deployment.capacity.tokens for r in results}
    use = {}
    pre = {r.deployment.label: r.run.num_preemptions for r in results}
    pre_best: dict[str, int] = {}
    bound: dict[str, bool] = {}
    for r in results:
        pts = [p for p in (r.search.points if r.search else ()) if p.meets]
        best = max(pts, key=lambda p: p.scale) if pts else None
        pre_best[r.deployment.label] = best.preemptions if best else r.run.num_preemptions
        peak = best.peak_pages if best else r.run.peak_pages
        use[r.deployment.label] = peak / r.deployment.scheduler.num_gpu_blocks
        bound[r.deployment.label] = bool(pre_best[r.deployment.label] > 0
                                         or peak >= 0.98 * r.deployment.scheduler.num_gpu_blocks)
    decides = False
    if winner is not None and len(ranked) >= 2:
        runner = ranked[1].deployment.label
        decides = cap[winner] > cap[runner] and bound[runner]
    fp8 = [r for r in results if r.deployment.kv_dtype]
    plain = [r for r in results if not r.deployment.kv_dtype]
    fp8_ratio = (fp8[0].deployment.capacity.tokens / plain[0].deployment.capacity.tokens) if fp8 and plain else None
    same = None
    if per_call_winner is not None and winner is not None:
        same = next(d.pair.decode for d in deps if d.label == winner) == per_call_winner
    st = log
    attn_share = float(st.attn_decode_us.sum() + st.attn_prefill_us.sum()) / (float(st.dur_s.sum()) * 1e6 or 1.0)
    return Findings(h2h, per_call_winner, winner, tie, ratio, same, rows, top.deployment.label, sched_run.rate_scale,
                    attn_share, shared, fast, slow, dominant, share, delta, float(log.dur_s.sum()), cap, use, pre, pre_best,
                    bound, decides, ranked[1].deployment.label if len(ranked) >= 2 else None, fp8_ratio)
