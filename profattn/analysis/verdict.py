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
from profattn.results import CellResult, CellStatus, RunResult
from profattn.workload import Phase, Workload

#: A cell whose kernels run for less than this fraction of its latency is launch-bound.
LAUNCH_BOUND_FRACTION = 0.6
#: Medians closer than this relative difference are within noise (see :func:`within_noise`).
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


def within_noise(a: CellResult, b: CellResult) -> bool:
    """Is ``b`` (slower) indistinguishable from ``a``? True when the medians differ by under 2 %, or the
    faster cell's p90 reaches past the slower one's median (their spreads overlap substantially)."""
    ta, tb = a.graph_timing or a.timing, b.graph_timing or b.timing
    if ta is None or tb is None:
        return False
    return (tb.median_us - ta.median_us) / ta.median_us < NOISE_FRACTION or ta.p90_us >= tb.median_us


def runner_up(run: RunResult, tag: str, winner: CellResult | None) -> CellResult | None:
    """The fastest eligible cell of workload ``tag`` other than ``winner``, or None."""
    ranked = sorted((c for c in run.cells if c.workload.tag == tag and c.eligible and (winner is None or c.backend != winner.backend)),
                    key=lambda c: c.latency_us)
    return ranked[0] if ranked else None


@dataclass(frozen=True)
class CellEvidence:
    """Observed facts about one cell the verdict reasons with (None where not observed).

    ``query_rows`` = B·Hq·Lq; ``ctas`` / ``ctas_per_sm`` of the dominant kernel per launch (``num_sms``: the
    run's SM count); ``persistent_grid``: exactly one CTA per SM; ``underfilled``: fewer CTAs than SMs;
    ``kv_gbps`` = K/V bytes / latency (GB = 1e9); ``copy_fraction`` = kv_gbps / measured copy GB/s;
    ``floor_us`` = requested bytes / copy ceiling (µs); ``gpu_time_us``: the cell's kernels per call (µs);
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
    copy_fraction: float | None
    floor_us: float | None
    gpu_time_us: float | None = None
    graph_replay: bool = False
    ledger: ByteLedger | None = None

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
    ceiling = run.ceilings.copy_gbps if run.ceilings else None
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
        copy_fraction=kv / ceiling if kv is not None and ceiling else None,
        floor_us=w.requested_bytes / (ceiling * 1e9) * 1e6 if ceiling else None,
        gpu_time_us=gpu,
        graph_replay=cell.graph_timing is not None,
        ledger=byte_ledger(cell) if cell.counters is not None else None,
    )


class Standing(Enum):
    """How a non-training workload's winner relates to the training winner."""

    NOT_RUN = "not run"  #: every cell is pending (the run was interrupted)
    NO_WINNER = "no winner"  #: no cell passed
    UNCOMPARED = "uncompared"  #: a winner, but no training winner to compare it with
    STAYS = "stays"  #: the training winner wins here too
    CHANGES = "changes"  #: another backend wins here


class TrainingOutcome(Enum):
    """Whether the run has a training winner to compare the other workloads with."""

    WON = "won"
    NO_WORKLOAD = "no training workload"
    NO_ELIGIBLE_CELL = "no training cell passed"


@dataclass(frozen=True)
class WorkloadVerdict:
    """One non-training workload: its winner against the training winner, and the evidence.

    ``runner_up_ratio`` = runner-up latency / winner latency; ``training_here``: the training winner's
    backend on this workload (None when absent); ``training_here_ratio`` = its latency / the winner's
    (eligible cells only); ``explained``: the cells the reasons cover (the winner, then the training
    winner's cell when another backend won, else the runner-up); ``close_call``: the winner and that
    second cell are within noise.
    """

    workload: Workload
    standing: Standing
    winner: CellEvidence | None
    runner_up: CellEvidence | None
    runner_up_within_noise: bool
    runner_up_ratio: float | None
    training_here: CellEvidence | None
    training_here_ratio: float | None
    training_here_within_noise: bool
    explained: tuple[CellEvidence, ...]
    close_call: bool = False

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
        """True: the training winner stays the winner; False: it does not; None: undecided (no winner or
        nothing to compare with)."""
        return {Standing.STAYS: True, Standing.CHANGES: False}.get(self.standing)

    @property
    def winner_backend(self) -> str | None:
        """The winning backend's name, None without a winner."""
        return self.winner.backend if self.winner else None


@dataclass(frozen=True)
class Verdict:
    """The run's answer: the training winner, and for every other workload whether it still wins and why."""

    training: TrainingOutcome
    training_winner: str | None
    training_tag: str | None
    training_evidence: CellEvidence | None
    rows: tuple[WorkloadVerdict, ...]

    @property
    def decode_rows(self) -> tuple[WorkloadVerdict, ...]:
        """The rows of decode workloads, in run order."""
        return tuple(r for r in self.rows if r.phase is Phase.DECODE)


def verdict(run: RunResult) -> Verdict:
    """Training winner vs every prefill and decode winner, with the evidence of each comparison."""
    win = winners(run)
    by_tag = {c.workload.tag: c.workload for c in run.cells}
    train_tags = [t for t, w in by_tag.items() if w.phase is Phase.TRAIN]
    tw = win.get(train_tags[0]) if train_tags else None
    training = (TrainingOutcome.NO_WORKLOAD if not train_tags else
                TrainingOutcome.NO_ELIGIBLE_CELL if tw is None else TrainingOutcome.WON)
    rows: list[WorkloadVerdict] = []
    for tag, w in by_tag.items():
        if w.phase is Phase.TRAIN:
            continue
        cw = win.get(tag)
        cells_here = [c for c in run.cells if c.workload.tag == tag]
        t_here = next((c for c in cells_here if tw is not None and c.backend == tw.backend), None)
        second = runner_up(run, tag, cw)
        second_noise = bool(cw and second and within_noise(cw, second))
        if cw is None:
            standing = Standing.NOT_RUN if all(c.status == CellStatus.PENDING for c in cells_here) else Standing.NO_WINNER
        elif tw is None:
            standing = Standing.UNCOMPARED
        else:
            standing = Standing.STAYS if cw.backend == tw.backend else Standing.CHANGES
        t_ratio = t_noise = None
        if standing is Standing.CHANGES and t_here is not None and t_here.eligible:
            t_ratio = t_here.latency_us / cw.latency_us  # type: ignore[operator,union-attr]
            t_noise = within_noise(cw, t_here)  # type: ignore[arg-type]
        other = t_here if (cw is not None and t_here is not None and t_here.backend != cw.backend) else second
        explained = tuple(evidence(c, run) for c in (cw, other) if c is not None)
        rows.append(WorkloadVerdict(
            workload=w, standing=standing,
            winner=evidence(cw, run) if cw else None,
            runner_up=evidence(second, run) if second else None,
            runner_up_within_noise=second_noise,
            runner_up_ratio=second.latency_us / cw.latency_us if cw and second else None,  # type: ignore[operator]
            training_here=evidence(t_here, run) if t_here else None,
            training_here_ratio=t_ratio, training_here_within_noise=bool(t_noise),
            explained=explained,
            close_call=bool(cw and other and other.eligible and within_noise(cw, other)),
        ))
    return Verdict(training, tw.backend if tw else None, tw.workload.tag if tw else None,
                   evidence(tw, run) if tw else None, tuple(rows))


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
