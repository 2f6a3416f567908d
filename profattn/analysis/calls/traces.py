"""Many trace files analyzed as one set: the logic behind ``profattn analyze`` (no display text; the
page, its rows and the JSON document are :mod:`profattn.report.analyze`).

Trace files are found (a file, or every ``*.json``/``*.json.gz`` under a directory, one per rank or
worker), parsed by :func:`profattn.trace.load_trace` (a :class:`~profattn.errors.TraceError` names the
file that cannot be used: an error for a file given itself, a warning and a skip for a file found in a
directory, e.g. a run's ``results.json``; so is a directory's JSON file with no profiler event at all, such as
TraceLens's ``execution_details.json``) and analyzed one by one by
:func:`profattn.analysis.calls.find.find_attention_calls`.

**Graph captures.** A trace that recorded graph captures (:attr:`Trace.captures`: vLLM's
``<torch_profiler_dir>/capture_traces/graph_capture_rank_<r>.*.pt.trace.json.gz``) is a capture source for the
other traces found under the same path argument, and the ``captures`` given explicitly (``--capture``) for all of
them; a source of another rank (``distributedInfo.rank``) than the replay's is not used. Traces that replay graphs
are held until every file is read (each file is still read once); the others are analyzed as they are read. Unless ``keep_host_info``, paths are shown relative to the
directory given (or as the file's name) and each file's analysis is scrubbed of absolute paths, host and
user names (:mod:`profattn.privacy`). The set's own findings (files skipped, ranks claimed twice) are
typed records of :class:`TraceSetAnalysis`; :mod:`profattn.report.analyze` words them as warnings.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from profattn.analysis.calls.call_records import TraceCalls
from profattn.analysis.calls.comm import CommSource, RankTimeline, rank_timeline
from profattn.analysis.calls.find import find_attention_calls
from profattn.analysis.calls.graphs import CaptureSource
from profattn.errors import ProfattnError
from profattn.trace.kineto import Trace, load_trace
from profattn.values import safe_text
from profattn.workload import DTYPE_BYTES

__all__ = [
    "RankClash",
    "SkippedFile",
    "TraceInput",
    "TraceSetAnalysis",
    "analyze_paths",
    "call_itemsize",
    "find_trace_files",
    "find_trace_inputs",
    "rank_clashes",
    "trace_group",
]


@dataclass(frozen=True)
class SkippedFile:
    """A file found in a directory that could not be analyzed: its shown path and why (e.g. ``not a Chrome
    trace (no 'traceEvents' key)`` for a ``results.json``, ``file is empty``)."""

    path: str
    reason: str


@dataclass(frozen=True)
class RankClash:
    """A rank (``distributedInfo.rank``) that more than one file claims: copies of one trace, or traces of
    different runs mixed together. ``paths``: the shown paths of those files, in the order found."""

    rank: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class TraceSetAnalysis:
    """The analysis of every trace file given: one :class:`TraceCalls` per file (in the order found),
    the files of a directory that could not be analyzed (``skipped``) and the ranks more than one file
    claims (``rank_clashes``): the findings about the set as a whole, which the report shows as warnings."""

    files: tuple[TraceCalls, ...]
    skipped: tuple[SkippedFile, ...] = ()
    rank_clashes: tuple[RankClash, ...] = ()
    #: Per file (aligned with ``files``): its communication against its attention compute
    #: (:func:`~profattn.analysis.calls.comm.rank_timeline` over the whole trace), None for a trace without collectives.
    comm: tuple[RankTimeline | None, ...] = ()


@dataclass(frozen=True)
class TraceInput:
    """One file to analyze: ``path`` as found, ``shown`` the path the outputs show, ``in_directory`` whether
    it was found by searching a directory (then a file that cannot be read is skipped, not an error)."""

    path: Path
    shown: str
    in_directory: bool
    root: int = 0  #: which path argument found it (captures found under one apply to the traces found under it)


def find_trace_inputs(paths: Iterable[str | os.PathLike[str]], *, keep_host_info: bool = False) -> list[TraceInput]:
    """Trace files named by ``paths``: a file as given; a directory searched recursively for ``*.json``
    and ``*.json.gz`` (sorted). Each file once, in the order found.

    The path shown for a file is, by default, its path relative to the directory it was found in, or its
    name when it was given itself, never an absolute path; with ``keep_host_info`` it is the path as found. A name
    that is not UTF-8 (its bytes decoded as surrogates) is shown with U+FFFD in their place.

    Raises:
        ProfattnError: a path does not exist, or a directory holds no trace file.
    """
    found: dict[Path, TraceInput] = {}
    for root, raw in enumerate(paths):
        path = Path(raw)
        if path.is_dir():
            inside = sorted((p for p in path.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))),
                            key=_natural_key)  # rank_2 before rank_10
            if not inside:
                raise ProfattnError(f"{path}: no trace files (*.json, *.json.gz) in this directory")
            for p in inside:
                shown = os.fspath(p) if keep_host_info else p.relative_to(path).as_posix()
                found.setdefault(p, TraceInput(p, safe_text(shown)[0], True, root))
        elif path.exists():
            shown = os.fspath(path) if keep_host_info else path.name
            found.setdefault(path, TraceInput(path, safe_text(shown)[0], False, root))
        else:
            raise ProfattnError(f"{path}: no such file or directory")
    if not found:
        raise ProfattnError("no trace path given")
    return list(found.values())


def find_trace_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The paths of :func:`find_trace_inputs`: a file as given; a directory searched recursively for
    ``*.json`` and ``*.json.gz`` (sorted). Each file once, in the order found.

    Raises:
        ProfattnError: a path does not exist, or a directory holds no trace file.
    """
    return [t.path for t in find_trace_inputs(paths, keep_host_info=True)]


def _reason(error: ProfattnError, path: Path) -> str:
    """The message of ``error`` without the leading ``<path>: `` that trace errors start with."""
    text = str(error)
    prefix = f"{os.fspath(path)}: "
    return text.removeprefix(prefix)


def analyze_paths(paths: Iterable[str | os.PathLike[str]], *, keep_host_info: bool = False,
                  captures: Iterable[str | os.PathLike[str]] = ()) -> TraceSetAnalysis:
    """Find, parse and analyze every trace under ``paths``.

    A file found in a directory that cannot be analyzed (not a trace, e.g. a run's ``results.json``;
    empty; truncated; no profiler event at all; ...) is skipped with a warning naming it and the problem; a file
    given itself that cannot be analyzed is an error. Unless ``keep_host_info``, file paths are shown relative to the
    directory given (or as the file's name) and every string is scrubbed of absolute paths, host and user
    names (:mod:`profattn.privacy`). ``captures``: capture traces for every graph replay found (module docstring);
    they are analyzed as files too.

    Raises:
        ProfattnError: a missing path or an empty directory (:func:`find_trace_inputs`), or no file that
            could be analyzed at all (the message names the files and their problems).
        TraceError: a file given itself (or as a capture) that cannot be read as a trace (the message names it).
    """
    paths = list(paths)
    captures = list(captures)
    inputs = find_trace_inputs(paths, keep_host_info=keep_host_info)
    if captures:
        extra = find_trace_inputs(captures, keep_host_info=keep_host_info)
        known = {t.path for t in inputs}
        inputs += [TraceInput(t.path, t.shown, False, -1) for t in extra if t.path not in known]
        explicit = {t.path for t in extra}
    else:
        explicit = set()
    results: dict[int, tuple[TraceCalls, RankTimeline | None, Path]] = {}
    skipped: list[SkippedFile] = []
    sources: list[tuple[TraceInput, CaptureSource, int | None]] = []  # (input, source, rank)
    waiting: list[tuple[int, TraceInput, Trace]] = []
    for position, item in enumerate(inputs):
        try:
            trace = load_trace(item.path)
            if item.in_directory and _no_events(trace):
                raise ProfattnError(f"{item.path}: no profiler events (kernels, ops or ranges): not a Kineto trace")
        except ProfattnError as exc:
            if not item.in_directory:
                raise
            skipped.append(SkippedFile(item.shown, _reason(exc, item.path)))
            continue
        if not trace.captures.empty or item.path in explicit:
            sources.append((item, CaptureSource(item.shown, trace), _trace_rank(trace)))
        if trace.kernels["graph_launched"].any() if len(trace.kernels) else False:
            waiting.append((position, item, trace))  # merged once every capture is known
            continue
        own = [s for i, s, _ in sources if s.trace is trace]
        results[position] = _analyze_one(item, trace, own, keep_host_info)
    for position, item, trace in waiting:
        rank = _trace_rank(trace)
        usable = [src for i, src, r in sources
                  if (src.trace is trace or i.root == item.root or i.path in explicit)
                  and (rank is None or r is None or r == rank)]
        usable.sort(key=lambda src: src.trace is not trace)  # its own captures first
        results[position] = _analyze_one(item, trace, usable, keep_host_info)
    files = [results[p][0] for p in sorted(results)]
    comm = [results[p][1] for p in sorted(results)]
    real = {results[p][0].path: results[p][2] for p in results}
    if not files:
        listed = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3])
        more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        raise ProfattnError(f"no trace could be read ({len(skipped)} file(s) skipped: {listed}{more})")
    return TraceSetAnalysis(files=tuple(files), skipped=tuple(skipped), rank_clashes=rank_clashes(files, real),
                            comm=tuple(comm))


def _no_events(trace: Trace) -> bool:
    """A file that parsed but holds no event profattn reads (a JSON list of something else)."""
    return bool(trace.kernels.empty and trace.ops.empty and trace.ranges.empty and trace.captures.empty)


def _trace_rank(trace: Trace) -> int | None:
    info = trace.metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _analyze_one(item: TraceInput, trace: Trace, sources: list[CaptureSource],
                 keep_host_info: bool) -> tuple[TraceCalls, RankTimeline | None, Path]:
    fa = find_attention_calls(trace, captures=sources)
    fa = replace(fa, path=item.shown)
    if not keep_host_info:
        from profattn.privacy import scrub

        fa = scrub(fa)
    tl = rank_timeline(trace, calls=fa, itemsize=call_itemsize(fa))
    return fa, (replace(tl, path=fa.path) if tl.ops or tl.comm_source is not CommSource.NONE else None), item.path


def rank_clashes(files: Sequence[TraceCalls], real: "Mapping[str, Path] | None" = None) -> tuple[RankClash, ...]:
    """Every rank (``distributedInfo.rank``) that more than one of ``files`` claims, in the order the rank first
    appears; files without a rank never clash. Two files of one rank in different directories clash only when they
    are copies (same bytes; ``real``: shown path → file, where known): profattn writes one launch's ranks per
    directory (``traces/cp/<cell>/rank<r>.pt.trace.json.gz``), every cell with its rank 0."""
    by_rank: dict[int, list[str]] = {}
    for f in files:
        if f.rank is not None:
            by_rank.setdefault(f.rank, []).append(f.path)

    def clash(a: str, b: str) -> bool:
        if trace_group(a) == trace_group(b):
            return True
        pa, pb = (real or {}).get(a), (real or {}).get(b)
        return pa is None or pb is None or _same_bytes(pa, pb)

    return tuple(RankClash(rank, tuple(paths)) for rank, paths in by_rank.items()
                 if any(clash(a, b) for i, a in enumerate(paths) for b in paths[i + 1:]))


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        if a.stat().st_size != b.stat().st_size:
            return False
        return hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    except OSError:
        return True


def trace_group(path: str) -> str:
    """The directory of a shown trace path (``""`` for a file at the top): the ranks of one launch
    (profattn's ``traces/cp/<cell>/rank<r>…``: the cell)."""
    return posixpath.dirname(path.replace(os.sep, "/"))


def call_itemsize(calls: TraceCalls) -> int | None:
    """Bytes per element of the trace's attention calls when they all record one dtype (bf16/fp16 2, fp32 4), else
    None: the element size of collectives whose arguments record none (a ``TensorList``), e.g. K/V blocks sent
    around a ring."""
    dtypes = {c.shape.dtype for c in calls.calls if c.shape is not None and c.shape.dtype}
    return DTYPE_BYTES.get(dtypes.pop()) if len(dtypes) == 1 else None


def _natural_key(path: Path) -> list[object]:
    """Sort key that orders the numbers inside a path by value (``rank_2`` before ``rank_10``)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]
