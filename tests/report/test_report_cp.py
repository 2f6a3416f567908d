"""The context-parallelism section's rows and Markdown table."""

from dataclasses import replace

from profattn.analysis.calls.comm import cp_summaries
from profattn.analysis.run.analyze import analyze_run
from profattn.report.cp import cp_markdown, cp_rows, cp_section, rank_rows
from profattn.results import RankRecord
from profattn.workload import parse_workload_spec
from tests.factories import cell, run


def _cells():
    w = parse_workload_spec("phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=ulysses")
    split = replace(cell(w, "sdpa-flash", 80.0), ranks=(
        RankRecord(0, compute_us=40, comm_us=30, overlap_us=10, idle_us=40, sent_bytes=12288, ledger_bytes=12288),
        RankRecord(1, status="failed", error="rank 1: RuntimeError: boom")))
    return [cell(w.single_process, "sdpa-flash", 100.0), split]


def test_rows():
    (r,) = cp_rows(cp_summaries(_cells()))
    assert (r["scheme"], r["ranks"], r["step"], r["single"], r["efficiency"]) == ("ulysses", "2", "80.0 µs", "100.0 µs",
                                                                                  "62 %")
    assert (r["comm"], r["overlap"], r["idle"], r["ledger"]) == ("30 %", "33 %", "40 %", "matches")
    ranks = rank_rows(_cells())
    assert [x["status"] for x in ranks] == ["ok", "rank 1: RuntimeError: boom"]
    assert ranks[1]["compute"] == "–"


def test_section_and_markdown():
    assert cp_section(analyze_run(run(_cells()[:1]))) is None
    assert cp_section(analyze_run(run(_cells())))["rows"][0]["scheme"] == "ulysses"
    md = cp_markdown(cp_summaries(_cells())).splitlines()
    assert md[0].startswith("| scheme | ranks |") and md[2].startswith("| ulysses | 2 | train | sdpa-flash | ok |")


def test_rank_table_shows_the_profiled_step_its_breakdown_comes_from():
    # the timed median (6.7 ms) is shorter than the profiled call's communication alone (31.83 ms): the breakdown
    # must sit beside the profiled step it divides (20 + 31.83 − 15 + 12.48 = 49.31 ms), each column saying its call
    from profattn.report.run import render_html

    w = parse_workload_spec("phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=ring")
    rec = RankRecord(0, step_us=6700.0, compute_us=20000.0, comm_us=31830.0, overlap_us=15000.0, idle_us=12480.0)
    assert rec.profiled_step_us == 49310.0
    c = replace(cell(w, "sdpa-flash", 6700.0), ranks=(rec, replace(rec, rank=1)))
    (r0, _) = rank_rows([c])
    assert (r0["step"], r0["profiled"], r0["compute"], r0["comm"], r0["overlap"], r0["idle"]) == (
        "6,700.0 µs", "49.31 ms", "20.00 ms", "31.83 ms", "15.00 ms", "12.48 ms")
    html = render_html(analyze_run(run([cell(w.single_process, "sdpa-flash", 10000.0), c])))
    assert "<th>step (timed, median)</th><th>step (profiled call)</th><th>compute (profiled)</th>" in html
    assert ("<td>6,700.0 µs</td><td>49.31 ms</td><td>20.00 ms</td><td>31.83 ms</td><td>15.00 ms</td>"
            "<td>12.48 ms</td>") in html
