"""Tests for profattn.trace.kineto: real Kineto fixtures, malformed input, and fuzzing."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ALEXNET, AMD, CPU_ONLY, FLASH, MATH, OLD_SCHEMA, trace_fixture
from profattn.errors import ProfattnError, TraceError
from dataclasses import replace

import factories
from profattn.analysis.run.cells import summarize_cell
from profattn.families import FLASH as FLASH_FAMILY
from profattn.results import TraceSummary
from profattn.trace import (
    KERNEL_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, Trace, kernels_in_range, load_trace, ops_in_range, ranges_in_range,
)

# ----------------------------------------------------------------------------------------------------
# Fixture location and helpers
# ----------------------------------------------------------------------------------------------------


TRITON = "hta_triton_example_triton_example.json.gz"

SPLITKV = "flash_fwd_splitkv_kernel"
COMBINE = "flash_fwd_splitkv_combine_kernel"


@functools.cache
def _load_cached(path: Path) -> Trace:
    return load_trace(path)


def fixture_trace(name: str) -> Trace:
    """The parsed fixture (parsed once per session; tests must not mutate it)."""
    return _load_cached(trace_fixture(name))


def cell_summary(trace: Trace, range_name: str) -> TraceSummary:
    """What one call of the range ``range_name`` launched, as the product summarises a cell (the cell id
    is the range name)."""
    c = replace(factories.cell(factories.SEED.workloads[0], "sdpa-flash", 10.0), cell_id=range_name)
    return summarize_cell(trace, "t.json", c, FLASH_FAMILY)


def event(cat: str, name: str, ts: Any, dur: Any = 1.0, pid: Any = 1, tid: Any = 1, **args: Any) -> dict[str, Any]:
    """A Kineto complete ("X") event; keyword arguments become its ``args``."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel_event(ts: float, correlation: int, dur: float = 2.0, **args: Any) -> dict[str, Any]:
    """A GPU kernel event named ``k<correlation>`` with grid (4,2,1) and block (64,1,1) unless overridden."""
    args = {"device": 0, "stream": 7, "correlation": correlation, "grid": [4, 2, 1], "block": [64, 1, 1], **args}
    return event("kernel", f"k{correlation}", ts, dur, pid=0, tid=7, **args)


def write_trace(directory: Path, document: Any, name: str = "t.json", *, gz: bool = False) -> Path:
    text = json.dumps(document)
    path = directory / name
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


# ----------------------------------------------------------------------------------------------------
# Real traces
# ----------------------------------------------------------------------------------------------------


def test_flash_decode_kernels_and_attribution() -> None:
    trace = fixture_trace(FLASH)
    kernels = trace.kernels
    assert list(kernels.columns) == list(KERNEL_COLUMNS)
    assert len(kernels) == 6
    assert trace.has_gpu_kernels
    assert trace.num_sms == 132
    assert trace.metadata["schemaVersion"] == 1 and "traceEvents" not in trace.metadata
    assert trace.device_properties[0]["name"] == "NVIDIA H200"

    ranges = trace.ranges
    assert list(ranges.columns) == list(RANGE_COLUMNS)
    assert ranges["name"].tolist() == ["decode_FLASH_ATTENTION"] * 3
    assert ranges["instance"].tolist() == [0, 1, 2]

    assert kernels["range"].tolist() == ["decode_FLASH_ATTENTION"] * 6
    assert kernels["range_instance"].tolist() == [0, 0, 1, 1, 2, 2]
    assert kernels["launcher"].tolist() == ["cudaLaunchKernel"] * 6
    assert not kernels["graph_launched"].any()
    for instance, call in kernels.groupby("range_instance"):
        assert len(call) == 2, instance
        splitkv, combine = call.iloc[0], call.iloc[1]  # frame is in ts order: split-KV, then combine
        assert SPLITKV in splitkv["name"] and COMBINE not in splitkv["name"]
        assert (splitkv["grid_x"], splitkv["grid_y"], splitkv["grid_z"]) == (1, 7, 32)
        assert (splitkv["block_x"], splitkv["block_y"], splitkv["block_z"]) == (128, 1, 1)
        assert splitkv["registers_per_thread"] == 246
        assert splitkv["shared_mem_bytes"] == 81920
        assert splitkv["ctas"] == 224 and splitkv["threads_per_cta"] == 128
        assert splitkv["blocks_per_sm"] == pytest.approx(224 / 132, rel=1e-5)  # Kineto's own figure
        assert COMBINE in combine["name"]
        assert (combine["grid_x"], combine["grid_y"], combine["grid_z"]) == (32, 1, 1)
        assert combine["ctas"] == 32
    first = kernels.iloc[0]
    assert first["ts_us"] == pytest.approx(5077804966330.949)
    assert first["dur_us"] == pytest.approx(44.32)
    assert (first["device"], first["stream"], first["correlation"], first["external_id"]) == (0, 7, 715, 522)


def test_flash_decode_summary() -> None:
    trace = fixture_trace(FLASH)
    assert set(trace.kernels["range"]) == {"decode_FLASH_ATTENTION"}
    row = cell_summary(trace, "decode_FLASH_ATTENTION")
    assert row.calls == 3
    assert row.kernels_per_call == 2.0
    assert row.ctas_per_call == 224 + 32
    assert row.ctas_per_sm == pytest.approx(256 / 132)
    assert SPLITKV in row.dominant_kernel and COMBINE not in row.dominant_kernel
    splitkv_us = 44.32 + 40.031 + 40.64
    combine_us = 4.448 + 4.768 + 4.608
    assert row.gpu_time_per_call_us == pytest.approx((splitkv_us + combine_us) / 3)
    assert row.dominant_share == pytest.approx(splitkv_us / (splitkv_us + combine_us))
    dominant = row.kernels[0]
    assert dominant.grid == (1, 7, 32)
    assert dominant.block == (128, 1, 1)
    assert dominant.registers_per_thread == 246
    assert dominant.shared_mem_bytes == 81920
    assert dominant.blocks_per_sm == pytest.approx(1.69697)


def test_flash_decode_ops_carry_shapes_and_range() -> None:
    ops = fixture_trace(FLASH).ops
    assert list(ops.columns) == list(OP_COLUMNS)
    sdpa = ops[ops["name"] == "aten::scaled_dot_product_attention"]
    assert len(sdpa) == 3
    assert sdpa["range"].tolist() == ["decode_FLASH_ATTENTION"] * 3
    first = sdpa.iloc[0]
    assert first["input_dims"][:3] == [[8, 16, 1, 128], [8, 4, 8192, 128], [8, 4, 8192, 128]]
    assert first["input_types"][:3] == ["c10::BFloat16"] * 3
    assert first["external_id"] == 514
    assert ops["range"].notna().all()


def test_math_decode_attributes_all_kernels_to_three_calls() -> None:
    trace = fixture_trace(MATH)
    kernels = trace.kernels
    assert len(kernels) == 48
    assert kernels["range"].tolist() == ["decode_MATH"] * 48
    assert kernels.groupby("range_instance").size().tolist() == [16, 16, 16]
    row = cell_summary(trace, "decode_MATH")
    assert row.calls == 3
    assert row.kernels_per_call == 48 / 3
    assert row.gpu_time_per_call_us == pytest.approx(kernels["dur_us"].sum() / 3)


def test_alexnet_a100_kernels_have_launch_shapes() -> None:
    trace = fixture_trace(ALEXNET)
    kernels = trace.kernels
    assert len(kernels) == 79
    assert trace.num_sms == 108
    shape = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "shared_mem_bytes"]
    assert kernels[shape].notna().all().all()
    assert (kernels["ctas"] == kernels["grid_x"] * kernels["grid_y"] * kernels["grid_z"]).all()
    assert (kernels["launcher"] == "cudaLaunchKernel").all()
    sgemm = kernels[kernels["name"] == "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1"].iloc[0]
    assert (sgemm["grid_x"], sgemm["block_x"], sgemm["registers_per_thread"]) == (3025, 128, 160)
    assert kernels["range"].notna().all()


def test_cpu_only_trace_is_no_data_not_an_error() -> None:
    trace = fixture_trace(CPU_ONLY)
    assert not trace.has_gpu_kernels
    assert trace.kernels.empty and list(trace.kernels.columns) == list(KERNEL_COLUMNS)
    assert trace.num_sms is None
    assert len(trace.ranges) == 11 and len(trace.ops) == 4
    summary = cell_summary(trace, "no such range")
    assert (summary.calls, summary.kernels, summary.gpu_time_per_call_us) == (0, (), None)


def test_amd_trace_launch_shapes_from_the_launch_events() -> None:
    """ROCm kernel events here carry no grid/block; Kineto's ROCm runtime launch events do (``grid``, ``block``,
    ``shared memory``: RocprofActivity_inl.h), and the kernel takes them through its correlation id."""
    trace = fixture_trace(AMD)
    kernels = trace.kernels
    assert len(kernels) == 14
    assert trace.num_sms == 104
    shape = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "ctas", "threads_per_cta"]
    assert kernels[shape].notna().all().all()
    first = kernels.iloc[0]  # correlation 118: hipLaunchKernel grid [3, 1, 1], block [128, 1, 1], shared memory 0
    assert int(first["correlation"]) == 118
    assert [int(first[c]) for c in shape] == [3, 1, 1, 128, 1, 1, 3, 128]
    assert int(first["shared_mem_bytes"]) == 0
    assert kernels["blocks_per_sm"].isna().all()  # Kineto's own figure: not written on ROCm
    assert set(kernels["launcher"]) == {"hipLaunchKernel", "hipExtModuleLaunchKernel"}
    assert (kernels["device"] == 2).all()
    ranged = kernels["range"].dropna().unique().tolist()
    assert ranged
    for name in ranged:
        summary = cell_summary(trace, name)
        assert summary.kernels and summary.ctas_per_call is not None
        assert all(k.grid is not None and k.block is not None for k in summary.kernels)


def test_old_schema_kernel_and_runtime_categories() -> None:
    trace = fixture_trace(OLD_SCHEMA)
    kernels = trace.kernels
    assert len(kernels) == 4
    assert (kernels["launcher"] == "cudaLaunchKernel").all()
    assert kernels["external_id"].tolist() == [0, 6294, 6307, 6310]  # old key "external id"
    assert kernels["correlation"].tolist() == [538860, 538873, 538885, 538890]
    cutlass = kernels.iloc[2]
    assert (cutlass["grid_x"], cutlass["grid_y"], cutlass["grid_z"], cutlass["ctas"]) == (8, 4, 1, 32)
    assert trace.num_sms is None  # no deviceProperties in this schema
    assert kernels["range"].isna().all()
    assert trace.ranges.empty


def test_triton_kernel_launched_by_driver_api() -> None:
    kernels = fixture_trace(TRITON).kernels
    assert kernels["name"].tolist() == ["triton_poi_fused_add_cos_sin_0"]
    assert kernels["launcher"].tolist() == ["cuLaunchKernel"]
    assert (kernels.iloc[0]["grid_x"], kernels.iloc[0]["block_x"]) == (1, 128)


# ----------------------------------------------------------------------------------------------------
# Attribution and summary on small hand-written traces
# ----------------------------------------------------------------------------------------------------


def test_innermost_range_and_instances(tmp_path: Path) -> None:
    events = [
        event("user_annotation", "outer", 0, 100),
        event("user_annotation", "inner", 10, 20),
        event("user_annotation", "inner", 40, 20),
        event("user_annotation", "elsewhere", 0, 100, tid=2),  # other thread: never encloses tid 1
        event("cuda_runtime", "cudaLaunchKernel", 15, 1, correlation=1),  # inner #0
        event("cuda_runtime", "cudaLaunchKernel", 35, 1, correlation=2),  # between inners: outer
        event("cuda_runtime", "cudaLaunchKernel", 45, 1, correlation=3),  # inner #1
        event("cuda_runtime", "cudaGraphLaunch", 200, 1, correlation=4),  # outside everything
        *(kernel_event(300 + c, c) for c in (1, 2, 3, 4, 5)),  # correlation 5 has no launcher
    ]
    trace = load_trace(write_trace(tmp_path, {"traceEvents": events}))
    kernels = trace.kernels
    assert kernels["range"].tolist() == ["inner", "outer", "inner", None, None]
    assert kernels["range_instance"].tolist() == [0, 0, 1, pd.NA, pd.NA]
    assert kernels["launcher"].tolist() == ["cudaLaunchKernel"] * 3 + ["cudaGraphLaunch", None]
    assert kernels["graph_launched"].tolist() == [False, False, False, True, False]
    assert trace.num_sms is None

    inner, outer = cell_summary(trace, "inner"), cell_summary(trace, "outer")
    assert inner.calls == 2 and inner.kernels_per_call == 1.0
    assert inner.ctas_per_call == 8.0 and inner.ctas_per_sm is None
    # A cell's summary counts the kernels of nested ranges too: outer holds all three launches.
    assert outer.calls == 1 and outer.kernels_per_call == 3.0


def _brute_force_range(ranges: list[tuple[str, float, float, int]], t: float, tid: int) -> str | None:
    """Oracle: the latest-starting range on ``tid`` with start <= t <= end; else the same on any thread."""
    for same_thread in (True, False):
        enclosing = [
            (start, name) for name, start, dur, r_tid in ranges
            if (r_tid == tid or not same_thread) and start <= t <= start + dur
        ]
        if enclosing:
            return max(enclosing)[1]
    return None


def test_backward_kernels_on_autograd_thread_attributed_to_range(tmp_path: Path) -> None:
    """The backward of a cell runs on autograd's device thread (tid 2), which holds no annotation."""
    events = [
        event("user_annotation", "cell", 0, 100, tid=1),
        event("cuda_runtime", "cudaLaunchKernel", 10, 1, tid=1, correlation=1),
        event("cuda_runtime", "cudaLaunchKernel", 50, 1, tid=2, correlation=2),
        event("cuda_runtime", "cudaLaunchKernel", 150, 1, tid=2, correlation=3),
        kernel_event(20, 1), kernel_event(60, 2), kernel_event(160, 3),
    ]
    kernels = load_trace(write_trace(tmp_path, {"traceEvents": events})).kernels
    assert kernels["range"].tolist() == ["cell", "cell", None]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    n_ranges=st.integers(0, 12),
    n_launches=st.integers(1, 12),
)
def test_attribution_matches_brute_force(tmp_path: Path, data: st.DataObject, n_ranges: int, n_launches: int) -> None:
    """Arbitrary (also non-nested, overlapping) ranges on two threads: the sweep equals the oracle."""
    starts = data.draw(st.lists(st.integers(0, 1000), min_size=n_ranges, max_size=n_ranges, unique=True))
    ranges = [
        (f"r{i}", float(start), float(data.draw(st.integers(0, 600))), data.draw(st.integers(1, 2)))
        for i, start in enumerate(starts)
    ]
    # Some launches land just after a range ends, where "latest-starting" alone would be wrong.
    just_after_an_end = st.sampled_from([start + dur + 1 for _, start, dur, _ in ranges] or [0.0])
    when = st.one_of(st.integers(0, 1300).map(float), just_after_an_end)
    launches = [(data.draw(when), data.draw(st.integers(1, 2))) for _ in range(n_launches)]
    events = [event("user_annotation", name, start, dur, tid=tid) for name, start, dur, tid in ranges]
    for c, (ts, tid) in enumerate(launches):
        events.append(event("cuda_runtime", "cudaLaunchKernel", ts, 1, tid=tid, correlation=c))
        events.append(kernel_event(5000 + c, c))
    kernels = load_trace(write_trace(tmp_path, {"traceEvents": events}, "prop.json")).kernels
    assert kernels["range"].tolist() == [_brute_force_range(ranges, ts, tid) for ts, tid in launches]


def test_dominant_kernel_by_gpu_time_and_its_launch_shapes(tmp_path: Path) -> None:
    launches = [  # (name, grid, dur_us): "a" has 4 x 4 = 16 us, "b" 10 us; "a" mostly runs grid (2,1,1)
        ("a", [1, 1, 1], 4.0),
        ("b", [9, 1, 1], 10.0),
        ("a", [2, 1, 1], 4.0),
        ("a", [2, 1, 1], 4.0),
        ("a", [2, 1, 1], 4.0),
    ]
    events = [event("user_annotation", "step", 0, 100)]
    for c, (name, grid, dur) in enumerate(launches):
        events.append(event("cuda_runtime", "cudaLaunchKernel", 10 + c, 1, correlation=c))
        events.append(kernel_event(200 + 20 * c, c, dur, grid=grid, block=[32, 1, 1]) | {"name": name})
    row = cell_summary(load_trace(write_trace(tmp_path, {"traceEvents": events})), "step")
    assert (row.calls, row.kernels_per_call) == (1, 5.0)
    assert row.gpu_time_per_call_us == 26.0 and row.ctas_per_call == 1 + 9 + 2 * 3
    assert row.dominant_kernel == "a" and row.dominant_share == pytest.approx(16 / 26)
    # The first launch's shape, and every distinct shape in launch order.
    assert row.kernels[0].grid == (1, 1, 1) and row.kernels[0].block == (32, 1, 1)
    assert row.kernels[0].shapes == (((1, 1, 1), (32, 1, 1)), ((2, 1, 1), (32, 1, 1)))


# ----------------------------------------------------------------------------------------------------
# Malformed input
# ----------------------------------------------------------------------------------------------------


def _truncated_gz(path: Path) -> None:
    path.write_bytes(gzip.compress(b'{"traceEvents": []}' * 50)[:-12])


MALFORMED = {
    "truncated.json.gz": _truncated_gz,
    "notgzip.json.gz": lambda p: p.write_bytes(b"neither gzip nor JSON"),
    "badgzip.json.gz": lambda p: p.write_bytes(b"\x1f\x8b" + b"\x00" * 30),
    "notjson.json": lambda p: p.write_bytes(b"this is not json"),
    "cut.json": lambda p: p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1'),
    "latin1.json": lambda p: p.write_bytes(b'{"traceEvents": [], "x": "caf\xe9"}'),
    "garbage_list.json": lambda p: p.write_bytes(b"[1, 2]"),
    "scalar.json": lambda p: p.write_bytes(b"42"),
    "string.json": lambda p: p.write_bytes(b'"traceEvents"'),
    "no_events.json": lambda p: p.write_bytes(b'{"schemaVersion": 1}'),
    "events_not_list.json": lambda p: p.write_bytes(b'{"traceEvents": {"ph": "X"}}'),
    "empty.json": lambda p: p.write_bytes(b""),
    "deep.json": lambda p: p.write_bytes(b"[" * 100_000 + b"]" * 100_000),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_input_raises_trace_error_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    MALFORMED[name](path)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert name in message and "\n" not in message
    assert isinstance(info.value, ProfattnError) and info.value.exit_code == 2


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="missing.json.gz"):
        load_trace(tmp_path / "missing.json.gz")
    with pytest.raises(TraceError, match=tmp_path.name):
        load_trace(tmp_path)


def test_empty_trace_events_is_empty_frames(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path, {"traceEvents": [], "schemaVersion": 1}))
    assert trace.metadata == {"schemaVersion": 1}
    assert trace.kernels.empty and list(trace.kernels.columns) == list(KERNEL_COLUMNS)
    assert trace.ranges.empty and list(trace.ranges.columns) == list(RANGE_COLUMNS)
    assert trace.ops.empty and list(trace.ops.columns) == list(OP_COLUMNS)
    assert cell_summary(trace, "x").kernels == ()
    assert load_trace(write_trace(tmp_path, [], "bare.json")).kernels.empty


def test_bare_event_list_and_gzip_detected_by_magic(tmp_path: Path) -> None:
    events = [event("cuda_runtime", "cudaLaunchKernel", 1, 1, correlation=1), kernel_event(5, 1)]
    bare = load_trace(write_trace(tmp_path, events, "bare.json"))
    assert bare.metadata == {} and bare.kernels["launcher"].tolist() == ["cudaLaunchKernel"]
    gz_named_json = load_trace(write_trace(tmp_path, {"traceEvents": events}, "trace.json", gz=True))
    assert len(gz_named_json.kernels) == 1


def test_odd_values_skip_events_instead_of_crashing(tmp_path: Path) -> None:
    events = [
        kernel_event(10, 1),  # a good kernel
        kernel_event("inf", 2),  # string ts: skipped
        kernel_event(10**30, 3),  # huge but finite ts: beyond any clock (1e17 µs), skipped
        kernel_event(50, 5, dur=1e308),  # a dur of 1e308 µs: skipped (it would add up to inf)
        {"ph": "X", "cat": "kernel", "name": "no_dur", "ts": 20, "args": {"correlation": 4}},  # skipped
        {"ph": "X", "cat": "kernel", "name": "no_args", "ts": 30, "dur": 1},  # kept, args all NA
        kernel_event(40, 10**30, grid=[10**30, 1, 1], block="oops"),  # unusable args become NA
        {"ph": "X", "cat": "cpu_op", "name": "op_no_dur", "ts": 5, "pid": 1, "tid": 1},  # kept, dur NaN
        {"ph": "X", "cat": "user_annotation", "name": "range_no_dur", "ts": 5},  # a range needs dur: skipped
        "not an event",
        {"cat": None, "ph": "X"},
    ]
    trace = load_trace(write_trace(tmp_path, {"traceEvents": events}))
    kernels = trace.kernels.set_index("name")
    assert sorted(kernels.index) == sorted(["k1", "no_args", f"k{10**30}"])
    skipped = next(w for w in trace.warnings if w.code == "kernel_skipped")
    assert skipped.count == 4 and "ts beyond 1e+17 µs (1)" in skipped.message and "dur beyond 1e+12 µs (1)" in skipped.message
    no_args = kernels.loc["no_args"]
    assert pd.isna(no_args["correlation"]) and pd.isna(no_args["ctas"]) and no_args["launcher"] is None
    overflow = kernels.loc[f"k{10**30}"]
    assert pd.isna(overflow["correlation"]) and pd.isna(overflow["grid_x"]) and pd.isna(overflow["ctas"])
    assert pd.isna(overflow["block_x"]) and pd.isna(overflow["threads_per_cta"])
    assert trace.ops["name"].tolist() == ["op_no_dur"] and pd.isna(trace.ops.iloc[0]["dur_us"])
    assert trace.ranges.empty


def test_nan_and_infinity_timestamps_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "nan.json"
    path.write_text(
        '{"traceEvents": ['
        '{"ph": "X", "cat": "kernel", "name": "nan", "ts": NaN, "dur": 1, "args": {}},'
        '{"ph": "X", "cat": "kernel", "name": "inf", "ts": 1, "dur": Infinity, "args": {}},'
        '{"ph": "X", "cat": "kernel", "name": "neg", "ts": 1, "dur": -1, "args": {}},'
        '{"ph": "X", "cat": "kernel", "name": "big", "ts": ' + "9" * 5000 + ', "dur": 1, "args": {}},'
        '{"ph": "X", "cat": "kernel", "name": "ok", "ts": 2, "dur": 1, "args": {"shared memory": NaN}}'
        "]}"
    )
    kernels = load_trace(path).kernels
    assert kernels["name"].tolist() == ["ok"]
    assert pd.isna(kernels.iloc[0]["shared_mem_bytes"])


# ----------------------------------------------------------------------------------------------------
# Fuzzing: any mutation of a real trace gives a Trace or a TraceError, nothing else
# ----------------------------------------------------------------------------------------------------


@functools.cache
def _flash_text() -> bytes:
    return gzip.decompress(trace_fixture(FLASH).read_bytes())


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 3))):
        if not data:
            break
        kind = draw(st.sampled_from(["delete", "flip", "truncate", "insert"]))
        i = draw(st.integers(0, len(data) - 1))
        if kind == "delete":
            del data[i : i + draw(st.integers(1, 64))]
        elif kind == "flip":
            data[i] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[i:]
        else:
            data[i:i] = draw(st.sampled_from([b"NaN", b"Infinity", b"1" * 40, b'"x"', b"null", b"[", b"\xff"]))
    return bytes(data)


def test_fuzz_mutated_flash_trace(tmp_path_factory: pytest.TempPathFactory) -> None:
    original = _flash_text()
    directory = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=50, deadline=None, derandomize=True)
    @given(payload=mutated(original), compress=st.booleans(), corrupt_gzip=st.booleans())
    def check(payload: bytes, compress: bool, corrupt_gzip: bool) -> None:
        if compress:
            payload = gzip.compress(payload, compresslevel=1)
            if corrupt_gzip:
                middle = len(payload) // 2
                payload = payload[:middle] + bytes([payload[middle] ^ 0xFF]) + payload[middle + 1 :]
        path = directory / ("fuzz.json.gz" if compress else "fuzz.json")
        path.write_bytes(payload)
        try:
            trace = load_trace(path)
        except TraceError as e:
            assert path.name in str(e)
            return
        assert isinstance(trace, Trace)
        for name in trace.ranges["name"].unique().tolist()[:3]:
            cell_summary(trace, name)
        assert trace.num_sms is None or trace.num_sms > 0

    check()


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(-(2**70), 2**70), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def test_fuzz_junk_values_in_valid_json(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Valid JSON with junk field values (or fields deleted): never anything but a Trace or TraceError."""
    document = json.loads(_flash_text())
    interesting = [i for i, e in enumerate(document["traceEvents"]) if e.get("ph") == "X"]
    directory = tmp_path_factory.mktemp("junk")

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        doc = json.loads(json.dumps(document))
        for _ in range(data.draw(st.integers(1, 6))):
            target = doc["traceEvents"][data.draw(st.sampled_from(interesting))]
            if isinstance(target.get("args"), dict) and data.draw(st.booleans()):
                target = target["args"]
            key = data.draw(st.sampled_from(sorted(target) + ["deviceProperties"]))
            if key == "deviceProperties":
                device = st.fixed_dictionaries({"id": JUNK, "numSms": JUNK})
                doc["deviceProperties"] = data.draw(st.one_of(JUNK, st.lists(device)))
            elif data.draw(st.booleans()):
                del target[key]
            else:
                target[key] = data.draw(JUNK)
        path = directory / "junk.json"
        path.write_text(json.dumps(doc))
        try:
            trace = load_trace(path)
        except TraceError:
            return
        assert len(trace.kernels) <= 6
        for name in trace.ranges["name"].unique().tolist()[:3]:
            cell_summary(trace, name)
        assert trace.num_sms is None or trace.num_sms > 0

    check()


def test_one_device_choice_for_sm_count_and_name(tmp_path: Path) -> None:
    """The kernels' most common device picks the deviceProperties entry, its id compared as an integer
    (1.0 is device 1); no kernel device, or no matching entry: the first entry."""
    props = [{"id": 0, "name": "GPU zero", "numSms": 100}, {"id": 1.0, "name": "GPU one", "numSms": 132}]
    events = [kernel_event(10, 1, device=1), kernel_event(20, 2, device=1), kernel_event(30, 3, device=0)]
    trace = load_trace(write_trace(tmp_path, {"traceEvents": events, "deviceProperties": props}))
    assert trace.device is not None and trace.device["name"] == "GPU one"
    assert (trace.num_sms, trace.device_name) == (132, "GPU one")
    others = load_trace(write_trace(tmp_path, {"traceEvents": [kernel_event(10, 1, device=5)], "deviceProperties": props}, "b.json"))
    assert (others.num_sms, others.device_name) == (100, "GPU zero")
    bare = load_trace(write_trace(tmp_path, {"traceEvents": events}, "c.json"))
    assert (bare.device, bare.num_sms, bare.device_name) == (None, None, None)


def test_kernels_in_range_any_depth_any_thread_of_the_process(tmp_path: Path) -> None:
    """The range's window on its process: nested ranges and other threads count, other processes do not;
    a launch on the window's end is inside."""
    events = [
        event("user_annotation", "cell", 0, 100, tid=1),
        event("user_annotation", "## Call CompiledFxGraph x ##", 10, 20, tid=1),
        event("user_annotation", "cell", 200, 100, tid=1),
        event("cuda_runtime", "cudaLaunchKernel", 15, 1, tid=1, correlation=1),  # nested range: call 0
        event("cuda_runtime", "cudaLaunchKernel", 100, 1, tid=2, correlation=2),  # other thread, on the end
        event("cuda_runtime", "cudaLaunchKernel", 150, 1, tid=1, correlation=3),  # between the calls
        event("cuda_runtime", "cudaLaunchKernel", 250, 1, pid=9, tid=1, correlation=4),  # other process
        event("cuda_runtime", "cudaLaunchKernel", 250, 1, tid=1, correlation=5),  # call 1
        *(kernel_event(400 + c, c) for c in (1, 2, 3, 4, 5)),
    ]
    trace = load_trace(write_trace(tmp_path, {"traceEvents": events}))
    inside = kernels_in_range(trace, "cell")
    assert inside["name"].tolist() == ["k1", "k2", "k5"] and inside["call"].tolist() == [0, 0, 1]
    assert trace.kernels["range"].tolist() == ["## Call CompiledFxGraph x ##", "cell", None, None, "cell"]
    assert ops_in_range(trace, "cell").empty


def test_ranges_in_range_are_the_nested_ones_only(tmp_path: Path) -> None:
    """Ranges starting inside an instance of ``cell`` (any depth, any thread of its process), never ``cell`` itself;
    one on the window's end is inside, one on another process or between the calls is not."""
    events = [
        event("user_annotation", "cell", 0, 100, tid=1),
        event("user_annotation", "triton-interpreter::k", 10, 20, tid=1),  # call 0
        event("user_annotation", "inner", 12, 5, tid=1),  # nested twice: call 0
        event("user_annotation", "other-thread", 100, 5, tid=2),  # on the end: call 0
        event("user_annotation", "between", 150, 5, tid=1),
        event("user_annotation", "cell", 200, 100, tid=1),
        event("user_annotation", "other-process", 250, 5, pid=9, tid=1),
        event("user_annotation", "triton-interpreter::k", 260, 5, tid=1),  # call 1
    ]
    trace = load_trace(write_trace(tmp_path, {"traceEvents": events}))
    inside = ranges_in_range(trace, "cell")
    assert inside["name"].tolist() == ["triton-interpreter::k", "inner", "other-thread", "triton-interpreter::k"]
    assert inside["call"].tolist() == [0, 0, 0, 1]
    assert ranges_in_range(trace, "absent").empty


# ---- hostile but readable traces ---------------------------------------------------------------------


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _kernel(name: str, ts: float, correlation: int, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": 5, "pid": 0, "tid": 7,
            "args": {"correlation": correlation, "grid": [4, 2, 1], "block": [128, 1, 1], **args}}


def _codes(t: Trace) -> dict[str, int]:
    return {w.code: w.count for w in t.warnings}


def test_a_numeric_cat_is_counted_in_a_warning(tmp_path: Path) -> None:
    """``"cat": 5`` (Kineto's ActivityType number for kernels) used to drop the event silently."""
    numeric = _kernel("k_numeric", 10, 2)
    numeric["cat"] = 5
    listed = _kernel("k_list", 20, 3)
    listed["cat"] = ["kernel"]
    t = load_trace(_write(tmp_path / "t.json", [_kernel("k_ok", 0, 1), numeric, listed]))
    assert list(t.kernels["name"]) == ["k_ok"]
    assert _codes(t)["bad_category"] == 2
    (w,) = [w for w in t.warnings if w.code == "bad_category"]
    assert "number (1)" in w.message and "list (1)" in w.message


def test_grid_as_an_object_or_too_short_is_counted_once_per_kernel(tmp_path: Path) -> None:
    """``"grid": {"x": 1}`` used to be read as missing without a warning."""
    events = [_kernel("k_ok", 0, 1), _kernel("k_object", 10, 2, grid={"x": 1}), _kernel("k_short", 20, 3, block=[128, 1])]
    t = load_trace(_write(tmp_path / "t.json", events))
    k = t.kernels.set_index("name")
    assert k.loc["k_ok", "ctas"] == 8 and pd.isna(k.loc["k_object", "grid_x"]) and pd.isna(k.loc["k_short", "block_z"])
    assert k.loc["k_short", "block_x"] == 128
    assert _codes(t)["bad_launch_dims"] == 2 and "bad_kernel_arg" not in _codes(t)
    (w,) = [w for w in t.warnings if w.code == "bad_launch_dims"]
    assert "grid (1)" in w.message and "block (1)" in w.message


def test_mtia_device_events_are_counted_and_named(tmp_path: Path) -> None:
    """An MTIA trace (device events in ``mtia_ccp_events``) used to look CPU-only."""
    events = [{"ph": "X", "cat": "mtia_ccp_events", "name": f"job{i % 7}", "ts": i, "dur": 1, "pid": 5, "tid": 1}
              for i in range(1313)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5, "pid": 1, "tid": 1, "args": {}})
    t = load_trace(_write(tmp_path / "t.json", events))
    assert t.kernels.empty and _codes(t)["other_accelerator"] == 1313
    (w,) = [w for w in t.warnings if w.code == "other_accelerator"]
    assert w.message.startswith("1,313 MTIA device event(s) (mtia_ccp_events)") and "CUDA/ROCm kernels only" in w.message


def test_a_name_of_megabytes_is_cut_with_a_warning(tmp_path: Path) -> None:
    """Every later step over names (family patterns, stems, the page) sees at most MAX_NAME_CHARS characters."""
    from profattn.trace.columns import MAX_NAME_CHARS

    long = "void cutlass::Kernel<" * 300_000  # 6.3 MB
    t = load_trace(_write(tmp_path / "t.json", [_kernel(long, 0, 1), _kernel(long, 10, 2), _kernel("short", 20, 3)]))
    names = list(t.kernels["name"])
    assert [len(n) for n in names] == [MAX_NAME_CHARS, MAX_NAME_CHARS, 5] and names[0] == long[:MAX_NAME_CHARS]
    assert _codes(t)["long_name"] == 1  # one distinct name
