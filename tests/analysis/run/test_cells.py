"""A graph-timed cell's profiled CUDA-graph replays (``<cell id>::graph-replay`` ranges around ``cudaGraphLaunch``)
become its :class:`~profattn.results.GraphReplaySummary`: the replayed kernels, their family check, and whether they
are the eager calls' kernels; replays of another family's kernels make the cell ineligible. Hand-built Kineto traces
in the layout torch 2.11 writes (a replayed kernel carries the correlation of the ``cudaGraphLaunch``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import factories
from profattn.analysis.run.cells import summarize_cell
from profattn.families import FLASH, graph_capture_range, graph_replay_range
from profattn.results import read_results, write_results
from profattn.trace import load_trace

CELL = "decode_b8_q1_kv8192.sdpa-flash"
SPLIT, COMBINE = "flash_fwd_splitkv_kernel", "flash_fwd_splitkv_combine_kernel"


def _ev(cat: str, name: str, ts: float, dur: float, *, pid: int = 1, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name: str, ts: float, dur: float, correlation: int) -> dict:
    return _ev("kernel", name, ts, dur, pid=0, tid=7, correlation=correlation, device=0, stream=7, grid=[1, 7, 32],
               block=[128, 1, 1])


def _trace(tmp_path: Path, replay_kernels: tuple[str, str] | None = (SPLIT, COMBINE)) -> Path:
    """Two eager calls (split 10 µs + combine 2 µs each), a capture range holding one warm-up call, then two replays
    (one ``cudaGraphLaunch`` each; its kernels 9 µs + 2 µs) — or replays whose kernels were not recorded (None)."""
    events = []
    for i, t0 in enumerate((0, 100)):
        events += [_ev("user_annotation", CELL, t0, 50), _ev("cuda_runtime", "cudaLaunchKernel", t0 + 5, 1, correlation=2 * i + 1),
                   _ev("cuda_runtime", "cudaLaunchKernel", t0 + 10, 1, correlation=2 * i + 2),
                   _kernel(SPLIT, t0 + 20, 10, 2 * i + 1), _kernel(COMBINE, t0 + 31, 2, 2 * i + 2)]
    events += [_ev("user_annotation", graph_capture_range(CELL), 200, 80),
               _ev("cuda_runtime", "cudaLaunchKernel", 205, 1, correlation=5), _kernel(SPLIT, 210, 10, 5),
               _ev("cuda_runtime", "cudaStreamBeginCapture", 230, 1, correlation=6)]
    for i, t0 in enumerate((300, 400)):
        corr = 10 + i
        events += [_ev("user_annotation", graph_replay_range(CELL), t0, 50), _ev("cuda_runtime", "cudaGraphLaunch", t0 + 5, 3, correlation=corr)]
        if replay_kernels:
            events += [_kernel(replay_kernels[0], t0 + 10, 9, corr), _kernel(replay_kernels[1], t0 + 20, 2, corr)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _cell():
    c = factories.cell(factories.SEED.workloads[2], "sdpa-flash", 20.0)
    return replace(c, cell_id=CELL, graph_timing=c.timing)


def test_replayed_kernels_are_read_apart_from_the_eager_calls(tmp_path: Path):
    s = summarize_cell(load_trace(_trace(tmp_path)), "t.json", _cell(), FLASH)
    # the eager evidence is as before: two calls, two kernels each; the capture's warm-up call is not one of them
    assert s.calls == 2 and s.kernels_per_call == 2.0 and s.gpu_time_per_call_us == 12.0 and s.family_ok is True
    g = s.graph
    assert (g.replays, g.kernels_per_replay, g.gpu_time_per_replay_us) == (2, 2.0, 11.0)
    assert g.kernels == (SPLIT, COMBINE) and g.graph_launched is True and g.same_kernels is True
    assert g.family_ok is True and g.family_note == f"flash kernels ran: {COMBINE}, {SPLIT}"


def test_foreign_replayed_kernels_make_the_cell_ineligible(tmp_path: Path):
    foreign = ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wmma_f16", COMBINE)
    s = summarize_cell(load_trace(_trace(tmp_path, foreign)), "t.json", _cell(), FLASH)
    assert s.family_ok is True and s.graph.family_ok is False and s.graph.same_kernels is False
    assert s.graph.family_note.startswith("ran kernels of another family: cudnn_generated")
    c = replace(_cell(), trace=s)
    assert c.eligible is False and replace(c, trace=replace(s, graph=None)).eligible is True


def test_replays_without_recorded_kernels_are_no_evidence_either_way(tmp_path: Path):
    s = summarize_cell(load_trace(_trace(tmp_path, None)), "t.json", _cell(), FLASH)
    g = s.graph
    assert (g.replays, g.kernels_per_replay, g.gpu_time_per_replay_us, g.kernels) == (2, 0.0, None, ())
    assert g.family_ok is None and g.family_note == "no kernel was recorded for the 2 profiled graph replays"
    assert g.graph_launched is False and g.same_kernels is None
    assert replace(_cell(), trace=s).eligible is True


def test_no_replay_range_no_graph_summary_and_the_summary_round_trips(tmp_path: Path):
    other = replace(_cell(), cell_id="some.other-cell")
    assert summarize_cell(load_trace(_trace(tmp_path)), "t.json", other, FLASH).graph is None
    c = replace(_cell(), trace=summarize_cell(load_trace(_trace(tmp_path)), "t.json", _cell(), FLASH))
    back = read_results(write_results(factories.run([c]), tmp_path / "results.json")).cells[0]
    assert back.trace.graph == c.trace.graph and back.trace == c.trace
