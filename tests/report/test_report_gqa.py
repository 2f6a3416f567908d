"""The GQA section: sentences from the typed comparison, the table, the flag, the Markdown summary, left out
when no workloads differ only in their KV heads."""

from __future__ import annotations

from profattn.analysis.run.analyze import analyze_run
from profattn.report.gqa import article, gqa_section, times
from profattn.report.markdown import run_markdown
from profattn.report.run import render_html

from factories import SEED, cell, gqa_run, run

SAVING = "At kv 8192, sdpa-cudnn turned the 4.0× smaller cache into a 3.6× latency saving (bandwidth-bound: 4,410 GB/s of 4,603)."
NO_SAVING_LAUNCH = ("At kv 512, sdpa-cudnn turned the 4.0× smaller cache into no latency saving (1.01×, within noise; "
                    "launch-bound: 7.90 µs against its floor of 7.80 µs; the bytes need 3.67 µs at the read roof).")
NO_SAVING_NEITHER = ("At kv 8192, eager turned the 4.0× smaller cache into no latency saving (1.01×, within noise; "
                     "neither bandwidth- nor launch-bound: 246 GB/s of 4,603, 1,090.0 µs against its floor of 38.0 µs).")
SLOWER = ("At kv 512, eager was 1.05× slower with the 4.0× smaller cache (launch-bound: 42.0 µs against its floor of "
          "38.0 µs; the bytes need 3.67 µs at the read roof).")
MQA = "At kv 8192 with Hkv 1, sdpa-cudnn turned the 32.0× smaller cache into an 18.3× latency saving (bandwidth-bound: 2,808 GB/s of 4,603)."
FLAG = "eager at kv 8192, Hkv 8 moved 2.4 GB from DRAM for 268.6 MB requested (9.00×): traffic beyond the ledger (re-reads of K/V, or scratch the kernel writes and reads back, such as split-KV partials), so the smaller allocation did not become proportionally fewer bytes moved."


def test_sentences_and_rows():
    s = gqa_section(analyze_run(gqa_run()))
    for text in (SAVING, NO_SAVING_LAUNCH, NO_SAVING_NEITHER, SLOWER, MQA):
        assert text in s["sentences"]
    # the MHA → GQA step first at each kv length, then MHA → MQA
    assert s["sentences"][:2] == [NO_SAVING_LAUNCH, SLOWER]
    assert s["flags"] == [FLAG] and s["measured"]
    t = s["tables"][1]
    assert t["title"] == "decode kv 8192: B=8, Hq=32, d=128, bfloat16, page 16 — Hkv 32 / 8 / 1"
    assert t["flops"] == "FLOPs per call: 1.07 G at every Hkv (from the 32 query heads)"
    cudnn8, eager8 = t["rows"][1], t["rows"][4]
    assert (cudnn8["cache"], cudnn8["fewer"], cudnn8["dram"], cudnn8["dram_ratio"]) == ("268.4 MB", "4.0×", "270.1 MB", "1.01×")
    assert cudnn8["saving"] == "3.6× (bytes 4.0×)" and cudnn8["bound"] == "bandwidth-bound" and not cudnn8["flag"]
    assert eager8["flag"] and eager8["dram_ratio"] == "9.00×" and eager8["saving"] == "1.01×, within noise (bytes 4.0×)"
    assert t["rows"][0]["dram"] == "not measured" and t["rows"][0]["backend"] == "sdpa-cudnn" and t["rows"][1]["backend"] == ""


def test_html_and_markdown_carry_the_section():
    r = gqa_run()
    html = render_html(analyze_run(r))
    assert 'id="gqa">GQA: cache traffic vs arithmetic' in html and '<a href="#gqa">GQA</a>' in html
    assert SAVING in html and FLAG in html and "more than 20 %" in html
    md = run_markdown(analyze_run(r))
    assert "### GQA: cache traffic vs arithmetic" in md and f"- {SAVING}" in md and f"- ⚑ {FLAG}" in md


def test_section_left_out_without_head_variants():
    r = run([cell(w, "sdpa-flash", 10.0) for w in SEED.workloads])
    assert gqa_section(analyze_run(r)) is None
    assert 'id="gqa"' not in render_html(analyze_run(r)) and "GQA: cache traffic" not in run_markdown(analyze_run(r))


def test_untimed_step_has_no_sentence():
    from dataclasses import replace

    from profattn.results import CellStatus

    r = gqa_run()
    cells = tuple(replace(c, status=CellStatus.UNSUPPORTED, timing=None, correctness=None, reason="no paged cache")
                  if c.backend == "eager" else c for c in r.cells)
    s = gqa_section(analyze_run(replace(r, cells=cells)))
    assert s["sentences"] and not any("eager" in t for t in s["sentences"])
    assert s["tables"][1]["rows"][3]["latency"] == "– (unsupported)"


def test_ratio_text():
    assert [times(x) for x in (3.6, 1.0256, 18.27)] == ["3.6×", "1.03×", "18.3×"]
    assert [article(x) for x in ("8.0×", "18.3×", "11.0×", "80.0×", "3.6×", "1.8×")] == ["an", "an", "an", "an", "a", "a"]


def test_counters_measured_without_a_wall_time_render():
    """A measured counter pass whose wall time was not stored (``wall_s`` None) made the template raise
    (``'%.0f' % None``); the sentence now leaves the duration out."""
    from dataclasses import replace

    r = gqa_run()
    html = render_html(analyze_run(replace(r, counters_info=replace(r.counters_info, wall_s=None))))
    assert "clock control" in html and "the pass took" not in html
    assert "the pass took 12 s" in render_html(analyze_run(r))
