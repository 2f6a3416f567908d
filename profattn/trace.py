"""Read PyTorch profiler (Kineto) Chrome traces into pandas DataFrames.

Format source: the Chrome Trace Event format as written by Kineto's ``ChromeTraceLogger``
(pytorch/kineto, ``libkineto/src/output_json.cpp``) and exported by ``torch.profiler.profile``'s
``export_chrome_trace`` / ``tensorboard_trace_handler`` (see the torch.profiler docs). A trace is a JSON
object ``{"schemaVersion": ..., "deviceProperties": [...], ..., "traceEvents": [...]}`` (or, in the
Chrome "JSON Array Format", a bare list of events), optionally gzipped. Complete events (``"ph": "X"``)
carry ``ts`` and ``dur`` in microseconds; the event category ``cat`` says what they are:

===================  ==============  =========================================================
``cat``              older schema    read into
===================  ==============  =========================================================
``kernel``           ``Kernel``      :attr:`Trace.kernels`
``cuda_runtime``     ``Runtime``     a kernel's launcher (joined by ``args.correlation``)
``cuda_driver``                      a kernel's launcher (e.g. Triton's ``cuLaunchKernel``)
``user_annotation``                  :attr:`Trace.ranges` (``record_function`` ranges)
``cpu_op``           ``Operator``    :attr:`Trace.ops`
===================  ==============  =========================================================

Units: every time is in microseconds (``*_us``, as Kineto writes them), every size in bytes
(``*_bytes``). Which kernel ``args`` are read is declared once, in :data:`KERNEL_ARG_SPEC`.

Attribution: a kernel's ``args.correlation`` equals the ``args.correlation`` of the CPU runtime/driver
call that launched it; that call is attributed to the innermost ``user_annotation`` range enclosing its
start time on the same ``pid``/``tid`` (innermost = the latest-starting range that contains it).

Bad input raises :class:`~profattn.errors.TraceError` (a file that cannot be read as a trace); a trace
that simply holds no kernels gives empty DataFrames with the documented columns ("no data").

Example, the H200 flash-decode fixture (``shared/fixtures/traces``)::

    t = load_trace("h200_sdpa_decode_flash_gqa.pt.trace.json.gz")
    t.kernels[["range", "range_instance", "grid_x", "grid_y", "grid_z", "ctas", "launcher"]]
    #                     range  range_instance  grid_x  grid_y  grid_z  ctas          launcher
    # 0  decode_FLASH_ATTENTION               0       1       7      32   224  cudaLaunchKernel
    # 1  decode_FLASH_ATTENTION               0      32       1       1    32  cudaLaunchKernel
    # 2  decode_FLASH_ATTENTION               1       1       7      32   224  cudaLaunchKernel
    # ...
    kernel_summary(t)[["range", "calls", "kernels_per_call", "ctas_per_call", "ctas_per_sm"]]
    #                     range  calls  kernels_per_call  ctas_per_call  ctas_per_sm
    # 0  decode_FLASH_ATTENTION      3               2.0          256.0     1.939394
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profattn.errors import TraceError

__all__ = [
    "ArgSpec",
    "KERNEL_ARG_SPEC",
    "KERNEL_COLUMNS",
    "OP_COLUMNS",
    "RANGE_COLUMNS",
    "SUMMARY_COLUMNS",
    "GRAPH_LAUNCHERS",
    "Trace",
    "load_trace",
    "kernels_in_range",
    "ops_in_range",
    "kernel_summary",
]

_GZIP_MAGIC = b"\x1f\x8b"
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min

# Event categories, compared lower-cased so the old schema's ``Kernel``/``Runtime``/``Operator`` match.
_KERNEL_CATS = frozenset({"kernel"})
_LAUNCHER_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
_RANGE_CATS = frozenset({"user_annotation"})
_OP_CATS = frozenset({"cpu_op", "operator"})

#: Runtime/driver calls that launch a captured CUDA (or HIP) graph rather than a single kernel.
GRAPH_LAUNCHERS: frozenset[str] = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})


# ----------------------------------------------------------------------------------------------------
# The kernel-args spec table
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgSpec:
    """One kernel ``args`` entry to extract into a :attr:`Trace.kernels` column.

    ``raw_key`` is the key in the event's ``args`` (``aliases`` are tried after it, for older schemas);
    ``index`` picks one element of a list value (``grid``/``block`` are ``[x, y, z]``); ``dtype`` is the
    pandas dtype of the column (``"Int64"``, nullable, or ``"float64"``); ``default`` is used when the key
    is absent or its value is unusable (``None`` means missing: ``<NA>`` / ``NaN``).
    """

    column: str
    raw_key: str
    dtype: str
    default: int | float | None = None
    index: int | None = None
    aliases: tuple[str, ...] = ()


#: Which kernel ``args`` Kineto writes and what they become (CUPTI kernel activity fields).
#: Units: ``shared memory`` is bytes (static + dynamic); ``blocks per SM`` is CTAs / numSms and
#: ``warps per SM`` is CTAs * warps-per-CTA / numSms, both as Kineto computes them; occupancy is in %.
KERNEL_ARG_SPEC: tuple[ArgSpec, ...] = (
    ArgSpec("device", "device", "Int64"),
    ArgSpec("stream", "stream", "Int64"),
    ArgSpec("correlation", "correlation", "Int64"),
    ArgSpec("external_id", "External id", "Int64", aliases=("external id",)),
    ArgSpec("grid_x", "grid", "Int64", index=0),
    ArgSpec("grid_y", "grid", "Int64", index=1),
    ArgSpec("grid_z", "grid", "Int64", index=2),
    ArgSpec("block_x", "block", "Int64", index=0),
    ArgSpec("block_y", "block", "Int64", index=1),
    ArgSpec("block_z", "block", "Int64", index=2),
    ArgSpec("registers_per_thread", "registers per thread", "Int64"),
    ArgSpec("shared_mem_bytes", "shared memory", "Int64"),
    ArgSpec("blocks_per_sm", "blocks per SM", "float64"),
    ArgSpec("warps_per_sm", "warps per SM", "float64"),
    ArgSpec("est_occupancy_pct", "est. achieved occupancy %", "float64"),
)

_SPEC_COLUMNS = tuple(s.column for s in KERNEL_ARG_SPEC)
_GRID = ("grid_x", "grid_y", "grid_z")
_BLOCK = ("block_x", "block_y", "block_z")

#: Columns of :attr:`Trace.kernels`, in order.
KERNEL_COLUMNS: tuple[str, ...] = (
    "name",
    "ts_us",
    "dur_us",
    *_SPEC_COLUMNS[:10],  # device .. block_z
    "ctas",
    "threads_per_cta",
    *_SPEC_COLUMNS[10:],  # registers_per_thread .. est_occupancy_pct
    "launcher",
    "launch_ts_us",
    "launch_pid",
    "launch_tid",
    "graph_launched",
    "range",
    "range_instance",
)
#: Columns of :attr:`Trace.ranges`, in order.
RANGE_COLUMNS: tuple[str, ...] = ("name", "ts_us", "dur_us", "pid", "tid", "instance")
#: Columns of :attr:`Trace.ops`, in order.
OP_COLUMNS: tuple[str, ...] = (
    "name",
    "ts_us",
    "dur_us",
    "pid",
    "tid",
    "external_id",
    "input_dims",
    "input_types",
    "range",
)
#: dtypes of :func:`kernel_summary`'s columns, in column order.
_SUMMARY_DTYPES: dict[str, Any] = {
    "range": object,
    "calls": "int64",
    "kernels_per_call": "float64",
    "gpu_time_per_call_us": "float64",
    "ctas_per_call": "float64",
    "ctas_per_sm": "float64",
    "dominant_kernel": object,
    "dominant_share": "float64",
    "dominant_grid": object,
    "dominant_block": object,
    "dominant_registers": "Int64",
    "dominant_shared_mem_bytes": "Int64",
    "dominant_blocks_per_sm": "float64",
}
#: Columns of :func:`kernel_summary`'s result, in order.
SUMMARY_COLUMNS: tuple[str, ...] = tuple(_SUMMARY_DTYPES)


# ----------------------------------------------------------------------------------------------------
# The Trace
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Trace:
    """One parsed Kineto trace. Times are in µs (as in the file), sizes in bytes.

    Attributes:
        path: the file it was read from.
        metadata: the top-level keys except ``traceEvents`` (``schemaVersion``, ``deviceProperties``,
            ``distributedInfo``, ...); empty for a bare event list.
        device_properties: ``metadata["deviceProperties"]`` (one dict per GPU: ``id``, ``name``,
            ``numSms``, ``totalGlobalMem`` in bytes, ...); empty when absent (CPU-only, old schema).
        kernels: one row per GPU kernel event (``cat`` ``kernel``/``Kernel``) with a usable ``ts`` and
            ``dur``, sorted by ``ts_us``; columns :data:`KERNEL_COLUMNS`: ``name``, ``ts_us``,
            ``dur_us`` (float µs); ``device``, ``stream``, ``correlation``, ``external_id``,
            ``grid_x/y/z``, ``block_x/y/z``, ``ctas`` (grid product), ``threads_per_cta`` (block
            product), ``registers_per_thread``, ``shared_mem_bytes`` (nullable Int64, ``<NA>`` when the
            trace lacks them, e.g. AMD); ``blocks_per_sm``, ``warps_per_sm``, ``est_occupancy_pct``
            (float, Kineto's own figures); ``launcher`` (name of the CPU runtime/driver call with the
            same correlation, or None); ``graph_launched`` (bool, launcher in :data:`GRAPH_LAUNCHERS`);
            ``range`` (innermost ``user_annotation`` enclosing the launcher, or None) and
            ``range_instance`` (Int64: that range's ``instance``).
        ranges: CPU ``user_annotation`` events (``record_function`` ranges) with a usable ``ts`` and
            ``dur``; columns :data:`RANGE_COLUMNS`; ``instance`` numbers the ranges of one name 0, 1,
            2, ... in ``ts`` order.
        ops: CPU operator events (``cpu_op``/``Operator``); columns :data:`OP_COLUMNS`; ``dur_us`` is
            NaN when absent; ``input_dims``/``input_types`` are the ``Input Dims``/``Input type`` lists
            (None when not recorded); ``range`` is the innermost enclosing ``user_annotation`` on the
            same ``pid``/``tid``, or None.
    """

    path: str
    metadata: dict[str, Any]
    device_properties: tuple[dict[str, Any], ...]
    kernels: pd.DataFrame = field(repr=False)
    ranges: pd.DataFrame = field(repr=False)
    ops: pd.DataFrame = field(repr=False)

    @property
    def num_sms(self) -> int | None:
        """SM count (``numSms``) of the device the kernels ran on (the most common ``device`` among the
        kernels); the first listed device when that is unknown; None without ``deviceProperties``."""
        if not self.device_properties:
            return None
        chosen = self.device_properties[0]
        devices = self.kernels["device"].dropna()
        if not devices.empty:
            device = int(devices.mode().iloc[0])
            for props in self.device_properties:
                if _as_int(props.get("id")) == device:
                    chosen = props
                    break
        sms = _as_int(chosen.get("numSms"))
        return sms if sms is not None and sms > 0 else None

    @property
    def has_gpu_kernels(self) -> bool:
        """Whether the trace holds at least one (usable) GPU kernel event."""
        return not self.kernels.empty


# ----------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a Kineto Chrome trace (``.json`` or gzipped ``.json.gz``) into a :class:`Trace`.

    Gzip is detected by its magic bytes; a file named ``*.gz`` that is not gzip is an error. Events with
    a non-numeric or non-finite ``ts`` (or ``dur``, where one is needed) are skipped, as are kernels and
    ranges without ``dur``.

    Raises:
        TraceError: the file is missing or unreadable, a bad or truncated gzip stream, not UTF-8, not
            JSON, or not a trace (top level neither an object with ``traceEvents`` nor a list of events).
    """
    name = os.fspath(path)
    document = _read_json(name)
    metadata, events = _split_document(name, document)
    device_properties = _device_properties(metadata)

    kernel_rows: list[tuple[Any, ...]] = []
    launchers: dict[int, tuple[str, float, Any, Any]] = {}
    range_rows: list[tuple[Any, ...]] = []
    op_rows: list[tuple[Any, ...]] = []
    for event in events:
        if not isinstance(event, dict) or event.get("ph", "X") != "X":
            continue
        cat = event.get("cat")
        if not isinstance(cat, str):
            continue
        cat = cat.lower()
        if cat in _KERNEL_CATS:
            row = _kernel_row(event)
            if row is not None:
                kernel_rows.append(row)
        elif cat in _LAUNCHER_CATS:
            _add_launcher(event, launchers)
        elif cat in _RANGE_CATS:
            ts, dur = _as_time(event.get("ts")), _as_time(event.get("dur"))
            if ts is not None and dur is not None and dur >= 0:
                pid, tid = _thread_id(event.get("pid")), _thread_id(event.get("tid"))
                range_rows.append((_name(event), ts, dur, pid, tid))
        elif cat in _OP_CATS:
            row = _op_row(event)
            if row is not None:
                op_rows.append(row)

    ranges = _ranges_frame(range_rows)
    return Trace(
        path=name,
        metadata=metadata,
        device_properties=device_properties,
        kernels=_kernels_frame(kernel_rows, launchers, ranges),
        ranges=ranges,
        ops=_ops_frame(op_rows, ranges),
    )


def _read_json(name: str) -> Any:
    """The parsed JSON document of ``name`` (gunzipped if it starts with the gzip magic)."""
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise TraceError(f"{name}: no such trace file") from None
    except OSError as e:
        raise TraceError(f"{name}: cannot read trace file ({e.strerror or type(e).__name__})") from None

    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except EOFError:
            raise TraceError(f"{name}: gzip stream is truncated") from None
        except (OSError, zlib.error) as e:
            raise TraceError(f"{name}: bad gzip data ({_one_line(e)})") from None
    elif name.endswith(".gz"):
        raise TraceError(f"{name}: named .gz but is not gzip-compressed")

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceError(f"{name}: not valid UTF-8 (byte offset {e.start})") from None

    try:
        # Kineto may write NaN/Infinity (accepted by default, rejected per event later); huge integer
        # literals become floats so Python's int-string-length limit cannot trip.
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        if not text.strip():
            raise TraceError(f"{name}: file is empty") from None
        if e.pos >= len(text.rstrip()):
            raise TraceError(f"{name}: JSON ends early (truncated?) at line {e.lineno}") from None
        raise TraceError(f"{name}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise TraceError(f"{name}: JSON nested too deeply") from None


def _parse_int(literal: str) -> int | float:
    """JSON integer hook: exact ints up to 20 digits, a float beyond (``inf`` for absurd lengths)."""
    return int(literal) if len(literal) <= 20 else float(literal)


def _split_document(name: str, document: Any) -> tuple[dict[str, Any], list[Any]]:
    """(metadata, events) of a parsed trace document; TraceError unless it has the trace shape."""
    if isinstance(document, dict):
        if "traceEvents" not in document:
            raise TraceError(f"{name}: not a Chrome trace (no 'traceEvents' key)")
        events = document["traceEvents"]
        if not isinstance(events, list):
            raise TraceError(f"{name}: 'traceEvents' is a {type(events).__name__}, not a list")
        metadata = {k: v for k, v in document.items() if k != "traceEvents"}
    elif isinstance(document, list):
        events, metadata = document, {}
    else:
        raise TraceError(f"{name}: not a Chrome trace (top level is a JSON {type(document).__name__})")
    if events and not any(isinstance(e, dict) for e in events):
        raise TraceError(f"{name}: not a Chrome trace (events are not JSON objects)")
    return metadata, events


def _device_properties(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    props = metadata.get("deviceProperties")
    if not isinstance(props, list):
        return ()
    return tuple(p for p in props if isinstance(p, dict))


# ----------------------------------------------------------------------------------------------------
# Per-event value coercion (tolerant: an unusable value becomes None)
# ----------------------------------------------------------------------------------------------------


def _as_time(value: Any) -> float | None:
    """A finite JSON number as float, else None (strings, bools, NaN, inf, missing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


def _as_int(value: Any) -> int | None:
    """An integral JSON number that fits int64, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        return value
    return None


def _as_float(value: Any) -> float | None:
    """A JSON number as float (NaN if non-finite), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


_COERCE = {"Int64": _as_int, "float64": _as_float}


def _name(event: Mapping[str, Any]) -> str:
    name = event.get("name")
    return name if isinstance(name, str) else ("" if name is None else str(name))


def _thread_id(value: Any) -> int | str | None:
    """A ``pid``/``tid`` as written (int or string; Kineto uses strings for some tracks), else None."""
    if isinstance(value, str):
        return value
    return _as_int(value)


def _args(event: Mapping[str, Any]) -> Mapping[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _spec_value(args: Mapping[str, Any], spec: ArgSpec) -> Any:
    raw = args.get(spec.raw_key)
    for alias in spec.aliases:
        if raw is not None:
            break
        raw = args.get(alias)
    if spec.index is not None:
        raw = raw[spec.index] if isinstance(raw, list) and len(raw) > spec.index else None
    value = _COERCE[spec.dtype](raw)
    return spec.default if value is None else value


def _kernel_row(event: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """(name, ts, dur, *spec values) of a kernel event, or None if it lacks a usable ts/dur."""
    ts, dur = _as_time(event.get("ts")), _as_time(event.get("dur"))
    if ts is None or dur is None or dur < 0:
        return None
    args = _args(event)
    values = [_spec_value(args, spec) for spec in KERNEL_ARG_SPEC]
    return (_name(event), ts, dur, *values)


def _add_launcher(event: Mapping[str, Any], launchers: dict[int, tuple[str, float, Any, Any]]) -> None:
    """Index a runtime/driver event by its correlation id (first one wins)."""
    correlation = _as_int(_args(event).get("correlation"))
    ts = _as_time(event.get("ts"))
    if correlation is None or ts is None or correlation in launchers:
        return
    launchers[correlation] = (_name(event), ts, _thread_id(event.get("pid")), _thread_id(event.get("tid")))


def _op_row(event: Mapping[str, Any]) -> tuple[Any, ...] | None:
    ts = _as_time(event.get("ts"))
    if ts is None:
        return None
    dur = _as_time(event.get("dur"))
    args = _args(event)
    dims, types = args.get("Input Dims"), args.get("Input type")
    return (
        _name(event),
        ts,
        dur if dur is not None and dur >= 0 else math.nan,
        _thread_id(event.get("pid")),
        _thread_id(event.get("tid")),
        _as_int(args.get("External id", args.get("external id"))),
        dims if isinstance(dims, list) else None,
        types if isinstance(types, list) else None,
    )


# ----------------------------------------------------------------------------------------------------
# Frames
# ----------------------------------------------------------------------------------------------------


def _ranges_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(RANGE_COLUMNS[:-1]))
    frame = frame.astype({"name": object, "ts_us": "float64", "dur_us": "float64", "pid": object, "tid": object})
    frame = frame.sort_values(["ts_us", "dur_us"], ascending=[True, False], kind="stable", ignore_index=True)
    frame["instance"] = frame.groupby("name", sort=False).cumcount().astype("int64")
    return frame


def _ops_frame(rows: list[tuple[Any, ...]], ranges: pd.DataFrame) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(OP_COLUMNS[:-1]))
    frame = frame.astype(
        {"name": object, "ts_us": "float64", "dur_us": "float64", "pid": object, "tid": object, "external_id": "Int64"}
    )
    frame = frame.astype({"input_dims": object, "input_types": object})
    frame = frame.sort_values("ts_us", kind="stable", ignore_index=True)
    idx = _attribute(ranges, frame["pid"], frame["tid"], frame["ts_us"].to_numpy())
    frame["range"] = _take(ranges["name"], idx)
    return frame


def _kernels_frame(
    rows: list[tuple[Any, ...]],
    launchers: Mapping[int, tuple[str, float, Any, Any]],
    ranges: pd.DataFrame,
) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["name", "ts_us", "dur_us", *_SPEC_COLUMNS])
    frame = frame.astype(
        {"name": object, "ts_us": "float64", "dur_us": "float64", **{s.column: s.dtype for s in KERNEL_ARG_SPEC}}
    )
    frame = frame.sort_values("ts_us", kind="stable", ignore_index=True)
    frame["ctas"] = _product(frame, _GRID)
    frame["threads_per_cta"] = _product(frame, _BLOCK)

    launch = [launchers.get(c) if c is not pd.NA else None for c in frame["correlation"].tolist()]
    frame["launcher"] = pd.Series([x[0] if x else None for x in launch], index=frame.index, dtype=object)
    frame["launch_ts_us"] = np.array([x[1] if x else np.nan for x in launch], dtype="float64")
    frame["launch_pid"] = pd.Series([x[2] if x else None for x in launch], index=frame.index, dtype=object)
    frame["launch_tid"] = pd.Series([x[3] if x else None for x in launch], index=frame.index, dtype=object)
    frame["graph_launched"] = frame["launcher"].isin(GRAPH_LAUNCHERS).astype(bool)
    idx = _attribute(
        ranges,
        pd.Series([x[2] if x else None for x in launch], dtype=object),
        pd.Series([x[3] if x else None for x in launch], dtype=object),
        np.array([x[1] if x else np.nan for x in launch], dtype="float64"),
    )
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


def _attribute(ranges: pd.DataFrame, pid: pd.Series, tid: pd.Series, ts: np.ndarray) -> np.ndarray:
    """Innermost enclosing range on the same thread; failing that, on any thread of the same process.

    The fallback covers work that a range causes on another thread: autograd runs the backward of CUDA
    tensors on its own device thread, so the kernels of ``loss.backward()`` called inside
    ``record_function("cell")`` are launched from a thread that holds no user annotation. They are
    attributed to the range whose wall-clock window (same pid) contains their launch.
    """
    idx = _innermost_range(ranges, pid, tid, ts)
    miss = (idx < 0) & ~np.isnan(ts) & pid.notna().to_numpy()
    if miss.any() and len(ranges):
        any_thread = ranges.assign(tid="*")
        sub = _innermost_range(
            any_thread,
            pid[miss].reset_index(drop=True),
            pd.Series(["*"] * int(miss.sum()), dtype=object),
            ts[miss],
        )
        idx[miss] = sub
    return idx


def _innermost_range(ranges: pd.DataFrame, pid: pd.Series, tid: pd.Series, ts: np.ndarray) -> np.ndarray:
    """Row index in ``ranges`` of the innermost range enclosing each query point, -1 where none.

    Innermost is the latest-starting range (ties: the shorter) on the same ``pid``/``tid`` with
    ``ts_us <= t <= ts_us + dur_us``. Per thread: ``searchsorted`` finds the latest range starting at or
    before ``t``; where that one already ended, the answer is on its chain of parents (each range's
    parent is the latest-starting range containing its start), climbed for all points at once. The
    climb takes at most the nesting depth of iterations, so the cost is O((ranges + points) log ranges).
    """
    result = np.full(len(ts), -1, dtype=np.int64)
    if len(ranges) == 0 or len(ts) == 0:
        return result
    queries = pd.DataFrame({"pid": pid.to_numpy(dtype=object), "tid": tid.to_numpy(dtype=object), "ts": ts})
    queries = queries[queries["ts"].notna() & queries["pid"].notna() & queries["tid"].notna()]
    range_groups = ranges.groupby(["pid", "tid"], sort=False).indices
    for key, positions in queries.groupby(["pid", "tid"], sort=False).indices.items():
        rows = range_groups.get(key)
        if rows is None:
            continue
        rows = np.sort(rows)  # ranges are sorted by (ts, -dur), so row order is start order
        start = ranges["ts_us"].to_numpy()[rows]
        end = start + ranges["dur_us"].to_numpy()[rows]
        parent = _parents(start, end)
        t = queries["ts"].to_numpy()[positions]
        local = np.searchsorted(start, t, side="right") - 1
        pending = local >= 0
        pending[pending] = end[local[pending]] < t[pending]
        while pending.any():
            local[pending] = parent[local[pending]]
            pending &= local >= 0
            pending[pending] = end[local[pending]] < t[pending]
        found = local >= 0
        target = queries.index.to_numpy()[positions]
        result[target[found]] = rows[local[found]]
    return result


def _parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For ranges sorted by start, the index of each one's parent: the latest-starting earlier range
    that contains its start (-1 if none). A stack sweep, linear in the number of ranges."""
    parent = np.full(len(start), -1, dtype=np.int64)
    stack: list[int] = []
    for i in range(len(start)):
        while stack and end[stack[-1]] < start[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


# ----------------------------------------------------------------------------------------------------
# Selection by range name
# ----------------------------------------------------------------------------------------------------


def _within(ranges: pd.DataFrame, name: str, pid: pd.Series, ts: np.ndarray) -> np.ndarray:
    """For each point, the ``instance`` of the range called ``name`` (same pid, any thread, any nesting
    depth) whose window ``[ts_us, ts_us + dur_us]`` holds it; -1 where none does."""
    out = np.full(len(ts), -1, dtype=np.int64)
    mine = ranges[ranges["name"] == name]
    if not len(mine) or not len(ts):
        return out
    pids = pid.to_numpy(dtype=object)
    for rpid, group in mine.groupby("pid", sort=False):
        group = group.sort_values("ts_us")
        start = group["ts_us"].to_numpy()
        end = start + group["dur_us"].to_numpy()
        inst = group["instance"].to_numpy()
        sel = np.array([p == rpid for p in pids], dtype=bool) & ~np.isnan(ts)
        if not sel.any():
            continue
        j = np.searchsorted(start, ts[sel], side="right") - 1
        hit = (j >= 0) & (ts[sel] <= end[np.maximum(j, 0)])
        idx = np.flatnonzero(sel)
        out[idx[hit]] = inst[j[hit]]
    return out


def kernels_in_range(trace: Trace, name: str) -> pd.DataFrame:
    """Kernels launched inside any instance of the range ``name``, at any nesting depth and from any
    thread of the range's process (so kernels under an inner ``## Call CompiledFxGraph ##`` range, and
    backward kernels launched by autograd's device thread, count). Adds column ``call``: the instance.

    Assumes instances of one name do not overlap in time (true for profattn's cells; for overlapping
    instances the latest-starting one wins).
    """
    k = trace.kernels
    inst = _within(trace.ranges, name, k["launch_pid"], k["launch_ts_us"].to_numpy(dtype="float64"))
    out = k[inst >= 0].copy()
    out["call"] = inst[inst >= 0]
    return out


def ops_in_range(trace: Trace, name: str) -> pd.DataFrame:
    """CPU operators that start inside any instance of the range ``name`` (same rules as
    :func:`kernels_in_range`), with column ``call``."""
    o = trace.ops
    inst = _within(trace.ranges, name, o["pid"], o["ts_us"].to_numpy(dtype="float64"))
    out = o[inst >= 0].copy()
    out["call"] = inst[inst >= 0]
    return out


# ----------------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------------


def kernel_summary(trace: Trace) -> pd.DataFrame:
    """Per ``record_function`` range name, what one call of it launched on the GPU.

    One row per range name that has kernels attributed to it (columns :data:`SUMMARY_COLUMNS`), sorted
    by total GPU time, largest first:

    - ``calls``: instances of the range that launched at least one kernel;
    - ``kernels_per_call``, ``gpu_time_per_call_us`` (sum of kernel ``dur_us`` / calls, µs),
      ``ctas_per_call`` (sum of grid products / calls; NaN if any kernel's grid is unknown),
      ``ctas_per_sm`` (``ctas_per_call / num_sms``; NaN when the SM count is unknown);
    - ``dominant_kernel``: the kernel name with the most GPU time in the range, ``dominant_share`` its
      fraction (0..1) of the range's GPU time, and its most frequent launch shape: ``dominant_grid`` and
      ``dominant_block`` (``(x, y, z)`` tuples or None), ``dominant_registers`` (per thread),
      ``dominant_shared_mem_bytes``, ``dominant_blocks_per_sm`` (Kineto's figure).

    A trace without attributed kernels gives an empty frame with these columns.
    """
    kernels = trace.kernels[trace.kernels["range"].notna()]
    num_sms = trace.num_sms
    records = []
    for range_name, group in kernels.groupby("range", sort=False):
        calls = int(group["range_instance"].nunique())
        total_us = float(group["dur_us"].sum())
        ctas = group["ctas"]
        ctas_per_call = math.nan if ctas.isna().any() else float(ctas.sum()) / calls
        by_name = group.groupby("name", sort=False)["dur_us"].sum()
        dominant = str(by_name.idxmax())
        shape = _dominant_shape(group[group["name"] == dominant])
        records.append(
            {
                "range": range_name,
                "calls": calls,
                "kernels_per_call": len(group) / calls,
                "gpu_time_per_call_us": total_us / calls,
                "ctas_per_call": ctas_per_call,
                "ctas_per_sm": ctas_per_call / num_sms if num_sms else math.nan,
                "dominant_kernel": dominant,
                "dominant_share": float(by_name[dominant]) / total_us if total_us > 0 else math.nan,
                **shape,
                "_total_us": total_us,
            }
        )
    if not records:
        return _empty_summary()
    summary = pd.DataFrame.from_records(records)
    summary = summary.sort_values("_total_us", ascending=False, kind="stable", ignore_index=True)
    return summary[list(SUMMARY_COLUMNS)].astype(_SUMMARY_DTYPES)


def _dominant_shape(launches: pd.DataFrame) -> dict[str, Any]:
    """The most frequent launch shape among ``launches`` (ties: the earliest), as summary fields."""
    columns = (*_GRID, *_BLOCK, "registers_per_thread", "shared_mem_bytes")
    shapes = list(zip(*(_ints_or_none(launches[c]) for c in columns)))
    best, _ = Counter(shapes).most_common(1)[0]  # Counter keeps first-seen order among equal counts
    grid, block = best[0:3], best[3:6]
    return {
        "dominant_grid": grid if None not in grid else None,
        "dominant_block": block if None not in block else None,
        "dominant_registers": best[6],
        "dominant_shared_mem_bytes": best[7],
        "dominant_blocks_per_sm": float(launches["blocks_per_sm"].iloc[shapes.index(best)]),
    }


def _ints_or_none(column: pd.Series) -> list[int | None]:
    """An Int64 column as plain Python ints, None for <NA>."""
    return [None if v is pd.NA else int(v) for v in column.tolist()]


def _empty_summary() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_SUMMARY_DTYPES[c]) for c in SUMMARY_COLUMNS})


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
