"""The replay: a request trace served step by step through :class:`~profattn.analysis.simulation.scheduler.Scheduler`
for one :class:`Deployment` (a decode backend paired with a prefill backend, a KV dtype, a page size, the KV capacity
that follows from the memory budget), every step's attention priced by a :class:`StepCostSource`.

In: a :class:`~profattn.workload.requests.RequestTrace`, a :class:`Deployment`, a step-cost source and the rest of
the step (:class:`~profattn.analysis.simulation.stepcost.RestOfStep`, an estimate kept apart). Out:
:func:`run_simulation`'s :class:`SimulationRun` — every step as a :class:`StepLog`, per-request latencies, sampled
:class:`StepShape` records. Each step's time is Σ over layers of its attention calls (decode part on the decode backend,
prefill part on the prefill backend: two calls, their times added; one call over every row where the prefill backend
runs a mixed step in one launch, :data:`~profattn.analysis.simulation.stepcost.ONE_LAUNCH_MIXED`, its time logged as
the step's prefill attention) plus the rest of the step.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from profattn.analysis.simulation.prefix import PrefixStats
from profattn.analysis.simulation.scheduler import KVCapacity, Scheduler, SchedulerConfig, StepPlan
from profattn.analysis.simulation.stepcost import (
    ONE_LAUNCH_MIXED, AttentionShape, CallPart, CallSums, RestOfStep, StepCostSource,
)
from profattn.errors import ProfattnError
from profattn.workload import Workload, workload_spec
from profattn.workload.models import ModelConfig
from profattn.workload.requests import RequestTrace

__all__ = [
    "BackendPair", "Deployment", "SLO", "SimulationError", "SimulationRun", "StepKind", "StepLog", "StepShape",
    "run_simulation",
]

#: Longest decode-only run advanced as one vector.
MAX_RUN = 4096
#: A step is kept for :func:`~profattn.analysis.simulation.simulate.sample_steps` every this many steps.
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
        if self.scheduler.enable_prefix_caching:
            extra.append("prefix caching")
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
    exact at its last step, an upper bound before); ``decode_shared_kv``: of ``decode_kv``, the tokens read from
    pages another running request shares (prefix caching; :meth:`Scheduler.decode_shared_kv`)."""

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
    decode_shared_kv: np.ndarray

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
        return CallSums.decode(self.num_decode[m], self.decode_kv[m], self.decode_max_kv[m], group,
                               shared_kv=self.decode_shared_kv[m].astype(np.float64))

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
              "rest_us": np.float32, "extrapolation": np.int8, "pages_used": np.int32, "decode_shared_kv": np.int64}


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
            flags: np.ndarray | int, pages: int, shared: int = 0) -> None:
        """A decode-only run: its steps' end times and durations (s), ``n`` sequences over ``kv`` K/V tokens (the
        longest ``top``), the rest of each step (s; attention is the remainder of the duration), the flags, the
        pages in use after the run's allocations and the shared K/V tokens of each of its steps."""
        self.runs.append((ends, dur, n, kv, top, rest_s, flags, pages, shared))

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
            ends, dur, n, kv, top, rest, flags, pages, shared = zip(*self.runs)
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
                       extrapolation=fl, pages_used=np.repeat(np.array(pages, dtype=np.int32), lens),
                       decode_shared_kv=np.repeat(np.array(shared, dtype=np.int64), lens))
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
    #: requests that missed the TTFT target (a request still waiting past it when the run stopped included) and the
    #: TPOT target, as counted while the run went (0 without an SLO; a request missing both counts in the first found)
    ttft_failures: int = 0
    tpot_failures: int = 0
    #: what the prefix cache did (None without prefix caching or block ids)
    prefix: PrefixStats | None = None

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
    failed_tpot = 0
    overdue = 0
    fail_mark = [False] * len(trace)
    arrival = sched.arrival
    now = float(trace.arrival_s[0]) if len(trace) else 0.0
    stopped = False
    loops = 0

    def tpot_fail(done: list[int]) -> int:
        nonlocal failed, failed_tpot
        if slo is None:
            return 0
        for r in done:
            if not fail_mark[r] and sched.output[r] > 1:
                tpot = (sched.finish_s[r] - sched.first_token_s[r]) / (sched.output[r] - 1)
                if tpot > slo.tpot_s:
                    fail_mark[r] = True
                    failed += 1
                    failed_tpot += 1
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
            shared = min(sched.decode_shared_kv(), sched.decode_kv(s))
            calls = CallSums.decode_run(n, sched.decode_kv(s), sched.decode_max_base() + s, k, group,
                                        lambda j, s=s: _decode_lengths(sched, s + j), shared)
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
            rec.run(ends, dur, n, calls.kv_tokens[:k], calls.top_kv[:k], rest_s, flags, used, shared)
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
        shared_now = min(sched.decode_shared_kv(), plan.decode_kv) if plan.num_decode else 0
        end, row = _step_cost(plan, sched, source, rest, dec, pre, layers, group, now, shared_now)
        if plan.index % SNAPSHOT_EVERY == 0:
            snaps.append(StepShape(plan.index, now, tuple(sched.decode_sequences(plan.index)),
                                   tuple((new, kv) for _, new, kv in plan.chunks)))
        done = sched.complete(plan, end)
        rec.row(plan.index, now, end - now, *row, used, shared_now)
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
                         sched.num_preemptions, stopped, failed, time.perf_counter() - t0,
                         failed - failed_tpot + (overdue if stopped else 0), failed_tpot, sched.prefix_stats)


def _decode_lengths(sched: Scheduler, step: int) -> tuple[np.ndarray, np.ndarray]:
    kv = np.array(sched.decode_sequences(step), dtype=np.int64)
    return np.ones_like(kv), kv


def _chunk_lengths(plan: StepPlan) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([n for _, n, _ in plan.chunks], dtype=np.int64), np.array([kv for _, _, kv in plan.chunks], dtype=np.int64))


def _first_flag(x: np.ndarray | int) -> int:
    return x if isinstance(x, int) else int(x[0])


def _step_cost(plan: StepPlan, sched: Scheduler, source: StepCostSource, rest: RestOfStep, dec: str, pre: str,
               layers: int, group: int, now: float, shared: int = 0) -> tuple[float, tuple]:
    """End time of a general-path step and its log row (without start, duration, pages and shared tokens);
    ``shared``: the decode part's K/V tokens on shared pages."""
    nd = plan.num_decode
    flags = 0
    attn_d = 0.0
    one_launch = bool(nd and plan.chunks and pre in ONE_LAUNCH_MIXED)
    dcall = None
    if nd:
        dcall = CallSums(1, float(nd), float(nd), float(plan.decode_kv), float(plan.decode_kv),
                         float(nd * -(-group // 128)), 1.0, float(plan.decode_max_kv), group,
                         lambda j: _decode_lengths(sched, plan.index), shared_kv=float(shared))
    if nd and not one_launch:
        e = source.attention_us(dec, CallPart.DECODE, dcall)
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
        pcall = CallSums(1, float(len(plan.chunks)), float(q_tok), float(kv_tok), pairs, float(tiles), float(top[0]),
                         float(top[1]), group, lambda j: _chunk_lengths(plan))
        if one_launch:  # the decode rows and the chunks in one launch, all its time the prefill column's
            e = source.attention_us(pre, CallPart.MIXED, pcall.joined(dcall))  # type: ignore[arg-type]
        else:
            e = source.attention_us(pre, CallPart.PREFILL, pcall)
        attn_p = float(e.us[0]) * layers
        flags |= _first_flag(e.extrapolation)
    tokens = nd + q_tok
    rest_us = rest.at(tokens, sampled) if tokens else 0.0
    end = now + (attn_d + attn_p + rest_us) * 1e-6
    return end, (nd, plan.decode_kv, plan.decode_max_kv, len(plan.chunks), q_tok, kv_tok, pairs, tiles, top[0], top[1],
                 attn_d, attn_p, rest_us, flags)
