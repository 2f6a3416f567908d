"""results.json records: the closed status set survives a round trip; an unknown status is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from factories import SEED, cell, run

from profattn.errors import ResultsError
from profattn.results import CellStatus, read_results, run_from_dict, run_to_dict, write_results

REPO = Path(__file__).resolve().parents[1]


def test_cell_status_round_trip(tmp_path: Path):
    statuses = list(CellStatus)
    cells = [cell(w, f"b{i}", 10.0 if s.ran else None, status=s) for i, (w, s) in enumerate(zip([*SEED.workloads] * 2, statuses))]
    r = run(cells)
    data = json.loads(json.dumps(run_to_dict(r)))
    assert [c["status"] for c in data["cells"]] == ["ok", "incorrect", "unsupported", "error", "pending"]
    back = read_results(write_results(r, tmp_path / "results.json"))
    assert [c.status for c in back.cells] == statuses and all(type(c.status) is CellStatus for c in back.cells)
    assert run_from_dict(data) == back
    assert CellStatus.OK == "ok" and str(CellStatus.PENDING) == "pending" and f"{CellStatus.ERROR}" == "error"
    assert [s for s in CellStatus if s.ran] == [CellStatus.OK, CellStatus.INCORRECT]


def test_committed_run_statuses_are_enum_members():
    r = read_results(REPO / "examples" / "h200-seed")
    counts = {s: sum(c.status is s for c in r.cells) for s in CellStatus}
    assert counts == {CellStatus.OK: 34, CellStatus.INCORRECT: 0, CellStatus.UNSUPPORTED: 11, CellStatus.ERROR: 0, CellStatus.PENDING: 0}


def test_unknown_status_is_refused_with_the_field_named(tmp_path: Path):
    data = run_to_dict(run([cell(SEED.workloads[0], "eager", 10.0)]))
    data["cells"][0]["status"] = "skipped"
    with pytest.raises(ResultsError, match=r"field 'cells\[0\] \(train_.*\.eager\)\.status' is 'skipped', not one of ok, "
                                           "incorrect, unsupported, error, pending"):
        run_from_dict(data)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"results\.json: field 'cells\[0\] \(.*\.eager\)\.status'"):
        read_results(path)
    with pytest.raises(ValueError):
        replace(run([cell(SEED.workloads[0], "eager", 10.0)]).cells[0], status="skipped")


def test_counters_status_is_a_closed_set():
    from profattn.results import CountersInfo, CountersStatus

    r = read_results(REPO / "examples" / "h200-seed")
    assert r.counters_info.status is CountersStatus.MEASURED and r.counters_info.status == "measured"
    assert CountersInfo("unavailable", "CPU run").status is CountersStatus.UNAVAILABLE
    assert run_to_dict(r)["counters_info"]["status"] == "measured"
    data = run_to_dict(r)
    data["counters_info"]["status"] = "maybe"
    with pytest.raises(ResultsError, match=r"field 'counters_info.status' is 'maybe', not one of measured, unavailable, not requested"):
        run_from_dict(data)


@pytest.mark.parametrize("mutate, message", [
    (lambda cells: cells.__setitem__(0, 5), "cells[0] is int 5, not an object"),
    (lambda cells: cells.append(dict(cells[1])), "appears twice"),
    (lambda cells: cells[0].__setitem__("backend", 7), "cells[0]: field 'backend' is 7, not a string"),
    (lambda cells: cells[0].__setitem__("timing", "fast"), "cells[0] ("),
    (lambda cells: cells[0].__setitem__("status", "bogus"), "'bogus'"),
])
def test_malformed_cells_are_one_line_errors_naming_the_cell(tmp_path, mutate, message):
    """issue: a cell that is not an object (5) made report/summary/compare traceback; duplicates were accepted."""
    import json

    from profattn.errors import ResultsError
    from profattn.results import read_results

    data = json.loads((REPO / "examples" / "h200-seed" / "results.json").read_text())
    mutate(data["cells"])
    p = tmp_path / "results.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=None) as err:
        read_results(p)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_append_timing_executed_pairs_and_cache_check_round_trip_and_old_files_still_load():
    from profattn.results import Correctness, Timing
    from profattn.workload import parse_workload_spec

    w = parse_workload_spec("mix=1x(q6,kv20)+3x(q1,kv9),hq=4,hkv=2,d=16,page=4,append=true")
    c = replace(cell(w, "eager", 120.0), append_timing=Timing(7.5, 7.0, 8.0, 6.9, 40, "t"), executed_pairs=480,
                correctness=Correctness(1e-3, 2e-2, True, "fp32", cache_ok=True))
    r = run([c])
    data = json.loads(json.dumps(run_to_dict(r)))
    back = run_from_dict(data)
    assert back == r and back.cells[0].append_timing.median_us == 7.5 and back.cells[0].executed_pairs == 480
    assert back.cells[0].correctness.cache_ok is True and back.cells[0].workload == w
    for key in ("append_timing", "executed_pairs"):  # a file written before these fields existed
        del data["cells"][0][key]
    del data["cells"][0]["correctness"]["cache_ok"]
    old = run_from_dict(data).cells[0]
    assert (old.append_timing, old.executed_pairs, old.correctness.cache_ok) == (None, None, None)
    data["cells"][0]["executed_pairs"] = -3
    with pytest.raises(ResultsError, match=r"cells\[0\].*executed_pairs"):
        run_from_dict(data)


def test_deeply_nested_results_json_is_a_results_error(tmp_path):
    """'[' x 100000 raised RecursionError (a traceback, exit 1) from report, summary and compare."""
    (tmp_path / "results.json").write_text("[" * 100_000)
    with pytest.raises(ResultsError, match=r"results\.json: JSON nested too deeply$"):
        read_results(tmp_path)


def test_fp8_workload_and_quant_error_round_trip(tmp_path: Path):
    from profattn.results import Correctness

    w = replace(SEED.workloads[-1], kv_dtype="fp8")
    c = replace(cell(w, "triton-paged-decode", 10.0),
                correctness=Correctness(out_rel_err=1e-3, tolerance=2e-2, passed=True, reference="fp32",
                                        quant_rel_err=0.031))
    back = read_results(write_results(run([c]), tmp_path / "results.json"))
    assert back.cells[0].workload.kv_dtype == "float8_e4m3fn" and back.cells[0].workload.tag.endswith("_kvfp8")
    assert back.cells[0].correctness.quant_rel_err == 0.031
    # files written before the fields existed read as unquantized, with no quantization error
    data = run_to_dict(run([c]))
    del data["cells"][0]["workload"]["kv_dtype"], data["cells"][0]["correctness"]["quant_rel_err"]
    old = run_from_dict(data).cells[0]
    assert old.workload.kv_dtype is None and old.correctness.quant_rel_err is None


def test_window_round_trips_and_committed_runs_load_without_it(tmp_path: Path):
    from profattn.workload import parse_workload_spec

    w = parse_workload_spec("phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=16,page=16,window=24")
    r = run([cell(w, "torch-paged-reference", 12.0)])
    back = read_results(write_results(r, tmp_path / "results.json"))
    assert back == r and back.cells[0].workload.window == 24
    assert back.cells[0].cell_id == r.cells[0].cell_id and back.cells[0].workload.tag.endswith("_paged16_w24")
    old = read_results(REPO / "examples" / "h200-serving")  # written before windows existed
    assert old.cells and all(c.workload.window is None for c in old.cells)


def test_results_that_are_not_regular_files_or_too_large_are_refused(tmp_path, monkeypatch):
    """`db import /dev/zero` grew to 23 GB before the kernel killed it, and a run directory whose results.json was a
    FIFO hung `summary` for good: a device, FIFO or socket (also behind a symbolic link) and a file above the size
    bound are one-line errors before anything is read."""
    import os

    import pytest

    import profattn.results.io as rio
    from profattn.errors import ResultsError

    with pytest.raises(ResultsError, match="/dev/zero: not a regular file"):
        rio.read_results("/dev/zero")
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").symlink_to("/dev/zero")
    with pytest.raises(ResultsError, match="not a regular file"):
        rio.read_results(run)
    fifo_run = tmp_path / "fifo"
    fifo_run.mkdir()
    os.mkfifo(fifo_run / "results.json")
    with pytest.raises(ResultsError, match="not a regular file"):
        rio.read_results(fifo_run)
    big = tmp_path / "big.json"
    big.write_text("{}" + " " * 100)
    monkeypatch.setattr(rio, "RESULTS_MAX_BYTES", 64)
    with pytest.raises(ResultsError, match="102 bytes, larger than any results file"):
        rio.read_results(big)


def test_closed_sets_read_and_write_as_their_strings(tmp_path):
    """Enums serialise to the strings results.json always held, so committed runs load and round-trip unchanged."""
    import json

    from profattn.results import RankRecord, RankStatus, read_results, write_results
    from profattn.workload import CpScheme, KVLenDist, Workload

    from factories import cell, run

    w = Workload(phase="train", batch=1, q_len=64, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32, cp_ranks=2,
                 cp_scheme="ring")
    d = Workload(phase="decode", batch=4, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32,
                 kv_layout="paged", page_size=16, kv_len_dist="lognormal", kv_len_seed=7)
    assert w.cp_scheme is CpScheme.RING and d.kv_len_dist is KVLenDist.LOGNORMAL and d.kv_len_dist.drawn
    assert d.tag.endswith("_paged16_lognormal7") and w.tag.endswith("_cp2ring")  # tags as before the enums
    c = cell(w, "sdpa-flash", 10.0)
    from dataclasses import replace

    c = replace(c, ranks=(RankRecord(0), RankRecord(1, status="failed", error="rank 1: boom")))
    assert [r.status for r in c.ranks] == [RankStatus.OK, RankStatus.FAILED]
    write_results(run([c, cell(d, "triton-paged-decode", 5.0)]), tmp_path / "results.json")
    raw = json.loads((tmp_path / "results.json").read_text())
    assert [r["status"] for r in raw["cells"][0]["ranks"]] == ["ok", "failed"]
    assert raw["cells"][0]["workload"]["cp_scheme"] == "ring" and raw["cells"][1]["workload"]["kv_len_dist"] == "lognormal"
    back = read_results(tmp_path / "results.json")
    assert back.cells[0].ranks[1].status is RankStatus.FAILED and back.cells[0].workload == w
    assert back.cells[1].workload == d
    import pytest

    with pytest.raises(ValueError):
        RankRecord(0, status="lost")
    raw["cells"][0]["ranks"][1]["status"] = "lost"
    (tmp_path / "results.json").write_text(json.dumps(raw))
    with pytest.raises(ResultsError, match=r"ranks\[1\]\.status' is 'lost', not one of ok, failed"):
        read_results(tmp_path / "results.json")


# ---- every number bounded and finite, unknown fields ignored, text safe (issue 26) -----------------------------


def _seed_data() -> dict:
    return json.loads((REPO / "examples" / "h200-seed" / "results.json").read_text())


def _timed(data: dict) -> dict:
    return next(c for c in data["cells"] if c.get("timing") and c.get("correctness"))


@pytest.mark.parametrize("field", ["timing.median_us", "timing_repeats.0.median_us", "correctness.out_rel_err"])
@pytest.mark.parametrize("value", ["10**400", "NaN", "Infinity", "1e400", "-10**30"])
def test_a_number_beyond_range_is_a_one_line_error_naming_the_field(tmp_path: Path, field: str, value: str):
    """issue 26: an int too large for a float in timing.median_us, timing_repeats[i].median_us or
    correctness.out_rel_err gave OverflowError tracebacks; a NaN/Infinity literal or 1e400 is refused the same way."""
    data = _seed_data()
    c = _timed(data)
    c.setdefault("timing_repeats", [dict(c["timing"])])
    node = c
    *parents, leaf = field.split(".")
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[leaf] = "@@"
    text = json.dumps(data).replace('"@@"', str(eval(value)) if "**" in value else value)
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(ResultsError) as err:
        read_results(path)
    message = str(err.value)
    where = field.replace(".0.", "[0].")
    assert "\n" not in message and f"{c['cell_id']}).{where}' is " in message, message
    assert ("beyond a 64-bit integer" in message if "**" in value else "finite" in message), message


def test_unknown_fields_are_ignored_everywhere_with_one_warning(tmp_path: Path):
    """issue 26: unknown fields were accepted at the top level and in cells but refused inside timing/environment
    ("Environment.__init__() got an unexpected keyword argument"): now ignored at every level, named in one warning."""
    from profattn.errors import ProfattnWarning

    data = _seed_data()
    data["made_by"] = "a newer profattn"
    data["environment"]["gpu_power_w"] = 700
    c = _timed(data)
    c["timing"]["stddev_us"] = 0.1
    c["workload"]["rope"] = True
    c["future_cell_field"] = 1
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.warns(ProfattnWarning) as caught:
        r = read_results(path)
    assert len(r.cells) == 45
    (w,) = [str(x.message) for x in caught]
    assert "5 unknown field(s) ignored" in w
    for name in ("made_by", "environment.gpu_power_w", f"({c['cell_id']}).timing.stddev_us",
                 f"({c['cell_id']}).workload.rope", f"({c['cell_id']}).future_cell_field"):
        assert name in w, (name, w)


def test_ill_typed_fields_name_the_field(tmp_path: Path):
    data = _seed_data()
    data["environment"]["torch"] = ["2.11"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"field 'environment.torch' is list \['2.11'\], not str"):
        read_results(path)
    data = _seed_data()
    _timed(data)["timing"]["reps"] = 2.5
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"\.timing\.reps' is float 2\.5, not int"):
        read_results(path)


def test_unpaired_surrogates_are_replaced_and_counted(tmp_path: Path):
    """issue 26: "\\ud800" (half an emoji) in a name made every writer of UTF-8 fail; a whole emoji stays."""
    from profattn.errors import ProfattnWarning

    data = _seed_data()
    data["environment"]["device_name"] = "NVIDIA H200 \ud83d\ude00"
    c = _timed(data)
    c["reason"] = "half \ud800 and \udfff"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))  # json writes "\\ud800": a valid escape of an invalid string
    with pytest.warns(ProfattnWarning, match=r"2 unpaired UTF-16 surrogate\(s\) in its text replaced by U\+FFFD"):
        r = read_results(path)
    assert r.environment.device_name == "NVIDIA H200 😀"
    assert next(x for x in r.cells if x.cell_id == c["cell_id"]).reason == "half \ufffd and \ufffd"
    (tmp_path / "out").mkdir()
    write_results(r, tmp_path / "out" / "results.json").read_text(encoding="utf-8")


def test_timing_refuses_huge_and_absurd_latencies():
    from profattn.results import Timing

    for bad in (10**400, 1e13, float("nan"), True):
        with pytest.raises(ValueError, match="median_us must be a positive finite number"):
            Timing(bad, 1.0, 1.0, 1.0, 5, "test")
    assert Timing(1e12, 1.0, 1.0, 1.0, 5, "test").median_us == 1e12


def test_a_cells_adoption_round_trips_and_a_bad_one_is_one_line(tmp_path):
    """Every cell records the interface its backend implements and the layout it read (``CellResult.adoption``); a
    file without it reads as None (older runs), a malformed one names the field."""
    import json

    from factories import cell, run
    from profattn.errors import ResultsError
    from profattn.interfaces import ADOPTIONS
    from profattn.results import read_results, write_results
    from profattn.workload import Workload

    w = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    from dataclasses import replace

    r = run([replace(cell(w, "sdpa-cudnn", 10.0, family="cudnn"), adoption=ADOPTIONS["sdpa-cudnn"]), cell(w, "eager", 12.0)])
    path = write_results(r, tmp_path / "results.json")
    back = read_results(path)
    assert back.cells[0].adoption == ADOPTIONS["sdpa-cudnn"] and back.cells[1].adoption is None
    data = json.loads(path.read_text())
    data["cells"][0]["adoption"] = {"interface": "cuda-graphs", "reads": "dense"}
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"cells\[0\].*adoption"):
        read_results(path)


@pytest.mark.parametrize("adoption, message", [
    ({"interface": "sdpa", "reads": "dense", "how": 12}, "adoption.how must be a list of strings"),
    ({"interface": "sdpa", "reads": "dense", "how": "abc"}, "adoption.how must be a list of strings"),
    ({}, "adoption.interface is missing"),
    ({"interface": "sdpa", "reads": "dense", "plan_run": "yes"}, "plan_run must be true or false"),
    ({"interface": "sdpa", "reads": "sideways"}, "adoption.reads 'sideways' is not one of dense, paged, packed"),
    ([1, 2], "not an object"),
])
def test_a_malformed_adoption_is_one_line(tmp_path, adoption, message):
    import json

    from factories import cell, run
    from profattn.errors import ResultsError
    from profattn.results import read_results, write_results
    from profattn.workload import Workload

    w = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    path = write_results(run([cell(w, "eager", 12.0)]), tmp_path / "results.json")
    data = json.loads(path.read_text())
    data["cells"][0]["adoption"] = adoption
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=message):
        read_results(path)


def test_host_time_validates_round_trips_and_pools(tmp_path):
    """``Timing.host_us`` (schema 4): a non-negative finite µs or None; written and read back; a v3 file's timings
    read with None; over repeats the cell's host time is the median of the repeats' (None when none has one)."""
    import json
    from dataclasses import replace

    from factories import cell, run
    from profattn.results import Timing, read_results, write_results
    from profattn.workload import Workload

    for bad in (-1.0, float("inf"), 1e13):
        with pytest.raises(ValueError, match="host_us must be a non-negative finite number"):
            Timing(10.0, 9.0, 11.0, 9.0, 5, "test", host_us=bad)
    assert Timing(10.0, 9.0, 11.0, 9.0, 5, "test", host_us=0.0).host_us == 0.0
    w = Workload(phase="prefill", batch=4, q_len=1024, kv_len=1024, num_q_heads=2, num_kv_heads=1, head_dim=128)
    c = cell(w, "sdpa-cudnn", 17.9, family="cudnn")
    t = replace(c.timing, host_us=31.0)
    reps = (t, replace(t, median_us=18.1, host_us=40.0), replace(t, median_us=17.7, host_us=29.0))
    path = write_results(run([replace(c, timing=t, timing_repeats=reps), cell(w, "sdpa-flash", 27.6)]),
                         tmp_path / "results.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == 4 and data["cells"][0]["timing"]["host_us"] == 31.0
    back = read_results(path)
    assert back.cells[0].host_us == 31.0  # median of 31, 40, 29
    assert back.cells[1].host_us is None and back.cells[0].latency_us == 17.9
    for cel in data["cells"]:
        for rep in [cel["timing"], *cel.get("timing_repeats", [])]:
            rep.pop("host_us", None)
    data["schema_version"] = 3
    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / "results.json").write_text(json.dumps(data))
    old = read_results(tmp_path / "v3" / "results.json")
    assert old.cells[0].host_us is None and old.cells[0].latency_us == 17.9


def test_a_file_that_is_not_a_results_file_says_what_was_expected(tmp_path):
    """`db import examples/h100-corpus/*` took a README for a run: the message says what it expected."""
    (tmp_path / "README.md").write_text("# a run folder's notes\n")
    with pytest.raises(ResultsError, match=r"README\.md: not valid JSON .*; expected a run directory or its results\.json"):
        read_results(tmp_path / "README.md")
    (tmp_path / "results.json").write_text("# not JSON\n")
    with pytest.raises(ResultsError) as e:
        read_results(tmp_path)
    assert "expected a run directory" not in str(e.value)
