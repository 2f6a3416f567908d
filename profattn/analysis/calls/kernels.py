"""The kernels of a trace as records: each launch's :class:`~profattn.analysis.calls.call_records.CallKernel` (built
when a call first asks for it), the heaviest kernels of the file by GPU time (:func:`kernel_times`) and its launch
shapes (:func:`launch_shapes`, grid against the SMs).

In: the trace's kernel frame (:attr:`profattn.trace.kineto.Trace.kernels`) with each kernel's attention family; out:
``CallKernel``, ``KernelTime`` and ``LaunchShape`` records. :func:`~profattn.analysis.calls.find.find_attention_calls`
hands a call the kernels it launched from here, at most :data:`CALL_KERNEL_LIMIT` of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from profattn.analysis.calls.call_records import CallKernel, KernelTime, LaunchShape, OmittedKernels

__all__ = ["CALL_KERNEL_LIMIT", "KernelRecords", "kernel_times", "launch_shapes"]

#: Kernels a call keeps as records (its heaviest, by GPU time); the rest are summarised (:class:`OmittedKernels`), so
#: one call of 1,000,000 kernels costs what one of 64 does (a real call launches 1 to ~40).
CALL_KERNEL_LIMIT = 64


def _opt_int(v: Any) -> int | None:
    return None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else int(v)


def _triple(row: Mapping[str, Any], prefix: str) -> tuple[int, int, int] | None:
    vals = [_opt_int(row[f"{prefix}_{a}"]) for a in "xyz"]
    return None if None in vals else (vals[0], vals[1], vals[2])  # type: ignore[return-value]


_RECORD_INTS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                "shared_mem_bytes", "ctas", "stream")


class KernelRecords:
    """``records[i]``: the :class:`CallKernel` of row ``i`` of ``kernels``, built when first asked for
    (only the kernels of attention calls ever are)."""

    def __init__(self, kernels: pd.DataFrame, families: Sequence[str | None], num_sms: int | None) -> None:
        self._names = kernels["name"].to_numpy(dtype=object)
        self._ts = kernels["ts_us"].to_numpy(dtype="float64")
        self._dur = kernels["dur_us"].to_numpy(dtype="float64")
        self._graph = kernels["graph_launched"].to_numpy(dtype=bool)
        self._ints = {c: (kernels[c].to_numpy(dtype="int64", na_value=0), kernels[c].isna().to_numpy()) for c in _RECORD_INTS}
        self._families = families
        self._num_sms = num_sms
        self._built: dict[int, CallKernel] = {}

    def __getitem__(self, i: int) -> CallKernel:
        record = self._built.get(i)
        if record is None:
            record = self._built[i] = self._build(int(i))
        return record

    def call_kernels(self, rows: Sequence[int]) -> tuple[tuple[CallKernel, ...], OmittedKernels | None]:
        """The kernels of rows ``rows`` as one call holds them: all as records, in GPU start order, when they are at
        most :data:`CALL_KERNEL_LIMIT`; else the heaviest that many (ties: earliest), and the others summarised."""
        kept, omitted = self.call_rows(rows)
        return tuple(self[i] for i in kept), omitted

    def call_rows(self, rows: Sequence[int]) -> tuple[list[int], OmittedKernels | None]:
        """:meth:`call_kernels` as row numbers: the rows kept as records, in GPU start order (ties: row order), and
        the others summarised (None when all are kept)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if len(rows) <= CALL_KERNEL_LIMIT:
            return sorted((int(i) for i in rows), key=lambda i: self._ts[i]), None
        dur, ts = self._dur[rows], self._ts[rows]
        order = np.lexsort((ts, -dur))  # heaviest first, then earliest
        kept, rest = rows[order[:CALL_KERNEL_LIMIT]], rows[order[CALL_KERNEL_LIMIT:]]
        by_name: dict[str, list[float]] = {}
        for name, d in zip(self._names[rest].tolist(), self._dur[rest].tolist()):
            entry = by_name.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += d
        heaviest = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:10]
        families = tuple(dict.fromkeys(f for f in (self._families[int(i)] for i in rest) if f))
        omitted = OmittedKernels(
            count=len(rest), gpu_time_us=float(self._dur[rest].sum()), families=families,
            names=tuple((n, int(c), float(t)) for n, (c, t) in heaviest),
            first_ts_us=float(self._ts[rest].min()), last_end_us=float((self._ts[rest] + self._dur[rest]).max()),
            graph_launched=bool(self._graph[rest].any()))
        return sorted((int(i) for i in kept), key=lambda i: self._ts[i]), omitted

    def _int(self, column: str, i: int) -> int | None:
        values, missing = self._ints[column]
        return None if missing[i] else int(values[i])

    def _build(self, i: int) -> CallKernel:
        grid = tuple(self._int(c, i) for c in ("grid_x", "grid_y", "grid_z"))
        block = tuple(self._int(c, i) for c in ("block_x", "block_y", "block_z"))
        ctas = self._int("ctas", i)
        num_sms = self._num_sms
        return CallKernel(
            name=str(self._names[i]),
            family=self._families[i],
            ts_us=float(self._ts[i]),
            dur_us=float(self._dur[i]),
            grid=None if None in grid else grid,  # type: ignore[arg-type]
            block=None if None in block else block,  # type: ignore[arg-type]
            registers_per_thread=self._int("registers_per_thread", i),
            shared_mem_bytes=self._int("shared_mem_bytes", i),
            ctas=ctas,
            ctas_per_sm=ctas / num_sms if ctas is not None and num_sms else None,
            stream=self._int("stream", i),
            graph_launched=bool(self._graph[i]),
        )


def kernel_times(kernels: pd.DataFrame, families: Sequence[str | None], total_us: float) -> tuple[KernelTime, ...]:
    if kernels.empty:
        return ()
    family_of = dict(zip(kernels["name"].tolist(), families))
    grouped = kernels.groupby("name", sort=False)["dur_us"].agg(["count", "sum"])
    grouped = grouped.sort_values("sum", ascending=False, kind="stable")
    return tuple(
        KernelTime(str(name), family_of[name], int(n), float(s), float(s) / int(n), float(s) / total_us if total_us > 0 else 0.0)
        for name, n, s in zip(grouped.index, grouped["count"], grouped["sum"])
    )


def launch_shapes(kernels: pd.DataFrame, num_sms: int | None) -> tuple[LaunchShape, ...]:
    if kernels.empty:
        return ()
    keys = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "shared_mem_bytes"]
    grouped = kernels.groupby(keys, sort=False, dropna=False).agg(
        count=("dur_us", "size"), total_us=("dur_us", "sum"), ctas=("ctas", "first"), blocks_per_sm=("blocks_per_sm", "first")
    ).reset_index()
    grouped = grouped.sort_values("total_us", ascending=False, kind="stable")
    out = []
    for row in grouped.to_dict("records"):
        ctas = _opt_int(row["ctas"])
        bps = row["blocks_per_sm"]
        out.append(LaunchShape(
            name=str(row["name"]), grid=_triple(row, "grid"), block=_triple(row, "block"),
            registers_per_thread=_opt_int(row["registers_per_thread"]), shared_mem_bytes=_opt_int(row["shared_mem_bytes"]),
            ctas=ctas, ctas_per_sm=ctas / num_sms if ctas is not None and num_sms else None,
            blocks_per_sm=None if pd.isna(bps) else float(bps), count=int(row["count"]), total_us=float(row["total_us"]),
        ))
    return tuple(out)
