"""Tests for profattn.trace.counters: the real H200 ncu fixture, unit scaling, malformed input, fuzzing."""

from __future__ import annotations

import csv
import functools
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profattn.trace.counters import (
    KERNEL_COLUMNS,
    L2_SECTOR_BYTES,
    METRICS,
    UNIT_SCALE,
    CounterError,
    NcuReport,
    parse_ncu_csv,
)
from conftest import ncu_fixture
from profattn.trace.counter_sums import RANGE_COUNTER_COLUMNS, counters_by_range, sum_counters
from profattn.errors import ProfattnError

# ----------------------------------------------------------------------------------------------------
# Fixture location and helpers
# ----------------------------------------------------------------------------------------------------


DECODE = "h200_sdpa_decode_kv8192_raw.csv"
SPLITKV = "flash_fwd_splitkv_kernel<"
COMBINE = "flash_fwd_splitkv_combine_kernel"
# K and V of the seed decode (B=8, Hq=16, Hkv=4, d=128, bf16, kv 8192): 2 x 8 x 8192 x 4 x 128 x 2 bytes.
KV_BYTES = 2 * 8 * 8192 * 4 * 128 * 2
assert KV_BYTES == 134_217_728

PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
START_END = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
PERM_ERROR = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
    "on the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)
LIB_ERROR = "==ERROR== Failed to initialize the profiler: LibraryNotLoaded"


@functools.cache
def _parsed(path: Path) -> NcuReport:
    return parse_ncu_csv(path)


def decode_report() -> NcuReport:
    """The parsed decode fixture (parsed once; tests must not mutate it)."""
    return _parsed(ncu_fixture(DECODE))


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


@functools.cache
def _hand_rows(path: Path) -> tuple[dict[str, str], tuple[dict[str, str], ...]]:
    """The fixture read independently with the csv module: (units by column, kernel rows by column)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    header, units, *rows = csv.reader(lines[start:])
    return dict(zip(header, units)), tuple(dict(zip(header, row)) for row in rows)


def hand_rows() -> tuple[dict[str, str], tuple[dict[str, str], ...]]:
    return _hand_rows(ncu_fixture(DECODE))


def innermost_range(row: Mapping[str, str]) -> str | None:
    """The range name of the fixture's push/pop cell, by string surgery (fixture has one range per kernel)."""
    cell = row[PUSH_POP]
    if not cell.strip():
        return None
    return cell.split('"')[1].split(":")[1]


def ncu_text(
    metrics: Mapping[str, tuple[str, Sequence[str]]],
    *,
    ranges: Sequence[str] = (),
    start_end: Sequence[str] = (),
    preamble: Sequence[str] = ("==PROF== Connected to process 7 (/usr/bin/python3)", "==PROF== Disconnected"),
    trailer: Sequence[str] = (),
    units_row: bool = True,
    newline: str = "\n",
) -> str:
    """A small ``ncu --csv --page raw --nvtx`` text: ``metrics`` maps a column to (unit, per-kernel cells)."""
    n = max((len(cells) for _, cells in metrics.values()), default=len(ranges))
    header = ["ID", "Process ID", "Kernel Name", PUSH_POP, START_END, "Block Size", "Grid Size", *metrics]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator=newline)
    writer.writerow(header)
    if units_row:
        writer.writerow(["", "", "", "", "", "", "", *(unit for unit, _ in metrics.values())])
    for i in range(n):
        writer.writerow(
            [
                str(i),
                "7",
                f"kernel_{i}",
                ranges[i] if i < len(ranges) else "",
                start_end[i] if i < len(start_end) else "",
                "(128, 1, 1)",
                f"({i + 1}, 2, 1)",
                *(cells[i] for _, cells in metrics.values()),
            ]
        )
    return newline.join([*preamble, ""]) + out.getvalue() + newline.join([*trailer, ""] if trailer else [])


def push_pop(*names: str, tid: int = 590) -> str:
    """A push/pop cell as ncu writes it: thread id, then one quoted entry per open range."""
    return f"{tid}  " + " ".join(f'"<default domain>:{n}:none:none:none:none:none:none"' for n in names) + " "


# ----------------------------------------------------------------------------------------------------
# The real fixture
# ----------------------------------------------------------------------------------------------------


def test_fixture_shape_and_preamble() -> None:
    r = decode_report()
    assert isinstance(r, NcuReport)
    assert r.path is not None and r.path.endswith(DECODE)
    assert list(r.kernels.columns) == list(KERNEL_COLUMNS)
    assert r.kernels["id"].tolist() == list(range(21))
    assert (r.kernels["pid"] == 590).all()
    assert r.preamble == (
        "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling results "
        "may be inconsistent.",
        "==PROF== Connected to process 590 (/usr/bin/python3.12)",
        "==PROF== Disconnected from process 590",
    )
    assert r.errors == ()
    # the three input-initialisation kernels ran outside any NVTX range
    assert r.kernels["range"].tolist() == [None] * 3 + ["flash_gqa"] * 2 + ["math_gqa"] * 16
    assert r.kernels["ranges"].tolist()[:4] == [(), (), (), ("flash_gqa",)]


def test_fixture_splitkv_kernel_known_numbers() -> None:
    k = decode_report().kernels
    split = k[k["name"].str.contains(SPLITKV, regex=False)]
    assert len(split) == 1
    row = split.iloc[0]
    assert row["id"] == 3 and row["range"] == "flash_gqa"
    assert row["grid"] == (1, 7, 32) and row["block"] == (128, 1, 1)
    assert row["grid_size"] == 224 and row["block_size"] == 128
    assert row["registers_per_thread"] == 246
    assert row["shared_mem_dynamic_bytes"] == 81_920 and row["shared_mem_static_bytes"] == 0
    assert row["waves_per_sm"] == pytest.approx(0.85)
    assert row["dram_read_bytes"] == 134_311_680
    assert row["dram_write_bytes"] == 402_944
    assert row["l2_read_sectors"] == 4_196_840
    assert row["l2_to_sm_read_bytes"] == 134_298_880 == 4_196_840 * 32
    assert row["l1_global_load_bytes"] == 134_447_104
    assert row["gpu_time_us"] == pytest.approx(41.6)  # 41,600 ns
    # flash-decoding reads K and V (almost) exactly once from DRAM
    assert row["dram_read_bytes"] / KV_BYTES == pytest.approx(1.0007, abs=1e-4)

    combine = k[k["name"].str.contains(COMBINE, regex=False)].iloc[0]
    assert combine["grid"] == (32, 1, 1) and combine["registers_per_thread"] == 52
    assert combine["shared_mem_static_bytes"] == 160 and combine["gpu_time_us"] == pytest.approx(7.136)


def test_fixture_every_kernel_matches_hand_read() -> None:
    units, rows = hand_rows()
    # the fixture is in base units; the hand conversion below relies on it
    assert units["dram__bytes_read.sum"] == "byte" and units["gpu__time_duration.sum"] == "ns"
    assert units["lts__t_sectors_srcunit_tex_op_read.sum"] == "sector"
    k = decode_report().kernels
    assert len(k) == len(rows)
    for (_, got), row in zip(k.iterrows(), rows):
        assert got["id"] == int(row["ID"])
        assert got["name"] == row["Kernel Name"]
        assert got["range"] == innermost_range(row)
        assert got["grid"] == tuple(int(v) for v in row["Grid Size"].strip("()").split(","))
        assert got["block"] == tuple(int(v) for v in row["Block Size"].strip("()").split(","))
        assert got["grid_size"] == _number(row["launch__grid_size"]) == math.prod(got["grid"])
        assert got["block_size"] == _number(row["launch__block_size"]) == math.prod(got["block"])
        assert got["registers_per_thread"] == _number(row["launch__registers_per_thread"])
        assert got["shared_mem_dynamic_bytes"] == _number(row["launch__shared_mem_per_block_dynamic"])
        assert got["shared_mem_static_bytes"] == _number(row["launch__shared_mem_per_block_static"])
        assert got["waves_per_sm"] == _number(row["launch__waves_per_multiprocessor"])
        assert got["dram_read_bytes"] == _number(row["dram__bytes_read.sum"])
        assert got["dram_write_bytes"] == _number(row["dram__bytes_write.sum"])
        assert got["l2_read_sectors"] == _number(row["lts__t_sectors_srcunit_tex_op_read.sum"])
        assert got["l2_to_sm_read_bytes"] == 32 * _number(row["lts__t_sectors_srcunit_tex_op_read.sum"])
        assert got["l1_global_load_bytes"] == _number(row["l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum"])
        assert got["gpu_time_us"] == pytest.approx(_number(row["gpu__time_duration.sum"]) / 1000)


def test_fixture_dtypes() -> None:
    k = decode_report().kernels
    assert k["id"].dtype == "int64"
    for column in ("pid", "grid_size", "block_size", "registers_per_thread"):
        assert k[column].dtype == "Int64", column
    for column in KERNEL_COLUMNS:
        if column.endswith(("_bytes", "_us", "_sectors")) or column == "waves_per_sm":
            assert k[column].dtype == "float64", column


def test_counters_by_range_equals_hand_sums() -> None:
    _, rows = hand_rows()
    by_range = counters_by_range(decode_report())
    assert list(by_range.columns) == list(RANGE_COUNTER_COLUMNS)
    assert by_range["range"].tolist() == ["flash_gqa", "math_gqa"]  # first-appearance order, no None row
    assert by_range["kernels"].dtype == "int64"
    for name in ("flash_gqa", "math_gqa"):
        mine = [r for r in rows if innermost_range(r) == name]
        got = by_range.set_index("range").loc[name]
        read = sum(_number(r["dram__bytes_read.sum"]) for r in mine)
        write = sum(_number(r["dram__bytes_write.sum"]) for r in mine)
        assert got["kernels"] == len(mine)
        assert got["dram_read_bytes"] == read
        assert got["dram_write_bytes"] == write
        assert got["dram_bytes"] == read + write
        sectors = sum(_number(r["lts__t_sectors_srcunit_tex_op_read.sum"]) for r in mine)
        assert got["l2_to_sm_read_bytes"] == 32 * sectors
        l1 = sum(_number(r["l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum"]) for r in mine)
        assert got["l1_global_load_bytes"] == l1
        assert got["gpu_time_us"] == pytest.approx(sum(_number(r["gpu__time_duration.sum"]) for r in mine) / 1000)


def test_counters_by_range_known_numbers() -> None:
    by_range = counters_by_range(decode_report()).set_index("range")
    flash, math_ = by_range.loc["flash_gqa"], by_range.loc["math_gqa"]
    assert flash["kernels"] == 2 and math_["kernels"] == 16
    assert flash["dram_read_bytes"] == 134_311_680 + 485_376
    assert flash["dram_write_bytes"] == 402_944
    assert flash["gpu_time_us"] == pytest.approx(41.6 + 7.136)
    # flash reads K/V once; the math path materialises scores and copies, moving several times as much
    assert flash["dram_read_bytes"] / KV_BYTES == pytest.approx(1.0, abs=0.01)
    assert math_["dram_bytes"] > 2 * KV_BYTES
    assert math_["dram_bytes"] / flash["dram_bytes"] > 20


# ----------------------------------------------------------------------------------------------------
# Units
# ----------------------------------------------------------------------------------------------------


def test_unit_scale_table() -> None:
    assert UNIT_SCALE["byte"] == ("bytes", 1.0)
    assert UNIT_SCALE["Kbyte"] == ("bytes", 1e3)
    assert UNIT_SCALE["Mbyte"] == ("bytes", 1e6)
    assert UNIT_SCALE["Gbyte"] == ("bytes", 1e9)
    assert UNIT_SCALE["Tbyte"] == ("bytes", 1e12)
    assert UNIT_SCALE["ns"] == UNIT_SCALE["nsecond"] == ("us", 1e-3)
    assert UNIT_SCALE["usecond"] == UNIT_SCALE["us"] == ("us", 1.0)
    assert UNIT_SCALE["msecond"] == UNIT_SCALE["ms"] == ("us", 1e3)
    assert UNIT_SCALE["second"] == UNIT_SCALE["s"] == ("us", 1e6)
    assert UNIT_SCALE["sector"] == ("sectors", 1.0)
    assert UNIT_SCALE["byte/block"] == ("bytes", 1.0)
    assert UNIT_SCALE["register/thread"] == ("registers", 1.0)


def test_metrics_requested() -> None:
    assert METRICS == (
        "launch__grid_size",
        "launch__block_size",
        "launch__registers_per_thread",
        "launch__shared_mem_per_block_dynamic",
        "launch__shared_mem_per_block_static",
        "launch__waves_per_multiprocessor",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_sectors_srcunit_tex_op_read.sum",
        "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
        "gpu__time_duration.sum",
    )
    assert L2_SECTOR_BYTES == 32


@pytest.mark.parametrize(
    ("column", "unit", "cells", "field", "expected"),
    [
        ("dram__bytes_read.sum", "Kbyte", ["1.50", "2,048"], "dram_read_bytes", [1_500.0, 2_048_000.0]),
        ("dram__bytes_read.sum", "Mbyte", ["134.31", "0.25"], "dram_read_bytes", [134_310_000.0, 250_000.0]),
        ("dram__bytes_write.sum", "Gbyte", ["1.07", "2"], "dram_write_bytes", [1_070_000_000.0, 2e9]),
        ("dram__bytes_write.sum", "byte", ["816,165", "0"], "dram_write_bytes", [816_165.0, 0.0]),
        ("l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum", "Kbyte", ["3.53", "1"], "l1_global_load_bytes", [3530.0, 1e3]),
        ("gpu__time_duration.sum", "usecond", ["41.60", "1,234.5"], "gpu_time_us", [41.6, 1_234.5]),
        ("gpu__time_duration.sum", "msecond", ["1.25", "0.5"], "gpu_time_us", [1_250.0, 500.0]),
        ("gpu__time_duration.sum", "ns", ["41,600", "7,136"], "gpu_time_us", [41.6, 7.136]),
        ("gpu__time_duration.sum", "nsecond", ["2,656", "1"], "gpu_time_us", [2.656, 0.001]),
        ("gpu__time_duration.sum", "second", ["0.001", "2"], "gpu_time_us", [1_000.0, 2e6]),
        ("lts__t_sectors_srcunit_tex_op_read.sum", "sector", ["4,196,840", "3"], "l2_read_sectors", [4_196_840.0, 3.0]),
        ("launch__shared_mem_per_block_dynamic", "Kbyte/block", ["81.92", "0"], "shared_mem_dynamic_bytes", [81920, 0]),
        ("launch__shared_mem_per_block_static", "byte/block", ["160", "16"], "shared_mem_static_bytes", [160.0, 16.0]),
    ],
)
def test_units_are_normalised(column: str, unit: str, cells: list[str], field: str, expected: list[float]) -> None:
    k = parse_ncu_csv(text=ncu_text({column: (unit, cells)})).kernels
    assert k[field].tolist() == pytest.approx(expected, rel=1e-12)


def test_scaled_values_are_exact_decimal() -> None:
    # decimal scaling, not float multiplication: 41,600 ns is the float nearest 41.6, 134.31 Mbyte exact
    k = parse_ncu_csv(
        text=ncu_text({"gpu__time_duration.sum": ("ns", ["41,600"]), "dram__bytes_read.sum": ("Mbyte", ["134.31"])})
    ).kernels
    assert k["gpu_time_us"].iloc[0] == 41.6
    assert k["dram_read_bytes"].iloc[0] == 134_310_000.0


def test_l2_sectors_scale_to_bytes() -> None:
    k = parse_ncu_csv(text=ncu_text({"lts__t_sectors_srcunit_tex_op_read.sum": ("Ksector", ["4.5"])})).kernels
    assert k["l2_read_sectors"].iloc[0] == 4_500
    assert k["l2_to_sm_read_bytes"].iloc[0] == 4_500 * 32


def test_unknown_unit_on_used_metric_is_an_error() -> None:
    text = ncu_text({"dram__bytes_read.sum": ("Pbyte", ["1"])})
    with pytest.raises(CounterError, match=r"dram__bytes_read\.sum.*'Pbyte'") as info:
        parse_ncu_csv("run.csv", text=text)
    assert str(info.value).startswith("run.csv: ")
    assert "\n" not in str(info.value)


def test_unit_of_the_wrong_kind_is_an_error() -> None:
    with pytest.raises(CounterError, match=r"gpu__time_duration\.sum.*'byte'"):
        parse_ncu_csv(text=ncu_text({"gpu__time_duration.sum": ("byte", ["1"])}))
    with pytest.raises(CounterError, match=r"dram__bytes_write\.sum.*'msecond'"):
        parse_ncu_csv(text=ncu_text({"dram__bytes_write.sum": ("msecond", ["1"])}))


def test_unknown_unit_on_unused_column_is_ignored() -> None:
    k = parse_ncu_csv(
        text=ncu_text({"sm__warps_active.avg.pct_of_peak": ("furlong", ["x"]), "dram__bytes_read.sum": ("byte", ["8"])})
    ).kernels
    assert k["dram_read_bytes"].tolist() == [8.0]


def test_missing_metrics_are_nan_not_errors() -> None:
    k = parse_ncu_csv(text=ncu_text({"dram__bytes_read.sum": ("byte", ["1,024", "2,048"])})).kernels
    assert list(k.columns) == list(KERNEL_COLUMNS)
    assert k["dram_read_bytes"].tolist() == [1024.0, 2048.0]
    for column in ("dram_write_bytes", "l2_read_sectors", "l2_to_sm_read_bytes", "gpu_time_us", "waves_per_sm"):
        assert k[column].isna().all(), column
    assert k["registers_per_thread"].isna().all()
    # without launch__grid_size/launch__block_size, the counts come from "Grid Size"/"Block Size"
    assert k["grid_size"].tolist() == [2, 4]
    assert k["block_size"].tolist() == [128, 128]


def test_na_cells_are_missing() -> None:
    k = parse_ncu_csv(text=ncu_text({"dram__bytes_read.sum": ("byte", ["n/a", ""])})).kernels
    assert k["dram_read_bytes"].isna().all()


# ----------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("error_line", [PERM_ERROR, LIB_ERROR])
def test_only_error_lines(tmp_path: Path, error_line: str) -> None:
    path = tmp_path / "ncu.csv"
    path.write_text(f"==PROF== Connected to process 12 (/usr/bin/python3)\n{error_line}\n==PROF== Disconnected\n")
    with pytest.raises(CounterError) as info:
        parse_ncu_csv(path)
    message = str(info.value)
    assert error_line in message
    assert message.startswith(str(path))
    assert "\n" not in message
    assert isinstance(info.value, ProfattnError) and info.value.exit_code == 2


def test_no_header_without_errors(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("hello from the program\n")
    with pytest.raises(CounterError, match=r'empty\.csv: no ncu CSV header row'):
        parse_ncu_csv(path)
    with pytest.raises(CounterError, match="no ncu CSV header row"):
        parse_ncu_csv(text="")


def test_missing_units_row() -> None:
    text = ncu_text({"dram__bytes_read.sum": ("byte", ["1"])}, units_row=False)
    with pytest.raises(CounterError, match="units row"):
        parse_ncu_csv("x.csv", text=text)
    with pytest.raises(CounterError, match="units row"):
        parse_ncu_csv(text='"ID","Kernel Name"\n')


def test_garbage_number_names_column_and_kernel() -> None:
    text = ncu_text({"dram__bytes_read.sum": ("byte", ["1,024", "12x4"])})
    with pytest.raises(CounterError, match=r"kernel ID 1 .*dram__bytes_read\.sum.*'12x4'"):
        parse_ncu_csv("bad.csv", text=text)


@pytest.mark.parametrize("cell", ["1,2,3", "1,0000", ",100", "1.2.3", "0x10", "1_000", "nan", "--1"])
def test_malformed_numbers_are_errors(cell: str) -> None:
    with pytest.raises(CounterError, match="as a number"):
        parse_ncu_csv(text=ncu_text({"gpu__time_duration.sum": ("ns", [cell])}))


def test_non_integer_count_is_an_error() -> None:
    with pytest.raises(CounterError, match=r"launch__registers_per_thread.*not an integer"):
        parse_ncu_csv(text=ncu_text({"launch__registers_per_thread": ("register/thread", ["24.5"])}))


def test_garbage_id_and_grid() -> None:
    good = ncu_text({"dram__bytes_read.sum": ("byte", ["1"])})
    with pytest.raises(CounterError, match=r"'ID'.*'zero'"):
        parse_ncu_csv(text=good.replace('"0","7"', '"zero","7"'))
    with pytest.raises(CounterError, match=r"'Grid Size'.*'\(1, 2\)'"):
        parse_ncu_csv(text=good.replace('"(1, 2, 1)"', '"(1, 2)"'))


def test_ragged_row_is_an_error() -> None:
    text = ncu_text({"dram__bytes_read.sum": ("byte", ["1", "2"])})
    truncated = text[: text.rindex(",")] + "\n"  # the last row loses its last cell
    with pytest.raises(CounterError, match=r"line \d+ has \d+ cells"):
        parse_ncu_csv(text=truncated)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(CounterError, match=r"nope\.csv: no such ncu CSV file"):
        parse_ncu_csv(missing)
    with pytest.raises(CounterError, match="cannot read"):
        parse_ncu_csv(tmp_path)  # a directory


# ----------------------------------------------------------------------------------------------------
# No data, preamble, trailing lines, sources
# ----------------------------------------------------------------------------------------------------


def test_zero_kernel_rows_is_empty_not_error() -> None:
    text = "==PROF== Disconnected from process 7\n==WARNING== No kernels were profiled.\n" + ncu_text(
        {"dram__bytes_read.sum": ("byte", [])}, preamble=()
    )
    r = parse_ncu_csv(text=text)
    assert r.kernels.empty and list(r.kernels.columns) == list(KERNEL_COLUMNS)
    assert r.kernels["dram_read_bytes"].dtype == "float64"
    by_range = counters_by_range(r)
    assert by_range.empty and list(by_range.columns) == list(RANGE_COUNTER_COLUMNS)
    assert r.preamble == ("==PROF== Disconnected from process 7", "==WARNING== No kernels were profiled.")


def test_program_stdout_before_header_is_skipped() -> None:
    stdout = [
        "==PROF== Connected to process 7 (/usr/bin/python3)",
        "step,loss",
        '"IDX","not","a","header"',
        "0,1.25",
        "",
        "benchmark: flash 41.6 us",
        "==WARNING== Note: Running with unmodified GPU clocks.",
        "==PROF== Disconnected from process 7",
    ]
    r = parse_ncu_csv(text=ncu_text({"dram__bytes_read.sum": ("byte", ["5", "6"])}, preamble=stdout))
    assert r.kernels["dram_read_bytes"].tolist() == [5.0, 6.0]
    assert r.preamble == tuple(line for line in stdout if line)


def test_marker_lines_after_table_and_errors_anywhere() -> None:
    failed = '==ERROR== Failed to profile "kernel_9" in process 7'
    text = ncu_text(
        {"dram__bytes_read.sum": ("byte", ["5"])},
        preamble=["==PROF== Connected to process 7", failed],
        trailer=["==WARNING== Found outstanding GPU clock reset, trying to revert...Success.", LIB_ERROR, ""],
    )
    r = parse_ncu_csv(text=text)
    assert r.kernels["id"].tolist() == [0]
    assert r.errors == (failed, LIB_ERROR)


def test_crlf_line_endings() -> None:
    text = ncu_text({"gpu__time_duration.sum": ("usecond", ["1.5", "2"])}, newline="\r\n")
    r = parse_ncu_csv(text=text)
    assert r.kernels["gpu_time_us"].tolist() == [1.5, 2.0]
    assert all("\r" not in line for line in r.preamble)


def test_sources(tmp_path: Path) -> None:
    text = ncu_text({"dram__bytes_read.sum": ("Kbyte", ["2"])})
    path = tmp_path / "run.csv"
    path.write_text(text)
    for source in (path, str(path)):
        r = parse_ncu_csv(source)
        assert r.path == str(path) and r.kernels["dram_read_bytes"].tolist() == [2000.0]
    with open(path) as f:
        assert parse_ncu_csv(f).path == str(path)
    stream = parse_ncu_csv(io.StringIO(text))
    assert stream.path is None and stream.kernels["dram_read_bytes"].tolist() == [2000.0]
    assert parse_ncu_csv(text=text).path is None
    assert parse_ncu_csv("label.csv", text=text).path == "label.csv"
    with pytest.raises(TypeError):
        parse_ncu_csv()


# ----------------------------------------------------------------------------------------------------
# NVTX ranges
# ----------------------------------------------------------------------------------------------------


def test_nested_push_pop_takes_innermost() -> None:
    text = ncu_text(
        {"dram__bytes_read.sum": ("byte", ["1", "2", "3"])},
        ranges=[push_pop("bench", "decode", "flash_gqa"), push_pop("bench"), ""],
    )
    k = parse_ncu_csv(text=text).kernels
    assert k["range"].tolist() == ["flash_gqa", "bench", None]
    assert k["ranges"].tolist() == [("bench", "decode", "flash_gqa"), ("bench",), ()]


def test_start_end_ranges_preferred() -> None:
    start_end = [
        '1  "<default domain>:window:none:none:none:none:none:none" '
        '4  "profattn:cell_3:none:none:none:none:none:none" ',
        '"5:<default domain>:run:none:none:none:none:none:none"',
        "",
    ]
    text = ncu_text(
        {"dram__bytes_read.sum": ("byte", ["1", "2", "3"])},
        ranges=[push_pop("outer"), "", push_pop("only_push")],
        start_end=start_end,
    )
    k = parse_ncu_csv(text=text).kernels
    assert k["range"].tolist() == ["cell_3", "run", "only_push"]
    assert k["ranges"].tolist() == [("outer", "window", "cell_3"), ("run",), ("only_push",)]


def test_range_names_with_colons() -> None:
    text = ncu_text({"dram__bytes_read.sum": ("byte", ["1"])}, ranges=[push_pop("decode:flash:gqa")])
    assert parse_ncu_csv(text=text).kernels["range"].tolist() == ["decode:flash:gqa"]


def test_counters_by_range_skips_unranged_and_nan_is_contagious() -> None:
    text = ncu_text(
        {
            "dram__bytes_read.sum": ("Kbyte", ["1", "2", "4", "8"]),
            "dram__bytes_write.sum": ("byte", ["10", "n/a", "30", "40"]),
            "gpu__time_duration.sum": ("usecond", ["1", "2", "3", "4"]),
        },
        ranges=[push_pop("a"), push_pop("b"), push_pop("a"), ""],
    )
    by_range = counters_by_range(parse_ncu_csv(text=text)).set_index("range")
    assert by_range.index.tolist() == ["a", "b"]
    assert by_range.loc["a", "kernels"] == 2
    assert by_range.loc["a", "dram_read_bytes"] == 5_000
    assert by_range.loc["a", "dram_write_bytes"] == 40
    assert by_range.loc["a", "dram_bytes"] == 5_040
    assert by_range.loc["a", "gpu_time_us"] == 4
    assert by_range.loc["b", "dram_read_bytes"] == 2_000
    assert math.isnan(by_range.loc["b", "dram_write_bytes"]) and math.isnan(by_range.loc["b", "dram_bytes"])
    assert math.isnan(by_range.loc["a", "l2_to_sm_read_bytes"])  # metric absent altogether


# ----------------------------------------------------------------------------------------------------
# Fuzzing
# ----------------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    ints=st.lists(st.integers(min_value=0, max_value=10**15), min_size=1, max_size=6),
    cents=st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=6),
)
def test_thousands_separators_round_trip(ints: list[int], cents: list[int]) -> None:
    n = min(len(ints), len(cents))
    ints, cents = ints[:n], cents[:n]
    text = ncu_text(
        {
            "dram__bytes_read.sum": ("byte", [f"{v:,}" for v in ints]),
            "launch__grid_size": ("", [f"{v:,}" for v in ints]),
            "gpu__time_duration.sum": ("usecond", [f"{v // 100:,}.{v % 100:02d}" for v in cents]),
        }
    )
    k = parse_ncu_csv(text=text).kernels
    assert k["dram_read_bytes"].tolist() == [float(v) for v in ints]
    assert k["grid_size"].tolist() == ints
    assert k["gpu_time_us"].tolist() == [float(f"{v // 100}.{v % 100:02d}") for v in cents]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_arbitrary_text_never_crashes(junk: str) -> None:
    try:
        parse_ncu_csv(text=junk)
    except CounterError as e:
        assert "\n" not in str(e)


# ----------------------------------------------------------------------------------------------------
# One sum rule: counters_by_range and the per-cell CounterSummary agree, missing stays missing
# ----------------------------------------------------------------------------------------------------


def _partial_report():
    text = ncu_text(
        {
            "dram__bytes_read.sum": ("Kbyte", ["1", "2", "4"]),
            "dram__bytes_write.sum": ("byte", ["10", "n/a", "30"]),
            "gpu__time_duration.sum": ("usecond", ["1", "2", "3"]),
        },
        ranges=[push_pop("cell"), push_pop("cell"), push_pop("other")],
    )
    return parse_ncu_csv(text=text)


def test_sum_counters_labels_missing_values() -> None:
    report = _partial_report()
    per_range = sum_counters(report.kernels, by="range").set_index("range")
    assert per_range.loc["cell", "kernels"] == 2 and per_range.loc["cell", "dram_read_bytes"] == 3_000
    assert math.isnan(per_range.loc["cell", "dram_write_bytes"]) and math.isnan(per_range.loc["cell", "dram_bytes"])
    assert per_range.loc["cell", "missing_dram_write_bytes"] == 1 and per_range.loc["cell", "missing_dram_read_bytes"] == 0
    assert per_range.loc["cell", "missing_l2_to_sm_read_bytes"] == 2  # not in the CSV at all
    assert per_range.loc["other", "dram_bytes"] == 4_030 and per_range.loc["other", "missing_dram_bytes"] == 0
    whole = sum_counters(report.kernels).iloc[0]
    assert whole["kernels"] == 3 and whole["dram_read_bytes"] == 7_000 and math.isnan(whole["dram_write_bytes"])
    assert whole["gpu_time_us"] == 6 and whole["missing_dram_write_bytes"] == 1
    assert sum_counters(report.kernels.iloc[:0]).empty


def test_cell_counter_summary_keeps_missing_missing() -> None:
    """Before: analysis.counter_summary filled a missing value with 0 (dram_write_bytes 10, a partial
    sum); now it is None like counters_by_range's NaN, and the kernels lacking it are counted."""
    from profattn.analysis.run.cells import counter_summary

    kernels = _partial_report().kernels
    summary = counter_summary(kernels[kernels["range"] == "cell"])
    by_range = counters_by_range(_partial_report()).set_index("range")
    assert summary.dram_read_bytes == by_range.loc["cell", "dram_read_bytes"] == 3_000
    assert summary.dram_write_bytes is None and summary.dram_bytes is None
    assert summary.l2_to_sm_read_bytes is None and summary.gpu_time_us == 3
    assert summary.kernels_lacking == {"dram_write_bytes": 1, "l2_to_sm_read_bytes": 2, "l1_global_load_bytes": 2}
    other = counter_summary(kernels[kernels["range"] == "other"])
    assert other.dram_bytes == 4_030 and other.dram_write_bytes == 30


def test_results_json_without_kernels_lacking_still_reads(tmp_path: Path) -> None:
    """The committed H200 run predates ``kernels_lacking``: it reads with complete sums, and writes back
    with the field."""
    from profattn.results import read_results, write_results

    run = read_results(Path(__file__).resolve().parents[2] / "examples" / "h200-seed" / "results.json")
    measured = [c for c in run.cells if c.counters is not None]
    assert len(measured) == 34 and all(c.counters.kernels_lacking == {} for c in measured)
    flash = next(c for c in measured if c.cell_id.startswith("decode_b8_q1_kv8192") and c.backend == "sdpa-flash")
    assert flash.counters.dram_bytes == flash.counters.dram_read_bytes + flash.counters.dram_write_bytes > 0
    again = read_results(write_results(run, tmp_path / "results.json"))
    assert again.cells == run.cells
