"""``profattn simulate`` end to end on committed H200 runs imported into a temporary store, and its bad input: one
line naming the row or field, exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.cli import main
from profattn.files import MARKDOWN_MARKER
from profattn.workload import parse_workload_spec

REPO = Path(__file__).resolve().parents[2]
SLICE = REPO / "tests" / "data" / "requests" / "azure_conv_first400.csv"
RUNS = ("h200-sweep-wave-rule", "h200-serving", "h200-gqa", "h200-variants")


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("store") / "results.sqlite"
    res = invoke("db", "import", *(str(REPO / "examples" / r) for r in RUNS), "--db", str(path))
    assert res.exit_code == 0, res.output
    return path


def test_simulate_end_to_end(db: Path, tmp_path: Path):
    out = tmp_path / "sim"
    res = invoke("simulate", "--requests", str(SLICE), "--model", "llama-3-8b", "--backend", "triton-paged-decode",
                 "--backend", "flashinfer-decode-tc", "--db", str(db), "--out", str(out), "--search-resolution", "0.2",
                 "--export-steps", str(tmp_path / "steps.txt"), "--steps", "5")
    assert res.exit_code == 0, res.output
    text = res.output
    assert "llama-3-8b on NVIDIA H200, 400 requests" in text
    assert "triton-paged-decode + flashinfer-prefill-paged" in text and "flashinfer-decode-tc + flashinfer-prefill-paged" in text
    assert "Per call, triton-paged-decode is the winner" in text and "Why: priced on the same" in text
    doc = json.loads((out / "simulation.json").read_text())
    assert doc["schema"] == "profattn.simulation" and doc["version"] == 1
    assert doc["trace"]["requests"] == 400 and doc["model"]["params"] == 8_030_261_248
    dep = doc["deployments"]
    assert [d["decode_backend"] for d in dep] == ["triton-paged-decode", "flashinfer-decode-tc"]
    assert all(d["prefill_backend"] == "flashinfer-prefill-paged" and d["kv_capacity"]["tokens"] == 898_032 for d in dep)
    for d in dep:
        assert d["ttft"]["p50_s"] <= d["ttft"]["p90_s"] <= d["ttft"]["p99_s"] and d["rate_search"]["best_rate_per_s"] > 0
        assert {p["part"] for p in d["priced_from"]} == {"decode", "prefill"} and d["tokens_recomputed"] == 0
    f = doc["findings"]
    assert f["per_call"]["winner"] == "triton-paged-decode" and f["per_call"]["workloads"] > 20
    assert f["step_shapes"] and abs(sum(s["step_share"] for s in f["step_shapes"]) - 1) < 1e-9
    assert doc["verdict"][0].startswith("Per call, triton-paged-decode is the winner")
    md = (out / "simulation.md").read_text()
    assert md.startswith(MARKDOWN_MARKER) and "### Step shapes" in md and len(md) < 65_000
    html = (out / "report.html").read_text()
    assert '<meta name="generator" content="profattn">' in html and 'id="chart-data-latency"' in html
    lines = (tmp_path / "steps.txt").read_text().splitlines()
    specs = [ln.split("\t", 1)[1] for ln in lines if not ln.startswith("#")]
    assert specs and all(parse_workload_spec(s).num_q_heads == 32 for s in specs)
    # a second run may replace its own outputs; it refuses a file profattn did not write
    again = invoke("simulate", "--requests", str(SLICE), "--model", "llama-3-8b", "--backend", "triton-paged-decode",
                   "--db", str(db), "--out", str(out), "--no-search", "--rate-scale", "2",
                   "--export-steps", str(tmp_path / "steps.txt"))
    assert again.exit_code == 0, again.output
    assert json.loads((out / "simulation.json").read_text())["trace"]["rate_scale"] == 2.0
    (tmp_path / "mine.txt").write_text("my notes\n")
    refused = invoke("simulate", "--requests", str(SLICE), "--model", "llama-3-8b", "--backend", "triton-paged-decode",
                     "--db", str(db), "--no-search", "--export-steps", str(tmp_path / "mine.txt"))
    assert refused.exit_code == 2 and "was not written by profattn" in refused.output


def test_fp8_and_page_sizes_are_deployments_of_their_own(db: Path, tmp_path: Path):
    res = invoke("simulate", "--requests", str(SLICE), "--model", "llama-3-8b", "--backend", "triton-paged-decode",
                 "--kv-dtype", "bf16", "--kv-dtype", "fp8", "--page-size", "16", "--db", str(db), "--no-search",
                 "--json", str(tmp_path / "s.json"), "--gpu-memory", "40")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "s.json").read_text())
    bf16, fp8 = doc["deployments"]
    assert (bf16["kv_dtype"], fp8["kv_dtype"]) == (None, "float8_e4m3fn")
    assert fp8["kv_capacity"]["tokens"] == pytest.approx(2 * bf16["kv_capacity"]["tokens"], abs=16)
    assert fp8["extrapolated_attention_share"]["kv_dtype"] == pytest.approx(1.0)
    assert doc["findings"]["fp8_capacity_ratio"] == pytest.approx(2.0, abs=1e-3)


def bad_csv(tmp_path: Path) -> Path:
    p = tmp_path / "bad.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n1.0,12,-2\n")
    return p


@pytest.mark.parametrize("args, msg", [
    (["--requests", "{bad}"], "bad.csv line 3: num_decode_tokens '-2' must be ≥ 1"),
    (["--model", "layers=2,hidden=64,intermediate=128,vocab=100"], "num_q_heads (hq), num_kv_heads (hkv) are missing"),
    (["--backend", "triton-paged-decode+triton-paged-decode"],
     "backend triton-paged-decode was never measured in phase prefill at dtype bfloat16 in this store"),
    (["--backend", "nope"], "backend nope was never measured in phase decode"),
    (["--backend", "sdpa-cudnn"], "sdpa-cudnn reads a contiguous K/V cache, not the paged cache a serving engine holds"),
    (["--rate", "5", "--rate-scale", "2"], "give --rate or --rate-scale, not both"),
    (["--slo", "ttft=fast"], "--slo ttft='fast' must be a positive number"),
    (["--slo", "p99=5"], "'p99=5' is not ttft=MS"),
    (["--max-num-seqs", "20000"], "max-num-batched-tokens 8192 is below max-num-seqs 20000"),
    (["--json", "{slice}"], "is an input of this command"),
    (["--kv-dtype", "int4"], "unsupported kv_dtype 'int4'"),
    (["--gpu", "A100"], "--gpu 'A100' is not in the store"),
    (["--kv-budget-tokens", "100"], "the request at row 2 needs 417 tokens of KV cache (27 pages); the budget holds 96"),
    (["--kv-budget-tokens", "99999999999999999999"], "--kv-budget-tokens must be an integer in [1, 1,099,511,627,776]"),
    (["--requests", "{once}"], "its 2 request(s) all arrive at once: a load (req/s, the rate search, --rate) needs"),
    (["--requests", "poisson:rate=5,n=1,prompt=500,output=100"], "its 1 request(s) all arrive at once"),
    (["--requests", "poisson:rate=1e-300,n=10,prompt=5,output=5"], "rate 1e-300 is outside [1e-06, 1e+06] req/s"),
    (["--requests", "{late}"], "late.csv line 3: arrived_at '1e308' is beyond 1e+09 s"),
    (["--requests", "{dir}"], "is a directory; give a CSV file"),
    (["--rate-scale", "1e-15"], "--rate-scale 1e-15 is outside [1e-06, 1e+06]"),
    (["--gpu-memory", "inf"], "--gpu-memory must be a positive number, got inf"),
    (["--max-num-batched-tokens", "99999999999999999999"], "max-num-batched-tokens 99,999,999,999,999,999,999 is beyond 16,777,216"),
    (["--page-size", "0"], "page-size (vLLM's block_size) must be a positive integer, got 0"),
    (["--slo", "ttft=500,ttft=400"], "ttft given twice"),
    (["--slo", ","], "give ttft=MS, tpot=MS and/or attainment=P%"),
    (["--slo", "tpot=50,,ttft=3"], "an empty item (two commas, or one at an end)"),
    (["--requests", "{near}"], "its 2 requests arrive at 1e+300 req/s, outside [1e-06, 1e+06] req/s"),
])
def test_bad_input_is_one_line_and_exit_2(db: Path, tmp_path: Path, args: list[str], msg: str):
    base = {"--requests": str(SLICE), "--model": "llama-3-8b", "--backend": "triton-paged-decode"}
    extra = []
    for i in range(0, len(args), 2):
        k, v = args[i], args[i + 1].replace("{bad}", str(bad_csv(tmp_path))).replace("{slice}", str(SLICE))
        for name, body in (("once", "0.0,10,5\n0.0,12,2\n"), ("late", "0.0,10,5\n1e308,12,2\n"),
                           ("near", "0.0,10,5\n1e-300,12,2\n")):
            (tmp_path / f"{name}.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + body)
            v = v.replace("{" + name + "}", str(tmp_path / f"{name}.csv"))
        v = v.replace("{dir}", str(tmp_path))
        if k in base:
            base[k] = v
        else:
            extra += [k, v]
    cmd = ["simulate", *(x for kv in base.items() for x in kv), *extra, "--db", str(db), "--no-search"]
    res = invoke(*cmd)
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and res.output.startswith("profattn: error: ") and msg in res.output, res.output


def test_no_store(tmp_path: Path):
    res = invoke("simulate", "--requests", str(SLICE), "--model", "llama-3-8b", "--backend", "x", "--db",
                 str(tmp_path / "none.sqlite"))
    assert res.exit_code == 2 and "no results store" in res.output and res.output.count("\n") == 1


def test_a_store_of_cpu_runs_only_is_one_line(tmp_path: Path):
    """The main job on a CPU fills the default store with a CPU run: simulate says it needs a GPU's cells."""
    run = tmp_path / "run"
    store = tmp_path / "cpu.sqlite"
    res = invoke("profile", "--workload", "phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=16,page=16", "--backend",
                 "torch-paged-reference", "--out", str(run), "--db", str(store), "--device", "cpu", "--no-counters")
    assert res.exit_code == 0, res.output
    res = invoke("simulate", "--requests", str(SLICE), "--model", "llama-3-8b", "--backend", "torch-paged-reference",
                 "--db", str(store), "--no-search")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "are CPU runs: simulate prices a GPU's serving steps from its measured cells and ceilings" in res.output


def test_validate_reproduces_the_committed_replay_check():
    from click.testing import CliRunner

    from profattn.cli.main import main as cli

    ex = Path(__file__).resolve().parents[2] / "examples" / "simulate-azure-llama3-8b"
    res = CliRunner().invoke(cli, ["simulate", "--validate", str(ex / "replay")])
    assert res.exit_code == 0, res.output
    assert ("28 priced parts measured (0 not): measured / priced median 1.016, min 0.33, max 1.28; 18 within 10 %, "
            "25 within 25 %; 5 off their band") in res.output
    assert "| 0 prefill | prefill | flashinfer-prefill-paged | 46.7 | 17.0 (3) | 0.36 | yes | ±12 % **off** |" in res.output


def test_validate_bad_inputs_one_line_each(tmp_path: Path):
    """--validate: a directory without results.json is named as such; a bad simulation.json says what is wrong."""
    from click.testing import CliRunner

    from profattn.cli.main import main as cli

    replay = Path(__file__).resolve().parents[2] / "examples" / "simulate-azure-llama3-8b" / "replay"
    empty = tmp_path / "emptydir"
    empty.mkdir()
    res = CliRunner().invoke(cli, ["simulate", "--validate", str(empty)])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "results.json" in res.output, res.output
    assert "simulation.json" not in res.output
    (tmp_path / "bad.json").write_text("", encoding="utf-8")
    for sim, said in ((tmp_path / "bad.json", "not JSON"), (tmp_path, "a directory"), (tmp_path / "none.json", "no such file")):
        res = CliRunner().invoke(cli, ["simulate", "--validate", str(replay), "--simulation", str(sim)])
        assert res.exit_code == 2 and res.output.count("\n") == 1 and said in res.output, res.output
        assert "Error]" not in res.output and "Errno" not in res.output


def test_search_names_an_unknown_knob():
    from profattn.analysis.simulation.operating import parse_axes
    from profattn.errors import ProfattnError

    assert parse_axes("max-num-seqs,max_num_batched_tokens") == ("max_num_seqs", "max_num_batched_tokens")
    with pytest.raises(ProfattnError, match="unknown knob"):
        parse_axes("bogus_knob")
    with pytest.raises(ProfattnError, match="given twice"):
        parse_axes("max_num_seqs,max-num-seqs")


def test_search_with_an_empty_knob_list_is_refused(tmp_path: Path):
    """``--search ""`` names no knob: refused in one line naming the knobs, not read as the bare ``--search``."""
    base = ["simulate", "--requests", str(tmp_path / "none.csv"), "--model", "llama-3-8b", "--backend", "triton-paged-decode"]
    res = CliRunner().invoke(main, [*base, "--search", ""])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "--search: name at least one of max_num_batched_tokens, max_num_seqs" in res.output
    for bare in (["--search"], []):  # the rate search alone gets past the knobs, to the missing trace
        res = CliRunner().invoke(main, [*base, *bare])
        assert res.exit_code == 2 and "no such file" in res.output and "--search" not in res.output, res.output
