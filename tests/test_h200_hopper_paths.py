"""``benchmarks/h200_hopper_paths.py`` (the one GPU job for FlashInfer's Hopper paths and the CUDA-graph traces): its
arguments, its plan, which backends it profiles again after a run lost cells (a sticky CUDA error, a dead run), its
table, and a CPU dry run of the whole job (the FlashInfer backends unsupported there, each cell saying why)."""

from __future__ import annotations

import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import script_module

import factories
from profattn.results import CellStatus, GraphReplaySummary, write_results

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "h200_hopper_paths.py"


@pytest.fixture(scope="module")
def job():
    with script_module(SCRIPT, "h200_hopper_paths") as module:
        yield module


def test_arguments_and_plan(job, tmp_path: Path, capsys):
    assert job.main([]) == 2 and capsys.readouterr().err.strip() == "h200_hopper_paths.py: error: --out is required"
    assert job.main(["--out", str(tmp_path), "--budget-s", "0"]) == 2
    assert job.main(["--out", str(tmp_path), "--graph-backend", "eager"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("h200_hopper_paths.py: error: ") for e in err)
    plan = job.make_plan(job.parse_args(["--out", str(tmp_path)]))
    assert plan.backends == job.NEW + job.COMPARED and plan.workloads == job.GPU_WORKLOADS
    assert plan.prewarm == tuple(b for b in plan.backends if b.startswith("flashinfer-")) + ("flashinfer-append",)
    cmd = plan.profile_command(tmp_path / "runs" / "main", db=tmp_path / "s.sqlite")
    assert cmd[1:6] == ["-m", "profattn.cli", "profile", "--device", "cuda"] and "--no-counters" in cmd
    assert cmd.count("--backend") == 11 and cmd.count("--workload") == 6 and cmd[cmd.index("--db") + 1] == str(tmp_path / "s.sqlite")
    assert "mix=2x(q2048,kv8192)+32x(q1,kv4096),hq=16,hkv=4,d=128,page=16,append=true" in cmd
    assert plan.graph_command(tmp_path / "g")[-2:] == ["--device", "cuda"]
    cpu = job.make_plan(job.parse_args(["--out", str(tmp_path), "--device", "cpu", "--backend", "eager",
                                        "--graph-backend", "sdpa", "--counters"]))
    assert cpu.prewarm == () and cpu.backends == ("eager",) and cpu.workloads == job.CPU_WORKLOADS
    assert "--counters" in cpu.profile_command(tmp_path, db=tmp_path / "s") and cpu.graph_command(tmp_path)[-2:] == ["--backend", "sdpa"]
    from profattn.workload import parse_workload_spec

    for spec in job.GPU_WORKLOADS + job.CPU_WORKLOADS:  # every workload parses as profattn profile reads it
        parse_workload_spec(spec)
    (tmp_path / "x").write_text("")
    assert job.main(["--out", str(tmp_path), "--device", "cpu"]) == 2
    assert "is not an empty directory" in capsys.readouterr().err


def _results(tmp_path: Path, cells) -> Path:
    return write_results(factories.run(cells), tmp_path / "results.json")


def test_lost_backends_after_a_sticky_error_or_a_dead_run(job, tmp_path: Path):
    seed = factories.SEED.workloads
    ok = factories.cell(seed[2], "a", 10.0)
    sticky = replace(factories.cell(seed[2], "b", None), status=CellStatus.ERROR,
                     reason="AcceleratorError: CUDA error: an illegal memory access was encountered")
    after = replace(factories.cell(seed[3], "c", None), status=CellStatus.ERROR, reason="AcceleratorError: CUDA error: an "
                    "illegal memory access was encountered")
    again_a = replace(factories.cell(seed[3], "a", None), status=CellStatus.ERROR, reason="RuntimeError: whatever")
    lost, first = job.lost_backends(_results(tmp_path, [ok, sticky, after, again_a]), finished=True)
    assert lost == ["a", "b", "c"] and first == sticky.cell_id
    # an ordinary error is that cell's own: nothing to isolate
    plain = replace(sticky, reason="ValueError: no")
    assert job.lost_backends(_results(tmp_path, [ok, plain, again_a]), finished=True) == ([], None)
    # a run that died leaves pending cells: their backends are run again
    pending = replace(factories.cell(seed[4], "c", None), status=CellStatus.PENDING)
    assert job.lost_backends(_results(tmp_path, [ok, plain, pending]), finished=False) == (["c"], None)
    assert job.lost_backends(tmp_path / "missing.json", finished=False) == ([], None)


def test_summary_table(job, tmp_path: Path):
    w = factories.SEED.workloads[2]
    k = factories.kernel("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u>(Params)", 64, 9.0)
    c = factories.cell(w, "flashinfer-decode", 12.5, kernels=(k,), family="flashinfer")
    graph = GraphReplaySummary(replays=3, kernels_per_replay=2.0, gpu_time_per_replay_us=10.0, kernels=(k.name,),
                               graph_launched=True, family_ok=True, family_note="", same_kernels=False)
    c = replace(c, graph_timing=c.timing, trace=replace(c.trace, graph=graph),
                notes=("FlashInfer 0.5.3 BatchPrefillWithPagedKVCacheWrapper, causal=True, backend='auto' (resolved to 'fa3' in plan())",))
    u = replace(factories.cell(w, "flashinfer-xqa-decode", None), status=CellStatus.UNSUPPORTED,
                reason="XQA is only supported on SM90, SM100, SM120 GPUs (flashinfer/xqa.py); this GPU is SM 8.0")
    run_dir = tmp_path / "main"
    run_dir.mkdir()
    write_results(factories.run([c, u]), run_dir / "results.json")
    text = job.summary([run_dir])
    row = next(line for line in text.splitlines() if line.strip().startswith("flashinfer-decode "))
    assert "12.5 graph" in row and "3.0e-03" in row
    assert "flashinfer::BatchDecodeWithPagedKVCacheKernel (family ok; 3 graph replays: 2 kernels each, family ok, NOT the eager kernels)" in row
    assert "XQA is only supported on SM90" in text and "FlashInfer None" in text.splitlines()[0]
    assert "(resolved to 'fa3' in plan())" in text


def test_cpu_dry_run_of_the_job(job, tmp_path: Path, capsys):
    out, work = tmp_path / "out", tmp_path / "work"
    assert job.main(["--out", str(out), "--work", str(work), "--device", "cpu", "--backend", "flashinfer-cudnn-prefill",
                     "--backend", "torch-paged-reference", "--no-graph-traces"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["driver.log", "hopper-runs.tar.gz", "summary.txt"]
    with tarfile.open(out / "hopper-runs.tar.gz") as tf:
        names = tf.getnames()
        results = json.load(tf.extractfile("hopper-runs/main/results.json"))
    assert "hopper-runs/main/report.html" in names and not any(n.endswith(".sqlite") for n in names)
    cells = {(c["workload"]["phase"], c["backend"]): c for c in results["cells"]}
    assert len(cells) == 2 * len(job.CPU_WORKLOADS)
    assert all(c["status"] == "unsupported" and c["reason"] == "FlashInfer runs on CUDA GPUs only"
               for (_, b), c in cells.items() if b == "flashinfer-cudnn-prefill")
    assert all(c["status"] == "ok" for (_, b), c in cells.items() if b == "torch-paged-reference")
    table = (out / "summary.txt").read_text()
    assert table.count("flashinfer-cudnn-prefill       unsupported") == len(job.CPU_WORKLOADS)
    assert "profile: exit 0" in (out / "driver.log").read_text() and table in capsys.readouterr().out
