"""The DuckDB warehouse: tables `predictions`, `quarantine`, `guard_actions` and the `runs` ledger.

DuckDB allows one read-write process per file, so connections are short and opening one retries
with backoff while another process holds the lock. A partition's rows are replaced in one
transaction: readers see the previous run's rows or the new ones, never a mix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tasks.contracts import PREDICTION_SCHEMA

_DUCK_TYPES = {
    pa.string(): "VARCHAR",
    pa.date32(): "DATE",
    pa.float64(): "DOUBLE",
    pa.int16(): "SMALLINT",
    pa.int64(): "BIGINT",
    pa.list_(pa.string()): "VARCHAR[]",
}

PARTITIONED_TABLES = frozenset(
    {"predictions", "quarantine", "guard_actions", "guard_summary", "fallback_report", "drift_report", "drift_histograms"}
)
DRIFT_REPORT_COLUMNS = (
    "run_id VARCHAR, job VARCHAR, partition_date DATE, feature VARCHAR, baseline VARCHAR, psi DOUBLE, ks DOUBLE, "
    'ks_upper DOUBLE, wasserstein DOUBLE, js DOUBLE, flag VARCHAR, "rows" BIGINT, null_share DOUBLE, '
    "baseline_null_share DOUBLE, out_of_range_share DOUBLE"
)
DRIFT_HISTOGRAM_COLUMNS = (
    "run_id VARCHAR, job VARCHAR, partition_date DATE, feature VARCHAR, edges DOUBLE[], counts BIGINT[], nulls BIGINT"
)
FALLBACK_REPORT_COLUMNS = (
    'run_id VARCHAR, job VARCHAR, partition_date DATE, kind VARCHAR, detail VARCHAR, "rows" BIGINT, share DOUBLE, '
    '"limit" DOUBLE, breached BOOLEAN'
)
QUARANTINE_COLUMNS = "run_id VARCHAR, job VARCHAR, partition_date DATE, entity_id VARCHAR, failed_expectations VARCHAR[], raw_row VARCHAR"
GUARD_ACTION_COLUMNS = (
    "run_id VARCHAR, job VARCHAR, partition_date DATE, entity_id VARCHAR, expectation VARCHAR, "
    "column_name VARCHAR, action VARCHAR, old_value VARCHAR, new_value VARCHAR"
)
GUARD_SUMMARY_COLUMNS = (
    "run_id VARCHAR, job VARCHAR, partition_date DATE, expectation VARCHAR, column_name VARCHAR, "
    "expectation_type VARCHAR, action VARCHAR, evaluated_by VARCHAR, rows BIGINT, share DOUBLE"
)
RUN_COLUMNS = """
    run_id VARCHAR PRIMARY KEY, job VARCHAR NOT NULL, partition_date DATE NOT NULL, status VARCHAR NOT NULL,
    model_name VARCHAR, model_version VARCHAR, feature_version VARCHAR,
    rows_read BIGINT, rows_scored BIGINT, rows_repaired BIGINT, rows_quarantined BIGINT,
    rows_failed BIGINT, rows_fallback BIGINT,
    rows_with_reasons BIGINT, rows_without_adverse_reason BIGINT, rows_straddling BIGINT,
    decisions JSON, guard_counts JSON, inference JSON,
    started_at TIMESTAMPTZ NOT NULL, ended_at TIMESTAMPTZ, error VARCHAR
"""


def _ddl(table: str, schema: pa.Schema) -> str:
    cols = ", ".join(f'"{f.name}" {_DUCK_TYPES[f.type]}{"" if f.nullable else " NOT NULL"}' for f in schema)
    return f"CREATE TABLE IF NOT EXISTS {table} ({cols})"


class DuckDBWarehouse:
    def __init__(self, path: Path, *, lock_timeout_s: float = 120.0) -> None:
        self.path = path
        self.lock_timeout_s = lock_timeout_s

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        try:
            if not read_only:
                self._ensure_schema(con)
            yield con
        finally:
            con.close()

    @staticmethod
    def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(_ddl("predictions", PREDICTION_SCHEMA))
        con.execute(f"CREATE TABLE IF NOT EXISTS quarantine ({QUARANTINE_COLUMNS})")
        con.execute(f"CREATE TABLE IF NOT EXISTS guard_actions ({GUARD_ACTION_COLUMNS})")
        con.execute(f"CREATE TABLE IF NOT EXISTS guard_summary ({GUARD_SUMMARY_COLUMNS})")
        con.execute(f"CREATE TABLE IF NOT EXISTS fallback_report ({FALLBACK_REPORT_COLUMNS})")
        con.execute(f"CREATE TABLE IF NOT EXISTS drift_report ({DRIFT_REPORT_COLUMNS})")
        con.execute(f"CREATE TABLE IF NOT EXISTS drift_histograms ({DRIFT_HISTOGRAM_COLUMNS})")
        con.execute(f"CREATE TABLE IF NOT EXISTS runs ({RUN_COLUMNS})")
        # Ledgers created before these columns existed get them added in place.
        for column in ("rows_failed BIGINT", "rows_fallback BIGINT"):
            con.execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {column}")

    def record_run_started(self, row: dict[str, Any]) -> None:
        with self.connect() as con:
            con.execute(
                "INSERT INTO runs (run_id, job, partition_date, status, model_name, model_version, feature_version, started_at) "
                "VALUES ($run_id, $job, $partition_date, 'running', $model_name, $model_version, $feature_version, $started_at)",
                row,
            )

    def record_run_ended(self, run_id: str, *, status: str, ended_at: Any, error: str | None = None, counts: dict[str, Any] | None = None) -> None:
        counts = counts or {}
        values = {
            "run_id": run_id,
            "status": status,
            "ended_at": ended_at,
            "error": error,
            **{k: counts.get(k) for k in (
                "rows_read", "rows_scored", "rows_repaired", "rows_quarantined", "rows_failed", "rows_fallback",
                "rows_with_reasons", "rows_without_adverse_reason", "rows_straddling",
            )},
            **{k: json.dumps(counts[k]) if k in counts else None for k in ("decisions", "guard_counts", "inference")},
        }
        with self.connect() as con:
            con.execute(
                "UPDATE runs SET status=$status, ended_at=$ended_at, error=$error, rows_read=$rows_read, "
                "rows_scored=$rows_scored, rows_repaired=$rows_repaired, rows_quarantined=$rows_quarantined, "
                "rows_failed=$rows_failed, rows_fallback=$rows_fallback, "
                "rows_with_reasons=$rows_with_reasons, rows_without_adverse_reason=$rows_without_adverse_reason, "
                "rows_straddling=$rows_straddling, decisions=$decisions, guard_counts=$guard_counts, "
                "inference=$inference WHERE run_id=$run_id",
                values,
            )

    def previous_drift_histograms(self, job: str, partition_date: Any) -> list[dict[str, Any]]:
        """Drift histograms of the job's latest scored partition before `partition_date` (empty if none)."""
        if not self.path.exists():
            return []
        with self.connect(read_only=True) as con:
            if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'drift_histograms'").fetchall()[0][0]:
                return []
            cursor = con.execute(
                "SELECT feature, edges, counts, nulls FROM drift_histograms WHERE job = ? AND partition_date = "
                "(SELECT max(partition_date) FROM drift_histograms WHERE job = ? AND partition_date < ?)",
                [job, job, partition_date],
            )
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def latest_succeeded_run(self, job: str) -> dict[str, Any] | None:
        """The newest succeeded `runs` row of `job`, or None when it never succeeded (or no ledger exists)."""
        if not self.path.exists():
            return None
        with self.connect(read_only=True) as con:
            cursor = con.execute(
                "SELECT * FROM runs WHERE job = ? AND status = 'succeeded' ORDER BY ended_at DESC LIMIT 1", [job]
            )
            rows = cursor.fetchall()
            names = [d[0] for d in cursor.description]
        return dict(zip(names, rows[0], strict=True)) if rows else None

    def record_run_failed(self, *, run_id: str, job: str, partition_date: Any, ended_at: Any, error: str) -> None:
        """Close a run as failed; a run that failed before it was opened gets its ledger row here."""
        with self.connect() as con:
            con.execute(
                "INSERT INTO runs (run_id, job, partition_date, status, started_at, ended_at, error) "
                "VALUES ($run_id, $job, $partition_date, 'failed', $ended_at, $ended_at, $error) "
                "ON CONFLICT (run_id) DO UPDATE SET status = 'failed', ended_at = $ended_at, error = $error",
                {"run_id": run_id, "job": job, "partition_date": partition_date, "ended_at": ended_at, "error": error},
            )

    def replace_partition(self, *, job: str, partition_date: Any, files: dict[str, list[Path]]) -> dict[str, int]:
        """Swap in the run's rows of each table for (job, partition_date) in one transaction."""
        unknown = set(files) - PARTITIONED_TABLES
        if unknown:
            raise ValueError(f"not a partitioned warehouse table: {sorted(unknown)}")
        inserted: dict[str, int] = {}
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                for table, paths in files.items():
                    con.execute(f"DELETE FROM {table} WHERE job = ? AND partition_date = ?", [job, partition_date])
                    if paths:
                        con.execute(
                            f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?)", [[str(p) for p in paths]]
                        )
                    inserted[table] = con.execute(
                        f"SELECT count(*) FROM {table} WHERE job = ? AND partition_date = ?", [job, partition_date]
                    ).fetchall()[0][0]
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return inserted
