"""The results store: every measured cell of every imported run, in one SQLite file.

Why SQLite (the standard library's ``sqlite3``) and not DuckDB: no new dependency; write-ahead logging lets
several ``profattn profile`` processes add runs while others read, each waiting its turn on a busy timeout
instead of failing; and each import is one transaction, so a write that fails half-way (a full disk, an
interrupt, a bad record) leaves the store as it was — never half a run. The queries ``recommend`` makes are
point lookups by (GPU, workload) on an index, not the column scans DuckDB is built for.

Layout (schema version :data:`SCHEMA_VERSION`; :func:`migrate` brings older files up to it)::

    schema_version(version)                     one row
    runs(run_id PK, path, created_utc, imported_utc, preset, gpu, device, num_sms,
         torch, cuda, cudnn, triton, flashinfer, driver, profattn, repeat, read_gbps, copy_gbps, matmul_tflops)
    cells(run_id, cell_id, PK(run_id, cell_id), gpu, workload_key, workload_json, <workload fields>,
          backend, family, status, correct, eligible, latency_us, timing_kind, p10_us, p90_us, reps,
          samples_json, eager_us, graph_us, gpu_time_us, dominant_kernel, grid, block, ctas,
          ctas_per_sm, dram_bytes, requested_bytes, executed_pairs, interface, read_layout, read_key,
          adoption_json, kernels_per_call, host_us)     index (gpu, workload_key), (gpu, read_key)
    meta(key PK, value)                         'generation': bumped by every import and forget
    policy_cache(gpu PK, generation, policy_json)   a policy derived at that generation

Units: µs for times, bytes for bytes. The run directory's results.json stays the source of truth: the store
is an index over runs, rebuilt with ``profattn db import``.

A new store is built in a temporary file beside its path and linked into place (so a concurrent opener sees a
whole store or none) and carries :data:`APPLICATION_ID`; an existing file is used only when it carries that mark or
the ``schema_version`` table of a store made before the mark — another program's database, an empty file or a
table-less SQLite file is refused before a byte of it is written.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path

from profattn.errors import ProfattnError
from profattn.results import RunResult, read_results
from profattn.interfaces import adoption_of, layout_read
from profattn.store.records import (
    Measurement, StoredRun, current_method, measurements, read_workload, requested_bytes, stored_run, workload_key,
)
from profattn.values import MAX_DURATION_US, number_problem
from profattn.workload import Workload

#: The schema this code writes; :data:`MIGRATIONS` lead from 0 (an empty file) up to it.
SCHEMA_VERSION = 4
#: Seconds a writer waits for another writer's transaction before giving up.
BUSY_TIMEOUT_S = 30.0
#: Environment variable that overrides :func:`default_db_path`.
DB_ENV = "PROFATTN_DB"
#: ``PRAGMA application_id`` of every store profattn creates ("pfat"): how a file is known to be a store before
#: anything is written into it (SQLite's header field for exactly this, https://www.sqlite.org/pragma.html).
APPLICATION_ID = int.from_bytes(b"pfat", "big")


class StoreError(ProfattnError):
    """The store cannot be opened, read or written (names the file and the reason); exit code 2."""


def default_db_path() -> Path:
    """Where the store lives unless ``--db`` says: ``$PROFATTN_DB``, else ``$XDG_CACHE_HOME/profattn/results.sqlite``,
    else ``~/.cache/profattn/results.sqlite``."""
    env = os.environ.get(DB_ENV)
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "profattn" / "results.sqlite"


_WORKLOAD_COLS = ("phase TEXT NOT NULL, batch INTEGER NOT NULL, q_len INTEGER NOT NULL, kv_len INTEGER NOT NULL, "
                  "num_q_heads INTEGER NOT NULL, num_kv_heads INTEGER NOT NULL, head_dim INTEGER NOT NULL, "
                  "dtype TEXT NOT NULL, mask TEXT NOT NULL, kv_layout TEXT NOT NULL, page_size INTEGER, "
                  "kv_len_dist TEXT NOT NULL, shared_prefix_len INTEGER NOT NULL, append INTEGER NOT NULL, "
                  "kv_dtype TEXT, window INTEGER, varlen INTEGER NOT NULL")


def _v1(conn: sqlite3.Connection) -> None:
    """Version 1: runs (without the FlashInfer version) and cells (without CTAs per SM and the byte figures)."""
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (0)")
    conn.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, path TEXT NOT NULL, created_utc TEXT NOT NULL, "
                 "imported_utc TEXT NOT NULL, preset TEXT NOT NULL, gpu TEXT NOT NULL, device TEXT NOT NULL, "
                 "num_sms INTEGER, torch TEXT, cuda TEXT, cudnn TEXT, triton TEXT, driver TEXT, profattn TEXT, "
                 "repeat INTEGER NOT NULL)")
    conn.execute("CREATE TABLE cells (run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, "
                 "cell_id TEXT NOT NULL, gpu TEXT NOT NULL, num_sms INTEGER, workload_key TEXT NOT NULL, "
                 f"workload_json TEXT NOT NULL, {_WORKLOAD_COLS}, backend TEXT NOT NULL, family TEXT NOT NULL, "
                 "status TEXT NOT NULL, correct INTEGER, eligible INTEGER NOT NULL, latency_us REAL, timing_kind TEXT, "
                 "p10_us REAL, p90_us REAL, reps INTEGER, samples_json TEXT NOT NULL, eager_us REAL, graph_us REAL, "
                 "gpu_time_us REAL, dominant_kernel TEXT, grid TEXT, block TEXT, ctas INTEGER, "
                 "PRIMARY KEY (run_id, cell_id))")
    conn.execute("CREATE INDEX cells_lookup ON cells (gpu, workload_key)")


def _v2(conn: sqlite3.Connection) -> None:
    """Version 2: the FlashInfer version per run; CTAs per SM, DRAM and requested bytes per cell (the winner's
    evidence; requested bytes back-filled from each stored workload); the generation counter and the policy cache."""
    conn.execute("ALTER TABLE runs ADD COLUMN flashinfer TEXT")
    for col in ("ctas_per_sm REAL", "dram_bytes REAL", "requested_bytes INTEGER"):
        conn.execute(f"ALTER TABLE cells ADD COLUMN {col}")
    rows = conn.execute("SELECT rowid, workload_json FROM cells").fetchall()
    for rowid, text in rows:
        conn.execute("UPDATE cells SET requested_bytes = ? WHERE rowid = ?",
                     (requested_bytes(Workload.from_dict(json.loads(text))), rowid))
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('generation', '0')")
    conn.execute("CREATE TABLE policy_cache (gpu TEXT PRIMARY KEY, generation INTEGER NOT NULL, policy_json TEXT NOT NULL)")


def _v3(conn: sqlite3.Connection) -> None:
    """Version 3: what the selection's cost model and the drop-in ranking read — each cell's executed pairs, the
    backend's declared interface and the layout its kernel read (back-filled from the built-in declarations,
    :data:`profattn.interfaces.ADOPTIONS`; a plugin's stays empty until its run is imported again), the key of the
    workload as read (a dense backend on a paged workload: the dense workload), kernels per call; each run's
    measured ceilings (empty until re-imported). The policy cache is cleared (its format changed)."""
    for col in ("executed_pairs INTEGER", "interface TEXT", "read_layout TEXT", "read_key TEXT", "adoption_json TEXT",
                "kernels_per_call REAL"):
        conn.execute(f"ALTER TABLE cells ADD COLUMN {col}")
    for col in ("read_gbps REAL", "copy_gbps REAL", "matmul_tflops REAL"):
        conn.execute(f"ALTER TABLE runs ADD COLUMN {col}")
    for rowid, backend, text in conn.execute("SELECT rowid, backend, workload_json FROM cells").fetchall():
        w = Workload.from_dict(json.loads(text))
        adoption = adoption_of(backend)
        read = layout_read(adoption, w.kv_layout.value, packed=w.is_packed)
        conn.execute("UPDATE cells SET interface = ?, read_layout = ?, read_key = ?, adoption_json = ? WHERE rowid = ?",
                     (adoption.interface.value if adoption else None, read.value,
                      workload_key(read_workload(w, read)),
                      json.dumps(adoption.to_dict(), sort_keys=True) if adoption else None, rowid))
    conn.execute("CREATE INDEX cells_read ON cells (gpu, read_key)")
    conn.execute("DELETE FROM policy_cache")


def _v4(conn: sqlite3.Connection) -> None:
    """Version 4: each cell's host time per eager call (``host_us``; empty for cells of runs timed before the host's
    stalls were hidden — the mark :func:`~profattn.store.records.current_method` reads). The policy cache is cleared
    (the cells it was derived from may now be superseded)."""
    conn.execute("ALTER TABLE cells ADD COLUMN host_us REAL")
    conn.execute("DELETE FROM policy_cache")


#: The tables a store at :data:`SCHEMA_VERSION` holds.
_TABLES = ("schema_version", "runs", "cells", "meta", "policy_cache")
#: ``MIGRATIONS[i]`` takes a store at version ``i`` to version ``i + 1`` (inside one transaction).
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3, _v4)


def stored_version(conn: sqlite3.Connection) -> int:
    """The schema version of an open store: 0 for an empty file.

    Raises:
        StoreError: the file holds tables but no ``schema_version`` (not a profattn store).
    """
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_version" not in tables:
        if tables:
            raise StoreError(f"not a profattn results store (tables: {', '.join(sorted(tables))})")
        return 0
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring the store up to schema ``target``, one transaction per step (a failed step leaves the version
    before it). Returns the version reached.

    Raises:
        StoreError: the store is newer than this code (written by a later profattn), or not a store.
    """
    version = stored_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(f"results store schema version {version} is newer than this profattn reads "
                         f"({SCHEMA_VERSION}); upgrade profattn or use another --db")
    while version < target:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            if stored_version(conn) == version:  # another process may have migrated meanwhile
                MIGRATIONS[version](conn)
                conn.execute("UPDATE schema_version SET version = ?", (version + 1,))
        version = stored_version(conn)
    return version


_CELL_FIELDS = tuple(f.name for f in fields(Measurement))
_CELL_COLS = tuple("samples_json" if n == "samples_us" else n for n in _CELL_FIELDS)
_RUN_FIELDS = tuple(f.name for f in fields(StoredRun) if f.name != "cells")


def _cell_values(m: Measurement) -> tuple:
    out = []
    for name in _CELL_FIELDS:
        v = getattr(m, name)
        out.append(json.dumps(list(v)) if name == "samples_us" else int(v) if isinstance(v, bool) else v)
    return tuple(out)


_SAMPLES = _CELL_FIELDS.index("samples_us")
_BOOL_AT = tuple(_CELL_FIELDS.index(n) for n in ("append", "varlen", "eligible"))
_CORRECT = _CELL_FIELDS.index("correct")


#: (index, column) of every number column read back (bounded and finite before use: :func:`_measurement`).
_NUMBERS = tuple((i, f.name) for i, f in enumerate(fields(Measurement))
                 if str(f.type).split(" |")[0] in ("int", "float") and f.name not in ("append", "varlen", "eligible"))


#: The shape columns: integers ≥ 1 in every cell.
_SHAPE = frozenset(("batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim"))
#: The latencies a cell is ranked by (and divided by): at least :data:`MIN_LATENCY_US` when present.
_LATENCIES = frozenset(("latency_us", "eager_us", "graph_us"))
#: 1 ns: no call or kernel a profiler timed is shorter.
MIN_LATENCY_US = 1e-3


def _damaged(row: Sequence, column: str, problem: str) -> StoreError:
    run, cell = row[_CELL_FIELDS.index("run_id")], row[_CELL_FIELDS.index("cell_id")]
    return StoreError(f"results store: cell {str(cell)[:80]!r} of {str(run)[:40]}: column {column} is {problem} (a "
                      f"damaged store: `profattn db forget {str(run)[:40]}`, then import the run again)")


def _measurement(row: Sequence) -> Measurement:
    """One ``cells`` row as a :class:`Measurement`, every number bounded, finite and not negative (durations,
    ``*_us``, within :data:`profattn.values.MAX_DURATION_US`; latencies and samples at least :data:`MIN_LATENCY_US`;
    the shape columns integers ≥ 1).

    Raises:
        StoreError: a number that is not (a damaged or hand-edited store), naming the cell and the column.
    """
    values = list(row)
    for i, name in _NUMBERS:
        if values[i] is not None or name in _SHAPE:
            shape = name in _SHAPE
            problem = number_problem(values[i], integer=shape, limit=MAX_DURATION_US if name.endswith("_us") else None)
            if problem is None and (values[i] < 1 if shape else values[i] < 0):
                problem = f"{values[i]}, " + ("not a positive integer" if shape else "negative")
            if problem is None and name in _LATENCIES and values[i] is not None and values[i] < MIN_LATENCY_US:
                problem = f"{values[i]!r}, below {MIN_LATENCY_US:g} µs (1 ns): not a measured latency"
            if problem:
                raise _damaged(row, name, problem)
    try:
        samples = json.loads(values[_SAMPLES]) if isinstance(values[_SAMPLES], str) else None
    except (json.JSONDecodeError, RecursionError, ValueError):
        samples = None
    if not isinstance(samples, list) or any(number_problem(x, limit=MAX_DURATION_US) or x < MIN_LATENCY_US
                                            for x in samples):
        raise _damaged(row, "samples_json", f"{str(values[_SAMPLES])[:40]!r}, not a list of finite latencies")
    values[_SAMPLES] = tuple(samples)
    for i in _BOOL_AT:
        values[i] = bool(values[i])
    if values[_CORRECT] is not None:
        values[_CORRECT] = bool(values[_CORRECT])
    return Measurement(*values)


class ResultsStore:
    """An open results store (see the module docstring). Use :func:`open_store`; close with :meth:`close` or
    as a context manager."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    def __enter__(self) -> "ResultsStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    # ---- writing ---------------------------------------------------------------------------
    def add_run(self, run: RunResult, path: str | os.PathLike[str], *, cells: Iterable[Measurement] | None = None) -> StoredRun:
        """Add (or replace) ``run``'s cells, imported from ``path``, in one transaction: re-importing a run
        replaces its cells (keyed by run id + cell id), never duplicates them. Returns the run's row.

        Raises:
            StoreError: the write failed; the store is unchanged.
        """
        rows = tuple(cells) if cells is not None else measurements(run)
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = stored_run(run, str(Path(path).resolve()), now, len(rows))
        try:
            with self.conn:
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.execute("DELETE FROM cells WHERE run_id = ?", (meta.run_id,))
                self.conn.execute(f"INSERT OR REPLACE INTO runs ({', '.join(_RUN_FIELDS)}) VALUES "
                                  f"({', '.join('?' * len(_RUN_FIELDS))})", tuple(getattr(meta, n) for n in _RUN_FIELDS))
                self.conn.executemany(f"INSERT INTO cells ({', '.join(_CELL_COLS)}) VALUES ({', '.join('?' * len(_CELL_COLS))})",
                                      (_cell_values(m) for m in rows))
                self._bump()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: could not store run {meta.run_id} ({path}): {exc}") from None
        return meta

    def forget(self, run_ids: Sequence[str] = (), before: str | None = None) -> int:
        """Remove the runs named (``run_ids``: ids or imported paths) and, with ``before`` (ISO date
        ``YYYY-MM-DD``), every run made before that day. Returns the runs removed.

        Raises:
            StoreError: the write failed (the store is unchanged).
        """
        try:
            with self.conn:
                self.conn.execute("BEGIN IMMEDIATE")
                ids = {r[0] for r in self.conn.execute("SELECT run_id, path FROM runs")
                       if r[0] in run_ids or r[1] in {str(Path(p).resolve()) for p in run_ids}}
                if before is not None:
                    ids |= {r[0] for r in self.conn.execute("SELECT run_id FROM runs WHERE created_utc < ?", (before,))}
                for rid in ids:
                    self.conn.execute("DELETE FROM cells WHERE run_id = ?", (rid,))
                    self.conn.execute("DELETE FROM runs WHERE run_id = ?", (rid,))
                if ids:
                    self._bump()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: could not forget runs: {exc}") from None
        return len(ids)

    def _bump(self) -> None:
        self.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

    # ---- reading ---------------------------------------------------------------------------
    def generation(self) -> int:
        """A counter bumped by every import and forget (the policy cache is valid for one generation)."""
        return int(self.conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def runs(self) -> tuple[StoredRun, ...]:
        """Every stored run with its cell count, oldest first."""
        rows = self.conn.execute(
            f"SELECT {', '.join('r.' + n for n in _RUN_FIELDS)}, (SELECT COUNT(*) FROM cells c WHERE c.run_id = r.run_id) "
            "FROM runs r ORDER BY r.created_utc, r.run_id").fetchall()
        return tuple(StoredRun(*r) for r in rows)

    def gpus(self) -> dict[str, int]:
        """GPU name -> cells stored for it (a CPU run's processor name counts too: see :meth:`cuda_gpus`)."""
        return dict(self.conn.execute("SELECT gpu, COUNT(*) FROM cells GROUP BY gpu ORDER BY gpu").fetchall())

    def cuda_gpus(self) -> tuple[str, ...]:
        """The stored device names measured by a CUDA run (the GPUs proper; a CPU run stores its processor's name)."""
        rows = self.conn.execute("SELECT DISTINCT gpu FROM runs WHERE device = 'cuda' ORDER BY gpu").fetchall()
        return tuple(r[0] for r in rows)

    def cells_for(self, gpu: str, key: str, *, as_read: bool = False) -> tuple[Measurement, ...]:
        """The cells of workload ``key`` (:func:`~profattn.store.records.workload_key`) on ``gpu`` (index lookup);
        with ``as_read`` also the cells whose kernel read that workload on another's data (``read_key``: a dense
        decode call is answered by the dense backends' cells on the contiguous copy of a paged workload). Cells a
        re-measurement under the current timing method supersedes are left out (:func:`~profattn.store.records.current_method`)."""
        cols = ", ".join(_CELL_COLS)
        if as_read:
            rows = self.conn.execute(f"SELECT {cols} FROM cells WHERE gpu = ? AND workload_key = ? UNION "
                                     f"SELECT {cols} FROM cells WHERE gpu = ? AND read_key = ?", (gpu, key, gpu, key)).fetchall()
        else:
            rows = self.conn.execute(f"SELECT {cols} FROM cells WHERE gpu = ? AND workload_key = ?", (gpu, key)).fetchall()
        return self._current(rows)

    def cells_on(self, gpu: str, *, eligible_only: bool = False) -> tuple[Measurement, ...]:
        """Every cell measured on ``gpu`` (only the eligible ones with ``eligible_only``), less those superseded as in
        :meth:`cells_for`."""
        extra = " AND eligible = 1" if eligible_only else ""
        rows = self.conn.execute(f"SELECT {', '.join(_CELL_COLS)} FROM cells WHERE gpu = ?{extra}", (gpu,)).fetchall()
        return self._current(rows)

    @staticmethod
    def _current(rows: Sequence[Sequence]) -> tuple[Measurement, ...]:
        """The rows as measurements, less those :func:`current_method` supersedes among them."""
        return current_method(_measurement(r) for r in rows)

    def run(self, rid: str) -> StoredRun | None:
        """The stored run ``rid``, or None."""
        return next((r for r in self.runs() if r.run_id == rid), None)

    def cached_policy(self, gpu: str) -> str | None:
        """The policy JSON cached for ``gpu`` at the current generation, or None."""
        row = self.conn.execute("SELECT generation, policy_json FROM policy_cache WHERE gpu = ?", (gpu,)).fetchone()
        return row[1] if row and row[0] == self.generation() else None

    def cache_policy(self, gpu: str, policy_json: str, generation: int) -> None:
        """Keep ``policy_json`` for ``gpu``, derived at ``generation`` (a failure to write is ignored: the cache
        only saves time)."""
        try:
            with self.conn:
                self.conn.execute("INSERT OR REPLACE INTO policy_cache VALUES (?, ?, ?)", (gpu, generation, policy_json))
        except sqlite3.Error:
            pass


def _create_store(path: Path) -> None:
    """Build an empty store of :data:`SCHEMA_VERSION` in a temporary file beside ``path`` and link it into place;
    when another process linked its store first, theirs is kept (either is a whole store). On a file system without
    hard links the path is claimed with ``O_EXCL`` and the built file copied in (never replacing another's store).

    Raises:
        OSError, sqlite3.Error: the directory cannot be written.
    """
    import shutil
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # the mode SQLite would give a file it created (mkstemp makes it 0600)
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            migrate(conn)
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created the store meanwhile: theirs is used
        except OSError:  # a file system without hard links
            try:
                out = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                return
            with os.fdopen(out, "wb") as dst, open(tmp, "rb") as src:
                shutil.copyfileobj(src, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _refuse_foreign(path: Path) -> None:
    """Raise :class:`StoreError` unless the file at ``path`` is a profattn store, without writing a byte: its header's
    application id (offset 68, https://www.sqlite.org/fileformat.html) is :data:`APPLICATION_ID`; or, for a store made
    before the mark (id 0), a read-only connection finds every table a store has (:data:`_TABLES`, ``schema_version``
    with its ``version`` column). A file that cannot be read without writing (a hot journal or WAL) is refused."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not head.startswith(_SQLITE_MAGIC) or len(head) < 100:
        raise StoreError("not a SQLite database, so not a profattn results store")
    app = int.from_bytes(head[68:72], "big")
    if app == APPLICATION_ID:
        return
    if app != 0:
        raise StoreError(f"another program's database (application_id {app:#x}), not a profattn results store: "
                         "profattn never writes into a database it did not create")
    from urllib.parse import quote

    try:
        ro = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            names = {r[0]: r[1] for r in ro.execute("SELECT name, type FROM sqlite_master")}
            columns = ({r[1] for r in ro.execute("PRAGMA table_info(schema_version)")}
                       if names.get("schema_version") == "table" else set())
        finally:
            ro.close()
    except sqlite3.Error as exc:
        raise StoreError(f"not a readable profattn results store ({exc}); profattn never writes into a database "
                         "it did not create") from None
    if all(names.get(t) == "table" for t in _TABLES[:3]) and "version" in columns:
        return  # a store from before the mark (its other tables come with the migrations)
    what = ", ".join(f"{t} {n}" for n, t in sorted(names.items())[:6]) or "no tables"
    raise StoreError(f"not a profattn results store ({what}): profattn never writes into a database it did not "
                     "create; give a path that does not exist yet")


def open_store(path: str | os.PathLike[str] | None = None, *, create: bool = True) -> ResultsStore:
    """Open (creating and migrating as needed) the store at ``path`` (default :func:`default_db_path`), in WAL
    mode with a :data:`BUSY_TIMEOUT_S` busy timeout. A new store is created whole (module docstring); the path is
    always a file name (``:memory:`` or ``file:…`` are files of that name, not SQLite's special names).

    Raises:
        StoreError: an empty path or one ending in a separator; no store there and ``create`` is False; a dangling
            symbolic link; the file is empty, not a SQLite database or not a profattn store (refused before anything
            is written into it); its schema is newer than this code's; it cannot be created.
    """
    raw = os.fspath(path) if path is not None else None
    if raw is not None and not str(raw).strip():
        raise StoreError("--db must name the store's file")
    if raw is not None and str(raw).endswith(("/", os.sep)):
        raise StoreError(f"{raw} ends in a separator: give the store's file (e.g. {Path(raw) / 'results.sqlite'})")
    path = Path(raw) if raw is not None else default_db_path()
    if path.is_dir():
        raise StoreError(f"{path} is a directory: give the store's file (e.g. {path / 'results.sqlite'})")
    if path.is_symlink() and not path.exists():
        raise StoreError(f"{path} is a symbolic link to nothing ({os.readlink(path)}): give the store's file")
    if not create and not path.is_file():
        raise StoreError(f"no results store at {path} (add runs with `profattn db import RUN_DIR`, or give --db)")
    if path.exists() and not path.is_file():
        raise StoreError(f"{path} is not a regular file: give the store's file")
    if path.is_file() and path.stat().st_size == 0:
        raise StoreError(f"{path} is an empty file, not a results store (give a path that does not exist yet: "
                         "profattn creates the store; it never writes into a file it did not create)")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise StoreError(f"{path}: {parent} is a file, not a directory")
            break
    try:
        if not path.exists():
            _create_store(path)
        else:
            _refuse_foreign(path)  # another program's database is refused before anything is written into it
        conn = sqlite3.connect(os.path.abspath(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")  # text of a damaged file never stops a read
    except StoreError as exc:
        raise StoreError(f"{path}: {exc}") from None
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open results store {path}: {exc}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in _TABLES if t not in tables]
        if missing:
            raise StoreError(f"not a usable results store: table {missing[0]!r} is missing (a damaged file: "
                             "`profattn db import` the runs into a new --db)")
        if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")  # a store from before the mark gets it
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"{path} is not a usable results store: {exc}") from None
    except StoreError as exc:
        conn.close()
        raise StoreError(f"{path}: {exc}") from None
    return ResultsStore(conn, path)


def import_runs(store: ResultsStore, paths: Iterable[str | os.PathLike[str]]) -> list[StoredRun]:
    """Read each run directory (or results.json) and add it to ``store``; one transaction per run.

    Raises:
        ResultsError: a path holds no readable results.json (runs before it stay imported).
        StoreError: a write failed.
    """
    out = []
    for p in paths:
        root = Path(p) if Path(p).is_dir() else Path(p).parent
        out.append(store.add_run(read_results(p), root))
    return out
