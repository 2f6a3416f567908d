"""Graph captures and graph ids in the trace layer: Trace.captures / Trace.capture_launches and the kernels'
graph_id / graph_node_id columns, on hand-built CUDA-style events and the real vLLM (ROCm) capture."""

from __future__ import annotations

from pathlib import Path

from profattn.trace import load_trace
from profattn.trace.columns import CAPTURE_COLUMNS, CAPTURE_LAUNCH_COLUMNS
from tracebuild import cpu_op, kernel, launch, user_range, write_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "engine-traces"


def test_capture_windows_and_their_launches(tmp_path: Path) -> None:
    events = [
        user_range("capture_4_FULL", 90, 100),
        launch(100, 1, name="cudaStreamBeginCapture"),
        cpu_op("aten::mm", 105, 10), launch(108, 2),
        launch(120, 3, name="cuLaunchKernel"),
        launch(121, 4, name="cudaMemcpyAsync"),  # a memcpy node, not a kernel launch
        launch(130, 5, name="cudaLaunchKernel", tid=2),  # another thread: not in this capture
        launch(150, 6, name="cudaStreamEndCapture"),
        launch(160, 7),  # after the capture: eager
        launch(170, 8, name="cudaStreamBeginCapture"),  # never ended: no capture
        launch(171, 9),
        launch(300, 10, name="cudaGraphLaunch"),
        kernel("k0", 400, 5, 10, graph_id=3, graph_node_id=(3 << 32) | 1),
        kernel("k1", 410, 5, 10, graph_id=3, graph_node_id=(3 << 32) | 2),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    caps, launches = trace.captures, trace.capture_launches
    assert list(caps.columns) == list(CAPTURE_COLUMNS) and list(launches.columns) == list(CAPTURE_LAUNCH_COLUMNS)
    assert caps[["capture", "begin_ts_us", "end_ts_us", "launches", "range"]].values.tolist() == [
        [0, 100.0, 150.0, 2, "capture_4_FULL"]]
    assert launches[["position", "call", "correlation"]].values.tolist() == [[0, "cudaLaunchKernel", 2],
                                                                             [1, "cuLaunchKernel", 3]]
    assert launches["kernel"].isna().all() and launches["grid_x"].isna().all()  # CUDA launch events name nothing
    k = trace.kernels
    assert k["graph_id"].tolist() == [3, 3] and k["graph_node_id"].tolist() == [(3 << 32) | 1, (3 << 32) | 2]
    assert k["graph_launched"].all()


def test_no_capture_gives_empty_frames_with_the_columns(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [launch(1, 1), kernel("k", 5, 1, 1)]))
    assert trace.captures.empty and list(trace.captures.columns) == list(CAPTURE_COLUMNS)
    assert trace.capture_launches.empty and trace.kernels["graph_id"].isna().all()


def test_the_vllm_full_graph_capture() -> None:
    """vLLM's FULL decode graph for 32 tokens: one capture of 421 launches, each ROCm launch event naming its kernel
    and launch shape (the third, a hipExtModuleLaunchKernel GEMM of 40,960 threads in blocks of 256: 160 blocks)."""
    trace = load_trace(next((DATA / "vllm_decode_full" / "capture_traces").glob("*.json.gz")))
    (cap,) = trace.captures.itertuples()
    assert (cap.launches, cap.range, cap.begin_call) == (421, "capture_32_FULL", "hipStreamBeginCapture")
    first = trace.capture_launches.iloc[:3]
    assert first["kernel"].tolist()[0] == "triton_poi_fused_0"
    assert first[["call", "grid_x", "block_x"]].values.tolist() == [
        ["hipModuleLaunchKernel", 1036, 512], ["hipLaunchKernel", 32, 128], ["hipExtModuleLaunchKernel", 160, 256]]
    attention = trace.capture_launches[trace.capture_launches["kernel"] == "kernel_unified_attention_3d"]
    assert len(attention) == 12 and attention.iloc[0][["grid_x", "grid_y", "grid_z", "shared_mem_bytes"]].tolist() == [
        48, 8, 8, 4096]
