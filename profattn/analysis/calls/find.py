"""Attention calls in any PyTorch profiler (Kineto) trace, and where the trace's GPU time went.

Pure analysis over a parsed :class:`~profattn.trace.Trace` (no HTML: :mod:`profattn.report.analyze` renders).
Entry point :func:`find_attention_calls`; its records are in :mod:`profattn.analysis.calls.call_records`, the
op signatures and the shape/phase/workload inference in :mod:`profattn.analysis.calls.call_shapes`. Every
"which window holds this time" question goes through :class:`~profattn.trace.windows.IntervalIndex`
(windows closed at both ends). Units: times in µs (as Kineto writes them), sizes in bytes.

**Attention calls.** An attention call is the *outermost* attention operator on its thread: the SDPA front
door ``aten::scaled_dot_product_attention`` (or a backend op called directly, a ``_backward`` op, a
FlexAttention op — see :data:`~profattn.analysis.calls.call_shapes.ATTENTION_OPS`); attention ops nested inside it in time on the same
``pid``/``tid`` belong to the same call (the index's *top-level* rule), and the first backend-specific one names the dispatched backend
(``aten::_scaled_dot_product_flash_attention`` → ``flash``). Attention kernels that no such call launched
(flash-attn's own extension, FlashInfer, cuDNN or Inductor kernels, kernels replayed from a CUDA graph)
become *kernel-only* calls, grouped by the CPU op that launched them (``External id``) or, for CUDA graph
replays, by the graph launch and kernel family (one replay may run several backends' calls; where one call
ends and the next starts inside a replay is not in the trace); they have no recorded shapes.

**Workload.** Read from the call op's ``Input Dims`` (``q [B, Hq, Lq, d]``, ``k [B, Hkv, Lk, d]`` for the
SDPA ops; ``[B, L, H, d]`` for ``_flash_attention_*``/``_efficient_attention_*``) and ``Input type``.
``is_causal`` is read from the op's ``Concrete Inputs`` (kept by the trace parser); without them, causal
is unknown.
SDPA's ``is_causal`` is top-left aligned; profattn's causal mask is bottom-right (see
:mod:`profattn.workload`): the two agree only when ``Lq == Lk``, so a top-left causal call with
``Lq != Lk`` gets its fields reported but no :class:`~profattn.workload.Workload`.

**Phase.** ``train`` for a backward call, and for a forward call when the trace holds a backward attention
op of the same backend and shapes (or, when no backward op of that backend has recorded shapes, an
autograd ``ScaledDotProduct…Backward`` node or a shapeless backward op of that backend); else ``decode`` when ``Lq == 1`` or (``Lq <= 16`` and ``Lk >= 8 · Lq``); else ``prefill``. A math-backend
call is never seen as ``train``: its backward is generic matmul autograd with no attention op to match;
when such autograd nodes (``BmmBackward0``, ``SafeSoftmaxBackward0``) are in the trace, the call carries a
note that it may be training.

**Kernels of a call.** Kernels whose launching runtime/driver call (``launch_ts_us``) falls inside the
call op's ``[ts, ts + dur]`` on the same ``pid`` *and* ``tid`` (an aten op launches its kernels from its
own thread; matching the thread keeps kernels that other threads launch meanwhile out); kernels without
a recorded launcher join the call when their ``External id`` is one of the ops inside its window; an attention
kernel with neither is placed by stream order and time containment (:func:`_by_stream_order`: its stream's
neighbours' launches bound when it was launched, and exactly one call window meets that interval and began before
the kernel ran). The calls of one thread never overlap, so each kernel belongs to at most one call.

**Engine calls and graph replays.** Serving engines' attention ops (:mod:`profattn.analysis.calls.engine_ops`) are calls
too, read token-major; replayed kernels matched to capture-time launches inside a captured attention op become
calls with that op's name and shapes (``source="graph"``); calls inside an annotated serving step get its ledger
(:mod:`profattn.analysis.calls.steps`). Op calls made while their stream was capturing a graph are marked
(``captured_in``): their kernels ran at replay.

Where the trace's GPU time went (per top-level op, per ``ProfilerStep#N`` window) is
:mod:`profattn.analysis.calls.gpu_time`; the kernels as records, :mod:`profattn.analysis.calls.kernels`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from profattn.analysis.calls.call_records import (
    AttentionCall, CallKernel, CausalAlignment, GraphGap, GraphMerge, GraphOrigin, OmittedKernels, TraceCalls,
)
from profattn.analysis.calls.call_shapes import (
    SHAPE_LIMITS, attention_family, is_attention_op, is_engine_op, kernel_direction, op_dims, op_packed, op_shape,
    read_causal, read_window, signature, with_phases,
)
from profattn.analysis.calls.engine_ops import CacheOpIndex, read_engine_call
from profattn.analysis.calls.gpu_time import busy_us, op_times, step_windows
from profattn.analysis.calls.graphs import CaptureSource, MergeResult, merge_graphs
from profattn.analysis.calls.kernels import KernelRecords, kernel_times, launch_shapes
from profattn.analysis.calls.steps import attach_steps, read_steps
from profattn.analysis.common.names import kernel_stem
from profattn.errors import TraceError
from profattn.trace.columns import TraceWarning
from profattn.trace.kineto import Trace
from profattn.trace.windows import IntervalIndex, group_keys


# ----------------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------------


def find_attention_calls(trace: Trace, *, captures: Sequence[CaptureSource] = ()) -> TraceCalls:
    """Analyze one parsed trace: GPU time by kernel and by op, launch shapes, ProfilerStep windows, and
    every attention call with its workload, regime and kernels.

    ``captures``: traces that profiled the capture of the graphs this trace replays (the trace's own captures are
    used too): replayed kernels matched to their capture-time launches (:func:`~profattn.analysis.calls.graphs.merge_graphs`)
    become calls with the captured op and its shapes (``source="graph"``). Serving-engine steps
    (:mod:`profattn.analysis.calls.steps`) give engine calls their phase, step ledger and workload.

    Raises:
        TraceError: the trace's ``traceEvents`` is empty (nothing to analyze).
    """
    if trace.event_count == 0:
        raise TraceError(f"{trace.path}: 'traceEvents' is empty: nothing to analyze")
    kernels = trace.kernels
    num_sms = trace.num_sms
    names = kernels["name"].tolist()
    family_of = {name: attention_family(name) for name in set(names)}  # names repeat: match each once
    families = [family_of[n] for n in names]
    records = KernelRecords(kernels, families, num_sms)
    steps, malformed = read_steps(trace)
    sources = list(captures)
    if not trace.captures.empty and all(c.trace is not trace for c in sources):
        sources.insert(0, CaptureSource(trace.path, trace))
    merged = merge_graphs(trace, sources, steps)
    notes = _file_notes(trace, merged.merge.placed_kernels if merged else 0)

    attention = _attention_op_groups(trace.ops)
    calls, used = _op_calls(trace, attention, records, families)
    calls = _mark_captured(trace, calls)
    if merged is not None:
        graph_calls, graph_used = _graph_calls(trace, merged, sources, records)
        calls += graph_calls
        used |= graph_used
    calls += _kernel_only_calls(trace, records, families, used, merged.merge if merged else None)
    calls = with_phases(calls, trace.ops)
    calls = [replace(c, index=i) for i, c in enumerate(sorted(calls, key=lambda c: c.ts_us))]
    calls, serving, step_warnings = attach_steps(trace, calls, steps, malformed)
    if merged is not None:
        notes += _merge_notes(merged.merge)

    total_us = float(kernels["dur_us"].sum())
    return TraceCalls(
        path=trace.path,
        rank=_rank(trace.metadata),
        device_name=trace.device_name,
        num_sms=num_sms,
        kernel_count=len(kernels),
        gpu_time_us=total_us,
        gpu_busy_us=busy_us(kernels),
        kernels=kernel_times(kernels, families, total_us),
        launch_shapes=launch_shapes(kernels, num_sms),
        ops=op_times(trace, merged, sources),
        steps=step_windows(trace, calls),
        calls=tuple(calls),
        notes=tuple(notes),
        warnings=_warnings(trace, calls) + tuple(step_warnings) + _merge_warnings(merged.merge if merged else None),
        serving_steps=serving,
        graph_merge=merged.merge if merged else None,
        captures=len(trace.captures),
    )


# ----------------------------------------------------------------------------------------------------
# File-level facts
# ----------------------------------------------------------------------------------------------------


def _rank(metadata: Mapping[str, Any]) -> int | None:
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _warnings(trace: Trace, calls: Sequence[AttentionCall]) -> tuple[TraceWarning, ...]:
    out = list(trace.warnings)
    beyond: dict[str, list[int]] = {}
    for c in calls:
        for name, value in c.shape.beyond_limits if c.shape is not None else ():
            beyond.setdefault(name, []).append(value)
    if beyond:
        n = sum(1 for c in calls if c.shape is not None and c.shape.beyond_limits)
        what = "; ".join(f"{name} up to {max(values):.3g} (limit {SHAPE_LIMITS[name]:,})"
                         for name, values in beyond.items())
        out.append(TraceWarning("shape_beyond_limit", n, f"{n:,} attention call(s) record implausible dimensions "
                                f"({what}): read as unknown, no workload for them"))
    if trace.kernels.empty:
        if any(w.code == "other_accelerator" for w in trace.warnings):
            text = ("no CUDA/ROCm kernels in this trace (its device events are another accelerator's, see below): "
                    "only CPU operators are analyzed")
        else:
            text = ("no GPU kernels in this trace (CPU-only, or recorded without GPU activity): only CPU operators "
                    "are analyzed")
        out.insert(0, TraceWarning("no_gpu_kernels", 0, text))
    return tuple(out)


def _file_notes(trace: Trace, merged: int = 0) -> list[str]:
    notes: list[str] = []
    k = trace.kernels
    if k.empty:
        return notes
    if trace.num_sms is None:
        notes.append("no deviceProperties (SM count unknown): CTAs per SM are not computed")
    if k["grid_x"].isna().all():
        notes.append("kernel events carry no grid/block (as in ROCm traces): launch shapes are n/a")
    graph = int(k["graph_launched"].sum())
    if graph > merged:
        notes.append(f"{graph - merged} kernel(s) were replayed from CUDA graphs"
                     + (" and not matched to a capture" if merged else "") + ": they are attributed to the graph launch")
    return notes


# ----------------------------------------------------------------------------------------------------
# Attention calls from operators
# ----------------------------------------------------------------------------------------------------


def _attention_op_groups(ops: pd.DataFrame) -> list[list[dict[str, Any]]]:
    """Attention ops grouped into calls: per thread, each top-level attention op (see
    :meth:`IntervalIndex.top_level`) followed by the attention ops that belong to it, in start order
    (ties: the longer first); a missing ``dur`` counts as 0. Groups are ordered by thread (first seen)
    and then by start."""
    mask = ops["name"].map(is_attention_op).to_numpy(dtype=bool)
    if not mask.any():
        return []
    att = ops[mask].assign(_dur=ops.loc[mask, "dur_us"].fillna(0.0))
    att = att.sort_values(["ts_us", "_dur"], ascending=[True, False], kind="stable", ignore_index=True)
    start = att["ts_us"].to_numpy(dtype="float64")
    keys = group_keys(att["pid"], att["tid"])
    owner = IntervalIndex(start, start + att["_dur"].to_numpy(dtype="float64"), keys).top_level()
    thread, _ = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
    rows = att.to_dict("records")
    groups: dict[int, list[dict[str, Any]]] = {}
    for pos in np.lexsort((np.arange(len(att)), thread)):
        groups.setdefault(int(owner[pos]), []).append(rows[pos])
    return list(groups.values())


def _op_calls(
    trace: Trace, groups: list[list[dict[str, Any]]], records: KernelRecords, families: Sequence[str | None] = ()
) -> tuple[list[AttentionCall], set[int]]:
    """One :class:`AttentionCall` per group; also the kernel rows they took.

    A group's window is its outermost op's ``[ts, ts + dur]`` on its ``(pid, tid)``; the windows of one
    thread do not overlap (see :func:`_attention_op_groups`), so each launch lies in at most one of them
    (:meth:`IntervalIndex.innermost` over the windows)."""
    kernels, ops = trace.kernels, trace.ops
    outers = [g[0] for g in groups]
    start = np.array([o["ts_us"] for o in outers], dtype="float64")
    end = start + np.array([o["_dur"] for o in outers], dtype="float64")
    windows = IntervalIndex(start, end, [(o["pid"], o["tid"]) for o in outers])
    k_group = windows.innermost(group_keys(kernels["launch_pid"], kernels["launch_tid"]),
                                kernels["launch_ts_us"].to_numpy(dtype="float64"))
    taken: list[list[int]] = [[] for _ in groups]
    for pos in np.flatnonzero(k_group >= 0):
        taken[k_group[pos]].append(int(pos))
    # Kernels without a recorded launcher join the call whose window holds an op with their External id.
    k_ext = kernels["external_id"]
    no_launcher = kernels["launch_ts_us"].isna().to_numpy() & k_ext.notna().to_numpy()
    if no_launcher.any():
        by_ext: dict[int, list[int]] = {}
        for pos, ext in zip(np.flatnonzero(no_launcher), k_ext[no_launcher].tolist()):
            by_ext.setdefault(int(ext), []).append(int(pos))
        o_group = windows.innermost(group_keys(ops["pid"], ops["tid"]), ops["ts_us"].to_numpy(dtype="float64"))
        o_ext = ops["external_id"].to_numpy(dtype=object)
        seen: set[int] = set()
        for pos in np.flatnonzero(o_group >= 0)[np.argsort(o_group[o_group >= 0], kind="stable")]:
            ext = o_ext[pos]
            if ext is pd.NA or int(ext) not in by_ext:
                continue
            fresh = [k for k in by_ext[int(ext)] if k not in seen]
            seen.update(fresh)
            taken[o_group[pos]].extend(fresh)
    if families and groups:
        placed = {k for rows in taken for k in rows}
        for pos, g in _by_stream_order(kernels, families, start, end, placed).items():
            taken[g].append(pos)
    calls, used = [], set()
    cache = _CacheContext(ops, groups)
    for gi, (group, rows) in enumerate(zip(groups, taken)):
        used.update(rows)
        call_kernels, omitted = records.call_kernels(rows)
        calls.append(_group_call(group, call_kernels, cache, gi, omitted))
    return calls, used


def _by_stream_order(kernels: pd.DataFrame, families: Sequence[str | None], w_start: np.ndarray, w_end: np.ndarray,
                     placed: set[int]) -> dict[int, int]:
    """Attention kernels with no launch event and no placing ``External id``, placed on a call window by stream order
    and time containment: a stream runs its kernels in launch order, so such a kernel was launched after the kernel
    before it on its device and stream was launched and before the one after it was (``(la, lb)``, either end open
    where there is none); exactly one call window must meet that interval and have begun by the kernel's GPU start
    (a kernel does not run before its launch). Returns kernel row → window; a kernel two or no windows fit stays
    unplaced (a kernel-only call, as before). ``w_start``/``w_end``: the call windows (µs); Kineto's GPU and CPU
    clocks are one timeline."""
    launch = kernels["launch_ts_us"].to_numpy(dtype="float64")
    missing = [i for i in np.flatnonzero(np.isnan(launch)).tolist() if families[i] is not None and i not in placed]
    if not missing:
        return {}
    ts = kernels["ts_us"].to_numpy(dtype="float64")
    keys = group_keys(kernels["device"], kernels["stream"])
    lanes: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
    known = np.flatnonzero(~np.isnan(launch))
    by_lane: dict[Any, list[int]] = {}
    for i in known.tolist():
        by_lane.setdefault(keys[i], []).append(i)
    for lane, rows in by_lane.items():
        order = sorted(rows, key=lambda i: ts[i])
        lanes[lane] = (ts[order], launch[order])
    out: dict[int, int] = {}
    for i in missing:
        gpu_ts, cpu_ts = lanes.get(keys[i], (np.zeros(0), np.zeros(0)))
        at = int(np.searchsorted(gpu_ts, ts[i], side="left"))
        lo = cpu_ts[at - 1] if at > 0 else -math.inf
        hi = cpu_ts[at] if at < len(cpu_ts) else math.inf
        fits = np.flatnonzero((w_start < hi) & (w_end > lo) & (w_start <= ts[i]))
        if len(fits) == 1:
            out[i] = int(fits[0])
    return out


class _CacheContext:
    """For each op group of a thread, the cache-write ops run since the previous group of that thread ended (a
    layer writes its new K/V just before its attention): what :func:`read_engine_call` reads the page size from."""

    def __init__(self, ops: pd.DataFrame, groups: list[list[dict[str, Any]]]) -> None:
        self._ops = ops
        self._built: CacheOpIndex | None = None  # built on first use: only engine calls read it
        self._after: list[float] = []
        last: dict[tuple[Any, Any], float] = {}
        for g in groups:  # ordered by thread, then start
            key = (g[0]["pid"], g[0]["tid"])
            self._after.append(last.get(key, -math.inf))
            last[key] = float(g[0]["ts_us"]) + float(g[0]["_dur"])

    @property
    def _index(self) -> CacheOpIndex:
        if self._built is None:
            self._built = CacheOpIndex(self._ops)
        return self._built

    def before(self, group: list[dict[str, Any]], position: int) -> list[dict[str, Any]]:
        outer = group[0]
        return self._index.between(outer["pid"], outer["tid"], self._after[position], float(outer["ts_us"]))

    def inside(self, group: list[dict[str, Any]]) -> list[dict[str, Any]]:
        outer = group[0]
        start = float(outer["ts_us"])
        return self._index.views(outer["pid"], outer["tid"], start, start + float(outer["_dur"]))


def _group_call(group: list[dict[str, Any]], kernels: tuple[CallKernel, ...], cache: _CacheContext,
                position: int, omitted: OmittedKernels | None = None) -> AttentionCall:
    """The call of one op group: an engine op's (:func:`_call_from_engine_ops`) or any other (:func:`_call_from_ops`);
    ``omitted``: its kernels beyond the per-call cap (:meth:`KernelRecords.call_kernels`)."""
    if is_engine_op(group[0]["name"]):
        return _call_from_engine_ops(group, kernels, cache.before(group, position), cache.inside(group), omitted)
    return _call_from_ops(group, kernels, omitted)


def _backend_of(group: list[dict[str, Any]], kernels: tuple[CallKernel, ...]) -> tuple[str, str | None, list[str]]:
    """(backend, the op naming it, notes): the first op of the group that commits to a backend, else the family of
    the call's kernels (with a note), else ``unknown``."""
    backend_row = next((r for r in group if signature(r["name"]).backend is not None), None)
    if backend_row is not None:
        return signature(backend_row["name"]).backend or "unknown", backend_row["name"], []
    family = next((k.family for k in kernels if k.family), None)
    return family or "unknown", None, [f"no nested backend op: backend {'read from the kernels' if family else 'unknown'}"]


def _call_from_engine_ops(group: list[dict[str, Any]], kernels: tuple[CallKernel, ...],
                          cache_ops: list[dict[str, Any]], views: list[dict[str, Any]],
                          omitted: OmittedKernels | None = None) -> AttentionCall:
    """The call of a serving engine's attention op (:mod:`profattn.analysis.calls.engine_ops`): token-major shapes, the
    paged cache, no per-sequence lengths (those come from the step annotation: :mod:`profattn.analysis.calls.steps`);
    ``omitted``: its kernels beyond the per-call cap."""
    outer = group[0]
    read = read_engine_call(group, cache_ops, views)
    backend, backend_op, notes = _backend_of(group, kernels)
    return AttentionCall(
        index=0, source="op", op_name=outer["name"], backend=backend, backend_op=backend_op, direction="forward",
        ts_us=float(outer["ts_us"]), dur_us=float(outer["_dur"]), pid=outer["pid"], tid=outer["tid"], range=outer["range"],
        shape=read.shape, causal=read.causal, causal_alignment=read.alignment, mask_dims=None, varlen=True, phase=None,
        workload=None, kernels=kernels,
        graph_launched=any(k.graph_launched for k in kernels) or bool(omitted and omitted.graph_launched),
        notes=(*notes, *read.notes), window=read.window, engine=read.engine, launch_ts_us=float(outer["ts_us"]),
        omitted=omitted,
    )


def _call_from_ops(group: list[dict[str, Any]], kernels: tuple[CallKernel, ...],
                   omitted: OmittedKernels | None = None) -> AttentionCall:
    """The call of one op group (outermost attention op first) and the kernels attributed to it (``omitted``: those
    beyond the per-call cap)."""
    outer = group[0]
    sig = signature(outer["name"])
    backend, backend_op, notes = _backend_of(group, kernels)

    # Shapes from the outer op; failing that, from the first nested op that has them. A packed
    # variable-length op (cu_seqlens recorded) is read as packed.
    shape, shape_sig, shape_op, packed = None, sig, outer, None
    for row in group:
        row_sig = signature(row["name"])
        read = op_packed(row, row_sig)
        shape, packed = read if read is not None else (op_shape(row, row_sig), None)
        if shape is not None:
            shape_sig, shape_op = row_sig, row
            break
    if shape is None:
        notes.append("input shapes not recorded (record_shapes=False?) or not 4-D: no workload")
    recorded = shape_op.get("concrete_inputs")
    causal, alignment = read_causal(recorded, shape_sig)
    mask_dims = op_dims(shape_op, shape_sig.mask_index) if shape_sig.mask_index is not None else None
    varlen = packed is not None or bool(op_dims(shape_op, shape_sig.varlen_index) if shape_sig.varlen_index is not None else None)
    # A window is an argument of the kernel-level op (flash's window_size_left/right, xformers' window_size),
    # nested under the SDPA front door when SDPA dispatched: the first op of the group that records one.
    window = next((w for w in (read_window(r.get("concrete_inputs"), signature(r["name"])) for r in group) if w), None)
    if window is not None and causal and window.right != 0:
        window = replace(window, right=0)  # flash-attn sets window_size_right to 0 for is_causal
    if mask_dims:
        alignment = CausalAlignment.UNKNOWN
        types = shape_op.get("input_types")
        kind = types[shape_sig.mask_index] if isinstance(types, list) and shape_sig.mask_index < len(types) else ""
        notes.append(f"explicit mask: an attn_mask/bias tensor {list(mask_dims)}{f' ({kind})' if kind else ''} was "
                     "passed; its pattern (a sliding window, say) is not in the trace")
        notes.append(_dispatch_note(backend, backend_op, kernels, omitted))
    elif causal is None:
        if shape_sig.causal_index is None:
            notes.append("FlexAttention's mask (block mask, score_mod) is not recorded in a trace: causal unknown, and a "
                         "sliding window or any other pattern it encodes is not in the trace")
        elif shape is not None:
            notes.append("is_causal not recorded (no Concrete Inputs): causal unknown" if recorded is None
                         else "is_causal not readable from Concrete Inputs: causal unknown")
    if varlen and packed is None:
        notes.append("packed variable-length batch (cu_seqlens): B and L are not per-sequence values")
    return AttentionCall(
        index=0, source="op", op_name=outer["name"], backend=backend, backend_op=backend_op, direction=sig.direction,
        ts_us=float(outer["ts_us"]), dur_us=float(outer["_dur"]), pid=outer["pid"], tid=outer["tid"], range=outer["range"],
        shape=shape, causal=None if mask_dims else causal, causal_alignment=alignment,
        mask_dims=tuple(mask_dims) if mask_dims else None, varlen=varlen, phase=None, workload=None, kernels=kernels,
        graph_launched=any(k.graph_launched for k in kernels) or bool(omitted and omitted.graph_launched),
        notes=tuple(notes), packed=packed, window=window, launch_ts_us=float(outer["ts_us"]), omitted=omitted,
    )


def _dispatch_note(backend: str, backend_op: str | None, kernels: tuple[CallKernel, ...],
                   omitted: OmittedKernels | None = None) -> str:
    """Which path ran an explicit-mask call, from the trace: the dispatched backend op and the kernels."""
    fused = [k for k in kernels if k.family]
    count = len(kernels) + (omitted.count if omitted else 0)
    if backend == "math":
        ran = (f"{count} kernel(s), none a fused attention kernel" if kernels and not fused
               else "no GPU kernels recorded" if not kernels else f"{count} kernel(s)")
        return f"SDPA ran the math path ({backend_op}: matmul + softmax; {ran})"
    where = f" ({backend_op})" if backend_op else ""
    if fused:
        top = max(fused, key=lambda k: k.dur_us)
        return f"SDPA ran a fused kernel: {backend}{where}, {top.family} kernel {kernel_stem(top.name)}"
    return f"SDPA ran {backend}{where}; " + ("no GPU kernels recorded" if not kernels else
                                             f"{count} kernel(s), none a fused attention kernel")


# ----------------------------------------------------------------------------------------------------
# Kernel-only calls
# ----------------------------------------------------------------------------------------------------


def _kernel_only_calls(
    trace: Trace, records: KernelRecords, families: Sequence[str | None], used: set[int],
    merge: GraphMerge | None = None,
) -> list[AttentionCall]:
    """Attention kernels no attention op launched, grouped by launching op (``External id``) or, for CUDA
    graph replays, by graph launch (``correlation``) and kernel family (a graph may hold calls of several
    backends: one group per family, the per-call boundaries inside one replay are unknown); other kernels
    of that op are not included."""
    kernels = trace.kernels
    orphans = [i for i, f in enumerate(families) if f is not None and i not in used]
    if not orphans:
        return []
    graph = kernels["graph_launched"].to_numpy(dtype=bool)
    ext = kernels["external_id"].to_numpy(dtype=object)
    corr = kernels["correlation"].to_numpy(dtype=object)
    groups: dict[tuple[str, Any], list[int]] = {}
    for i in orphans:
        if graph[i]:
            key = ("graph", (corr[i] if corr[i] is not pd.NA else i, families[i]))
        elif ext[i] is not pd.NA:
            key = ("ext", int(ext[i]))
        else:
            key = ("kernel", i)
        groups.setdefault(key, []).append(i)
    op_by_ext = {int(e): (n, r) for e, n, r in zip(trace.ops["external_id"], trace.ops["name"], trace.ops["range"]) if e is not pd.NA}
    graph_families: dict[Any, list[str]] = {}
    for kind, value in groups:
        if kind == "graph":
            graph_families.setdefault(value[0], []).append(value[1])
    gaps = {m.graph_launch: m for m in merge.launches} if merge is not None else {}
    launch_ts = kernels["launch_ts_us"].to_numpy(dtype="float64")
    calls = []
    for (kind, value), members in groups.items():
        ks, omitted = records.call_kernels(members)
        count = len(ks) + (omitted.count if omitted else 0)
        first = kernels.iloc[members[0]]
        op_name, op_range = op_by_ext.get(value, (None, None)) if kind == "ext" else (None, None)
        family = next(f for f in (k.family for k in ks) if f is not None)
        notes = ["attention kernels without an attention op: shapes not recorded, no workload"]
        if kind == "graph":
            gap = gaps.get(value[0])
            if gap is not None and gap.rule is None:
                notes.append(_gap_note(gap))
            others = [f for f in graph_families[value[0]] if f != value[1]]
            split = (f"; the same replay also ran {', '.join(others)} attention kernels, grouped apart by family"
                     if others else "")
            notes.append(f"replayed from a CUDA graph (launched by {first['launcher']}): these {count} {family} "
                         f"kernel(s) of one graph replay are grouped as one entry; the per-call boundaries inside "
                         f"the graph are unknown (one call or several){split}")
        calls.append(AttentionCall(
            index=0, source="kernels", op_name=op_name, backend=family, backend_op=None,
            direction=kernel_direction([*(k.name for k in ks), *(n for n, _, _ in (omitted.names if omitted else ()))]),
            ts_us=min(ks[0].ts_us, omitted.first_ts_us if omitted else ks[0].ts_us),
            dur_us=max([*(k.ts_us + k.dur_us for k in ks), *((omitted.last_end_us,) if omitted else ())])
            - min(ks[0].ts_us, omitted.first_ts_us if omitted else ks[0].ts_us),
            pid=first["launch_pid"], tid=first["launch_tid"], range=op_range if op_range is not None else first["range"],
            shape=None, causal=None, causal_alignment=CausalAlignment.UNKNOWN, mask_dims=None, varlen=False, phase=None,
            workload=None, kernels=ks,
            graph_launched=kind == "graph", notes=tuple(notes), omitted=omitted,
            launch_ts_us=float(launch_ts[members[0]]) if not math.isnan(launch_ts[members[0]]) else None,
        ))
    return calls


def _gap_note(m: Any) -> str:
    """Why one graph launch's kernels were not merged with a capture (:class:`GraphGap`)."""
    if m.gap is GraphGap.NO_CAPTURE:
        return ("not merged with a capture: no capture trace was given (profattn analyze REPLAY --capture CAPTURE); the "
                "ops that launched these kernels, and their input shapes, are in the graph's capture")
    size = f" (the closest capture has {m.capture_launches:,} kernel launches)" if m.capture_launches else ""
    return f"not merged with a capture: {m.gap.value}; {m.kernels:,} replayed kernels{size}: none attributed"


# ----------------------------------------------------------------------------------------------------
# Graph replays merged with their capture
# ----------------------------------------------------------------------------------------------------


def _graph_calls(trace: Trace, merged: MergeResult, sources: Sequence[CaptureSource],
                 records: KernelRecords) -> tuple[list[AttentionCall], set[int]]:
    """Calls of replayed kernels placed on capture-time launches inside an attention op of the capture: one per
    (graph launch, captured attention op), with that op's name, shapes and nested backend op, the replayed kernels'
    GPU times, and launch shapes from the capture's launch events where the replay records none (ROCm). Placed
    kernels outside every captured attention op (GEMMs, norms) are no attention call."""
    placements = merged.placements
    if not placements:
        return [], set()
    kernels = trace.kernels
    num_sms = trace.num_sms
    by_source: dict[int, list[int]] = {}
    for row, p in placements.items():
        by_source.setdefault(p.source, []).append(row)
    members: dict[tuple[int, int, int], list[int]] = {}
    contexts: dict[int, tuple[list[list[dict[str, Any]]], _CacheContext]] = {}
    for si, rows in by_source.items():
        src = sources[si].trace
        groups = _attention_op_groups(src.ops)
        if not groups:
            continue
        outers = [g[0] for g in groups]
        start = np.array([o["ts_us"] for o in outers], dtype="float64")
        windows = IntervalIndex(start, start + np.array([o["_dur"] for o in outers], dtype="float64"),
                                [(o["pid"], o["tid"]) for o in outers])
        launches = src.capture_launches
        lrows = [placements[r].launch_row for r in rows]
        g_of = windows.innermost([(launches.at[i, "pid"], launches.at[i, "tid"]) for i in lrows],
                                 launches["ts_us"].to_numpy(dtype="float64")[lrows])
        for row, g in zip(rows, g_of):
            if g >= 0:
                members.setdefault((placements[row].graph_launch, si, int(g)), []).append(row)
        contexts[si] = (groups, _CacheContext(src.ops, groups))
    calls: list[AttentionCall] = []
    used: set[int] = set()
    for (corr, si, g), rows in members.items():
        groups, cache = contexts[si]
        src = sources[si].trace
        launches = src.capture_launches
        kept, omitted = records.call_rows(rows)
        ks_t = tuple(_with_capture_shape(records[row], launches, placements[row].launch_row, num_sms) for row in kept)
        base = _group_call(groups[g], ks_t, cache, g, omitted)
        p = placements[rows[0]]
        first = min(rows, key=lambda r: float(kernels.at[r, "ts_us"]))
        start = min(ks_t[0].ts_us, omitted.first_ts_us if omitted else ks_t[0].ts_us)
        end = max([*(k.ts_us + k.dur_us for k in ks_t), *((omitted.last_end_us,) if omitted else ())])
        capture_id = int(launches.at[p.launch_row, "capture"])
        note = (f"replayed from a CUDA graph (graph launch at {p.launch_ts_us:.0f} µs CPU): matched to capture {capture_id} "
                f"of {sources[si].label} by {p.rule.value}; the op and its input shapes are the capture's")
        calls.append(replace(
            base, source="graph", ts_us=start, dur_us=end - start,
            pid=kernels.at[first, "launch_pid"], tid=kernels.at[first, "launch_tid"], range=kernels.at[first, "range"],
            graph_launched=True, notes=(*base.notes, note), launch_ts_us=p.launch_ts_us, captured_in=None,
            graph=GraphOrigin(p.rule, sources[si].label, capture_id, corr, p.launch_ts_us),
        ))
        used.update(rows)
    return calls, used


def _with_capture_shape(k: CallKernel, launches: pd.DataFrame, row: int, num_sms: int | None) -> CallKernel:
    """A replayed kernel with the grid, block and shared memory its capture-time launch recorded, where the replayed
    kernel event records none (ROCm graph replays)."""
    def triple(prefix: str) -> tuple[int, int, int] | None:
        vals = [launches.at[row, f"{prefix}_{a}"] for a in "xyz"]
        return None if any(v is pd.NA or v is None for v in vals) else (int(vals[0]), int(vals[1]), int(vals[2]))

    grid = k.grid if k.grid is not None else triple("grid")
    block = k.block if k.block is not None else triple("block")
    smem = launches.at[row, "shared_mem_bytes"]
    smem = k.shared_mem_bytes if k.shared_mem_bytes is not None or smem is pd.NA else int(smem)
    ctas = k.ctas if k.ctas is not None else (grid[0] * grid[1] * grid[2] if grid is not None else None)
    return replace(k, grid=grid, block=block, shared_mem_bytes=smem, ctas=ctas,
                   ctas_per_sm=ctas / num_sms if ctas is not None and num_sms else None)


def _mark_captured(trace: Trace, calls: list[AttentionCall]) -> list[AttentionCall]:
    """Op calls made while their thread's stream was capturing a graph: ``captured_in`` and a note (their kernels
    ran at replay; the trace shows none here)."""
    caps = trace.captures
    if caps.empty or not calls:
        return calls
    start = caps["begin_ts_us"].to_numpy(dtype="float64")
    index = IntervalIndex(start, caps["end_ts_us"].to_numpy(dtype="float64"), group_keys(caps["pid"], caps["tid"]))
    inside = index.innermost([(c.pid, c.tid) for c in calls], np.array([c.ts_us for c in calls], dtype="float64"))
    out = []
    for c, i in zip(calls, inside):
        if i >= 0:
            c = replace(c, captured_in=int(caps["capture"].iat[int(i)]),
                        notes=(*c.notes, f"called while capture {int(caps['capture'].iat[int(i)])} recorded a CUDA "
                                         "graph: its kernels ran when the graph was replayed, not here"))
        out.append(c)
    return out


def _merge_notes(merge: GraphMerge) -> list[str]:
    placed = merge.placed_kernels
    if not merge.launches or not merge.capture_files:
        return []
    rules = ", ".join(f"{n} by {rule.value}" for rule, n in merge.rule_counts().items())
    return [f"{placed:,} of {merge.replayed_kernels:,} graph-replayed kernels matched to their capture-time launches "
            f"({len(merge.launches):,} graph launches{': ' + rules if rules else ''})"]


def _merge_warnings(merge: GraphMerge | None) -> tuple[TraceWarning, ...]:
    """Graph replays not merged with a capture: what is missing (no capture given), or why the capture given did not
    match (per :class:`GraphGap`), with counts."""
    if merge is None:
        return ()
    if not merge.capture_files:
        att = merge.attention_kernels
        return (TraceWarning("graph_no_capture", merge.replayed_kernels,
                             f"{merge.replayed_kernels:,} kernel(s) ({att:,} attention) were replayed from "
                             f"{len(merge.launches):,} CUDA graph launch(es) and no capture trace was given: the ops "
                             "that launched them and their input shapes are only in the graph's capture (record it and "
                             "pass it with --capture: see README, 'Graph replays')"),)
    gaps = merge.gap_counts()
    if not gaps:
        return ()
    unplaced = sum(m.kernels for m in merge.launches if m.rule is None)
    why = ", ".join(f"{gap.value} ({n})" for gap, n in gaps.items())
    return (TraceWarning("graph_unmatched", unplaced,
                         f"{unplaced:,} of {merge.replayed_kernels:,} graph-replayed kernel(s) "
                         f"({merge.unplaced_attention_kernels:,} attention) could not be matched to a capture-time "
                         f"launch: {why}; none of them is attributed"),)
