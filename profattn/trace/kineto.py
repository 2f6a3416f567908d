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
that are decoded (:data:`~profattn.trace.columns.EVENT_FIELDS`): the file is streamed in batches (:mod:`profattn.trace.reader`) straight
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
:func:`profattn.analysis.run.cells.summarize_cell`, built on :func:`kernels_in_range`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profattn.trace.columns import EVENT_FIELDS, EventColumns, TraceWarning, as_int, kernel_warnings
from profattn.trace.frames import capture_frames, kernels_frame, ops_frame, ranges_frame
from profattn.trace.reader import TraceReader
from profattn.trace.windows import IntervalIndex, group_keys

__all__ = [
    "Trace",
    "kernels_in_range",
    "load_trace",
    "ops_in_range",
    "ranges_in_range",
]


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
            NaN when absent; ``input_dims``/``input_types``/``concrete_inputs`` are the ``Input Dims``/
            ``Input type``/``Concrete Inputs`` lists as recorded with ``record_shapes=True`` (None when
            not recorded; equal lists are one shared object: treat them as read-only); ``range`` is the
            innermost enclosing ``user_annotation`` on the same ``pid``/``tid``, or None.
        warnings: recoverable oddities met while reading (events skipped, values unusable, kernels without
            a launch event, ...), one :class:`TraceWarning` per kind.
        event_count: elements in ``traceEvents`` (0: the trace is empty).
        captures: the stream captures into CUDA/HIP graphs the trace recorded (columns
            :data:`~profattn.trace.columns.CAPTURE_COLUMNS`; empty without any), and ``capture_launches`` the kernel
            launches issued during each, in capture order (:data:`~profattn.trace.columns.CAPTURE_LAUNCH_COLUMNS`):
            :func:`~profattn.trace.frames.capture_frames`. The kernels of ``kernels`` also carry ``graph_id`` and
            ``graph_node_id`` where Kineto wrote them (CUDA >= 12 builds since pytorch/kineto#1276).
    """

    path: str
    metadata: dict[str, Any]
    device_properties: tuple[dict[str, Any], ...]
    kernels: pd.DataFrame = field(repr=False)
    ranges: pd.DataFrame = field(repr=False)
    ops: pd.DataFrame = field(repr=False)
    warnings: tuple[TraceWarning, ...] = ()
    event_count: int = 0
    captures: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    capture_launches: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

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
                if as_int(props.get("id")) == device:
                    return props
        return self.device_properties[0]

    @property
    def num_sms(self) -> int | None:
        """SM count (``numSms``) of :attr:`device`; None when unknown or not positive."""
        chosen = self.device
        sms = as_int(chosen.get("numSms")) if chosen is not None else None
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

    The file is read once, as a stream (:class:`~profattn.trace.reader.TraceReader`): only the fields the
    frames need are kept, in columns; the JSON tree is never held whole. Gzip is detected by its magic
    bytes; a file named ``*.gz`` that is not gzip is an error. Events with a non-numeric or non-finite
    ``ts`` (or ``dur``, where one is needed) are skipped, as are kernels and ranges without ``dur``; each
    kind of skip or unusable value is counted in :attr:`Trace.warnings`.

    Raises:
        TraceError: the file is missing or unreadable, a bad or truncated gzip stream, not UTF-8, not
            JSON, or not a trace (top level neither an object with ``traceEvents`` nor a list of events).
    """
    name = os.fspath(path)
    reader = TraceReader(name, EVENT_FIELDS)
    columns = EventColumns()
    collecting = gc.isenabled()
    gc.disable()  # millions of small containers: the cyclic collector would rescan them again and again
    try:
        for batch in reader.batches():
            columns.add(batch)
    finally:
        if collecting:
            gc.enable()
    metadata = columns.safe_metadata(reader.metadata)
    device_properties = _device_properties(metadata)
    ranges = ranges_frame(columns)
    kernels = kernels_frame(columns, ranges)
    warnings = columns.warnings(reader.event_count)
    warnings += kernel_warnings(kernels)
    captures, capture_launches = capture_frames(columns, ranges)
    return Trace(
        path=name,
        metadata=metadata,
        device_properties=device_properties,
        kernels=kernels,
        ranges=ranges,
        ops=ops_frame(columns, ranges),
        warnings=tuple(warnings),
        event_count=reader.event_count,
        captures=captures,
        capture_launches=capture_launches,
    )


def _device_properties(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    props = metadata.get("deviceProperties")
    if not isinstance(props, list):
        return ()
    return tuple(p for p in props if isinstance(p, dict))


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
    instances the innermost one holding the launch wins: :meth:`IntervalIndex.innermost`, keyed by pid).
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


def ranges_in_range(trace: Trace, name: str) -> pd.DataFrame:
    """``record_function`` ranges other than ``name`` itself that start inside any instance of the range
    ``name`` (same rules as :func:`kernels_in_range`), with column ``call``: e.g. the
    ``triton-interpreter::<kernel>`` range around a Triton kernel run by the CPU interpreter
    (:data:`profattn.families.INTERPRETER_RANGE_PREFIX`)."""
    r = trace.ranges
    r = r[r["name"] != name]
    inst = _within(trace.ranges, name, r["pid"], r["ts_us"].to_numpy(dtype="float64"))
    out = r[inst >= 0].copy()
    out["call"] = inst[inst >= 0]
    return out
