"""The profiler pass records a graph-timed cell's CUDA-graph capture and replays in ranges of their own
(``<cell id>::graph-capture``, ``<cell id>::graph-replay``) beside its eager calls. On a CPU the structure is checked
with a stand-in capture (no CUDA graph exists there); the GPU test checks that Kineto attributes the replayed kernels
to the replay ranges and that they are the eager calls' kernels."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from profattn.families import DENSE, graph_capture_range, graph_replay_range
from profattn.harness.profiler import ProfiledCall, profile_cells, profile_graph_replays
from profattn.trace import load_trace, ops_in_range


class _Replayer:
    """What ``capture`` returns on CUDA, on a CPU: ``replay()`` runs the captured call."""

    def __init__(self, fn):
        self.fn, self.replays = fn, 0

    def replay(self) -> None:
        self.replays += 1
        self.fn()


def test_capture_and_replays_in_their_own_ranges_on_a_cpu(tmp_path: Path):
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(32, 32)
    events: list[str] = []
    cell = ProfiledCall("w.b", lambda: torch.mm(a, a), contextlib.nullcontext, before=lambda: events.append("before"))
    captured: list[_Replayer] = []

    def capture(fn):
        events.append("capture")
        fn()  # a warm-up call, as capture_graph makes on its side stream
        captured.append(_Replayer(fn))
        return captured[-1]

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profile_graph_replays(cell, 3, capture=capture, flush=lambda: events.append("flush"), sync=lambda: None)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    assert events == ["capture"] + ["before", "flush"] * 3 and captured[0].replays == 3
    trace = load_trace(tmp_path / "t.json")
    names = trace.ranges["name"].tolist()
    assert names.count(graph_capture_range("w.b")) == 1 and names.count(graph_replay_range("w.b")) == 3
    assert "w.b" not in names  # the eager calls' range is profile_cells' own
    replayed = ops_in_range(trace, graph_replay_range("w.b"))
    assert (replayed["name"] == "aten::mm").sum() == 3 and sorted(set(replayed["call"])) == [0, 1, 2]
    assert (ops_in_range(trace, graph_capture_range("w.b"))["name"] == "aten::mm").sum() == 1


def test_a_cpu_run_profiles_no_graph(tmp_path: Path):
    a = torch.randn(8, 8)
    path = profile_cells([ProfiledCall("w.b", lambda: torch.mm(a, a), contextlib.nullcontext, graph=True)], tmp_path,
                         device=torch.device("cpu"), calls=2)
    names = load_trace(path).ranges["name"].tolist()
    assert names.count("w.b") == 2 and not any("::graph" in n for n in names)


@pytest.mark.gpu
def test_replayed_kernels_are_attributed_to_the_replays_on_the_gpu(tmp_path: Path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from dataclasses import replace

    import factories
    from profattn.analysis.run.cells import summarize_cell

    dev = torch.device("cuda")
    x = torch.randn(64, 1024, device=dev)
    cell = ProfiledCall("w.b", lambda: torch.softmax(x, dim=-1), contextlib.nullcontext, graph=True)
    path = profile_cells([cell], tmp_path, device=dev, calls=3)
    trace = load_trace(path)
    c = replace(factories.cell(factories.SEED.workloads[2], "eager", 10.0, family="dense"), cell_id="w.b")
    s = summarize_cell(trace, path.name, c, DENSE)
    assert s.calls == 3 and s.graph is not None and s.graph.replays == 3
    assert s.graph.graph_launched and s.graph.same_kernels and s.graph.family_ok, s.graph
