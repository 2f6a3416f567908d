"""Re-read the traces a stored run names and rebuild each cell's trace evidence. Torch-free.

``profattn report`` and :func:`profattn.load_run` use it; the harness passes a ``family_of`` that also
knows the families of installed plugins (:func:`profattn.harness.session.reattach_traces`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from profattn.analysis.cells import attach_trace
from profattn.errors import TraceError
from profattn.families import KernelFamily, builtin_family
from profattn.files import inside_run
from profattn.results import CellResult, RunResult
from profattn.trace.kineto import Trace, load_trace


#: Beginnings of the notes :func:`reattach_traces` leaves on a cell whose trace it did not read.
NOT_READ_NOTES = ("trace_file ", "trace unreadable")


def stored_family(cell: CellResult) -> KernelFamily | None:
    """The built-in family the cell recorded (``cell.family``); None for a family not built in."""
    return builtin_family(cell.family)


def reattach_traces(run: RunResult, run_dir: str | Path,
                    family_of: Callable[[CellResult], KernelFamily | None] = stored_family) -> RunResult:
    """Re-parse the traces a run names (paths relative to ``run_dir``) and rebuild every cell's
    :class:`~profattn.results.TraceSummary`; each trace file is parsed once.

    Cells without a trace, or whose family ``family_of`` does not know (None: e.g. a plugin this install lacks) keep
    their stored summary. A run directory is a sandbox: a ``trace_file`` that leaves it (absolute, ``..``, a symbolic
    link out; :func:`profattn.files.inside_run`) is not opened; one that is missing or not a regular file (a
    directory, a FIFO, a device) is not read; a trace that cannot be parsed (truncated, not JSON) is not used. In
    each case the cell keeps its stored summary and gets a note saying why (beginning with one of
    :data:`NOT_READ_NOTES`: the report shows them as warnings), and the rest of the run is still rebuilt.
    """
    run_dir = Path(run_dir)
    cache: dict[Path, Trace | TraceError] = {}
    for c in run.cells:
        if c.trace is None:
            continue
        path = inside_run(run_dir, c.trace.trace_file)
        if path is None:
            run = run.with_cell(_noted(c, f"trace_file {c.trace.trace_file!r} is outside the run directory: not read"))
            continue
        if not path.is_file():  # missing, a directory, a FIFO or a device: the stored summary stays, with a note
            what = ("is missing" if not path.exists() and not path.is_symlink() else
                    "is a directory" if path.is_dir() else "is not a regular file (a FIFO, socket or device)"
                    if path.exists() else "is a broken symbolic link")
            run = run.with_cell(_noted(c, f"trace_file {c.trace.trace_file!r} {what}: not read, stored summary kept"))
            continue
        if path not in cache:
            try:
                cache[path] = load_trace(path)
            except TraceError as exc:
                cache[path] = exc
        trace = cache[path]
        if isinstance(trace, TraceError):
            run = run.with_cell(_noted(c, f"trace unreadable, stored summary kept: {trace}"))
            continue
        family = family_of(c)
        if family is None:
            continue
        run = run.with_cell(attach_trace(c, trace, c.trace.trace_file, family))
    return run


def _noted(cell: CellResult, note: str) -> CellResult:
    return cell if note in cell.notes else replace(cell, notes=(*cell.notes, note))
