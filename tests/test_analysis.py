"""Winners and the verdict on synthetic runs with known numbers."""

from __future__ import annotations

from profattn.analysis.cells import evidence, family_check, verdict, winners
from profattn.families import DENSE, FLASH
from profattn.results import CellStatus, Ceilings
from dataclasses import replace

from factories import SEED, cell, kernel, run

TRAIN, PREFILL, D512, D2048, D8192 = SEED.workloads
SPLITKV = "void pytorch_flash::flash_fwd_splitkv_kernel<...>"


def test_winner_is_fastest_correct_and_confirmed():
    cells = [
        cell(D8192, "sdpa-flash", 55.8),
        cell(D8192, "sdpa-cudnn", 50.0, family="cudnn"),
        cell(D8192, "wrong", 1.0, status=CellStatus.INCORRECT, err=0.9),  # fastest but incorrect
        cell(D8192, "liar", 2.0, kernels=(kernel(SPLITKV, 224, 2.0),), family_ok=False),  # family flagged
        cell(D8192, "sdpa-efficient", None, status=CellStatus.UNSUPPORTED, reason="no GQA"),
    ]
    assert winners(run(cells))[D8192.tag].backend == "sdpa-cudnn"


def test_nan_never_wins():
    c = cell(D512, "nan", 1.0, err=float("inf"), status=CellStatus.INCORRECT)
    assert winners(run([c, cell(D512, "ok", 9.0)]))[D512.tag].backend == "ok"


def test_verdict_depends_on_context_length():
    cells = [
        cell(TRAIN, "sdpa-cudnn", 1251, family="cudnn", kernels=(kernel("cudnn_fprop", 512, 400),)),
        cell(TRAIN, "sdpa-flash", 2209, kernels=(kernel("flash_fwd_kernel", 1024, 700),)),
        cell(D512, "sdpa-cudnn", 35.8, family="cudnn", kernels=(kernel("cudnn_fprop", 32, 30),)),
        cell(D512, "sdpa-flash", 18.0, kernels=(kernel(SPLITKV, 224, 14), kernel("combine", 32, 2))),
        cell(D8192, "sdpa-cudnn", 50.0, family="cudnn", kernels=(kernel("cudnn_fprop", 256, 45),)),
        cell(D8192, "sdpa-flash", 55.8, kernels=(kernel(SPLITKV, 224, 44), kernel("combine", 32, 4))),
    ]
    r = replace(run(cells), ceilings=Ceilings(4300.0, 2 << 30, 790.0, 8192, "bfloat16", "test"))
    v = verdict(r)
    assert v.training_winner == "sdpa-cudnn"
    rows = {row.kv_len: row for row in v.rows}
    assert rows[512].stays is False and rows[512].winner == "sdpa-flash"
    assert rows[8192].stays is True
    assert "depends on context length" in v.summary
    text = " ".join(rows[512].reasons)
    # Evidence, not canned text: 128 decode query rows vs 262,144 training rows, 224 CTAs on 132 SMs.
    assert "128 query rows against 262,144" in text
    assert "224 CTAs (1.70 CTAs per SM on 132 SMs" in text
    assert "Kernels per call: sdpa-flash 2, sdpa-cudnn 1" in text
    # K/V 8x512x4x128x2x2 = 8.4 MB; flash streams it at 8.39e6 B / 18 us = 466 GB/s = 11% of 4300.
    assert "8.4 MB" in text and "466 GB/s (11% of the measured copy bandwidth)" in text


def test_verdict_when_training_winner_unsupported_in_decode():
    cells = [
        cell(TRAIN, "a", 100.0),
        cell(TRAIN, "b", 200.0),
        cell(D2048, "a", None, status=CellStatus.UNSUPPORTED, reason="no decode"),
        cell(D2048, "b", 20.0),
    ]
    row = verdict(run(cells)).rows[0]
    assert row.stays is False and "did not produce an eligible cell here (unsupported: no decode)" in row.headline


def test_evidence_numbers():
    c = cell(D8192, "sdpa-flash", 53.3, kernels=(kernel(SPLITKV, 224, 44),))
    r = replace(run([c]), ceilings=Ceilings(4300.0, 2 << 30, 790.0, 8192, "bfloat16", "test"))
    e = evidence(c, r)
    assert e.query_rows == 128 and e.ctas == 224
    assert abs(e.kv_gbps - 134_217_728 / 53.3e-6 / 1e9) < 1e-6
    assert abs(e.floor_us - D8192.requested_bytes / 4300e9 * 1e6) < 1e-9


def test_family_check():
    assert family_check(FLASH, [SPLITKV, "void flash_fwd_splitkv_combine_kernel"], [])[0] is True
    ok, note = family_check(DENSE, ["softmax_warp_forward", SPLITKV], [])
    assert ok is False and "another family" in note
    ok, note = family_check(FLASH, ["softmax_warp_forward", "gemm"], [])
    assert ok is False and "no flash kernel" in note
    assert family_check(FLASH, [], ["aten::_scaled_dot_product_flash_attention_for_cpu"])[0] is True
    assert family_check(FLASH, [], [])[0] is None


def test_committed_h200_run_evidence_from_real_traces():
    """Re-derive the evidence of the committed H200 run from its real Kineto traces."""
    from pathlib import Path

    import pytest

    from profattn.results import read_results
    from profattn.harness.session import reattach_traces

    example = Path(__file__).resolve().parents[1] / "examples" / "h200-seed"
    if not (example / "results.json").exists():
        pytest.skip("no committed H200 example")
    r = reattach_traces(read_results(example), example)
    cells = {c.cell_id: c for c in r.cells}
    flash = cells["decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_paged16.sdpa-flash"].trace
    assert flash.calls == 3 and flash.kernels_per_call == 2 and flash.family_ok
    split = next(k for k in flash.kernels if "flash_fwd_splitkv_kernel" in k.name)
    assert split.grid == (1, 7, 32) and split.block == (128, 1, 1)
    assert split.registers_per_thread == 246 and split.shared_mem_bytes == 81920 and split.ctas == 224
    combine = next(k for k in flash.kernels if "combine" in k.name)
    assert combine.grid == (32, 1, 1)
    # the training backward runs on autograd's device thread, and is still attributed to its cell
    cudnn_train = cells["train_b8_q2048_kv2048_hq16_hkv4_d128_bf16_causal.sdpa-cudnn"].trace
    assert any("bprop" in k.name for k in cudnn_train.kernels) and cudnn_train.family_ok
    # compiled Flex kernels sit under Inductor's nested range and are still the cell's
    flex = cells["decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_paged16.flex"].trace
    assert flex.family_ok and any(k.name.startswith("triton_tem_fused") for k in flex.kernels)
    # the math path materializes K/V at Hq heads and runs a softmax kernel: dense family, many kernels
    math_ = cells["decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_paged16.sdpa-math"].trace
    assert math_.family_ok and math_.kernels_per_call > 5


def test_committed_h200_run_counters_and_paged_kernel():
    """The committed H200 run: measured bytes, our kernel's launch shape, and the ncu/trace agreement."""
    from pathlib import Path

    import pytest

    from profattn.analysis.cells import byte_ledger
    from profattn.report.run import counter_kernel_rows
    from profattn.results import read_results
    from profattn.harness.session import reattach_traces

    example = Path(__file__).resolve().parents[1] / "examples" / "h200-seed"
    if not (example / "results.json").exists():
        pytest.skip("no committed H200 example")
    r = reattach_traces(read_results(example), example)
    assert r.counters_info.status == "measured" and r.counters_info.cache_control == "all"
    cells = {c.cell_id: c for c in r.cells}
    tag = "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal_paged16"
    ours = cells[f"{tag}.triton-paged-decode"]
    split = next(k for k in ours.trace.kernels if "_paged_decode_split_kernel" in k.name)
    assert split.grid == (8, 4, 16) and split.ctas == 512  # (sequence, KV head, split): 16 splits of 512 tokens
    assert ours.trace.family_ok and ours.correctness.passed
    # GQA reuse is real: DRAM bytes within 5% of the unique K/V bytes, unlike the math path
    assert byte_ledger(ours).dram_ratio < 1.05
    math_ = byte_ledger(cells[f"{tag}.sdpa-math"])
    assert math_.redundant and math_.dram_ratio > 20
    # every ncu kernel's launch shape is found in the Kineto trace of the same cell
    assert all(row["agree"] for row in counter_kernel_rows(r))
    # FlexAttention on the paged pool compiles and runs on the H200: Inductor's decode template kernel, 264
    # CTAs of 64 threads, reading each K/V byte about once (1.05x: + 4.4 MB read by its 2048-CTA reduction
    # kernel) but at less than half our speed
    flex_paged = cells[f"{tag}.flex-paged-decode"]
    assert flex_paged.status == "ok" and flex_paged.correctness.passed and flex_paged.trace.family_ok
    tem = next(k for k in flex_paged.trace.kernels if k.name.startswith("triton_tem_fused_flex_attention"))
    assert tem.grid == (1, 4, 66) and tem.block == (64, 1, 1)
    assert 1.0 < byte_ledger(flex_paged).dram_ratio < 1.1
    assert flex_paged.graph_timing.median_us > 1.5 * ours.graph_timing.median_us
