"""Read Nsight Compute hardware counters (``ncu --csv --page raw --nvtx``) into pandas DataFrames.

Format source: the CSV that ``ncu --csv --page raw`` prints (Nsight Compute CLI documentation, options
``--csv``, ``--page``, ``--nvtx``, ``--print-units``), as observed in the H200 fixture
``shared/fixtures/ncu/h200_sdpa_decode_kv8192_raw.csv`` (ncu with ``--nvtx``). The text is:

1. a *preamble*: lines that are not CSV: ncu's own ``==PROF==``/``==WARNING==``/``==ERROR==`` lines and,
   when ncu writes to the console, whatever the profiled program printed;
2. a header row whose first cell is ``"ID"``; every cell is quoted;
3. a *units row* (same columns): ``byte``, ``Kbyte``, ``sector``, ``ns``, ``usecond``, ``register/thread``,
   ``byte/block``, ``%``, or empty for unitless columns (``ID``, ``Kernel Name``, ``launch__grid_size``);
4. one row per profiled kernel launch. Numbers carry thousands separators (``"134,311,680"``), some are
   decimals (``"816,165.33"``); ncu writes ``n/a`` where a metric has no value.

Columns read (everything else, e.g. the ``device__attribute_*`` columns of the raw page, is ignored):

======================================================================  =================================
ncu column                                                              read into :attr:`NcuReport.kernels`
======================================================================  =================================
``ID``, ``Process ID``, ``Kernel Name``                                 ``id``, ``pid``, ``name``
``Grid Size``, ``Block Size`` (``"(1, 7, 32)"``)                        ``grid``, ``block`` (tuples)
``thread Domain:Push/Pop_Range:...`` (``--nvtx``)                       ``range``, ``ranges``
``Id:Domain:Start/Stop_Range:...`` (``--nvtx``)                         ``range``, ``ranges``
the metrics of :data:`METRIC_SPEC`                                      one column each (see there)
======================================================================  =================================

Units: every size is in bytes (``*_bytes``), every time in microseconds (``*_us``), whatever prefix the
units row gives (``Mbyte``, ``msecond``, ... are scaled by :data:`UNIT_SCALE`); counters, byte and time
columns are float64 (NaN when the metric is missing or ``n/a``), launch-shape counts are nullable Int64.

NVTX attribution: ``--nvtx`` adds two columns holding, for each kernel, the NVTX ranges open when it was
launched. The push/pop column is ``<thread id>  "<domain>:<name>:<6 payload/colour/message fields>" ...``
(one quoted entry per range on the launching thread's stack, outermost first); the start/end column
lists the process-wide start/end ranges the same way, each led by a numeric range id. A kernel's
``range`` is the innermost (last) start/end range if it has any, else the innermost push/pop range.

Bad input raises :class:`CounterError` (input that cannot be used: missing file, no header, no units row,
an unknown unit or an unparseable number in a column this module reads); output in which ncu profiled
nothing (header and units, no kernel rows) gives empty DataFrames with the documented columns.

Example, the H200 SDPA decode fixture (the seed decode: B=8, Hq=16, Hkv=4, d=128, bf16,
kv 8192; ``flash_gqa``/``math_gqa`` are NVTX ranges around SDPA's flash and math backends)::

    r = parse_ncu_csv("h200_sdpa_decode_kv8192_raw.csv")
    r.kernels.loc[r.kernels["range"] == "flash_gqa", ["id", "grid", "dram_read_bytes", "gpu_time_us"]]
    #    id         grid  dram_read_bytes  gpu_time_us
    # 3   3   (1, 7, 32)      134311680.0       41.600
    # 4   4  (32, 1, 1)         485376.0        7.136
    counters_by_range(r)[["range", "kernels", "dram_read_bytes", "dram_bytes", "gpu_time_us"]]  # trace.counter_sums
    #        range  kernels  dram_read_bytes    dram_bytes  gpu_time_us
    # 0  flash_gqa        2     1.347971e+08  1.352000e+08       48.736
    # 1   math_gqa       16     2.035880e+09  3.779001e+09     1568.768

(K and V are 134,217,728 bytes: the split-KV kernel reads them from DRAM 1.0007 times.)
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import pandas as pd

from profattn.errors import ProfattnError

__all__ = [
    "CounterError",
    "MetricSpec",
    "METRIC_SPEC",
    "METRICS",
    "UNIT_SCALE",
    "L2_SECTOR_BYTES",
    "KERNEL_COLUMNS",
    "NcuReport",
    "parse_ncu_csv",
]


class CounterError(ProfattnError):
    """An ncu CSV cannot be used: missing or unreadable, no header row (e.g. ncu only printed
    ``==ERROR==`` lines), no units row, an unknown unit or an unparseable number in a column we read."""


# ----------------------------------------------------------------------------------------------------
# Units
# ----------------------------------------------------------------------------------------------------

#: Bytes in one L2 sector. Source: NVIDIA Nsight Compute Kernel Profiling Guide, Metrics Guide,
#: "Metrics Decoder" / quantities: "sector: Aligned 32 byte-chunk of memory in a cache line or device
#: memory. An L1 or L2 cache line is four sectors, i.e. 128 bytes."
L2_SECTOR_BYTES: int = 32

_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_IEC = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}

#: Unit string of the ncu units row -> (base unit, factor): ``value_in_base = value * factor``.
#:
#: Base units: ``bytes``, ``us`` (microseconds: profattn's time unit, as in :mod:`profattn.trace.kineto`),
#: ``sectors``, ``registers``, ``blocks``, ``threads``, and ``""`` (a plain number: counts, ratios).
#: Byte prefixes are read as decimal (SI, ``Kbyte`` = 1000 bytes), the meaning of the SI prefix
#: letters ncu uses (``Kbyte``, ``Mbyte``, ``Gbyte/second``). This is an assumption: no NVIDIA document
#: consulted states the factor outright, and the fixture (base units throughout, as with
#: ``--print-units base``) does not exercise it. ``Kibyte``... (IEC, 1024-based) are accepted too in case
#: a version writes them; ``Ksector``... follow the byte prefixes and have not been seen. Time: ncu
#: writes ``nsecond``/``usecond``/``msecond``/``second`` (older versions) or ``ns``/``us``/``ms``/``s``
#: (the fixture has ``ns``).
UNIT_SCALE: dict[str, tuple[str, float]] = {
    **{f"{p}byte": ("bytes", f) for p, f in _SI.items()},
    **{f"{p}byte": ("bytes", f) for p, f in _IEC.items()},
    **{f"{p}byte/block": ("bytes", f) for p, f in _SI.items()},
    **{f"{p}byte/block": ("bytes", f) for p, f in _IEC.items()},
    **{f"{p}sector": ("sectors", f) for p, f in _SI.items()},
    "ns": ("us", 1e-3),
    "nsecond": ("us", 1e-3),
    "us": ("us", 1.0),
    "usecond": ("us", 1.0),
    "µs": ("us", 1.0),
    "ms": ("us", 1e3),
    "msecond": ("us", 1e3),
    "s": ("us", 1e6),
    "second": ("us", 1e6),
    "register/thread": ("registers", 1.0),
    "register": ("registers", 1.0),
    "block": ("blocks", 1.0),
    "thread": ("threads", 1.0),
    "": ("", 1.0),
}
# Exact decimal factors, so "1.5" Kbyte is 1500 bytes and "41,600" ns is the float nearest 41.6 µs.
_DECIMAL_SCALE: dict[str, tuple[str, Decimal]] = {u: (b, Decimal(repr(f))) for u, (b, f) in UNIT_SCALE.items()}


# ----------------------------------------------------------------------------------------------------
# The metric spec table
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricSpec:
    """One ncu metric read into a :attr:`NcuReport.kernels` column.

    ``metric`` is the ncu metric name (a column of the raw page, and what profattn passes to
    ``ncu --metrics``); ``bases`` are the base units (:data:`UNIT_SCALE`) its units-row entry may
    reduce to, anything else is a :class:`CounterError`; ``dtype`` is the pandas dtype of ``column``
    (``"float64"``, or ``"Int64"`` for counts, whose scaled values must be integers).
    """

    column: str
    metric: str
    bases: frozenset[str]
    dtype: str
    description: str


_BYTES = frozenset({"bytes"})
_TIME = frozenset({"us"})

#: The metrics profattn asks ncu for and the columns they become. Counters are the ``.sum`` rollup
#: over all units (the whole kernel); metric meanings from the Kernel Profiling Guide's metric names.
METRIC_SPEC: tuple[MetricSpec, ...] = (
    MetricSpec("grid_size", "launch__grid_size", frozenset({"", "blocks"}), "Int64", "CTAs in the grid"),
    MetricSpec("block_size", "launch__block_size", frozenset({"", "threads"}), "Int64", "threads per CTA"),
    MetricSpec(
        "registers_per_thread",
        "launch__registers_per_thread",
        frozenset({"", "registers"}),
        "Int64",
        "registers per thread",
    ),
    MetricSpec(
        "shared_mem_dynamic_bytes",
        "launch__shared_mem_per_block_dynamic",
        _BYTES,
        "float64",
        "dynamic shared memory per CTA, bytes",
    ),
    MetricSpec(
        "shared_mem_static_bytes",
        "launch__shared_mem_per_block_static",
        _BYTES,
        "float64",
        "static shared memory per CTA, bytes",
    ),
    MetricSpec(
        "waves_per_sm",
        "launch__waves_per_multiprocessor",
        frozenset({""}),
        "float64",
        "waves of CTAs per SM at the theoretical occupancy",
    ),
    MetricSpec("dram_read_bytes", "dram__bytes_read.sum", _BYTES, "float64", "bytes read from DRAM (HBM)"),
    MetricSpec("dram_write_bytes", "dram__bytes_write.sum", _BYTES, "float64", "bytes written to DRAM (HBM)"),
    MetricSpec(
        "l2_read_sectors",
        "lts__t_sectors_srcunit_tex_op_read.sum",
        frozenset({"sectors"}),
        "float64",
        "L2 sectors read by the SMs' L1/TEX units (L2 -> SM traffic)",
    ),
    MetricSpec(
        "l1_global_load_bytes",
        "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
        _BYTES,
        "float64",
        "bytes requested from L1 by global loads (LSU pipe)",
    ),
    MetricSpec("gpu_time_us", "gpu__time_duration.sum", _TIME, "float64", "kernel duration, µs"),
)

#: The metric names profattn asks ncu for (``ncu --metrics ",".join(METRICS)``), in spec order.
METRICS: tuple[str, ...] = tuple(s.metric for s in METRIC_SPEC)

_SPEC_BY_COLUMN = {s.column: s for s in METRIC_SPEC}

#: Columns of :attr:`NcuReport.kernels`, in order.
KERNEL_COLUMNS: tuple[str, ...] = (
    "id",
    "pid",
    "name",
    "range",
    "ranges",
    "grid",
    "block",
    "grid_size",
    "block_size",
    "registers_per_thread",
    "shared_mem_dynamic_bytes",
    "shared_mem_static_bytes",
    "waves_per_sm",
    "dram_read_bytes",
    "dram_write_bytes",
    "l2_read_sectors",
    "l2_to_sm_read_bytes",
    "l1_global_load_bytes",
    "gpu_time_us",
)
_KERNEL_DTYPES: dict[str, Any] = {
    "id": "int64",
    "pid": "Int64",
    "name": object,
    "range": object,
    "ranges": object,
    "grid": object,
    "block": object,
    **{s.column: s.dtype for s in METRIC_SPEC},
    "l2_to_sm_read_bytes": "float64",
}


_ID = "ID"
_PID = "Process ID"
_NAME = "Kernel Name"
_GRID = "Grid Size"
_BLOCK = "Block Size"
_PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
_START_END_PREFIX = "Id:Domain:Start/Stop_Range"

_HEADER_LINE = re.compile(r'^\ufeff?"ID"(?:,|\s*$)')
_MARKER_LINE = re.compile(r"^\ufeff?==[A-Z][A-Z0-9_-]*==")
_ERROR_LINE = re.compile(r"^\ufeff?==ERROR==")
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?|[+-]?\.\d+(?:[eE][+-]?\d+)?")
_DIM3 = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_MISSING = frozenset({"", "n/a", "N/A"})
_QUOTED = re.compile(r'"([^"]*)"')
_LEADING_ID = re.compile(r"^\s*\d+\s+")
#: Fields of one NVTX entry: domain, range name, then PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg.
_NVTX_FIELDS = 8
_NVTX_TRAILING = 6


# ----------------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NcuReport:
    """One parsed ``ncu --csv --page raw`` output. Sizes in bytes, times in µs.

    Attributes:
        path: the file it was read from (None for text or an unnamed stream).
        kernels: one row per profiled kernel launch, in file order; columns :data:`KERNEL_COLUMNS`:
            ``id`` (int, ncu's ID), ``pid`` (Int64), ``name`` (the ``Kernel Name`` as ncu prints it,
            demangled), ``range`` (innermost NVTX range name, start/end ranges preferred over push/pop;
            None without one), ``ranges`` (tuple of every range name: push/pop outermost first, then
            start/end, so ``ranges[-1] == range`` when any), ``grid``/``block`` (``(x, y, z)`` int
            tuples from ``Grid Size``/``Block Size``, None if absent), then one column per
            :data:`METRIC_SPEC` entry (``grid_size`` CTAs and ``block_size`` threads fall back to the
            product of ``grid``/``block`` when the metric is missing), and ``l2_to_sm_read_bytes`` =
            ``l2_read_sectors`` x :data:`L2_SECTOR_BYTES`. Metrics absent from the file are NaN/<NA>.
        preamble: the non-empty lines before the header row (``==PROF==``/``==WARNING==`` lines and
            any program output), without line endings.
        errors: every line of the text that starts with ``==ERROR==`` (before or after the table).
    """

    path: str | None
    kernels: pd.DataFrame = field(repr=False)
    preamble: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------------


def parse_ncu_csv(
    source: str | os.PathLike[str] | io.TextIOBase | None = None,
    *,
    text: str | None = None,
) -> NcuReport:
    """Parse the output of ``ncu --csv --page raw [--nvtx]`` into an :class:`NcuReport`.

    ``source`` is a path or an open text stream; alternatively pass the CSV text itself as ``text=``
    (then ``source``, if given, only names the input in messages and :attr:`NcuReport.path`).

    Lines before the header row are the preamble; ``==PROF==``/``==WARNING==``/``==ERROR==`` lines after
    it are skipped, as are blank rows. An empty or ``n/a`` value is NaN (<NA> in Int64 columns).

    Raises:
        CounterError: the file is missing or unreadable; there is no header row (the message quotes the
            first ``==ERROR==`` line, if any, e.g. ``ERR_NVGPUCTRPERM``); the header is not followed by a
            units row; a row has a different number of cells than the header; a column read here has a
            unit that is not in :data:`UNIT_SCALE` or not of the expected kind; or a value in such a
            column is not a number (or not an integer where one is required).
    """
    name, content = _read_source(source, text)
    lines = io.StringIO(content, newline="").readlines()
    errors = tuple(line.rstrip("\r\n") for line in lines if _ERROR_LINE.match(line))

    header_at = next((i for i, line in enumerate(lines) if _HEADER_LINE.match(line)), None)
    if header_at is None:
        if errors:
            first = _one_line(errors[0].lstrip("\ufeff"))
            raise CounterError(f"{_label(name)}: ncu wrote no results: {first}")
        raise CounterError(
            f"{_label(name)}: no ncu CSV header row (a line starting with \"ID\"); "
            "was it written by ncu --csv --page raw?"
        )
    preamble = tuple(s for s in (line.rstrip("\r\n") for line in lines[:header_at]) if s.strip())

    rows = _csv_rows(name, lines, header_at)
    header_line, header = next(rows)
    header = [header[0].lstrip("\ufeff"), *header[1:]]
    units_entry = next(rows, None)
    if units_entry is None or _cell(units_entry[1], header, _ID).strip():
        raise CounterError(
            f"{_label(name)}: the header row (line {header_line}) is not followed by a units row; "
            "is this ncu --csv --page raw output?"
        )
    _, units = units_entry
    columns = _Columns(name, header, units)
    records = [columns.kernel(line_no, row) for line_no, row in rows if any(cell.strip() for cell in row)]
    return NcuReport(path=name, kernels=_kernels_frame(records), preamble=preamble, errors=errors)


def _read_source(source: Any, text: str | None) -> tuple[str | None, str]:
    """(name for messages and ``path``, the text)."""
    name: str | None = None
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
    elif source is not None:
        stream_name = getattr(source, "name", None)
        name = stream_name if isinstance(stream_name, str) else None
    if text is not None:
        return name, text
    if source is None:
        raise TypeError("parse_ncu_csv() needs a path, a text stream, or text=")
    if name is not None and isinstance(source, (str, os.PathLike)):
        try:
            with open(name, encoding="utf-8", errors="replace", newline="") as f:
                return name, f.read()
        except FileNotFoundError:
            raise CounterError(f"{name}: no such ncu CSV file") from None
        except OSError as e:
            raise CounterError(f"{name}: cannot read ncu CSV file ({e.strerror or type(e).__name__})") from None
    try:
        content = source.read()
    except (OSError, ValueError) as e:  # ValueError: a closed stream
        raise CounterError(f"{_label(name)}: cannot read ncu CSV stream ({_one_line(e)})") from None
    if isinstance(content, bytes):
        content = content.decode("utf-8", errors="replace")
    return name, content


def _csv_rows(name: str | None, lines: Sequence[str], header_at: int) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number where the row ends, cells) for the header and every row after it, blank lines
    and ncu marker lines (``==PROF==`` ...) dropped. Rows must be as wide as the header."""
    position = [header_at]

    def feed() -> Iterator[str]:
        for i in range(header_at, len(lines)):
            if i > header_at and _MARKER_LINE.match(lines[i]):
                continue
            position[0] = i + 1
            yield lines[i]

    reader = csv.reader(feed(), strict=False)
    width: int | None = None
    try:
        for row in reader:
            if not row or (len(row) == 1 and width != 1 and not row[0].strip()):  # a blank line
                continue
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise CounterError(
                    f"{_label(name)}: line {position[0]} has {len(row)} cells, the header has {width} (truncated file?)"
                )
            yield position[0], row
    except csv.Error as e:
        raise CounterError(f"{_label(name)}: bad CSV near line {position[0]} ({_one_line(e)})") from None


def _cell(row: Sequence[str], header: Sequence[str], column: str) -> str:
    try:
        return row[header.index(column)]
    except ValueError:
        return ""


class _Columns:
    """Where the columns read here sit in a header, with their units checked; turns rows into records."""

    def __init__(self, name: str | None, header: Sequence[str], units: Sequence[str]) -> None:
        self.name = name
        index: dict[str, int] = {}
        for i, column in enumerate(header):
            index.setdefault(column.strip(), i)
        self.id = index[_ID]
        self.pid = index.get(_PID)
        self.kernel_name = index.get(_NAME)
        self.grid = index.get(_GRID)
        self.block = index.get(_BLOCK)
        self.push_pop = next((i for c, i in index.items() if c.startswith(_PUSH_POP_PREFIX)), None)
        self.start_end = next((i for c, i in index.items() if c.startswith(_START_END_PREFIX)), None)
        self.id_scale = self._scale(units[self.id], _ID, frozenset({""}))
        self.pid_scale = self._scale(units[self.pid], _PID, frozenset({""})) if self.pid is not None else None
        # spec column -> (cell index, exact factor), for the metrics present in the file
        self.metrics: dict[str, tuple[int, Decimal]] = {}
        for spec in METRIC_SPEC:
            at = index.get(spec.metric)
            if at is not None:
                self.metrics[spec.column] = (at, self._scale(units[at], spec.metric, spec.bases))

    def _scale(self, unit: str, column: str, bases: frozenset[str]) -> Decimal:
        unit = unit.strip()
        if unit not in _DECIMAL_SCALE:
            raise CounterError(f"{_label(self.name)}: column {column!r} has unknown unit {unit!r}")
        base, factor = _DECIMAL_SCALE[unit]
        if base not in bases:
            wanted = " or ".join(repr(b) if b else "no unit" for b in sorted(bases))
            raise CounterError(f"{_label(self.name)}: column {column!r} has unit {unit!r}; expected {wanted}")
        return factor

    def kernel(self, line_no: int, row: Sequence[str]) -> dict[str, Any]:
        """One :attr:`NcuReport.kernels` record from one kernel row."""
        where = f"{_label(self.name)}: line {line_no}"
        kernel_id = self._int(row[self.id], self.id_scale, where, _ID)
        if kernel_id is None:
            raise CounterError(f"{where}: column 'ID' is empty")
        where = f"{_label(self.name)}: kernel ID {kernel_id} (line {line_no})"
        push_pop = _nvtx_names(row[self.push_pop]) if self.push_pop is not None else ()
        start_end = _nvtx_names(row[self.start_end]) if self.start_end is not None else ()
        innermost = start_end or push_pop
        record: dict[str, Any] = {
            "id": kernel_id,
            "pid": self._int(row[self.pid], self.pid_scale, where, _PID) if self.pid is not None else None,
            "name": row[self.kernel_name] if self.kernel_name is not None else None,
            "range": innermost[-1] if innermost else None,
            "ranges": push_pop + start_end,
            "grid": _dim3(row[self.grid], where, _GRID) if self.grid is not None else None,
            "block": _dim3(row[self.block], where, _BLOCK) if self.block is not None else None,
        }
        for spec in METRIC_SPEC:
            located = self.metrics.get(spec.column)
            if located is None:
                record[spec.column] = None
            elif spec.dtype == "Int64":
                record[spec.column] = self._int(row[located[0]], located[1], where, spec.metric)
            else:
                value = _decimal(row[located[0]], where, spec.metric)
                record[spec.column] = None if value is None else float(value * located[1])
        for column, shape in (("grid_size", record["grid"]), ("block_size", record["block"])):
            if record[column] is None and shape is not None:
                record[column] = math.prod(shape)
        sectors = record["l2_read_sectors"]
        record["l2_to_sm_read_bytes"] = None if sectors is None else sectors * L2_SECTOR_BYTES
        return record

    @staticmethod
    def _int(cell: str, factor: Decimal | None, where: str, column: str) -> int | None:
        value = _decimal(cell, where, column)
        if value is None:
            return None
        scaled = value * (factor if factor is not None else Decimal(1))
        if scaled != scaled.to_integral_value():
            raise CounterError(f"{where}: column {column!r}: {cell.strip()!r} is not an integer")
        return int(scaled)


def _decimal(cell: str, where: str, column: str) -> Decimal | None:
    """The number in ``cell`` (thousands separators allowed), None for an empty or ``n/a`` cell."""
    text = cell.strip()
    if text in _MISSING:
        return None
    if not _NUMBER.fullmatch(text):
        raise CounterError(f"{where}: column {column!r}: cannot read {_clip(text)!r} as a number")
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid literals
        raise CounterError(f"{where}: column {column!r}: cannot read {_clip(text)!r} as a number") from None


def _dim3(cell: str, where: str, column: str) -> tuple[int, int, int] | None:
    """``"(x, y, z)"`` as an int triple; None for an empty or ``n/a`` cell."""
    text = cell.strip()
    if text in _MISSING:
        return None
    match = _DIM3.fullmatch(text)
    if match is None:
        raise CounterError(f"{where}: column {column!r}: cannot read {_clip(text)!r} as (x, y, z)")
    x, y, z = (int(g) for g in match.groups())
    return (x, y, z)


def _nvtx_names(cell: str) -> tuple[str, ...]:
    """The range names in an ncu ``--nvtx`` column, outermost first.

    Entries are the quoted ``"domain:name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"`` strings after
    a thread id (push/pop) or range id (start/end); an id may also lead the quoted entry itself
    (``"3:domain:name:..."``). A name containing ``:`` is rebuilt from the fields between the domain
    and the six trailing ones (domains are assumed to hold no ``:``). A cell without quotes is read
    as one entry.
    """
    text = cell.strip()
    if not text:
        return ()
    entries = _QUOTED.findall(text) or [_LEADING_ID.sub("", text)]
    names = []
    for entry in entries:
        parts = entry.split(":")
        if len(parts) > _NVTX_FIELDS and parts[0].strip().isdigit():
            parts = parts[1:]
        if len(parts) == 1:
            name = parts[0].strip()
        elif len(parts) > _NVTX_FIELDS:
            name = ":".join(parts[1 : len(parts) - _NVTX_TRAILING])
        else:
            name = parts[1]
        if name:
            names.append(name)
    return tuple(names)


def _kernels_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for column in KERNEL_COLUMNS:
        values = [r[column] for r in records]
        dtype = _KERNEL_DTYPES[column]
        if dtype == "float64":
            data[column] = pd.Series([math.nan if v is None else v for v in values], dtype="float64")
        elif dtype == object:
            data[column] = pd.Series(values, dtype=object)
        else:
            data[column] = pd.Series(pd.array(values, dtype=dtype))
    return pd.DataFrame(data, columns=list(KERNEL_COLUMNS))


# ----------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------


def _label(name: str | None) -> str:
    return name if name is not None else "<ncu csv text>"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(error: BaseException | str) -> str:
    text = str(error)
    return " ".join(text.split()) or (type(error).__name__ if isinstance(error, BaseException) else "")
