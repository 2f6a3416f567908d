"""Hand-built Kineto traces for tests: CPU ops, runtime launches, kernels and whole SDPA calls, written
as Chrome trace JSON (the layout PyTorch's profiler writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def cpu_op(name: str, ts: float, dur: float, *, dims: list | None = None, types: list | None = None,
           concrete: list | None = None, ext: int | None = None, tid: int = 1) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if dims is not None:
        args["Input Dims"] = dims
    if types is not None:
        args["Input type"] = types
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    if ext is not None:
        args["External id"] = ext
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def launch(ts: float, correlation: int, *, name: str = "cudaLaunchKernel", tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 2, "pid": 1, "tid": tid,
            "args": {"correlation": correlation}}


def kernel(name: str, ts: float, dur: float, correlation: int, *, stream: int = 7, graph_id: int | None = None,
           graph_node_id: int | None = None) -> dict[str, Any]:
    """A GPU kernel of launch shape grid [4, 2, 1], block [128, 1, 1]; ``graph_id``/``graph_node_id`` as Kineto writes
    them for a kernel replayed from a CUDA graph (CUDA >= 12 builds)."""
    args: dict[str, Any] = {"correlation": correlation, "device": 0, "stream": stream, "grid": [4, 2, 1],
                            "block": [128, 1, 1], "registers per thread": 96, "shared memory": 49152}
    if graph_id is not None:
        args["graph id"] = graph_id
    if graph_node_id is not None:
        args["graph node id"] = graph_node_id
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream, "args": args}


def user_range(name: str, ts: float, dur: float, *, tid: int = 1) -> dict[str, Any]:
    """A ``record_function`` range (``user_annotation``)."""
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": {}}


def write_trace(path: Path, events: list[dict[str, Any]], **metadata: Any) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU", "numSms": 100}], **metadata,
           "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


BF16 = ["c10::BFloat16"] * 3


def sdpa_call(ts: float, correlation: int, *, q: list[int], k: list[int], causal: bool | None, kernel_name: str,
              backend_op: str = "aten::_scaled_dot_product_flash_attention") -> list[dict[str, Any]]:
    """An SDPA front-door op, its nested backend op, and one kernel launched inside both; ``causal`` None:
    no ``Concrete Inputs`` recorded."""
    dims = [q, k, k, [], [], [], [], []]
    outer = None if causal is None else ["", "", "", "", "0.", str(causal), "", "False"]
    inner = None if causal is None else ["", "", "", "0.", str(causal), "False", ""]
    return [
        cpu_op("aten::scaled_dot_product_attention", ts, 100, dims=dims, types=BF16 + [""] * 5, concrete=outer),
        cpu_op(backend_op, ts + 5, 90, dims=dims[:7], types=BF16 + [""] * 4, concrete=inner),
        launch(ts + 20, correlation),
        kernel(kernel_name, ts + 200, 30, correlation),
    ]


# ---- the real fixtures ---------------------------------------------------------------------------
