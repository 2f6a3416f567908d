"""``profattn simulate``: attention backends served through a scheduler at a declared load — a request trace, a KV
memory budget, a page size, a KV dtype — with every step's attention priced by a :class:`StepCostSource`.

Torch-free; typed records only (sentences are made in :mod:`profattn.report.simulate`).

A *deployment* (:class:`Deployment`) is a decode backend paired with the prefill backend that takes the step's
prompt chunks (as engines pair a decode kernel with a prefill one: vLLM's FlashInfer backend plans a decode and a
prefill wrapper per step), a KV dtype and a page size, with the KV capacity that follows from the memory budget.
:func:`run_simulation` replays the trace through :class:`~profattn.analysis.simulation.scheduler.Scheduler`: each step's time
is Σ over layers of its attention calls (decode part on the decode backend, prefill part on the prefill backend:
two calls, their times added) plus the rest of the step (:class:`~profattn.analysis.simulation.stepcost.RestOfStep`, an
estimate kept apart). :func:`simulate` runs every deployment at the trace's rate (times ``rate_scale``), searches
the highest rate scale that still meets the SLO, prices every deployment's attention on the *same* steps (the
first deployment's schedule) to say which step shapes make the difference, and puts the per-call head-to-head of
the decode backends in the store beside the deployment answer (:class:`Findings`).
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from profattn.analysis.common.margins import judged_margin
from profattn.analysis.selection.policy import pooled_time
from profattn.analysis.simulation.scheduler import KVCapacity, Scheduler, SchedulerConfig, StepPlan
from profattn.analysis.simulation.stepcost import (
    AttentionShape, CallPart, CallSums, Extrapolation, Provenance, RestOfStep, StepCostSource, causal_pairs_array,
)
from profattn.errors import ProfattnError
from profattn.store.records import Measurement
from profattn.workload import Workload, workload_spec
from profattn.workload.models import ModelConfig
from profattn.workload.requests import RequestTrace

__all__ = [
    "BATCH_BINS", "BackendPair", "Deployment", "DeploymentResult", "Findings", "HeadToHead", "LatencySummary",
    "RatePoint", "RateSearch", "SLO", "ShapeClass", "ShapeRow", "SimulationError", "SimulationReport",
    "SimulationRun", "StepKind", "StepLog", "StepShape", "cross_cost", "head_to_head", "run_simulation",
    "sample_steps", "shape_rows", "simulate", "weighted_quantiles",
]

#: Decode batch bins of the step-shape table (sequences decoding in the step): [lo, hi) each.
BATCH_BINS: tuple[tuple[int, int], ...] = ((0, 1), (1, 2), (2, 8), (8, 32), (32, 128), (128, 512), (512, 1 << 30))
#: Longest decode-only run advanced as one vector.
MAX_RUN = 4096
#: A step is kept for :func:`sample_steps` every this many steps.
SNAPSHOT_EVERY = 499


class SimulationError(ProfattnError):
    """A simulation that cannot run as asked (names what); exit code 2."""


@dataclass(frozen=True)
class BackendPair:
    """A decode backend and the prefill backend paired with it (the same name when one backend takes both)."""

    decode: str
    prefill: str

    @property
    def label(self) -> str:
        """``triton-paged-decode + flashinfer-prefill-paged`` (one name when both are the same)."""
        return self.decode if self.decode == self.prefill else f"{self.decode} + {self.prefill}"


@dataclass(frozen=True)
class Deployment:
    """One configuration simulated: ``pair`` of backends, the scheduler's knobs (``scheduler``, its page count from
    ``capacity``) and the KV dtype (None: the model's dtype)."""

    pair: BackendPair
    scheduler: SchedulerConfig
    capacity: KVCapacity
    kv_dtype: str | None = None

    @property
    def label(self) -> str:
        """The pair's label, with the KV dtype and page size when they are not bf16 / 16."""
        extra = []
        if self.kv_dtype:
            extra.append("fp8 KV" if "float8" in self.kv_dtype else f"{self.kv_dtype} KV")
        if self.scheduler.block_size != 16:
            extra.append(f"page {self.scheduler.block_size}")
        return self.pair.label + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class SLO:
    """Latency targets: time to first token and time per output token (seconds), met by at least ``attainment`` of
    the requests (a request meets both or fails; one of a single output token has no TPOT to miss)."""

    ttft_s: float = 0.5
    tpot_s: float = 0.05
    attainment: float = 0.9


class StepKind(str, enum.Enum):
    """What a step computes: decode only, decode beside prefill chunks, prefill only."""

    DECODE = "decode"
    MIXED = "mixed"
    PREFILL = "prefill"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StepLog:
    """Every simulated step, as arrays ``[steps]``: ``start_s``, ``dur_s`` (seconds); the decode part
    (``num_decode`` sequences over ``decode_kv`` K/V tokens in all, longest ``decode_max_kv``); the prefill part
    (``prefill_seqs`` chunks, ``prefill_tokens`` new tokens, their ``prefill_kv`` K/V tokens, causal ``prefill_pairs``,
    query ``prefill_tiles``, the chunk with most pairs ``prefill_top_q`` / ``prefill_top_kv``); times over all layers in µs
    (``attn_decode_us``, ``attn_prefill_us``, ``rest_us``); ``extrapolation`` (:class:`Extrapolation` bits of both parts);
    ``pages_used`` after the step's allocation (for a step of a decode-only run: after the run's last allocation,
    exact at its last step, an upper bound before)."""

    start_s: np.ndarray
    dur_s: np.ndarray
    num_decode: np.ndarray
    decode_kv: np.ndarray
    decode_max_kv: np.ndarray
    prefill_seqs: np.ndarray
    prefill_tokens: np.ndarray
    prefill_kv: np.ndarray
    prefill_pairs: np.ndarray
    prefill_tiles: np.ndarray
    prefill_top_q: np.ndarray
    prefill_top_kv: np.ndarray
    attn_decode_us: np.ndarray
    attn_prefill_us: np.ndarray
    rest_us: np.ndarray
    extrapolation: np.ndarray
    pages_used: np.ndarray

    def __len__(self) -> int:
        return int(self.start_s.shape[0])

    @property
    def kind(self) -> np.ndarray:
        """0 decode-only, 1 mixed, 2 prefill-only per step (:class:`StepKind` order)."""
        has_d = self.num_decode > 0
        has_p = self.prefill_seqs > 0
        return np.where(has_d & has_p, 1, np.where(has_p, 2, 0)).astype(np.int8)

    def decode_calls(self, group: int) -> CallSums:
        """The decode part of every step that has one."""
        m = self.num_decode > 0
        return CallSums.decode(self.num_decode[m], self.decode_kv[m], self.decode_max_kv[m], group)

    def prefill_calls(self, group: int) -> CallSums:
        """The prefill part of every step that has one."""
        m = self.prefill_seqs > 0
        f = lambda a: a[m].astype(np.float64)  # noqa: E731
        return CallSums(int(m.sum()), f(self.prefill_seqs), f(self.prefill_tokens), f(self.prefill_kv),
                        f(self.prefill_pairs), f(self.prefill_tiles), f(self.prefill_top_q), f(self.prefill_top_kv), group)


_LOG_FIELDS = tuple(StepLog.__dataclass_fields__)
_LOG_TYPES = {"start_s": np.float64, "dur_s": np.float64, "num_decode": np.int32, "decode_kv": np.int64,
              "decode_max_kv": np.int64, "prefill_seqs": np.int32, "prefill_tokens": np.int64, "prefill_kv": np.int64,
              "prefill_pairs": np.float64, "prefill_tiles": np.float64, "prefill_top_q": np.int64,
              "prefill_top_kv": np.int64, "attn_decode_us": np.float32, "attn_prefill_us": np.float32,
              "rest_us": np.float32, "extrapolation": np.int8, "pages_used": np.int32}


class _Recorder:
    """Collects steps: general-path steps as rows, decode-only runs as their arrays; :meth:`log` puts them in time
    order (steps never overlap, so by start time)."""

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.runs: list[tuple] = []
        self.rows: list[tuple] = []

    def row(self, *values) -> None:
        self.rows.append(values)

    def run(self, ends: np.ndarray, dur: np.ndarray, n: int, kv: np.ndarray, top: np.ndarray, rest_s: float,
            flags: np.ndarray | int, pages: int) -> None:
        """A decode-only run: its steps' end times and durations (s), ``n`` sequences over ``kv`` K/V tokens (the
        longest ``top``), the rest of each step (s; attention is the remainder of the duration), the flags and the
        pages in use after the run's allocations."""
        self.runs.append((ends, dur, n, kv, top, rest_s, flags, pages))

    def log(self, steps: int) -> StepLog:
        """The :class:`StepLog` of ``steps`` steps: a general-path step's row sits at its own index (its first
        value), the decode-only runs fill the rest in order (steps are numbered without gaps)."""
        out = {f: np.zeros(steps, dtype=_LOG_TYPES[f]) for f in _LOG_FIELDS}
        mask = np.ones(steps, dtype=bool)
        if self.rows:
            cols = list(zip(*self.rows))
            idx = np.asarray(cols[0], dtype=np.int64)
            mask[idx] = False
            for f, c in zip(_LOG_FIELDS, cols[1:]):
                out[f][idx] = c
        if self.runs:
            ends, dur, n, kv, top, rest, flags, pages = zip(*self.runs)
            lens = np.array([len(d) for d in dur])
            d = np.concatenate(dur)
            if all(isinstance(f, int) for f in flags):
                fl = np.repeat(np.array(flags, dtype=np.int8), lens)
            else:
                fl = np.concatenate([f if isinstance(f, np.ndarray) else np.full(len(d_), f, np.int8)
                                     for f, d_ in zip(flags, dur)])
            rest_us = np.repeat(np.array(rest) * 1e6, lens)
            run = dict(start_s=np.concatenate(ends) - d, dur_s=d, num_decode=np.repeat(np.array(n, dtype=np.int32), lens),
                       decode_kv=np.concatenate(kv), decode_max_kv=np.concatenate(top),
                       attn_decode_us=d * 1e6 - rest_us, rest_us=rest_us,
                       extrapolation=fl, pages_used=np.repeat(np.array(pages, dtype=np.int32), lens))
            for f, v in run.items():
                out[f][mask] = v
        return StepLog(**out)


@dataclass(frozen=True)
class StepShape:
    """One simulated step's attention calls with every sequence's own lengths: ``decode_kv`` (each decoding
    sequence's kv_len; q_len 1) and ``chunks`` ((q_len, kv_len) of each prefill chunk), at ``index``, ``start_s``."""

    index: int
    start_s: float
    decode_kv: tuple[int, ...]
    chunks: tuple[tuple[int, int], ...]

    @property
    def kind(self) -> StepKind:
        if self.decode_kv and self.chunks:
            return StepKind.MIXED
        return StepKind.PREFILL if self.chunks else StepKind.DECODE

    def workloads(self, shape: AttentionShape, page_size: int) -> dict[str, Workload]:
        """The step as ``profattn profile --workload`` calls on the model's per-GPU heads, paged: ``step`` — the whole
        step as one variable-length call appending its new tokens, as a one-launch serving kernel takes it (bf16
        cache only: an FP8 cache has no appending call) — and its ``decode`` and ``prefill`` parts, the two calls
        a paired deployment makes (the decode part on an FP8 cache when the shape's KV dtype is FP8; the prefill
        part appends). Parts the step lacks are left out."""
        def call(seqs: list[tuple[int, int]], kv_dtype: str | None, append: bool) -> Workload:
            counts: dict[tuple[int, int], int] = {}
            for p in seqs:
                counts[p] = counts.get(p, 0) + 1
            kw: dict[str, object] = dict(num_q_heads=shape.num_q_heads, num_kv_heads=shape.num_kv_heads,
                                         head_dim=shape.head_dim, dtype=shape.dtype, kv_layout="paged",
                                         page_size=page_size, append=append)
            if kv_dtype:
                kw["kv_dtype"] = kv_dtype
            return Workload.varlen(None, [p for p, c in counts.items() for _ in range(c)], **kw)

        decode = [(1, n) for n in sorted(self.decode_kv)]
        chunks = list(self.chunks)
        out: dict[str, Workload] = {}
        if decode and chunks and shape.kv_dtype is None:
            out["step"] = call(chunks + decode, None, True)
        if decode:
            out["decode"] = call(decode, shape.kv_dtype, shape.kv_dtype is None)
        if chunks:
            out["prefill"] = call(chunks, None, True)
        return out

    def specs(self, shape: AttentionShape, page_size: int) -> dict[str, str]:
        """``--workload`` text of each of :meth:`workloads`."""
        return {k: workload_spec(w) for k, w in self.workloads(shape, page_size).items()}


@dataclass(frozen=True)
class SimulationRun:
    """One deployment replaying one trace at one rate scale.

    Per request (arrays in trace order, seconds; NaN where it has none): ``ttft_s``, ``tpot_s`` (mean over its output
    tokens after the first; NaN for one token), ``e2e_s``, ``preemptions``; ``itl_s`` / ``itl_weight``: inter-token
    gaps (each decode step's duration once per sequence it advanced, and each resumed request's wait between two of
    its tokens) for weighted percentiles. ``steps``: the :class:`StepLog`. ``snapshots``: steps kept with every
    sequence's lengths (:data:`SNAPSHOT_EVERY`). ``peak_pages`` / ``final_pages``: pages in use at the peak and after
    the last step (0 when every request finished: nothing leaked); ``tokens_scheduled``: every token computed,
    ``tokens_discarded``: computed tokens thrown away by preemptions (recomputed later). ``stopped``: cut short once the SLO could no longer be met (then
    the latencies cover only what had happened). ``wall_s``: the simulation's own CPU wall time.
    """

    deployment: Deployment
    rate_scale: float
    rate_per_s: float
    requests: int
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    preemptions: np.ndarray
    output_tokens: np.ndarray
    itl_s: np.ndarray
    itl_weight: np.ndarray
    steps: StepLog
    snapshots: tuple[StepShape, ...]
    makespan_s: float
    peak_pages: int
    final_pages: int
    tokens_scheduled: int
    tokens_discarded: int
    num_preemptions: int
    stopped: bool
    slo_failures: int
    wall_s: float

    def meets(self, slo: SLO) -> np.ndarray:
        """Per request: met both targets (False for one that never got its first token)."""
        tpot_ok = np.isnan(self.tpot_s) | (self.tpot_s <= slo.tpot_s)
        return (self.ttft_s <= slo.ttft_s) & tpot_ok & ~np.isnan(self.ttft_s)

    def attainment(self, slo: SLO) -> float:
        """Share of all the trace's requests that met the SLO (a stopped run counts the unfinished as failed)."""
        return float(self.meets(slo).sum()) / self.requests if self.requests else 0.0


def run_simulation(trace: RequestTrace, deployment: Deployment, source: StepCostSource, rest: RestOfStep,
                   model: ModelConfig, shape: AttentionShape, *, slo: SLO | None = None, stop_on_failure: bool = False,
                   audit: bool = False, progress: Callable[[float], None] | None = None) -> SimulationRun:
    """Replay ``trace`` through the scheduler of ``deployment``, every step priced by ``source`` (attention per layer
    × ``model.num_layers``) and ``rest``.

    ``stop_on_failure`` (with ``slo``): stop as soon as more requests have certainly missed it than
    ``1 − attainment`` allows (a TTFT or TPOT already over, or a request still waiting past its TTFT target).
    ``audit``: every step on the general path with the page check (tests). ``progress``: called now and then
    with the share of requests finished.

    Raises:
        StepCostError: the source cannot price one of the pair's backends in a part the trace needs.
        SchedulerError: a request the configuration cannot serve.
    """
    t0 = time.perf_counter()
    sched = Scheduler(trace, deployment.scheduler, audit=audit)
    layers = model.num_layers
    group = shape.group
    dec, pre = deployment.pair.decode, deployment.pair.prefill
    rec = _Recorder(layers)
    snaps: list[StepShape] = []
    allowed = math.inf
    if slo is not None and stop_on_failure:
        allowed = math.floor((1.0 - slo.attainment) * len(trace) + 1e-9)
    failed = 0
    fail_mark = [False] * len(trace)
    arrival = sched.arrival
    now = float(trace.arrival_s[0]) if len(trace) else 0.0
    stopped = False
    loops = 0

    def tpot_fail(done: list[int]) -> int:
        nonlocal failed
        if slo is None:
            return 0
        for r in done:
            if not fail_mark[r] and sched.output[r] > 1:
                tpot = (sched.finish_s[r] - sched.first_token_s[r]) / (sched.output[r] - 1)
                if tpot > slo.tpot_s:
                    fail_mark[r] = True
                    failed += 1
        return failed

    while not sched.done:
        loops += 1
        if progress is not None and loops % 20000 == 0:
            progress(sched.finished / sched.n)
        if allowed < math.inf:
            overdue = sched.fresh_waiting_since(now - slo.ttft_s)  # type: ignore[union-attr]
            if failed + overdue > allowed:
                stopped = True
                break
        sched.arrive(now)
        k = sched.decode_run(MAX_RUN)
        if k:
            s = sched.step
            n = sched.num_decode
            rest_s = rest.at(n, n) * 1e-6
            nxt = sched.next_arrival()
            cut_at_arrival = nxt < math.inf and not sched.waiting
            if cut_at_arrival:  # no step is shorter than its rest: bound the run by the arrival
                k = min(k, int((nxt - now) / rest_s) + 1)
            calls = CallSums.decode_run(n, sched.decode_kv(s), sched.decode_max_base() + s, k, group,
                                        lambda j, s=s: _decode_lengths(sched, s + j))
            est = source.attention_us(dec, CallPart.DECODE, calls)
            dur = est.us
            dur *= layers * 1e-6
            dur += rest_s
            ends = dur.cumsum()
            ends += now
            flags = est.extrapolation
            if cut_at_arrival:
                cut = int(ends.searchsorted(nxt)) + 1
                if cut < k:
                    k = cut
                    ends, dur = ends[:k], dur[:k]
                    if not isinstance(flags, int):
                        flags = flags[:k]
            for j in range(-(-s // SNAPSHOT_EVERY) * SNAPSHOT_EVERY, s + k, SNAPSHOT_EVERY):
                snaps.append(StepShape(j, float(ends[j - s] - dur[j - s]), tuple(sched.decode_sequences(j)), ()))
            now = float(ends[-1])
            done, used = sched.advance_decode(k, now)
            rec.run(ends, dur, n, calls.kv_tokens[:k], calls.top_kv[:k], rest_s, flags, used)
            if done:
                tpot_fail(done)
            continue
        plan = sched.schedule(now)
        if plan is None:
            nxt = sched.next_arrival()
            if nxt == math.inf:
                raise SimulationError("the scheduler stalled with requests left (a scheduler bug)")
            now = max(now, nxt)
            continue
        used = sched.pages_in_use
        end, row = _step_cost(plan, sched, source, rest, dec, pre, layers, group, now)
        if plan.index % SNAPSHOT_EVERY == 0:
            snaps.append(StepShape(plan.index, now, tuple(sched.decode_sequences(plan.index)),
                                   tuple((new, kv) for _, new, kv in plan.chunks)))
        done = sched.complete(plan, end)
        rec.row(plan.index, now, end - now, *row, used)
        if slo is not None:
            for r, _, _ in plan.chunks:
                if sched.first_token_s[r] == end and sched.generated[r] == 1 and not fail_mark[r] \
                        and end - arrival[r] > slo.ttft_s:
                    fail_mark[r] = True
                    failed += 1
            tpot_fail(done)
        now = end
    steps = rec.log(sched.step)
    first = np.asarray(sched.first_token_s)
    finish = np.asarray(sched.finish_s)
    arr = trace.arrival_s
    out = trace.output_tokens
    ttft = first - arr
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / (out - 1), np.nan)
    itl = np.concatenate([steps.dur_s[steps.num_decode > 0], np.asarray(sched.resume_gaps, dtype=np.float64)])
    itl_w = np.concatenate([steps.num_decode[steps.num_decode > 0].astype(np.float64),
                            np.ones(len(sched.resume_gaps))])
    makespan = float(np.nanmax(finish) - arr[0]) if sched.finished else 0.0
    return SimulationRun(deployment, trace.rate_scale, trace.rate_per_s, len(trace), ttft, tpot, finish - arr,
                         np.asarray(sched.preemptions, dtype=np.int64), out, itl, itl_w, steps, tuple(snaps), makespan,
                         sched.peak_pages, sched.pages_in_use, sched.tokens_scheduled, sched.tokens_discarded,
                         sched.num_preemptions, stopped, failed, time.perf_counter() - t0)


def _decode_lengths(sched: Scheduler, step: int) -> tuple[np.ndarray, np.ndarray]:
    kv = np.array(sched.decode_sequences(step), dtype=np.int64)
    return np.ones_like(kv), kv


def _chunk_lengths(plan: StepPlan) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([n for _, n, _ in plan.chunks], dtype=np.int64), np.array([kv for _, _, kv in plan.chunks], dtype=np.int64))


def _first_flag(x: np.ndarray | int) -> int:
    return x if isinstance(x, int) else int(x[0])


def _step_cost(plan: StepPlan, sched: Scheduler, source: StepCostSource, rest: RestOfStep, dec: str, pre: str,
               layers: int, group: int, now: float) -> tuple[float, tuple]:
    """End time of a general-path step and its log row (without start, duration and pages)."""
    nd = plan.num_decode
    flags = 0
    attn_d = 0.0
    if nd:
        e = source.attention_us(dec, CallPart.DECODE, CallSums(1, float(nd), float(nd), float(plan.decode_kv),
                                                               float(plan.decode_kv), float(nd * -(-group // 128)), 1.0,
                                                               float(plan.decode_max_kv), group,
                                                               lambda j: _decode_lengths(sched, plan.index)))
        attn_d = float(e.us[0]) * layers
        flags |= _first_flag(e.extrapolation)
    attn_p = 0.0
    q_tok = kv_tok = tiles = 0
    pairs = 0.0
    top = (0, 0)
    top_p = -1.0
    sampled = nd
    for r, new, kv in plan.chunks:
        p = new * kv - new * (new - 1) * 0.5
        q_tok += new
        kv_tok += kv
        pairs += p
        tiles += -(-new * group // 128)
        if p > top_p:
            top_p, top = p, (new, kv)
        if kv == sched.prompt[r] + sched.generated[r]:
            sampled += 1
    if plan.chunks:
        e = source.attention_us(pre, CallPart.PREFILL, CallSums(1, float(len(plan.chunks)), float(q_tok), float(kv_tok),
                                                                pairs, float(tiles), float(top[0]), float(top[1]), group,
                                                                lambda j: _chunk_lengths(plan)))
        attn_p = float(e.us[0]) * layers
        flags |= _first_flag(e.extrapolation)
    tokens = nd + q_tok
    rest_us = rest.at(tokens, sampled) if tokens else 0.0
    end = now + (attn_d + attn_p + rest_us) * 1e-6
    return end, (nd, plan.decode_kv, plan.decode_max_kv, len(plan.chunks), q_tok, kv_tok, pairs, tiles, top[0], top[1],
                 attn_d, attn_p, rest_us, flags)


# ---- summaries ----------------------------------------------------------------------------------------------


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
    its steps' attention and rest time (seconds)."""

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


@dataclass(frozen=True)
class RateSearch:
    """The highest rate scale found meeting the SLO: ``best_scale`` (None when even the lowest tried fails) and its
    rate, ``points`` in the order simulated, the search's relative resolution ``resolution`` (hi / lo − 1 at the end)
    and whether it hit ``ceiling`` (the largest scale tried still met the SLO: the answer is a lower bound)."""

    best_scale: float | None
    best_rate_per_s: float | None
    points: tuple[RatePoint, ...]
    resolution: float
    ceiling: bool
    #: the simulation at ``best_scale`` (its steps are the schedule the findings price every deployment on)
    best_run: SimulationRun | None = field(default=None, repr=False, compare=False)


def _rate_point(run: SimulationRun, slo: SLO, trace: RequestTrace) -> RatePoint:
    att = run.attainment(slo)
    meets = not run.stopped and att >= slo.attainment - 1e-12
    ttft = LatencySummary.of(run.ttft_s) if not run.stopped else LatencySummary(None, None, None)
    tpot = LatencySummary.of(run.tpot_s) if not run.stopped else LatencySummary(None, None, None)
    span = trace.duration_s or 1.0
    st = run.steps
    attn = float(st.attn_decode_us.sum() + st.attn_prefill_us.sum()) * 1e-6
    return RatePoint(run.rate_scale, run.rate_per_s, att, meets, run.stopped, ttft.p90, tpot.p90, ttft.p99, tpot.p99,
                     float(run.meets(slo).sum()) / span, len(run.steps), run.wall_s, run.num_preemptions, run.peak_pages,
                     attn, float(st.rest_us.sum()) * 1e-6)


def search_rate(simulate_at: Callable[[float], SimulationRun], trace: RequestTrace, slo: SLO, *, start: float = 1.0,
                resolution: float = 0.05, max_scale: float = 256.0, min_scale: float = 1.0 / 256,
                first: SimulationRun | None = None, hint: float | None = None) -> RateSearch:
    """The highest rate scale meeting ``slo``: from ``start``, steps of 2× up (or down) until the answer changes,
    then geometric bisection until the bracket is within ``resolution``. With ``hint`` (another deployment's answer)
    the first step goes to the hint and the next ones by 1 + 2 × ``resolution``, squared at every further step (up
    to 2×). ``simulate_at(scale)`` runs the
    deployment (with early stopping); ``first``: a finished run at ``start`` to reuse. Assumes the share of requests
    within the SLO falls as the rate rises."""
    points: list[RatePoint] = []
    best: dict[float, SimulationRun] = {}

    def at(scale: float) -> bool:
        run = first if (first is not None and scale == start) else simulate_at(scale)
        p = _rate_point(run, slo, trace.scaled(scale))
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
            if nxt < min_scale:
                return RateSearch(None, None, tuple(points), 1.0, False)
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
        m = log.num_decode > 0
        if m.any():
            t[m] += source.attention_us(d.pair.decode, CallPart.DECODE, log.decode_calls(shape.group)).us * model.num_layers
        m = log.prefill_seqs > 0
        if m.any():
            t[m] += source.attention_us(d.pair.prefill, CallPart.PREFILL, log.prefill_calls(shape.group)).us * model.num_layers
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
        float(st.attn_prefill_us.sum()) * 1e-6, float(st.rest_us.sum()) * 1e-6, ext, search, provenance, conc, mean_b)


def simulate(trace: RequestTrace, deployments: Sequence[Deployment], sources: dict[str | None, StepCostSource],
             model: ModelConfig, *, rest: dict[str | None, RestOfStep], shapes: dict[str | None, AttentionShape], slo: SLO,
             cells: Sequence[Measurement] = (), gpu: str = "", ceilings=None, search: bool = True,
             resolution: float = 0.05, sample: int = 8, progress: Callable[[str, float], None] | None = None) -> SimulationReport:
    """Every deployment at ``trace``'s rate (its ``rate_scale`` already applied), then (``search``) the highest rate
    scale meeting ``slo`` per deployment, the cross-costed step-shape table and the :class:`Findings`.

    ``sources`` / ``rest`` / ``shapes``: the step-cost source (built for that cache's dtype), the rest-of-step
    estimate and the attention shape per KV dtype of the deployments; ``cells``: the store's cells
    on the GPU (for the per-call head-to-head); ``progress(label, fraction)`` for long simulations.

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
        cb = (lambda f, label=d.label: progress(label, f)) if progress else None
        run = run_simulation(trace, d, source, rest[d.kv_dtype], model, shapes[d.kv_dtype], slo=slo, progress=cb)
        found = None
        if search:
            def at(scale: float, d: Deployment = d) -> SimulationRun:
                if progress:
                    progress(f"{d.label}: rate search at {scale:.3g}× the trace", 0.0)
                return run_simulation(base.scaled(scale), d, source, rest[d.kv_dtype], model, shapes[d.kv_dtype],
                                      slo=slo, stop_on_failure=True)
            found = search_rate(at, base, slo, start=base_scale, resolution=resolution, first=run, hint=hint)
            hint = found.best_scale if found.best_scale and not found.ceiling else hint
        results.append(_result(run, slo, trace, found, prov))
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
                            time.perf_counter() - t0, prices)


def _step_prices(step: StepShape, deployments: Sequence[Deployment], sources: dict[str | None, StepCostSource],
                 shapes: dict[str | None, AttentionShape]) -> dict[str, dict[str, float]]:
    """One layer's priced attention (µs) of ``step``'s decode and prefill calls for every deployment."""
    out: dict[str, dict[str, float]] = {}
    for d in deployments:
        g = shapes[d.kv_dtype].group
        src = sources[d.kv_dtype]
        parts: dict[str, float] = {}
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
    if len(by_time) >= 2:
        fast, slow = by_time[0], by_time[1]
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
