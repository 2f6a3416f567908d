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
(``*_bytes``). Which kernel ``args`` are read is declared once, in :data:`KERNEL_ARG_SPEC`; together with
the ops' ``External id``/``Input Dims``/``Input type``/``Concrete Inputs`` they define the only fields
that are decoded (``_Event``): the file is streamed in batches (:mod:`profattn.trace.reader`) straight
into columns, and the JSON tree is never held whole.

Attribution: a kernel's ``args.correlation`` equals the ``args.correlation`` of the CPU runtime/driver
call that launched it; that call is attributed to the innermost ``user_annotation`` range enclosing its
start time on the same ``pid``/``tid`` (innermost = the latest-starting range that contains it).

Bad input raises :class:`~profattn.errors.TraceError` (a file that cannot be read as a trace); a trace
that simply holds no kernels gives empty DataFrames with the documented columns ("no data"); events
that cannot be used (no ``ts``/``dur``, ``"inf"`` or ``NaN`` where a number belongs, values beyond 64 bits,
kernels without ``args`` or without a launching runtime event, unknown categories, ...) are skipped or
read as missing and counted in :attr:`Trace.warnings`.

Example, the H200 flash-decode fixture (``shared/fixtures/traces``)::

    t = load_trace("h200_sdpa_decode_flash_gqa.pt.trace.json.gz")
    t.kernels[["range", "range_instance", "grid_x", "grid_y", "grid_z", "ctas", "launcher"]]
    #                     range  range_instance  grid_x  grid_y  grid_z  ctas          launcher
    # 0  decode_FLASH_ATTENTION               0       1       7      32   224  cudaLaunchKernel
    # 1  decode_FLASH_ATTENTION               0      32       1       1    32  cudaLaunchKernel
    # 2  decode_FLASH_ATTENTION               1       1       7      32   224  cudaLaunchKernel
    # ...
    kernels_in_range(t, "decode_FLASH_ATTENTION")["call"].tolist()   # [0, 0, 1, 1, 2, 2]

What one call of a profattn cell launched (per-call kernels, GPU time, launch shapes) is
:func:`profattn.analysis.cells.summarize_cell`, built on :func:`kernels_in_range`.
"""

from __future__ import annotations

import gc
import json
import math
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from profattn.trace.reader import Batch, TraceReader, parse_int
from profattn.trace.windows import IntervalIndex, group_keys

__all__ = [
    "GRAPH_LAUNCHERS",
    "KERNEL_ARG_SPEC",
    "KERNEL_COLUMNS",
    "OP_COLUMNS",
    "RANGE_COLUMNS",
    "ArgSpec",
    "Trace",
    "TraceWarning",
    "kernels_in_range",
    "load_trace",
    "ops_in_range",
]

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)

# Event categories, compared lower-cased so the old schema's ``Kernel``/``Runtime``/``Operator`` match.
_KERNEL_CATS = frozenset({"kernel"})
_LAUNCHER_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
_RANGE_CATS = frozenset({"user_annotation"})
_OP_CATS = frozenset({"cpu_op", "operator"})
#: Other categories Kineto writes (``ActivityType`` names in ``libkineto/src/ActivityType.cpp``, flow and
#: window events, the old schema's names); any category outside these and the four above is reported.
_KNOWN_CATS = frozenset({
    "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "external_correlation", "cpu_instant_event",
    "python_function", "overhead", "cuda_sync", "cuda_profiler_range", "glow_runtime", "hpu_op", "xpu_runtime",
    "xpu_driver", "mtia_runtime", "mtia_ccp_events", "mtia_insight", "collective_comm", "gpu_pm_counter",
    "privateuse1_runtime", "privateuse1_driver", "ac2g", "fwdbwd", "async_gpu", "trace", "memcpy", "memset",
    "python", "gpu_op",
})
_KERNEL, _LAUNCHER, _RANGE, _OP, _OTHER, _UNKNOWN = range(6)

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
    "concrete_inputs",
    "range",
)

# ----------------------------------------------------------------------------------------------------
# The Trace
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceWarning:
    """A recoverable oddity of one trace: ``code`` (stable, e.g. ``kernel_skipped``), ``count`` of events or
    values concerned, and a one-line ``message`` that says what was done about it."""

    code: str
    count: int
    message: str


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
            NaN when absent; ``input_dims``/``input_types``/``concrete_inputs`` are the ``Input Dims``/
            ``Input type``/``Concrete Inputs`` lists as recorded with ``record_shapes=True`` (None when
            not recorded; equal lists are one shared object: treat them as read-only); ``range`` is the
            innermost enclosing ``user_annotation`` on the same ``pid``/``tid``, or None.
        warnings: recoverable oddities met while reading (events skipped, values unusable, kernels without
            a launch event, ...), one :class:`TraceWarning` per kind.
        event_count: elements in ``traceEvents`` (0: the trace is empty).
    """

    path: str
    metadata: dict[str, Any]
    device_properties: tuple[dict[str, Any], ...]
    kernels: pd.DataFrame = field(repr=False)
    ranges: pd.DataFrame = field(repr=False)
    ops: pd.DataFrame = field(repr=False)
    warnings: tuple[TraceWarning, ...] = ()
    event_count: int = 0

    @property
    def device(self) -> dict[str, Any] | None:
        """The ``deviceProperties`` entry of the device the kernels ran on: the most common ``device``
        among the kernels (ties: the lowest id), matched to an entry's ``id`` as an integer; the first
        listed entry when no kernel names a device or none matches; None without ``deviceProperties``.
        The one device choice of profattn (:attr:`num_sms`, :attr:`device_name` and the analysis read it)."""
        if not self.device_properties:
            return None
        devices = self.kernels["device"].dropna()
        if not devices.empty:
            device = int(devices.mode().iloc[0])
            for props in self.device_properties:
                if _as_int(props.get("id")) == device:
                    return props
        return self.device_properties[0]

    @property
    def num_sms(self) -> int | None:
        """SM count (``numSms``) of :attr:`device`; None when unknown or not positive."""
        chosen = self.device
        sms = _as_int(chosen.get("numSms")) if chosen is not None else None
        return sms if sms is not None and sms > 0 else None

    @property
    def device_name(self) -> str | None:
        """``name`` of :attr:`device` (e.g. ``NVIDIA H200``); None when unknown."""
        chosen = self.device
        name = chosen.get("name") if chosen is not None else None
        return name if isinstance(name, str) else None

    @property
    def has_gpu_kernels(self) -> bool:
        """Whether the trace holds at least one (usable) GPU kernel event."""
        return not self.kernels.empty


# ----------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a Kineto Chrome trace (``.json`` or gzipped ``.json.gz``) into a :class:`Trace`.

    The file is read once, as a stream (:class:`~profattn.trace_reader.TraceReader`): only the fields the
    frames need are kept, in columns; the JSON tree is never held whole. Gzip is detected by its magic
    bytes; a file named ``*.gz`` that is not gzip is an error. Events with a non-numeric or non-finite
    ``ts`` (or ``dur``, where one is needed) are skipped, as are kernels and ranges without ``dur``; each
    kind of skip or unusable value is counted in :attr:`Trace.warnings`.

    Raises:
        TraceError: the file is missing or unreadable, a bad or truncated gzip stream, not UTF-8, not
            JSON, or not a trace (top level neither an object with ``traceEvents`` nor a list of events).
    """
    name = os.fspath(path)
    reader = TraceReader(name, _Event)
    columns = _Columns()
    collecting = gc.isenabled()
    gc.disable()  # millions of small containers: the cyclic collector would rescan them again and again
    try:
        for batch in reader.batches():
            columns.add(batch)
    finally:
        if collecting:
            gc.enable()
    metadata = reader.metadata
    device_properties = _device_properties(metadata)
    ranges = _ranges_frame(columns)
    kernels = _kernels_frame(columns, ranges)
    warnings = columns.warnings(reader.event_count)
    warnings += _kernel_warnings(kernels)
    return Trace(
        path=name,
        metadata=metadata,
        device_properties=device_properties,
        kernels=kernels,
        ranges=ranges,
        ops=_ops_frame(columns, ranges),
        warnings=tuple(warnings),
        event_count=reader.event_count,
    )


def _device_properties(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    props = metadata.get("deviceProperties")
    if not isinstance(props, list):
        return ()
    return tuple(p for p in props if isinstance(p, dict))


# ----------------------------------------------------------------------------------------------------
# What is decoded of each event
# ----------------------------------------------------------------------------------------------------

#: ``args`` keys whose values are kept as recorded (lists); decoded once per distinct value.
_RECORDED_KEYS = ("Input Dims", "Input type", "Concrete Inputs")
#: Every ``args`` key read: the kernel spec's keys and aliases, the launchers' and ops' keys.
_ARG_KEYS: tuple[str, ...] = tuple(dict.fromkeys(
    [key for spec in KERNEL_ARG_SPEC for key in (spec.raw_key, *spec.aliases)] + list(_RECORDED_KEYS)
))
_ARG_INDEX = {key: i for i, key in enumerate(_ARG_KEYS)}

def _arg_type(key: str) -> Any:
    """The JSON type an ``args`` value has in a well-formed trace (what the fast decode accepts)."""
    if key in _RECORDED_KEYS:
        return msgspec.Raw  # kept as JSON text, decoded once per distinct value
    spec = next(s for s in KERNEL_ARG_SPEC if key in (s.raw_key, *s.aliases))
    scalar = int if spec.dtype == "Int64" else float
    return (list[scalar] if spec.index is not None else scalar) | None  # type: ignore[valid-type]


_Args = msgspec.defstruct(
    "_Args", [(f"a{i}", _arg_type(key), msgspec.field(default=None, name=key)) for i, key in enumerate(_ARG_KEYS)]
)
#: The fields of one event that are decoded, with the JSON types a well-formed Kineto trace gives them.
#: msgspec skips every other field without building objects; a batch where any of these has another
#: type (a string ``ts``, a ``NaN``, an integer beyond 64 bits, ...) is decoded again without types.
_Event = msgspec.defstruct(
    "_Event",
    [("ph", str, "X"), ("cat", str | None, None), ("name", str | None, None), ("pid", int | str | None, None),
     ("tid", int | str | None, None), ("ts", float | None, None), ("dur", float | None, None),
     ("args", _Args | None, None)],  # type: ignore[operator]
)
#: Per kernel spec: (column, index of its key in the args tuple, alias indices, list element, coercion).
_KERNEL_PLAN = tuple(
    (spec.column, _ARG_INDEX[spec.raw_key], tuple(_ARG_INDEX[a] for a in spec.aliases), spec.index,
     {"Int64": "int", "float64": "float"}[spec.dtype])
    for spec in KERNEL_ARG_SPEC
)
_CORRELATION = _ARG_INDEX["correlation"]
_EXTERNAL_ID = (_ARG_INDEX["External id"], _ARG_INDEX["external id"])
_DIMS, _TYPES, _CONCRETE = (_ARG_INDEX[k] for k in _RECORDED_KEYS)
_NO_ARGS = (None,) * len(_ARG_KEYS)
_NA_INT = _INT64_MIN  # stands for <NA> in int64 columns while collecting (never a valid id or size)


def _time_problem(value: Any) -> str:
    """Why a ``ts``/``dur`` value is unusable (for warnings)."""
    if value is None:
        return "missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "not a number"
    return "not finite"


class _Columns:
    """The kept fields of every event, column by column, and counts of what was skipped and why."""

    def __init__(self) -> None:
        self.kinds: dict[Any, int] = {None: _OTHER}
        self.strings: dict[str, str] = {}
        self.threads: dict[Any, Any] = {}
        self.recorded: dict[bytes, list[Any] | None] = {}
        self.k_name: list[str] = []
        self.k_ts, self.k_dur = array("d"), array("d")
        self.k_args = {spec.column: array("d" if spec.dtype == "float64" else "q") for spec in KERNEL_ARG_SPEC}
        self.launchers: dict[int, tuple[str, float, Any, Any]] = {}
        self.r_name: list[str] = []
        self.r_ts, self.r_dur = array("d"), array("d")
        self.r_pid: list[Any] = []
        self.r_tid: list[Any] = []
        self.o_name: list[str] = []
        self.o_ts, self.o_dur = array("d"), array("d")
        self.o_pid: list[Any] = []
        self.o_tid: list[Any] = []
        self.o_ext = array("q")
        self.o_dims: list[Any] = []
        self.o_types: list[Any] = []
        self.o_concrete: list[Any] = []
        self.skipped: Counter[tuple[str, str]] = Counter()  # (event kind, reason)
        self.unknown_cats: Counter[str] = Counter()
        self.not_objects = 0
        self.kernels_without_args = 0
        self.bad_arg_values = 0
        self.launchers_repeated = 0

    # ---- one batch ---------------------------------------------------------------------------------

    def add(self, batch: Batch) -> None:
        if batch.typed:
            self._add_typed(batch.events)
            return
        for event in batch.events:
            if not isinstance(event, dict):
                self.not_objects += 1
                continue
            args = event.get("args")
            has_args = isinstance(args, dict)
            values = tuple(args.get(k) for k in _ARG_KEYS) if has_args else _NO_ARGS
            self._event(event.get("ph", "X"), event.get("cat"), event.get("name"), event.get("pid"), event.get("tid"),
                        event.get("ts"), event.get("dur"), values, not has_args)

    def _add_typed(self, events: list[Any]) -> None:
        """Events decoded with :data:`_Event`'s types; CPU ops (most events) take an inlined path, with
        the same results as :meth:`_event` for values of those types."""
        astuple = msgspec.structs.astuple
        kinds, strings, threads, recorded = self.kinds, self.strings, self.threads, self.recorded
        name_add, ts_add, dur_add = self.o_name.append, self.o_ts.append, self.o_dur.append
        pid_add, tid_add, ext_add = self.o_pid.append, self.o_tid.append, self.o_ext.append
        dims_add, types_add, concrete_add = self.o_dims.append, self.o_types.append, self.o_concrete.append
        nan, na_int, int64_max = math.nan, _NA_INT, _INT64_MAX
        for event in events:
            ph, cat, name, pid, tid, ts, dur, args = astuple(event)
            kind = kinds.get(cat)
            if kind is None:
                kind = self._kind(cat)
            if kind == _OTHER:
                continue
            if kind != _OP or ph != "X" or ts is None or args is None:
                self._event(ph, cat, name, pid, tid, ts, dur, _NO_ARGS if args is None else astuple(args), args is None)
                continue
            values = astuple(args)
            name_add(strings.get(name) or self._str(name))
            ts_add(ts)
            dur_add(dur if dur is not None and dur >= 0 else nan)
            thread = threads.get(pid)
            pid_add(thread if thread is not None else self._thread(pid))
            thread = threads.get(tid)
            tid_add(thread if thread is not None else self._thread(tid))
            ext = values[_EXTERNAL_ID[0]]
            if ext is None:
                ext = values[_EXTERNAL_ID[1]]
            ext_add(ext if ext is not None and ext <= int64_max else na_int)
            raw = values[_DIMS]
            dims_add(None if raw is None else recorded.get(bytes(raw)) or self._recorded(raw))
            raw = values[_TYPES]
            types_add(None if raw is None else recorded.get(bytes(raw)) or self._recorded(raw))
            raw = values[_CONCRETE]
            concrete_add(None if raw is None else recorded.get(bytes(raw)) or self._recorded(raw))

    def _kind(self, cat: Any) -> int:
        kind = self.kinds.get(cat) if isinstance(cat, str) else _OTHER
        if kind is None:
            low = cat.lower()
            kind = (_KERNEL if low in _KERNEL_CATS else _LAUNCHER if low in _LAUNCHER_CATS else _RANGE
                    if low in _RANGE_CATS else _OP if low in _OP_CATS else _OTHER if low in _KNOWN_CATS else _UNKNOWN)
            self.kinds[cat] = kind
        return kind

    def _event(self, ph: Any, cat: Any, name: Any, pid: Any, tid: Any, ts: Any, dur: Any,
               args: Sequence[Any], no_args: bool) -> None:
        kind = self._kind(cat)
        if kind == _UNKNOWN:
            self.unknown_cats[cat] += 1
            return
        if ph != "X" or kind == _OTHER:
            return
        if kind == _KERNEL:
            self._kernel(name, ts, dur, args, no_args)
        elif kind == _LAUNCHER:
            correlation, t = _as_int(args[_CORRELATION]), _as_time(ts)
            if correlation is None or t is None:
                self.skipped["runtime/driver", "no usable correlation" if t is not None else f"ts {_time_problem(ts)}"] += 1
            elif correlation in self.launchers:
                self.launchers_repeated += 1
            else:
                self.launchers[correlation] = (self._str(name), t, self._thread(pid), self._thread(tid))
        elif kind == _RANGE:
            t, d = _as_time(ts), _as_time(dur)
            if t is None or d is None or d < 0:
                self.skipped["user_annotation", self._why(ts, t, dur, d)] += 1
                return
            self.r_name.append(self._str(name))
            self.r_ts.append(t)
            self.r_dur.append(d)
            self.r_pid.append(self._thread(pid))
            self.r_tid.append(self._thread(tid))
        else:
            self._op(name, ts, dur, pid, tid, args)

    @staticmethod
    def _why(ts: Any, t: float | None, dur: Any, d: float | None) -> str:
        if t is None:
            return f"ts {_time_problem(ts)}"
        return "negative dur" if d is not None else f"dur {_time_problem(dur)}"

    def _kernel(self, name: Any, ts: Any, dur: Any, args: Sequence[Any], no_args: bool) -> None:
        t, d = _as_time(ts), _as_time(dur)
        if t is None or d is None or d < 0:
            self.skipped["kernel", self._why(ts, t, dur, d)] += 1
            return
        self.k_name.append(self._str(name))
        self.k_ts.append(t)
        self.k_dur.append(d)
        if no_args:
            self.kernels_without_args += 1
        k_args = self.k_args
        for column, key, aliases, index, kind in _KERNEL_PLAN:
            raw = args[key]
            for alias in aliases:
                if raw is not None:
                    break
                raw = args[alias]
            if index is not None:
                raw = raw[index] if type(raw) is list and len(raw) > index else None
            if kind == "int":
                value = raw if type(raw) is int and _INT64_MIN < raw <= _INT64_MAX else _as_int(raw)
                if value is None or value == _NA_INT:
                    self.bad_arg_values += raw is not None
                    value = _NA_INT
            else:
                value = raw if type(raw) is float else _as_float(raw)
                if value is None:
                    self.bad_arg_values += raw is not None
                    value = math.nan
            k_args[column].append(value)

    def _op(self, name: Any, ts: Any, dur: Any, pid: Any, tid: Any, args: Sequence[Any]) -> None:
        t = _as_time(ts)
        if t is None:
            self.skipped["cpu_op", f"ts {_time_problem(ts)}"] += 1
            return
        d = _as_time(dur)
        self.o_name.append(self._str(name))
        self.o_ts.append(t)
        self.o_dur.append(d if d is not None and d >= 0 else math.nan)
        self.o_pid.append(self._thread(pid))
        self.o_tid.append(self._thread(tid))
        ext = _as_int(args[_EXTERNAL_ID[0]])
        if ext is None:
            ext = _as_int(args[_EXTERNAL_ID[1]])
        self.o_ext.append(_NA_INT if ext is None else ext)
        self.o_dims.append(self._recorded(args[_DIMS]))
        self.o_types.append(self._recorded(args[_TYPES]))
        self.o_concrete.append(self._recorded(args[_CONCRETE]))

    def _str(self, value: Any) -> str:
        """An event name, one shared object per distinct name."""
        if not isinstance(value, str):
            value = "" if value is None else str(value)
        return self.strings.setdefault(value, value)

    def _thread(self, value: Any) -> int | str | None:
        """A ``pid``/``tid`` as written (int or string; Kineto uses strings for some tracks), else None;
        one shared object per distinct value."""
        result = value if isinstance(value, str) else _as_int(value)
        if result is not None:
            result = self.threads.setdefault(result, result)
        return result

    def _recorded(self, value: Any) -> list[Any] | None:
        """A recorded list (``Input Dims``, ...): one shared, decoded object per distinct JSON text."""
        if value is None:
            return None
        if not isinstance(value, msgspec.Raw):
            return value if isinstance(value, list) else None
        key = bytes(value)
        try:
            return self.recorded[key]
        except KeyError:
            pass
        try:
            decoded = msgspec.json.decode(key)
        except msgspec.DecodeError:
            decoded = json.loads(key, parse_int=parse_int)
        result = decoded if isinstance(decoded, list) else None
        self.recorded[key] = result
        return result

    # ---- warnings ----------------------------------------------------------------------------------

    def warnings(self, event_count: int) -> list[TraceWarning]:
        out = []
        if self.not_objects:
            out.append(TraceWarning("not_an_object", self.not_objects,
                                    f"{self.not_objects} of {event_count} elements of traceEvents are not JSON objects: skipped"))
        by_kind: dict[str, Counter[str]] = {}
        for (kind, reason), n in self.skipped.items():
            by_kind.setdefault(kind, Counter())[reason] += n
        what = {"kernel": "kernel events (GPU time and launch shapes leave them out)",
                "user_annotation": "user_annotation ranges (nothing is attributed to them)",
                "cpu_op": "CPU op events", "runtime/driver": "runtime/driver events (their kernels have no launcher)"}
        for kind, reasons in by_kind.items():
            total = sum(reasons.values())
            detail = ", ".join(f"{reason} ({n})" for reason, n in reasons.most_common())
            code = {"kernel": "kernel_skipped", "user_annotation": "range_skipped", "cpu_op": "op_skipped"}.get(kind, "launcher_skipped")
            out.append(TraceWarning(code, total, f"{total} {what[kind]} skipped: {detail}"))
        if self.kernels_without_args:
            n = self.kernels_without_args
            out.append(TraceWarning("kernel_without_args", n, f"{n} kernel event(s) have no args: launch shape, stream "
                                    "and correlation unknown"))
        if self.bad_arg_values:
            n = self.bad_arg_values
            out.append(TraceWarning("bad_kernel_arg", n, f"{n} kernel args value(s) unusable (not a number, not an "
                                    "integer, beyond 64 bits, or a list too short) read as missing"))
        if self.launchers_repeated:
            n = self.launchers_repeated
            out.append(TraceWarning("repeated_correlation", n, f"{n} runtime/driver event(s) repeat an earlier "
                                    "correlation id: the first one launches the kernels"))
        if self.unknown_cats:
            n = sum(self.unknown_cats.values())
            shown = ", ".join(f"{str(c)[:40]!r} ({k})" for c, k in self.unknown_cats.most_common(5))
            more = f" and {len(self.unknown_cats) - 5} more" if len(self.unknown_cats) > 5 else ""
            out.append(TraceWarning("unknown_category", n, f"{n} event(s) of unknown categories ignored: {shown}{more}"))
        return out


def _kernel_warnings(kernels: pd.DataFrame) -> list[TraceWarning]:
    """Warnings that need the kernel frame: kernels without a launch event, repeated kernel events."""
    out = []
    if kernels.empty:
        return out
    orphans = int(kernels["launcher"].isna().sum())
    if orphans == len(kernels):
        out.append(TraceWarning("kernel_without_launch", orphans, "no kernel has a launching runtime/driver event "
                                "(no cuda_runtime/cuda_driver events with their correlation id): kernels are attributed "
                                "to ops by External id only, and to no record_function range"))
    elif orphans:
        out.append(TraceWarning("kernel_without_launch", orphans, f"{orphans} of {len(kernels)} kernels have no "
                                "launching runtime/driver event with their correlation id: attributed by External id "
                                "only"))
    repeated = int(kernels.duplicated(["name", "ts_us", "dur_us", "correlation", "device", "stream"]).sum())
    if repeated:
        out.append(TraceWarning("repeated_kernel", repeated, f"{repeated} kernel event(s) repeat another one exactly "
                                "(name, start, duration, correlation, stream): counted each time they appear"))
    return out


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


# ----------------------------------------------------------------------------------------------------
# Frames
# ----------------------------------------------------------------------------------------------------


def _floats(values: array) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def _ints(values: array) -> pd.arrays.IntegerArray:
    """A collected int64 column as nullable Int64 (the sentinel :data:`_NA_INT` becomes <NA>)."""
    data = np.array(values, dtype=np.int64)
    return pd.arrays.IntegerArray(data, data == _NA_INT)


def _objects(values: list[Any]) -> pd.Series:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return pd.Series(out, dtype=object)


def _ranges_frame(columns: _Columns) -> pd.DataFrame:
    frame = pd.DataFrame({
        "name": _objects(columns.r_name), "ts_us": _floats(columns.r_ts), "dur_us": _floats(columns.r_dur),
        "pid": _objects(columns.r_pid), "tid": _objects(columns.r_tid),
    })
    frame = frame.sort_values(["ts_us", "dur_us"], ascending=[True, False], kind="stable", ignore_index=True)
    frame["instance"] = frame.groupby("name", sort=False).cumcount().astype("int64")
    return frame


def _ops_frame(columns: _Columns, ranges: pd.DataFrame) -> pd.DataFrame:
    frame = pd.DataFrame({
        "name": _objects(columns.o_name), "ts_us": _floats(columns.o_ts), "dur_us": _floats(columns.o_dur),
        "pid": _objects(columns.o_pid), "tid": _objects(columns.o_tid), "external_id": _ints(columns.o_ext),
        "input_dims": _objects(columns.o_dims), "input_types": _objects(columns.o_types),
        "concrete_inputs": _objects(columns.o_concrete),
    })
    frame = frame.sort_values("ts_us", kind="stable", ignore_index=True)
    idx = _attribute(ranges, frame["pid"], frame["tid"], frame["ts_us"].to_numpy())
    frame["range"] = _take(ranges["name"], idx)
    return frame


def _kernels_frame(columns: _Columns, ranges: pd.DataFrame) -> pd.DataFrame:
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
    idx = _attribute(ranges, frame["launch_pid"], frame["launch_tid"], launch_ts)
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


# ----------------------------------------------------------------------------------------------------
# Selection by range name
# ----------------------------------------------------------------------------------------------------


def _within(ranges: pd.DataFrame, name: str, pid: pd.Series, ts: np.ndarray) -> np.ndarray:
    """For each point, the ``instance`` of the innermost range called ``name`` (same pid, any thread, any
    nesting depth) whose window ``[ts_us, ts_us + dur_us]`` holds it; -1 where none does."""
    mine = ranges[ranges["name"] == name]
    if not len(mine) or not len(ts):
        return np.full(len(ts), -1, dtype=np.int64)
    start = mine["ts_us"].to_numpy(dtype="float64")
    index = IntervalIndex(start, start + mine["dur_us"].to_numpy(dtype="float64"), group_keys(mine["pid"]))
    row = index.innermost(group_keys(pid), ts)
    return np.where(row >= 0, mine["instance"].to_numpy(dtype=np.int64)[np.maximum(row, 0)], -1)


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
