"""The one rule for summing Nsight Compute counters over kernels: a sum that some kernel lacks stays
missing (NaN), and how many kernels lack each counter is counted. Used per NVTX range
(:func:`counters_by_range`) and per profattn cell (:func:`profattn.analysis.run.cells.counter_summary`).

Input: :attr:`profattn.trace.counters.NcuReport.kernels` (bytes; ``gpu_time_us`` in µs). Torch-free.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profattn.trace.counters import NcuReport

__all__ = ["RANGE_COUNTER_COLUMNS", "SUMMED_COUNTERS", "counters_by_range", "sum_counters"]

#: The summed counters (bytes; ``gpu_time_us`` in µs), in order: what :func:`sum_counters` adds up.
SUMMED_COUNTERS: tuple[str, ...] = (
    "dram_read_bytes",
    "dram_write_bytes",
    "dram_bytes",
    "l2_to_sm_read_bytes",
    "l1_global_load_bytes",
    "gpu_time_us",
)
#: Columns of :func:`counters_by_range`'s result, in order.
_SUMMED = SUMMED_COUNTERS
RANGE_COUNTER_COLUMNS: tuple[str, ...] = ("range", "kernels", *_SUMMED)


def sum_counters(kernels: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """The one counter sum rule: :data:`SUMMED_COUNTERS` summed over kernels, per group.

    ``kernels`` has :attr:`NcuReport.kernels`' columns (a summed column it lacks counts as missing for
    every kernel; ``dram_bytes`` is read + write per kernel). ``by``: the column to group by (groups in
    order of first appearance; rows where it is missing are left out), or None for all rows as one group.

    Returns one row per group: ``by`` (when given); ``kernels`` (int, launches); each summed column
    (float64), **NaN when any kernel of the group lacks that value** — a partial sum would understate
    the traffic, so a missing value stays missing; and ``missing_<column>`` (int64): how many kernels
    of the group lack it (0: the sum is complete). An empty input gives no rows.
    """
    summed = [c for c in _SUMMED if c != "dram_bytes"]
    frame = pd.DataFrame({c: kernels[c].astype("float64") if c in kernels else np.nan for c in summed}, index=kernels.index)
    frame["dram_bytes"] = frame["dram_read_bytes"] + frame["dram_write_bytes"]
    if by is None:  # one group: plain column sums (numpy's order, as the per-cell summaries always used)
        if frame.empty:
            return pd.DataFrame(columns=["kernels", *_SUMMED, *(f"missing_{c}" for c in _SUMMED)])
        present = frame[list(_SUMMED)].count()
        sums = frame[list(_SUMMED)].sum(min_count=1).where(present.eq(len(frame))).astype("float64")
        row = {"kernels": len(frame), **sums.to_dict(), **{f"missing_{c}": int(len(frame) - present[c]) for c in _SUMMED}}
        return pd.DataFrame([row])
    keys = kernels[by]
    frame = frame[keys.notna().to_numpy()]
    keys = keys[keys.notna()]
    groups = frame[list(_SUMMED)].groupby(keys.to_numpy(dtype=object), sort=False)
    sizes = groups.size().astype("int64")
    present = groups.count()
    sums = groups.sum(min_count=1).where(present.eq(sizes, axis=0)).astype("float64")
    missing = present.rsub(sizes, axis=0).astype("int64").add_prefix("missing_")
    result = pd.concat([sizes.rename("kernels"), sums, missing], axis=1)
    result = result.rename_axis(by).reset_index()
    result[by] = result[by].astype(object)
    return result


def counters_by_range(report: NcuReport) -> pd.DataFrame:
    """Hardware counters summed per NVTX range (each kernel counted once, under its innermost range),
    by :func:`sum_counters`.

    One row per range name, in order of first appearance; kernels without a range are left out.
    Columns :data:`RANGE_COUNTER_COLUMNS`: ``range``; ``kernels`` (int, launches); sums over the
    range's kernels of ``dram_read_bytes``, ``dram_write_bytes``, ``dram_bytes`` (read + write),
    ``l2_to_sm_read_bytes``, ``l1_global_load_bytes`` (bytes) and ``gpu_time_us`` (µs), all float64.
    A sum is NaN when any kernel of the range lacks that value (a partial sum would understate it).
    A report without ranged kernels gives an empty frame with these columns.
    """
    result = sum_counters(report.kernels, by="range")
    if result.empty:
        empty = {c: pd.Series(dtype="float64") for c in _SUMMED}
        return pd.DataFrame({"range": pd.Series(dtype=object), "kernels": pd.Series(dtype="int64"), **empty})
    return result[list(RANGE_COUNTER_COLUMNS)]
