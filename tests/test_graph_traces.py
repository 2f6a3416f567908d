"""``tests/data/scripts/graph_traces.py`` (the CUDA-graph decode traces for the engine-trace analysis): its schedule
(padded batch sizes, slots, page lists, vLLM's step annotation) by hand, and a CPU dry run of the SDPA program — no
graph is captured on a CPU, so a "replay" is the step itself — whose trace and manifest must agree with each other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import script_module

from profattn.trace import load_trace, ops_in_range

SCRIPT = Path(__file__).parent / "data" / "scripts" / "graph_traces.py"


@pytest.fixture(scope="module")
def gt():
    with script_module(SCRIPT, "graph_traces") as module:
        yield module


def test_schedule_by_hand(gt):
    assert gt.padded_size(3, (4, 8, 16)) == 4 and gt.padded_size(8, (16, 4, 8)) == 8 and gt.padded_size(9, (4, 8, 16)) == 16
    with pytest.raises(ValueError, match="exceeds every captured size"):
        gt.padded_size(17, (4, 8, 16))
    assert gt.step_annotation([100, 37]) == "execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk137sqsq2sqsk137)"
    # 2 real requests padded to 3, pages of 4 tokens, 3 pages each from page 1 (page 0 is the padding page)
    r = gt.Requests(2, 3, page_size=4, pages_per_request=3, start_lens=[4, 9], first_page=1)
    assert r.table == [[1, 2, 3], [4, 5, 6], [0, 0, 0]]
    slots, lens = r.advance()  # request 0 writes position 4 (page 2, slot 0), request 1 position 9 (page 6, slot 1)
    assert slots == [8, 25, 0] and lens == [5, 10, 1]
    assert r.csr(lens) == ([0, 2, 5, 6], [1, 2, 4, 5, 6, 0], [1, 2, 1])
    assert r.advance()[1] == [6, 11, 1] and r.advance()[1] == [7, 12, 1]  # request 1's 12 slots are full
    with pytest.raises(ValueError, match="request 1 outgrew its 3 pages"):
        r.advance()
    with pytest.raises(ValueError, match="start lengths"):
        gt.Requests(2, 1, page_size=4, pages_per_request=3, start_lens=[4, 9], first_page=1)


def test_cpu_dry_run_of_the_sdpa_program(gt, tmp_path: Path, capsys):
    out = tmp_path / "traces"
    assert gt.main(["--out", str(out), "--device", "cpu", "--backend", "sdpa", "--backend", "flashinfer"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["schema"] == "profattn.graph-traces" and m["device"] == "cpu"
    assert m["skipped"] == [{"backend": "flashinfer", "reason": "FlashInfer runs on CUDA GPUs only"}]
    shape = gt.CPU
    for entry, mode in zip(m["traces"], gt.MODES):
        assert entry["backend"] == "sdpa" and entry["mode"] == mode and entry["correct"]
        steps = shape.steps * len(shape.batch_sizes)
        assert [r["padded_batch"] for r in entry["replays"]] == list(shape.batch_sizes) * shape.steps
        assert [r["batch"] for r in entry["replays"]] == list(shape.real_batches) * shape.steps
        assert entry["graph_launches"] == 0 and not any(g["captured"] for g in entry["graphs"])  # nothing captured on a CPU
        # each request grows by one token a step
        first, again = entry["replays"][0]["kv_lens"], entry["replays"][len(shape.batch_sizes)]["kv_lens"]
        assert [b - a for a, b in zip(first, again)] == [1] * len(first)
        trace = load_trace(out / entry["file"])
        names = trace.ranges["name"].tolist()
        assert sum(n.startswith("ProfilerStep#") for n in names) == steps
        assert sum(n.startswith("graph_capture bs=") for n in names) == (len(shape.batch_sizes) if mode == "capture-in-window" else 0)
        for r in entry["replays"]:
            assert names.count(r["annotation"]) >= 1
            sdpa = ops_in_range(trace, r["annotation"])
            assert (sdpa["name"] == "aten::scaled_dot_product_attention").sum() == shape.layers * names.count(r["annotation"])
    assert "sdpa" in capsys.readouterr().out


def test_bad_arguments_are_one_line(gt, tmp_path: Path, capsys):
    assert gt.main(["--out", str(tmp_path), "--backend", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graph_traces: error: argument --backend: invalid choice")
    (tmp_path / "x").write_text("")
    assert gt.main(["--out", str(tmp_path), "--device", "cpu"]) == 2
    assert "exists and is not an empty directory" in capsys.readouterr().err
