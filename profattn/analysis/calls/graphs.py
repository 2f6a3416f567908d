"""CUDA/HIP graph replays merged with their capture: which capture-time launch created each replayed kernel's node.

A replayed graph's kernels hang off one ``cudaGraphLaunch``/``hipGraphLaunch``: the trace of the replay holds no CPU
op, no input shapes and (on ROCm) no launch shape for them. The profiled *capture* holds all three: while a stream
captures (``cudaStreamBeginCapture`` … ``cudaStreamEndCapture``, :attr:`Trace.captures`), each kernel launch
(:attr:`Trace.capture_launches`) is issued inside its CPU op as in eager mode, but creates a graph node instead of
running. This module matches each replayed kernel to the launch that created its node, and says how
(:class:`~profattn.analysis.calls.call_records.GraphMatchRule`), or why not (:class:`~profattn.analysis.calls.call_records.GraphGap`).

**Which capture.** A graph launch's kernels are compared with each capture window (of any capture trace given, or
of the replay trace itself when it profiled the capture too):

1. *By graph id* (rule ``NODE_ID``): when the replayed kernels carry ``graph id``/``graph node id`` (Kineto since
   pytorch/kineto#1276, CUDA ≥ 12 builds) and a capture trace holds kernels of the same graph id — a replay
   recorded after the capture in the same profile, the same process — the capture that built that graph is the
   last one of that trace that ended before the graph's first launch there and has as many kernel launches.
2. *By content*: a capture with as many kernel launches as the graph launch replayed kernels, whose kernel names
   (where its launch events record them: ROCm's do, CUDA's do not) equal the replayed ones in order. The graph
   launches of one step are first tried together against a set of captures (those under one ``capture_<N>_<mode>``
   range of vLLM's capture profiler, in order: a piecewise step replays its pieces in capture order), preferring the
   set whose ``N`` equals the step annotation's token count; failing that each launch alone, which must then find
   exactly one capture (several identical ones are ``AMBIGUOUS``: left unplaced, never guessed).
3. *By names* (rule ``NAME_ALIGNMENT``): where counts differ and both sides name their kernels, the capture whose
   kernel names align best (:class:`difflib.SequenceMatcher`; at least 90 % of both sides matched, a unique best);
   the replayed kernels outside the matched blocks stay unplaced.

**Which launch.** Within the chosen capture, replayed kernel ``i`` is matched to kernel launch ``i`` of the capture,
the kernels taken in node-id order where ids are recorded (``NODE_ID``/``NODE_ORDER``: CUDA numbers a graph's
nodes as stream capture creates them, in launch order, and the instantiated graph keeps the ids; the low 32 bits of
``graph node id`` are that number; ROCm's proposed fields, pytorch/kineto#1567, put the dispatch's ordinal within the
launch there, the same order), else in GPU start order when the replay ran on one stream (``LAUNCH_ORDER``:
one stream runs its kernels in launch order), else — several streams, no ids — by kernel name per stream in FIFO
order where the capture names its kernels (as AMD-AGI/TraceLens ``trace_capture_merge_experimental.align_streams``),
otherwise not at all (``MULTI_STREAM``).

**Checks.** A replayed attention kernel (:func:`~profattn.analysis.calls.call_shapes.attention_family`) matched to a capture
launch outside every attention op of a capture that has attention ops means the order is off: the whole launch is
left unplaced (``IMPLAUSIBLE``), so a wrong attribution is never made. Memory copies and sets in the graph are
memcpy/memset nodes, not kernels, on both sides; a capture launch that created no kernel node, or a kernel node from
a call the profiler did not record, makes the counts differ (then only ``NAME_ALIGNMENT`` can place anything).

Torch-free; typed results only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from profattn.analysis.calls.call_records import GraphGap, GraphLaunchMatch, GraphMatchRule, GraphMerge, StepAnnotation
from profattn.analysis.calls.call_shapes import attention_family, is_attention_op
from profattn.trace.kineto import Trace
from profattn.trace.windows import IntervalIndex, group_keys

__all__ = ["CaptureSource", "KernelPlacement", "MergeResult", "merge_graphs"]

_CAPTURE_KEY = re.compile(r"^capture_(\d{1,12})_")
_LOW32 = (1 << 32) - 1


@dataclass(frozen=True)
class CaptureSource:
    """A trace that profiled graph captures: ``label`` (its path as shown) and the parsed ``trace``."""

    label: str
    trace: Trace


@dataclass(frozen=True)
class KernelPlacement:
    """Where one replayed kernel's node was created: capture trace ``source`` (index into the sources given), the
    ``capture`` in it, the ``launch_row`` (row of that trace's :attr:`Trace.capture_launches`), the ``rule``, and the
    replay's ``graph_launch`` (correlation) with its CPU start ``launch_ts_us``."""

    source: int
    capture: int
    launch_row: int
    rule: GraphMatchRule
    graph_launch: int
    launch_ts_us: float


@dataclass(frozen=True)
class MergeResult:
    """:class:`~profattn.analysis.calls.call_records.GraphMerge` (per graph launch) and ``placements``: replayed kernel row
    (of the replay trace's :attr:`Trace.kernels`) → :class:`KernelPlacement`."""

    merge: GraphMerge
    placements: dict[int, KernelPlacement] = field(default_factory=dict)


@dataclass
class _Launch:
    corr: int
    ts: float
    pid: object
    tid: object
    rows: list[int]  # kernel rows in GPU start order
    names: list[str]
    row_streams: list[object]  # stream of each row
    graph_ids: set
    node_ids: list[int] | None  # per row; None when any kernel lacks one
    attention: list[bool]
    _order: object = None  # ordered()'s answer, computed once

    def ordered(self) -> tuple[list[int], tuple[str, ...]] | None:
        """Rows and names in creation order: node-id order, or GPU order on one stream; None when neither."""
        if self._order is None:
            self._order = self._ordered() or False
        return self._order or None  # type: ignore[return-value]

    def _ordered(self) -> tuple[list[int], tuple[str, ...]] | None:
        if self.node_ids is not None:
            order = sorted(range(len(self.rows)), key=lambda i: (self.node_ids[i] & _LOW32, self.node_ids[i]))
        elif len(set(self.row_streams)) <= 1:
            order = list(range(len(self.rows)))
        else:
            return None
        return [self.rows[i] for i in order], tuple(self.names[i] for i in order)


@dataclass
class _Window:
    source: int
    capture: int
    pid: object
    begin: float
    end: float
    range: str | None
    key: int | None
    rows: list[int]  # capture_launches rows in position order
    names: tuple[str | None, ...]
    in_attention: list[bool]

    @property
    def has_attention(self) -> bool:
        return any(self.in_attention)

    @property
    def named(self) -> bool:
        return bool(self.names) and None not in self.names

    @property
    def unnamed(self) -> bool:
        return all(n is None for n in self.names)


def _launches(trace: Trace) -> list[_Launch]:
    k = trace.kernels
    if k.empty or not k["graph_launched"].any():
        return []
    sub = k[k["graph_launched"].to_numpy(dtype=bool) & k["correlation"].notna().to_numpy()]
    out: list[_Launch] = []
    has_ids = "graph_node_id" in sub.columns
    for corr, rows in sub.groupby("correlation", sort=False).indices.items():
        idx = sub.index[rows]
        g = k.loc[idx].sort_values("ts_us", kind="stable")
        names = g["name"].tolist()
        nodes = g["graph_node_id"] if has_ids else None
        node_ids = None
        if nodes is not None and nodes.notna().all() and (nodes > 0).all():
            node_ids = [int(v) for v in nodes.tolist()]
        first = g.iloc[0]
        out.append(_Launch(
            corr=int(corr), ts=float(first["launch_ts_us"]), pid=first["launch_pid"], tid=first["launch_tid"],
            rows=[int(i) for i in g.index], names=names, row_streams=g["stream"].tolist(),
            graph_ids=set(g["graph_id"].dropna().tolist()) if has_ids else set(), node_ids=node_ids,
            attention=[attention_family(n) is not None for n in names],
        ))
    return sorted(out, key=lambda L: L.ts)


def _windows(sources: Sequence[CaptureSource]) -> list[_Window]:
    out: list[_Window] = []
    for si, src in enumerate(sources):
        caps, launches = src.trace.captures, src.trace.capture_launches
        if caps is None or caps.empty:
            continue
        ops = src.trace.ops
        att = ops[ops["name"].map(is_attention_op).to_numpy(dtype=bool)] if len(ops) else ops
        start = att["ts_us"].to_numpy(dtype="float64") if len(att) else np.zeros(0)
        index = IntervalIndex(start, start + np.nan_to_num(att["dur_us"].to_numpy(dtype="float64")) if len(att)
                              else start, group_keys(att["pid"], att["tid"]) if len(att) else [])
        inside = (index.innermost(group_keys(launches["pid"], launches["tid"]), launches["ts_us"].to_numpy(dtype="float64"))
                  >= 0) if len(launches) else np.zeros(0, dtype=bool)
        by_capture = launches.groupby("capture", sort=False).indices if len(launches) else {}
        for row in caps.itertuples(index=False):
            rows = sorted(by_capture.get(row.capture, []), key=lambda r: int(launches.at[r, "position"]))
            rng = row.range if isinstance(row.range, str) else None
            m = _CAPTURE_KEY.match(rng) if rng else None
            out.append(_Window(
                source=si, capture=int(row.capture), pid=row.pid, begin=float(row.begin_ts_us), end=float(row.end_ts_us),
                range=rng, key=int(m.group(1)) if m else None, rows=[int(r) for r in rows],
                names=tuple(launches.at[r, "kernel"] if isinstance(launches.at[r, "kernel"], str) else None for r in rows),
                in_attention=[bool(inside[r]) for r in rows],
            ))
    return out


def _compatible(L: _Launch, W: _Window) -> bool:
    """Whether capture ``W`` can have built the graph ``L`` replayed: as many kernel launches as replayed kernels,
    and the same kernel names in creation order where the capture records names."""
    if len(W.rows) != len(L.rows):
        return False
    ordered = L.ordered()
    if ordered is None:
        return W.named and _stream_order(L, W) is not None
    if W.unnamed:
        return True
    if W.named:
        return W.names == ordered[1]
    return all(w is None or w == n for w, n in zip(W.names, ordered[1]))


def _stream_order(L: _Launch, W: _Window) -> list[int] | None:
    """Replay rows re-ordered to capture order by per-stream FIFO name matching (needs named capture launches)."""
    names = dict(zip(L.rows, L.names))
    queues: dict[object, list[int]] = {}
    for r, stream in zip(L.rows, L.row_streams):  # GPU order per stream
        queues.setdefault(stream, []).append(r)
    out: list[int] = []
    for name in W.names:
        hit = [s for s, q in queues.items() if q and names[q[0]] == name]
        if len(hit) != 1:
            return None
        out.append(queues[hit[0]].pop(0))
    return out


def _pair_rows(L: _Launch, W: _Window) -> list[tuple[int, int]] | None:
    """(replay kernel row, capture launch row) pairs in creation order, None when no order can be recovered."""
    ordered = L.ordered()
    rows = ordered[0] if ordered is not None else _stream_order(L, W)
    if rows is None:
        return None
    return list(zip(rows, W.rows))


def _align(L: _Launch, W: _Window) -> list[tuple[int, int]]:
    """Name alignment of a replay (GPU order) with a named capture: matched (replay row, capture row) pairs."""
    matcher = difflib.SequenceMatcher(None, L.names, W.names, autojunk=False)
    pairs: list[tuple[int, int]] = []
    for a, b, size in matcher.get_matching_blocks():
        pairs.extend((L.rows[a + i], W.rows[b + i]) for i in range(size))
    return pairs


def _step_of(L: _Launch, steps: Sequence[StepAnnotation]) -> int:
    for i, s in enumerate(steps):
        if s.pid == L.pid and s.ts_us <= L.ts <= s.ts_us + s.dur_us:
            return i
    return -1


def _by_graph_id(L: _Launch, sources: Sequence[CaptureSource], windows: list[_Window]) -> _Window | None:
    """The capture that built graph ``L.graph_ids`` (rule NODE_ID), found through a capture trace that also replayed
    it: its last capture on the same process ending before that graph's first launch there, of equal size."""
    if L.node_ids is None or len(L.graph_ids) != 1:
        return None
    gid = next(iter(L.graph_ids))
    for si, src in enumerate(sources):
        k = src.trace.kernels
        if k.empty or "graph_id" not in k.columns:
            continue
        mine = k[(k["graph_id"] == gid).fillna(False).to_numpy(dtype=bool)]
        if mine.empty:
            continue
        first = float(mine["launch_ts_us"].min())
        pid = mine["launch_pid"].iloc[0]
        fits = [w for w in windows if w.source == si and w.pid == pid and w.end <= first and len(w.rows) == len(L.rows)]
        if fits:
            return max(fits, key=lambda w: w.end)
    return None


def merge_graphs(trace: Trace, sources: Sequence[CaptureSource], steps: Sequence[StepAnnotation] = ()
                 ) -> MergeResult | None:
    """Match every graph-replayed kernel of ``trace`` to a capture-time launch of ``sources`` (module docstring);
    ``steps`` are the replay's step annotations (their token counts pick among vLLM's per-size captures). None when
    the trace replays no graph."""
    launches = _launches(trace)
    if not launches:
        return None
    labels = tuple(s.label for s in sources)
    if not sources:
        return MergeResult(GraphMerge(labels, tuple(
            GraphLaunchMatch(L.corr, L.ts, len(L.rows), sum(L.attention), None, None, None, 0, GraphGap.NO_CAPTURE)
            for L in launches)))
    windows = _windows(sources)
    chosen: dict[int, tuple[_Window, GraphMatchRule | None]] = {}  # launch corr -> (window, rule override)
    # 1. by graph id
    for L in launches:
        w = _by_graph_id(L, sources, windows)
        if w is not None and _compatible(L, w):
            chosen[L.corr] = (w, GraphMatchRule.NODE_ID)
    # 2. the launches of one step against a set of captures, in order
    groups: dict[int, list[_Launch]] = {}
    for L in launches:
        if L.corr not in chosen:
            groups.setdefault(_step_of(L, steps), []).append(L)
    sets: dict[tuple[int, str | None], list[_Window]] = {}
    for w in windows:
        sets.setdefault((w.source, w.range), []).append(w)
    for si, group in groups.items():
        tokens = steps[si].tokens if si >= 0 else None
        fits = [ws for ws in sets.values() if len(ws) == len(group) and all(_compatible(L, w) for L, w in zip(group, ws))]
        keyed = [ws for ws in fits if tokens is not None and ws[0].key == tokens]
        pick = keyed if keyed else fits
        if len(pick) == 1:
            for L, w in zip(group, pick[0]):
                chosen[L.corr] = (w, None)
    # 3. each remaining launch alone
    gaps: dict[int, tuple[GraphGap, int | None]] = {}
    aligned: dict[int, tuple[_Window, list[tuple[int, int]]]] = {}
    for L in launches:
        if L.corr in chosen:
            continue
        if len(L.graph_ids) > 1:
            gaps[L.corr] = (GraphGap.MIXED_GRAPH_IDS, None)
            continue
        fits = [w for w in windows if _compatible(L, w)]
        si = _step_of(L, steps)
        tokens = steps[si].tokens if si >= 0 else None
        keyed = [w for w in fits if tokens is not None and w.key == tokens]
        fits = keyed or fits
        if len(fits) == 1:
            chosen[L.corr] = (fits[0], None)
            continue
        if len(fits) > 1:
            gaps[L.corr] = (GraphGap.AMBIGUOUS, len(fits[0].rows))
            continue
        if L.ordered() is None and not any(w.named for w in windows):
            gaps[L.corr] = (GraphGap.MULTI_STREAM, None)
            continue
        best = _best_alignment(L, [w for w in windows if w.named])
        if best is not None:
            aligned[L.corr] = best
            continue
        same_size = [w for w in windows if len(w.rows) == len(L.rows)]
        gaps[L.corr] = ((GraphGap.NAME_MISMATCH, len(same_size[0].rows)) if same_size
                        else (GraphGap.NO_CANDIDATE, _nearest_size(windows, len(L.rows))))
    # 4. kernels onto launches, checked
    placements: dict[int, KernelPlacement] = {}
    matches: list[GraphLaunchMatch] = []
    for L in launches:
        att = sum(L.attention)
        if L.corr in chosen or L.corr in aligned:
            if L.corr in chosen:
                w, rule = chosen[L.corr]
                pairs = _pair_rows(L, w) or []
                rule = rule or (GraphMatchRule.NODE_ORDER if L.node_ids is not None else GraphMatchRule.LAUNCH_ORDER)
            else:
                w, pairs = aligned[L.corr]
                rule = GraphMatchRule.NAME_ALIGNMENT
            position = {r: i for i, r in enumerate(w.rows)}
            attention_of = dict(zip(L.rows, L.attention))
            implausible = w.has_attention and any(attention_of[r] and not w.in_attention[position[c]] for r, c in pairs)
            if implausible:
                matches.append(GraphLaunchMatch(L.corr, L.ts, len(L.rows), att, None, sources[w.source].label, w.capture,
                                                0, GraphGap.IMPLAUSIBLE, len(w.rows)))
                continue
            for r, c in pairs:
                placements[r] = KernelPlacement(w.source, w.capture, c, rule, L.corr, L.ts)
            matches.append(GraphLaunchMatch(L.corr, L.ts, len(L.rows), att, rule, sources[w.source].label, w.capture,
                                            len(pairs), None, len(w.rows)))
        else:
            gap, size = gaps[L.corr]
            matches.append(GraphLaunchMatch(L.corr, L.ts, len(L.rows), att, None, None, None, 0, gap, size))
    return MergeResult(GraphMerge(labels, tuple(matches)), placements)


def _best_alignment(L: _Launch, named: list[_Window]) -> tuple[_Window, list[tuple[int, int]]] | None:
    """The named capture whose kernel names align best with the replay's, when at least 90 % of both sides match
    and no other capture aligns as well."""
    scored = []
    for w in named:
        pairs = _align(L, w)
        if len(pairs) >= 0.9 * len(L.rows) and len(pairs) >= 0.9 * len(w.rows):
            scored.append((len(pairs), w, pairs))
    if not scored:
        return None
    scored.sort(key=lambda t: -t[0])
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        return None
    return scored[0][1], scored[0][2]


def _nearest_size(windows: list[_Window], n: int) -> int | None:
    return min((len(w.rows) for w in windows), key=lambda m: abs(m - n), default=None)
