"""CLI: the main job end to end on the CPU, re-rendering, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.analysis.run.analyze import analyze_run
from profattn.backends.registry import DEFAULT_BACKENDS, default_backends
from profattn.cli import main
from profattn.results import CellStatus, read_results


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def small_run(small_cpu_run) -> Path:
    """`profattn profile --regime all --preset small --device cpu`, once for the session (compiles Flex)."""
    return small_cpu_run.out


def test_profile_end_to_end(small_run: Path):
    assert (small_run / "report.html").stat().st_size > 1_000_000  # plotly.js inline
    run = read_results(small_run)
    assert run.preset == "small" and run.environment.device == "cpu"
    # the default set: every family once (12 of the 20 built-ins), FlashInfer's tensor-core decode included
    assert len(run.cells) == 5 * len(default_backends()) == 5 * 12
    assert {c.backend for c in run.cells} == set(DEFAULT_BACKENDS)
    assert all(c.status in (CellStatus.OK, CellStatus.INCORRECT, CellStatus.UNSUPPORTED, CellStatus.ERROR) for c in run.cells)
    for c in run.cells:
        if c.backend in ("eager", "sdpa-math"):
            assert c.status == CellStatus.OK and c.correctness.passed, c.cell_id
            assert c.trace is not None and c.trace.calls == 3 and c.trace.family_ok is True
        if c.status == CellStatus.UNSUPPORTED:
            assert c.reason
    flex_train = next(c for c in run.cells if c.backend == "flex" and c.workload.phase.value == "train")
    assert flex_train.status == CellStatus.UNSUPPORTED and "backward" in flex_train.reason
    html = (small_run / "report.html").read_text()
    assert "Verdict" in html and "preset <b>small</b>".lower() in html.lower()
    assert "the default preset for this device" in html


def test_report_rerenders_from_results_and_traces(small_run: Path, tmp_path: Path):
    out = tmp_path / "again.html"
    res = invoke("report", str(small_run), "--out", str(out))
    assert res.exit_code == 0, res.output
    assert out.read_text().count('class="chart"') == 3


def test_backends_lists_reasons():
    res = invoke("backends", "--device", "cpu")
    assert res.exit_code == 0
    assert "sdpa-cudnn" in res.output and "unavailable: CUDNN_ATTENTION runs on CUDA only" in res.output
    lines = {ln.split()[0]: ln for ln in res.output.splitlines() if ln and not ln.startswith(" ")}
    assert lines["torch-paged-reference"].endswith("available (prefill, decode, mixed only)")  # serving calls too
    assert lines["eager"].endswith("available")


@pytest.mark.parametrize("args,message", [
    (["profile", "--regime", "inference"], "Invalid value for '--regime'"),
    (["profile", "--backend", "flashinfer", "--device", "cpu"], "unknown backend 'flashinfer'"),
    (["profile", "--preset", "huge", "--device", "cpu"], "unknown preset 'huge'"),
    (["profile", "--device", "tpu"], "unknown device 'tpu'"),
    (["profile", "--bogus"], "No such option '--bogus'"),
    (["report", "/nonexistent/run"], "no such file"),
    (["frobnicate"], "No such command"),
    (["sweep", "prefill"], "sweep supports only 'decode', not 'prefill'"),
    (["profile", "--device", "cpu", "--out", ""], "--out must name a directory"),
    (["sweep", "decode", "--device", "cpu", "--out", ""], "--out must name a directory"),
    (["analyze", "x.json", "--out", ""], "--out must name a file"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    proc = subprocess.run([sys.executable, "-m", "profattn.cli", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("profattn: error:") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_results_json(tmp_path: Path):
    (tmp_path / "results.json").write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "profattn.cli", "report", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "results.json").write_text(json.dumps({"schema": "profattn.results", "schema_version": 99}))
    proc = subprocess.run([sys.executable, "-m", "profattn.cli", "report", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "schema_version 99" in proc.stderr


def test_cuda_requested_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    proc = subprocess.run([sys.executable, "-m", "profattn.cli", "profile", "--device", "cuda"], capture_output=True, text=True)
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr


def test_sweep_decode_on_cpu(tmp_path: Path):
    from profattn.report.run import chart_figures, crossover_rows

    out = tmp_path / "sweep"
    # one paged kernel and one contiguous-copy kernel: the default set adds triton-paged-decode, which under the
    # Triton interpreter took 100 of this test's 118 s (its cells are tested in tests/backends), and sdpa-cudnn
    # (unsupported on a CPU)
    res = invoke("sweep", "decode", "--device", "cpu", "--backend", "torch-paged-reference", "--backend", "sdpa-flash",
                 "--out", str(out))
    assert res.exit_code == 0, res.output
    run = read_results(out)
    assert run.preset == "decode-sweep-small" and len(run.cells) == 10 * 2
    rows = crossover_rows(analyze_run(run))
    # each (batch, page size) series once per layout: the paged kernels and the contiguous-copy kernels apart
    assert [(r["batch"], r["page_size"]) for r in rows] == [(b, p) for b, p in [(1, 16), (1, 64), (4, 16), (4, 64)] for _ in (0, 1)]
    assert {r["kernels"] for r in rows} == {"paged kernels (page pool)", "contiguous-copy kernels"}
    assert {c["id"] for c in chart_figures(analyze_run(run))} >= {"decode-latency", "decode-bandwidth", "page-size"}
    ragged = [c for c in run.cells if c.workload.is_ragged]
    assert {c.backend: c.status for c in ragged}["torch-paged-reference"] == CellStatus.OK
    assert {c.backend: c.status for c in ragged}["sdpa-flash"] == CellStatus.UNSUPPORTED


def test_profile_a_workload_given_on_the_command_line(tmp_path: Path):
    """`profattn profile --workload SPEC` (what analyze suggests for a traced call) runs that one workload."""
    spec = "phase=decode,batch=2,q_len=1,kv_len=64,num_q_heads=4,num_kv_heads=2,head_dim=32,dtype=float32"
    out = tmp_path / "custom"
    res = invoke("profile", "--device", "cpu", "--workload", spec, "--backend", "eager", "--backend", "sdpa-math",
                 "--out", str(out), "--profile-calls", "1")
    assert res.exit_code == 0, res.output
    run = read_results(out)
    assert run.preset == "custom" and {c.workload.tag for c in run.cells} == {"decode_b2_q1_kv64_hq4_hkv2_d32_fp32_causal"}
    assert all(c.status == CellStatus.OK for c in run.cells)
    for args, msg in ((["--workload", "phase=decode"], "missing batch"),
                      (["--workload", spec, "--preset", "small"], "give --preset or --workload, not both")):
        res = invoke("profile", "--device", "cpu", *args, "--out", str(tmp_path / "never"))
        assert res.exit_code == 2 and msg in res.output and not (tmp_path / "never").exists()


def test_profile_sdpa_nested_on_cpu(tmp_path: Path):
    """`--backend sdpa-nested` on a decode step over ragged cached lengths (correct, its append timed, its trace
    evidence the nested family's, the math path's padded GEMMs recorded) and on a mixed step (unsupported: the
    CPU's jagged SDPA refuses is_causal)."""
    out = tmp_path / "nested"
    res = invoke("profile", "--device", "cpu", "--out", str(out), "--backend", "sdpa-nested", "--profile-calls", "1",
                 "--workload", "mix=3x(q1,kv9)+1x(q1,kv30),hq=4,hkv=2,d=16,page=4,append=true",
                 "--workload", "mix=1x(q6,kv20)+3x(q1,kv9),hq=4,hkv=2,d=16,page=4,append=true")
    assert res.exit_code == 0, res.output
    decode, mixed = read_results(out).cells
    assert decode.status == CellStatus.OK and decode.correctness.cache_ok is True, decode.reason
    assert decode.family == "nested" and decode.trace.family_ok is True and decode.append_timing is not None
    assert decode.executed_pairs == 4 * 1 * 30  # padded by torch's nested matmul, for 3·9 + 30 = 57 required
    assert mixed.status == CellStatus.UNSUPPORTED and "refuses is_causal=True" in mixed.reason


def test_counters_refused_for_cpu_runs(small_run: Path):
    proc = subprocess.run([sys.executable, "-m", "profattn.cli", "counters", str(small_run)], capture_output=True, text=True)
    assert proc.returncode == 2 and "CPU run" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "profattn.cli", "profile", "--device", "cpu", "--counters", "--out", str(small_run.parent / "x")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--counters needs a CUDA device" in proc.stderr
    assert read_results(small_run).counters_info.status == "unavailable"


def test_out_dir_guards(tmp_path: Path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for args, message in (
        (["profile", "--device", "cpu", "--out", str(foreign)], "holds no profattn run"),
        (["profile", "--device", "cpu", "--out", str(foreign / "notes.txt")], "is a file"),
        (["profile", "--device", "cpu", "--out", "/proc/profattn-x"], "cannot write"),
        (["profile", "--device", "cpu", "--seed", str(2**70)], "Invalid value for '--seed'"),
    ):
        proc = subprocess.run([sys.executable, "-m", "profattn.cli", *args], capture_output=True, text=True)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
    assert (foreign / "notes.txt").read_text() == "mine"
    proc = subprocess.run([sys.executable, "-m", "profattn.cli"], capture_output=True, text=True)
    assert proc.returncode == 0 and "profile" in proc.stdout


def test_a_run_directory_in_use_is_refused(small_run: Path):
    """Two profile runs into one --out: the second is refused (exit 2) and the first's files stay; the
    lock goes with the command, so a later run into the same directory works."""
    import fcntl
    import os

    before = (small_run / "results.json").read_bytes()
    fd = os.open(small_run, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running profattn profile holds
    try:
        # a run directory that holds a run is only ever resumed (or moved aside with --force): the lock is checked first
        res = CliRunner().invoke(main, ["profile", "--device", "cpu", "--resume", "--out", str(small_run)])
        assert res.exit_code == 2 and "is in use by another profattn run" in res.output
        assert (small_run / "results.json").read_bytes() == before and (small_run / "traces").is_dir()
    finally:
        os.close(fd)
    fd = os.open(small_run, os.O_RDONLY)  # nothing left locked by the refused command
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


@pytest.mark.parametrize("args,message", [
    (["--backend", "nosuch"], "unknown backend 'nosuch'"),
    (["--counters"], "--counters needs a CUDA device"),
])
def test_profile_validates_before_creating_out_or_printing(tmp_path: Path, args, message):
    import torch

    if torch.cuda.is_available():
        pytest.skip("--counters is valid with CUDA")
    out = tmp_path / "r"
    proc = subprocess.run([sys.executable, "-m", "profattn.cli", "profile", "--device", "cpu", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr  # no banner
    assert not out.exists()


def test_report_out_directory_or_trailing_slash_means_report_html(small_run: Path, tmp_path: Path):
    existing = tmp_path / "existing"
    existing.mkdir()
    for given, written in ((str(existing), existing / "report.html"), (f"{tmp_path / 'new'}/", tmp_path / "new" / "report.html")):
        res = invoke("report", str(small_run), "--out", given)
        assert res.exit_code == 0, res.output
        assert res.output.strip() == f"report: {written}" and written.is_file() and written.read_text().startswith("<!DOCTYPE html>")
    assert "an existing directory or a path ending in / means DIR/report.html" in " ".join(invoke("report", "--help").output.split())


def test_output_below_a_file_names_the_parent(small_run: Path, tmp_path: Path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for args in (["compare", str(small_run), str(small_run), "--out", f"{afile}/x.html"],
                 ["compare", str(small_run), str(small_run), "--out", str(tmp_path / "c.html"), "--markdown", f"{afile}/x.md"],
                 ["summary", str(small_run), "--out", f"{afile}/sub/x.md"],
                 ["report", str(small_run), "--out", f"{afile}/x.html"],
                 ["analyze", str(small_run), "--out", f"{afile}/x.html"]):
        proc = subprocess.run([sys.executable, "-m", "profattn.cli", *args], capture_output=True, text=True, timeout=120, check=False)
        option = "--markdown" if "--markdown" in args else "--out"
        assert proc.returncode == 2 and proc.stderr == f"profattn: error: {option} {args[-1]}: parent {afile} is not a directory\n", proc.stderr
    assert afile.read_text() == "mine" and not (tmp_path / "c.html").exists()


def test_a_second_run_never_overwrites_the_first(tmp_path: Path, monkeypatch):
    """issue: `profile --out X` twice replaced the first run and deleted traces/ (a user file too). Now the
    second is refused (exit 2, one line), --force renames the first aside, and the default --out is new per run."""
    monkeypatch.chdir(tmp_path)
    args = ["profile", "--device", "cpu", "--regime", "decode", "--backend", "eager", "--preset", "small"]
    first = CliRunner().invoke(main, [*args, "--out", "X"])
    assert first.exit_code == 0, first.output
    (tmp_path / "X" / "traces" / "mine.txt").write_text("a user's note")
    before = (tmp_path / "X" / "results.json").read_text()
    again = CliRunner().invoke(main, ["profile", "--device", "cpu", "--regime", "train", "--backend", "eager", "--out", "X"])
    assert again.exit_code == 2 and "already holds a run; use --resume" in again.output
    assert (tmp_path / "X" / "results.json").read_text() == before
    forced = CliRunner().invoke(main, ["profile", "--device", "cpu", "--regime", "train", "--backend", "eager",
                                       "--preset", "small", "--out", "X", "--force"])
    assert forced.exit_code == 0, forced.output
    (aside,) = tmp_path.glob("X.replaced-*")
    assert (aside / "results.json").read_text() == before and (aside / "traces" / "mine.txt").read_text() == "a user's note"
    assert {c.workload.phase.value for c in read_results(tmp_path / "X").cells} == {"train"}
    # the default --out: two runs, two directories
    for _ in range(2):
        assert CliRunner().invoke(main, args).exit_code == 0
    runs = sorted((tmp_path / "profattn-runs").iterdir())
    assert len(runs) == 2 and all((r / "results.json").is_file() for r in runs)


def test_resume_refuses_a_new_plan_and_a_missing_run(tmp_path: Path):
    res = CliRunner().invoke(main, ["profile", "--device", "cpu", "--resume", "--out", str(tmp_path / "none")])
    assert res.exit_code == 2 and "holds no run" in res.output
    res = CliRunner().invoke(main, ["profile", "--device", "cpu", "--resume", "--force", "--out", str(tmp_path / "none")])
    assert res.exit_code == 2 and "exclude each other" in res.output


def test_resume_without_out_names_the_missing_out():
    res = CliRunner().invoke(main, ["profile", "--device", "cpu", "--resume", "--backend", "eager"])
    assert res.exit_code == 2 and "--resume needs --out" in res.output


def test_analyze_json_reads_past_an_implausible_batch_and_shows_the_warning(tmp_path: Path) -> None:
    """A recorded batch of 1e19 was an OverflowError traceback from ``analyze --json``; now exit 0, the
    batch null in the JSON, and the warning on stderr, in the JSON and on the page."""
    from tracebuild import sdpa_call, write_trace

    events = sdpa_call(0, 1, q=[10**19, 8, 1, 64], k=[10**19, 8, 128, 64], causal=False,
                       kernel_name="pytorch_flash::flash_fwd_splitkv_kernel")
    trace = write_trace(tmp_path / "t.json", events)
    res = invoke("analyze", str(trace), "--out", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json"))
    assert res.exit_code == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    (f,) = doc["files"]
    (call,) = f["attention_calls"]
    assert call["shape"]["batch"] is None and call["shape"]["num_q_heads"] == 8 and call["workload"] is None
    (w,) = [w for w in f["warnings"] if w["code"] == "shape_beyond_limit"]
    assert "batch up to 1e+19 (limit 65,536)" in w["message"]
    assert w["message"] in res.output  # CliRunner mixes stderr in
    assert "batch up to 1e+19 (limit 65,536)" in (tmp_path / "r.html").read_text()


@pytest.mark.slow
def test_profile_serving_small_end_to_end(tmp_path: Path):
    """The serving twin on the CPU (about a minute on 2 loaded cores): every appending cell correct with its
    append timed and its cache checked, padded backends' waste recorded, results.json read back equal, and the
    report's serving section."""
    out = tmp_path / "serving"
    res = invoke("profile", "--preset", "serving-small", "--device", "cpu", "--out", str(out), "--backend", "eager",
                 "--backend", "sdpa-math", "--backend", "torch-paged-reference")
    assert res.exit_code == 0, res.output
    run = read_results(out)
    assert len(run.cells) == 13 * 3 and {c.workload.phase.value for c in run.cells} == {"prefill", "decode", "mixed"}
    for c in run.cells:
        assert c.status == CellStatus.OK, (c.cell_id, c.reason)
        assert c.correctness.cache_ok is True and c.append_timing is not None, c.cell_id
        assert (c.executed_pairs is not None) == (c.workload.is_varlen and c.backend != "torch-paged-reference")
    assert run == read_results(out)
    from profattn.results import run_from_dict, run_to_dict

    assert run_from_dict(json.loads(json.dumps(run_to_dict(run)))) == run
    html = (out / "report.html").read_text()
    assert "Serving: chunked prefill and mixed batches" in html and "fastest per part" in html
    res = invoke("profile", "--preset", "serving-small", "--device", "cpu", "--regime", "mixed", "--out",
                 str(tmp_path / "mixed"), "--backend", "torch-paged-reference")
    assert res.exit_code == 0, res.output
    assert {c.workload.phase.value for c in read_results(tmp_path / "mixed").cells} == {"mixed"}


@pytest.mark.slow
def test_profile_gqa_small_end_to_end(tmp_path: Path):
    """The GQA twin on the CPU: six decode workloads identical but for Hkv (8 / 2 / 1 at kv 64 and 256), every cell
    correct, and the report's GQA section with the hand-computed cache bytes (kv 256: K + V = 2 · 2 · Hkv · 256 · 32 ·
    2 bytes = 524,288 at Hkv 8, 131,072 at Hkv 2) and no transferred figure (no counters on a CPU)."""
    out = tmp_path / "gqa"
    res = invoke("profile", "--preset", "gqa-small", "--device", "cpu", "--out", str(out), "--backend", "sdpa-math",
                 "--backend", "torch-paged-reference")
    assert res.exit_code == 0, res.output
    run = read_results(out)
    assert len(run.cells) == 6 * 2 and {c.workload.num_kv_heads for c in run.cells} == {8, 2, 1}
    for c in run.cells:
        assert c.status == CellStatus.OK, (c.cell_id, c.reason)
    html = (out / "report.html").read_text()
    assert "GQA: cache traffic vs arithmetic" in html and "decode kv 256: B=2, Hq=8, d=32, bfloat16, page 16 — Hkv 8 / 2 / 1" in html
    assert "524.3 kB" in html and "131.1 kB" in html and "At kv 256, sdpa-math " in html
    assert "moved" not in html.split('id="gqa"')[1].split('id="ledgers"')[0]  # nothing transferred without counters


@pytest.mark.slow
def test_profile_variants_small_end_to_end(tmp_path: Path, monkeypatch):
    """The variants twin on the CPU (packed training and prefill, windows, FP8 KV beside bf16): every cell is correct
    or unsupported with a reason; the packed cells are checked for document isolation; our decode kernel (under the
    Triton interpreter) runs the window and the FP8 pages; the FP8 cells report the quantization error apart."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "variants"
    res = invoke("profile", "--preset", "variants-small", "--device", "cpu", "--out", str(out), "--backend", "sdpa-math",
                 "--backend", "torch-paged-reference", "--backend", "triton-paged-decode")
    assert res.exit_code == 0, res.output
    run = read_results(out)
    assert len(run.cells) == 11 * 3
    for c in run.cells:
        assert c.status in (CellStatus.OK, CellStatus.UNSUPPORTED), (c.cell_id, c.status, c.reason)
        assert c.status is CellStatus.OK or c.reason
    ok = {(c.workload.tag, c.backend): c for c in run.cells if c.status is CellStatus.OK}
    packed = [c for c in run.cells if c.workload.is_packed]
    assert {c.workload.phase.value for c in packed} == {"train", "prefill"}
    assert all(c.correctness.isolated is True for c in packed if c.backend == "sdpa-math")
    fp8 = [c for c in run.cells if c.workload.kv_dtype is not None and c.status is CellStatus.OK]
    assert {c.backend for c in fp8} == {"torch-paged-reference", "triton-paged-decode"} and len(fp8) == 6
    assert all(c.correctness.quant_rel_err > c.correctness.out_rel_err for c in fp8)
    windowed = [k for k in ok if "_w64" in k[0]]
    assert {b for _, b in windowed} == {"sdpa-math", "torch-paged-reference", "triton-paged-decode"}


def test_analyze_of_a_runs_cp_traces_labels_each_cell_and_reports_bytes(tmp_path: Path) -> None:
    # profattn's layout: traces/cp/<cell>/rank<r>.pt.trace.json.gz, two cells of the same two ranks
    import gzip

    data = Path(__file__).parents[1] / "data" / "traces"
    for c in ("cellA", "cellB"):
        (tmp_path / "cp" / c).mkdir(parents=True)
        for r in (0, 1):
            doc = json.loads(gzip.decompress((data / f"cpu_gloo_cp2_ring_train_rank{r}.pt.trace.json.gz").read_bytes()))
            doc["cell"] = c  # two cells' traces, not copies of one
            (tmp_path / "cp" / c / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    res = CliRunner().invoke(main, ["analyze", str(tmp_path / "cp"), "--out", str(tmp_path / "a.html")])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ": communication " in ln]
    assert [ln.split(":")[0] for ln in lines] == ["cellA rank 0", "cellA rank 1", "cellB rank 0", "cellB rank 1"]
    # 3 calls x 4096 fp32 elements sent (the attention calls' dtype): bytes, not elements
    assert all("sent 49.2 kB" in ln for ln in lines), lines
    assert "appears in 2 files" not in res.output
    # the same trace copied into two directories is still a copy
    (tmp_path / "cp" / "cellC").mkdir()
    (tmp_path / "cp" / "cellC" / "rank0.pt.trace.json.gz").write_bytes(
        (tmp_path / "cp" / "cellA" / "rank0.pt.trace.json.gz").read_bytes())
    res = CliRunner().invoke(main, ["analyze", str(tmp_path / "cp"), "--out", str(tmp_path / "a.html")])
    assert "warning: rank 0 appears in 3 files" in res.output


def test_profile_without_plotly_keeps_the_run_and_says_how_to_render(tmp_path: Path, monkeypatch):
    """The GPU image lacks plotly: the run (results, traces, store) completes and the report line says how to render
    it elsewhere, instead of a traceback after every cell was measured."""
    import builtins

    real = builtins.__import__

    def no_plotly(name, *a, **kw):
        if name == "plotly" or name.startswith("plotly."):
            raise ModuleNotFoundError("No module named 'plotly'", name="plotly")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_plotly)
    spec = "phase=decode,batch=2,q_len=1,kv_len=64,num_q_heads=4,num_kv_heads=2,head_dim=32,dtype=float32"
    res = CliRunner().invoke(main, ["profile", "--device", "cpu", "--workload", spec, "--backend", "eager",
                                    "--out", str(tmp_path / "r"), "--profile-calls", "1"])
    assert res.exit_code == 0, res.output
    assert "report: not written (plotly is not installed here); the run is complete" in res.output
    assert (tmp_path / "r" / "results.json").is_file() and not (tmp_path / "r" / "report.html").exists()
