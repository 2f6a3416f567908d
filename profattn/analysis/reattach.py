"""Re-read the traces a stored run names and rebuild each cell's trace evidence. Torch-free.

``profattn report`` and :func:`profattn.load_run` use it; the harness passes a ``family_of`` that also
knows the families of installed plugins (:func:`profattn.harness.session.reattach_traces`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from profattn.analysis.cells import attach_trace
from profattn.families import KernelFamily, builtin_family
from profattn.results import CellResult, RunResult
from profattn.trace.kineto import Trace, load_trace


def stored_family(cell: CellResult) -> KernelFamily | None:
    """The built-in family the cell recorded (``cell.family``); None for a family not built in."""
    return builtin_family(cell.family)


def reattach_traces(run: RunResult, run_dir: str | Path,
                    family_of: Callable[[CellResult], KernelFamily | None] = stored_family) -> RunResult:
    """Re-parse the traces a run names (paths relative to ``run_dir``) and rebuild every cell's
    :class:`~profattn.results.TraceSummary`; each trace file is parsed once.

    Cells without a trace, whose trace file is missing, or whose family ``family_of`` does not know
    (None: e.g. a plugin this install lacks) keep their stored summary.

    Raises:
        TraceError: a trace that exists but cannot be parsed.
    """
    run_dir = Path(run_dir)
    cache: dict[Path, Trace] = {}
    for c in run.cells:
        if c.trace is None:
            continue
        path = run_dir / c.trace.trace_file
        if not path.exists():
            continue
        if path not in cache:
            cache[path] = load_trace(path)
        family = family_of(c)
        if family is None:
            continue
        run = run.with_cell(attach_trace(c, cache[path], c.trace.trace_file, family))
    return run
