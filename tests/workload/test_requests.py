"""Request traces: the committed Azure slice, the Azure dataset's native columns, bad rows named by line and field,
rate scaling and the synthetic Poisson load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from profattn.workload.requests import RequestError, load_requests, parse_synthetic_spec

SLICE = Path(__file__).resolve().parents[1] / "data" / "requests" / "azure_conv_first400.csv"


def test_committed_slice():
    t = load_requests(SLICE)
    assert len(t) == 400 and t.arrival_s[0] == 0.0 and np.all(np.diff(t.arrival_s) >= 0)
    assert (int(t.prompt_tokens[0]), int(t.output_tokens[0])) == (374, 44)  # the trace's first row
    assert (int(t.prompt_tokens[1]), int(t.output_tokens[1]), float(t.arrival_s[1])) == (396, 109, 4.314579)
    assert int(t.rows[0]) == 2 and t.duration_s == pytest.approx(106.330212)
    assert t.rate_per_s == pytest.approx(399 / 106.330212)
    s = t.scaled(4.0)
    assert s.rate_scale == 4.0 and s.duration_s == pytest.approx(106.330212 / 4) and s.prompt_tokens is t.prompt_tokens
    assert len(t.head(10)) == 10


def test_the_committed_one_hour_trace_reads():
    """The README's simulate command reads this file from a clone."""
    t = load_requests(Path(__file__).resolve().parents[2] / "examples" / "requests" / "azure-llm-2023-conv.csv")
    assert len(t) == 19_366 and round(t.duration_s) == 3_502 and int(t.prompt_tokens.max()) == 14_050
    assert round(t.rate_per_s, 2) == 5.53


def test_azure_native_columns_and_unsorted_rows(tmp_path: Path):
    p = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:47.6805900,10,5\n"
                 "2023-11-16 18:15:46.6805900,374,44\n")
    t = load_requests(p)
    assert t.arrival_s.tolist() == pytest.approx([0.0, 1.0])
    assert t.prompt_tokens.tolist() == [374, 10] and t.rows.tolist() == [3, 2]  # sorted, each keeps its line


@pytest.mark.parametrize("body, msg", [
    ("0.0,10,5\n1.0,abc,5\n", "t.csv line 3: num_prefill_tokens 'abc' is not an integer"),
    ("0.0,10,5\n1.0,10,-3\n", "t.csv line 3: num_decode_tokens '-3' must be ≥ 1"),
    ("0.0,0,5\n", "t.csv line 2: num_prefill_tokens '0' must be ≥ 1"),
    ("-1,10,5\n", "t.csv line 2: arrived_at '-1' is not a time in seconds ≥ 0"),
    ("nan,10,5\n", "t.csv line 2: arrived_at 'nan' is not a time in seconds ≥ 0"),
    ("0.0,10\n", "t.csv line 2: num_decode_tokens '' is not an integer"),
    ("0.0,99999999999,5\n", "is beyond 268,435,456 tokens"),
    ("0.0,1.5,5\n", "num_prefill_tokens '1.5' is not an integer"),
    ("", "no requests (only a header)"),
    ("0.0,10,5,7\n1.0,10,5,8\n", "t.csv: its rows have 4 fields, its header 3: name every column in the header"),
    ("0.0,10,5,7,1\n1.0,10,5,8,1\n", "t.csv: its rows have 5 fields, its header 3"),
    ("0.0,10,5\n1.0,10,5,8\n", "not a CSV request trace (Error tokenizing data. C error: Expected 3 fields in line 3, saw 4)"),
    ("HEADER arrived_at,num_prefill_tokens,num_decode_tokens,arrived_at\n0.0,10,5,1.0\n",
     "column 'arrived_at' appears 2 times in the header"),
])
def test_bad_rows_name_line_and_field(tmp_path: Path, body: str, msg: str):
    p = tmp_path / "t.csv"
    head = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
    p.write_text(body.removeprefix("HEADER ") if body.startswith("HEADER ") else head + body)
    with pytest.raises(RequestError) as info:
        load_requests(p)
    assert msg in str(info.value) and "\n" not in str(info.value)


def test_trailing_commas_are_empty_fields(tmp_path: Path):
    """A spreadsheet's export with a comma after every row: the empty fields are dropped, nothing shifts."""
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,20,\n0.5,200,30,\n")
    t = load_requests(p)
    assert t.prompt_tokens.tolist() == [100, 200] and t.output_tokens.tolist() == [20, 30]
    assert t.arrival_s.tolist() == [0.0, 0.5]


def test_wrong_columns_and_missing_file(tmp_path: Path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(RequestError, match="expected columns arrived_at, num_prefill_tokens, num_decode_tokens"):
        load_requests(p)
    with pytest.raises(RequestError, match="no such file"):
        load_requests(tmp_path / "none.csv")
    bad = tmp_path / "az.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n")
    with pytest.raises(RequestError, match="az.csv line 2: TIMESTAMP 'yesterday' is not a timestamp"):
        load_requests(bad)


def test_synthetic_poisson_load_is_deterministic():
    a = parse_synthetic_spec("poisson:rate=5,n=2000,prompt=1000,output=100:0.5,seed=3")
    b = parse_synthetic_spec("poisson:rate=5,n=2000,prompt=1000,output=100:0.5,seed=3")
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert a.arrival_s[0] == 0.0 and a.rate_per_s == pytest.approx(5.0, rel=0.1)
    assert np.median(a.prompt_tokens) == pytest.approx(1000, rel=0.1) and a.output_tokens.min() >= 1
    assert a.source == "poisson:rate=5,n=2000,prompt=1000:1,output=100:0.5,seed=3"


@pytest.mark.parametrize("spec, msg", [
    ("poisson:rate=5,n=10", "prompt, output missing"),
    ("poisson:rate=0,n=10,prompt=5,output=5", "rate must be > 0"),
    ("poisson:rate=5,n=10,prompt=5,output=5,burst=2", "'burst=2' is not one of"),
    ("uniform:rate=5", "a synthetic load is poisson:"),
    ("poisson:rate=5,n=10,prompt=x,output=5", "prompt='x' is not MEDIAN or MEDIAN:SIGMA"),
])
def test_bad_synthetic_spec(spec: str, msg: str):
    with pytest.raises(RequestError) as info:
        parse_synthetic_spec(spec)
    assert msg in str(info.value)
