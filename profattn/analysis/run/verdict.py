"""Winners per workload and the verdict, as typed records of observed numbers (no sentences).

The verdict answers the seed lesson's question: does the training winner remain the decode winner, and
why — from what was observed (query rows against CTAs and SMs, K/V bytes against time and the measured
copy ceiling, kernels per call, measured DRAM bytes). :mod:`profattn.report.verdict` turns these records
into the sentences the HTML report, the Markdown summary and ``profattn profile`` print.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from profattn.analysis.common.margins import JudgedTime, Margin, judged_margin, judged_time, margin, summed_time
from profattn.analysis.run.layout import GATHER_BACKEND, CacheLayout, cell_layout
from profattn.analysis.run.ledgers import ByteLedger, byte_ledger
from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION
from profattn.analysis.run.mechanisms import Gap, call_profile, cell_gap, gap, layout_copy_us
from profattn.results import CellResult, CellStatus, RunResult
from profattn.workload import KVLayout, Phase, Workload

if TYPE_CHECKING:  # annotations only: the functions that need them import them where they run
    from profattn.analysis.calls.comm import CpSummary
    from profattn.analysis.run.serving import PromptPlan


def winners(run: RunResult) -> dict[str, CellResult | None]:
    """Per workload tag: the fastest eligible cell (timed, correct, family confirmed), or None."""
    out: dict[str, CellResult | None] = {}
    for cell in run.cells:
        out.setdefault(cell.workload.tag, None)
        best = out[cell.workload.tag]
        if cell.eligible and (best is None or cell.latency_us < best.latency_us):  # type: ignore[operator]
            out[cell.workload.tag] = cell
    return out


def runner_up(run: RunResult, tag: str, winner: CellResult | None) -> CellResult | None:
    """The fastest eligible cell of workload ``tag`` other than ``winner``, or None."""
    ranked = sorted((c for c in run.cells if c.workload.tag == tag and c.eligible and (winner is None or c.backend != winner.backend)),
                    key=lambda c: c.latency_us)
    return ranked[0] if ranked else None


def tied_with(run: RunResult, tag: str, winner: CellResult | None) -> tuple[str, ...]:
    """The backends of workload ``tag`` whose eligible cells tie ``winner`` by :func:`margin`'s rule, fastest
    first (``winner`` itself excluded; empty without a winner)."""
    if winner is None:
        return ()
    others = sorted((c for c in run.cells if c.workload.tag == tag and c.eligible and c.backend != winner.backend),
                    key=lambda c: c.latency_us)
    return tuple(c.backend for c in others if margin(winner, c).tie)


@dataclass(frozen=True)
class CellEvidence:
    """Observed facts about one cell the verdict reasons with (None where not observed).

    ``query_rows`` = B·Hq·Lq; ``ctas`` / ``ctas_per_sm`` of the dominant kernel per launch (``num_sms``: the
    run's SM count); ``persistent_grid``: exactly one CTA per SM; ``underfilled``: fewer CTAs than SMs;
    ``kv_gbps`` = K/V bytes / latency (GB = 1e9); ``bandwidth_fraction`` = kv_gbps / the run's memory roof
    (:attr:`Ceilings.bandwidth_gbps`: the read-only stream where measured, else the copy; ``bandwidth_kind``
    says which); ``floor_us`` = requested bytes / that roof (µs); ``gpu_time_us``: the cell's kernels per call (µs);
    ``launch_bound``: the kernels run under :data:`LAUNCH_BOUND_FRACTION` of the latency; ``graph_replay``:
    the latency is the CUDA-graph replay time; ``ledger``: measured bytes (None without counters); ``layout``: the
    cache layout the kernel read (:func:`profattn.analysis.run.layout.cache_layout`; None for an unknown backend).
    """

    backend: str
    status: CellStatus
    reason: str
    eligible: bool
    latency_us: float | None
    query_rows: int
    num_sms: int | None
    ctas: int | None
    ctas_per_sm: float | None
    rows_per_cta: float | None
    kernels_per_call: float | None
    dominant_kernel: str | None
    kv_gbps: float | None
    bandwidth_fraction: float | None
    floor_us: float | None
    gpu_time_us: float | None = None
    graph_replay: bool = False
    ledger: ByteLedger | None = None
    bandwidth_kind: str = "copy"
    layout: CacheLayout | None = None

    @property
    def persistent_grid(self) -> bool:
        """Exactly one CTA per SM (a persistent kernel looping over tiles)."""
        return bool(self.num_sms) and self.ctas == self.num_sms

    @property
    def underfilled(self) -> bool:
        """Fewer CTAs than SMs: part of the GPU idles."""
        return self.ctas_per_sm is not None and self.ctas_per_sm < 1

    @property
    def launch_bound(self) -> bool:
        """The kernels run under :data:`LAUNCH_BOUND_FRACTION` of the latency (the rest is launch overhead)."""
        lat, gpu = self.latency_us, self.gpu_time_us
        return gpu is not None and bool(lat) and gpu < LAUNCH_BOUND_FRACTION * lat  # type: ignore[operator]


def evidence(cell: CellResult, run: RunResult) -> CellEvidence:
    """Collect :class:`CellEvidence` for ``cell`` from its timing, trace summary, counters and the run's ceilings."""
    w = cell.workload
    rows = w.batch * w.num_q_heads * w.q_len
    sms = run.environment.num_sms
    ctas = ctas_sm = None
    kpc = dom = gpu = None
    if cell.trace is not None:
        kpc = cell.trace.kernels_per_call
        dom = cell.trace.dominant_kernel
        gpu = cell.trace.gpu_time_per_call_us
        if cell.trace.kernels:
            top = cell.trace.kernels[0]
            ctas = top.ctas
            ctas_sm = ctas / sms if ctas is not None and sms else None
    ceiling = run.ceilings.bandwidth_gbps if run.ceilings else None
    kv = cell.kv_gbps
    return CellEvidence(
        backend=cell.backend,
        status=cell.status,
        reason=cell.reason,
        eligible=cell.eligible,
        latency_us=cell.latency_us,
        query_rows=rows,
        num_sms=sms,
        ctas=ctas,
        ctas_per_sm=ctas_sm,
        rows_per_cta=rows / ctas if ctas else None,
        kernels_per_call=kpc,
        dominant_kernel=dom,
        kv_gbps=kv,
        bandwidth_fraction=kv / ceiling if kv is not None and ceiling else None,
        floor_us=w.requested_bytes / (ceiling * 1e9) * 1e6 if ceiling else None,
        gpu_time_us=gpu,
        graph_replay=cell.graph_timing is not None,
        ledger=byte_ledger(cell) if cell.counters is not None else None,
        bandwidth_kind=run.ceilings.bandwidth_kind if run.ceilings else "copy",
        layout=cell_layout(cell),
    )


@dataclass(frozen=True)
class LayoutRanking:
    """One cache layout's ranking of a workload: its fastest eligible cell (``winner``), the runner-up's margin, the
    backends tied with the winner, and why the runner-up trails (``gap``)."""

    layout: CacheLayout
    winner: CellEvidence
    runner_up: CellEvidence | None
    margin: Margin | None
    tied: tuple[str, ...]
    gap: Gap | None


@dataclass(frozen=True)
class LayoutSplit:
    """A paged decode workload answered per layout: ``paged`` (kernels that read the page pool) and ``contiguous``
    (dense kernels, which read a contiguous copy made outside their timing). ``between``: the two winners against
    each other (:func:`margin`). ``gather_backend`` / ``gather_us``: the gather + SDPA backend measured on this
    workload and its layout-copy kernels' GPU time per call (µs, from its trace: what getting a contiguous cache from
    the pages costs); ``gather_latency_us``: that backend's whole call. None where not measured."""

    paged: LayoutRanking
    contiguous: LayoutRanking
    between: Margin
    gather_backend: str | None = None
    gather_us: float | None = None
    gather_latency_us: float | None = None

    @property
    def dense_on_paged_us(self) -> float | None:
        """The contiguous winner's latency plus the measured gather (µs): what it costs over the paged cache."""
        w = self.contiguous.winner.latency_us
        return w + self.gather_us if w is not None and self.gather_us is not None else None


class Standing(Enum):
    """How a workload's winner relates to a reference winner (by :func:`margin`'s rule): for a non-training
    workload the training winner; for a serving call (:class:`ServingRow`) the unchunked prefill winner."""

    NOT_RUN = "not run"  #: every cell is pending (the run was interrupted)
    NO_WINNER = "no winner"  #: no cell passed
    UNCOMPARED = "uncompared"  #: a winner, but no reference winner to compare it with
    STAYS = "stays"  #: the reference winner is the fastest here too
    TIES = "ties"  #: another backend is fastest, but within noise of the reference winner's time here
    CHANGES = "changes"  #: another backend wins beyond noise (or the reference winner has no eligible time here)


class TrainingOutcome(Enum):
    """Whether the run has a training winner to compare the other workloads with."""

    WON = "won"
    NO_WORKLOAD = "no training workload"
    NO_ELIGIBLE_CELL = "no training cell passed"


@dataclass(frozen=True)
class WorkloadVerdict:
    """One non-training workload: its winner against the runner-up and against the training winner.

    ``margin``: the runner-up against the winner (None with fewer than two eligible cells);
    ``tied``: every backend within noise of the winner, fastest first; ``training_here``: the training
    winner's cell on this workload (None when absent); ``training_margin``: that cell against this winner
    when another backend is fastest (eligible cells only); ``explained``: the cells the reasons cover (the
    winner, then the training winner's cell when another backend won, else the runner-up).

    Where the workload's cache is paged and both paged and contiguous-reading kernels have eligible cells,
    ``layouts`` answers per layout (:class:`LayoutSplit`) and ``winner``, ``runner_up``, ``margin``, ``tied`` and the
    standing are those of the contiguous-cache ranking, the one the (dense) training winner competes in; the fastest
    cell overall is the faster of the two layout winners.

    ``gap``: why the runner-up trails the winner (:class:`~profattn.analysis.run.mechanisms.Gap`); ``training_gap``: why
    the training winner's cell trails the winner here (None when it won, or has no eligible cell here).
    """

    workload: Workload
    standing: Standing
    winner: CellEvidence | None
    runner_up: CellEvidence | None
    margin: Margin | None
    tied: tuple[str, ...]
    training_here: CellEvidence | None
    training_margin: Margin | None
    explained: tuple[CellEvidence, ...]
    gap: Gap | None = None
    training_gap: Gap | None = None
    layouts: "LayoutSplit | None" = None

    @property
    def workload_tag(self) -> str:
        """The workload's tag (its key in :func:`winners`)."""
        return self.workload.tag

    @property
    def phase(self) -> Phase:
        """The workload's regime."""
        return self.workload.phase

    @property
    def kv_len(self) -> int:
        """The workload's KV length (tokens)."""
        return self.workload.kv_len

    @property
    def stays(self) -> bool | None:
        """True: the training winner is not beaten beyond noise here (:attr:`Standing.STAYS` or
        :attr:`Standing.TIES`); False: it is (:attr:`Standing.CHANGES`); None: undecided (no winner, or
        nothing to compare with)."""
        return {Standing.STAYS: True, Standing.TIES: True, Standing.CHANGES: False}.get(self.standing)

    @property
    def winner_backend(self) -> str | None:
        """The winning backend's name, None without a winner."""
        return self.winner.backend if self.winner else None


class ServingCall(Enum):
    """Which serving call a :class:`ServingRow` judges."""

    CHUNKED = "chunked prompt"  #: one prompt at one chunk size, per prompt: Σ over its chunks (time to first token's attention)
    MIXED = "mixed step"  #: one mixed batch (prefill chunks beside decoding sequences) as one call


@dataclass(frozen=True)
class ServingRow:
    """One serving call against the unchunked prefill winner (the reference) of its prompt.

    ``workload``: for :attr:`ServingCall.CHUNKED` the prompt's first chunk (``q_len`` = ``kv_len`` = the chunk
    size; every chunk in :func:`profattn.analysis.run.serving.prompt_plans`), for :attr:`ServingCall.MIXED` the
    step; ``chunks``: chunks per prompt (1 for a step). Times are :class:`JudgedTime` (µs; per prompt: summed
    over the chunks with :func:`summed_time`, a backend counting only when every chunk cell is eligible).
    ``winner``: the fastest; ``margin``: the runner-up against it; ``tied``: every backend within noise of the
    winner, fastest first; ``reference_here``: the reference backend's time here (None: not eligible here);
    ``reference_margin``: that time against the winner when another backend is fastest;
    ``reference_vs_unchunked`` / ``winner_vs_unchunked`` (chunked rows): the backend's time per prompt here
    over its own unchunked time (None where either is missing).

    Mechanisms (:class:`~profattn.analysis.run.mechanisms.Gap`, per prompt over the chunks): ``gap``, the runner-up against
    the winner; ``reference_gap``, the reference backend here against the winner; ``chunking`` (chunked rows), the
    reference backend's prompt chunked against the same prompt whole; ``winner_chunking``, the same for the winner.
    """

    call: ServingCall
    workload: Workload
    chunks: int
    standing: Standing
    winner: JudgedTime | None
    margin: Margin | None
    tied: tuple[str, ...]
    reference_here: JudgedTime | None
    reference_margin: Margin | None
    reference_vs_unchunked: float | None = None
    winner_vs_unchunked: float | None = None
    gap: Gap | None = None
    reference_gap: Gap | None = None
    chunking: Gap | None = None
    winner_chunking: Gap | None = None
    winner_layout: CacheLayout | None = None

    @property
    def chunk_size(self) -> int | None:
        """Tokens per chunk (chunked rows), None for a mixed step."""
        return self.workload.q_len if self.call is ServingCall.CHUNKED else None

    @property
    def winner_backend(self) -> str | None:
        """The winning backend's name, None without a winner."""
        return self.winner.backend if self.winner else None

    @property
    def stays(self) -> bool | None:
        """As :attr:`WorkloadVerdict.stays`, against the unchunked prefill winner."""
        return {Standing.STAYS: True, Standing.TIES: True, Standing.CHANGES: False}.get(self.standing)


@dataclass(frozen=True)
class ServingVerdict:
    """Does the prefill winner of a whole prompt stay the winner when the prompt is chunked, and in mixed steps?

    ``prompt``: the unchunked prompt's workload (``q_len`` = ``kv_len`` = the prompt length, appending, paged);
    ``reference``: its winner's time (None: no eligible cell); ``reference_margin``: the runner-up against it;
    ``reference_tied``: the backends within noise of it (the comparisons use the faster median, as training
    does); ``rows``: the prompt at each smaller chunk size (largest first), then every mixed step of the same
    heads, head dim, dtype, mask and layout (run order; a step goes to the longest such prompt). ``reference_gap``:
    why the unchunked prompt's runner-up trails its winner; ``reference_layout``: what the winner read.
    """

    prompt: Workload
    reference: JudgedTime | None
    reference_margin: Margin | None
    reference_tied: tuple[str, ...]
    rows: tuple[ServingRow, ...]
    reference_gap: Gap | None = None
    reference_layout: CacheLayout | None = None

    @property
    def prompt_len(self) -> int:
        """Tokens in the prompt."""
        return self.prompt.q_len

    @property
    def reference_backend(self) -> str | None:
        """The unchunked prefill winner's name, None without one."""
        return self.reference.backend if self.reference else None

    def call_rows(self, call: ServingCall) -> tuple[ServingRow, ...]:
        """The rows of one kind of call, in order."""
        return tuple(r for r in self.rows if r.call is call)


@dataclass(frozen=True)
class Verdict:
    """The run's answer: the training winner (and who ties it), and for every other workload whether it
    still wins and why. ``training_margin``: the training runner-up against the winner; ``training_tied``:
    the backends within noise of the training winner."""

    training: TrainingOutcome
    training_winner: str | None
    training_tag: str | None
    training_evidence: CellEvidence | None
    rows: tuple[WorkloadVerdict, ...]
    training_margin: Margin | None = None
    training_tied: tuple[str, ...] = ()
    #: Serving calls against the unchunked prefill winner, one per prompt (:func:`serving_verdicts`).
    serving: tuple[ServingVerdict, ...] = ()
    #: Context-parallel cells against the one-process call (:func:`profattn.analysis.calls.comm.cp_summaries`): scaling
    #: across ranks is a question of its own, kept out of ``rows`` and the training winner.
    cp: tuple[CpSummary, ...] = ()
    #: Why the training runner-up trails the training winner.
    training_gap: Gap | None = None

    @property
    def decode_rows(self) -> tuple[WorkloadVerdict, ...]:
        """The rows of decode workloads, in run order."""
        return tuple(r for r in self.rows if r.phase is Phase.DECODE)

    def phase_rows(self, phase: Phase) -> tuple[WorkloadVerdict, ...]:
        """The rows of ``phase``'s workloads, in run order."""
        return tuple(r for r in self.rows if r.phase is phase)


def verdict(run: RunResult) -> Verdict:
    """Training winner vs every prefill and decode winner, each "wins" tested with :func:`margin`'s rule.

    The training winner is the fastest eligible training cell; a backend whose cell is within noise of it is
    listed in ``training_tied``. On another workload the training winner *stays* when it is fastest there,
    *ties* when a faster backend is within noise of its cell, and *changes* otherwise. A paged workload on which
    both paged and contiguous-reading kernels have eligible cells is answered per layout (``layouts``,
    :func:`layout_split`); its standing is judged among the contiguous-reading cells, where the training winner
    competes. ``serving``: the same question for chunked prompts and mixed steps against the unchunked prefill
    winner (:func:`serving_verdicts`). Context-parallel workloads are left out of the training winner and the rows;
    ``cp`` summarizes them. Every comparison carries its mechanism (:func:`profattn.analysis.run.mechanisms.gap`).
    """
    win = winners(run)
    # context-parallel workloads answer another question (scaling across ranks, ``cp``): never a winner row
    by_tag = {c.workload.tag: c.workload for c in run.cells if not c.workload.is_context_parallel}
    train_tags = [t for t, w in by_tag.items() if w.phase is Phase.TRAIN]
    tw = win.get(train_tags[0]) if train_tags else None
    training = (TrainingOutcome.NO_WORKLOAD if not train_tags else
                TrainingOutcome.NO_ELIGIBLE_CELL if tw is None else TrainingOutcome.WON)
    t_second = runner_up(run, tw.workload.tag, tw) if tw is not None else None
    rows: list[WorkloadVerdict] = []
    for tag, w in by_tag.items():
        if w.phase is Phase.TRAIN:
            continue
        cells_here = [c for c in run.cells if c.workload.tag == tag]
        split = layout_split(run, cells_here)
        pool = ([c for c in cells_here if cell_layout(c) is CacheLayout.CONTIGUOUS] if split is not None else cells_here)
        ranked = sorted((c for c in pool if c.eligible), key=lambda c: c.latency_us)  # type: ignore[arg-type, return-value]
        cw = ranked[0] if ranked else None
        second = ranked[1] if len(ranked) > 1 else None
        t_here = next((c for c in cells_here if tw is not None and c.backend == tw.backend), None)
        t_margin = (margin(cw, t_here) if cw is not None and t_here is not None and t_here.eligible
                    and t_here.backend != cw.backend else None)
        standing = _standing(cw.backend if cw else None, tw.backend if tw else None, t_margin,
                             all(c.status == CellStatus.PENDING for c in cells_here))
        other = t_here if (cw is not None and t_here is not None and t_here.backend != cw.backend) else second
        rows.append(WorkloadVerdict(
            workload=w, standing=standing,
            winner=evidence(cw, run) if cw else None,
            runner_up=evidence(second, run) if second else None,
            margin=margin(cw, second) if cw and second else None,
            tied=tuple(c.backend for c in ranked[1:] if margin(cw, c).tie) if cw else (),  # type: ignore[arg-type]
            training_here=evidence(t_here, run) if t_here else None,
            training_margin=t_margin,
            explained=tuple(evidence(c, run) for c in (cw, other) if c is not None),
            gap=cell_gap(cw, second, run) if cw and second else None,
            training_gap=cell_gap(cw, t_here, run) if t_margin is not None else None,  # type: ignore[arg-type]
            layouts=split,
        ))
    return Verdict(training, tw.backend if tw else None, tw.workload.tag if tw else None,
                   evidence(tw, run) if tw else None, tuple(rows),
                   training_margin=margin(tw, t_second) if tw and t_second else None,
                   training_tied=tied_with(run, tw.workload.tag, tw) if tw else (),
                   serving=serving_verdicts(run), cp=_cp_summaries(run.cells),
                   training_gap=cell_gap(tw, t_second, run) if tw and t_second else None)


def _ranking(run: RunResult, layout: CacheLayout, cells: list[CellResult]) -> LayoutRanking | None:
    """The eligible ``cells`` that read ``layout``, ranked (None when there is none)."""
    ranked = sorted((c for c in cells if c.eligible and cell_layout(c) is layout), key=lambda c: c.latency_us)  # type: ignore[arg-type, return-value]
    if not ranked:
        return None
    best, second = ranked[0], ranked[1] if len(ranked) > 1 else None
    return LayoutRanking(layout, evidence(best, run), evidence(second, run) if second else None,
                         margin(best, second) if second else None,
                         tuple(c.backend for c in ranked[1:] if margin(best, c).tie),
                         cell_gap(best, second, run) if second else None)


def layout_split(run: RunResult, cells: list[CellResult]) -> LayoutSplit | None:
    """The per-layout answer of one workload's ``cells`` (:class:`LayoutSplit`): for a paged decode workload on which
    both paged and contiguous-reading kernels have an eligible cell; None otherwise. The gather is the layout-copy
    kernels' GPU time of :data:`~profattn.analysis.run.layout.GATHER_BACKEND`'s cell (measured only where it ran and was
    traced)."""
    if not cells or cells[0].workload.phase is not Phase.DECODE or cells[0].workload.kv_layout is not KVLayout.PAGED:
        return None
    paged, dense = _ranking(run, CacheLayout.PAGED, cells), _ranking(run, CacheLayout.CONTIGUOUS, cells)
    if paged is None or dense is None:
        return None
    by_backend = {c.backend: c for c in cells}
    ref = by_backend.get(GATHER_BACKEND)
    gather = layout_copy_us(ref) if ref is not None and ref.eligible else None
    between = margin(by_backend[paged.winner.backend], by_backend[dense.winner.backend])
    return LayoutSplit(paged, dense, between, GATHER_BACKEND if gather is not None else None, gather,
                       ref.latency_us if gather is not None else None)  # type: ignore[union-attr]


def _standing(winner: str | None, reference: str | None, reference_margin: Margin | None, pending: bool) -> Standing:
    """The one rule for how a reference backend (the training winner; the unchunked prompt's winner) fares
    where ``winner`` is fastest: not run / no winner, uncompared, stays, ties (the reference within noise of
    the winner: ``reference_margin``) or changes. ``pending``: every cell still pending (an interrupted run)."""
    if winner is None:
        return Standing.NOT_RUN if pending else Standing.NO_WINNER
    if reference is None:
        return Standing.UNCOMPARED
    if winner == reference:
        return Standing.STAYS
    return Standing.TIES if reference_margin is not None and reference_margin.tie else Standing.CHANGES


def _model(w: Workload) -> tuple[object, ...]:
    """The fields a mixed step shares with the prompts it is compared with (everything but lengths and batch)."""
    return (w.num_q_heads, w.num_kv_heads, w.head_dim, w.dtype, w.mask, w.kv_layout, w.page_size)


def _serving_row(call: ServingCall, workload: Workload, chunks: int, times: dict[str, JudgedTime], pending: bool,
                 ref: JudgedTime | None, unchunked: dict[str, JudgedTime], profiles: "_Profiles",
                 whole: "_Profiles | None", run: RunResult) -> ServingRow:
    """One call's row from its eligible backends' times (run order), against ``ref``; ``unchunked``: each
    backend's time for the whole prompt (chunked rows only, else empty); ``profiles`` / ``whole``: each backend's
    :class:`~profattn.analysis.run.mechanisms.CallProfile` here and on the whole prompt (for the mechanisms)."""
    ranked = sorted(times.values(), key=lambda t: t.median_us)
    win = ranked[0] if ranked else None
    here = times.get(ref.backend) if ref is not None else None
    ref_margin = judged_margin(win, here) if win is not None and here is not None and here.backend != win.backend else None
    standing = _standing(win.backend if win else None, ref.backend if ref else None, ref_margin, pending)
    group = workload.group_size

    def vs_unchunked(t: JudgedTime | None) -> float | None:
        base = unchunked.get(t.backend) if t is not None else None
        return t.median_us / base.median_us if t is not None and base is not None else None

    def gap_of(a: str | None, b: str | None, pa: "_Profiles", pb: "_Profiles") -> Gap | None:
        x, y = (pa.get(a) if a else None), (pb.get(b) if b else None)
        return gap(x, y, group) if x is not None and y is not None else None

    chunked = call is ServingCall.CHUNKED and whole is not None
    return ServingRow(
        call=call, workload=workload, chunks=chunks, standing=standing, winner=win,
        margin=judged_margin(win, ranked[1]) if len(ranked) > 1 else None,
        tied=tuple(t.backend for t in ranked[1:] if judged_margin(win, t).tie),  # type: ignore[arg-type]
        reference_here=here, reference_margin=ref_margin,
        reference_vs_unchunked=vs_unchunked(here) if call is ServingCall.CHUNKED else None,
        winner_vs_unchunked=vs_unchunked(win) if call is ServingCall.CHUNKED else None,
        gap=gap_of(win.backend, ranked[1].backend, profiles, profiles) if win and len(ranked) > 1 else None,
        reference_gap=gap_of(win.backend, here.backend, profiles, profiles) if win and ref_margin is not None else None,  # type: ignore[union-attr]
        chunking=gap_of(here.backend, here.backend, whole, profiles) if chunked and here is not None else None,  # type: ignore[arg-type]
        winner_chunking=gap_of(win.backend, win.backend, whole, profiles) if chunked and win is not None else None,  # type: ignore[arg-type]
        winner_layout=profiles[win.backend].layout if win is not None and win.backend in profiles else None,
    )


#: Each backend's :class:`~profattn.analysis.run.mechanisms.CallProfile` of one serving call (a prompt: over its chunks).
_Profiles = dict


def serving_verdicts(run: RunResult) -> tuple[ServingVerdict, ...]:
    """For every prompt the run processes both whole and in chunks (or beside a mixed step): its unchunked
    prefill winner, and whether that backend stays the winner per prompt at each chunk size (time summed over
    the chunks, :func:`summed_time`) and in each mixed step of the same shape (its one call), each tested with
    :func:`judged_margin`'s rule. Prompts come from :func:`profattn.analysis.run.serving.prompt_plans` (shapes
    only); a prompt without its unchunked chunk, or with nothing to compare with, gives no verdict. Cells
    count when :attr:`CellResult.eligible`; a prompt's time needs every chunk's cell eligible. Every comparison
    carries its mechanism, per prompt (:func:`profattn.analysis.run.mechanisms.gap` over the chunks' profiles).
    """
    cells = run.cells
    by_key = {(c.workload, c.backend): c for c in cells}
    backends = list(dict.fromkeys(c.backend for c in cells))
    from profattn.analysis.run.serving import prompt_plans

    plans = prompt_plans([c.workload for c in cells])

    def plan_times(plan: PromptPlan) -> tuple[dict[str, JudgedTime], bool, _Profiles]:
        times: dict[str, JudgedTime] = {}
        profiles: _Profiles = {}
        for b in backends:
            chunk_cells = [by_key.get((w, b)) for w in plan.workloads]
            if all(c is not None and c.eligible for c in chunk_cells):
                times[b] = summed_time(chunk_cells)  # type: ignore[arg-type]
                profiles[b] = call_profile(chunk_cells, run)  # type: ignore[arg-type]
        present = [c for w in plan.workloads for b in backends if (c := by_key.get((w, b))) is not None]
        return times, bool(present) and all(c.status == CellStatus.PENDING for c in present), profiles

    prompts: dict[Workload, list[PromptPlan]] = {}
    for plan in plans:
        whole = plan.workloads[0].with_(q_len=plan.prompt_len, kv_len=plan.prompt_len)
        prompts.setdefault(whole, []).append(plan)
    whole_of = {w: ps for w, ps in prompts.items() if any(p.chunk_size == p.prompt_len for p in ps)}
    steps: dict[Workload, list[Workload]] = {w: [] for w in whole_of}
    for step in dict.fromkeys(c.workload for c in cells if c.workload.phase is Phase.MIXED):
        matches = [w for w in whole_of if _model(w) == _model(step)]
        if matches:
            steps[max(matches, key=lambda w: w.q_len)].append(step)

    out = []
    for whole, ps in whole_of.items():
        base = next(p for p in ps if p.chunk_size == p.prompt_len)
        chunked = [p for p in ps if p is not base]
        if not chunked and not steps[whole]:
            continue
        unchunked, _, whole_profiles = plan_times(base)
        ranked = sorted(unchunked.values(), key=lambda t: t.median_us)
        ref = ranked[0] if ranked else None
        rows = []
        for p in chunked:
            times, pending, profiles = plan_times(p)
            rows.append(_serving_row(ServingCall.CHUNKED, p.workloads[0], len(p.workloads), times, pending, ref, unchunked,
                                     profiles, whole_profiles, run))
        for step in steps[whole]:
            mine = [c for c in cells if c.workload == step and c.eligible]
            here = {c.backend: judged_time(c) for c in mine}
            profiles = {c.backend: call_profile([c], run) for c in mine}
            pending = all(c.status == CellStatus.PENDING for c in cells if c.workload == step)
            rows.append(_serving_row(ServingCall.MIXED, step, 1, here, pending, ref, {}, profiles, None, run))
        second = ranked[1] if len(ranked) > 1 else None
        out.append(ServingVerdict(
            prompt=whole, reference=ref,
            reference_margin=judged_margin(ref, second) if second else None,  # type: ignore[arg-type]
            reference_tied=tuple(t.backend for t in ranked[1:] if judged_margin(ref, t).tie),  # type: ignore[arg-type]
            rows=tuple(rows),
            reference_gap=(gap(whole_profiles[ref.backend], whole_profiles[second.backend], whole.group_size)  # type: ignore[union-attr]
                           if second else None),
            reference_layout=whole_profiles[ref.backend].layout if ref else None))
    return tuple(out)


def _cp_summaries(cells: Sequence[CellResult]) -> "tuple[CpSummary, ...]":
    from profattn.analysis.calls.comm import cp_summaries

    return cp_summaries(cells)
