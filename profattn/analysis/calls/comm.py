"""Communication in one rank's Kineto trace: the collectives and their sizes, and how their time sits against the
attention compute (per rank: compute, communication, their overlap, idle).

Pure analysis over a parsed :class:`~profattn.trace.Trace`. Units: µs, elements, bytes.

**Communication time** is the union of the intervals where the process-group backend moved data: NCCL kernels
(``kernel`` events whose name contains ``nccl``) on a GPU; gloo's own ranges (``user_annotation`` ``gloo:<op>``,
recorded on gloo's worker threads while a transfer runs) on a CPU.

**Sizes** come from the ``c10d::`` operators every process-group backend records on the calling thread, with
``record_shapes=True``: their ``Input Dims`` (a ``TensorList`` argument lists one shape per tensor). Each collective is
converted to what one rank sends and receives by the rules of :mod:`profattn.workload.cp` (:data:`C10D_RULES`):
all-gather of ``n`` elements → ``(R − 1)·n`` each way; equal-split all-to-all of ``N`` → ``N·(R − 1)/R``; ``send``/
``recv`` → their tensor; all-reduce of ``n`` (ring) → ``2·n·(R − 1)/R``. ``R`` is ``distributedInfo.world_size`` of the
trace's metadata. Bytes need the element size: the argument's ``Input type`` when it names a dtype, else the
``itemsize`` the caller passes (a ``TensorList`` records no dtype), else unknown (None).

**Compute time** is the union of the attention calls' intervals (:func:`~profattn.analysis.calls.find.find_attention_calls`):
their kernels on a GPU, the call operator itself on a CPU. **Overlap** = the time both run at once; **idle** = the
window minus the union of the two. Within ``window`` ranges (a cell's ``record_function`` name) when given — each
figure is then per window (per call) — else over the trace's span from the first to the last interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from profattn.results import CellStatus

if TYPE_CHECKING:  # a run's verdict reads cp_summaries alone: no trace, no pandas
    from profattn.analysis.calls.call_records import TraceCalls
    from profattn.trace.kineto import Trace

#: ``c10d::`` operator → (collective, index of the argument whose size is the rank's payload, rule). Rules:
#: ``gather`` (R − 1)·n both ways; ``a2a`` n·(R − 1)/R both ways; ``send``/``recv`` n one way; ``reduce`` 2n·(R − 1)/R.
C10D_RULES: dict[str, tuple[str, int, str]] = {
    "c10d::allgather_": ("all_gather", 1, "gather"),
    "c10d::_allgather_base_": ("all_gather", 1, "gather"),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", 1, "gather"),
    "c10d::alltoall_base_": ("all_to_all", 1, "a2a"),
    "c10d::send": ("send", 0, "send"),
    "c10d::recv_": ("recv", 0, "recv"),
    "c10d::recv_any_source_": ("recv", 0, "recv"),
    "c10d::allreduce_": ("all_reduce", 0, "reduce"),
}

#: ``Input type`` strings of recorded tensors → bytes per element.
TYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "BFloat16": 2, "Half": 2, "long int": 8, "int": 4,
    "c10::Float8_e4m3fn": 1, "unsigned char": 1, "signed char": 1, "bool": 1, "short int": 2,
}


@dataclass(frozen=True)
class CommOp:
    """One collective call as recorded: ``op`` (the ``c10d::`` name), ``collective``, start and duration on the calling
    thread (µs), elements this rank sends and receives (:data:`C10D_RULES`), and bytes per element (None: unknown)."""

    op: str
    collective: str
    ts_us: float
    dur_us: float
    elements_sent: int
    elements_received: int
    itemsize: int | None


class CommSource(str, Enum):
    """Where a rank's communication time was read from (module docstring); ``str()`` gives the value."""

    NCCL_KERNELS = "nccl kernels"  #: NCCL's kernels on the GPU
    GLOO_RANGES = "gloo ranges"  #: gloo's ``gloo:<op>`` ranges on its worker threads (a CPU)
    NONE = "none"  #: neither: no communication recorded

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RankTimeline:
    """One rank's communication against its attention compute (module docstring), per window when ``windows > 0``.

    Attributes:
        path: the trace file. rank: ``distributedInfo.rank`` (None when absent). world_size: likewise.
        windows: how many ``window`` ranges were found (0: the whole trace's span was used, counted as one).
        span_us: the window's length (µs, per window). compute_us / comm_us / overlap_us / idle_us: per window.
        sent_bytes / received_bytes: per window; None when an element size is unknown.
        sent_elements / received_elements: per window.
        ops: the collectives inside the windows, in time order.
        comm_source: :class:`CommSource` (``nccl kernels``, ``gloo ranges`` or ``none``).
    """

    path: str
    rank: int | None
    world_size: int | None
    windows: int
    span_us: float
    compute_us: float
    comm_us: float
    overlap_us: float
    idle_us: float
    sent_elements: float
    received_elements: float
    sent_bytes: float | None
    received_bytes: float | None
    ops: tuple[CommOp, ...]
    comm_source: CommSource

    @property
    def overlap_share(self) -> float | None:
        """Share of the communication time hidden under compute (0–1); None without communication."""
        return self.overlap_us / self.comm_us if self.comm_us > 0 else None

    @property
    def comm_share(self) -> float | None:
        """Share of the window spent communicating (0–1); None for an empty window."""
        return self.comm_us / self.span_us if self.span_us > 0 else None


def union_us(intervals: Sequence[tuple[float, float]]) -> float:
    """Length (µs) of the union of ``(start, end)`` intervals. Example: ``[(0, 2), (1, 3), (5, 6)]`` → 4."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _clip(intervals: Sequence[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def _intersection(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Length of (∪a) ∩ (∪b) = |∪a| + |∪b| − |∪(a + b)|."""
    return union_us(a) + union_us(b) - union_us([*a, *b])


def _numel(dims: Any) -> int | None:
    """Elements of one recorded argument: a shape (``[2, 3]`` → 6), or a TensorList's shapes summed."""
    if not isinstance(dims, list) or not dims:
        return None
    if all(isinstance(x, int) and not isinstance(x, bool) for x in dims):
        return math.prod(dims)
    if all(isinstance(x, list) for x in dims):
        parts = [_numel(x) if x else 1 for x in dims]
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]
    return None


def _world(metadata: Mapping[str, Any]) -> tuple[int | None, int | None]:
    info = metadata.get("distributedInfo")
    if not isinstance(info, dict):
        return None, None
    rank, world = info.get("rank"), info.get("world_size")
    ok = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    return (rank if ok(rank) else None), (world if ok(world) else None)


def comm_ops(trace: Trace, *, world_size: int | None = None, itemsize: int | None = None) -> tuple[CommOp, ...]:
    """The trace's collectives (:data:`C10D_RULES`) with the elements each sends and receives; ``world_size``
    defaults to the trace's ``distributedInfo``; ``itemsize`` is used where the trace records no dtype. A collective
    whose size was not recorded (no ``record_shapes``) or whose group size is unknown counts 0 elements."""
    world = world_size if world_size is not None else _world(trace.metadata)[1]
    ops = trace.ops
    rows = ops[ops["name"].isin(list(C10D_RULES))]
    out = []
    for name, ts, dur, dims, types in zip(rows["name"], rows["ts_us"], rows["dur_us"], rows["input_dims"],
                                          rows["input_types"]):
        collective, arg, rule = C10D_RULES[name]
        n = _numel(dims[arg]) if isinstance(dims, list) and len(dims) > arg else None
        size = itemsize
        if isinstance(types, list) and len(types) > arg and types[arg] in TYPE_BYTES:
            size = TYPE_BYTES[types[arg]]
        sent = recv = 0
        if n is not None and world:
            r = world
            if rule == "gather":
                sent = recv = (r - 1) * n
            elif rule == "a2a":
                sent = recv = n * (r - 1) // r
            elif rule == "reduce":
                sent = recv = 2 * n * (r - 1) // r
            elif rule == "send":
                sent = n
            else:
                recv = n
        out.append(CommOp(name, collective, float(ts), float(dur) if dur == dur else 0.0, sent, recv, size))
    return tuple(sorted(out, key=lambda o: o.ts_us))


def comm_intervals(trace: Trace) -> tuple[list[tuple[float, float]], CommSource]:
    """The intervals (µs) where data moved (module docstring) and their :class:`CommSource`."""
    k = trace.kernels
    nccl = k[k["name"].str.contains("nccl", case=False, regex=False)] if len(k) else k
    if len(nccl):
        return list(zip(nccl["ts_us"], nccl["ts_us"] + nccl["dur_us"])), CommSource.NCCL_KERNELS
    r = trace.ranges
    gloo = r[r["name"].str.startswith("gloo:")] if len(r) else r
    if len(gloo):
        return list(zip(gloo["ts_us"], gloo["ts_us"] + gloo["dur_us"])), CommSource.GLOO_RANGES
    return [], CommSource.NONE


def compute_intervals(trace: Trace, calls: "TraceCalls | None" = None) -> list[tuple[float, float]]:
    """The attention calls' intervals (µs): their kernels where they launched any (those beyond a call's kernel cap
    as one span), else the call operator;
    ``calls``: the trace's :func:`~profattn.analysis.calls.find.find_attention_calls`, when already found."""
    from profattn.analysis.calls.find import find_attention_calls

    out: list[tuple[float, float]] = []
    for call in (calls if calls is not None else find_attention_calls(trace)).calls:
        if call.kernels:
            out += [(kk.ts_us, kk.ts_us + kk.dur_us) for kk in call.kernels]
            if call.omitted is not None:  # the kernels beyond the per-call cap: their GPU span
                out.append((call.omitted.first_ts_us, call.omitted.last_end_us))
        else:
            out.append((call.ts_us, call.ts_us + call.dur_us))
    return out


def rank_timeline(trace: Trace, *, window: str | None = None, world_size: int | None = None,
                  itemsize: int | None = None, calls: "TraceCalls | None" = None) -> RankTimeline:
    """One rank's compute/communication timeline (module docstring), per ``window`` range when given and found
    (``calls``: the trace's attention calls, when already found)."""
    rank, world = _world(trace.metadata)
    world = world_size if world_size is not None else world
    comm, source = comm_intervals(trace)
    compute = compute_intervals(trace, calls)
    ops = comm_ops(trace, world_size=world, itemsize=itemsize)
    spans: list[tuple[float, float]] = []
    if window is not None and len(trace.ranges):
        r = trace.ranges[trace.ranges["name"] == window]
        spans = list(zip(r["ts_us"], r["ts_us"] + r["dur_us"]))
    n = len(spans)
    if not spans:
        every = compute + comm
        spans = [(min(s for s, _ in every), max(e for _, e in every))] if every else []
    tot = dict(span=0.0, compute=0.0, comm=0.0, overlap=0.0, busy=0.0)
    kept: list[CommOp] = []
    for lo, hi in spans:
        c, m = _clip(compute, lo, hi), _clip(comm, lo, hi)
        tot["span"] += hi - lo
        tot["compute"] += union_us(c)
        tot["comm"] += union_us(m)
        tot["overlap"] += _intersection(c, m)
        tot["busy"] += union_us([*c, *m])
        kept += [o for o in ops if lo <= o.ts_us <= hi]
    per = max(n, 1)
    sent = sum(o.elements_sent for o in kept)
    recv = sum(o.elements_received for o in kept)
    known = all(o.itemsize is not None for o in kept)
    sent_b = sum(o.elements_sent * o.itemsize for o in kept) / per if known else None  # type: ignore[operator]
    recv_b = sum(o.elements_received * o.itemsize for o in kept) / per if known else None  # type: ignore[operator]
    return RankTimeline(
        path=trace.path, rank=rank, world_size=world, windows=n, span_us=tot["span"] / per,
        compute_us=tot["compute"] / per, comm_us=tot["comm"] / per, overlap_us=tot["overlap"] / per,
        idle_us=(tot["span"] - tot["busy"]) / per, sent_elements=sent / per, received_elements=recv / per,
        sent_bytes=sent_b, received_bytes=recv_b, ops=tuple(kept), comm_source=source,
    )


@dataclass(frozen=True)
class CpSummary:
    """One context-parallel cell against the same global call on one process (same backend, same run).

    ``step_us``: the cell's median step (slowest rank per repetition); ``single_us``: the one-process cell's median
    (None when not measured or not ok); ``efficiency``: ``single_us / (ranks · step_us)`` (1 = perfect strong
    scaling); ``comm_share``, ``overlap_share``, ``idle_share``: means over the ranks with a trace (communication
    time / window, overlapped / communication time, idle / window); ``ledger_ok``: every rank's traced bytes equal
    the formula's (None where no formula or no trace); ``workload``: the cell's workload."""

    cell_id: str
    scheme: str
    ranks: int
    phase: str
    backend: str
    status: str
    step_us: float | None
    single_us: float | None
    efficiency: float | None
    comm_share: float | None
    overlap_share: float | None
    idle_share: float | None
    ledger_ok: bool | None
    workload: Any = None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def cp_summaries(cells: Sequence[Any]) -> tuple[CpSummary, ...]:
    """A :class:`CpSummary` per context-parallel cell of ``cells`` (:class:`~profattn.results.CellResult`)."""
    single = {(c.workload.tag, c.backend): c for c in cells if c.workload.cp_ranks == 1}
    out = []
    for c in cells:
        w = c.workload
        if w.cp_ranks < 2:
            continue
        base = single.get((w.single_process.tag, c.backend))
        one = base.latency_us if base is not None and base.status is CellStatus.OK else None
        step = c.timing.median_us if c.timing is not None else None
        traced = [r for r in c.ranks if r.comm_us is not None]
        spans = [(r, r.profiled_step_us) for r in traced if r.profiled_step_us is not None]
        comm = _mean([r.comm_us / s for r, s in spans if s > 0])
        overlap = _mean([r.overlap_us / r.comm_us for r in traced if r.comm_us > 0])
        idle = _mean([r.idle_us / s for r, s in spans if s > 0])
        checked = [r for r in traced if r.ledger_bytes is not None and r.sent_bytes is not None]
        ok = all(round(r.sent_bytes) == r.ledger_bytes for r in checked) if checked else None
        eff = one / (w.cp_ranks * step) if one is not None and step else None
        out.append(CpSummary(c.cell_id, str(w.cp_scheme), w.cp_ranks, w.phase.value, c.backend, str(c.status), step,
                             one, eff, comm, overlap, idle, ok, w))
    return tuple(out)
