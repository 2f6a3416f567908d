"""The serving section's rows from synthetic cells (hand-summed times), its absence from other runs, and its HTML."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from factories import cell, run
from profattn.analysis.run.analyze import analyze_run
from profattn.analysis.run.serving import mixed_splits, prompt_times
from profattn.report.run import render_html
from profattn.report.serving import describe_step, mixed_rows, prompt_rows, serving_section
from profattn.results import CellStatus, Timing
from profattn.workload import Workload

COMMON = dict(num_q_heads=4, num_kv_heads=2, head_dim=32, dtype="bfloat16", kv_layout="paged", page_size=16,
              append=True)


def chunk(q: int, kv: int) -> Workload:
    return Workload(phase="prefill", batch=2, q_len=q, kv_len=kv, **COMMON)


def timed(w, backend, us, append_us=None, **kw):
    c = cell(w, backend, us, **kw)
    return replace(c, append_timing=Timing(append_us, append_us, append_us, append_us, 5, "t")) if append_us else c


CELLS = [
    timed(chunk(128, 128), "a", 900.0, 30.0), timed(chunk(128, 128), "b", 700.0, 31.0),
    timed(chunk(64, 64), "a", 200.0, 10.0), timed(chunk(64, 128), "a", 350.0, 11.0),
    timed(chunk(64, 64), "b", 150.0, 12.0), cell(chunk(64, 128), "b", 260.0, status=CellStatus.INCORRECT, err=0.5),
]


def test_prompt_rows_by_hand():
    rows = prompt_rows(prompt_times(CELLS))
    assert [(r["chunk"], r["backend"], r["attention"], r["vs_unchunked"], r["best"]) for r in rows] == [
        ("unchunked", "a", "900.0 µs", "1.00×", False), ("unchunked", "b", "700.0 µs", "1.00×", True),
        ("64", "a", "550.0 µs", "0.61×", True), ("64", "b", "–", "–", False),
    ]
    assert rows[2]["per_chunk"] == "275.0 µs" and rows[2]["append"] == "21.0 µs" and rows[2]["chunks"] == 2
    assert rows[2]["prompt"] == "128 tokens × B=2" and rows[2]["append_bytes"] == "133.1 kB"  # 2 · 66,560 B
    assert rows[3]["status"] == "1 of 2 chunks incorrect (chunk 1)"


def test_mixed_rows_and_step_description():
    step = Workload.varlen(None, [(32, 128)] * 2 + [(1, 40), (1, 90), (1, 90)], **COMMON)
    pre = Workload.varlen(None, [(32, 128)] * 2, **COMMON)
    dec = Workload.varlen(None, [(1, 40), (1, 90), (1, 90)], **COMMON)
    assert describe_step(step) == "2x(q32,kv128) + 3 decodes (kv 40–90)"
    rows = mixed_rows(mixed_splits([timed(step, "a", 450.0), timed(pre, "a", 300.0), timed(dec, "b", 100.0),
                                    cell(dec, "a", None, status=CellStatus.ERROR, reason="boom")]))
    assert [(r["backend"], r["step_time"], r["prefill"], r["decode"], r["parts"], r["ratio"]) for r in rows] == [
        ("fastest per part", "450.0 µs (a)", "300.0 µs (a)", "100.0 µs (b)", "400.0 µs", "1.12×"),
        ("a", "450.0 µs", "300.0 µs", "– (error)", "–", "–"),
    ]


def test_the_section_is_left_out_of_runs_without_serving_calls_and_rendered_with_them():
    plain = Workload(phase="prefill", batch=2, q_len=64, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    assert serving_section(analyze_run(run([cell(plain, "a", 10.0)]))) is None
    assert 'id="serving"' not in render_html(analyze_run(run([cell(plain, "a", 10.0)])))
    html = render_html(analyze_run(run(CELLS)))
    assert 'id="serving"' in html and "Attention time per prompt against chunk size" in html
    assert "1 of 2 chunks incorrect (chunk 1)" in html


def test_backends_that_took_no_chunk_are_a_note_not_rows():
    """On the H200 serving run the prompt table listed 5 backends per chunk size that took none of the chunks
    ("16 of 16 chunks missing: chunk 0 unsupported, chunk 1 unsupported, …"); they are one note now."""
    from profattn.results import read_results

    sec = serving_section(analyze_run(read_results(Path(__file__).resolve().parents[2] / "examples" / "h200-serving")))
    shown = {r["backend"] for r in sec["prompts"]}
    assert shown == {"sdpa-cudnn", "sdpa-flash", "sdpa-nested", "flex", "triton-paged-prefill", "torch-paged-reference",
                     "flashinfer-prefill-paged"}
    assert set(sec["not_shown"]) == {"sdpa-efficient", "flashinfer-prefill-ragged"}  # in neither table
    # before: also sdpa-flash (rows in the prompt table) and the decode kernels (rows in the mixed table)
    assert not set(sec["not_shown"]) & ({r["backend"] for r in sec["prompts"]} | {r["backend"] for r in sec["mixed"]})
    assert all(r["status"] == "every chunk ok" for r in sec["prompts"])
    assert "flashinfer-decode-tc" in {r["backend"] for r in sec["mixed"]}  # it ran the steps' decode parts
