"""Byte and FLOP ledgers, counters attached from the real ncu fixture, and the no-counters path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from profattn.analysis.run.analyze import analyze_run
from profattn.analysis.run.cells import attach_counters
from profattn.analysis.run.ledgers import byte_ledger, flop_ledger
from profattn.analysis.run.verdict import verdict
from profattn.report.run import ledger_rows, render_html
from profattn.report.verdict import ledger_note, render_verdict
from profattn.results import Ceilings, CountersInfo
from profattn.trace.counters import parse_ncu_csv
from profattn.workload import Workload

from factories import cell, kernel, run

DENSE_DECODE = Workload(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128)


def fixture_run(fixtures_dir: Path):
    """The fixture's two NVTX ranges (flash_gqa, math_gqa) as two cells of the seed's kv-8192 decode."""
    flash = replace(cell(DENSE_DECODE, "sdpa-flash", 53.3, kernels=(kernel("flash_fwd_splitkv_kernel", 224, 44.0),)), cell_id="flash_gqa")
    math_ = replace(cell(DENSE_DECODE, "sdpa-math", 1585.0, family="dense"), cell_id="math_gqa")
    r = replace(run([flash, math_]), ceilings=Ceilings(4300.0, 2 << 30, 790.0, 8192, "bfloat16", "test"))
    report = parse_ncu_csv(fixtures_dir / "ncu" / "h200_sdpa_decode_kv8192_raw.csv")
    return attach_counters(r, report.kernels, CountersInfo("measured", ncu_version="fixture", cache_control="all", replay_mode="kernel"))


def test_requested_bytes_hand_computed():
    bl = byte_ledger(cell(DENSE_DECODE, "x", 50.0))
    assert bl.kv_bytes == 134_217_728  # 2 x 8 x 8192 x 4 x 128 x 2
    assert bl.requested_bytes == 134_217_728 + 2 * 8 * 16 * 128 * 2  # + Q read + O written
    assert bl.dram_bytes is None and bl.redundant is None and ledger_note(bl) == "no counters measured"


def test_paged_requested_bytes_count_unique_pages():
    w = Workload(phase="decode", batch=4, q_len=1, kv_len=64, num_q_heads=8, num_kv_heads=2, head_dim=16,
                 kv_layout="paged", page_size=16, shared_prefix_len=32)
    per_token = 2 * 2 * 16 * 2  # K and V, 2 KV heads, d 16, bf16
    assert w.kv_bytes == (32 + 4 * 32) * per_token  # the 32-token prefix once, 32 own tokens per sequence
    assert w.logical_kv_bytes == 4 * 64 * per_token
    bt = next(t for t in w.traffic() if t.name == "block_table")
    assert bt.bytes_read == 4 * 4 * 4  # 4 pages per sequence, int32


def test_ledgers_from_real_ncu_fixture(fixtures_dir: Path):
    r = fixture_run(fixtures_dir)
    flash, math_ = r.cells
    fb, mb = byte_ledger(flash), byte_ledger(math_)
    # flash split-KV + combine: 134,797,056 read + 402,944 written, against 134,283,264 requested
    assert fb.dram_bytes == 134_797_056 + 402_944
    assert fb.dram_ratio == pytest.approx(135_200_000 / 134_283_264, rel=1e-3) and not fb.redundant
    assert mb.redundant and mb.dram_ratio > 20  # repeat_interleave materialises K/V at 16 heads
    assert "redundant" in ledger_note(mb)
    assert flash.counters.kernels[0].grid == (1, 7, 32) and flash.counters.kernels[0].registers_per_thread == 246
    fl = flop_ledger(flash, r)
    assert fl.flops == 4 * 16 * 8 * 8192 * 128 and fl.fraction_of_ceiling == pytest.approx(fl.achieved_tflops / 790.0)
    rows = {x["backend"]: x for x in ledger_rows(analyze_run(r))["decode"]}
    assert rows["sdpa-math"]["redundant"] and rows["sdpa-flash"]["dram_ratio"] == "1.01×"
    text = " ".join(" ".join(row.reasons) for row in render_verdict(verdict(r)).rows)
    assert "moved 135.2 MB from DRAM for 134.3 MB requested (1.01×)" in text


def test_no_counters_path_shows_reason_and_no_transferred_numbers(tmp_path: Path, monkeypatch):
    from profattn.harness.session import add_counters

    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("PROFATTN_NCU", raising=False)
    r = run([cell(DENSE_DECODE, "sdpa-flash", 53.3)])
    r = add_counters(r, tmp_path)
    assert r.counters_info.status == "unavailable" and "not on PATH" in r.counters_info.reason
    html = render_html(analyze_run(r))
    assert "ncu (Nsight Compute) is not on PATH" in html and "not measured" in html
    assert "DRAM (read + write)" not in html  # no transferred-bytes chart without a measurement
    cpu = add_counters(run([cell(DENSE_DECODE, "eager", 900.0)], device="cpu"), tmp_path)
    assert cpu.counters_info.status == "unavailable" and "CPU run" in cpu.counters_info.reason


def test_ncu_error_lines_become_the_reason(tmp_path: Path, monkeypatch):
    """A fake ncu that prints the permission error: the pass reports it, nothing is measured."""
    from profattn.harness.ncu import run_counter_pass

    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PROFATTN_NCU", str(fake))
    res = run_counter_pass(tmp_path, ["a"])
    assert res.csv_path is None or res.reason
    assert "ERR_NVGPUCTRPERM" in res.reason and "admin" in res.reason


def test_a_missing_counter_gives_unknown_ratios_not_a_crash():
    """ncu rows lacking a metric leave the sum missing (None); the ledger's ratio and flag are unknown."""
    from dataclasses import replace

    from profattn.analysis.run.ledgers import byte_ledger
    from factories import SEED, cell
    from profattn.results import CounterSummary

    w = SEED.workloads[-1]
    c = replace(cell(w, "sdpa-flash", 48.0), counters=CounterSummary(
        dram_read_bytes=None, dram_write_bytes=1e6, l2_to_sm_read_bytes=2.0 * w.requested_bytes,
        l1_global_load_bytes=None, gpu_time_us=44.0, kernels=(), kernels_lacking={"dram_read_bytes": 1}))
    bl = byte_ledger(c)
    assert bl.dram_bytes is None and bl.dram_ratio is None and bl.redundant is None and bl.l2_rereads is None
    assert bl.l2_ratio == 2.0 and bl.measured is False


def test_counter_pass_restricted_to_chosen_backends(tmp_path: Path, monkeypatch):
    """``profattn counters RUN --backend X``: only X's timed cells go to Nsight Compute; none of them → a reason."""
    from profattn.harness import session
    from profattn.harness.ncu import NcuRun

    seen = []

    def fake(run_dir, ids, **_):  # noqa: ANN001
        seen.append(list(ids))
        return NcuRun(None, "fake", 0.0, None, (), "stopped here")

    monkeypatch.setattr(session, "run_counter_pass", fake)
    r = run([cell(DENSE_DECODE, "sdpa-flash", 53.3), cell(DENSE_DECODE, "sdpa-math", 900.0)])
    session.add_counters(r, tmp_path, ["sdpa-math"])
    assert seen == [[c.cell_id for c in r.cells if c.backend == "sdpa-math"]]
    none = session.add_counters(r, tmp_path, ["flex"])
    assert none.counters_info.status == "unavailable" and "no timed cell" in none.counters_info.reason


def test_fp8_cache_ledger_one_byte_per_element_scales_and_dequant_apart():
    from profattn.results import Correctness

    w = Workload(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128,
                 kv_layout="paged", page_size=16, kv_dtype="fp8")
    c = replace(cell(w, "triton-paged-decode", 50.0),
                correctness=Correctness(1e-3, 2e-2, True, "fp32", quant_rel_err=0.0312))
    bl, fl = byte_ledger(c), flop_ledger(c, run([c]))
    assert bl.kv_bytes == 67_108_864  # 2 x 8 x 8192 x 4 x 128 x 1 byte: half the bf16 cache
    assert bl.scale_bytes == 2 * 4 * 4  # fp32 [Hkv] for K and for V
    # + Q read and O written (bf16 [8, 16, 128]), block table (8 x 512 pages, int32), seq_lens (8 x int32)
    assert bl.requested_bytes == 67_108_864 + 32 + 2 * 32_768 + 16_384 + 32
    assert fl.flops == 4 * 8 * 16 * 8192 * 128 and fl.dequant_ops == 2 * 8 * 8192 * 4 * 128
    rows = ledger_rows(analyze_run(run([c])))["decode"]
    assert rows[0]["kv"] == "67.1 MB" and rows[0]["kv_extra"] == "+ scales 32 B"
    assert rows[0]["flops_extra"] == "+ 67.11 M dequant multiplies"
    html = render_html(analyze_run(run([c])))
    assert "+ scales 32 B" in html and "67.11 M dequant multiplies" in html and "vs unquantized cache 3.1e-02" in html
    plain = replace(c, workload=w.with_(kv_dtype=None))
    assert ledger_rows(analyze_run(run([plain])))["decode"][0]["kv_extra"] == "" and flop_ledger(plain, run([plain])).dequant_ops == 0


def test_padded_packed_training_cell_shows_its_executed_flops():
    """docs=64+32+96 (Hq 4, d 32, train) padded to 3 · 96 · 96 = 27,648 pairs per head for 7,264 required:
    executed = 27,648 · 4 · 4 · 32 · 3.5 = 49,545,216 FLOPs against 13,017,088 (3.81×)."""
    from dataclasses import replace

    from profattn.workload import parse_workload_spec

    w = parse_workload_spec("phase=train,docs=64+32+96,hq=4,hkv=2,d=32,dtype=float32")
    c = replace(cell(w, "eager", 100.0), executed_pairs=27_648)
    fl = flop_ledger(c, run([c]))
    assert fl.flops == 13_017_088 and fl.executed_flops == 49_545_216
    assert ledger_rows(analyze_run(run([c])))["train"][0]["flops_extra"] == "49.55 M executed (padding: 3.81× the work)"
    assert flop_ledger(replace(c, executed_pairs=None), run([c])).executed_flops is None


def test_profile_counter_pass_skips_the_unfused_paths(tmp_path: Path, monkeypatch):
    """run_session's counter pass is asked for the fused backends' cells only (sdpa-math's left out)."""
    import torch

    from profattn.backends import get_backend
    from profattn.harness import session
    from profattn.workload import Preset

    seen = []
    monkeypatch.setattr(session, "add_counters", lambda run, out, backends=None: seen.append(backends) or run)
    w = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")
    cfg = session.SessionConfig(preset=Preset("t", "t", (w,)), regimes=(w.phase,),
                                backends=(get_backend("sdpa-math"), get_backend("sdpa-efficient")),
                                device=torch.device("cpu"), out_dir=tmp_path / "run", profile_calls=1, seed=0,
                                counters=True, measure_ceilings=False)
    session.run_session(cfg)
    assert seen == [("sdpa-efficient",)]
