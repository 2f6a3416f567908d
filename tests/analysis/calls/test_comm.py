"""Communication in a rank's trace: collectives' sizes, compute/communication overlap, idle time."""

from pathlib import Path

from profattn.analysis.calls.comm import comm_ops, rank_timeline, union_us
from profattn.trace.kineto import load_trace
from tests.tracebuild import cpu_op, write_trace

DATA = Path(__file__).parents[2] / "data" / "traces"
CELL = "train_b1_q32_kv32_hq4_hkv2_d16_fp32_causal_cp2ring.sdpa-flash"


def _range(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": {}}


def test_union():
    assert union_us([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_us([]) == 0


def test_hand_built_timeline(tmp_path):
    # one window [0, 100]: attention op [10, 50]; gloo transfer [40, 70] on another thread; an all-gather of a
    # [2, 3, 4] float tensor among 2 ranks (sends 24 elements) and an all-to-all of 24 bfloat16 (sends 12)
    events = [
        _range("cell", 0, 100),
        cpu_op("aten::_scaled_dot_product_flash_attention_for_cpu", 10, 40, dims=[[1, 2, 8, 4]] * 3,
               types=["float"] * 3),
        _range("gloo:all_gather", 40, 30, tid=9),
        cpu_op("c10d::allgather_", 38, 3, dims=[[], [[2, 3, 4]], [], [], []],
               types=["", "TensorList", "", "Scalar", "Scalar"]),
        cpu_op("c10d::alltoall_base_", 60, 2, dims=[[24], [24], [], [], [], [], []],
               types=["c10::BFloat16", "c10::BFloat16", "", "ScalarList", "ScalarList", "Scalar", "Scalar"]),
        cpu_op("c10d::send", 200, 1, dims=[[[5]], [], [], []], types=["TensorList", "", "Scalar", "Scalar"]),
    ]
    path = write_trace(tmp_path / "r0.json", events, distributedInfo={"backend": "gloo", "rank": 0, "world_size": 2})
    trace = load_trace(path)
    tl = rank_timeline(trace, window="cell", itemsize=4)
    assert (tl.rank, tl.world_size, tl.windows, tl.comm_source) == (0, 2, 1, "gloo ranges")
    assert (tl.span_us, tl.compute_us, tl.comm_us, tl.overlap_us) == (100, 40, 30, 10)
    assert tl.idle_us == 100 - 60  # busy = [10, 70]
    assert tl.overlap_share == 10 / 30
    # the send at 200 lies outside the window
    assert (tl.sent_elements, tl.received_elements) == (24 + 12, 24 + 12)
    assert tl.sent_bytes == 24 * 4 + 12 * 2
    # without an element size, a TensorList's bytes are unknown
    assert rank_timeline(trace, window="cell").sent_bytes is None
    assert [o.collective for o in comm_ops(trace)] == ["all_gather", "all_to_all", "send"]


def test_real_gloo_ring_trace_matches_the_ledger():
    # two ranks of ring attention, training, fp32 (see tests/data/README.md): the ledger is 16384 B per call
    for rank in (0, 1):
        tl = rank_timeline(load_trace(DATA / f"cpu_gloo_cp2_ring_train_rank{rank}.pt.trace.json.gz"), window=CELL,
                           itemsize=4)
        assert (tl.rank, tl.world_size, tl.windows) == (rank, 2, 3)
        assert tl.sent_bytes == tl.received_bytes == 16384
        assert {o.collective for o in tl.ops} == {"send", "recv"}
        assert len(tl.ops) == 3 * 16  # per call: K, V sent and received 1 + 1 times, dK, dV 2 times
        assert 0 < tl.compute_us < tl.span_us and 0 < tl.comm_us < tl.span_us


def test_analyze_paths_adds_each_rank_s_communication():
    from profattn.analysis.calls.traces import analyze_paths

    files = [DATA / f"cpu_gloo_cp2_ring_train_rank{r}.pt.trace.json.gz" for r in (0, 1)]
    a = analyze_paths(files)
    assert [tl.rank for tl in a.comm] == [0, 1]
    assert all(tl.windows == 0 and tl.comm_source == "gloo ranges" and len(tl.ops) == 48 for tl in a.comm)
    # no element size in the file for send/recv TensorLists: the attention calls' (fp32), 3 calls x 4096 x 4 B
    assert a.comm[0].sent_elements == 3 * 4096 and a.comm[0].sent_bytes == 3 * 4096 * 4
    assert analyze_paths([DATA / "cpu_varlen_window_torch213.pt.trace.json.gz"]).comm == (None,)  # no collectives


def test_cp_summaries_against_one_process():
    from dataclasses import replace

    from profattn.analysis.calls.comm import cp_summaries
    from profattn.results import RankRecord, Timing
    from profattn.workload import parse_workload_spec
    from tests.factories import cell

    w = parse_workload_spec("phase=train,b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32,cp=2,cp_scheme=ring")
    one = cell(w.single_process, "sdpa-flash", 100.0)
    split = replace(cell(w, "sdpa-flash", 80.0), ranks=(
        RankRecord(0, compute_us=40, comm_us=30, overlap_us=10, idle_us=40, sent_bytes=16384, ledger_bytes=16384),
        RankRecord(1, compute_us=40, comm_us=20, overlap_us=20, idle_us=60, sent_bytes=16384, ledger_bytes=16384)))
    (s,) = cp_summaries([one, split])
    assert (s.scheme, s.ranks, s.single_us, s.step_us) == ("ring", 2, 100.0, 80.0)
    assert s.efficiency == 100 / (2 * 80)
    # windows: 40 + 30 - 10 + 40 = 100 and 40 + 20 - 20 + 60 = 100
    assert s.comm_share == (0.3 + 0.2) / 2 and s.overlap_share == (10 / 30 + 1) / 2 and s.idle_share == 0.5
    assert s.ledger_ok is True
    bad = replace(split, ranks=(replace(split.ranks[0], sent_bytes=1),))
    assert cp_summaries([one, bad])[0].ledger_ok is False
