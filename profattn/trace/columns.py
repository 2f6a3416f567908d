"""What :func:`profattn.trace.kineto.load_trace` decodes of each Kineto event, the columns it collects
them into, (the DataFrames built from them: :mod:`profattn.trace.frames`).

The event categories read, the kernel ``args`` spec (:data:`KERNEL_ARG_SPEC`), the frames' columns
(:data:`KERNEL_COLUMNS`, :data:`RANGE_COLUMNS`, :data:`OP_COLUMNS`) and the recoverable oddities
(:class:`TraceWarning`) are declared here, once. Units: µs and bytes, as in
:mod:`profattn.trace.kineto`. Torch-free.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from profattn.trace.reader import Batch, parse_int
from profattn.values import MAX_DURATION_US, MAX_INT, MIN_INT, safe_text

if TYPE_CHECKING:  # the kernel frame is built in frames.py: importing pandas here would load it for every reader
    import pandas as pd

__all__ = [
    "EVENT_FIELDS",
    "ACCELERATOR_CATS",
    "CAPTURE_COLUMNS",
    "CAPTURE_LAUNCH_COLUMNS",
    "GRAPH_CAPTURE_BEGIN",
    "GRAPH_CAPTURE_END",
    "GRAPH_LAUNCHERS",
    "KERNEL_LAUNCH_CALLS",
    "WORK_SIZE_LAUNCHES",
    "KERNEL_ARG_SPEC",
    "MAX_NAME_CHARS",
    "NA_INT",
    "KERNEL_COLUMNS",
    "OP_COLUMNS",
    "RANGE_COLUMNS",
    "ArgSpec",
    "EventColumns",
    "TraceWarning",
    "as_int",
    "kernel_warnings",
]

_INT64_MAX = MAX_INT
_INT64_MIN = MIN_INT
#: Largest magnitude of an integer kept in a recorded list (``Input Dims``, ...): beyond it, None.
_RECORDED_INT_LIMIT = 2**64
#: Largest ``ts`` read, µs (1e17 µs: year 5138 of the Unix epoch Kineto counts from); a larger one is unusable.
MAX_TS_US = 1e17

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
#: Device-side events of accelerators other than CUDA/ROCm GPUs, by category: which accelerator they are
#: (Kineto's ``MTIA_CCP_EVENTS``, "MTIA on-device CCP events", and ``MTIA_INSIGHT``). They are counted
#: and named in :attr:`Trace.warnings`; profattn's kernel analysis reads ``kernel`` events only.
ACCELERATOR_CATS: dict[str, str] = {"mtia_ccp_events": "MTIA", "mtia_insight": "MTIA"}
_KERNEL, _LAUNCHER, _RANGE, _OP, _OTHER, _UNKNOWN, _DEVICE, _BAD_CAT = range(8)
#: Longest event name kept (characters): a longer one is cut to this length (and counted in the
#: warnings), so every later step over names (family patterns, stems, scrubbing, the page) is bounded.
#: Real kernel names (CUTLASS/CuTe templates) reach a few thousand characters.
MAX_NAME_CHARS = 65_536

#: Runtime/driver calls that launch a captured CUDA (or HIP) graph rather than a single kernel.
GRAPH_LAUNCHERS: frozenset[str] = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
#: Runtime/driver calls that begin and end a stream capture into a CUDA (HIP) graph, as Kineto names them (CUPTI's
#: callback names without their ``_vNNNN`` suffix, ``libkineto/src/cupti_strings.cpp``; rocprofiler's HIP names).
#: While a stream captures, the kernel launches issued on it create graph nodes instead of running.
GRAPH_CAPTURE_BEGIN: frozenset[str] = frozenset({
    "cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture", "cuStreamBeginCapture_v2",
    "cuStreamBeginCaptureToGraph", "hipStreamBeginCapture", "hipStreamBeginCaptureToGraph",
})
GRAPH_CAPTURE_END: frozenset[str] = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
#: Runtime/driver calls that launch one kernel (during a capture: create one kernel node). Memory copies and sets
#: create memcpy/memset nodes, which replay as ``gpu_memcpy``/``gpu_memset`` events, not kernels.
KERNEL_LAUNCH_CALLS: frozenset[str] = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel",
    "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel", "hipLaunchCooperativeKernel",
    "hipModuleLaunchCooperativeKernel",
})


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
    # CUDA graph identity of a replayed kernel (CUPTI ``CUpti_ActivityKernel9.graphId``/``graphNodeId``, written by
    # Kineto since pytorch/kineto#1276 on CUDA >= 12 builds; 0 or absent for a kernel not launched by a graph).
    # ``graph node id`` packs the graph id in its upper 32 bits and the node's id in that graph in the lower 32
    # (torch.cuda._graph_annotations._rekey_annotations); the instantiated graph keeps the captured nodes' ids.
    ArgSpec("graph_id", "graph id", "Int64"),
    ArgSpec("graph_node_id", "graph node id", "Int64"),
)

_SPEC_COLUMNS = tuple(s.column for s in KERNEL_ARG_SPEC)

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
#: Columns of :attr:`Trace.captures` (one row per stream capture into a graph), in order.
CAPTURE_COLUMNS: tuple[str, ...] = (
    "capture", "begin_ts_us", "end_ts_us", "pid", "tid", "begin_call", "launches", "range",
)
#: Columns of :attr:`Trace.capture_launches` (the kernel launches issued during a capture), in order.
CAPTURE_LAUNCH_COLUMNS: tuple[str, ...] = (
    "capture", "position", "call", "kernel", "ts_us", "pid", "tid", "correlation",
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_mem_bytes",
)
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


@dataclass(frozen=True)
class TraceWarning:
    """A recoverable oddity of one trace: ``code`` (stable, e.g. ``kernel_skipped``), ``count`` of events or
    values concerned, and a one-line ``message`` that says what was done about it."""

    code: str
    count: int
    message: str


# ----------------------------------------------------------------------------------------------------
# What is decoded of each event
# ----------------------------------------------------------------------------------------------------

#: ``args`` keys whose values are kept as recorded (lists); decoded once per distinct value.
_RECORDED_KEYS = ("Input Dims", "Input type", "Concrete Inputs")
#: The kernel a ROCm runtime launch event names (Kineto's ``RocmMetadataFields::kKernel``,
#: ``libkineto/src/RocprofActivity_inl.h``; the same event records ``grid``, ``block`` and ``shared memory``).
#: CUDA runtime events record only ``cbid`` and ``correlation``.
_LAUNCH_KERNEL_KEY = "kernel"
#: Every ``args`` key read: the kernel spec's keys and aliases, the launchers' and ops' keys.
_ARG_KEYS: tuple[str, ...] = tuple(dict.fromkeys(
    [key for spec in KERNEL_ARG_SPEC for key in (spec.raw_key, *spec.aliases)] + list(_RECORDED_KEYS)
    + [_LAUNCH_KERNEL_KEY]
))
_ARG_INDEX = {key: i for i, key in enumerate(_ARG_KEYS)}

def _arg_type(key: str) -> Any:
    """The JSON type an ``args`` value has in a well-formed trace (what the fast decode accepts)."""
    if key in _RECORDED_KEYS:
        return msgspec.Raw  # kept as JSON text, decoded once per distinct value
    if key == _LAUNCH_KERNEL_KEY:
        return str | None
    spec = next(s for s in KERNEL_ARG_SPEC if key in (s.raw_key, *s.aliases))
    scalar = int if spec.dtype == "Int64" else float
    return (list[scalar] if spec.index is not None else scalar) | None  # type: ignore[valid-type]


_Args = msgspec.defstruct(
    "_Args", [(f"a{i}", _arg_type(key), msgspec.field(default=None, name=key)) for i, key in enumerate(_ARG_KEYS)]
)
#: The fields of one event that are decoded, with the JSON types a well-formed Kineto trace gives them.
#: msgspec skips every other field without building objects; a batch where any of these has another
#: type (a string ``ts``, a ``NaN``, an integer beyond 64 bits, ...) is decoded again without types.
EVENT_FIELDS = _Event = msgspec.defstruct(
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
_LAUNCH_DETAIL = (_ARG_INDEX[_LAUNCH_KERNEL_KEY], _ARG_INDEX["grid"], _ARG_INDEX["block"], _ARG_INDEX["shared memory"])
#: HIP launch calls whose ``grid`` Kineto records as the *global work size* in threads (their arguments
#: ``globalWorkSizeX..Z`` / ``localWorkSizeX..Z``: ``libkineto/src/RocprofLogger.cpp``), not in blocks.
WORK_SIZE_LAUNCHES = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})
_EXTERNAL_ID = (_ARG_INDEX["External id"], _ARG_INDEX["external id"])
_DIMS, _TYPES, _CONCRETE = (_ARG_INDEX[k] for k in _RECORDED_KEYS)
_NO_ARGS = (None,) * len(_ARG_KEYS)
#: Stands for <NA> in the int64 columns of :class:`EventColumns` (never a valid id or size).
NA_INT = _INT64_MIN


def _time_problem(value: Any, limit: float = MAX_TS_US) -> str:
    """Why a ``ts``/``dur`` value is unusable (for warnings)."""
    if value is None:
        return "missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "not a number"
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond float range
        finite = False
    return f"beyond {limit:g} µs" if finite else "not finite"


class EventColumns:
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
        #: correlation -> (kernel name, grid, block, shared memory bytes) for the launch events that record them
        #: (ROCm's runtime events; CUDA's record none, so this stays empty there).
        self.launch_details: dict[int, tuple[str | None, tuple[int, int, int] | None, tuple[int, int, int] | None,
                                             int | None]] = {}
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
        self.bad_cats: Counter[str] = Counter()  # JSON type of a non-string ``cat`` -> events
        self.device_events: Counter[str] = Counter()  # accelerator category -> events
        self.long_names = 0
        self.bad_launch_dims: Counter[str] = Counter()  # "grid"/"block" -> kernels where it is not [x, y, z]
        self.not_objects = 0
        self.kernels_without_args = 0
        self.bad_arg_values = 0
        self.launchers_repeated = 0
        self.surrogates = 0  # unpaired UTF-16 surrogates replaced in names, recorded inputs, thread names
        self.recorded_unusable = 0  # numbers of Input Dims / Concrete Inputs beyond 64 bits or not finite
        self.op_durations_unusable: Counter[str] = Counter()  # CPU op ``dur`` read as unknown, by reason

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
        nan, na_int, int64_max = math.nan, NA_INT, _INT64_MAX
        for event in events:
            ph, cat, name, pid, tid, ts, dur, args = astuple(event)
            kind = kinds.get(cat)
            if kind is None:
                kind = self._kind(cat)
            if kind == _OTHER:
                continue
            if (kind != _OP or ph != "X" or ts is None or args is None or not -MAX_TS_US <= ts <= MAX_TS_US
                    or (dur is not None and not 0 <= dur <= MAX_DURATION_US)):
                self._event(ph, cat, name, pid, tid, ts, dur, _NO_ARGS if args is None else astuple(args), args is None)
                continue
            values = astuple(args)
            name_add(strings.get(name) or self._str(name))
            ts_add(ts)
            dur_add(nan if dur is None else dur)
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
        if not isinstance(cat, str):
            return _OTHER if cat is None else _BAD_CAT
        kind = self.kinds.get(cat)
        if kind is None:
            low = cat.lower()
            kind = (_KERNEL if low in _KERNEL_CATS else _LAUNCHER if low in _LAUNCHER_CATS else _RANGE
                    if low in _RANGE_CATS else _OP if low in _OP_CATS else _DEVICE if low in ACCELERATOR_CATS
                    else _OTHER if low in _KNOWN_CATS else _UNKNOWN)
            self.kinds[cat] = kind
        return kind

    def _event(self, ph: Any, cat: Any, name: Any, pid: Any, tid: Any, ts: Any, dur: Any,
               args: Sequence[Any], no_args: bool) -> None:
        kind = self._kind(cat)
        if kind == _UNKNOWN:
            self.unknown_cats[cat] += 1
            return
        if kind == _BAD_CAT:
            self.bad_cats[type(cat).__name__ if not isinstance(cat, (int, float)) or isinstance(cat, bool)
                          else "number"] += 1
            return
        if kind == _DEVICE:
            self.device_events[cat.lower()] += 1
            return
        if ph != "X" or kind == _OTHER:
            return
        if kind == _KERNEL:
            self._kernel(name, ts, dur, args, no_args)
        elif kind == _LAUNCHER:
            correlation, t = as_int(args[_CORRELATION]), _as_time(ts, MAX_TS_US)
            if correlation is None or t is None:
                self.skipped["runtime/driver", "no usable correlation" if t is not None else f"ts {_time_problem(ts)}"] += 1
            elif correlation in self.launchers:
                self.launchers_repeated += 1
            else:
                self.launchers[correlation] = (self._str(name), t, self._thread(pid), self._thread(tid))
                kernel_name, grid, block, smem = (args[i] for i in _LAUNCH_DETAIL)
                if kernel_name is not None or grid is not None:
                    self._launch_detail(correlation, kernel_name, grid, block, smem, name in WORK_SIZE_LAUNCHES)
        elif kind == _RANGE:
            t, d = _as_time(ts, MAX_TS_US), _as_time(dur, MAX_DURATION_US)
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
        return "negative dur" if d is not None else f"dur {_time_problem(dur, MAX_DURATION_US)}"

    def _kernel(self, name: Any, ts: Any, dur: Any, args: Sequence[Any], no_args: bool) -> None:
        t, d = _as_time(ts, MAX_TS_US), _as_time(dur, MAX_DURATION_US)
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
            given = raw is not None
            if index is not None:  # grid/block: [x, y, z]; an object ({"x": 1}) or a short list is unusable
                if type(raw) is list and len(raw) > index:
                    raw = raw[index]
                else:
                    if given and (len(raw) if type(raw) is list else 0) == index:  # once per event and key
                        self.bad_launch_dims[_ARG_KEYS[key]] += 1
                    raw, given = None, False
            if kind == "int":
                value = raw if type(raw) is int and _INT64_MIN < raw <= _INT64_MAX else as_int(raw)
                if value is None or value == NA_INT:
                    self.bad_arg_values += given
                    value = NA_INT
            else:
                value = raw if type(raw) is float else _as_float(raw)
                if value is None:
                    self.bad_arg_values += given
                    value = math.nan
            k_args[column].append(value)

    def _launch_detail(self, correlation: int, kernel_name: Any, grid: Any, block: Any, smem: Any,
                       work_size: bool) -> None:
        """Keep what a launch event records of its kernel (ROCm): a usable value of each, else None; a grid recorded
        as global work size (``work_size``: :data:`WORK_SIZE_LAUNCHES`) converted to blocks, ``⌈global / local⌉``."""
        def triple(value: Any) -> tuple[int, int, int] | None:
            if type(value) is not list or len(value) != 3:
                return None
            parts = [as_int(v) for v in value]
            return None if any(p is None or p < 0 for p in parts) else (parts[0], parts[1], parts[2])  # type: ignore[return-value]

        size = as_int(smem)
        g, b = triple(grid), triple(block)
        if work_size and g is not None:
            g = None if b is None or 0 in b else (-(-g[0] // b[0]), -(-g[1] // b[1]), -(-g[2] // b[2]))
        self.launch_details[correlation] = (
            self._str(kernel_name) if isinstance(kernel_name, str) and kernel_name else None,
            g, b, size if size is not None and size >= 0 else None,
        )

    def _op(self, name: Any, ts: Any, dur: Any, pid: Any, tid: Any, args: Sequence[Any]) -> None:
        t = _as_time(ts, MAX_TS_US)
        if t is None:
            self.skipped["cpu_op", f"ts {_time_problem(ts)}"] += 1
            return
        d = _as_time(dur, MAX_DURATION_US)
        if dur is not None and (d is None or d < 0):
            self.op_durations_unusable[_time_problem(dur, MAX_DURATION_US) if d is None else "negative"] += 1
        self.o_name.append(self._str(name))
        self.o_ts.append(t)
        self.o_dur.append(d if d is not None and d >= 0 else math.nan)
        self.o_pid.append(self._thread(pid))
        self.o_tid.append(self._thread(tid))
        ext = as_int(args[_EXTERNAL_ID[0]])
        if ext is None:
            ext = as_int(args[_EXTERNAL_ID[1]])
        self.o_ext.append(NA_INT if ext is None else ext)
        self.o_dims.append(self._recorded(args[_DIMS]))
        self.o_types.append(self._recorded(args[_TYPES]))
        self.o_concrete.append(self._recorded(args[_CONCRETE]))

    def _str(self, value: Any) -> str:
        """An event name, one shared object per distinct name, cut to :data:`MAX_NAME_CHARS`."""
        if not isinstance(value, str):
            value = "" if value is None else str(value)
        kept = self.strings.get(value)
        if kept is None:
            kept, replaced = safe_text(value)
            self.surrogates += replaced
            if len(kept) > MAX_NAME_CHARS:
                self.long_names += 1
                kept = kept[:MAX_NAME_CHARS]
            self.strings[value] = kept
        return kept

    def _thread(self, value: Any) -> int | str | None:
        """A ``pid``/``tid`` as written (int or string; Kineto uses strings for some tracks), else None;
        one shared object per distinct value."""
        result = self._str(value) if isinstance(value, str) else as_int(value)
        if result is not None:
            result = self.threads.setdefault(result, result)
        return result

    def _recorded(self, value: Any) -> list[Any] | None:
        """A recorded list (``Input Dims``, ...): one shared, decoded object per distinct JSON text."""
        if value is None:
            return None
        if not isinstance(value, msgspec.Raw):  # a batch decoded without types (stdlib json): values as parsed
            return self._usable(value) if isinstance(value, list) else None
        key = bytes(value)
        try:
            return self.recorded[key]
        except KeyError:
            pass
        try:
            decoded = msgspec.json.decode(key)
        except msgspec.DecodeError:  # NaN literals, unpaired surrogates (which msgspec refuses), ...
            try:
                decoded = json.loads(key, parse_int=parse_int)
            except (ValueError, RecursionError):
                decoded = None
        result = self._usable(decoded) if isinstance(decoded, list) else None
        self.recorded[key] = result
        return result

    def _usable(self, value: Any, depth: int = 0) -> Any:
        """A recorded value with every number usable — an integer beyond ±2**64 (a dimension read as such is
        unknown, with its value in the analysis' warning: :data:`profattn.analysis.calls.call_shapes.SHAPE_LIMITS`) or a
        non-finite float becomes None (counted) — and every string safe for UTF-8 output (:func:`profattn.values.safe_text`, counted);
        nesting deeper than 8 levels becomes None."""
        if isinstance(value, list):
            return [self._usable(v, depth + 1) for v in value] if depth < 8 else None
        if isinstance(value, str):
            if value.isascii():
                return value
            fixed, n = safe_text(value)
            self.surrogates += n
            return fixed
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int) and -_RECORDED_INT_LIMIT <= value <= _RECORDED_INT_LIMIT:
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        self.recorded_unusable += 1
        return None

    def safe_metadata(self, value: Any, depth: int = 0) -> Any:
        """The document's top-level keys (``deviceProperties``, ``distributedInfo``, ...) with every string, key
        included, safe for UTF-8 output (replacements counted with the events'); numbers as written (the readers
        of metadata take them through :func:`as_int`); nesting deeper than 16 levels becomes None."""
        if depth > 16:
            return None
        if isinstance(value, dict):
            return {self.safe_metadata(k, depth + 1) if isinstance(k, str) else k: self.safe_metadata(v, depth + 1)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self.safe_metadata(v, depth + 1) for v in value]
        if isinstance(value, str) and not value.isascii():
            fixed, n = safe_text(value)
            self.surrogates += n
            return fixed
        return value

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
        if self.bad_launch_dims:
            n = sum(self.bad_launch_dims.values())
            which = ", ".join(f"{key} ({k:,})" for key, k in self.bad_launch_dims.most_common())
            out.append(TraceWarning("bad_launch_dims", n, f"{n:,} kernel grid/block value(s) are not an [x, y, z] list "
                                    f"(too short, or an object such as {{\"x\": 1}}: {which}): launch shape read as missing"))
        if self.launchers_repeated:
            n = self.launchers_repeated
            out.append(TraceWarning("repeated_correlation", n, f"{n} runtime/driver event(s) repeat an earlier "
                                    "correlation id: the first one launches the kernels"))
        if self.bad_cats:
            n = sum(self.bad_cats.values())
            kinds = ", ".join(f"{what} ({k:,})" for what, k in self.bad_cats.most_common())
            out.append(TraceWarning("bad_category", n, f"{n:,} event(s) have a 'cat' that is not a string ({kinds}): "
                                    "ignored, so kernels among them are not counted"))
        if self.device_events:
            n = sum(self.device_events.values())
            by_device: Counter[str] = Counter()
            for cat, k in self.device_events.items():
                by_device[ACCELERATOR_CATS[cat]] += k
            which = ", ".join(f"{k:,} {device}" for device, k in by_device.most_common())
            cats = ", ".join(sorted(self.device_events))
            out.append(TraceWarning("other_accelerator", n, f"{which} device event(s) ({cats}): profattn's kernel "
                                    "analysis covers CUDA/ROCm kernels only; they are not analyzed"))
        if self.long_names:
            n = self.long_names
            out.append(TraceWarning("long_name", n, f"{n:,} distinct event name(s) longer than {MAX_NAME_CHARS:,} "
                                    f"characters: cut to their first {MAX_NAME_CHARS:,}"))
        if self.surrogates:
            n = self.surrogates
            out.append(TraceWarning("surrogates", n, f"{n:,} unpaired UTF-16 surrogate(s) (half of a character: an "
                                    "emoji cut in two, say) in event names or recorded inputs replaced by U+FFFD"))
        if self.recorded_unusable:
            n = self.recorded_unusable
            out.append(TraceWarning("recorded_value_unusable", n, f"{n:,} value(s) of Input Dims/Input type/Concrete "
                                    "Inputs beyond 64 bits or not finite: read as missing"))
        if self.op_durations_unusable:
            n = sum(self.op_durations_unusable.values())
            detail = ", ".join(f"{why} ({k:,})" for why, k in self.op_durations_unusable.most_common())
            out.append(TraceWarning("op_dur_unusable", n, f"{n:,} CPU op duration(s) unusable ({detail}): read as "
                                    "unknown (the op is kept, its window has no length)"))
        if self.unknown_cats:
            n = sum(self.unknown_cats.values())
            shown = ", ".join(f"{str(c)[:40]!r} ({k})" for c, k in self.unknown_cats.most_common(5))
            more = f" and {len(self.unknown_cats) - 5} more" if len(self.unknown_cats) > 5 else ""
            out.append(TraceWarning("unknown_category", n, f"{n} event(s) of unknown categories ignored: {shown}{more}"))
        return out


def kernel_warnings(kernels: "pd.DataFrame") -> list[TraceWarning]:
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
                                "launching runtime/driver event with their correlation id: attributed by External id, "
                                "else (attention kernels) by stream order within one attention call's window"))
    repeated = int(kernels.duplicated(["name", "ts_us", "dur_us", "correlation", "device", "stream"]).sum())
    if repeated:
        out.append(TraceWarning("repeated_kernel", repeated, f"{repeated} kernel event(s) repeat another one exactly "
                                "(name, start, duration, correlation, stream): counted each time they appear"))
    return out


# ----------------------------------------------------------------------------------------------------
# Per-event value coercion (tolerant: an unusable value becomes None)
# ----------------------------------------------------------------------------------------------------


def _as_time(value: Any, limit: float = MAX_TS_US) -> float | None:
    """A finite JSON number within ``±limit`` (µs) as float, else None (strings, bools, NaN, inf, missing,
    absurd values such as a ``dur`` of 1e308)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) and -limit <= result <= limit else None


def as_int(value: Any) -> int | None:
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
