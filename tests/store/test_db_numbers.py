"""The store's numbers are bounded and finite before use: a damaged row is one line naming the cell and column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.cli import main
from profattn.store import import_runs, open_store

REPO = Path(__file__).resolve().parents[2]
SEED = "phase=decode,b=8,q=1,kv=8192,hq=16,hkv=4,d=128,page=16"


@pytest.mark.parametrize("column, value, problem", [
    ("latency_us", "9e999", "inf, not a finite number"),
    ("latency_us", "1e300", "beyond the limit of 1e+12"),
    ("samples_json", "'[1e999]'", "not a list of finite latencies"),
    ("samples_json", "'not json'", "not a list of finite latencies"),
])
def test_a_damaged_store_row_is_one_line(tmp_path: Path, column: str, value: str, problem: str):
    db = tmp_path / "store.sqlite"
    with open_store(db) as store:
        import_runs(store, [REPO / "examples" / "h200-seed"])
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE cells SET {column} = {value} WHERE backend = 'sdpa-cudnn' AND kv_len = 8192")
    conn.commit()
    conn.close()
    res = CliRunner().invoke(main, ["recommend", "--workload", SEED, "--db", str(db)])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "Traceback" not in res.output, res.output
    assert f"column {column} is " in res.output and problem in res.output and "sdpa-cudnn" in res.output, res.output
