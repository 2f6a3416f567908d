"""Re-read the traces a stored run names and rebuild each cell's trace evidence. Torch-free.

``profattn report`` and :func:`profattn.load_run` use it; the harness passes a ``family_of`` that also
knows the families of installed plugins (:func:`profattn.harness.session.reattach_traces`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from profattn.analysis.run.cells import attach_trace
from profattn.errors import TraceError
from profattn.families import KernelFamily, builtin_family
from profattn.files import inside_run
from profattn.results import CellResult, RunResult
from profattn.trace.kineto import Trace, load_trace


class TraceProblemKind(Enum):
    """Why :func:`reattach_traces` did not read a cell's trace (the cell keeps the summary stored in results.json)."""

    OUTSIDE_RUN = "outside the run directory"  #: the trace_file leaves the run directory (absolute, ``..``, a link out)
    MISSING = "missing"  #: no file at the trace_file's path
    DIRECTORY = "a directory"  #: the path is a directory
    NOT_REGULAR = "not a regular file (a FIFO, socket or device)"  #: exists, but not a file (never opened: a FIFO blocks)
    BROKEN_LINK = "a broken symbolic link"  #: a symbolic link (inside the run) to nothing
    UNREADABLE = "unreadable"  #: the file exists but cannot be parsed (truncated, not JSON): ``detail`` says why


@dataclass(frozen=True)
class TraceProblem:
    """One cell whose trace was not read: its id, the ``trace_file`` it names, the :class:`TraceProblemKind` and, for
    an unreadable file, the parser's one-line message (``detail``)."""

    cell_id: str
    trace_file: str
    kind: TraceProblemKind
    detail: str = ""


@dataclass(frozen=True)
class TraceRead:
    """:func:`reattach_traces`' result: the run with its cells' trace evidence rebuilt, and the traces not read."""

    run: RunResult
    problems: tuple[TraceProblem, ...] = ()


def stored_family(cell: CellResult) -> KernelFamily | None:
    """The built-in family the cell recorded (``cell.family``); None for a family not built in."""
    return builtin_family(cell.family)


def reattach_traces(run: RunResult, run_dir: str | Path,
                    family_of: Callable[[CellResult], KernelFamily | None] = stored_family) -> TraceRead:
    """Re-parse the traces a run names (paths relative to ``run_dir``) and rebuild every cell's
    :class:`~profattn.results.TraceSummary`; each trace file is parsed once.

    Cells without a trace, or whose family ``family_of`` does not know (None: e.g. a plugin this install lacks) keep
    their stored summary. A run directory is a sandbox: a ``trace_file`` that leaves it (absolute, ``..``, a symbolic
    link out; :func:`profattn.files.inside_run`) is not opened; one that is missing or not a regular file (a
    directory, a FIFO, a device, a broken link) is not read; a trace that cannot be parsed (truncated, not JSON) is
    not used. In each case the cell keeps its stored summary, a :class:`TraceProblem` says why (its
    :class:`TraceProblemKind`; the report words it, in its warnings and on the cell's row), and the rest of the run
    is still rebuilt.
    """
    run_dir = Path(run_dir)
    cache: dict[Path, Trace | TraceError] = {}
    problems: list[TraceProblem] = []
    for c in run.cells:
        if c.trace is None:
            continue
        path = inside_run(run_dir, c.trace.trace_file)
        if path is None:
            problems.append(TraceProblem(c.cell_id, c.trace.trace_file, TraceProblemKind.OUTSIDE_RUN))
            continue
        if not path.is_file():  # missing, a directory, a FIFO or a device: the stored summary stays
            problems.append(TraceProblem(c.cell_id, c.trace.trace_file, _not_a_file(path)))
            continue
        if path not in cache:
            try:
                cache[path] = load_trace(path)
            except TraceError as exc:
                cache[path] = exc
        trace = cache[path]
        if isinstance(trace, TraceError):
            problems.append(TraceProblem(c.cell_id, c.trace.trace_file, TraceProblemKind.UNREADABLE, str(trace)))
            continue
        family = family_of(c)
        if family is None:
            continue
        run = run.with_cell(attach_trace(c, trace, c.trace.trace_file, family))
    return TraceRead(run, tuple(problems))


def _not_a_file(path: Path) -> TraceProblemKind:
    """Why ``path`` (not a regular file) was not read."""
    if not path.exists():
        return TraceProblemKind.BROKEN_LINK if path.is_symlink() else TraceProblemKind.MISSING
    return TraceProblemKind.DIRECTORY if path.is_dir() else TraceProblemKind.NOT_REGULAR
