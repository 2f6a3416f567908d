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

A cell timed as a CUDA-graph replay (``ProfiledCall.graph``: decode on CUDA) is also replayed here, the way a serving
engine's trace shows it: after its eager calls, one capture of the call (:func:`~profattn.harness.timing.capture_graph`,
its warm-up calls included) inside ``record_function("<cell_id>::graph-capture")``, then ``calls`` replays, each
after the same flush and inside ``record_function("<cell_id>::graph-replay")`` (:func:`graph_capture_range`,
:func:`graph_replay_range`). Kineto attributes a replayed kernel to the ``cudaGraphLaunch`` that replayed it, so the
kernels behind the cell's graph latency are read from the trace (:func:`profattn.analysis.run.cells.summarize_cell`),
beside those of its eager calls; the timed replays stay unprofiled (:func:`~profattn.harness.timing.time_cuda_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Sequence

import torch

from profattn.families import graph_capture_range, graph_replay_range
from profattn.harness.timing import capture_graph, l2_flusher


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
    capture = (lambda fn: capture_graph(fn, device)) if device.type == "cuda" else None
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
                    if cell.graph and capture is not None:
                        profile_graph_replays(cell, calls, capture=capture, flush=flush, sync=sync)
            except Exception:  # noqa: BLE001 - one bad cell must not lose the regime's trace
                continue
    new = sorted(set(trace_dir.glob("*.pt.trace.json.gz")) - before_files, key=lambda p: p.stat().st_mtime)
    if not new:
        raise RuntimeError(f"torch.profiler wrote no trace under {trace_dir}")
    if not keep_host_info:
        from profattn.privacy import scrub_trace_file

        scrub_trace_file(new[-1])
    return new[-1]




def profile_graph_replays(cell: ProfiledCall, calls: int, *, capture: Callable[[Callable[[], object]], object],
                          flush: Callable[[], None], sync: Callable[[], None]) -> None:
    """Capture ``cell.fn`` once inside ``record_function(graph_capture_range(cell.cell_id))`` and replay it ``calls``
    times, each replay after ``cell.before``, ``flush`` and ``sync`` and inside
    ``record_function(graph_replay_range(cell.cell_id))`` followed by ``sync`` — inside a running profiler (see the
    module docstring). ``capture(fn)`` returns an object with ``replay()`` (a ``torch.cuda.CUDAGraph`` on CUDA:
    :func:`~profattn.harness.timing.capture_graph`); the graph is released after the last replay.

    Raises:
        whatever the capture or a replay raises (the caller skips the cell; its eager ranges are already recorded).
    """
    from torch.profiler import record_function

    with record_function(graph_capture_range(cell.cell_id)):
        graph = capture(cell.fn)
        sync()
    try:
        for _ in range(calls):
            if cell.before:
                cell.before()
            flush()
            sync()
            with record_function(graph_replay_range(cell.cell_id)):
                graph.replay()
                sync()
    finally:
        del graph
