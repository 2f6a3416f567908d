"""Serving views of a run: attention time per prompt against chunk size (chunked prefill), the cache append's
time and bytes per prompt, and how a mixed step's time splits between its prefill and decode parts.

Nothing is stored to group cells by prompt: it is derived from the shapes. A *chunk* is an appending,
uniform, paged prefill call with ``kv_len`` a multiple of ``q_len``: chunk ``i`` (0-based) of chunk size
``C = q_len`` has ``kv_len = (i + 1) · C``. Chunks of one chunk size that share every other field (batch,
heads, head dim, dtype, mask, page size) form one prompt of ``P`` = the longest ``kv_len`` among them, in
``P / C`` chunks (``C = P``: the prompt unchunked). A mixed step's parts are the calls of its prefill
sequences alone (``q_len > 1``) and of its decode sequences alone (``q_len = 1``), same other fields, as
:func:`~profattn.workload.Workload.varlen` builds them.

Times are each cell's eager-launch median (:attr:`CellResult.eager_latency_us`, µs), so a mixed step (never
graph-captured) and its decode part (captured on CUDA) are compared like for like. A cell counts when it is
``ok`` (timed and correct). Typed records only; the report words them.
"""

from __future__ import annotations

from dataclasses import dataclass

from profattn.results import CellResult, CellStatus
from profattn.workload import KVLayout, Phase, Workload


@dataclass(frozen=True)
class ChunkRef:
    """Where a chunk sits: chunk ``index`` (0-based) of a ``prompt_len``-token prompt cut into ``chunk_size``
    chunks (``chunks = prompt_len / chunk_size``)."""

    prompt_len: int
    chunk_size: int
    index: int

    @property
    def chunks(self) -> int:
        return self.prompt_len // self.chunk_size


@dataclass(frozen=True)
class PromptPlan:
    """One prompt processed at one chunk size: its chunk workloads in order (``workloads[i]`` is chunk ``i``)."""

    prompt_len: int
    chunk_size: int
    workloads: tuple[Workload, ...]

    @property
    def batch(self) -> int:
        return self.workloads[0].batch

    @property
    def append_bytes(self) -> int:
        """Σ of the chunks' cache-append ledgers (:meth:`Workload.append_traffic`), bytes."""
        return sum(w.append_bytes for w in self.workloads)

    @property
    def flops(self) -> int:
        """Σ of the chunks' attention FLOPs (a later chunk's rows see the earlier chunks' keys)."""
        return sum(w.flops for w in self.workloads)


@dataclass(frozen=True)
class MissingChunk:
    """A chunk without a usable cell: ``status`` of its cell (None: the run has no such cell)."""

    index: int
    status: CellStatus | None


@dataclass(frozen=True)
class PromptTime:
    """One backend's time for one prompt at one chunk size (µs): ``attention_us`` = Σ over the chunks of each
    chunk cell's attention median, ``append_us`` = Σ of their append medians; both None unless every chunk
    cell is ``ok`` (``missing`` lists those that are not; ``append_us`` also None when a chunk has no append
    timing)."""

    plan: PromptPlan
    backend: str
    attention_us: float | None
    append_us: float | None
    missing: tuple[MissingChunk, ...]

    @property
    def complete(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class PartTime:
    """One part of a mixed step (the step itself, its prefill part or its decode part) and how it was measured: the backend
    whose ``ok`` cell gave ``latency_us`` (the fastest ``ok`` one for a best-of row), or the reason there is no
    time: ``status`` of the cell (None: no such workload or cell in the run)."""

    workload: Workload | None
    backend: str | None
    latency_us: float | None
    status: CellStatus | None


@dataclass(frozen=True)
class MixedSplit:
    """A mixed step against its parts. ``backend`` None: each of step, prefill part and decode part by its own
    fastest backend; else all three by ``backend``."""

    step: Workload
    backend: str | None
    step_time: PartTime
    prefill: PartTime
    decode: PartTime

    @property
    def parts_us(self) -> float | None:
        """Prefill part + decode part (µs), None unless both were timed."""
        a, b = self.prefill.latency_us, self.decode.latency_us
        return a + b if a is not None and b is not None else None

    @property
    def step_over_parts(self) -> float | None:
        """Step time / (prefill part + decode part): below 1, one mixed call beats two separate calls."""
        parts, step = self.parts_us, self.step_time.latency_us
        return step / parts if parts and step is not None else None


def _usable(cell: CellResult) -> bool:
    return cell.status is CellStatus.OK and cell.timing is not None


def is_chunk(w: Workload) -> bool:
    """True for a serving prefill chunk: appending, uniform, paged prefill with ``kv_len`` a multiple of ``q_len``."""
    return (w.phase is Phase.PREFILL and w.append and not w.is_varlen and w.kv_layout is KVLayout.PAGED
            and w.kv_len % w.q_len == 0)


def prompt_plans(workloads: "list[Workload] | tuple[Workload, ...]") -> tuple[PromptPlan, ...]:
    """The prompts that ``workloads`` chunk (module docstring), ordered by prompt length, batch, then chunk size
    descending (unchunked first). Chunks the run lacks are in the plan all the same (:func:`prompt_times` says
    which are missing)."""
    groups: dict[Workload, list[Workload]] = {}
    for w in dict.fromkeys(workloads):
        if is_chunk(w):
            groups.setdefault(w.with_(kv_len=w.q_len), []).append(w)
    plans = []
    for first, ws in groups.items():
        c, p = first.q_len, max(w.kv_len for w in ws)
        plans.append(PromptPlan(p, c, tuple(first.with_(kv_len=(i + 1) * c) for i in range(p // c))))
    return tuple(sorted(plans, key=lambda pl: (pl.prompt_len, pl.batch, -pl.chunk_size)))


def chunk_of(w: Workload, plans: "tuple[PromptPlan, ...]") -> ChunkRef | None:
    """Which chunk of which prompt ``w`` is, among ``plans`` (None: not a chunk of any of them)."""
    for pl in plans:
        if w in pl.workloads:
            return ChunkRef(pl.prompt_len, pl.chunk_size, pl.workloads.index(w))
    return None


def prompt_times(cells: "list[CellResult] | tuple[CellResult, ...]") -> tuple[PromptTime, ...]:
    """Every backend's time per prompt per chunk size (see :class:`PromptTime`), in :func:`prompt_plans` order,
    backends in run order."""
    by_key = {(c.workload, c.backend): c for c in cells}
    backends = list(dict.fromkeys(c.backend for c in cells))
    out = []
    for plan in prompt_plans([c.workload for c in cells]):
        for b in backends:
            chunk_cells = [by_key.get((w, b)) for w in plan.workloads]
            if all(c is None for c in chunk_cells):
                continue
            missing = tuple(MissingChunk(i, c.status if c is not None else None)
                            for i, c in enumerate(chunk_cells) if c is None or not _usable(c))
            attention = append = None
            if not missing:
                attention = sum(c.eager_latency_us for c in chunk_cells)  # type: ignore[misc, union-attr]
                if all(c.append_timing is not None for c in chunk_cells):  # type: ignore[union-attr]
                    append = sum(c.append_timing.median_us for c in chunk_cells)  # type: ignore[union-attr]
            out.append(PromptTime(plan, b, attention, append, missing))
    return tuple(out)


def mixed_parts(step: Workload) -> tuple[Workload, Workload]:
    """The prefill part and the decode part of a mixed step, as :meth:`Workload.varlen` builds them (same
    fields; sequences in the step's order)."""
    common = dict(num_q_heads=step.num_q_heads, num_kv_heads=step.num_kv_heads, head_dim=step.head_dim,
                  dtype=step.dtype, mask=step.mask, kv_layout=step.kv_layout, page_size=step.page_size,
                  append=step.append)
    pre = tuple(p for p in step.seqs if p[0] > 1)
    dec = tuple(p for p in step.seqs if p[0] == 1)
    return Workload.varlen(None, pre, **common), Workload.varlen(None, dec, **common)  # type: ignore[arg-type]


def _part(w: Workload | None, cells: list[CellResult], backend: str | None) -> PartTime:
    mine = [c for c in cells if c.workload == w and (backend is None or c.backend == backend)]
    ok = [c for c in mine if _usable(c)]
    if ok:
        best = min(ok, key=lambda c: c.eager_latency_us)  # type: ignore[arg-type, return-value]
        return PartTime(w, best.backend, best.eager_latency_us, CellStatus.OK)
    return PartTime(w, backend, None, mine[0].status if mine else None)


def mixed_splits(cells: "list[CellResult] | tuple[CellResult, ...]") -> tuple[MixedSplit, ...]:
    """For each mixed step of the run (run order): its split by the fastest backend per part (``backend`` None)
    first, then one split per backend that has a cell of the step (run order)."""
    cells = list(cells)
    out = []
    for step in dict.fromkeys(c.workload for c in cells if c.workload.phase is Phase.MIXED):
        pre, dec = mixed_parts(step)
        backends = [None, *dict.fromkeys(c.backend for c in cells if c.workload == step)]
        for b in backends:
            out.append(MixedSplit(step, b, _part(step, cells, b), _part(pre, cells, b), _part(dec, cells, b)))
    return tuple(out)
