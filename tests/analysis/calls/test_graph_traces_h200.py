"""Real CUDA-graph decode traces from an H200 (``tests/data/graph-traces``, recorded by
``tests/data/scripts/graph_traces.py``: a 2-layer paged decode loop, one graph per padded batch 4 / 8 / 16, vLLM's step
annotation around each replay). torch 2.11.0+cu130's Kineto wrote no ``graph id`` / ``graph node id`` on any kernel,
and the three graphs launch the same kernels in the same order: no rule can tell which capture a replay came from, so
every replay is left unplaced (never attributed to the wrong capture), and the steps are still read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profattn.analysis.calls.graphs import GraphGap
from profattn.analysis.calls.traces import analyze_paths

DATA = Path(__file__).resolve().parents[2] / "data" / "graph-traces"
MANIFEST = json.loads((DATA / "manifest.json").read_text())


def analyzed(name: str):
    (f,) = analyze_paths([DATA / name]).files
    return f


def test_the_manifest_names_every_committed_trace():
    files = {t["file"] for t in MANIFEST["traces"]}
    assert files == {p.name for p in DATA.glob("*.pt.trace.json.gz")} and len(files) == 6
    assert MANIFEST["device"] == "NVIDIA H200" and MANIFEST["torch"] == "2.11.0+cu130"
    for p in DATA.glob("*.gz"):  # no graph node ids recorded by this build
        text = gzip.open(p, "rt").read()
        assert '"graph node id"' not in text and '"graph id"' not in text, p.name


@pytest.mark.parametrize("backend, launched", [("sdpa", 24), ("triton", 10)])
def test_capture_in_window_replays_are_ambiguous_never_misplaced(backend, launched):
    f = analyzed(f"{backend}.capture-in-window.pt.trace.json.gz")
    assert f.captures == 3  # one graph per padded batch (4, 8, 16)
    merge = f.graph_merge
    assert len(merge.launches) == 9 and all(l.gap is GraphGap.AMBIGUOUS and l.placed == 0 for l in merge.launches)
    assert {l.kernels for l in merge.launches} == {launched}
    assert not any(c.graph is not None for c in f.calls)  # nothing attributed to a capture it may not come from


def test_captured_before_says_no_capture_and_the_steps_are_read():
    f = analyzed("sdpa.captured-before.pt.trace.json.gz")
    assert f.captures == 0 and all(l.gap is GraphGap.NO_CAPTURE for l in f.graph_merge.launches)
    replays = next(t for t in MANIFEST["traces"] if t["file"] == "sdpa.captured-before.pt.trace.json.gz")["replays"]
    assert len(f.serving_steps) == len(replays) == 9
    for step, truth in zip(f.serving_steps, replays):
        g = step.annotation.generation
        assert step.annotation.name == truth["annotation"]
        assert (g.requests, g.sum_q, g.sum_k) == (truth["batch"], truth["batch"], sum(truth["kv_lens"]))


def test_a_graph_of_its_own_shape_is_placed_by_launch_order():
    """flex's batch-16 graph launches 24 kernels, the batch-4 and -8 graphs 22: the 24-kernel replays (steps 2, 5, 8:
    13 requests padded to 16) match one capture only — the third, batch 16's — and are placed there; the others stay
    ambiguous."""
    f = analyzed("flex.capture-in-window.pt.trace.json.gz")
    placed = [l for l in f.graph_merge.launches if l.placed]
    assert len(placed) == 3 and all(l.kernels == 24 and l.capture == 2 for l in placed)
    assert all(l.gap is GraphGap.AMBIGUOUS for l in f.graph_merge.launches if not l.placed)
    truth = next(t for t in MANIFEST["traces"] if t["file"] == "flex.capture-in-window.pt.trace.json.gz")
    assert [g["padded_batch"] for g in truth["graphs"]][2] == 16
    assert [r["step"] for r in truth["replays"] if r["padded_batch"] == 16] == [2, 5, 8]
    origins = {c.graph.capture for c in f.calls if c.graph is not None}
    assert origins == {2}
