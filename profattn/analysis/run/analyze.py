"""One run, analysed once: everything the run report, the Markdown summary and ``profattn profile``'s last lines
say, as typed records. Torch-free.

:func:`analyze_run` computes, in one pass over a :class:`~profattn.results.RunResult`: the workloads in matrix
order, the winners and ties, every cell ranked against its workload's winner, the verdict with its mechanisms
(:mod:`profattn.analysis.run.verdict`, :mod:`profattn.analysis.run.mechanisms`) and per-layout answers
(:mod:`profattn.analysis.run.layout`), the byte and FLOP ledgers, the counter kernels matched to the traced ones, the
decode series and their crossovers, the serving, GQA, context-parallel and selection-policy sections, the noise
findings and the traces that could not be read. The renderers (:mod:`profattn.report.run`,
:mod:`profattn.report.markdown`, ``profattn summary``) only format a :class:`RunAnalysis`; none of them ranks,
compares or re-derives anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from profattn.analysis.calls.call_shapes import ATTENTION_OPS
from profattn.analysis.calls.comm import CpSummary
from profattn.analysis.common.margins import margin
from profattn.analysis.common.names import kernel_stem
from profattn.analysis.run.gqa import GqaComparison, gqa_comparisons
from profattn.analysis.run.layout import CacheLayout, cell_layout, passes_explicit_mask
from profattn.analysis.run.ledgers import ByteLedger, FlopLedger, byte_ledger, flop_ledger
from profattn.analysis.run.noise import NoiseFinding, noise_findings
from profattn.analysis.run.reattach import TraceProblem
from profattn.analysis.run.serving import MixedSplit, PromptTime, mixed_splits, prompt_times
from profattn.analysis.run.verdict import Verdict, verdict, winners
from profattn.results import CellResult, CellStatus, CounterKernel, KernelLaunch, RunResult
from profattn.workload import Phase, Workload

if TYPE_CHECKING:  # pragma: no cover
    from profattn.analysis.selection.policy import Policy

#: Phases in matrix order.
PHASE_ORDER = tuple(Phase)


def workload_order(cells: Sequence[CellResult]) -> tuple[Workload, ...]:
    """The workloads of ``cells`` in matrix order: phase (train → prefill → decode → mixed), then batch, page size,
    ragged and shared-prefix batches after uniform ones, then kv_len — so a sweep's series read down."""
    ws = {c.workload.tag: c.workload for c in cells}
    return tuple(sorted(ws.values(), key=lambda w: (PHASE_ORDER.index(w.phase), w.batch, w.page_size or 0, w.is_ragged,
                                                    w.shared_prefix_len or 0, w.kv_len, w.q_len, w.tag)))


def timed(cell: CellResult) -> bool:
    """The cell ran and was timed (``ok`` or ``incorrect``): it has a latency, a ledger and a place in the charts."""
    return cell.timing is not None and cell.status in (CellStatus.OK, CellStatus.INCORRECT)


@dataclass(frozen=True)
class SdpaPath:
    """Which SDPA path ran for a cell whose workload reached SDPA as an explicit boolean mask (a sliding window, or a
    variable-length call padded to its longest sequence): the dispatched backend op (``op``; its backend ``path``:
    ``math``, ``flash``, ``efficient``, ``cudnn``...) and the dominant kernel, from the cell's trace."""

    op: str
    path: str
    dominant_kernel: str | None
    window: int | None
    varlen: bool


def sdpa_path(cell: CellResult) -> SdpaPath | None:
    """The :class:`SdpaPath` of ``cell``, None for a backend that passes no explicit mask to SDPA
    (:func:`profattn.analysis.run.layout.passes_explicit_mask`), or when its trace names no SDPA backend op."""
    w = cell.workload
    if not passes_explicit_mask(cell.backend, w) or cell.trace is None:
        return None
    op = next((o for o in cell.trace.ops if ATTENTION_OPS.get(o) is not None and ATTENTION_OPS[o].backend), None)
    if op is None:
        return None
    return SdpaPath(op, ATTENTION_OPS[op].backend, cell.trace.dominant_kernel, w.window, w.is_varlen)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MatrixCell:
    """One cell of the result matrix against its workload's winner (the fastest eligible cell overall).

    ``winner``: this is it; ``ties``: for the winner, the backends within noise of it (fastest first); ``tie``: for
    another timed cell, within noise of the winner (:func:`profattn.analysis.common.margins.margin`); ``ratio``: latency /
    the winner's (None untimed or without a winner); ``layout``: what its kernel read; ``sdpa``: the SDPA path that
    ran when the workload reached SDPA as an explicit mask."""

    cell: CellResult
    winner: bool
    ties: tuple[str, ...] = ()
    tie: bool = False
    ratio: float | None = None
    layout: CacheLayout | None = None
    sdpa: SdpaPath | None = None


@dataclass(frozen=True)
class LedgerEntry:
    """A timed cell with its byte and FLOP ledgers (:mod:`profattn.analysis.run.ledgers`)."""

    cell: CellResult
    bytes: ByteLedger
    flops: FlopLedger


@dataclass(frozen=True)
class CounterMatch:
    """One kernel Nsight Compute measured in a cell, with the traced kernel of the same name stem
    (:func:`~profattn.analysis.common.names.kernel_stem`) whose launch shape is ncu's where one is (``traced``; None: not in
    the trace); ``agree``: ncu's (grid, block) is among the traced kernel's shapes (None: not in the trace)."""

    cell: CellResult
    kernel: CounterKernel
    traced: KernelLaunch | None
    agree: bool | None


@dataclass(frozen=True)
class SeriesPoint:
    """One KV length of a decode series: its winner (None: none eligible), latency (µs) and the backends tied with it."""

    kv_len: int
    winner: str | None
    latency_us: float | None
    tied: tuple[str, ...]


@dataclass(frozen=True)
class DecodeSeries:
    """Uniform decode workloads of one (batch, page size) by KV length, ranked among the kernels that read ``layout``
    (None: every kernel, where the workloads are not answered per layout): the winner at each, where it changes
    beyond noise (``changes``: (kv before, kv after, winner before, winner after); the new winner is not tied with the
    old at either length) and where it changes only within noise (``noisy``)."""

    batch: int
    page_size: int
    points: tuple[SeriesPoint, ...]
    changes: tuple[tuple[int, int, str | None, str | None], ...]
    noisy: tuple[tuple[int, int, str | None, str | None], ...]
    layout: CacheLayout | None = None


def decode_series(run: RunResult, win: dict[str, CellResult | None], v: Verdict) -> tuple[DecodeSeries, ...]:
    """Every (batch, page size) series of uniform decode workloads (no ragged or shared-prefix batch, no
    variable-length call, no window), batch then page size ascending; a workload answered per layout
    (:attr:`WorkloadVerdict.layouts`) is a point of its paged series and of its contiguous-copy series, never of one
    ranking that mixes them."""
    rows = {r.workload_tag: r for r in v.rows}
    series: dict[tuple[int, int, int, CacheLayout | None], dict[int, SeriesPoint]] = {}
    order = {None: 0, CacheLayout.PAGED: 1, CacheLayout.CONTIGUOUS: 2, CacheLayout.PACKED: 3}
    by_tag = _by_tag(run)
    for c in run.cells:
        w = c.workload
        if w.phase is not Phase.DECODE or w.is_ragged or w.shared_prefix_len or w.is_varlen or w.window is not None:
            continue
        row = rows.get(w.tag)
        if row is not None and row.layouts is not None:
            for rk in (row.layouts.paged, row.layouts.contiguous):
                series.setdefault((w.batch, w.page_size or 0, order[rk.layout], rk.layout), {})[w.kv_len] = SeriesPoint(
                    w.kv_len, rk.winner.backend, rk.winner.latency_us, rk.tied)
            continue
        best = win.get(w.tag)
        series.setdefault((w.batch, w.page_size or 0, 0, None), {})[w.kv_len] = SeriesPoint(
            w.kv_len, best.backend if best else None, best.latency_us if best else None, _ties(by_tag[w.tag], best))
    out = []
    for (batch, page, _, layout), by_kv in sorted(series.items(), key=lambda kv: kv[0][:3]):
        pts = tuple(p for _, p in sorted(by_kv.items()))
        changes, noisy = [], []
        for a, b in zip(pts, pts[1:]):
            if a.winner == b.winner:
                continue
            step = (a.kv_len, b.kv_len, a.winner, b.winner)
            if a.winner is not None and b.winner is not None and (b.winner in a.tied or a.winner in b.tied):
                noisy.append(step)
            else:
                changes.append(step)
        out.append(DecodeSeries(batch, page, pts, tuple(changes), tuple(noisy), layout))
    return tuple(out)


def _by_tag(run: RunResult) -> dict[str, list[CellResult]]:
    out: dict[str, list[CellResult]] = {}
    for c in run.cells:
        out.setdefault(c.workload.tag, []).append(c)
    return out


def _ties(cells: Sequence[CellResult], best: CellResult | None) -> tuple[str, ...]:
    """The backends among ``cells`` (one workload's) tied with ``best`` within noise, fastest first."""
    if best is None:
        return ()
    others = sorted((c for c in cells if c.eligible and c.backend != best.backend),
                    key=lambda c: c.latency_us)  # type: ignore[arg-type, return-value]
    return tuple(c.backend for c in others if margin(best, c).tie)


def counter_matches(cells: Sequence[CellResult]) -> tuple[CounterMatch, ...]:
    """Every Nsight Compute kernel of every cell with counters, matched to its traced kernel (:class:`CounterMatch`)."""
    out = []
    for c in cells:
        if c.counters is None:
            continue
        traced: dict[str, list[KernelLaunch]] = {}
        for t in (c.trace.kernels if c.trace else ()):
            traced.setdefault(kernel_stem(t.name), []).append(t)
        for k in c.counters.kernels:
            same = traced.get(kernel_stem(k.name), [])
            shapes = {sh for t in same for sh in (t.shapes or ((t.grid, t.block),))}
            agree = None if not same else (k.grid, k.block) in shapes
            t = next((x for x in same if (k.grid, k.block) in (x.shapes or ((x.grid, x.block),))), same[0] if same else None)
            out.append(CounterMatch(c, k, t, agree))
    return tuple(out)


@dataclass(frozen=True)
class RunAnalysis:
    """A run analysed once (module docstring). ``run``: the run itself; ``workloads``: matrix order; ``backends``: run
    order; ``matrix``: every cell in matrix order (workload order, then backend order), ranked; ``winners``: per
    workload tag the fastest eligible cell (None: none); ``verdict``: :func:`profattn.analysis.run.verdict.verdict`;
    ``ledgers``: per phase (only those with timed cells) every timed cell's ledgers; ``counters``: ncu kernels matched
    to the trace; ``series``: decode series and their crossovers; ``prompts`` / ``mixed``: the serving views
    (:mod:`profattn.analysis.run.serving`); ``gqa``: workloads differing only in Hkv; ``policy``: the selection policy
    learnt from this run's cells (None: fewer than the policy needs); ``noise``: reasons to distrust the timings;
    ``trace_problems``: traces the report could not read (their cells keep the stored summary)."""

    run: RunResult
    workloads: tuple[Workload, ...]
    backends: tuple[str, ...]
    matrix: tuple[MatrixCell, ...]
    winners: dict[str, CellResult | None]
    verdict: Verdict
    ledgers: dict[Phase, tuple[LedgerEntry, ...]]
    counters: tuple[CounterMatch, ...]
    series: tuple[DecodeSeries, ...]
    prompts: tuple[PromptTime, ...]
    mixed: tuple[MixedSplit, ...]
    gqa: tuple[GqaComparison, ...]
    policy: "Policy | None"
    noise: tuple[NoiseFinding, ...]
    trace_problems: tuple[TraceProblem, ...] = ()
    _by_id: dict[str, MatrixCell] = field(default_factory=dict, repr=False, compare=False)

    @property
    def cp(self) -> tuple[CpSummary, ...]:
        """The context-parallel cells against one process (``verdict.cp``)."""
        return self.verdict.cp

    @property
    def pending(self) -> int:
        """Cells that never ran (an interrupted run)."""
        return sum(1 for c in self.run.cells if c.status is CellStatus.PENDING)

    def cell(self, cell_id: str) -> MatrixCell:
        """The :class:`MatrixCell` of ``cell_id``.

        Raises:
            KeyError: no such cell in the run.
        """
        return self._by_id[cell_id]

    def timed_cells(self) -> tuple[CellResult, ...]:
        """The timed cells (:func:`timed`), in run order."""
        return tuple(c for c in self.run.cells if timed(c))


def analyze_run(run: RunResult, *, traces: Sequence[TraceProblem] = ()) -> RunAnalysis:
    """Analyse ``run`` once (module docstring); ``traces``: the traces that could not be read when its evidence was
    rebuilt (:class:`profattn.analysis.run.reattach.TraceRead.problems`). Pure: reads nothing but ``run``."""
    from profattn.analysis.selection.policy import derive
    from profattn.store import measurements

    order = workload_order(run.cells)
    backends = tuple(dict.fromkeys(c.backend for c in run.cells))
    win = winners(run)
    by_tag = _by_tag(run)
    ties = {w.tag: _ties(by_tag[w.tag], win.get(w.tag)) for w in order}
    pos = {w.tag: i for i, w in enumerate(order)}
    bpos = {b: i for i, b in enumerate(backends)}
    matrix = []
    for c in sorted(run.cells, key=lambda c: (pos[c.workload.tag], bpos[c.backend])):
        best = win.get(c.workload.tag)
        is_winner = best is not None and best.cell_id == c.cell_id
        ratio = tie = None
        if best is not None and not is_winner and c.latency_us is not None and best.latency_us:
            ratio, tie = c.latency_us / best.latency_us, margin(best, c).tie
        matrix.append(MatrixCell(c, is_winner, ties[c.workload.tag] if is_winner else (), bool(tie), ratio,
                                 cell_layout(c), sdpa_path(c)))
    ledgers: dict[Phase, list[LedgerEntry]] = {}
    for c in run.cells:
        if timed(c):
            ledgers.setdefault(c.workload.phase, []).append(LedgerEntry(c, byte_ledger(c), flop_ledger(c, run)))
    ceil = run.ceilings
    policy = derive(measurements(run), run.environment.device_name, slices={}, lowo=True,
                    ceilings=(ceil.read_gbps, ceil.matmul_tflops) if ceil else (None, None))
    v = verdict(run)
    return RunAnalysis(
        run=run, workloads=order, backends=backends, matrix=tuple(matrix), winners=win, verdict=v,
        ledgers={p: tuple(ledgers[p]) for p in Phase if p in ledgers}, counters=counter_matches(run.cells),
        series=decode_series(run, win, v), prompts=prompt_times(run.cells), mixed=mixed_splits(run.cells),
        gqa=gqa_comparisons(run), policy=policy, noise=noise_findings(run), trace_problems=tuple(traces),
        _by_id={m.cell.cell_id: m for m in matrix},
    )
