"""profattn compare on synthetic runs with known differences, the rank-sum interval, exit codes."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import SEED, cell, environment, kernel, repeated, run, with_repeat

from profattn.analysis.common.stats import hodges_lehmann_ratio, u_cdf
from profattn.analysis.comparison.compare import (
    CompareClass,
    CompareError,
    compare_runs,
    parse_threshold,
)
from profattn.cli import main
from profattn.report.compare import correctness_text, launch_change_text, regression_texts
from profattn.results import (
    CellStatus,
    Correctness,
    CounterSummary,
    read_results,
    write_results,
)

REPO = Path(__file__).resolve().parents[3]
BACKENDS = {"sdpa-flash": 100.0, "sdpa-cudnn": 90.0, "triton-paged-decode": 80.0}


def samples(rng: random.Random, center: float, n: int = 5, spread: float = 0.01) -> list[float]:
    """``n`` timing medians around ``center`` µs with a realistic 1 % (σ) run-to-run spread."""
    return [center * (1 + rng.gauss(0, spread)) for _ in range(n)]


def pair(*, seed: int = 0, factors: dict[str, float] | None = None, n: int = 5):
    """A base and a head run of the seed preset (5 workloads × 3 backends), each cell with ``n`` samples;
    head = base latency × ``factors[cell_id]`` (1.0 otherwise), independent noise on each side."""
    rng = random.Random(seed)
    base, head = [], []
    for i, w in enumerate(SEED.workloads):
        for b, lat in BACKENDS.items():
            c = cell(w, b, lat * (1 + i))
            f = (factors or {}).get(c.cell_id, 1.0)
            base.append(repeated(c, samples(rng, lat * (1 + i), n)))
            head.append(repeated(c, samples(rng, lat * (1 + i) * f, n)))
    return with_repeat(run(base), n), with_repeat(run(head), n)


def decode_id(backend: str, kv: int = 8192) -> str:
    w = next(w for w in SEED.workloads if w.phase.value == "decode" and w.kv_len == kv)
    return f"{w.tag}.{backend}"


def test_rank_sum_interval_exact_values():
    # P(U <= 2) for 5 + 5 = 4/252 (counts 1, 1, 2 of C(10, 5) = 252), so the 95 % interval is [d(3), d(23)].
    assert u_cdf(2, 5, 5) == pytest.approx(4 / 252)
    est = hodges_lehmann_ratio([1.0, 2.0, 3.0, 4.0, 5.0], [x * 1.5 for x in (1.0, 2.0, 3.0, 4.0, 5.0)])
    assert est.confidence == pytest.approx(1 - 8 / 252)
    assert est.lo < 1.5 < est.hi
    same = hodges_lehmann_ratio([10.0, 11.0, 12.0], [10.0, 11.0, 12.0])
    assert same.ratio == pytest.approx(1.0) and same.confidence == pytest.approx(0.9)  # 3 + 3: 1 − 2/20
    assert hodges_lehmann_ratio([1.0, 2.0], [1.0, 2.0]).lo is None  # too few for an interval


def test_ten_percent_slower_cell_is_a_regression():
    slow = decode_id("triton-paged-decode")
    base, head = pair(factors={slow: 1.10})
    cmp = compare_runs(base, head)
    by_id = {c.cell_id: c for c in cmp.cells}
    c = by_id[slow]
    assert c.classification is CompareClass.SLOWER and c.regression
    assert 1.05 < c.estimate.lo < c.estimate.ratio < c.estimate.hi and c.estimate.ratio == pytest.approx(1.10, abs=0.02)
    assert all(x.classification is CompareClass.NOISE for x in cmp.cells if x.cell_id != slow)
    assert cmp.regression and [x.cell_id for x in cmp.regressions] == [slow]


def test_one_percent_jitter_is_within_noise_on_every_cell():
    for seed in range(5):
        base, head = pair(seed=seed)
        cmp = compare_runs(base, head)
        assert {c.classification for c in cmp.cells} == {CompareClass.NOISE}, seed
        assert not cmp.regression and not cmp.warnings and not cmp.verdict_changes


def test_faster_cell_and_a_winner_flip():
    fast = decode_id("sdpa-flash", 512)
    base, head = pair(factors={fast: 0.7})  # flash 100 → 70 µs beats triton's 80 at kv 512
    cmp = compare_runs(base, head)
    assert {c.cell_id: c for c in cmp.cells}[fast].classification is CompareClass.FASTER
    assert not cmp.regression
    flips = [w for w in cmp.winners if w.flipped]
    assert [(w.base_winner, w.head_winner) for w in flips] == [("triton-paged-decode", "sdpa-flash")]


def test_correctness_failure_is_flagged_even_when_faster():
    broken = decode_id("sdpa-cudnn", 2048)
    base, head = pair(factors={broken: 0.5})
    cells = [replace(c, status=CellStatus.INCORRECT, reason="failed correctness: out rel err 0.5 > 0.02",
                     correctness=Correctness(0.5, 2e-2, False, "fp32")) if c.cell_id == broken else c for c in head.cells]
    cmp = compare_runs(base, replace(head, cells=tuple(cells)))
    c = {x.cell_id: x for x in cmp.cells}[broken]
    assert c.classification is CompareClass.FASTER and c.regression
    assert correctness_text(c) == "pass → fail" and "correctness pass → fail" in regression_texts(c)[0]


def test_error_in_head_and_unmatched_cells():
    gone = decode_id("sdpa-flash", 2048)
    base, head = pair()
    cells = [replace(c, status=CellStatus.ERROR, reason="boom", timing=None, timing_repeats=(), correctness=None)
             if c.cell_id == gone else c for c in head.cells]
    cmp = compare_runs(base, replace(head, cells=tuple(cells)))
    c = {x.cell_id: x for x in cmp.cells}[gone]
    assert c.regression and "error in the head run: boom" in regression_texts(c)[0]


def test_cells_the_head_never_ran_are_no_regression():
    """A head made with another --regime (cells missing) lists them; an interrupted head (pending cells) or
    another preset is refused without --force; with --force the pending cells are not regressions."""
    base, head = pair()
    decode_only = replace(head, cells=tuple(c for c in head.cells if c.workload.phase.value == "decode"))
    with pytest.raises(CompareError, match="lacks 6 of the base run's 15 cells"):
        compare_runs(base, decode_only)  # a CI gate must not pass because the head measured less
    cmp = compare_runs(base, decode_only, force=True)
    assert not cmp.regression and cmp.count(CompareClass.ONLY_BASE) == 2 * len(BACKENDS)
    assert not compare_runs(decode_only, head).regression  # a head may add cells (a new backend, a regime)
    assert any("only in the base run" in w for w in cmp.warnings)

    pending = tuple(replace(c, status=CellStatus.PENDING, timing=None, timing_repeats=(), correctness=None)
                    if c.workload.phase.value == "decode" else c for c in head.cells)
    with pytest.raises(CompareError, match=r"head run is incomplete: 9 of 15 cells never ran"):
        compare_runs(base, replace(head, cells=pending))
    forced = compare_runs(base, replace(head, cells=pending), force=True)
    assert not forced.regression and any("incomplete" in w for w in forced.warnings)

    with pytest.raises(CompareError, match="different presets"):
        compare_runs(base, replace(head, preset="decode-sweep"))


def test_bad_latency_in_results_is_a_one_line_error(tmp_path: Path):
    """NaN, inf, negative or string latencies in a (hand-edited) results.json: exit 2, never a ranking."""
    import json

    base, _ = pair()
    write_results(base, tmp_path / "results.json")
    good = json.loads((tmp_path / "results.json").read_text())
    for bad in (float("nan"), float("inf"), -1.0, "12", 0):
        data = json.loads(json.dumps(good))
        cell0 = next(c for c in data["cells"] if c.get("timing_repeats"))
        cell0["timing_repeats"][0]["median_us"] = bad
        d = tmp_path / f"bad{len(str(bad))}"
        d.mkdir(exist_ok=True)
        (d / "results.json").write_text(json.dumps(data))
        for args in (["compare", str(tmp_path), str(d), "--out", str(tmp_path / "c.html")], ["summary", str(d)]):
            res = CliRunner().invoke(main, args)
            assert res.exit_code == 2 and res.output.count("\n") == 1, (bad, res.output)
            # the field is named: as read (NaN, inf: not finite; "12": a string) or as checked (-1, 0: not positive)
            assert "timing_repeats[0].median_us" in res.output and "Traceback" not in res.output, (bad, res.output)
            assert "Traceback" not in res.output


def test_launch_shape_and_bytes_changes():
    w = next(w for w in SEED.workloads if w.kv_len == 8192)
    b = repeated(cell(w, "triton-paged-decode", 40.0, kernels=[kernel("_paged_decode_split_kernel", 512, 38.0, grid=(8, 4, 16))]), [40.0] * 5)
    h = repeated(cell(w, "triton-paged-decode", 40.0, kernels=[kernel("_paged_decode_split_kernel", 160, 38.0, grid=(8, 4, 5))]), [40.0] * 5)
    traffic = {"dram_write_bytes": 0.0, "l2_to_sm_read_bytes": 0.0, "l1_global_load_bytes": 0.0, "gpu_time_us": 38.0, "kernels": ()}
    b = replace(b, counters=CounterSummary(dram_read_bytes=137.8e6, **traffic))
    h = replace(h, counters=CounterSummary(dram_read_bytes=151.58e6, **traffic))
    cmp = compare_runs(with_repeat(run([b]), 5), with_repeat(run([h]), 5))
    c = cmp.cells[0]
    assert tuple(launch_change_text(x) for x in c.launch_changes) == ("_paged_decode_split_kernel: grid [8, 4, 16] → [8, 4, 5]",)
    assert c.bytes_ratio == pytest.approx(1.1) and c.classification is CompareClass.NOISE


def test_too_few_repeats_never_classify():
    base, head = pair(n=1, factors={decode_id("sdpa-flash"): 1.5})
    cmp = compare_runs(base, head)
    assert {c.classification for c in cmp.cells} == {CompareClass.FEW} and not cmp.regression
    assert any("need at least 3 samples a side" in w for w in cmp.warnings)


def test_gpu_model_mismatch_is_refused_unless_forced():
    base, head = pair()
    other = replace(head, environment=replace(environment(), device_name="NVIDIA A100-SXM4-80GB", driver="550.54"))
    with pytest.raises(CompareError, match="different devices"):
        compare_runs(base, other)
    cmp = compare_runs(base, other, force=True)
    assert cmp.forced and "Forced comparison" in cmp.warnings[0]
    assert any(w.startswith("driver differs") for w in cmp.warnings)


def test_parse_threshold():
    assert parse_threshold("5%") == pytest.approx(0.05) and parse_threshold("0.1") == 0.1
    assert parse_threshold("0.99") == 0.99 and parse_threshold("1%") == pytest.approx(0.01)
    for bad in ("x", "0", "100%", "-2%", "1", "3"):  # a bare 1 or 3: percent or fraction? refused, not guessed
        with pytest.raises(CompareError):
            parse_threshold(bad)


# ---- CLI -----------------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, r) -> Path:
    d = tmp_path / name
    write_results(r, d / "results.json")
    return d


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_exit_codes_and_outputs(tmp_path: Path):
    base, head = pair(factors={decode_id("triton-paged-decode"): 1.10})
    b, h = _write(tmp_path, "base", base), _write(tmp_path, "head", head)
    res = _cli("compare", str(b), str(h), "--out", str(tmp_path / "c.html"), "--markdown", str(tmp_path / "c.md"))
    assert res.exit_code == 1, res.output
    assert "regression: decode kv 8192 (page 16) · triton-paged-decode" in res.output
    html = (tmp_path / "c.html").read_text()
    assert "profattn compare: base → head" in html and "Plotly.newPlot" in html
    md = (tmp_path / "c.md").read_text()
    assert "❌ regression" in md and "| decode kv 8192 (page 16) | triton-paged-decode | **slower** |" in md
    same_head = _write(tmp_path, "same", pair(seed=0)[1])
    assert _cli("compare", str(b), str(same_head), "--out", str(tmp_path / "d.html")).exit_code == 0
    # a higher threshold lets the 10 % change through
    assert _cli("compare", str(b), str(h), "--threshold", "15%", "--out", str(tmp_path / "e.html")).exit_code == 0
    # a directory (existing, or named with a trailing slash) gets the default file names
    out = tmp_path / "outdir"
    assert _cli("compare", str(b), str(h), "--out", f"{out}/", "--markdown", f"{out}/").exit_code == 1
    assert _cli("summary", str(b), "--out", str(out)).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["compare.html", "compare.md", "summary.md"]


def test_cli_usage_errors_exit_2(tmp_path: Path):
    base, head = pair()
    b = _write(tmp_path, "base", base)
    a100 = _write(tmp_path, "a100", replace(head, environment=replace(environment(), device_name="NVIDIA A100")))
    res = CliRunner().invoke(main, ["compare", str(b), str(a100), "--out", str(tmp_path / "x.html")])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "pass --force" in res.output
    assert not (tmp_path / "x.html").exists()
    res = CliRunner().invoke(main, ["compare", str(b), str(a100), "--force", "--out", str(tmp_path / "x.html"), "--markdown", str(tmp_path / "x.md")])
    assert res.exit_code == 0, res.output
    assert "Forced comparison" in (tmp_path / "x.html").read_text() and "Forced comparison" in (tmp_path / "x.md").read_text()
    res = CliRunner().invoke(main, ["compare", str(b), str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such file" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["compare", str(b), str(b), "--threshold", "lots"])
    assert res.exit_code == 2 and "--threshold" in res.output


def test_reads_v2_example_and_compares_it_with_itself(tmp_path: Path):
    src = REPO / "examples" / "h200-seed"
    run_v2 = read_results(src)
    assert run_v2.repeat == 1 and all(len(c.latency_samples_us) <= 1 for c in run_v2.cells)
    assert json.loads((src / "results.json").read_text())["schema_version"] == 2
    res = _cli("compare", str(src), str(src), "--out", str(tmp_path / "self.html"))
    assert res.exit_code == 0 and "too few repeats" in res.output
