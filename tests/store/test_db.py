"""The results store: round trip, idempotent re-import, concurrent writers in two processes, a failed write,
migration from schema version 1, pruning, and refusals."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from factories import cell, environment, run
from profattn.results import write_results
from profattn.store import (
    SCHEMA_VERSION, StoreError, measurement, measurements, migrate, open_store, run_id, stored_version, workload_key,
)
from profattn.store.db import MIGRATIONS
from profattn.workload import Workload

REPO = Path(__file__).resolve().parents[2]
W = Workload(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128, mask="none")


def two_backend_run(created: str = "2026-11-29T00:00:00Z", flash: float = 46.0, cudnn: float = 36.8):
    r = run([cell(W, "sdpa-flash", flash), cell(W, "sdpa-cudnn", cudnn, family="cudnn"),
             cell(W, "sdpa-efficient", None, status="unsupported", family="efficient", reason="no GQA")])
    return replace(r, environment=replace(environment(), created_utc=created))


def test_round_trip_and_reimport_is_idempotent(tmp_path: Path):
    r = two_backend_run()
    with open_store(tmp_path / "s.sqlite") as store:
        row = store.add_run(r, tmp_path)
        assert row.run_id == run_id(r) and row.cells == 3 and row.gpu == "NVIDIA H200" and row.num_sms == 132
        got = {m.backend: m for m in store.cells_for("NVIDIA H200", workload_key(W))}
        # a one-row call's mask=none is stored as causal: the lookup key says so
        assert workload_key(W) == "decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal"
        assert got["sdpa-cudnn"] == measurement(r.cells[1], r, row.run_id)
        assert got["sdpa-cudnn"].latency_us == 36.8 and got["sdpa-cudnn"].timing_kind == "eager"
        assert got["sdpa-cudnn"].samples_us == (36.8,) and got["sdpa-cudnn"].eligible
        assert not got["sdpa-efficient"].eligible and got["sdpa-efficient"].latency_us is None
        assert got["sdpa-flash"].workload().mask.value == "causal"
        # requested bytes: q and o 8·16·1·128·2 B each, K and V 8·4·8192·128·2 B each
        assert got["sdpa-flash"].requested_bytes == 2 * 32_768 + 2 * 67_108_864
        g = store.generation()
        store.add_run(r, tmp_path)  # again: replaced, not added
        assert len(store.runs()) == 1 and store.runs()[0].cells == 3
        assert len(store.cells_on("NVIDIA H200")) == 3 and store.generation() == g + 1


def test_a_failed_write_leaves_the_store_as_it_was(tmp_path: Path):
    path = tmp_path / "s.sqlite"
    first = two_backend_run()
    second = two_backend_run(created="2026-12-01T00:00:00Z", flash=50.0)
    with open_store(path) as store:
        store.add_run(first, tmp_path / "a")
        good = list(measurements(second))
        bad = replace(good[-1], phase=None)  # violates NOT NULL half-way through the insert
        with pytest.raises(StoreError, match="could not store run"):
            store.add_run(second, tmp_path / "b", cells=[*good[:-1], bad])
    with open_store(path) as store:  # readable, and nothing of the failed run in it
        assert [r.run_id for r in store.runs()] == [run_id(first)]
        assert len(store.cells_on("NVIDIA H200")) == 3


def test_two_processes_write_at_once(tmp_path: Path):
    db = tmp_path / "s.sqlite"
    dirs = []
    for i in range(2):
        d = tmp_path / f"run{i}"
        d.mkdir()
        write_results(two_backend_run(created=f"2026-11-2{i}T00:00:00Z"), d / "results.json")
        dirs.append(d)
    script = ("import sys; from profattn.store import open_store, import_runs\n"
              "for _ in range(15):\n"
              "    with open_store(sys.argv[1]) as s: import_runs(s, [sys.argv[2]])\n")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(db), str(d)], env=env, stderr=subprocess.PIPE, text=True)
             for d in dirs]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    with open_store(db) as store:
        assert len(store.runs()) == 2 and len(store.cells_on("NVIDIA H200")) == 6
        assert store.generation() == 30
        assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_version_1_store_migrates(tmp_path: Path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    MIGRATIONS[0](conn)
    conn.execute("UPDATE schema_version SET version = 1")
    conn.execute("INSERT INTO runs VALUES ('run-x', '/r', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z', 'seed', "
                 "'NVIDIA H200', 'cuda', 132, '2.5', '12.4', '90100', '3.1', '550', '0.1.0', 1)")
    wl = {"phase": "decode", "batch": 8, "q_len": 1, "kv_len": 8192, "num_q_heads": 16, "num_kv_heads": 4, "head_dim": 128,
          "dtype": "bfloat16", "mask": "causal", "kv_layout": "dense", "page_size": None, "kv_len_dist": "uniform",
          "kv_len_seed": 0, "shared_prefix_len": 0, "seqs": [], "append": False, "kv_dtype": None, "window": None}
    conn.execute("INSERT INTO cells (run_id, cell_id, gpu, num_sms, workload_key, workload_json, phase, batch, q_len, kv_len, "
                 "num_q_heads, num_kv_heads, head_dim, dtype, mask, kv_layout, page_size, kv_len_dist, shared_prefix_len, "
                 "append, kv_dtype, window, varlen, backend, family, status, correct, eligible, latency_us, timing_kind, "
                 "p10_us, p90_us, reps, samples_json) VALUES ('run-x', 'c1', 'NVIDIA H200', 132, ?, ?, 'decode', 8, 1, "
                 "8192, 16, 4, 128, 'bfloat16', 'causal', 'dense', NULL, 'uniform', 0, 0, NULL, NULL, 0, 'sdpa-cudnn', "
                 "'cudnn', 'ok', 1, 1, 36.8, 'eager', 36.0, 37.5, 50, '[36.8]')", (workload_key(W), json.dumps(wl)))
    assert stored_version(conn) == 1
    conn.close()
    with open_store(path) as store:
        assert stored_version(store.conn) == SCHEMA_VERSION == 4
        (m,) = store.cells_for("NVIDIA H200", workload_key(W))
        assert m.latency_us == 36.8 and m.ctas_per_sm is None and m.dram_bytes is None
        assert m.requested_bytes == 2 * 32_768 + 2 * 67_108_864  # back-filled from the stored workload
        assert store.runs()[0].flashinfer is None and store.generation() == 0
        # v3 back-fills the built-in backend's declared interface and read layout; run ceilings stay empty
        assert (m.interface, m.read_layout, m.read_key) == ("sdpa", "dense", workload_key(W))
        assert json.loads(m.adoption_json)["how"][1] == "with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):"
        assert store.runs()[0].read_gbps is None and m.executed_pairs is None
        assert m.host_us is None  # v4: a cell of a run timed before the host was hidden has no host time


def test_forget_and_refusals(tmp_path: Path):
    path = tmp_path / "s.sqlite"
    with open_store(path) as store:
        a = store.add_run(two_backend_run(created="2026-11-01T00:00:00Z"), tmp_path / "a")
        b = store.add_run(two_backend_run(created="2026-12-01T00:00:00Z"), tmp_path / "b")
        assert store.forget(before="2026-11-15") == 1
        assert [r.run_id for r in store.runs()] == [b.run_id]
        assert store.forget([str(tmp_path / "b")]) == 1 and store.runs() == () and store.cells_on("NVIDIA H200") == ()
        assert a.run_id != b.run_id
    with pytest.raises(StoreError, match="no results store"):
        open_store(tmp_path / "none.sqlite", create=False)
    for create in (False, True):  # was "no results store at DIR" (and, creating, SQLite's own message)
        with pytest.raises(StoreError, match="is a directory: give the store's file"):
            open_store(tmp_path, create=create)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="not a profattn results store"):
        open_store(other)
    newer = sqlite3.connect(path, isolation_level=None)
    newer.execute("UPDATE schema_version SET version = 99")
    newer.close()
    with pytest.raises(StoreError, match="newer than this profattn"):
        open_store(path)
    with pytest.raises(StoreError, match="newer"):
        migrate(sqlite3.connect(path))


def _timed(c, host_us: float | None, *repeats_host: float):
    """``c`` with host times on its eager timing (and repeats with those host times, same latency)."""
    t = replace(c.timing, host_us=host_us)
    reps = tuple(replace(t, host_us=h) for h in repeats_host) or (t,)
    return replace(c, timing=t, timing_repeats=reps)


def test_a_host_hidden_cell_supersedes_the_older_method(tmp_path: Path):
    """Cells of a run timed with the host's stalls hidden (``host_us`` set, results schema 4) replace, per (GPU,
    backend, workload as read), the cells of runs timed before; a backend measured only the old way keeps its cells,
    and an ineligible new cell supersedes nothing."""
    old = two_backend_run(created="2026-11-01T00:00:00Z", flash=80.0, cudnn=50.6)  # host stalls inside the events
    new_cells = [_timed(cell(W, "sdpa-cudnn", 17.9, family="cudnn"), 31.0, 30.0, 33.0),
                 _timed(cell(W, "sdpa-flash", 27.8, status="error", reason="boom"), 12.0)]
    new = replace(run(new_cells), environment=replace(environment(), created_utc="2026-12-07T00:00:00Z"))
    with open_store(tmp_path / "s.sqlite") as store:
        store.add_run(old, tmp_path / "old")
        store.add_run(new, tmp_path / "new")
        got = sorted((m.backend, m.latency_us, m.host_us) for m in store.cells_on("NVIDIA H200") if m.eligible)
        # cuDNN: the new cell alone, its host time the median of its repeats' (30, 33 -> 31.5); flash: the new cell
        # failed, so the old one stays
        assert got == [("sdpa-cudnn", 17.9, 31.5), ("sdpa-flash", 80.0, None)]
        by_key = {(m.backend, m.latency_us) for m in store.cells_for("NVIDIA H200", workload_key(W))}
        assert ("sdpa-cudnn", 50.6) not in by_key and ("sdpa-cudnn", 17.9) in by_key and ("sdpa-flash", 80.0) in by_key


def test_a_version_3_store_gains_host_time(tmp_path: Path):
    """v3 -> v4 adds the empty ``host_us`` column and clears the policy cache; its cells still read."""
    path = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:3]:
        step(conn)
    conn.execute("UPDATE schema_version SET version = 3")
    conn.execute("INSERT INTO policy_cache VALUES ('NVIDIA H200', 0, '{}')")
    conn.close()
    with open_store(path) as store:
        assert stored_version(store.conn) == 4
        assert "host_us" in {r[1] for r in store.conn.execute("PRAGMA table_info(cells)")}
        assert store.conn.execute("SELECT COUNT(*) FROM policy_cache").fetchone()[0] == 0
        store.add_run(two_backend_run(), tmp_path / "r")
        assert {m.host_us for m in store.cells_on("NVIDIA H200")} == {None}
