"""``results.json``: writing a :class:`~profattn.results.RunResult` and reading it back, validated (see
:mod:`profattn.results` for the schema)."""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any

from profattn.errors import ResultsError
from profattn.results.records import (
    READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION, Ceilings, CellResult, CellStatus, Correctness, CounterKernel,
    CountersInfo, CountersStatus, CounterSummary, Environment, GraphReplaySummary, KernelLaunch, RankRecord, RunResult,
    Timing, TraceSummary,
)
from profattn.interfaces import Adoption
from profattn.workload import Workload



def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, Workload):
        return obj.to_dict()
    if isinstance(obj, Enum):
        return obj.value
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _to_jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):  # JSON has no inf/NaN: store "inf", "-inf", "nan"
        return str(obj)
    return obj


def run_to_dict(run: RunResult) -> dict[str, Any]:
    """``RunResult`` → the results.json object (schema tag included; derived cell metrics added for readers)."""
    data = _to_jsonable(run)
    data = {"schema": SCHEMA, **data, "schema_version": SCHEMA_VERSION}  # what is written is always current
    for cell, raw in zip(run.cells, data["cells"]):
        raw["derived"] = {
            "latency_us": cell.latency_us,
            "eager_latency_us": cell.eager_latency_us,
            "tokens_per_s": cell.tokens_per_s,
            "achieved_tflops": cell.achieved_tflops,
            "achieved_gbps": cell.achieved_gbps,
            "kv_gbps": cell.kv_gbps,
            "latency_samples_us": list(cell.latency_samples_us),
        }
    return data


def _tuple3(v: Any) -> tuple[int, int, int] | None:
    return tuple(int(x) for x in v) if v is not None else None  # type: ignore[return-value]


def _correctness(d: dict[str, Any]) -> Correctness:
    grads = d.get("grad_rel_err")
    return Correctness(**{
        **d,
        "out_rel_err": float(d["out_rel_err"]),
        "grad_rel_err": {k: float(v) for k, v in grads.items()} if grads is not None else None,
        "quant_rel_err": float(d["quant_rel_err"]) if d.get("quant_rel_err") is not None else None,
    })


def _status(d: dict[str, Any]) -> CellStatus:
    """The cell's ``status`` field as a :class:`CellStatus`.

    Raises:
        ResultsError: the value is not one of the closed set (names the field, the cell and the valid values).
    """
    raw = d["status"]
    try:
        return CellStatus(raw)
    except ValueError:
        valid = ", ".join(s.value for s in CellStatus)
        raise ResultsError(f"cell {d.get('cell_id')!r}: field 'status' is {raw!r}, not one of {valid}") from None


def _counters_info(d: dict[str, Any]) -> CountersInfo:
    """The run's ``counters_info`` object.

    Raises:
        ResultsError: its ``status`` is not a :class:`CountersStatus` value (names the field and the valid values).
    """
    if d.get("status") not in {s.value for s in CountersStatus}:
        valid = ", ".join(s.value for s in CountersStatus)
        raise ResultsError(f"field 'counters_info.status' is {d.get('status')!r}, not one of {valid}")
    return CountersInfo(**d)


def _cell_from_dict(d: dict[str, Any]) -> CellResult:
    trace = d.get("trace")
    if trace is not None:
        kernels = tuple(
            KernelLaunch(**{**k, "grid": _tuple3(k.get("grid")), "block": _tuple3(k.get("block")),
                            "shapes": tuple((_tuple3(g), _tuple3(b)) for g, b in k.get("shapes", ()))})
            for k in trace["kernels"]
        )
        trace = TraceSummary(**{**_known(TraceSummary, trace), "kernels": kernels, "ops": tuple(trace.get("ops", ())),
                                "graph": _graph_replays(trace.get("graph"))})
    counters = d.get("counters")
    if counters is not None:
        ck = tuple(CounterKernel(**{**k, "grid": _tuple3(k.get("grid")), "block": _tuple3(k.get("block"))}) for k in counters["kernels"])
        counters = CounterSummary(**{**counters, "kernels": ck})
    return CellResult(
        cell_id=d["cell_id"],
        workload=Workload.from_dict(d["workload"]),
        backend=d["backend"],
        family=d["family"],
        status=_status(d),
        reason=d.get("reason", ""),
        notes=tuple(d.get("notes", ())),
        correctness=_correctness(d["correctness"]) if d.get("correctness") else None,
        timing=Timing(**d["timing"]) if d.get("timing") else None,
        graph_timing=Timing(**d["graph_timing"]) if d.get("graph_timing") else None,
        peak_mem_bytes=d.get("peak_mem_bytes"),
        peak_mem_over_inputs_bytes=d.get("peak_mem_over_inputs_bytes"),
        trace=trace,
        counters=counters,
        timing_repeats=tuple(Timing(**t) for t in d.get("timing_repeats", ())),
        graph_timing_repeats=tuple(Timing(**t) for t in d.get("graph_timing_repeats", ())),
        append_timing=Timing(**d["append_timing"]) if d.get("append_timing") else None,
        executed_pairs=_opt_int(d.get("executed_pairs"), "executed_pairs"),
        ranks=tuple(RankRecord(**r) for r in d.get("ranks", ())),
        adoption=Adoption.from_dict(d["adoption"]) if d.get("adoption") else None,
    )


def _opt_int(v: Any, name: str) -> int | None:
    """An optional non-negative integer field. Raises ValueError (the cell's "malformed" error) otherwise."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"field {name!r} is {v!r}, not a non-negative integer")
    return v


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """``d`` without the keys that are not fields of the dataclass ``cls`` (fields a later profattn added)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _environment(d: dict[str, Any]) -> Environment:
    d = _known(Environment, d)
    for key in ("load_avg_start", "load_avg_end"):
        if d.get(key) is not None:
            d[key] = tuple(float(x) for x in d[key])
    return Environment(**d)


def _graph_replays(d: dict[str, Any] | None) -> GraphReplaySummary | None:
    """A trace summary's ``graph`` object (None when absent)."""
    if d is None:
        return None
    return GraphReplaySummary(**{**_known(GraphReplaySummary, d), "kernels": tuple(d.get("kernels", ()))})


def run_from_dict(data: dict[str, Any]) -> RunResult:
    """Inverse of :func:`run_to_dict`.

    Raises:
        ResultsError: wrong schema tag or version, or missing/ill-typed fields.
    """
    if not isinstance(data, dict) or "schema" not in data:
        raise ResultsError("not a profattn results file (no 'schema' key)")
    if data["schema"] != SCHEMA:
        raise ResultsError(f"not a profattn results file (schema {data['schema']!r}, expected {SCHEMA!r})")
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise ResultsError(f"results schema_version {version!r} is not supported (this profattn reads versions {readable}, as integers)")
    try:
        return RunResult(
            environment=_environment(data["environment"]),
            preset=data["preset"],
            preset_description=data.get("preset_description", ""),
            cells=_cells(data["cells"]),
            ceilings=Ceilings(**data["ceilings"]) if data.get("ceilings") else None,
            schema_version=version,  # as read: a report of a v2 file says v2
            seed=int(data.get("seed", 0)),
            counters_info=_counters_info(data["counters_info"]) if data.get("counters_info") else CountersInfo(CountersStatus.NOT_REQUESTED),
            repeat=int(data.get("repeat", 1)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ResultsError(f"malformed results.json: {type(exc).__name__}: {exc}") from None


def _cells(raw: Any) -> tuple[CellResult, ...]:
    """The ``cells`` array, each validated: an object with string ``cell_id``, ``backend`` and ``family``,
    well-typed fields, and a ``cell_id`` no other cell has.

    Raises:
        ResultsError: naming the cell (index and id) and the field.
    """
    if not isinstance(raw, list):
        raise ResultsError(f"field 'cells' is {type(raw).__name__}, not a list")
    out: list[CellResult] = []
    seen: set[str] = set()
    for i, d in enumerate(raw):
        if not isinstance(d, dict):
            raise ResultsError(f"cells[{i}] is {type(d).__name__} {json.dumps(d)[:40]}, not an object")
        for key in ("cell_id", "backend", "family"):
            if not isinstance(d.get(key), str):
                raise ResultsError(f"cells[{i}]: field {key!r} is {d.get(key)!r}, not a string")
        if d["cell_id"] in seen:
            raise ResultsError(f"cells[{i}]: cell_id {d['cell_id']!r} appears twice")
        seen.add(d["cell_id"])
        try:
            out.append(_cell_from_dict(d))
        except ResultsError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ResultsError(f"cells[{i}] ({d['cell_id']}): malformed: {type(exc).__name__}: {exc}") from None
    return tuple(out)


def write_results(run: RunResult, path: str | os.PathLike[str]) -> Path:
    """Write ``run`` to ``path`` atomically (temp file + rename), so an interrupted run leaves valid JSON.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    from profattn.files import write_text_atomic

    return write_text_atomic(path, json.dumps(run_to_dict(run), indent=1, allow_nan=False) + "\n")


#: The largest results.json read (bytes): the committed 351-cell serving run's is 1.6 MB, so 1 GiB is far above any
#: real run and far below what would exhaust a machine's memory when parsed.
RESULTS_MAX_BYTES = 1 << 30


def read_results(path: str | os.PathLike[str]) -> RunResult:
    """Read a results.json (or the one inside a run directory).

    Raises:
        ResultsError: missing, not a regular file (a device such as ``/dev/zero``, a FIFO, a socket — also through a
            symbolic link), larger than :data:`RESULTS_MAX_BYTES`, not JSON (or nested too deeply for Python's
            parser), or not a supported profattn results file.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block, /dev/zero never end
            raise ResultsError(f"{path}: not a regular file (a device, FIFO or socket); expected a run directory "
                               "holding results.json")
        if info.st_size > RESULTS_MAX_BYTES:
            raise ResultsError(f"{path}: {info.st_size:,} bytes, larger than any results file "
                               f"(limit {RESULTS_MAX_BYTES:,})")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file (expected a run directory holding results.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply") from None
    try:
        return run_from_dict(data)
    except ResultsError as exc:
        raise ResultsError(f"{path}: {exc}") from None
