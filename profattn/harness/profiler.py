"""The profiler pass: every cell of a regime runs a few calls under ``torch.profiler`` (Kineto).

Each call runs inside ``record_function(<cell_id>)`` and ends with a device synchronize, so every kernel
it launches (from any thread: the backward runs on autograd's device thread) starts inside that range's
window. One gzipped Chrome trace per regime is written in the TensorBoard plugin's layout,
``traces/<regime>/<worker>.<time_ns>.pt.trace.json.gz`` (``torch.profiler.tensorboard_trace_handler``).
Worker names default to ``profattn``, not the host name; stacks are off; the written trace is scrubbed of
absolute paths, the host name and the user name (:func:`profattn.privacy.scrub_trace_file`).
``keep_host_info=True`` (``--keep-host-info``) keeps all three as torch writes them: the host-named worker
(torch's ``<host>_<pid>``), Python stacks, and unscrubbed paths.

On CUDA the L2 is evicted before each call, outside the range (a 256 MB read, as in the timing pass),
so the kernel times in the trace are cold-L2 times, comparable with the timing pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Sequence

import torch

from profattn.harness.timing import l2_flusher


@dataclass(frozen=True)
class ProfiledCall:
    """One cell to profile: its range name, the call, and the backend's context factory."""

    cell_id: str
    fn: Callable[[], object]
    context: Callable[[], ContextManager[object]]
    before: Callable[[], None] | None = None
    graph: bool = False  #: the cell is also timed as a CUDA-graph replay (decode on CUDA)


def profile_cells(cells: Sequence[ProfiledCall], trace_dir: Path, *, device: torch.device, calls: int = 3,
                  worker_name: str | None = None, keep_host_info: bool = False) -> Path:
    """Profile ``calls`` calls of each cell into one trace under ``trace_dir``; return the trace path.

    A cell that raises during profiling is skipped (its range may be partial); the exception is
    re-raised only if no trace could be written.

    Raises:
        RuntimeError: the profiler wrote no trace file.
    """
    from torch.profiler import ProfilerActivity, profile, record_function, tensorboard_trace_handler

    trace_dir.mkdir(parents=True, exist_ok=True)
    before_files = set(trace_dir.glob("*.pt.trace.json.gz"))
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    flush = l2_flusher(device) if device.type == "cuda" else (lambda: None)
    if worker_name is None and not keep_host_info:
        worker_name = "profattn"
    handler = tensorboard_trace_handler(str(trace_dir), worker_name=worker_name, use_gzip=True)
    with profile(activities=activities, record_shapes=True, with_stack=keep_host_info, on_trace_ready=handler):
        for cell in cells:
            try:
                with cell.context():
                    for _ in range(calls):
                        if cell.before:
                            cell.before()
                        flush()
                        sync()
                        with record_function(cell.cell_id):
                            cell.fn()
                            sync()
            except Exception:  # noqa: BLE001 - one bad cell must not lose the regime's trace
                continue
    new = sorted(set(trace_dir.glob("*.pt.trace.json.gz")) - before_files, key=lambda p: p.stat().st_mtime)
    if not new:
        raise RuntimeError(f"torch.profiler wrote no trace under {trace_dir}")
    if not keep_host_info:
        from profattn.privacy import scrub_trace_file

        scrub_trace_file(new[-1])
    return new[-1]


