"""Winners per workload and the verdict, as typed records of observed numbers (no sentences).

The verdict answers the seed lesson's question: does the training winner remain the decode winner, and
why — from what was observed (query rows against CTAs and SMs, K/V bytes against time and the measured
copy ceiling, kernels per call, measured DRAM bytes). :mod:`profattn.report.verdict` turns these records
into the sentences the HTML report, the Markdown summary and ``profattn profile`` print.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from profattn.analysis.ledgers import ByteLedger, byte_ledger
from profattn.analysis.stats import MIN_SAMPLES, hodges_lehmann_ratio
from profattn.results import CellResult, CellStatus, RunResult
from profattn.workload import Phase, Workload

#: A cell whose kernels run for less than this fraction of its latency is launch-bound.
LAUNCH_BOUND_FRACTION = 0.6
#: Medians closer than this relative difference are within noise (the first part of :func:`margin`'s rule).
NOISE_FRACTION = 0.02


def winners(run: RunResult) -> dict[str, CellResult | None]:
    """Per workload tag: the fastest eligible cell (timed, correct, family confirmed), or None."""
    out: dict[str, CellResult | None] = {}
    for cell in run.cells:
        out.setdefault(cell.workload.tag, None)
        best = out[cell.workload.tag]
        if cell.eligible and (best is None or cell.latency_us < best.latency_us):  # type: ignore[operator]
            out[cell.workload.tag] = cell
    return out


class TieReason(Enum):
    """Which part of :func:`margin`'s rule made two cells a tie (None when the slower is clearly slower)."""

    CLOSE_MEDIANS = "medians under 2 % apart"  #: (slower − faster) / faster < :data:`NOISE_FRACTION`
    SPREADS_OVERLAP = "spreads overlap"  #: each median lies inside the other cell's p10–p90 range
    INTERVAL_REACHES_ONE = "interval reaches a tie"  #: with repeats, the 95 % interval of the ratio reaches 1 + NOISE_FRACTION


@dataclass(frozen=True)
class Margin:
    """How far ``behind`` (the slower cell) trails ``ahead`` (the faster), and whether that is noise.

    ``ratio`` = behind latency / ahead latency (≥ 1); ``lo``/``hi``: the Hodges–Lehmann 95 % interval of
    that ratio from the cells' repeat medians (None without ≥ 3 repeats a side, :mod:`profattn.analysis.stats`);
    ``tie``: the difference is within noise, ``why`` says by which part of the rule.
    """

    ahead: str
    behind: str
    ahead_us: float
    behind_us: float
    ratio: float
    tie: bool
    why: TieReason | None = None
    lo: float | None = None
    hi: float | None = None

    @property
    def percent(self) -> float:
        """The slower cell's extra time in % of the faster's (``(ratio − 1) · 100``)."""
        return (self.ratio - 1.0) * 100.0


def margin(a: CellResult, b: CellResult) -> Margin:
    """Compare two timed cells with the one noise rule every "wins" in profattn uses.

    The slower of the two is *clearly* slower only when all of these hold: its median is at least
    :data:`NOISE_FRACTION` (2 %) above the faster's; the two medians do not each lie inside the other cell's
    p10–p90 range (the spreads of the judged timing — graph replay where captured — do not overlap; one cell's
    long tail alone does not make a 19× gap a tie); and, when both cells have
    ≥ 3 repeat samples (``--repeat``), the 95 % Hodges–Lehmann interval of the ratio lies wholly above
    1 + NOISE_FRACTION. Otherwise the two tie.

    Raises:
        ValueError: either cell has no latency.
    """
    if a.latency_us is None or b.latency_us is None:
        raise ValueError(f"margin needs two timed cells ({a.cell_id}, {b.cell_id})")
    fast, slow = (a, b) if a.latency_us <= b.latency_us else (b, a)
    tf, ts = fast.graph_timing or fast.timing, slow.graph_timing or slow.timing
    ratio = slow.latency_us / fast.latency_us  # type: ignore[operator]
    lo = hi = None
    sf, ss = fast.latency_samples_us, slow.latency_samples_us
    if min(len(sf), len(ss)) >= MIN_SAMPLES:
        est = hodges_lehmann_ratio(sf, ss)
        lo, hi = est.lo, est.hi
    why = None
    if ratio - 1.0 < NOISE_FRACTION:
        why = TieReason.CLOSE_MEDIANS
    elif tf is not None and ts is not None and tf.p90_us >= ts.median_us and ts.p10_us <= tf.median_us:
        why = TieReason.SPREADS_OVERLAP
    elif lo is not None and lo <= 1.0 + NOISE_FRACTION:
        why = TieReason.INTERVAL_REACHES_ONE
    return Margin(fast.backend, slow.backend, fast.latency_us, slow.latency_us, ratio,  # type: ignore[arg-type]
                  why is not None, why, lo, hi)


def within_noise(a: CellResult, b: CellResult) -> bool:
    """Are ``a`` and ``b`` indistinguishable by :func:`margin`'s rule? False when either is untimed."""
    if a.latency_us is None or b.latency_us is None:
        return False
    return margin(a, b).tie


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
    the latency is the CUDA-graph replay time; ``ledger``: measured bytes (None without counters).
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
    )


class Standing(Enum):
    """How a non-training workload's winner relates to the training winner (by :func:`margin`'s rule)."""

    NOT_RUN = "not run"  #: every cell is pending (the run was interrupted)
    NO_WINNER = "no winner"  #: no cell passed
    UNCOMPARED = "uncompared"  #: a winner, but no training winner to compare it with
    STAYS = "stays"  #: the training winner is the fastest here too
    TIES = "ties"  #: another backend is fastest, but within noise of the training winner's cell here
    CHANGES = "changes"  #: another backend wins beyond noise (or the training winner has no eligible cell here)


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
    *ties* when a faster backend is within noise of its cell, and *changes* otherwise.
    """
    win = winners(run)
    by_tag = {c.workload.tag: c.workload for c in run.cells}
    train_tags = [t for t, w in by_tag.items() if w.phase is Phase.TRAIN]
    tw = win.get(train_tags[0]) if train_tags else None
    training = (TrainingOutcome.NO_WORKLOAD if not train_tags else
                TrainingOutcome.NO_ELIGIBLE_CELL if tw is None else TrainingOutcome.WON)
    t_second = runner_up(run, tw.workload.tag, tw) if tw is not None else None
    rows: list[WorkloadVerdict] = []
    for tag, w in by_tag.items():
        if w.phase is Phase.TRAIN:
            continue
        cw = win.get(tag)
        cells_here = [c for c in run.cells if c.workload.tag == tag]
        t_here = next((c for c in cells_here if tw is not None and c.backend == tw.backend), None)
        second = runner_up(run, tag, cw)
        t_margin = (margin(cw, t_here) if cw is not None and t_here is not None and t_here.eligible
                    and t_here.backend != cw.backend else None)
        if cw is None:
            standing = Standing.NOT_RUN if all(c.status == CellStatus.PENDING for c in cells_here) else Standing.NO_WINNER
        elif tw is None:
            standing = Standing.UNCOMPARED
        elif cw.backend == tw.backend:
            standing = Standing.STAYS
        else:
            standing = Standing.TIES if t_margin is not None and t_margin.tie else Standing.CHANGES
        other = t_here if (cw is not None and t_here is not None and t_here.backend != cw.backend) else second
        rows.append(WorkloadVerdict(
            workload=w, standing=standing,
            winner=evidence(cw, run) if cw else None,
            runner_up=evidence(second, run) if second else None,
            margin=margin(cw, second) if cw and second else None,
            tied=tied_with(run, tag, cw),
            training_here=evidence(t_here, run) if t_here else None,
            training_margin=t_margin,
            explained=tuple(evidence(c, run) for c in (cw, other) if c is not None),
        ))
    return Verdict(training, tw.backend if tw else None, tw.workload.tag if tw else None,
                   evidence(tw, run) if tw else None, tuple(rows),
                   training_margin=margin(tw, t_second) if tw and t_second else None,
                   training_tied=tied_with(run, tw.workload.tag, tw) if tw else ())


@dataclass(frozen=True)
class RankedCell:
    """A cell of the result matrix: ``winner`` marks the fastest eligible cell of its workload."""

    cell: CellResult
    winner: bool


def ranked_cells(run: RunResult) -> tuple[RankedCell, ...]:
    """Every cell of ``run`` in matrix order (phase train → prefill → decode, then kv_len), winners marked.
    The HTML matrix and the Markdown summary format these same records."""
    win = winners(run)
    order = list(Phase)
    cells = sorted(run.cells, key=lambda c: (order.index(c.workload.phase), c.workload.kv_len))
    return tuple(RankedCell(c, (w := win.get(c.workload.tag)) is not None and w.cell_id == c.cell_id) for c in cells)
