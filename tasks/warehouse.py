"""The DuckDB warehouse: tables `predictions`, `quarantine`, `guard_actions` and the `runs` ledger.

DuckDB allows one read-write process per file, so connections are short and opening one retries
with backoff while another process holds the lock. A partition's rows are replaced in one
transaction: readers see the previous run's rows or the new ones, never a mix.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tasks.contracts import PREDICTION_SCHEMA
from tasks.errors import LabelError

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


_RUN_KEYED = [("job", pa.string()), ("partition_date", pa.date32())]
MONITORING_SCHEMAS: dict[str, pa.Schema] = {
    "decision_monitoring": pa.schema(
        [
            *_RUN_KEYED, ("run_id", pa.string()), ("model_version", pa.string()), ("measure", pa.string()),
            ("item", pa.string()), ("value", pa.float64()), ("baseline", pa.float64()),
            ("baseline_partitions", pa.int64()), ("delta", pa.float64()), ("tolerance", pa.float64()),
            ("flag", pa.string()),
        ]
    ),
    "outcome_labels": pa.schema(
        [
            *_RUN_KEYED, ("entity_id", pa.string()), ("outcome", pa.int16()), ("observed_date", pa.date32()),
            ("source", pa.string()), ("entity_status", pa.string()),
        ]
    ),
    "outcome_partitions": pa.schema(
        [
            *_RUN_KEYED, ("status", pa.string()), ("predictions", pa.int64()), ("predictions_labelled", pa.int64()),
            ("labels", pa.int64()), ("labels_matched", pa.int64()), ("labels_quarantined", pa.int64()),
            ("labels_unknown_entity", pa.int64()),
            ("labels_duplicate", pa.int64()), ("labels_without_outcome", pa.int64()),
        ]
    ),
    "outcome_metrics": pa.schema(
        [
            *_RUN_KEYED, ("model_version", pa.string()), ("scoring_run_id", pa.string()), ("rows", pa.int64()),
            ("labelled", pa.int64()), ("events", pa.int64()), ("observed_rate", pa.float64()),
            ("observed_low", pa.float64()), ("observed_high", pa.float64()), ("interval_level", pa.float64()),
            ("expected_rate", pa.float64()), ("expected_events", pa.float64()), ("expected_within_interval", pa.bool_()),
            ("auc", pa.float64()), ("brier", pa.float64()), ("ece", pa.float64()), ("psi_score", pa.float64()),
            ("psi_baseline_rows", pa.int64()),
        ]
    ),
    "outcome_calibration": pa.schema(
        [
            *_RUN_KEYED, ("model_version", pa.string()), ("bin", pa.int64()), ("bin_low", pa.float64()),
            ("bin_high", pa.float64()), ("rows", pa.int64()), ("events", pa.int64()), ("probability_sum", pa.float64()),
        ]
    ),
    "outcome_decisions": pa.schema(
        [
            *_RUN_KEYED, ("model_version", pa.string()), ("decision", pa.string()), ("rows", pa.int64()),
            ("events", pa.int64()), ("precision", pa.float64()), ("recall", pa.float64()),
        ]
    ),
}
"""Tables of prediction monitoring (`decision_monitoring`) and realized outcomes (`outcome_*`), each
keyed by (job, partition_date) and replaced per partition. No run id or clock time of the monitoring
run is stored, so recomputing from the same predictions and labels leaves identical tables."""

# Standard SQL types, so the same DDL serves the PostgreSQL backend.
_PORTABLE_TYPES = {
    pa.string(): "VARCHAR",
    pa.date32(): "DATE",
    pa.float64(): "DOUBLE PRECISION",
    pa.int16(): "SMALLINT",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
}


_PLAIN_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


def _quoted(identifier: str) -> str:
    """A double-quoted SQL identifier; only plain lower-case names, so nothing needs escaping."""
    if not _PLAIN_IDENTIFIER.fullmatch(identifier):
        raise ValueError(f"not a plain SQL identifier: {identifier!r}")
    return f'"{identifier}"'


def _monitoring_table(table: str) -> pa.Schema:
    try:
        return MONITORING_SCHEMAS[table]
    except KeyError:
        raise ValueError(f"not a monitoring table: {table!r}; known: {sorted(MONITORING_SCHEMAS)}") from None


def _table_exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]).fetchall()[0][0])


def _ensure_monitoring_schema(con: duckdb.DuckDBPyConnection) -> None:
    for table, schema in MONITORING_SCHEMAS.items():
        columns = ", ".join(f"{_quoted(f.name)} {_PORTABLE_TYPES[f.type]}" for f in schema)
        con.execute(f"CREATE TABLE IF NOT EXISTS {_quoted(table)} ({columns})")


class DuckDBWarehouse:
    def __init__(self, path: Path, *, lock_timeout_s: float = 120.0) -> None:
        self.path = path
        self.lock_timeout_s = lock_timeout_s

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short connection; `read_only` only skips the schema check.

        The database is always opened read-write: DuckDB keeps one instance per file and process,
        and refuses a read-only connection beside a read-write one (partitions of a backfill run
        in threads of one process), while another process's lock blocks readers and writers alike.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path))
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

    def replace_monitoring_partition(self, *, job: str, partition_date: Any, tables: dict[str, pa.Table]) -> dict[str, int]:
        """Swap in the rows of each monitoring table for (job, partition_date) in one transaction.

        A table given zero rows is emptied for the partition. Every row must belong to the
        partition, or the next replacement would not delete it.
        """
        for table, rows in tables.items():
            schema = _monitoring_table(table)
            if not rows.schema.equals(schema):
                raise ValueError(f"rows for {table} do not match its schema: got {rows.schema}, expected {schema}")
            keys = {(r["job"], r["partition_date"]) for r in rows.select(["job", "partition_date"]).to_pylist()}
            if keys - {(job, partition_date)}:
                raise ValueError(f"rows for {table} belong to other partitions than ({job}, {partition_date}): {sorted(keys)}")
        inserted: dict[str, int] = {}
        with self.connect() as con:
            _ensure_monitoring_schema(con)
            con.execute("BEGIN TRANSACTION")
            try:
                for table, rows in tables.items():
                    name = _quoted(table)
                    con.execute(f"DELETE FROM {name} WHERE job = ? AND partition_date = ?", [job, partition_date])
                    if rows.num_rows:
                        columns = ", ".join(_quoted(c) for c in rows.schema.names)
                        con.register("incoming_rows", rows)
                        try:
                            con.execute(f"INSERT INTO {name} ({columns}) SELECT {columns} FROM incoming_rows")
                        finally:
                            con.unregister("incoming_rows")
                    inserted[table] = con.execute(
                        f"SELECT count(*) FROM {name} WHERE job = ? AND partition_date = ?", [job, partition_date]
                    ).fetchall()[0][0]
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return inserted

    def monitoring_rows(self, table: str, *, job: str, first_date: Any, last_date: Any) -> pa.Table:
        """Rows of a monitoring table for the job's partitions from `first_date` to `last_date` inclusive."""
        schema = _monitoring_table(table)
        if not self.path.exists():
            return schema.empty_table()
        with self.connect(read_only=True) as con:
            if not _table_exists(con, table):
                return schema.empty_table()
            columns = ", ".join(_quoted(c) for c in schema.names)
            order = ", ".join(_quoted(c) for c in schema.names if c in ("partition_date", "model_version", "measure", "item", "bin", "decision", "entity_id"))
            result = con.sql(
                f"SELECT {columns} FROM {_quoted(table)} WHERE job = ? AND partition_date BETWEEN ? AND ? ORDER BY {order}",
                params=[job, first_date, last_date],
            ).to_arrow_table()
        return result.cast(schema)

    def partition_predictions(self, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        """The named prediction columns of (job, partition_date); no rows when it was never published."""
        unknown = [c for c in columns if c not in PREDICTION_SCHEMA.names]
        if unknown:
            raise ValueError(f"not prediction columns: {unknown}; known: {PREDICTION_SCHEMA.names}")
        schema = pa.schema([PREDICTION_SCHEMA.field(c) for c in columns])
        if not self.path.exists():
            return schema.empty_table()
        with self.connect(read_only=True) as con:
            if not _table_exists(con, "predictions"):
                return schema.empty_table()
            result = con.sql(
                f"SELECT {', '.join(_quoted(c) for c in columns)} FROM predictions WHERE job = ? AND partition_date = ?",
                params=[job, partition_date],
            ).to_arrow_table()
        return result.cast(schema)

    def quarantined_entities(self, job: str, partition_date: Any) -> pa.Table:
        """Entity ids of (job, partition_date) that were read but not scored (column `entity_id`)."""
        schema = pa.schema([("entity_id", pa.string())])
        if not self.path.exists():
            return schema.empty_table()
        with self.connect(read_only=True) as con:
            if not _table_exists(con, "quarantine"):
                return schema.empty_table()
            result = con.sql(
                "SELECT DISTINCT entity_id FROM quarantine WHERE job = ? AND partition_date = ?", params=[job, partition_date]
            ).to_arrow_table()
        return result.cast(schema)

    def prediction_counts(self, job: str, *, first_date: Any, last_date: Any, by: Sequence[str]) -> pa.Table:
        """Prediction rows per distinct value of the `by` columns over a range of partitions (column `rows`)."""
        unknown = [c for c in by if c not in PREDICTION_SCHEMA.names]
        if unknown or not by:
            raise ValueError(f"group predictions by prediction columns, got {list(by)}; known: {PREDICTION_SCHEMA.names}")
        schema = pa.schema([*(PREDICTION_SCHEMA.field(c).with_nullable(True) for c in by), ("rows", pa.int64())])
        if not self.path.exists():
            return schema.empty_table()
        with self.connect(read_only=True) as con:
            if not _table_exists(con, "predictions"):
                return schema.empty_table()
            keys = ", ".join(_quoted(c) for c in by)
            result = con.sql(
                f'SELECT {keys}, count(*) AS "rows" FROM predictions WHERE job = ? AND partition_date BETWEEN ? AND ? '
                f"GROUP BY {keys} ORDER BY {keys}",
                params=[job, first_date, last_date],
            ).to_arrow_table()
        return result.cast(schema)

    def source_labels(
        self, table: str, *, job: str, partition_date: Any, entity_column: str, outcome_column: str, observed_date_column: str
    ) -> pa.Table:
        """Labels of (job, partition_date) from a warehouse table people load, as entity_id, outcome, observed_date.

        The table needs `partition_date` and the three named columns; a `job` column, if present,
        selects the job's rows. Only plain lower-case names are accepted, and they are quoted.
        """
        own = set(MONITORING_SCHEMAS) | PARTITIONED_TABLES | {"runs"}
        if table in own:
            raise LabelError(f"labels table {table!r} is one of the warehouse's own tables; load labels into another table")
        wanted = {"entity_id": entity_column, "outcome": outcome_column, "observed_date": observed_date_column}
        for name in (table, *wanted.values()):
            try:
                _quoted(name)
            except ValueError:
                raise LabelError(f"labels table {table!r}: {name!r} is not a plain lower-case SQL name") from None
        if not self.path.exists():
            raise LabelError(f"labels table {table!r}: there is no warehouse at {self.path}")
        with self.connect(read_only=True) as con:
            present = {
                r[0] for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
                ).fetchall()
            }
            if not present:
                raise LabelError(f"labels table {table!r} does not exist in the warehouse {self.path}")
            missing = sorted({*wanted.values(), "partition_date"} - present)
            if missing:
                raise LabelError(f"labels table {table!r} lacks column(s) {missing}; it has {sorted(present)}")
            selected = ", ".join(f"{_quoted(source)} AS {_quoted(target)}" for target, source in wanted.items())
            where, params = "partition_date = ?", [partition_date]
            if "job" in present:
                where, params = where + " AND job = ?", [partition_date, job]
            return con.sql(f"SELECT {selected} FROM {_quoted(table)} WHERE {where}", params=params).to_arrow_table()
