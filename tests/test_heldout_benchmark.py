"""``benchmarks/heldout.py``: the held-out shapes are deterministic and outside the store, and the committed H200
check scores what examples/h200-heldout/README.md says (the asks pinned at 6f13009 before the measurement), and the
second draw what examples/h200-heldout-2/README.md says (asked at 62b4a8b, the first draw in the store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import script_module

from profattn.store import workload_key

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "heldout.py"
HELD = REPO / "examples" / "h200-heldout"
HELD2 = REPO / "examples" / "h200-heldout-2"
HELD3 = REPO / "examples" / "h200-heldout-3"


@pytest.fixture(scope="module")
def job():
    with script_module(SCRIPT, "heldout") as module:
        yield module


def scored(job, held: Path, asks: str, dirs: tuple[str, ...]) -> tuple[dict, list[dict]]:
    """A draw's asks (``held/asks``) and its score rows against the run folders ``dirs`` under ``held``; every pick
    was measured."""
    doc = json.loads((held / asks).read_text())
    rows = job.score_rows(doc, [held / d for d in dirs])
    assert not any(r["headline_unmeasured"] or r["drop_in_unmeasured"] for r in rows)
    return doc, rows


@pytest.fixture(scope="module")
def third(job):
    """The third draw, asked at 76b11e4, scored against its six run folders."""
    return scored(job, HELD3, "asks-76b11e4.json",
                  ("decode-a", "decode-b", "dense", "rivals", "rivals-all", "rivals-dense"))


def test_shapes_are_deterministic_and_skip_known_keys(job):
    first = job.draw_shapes(34, 6, 2, 2, set())
    assert [workload_key(w) for w in first] == [workload_key(w) for w in job.draw_shapes(34, 6, 2, 2, set())]
    assert [w.phase.value for w in first].count("decode") == 6 and len(first) == 10
    skip = {workload_key(first[0]), workload_key(first[7])}
    again = job.draw_shapes(34, 6, 2, 2, skip)
    assert not skip & {workload_key(w) for w in again} and len(again) == 10
    for w in first:
        assert w.num_q_heads % w.num_kv_heads == 0 and w.num_q_heads // w.num_kv_heads in (1, 2, 4, 8)
        if w.phase.value == "decode":
            assert 2 <= w.batch <= 200 and 496 <= w.kv_len <= 30_000 and w.page_size in (16, 64)
            assert w.batch * w.kv_len <= 2_000_000
        else:
            assert w.q_len == w.kv_len and 512 <= w.q_len <= 16_384


def test_committed_heldout_score(job):
    doc, rows = scored(job, HELD, "asks-6f13009.json", ("decode-a", "decode-b", "dense", "rivals"))
    assert doc["commit"] == "6f13009" and len(doc["answers"]) == 60
    got, n, hits, mean, worst = job.summary(rows, "headline_regret")
    assert (got, n, hits) == (27, 60, 24) and worst == pytest.approx(0.108, abs=5e-4)  # ≤ 1.25×: met
    got, n, hits, mean, worst = job.summary(rows, "drop_in_regret")
    assert (got, n, hits) == (43, 60, 39) and worst == pytest.approx(0.189, abs=5e-4)  # > 10 %: not met
    worst_row = max((r for r in rows if r["drop_in_regret"] is not None), key=lambda r: r["drop_in_regret"])
    assert worst_row["tag"].startswith("decode_b60_q1_kv8960") and worst_row["best_drop_in_measured"] == "flashinfer-cudnn-decode"
    vllm = job.summary(rows, "vllm_regret")
    native = job.summary(rows, "drop_in_native_regret")
    assert vllm[:3] == (60, 60, 24) and native[2] / native[0] > vllm[2] / vllm[0] and native[3] < vllm[3]


def test_second_draw_score(job):
    """Asked at 62b4a8b (dominance within its span; a backend that lost wherever it was compared never contests),
    measured after: every pick measured, headline ≤ 1.25× met, the drop-in 11.7 % at worst (cuDNN's paged decode
    faster than ours at b111 d64: ≤ 10 % not met), and the 29 contests the lost_to rule stopped were all slower than
    the pick."""
    doc, rows = scored(job, HELD2, "asks-62b4a8b.json",
                       ("decode-a", "decode-b", "dense", "rivals-a", "rivals-b", "rivals-dense"))
    assert doc["commit"] == "62b4a8b" and len(doc["answers"]) == 60
    assert any("h200-heldout/decode-a" in r for r in doc["runs"]) and not any("h200-heldout-2" in r for r in doc["runs"])
    got, n, hits, mean, worst = job.summary(rows, "headline_regret")
    assert (got, n, hits) == (51, 60, 47) and worst == pytest.approx(0.106, abs=5e-4)
    got, n, hits, mean, worst = job.summary(rows, "drop_in_regret")
    assert (got, n, hits) == (54, 60, 49) and worst == pytest.approx(0.117, abs=5e-4)
    worst_row = max((r for r in rows if r["drop_in_regret"] is not None), key=lambda r: r["drop_in_regret"])
    assert worst_row["tag"].startswith("decode_b111_q1_kv4064") and worst_row["best_drop_in_measured"] == "flashinfer-cudnn-decode"
    vllm, native = job.summary(rows, "vllm_regret"), job.summary(rows, "drop_in_native_regret")
    assert vllm[:3] == (60, 60, 19) and native[2] / native[0] > vllm[2] / vllm[0] and native[3] < vllm[3]
    span_only = {x["workload"]: x for x in json.loads((HELD2 / "asks-934b35b.json").read_text())["answers"]}
    by = {r["workload"]: r for r in rows}
    stopped = [(w, c) for w, x in span_only.items() for c in set(x["contested_by"]) - set(by[w]["contested_by"])]
    measured = [(w, c) for w, c in stopped if c in by[w]["measured"]]
    assert len(measured) == 29
    pick = {x["workload"]: x["best"] or x["best_bounded"] for x in doc["answers"]}
    assert all(by[w]["measured"][c] > by[w]["measured"][pick[w]] for w, c in measured)


def test_third_draw_score(job, third):
    """Asked at 76b11e4 from the 34 runs (both earlier draws in the store), measured after with the byte-counted decode
    tile: every pick measured; headline ≤ 1.25× met (15.3 % beyond noise at worst); the paged-decode drop-in within
    1.1 % at all 40; the drop-in misses 10 % once, on a 2-head prefill (sdpa-cudnn picked, sdpa-flash 57 % faster),
    and answers no training step (8 contested, 2 with no bounded candidate)."""
    doc, rows = third
    assert doc["commit"] == "76b11e4" and len(doc["answers"]) == 60 and len(doc["runs"]) == 34
    assert any("h200-heldout-2/decode-a" in r for r in doc["runs"]) and not any("h200-heldout-3" in r for r in doc["runs"])
    got, n, hits, mean, worst = job.summary(rows, "headline_regret")
    assert (got, n, hits) == (49, 60, 46) and worst == pytest.approx(0.188, abs=5e-4)
    got, n, hits, mean, worst = job.summary(rows, "drop_in_regret")
    assert (got, n, hits) == (50, 60, 49) and worst == pytest.approx(0.569, abs=5e-4)
    decode = [r for r in rows if r["phase"] == "decode"]
    assert job.summary(decode, "drop_in_regret")[:3] == (40, 40, 40) and job.summary(decode, "drop_in_regret")[4] < 0.012
    worst_row = max((r for r in rows if r["drop_in_regret"] is not None), key=lambda r: r["drop_in_regret"])
    assert worst_row["tag"] == "prefill_b4_q1024_kv1024_hq2_hkv1_d128_bf16_causal"
    assert (worst_row["drop_in"], worst_row["best_drop_in_measured"]) == ("sdpa-cudnn", "sdpa-flash")
    assert all(r["drop_in"] is None and r["headline"] is None for r in rows if r["phase"] == "train")


def test_bad_input_is_one_line(job, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        job_main(job, ["shapes", "--decode", "-1"])
    assert e.value.code == 2 and "a count of shapes is ≥ 0, not -1" in capsys.readouterr().err
    assert job_main(job, ["score", str(HELD / "workloads.txt"), str(HELD / "decode-a")]) == 2
    assert "not a readable asks JSON" in capsys.readouterr().err
    (tmp_path / "a.json").write_text("{}")
    assert job_main(job, ["score", str(tmp_path / "a.json"), str(HELD / "decode-a")]) == 2
    assert "not an asks file" in capsys.readouterr().err
    # a --json folder that does not exist is refused before the scoring, not after it
    assert job_main(job, ["score", str(HELD3 / "asks-76b11e4.json"), str(HELD3 / "rivals"), "--json",
                          str(tmp_path / "no" / "s.json")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "its folder" in out.err and "does not exist" in out.err


def job_main(job, argv):
    import sys
    old = sys.argv
    sys.argv = ["heldout.py", *argv]
    try:
        return job.main()
    finally:
        sys.argv = old


def test_third_draw_misses_are_outside_the_kernels(job, third):
    """The third draw's one drop-in miss above 10 % and its unanswered training steps are launch-bound: on the
    trace's GPU time per call the same picks are within 7.5 % everywhere (the 2-head prefill's cuDNN kernel ran
    17.7 µs, its call 50.6 µs), and cuDNN's kernels are the fastest at every training step the policy left open."""
    _, rows = third
    got, n, hits, mean, worst = job.summary(rows, "drop_in_gpu_regret")
    assert (got, n) == (50, 60) and worst == pytest.approx(0.075, abs=5e-4)
    assert job.summary(rows, "drop_in_gpu_regret", "prefill")[4] < 0.013
    miss = next(r for r in rows if r["tag"] == "prefill_b4_q1024_kv1024_hq2_hkv1_d128_bf16_causal")
    assert "sdpa-cudnn" in miss["launch_bound"] and miss["gpu_us"]["sdpa-cudnn"] == pytest.approx(17.7, abs=0.05)
    assert miss["measured"]["sdpa-cudnn"] == pytest.approx(50.6, abs=0.05) and miss["drop_in_gpu_regret"] == 0.0
    train = [r for r in rows if r["phase"] == "train"]
    assert all(min(r["gpu_us"], key=r["gpu_us"].get) == "sdpa-cudnn" for r in train) and len(train) == 10
    assert sum(bool(r["launch_bound"]) for r in rows) == 21 and sum(bool(r["launch_bound"]) for r in train) == 9


def test_the_training_overhead_is_jitter_not_shape():
    """The draw's 10 training steps measured again (sdpa-cudnn, sdpa-flash, --repeat 2): the trace's GPU time per call
    within 1.8 % of the draw's run at all 20 cells, the latency medians of one cell up to 2.2× apart."""
    again = json.loads((HELD3 / "train-repeat.json").read_text())["cells"]
    draw = {(json.dumps(c["workload"], sort_keys=True), c["backend"]): c
            for c in json.loads((HELD3 / "dense" / "results.json").read_text())["cells"]
            if c["workload"]["phase"] == "train" and c["status"] == "ok"}
    gpu, spread = [], []
    for c in again:
        d = draw[(json.dumps(c["workload"], sort_keys=True), c["backend"])]
        gpu.append(abs(c["trace"]["gpu_time_per_call_us"] / d["trace"]["gpu_time_per_call_us"] - 1))
        lat = [t["median_us"] for t in c["timing_repeats"]] + [d["timing"]["median_us"]]
        spread.append(max(lat) / min(lat))
    assert len(again) == 20 and max(gpu) < 0.019
    assert max(spread) == pytest.approx(2.2, abs=0.01) and sum(s >= 1.5 for s in spread) == 11


H100_4 = REPO / "examples" / "h100-heldout-4"
H100_5 = REPO / "examples" / "h100-heldout-5"


def test_h100_fourth_draw_score(job):
    """The fourth draw's 20 dense shapes asked on the H100 store (5 corpus runs, timed with the host's stalls hidden)
    at 6642428 and measured on the same H100: the headline within 5.3 %, the drop-in the fastest drop-in at all 18
    answered shapes; the 2 unanswered are contested by sdpa-efficient (a model of 1 workload; a GQA group the store
    never saw it refuse); no shape is launch-bound."""
    doc, rows = scored(job, H100_4, "asks-6642428.json", ("dense",))
    assert doc["commit"] == "6642428" and doc["gpu"] == "NVIDIA H100 80GB HBM3" and len(doc["runs"]) == 5
    assert all(r.startswith("examples/h100-corpus/") for r in doc["runs"])
    got, n, hits, mean, worst = job.summary(rows, "headline_regret")
    assert (got, n, hits) == (18, 20, 16) and worst == pytest.approx(0.0524, abs=5e-4)
    assert job.summary(rows, "drop_in_regret") == (18, 20, 18, 0.0, 0.0)
    assert sorted(r["tag"] for r in rows if r["drop_in"] is None) == [
        "prefill_b1_q2048_kv2048_hq2_hkv2_d64_bf16_causal", "train_b2_q1024_kv1024_hq4_hkv2_d128_bf16_causal"]
    assert all(r["contested_by"] == ["sdpa-efficient"] for r in rows if r["drop_in"] is None)
    assert not any(r["launch_bound"] for r in rows)
    # the vLLM constant (sdpa-cudnn on dense work) answers everywhere and misses once, by 18.4 %
    assert job.summary(rows, "vllm_regret")[:3] == (20, 20, 19)


def test_h100_fifth_draw_score(job):
    """The fifth draw (seed 41), asked at 6ee52ec with the fourth draw in the store: every answer the fastest measured
    (headline and drop-in, 17 of 20); the 3 unanswered have no bounded candidate (every model 1.0–3.2 octaves
    beyond its shapes, or its leave-one-out error above the gate), none contested."""
    doc, rows = scored(job, H100_5, "asks-6ee52ec.json", ("dense",))
    assert doc["commit"] == "6ee52ec" and len(doc["runs"]) == 6 and "examples/h100-heldout-4/dense" in doc["runs"]
    assert job.summary(rows, "headline_regret") == (17, 20, 17, 0.0, 0.0)
    assert job.summary(rows, "drop_in_regret") == (17, 20, 17, 0.0, 0.0)
    open_ = [x for x in doc["answers"] if x["best"] is None]
    assert len(open_) == 3 and not any(x["contested_by"] for x in open_)
    assert all("octaves beyond" in u["why"] or "leave-one-out error" in u["why"] or "too few" in u["why"]
               for x in open_ for u in x["unmeasured_here"] if u["why"])


def test_a_draw_is_scored_on_the_gpu_it_was_asked_for(job, capsys):
    """H200 asks against an H100 run: refused in one line, nothing scored."""
    assert job_main(job, ["score", str(HELD3 / "asks-76b11e4.json"), str(H100_4 / "dense")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "asked on NVIDIA H200" in out.err and "measured on NVIDIA H100 80GB HBM3" in out.err


def test_committed_runs_of_one_gpu(job):
    """The committed runs read by GPU name: the H100 ones apart from the H200 reference corpus (the default)."""
    h100 = job.committed_runs(gpu="H100")
    assert [str(p.relative_to(REPO)) for p in h100] == [
        "examples/h100-corpus/dense", "examples/h100-corpus/prefill-a", "examples/h100-corpus/prefill-b",
        "examples/h100-corpus/train-a", "examples/h100-corpus/train-b", "examples/h100-heldout-4/dense",
        "examples/h100-heldout-5/dense"]
    h200 = job.committed_runs()
    assert h200 and not set(h200) & set(h100) and set(job.committed_runs(gpu=None)) == set(h200) | set(h100)
    with pytest.raises(job.ProfattnError, match=r"no committed run was measured on a GPU named like 'A100' \(the "
                       r"committed GPUs: NVIDIA H100 80GB HBM3, NVIDIA H200\)"):
        job.committed_runs(gpu="A100")


def test_no_output_replaces_a_file_and_no_score_without_a_measurement(job, tmp_path, capsys):
    """The new user's breaks: ``score --json`` onto the draw's own asks file (it replaced it), ``ask --out`` onto a
    committed asks file, a misspelt ``--exclude`` (it was ignored), and a score against runs that measured none of
    the shapes (it printed "yes" for both targets)."""
    asks = H100_4 / "asks-6642428.json"
    before = asks.read_bytes()
    assert job_main(job, ["score", str(asks), str(H100_4 / "dense"), "--json", str(asks)]) == 2
    assert "exists; a benchmark never replaces a file" in capsys.readouterr().err and asks.read_bytes() == before
    assert job_main(job, ["ask", str(REPO / "examples" / "h200-heldout-4" / "workloads.txt"), "--gpu", "H100",
                          "--exclude", str(H100_4), "--out", str(asks)]) == 2
    assert "exists" in capsys.readouterr().err and asks.read_bytes() == before
    assert job_main(job, ["ask", str(REPO / "examples" / "h200-heldout-4" / "workloads.txt"), "--gpu", "H100",
                          "--exclude", str(tmp_path / "typo"), "--out", str(tmp_path / "a.json")]) == 2
    assert "not a directory" in capsys.readouterr().err and not (tmp_path / "a.json").exists()
    assert job_main(job, ["score", str(asks), str(H100_5 / "dense")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "none of the 20 asked shapes was measured" in out.err
