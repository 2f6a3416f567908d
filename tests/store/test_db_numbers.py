"""The store's numbers are bounded and finite before use: a damaged row is one line naming the cell and column."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.cli import main
from profattn.store import import_runs, open_store

REPO = Path(__file__).resolve().parents[2]
SEED = "phase=decode,b=8,q=1,kv=8192,hq=16,hkv=4,d=128,page=16"


def damaged_seed_store(tmp_path: Path, column: str, value: str, where: str) -> Path:
    """The seed run imported into a new store, then ``column = value`` written into the cells ``where`` selects."""
    db = tmp_path / "store.sqlite"
    with open_store(db) as store:
        import_runs(store, [REPO / "examples" / "h200-seed"])
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE cells SET {column} = {value} WHERE {where}")
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize("column, value, problem", [
    ("latency_us", "9e999", "inf, not a finite number"),
    ("latency_us", "1e300", "beyond the limit of 1e+12"),
    ("samples_json", "'[1e999]'", "not a list of finite latencies"),
    ("samples_json", "'not json'", "not a list of finite latencies"),
    ("batch", "-5", "-5, not a positive integer"),
    ("head_dim", "'abc'", "'abc', not a number"),
    ("latency_us", "-3", "-3.0, negative"),
    ("latency_us", "0", "0.0, below 0.001 µs (1 ns): not a measured latency"),
    ("latency_us", "1e-300", "1e-300, below 0.001 µs"),
    ("samples_json", "'[0.0]'", "not a list of finite latencies"),
])
def test_a_damaged_store_row_is_one_line(tmp_path: Path, column: str, value: str, problem: str):
    db = damaged_seed_store(tmp_path, column, value, "backend = 'sdpa-cudnn' AND kv_len = 8192")
    res = CliRunner().invoke(main, ["recommend", "--workload", SEED, "--db", str(db)])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "Traceback" not in res.output, res.output
    assert f"column {column} is " in res.output and problem in res.output and "sdpa-cudnn" in res.output, res.output


@pytest.mark.parametrize("value", ["'not json'", "'[1, 2]'", """'{"phase": "sideways"}'"""])
def test_a_stored_workload_that_no_longer_parses_is_counted_not_silent(tmp_path: Path, value: str):
    """The cells of a damaged workload teach nothing; the others still answer, and one warning says how many."""
    db = damaged_seed_store(tmp_path, "workload_json", value, "kv_len = 512 AND phase = 'decode'")
    res = CliRunner().invoke(main, ["recommend", "--workload", SEED, "--db", str(db)])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    (warning,) = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: 9 stored cell(s) whose workload no longer parses teach nothing; the first: results "
                              "store: cell 'decode_b8_q1_kv512_hq16_hkv4_d128_bf16_causal_paged16."), warning
    assert "(a damaged store: `profattn db forget run-62586542e41f`, then import the run again)" in warning, warning
    assert "use (drop-in" in res.stdout, res.output


def test_another_programs_database_is_refused_unchanged(tmp_path: Path):
    """A user's SQLite file (or an empty file) given as --db: one line, and not a byte of it written."""
    other, empty = tmp_path / "other.sqlite", tmp_path / "empty.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE foo (x)")
    conn.commit()
    conn.close()
    empty.touch()
    before = other.read_bytes()
    view = tmp_path / "view.sqlite"  # a SQLite file holding no table at all (a view, a user_version)
    conn = sqlite3.connect(view)
    conn.execute("CREATE VIEW v AS SELECT 1")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    before_view = view.read_bytes()
    for db, msg in ((other, "not a profattn results store (table foo)"), (empty, "is an empty file, not a results store"),
                    (view, "not a profattn results store (view v)")):
        for args in (["recommend", "--workload", SEED], ["db", "import", str(REPO / "examples" / "h200-seed")]):
            res = CliRunner().invoke(main, [*args, "--db", str(db)])
            assert res.exit_code == 2 and res.output.count("\n") == 1 and msg in res.output, res.output
    assert other.read_bytes() == before and empty.stat().st_size == 0 and view.read_bytes() == before_view
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite", "other.sqlite", "view.sqlite"]  # no -wal, -shm


def test_a_new_store_carries_profattns_mark_and_an_old_one_gets_it(tmp_path: Path):
    from profattn.store.db import APPLICATION_ID, MIGRATIONS

    with open_store(tmp_path / "new.sqlite"):
        pass
    assert sqlite3.connect(tmp_path / "new.sqlite").execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert APPLICATION_ID == 0x70666174  # "pfat"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".new")] == []  # the build file is gone
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "new.sqlite").stat().st_mode & 0o777 == 0o666 & ~umask  # as SQLite itself would create it
    old = tmp_path / "old.sqlite"  # a store made before the mark: its schema_version table tells
    conn = sqlite3.connect(old, isolation_level=None)
    MIGRATIONS[0](conn)
    conn.execute("UPDATE schema_version SET version = 1")
    conn.close()
    with open_store(old) as store:
        assert store.runs() == ()
    assert sqlite3.connect(old).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def _sha(p: Path) -> str:
    import hashlib

    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_foreign_databases_that_look_like_a_store_or_need_recovery_are_refused_unwritten(tmp_path: Path):
    """A table called schema_version does not make a store; a hot rollback journal is not rolled back by a check."""
    sv = tmp_path / "sv.db"
    conn = sqlite3.connect(sv)
    conn.execute("CREATE TABLE schema_version (version INTEGER)")
    conn.execute("INSERT INTO schema_version VALUES (3)")
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    other = tmp_path / "marked.db"  # another program's own application id
    conn = sqlite3.connect(other)
    conn.execute("PRAGMA application_id = 1234567")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    hot = tmp_path / "hot.db"  # a writer killed mid-transaction leaves hot.db-journal
    code = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('CREATE TABLE t (x)'); c.execute('BEGIN'); "
            "c.executemany('INSERT INTO t VALUES (?)', [(i,) for i in range(20000)]); "
            "c.execute('PRAGMA cache_spill = 1'); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(hot)], check=True)
    files = {p.name: _sha(p) for p in tmp_path.iterdir()}
    for db, msg in ((sv, "not a profattn results store (table schema_version, table users)"),
                    (other, "another program's database (application_id 0x12d687)"), (hot, "")):
        res = CliRunner().invoke(main, ["db", "list", "--db", str(db)])
        assert res.exit_code == 2 and res.output.count("\n") == 1 and msg in res.output, res.output
    assert {p.name: _sha(p) for p in tmp_path.iterdir()} == files  # not a byte written, no file added or removed


@pytest.mark.parametrize("name, msg", [
    (":memory:", None), ("file:y.db", None), ("dangling", "is a symbolic link to nothing"),
    ("sub/", "ends in a separator"), ("", "--db must name the store's file"),
])
def test_store_paths_are_plain_file_names(tmp_path: Path, monkeypatch, name: str, msg: str | None):
    monkeypatch.chdir(tmp_path)
    if name == "dangling":
        os.symlink("nowhere.sqlite", "dangling")
    res = CliRunner().invoke(main, ["db", "import", str(REPO / "examples" / "h200-seed"), "--db", name])
    if msg is None:  # SQLite's special names are files of that name here
        assert res.exit_code == 0 and (tmp_path / name).is_file(), res.output
        assert f"store: {name}\n1 run(s), 45 cell(s)" in CliRunner().invoke(main, ["db", "list", "--db", name]).output
    else:
        assert res.exit_code == 2 and res.output.count("\n") == 1 and msg in res.output, res.output
        assert not (tmp_path / "nowhere.sqlite").exists() and not (tmp_path / "sub").exists()
