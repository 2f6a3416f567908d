"""The one set of number formatters (:mod:`profattn.report.format`), on values measured in the committed
H200 seed run (examples/h200-seed): the run report, the analyze page and the CLI print them one way."""

from __future__ import annotations

from pathlib import Path

import pytest

from profattn.analysis.run.analyze import analyze_run
from profattn.report.format import (
    MISSING,
    md_bold,
    causal_text,
    fmt_bytes,
    fmt_count,
    fmt_err,
    fmt_flops_rate,
    fmt_opt,
    fmt_rate,
    flops_unit,
    fmt_shape,
    fmt_sig,
    fmt_span,
    fmt_us,
    fmt_us_column,
    launch_cells,
    short_kernel_name,
)

SEED_RUN = Path(__file__).resolve().parents[2] / "examples" / "h200-seed" / "results.json"
# The ceilings measured in that run (H200): device-to-device copy and bf16 8192³ GEMM.
COPY_GBPS, GEMM_TFLOPS = 4287.147447570407, 678.2285673273185


def test_fmt_us_keeps_three_to_four_digits_and_one_missing_text():
    assert fmt_us(5.0) == "5.00 µs"  # not "5.0 µs": one µs formatter for the verdict and the matrix
    assert fmt_us(14.688000082969666) == "14.7 µs"  # sdpa-flash, decode kv512
    assert fmt_us(2113.9360666275024) == "2,113.9 µs"  # sdpa-flash, train
    assert fmt_us(27186.863899230957) == "27.19 ms"  # sdpa-math, train: 10,000 µs and above in ms
    assert fmt_us(10_000.0) == "10.00 ms" and fmt_us(9_999.9) == "9,999.9 µs"
    assert fmt_us(None) == "–" == MISSING  # not "n/a"


def test_fmt_us_column_aligns_console_lines():
    assert fmt_us_column(14.688000082969666) == "      14.7 µs"
    assert fmt_us_column(27186.863899230957) == "   27186.9 µs"
    assert fmt_us_column(None) == " " * 13 == " " * len(fmt_us_column(1.0))


def test_fmt_span_uses_the_unit_of_the_median():
    assert fmt_span(14.1, 15.2, 14.688) == "14.1 – 15.2 µs"
    assert fmt_span(8304.3, 12000.0, 9000.0) == "8,304.3 – 12,000.0 µs"
    assert fmt_span(26900.0, 27400.0, 27186.9) == "26.90 – 27.40 ms"


def test_fmt_bytes_decimal_units():
    assert fmt_bytes(9898557952) == "9.9 GB"  # peak memory, sdpa-math train
    assert fmt_bytes(2147483648) == "2.1 GB"  # the copy ceiling's buffer
    assert fmt_bytes(134_217_728) == "134.2 MB"
    assert fmt_bytes(216064) == "216.1 kB"  # cuDNN's shared memory per CTA
    assert fmt_bytes(512) == "512 B" and fmt_bytes(0) == "0 B"
    assert fmt_bytes(None) == "n/a"


def test_rates_with_fraction_of_the_measured_ceiling():
    assert fmt_rate(575.6535915194863, "GB/s", COPY_GBPS) == "576 GB/s (13%)"
    assert fmt_rate(COPY_GBPS, "GB/s") == "4,287 GB/s"
    assert fmt_rate(None, "GB/s", COPY_GBPS) == "–"
    assert fmt_flops_rate(395.407655234641, GEMM_TFLOPS) == "395 TFLOP/s (58%)"  # cuDNN train
    assert fmt_flops_rate(0.26090469605147837) == "261 GFLOP/s"  # below 1 TFLOP/s
    assert fmt_flops_rate(None) == "–"
    # a decode cell's FLOP rate is a tiny fraction of the GEMM ceiling: two significant digits, never "0%"
    assert fmt_flops_rate(0.5, GEMM_TFLOPS) == "500 GFLOP/s (0.074%)"


def test_no_rate_prints_as_zero():
    """issue: a CPU run's matrix printed "0.0 GB/s" and "0.0 GFLOP/s" (one decimal) for small rates."""
    assert fmt_rate(0.0412, "GB/s") == "0.0412 GB/s"  # was "0.0 GB/s"
    assert fmt_rate(0.04, "GB/s", bare=True) == "0.0400"
    assert fmt_flops_rate(0.00002) == "0.0200 GFLOP/s"  # 2e-5 TFLOP/s; was "0.0 GFLOP/s"
    assert fmt_rate(57.64, "GB/s") == "57.6 GB/s" and fmt_rate(9.996, "GB/s") == "10.0 GB/s"
    assert [fmt_sig(v) for v in (0.000123456, 5.583, 55.83, 99.96, 1234.5, 0.0)] == ["0.000123", "5.58", "55.8", "100", "1,234", "0"]
    assert fmt_sig(None) == "–" and fmt_sig(0.0741, 2) == "0.074"


def test_flops_rate_in_the_unit_of_its_column():
    """One unit per column: the header carries it, every value under it is in it."""
    cpu = [0.0014, 0.0379, None]  # TFLOP/s of a CPU run: all below 1 TFLOP/s
    assert flops_unit(cpu) == "GFLOP/s" and flops_unit([0.5, 395.4]) == "TFLOP/s" and flops_unit([]) == "TFLOP/s"
    assert [fmt_flops_rate(v, unit="GFLOP/s", bare=True) for v in cpu] == ["1.40", "37.9", "–"]
    assert fmt_flops_rate(0.5, unit="TFLOP/s", bare=True) == "0.500"
    assert fmt_flops_rate(395.407655234641, GEMM_TFLOPS, unit="TFLOP/s", bare=True) == "395 (58%)"
    with pytest.raises(KeyError):
        fmt_flops_rate(1.0, unit="PFLOP/s")


def test_short_kernel_names_keep_what_identifies_the_kernel():
    """Kernel names of the committed H200 runs, shortened for the launch-shape table."""
    assert short_kernel_name("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
                             "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true>"
                             "(Flash_fwd_params)") == "flash_fwd_kernel"
    assert short_kernel_name("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nt_align1>"
                             "(cutlass_80_simt_sgemm_128x128_8x4_nt_align1::Params)") == "cutlass_80_simt_sgemm_128x128_8x4_nt_align1"
    assert short_kernel_name("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, "
                             "float, false, true, true, false, 5, false, cublasGemvParamsEx<int> >(int)") == "gemvx::kernel"
    assert short_kernel_name("void at::native::elementwise_kernel<128, 2, at::native::(anonymous namespace)::masked_fill_kernel"
                             "(at::TensorIterator&)::{lambda()#1}>(int)") == "elementwise_kernel"
    assert short_kernel_name("_paged_decode_split_kernel") == "_paged_decode_split_kernel"
    cudnn = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"
    assert short_kernel_name(cudnn) == cudnn[:59] + "…" and len(short_kernel_name(cudnn)) == 60


def test_fmt_count_si_suffixes():
    assert fmt_count(13460931.754691456) == "13.46 M"  # tokens/s, cuDNN train
    assert fmt_count(544662.3062915) == "544.66 k"
    assert fmt_count(2.5e12) == "2.50 T" and fmt_count(1.073741824e9) == "1.07 G"
    assert fmt_count(999) == "999" and fmt_count(None) == "–"


def test_fmt_err_scientific():
    assert fmt_err(0.0031622) == "3.2e-03" and fmt_err(0.0) == "0.0e+00" and fmt_err(None) == "–"


def test_shapes_optional_numbers_and_causal():
    assert fmt_shape((132, 1, 1)) == "[132, 1, 1]" and fmt_shape(None) == "n/a"
    assert fmt_opt(2048, ",") == "2,048" and fmt_opt(1.5, ".2f") == "1.50" and fmt_opt(None, "d") == "n/a"
    assert [causal_text(c) for c in (True, False, None)] == ["yes", "no", "unknown"]


def test_launch_cells_one_way_for_every_kernel_table():
    # cuDNN's fused attention kernel in the seed run's train cell
    assert launch_cells((132, 1, 1), (384, 1, 1), ctas=132, registers=168, smem_bytes=216064, blocks_per_sm=1.0,
                        ctas_per_sm=1.0) == {
        "grid": "[132, 1, 1]", "block": "[384, 1, 1]", "ctas": "132", "registers": "168", "smem": "216.1 kB",
        "blocks_per_sm": "1.00", "ctas_per_sm": "1.00"}
    eager = launch_cells((2097152, 1, 1), (128, 1, 1), ctas=2097152, registers=18, smem_bytes=0, blocks_per_sm=15887.515625)
    assert (eager["ctas"], eager["smem"], eager["blocks_per_sm"], eager["ctas_per_sm"]) == ("2,097,152", "0 B", "15887.52", "n/a")
    rocm = launch_cells(None, None, ctas=None, registers=None, smem_bytes=None)
    assert set(rocm.values()) == {"n/a"}


def test_seed_run_rows_use_these_formatters():
    """The run report's matrix shows each committed cell's latency exactly as fmt_us prints it."""
    from profattn.report.run import launch_rows, matrix_rows
    from profattn.results import read_results

    if not SEED_RUN.exists():
        pytest.fail(f"{SEED_RUN} is committed with the repository")
    run = read_results(SEED_RUN)
    rows = {r["cell_id"]: r for r in matrix_rows(analyze_run(run))}
    cells = [c for c in run.cells if c.graph_timing is None and c.timing is not None]
    assert cells
    for c in cells:
        assert rows[c.cell_id]["latency"] == fmt_us(c.timing.median_us)
    cudnn_cell = next(r for r in launch_rows(analyze_run(run)) if r["backend"] == "sdpa-cudnn" and r["phase"] == "train")
    cudnn = next(k for k in cudnn_cell["kernels"] if k["grid"] == "[132, 1, 1]")
    assert (cudnn["block"], cudnn["ctas"], cudnn["registers"]) == ("[384, 1, 1]", "132", "168")


def test_md_bold_keeps_code_spans_outside_the_bold():
    """The verdict was ``**… measured: \\`profattn profile --regime all\\` adds …**``: GitHub does not render a
    code span nested in bold, so the command showed with stray backticks. Each bold run now stops at a span profattn
    wrote; any other backtick (a name from a run) stays escaped text."""
    own = ("profattn profile --regime all", "b_c")
    sentence = "Only decode was measured: `profattn profile --regime all` adds the other regimes."
    assert md_bold(sentence, code=own) == ("**Only decode was measured:** `profattn profile --regime all` "
                                           "**adds the other regimes.**")
    assert md_bold("`b_c` and `b_c`", code=own) == "`b_c` **and** `b_c`"  # a span's content literal, never escaped
    assert md_bold("x_y `c` *z*", code=own) == "**x\\_y \\`c\\` \\*z\\***"  # not profattn's: text, escaped
    assert md_bold("no span") == "**no span**" and md_bold("") == ""
