"""Report rows and HTML: winners marked, strings escaped, self-contained."""

from __future__ import annotations

import re

from profattn.report.format import fmt_bytes, fmt_us
from profattn.report.run import launch_rows, matrix_rows, render_html
from profattn.results import CellStatus

from factories import SEED, cell, kernel, run

TRAIN, PREFILL, D512, D2048, D8192 = SEED.workloads


def sample_run():
    return run([
        cell(TRAIN, "sdpa-flash", 2209.0, kernels=(kernel("flash_fwd_kernel", 1024, 700),)),
        cell(D8192, "sdpa-flash", 55.8, kernels=(kernel("flash_fwd_splitkv_kernel", 224, 44), kernel("combine", 32, 4))),
        cell(D8192, "evil", 60.0, kernels=(kernel("<script>alert(1)</script>_kernel", 8, 50),)),
        cell(D8192, "sdpa-efficient", None, status=CellStatus.UNSUPPORTED, reason="EFFICIENT_ATTENTION rejected: <b>gqa</b>"),
    ])


def test_matrix_rows_mark_winner_and_format():
    rows = {r["cell_id"].split(".")[-1] + "@" + r["phase"]: r for r in matrix_rows(sample_run())}
    flash = rows["sdpa-flash@decode"]
    assert flash["winner"] and flash["latency"] == "55.8 µs" and flash["kernels_per_call"] == "2"
    assert flash["tokens_per_s"] == "143.37 k"  # 8 tokens / 55.8 us
    assert rows["sdpa-flash@train"]["latency"] == "2,209.0 µs"
    assert not rows["evil@decode"]["winner"]
    assert rows["sdpa-efficient@decode"]["latency"] == "–" and rows["sdpa-efficient@decode"]["status"] == "unsupported"


def test_launch_rows_from_trace_summaries():
    rows = launch_rows(sample_run())
    assert set(rows) == {"train", "decode"}
    split = next(r for r in rows["decode"] if r["kernel"] == "flash_fwd_splitkv_kernel")
    assert split["grid"] == "[224, 1, 1]" and split["ctas"] == "224" and split["block"] == "[128, 1, 1]"


def test_html_escapes_trace_and_exception_strings():
    html = render_html(sample_run())
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;_kernel" in html
    assert "<b>gqa</b>" not in html and "&lt;b&gt;gqa&lt;/b&gt;" in html
    # charts carry data as escaped JSON; plotly.js is inline (no CDN), once
    assert not re.search(r"<script[^>]*\bsrc=", html) and not re.search(r"<link[^>]*\bhref=", html)
    assert html.count("Plotly.newPlot(") == 1


def test_formatters():
    assert fmt_us(55.83) == "55.8 µs" and fmt_us(27270.0) == "27.27 ms" and fmt_us(None) == "–"
    assert fmt_bytes(134_217_728) == "134.2 MB" and fmt_bytes(None) == "n/a"


def test_a_noisy_machine_is_named_in_the_report():
    """issue: on a loaded 2-core machine medians came out in ~8 ms steps and nothing warned."""
    import dataclasses

    from factories import SEED, cell, environment, run
    from profattn.report.run import noise_texts, render_html
    from profattn.results import Timing

    cells = [dataclasses.replace(cell(w, "eager", m), timing=Timing(m, m / 2, m * 1.5, m / 2, 20, "t"))
             for w, m in zip(SEED.workloads, (7993.0, 7998.0, 23994.0))]
    env = dataclasses.replace(environment("cpu", None), cpu_count=2, load_avg_start=(3.9, 2.0, 1.0))
    r = dataclasses.replace(run(cells, device="cpu"), environment=env)
    texts = noise_texts(r)
    assert texts[0].startswith("3 of 3 timed cells spread widely (p90/p10 > 1.5, worst 3.00)")
    assert texts[1].startswith("the load average reached 3.9 on 2 logical CPUs")
    html = render_html(r)
    assert html.count("Noisy machine:") == 2
