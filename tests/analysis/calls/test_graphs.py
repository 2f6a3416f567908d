"""Graph replays merged with their capture (profattn.analysis.calls.graphs), on hand-built CUDA-style traces: CUDA runtime
launch events record no kernel name, so only graph ids / node ids, launch order and the checks place a replayed
kernel; and on the real vLLM (ROCm) fixtures, whose launch events do name their kernels."""

from __future__ import annotations


from pathlib import Path

import pytest

from profattn.analysis.calls.call_records import GraphGap, GraphMatchRule
from profattn.analysis.calls.find import find_attention_calls
from profattn.analysis.calls.graphs import CaptureSource, merge_graphs
from profattn.trace import load_trace
from engine_data import DATA, analyze_paths
from tracebuild import cpu_op, kernel, launch, user_range, write_trace

GRAPH = 7  # the exec graph's id; a node's id is (graph id << 32) | its number in the graph
#: The captured launches in creation order and the ids of the nodes they created (numbers with gaps: memset and
#: event nodes take numbers too).
NODES = (("gemm_kernel", 3), ("kernel_unified_attention_3d", 4), ("reduce_segments", 6), ("add_kernel", 9))
ATTN_DIMS = [[4, 8, 64], [4, 2, 64], [4, 2, 64], [4, 8, 64], [], [], [], [0]]
BF16 = ["c10::BFloat16"] * 4 + [""] * 3 + ["c10::BFloat16"]


def capture_events(corr0: int = 1, t0: float = 100.0) -> list[dict]:
    """One stream capture on thread 1: aten::mm launching node 3, vLLM's attention op launching nodes 4 and 6 (two
    Triton kernels via cuLaunchKernel), aten::add launching node 9; then instantiation."""
    return [
        launch(t0, corr0, name="cudaStreamBeginCapture"),
        cpu_op("aten::mm", t0 + 10, 20), launch(t0 + 15, corr0 + 1),
        cpu_op("vllm::unified_attention_with_output", t0 + 40, 40, dims=ATTN_DIMS, types=BF16),
        launch(t0 + 50, corr0 + 2, name="cuLaunchKernel"), launch(t0 + 60, corr0 + 3, name="cuLaunchKernel"),
        cpu_op("aten::add", t0 + 90, 10), launch(t0 + 95, corr0 + 4),
        launch(t0 + 110, corr0 + 5, name="cudaStreamEndCapture"),
        launch(t0 + 115, corr0 + 6, name="cudaGraphInstantiateWithFlags"),
    ]


def replay_events(corr: int, t0: float, *, ids: bool = True, streams: bool = True,
                  node_ids: dict[str, int] | None = None) -> list[dict]:
    """One cudaGraphLaunch replaying the four nodes; on two streams the add kernel runs first (GPU order differs
    from the capture's launch order); ``node_ids`` overrides the recorded ids."""
    given = dict(NODES) if node_ids is None else node_ids
    gpu = [("add_kernel", 8 if streams else 7), ("gemm_kernel", 7), ("kernel_unified_attention_3d", 7),
           ("reduce_segments", 7)] if streams else [(n, 7) for n, _ in NODES]
    events = [launch(t0, corr, name="cudaGraphLaunch")]
    for i, (name, stream) in enumerate(gpu):
        events.append(kernel(name, t0 + 100 + 10 * i, 8, corr, stream=stream, graph_id=GRAPH if ids else None,
                             graph_node_id=(GRAPH << 32) | given[name] if ids else None))
    return events


def attention_calls(fa):
    return [c for c in fa.calls if c.op_name == "vllm::unified_attention_with_output" and c.captured_in is None]


def test_capture_inside_the_window_is_matched_by_graph_id(tmp_path: Path) -> None:
    events = capture_events() + replay_events(10, 300) + replay_events(11, 600)
    events.append(user_range("execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk400sqsq4sqsk400)", 290, 30))
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert list(trace.captures["launches"]) == [4]
    fa = find_attention_calls(trace)
    assert [(m.rule, m.placed, m.kernels) for m in fa.graph_merge.launches] == [(GraphMatchRule.NODE_ID, 4, 4)] * 2
    calls = attention_calls(fa)
    assert len(calls) == 2 and all(c.source == "graph" for c in calls)
    for c in calls:  # the attention op's two launches are the 3d kernel and its combine, whatever the GPU order
        assert [k.name for k in c.kernels] == ["kernel_unified_attention_3d", "reduce_segments"]
        assert (c.shape.num_q_heads, c.shape.num_kv_heads, c.shape.head_dim) == (8, 2, 64)
        assert c.graph.rule is GraphMatchRule.NODE_ID and c.graph.capture == 0
    # the first replay lies in the step: decode of 4 sequences, Σk 400 -> pairs 400, FLOPs 4*8*64*400
    first = min(calls, key=lambda c: c.ts_us)
    assert first.step is not None and first.step.ledger.flops == 4 * 8 * 64 * 400
    assert first.phase.value == "decode" and first.workload.kv_lens == (100,) * 4
    # the capture-time op is marked: its kernels did not run then
    captured = [c for c in fa.calls if c.captured_in == 0]
    assert [c.op_name for c in captured] == ["vllm::unified_attention_with_output"] and captured[0].kernels == ()


def test_capture_outside_the_window_is_matched_by_node_order(tmp_path: Path) -> None:
    capture = load_trace(write_trace(tmp_path / "capture.json", capture_events()))
    replay = load_trace(write_trace(tmp_path / "replay.json", replay_events(10, 300)))
    fa = find_attention_calls(replay, captures=[CaptureSource("capture.json", capture)])
    assert [(m.rule, m.placed) for m in fa.graph_merge.launches] == [(GraphMatchRule.NODE_ORDER, 4)]
    (call,) = attention_calls(fa)
    assert [k.name for k in call.kernels] == ["kernel_unified_attention_3d", "reduce_segments"]
    assert call.graph.capture_file == "capture.json"


def test_one_stream_without_ids_is_matched_by_launch_order(tmp_path: Path) -> None:
    capture = load_trace(write_trace(tmp_path / "capture.json", capture_events()))
    replay = load_trace(write_trace(tmp_path / "replay.json", replay_events(10, 300, ids=False, streams=False)))
    fa = find_attention_calls(replay, captures=[CaptureSource("capture.json", capture)])
    assert [(m.rule, m.placed) for m in fa.graph_merge.launches] == [(GraphMatchRule.LAUNCH_ORDER, 4)]
    assert [k.name for k in attention_calls(fa)[0].kernels] == ["kernel_unified_attention_3d", "reduce_segments"]


def test_several_streams_without_ids_or_names_are_left_unplaced(tmp_path: Path) -> None:
    capture = load_trace(write_trace(tmp_path / "capture.json", capture_events()))
    replay = load_trace(write_trace(tmp_path / "replay.json", replay_events(10, 300, ids=False)))
    fa = find_attention_calls(replay, captures=[CaptureSource("capture.json", capture)])
    (m,) = fa.graph_merge.launches
    assert (m.rule, m.gap, m.placed) == (None, GraphGap.MULTI_STREAM, 0)
    assert attention_calls(fa) == [] and {c.source for c in fa.calls} == {"kernels"}
    assert any(w.code == "graph_unmatched" for w in fa.warnings)


def test_an_attention_kernel_on_a_non_attention_launch_is_implausible(tmp_path: Path) -> None:
    """Ids that would put the attention kernel on aten::mm's launch: the order is off, nothing is attributed."""
    wrong = {"kernel_unified_attention_3d": 1, "gemm_kernel": 4, "reduce_segments": 6, "add_kernel": 9}
    capture = load_trace(write_trace(tmp_path / "capture.json", capture_events()))
    replay = load_trace(write_trace(tmp_path / "replay.json", replay_events(10, 300, node_ids=wrong)))
    fa = find_attention_calls(replay, captures=[CaptureSource("capture.json", capture)])
    (m,) = fa.graph_merge.launches
    assert (m.rule, m.gap, m.placed) == (None, GraphGap.IMPLAUSIBLE, 0)
    assert attention_calls(fa) == []


def test_two_identical_captures_are_ambiguous(tmp_path: Path) -> None:
    capture = load_trace(write_trace(tmp_path / "capture.json", capture_events() + capture_events(20, 400)))
    replay = load_trace(write_trace(tmp_path / "replay.json", replay_events(50, 900)))
    assert list(capture.captures["launches"]) == [4, 4]
    fa = find_attention_calls(replay, captures=[CaptureSource("capture.json", capture)])
    assert fa.graph_merge.launches[0].gap is GraphGap.AMBIGUOUS and attention_calls(fa) == []


def test_a_capture_of_another_size_matches_nothing(tmp_path: Path) -> None:
    capture = load_trace(write_trace(tmp_path / "capture.json", capture_events()))
    extra = replay_events(10, 300) + [kernel("extra_kernel", 500, 5, 10, graph_id=GRAPH, graph_node_id=(GRAPH << 32) | 12)]
    replay = load_trace(write_trace(tmp_path / "replay.json", extra))
    fa = find_attention_calls(replay, captures=[CaptureSource("capture.json", capture)])
    (m,) = fa.graph_merge.launches
    assert (m.gap, m.kernels, m.capture_launches) == (GraphGap.NO_CANDIDATE, 5, 4)


def test_no_capture_given_says_what_is_missing(tmp_path: Path) -> None:
    replay = load_trace(write_trace(tmp_path / "replay.json", replay_events(10, 300)))
    fa = find_attention_calls(replay)
    assert fa.graph_merge.launches[0].gap is GraphGap.NO_CAPTURE
    (w,) = [w for w in fa.warnings if w.code == "graph_no_capture"]
    assert w.count == 4 and "no capture trace was given" in w.message
    assert merge_graphs(load_trace(write_trace(tmp_path / "eager.json", capture_events())), []) is None


# ---- the real vLLM traces (ROCm: launch events name their kernels) ----------------------------------------------


def test_full_graph_decode_kernels_are_attributed_to_their_captured_ops() -> None:
    analysis = analyze_paths([DATA / "vllm_decode_full"])
    assert [s.path for s in analysis.skipped] == ["capture_traces/execution_details.json"]
    replay = next(f for f in analysis.files if f.path == "graph_execution.json.gz")
    merge = replay.graph_merge
    assert (merge.replayed_kernels, merge.placed_kernels) == (421, 421)
    assert merge.rule_counts() == {GraphMatchRule.LAUNCH_ORDER: 1}
    calls = replay.calls
    assert len(calls) == 24 and {c.source for c in calls} == {"graph"}
    assert {c.op_name for c in calls} == {"vllm::unified_attention_with_output"}
    kernels = sorted({tuple(k.name for k in c.kernels) for c in calls})
    assert kernels == [("kernel_unified_attention_2d",), ("kernel_unified_attention_3d", "reduce_segments")]
    assert sum(len(c.kernels) == 1 for c in calls) == 12
    # the replayed kernels record no launch shape on ROCm: the capture's launch events give it
    two_d = next(c for c in calls if len(c.kernels) == 1).kernels[0]
    assert (two_d.grid, two_d.block, two_d.shared_mem_bytes) == ((8, 48, 1), (128, 1, 1), 12288)
    three_d, reduce = next(c for c in calls if len(c.kernels) == 2).kernels
    assert (three_d.grid, three_d.block, three_d.shared_mem_bytes) == ((48, 8, 8), (128, 1, 1), 4096)
    assert (reduce.grid, reduce.block, reduce.shared_mem_bytes) == ((32, 64, 1), (64, 1, 1), 128)
    for c in calls:
        assert c.engine.q_tokens == 32 and c.engine.kv_new_tokens == 32
        assert c.graph.capture_file.endswith("graph_capture_rank_0.1773709742341309550.pt.trace.json.gz")


def test_a_mismatched_capture_pair_attributes_nothing() -> None:
    """The decode replay against the piecewise capture (25 captures of 4-15 launches, none of 421): unplaced."""
    analysis = analyze_paths([DATA / "vllm_decode_full" / "graph_execution.json.gz"],
                             captures=[next((DATA / "vllm_prefilldecode_piecewise" / "capture_traces").glob("*.gz"))])
    replay = analysis.files[0]
    (m,) = replay.graph_merge.launches
    assert (m.rule, m.gap, m.placed, m.kernels) == (None, GraphGap.NO_CANDIDATE, 0, 421)
    assert not any(c.source == "graph" for c in replay.calls)
    assert any(w.code == "graph_unmatched" and "421 of 421" in w.message for w in replay.warnings)


@pytest.mark.parametrize("name", ["vllm_decode_full", "vllm_prefilldecode_piecewise"])
def test_the_capture_traces_mark_their_captured_calls(name: str) -> None:
    analysis = analyze_paths([DATA / name])
    capture = next(f for f in analysis.files if f.path.startswith("capture_traces/"))
    assert len(capture.calls) == 24 and capture.captures == (1 if name == "vllm_decode_full" else 25)
    held = [c for c in capture.calls if c.captured_in is not None]
    assert len(held) == (24 if name == "vllm_decode_full" else 0)  # piecewise: attention runs between the pieces


def test_gpu_time_by_op_charges_replayed_kernels_to_their_captured_ops() -> None:
    """The 421 kernels under one hipGraphLaunch go to the top-level ops that launched them at capture time."""
    replay = next(f for f in analyze_paths([DATA / "vllm_decode_full"]).files if f.path == "graph_execution.json.gz")
    ops = {o.name: o for o in replay.ops}
    moe, attn = ops["vllm::moe_forward"], ops["vllm::unified_attention_with_output"]
    assert (moe.op_calls, moe.kernels, moe.graph_kernels) == (24, 168, 168)
    assert (attn.op_calls, attn.kernels, attn.graph_kernels) == (24, 36, 36)
    assert attn.total_us == pytest.approx(sum(c.gpu_time_us for c in replay.calls))
    assert "(no enclosing CPU op)" not in ops  # the eager kernels' ops are in the replay trace itself
    assert not any("attributed to the graph launch" in n for n in replay.notes)


def test_engine_calls_keep_their_heaviest_kernels_eager_and_replayed(tmp_path: Path) -> None:
    """The per-call kernel cap holds for engine ops too: an eager vLLM attention op of 70 launches, and the same op
    captured and replayed (launch order), each keep the 64 heaviest kernels and summarise the other 6."""
    from profattn.analysis.calls.kernels import CALL_KERNEL_LIMIT

    n = CALL_KERNEL_LIMIT + 6
    durs = [10.0 + (i % 7) for i in range(n)]  # 10..16 µs: the 6 dropped are six of the 10 µs ones
    eager = [cpu_op("vllm::unified_attention_with_output", 100, 1000, dims=ATTN_DIMS, types=BF16)]
    for i, d in enumerate(durs):
        eager += [launch(110 + 10 * i, 100 + i, name="cuLaunchKernel"),
                  kernel("kernel_unified_attention_2d", 2000 + 20 * i, d, 100 + i)]
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "eager.json", eager)))
    (call,) = attention_calls(fa)
    assert call.engine is not None and call.kernel_count == n and len(call.kernels) == CALL_KERNEL_LIMIT
    assert call.omitted.count == 6 and call.omitted.gpu_time_us == 60.0 and call.gpu_time_us == sum(durs)
    assert min(k.dur_us for k in call.kernels) == 10.0 and [k.ts_us for k in call.kernels] == sorted(k.ts_us for k in call.kernels)

    capture = [launch(50, 1, name="cudaStreamBeginCapture"),
               cpu_op("vllm::unified_attention_with_output", 100, 1000, dims=ATTN_DIMS, types=BF16)]
    capture += [launch(110 + 10 * i, 2 + i, name="cuLaunchKernel") for i in range(n)]
    capture += [launch(1200, 2 + n, name="cudaStreamEndCapture")]
    replay = [launch(300, 500, name="cudaGraphLaunch")]
    replay += [kernel("kernel_unified_attention_2d", 400 + 20 * i, d, 500) for i, d in enumerate(durs)]
    fa = find_attention_calls(load_trace(write_trace(tmp_path / "replay.json", replay)),
                              captures=[CaptureSource("capture.json", load_trace(write_trace(tmp_path / "c.json", capture)))])
    (call,) = attention_calls(fa)
    assert call.source == "graph" and call.graph.rule is GraphMatchRule.LAUNCH_ORDER
    assert call.kernel_count == n and len(call.kernels) == CALL_KERNEL_LIMIT and call.omitted.count == 6
    assert call.gpu_time_us == sum(durs) and call.ts_us == 400 and call.dur_us == 20 * (n - 1) + durs[-1]
