"""The results store: every measured cell of every run, in one local SQLite file, keyed by GPU, software
versions, workload and backend (:mod:`profattn.store.db`), and the records it holds
(:mod:`profattn.store.records`). Torch-free; sits above ``results`` and below ``analysis``."""

from profattn.store.db import (
    DB_ENV, SCHEMA_VERSION, ResultsStore, StoreError, default_db_path, import_runs, migrate, open_store, stored_version,
)
from profattn.store.records import (
    Measurement, StoredRun, canonical_workload, measurement, measurements, read_workload, row_features, run_id, stored_run,
    workload_fields, workload_key,
)

__all__ = [
    "DB_ENV", "SCHEMA_VERSION", "Measurement", "ResultsStore", "StoreError", "StoredRun", "canonical_workload",
    "default_db_path", "import_runs", "measurement", "measurements", "migrate", "open_store", "read_workload", "row_features", "run_id",
    "stored_run", "stored_version", "workload_fields", "workload_key",
]
