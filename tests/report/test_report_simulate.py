"""``profattn simulate``'s renderers on one small simulation: rows, the verdict built from its findings, the JSON
document, Markdown under the comment limit, the HTML page's sections and charts, the step export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import simulation
from profattn.analysis.simulation.replay import StepKind
from profattn.analysis.simulation.simulate import ShapeClass
from profattn.files import MARKDOWN_MARKER, is_profattn_output
from profattn.report import simulate as out
from profattn.report.format import fmt_latency_s
from profattn.workload import parse_workload_spec


@pytest.fixture(scope="module")
def faster_a():
    return simulation({"A": 0.001, "B": 0.004, "P": 0.05})


def test_latency_format():
    assert [fmt_latency_s(v) for v in (None, float("nan"), 0.00085, 0.026, 0.157, 1.234, 2104.2)] == [
        "–", "–", "850.0 µs", "26.0 ms", "157 ms", "1.23 s", "2,104 s"]


def test_class_text():
    assert out.class_text(ShapeClass(StepKind.DECODE, 2, 8)) == "decode, 2–7 seqs"
    assert out.class_text(ShapeClass(StepKind.MIXED, 1, 2)) == "mixed, 1 seq"
    assert out.class_text(ShapeClass(StepKind.DECODE, 512, 1 << 30)) == "decode, 512+ seqs"
    assert out.class_text(ShapeClass(StepKind.PREFILL, 0, 1)) == "prefill only"


def test_rows_and_verdict(faster_a):
    rows = out.deployment_rows(faster_a)
    assert [r["deployment"] for r in rows] == ["A + P", "B + P"]
    assert rows[0]["kv"] == "48,000 tokens (3,000 pages of 16)"
    a, b = faster_a.results
    ratio = a.search.best_rate_per_s / b.search.best_rate_per_s
    v = out.verdict_sentences(faster_a)
    assert v[0] == "The store holds no decode workload measured for both A and B: no per-call winner."
    assert v[1].startswith("At the declared load (custom, TTFT ≤ 500 ms and TPOT ≤ 20.0 ms for 90 % of requests) A + P "
                           "serves the most requests within the SLO")
    assert f"({ratio:.2f}×)" in v[1]
    assert v[2].startswith("Why: priced on the same") and "B + P spends" in v[2] and "more in attention than A + P" in v[2]
    assert any(s.startswith("Attention is ") for s in v) and any(s.startswith("KV capacity — A + P: 48,000 tokens") for s in v)
    rates = out.rate_rows(faster_a)
    assert {r["deployment"] for r in rates} == {"A + P", "B + P"} and any(r["meets"] == "no" for r in rates)
    head, shapes = out.shape_table(faster_a)
    assert head[-3:] == ["attention: A + P", "attention: B + P", "rest (estimate)"] and len(shapes) == len(faster_a.findings.shapes)


def test_json_document(faster_a, tmp_path: Path):
    path = out.write_json(faster_a, tmp_path / "s.json")
    doc = json.loads(path.read_text())
    assert (doc["schema"], doc["version"]) == ("profattn.simulation", 1) and is_profattn_output(path)
    assert doc["trace"]["requests"] == 400 and doc["trace"]["rate_scale"] == 2.0
    d = doc["deployments"][0]
    assert d["scheduler"] == {"max_num_batched_tokens": 2048, "max_num_seqs": 64, "enable_chunked_prefill": True,
                              "block_size": 16, "num_gpu_blocks": 3000,
                              "enable_prefix_caching": False}
    assert d["time_s"]["attention_decode"] > 0 and len(d["series"]["t_s"]) <= out.SERIES_POINTS
    assert d["rate_search"]["points"][0]["scale"] == 2.0
    assert doc["findings"]["deployment_winner"] == "A + P" and doc["verdict"] == out.verdict_sentences(faster_a)
    for s in doc["sampled_steps"]:
        for spec in s["workloads"].values():
            assert parse_workload_spec(spec).num_kv_heads == 2


def test_markdown_and_html(faster_a, tmp_path: Path):
    md = out.simulation_markdown(faster_a)
    assert md.startswith(MARKDOWN_MARKER + "\n## profattn simulate: custom on test GPU") and len(md) < 65_000
    assert "| A + P | 48,000 tokens" in md and "### Rate search" in md and "### What the prices rest on" in md
    html = out.render_html(faster_a)
    for marker in ('id="sim-deployments"', 'id="sim-shapes"', 'id="sim-rates"', 'id="sim-provenance"', 'id="sim-steps"',
                   'id="chart-data-latency"', 'id="chart-data-breakdown"', 'id="chart-data-batch"'):
        assert marker in html
    rows = out.provenance_rows(faster_a)
    assert rows and all(f'<td class="num">{r["items"]}</td>' in html for r in rows)  # the work items, not dict.items
    assert "built-in method" not in html
    assert out.latency_chart(faster_a)["layout"]["title"]["text"].startswith("Latency against request rate")
    p = out.write_html(faster_a, tmp_path / "r.html")
    assert is_profattn_output(p)


def test_step_export(faster_a):
    lines = out.export_lines(faster_a)
    assert lines[0].startswith("# profattn simulate: ")
    calls = [ln.split("\t") for ln in lines if not ln.startswith("#")]
    assert {part for part, _ in calls} <= {"step", "decode", "prefill"} and calls
    for part, spec in calls:
        w = parse_workload_spec(spec)
        assert (part == "decode") == (w.phase.value == "decode") or part == "step"


def test_text_and_no_search():
    rep = simulation({"A": 0.001, "P": 0.05}, decoders=("A",), search=False, scale=1.0)
    text = out.text_report(rep)
    assert text.splitlines()[0].startswith("custom on test GPU, 400 requests at") and "A + P" in text
    assert out.latency_chart(rep) is None and out.rate_rows(rep) == []


def test_sampled_steps_carry_their_prices(faster_a):
    doc = out.simulation_to_dict(faster_a)
    for s in doc["sampled_steps"]:
        prices = s["priced_us_per_layer"]
        assert set(prices) == {"A + P", "B + P"}
        for label, parts in prices.items():
            assert set(parts) == ({"decode"} if s["kind"] == "decode" else {"prefill"} if s["kind"] == "prefill"
                                  else {"decode", "prefill"})
        if "decode" in prices["A + P"]:  # LinearAttention: 0.001 against 0.004 µs per K/V token
            assert prices["B + P"]["decode"] == pytest.approx(4 * prices["A + P"]["decode"])
