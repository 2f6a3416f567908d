"""Report rows and HTML: winners marked, strings escaped, self-contained."""

from __future__ import annotations

import re

from profattn.analysis.run.analyze import analyze_run
from profattn.report.format import fmt_bytes, fmt_us
from profattn.report.run import launch_rows, matrix_rows, render_html
from profattn.results import CellStatus

from pathlib import Path

from factories import SEED, cell, kernel, run

TRAIN, PREFILL, D512, D2048, D8192 = SEED.workloads
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def sample_run():
    return run([
        cell(TRAIN, "sdpa-flash", 2209.0, kernels=(kernel("flash_fwd_kernel", 1024, 700),)),
        cell(D8192, "sdpa-flash", 55.8, kernels=(kernel("flash_fwd_splitkv_kernel", 224, 44), kernel("combine", 32, 4))),
        cell(D8192, "evil", 60.0, kernels=(kernel("<script>alert(1)</script>_kernel", 8, 50),)),
        cell(D8192, "sdpa-efficient", None, status=CellStatus.UNSUPPORTED, reason="EFFICIENT_ATTENTION rejected: <b>gqa</b>"),
    ])


def test_matrix_rows_mark_winner_and_format():
    rows = {r["cell_id"].split(".")[-1] + "@" + r["phase"]: r for r in matrix_rows(analyze_run(sample_run()))}
    flash = rows["sdpa-flash@decode"]
    assert flash["winner"] and flash["latency"] == "55.8 µs" and flash["kernels_per_call"] == "2"
    assert flash["tokens_per_s"] == "143.37 k"  # 8 tokens / 55.8 us
    assert rows["sdpa-flash@train"]["latency"] == "2,209.0 µs"
    assert not rows["evil@decode"]["winner"]
    assert rows["sdpa-efficient@decode"]["latency"] == "–" and rows["sdpa-efficient@decode"]["status"] == "unsupported"


def test_launch_rows_from_trace_summaries():
    rows = {r["cell_id"]: r for r in launch_rows(analyze_run(sample_run()))}
    assert list(rows) == [f"{TRAIN.tag}.sdpa-flash", f"{D8192.tag}.sdpa-flash", f"{D8192.tag}.evil"]  # matrix order
    split = next(k for k in rows[f"{D8192.tag}.sdpa-flash"]["kernels"] if k["kernel"] == "flash_fwd_splitkv_kernel")
    assert split["grid"] == "[224, 1, 1]" and split["ctas"] == "224" and split["block"] == "[128, 1, 1]"


def test_launch_table_shows_each_cells_dominant_kernels():
    """issue: the launch-shape section listed every kernel of every cell (39,000 px of the H200 report); now
    the top kernel per cell (and the second from 10% of the cell's GPU time), the rest behind a toggle."""
    rows = {r["cell_id"]: r for r in launch_rows(analyze_run(sample_run()))}
    decode = rows[f"{D8192.tag}.sdpa-flash"]
    # splitkv 44 µs of 48 µs = 92%; combine 4/48 = 8% < 10%: not a dominant kernel, still in the full list
    assert [(k["kernel"], k["share"], k["grid"], k["block"], k["ctas_per_sm"], k["time"]) for k in decode["dominant"]] == [
        ("flash_fwd_splitkv_kernel", "92%", "[224, 1, 1]", "[128, 1, 1]", "1.70", "44.0 µs")]  # 224 CTAs / 132 SMs
    assert [k["kernel"] for k in decode["kernels"]] == ["flash_fwd_splitkv_kernel", "combine"]
    assert decode["gpu_time"] == "48.0 µs" and decode["workload"] == "decode kv 8192 (page 16)"
    assert decode["workload_span"] == 4 and rows[f"{D8192.tag}.evil"]["workload_span"] == 0  # 2 cells x (1 kernel + toggle)
    assert rows[f"{TRAIN.tag}.sdpa-flash"]["dominant"][0]["ctas_per_sm"] == "7.76"  # 1024 / 132
    two = run([cell(D8192, "flex", 50.0, kernels=(kernel("a", 8, 30), kernel("b", 8, 15), kernel("c", 8, 5)))])
    assert [k["share"] for k in launch_rows(analyze_run(two))[0]["dominant"]] == ["60%", "30%"]
    html = render_html(analyze_run(sample_run()))
    assert html.count('<tr class="all-kernels">') == 3 and "all 2 kernels of sdpa-flash on decode kv 8192 (page 16)" in html


def grid_run():
    """Two workloads, five backends: a winner, a tie, a slower cell, unsupported cells, a backend
    unsupported for every workload."""
    return run([
        cell(TRAIN, "sdpa-flash", 2209.0),
        cell(TRAIN, "sdpa-efficient", 2500.0),
        cell(TRAIN, "triton-paged-decode", None, status=CellStatus.UNSUPPORTED, reason="a decode path"),
        cell(TRAIN, "sdpa-math", None, status=CellStatus.UNSUPPORTED, reason="too big"),
        cell(D8192, "sdpa-flash", 55.8),
        cell(D8192, "sdpa-efficient", None, status=CellStatus.UNSUPPORTED, reason="EFFICIENT rejected: <b>gqa</b>"),
        cell(D8192, "triton-paged-decode", 56.5),
        cell(D8192, "evil", 60.0),
        cell(D8192, "sdpa-math", None, status=CellStatus.UNSUPPORTED, reason="too big"),
    ])


def test_matrix_grid_one_row_per_workload_one_column_per_backend():
    """issue: the matrix had one row per cell, the 50-character tag on every row, whole columns of
    "unsupported"; now one row per workload (short label), one column per backend that ran somewhere."""
    from profattn.report.run import matrix_grid

    g = matrix_grid(analyze_run(grid_run()))
    assert g["backends"] == ["sdpa-flash", "sdpa-efficient", "triton-paged-decode", "evil"]  # sdpa-math: no column
    assert g["hidden"] == [{"backend": "sdpa-math", "text": "too big"}]
    assert [r["label"] for r in g["rows"]] == ["train 2048/2048", "decode kv 8192 (page 16)"]
    train, decode = ({c["backend"]: c for c in r["cells"]} for r in g["rows"])
    assert (train["sdpa-flash"]["kind"], train["sdpa-flash"]["latency"], train["sdpa-flash"]["sub"]) == ("winner", "2,209.0 µs", ["err 3.0e-03"])
    assert train["sdpa-efficient"]["sub"] == ["1.13×", "err 3.0e-03"]  # 2500 / 2209: pieces that never break inside
    assert (train["triton-paged-decode"]["kind"], train["triton-paged-decode"]["latency"], train["triton-paged-decode"]["footnote"]) == ("unsupported", "n/s", 1)
    assert (train["evil"]["kind"], train["evil"]["latency"]) == ("absent", "·")  # not run on this workload
    # 56.5 is within 2% of the winner's 55.8: a tie; 60.0 is 1.08x and outside the winner's p90 (56.9)
    assert (decode["triton-paged-decode"]["kind"], decode["triton-paged-decode"]["sub"]) == ("tie", ["≈ 1.01×", "err 3.0e-03"])
    assert (decode["evil"]["kind"], decode["evil"]["sub"]) == ("ok", ["1.08×", "err 3.0e-03"])
    assert decode["sdpa-efficient"]["footnote"] == 2 and "EFFICIENT rejected" in decode["sdpa-efficient"]["title"]
    assert g["footnotes"] == [
        {"n": 1, "workloads": "train 2048/2048", "text": "triton-paged-decode: a decode path"},
        {"n": 2, "workloads": "decode kv 8192 (page 16)", "text": "sdpa-efficient: EFFICIENT rejected: <b>gqa</b>"},
    ]
    html = render_html(analyze_run(grid_run()))
    grid_html = html[html.index('<table id="matrix-grid">'):html.index("</table>", html.index('<table id="matrix-grid">'))]
    assert grid_html.count("<tr data-workload=") == 2 and grid_html.count(">unsupported<") == 0
    assert TRAIN.tag not in grid_html.replace(f'title="{TRAIN.tag}"', "").replace(f'data-workload="{TRAIN.tag}"', "").replace(f'data-cell="{TRAIN.tag}.', "")
    assert "2,209.0 µs ★" in grid_html and '<details id="matrix-details">' in html


def test_identical_unsupported_footnotes_share_a_number():
    from profattn.report.run import matrix_grid

    r = run([cell(TRAIN, "sdpa-flash", 2209.0), cell(TRAIN, "paged", None, status=CellStatus.UNSUPPORTED, reason="decode only"),
             cell(PREFILL, "sdpa-flash", 300.0), cell(PREFILL, "paged", None, status=CellStatus.UNSUPPORTED, reason="decode only"),
             cell(D512, "sdpa-flash", 20.0), cell(D512, "paged", 15.0)])
    g = matrix_grid(analyze_run(r))
    assert g["footnotes"] == [{"n": 1, "workloads": "train 2048/2048, prefill kv 2048", "text": "paged: decode only"}]
    assert [row["footnote"] for row in g["rows"]] == [1, 1, None]


def cpu_run():
    """A CPU run of tiny workloads: rates far below 1 GB/s and 1 GFLOP/s, no graph, no kernels, no peak memory."""
    from profattn.workload import Workload

    dec = Workload(phase="decode", batch=1, q_len=1, kv_len=128, num_q_heads=2, num_kv_heads=1, head_dim=16)
    pre = Workload(phase="prefill", batch=1, q_len=128, kv_len=128, num_q_heads=2, num_kv_heads=1, head_dim=16)
    return run([cell(pre, "eager", 100.0), cell(dec, "eager", 200.0), cell(dec, "sdpa-math", 100.0)], device="cpu")


def test_cpu_rate_columns_carry_the_unit_of_their_values():
    """issue: the matrix's "TFLOP/s" column held GFLOP/s values on CPU, and small rates printed "0.0 GB/s"."""
    from profattn.report.run import matrix_columns

    r = cpu_run()
    assert matrix_columns(analyze_run(r))["flops_unit"] == "GFLOP/s"
    rows = {(row["phase"], row["backend"]): row for row in matrix_rows(analyze_run(r))}
    # decode: 8,320 requested bytes and 16,384 FLOPs (4·1·2·128·16) per call
    assert (rows["decode", "eager"]["gbps"], rows["decode", "eager"]["tflops"]) == ("0.0416", "0.0819")  # at 200 µs
    assert (rows["decode", "sdpa-math"]["gbps"], rows["decode", "sdpa-math"]["tflops"]) == ("0.0832", "0.164")  # at 100 µs
    # prefill: 24,576 bytes and 1,056,768 FLOPs at 100 µs
    assert (rows["prefill", "eager"]["gbps"], rows["prefill", "eager"]["tflops"]) == ("0.246", "10.6")
    html = render_html(analyze_run(r))
    detail = html[html.index('<table id="matrix-table">'):html.index("</table>", html.index('<table id="matrix-table">'))]
    assert "<th>GFLOP/s</th>" in detail and "<th>GB/s</th>" in detail and "TFLOP" not in detail
    assert not re.search(r">0(\.0+)?( [GT]?(B|FLOP)/s)?<", detail)


def test_cpu_report_uses_cpu_wording_only():
    """issue: a CPU report explained CUDA-graph replay and showed eager-latency (identical to latency),
    GPU-time and peak-memory columns full of "–"/"n/a"."""
    html = render_html(analyze_run(cpu_run()))
    matrix = html[html.index('<h2 id="matrix">'):html.index('<h2 id="charts">')]
    for text in ("graph replay", "CUDA graph", "CUDA-graph", "eager latency", "GPU time", "peak memory", "kernels/call",
                 "max_memory_allocated", "fp32 reference"):
        assert text not in matrix, text
    assert "perf_counter" in matrix and "fp64 reference" in matrix
    gpu = render_html(analyze_run(sample_run()))
    gpu_matrix = gpu[gpu.index('<h2 id="matrix">'):gpu.index('<h2 id="charts">')]
    assert "GPU time" in gpu_matrix and "kernels/call" in gpu_matrix


def test_one_colour_per_backend_in_every_chart():
    """issue: charts coloured backends by trace order (plotly's default colorway) or by the backends
    present in that chart, so one backend changed colour between the latency bars and the roofline."""
    from profattn.report.palette import BUILTIN_COLORS, backend_colors
    from profattn.report.run import chart_figures
    from profattn.results import read_results

    for name in ("h200-seed", "h200-sweep"):
        r = read_results(EXAMPLES / name)
        names = {c.backend for c in r.cells}
        expected = backend_colors(names)
        seen: dict[str, set[str]] = {}
        figures = chart_figures(analyze_run(r))
        assert len(figures) >= 3
        for f in figures:
            for trace in f["figure"]["data"]:
                b = trace.get("legendgroup") or trace.get("name", "").split(",")[0]
                if b not in names:
                    continue  # the roof line
                color = (trace.get("marker") or {}).get("color") or (trace.get("line") or {}).get("color")
                seen.setdefault(b, set()).add(color)
        assert seen and all(cs == {expected[b]} for b, cs in seen.items()), seen
        assert len(set(expected.values())) == len(names)
    # a backend keeps its colour across reports whatever ran beside it (triton-paged-decode was pink in the
    # seed report and purple in the sweep when colours followed the sorted names of each run)
    assert backend_colors(["triton-paged-decode", "sdpa-cudnn"])["triton-paged-decode"] == \
        backend_colors(["triton-paged-decode", "eager", "flex", "sdpa-math"])["triton-paged-decode"] == "#FF6692"
    # plugins: stable by name, never a built-in's colour, two plugins never share one
    plug = backend_colors(["my-kernel", "other-kernel", "sdpa-cudnn"])
    assert plug == backend_colors(["other-kernel", "my-kernel", "sdpa-cudnn", "my-kernel"])
    assert len(set(plug.values())) == 3 and plug["my-kernel"] not in BUILTIN_COLORS.values()


def test_committed_h200_report_is_at_most_3_mb():
    """issue: the H200 report weighed 5.27 MB (4.6 MB of it plotly.js, inline as plain text)."""
    from profattn.api import load_run

    html = render_html(analyze_run(load_run(EXAMPLES / "h200-seed-2026-12-01")))
    assert len(html.encode("utf-8")) <= 3_000_000


def test_html_escapes_trace_and_exception_strings():
    html = render_html(analyze_run(sample_run()))
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
    texts = noise_texts(analyze_run(r))
    assert texts[0].startswith("3 of 3 timed cells spread widely (p90/p10 > 1.5, worst 3.00)")
    assert texts[1].startswith("the load average reached 3.9 on 2 logical CPUs")
    html = render_html(analyze_run(r))
    assert html.count("Noisy machine:") == 2
    # the PR-comment summary carried neither warning before
    from profattn.report.markdown import run_markdown

    md = run_markdown(analyze_run(r))
    assert md.count("> ⚠️ Noisy machine: ") == 2 and md.index("Noisy machine") < md.index("### Verdict")


def test_crossovers_count_only_changes_beyond_noise():
    """The H200 seed report listed 'triton-paged-decode → sdpa-cudnn between kv 2048 and 8192 (within noise)'
    as a crossover while the verdict called every decode comparison a tie; and both of those "crossovers" (and the
    sweep's) were between a paged kernel and a contiguous-copy one. Each layout is now a series of its own, and a
    change counts only beyond noise."""
    from profattn.report.run import crossover_rows
    from profattn.results import read_results
    from profattn.workload import Workload

    rows = crossover_rows(analyze_run(read_results(EXAMPLES / "h200-seed-2026-12-01")))
    assert [(r["kernels"], r["crossovers"]) for r in rows] == [
        ("paged kernels (page pool)", "none: the same winner at every kv_len"),
        ("contiguous-copy kernels", "none: the same winner at every kv_len")]
    assert rows[0]["winners"].startswith("kv 512: triton-paged-decode 12.2 µs") and "sdpa-cudnn" not in rows[0]["winners"]
    # one ranking (backends whose layout profattn does not know): a within-noise change is not a crossover
    ws = {kv: Workload(phase="decode", batch=2, q_len=1, kv_len=kv, num_q_heads=4, num_kv_heads=2, head_dim=32)
          for kv in (64, 128, 256)}
    r = run([cell(ws[64], "x", 10.0), cell(ws[64], "y", 10.1), cell(ws[128], "y", 10.0), cell(ws[128], "x", 15.0),
             cell(ws[256], "x", 10.0), cell(ws[256], "y", 20.0)])
    (row,) = crossover_rows(analyze_run(r))
    assert row["kernels"] == "all" and row["crossovers"] == (
        "y → x between kv 128 and 256 (the fastest changes only within noise: x → y between kv 64 and 128)")


def test_a_tied_winner_is_marked_as_a_tie_in_the_matrix():
    """The matrix starred triton-paged-decode at kv 512 alone while the verdict called it a tie with cuDNN."""
    from profattn.report.run import matrix_grid
    from profattn.results import read_results

    grid = matrix_grid(analyze_run(read_results(EXAMPLES / "h200-seed-2026-12-01")))
    row = next(r for r in grid["rows"] if r["label"] == "decode kv 512 (page 16)")
    (win,) = [c for c in row["cells"] if c["kind"] == "winner"]
    assert win["backend"] == "triton-paged-decode" and win["sub"][0] == "tie" and win["sub"][1].startswith("err")
    assert "within noise of sdpa-cudnn: a tie, not a win" in win["title"]
    pre = next(r for r in grid["rows"] if r["label"] == "prefill kv 2048")
    (win,) = [c for c in pre["cells"] if c["kind"] == "winner"]
    assert win["backend"] == "sdpa-cudnn" and win["sub"][0].startswith("err ")  # a clear win (1.50× ahead of flex)


# ---- a windowed SDPA cell says which SDPA path ran (from its trace) ---------------------------------


def _sdpa_cell(backend: str, ops: tuple[str, ...], window: int | None = 4096):
    from dataclasses import replace as _replace

    from profattn.workload import Workload

    w = Workload(phase="prefill", batch=1, q_len=8192, kv_len=8192, num_q_heads=8, num_kv_heads=8, head_dim=128,
                 window=window)
    gemv = "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float>(cublasGemvParamsEx<int>)"
    c = cell(w, backend, 900.0, family="math", kernels=[kernel(gemv, 132, 500.0)])
    return _replace(c, trace=_replace(c.trace, ops=ops))


def _path_text(c):
    from profattn.report.run import sdpa_mask_path_text

    return sdpa_mask_path_text(analyze_run(run([c])).cell(c.cell_id))


def test_windowed_sdpa_cell_names_the_math_path_that_ran() -> None:

    c = _sdpa_cell("sdpa-math", ("profattn::cell", "aten::scaled_dot_product_attention",
                                 "aten::_scaled_dot_product_attention_math", "aten::bmm"))
    text = ("sliding window 4096 as an explicit mask: SDPA ran the math path "
            "(aten::_scaled_dot_product_attention_math; dominant kernel gemvx::kernel)")
    assert _path_text(c) == text
    (row,) = matrix_rows(analyze_run(run([c])))
    assert row["notes"] == text
    fused = _sdpa_cell("sdpa-efficient", ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_efficient_attention"))
    assert _path_text(fused).startswith("sliding window 4096 as an explicit mask: SDPA ran efficient "
                                                 "(aten::_scaled_dot_product_efficient_attention;")
    # no window: nothing said; not an SDPA backend: nothing said
    assert _path_text(_sdpa_cell("sdpa-math", c.trace.ops, window=None)) is None
    assert _path_text(_sdpa_cell("flex", c.trace.ops)) is None


def test_cell_notes_open_under_the_backend_in_the_detail_table():
    """A cell's notes (the split plan and combine our decode kernel ran, the mask a backend built) used to reach
    results.json only: the report built them per row and never rendered them."""
    from profattn import load_run

    html = render_html(analyze_run(load_run(EXAMPLES / "h200-seed-wave-rule")))
    assert html.count('<details class="cell-notes">') > 30
    assert "split plan: 16 splits x 512 tokens, 512 CTAs = 0.97 waves of 4 per SM (BLOCK_N 32, 4 warps, 3 stages" in html
    assert "split combine: second kernel" in html


def test_every_bandwidth_panel_labels_its_roof_line():
    """The committed sweep's K/V bandwidth chart has one panel per batch; plotly gave every panel after the first an
    annotation without text, drawn as its "new text" placeholder. Every roof line now says what it is."""
    from profattn.report.run import chart_figures
    from profattn.results import read_results

    sweep = read_results(Path(__file__).resolve().parents[2] / "examples" / "h200-sweep")
    (bw,) = [f for f in chart_figures(analyze_run(sweep)) if f["id"] == "decode-bandwidth"]
    notes = bw["figure"]["layout"]["annotations"]
    roofs = [a for a in notes if "GB/s" in (a.get("text") or "")]
    panels = [a for a in notes if (a.get("text") or "").startswith("batch ")]
    assert len(panels) == 3 and len(roofs) == 3 and all(a.get("text") for a in notes)
    c = sweep.ceilings
    assert [a["text"] for a in roofs] == [f"{c.bandwidth_kind} {c.bandwidth_gbps:,.0f} GB/s"] * 3
