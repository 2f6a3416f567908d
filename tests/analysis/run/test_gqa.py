"""GQA comparisons: two ledgers across KV-head counts, the 20 % transferred-bytes flag, saving vs noise, bounds."""

from __future__ import annotations

from dataclasses import replace

from profattn.analysis.common.margins import TieReason
from profattn.analysis.run.gqa import Bound, SavingOutcome, cell_bound, gqa_comparisons, latency_floors
from profattn.analysis.run.ledgers import REDUNDANT_DRAM_RATIO
from profattn.results import CounterSummary
from profattn.workload import Workload, get_preset

from factories import cell, gqa_run, run


def test_hand_computed_ledgers_across_heads():
    (short, long_) = gqa_comparisons(gqa_run())
    assert long_.kv_len == 8192 and long_.heads == (32, 8, 1)
    cudnn = long_.rows[0]
    assert cudnn.backend == "sdpa-cudnn" and [c.num_kv_heads for c in cudnn.cells] == [32, 8, 1]
    h32, h8, h1 = cudnn.cells
    # K + V = 2 · B · Hkv · kv · d · 2 bytes
    assert h32.cache_bytes == 2 * 8 * 32 * 8192 * 128 * 2 == 1_073_741_824
    assert h8.cache_bytes == 2 * 8 * 8 * 8192 * 128 * 2 == 268_435_456
    assert h1.cache_bytes == 33_554_432
    # + Q read and O written (8·32·128·2 each), block table (8·8192/16 pages, int32), seq_lens (8, int32)
    assert h8.requested_bytes == 268_435_456 + 2 * 65_536 + 4096 * 4 + 32 == 268_582_944
    # FLOPs from the query heads: 4 · B · Hq · kv · d, the same at every Hkv
    assert h32.flops == h8.flops == h1.flops == 4 * 8 * 32 * 8192 * 128 == 1_073_741_824
    assert h8.ledger.dram_bytes == 270_065_536 and not h8.flagged and h32.ledger.dram_bytes is None
    assert not h32.flagged  # not measured is never flagged


def test_saving_bandwidth_bound_and_mqa_step():
    long_ = gqa_comparisons(gqa_run())[1]
    s8 = next(s for s in long_.savings_at(8) if s.backend == "sdpa-cudnn")
    assert s8.outcome is SavingOutcome.SAVED and s8.bytes_ratio == 4.0
    assert abs(s8.latency_ratio - 3.6) < 1e-9 and not s8.margin.tie
    assert s8.bound is Bound.BANDWIDTH and abs(s8.smaller.achieved_gbps - 268_582_944 / 60.9e-6 / 1e9) < 1e-9
    assert s8.bandwidth_gbps == 4603.0 and s8.bandwidth_kind == "read"
    assert abs(s8.requested_ratio - 1_073_889_312 / 268_582_944) < 1e-12  # Q and O do not shrink: under 4×
    s1 = next(s for s in long_.savings_at(1) if s.backend == "sdpa-cudnn")
    assert s1.bytes_ratio == 32.0 and s1.outcome is SavingOutcome.SAVED and s1.bound is Bound.BANDWIDTH  # 2,808 GB/s: 61 %


def test_no_saving_within_noise_and_launch_bound():
    short = gqa_comparisons(gqa_run())[0]
    s = next(s for s in short.savings_at(8) if s.backend == "sdpa-cudnn")
    # 8.0 / 7.9 = 1.0127: under the 2 % rule
    assert s.outcome is SavingOutcome.NO_SAVING and s.margin.why is TieReason.CLOSE_MEDIANS
    # 16,909,344 B / 7.9 µs = 2,140 GB/s: 46 % of the roof, not bandwidth-bound; 7.9 ≤ 1.5 × the 7.8 µs floor
    assert s.bound is Bound.LAUNCH and s.floor_us == 7.8
    assert abs(s.byte_floor_us - 16_909_344 / 4603e9 * 1e6) < 1e-9
    e = next(s for s in short.savings_at(8) if s.backend == "eager")
    assert e.outcome is SavingOutcome.SLOWER and abs(e.latency_ratio - 40 / 42) < 1e-12 and e.bound is Bound.LAUNCH


def test_smaller_allocation_same_reads_is_flagged():
    long_ = gqa_comparisons(gqa_run())[1]
    (flag,) = long_.flagged
    assert (flag.backend, flag.num_kv_heads) == ("eager", 8)
    assert abs(flag.ledger.dram_ratio - 2_415_919_104 / 268_582_944) < 1e-12  # 9.00×
    e = next(s for s in long_.savings_at(8) if s.backend == "eager")
    # 1,100 / 1,090: within noise; 246 GB/s, 1,090 µs far above the 38 µs floor
    assert e.outcome is SavingOutcome.NO_SAVING and e.bound is Bound.NEITHER


def test_flag_threshold_is_the_ledger_rule():
    assert REDUNDANT_DRAM_RATIO == 1.2
    w = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=8, num_kv_heads=2, head_dim=16)
    req = w.requested_bytes
    cells = []
    for hkv, ratio in ((8, 1.0), (2, 1.21)):
        wk = w.with_(num_kv_heads=hkv)
        c = cell(wk, "x", 10.0)
        cells.append(replace(c, counters=CounterSummary(round(wk.requested_bytes * ratio), 0, None, None, None, ())))
    (comp,) = gqa_comparisons(run(cells))
    assert [c.flagged for c in comp.rows[0].cells] == [False, True]
    c119 = replace(cells[1], counters=CounterSummary(round(w.requested_bytes * 1.19), 0, None, None, None, ()))
    (comp,) = gqa_comparisons(run([cells[0], c119]))
    assert not comp.flagged and req == w.requested_bytes


def test_no_comparison_without_head_variants_and_floors():
    assert gqa_comparisons(run([cell(w, "x", 10.0) for w in get_preset("seed").workloads])) == ()
    floors = latency_floors(gqa_run())
    assert floors[("sdpa-cudnn", get_preset("gqa").workloads[0].phase)] == 7.8
    r = gqa_run()
    assert cell_bound(replace(r.cells[0], timing=None), r, 7.8) is Bound.UNKNOWN
    assert cell_bound(r.cells[0], replace(r, ceilings=None), None) is Bound.UNKNOWN  # no roof, no floor


def test_gqa_preset_compares_every_kv_length():
    comps = gqa_comparisons(run([cell(w, "x", 10.0) for w in get_preset("gqa").workloads]))
    assert [c.kv_len for c in comps] == [512, 2048, 8192, 32768] and all(c.heads == (32, 8, 1) for c in comps)
