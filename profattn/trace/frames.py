"""The DataFrames of a :class:`~profattn.trace.kineto.Trace`, built from the collected
:class:`~profattn.trace.columns.EventColumns`, and their attribution to ``record_function`` ranges
(through :class:`~profattn.trace.windows.IntervalIndex`). Units: µs and bytes. Torch-free.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from profattn.trace.columns import (
    CAPTURE_COLUMNS, CAPTURE_LAUNCH_COLUMNS, GRAPH_CAPTURE_BEGIN, GRAPH_CAPTURE_END, GRAPH_LAUNCHERS, KERNEL_ARG_SPEC,
    KERNEL_COLUMNS, KERNEL_LAUNCH_CALLS, NA_INT, WORK_SIZE_LAUNCHES, EventColumns,
)
from profattn.trace.windows import IntervalIndex, group_keys

__all__ = ["attribute_to_ranges", "capture_frames", "kernels_frame", "ops_frame", "ranges_frame"]

_GRID = ("grid_x", "grid_y", "grid_z")
_BLOCK = ("block_x", "block_y", "block_z")


# ----------------------------------------------------------------------------------------------------
# Frames
# ----------------------------------------------------------------------------------------------------


def _floats(values: array) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def _ints(values: array) -> pd.arrays.IntegerArray:
    """A collected int64 column as nullable Int64 (the sentinel :data:`NA_INT` becomes <NA>)."""
    data = np.array(values, dtype=np.int64)
    return pd.arrays.IntegerArray(data, data == NA_INT)


def _objects(values: list[Any]) -> pd.Series:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return pd.Series(out, dtype=object)


def ranges_frame(columns: EventColumns) -> pd.DataFrame:
    frame = pd.DataFrame({
        "name": _objects(columns.r_name), "ts_us": _floats(columns.r_ts), "dur_us": _floats(columns.r_dur),
        "pid": _objects(columns.r_pid), "tid": _objects(columns.r_tid),
    })
    frame = frame.sort_values(["ts_us", "dur_us"], ascending=[True, False], kind="stable", ignore_index=True)
    frame["instance"] = frame.groupby("name", sort=False).cumcount().astype("int64")
    return frame


def ops_frame(columns: EventColumns, ranges: pd.DataFrame) -> pd.DataFrame:
    frame = pd.DataFrame({
        "name": _objects(columns.o_name), "ts_us": _floats(columns.o_ts), "dur_us": _floats(columns.o_dur),
        "pid": _objects(columns.o_pid), "tid": _objects(columns.o_tid), "external_id": _ints(columns.o_ext),
        "input_dims": _objects(columns.o_dims), "input_types": _objects(columns.o_types),
        "concrete_inputs": _objects(columns.o_concrete),
    })
    frame = frame.sort_values("ts_us", kind="stable", ignore_index=True)
    idx = attribute_to_ranges(ranges, frame["pid"], frame["tid"], frame["ts_us"].to_numpy())
    frame["range"] = _take(ranges["name"], idx)
    return frame


def kernels_frame(columns: EventColumns, ranges: pd.DataFrame) -> pd.DataFrame:
    data: dict[str, Any] = {"name": _objects(columns.k_name), "ts_us": _floats(columns.k_ts), "dur_us": _floats(columns.k_dur)}
    for spec in KERNEL_ARG_SPEC:
        values = columns.k_args[spec.column]
        data[spec.column] = _floats(values) if spec.dtype == "float64" else _ints(values)
    frame = pd.DataFrame(data)
    frame = frame.sort_values("ts_us", kind="stable", ignore_index=True)
    launchers = columns.launchers
    launch = [launchers.get(c) if c is not pd.NA else None for c in frame["correlation"].tolist()]
    frame["launcher"] = _objects([x[0] if x else None for x in launch])
    _work_size_to_blocks(frame)
    _fill_launch_shape(frame, columns.launch_details)
    frame["ctas"] = _product(frame, _GRID)
    frame["threads_per_cta"] = _product(frame, _BLOCK)

    launch_ts = np.array([x[1] if x else np.nan for x in launch], dtype="float64")
    frame["launch_ts_us"] = launch_ts
    frame["launch_pid"] = _objects([x[2] if x else None for x in launch])
    frame["launch_tid"] = _objects([x[3] if x else None for x in launch])
    frame["graph_launched"] = frame["launcher"].isin(GRAPH_LAUNCHERS).astype(bool)
    idx = attribute_to_ranges(ranges, frame["launch_pid"], frame["launch_tid"], launch_ts)
    frame["range"] = _take(ranges["name"], idx)
    frame["range_instance"] = _take(ranges["instance"], idx).astype("Int64")
    return frame[list(KERNEL_COLUMNS)]


def _work_size_to_blocks(frame: pd.DataFrame) -> None:
    """Kernels launched by a HIP call whose ``grid`` Kineto records as the global work size in threads
    (:data:`~profattn.trace.columns.WORK_SIZE_LAUNCHES`; the kernel event repeats the launch's value): grid in
    blocks, ``⌈grid / block⌉`` per axis (NA where the block is missing or 0)."""
    rows = frame["launcher"].isin(WORK_SIZE_LAUNCHES).to_numpy(dtype=bool) & frame["grid_x"].notna().to_numpy()
    if not rows.any():
        return
    for g, b in zip(_GRID, _BLOCK):
        grid = frame.loc[rows, g].astype("Int64")
        block = frame.loc[rows, b].astype("Int64")
        blocks = (grid + block - 1) // block.where(block > 0)
        frame.loc[rows, g] = blocks.astype("Int64")


def _fill_launch_shape(frame: pd.DataFrame, details: dict[int, tuple[Any, Any, Any, Any]]) -> None:
    """Grid, block and shared memory that a kernel event lacks, from its launch event where that records them
    (ROCm: the runtime launch records ``grid``/``block``/``shared memory``; its kernel event often only
    ``grid``/``block``, or nothing when replayed from a graph). A kernel's own values are kept."""
    if not details or frame.empty:
        return
    found = [details.get(c) for c in frame["correlation"].to_numpy(dtype="int64", na_value=NA_INT).tolist()]
    if not any(found):
        return
    for slot, axes in ((1, _GRID), (2, _BLOCK), (3, ("shared_mem_bytes",))):
        for k, axis in enumerate(axes):
            values = [None if d is None or d[slot] is None else (d[slot][k] if slot < 3 else d[slot]) for d in found]
            frame[axis] = frame[axis].fillna(pd.Series(pd.array(values, dtype="Int64"), index=frame.index))


def capture_frames(columns: EventColumns, ranges: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The stream captures into CUDA/HIP graphs a trace recorded, and the kernel launches issued during each.

    A capture is a :data:`GRAPH_CAPTURE_BEGIN` call and the next :data:`GRAPH_CAPTURE_END` call on the same
    ``pid``/``tid``; its launches are the :data:`KERNEL_LAUNCH_CALLS` on that thread strictly between the two, in
    ``ts`` order (``position`` 0, 1, ...: the order in which they created the graph's kernel nodes). Launches from
    other threads into the same capture are not seen (torch's ``torch.cuda.graph`` captures from one thread).
    ``captures`` columns :data:`CAPTURE_COLUMNS` (``range``: the innermost ``user_annotation`` enclosing the begin,
    e.g. vLLM's ``capture_32_FULL``; ``launches``: how many); ``capture_launches`` columns
    :data:`CAPTURE_LAUNCH_COLUMNS` (``call`` the runtime/driver call, ``kernel`` the kernel name where the event
    records one — ROCm — else None; grid/block/shared memory likewise, nullable Int64). A begin without an end
    (capture cut by the end of the profile) is no capture. Both frames are empty without captures.
    """
    launchers = columns.launchers
    empty = (pd.DataFrame({c: pd.Series(dtype=object) for c in CAPTURE_COLUMNS}),
             pd.DataFrame({c: pd.Series(dtype=object) for c in CAPTURE_LAUNCH_COLUMNS}))
    if not any(name in columns.strings for name in GRAPH_CAPTURE_BEGIN):  # no capture began: skip the launch events
        return empty
    marks: dict[Any, list[tuple[float, int, int]]] = {}  # thread -> (ts, 0 begin / 1 end / 2 launch, correlation)
    for corr, (name, ts, pid, tid) in launchers.items():
        kind = 0 if name in GRAPH_CAPTURE_BEGIN else 1 if name in GRAPH_CAPTURE_END else 2 if name in KERNEL_LAUNCH_CALLS \
            else -1
        if kind >= 0 and pid is not None and tid is not None:
            marks.setdefault((pid, tid), []).append((ts, kind, corr))
    windows: list[tuple[float, float, Any, Any, str, list[int]]] = []
    for (pid, tid), events in marks.items():
        if not any(kind == 0 for _, kind, _ in events):
            continue
        events.sort()
        open_at: tuple[float, int] | None = None
        inside: list[int] = []
        for ts, kind, corr in events:
            if kind == 0:
                open_at, inside = (ts, corr), []
            elif kind == 1 and open_at is not None:
                windows.append((open_at[0], ts, pid, tid, launchers[open_at[1]][0], inside))
                open_at = None
            elif kind == 2 and open_at is not None:
                inside.append(corr)
    windows.sort(key=lambda w: (w[0], w[1]))
    if not windows:
        return empty
    begin = np.array([w[0] for w in windows], dtype="float64")
    idx = attribute_to_ranges(ranges, pd.Series([w[2] for w in windows], dtype=object),
                              pd.Series([w[3] for w in windows], dtype=object), begin)
    captures = pd.DataFrame({
        "capture": np.arange(len(windows), dtype="int64"), "begin_ts_us": begin,
        "end_ts_us": np.array([w[1] for w in windows], dtype="float64"),
        "pid": _objects([w[2] for w in windows]), "tid": _objects([w[3] for w in windows]),
        "begin_call": _objects([w[4] for w in windows]),
        "launches": np.array([len(w[5]) for w in windows], dtype="int64"),
        "range": _take(ranges["name"], idx),
    })
    rows: dict[str, list[Any]] = {c: [] for c in CAPTURE_LAUNCH_COLUMNS}
    details = columns.launch_details
    for capture, (_, _, pid, tid, _, corrs) in enumerate(windows):
        for position, corr in enumerate(corrs):
            name, ts, _, _ = launchers[corr]
            kernel, grid, block, smem = details.get(corr, (None, None, None, None))
            rows["capture"].append(capture)
            rows["position"].append(position)
            rows["call"].append(name)
            rows["kernel"].append(kernel)
            rows["ts_us"].append(ts)
            rows["pid"].append(pid)
            rows["tid"].append(tid)
            rows["correlation"].append(corr)
            for axes, value in ((_GRID, grid), (_BLOCK, block)):
                for axis, v in zip(axes, value if value is not None else (None,) * 3):
                    rows[axis].append(v)
            rows["shared_mem_bytes"].append(smem)
    launches = pd.DataFrame({
        "capture": np.array(rows["capture"], dtype="int64"), "position": np.array(rows["position"], dtype="int64"),
        "call": _objects(rows["call"]), "kernel": _objects(rows["kernel"]),
        "ts_us": np.array(rows["ts_us"], dtype="float64"), "pid": _objects(rows["pid"]), "tid": _objects(rows["tid"]),
        "correlation": np.array(rows["correlation"], dtype="int64"),
        **{c: pd.array(rows[c], dtype="Int64") for c in (*_GRID, *_BLOCK, "shared_mem_bytes")},
    })
    return captures, launches[list(CAPTURE_LAUNCH_COLUMNS)]


def _product(frame: pd.DataFrame, columns: Iterable[str]) -> pd.Series:
    """Row-wise product of Int64 columns; NA if any factor is NA or the product overflows int64."""
    parts = [frame[c] for c in columns]
    as_float = np.ones(len(frame))
    for part in parts:
        as_float = as_float * part.astype("float64").to_numpy(na_value=np.nan)
    fits = np.isfinite(as_float) & (np.abs(as_float) < 2.0**62)
    result = pd.Series(pd.NA, index=frame.index, dtype="Int64")
    if fits.any():
        exact = np.ones(int(fits.sum()), dtype=np.int64)
        for part in parts:
            exact *= part[fits].to_numpy(dtype=np.int64)
        result[fits] = exact
    return result


def _take(column: pd.Series, idx: np.ndarray) -> pd.Series:
    """``column[idx]`` as an object Series, None where ``idx`` is -1 (no enclosing range)."""
    values = column.to_numpy(dtype=object)
    out = np.full(len(idx), None, dtype=object)
    hit = idx >= 0
    out[hit] = values[idx[hit]]
    return pd.Series(out, dtype=object)


def attribute_to_ranges(ranges: pd.DataFrame, pid: pd.Series, tid: pd.Series, ts: np.ndarray) -> np.ndarray:
    """Row in ``ranges`` of the innermost range enclosing each point on the same thread; failing that, on
    any thread of the same process (-1: none). Innermost: :meth:`IntervalIndex.innermost`.

    The fallback covers work that a range causes on another thread: autograd runs the backward of CUDA
    tensors on its own device thread, so the kernels of ``loss.backward()`` called inside
    ``record_function("cell")`` are launched from a thread that holds no user annotation. They are
    attributed to the range whose wall-clock window (same pid) contains their launch.
    """
    if len(ranges) == 0 or len(ts) == 0:
        return np.full(len(ts), -1, dtype=np.int64)
    start = ranges["ts_us"].to_numpy(dtype="float64")
    end = start + ranges["dur_us"].to_numpy(dtype="float64")
    same_thread = IntervalIndex(start, end, group_keys(ranges["pid"], ranges["tid"]))
    idx = same_thread.innermost(group_keys(pid, tid), ts)
    miss = idx < 0
    if miss.any():
        same_process = IntervalIndex(start, end, group_keys(ranges["pid"]))
        idx[miss] = same_process.innermost(group_keys(pid[miss]), ts[miss])
    return idx
