"""``results.json``: writing a :class:`~profattn.results.RunResult` and reading it back, validated (see
:mod:`profattn.results` for the schema)."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
import warnings
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any

from profattn.errors import ProfattnWarning, ResultsError
from profattn.results.records import (
    READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION, ABRun, Ceilings, CellResult, CellStatus, Correctness, CounterKernel,
    CountersInfo, CountersStatus, CounterSummary, Environment, GraphReplaySummary, KernelLaunch, RankRecord,
    RankStatus, RunResult, Timing, TraceSummary,
)
from profattn.interfaces import ADOPTION_KEYS, Adoption
from profattn.values import MAX_INT, MIN_INT, bounded_int, finite_float, number_problem, safe_text, short_number
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


class _Unusable:
    """A JSON integer beyond 64 bits, in place of its value until :func:`_checked` names its field (parsed, Python's
    int-string limit would raise for 4,300 digits, and ``float()`` overflows from 10**309)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _json_int(literal: str) -> int | _Unusable:
    if len(literal) > 18:
        digits = len(literal) - literal.startswith("-")
        value = int(literal) if digits <= 19 else None
        if value is None or not MIN_INT <= value <= MAX_INT:
            return _Unusable(f"an integer of {digits:,} digits, beyond a 64-bit integer")
        return value
    return int(literal)


def _path(parts: list[str | int], data: Any) -> str:
    """``cells[3] (decode_…sdpa-flash).timing_repeats[1].median_us`` for the path ``["cells", 3, ...]``."""
    out = ""
    node = data
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if out.startswith("cells[") and out.count("[") == 1 and isinstance(node, dict) and isinstance(node.get("cell_id"), str):
                out += f" ({safe_text(node['cell_id'][:80])[0]})"
        else:
            out += ("." if out else "") + part
            node = node.get(part) if isinstance(node, dict) else None
    return out


def _checked(data: Any) -> tuple[Any, int]:
    """``data`` (parsed JSON) with every string made safe for UTF-8 output (:func:`profattn.values.safe_text`),
    and the number of unpaired surrogates replaced.

    Raises:
        ResultsError: a number that cannot be used (:class:`_Unusable`), naming its field.
    """
    replaced = 0
    stack: list[tuple[Any, list[str | int]]] = [(data, [])]
    root = data
    while stack:
        node, where = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in list(items):
            if isinstance(value, _Unusable):
                raise ResultsError(f"field {_path([*where, key], root)!r} is {value.text}: every number in a "
                                   "results file must be finite and fit 64 bits")
            if isinstance(value, float) and not math.isfinite(value):  # NaN/Infinity literals, 1e400
                raise ResultsError(f"field {_path([*where, key], root)!r} is {value}: every number in a "
                                   "results file must be finite and fit 64 bits")
            if isinstance(value, str):
                fixed, n = safe_text(value)
                if n:
                    node[key] = fixed
                    replaced += n
            elif isinstance(value, (dict, list)):
                stack.append((value, [*where, key]))
        if isinstance(node, dict) and any(isinstance(k, str) and not k.isascii() for k in node):
            fixed_keys = {safe_text(k)[0]: v for k, v in node.items()}
            replaced += sum(safe_text(k)[1] for k in node)
            node.clear()
            node.update(fixed_keys)
    return data, replaced


class _Reader:
    """One results file being read: the dataclass records built from its objects, every field type-checked
    (:meth:`record`), the unknown fields collected (ignored, and named in one warning)."""

    def __init__(self) -> None:
        self.unknown: list[str] = []

    def fields(self, cls: type, d: Any, where: str, *, known: tuple[str, ...] = ()) -> dict[str, Any]:
        """The entries of object ``d`` that are fields of dataclass ``cls`` (others recorded as unknown, and
        ``known`` ones silently dropped), each checked against the field's annotated type.

        Raises:
            ResultsError: ``d`` is not an object, or a field has the wrong type (naming it).
        """
        if not isinstance(d, dict):
            raise ResultsError(f"field {where!r} is {_kind(d)}, not an object")
        types = _field_types(cls)
        out = {}
        for key, value in d.items():
            if key not in types:
                if key not in known:
                    self.unknown.append(f"{where}.{key}" if where else str(key))
                continue
            problem = _type_problem(value, types[key])
            if problem:
                raise ResultsError(f"field {(where + '.' if where else '') + key!r} is {problem}")
            out[key] = value
        return out

    def record(self, cls: type, d: Any, where: str, **override: Any) -> Any:
        """``cls(**fields)`` of :meth:`fields`, with ``override`` (already converted values) on top.

        Raises:
            ResultsError: see :meth:`fields` and :meth:`build`.
        """
        return self.build(cls, self.fields(cls, d, where), where, **override)

    @staticmethod
    def build(cls: type, values: dict[str, Any], where: str, **override: Any) -> Any:
        """``cls(**values, **override)`` (``values`` from :meth:`fields`).

        Raises:
            ResultsError: the constructor's own ``ValueError``/``TypeError`` (a required field missing, a value
                outside its domain), naming ``where``.
        """
        try:
            return cls(**{**values, **override})
        except (TypeError, ValueError) as exc:
            text = str(exc)
            named = re.match(rf"{cls.__name__}\.(\w+) (.*)", text)  # "Timing.median_us must be ..., got -1.0"
            if named:
                raise ResultsError(f"field {(where + '.' if where else '') + named[1]!r} {named[2]}") from None
            raise ResultsError(f"field {where or 'results.json'!r} ({cls.__name__}): {text.replace('__init__() ', '')}") from None


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {short_number(value)}"


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, str]:
    return {f.name: str(f.type) for f in fields(cls)}


_SCALARS = {"str": str, "int": int, "float": (int, float), "bool": bool}


def _type_problem(value: Any, annotation: str) -> str | None:
    """Why ``value`` does not fit a field annotated ``annotation`` (``"str"``, ``"float | None"``, ...), or None.
    Only the scalar annotations are checked here; containers and records are checked where they are built."""
    options = [a.strip() for a in annotation.split("|")]
    if value is None:
        return None if "None" in options else "null, not a value"
    scalars = [o for o in options if o in _SCALARS]
    if len(scalars) != len([o for o in options if o != "None"]):
        return None  # a container or record: checked by its own reader
    for o in scalars:
        want = _SCALARS[o]
        if o in ("int", "float") and isinstance(value, bool):
            continue
        if isinstance(value, want):
            return None
    return f"{_kind(value)}, not {' or '.join(scalars)}"


def _tuple3(v: Any, where: str) -> tuple[int, int, int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 3 or any(bounded_int(x) is None for x in v):
        raise ResultsError(f"field {where!r} is {_kind(v)}, not an [x, y, z] list of integers")
    return tuple(int(x) for x in v)  # type: ignore[return-value]


def _rel_err(v: Any, where: str) -> float:
    """A relative error: a finite number, or ``"nan"``/``"inf"`` as the writer stores non-finite ones."""
    if isinstance(v, str) and v.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(v)
    if number_problem(v) is not None:
        raise ResultsError(f"field {where!r} is {number_problem(v)}")
    return float(v)


def _correctness(r: _Reader, d: Any, where: str) -> Correctness:
    values = r.fields(Correctness, d, where)
    grads = values.get("grad_rel_err")
    if grads is not None and not isinstance(grads, dict):
        raise ResultsError(f"field {where + '.grad_rel_err'!r} is {_kind(grads)}, not an object")
    return r.build(Correctness, values, where,
                    out_rel_err=_rel_err(values.get("out_rel_err"), f"{where}.out_rel_err"),
                    grad_rel_err={str(k): _rel_err(v, f"{where}.grad_rel_err.{k}") for k, v in grads.items()}
                    if grads is not None else None,
                    quant_rel_err=_rel_err(values["quant_rel_err"], f"{where}.quant_rel_err")
                    if values.get("quant_rel_err") is not None else None)


def _status(d: dict[str, Any], where: str) -> CellStatus:
    """The cell's ``status`` field as a :class:`CellStatus`.

    Raises:
        ResultsError: the value is not one of the closed set (names the field, the cell and the valid values).
    """
    raw = d.get("status")
    try:
        return CellStatus(raw)
    except ValueError:
        valid = ", ".join(s.value for s in CellStatus)
        raise ResultsError(f"field {where + '.status'!r} is {short_number(raw)}, not one of {valid}") from None


def _counters_info(r: _Reader, d: Any) -> CountersInfo:
    """The run's ``counters_info`` object.

    Raises:
        ResultsError: its ``status`` is not a :class:`CountersStatus` value (names the field and the valid values).
    """
    values = r.fields(CountersInfo, d, "counters_info")
    if values.get("status") not in {s.value for s in CountersStatus}:
        valid = ", ".join(s.value for s in CountersStatus)
        raise ResultsError(f"field 'counters_info.status' is {short_number(values.get('status'))}, not one of {valid}")
    return r.build(CountersInfo, values, "counters_info")


def _list(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ResultsError(f"field {where!r} is {_kind(v)}, not a list")
    return v


def _timings(r: _Reader, v: Any, where: str) -> tuple[Timing, ...]:
    return tuple(r.record(Timing, t, f"{where}[{i}]") for i, t in enumerate(_list(v, where)))


def _opt_timing(r: _Reader, v: Any, where: str) -> Timing | None:
    return r.record(Timing, v, where) if v else None


def _trace(r: _Reader, d: Any, where: str) -> TraceSummary:
    values = r.fields(TraceSummary, d, where)
    kernels = []
    for i, k in enumerate(_list(values.get("kernels"), f"{where}.kernels")):
        kw = f"{where}.kernels[{i}]"
        kv = r.fields(KernelLaunch, k, kw)
        shapes = tuple((_tuple3(pair[0], f"{kw}.shapes[{j}][0]"), _tuple3(pair[1], f"{kw}.shapes[{j}][1]"))
                       if isinstance(pair, list) and len(pair) == 2 else _bad_shape(pair, f"{kw}.shapes[{j}]")
                       for j, pair in enumerate(_list(kv.get("shapes"), f"{kw}.shapes")))
        kernels.append(r.build(KernelLaunch, kv, kw, grid=_tuple3(kv.get("grid"), f"{kw}.grid"),
                                block=_tuple3(kv.get("block"), f"{kw}.block"), shapes=shapes))
    ops = _list(values.get("ops"), f"{where}.ops")
    if any(not isinstance(o, str) for o in ops):
        raise ResultsError(f"field {where + '.ops'!r} holds a value that is not a string")
    graph = _graph_replays(r, values["graph"], f"{where}.graph") if values.get("graph") is not None else None
    return r.build(TraceSummary, values, where, kernels=tuple(kernels), ops=tuple(ops), graph=graph)


def _graph_replays(r: _Reader, d: Any, where: str) -> GraphReplaySummary:
    """A trace summary's ``graph`` object (a graph-timed cell's profiled replays)."""
    values = r.fields(GraphReplaySummary, d, where)
    names = _list(values.get("kernels"), f"{where}.kernels")
    if any(not isinstance(n, str) for n in names):
        raise ResultsError(f"field {where + '.kernels'!r} holds a value that is not a string")
    return r.build(GraphReplaySummary, values, where, kernels=tuple(names))


def _rank(r: _Reader, d: Any, where: str) -> RankRecord:
    """One rank of a context-parallel cell; its ``status`` one of :class:`RankStatus`."""
    raw = d.get("status", RankStatus.OK.value) if isinstance(d, dict) else RankStatus.OK.value
    try:
        status = RankStatus(raw)
    except ValueError:
        valid = ", ".join(s.value for s in RankStatus)
        raise ResultsError(f"field {where + '.status'!r} is {short_number(raw)}, not one of {valid}") from None
    return r.record(RankRecord, d, where, status=status)


def _bad_shape(v: Any, where: str) -> Any:
    raise ResultsError(f"field {where!r} is {_kind(v)}, not a [grid, block] pair")


def _counters(r: _Reader, d: Any, where: str) -> CounterSummary:
    values = r.fields(CounterSummary, d, where)
    kernels = tuple(
        r.record(CounterKernel, k, f"{where}.kernels[{i}]", grid=_tuple3(k.get("grid") if isinstance(k, dict) else None, f"{where}.kernels[{i}].grid"),
                 block=_tuple3(k.get("block") if isinstance(k, dict) else None, f"{where}.kernels[{i}].block"))
        for i, k in enumerate(_list(values.get("kernels"), f"{where}.kernels")))
    lacking = values.get("kernels_lacking") or {}
    if not isinstance(lacking, dict) or any(bounded_int(n) is None for n in lacking.values()):
        raise ResultsError(f"field {where + '.kernels_lacking'!r} is not an object of counts")
    return r.build(CounterSummary, values, where, kernels=kernels, kernels_lacking=dict(lacking))


@functools.lru_cache(maxsize=1)
def _workload_keys() -> frozenset[str]:
    """The keys :meth:`Workload.to_dict` writes (its fields and derived numbers): the same for every workload."""
    return frozenset(Workload(phase="decode", batch=1, q_len=1, kv_len=16, num_q_heads=1, num_kv_heads=1, head_dim=8).to_dict())


#: Keys a cell object holds besides the :class:`CellResult` fields: the derived metrics written for other readers.
_CELL_EXTRA = ("derived",)


def _cell_from_dict(r: _Reader, d: dict[str, Any], where: str) -> CellResult:
    values = r.fields(CellResult, d, where, known=_CELL_EXTRA)
    workload = values.get("workload")
    if not isinstance(workload, dict):
        raise ResultsError(f"field {where + '.workload'!r} is {_kind(workload)}, not an object")
    try:
        wl = Workload.from_dict(workload)
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"field {where + '.workload'!r}: {exc}") from None
    known_workload = _workload_keys()
    r.unknown.extend(f"{where}.workload.{k}" for k in workload if k not in known_workload)
    notes = _list(values.get("notes"), f"{where}.notes")
    if any(not isinstance(n, str) for n in notes):
        raise ResultsError(f"field {where + '.notes'!r} holds a value that is not a string")
    return r.build(
        CellResult, values, where,
        workload=wl,
        status=_status(d, where),
        notes=tuple(notes),
        correctness=_correctness(r, values["correctness"], f"{where}.correctness") if values.get("correctness") else None,
        timing=_opt_timing(r, values.get("timing"), f"{where}.timing"),
        graph_timing=_opt_timing(r, values.get("graph_timing"), f"{where}.graph_timing"),
        trace=_trace(r, values["trace"], f"{where}.trace") if values.get("trace") is not None else None,
        counters=_counters(r, values["counters"], f"{where}.counters") if values.get("counters") is not None else None,
        timing_repeats=_timings(r, values.get("timing_repeats"), f"{where}.timing_repeats"),
        graph_timing_repeats=_timings(r, values.get("graph_timing_repeats"), f"{where}.graph_timing_repeats"),
        append_timing=_opt_timing(r, values.get("append_timing"), f"{where}.append_timing"),
        executed_pairs=_opt_int(values.get("executed_pairs"), f"{where}.executed_pairs"),
        ranks=tuple(_rank(r, x, f"{where}.ranks[{i}]") for i, x in enumerate(_list(values.get("ranks"), f"{where}.ranks"))),
        adoption=_adoption(r, values.get("adoption"), f"{where}.adoption"),
    )


def _adoption(r: _Reader, v: Any, where: str) -> Adoption | None:
    """A cell's declared :class:`~profattn.interfaces.Adoption` (None when absent: files written before it was
    recorded); its text made safe, keys it does not know ignored and named in the reader's warning.

    Raises:
        ResultsError: not an object of a known interface and layout, with a list of strings as ``how`` and a boolean
            ``plan_run`` (naming the field)."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ResultsError(f"field {where!r} is {_kind(v)}, not an object")
    r.unknown.extend(f"{where}.{k}" for k in v if k not in ADOPTION_KEYS)
    how = v.get("how", [])
    if isinstance(how, list):
        how = [safe_text(x)[0] if isinstance(x, str) else x for x in how]
    try:
        return Adoption.from_dict({**v, "how": how})
    except ValueError as exc:
        raise ResultsError(f"field {where!r}: {exc}") from None


def _opt_int(v: Any, name: str) -> int | None:
    """An optional non-negative integer field.

    Raises:
        ResultsError: anything else (naming the field)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ResultsError(f"field {name!r} is {short_number(v)}, not a non-negative integer")
    return v


def _environment(r: _Reader, d: Any) -> Environment:
    values = r.fields(Environment, d, "environment")
    loads = {}
    for key in ("load_avg_start", "load_avg_end"):
        v = values.get(key)
        if v is not None:
            if not isinstance(v, list) or len(v) != 3 or any(finite_float(x) is None for x in v):
                raise ResultsError(f"field 'environment.{key}' is {_kind(v)}, not three numbers")
            loads[key] = tuple(float(x) for x in v)
    return r.build(Environment, values, "environment", **loads)


#: Top-level keys of a results file besides the :class:`RunResult` fields.
_RUN_EXTRA = ("schema",)


def run_from_dict(data: dict[str, Any], *, where: str = "results.json") -> RunResult:
    """Inverse of :func:`run_to_dict`; every field is type-checked, every number bounded and finite, every string
    made safe for UTF-8 output. Fields this version does not know are ignored, named in one
    :class:`~profattn.errors.ProfattnWarning` (``where``: the file, for that message), as are unpaired surrogates.

    Raises:
        ResultsError: wrong schema tag or version, or missing/ill-typed fields (one line naming the field).
    """
    if not isinstance(data, dict) or "schema" not in data:
        raise ResultsError("not a profattn results file (no 'schema' key)")
    data, replaced = _checked(data)
    if data["schema"] != SCHEMA:
        raise ResultsError(f"not a profattn results file (schema {short_number(data['schema'])}, expected {SCHEMA!r})")
    version = data.get("schema_version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise ResultsError(f"results schema_version {short_number(version)} is not supported (this profattn reads "
                           f"versions {readable}, as integers)")
    r = _Reader()
    values = r.fields(RunResult, data, "", known=_RUN_EXTRA)
    for key in ("environment", "preset", "cells"):
        if key not in values:
            raise ResultsError(f"malformed results.json: no {key!r} field")
    run = r.build(
        RunResult, values, "",
        environment=_environment(r, values["environment"]),
        cells=_cells(r, values["cells"]),
        ceilings=r.record(Ceilings, values["ceilings"], "ceilings") if values.get("ceilings") else None,
        schema_version=version,  # as read: a report of a v2 file says v2
        seed=_opt_int(values.get("seed", 0), "seed"),
        counters_info=_counters_info(r, values["counters_info"]) if values.get("counters_info") else CountersInfo(CountersStatus.NOT_REQUESTED),
        repeat=_opt_int(values.get("repeat", 1), "repeat"),
        ab=r.record(ABRun, values["ab"], "ab") if values.get("ab") is not None else None,
        plugins=tuple(values.get("plugins") or ()),
    )
    if r.unknown:
        shown = ", ".join(r.unknown[:5]) + (f" and {len(r.unknown) - 5} more" if len(r.unknown) > 5 else "")
        warnings.warn(f"{where}: {len(r.unknown)} unknown field(s) ignored (written by another profattn version?): "
                      f"{shown}", ProfattnWarning, stacklevel=2)
    if replaced:
        warnings.warn(f"{where}: {replaced} unpaired UTF-16 surrogate(s) in its text replaced by U+FFFD",
                      ProfattnWarning, stacklevel=2)
    damaged = [(c.cell_id, c.damage) for c in run.cells if c.damage]
    if damaged:
        shown = "; ".join(f"{cid}: {', '.join(d.value for d in ds)}" for cid, ds in damaged[:3]) + (
            f"; and {len(damaged) - 3} more" if len(damaged) > 3 else "")
        warnings.warn(f"{where}: {len(damaged)} damaged cell(s) whose own numbers disagree, never a winner: {shown}",
                      ProfattnWarning, stacklevel=2)
    return run


def _cells(r: _Reader, raw: Any) -> tuple[CellResult, ...]:
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
                raise ResultsError(f"cells[{i}]: field {key!r} is {short_number(d.get(key))}, not a string")
        if d["cell_id"] in seen:
            raise ResultsError(f"cells[{i}]: cell_id {d['cell_id']!r} appears twice")
        seen.add(d["cell_id"])
        out.append(_cell_from_dict(r, d, f"cells[{i}] ({d['cell_id'][:80]})"))
    return tuple(out)


def write_results(run: RunResult, path: str | os.PathLike[str]) -> Path:
    """Write ``run`` to ``path`` atomically (temp file + rename), so an interrupted run leaves valid JSON.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    from profattn.files import write_text_atomic

    data = run_to_dict(run)
    problem = _unreadable_number(data)
    if problem:
        raise ResultsError(f"{path}: not written: {problem}, which no results reader accepts (a workload too large "
                           "for a 64-bit ledger?)")
    return write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def _unreadable_number(data: Any) -> str | None:
    """The first number of ``data`` (a results dict about to be written) that the reader would refuse — the same
    bound (:func:`profattn.values.number_problem`: 64-bit integers, finite floats) — as "field X is …"; None."""
    stack: list[tuple[Any, list[str | int]]] = [(data, [])]
    while stack:
        node, where = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, (list, tuple)) else ()
        for key, value in items:
            if isinstance(value, (dict, list, tuple)):
                stack.append((value, [*where, key]))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                why = number_problem(value)
                if why:
                    return f"field {_path([*where, key], data)!r} is {why}"
    return None


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
        data = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        hint = "" if path.name == "results.json" else "; expected a run directory or its results.json"
        raise ResultsError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}){hint}") from None
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply") from None
    try:
        return run_from_dict(data, where=str(path))
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply") from None
    except ResultsError as exc:
        raise ResultsError(f"{path}: {exc}") from None
