"""``profattn db list|import|forget``, ``profattn recommend``, ``analyze --recommend`` and the store hook of
``profile``, through the command line (a store per test: ``$PROFATTN_DB`` is set by conftest)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from profattn.cli import main
from profattn.store import open_store

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "examples" / "h200-sweep"
TRACE = REPO / "tests" / "data" / "traces" / "h200_sdpa_decode_flash_gqa.pt.trace.json.gz"
B64 = "phase=decode,b=64,q=1,kv=8192,hq=16,hkv=4,d=128,page=16"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_import_list_recommend_forget(tmp_path: Path):
    for _ in range(2):  # importing again replaces the run's cells
        res = invoke("db", "import", str(SWEEP))
        assert res.exit_code == 0 and "run-4c593dd77f72: 152 cells (NVIDIA H200, decode-sweep" in res.output
    res = invoke("db", "list")
    assert res.exit_code == 0 and "1 run(s), 152 cell(s); GPUs: NVIDIA H200 (152 cells)" in res.output
    res = invoke("recommend", "--workload", B64)
    assert res.exit_code == 0, res.output
    assert "measured winner: sdpa-cudnn, 6.2 % ahead of triton-paged-decode — not a drop-in for a paged KV cache" in res.output
    assert "use (drop-in for a paged KV cache with a block table): triton-paged-decode, 252.3 µs measured" in res.output
    assert "grid [1,4,64] block [128,1,1], 256 CTAs (1.94 per SM)" in res.output
    doc = json.loads(invoke("recommend", "--workload", B64, "--gpu", "H200", "--json").output)
    assert doc["schema"] == "profattn.recommend" and doc["version"] == 3 and doc["status"] == "measured winner"
    assert doc["ranked"][0]["timing"] == "graph" and doc["ranked"][1]["ratio"] > 1.06
    assert doc["best_drop_in"] == "triton-paged-decode" and doc["options"][0]["drop_in"]
    res = invoke("recommend", "--workload", B64.replace("kv=8192", "kv=6000"), "--plan", "2")
    assert res.exit_code == 0 and res.output.count("profattn profile --workload") == 3  # measure-it + 2 planned
    out = tmp_path / "policy.json"
    res = invoke("recommend", "--export", str(out))
    assert res.exit_code == 0 and "held out (leave one slice out" in res.output
    policy = json.loads(out.read_text())
    assert policy["schema"] == "profattn.policy" and policy["version"] == 4
    assert invoke("recommend", "--export", str(out)).exit_code == 0  # its own earlier export is replaced
    assert {s["field"] for s in policy["validation"]["slices"]} >= {"batch_decade", "kv_decade", "page_size"}
    assert invoke("db", "forget", "run-4c593dd77f72").output == "forgot 1 run(s)\n"


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path):
    res = invoke("recommend", "--workload", B64)  # no store yet
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "no results store" in res.output
    invoke("db", "import", str(SWEEP))
    for args, msg in ((["recommend", "--workload", "phase=decode,b=8"], "missing"),
                      (["recommend"], "give --workload"),
                      (["recommend", "--export", str(tmp_path / "p.json"), "--json"], "--json prints the answer for --workload"),
                      (["recommend", "--workload", B64, "--gpu", "A100"], "not in the store"),
                      (["db", "forget", "run-nope"], "no run 'run-nope'"),
                      (["db", "forget", "--before", "yesterday"], "not a date"),
                      (["db", "forget", "--before", "2026-13-45"], "not a date"),
                      (["db", "forget", "--before", "2026-02-30"], "not a date"),
                      (["recommend", "--workload", B64, "--workload", B64], "option --workload given more than once; give it once"),
                      (["recommend", "--workload", B64, "--gpu", "H200", "--gpu=A100"], "option --gpu given more than once"),
                      (["db", "import", str(tmp_path)], "no such file"),
                      (["analyze", str(TRACE), "--out", str(tmp_path / "r.html"), "--gpu", "H200"], "go with --recommend")):
        res = invoke(*args)
        assert res.exit_code == 2 and res.output.count("\n") == 1 and msg in res.output, (args, res.output)


def test_analyze_recommend_on_a_committed_trace(tmp_path: Path):
    from factories import cell, run

    from profattn.workload import Workload

    w = Workload(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128)
    db = tmp_path / "s.sqlite"
    with open_store(db) as s:
        s.add_run(run([cell(w, "sdpa-flash", 46.0), cell(w, "sdpa-cudnn", 36.8, family="cudnn")]), tmp_path)
    res = invoke("analyze", str(TRACE), "--out", str(tmp_path / "r.html"), "--recommend", "--db", str(db),
                 "--recommend-json", str(tmp_path / "advice.json"))
    assert res.exit_code == 0, res.output
    assert "3× decode b8 q1 hq16/hkv4 d128 bfloat16, kv 8,192: ran flash (torch SDPA on dense [B, H, L, d] tensors) = sdpa-flash, 46.0 µs" in res.output
    assert "use: sdpa-cudnn (drop-in; 36.8 µs measured at kv 8,192; measured winner across the lengths)" in res.output
    assert "with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):" in res.output
    assert "saves 27.8 µs of 138.8 µs GPU time" in res.output
    assert "estimated saving: 27.8 µs of GPU time over the trace" in res.output
    (doc,) = json.loads((tmp_path / "advice.json").read_text())
    assert doc["gpu"] == "NVIDIA H200" and round(doc["saving_us"], 3) == 27.763


def test_profile_adds_its_cells_and_a_store_failure_is_a_warning(tmp_path: Path):
    spec = "phase=decode,batch=2,q_len=1,kv_len=64,num_q_heads=4,num_kv_heads=2,head_dim=32,dtype=float32"
    res = invoke("profile", "--device", "cpu", "--workload", spec, "--backend", "eager", "--out", str(tmp_path / "a"),
                 "--profile-calls", "1")
    assert res.exit_code == 0 and "store: 1 cell of run-" in res.output
    with open_store(os.environ["PROFATTN_DB"]) as s:
        assert len(s.runs()) == 1 and s.cells_on(s.runs()[0].gpu)[0].backend == "eager"
    blocked = tmp_path / "dir.sqlite"
    blocked.mkdir()
    res = invoke("profile", "--device", "cpu", "--workload", spec, "--backend", "eager", "--out", str(tmp_path / "b"),
                 "--profile-calls", "1", "--db", str(blocked))
    assert res.exit_code == 0 and "warning: the run was not added to the results store" in res.output
    assert (tmp_path / "b" / "results.json").is_file()


def test_measure_profiles_only_an_unmeasured_workload_and_needs_a_gpu(monkeypatch):
    """``recommend --measure``: on a machine without a GPU one line and exit 2 (with the command to run elsewhere); with
    one, an unmeasured workload is profiled (the profile command with the spec and the store) and a measured one
    is not."""
    import profattn.cli.recommend as rec
    from profattn.cli.measure import profile

    invoke("db", "import", str(SWEEP))
    monkeypatch.setattr(rec, "_local_gpu", lambda: None)
    res = CliRunner().invoke(main, ["recommend", "--measure", "--workload", B64.replace("kv=8192", "kv=4096")])
    assert res.exit_code == 2 and "--measure needs a CUDA GPU on this machine" in res.output
    assert "profattn profile --workload phase=decode" in res.output and len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(main, ["recommend", "--measure", "--workload", B64])  # measured: answered, no GPU needed
    assert res.exit_code == 0 and "measured winner: sdpa-cudnn" in res.output
    calls = []
    monkeypatch.setattr(rec, "_local_gpu", lambda: "NVIDIA H200")
    monkeypatch.setattr(profile, "callback", lambda **kw: calls.append(kw))
    invoke("recommend", "--measure", "--workload", B64)  # measured in the committed sweep: nothing to run
    assert calls == []
    unmeasured = B64.replace("kv=8192", "kv=4096")
    invoke("recommend", "--measure", "--workload", unmeasured)
    assert [(c["workload_specs"], c["device_name"]) for c in calls] == [((unmeasured,), "cuda")]
    res = CliRunner().invoke(main, ["recommend", "--measure", "--workload", B64, "--gpu", "A100"])
    assert res.exit_code == 2 and "not --gpu A100" in res.output


def test_selection_small_end_to_end(tmp_path: Path):
    """The selection corpus's CPU twin through profile, the store hook, recommend and the exported policy."""
    from profattn.workload import get_preset

    preset = get_preset("selection-small")
    assert len(preset.workloads) == 14 and {w.phase.value for w in preset.workloads} == {"decode", "prefill", "train"}
    backends = ("sdpa-math", "sdpa-flash", "eager", "torch-paged-reference")
    args = ["profile", "--preset", "selection-small", "--device", "cpu", "--out", str(tmp_path / "run"), "--profile-calls", "1"]
    for b in backends:
        args += ["--backend", b]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert "store: 56 cells of run-" in res.output
    out = tmp_path / "policy.json"
    res = invoke("recommend", "--export", str(out))
    assert res.exit_code == 0, res.output
    policy = json.loads(out.read_text())
    assert {m["backend"] for m in policy["models"]} <= set(backends) and policy["models"]
    assert policy["validation"]["leave_one_workload_out"] is None and policy["validation"]["slices"]
    spec = "phase=decode,b=3,q=1,kv=200,hq=4,hkv=2,d=16,dtype=fp32,page=16"
    res = invoke("recommend", "--workload", spec)
    assert res.exit_code == 0 and "caller: a paged KV cache with a block table" in res.output


def test_a_workload_that_cannot_fit_is_refused_not_priced(tmp_path: Path):
    """issue 33, item 10: before, a 1M-token × 64 decode (a 275 GB K/V cache) on the 141 GB H200 was priced
    ("58.53 ms, ±12,051 %"); now it cannot fit, as profile says."""
    assert invoke("db", "import", str(SWEEP)).exit_code == 0
    res = CliRunner().invoke(main, ["recommend", "--workload", "phase=decode,b=64,q=1,kv=1048576,hq=32,hkv=8,d=128,page=16"])
    assert res.exit_code == 2 and "cannot fit" in res.stderr and "Traceback" not in res.output, res.output
    assert res.stderr.count("\n") == 1
    assert invoke("recommend", "--workload", B64).exit_code == 0
