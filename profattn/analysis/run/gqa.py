"""GQA: cache traffic against arithmetic across KV-head counts — the seed's "compare 8 and 32 KV heads directly".

Workloads of a run that differ only in ``num_kv_heads`` form one :class:`GqaComparison` (one per shape: in the
``gqa`` preset, one per decode KV length). For every backend it keeps two ledgers side by side across the head
counts: the cache traffic (K/V bytes requested — ``Workload.kv_bytes``, falling with Hkv — and the DRAM bytes the
counter pass measured, :class:`~profattn.analysis.run.ledgers.ByteLedger`) and the arithmetic (FLOPs from the query
heads, unchanged by Hkv). A smaller allocation alone does not prove that a kernel avoided redundant reads, so
every cell whose DRAM traffic exceeds its requested bytes by more than 20 % is flagged — the one ledger rule,
:data:`~profattn.analysis.run.ledgers.REDUNDANT_DRAM_RATIO` (1.2), not a second threshold. And for every smaller
head count against the largest (MHA → GQA, MHA → MQA): did the smaller cache become a latency saving, judged
with the verdict's noise rule (:func:`profattn.analysis.common.margins.margin`), and is the smaller-cache call
bandwidth-bound or launch-bound (:class:`Bound`).

Typed records only; :mod:`profattn.report.gqa` writes the sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from profattn.analysis.common.margins import Margin, margin
from profattn.analysis.run.ledgers import REDUNDANT_DRAM_RATIO, ByteLedger, byte_ledger
from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION
from profattn.analysis.run.mechanisms import BOUND_FRACTION, Bound, bound_of
from profattn.results import CellResult, CellStatus, RunResult
from profattn.workload import Workload

__all__ = [
    "BANDWIDTH_BOUND_FRACTION", "LAUNCH_FLOOR_RATIO", "REDUNDANT_DRAM_RATIO", "Bound", "CacheSaving", "GqaComparison",
    "HeadsCell", "HeadsRow", "SavingOutcome", "cell_bound", "gqa_comparisons", "latency_floors",
]

#: A call whose achieved GB/s (requested bytes / latency) reaches this fraction of the run's memory roof
#: (:attr:`profattn.results.Ceilings.bandwidth_gbps`) is bandwidth-bound: fewer bytes can become less time (the one
#: bound rule, :func:`profattn.analysis.run.mechanisms.bound_of`; :class:`Bound` is that module's).
BANDWIDTH_BOUND_FRACTION = BOUND_FRACTION
#: A call whose latency is within this multiple of its backend's latency floor in the run
#: (:func:`latency_floors`) is launch-bound: fixed per-call costs, not bytes, set its time.
LAUNCH_FLOOR_RATIO = 1.5


class SavingOutcome(Enum):
    """Whether a smaller K/V cache (fewer KV heads) became a latency saving, by :func:`verdict.margin`'s rule."""

    SAVED = "latency saving"  #: the fewer-heads call is faster beyond noise
    NO_SAVING = "no saving"  #: the two calls are within noise of each other
    SLOWER = "slower"  #: the fewer-heads call is slower beyond noise
    NOT_TIMED = "not timed"  #: either call has no eligible timing (not timed, incorrect, or family flagged)


@dataclass(frozen=True)
class HeadsCell:
    """One backend's call at one KV-head count: both ledgers.

    ``cache_bytes``: K and V bytes requested (``Workload.kv_bytes``: ``2 · tokens · Hkv · d · itemsize``);
    ``requested_bytes``: the whole call's minimum traffic (Q, K, V, O, block table); ``ledger``: that against the
    DRAM bytes measured (``ledger.dram_bytes`` None without counters); ``flops``: from the query heads
    (``4 · B · Hq · pairs · d``); ``latency_us``: the judged median (graph replay where captured; None when not
    eligible); ``achieved_gbps``: requested bytes / latency (GB = 1e9); ``bound``: :func:`cell_bound`.
    """

    workload: Workload
    backend: str
    status: CellStatus
    latency_us: float | None
    cache_bytes: int
    requested_bytes: int
    flops: int
    ledger: ByteLedger
    achieved_gbps: float | None
    bound: Bound

    @property
    def num_kv_heads(self) -> int:
        """Hkv of this call."""
        return self.workload.num_kv_heads

    @property
    def flagged(self) -> bool:
        """Measured DRAM traffic above :data:`REDUNDANT_DRAM_RATIO` × requested (more than 20 % over):
        the "smaller allocation, same reads" failure. False when not measured."""
        return self.ledger.redundant is True


@dataclass(frozen=True)
class HeadsRow:
    """One backend across the head counts of one shape: its :class:`HeadsCell` by Hkv, largest first (a head
    count the backend has no cell for is left out)."""

    backend: str
    cells: tuple[HeadsCell, ...]

    def at(self, num_kv_heads: int) -> HeadsCell | None:
        """The cell at ``num_kv_heads``, None when the backend has none."""
        return next((c for c in self.cells if c.num_kv_heads == num_kv_heads), None)


@dataclass(frozen=True)
class CacheSaving:
    """Did a smaller cache become a latency saving? One backend, ``base`` (the largest Hkv) against ``smaller``.

    ``bytes_ratio`` = base cache bytes / smaller cache bytes (4.0 for Hkv 32 → 8); ``requested_ratio``: the same
    over the whole call's requested bytes (Q and O do not shrink); ``latency_ratio`` = base latency / smaller
    latency (> 1: faster; None when either is not eligible); ``margin``: :func:`verdict.margin` of the two cells;
    ``bound``: what sets the smaller call's time; ``bandwidth_gbps`` / ``bandwidth_kind``: the run's memory roof;
    ``floor_us``: the backend's latency floor in the run (:func:`latency_floors`); ``byte_floor_us``: the smaller
    call's requested bytes at the memory roof (µs; None without a roof).
    """

    backend: str
    base: HeadsCell
    smaller: HeadsCell
    bytes_ratio: float
    requested_ratio: float
    latency_ratio: float | None
    margin: Margin | None
    outcome: SavingOutcome
    bound: Bound
    bandwidth_gbps: float | None
    bandwidth_kind: str
    floor_us: float | None
    byte_floor_us: float | None

    @property
    def kv_len(self) -> int:
        """The shape's KV length (tokens)."""
        return self.base.workload.kv_len


@dataclass(frozen=True)
class GqaComparison:
    """Workloads identical but for ``num_kv_heads`` (at least two head counts), every backend's two ledgers.

    ``workload``: the shape at its largest head count; ``heads``: the head counts measured, largest first;
    ``rows``: one per backend (run order); ``savings``: every backend × every smaller head count against the
    largest, in that order.
    """

    workload: Workload
    heads: tuple[int, ...]
    rows: tuple[HeadsRow, ...]
    savings: tuple[CacheSaving, ...]

    @property
    def kv_len(self) -> int:
        """The shape's KV length (tokens)."""
        return self.workload.kv_len

    @property
    def flagged(self) -> tuple[HeadsCell, ...]:
        """Every cell whose measured DRAM traffic exceeds requested by more than 20 % (:attr:`HeadsCell.flagged`)."""
        return tuple(c for r in self.rows for c in r.cells if c.flagged)

    def savings_at(self, num_kv_heads: int) -> tuple[CacheSaving, ...]:
        """The savings of the step to ``num_kv_heads`` (every backend that has both cells)."""
        return tuple(s for s in self.savings if s.smaller.num_kv_heads == num_kv_heads)


def _shape_key(w: Workload) -> Workload:
    """``w`` with its KV heads set aside (set to Hq): workloads sharing this key differ only in Hkv."""
    return w.with_(num_kv_heads=w.num_q_heads)


def latency_floors(run: RunResult) -> dict[tuple[str, object], float]:
    """Per (backend, phase): the fastest eligible latency of that backend over the run's calls of that phase, µs —
    the fixed cost per call it does not go under in this run (launch, set-up kernels, synchronisation)."""
    out: dict[tuple[str, object], float] = {}
    for c in run.cells:
        if c.eligible and c.latency_us is not None:
            key = (c.backend, c.workload.phase)
            out[key] = min(out.get(key, c.latency_us), c.latency_us)
    return out


def cell_bound(cell: CellResult, run: RunResult, floor_us: float | None) -> Bound:
    """What sets ``cell``'s time, in this order: :attr:`Bound.BANDWIDTH` when its achieved GB/s (requested bytes /
    latency) reaches :data:`BANDWIDTH_BOUND_FRACTION` of the run's memory roof; :attr:`Bound.LAUNCH` when its
    latency is within :data:`LAUNCH_FLOOR_RATIO` × ``floor_us`` (the backend's floor, :func:`latency_floors`) or,
    with a trace, its kernels run under :data:`~profattn.analysis.common.bounds.LAUNCH_BOUND_FRACTION` of its latency;
    :attr:`Bound.NEITHER` otherwise when a roof was measured, else :attr:`Bound.UNKNOWN` (also for an
    ineligible or untimed cell)."""
    lat = cell.latency_us
    if not cell.eligible or lat is None:
        return Bound.UNKNOWN
    roof = run.ceilings.bandwidth_gbps if run.ceilings else None
    gbps = cell.achieved_gbps
    gpu = cell.trace.gpu_time_per_call_us if cell.trace is not None else None
    at_floor = floor_us is not None and lat <= LAUNCH_FLOOR_RATIO * floor_us
    return bound_of(None, gbps / roof if roof and gbps is not None else None, gpu, lat, at_floor=at_floor,
                    measured=bool(roof))


def _heads_cell(cell: CellResult, run: RunResult, floors: dict[tuple[str, object], float]) -> HeadsCell:
    w = cell.workload
    ok = cell.eligible
    return HeadsCell(
        workload=w, backend=cell.backend, status=cell.status, latency_us=cell.latency_us if ok else None,
        cache_bytes=w.kv_bytes, requested_bytes=w.requested_bytes, flops=w.flops, ledger=byte_ledger(cell),
        achieved_gbps=cell.achieved_gbps if ok else None,
        bound=cell_bound(cell, run, floors.get((cell.backend, w.phase))),
    )


def gqa_comparisons(run: RunResult) -> tuple[GqaComparison, ...]:
    """Every set of the run's workloads that differ only in ``num_kv_heads`` (two or more head counts), in run
    order of first appearance: both ledgers per backend and head count, and per backend each smaller head count's
    :class:`CacheSaving` against the largest (``margin`` by :func:`verdict.margin` when both cells are eligible).
    Empty when no two workloads differ only in their KV heads."""
    groups: dict[Workload, dict[int, Workload]] = {}
    for c in run.cells:
        groups.setdefault(_shape_key(c.workload), {})[c.workload.num_kv_heads] = c.workload
    floors = latency_floors(run)
    roof = run.ceilings.bandwidth_gbps if run.ceilings else None
    kind = run.ceilings.bandwidth_kind if run.ceilings else "copy"
    out = []
    for by_heads in groups.values():
        if len(by_heads) < 2:
            continue
        heads = tuple(sorted(by_heads, reverse=True))
        members = {by_heads[h] for h in heads}
        cells = [c for c in run.cells if c.workload in members]
        backends = list(dict.fromkeys(c.backend for c in cells))
        rows, savings = [], []
        for b in backends:
            mine = {c.workload.num_kv_heads: c for c in cells if c.backend == b}
            hc = {h: _heads_cell(mine[h], run, floors) for h in heads if h in mine}
            rows.append(HeadsRow(b, tuple(hc[h] for h in heads if h in hc)))
            top = heads[0]
            if top not in mine:
                continue
            for h in heads[1:]:
                if h not in mine:
                    continue
                base_c, small_c = mine[top], mine[h]
                timed = base_c.eligible and small_c.eligible
                m = margin(base_c, small_c) if timed else None
                if m is None:
                    outcome = SavingOutcome.NOT_TIMED
                elif m.tie:
                    outcome = SavingOutcome.NO_SAVING
                else:
                    outcome = SavingOutcome.SAVED if small_c.latency_us < base_c.latency_us else SavingOutcome.SLOWER  # type: ignore[operator]
                sw = small_c.workload
                savings.append(CacheSaving(
                    backend=b, base=hc[top], smaller=hc[h],
                    bytes_ratio=base_c.workload.kv_bytes / sw.kv_bytes,
                    requested_ratio=base_c.workload.requested_bytes / sw.requested_bytes,
                    latency_ratio=base_c.latency_us / small_c.latency_us if timed else None,  # type: ignore[operator]
                    margin=m, outcome=outcome, bound=hc[h].bound, bandwidth_gbps=roof, bandwidth_kind=kind,
                    floor_us=floors.get((b, sw.phase)),
                    byte_floor_us=sw.requested_bytes / (roof * 1e9) * 1e6 if roof else None,
                ))
        out.append(GqaComparison(by_heads[heads[0]], heads, tuple(rows), tuple(savings)))
    return tuple(out)
