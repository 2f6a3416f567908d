"""Where a trace's GPU time went: per top-level CPU op (:func:`op_times`), per ``ProfilerStep#N`` window
(:func:`step_windows`) and the union of the kernels' intervals (:func:`busy_us`).

In: a parsed :class:`~profattn.trace.Trace`, its graph replays merged with their capture
(:class:`~profattn.analysis.calls.graphs.MergeResult`) and the file's attention calls; out: ``OpTime`` and
``StepWindow`` records and a busy time in µs. Every "which window holds this time" question goes through
:class:`~profattn.trace.windows.IntervalIndex`.

**GPU time by op.** Each kernel is charged to the *top-level* CPU op (one not nested in another op on its
thread: :meth:`~profattn.trace.windows.IntervalIndex.outermost`) whose window holds its launch on the
launching thread; kernels without a launcher go through their
``External id`` to the op that launched them, then to that op's top-level op. Kernels replayed from a CUDA
graph are charged to the op around the graph launch, or — matched to their capture (:mod:`profattn.analysis.calls.graphs`)
— to the top-level op around their capture-time launch, as an eager run would charge them.

**ProfilerStep windows.** Kernels launched inside a ``ProfilerStep#N`` range from any thread of its
process, and the attention calls that start inside it (a time on the boundary of two steps counts in both).

GPU time throughout is summed kernel time (kernels
that overlap on different streams count twice); ``gpu_busy_us`` is the union of kernel intervals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from profattn.analysis.calls.call_records import AttentionCall, OpTime, StepWindow
from profattn.analysis.calls.graphs import CaptureSource, MergeResult
from profattn.trace.kineto import Trace
from profattn.trace.windows import IntervalIndex, group_keys

__all__ = ["busy_us", "op_times", "step_windows"]

_STEP = re.compile(r"^ProfilerStep#\d+$")
_NO_OP = "(no enclosing CPU op)"


def busy_us(kernels: pd.DataFrame) -> float:
    """Length of the union of kernel intervals ``[ts, ts + dur]`` (µs), all devices of the file together."""
    busy, end = 0.0, -math.inf
    for ts, dur in zip(kernels["ts_us"].to_numpy(), kernels["dur_us"].to_numpy()):  # sorted by ts
        stop = ts + dur
        if stop <= end:
            continue
        busy += stop - max(ts, end)
        end = stop
    return busy


def op_times(trace: Trace, merged: MergeResult | None = None,
              sources: Sequence[CaptureSource] = ()) -> tuple[OpTime, ...]:
    kernels, ops = trace.kernels, trace.ops
    if kernels.empty:
        return ()
    start = ops["ts_us"].to_numpy(dtype="float64")
    end = start + np.nan_to_num(ops["dur_us"].to_numpy(dtype="float64"), nan=0.0)
    index = IntervalIndex(start, end, group_keys(ops["pid"], ops["tid"]))
    charged = index.outermost(group_keys(kernels["launch_pid"], kernels["launch_tid"]),
                              kernels["launch_ts_us"].to_numpy(dtype="float64"))
    # Kernels no op window holds: through their External id to the op that launched them, then to its
    # top-level op.
    miss = np.flatnonzero((charged < 0) & kernels["external_id"].notna().to_numpy())
    if len(miss):
        owner = np.where(ops["pid"].notna().to_numpy() & ops["tid"].notna().to_numpy(), index.top_level(), -1)
        ext_to_op = {int(e): i for i, e in enumerate(ops["external_id"].tolist()) if e is not pd.NA}
        for i, ext in zip(miss, kernels["external_id"].to_numpy(dtype=object)[miss]):
            op = ext_to_op.get(int(ext))
            if op is not None:
                charged[i] = owner[op]
    names = ops["name"].to_numpy(dtype=object)
    frame = pd.DataFrame({
        "op": np.where(charged >= 0, names[np.maximum(charged, 0)] if len(names) else _NO_OP, _NO_OP),
        "instance": charged,
        "dur_us": kernels["dur_us"].to_numpy(),
        "graph": kernels["graph_launched"].to_numpy(dtype=bool),
    })
    if merged is not None and merged.placements:
        captured = _captured_top_ops(merged, sources)
        if captured:
            rows = list(captured)
            keys = {key: len(ops) + i for i, key in enumerate(dict.fromkeys(k for _, k in captured.values()))}
            frame.loc[rows, "op"] = [captured[r][0] for r in rows]
            frame.loc[rows, "instance"] = [keys[captured[r][1]] for r in rows]
    grouped = frame.groupby("op", sort=False).agg(
        op_calls=("instance", "nunique"), kernels=("dur_us", "size"), total_us=("dur_us", "sum"), graph_kernels=("graph", "sum")
    ).sort_values("total_us", ascending=False, kind="stable")
    out = []
    for name, r in grouped.iterrows():
        op_calls = 0 if name == _NO_OP else int(r.op_calls)
        mean = float(r.total_us) / op_calls if op_calls else None
        out.append(OpTime(str(name), op_calls, int(r.kernels), float(r.total_us), mean, int(r.graph_kernels)))
    return tuple(out)


def _captured_top_ops(merged: MergeResult, sources: Sequence[CaptureSource]
                      ) -> dict[int, tuple[str, tuple[int, int, int]]]:
    """Replayed kernel row → (name of the top-level CPU op around its capture-time launch, key of that op instance per
    graph launch): GPU time by op for kernels a graph replayed, charged as an eager run would charge them."""
    out: dict[int, tuple[str, tuple[int, int, int]]] = {}
    by_source: dict[int, list[int]] = {}
    for row, p in merged.placements.items():
        by_source.setdefault(p.source, []).append(row)
    for si, rows in by_source.items():
        src = sources[si].trace
        ops, launches = src.ops, src.capture_launches
        if ops.empty:
            continue
        start = ops["ts_us"].to_numpy(dtype="float64")
        index = IntervalIndex(start, start + np.nan_to_num(ops["dur_us"].to_numpy(dtype="float64"), nan=0.0),
                              group_keys(ops["pid"], ops["tid"]))
        lrows = [merged.placements[r].launch_row for r in rows]
        top = index.outermost([(launches.at[i, "pid"], launches.at[i, "tid"]) for i in lrows],
                              launches["ts_us"].to_numpy(dtype="float64")[lrows])
        names = ops["name"].to_numpy(dtype=object)
        for row, t in zip(rows, top):
            if t >= 0:
                out[row] = (str(names[t]), (merged.placements[row].graph_launch, si, int(t)))
    return out


def step_windows(trace: Trace, calls: Sequence[AttentionCall]) -> tuple[StepWindow, ...]:
    """The ``ProfilerStep#N`` windows: kernels launched inside each from its process (any thread, any
    nesting; :meth:`IntervalIndex.points_inside`) and the attention calls that start inside it."""
    ranges = trace.ranges
    steps = ranges[ranges["name"].map(lambda n: bool(_STEP.match(str(n))))]
    if steps.empty:
        return ()
    k = trace.kernels
    start = steps["ts_us"].to_numpy(dtype="float64")
    index = IntervalIndex(start, start + steps["dur_us"].to_numpy(dtype="float64"), group_keys(steps["pid"]))
    n_kernels, gpu_us = index.points_inside(group_keys(k["launch_pid"]), k["launch_ts_us"].to_numpy(dtype="float64"),
                                            k["dur_us"].to_numpy(dtype="float64"))
    n_calls, _ = index.points_inside([c.pid for c in calls], np.array([c.ts_us for c in calls], dtype="float64"))
    return tuple(
        StepWindow(str(name), float(ts), float(dur), int(n), float(us), int(nc))
        for name, ts, dur, n, us, nc in zip(steps["name"], start, steps["dur_us"], n_kernels, gpu_us, n_calls)
    )
