"""``profattn analyze`` on inputs that broke it (issue 26): unpaired UTF-16 surrogates in names, types and the device
name; an ``Input Dims`` entry of 10**309; a kernel ``dur`` of 1e308; a trace file whose name is not UTF-8. Each
ends in a written report and JSON with a counted warning, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import FLASH, trace_fixture

from profattn.cli import main


def flash_doc() -> dict[str, Any]:
    """The H200 flash-decode fixture: 3 SDPA calls, 6 kernels."""
    return json.loads(gzip.decompress(trace_fixture(FLASH).read_bytes()))


def _events(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat]


def _analyze(tmp_path: Path, doc: dict[str, Any] | None, name: str = "t.json"):
    if doc is not None:
        (tmp_path / name).write_text(json.dumps(doc))  # ensure_ascii: a lone surrogate is written as "\\ud800"
    res = CliRunner().invoke(main, ["analyze", str(tmp_path / name), "--out", str(tmp_path / "r.html"),
                                    "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    (out,) = json.loads((tmp_path / "a.json").read_text())["files"]
    return res.output, html, out


def _sdpa_input_type(doc: dict[str, Any], value: str) -> None:
    op = next(e for e in _events(doc, "cpu_op") if e["name"] == "aten::scaled_dot_product_attention")
    op["args"]["Input type"][0] = value


CASES = {
    "kernel name": lambda d, v: _events(d, "kernel")[0].__setitem__("name", _events(d, "kernel")[0]["name"] + v),
    "CPU op name": lambda d, v: _events(d, "cpu_op")[-1].__setitem__("name", "my_op" + v),
    "SDPA input type": _sdpa_input_type,
    "device name": lambda d, v: d["deviceProperties"][0].__setitem__("name", "NVIDIA H200" + v),
}


@pytest.mark.parametrize("where", sorted(CASES))
def test_an_unpaired_surrogate_is_replaced_and_counted(tmp_path: Path, where: str):
    """issue 26: "\\ud800" (an emoji cut in half) made analyze fail writing the HTML (UnicodeEncodeError, exit 1,
    the JSON never written)."""
    doc = flash_doc()
    CASES[where](doc, " \ud83d")
    output, html, out = _analyze(tmp_path, doc)
    (w,) = [w for w in out["warnings"] if w["code"] == "surrogates"]
    assert w["count"] == 1 and "replaced by U+FFFD" in w["message"] and "surrogate" in output
    if where in ("kernel name", "device name"):  # shown on the page (an input type is read; this op launched nothing)
        assert "\ufffd" in html
    if where == "device name":
        assert out["device_name"] == "NVIDIA H200 \ufffd"


def test_an_emoji_whole_is_kept(tmp_path: Path):
    doc = flash_doc()
    CASES["kernel name"](doc, " 😀")
    _, html, out = _analyze(tmp_path, doc)
    assert "😀" in html and not [w for w in out["warnings"] if w["code"] == "surrogates"]


def test_input_dims_beyond_float_range_leave_the_shape_unknown(tmp_path: Path):
    """issue 26: an Input Dims value of 10**309 crashed analyze (the implausible-dimension warning formatted it as a
    float)."""
    doc = flash_doc()
    op = next(e for e in _events(doc, "cpu_op") if e["name"] == "aten::scaled_dot_product_attention")
    op["args"]["Input Dims"][0][0] = "@@"
    (tmp_path / "t.json").write_text(json.dumps(doc).replace('"@@"', str(10**309)))
    _, html, out = _analyze(tmp_path, None)
    (w,) = [w for w in out["warnings"] if w["code"] == "recorded_value_unusable"]
    assert w["count"] == 1 and "read as missing" in w["message"]
    first = out["attention_calls"][0]  # its shape is read from the nested backend op, which recorded it too
    assert first["shape"]["batch"] == 8 and len(out["attention_calls"]) == 3


def test_a_kernel_duration_of_1e308_is_skipped_with_a_warning(tmp_path: Path):
    """issue 26: a kernel dur of 1e308 was accepted without a warning and printed as a 300-digit total."""
    doc = flash_doc()
    _events(doc, "kernel")[0]["dur"] = 1e308
    _, html, out = _analyze(tmp_path, doc)
    (w,) = [w for w in out["warnings"] if w["code"] == "kernel_skipped"]
    assert w["count"] == 1 and "dur beyond 1e+12 µs (1)" in w["message"]
    assert out["kernel_count"] == 5 and out["gpu_time_us"] < 1e6
    assert "e+3" not in html.split("<script")[0] and "0000000000" not in html.split("<script")[0]


def test_a_trace_whose_name_is_not_utf8(tmp_path: Path):
    name = os.fsdecode(b"tr\xffce.json")  # "tr\\udcffce.json": surrogate-escaped bytes
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_text(json.dumps(flash_doc()))
    res = CliRunner().invoke(main, ["analyze", str(tmp_path / "in"), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0 and "tr\ufffdce.json" in (tmp_path / "r.html").read_text(encoding="utf-8"), res.output
