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

from profattn.trace.columns import GRAPH_LAUNCHERS, KERNEL_ARG_SPEC, KERNEL_COLUMNS, NA_INT, EventColumns
from profattn.trace.windows import IntervalIndex, group_keys

__all__ = ["attribute_to_ranges", "kernels_frame", "ops_frame", "ranges_frame"]

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
    frame["ctas"] = _product(frame, _GRID)
    frame["threads_per_cta"] = _product(frame, _BLOCK)

    launchers = columns.launchers
    launch = [launchers.get(c) if c is not pd.NA else None for c in frame["correlation"].tolist()]
    frame["launcher"] = _objects([x[0] if x else None for x in launch])
    launch_ts = np.array([x[1] if x else np.nan for x in launch], dtype="float64")
    frame["launch_ts_us"] = launch_ts
    frame["launch_pid"] = _objects([x[2] if x else None for x in launch])
    frame["launch_tid"] = _objects([x[3] if x else None for x in launch])
    frame["graph_launched"] = frame["launcher"].isin(GRAPH_LAUNCHERS).astype(bool)
    idx = attribute_to_ranges(ranges, frame["launch_pid"], frame["launch_tid"], launch_ts)
    frame["range"] = _take(ranges["name"], idx)
    frame["range_instance"] = _take(ranges["instance"], idx).astype("Int64")
    return frame[list(KERNEL_COLUMNS)]


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
