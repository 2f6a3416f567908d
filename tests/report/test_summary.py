"""Markdown summaries (run and comparison): GitHub's length limit, truncation with a count, content."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from factories import SEED, cell, run

from profattn.cli import main
from profattn.analysis.compare import compare_runs
from profattn.results import read_results
from profattn.report.markdown import MAX_CHARS, comparison_markdown, md_table, run_markdown
from profattn.workload import Workload

REPO = Path(__file__).resolve().parents[2]


def test_md_table_escapes_and_truncates():
    t = md_table(["a", "b"], [["x|y", 1], ["z", 2], ["w", 3]], max_rows=2)
    assert t.splitlines()[:4] == ["| a | b |", "|---|---|", "| x\\|y | 1 |", "| z | 2 |"]
    assert t.endswith("… 1 more rows")


def big_run(n_backends: int = 40, n_kv: int = 60):
    """A sweep-sized synthetic run: 2,400 cells, far over GitHub's comment limit if printed in full."""
    cells = []
    for i in range(n_kv):
        w = Workload(phase="decode", batch=8, q_len=1, kv_len=128 * (i + 1), num_q_heads=16, num_kv_heads=4, head_dim=128)
        cells += [cell(w, f"backend-{j:02d}-with-a-long-name", 10.0 + i + j) for j in range(n_backends)]
    return run(cells)


def test_run_summary_stays_under_githubs_limit():
    md = run_markdown(big_run())
    assert len(md) < 65_536 and len(md) <= MAX_CHARS
    assert "more rows" in md and md.startswith("## profattn: preset `seed` on NVIDIA H200")


def test_comparison_summary_stays_under_githubs_limit():
    r = big_run()
    md = comparison_markdown(compare_runs(r, r))
    assert len(md) < 65_536 and "more rows" in md and "✅ no regression" in md


def test_summary_of_the_h200_seed_run(tmp_path: Path):
    res = CliRunner().invoke(main, ["summary", str(REPO / "examples" / "h200-seed"), "--out", str(tmp_path / "s.md")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "s.md").read_text()
    v = read_results(REPO / "examples" / "h200-seed")
    assert "### Verdict" in md and "### Result matrix" in md and "more rows" not in md
    assert md.count("🏆") == len({c.workload.tag for c in v.cells})  # one winner per workload
    # every decode win of that run is a tie with cuDNN: the trophy says so (it stood alone before)
    assert "| **triton-paged-decode** 🏆 (tie: sdpa-cudnn) |" in md and "| **sdpa-cudnn** 🏆 (tie: triton-paged-decode) |" in md
    printed = CliRunner().invoke(main, ["summary", str(REPO / "examples" / "h200-seed")])
    assert printed.exit_code == 0 and printed.output == md


def test_summary_of_a_small_run_lists_every_cell():
    cells = [cell(w, "eager", 10.0 + i) for i, w in enumerate(SEED.workloads)]
    md = run_markdown(run(cells))
    assert md.count("| **eager** 🏆 | ") == len(cells)  # every cell, each the only (so winning) cell of its workload


def test_names_from_a_run_are_inert_in_markdown():
    """A plugin may be named anything: its HTML is shown, not interpreted, and table pipes stay escaped."""
    from profattn.report.markdown import _cell, md_text

    assert _cell("<script>alert(1)</script>|x") == "&lt;script&gt;alert(1)&lt;/script&gt;\\|x"
    assert md_text("we`rd & <b>") == "we\\`rd &amp; &lt;b&gt;"


def test_compare_classes_in_markdown_come_from_the_enum():
    """The real fused-combine comparison: every class printed is a CompareClass value, counted from the typed
    cells, regressions in bold; the top-changes table is chosen from typed values, not from the text."""
    from profattn.analysis.compare import CompareClass
    from profattn.report.compare import cell_rows

    runs = REPO / "examples" / "compare" / "runs"
    cmp = compare_runs(read_results(runs / "base-a"), read_results(runs / "head-fused-combine"))
    counts = {k: cmp.count(k) for k in CompareClass}
    assert counts == {CompareClass.SLOWER: 3, CompareClass.FASTER: 0, CompareClass.NOISE: 31, CompareClass.FEW: 0,
                      CompareClass.UNTIMED: 11, CompareClass.ONLY_BASE: 0, CompareClass.ONLY_HEAD: 0}
    md = comparison_markdown(cmp)
    assert "### All cells (3 slower, 31 within noise, 11 not timed)" in md
    assert "**❌ regression**: 3 regression(s) beyond ±5% — 3 slower, 31 within noise, 11 not timed." in md
    assert md.count("| **slower** |") == 6  # the 3 regressions, in the top changes and in the full table
    assert md.count("| within noise |") == 31 and md.count("| not timed |") == 11
    assert "CompareClass" not in md
    rows = cell_rows(cmp)
    assert [r["classification"] for r in rows[:3]] == [CompareClass.SLOWER] * 3 and all(r["top"] for r in rows[:3])
    assert not any(r["top"] for r in rows[3:])  # no launch, correctness or class change elsewhere
    # the committed comparison is reproduced byte for byte from the typed records
    named = compare_runs(read_results(runs / "base-a"), read_results(runs / "head-fused-combine"),
                         base_label="base-a", head_label="head-fused-combine")
    assert comparison_markdown(named) == (REPO / "examples" / "compare" / "fused-combine.md").read_text()


def test_cpu_summary_rates_in_their_headers_unit_and_no_eager_column():
    """issue: the summary's "TFLOP/s" column held GFLOP/s on CPU, small rates printed "0.0 GB/s", and an
    "eager" column repeated the latency (no CUDA graph on CPU)."""
    w = Workload(phase="decode", batch=1, q_len=1, kv_len=128, num_q_heads=2, num_kv_heads=1, head_dim=16)
    md = run_markdown(run([cell(w, "eager", 200.0)], device="cpu"))
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| backend | workload |"))
    assert lines[header] == "| backend | workload | status | latency | GB/s | GFLOP/s | out err | reason |"
    # 8,320 requested bytes and 16,384 FLOPs per call at 200 µs
    assert lines[header + 2] == "| **eager** 🏆 | decode kv 128 (B=1) | ok | 200.0 µs | 0.0416 | 0.0819 | 3.0e-03 |  |"
