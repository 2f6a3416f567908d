"""One jinja2 environment, one ``render(kind, context)``, one base template: the run report, the analyze
page and the compare page each carry the base's head, CSS and plotly start-up exactly once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FLASH, trace_fixture

from profattn.analysis.calls.find import find_attention_calls
from profattn.analysis.calls.traces import TraceSetAnalysis
from profattn.analysis.run.analyze import analyze_run
from profattn.report import analyze as analyze_page
from profattn.report import run as run_page
from profattn.report.render import (
    PAGE_KINDS, environment, plotly_js, plotly_js_gzip_base64, render, templates_dir, write_html_file,
)
from profattn.results import read_results
from profattn.trace.kineto import load_trace

from factories import SEED, cell, kernel, run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BASE_MARKER = '<meta name="generator" content="profattn">'


def _pages() -> dict[str, str]:
    from profattn.analysis.comparison import compare as comparison
    from profattn.report import compare as compare_page

    train, _, _, _, d8192 = SEED.workloads
    report = run_page.render_html(analyze_run(run([
        cell(train, "sdpa-flash", 2209.0, kernels=(kernel("flash_fwd_kernel", 1024, 700),)),
        cell(d8192, "sdpa-flash", 55.8, kernels=(kernel("flash_fwd_splitkv_kernel", 224, 44),)),
    ])))
    analyze = analyze_page.render_html(TraceSetAnalysis((find_attention_calls(load_trace(trace_fixture(FLASH))),)))
    runs = EXAMPLES / "compare" / "runs"
    cmp = comparison.compare_runs(read_results(runs / "base-a" / "results.json"),
                                  read_results(runs / "head-fused-combine" / "results.json"),
                                  base_label="base-a", head_label="head-fused-combine")
    return {"report": report, "analyze": analyze, "compare": compare_page.render_html(cmp)}


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return _pages()


def test_every_page_template_extends_the_base():
    assert set(PAGE_KINDS) == {"report", "analyze", "compare", "simulate"}
    for kind, name in PAGE_KINDS.items():
        text = (templates_dir() / name).read_text()
        assert text.startswith('{% extends "base.html.j2" %}\n'), kind
        # the head, CSS and plotly start-up live only in the base
        assert "<head>" not in text and "<style>" not in text and "Plotly.newPlot" not in text and "plotly_js" not in text
    base = (templates_dir() / "base.html.j2").read_text()
    assert base.count("Plotly.newPlot(") == 1 and base.count("{{ plotly_js_gz }}") == 1 and 'DecompressionStream("gzip")' in base


def test_three_pages_share_the_base_once(pages: dict[str, str]):
    assert plotly_js()[:40].startswith("/**\n* plotly.js v")
    payload = plotly_js_gzip_base64()
    for kind, html in pages.items():
        assert html.count(BASE_MARKER) == 1, kind
        assert html.count("<!DOCTYPE html>") == 1 and html.count("<head>") == 1 and html.count("<style>") == 1, kind
        assert html.count(payload) == 1 and "/**\n* plotly.js v" not in html, kind  # plotly.js inline, once, gzipped
        assert html.count("Plotly.newPlot(") == 1, kind
        assert html.count("td.num { text-align: right;") == 1, kind  # the shared CSS, once
        assert not re.search(r"<script[^>]*\bsrc=", html), kind  # no CDN
    assert "<title>profattn compare — base-a → head-fused-combine</title>" in pages["compare"]
    assert "<title>profattn trace analysis — 1 file(s)</title>" in pages["analyze"]
    # each page keeps its own styles after the shared ones
    assert "tr.winner td" in pages["report"] and "tr.regression td" in pages["compare"] and ".warning" in pages["analyze"]


def test_render_rejects_unknown_kind_and_a_second_plotly():
    with pytest.raises(ValueError, match="unknown page kind 'ledger'"):
        render("ledger", {})
    with pytest.raises(ValueError, match="plotly_js"):
        render("compare", {"plotly_js": ""})
    with pytest.raises(ValueError, match="plotly_js_gz"):
        render("compare", {"plotly_js_gz": ""})


def test_plotly_travels_gzipped_and_unpacks_to_the_bundle():
    """issue: every page carried plotly.js as 4.6 MB of plain JavaScript; gzipped and base64-encoded it is
    under half of that, decodes to the same bytes, and is the same on every render (no gzip timestamp)."""
    import base64
    import gzip

    payload = plotly_js_gzip_base64()
    raw = base64.b64decode(payload, validate=True)
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\0\0\0\0"  # gzip magic, mtime 0
    assert gzip.decompress(raw).decode("utf-8") == plotly_js()
    assert len(payload) < 0.5 * len(plotly_js().encode("utf-8"))


def test_one_cached_environment_autoescaped_and_strict():
    env = environment()
    assert env is environment()
    assert env.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        render("report", {"title": "t"})


def test_write_html_file_is_atomic_and_creates_parents(tmp_path: Path):
    path = write_html_file("<p>µs</p>", tmp_path / "a" / "b.html")
    assert path == tmp_path / "a" / "b.html" and path.read_text() == "<p>µs</p>"
