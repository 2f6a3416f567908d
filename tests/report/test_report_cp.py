"""The context-parallelism section's rows and Markdown table."""

from dataclasses import replace

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
    (r,) = cp_rows(_cells())
    assert (r["scheme"], r["ranks"], r["step"], r["single"], r["efficiency"]) == ("ulysses", "2", "80.0 µs", "100.0 µs",
                                                                                  "62 %")
    assert (r["comm"], r["overlap"], r["idle"], r["ledger"]) == ("30 %", "33 %", "40 %", "matches")
    ranks = rank_rows(_cells())
    assert [x["status"] for x in ranks] == ["ok", "rank 1: RuntimeError: boom"]
    assert ranks[1]["compute"] == "–"


def test_section_and_markdown():
    assert cp_section(run(_cells()[:1])) is None
    assert cp_section(run(_cells()))["rows"][0]["scheme"] == "ulysses"
    md = cp_markdown(_cells()).splitlines()
    assert md[0].startswith("| scheme | ranks |") and md[2].startswith("| ulysses | 2 | train | sdpa-flash | ok |")
