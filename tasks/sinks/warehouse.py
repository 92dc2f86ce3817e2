"""The warehouse: per-partition tables (`predictions`, `quarantine`, guard and drift reports), the
monitoring tables, the `runs` ledger and `partition_leases`, on DuckDB or on PostgreSQL.

Both backends create their tables from the same Arrow schemas, the catalog's (tasks/catalog.py
WAREHOUSE_DATASETS), and run the same SQL; they differ only in how they connect, how parameters
are written and how rows are bulk-loaded. A partition's rows are replaced in one transaction:
readers see the previous run's rows or the new ones, never a mix. DuckDB allows one read-write
process per file, so its connections are short and opening one retries with backoff while another
process holds the lock. PostgreSQL is loaded over Arrow with ADBC (binary COPY), never row by row,
and its password never appears in errors, logs or reprs.

This module holds what both share (the tables, the SQL, the URL scrubbing); the backends are
`duckdb_warehouse` and `postgres_warehouse`, and `warehouse_choice.warehouse_for` picks one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from tasks.catalog import (
    CLASSIFICATION_GROUP_SCHEMA,
    DECISION_FLIPS,
    DRIFT_HISTOGRAMS,
    DRIFT_REPORT,
    CLASSIFICATION_SCHEMA,
    FORECAST_SCHEMA,
    FORECASTS,
    MODEL_HEALTH,
    MONITORING_DATASETS,
    PARTITION_DATASETS,
    FORECAST_GROUP_SCHEMA,
    PREDICTION_GROUP_SCHEMA,
    PREDICTION_SCHEMA,
    PREDICTIONS,
    RUNS,
    SHADOW_FORECASTS,
    SHADOW_PREDICTIONS,
    WAREHOUSE_DATASETS,
    Dataset,
    warehouse_dataset,
)
from tasks.errors import LabelError, PartitionLeaseLost
from tasks.prediction.decisions import predict_straddling

log = logging.getLogger("scoring.warehouse")

PARTITIONED_TABLES = frozenset(d.table for d in PARTITION_DATASETS)
"""Tables a scoring run replaces per (job, partition_date) from its staged Parquet files."""
MONITORING_TABLES = frozenset(d.table for d in MONITORING_DATASETS)
_OWN_TABLES = frozenset(d.table for d in WAREHOUSE_DATASETS)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_JSON = pa.json_()
UNFINISHED_STATUSES = ("running", "publishing", "committed")
_ADDED_COLUMNS = {
    RUNS.table: ("rows_failed", "rows_fallback", "error_detail", "warnings"),
    DRIFT_REPORT.table: ("kind", "unseen_share"),
    DRIFT_HISTOGRAMS.table: ("kind",),
}
"""Columns added after the first release (types from the catalog), added in place by migration 0001."""
_RENAMED_COLUMNS = {DRIFT_REPORT.table: {"out_of_range_share": "outside_p1_p99_share"}}
"""Old name → new name; the values keep their meaning (numeric: share below p1 or at/above p99)."""
_FORECAST_COLUMNS = {DECISION_FLIPS.table: ("champion_forecast", "challenger_forecast")}
"""Columns forecast jobs brought to tables of earlier releases, added in place by migration 0003."""
_CLASS_COLUMNS = {DECISION_FLIPS.table: ("champion_class", "challenger_class")}
"""Columns multiclass jobs brought to tables of earlier releases, added in place by migration 0004."""

_DUCKDB_TYPES: dict[pa.DataType, str] = {
    pa.string(): "VARCHAR",
    pa.date32(): "DATE",
    pa.float64(): "DOUBLE",
    pa.int16(): "SMALLINT",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
    pa.list_(pa.string()): "VARCHAR[]",
    pa.list_(pa.float64()): "DOUBLE[]",
    pa.list_(pa.int64()): "BIGINT[]",
    _TIMESTAMP: "TIMESTAMPTZ",
    _JSON: "JSON",
}
_POSTGRES_TYPES: dict[pa.DataType, str] = {
    **_DUCKDB_TYPES,
    pa.string(): "TEXT",
    pa.float64(): "DOUBLE PRECISION",
    pa.list_(pa.string()): "TEXT[]",
    pa.list_(pa.float64()): "DOUBLE PRECISION[]",
    _JSON: "JSONB",
}

_PLAIN_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_NAMED_PARAMETER = re.compile(r"\$([a-z_][a-z0-9_]*)")


def _quoted(identifier: str) -> str:
    """A double-quoted SQL identifier; only plain lower-case names, so nothing needs escaping."""
    if not _PLAIN_IDENTIFIER.fullmatch(identifier):
        raise ValueError(f"not a plain SQL identifier: {identifier!r}")
    return f'"{identifier}"'


def create_table_sql(table: str, types: Mapping[pa.DataType, str]) -> str:
    """`CREATE TABLE IF NOT EXISTS` for one of the catalog's warehouse tables in a backend's type names."""
    dataset = warehouse_dataset(table)
    columns = [f"{_quoted(f.name)} {types[f.type]}{'' if f.nullable else ' NOT NULL'}" for f in dataset.schema]
    if dataset.primary_key:
        columns.append(f"PRIMARY KEY ({', '.join(_quoted(c) for c in dataset.keys)})")
    return f"CREATE TABLE IF NOT EXISTS {_quoted(table)} ({', '.join(columns)})"


def partition_index_sql(table: str) -> str:
    """The index a PostgreSQL partition table gets on (job, partition_date): every replace, monitoring read and
    outcomes join selects one partition, which a table of a year of nightly millions must not scan for."""
    return f"CREATE INDEX IF NOT EXISTS {_quoted(table + '_partition')} ON {_quoted(table)} (job, partition_date)"


_INDEXED_TABLES = tuple(d.table for d in (*PARTITION_DATASETS, *MONITORING_DATASETS))


def _adding(added: Mapping[str, tuple[str, ...]], renamed: Mapping[str, Mapping[str, str]] | None = None):  # noqa: ANN202
    """A migration's statements: ALTERs that bring the tables of `added` (and `renamed`) to today's columns, renames first."""
    renamed = renamed or {}

    def statements(session: _Session, types: Mapping[pa.DataType, str], backend: str) -> list[str]:  # noqa: ARG001
        present = Warehouse._columns(session, sorted({*added, *renamed}))
        found = []
        for table, renames in renamed.items():
            for old, new in renames.items():
                if old in present.get(table, ()) and new not in present[table]:
                    found.append(f"ALTER TABLE {_quoted(table)} RENAME COLUMN {_quoted(old)} TO {_quoted(new)}")
        for table, columns in added.items():
            for column in columns:
                if table in present and column not in present[table]:
                    kind = types[warehouse_dataset(table).schema.field(column).type]
                    found.append(f"ALTER TABLE {_quoted(table)} ADD COLUMN {_quoted(column)} {kind}")
        return found

    return statements


def _partition_indexes(session: _Session, types: Mapping[pa.DataType, str], backend: str) -> list[str]:  # noqa: ARG001
    # DuckDB's zone maps already skip other partitions' row groups; its ART indexes would slow every bulk replace.
    return [partition_index_sql(t) for t in _INDEXED_TABLES] if backend == "postgres" else []


@dataclass(frozen=True)
class Migration:
    """One recorded change of the warehouse's schema: its statements are computed against the tables as
    they are (so a migration finds nothing to do on a warehouse created by today's release) and run once,
    then recorded in `schema_migrations`."""

    id: str
    description: str
    statements: Callable[[_Session, Mapping[pa.DataType, str], str], list[str]]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_added_columns",
        "runs.rows_failed, rows_fallback, error_detail, warnings; drift_report.out_of_range_share renamed "
        "outside_p1_p99_share, drift_report.kind, unseen_share; drift_histograms.kind",
        _adding(_ADDED_COLUMNS, _RENAMED_COLUMNS),
    ),
    Migration("0002_partition_indexes", "an index on (job, partition_date) of every partition table (PostgreSQL)", _partition_indexes),
    Migration("0003_forecast_columns", "decision_flips.champion_forecast, challenger_forecast", _adding(_FORECAST_COLUMNS)),
    Migration("0004_class_columns", "decision_flips.champion_class, challenger_class", _adding(_CLASS_COLUMNS)),
)
"""Every schema change since the first release, in order. A new column or index is a new entry here; tables
new in a release are created whole (`create_table_sql`) and need none."""


def _parameter_names(sql: str) -> list[str]:
    """The `$name` parameters of a query, each once, in order of first use."""
    return list(dict.fromkeys(_NAMED_PARAMETER.findall(sql)))


def _monitoring_table(table: str) -> Dataset:
    if table not in MONITORING_TABLES:
        raise ValueError(f"not a monitoring table: {table!r}; known: {sorted(MONITORING_TABLES)}")
    return warehouse_dataset(table)


@dataclass(frozen=True)
class _SqlTerm:
    """A SQL expression that `<`, `>=`, `&` and `|` combine into SQL text, so a rule written with
    Python's operators (tasks/prediction/decisions.py predict_straddling) runs in the database."""

    sql: str

    def __lt__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"{self.sql} < {other.sql}")

    def __ge__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"{self.sql} >= {other.sql}")

    def __and__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"({self.sql} AND {other.sql})")

    def __or__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"({self.sql} OR {other.sql})")


def _straddling_term(
    job: str, partition_date: Any, cutoffs: Sequence[float], *, low: str, high: str
) -> tuple[dict[str, Any], _SqlTerm]:
    """The partition's query parameters with one `$cut_i` per cut-off, and the SQL of "the interval [low, high]
    straddles a cut-off" (the prediction layer's own rule, predict_straddling, written in SQL)."""
    params: dict[str, Any] = {"job": job, "partition_date": partition_date}
    for i, cut in enumerate(cutoffs):
        params[f"cut_{i}"] = float(cut)
    straddling = predict_straddling(
        _SqlTerm(low), _SqlTerm(high), [_SqlTerm(f"CAST($cut_{i} AS DOUBLE PRECISION)") for i in range(len(cutoffs))], none=_SqlTerm("FALSE"),
    )
    return params, straddling


class _Session(Protocol):
    """One connection of a backend, speaking the shared SQL (`$name` parameters)."""

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table: ...

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None: ...

    def transaction(self) -> contextlib.AbstractContextManager[None]: ...

    def append_parquet(self, table: str, paths: Sequence[Path]) -> None: ...

    def append_arrow(self, table: str, rows: pa.Table) -> None: ...


_RUN_COUNT_COLUMNS = (
    "rows_read", "rows_scored", "rows_repaired", "rows_quarantined", "rows_failed", "rows_fallback",
    "rows_with_reasons", "rows_without_adverse_reason", "rows_straddling",
)
_RUN_JSON_COLUMNS = ("decisions", "guard_counts", "inference")
_PARTITION_KEY = "job = $job AND partition_date = $partition_date"
_LEASE_EXPIRY = "now() + CAST($ttl_s AS DOUBLE PRECISION) * INTERVAL '1 second'"


class Warehouse(ABC):
    """The warehouse's operations, written once over a backend's sessions."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the warehouse is, safe to log and show (no password)."""

    @abstractmethod
    def _exists(self) -> bool:
        """False when there is no warehouse yet, so reads return nothing instead of creating one."""

    @abstractmethod
    def _session(self, *, write: bool) -> contextlib.AbstractContextManager[_Session]:
        """A short connection; `write` first creates any missing table."""

    def kept_open(self) -> contextlib.AbstractContextManager[None]:
        """A block in which this thread's calls may share one connection; a backend whose
        connections are cheap to open keeps none."""
        return contextlib.nullcontext()

    @staticmethod
    def _table_exists(session: _Session, table: str) -> bool:
        return bool(
            session.rows(
                "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = $table "
                "AND table_schema = current_schema()",
                {"table": table},
            )[0]["n"]
        )

    @staticmethod
    def _missing_tables(session: _Session) -> list[str]:
        present = {
            r["table_name"]
            for r in session.rows("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
        }
        return [d.table for d in WAREHOUSE_DATASETS if d.table not in present]

    @staticmethod
    def _create_missing_tables(session: _Session, types: Mapping[pa.DataType, str], *, indexed: bool = False) -> None:
        """Today's tables that are missing, whole; with `indexed` (PostgreSQL) a partition table with its index."""
        for table in Warehouse._missing_tables(session):
            session.execute(create_table_sql(table, types))
            if indexed and table in _INDEXED_TABLES:
                session.execute(partition_index_sql(table))

    @staticmethod
    def _columns(session: _Session, tables: Sequence[str]) -> dict[str, set[str]]:
        """The columns each of `tables` has now (no entry for a table that does not exist)."""
        found: dict[str, set[str]] = {}
        for r in session.rows(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        ):
            if r["table_name"] in tables:
                found.setdefault(r["table_name"], set()).add(r["column_name"])
        return found

    @staticmethod
    def _pending_migrations(session: _Session) -> list[Migration]:
        applied = {r["id"] for r in session.rows("SELECT id FROM schema_migrations")}
        return [m for m in MIGRATIONS if m.id not in applied]

    @staticmethod
    def _migrated(session: _Session, types: Mapping[pa.DataType, str], backend: str) -> list[str]:
        """Run and record every migration not yet in `schema_migrations`; the ids applied."""
        done = []
        for migration in Warehouse._pending_migrations(session):
            for statement in migration.statements(session, types, backend):
                session.execute(statement)
            session.execute(
                "INSERT INTO schema_migrations (id, description, applied_at) VALUES ($id, $description, now())",
                {"id": migration.id, "description": migration.description},
            )
            done.append(migration.id)
        if done:
            log.info("warehouse schema: applied %s", ", ".join(done))
        return done

    def applied_migrations(self) -> list[dict[str, Any]]:
        """The migrations this warehouse has had, oldest first."""
        return self._read_rows("schema_migrations", "SELECT id, description, applied_at FROM schema_migrations ORDER BY id", {})

    def record_run_started(self, row: dict[str, Any]) -> None:
        with self._session(write=True) as session:
            session.execute(
                "INSERT INTO runs (run_id, job, partition_date, status, model_name, model_version, feature_version, started_at) "
                "VALUES ($run_id, $job, $partition_date, 'running', $model_name, $model_version, $feature_version, $started_at)",
                row,
            )

    def record_run_publishing(self, run_id: str) -> bool:
        """The publish intent: the run's outputs are assembled and it is about to commit. False when
        the run is no longer `running` (closed as abandoned by a run that took its partition over)."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "UPDATE runs SET status = 'publishing' WHERE run_id = $run_id AND status = 'running' RETURNING run_id",
                    {"run_id": run_id},
                )
            )

    def record_run_ended(
        self, run_id: str, *, status: str, ended_at: Any, error: str | None = None, counts: dict[str, Any] | None = None,
        warnings: Sequence[str] = (),
    ) -> None:
        with self._session(write=True) as session:
            self._run_closed(session, run_id, status=status, ended_at=ended_at, error=error, counts=counts, warnings=warnings)

    @staticmethod
    def _run_closed(
        session: _Session, run_id: str, *, status: str, ended_at: Any, error: str | None, counts: dict[str, Any] | None,
        warnings: Sequence[str], only_if: str = "",
    ) -> bool:
        values = {
            "run_id": run_id, "status": status, "ended_at": ended_at, "error": error, "warnings": json.dumps(list(warnings)),
            **{k: (counts or {}).get(k) for k in _RUN_COUNT_COLUMNS},
            **{k: json.dumps(counts[k]) if counts and k in counts else None for k in _RUN_JSON_COLUMNS},
        }
        assignments = [f"{c} = ${c}" for c in ("status", "ended_at", "error")] + ["warnings = CAST($warnings AS JSON)"]
        if counts is not None:
            assignments += [f"{c} = ${c}" for c in _RUN_COUNT_COLUMNS] + [f"{c} = CAST(${c} AS JSON)" for c in _RUN_JSON_COLUMNS]
        return bool(
            session.rows(f"UPDATE runs SET {', '.join(assignments)} WHERE run_id = $run_id {only_if} RETURNING run_id", values)
        )

    def record_run_warnings(self, run_id: str, warnings: Sequence[str]) -> None:
        """What failed after the run's outputs were published; the run stays `succeeded`."""
        with self._session(write=True) as session:
            session.execute(
                "UPDATE runs SET warnings = CAST($warnings AS JSON) WHERE run_id = $run_id",
                {"run_id": run_id, "warnings": json.dumps(list(warnings))},
            )

    def record_run_failed(
        self, *, run_id: str, job: str, partition_date: Any, ended_at: Any, error: str, error_detail: str | None = None
    ) -> bool:
        """Close a run as failed; a run that failed before it was opened gets its ledger row here.

        A run whose rows were committed is never marked failed: its outputs are the partition's,
        and recovery finishes its publish. Returns whether the row now says failed."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "INSERT INTO runs AS r (run_id, job, partition_date, status, started_at, ended_at, error, error_detail) "
                    "VALUES ($run_id, $job, $partition_date, 'failed', $ended_at, $ended_at, $error, $error_detail) "
                    "ON CONFLICT (run_id) DO UPDATE SET status = 'failed', ended_at = excluded.ended_at, "
                    "error = excluded.error, error_detail = excluded.error_detail "
                    "WHERE r.status IN ('running', 'publishing', 'failed') RETURNING run_id",
                    {
                        "run_id": run_id, "job": job, "partition_date": partition_date, "ended_at": ended_at,
                        "error": error, "error_detail": error_detail,
                    },
                )
            )

    def record_run_refused(
        self, *, run_id: str, job: str, partition_date: Any, ended_at: Any, error: str, error_detail: str | None = None
    ) -> bool:
        """A run refused before its lease (no raw data, a source that did not answer, ...) as a ledger row of
        status `refused` with its reason; it wrote nothing. False when the run has a row already."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "INSERT INTO runs (run_id, job, partition_date, status, started_at, ended_at, error, error_detail) "
                    "VALUES ($run_id, $job, $partition_date, 'refused', $ended_at, $ended_at, $error, $error_detail) "
                    "ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
                    {
                        "run_id": run_id, "job": job, "partition_date": partition_date, "ended_at": ended_at,
                        "error": error, "error_detail": error_detail,
                    },
                )
            )

    def _read_rows(self, table: str, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """`sql`'s rows; none while the warehouse or `table` does not exist yet (nothing wrote them)."""
        if not self._exists():
            return []
        with self._session(write=False) as session:
            return session.rows(sql, params) if self._table_exists(session, table) else []

    def _read_arrow(self, table: str, schema: pa.Schema, sql: str, params: Mapping[str, Any]) -> pa.Table:
        """`sql`'s result in `schema`; an empty table of it while the warehouse or `table` does not exist yet."""
        if not self._exists():
            return schema.empty_table()
        with self._session(write=False) as session:
            if not self._table_exists(session, table):
                return schema.empty_table()
            return session.arrow(sql, params).cast(schema)

    def unfinished_runs(self, job: str, partition_date: Any = None) -> list[dict[str, Any]]:
        """Runs of `job` (of one partition when given) not yet `succeeded` or `failed`, oldest first."""
        return self._read_rows(
            "runs",
            "SELECT run_id, job, partition_date, status, started_at FROM runs WHERE job = $job "
            "AND status IN ('running', 'publishing', 'committed') "
            + ("AND partition_date = $partition_date " if partition_date is not None else "")
            + "ORDER BY started_at, run_id",
            {"job": job, "partition_date": partition_date},
        )

    def run_status(self, run_id: str) -> str | None:
        rows = self._read_rows("runs", "SELECT status FROM runs WHERE run_id = $run_id", {"run_id": run_id})
        return rows[0]["status"] if rows else None

    def record_run_abandoned(self, run_id: str, *, ended_at: Any, error: str) -> bool:
        """Close a run that died before its commit as failed; False when it is no longer unfinished."""
        with self._session(write=True) as session:
            return self._run_closed(
                session, run_id, status="failed", ended_at=ended_at, error=error, counts=None, warnings=(),
                only_if="AND status IN ('running', 'publishing')",
            )

    def record_run_rolled_forward(self, run_id: str, *, ended_at: Any, warning: str) -> bool:
        """Close a committed run whose Parquet swap recovery finished as succeeded."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "UPDATE runs SET status = 'succeeded', ended_at = $ended_at, "
                    "warnings = CAST($warnings AS JSON) WHERE run_id = $run_id AND status = 'committed' RETURNING run_id",
                    {"run_id": run_id, "ended_at": ended_at, "warnings": json.dumps([warning])},
                )
            )

    def previous_drift_histograms(self, job: str, partition_date: Any) -> list[dict[str, Any]]:
        """Drift histograms of the job's latest scored partition before `partition_date` (empty if none)."""
        if not self._exists():
            return []
        with self._session(write=False) as session:
            if not self._table_exists(session, "drift_histograms"):
                return []
            # A table from before kinds existed is read as it is (all numeric); the next write migrates it.
            kind = "kind" if "kind" in self._columns(session, ["drift_histograms"])["drift_histograms"] else "NULL AS kind"
            return session.rows(
                f"SELECT feature, edges, counts, nulls, {kind} FROM drift_histograms WHERE job = $job AND partition_date = "
                "(SELECT max(partition_date) FROM drift_histograms WHERE job = $job AND partition_date < $partition_date)",
                {"job": job, "partition_date": partition_date},
            )

    def latest_succeeded_run(self, job: str) -> dict[str, Any] | None:
        """The newest succeeded `runs` row of `job`, or None when it never succeeded (or no ledger exists)."""
        rows = self._read_rows(
            "runs", "SELECT * FROM runs WHERE job = $job AND status = 'succeeded' ORDER BY ended_at DESC NULLS LAST LIMIT 1",
            {"job": job},
        )
        return rows[0] if rows else None

    def run_guard_summary(self, run_id: str) -> list[dict[str, Any]]:
        """The `guard_summary` rows of one run, the expectations that acted on most rows first (empty if none)."""
        return self._read_rows(
            "guard_summary",
            "SELECT expectation, column_name, expectation_type, action, evaluated_by, rows, share FROM guard_summary "
            "WHERE run_id = $run_id ORDER BY rows DESC, expectation",
            {"run_id": run_id},
        )

    def recent_runs(self, job: str, *, last: int) -> list[dict[str, Any]]:
        """The job's `last` runs by start time, newest first: the ledger's columns but the JSON ones and the traceback."""
        return self._read_rows(
            "runs",
            "SELECT run_id, partition_date, status, model_version, rows_read, rows_scored, rows_quarantined, rows_failed, "
            "started_at, ended_at, error FROM runs WHERE job = $job ORDER BY started_at DESC, run_id LIMIT $last",
            {"job": job, "last": last},
        )

    def latest_partition_runs(self, job: str, *, first_date: Any, last_date: Any) -> list[dict[str, Any]]:
        """The newest `runs` row of each of the job's partitions from `first_date` to `last_date`, oldest date first."""
        rows = self._read_rows(
            "runs",
            "SELECT ranked.* FROM (SELECT *, row_number() OVER (PARTITION BY partition_date ORDER BY started_at DESC) "
            "AS newest FROM runs WHERE job = $job AND partition_date BETWEEN $first_date AND $last_date) AS ranked "
            "WHERE newest = 1 ORDER BY partition_date",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )
        return [{k: v for k, v in row.items() if k != "newest"} for row in rows]

    def replace_partition(
        self, *, job: str, partition_date: Any, files: dict[str, list[Path]], committing_run: str | None = None,
        counts: dict[str, Any] | None = None,
    ) -> dict[str, int]:
        """Swap in the run's rows of each table for (job, partition_date) in one transaction.

        With `committing_run`, the same transaction moves that run's ledger row from `publishing` to
        `committed` with its counts, and empties the partition's decision monitoring (it describes
        the rows being replaced): the ledger then says which run's rows the warehouse holds, and
        fails the commit when the run was closed meanwhile."""
        unknown = set(files) - PARTITIONED_TABLES
        if unknown:
            raise ValueError(f"not a partitioned warehouse table: {sorted(unknown)}")
        key = {"job": job, "partition_date": partition_date}
        inserted: dict[str, int] = {}
        with self._session(write=True) as session, session.transaction():
            for table, paths in files.items():
                session.execute(f"DELETE FROM {_quoted(table)} WHERE {_PARTITION_KEY}", key)
                if paths:
                    session.append_parquet(table, paths)
                inserted[table] = session.rows(f"SELECT count(*) AS n FROM {_quoted(table)} WHERE {_PARTITION_KEY}", key)[0]["n"]
            if committing_run is not None:
                session.execute(f"DELETE FROM decision_monitoring WHERE {_PARTITION_KEY}", key)
                if not self._run_closed(
                    session, committing_run, status="committed", ended_at=None, error=None, counts=counts, warnings=(),
                    only_if="AND status = 'publishing'",
                ):
                    raise PartitionLeaseLost(
                        f"run {committing_run} of {job} {partition_date} is no longer publishing (another run closed it); "
                        "its rows were not committed"
                    )
        log.info("warehouse %s: partition (%s, %s) replaced, rows %s", self.location, job, partition_date, inserted)
        return inserted

    def replace_monitoring_partition(self, *, job: str, partition_date: Any, tables: dict[str, pa.Table]) -> dict[str, int]:
        """Swap in the rows of each monitoring table for (job, partition_date) in one transaction.

        A table given zero rows is emptied for the partition. Every row must belong to the
        partition, or the next replacement would not delete it.
        """
        for table, rows in tables.items():
            schema = _monitoring_table(table).schema
            if not rows.schema.equals(schema):
                raise ValueError(f"rows for {table} do not match its schema: got {rows.schema}, expected {schema}")
            keys = {(r["job"], r["partition_date"]) for r in rows.select(["job", "partition_date"]).to_pylist()}
            if keys - {(job, partition_date)}:
                raise ValueError(f"rows for {table} belong to other partitions than ({job}, {partition_date}): {sorted(keys)}")
        key = {"job": job, "partition_date": partition_date}
        inserted: dict[str, int] = {}
        with self._session(write=True) as session, session.transaction():
            for table, rows in tables.items():
                session.execute(f"DELETE FROM {_quoted(table)} WHERE {_PARTITION_KEY}", key)
                if rows.num_rows:
                    session.append_arrow(table, rows)
                inserted[table] = session.rows(f"SELECT count(*) AS n FROM {_quoted(table)} WHERE {_PARTITION_KEY}", key)[0]["n"]
        return inserted

    def monitoring_rows(self, table: str, *, job: str, first_date: Any, last_date: Any) -> pa.Table:
        """Rows of a monitoring table for the job's partitions from `first_date` to `last_date` inclusive."""
        dataset = _monitoring_table(table)
        schema = dataset.schema
        columns = ", ".join(_quoted(c) for c in schema.names)
        # The rows' key, but for the job all of them share.
        order = ", ".join(_quoted(c) for c in dataset.keys if c != "job")
        return self._read_arrow(
            table, schema,
            f"SELECT {columns} FROM {_quoted(table)} WHERE job = $job AND partition_date BETWEEN $first_date AND $last_date "
            f"ORDER BY {order}",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )

    def partition_predictions(self, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        """The named prediction columns of (job, partition_date); no rows when it was never published."""
        return self._partition_columns("predictions", PREDICTION_SCHEMA, job, partition_date, columns)

    def partition_forecasts(self, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        """The named forecast columns of (job, partition_date) (a forecast job's `forecasts`); no rows when it was never published."""
        return self._partition_columns("forecasts", FORECAST_SCHEMA, job, partition_date, columns)

    def partition_classifications(self, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        """The named classification columns of (job, partition_date) (a multiclass job's `classifications`); no rows when it was never published."""
        return self._partition_columns("classifications", CLASSIFICATION_SCHEMA, job, partition_date, columns)

    def _partition_columns(self, table: str, known: pa.Schema, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        unknown = [c for c in columns if c not in known.names]
        if unknown:
            raise ValueError(f"not {table} columns: {unknown}; known: {known.names}")
        schema = pa.schema([known.field(c) for c in columns])
        return self._read_arrow(
            table, schema, f"SELECT {', '.join(_quoted(c) for c in columns)} FROM {_quoted(table)} WHERE {_PARTITION_KEY}",
            {"job": job, "partition_date": partition_date},
        )

    def partition_shadow_predictions(self, job: str, partition_date: Any) -> pa.Table:
        """The challenger's (entity_id, probability, model_version) of (job, partition_date); no rows without one."""
        schema = pa.schema([SHADOW_PREDICTIONS.schema.field(c) for c in ("entity_id", "probability", "model_version")])
        return self._read_arrow(
            "shadow_predictions", schema,
            f"SELECT entity_id, probability, model_version FROM shadow_predictions WHERE {_PARTITION_KEY}",
            {"job": job, "partition_date": partition_date},
        )

    def partition_shadow_forecasts(self, job: str, partition_date: Any) -> pa.Table:
        """A forecast job's challenger's (entity_id, forecast, forecast_low, forecast_high, model_version) of
        (job, partition_date), in entity order; no rows without one."""
        columns = ("entity_id", "forecast", "forecast_low", "forecast_high", "model_version")
        return self._read_arrow(
            "shadow_forecasts", pa.schema([SHADOW_FORECASTS.schema.field(c) for c in columns]),
            f"SELECT {', '.join(columns)} FROM shadow_forecasts WHERE {_PARTITION_KEY} ORDER BY entity_id",
            {"job": job, "partition_date": partition_date},
        )

    def labelled_shadow_rows(self, job: str, *, first_date: Any, last_date: Any, max_rows: int = 2_000_000) -> tuple[pa.Table, int]:
        """The labelled rows of the job's partitions in the range that a challenger shadowed: (partition_date, entity_id,
        champion_version, challenger_version, outcome, champion, challenger), the last two the calibrated probabilities,
        ordered by partition and entity (the comparison's bootstrap draws by position); and how many there are.

        Beyond `max_rows` (a month of million-row nights) a sample of entities chosen by the md5 of their id is read:
        the same rows on both backends and on every re-run, and memory bounded."""
        schema = pa.schema([
            ("partition_date", pa.date32()), ("entity_id", pa.string()), ("champion_version", pa.string()), ("challenger_version", pa.string()),
            ("outcome", pa.int16()), ("champion", pa.float64()), ("challenger", pa.float64()),
        ])
        joined = (
            "FROM predictions p "
            "JOIN shadow_predictions s ON s.job = p.job AND s.partition_date = p.partition_date AND s.entity_id = p.entity_id "
            "JOIN outcome_labels l ON l.job = p.job AND l.partition_date = p.partition_date AND l.entity_id = p.entity_id "
            "WHERE p.job = $job AND p.partition_date BETWEEN $first_date AND $last_date AND l.outcome IS NOT NULL"
        )
        key = {"job": job, "first_date": first_date, "last_date": last_date}
        # Every table is created with the others; only a warehouse from before challengers lacks shadow_predictions.
        counted = self._read_rows("shadow_predictions", f"SELECT count(*) AS n {joined}", key)
        total = int(counted[0]["n"]) if counted else 0
        sampled = ""
        if total > max_rows:
            # 65 536 md5 buckets: the first four hex digits, compared as fixed-width lower-case text.
            sampled = f" AND substr(md5(p.entity_id), 1, 4) < '{min(65_535, 65_536 * max_rows // total):04x}'"
        return self._read_arrow(
            "shadow_predictions", schema,
            "SELECT p.partition_date, p.entity_id, p.model_version AS champion_version, s.model_version AS challenger_version, l.outcome, "
            f"p.probability AS champion, s.probability AS challenger {joined}{sampled} ORDER BY p.partition_date, p.entity_id",
            key,
        ), total

    def prediction_groups(self, job: str, partition_date: Any, cutoffs: Sequence[float]) -> pa.Table:
        """Predictions of (job, partition_date) counted by run_id, model_version, decision, rule_id,
        score and whether the interval straddles one of `cutoffs`, with their probability sum; the
        aggregation runs in the database, so nothing the size of the partition is loaded."""
        schema = PREDICTION_GROUP_SCHEMA
        params, straddling = _straddling_term(job, partition_date, cutoffs, low="probability_low", high="probability_high")
        return self._read_arrow(
            "predictions", schema,
            f"SELECT run_id, model_version, decision, rule_id, score, ({straddling.sql}) AS straddling, "
            # An exact decimal sum: a float sum in parallel would differ in the last bits from
            # run to run, and recomputing monitoring must leave identical tables.
            f'count(*) AS "rows", CAST(sum(CAST(probability AS DECIMAL(38, 18))) AS DOUBLE PRECISION) AS probability_sum '
            f"FROM predictions WHERE {_PARTITION_KEY} "
            "GROUP BY 1, 2, 3, 4, 5, 6",
            params,
        )

    def forecast_groups(self, job: str, partition_date: Any, cutoffs: Sequence[float]) -> pa.Table:
        """`prediction_groups` of a forecast job: its forecasts counted by run_id, model_version, decision,
        rule_id and whether the interval straddles one of `cutoffs`, with their forecast sum, in the database."""
        params, straddling = _straddling_term(job, partition_date, cutoffs, low="forecast_low", high="forecast_high")
        return self._read_arrow(
            "forecasts", FORECAST_GROUP_SCHEMA,
            f"SELECT run_id, model_version, decision, rule_id, ({straddling.sql}) AS straddling, "
            # Exact, as the probabilities' sum above; 26 integer digits hold any partition's total of any unit.
            f'count(*) AS "rows", CAST(sum(CAST(forecast AS DECIMAL(38, 12))) AS DOUBLE PRECISION) AS forecast_sum '
            f"FROM forecasts WHERE {_PARTITION_KEY} "
            "GROUP BY 1, 2, 3, 4, 5",
            params,
        )

    def classification_groups(self, job: str, partition_date: Any, cutoffs: Sequence[float]) -> pa.Table:
        """`prediction_groups` of a multiclass job: its classifications counted by run_id, model_version, decision,
        rule_id, predicted_class and whether the predicted class's interval straddles one of `cutoffs`, with the sum of
        the predicted class's probability, in the database."""
        params, straddling = _straddling_term(job, partition_date, cutoffs, low="probability_low", high="probability_high")
        return self._read_arrow(
            "classifications", CLASSIFICATION_GROUP_SCHEMA,
            f"SELECT run_id, model_version, decision, rule_id, predicted_class, ({straddling.sql}) AS straddling, "
            # Exact, as the binary job's probability sum.
            f'count(*) AS "rows", CAST(sum(CAST(probability AS DECIMAL(38, 18))) AS DOUBLE PRECISION) AS probability_sum '
            f"FROM classifications WHERE {_PARTITION_KEY} "
            "GROUP BY 1, 2, 3, 4, 5, 6",
            params,
        )

    def model_health_rows(self, job: str, first_date: Any, last_date: Any | None = None) -> pa.Table:
        """The published `model_health` rows of the job's partitions from `first_date` to `last_date`
        (default: that one partition); none for a partition never published."""
        schema = MODEL_HEALTH.schema
        columns = ", ".join(_quoted(c) for c in schema.names)
        return self._read_arrow(
            MODEL_HEALTH.table, schema,
            f"SELECT {columns} FROM {_quoted(MODEL_HEALTH.table)} WHERE job = $job AND partition_date BETWEEN $first_date "
            "AND $last_date ORDER BY partition_date, model_version, section, measure, item",
            {"job": job, "first_date": first_date, "last_date": first_date if last_date is None else last_date},
        )

    def quarantined_entities(self, job: str, partition_date: Any) -> pa.Table:
        """Entity ids of (job, partition_date) that were read but not scored (column `entity_id`)."""
        schema = pa.schema([("entity_id", pa.string())])
        return self._read_arrow(
            "quarantine", schema, f"SELECT DISTINCT entity_id FROM quarantine WHERE {_PARTITION_KEY}",
            {"job": job, "partition_date": partition_date},
        )

    def prediction_counts(
        self, job: str, *, first_date: Any, last_date: Any, by: Sequence[str], dataset: Dataset = PREDICTIONS,
    ) -> pa.Table:
        """Prediction rows per distinct value of the `by` columns over a range of partitions (column `rows`);
        `dataset` FORECASTS counts a forecast job's rows."""
        if dataset not in (PREDICTIONS, FORECASTS):
            raise ValueError(f"count the rows of predictions or forecasts, got {dataset.name}")
        contract = dataset.schema
        unknown = [c for c in by if c not in contract.names]
        if unknown or not by:
            raise ValueError(f"group {dataset.name} by its columns, got {list(by)}; known: {contract.names}")
        schema = pa.schema([*(contract.field(c).with_nullable(True) for c in by), ("rows", pa.int64())])
        keys = ", ".join(_quoted(c) for c in by)
        return self._read_arrow(
            dataset.table, schema,
            f'SELECT {keys}, count(*) AS "rows" FROM {_quoted(dataset.table)} WHERE job = $job AND partition_date BETWEEN $first_date '
            f"AND $last_date GROUP BY {keys} ORDER BY {keys}",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )

    def forecast_means(self, job: str, *, first_date: Any, last_date: Any) -> pa.Table:
        """A forecast job's published rows per partition and model version over a range, with their mean forecast,
        interval bounds, interval width and expected error: what its monitoring page draws before actuals land."""
        schema = pa.schema([
            ("partition_date", pa.date32()), ("model_version", pa.string()), ("rows", pa.int64()), ("forecast_mean", pa.float64()),
            ("forecast_low_mean", pa.float64()), ("forecast_high_mean", pa.float64()), ("width_mean", pa.float64()),
            ("expected_error_mean", pa.float64()),
        ])
        return self._read_arrow(
            FORECASTS.table, schema,
            'SELECT partition_date, model_version, count(*) AS "rows", avg(forecast) AS forecast_mean, '
            "avg(forecast_low) AS forecast_low_mean, avg(forecast_high) AS forecast_high_mean, "
            "avg(forecast_high - forecast_low) AS width_mean, avg(expected_error) AS expected_error_mean "
            f"FROM {_quoted(FORECASTS.table)} WHERE job = $job AND partition_date BETWEEN $first_date AND $last_date "
            "GROUP BY partition_date, model_version ORDER BY partition_date, model_version",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )

    def source_labels(
        self, table: str, *, job: str, partition_date: Any, entity_column: str, outcome_column: str, observed_date_column: str
    ) -> pa.Table:
        """Labels of (job, partition_date) from a warehouse table people load, as entity_id, outcome, observed_date.

        The table needs `partition_date` and the three named columns; a `job` column, if present,
        selects the job's rows. Only plain lower-case names are accepted, and they are quoted.
        """
        if table in _OWN_TABLES:
            raise LabelError(f"labels table {table!r} is one of the warehouse's own tables; load labels into another table")
        wanted = {"entity_id": entity_column, "outcome": outcome_column, "observed_date": observed_date_column}
        for name in (table, *wanted.values()):
            try:
                _quoted(name)
            except ValueError:
                raise LabelError(f"labels table {table!r}: {name!r} is not a plain lower-case SQL name") from None
        if not self._exists():
            raise LabelError(f"labels table {table!r}: there is no warehouse at {self.location}")
        with self._session(write=False) as session:
            present = {
                r["column_name"]
                for r in session.rows(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = $table "
                    "AND table_schema = current_schema()",
                    {"table": table},
                )
            }
            if not present:
                raise LabelError(f"labels table {table!r} does not exist in the warehouse {self.location}")
            missing = sorted({*wanted.values(), "partition_date"} - present)
            if missing:
                raise LabelError(f"labels table {table!r} lacks column(s) {missing}; it has {sorted(present)}")
            selected = ", ".join(f"{_quoted(source)} AS {_quoted(target)}" for target, source in wanted.items())
            where = "partition_date = $partition_date" + (" AND job = $job" if "job" in present else "")
            return session.arrow(
                f"SELECT {selected} FROM {_quoted(table)} WHERE {where}", {"job": job, "partition_date": partition_date}
            )

    def record_alias_change(self, row: Mapping[str, Any]) -> None:
        """One move of a model alias in the `model_aliases` ledger (tasks/inference/aliases.py AliasChange.as_row, and the job)."""
        with self._session(write=True) as session:
            session.execute(
                "INSERT INTO model_aliases (model_name, alias, from_version, to_version, changed_by, changed_at, job, note) "
                "VALUES ($model_name, $alias, $from_version, $to_version, $changed_by, $changed_at, $job, $note)",
                dict(row),
            )

    def alias_changes(self, model_name: str) -> list[dict[str, Any]]:
        """Every recorded move of the model's aliases, oldest first."""
        return self._read_rows(
            "model_aliases",
            "SELECT model_name, alias, from_version, to_version, changed_by, changed_at, job, note FROM model_aliases "
            "WHERE model_name = $model_name ORDER BY changed_at, alias",
            {"model_name": model_name},
        )

    def acquire_partition_lease(
        self, job: str, partition_date: Any, run_id: str, host: str, pid: int, ttl_s: float
    ) -> dict[str, Any] | None:
        """Take the partition's lease for `ttl_s` seconds: None when this run now holds it (it was
        free, expired or already ours), else the holder's row (run_id, host, pid, expires_at)."""
        values = {"job": job, "partition_date": partition_date, "run_id": run_id, "host": host, "pid": pid, "ttl_s": ttl_s}
        with self._session(write=True) as session:
            # A holder may release between the failed insert and the look-up; then the insert is retried.
            for _ in range(3):
                taken = session.rows(
                    "INSERT INTO partition_leases AS held (job, partition_date, run_id, host, pid, acquired_at, expires_at) "
                    f"VALUES ($job, $partition_date, $run_id, $host, $pid, now(), {_LEASE_EXPIRY}) "
                    "ON CONFLICT (job, partition_date) DO UPDATE SET run_id = excluded.run_id, host = excluded.host, "
                    "pid = excluded.pid, expires_at = excluded.expires_at, "
                    "acquired_at = CASE WHEN held.run_id = excluded.run_id THEN held.acquired_at ELSE excluded.acquired_at END "
                    "WHERE held.expires_at <= now() OR held.run_id = excluded.run_id RETURNING run_id",
                    values,
                )
                if taken:
                    return None
                holder = session.rows(
                    f"SELECT run_id, host, pid, expires_at FROM partition_leases WHERE {_PARTITION_KEY}", values
                )
                if holder:
                    return holder[0]
        raise RuntimeError(f"lease of ({job}, {partition_date}) kept changing hands; try again")

    def renew_partition_lease(self, job: str, partition_date: Any, run_id: str, ttl_s: float) -> bool:
        """Extend this run's lease to `ttl_s` seconds from now; False when the run no longer holds it."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    f"UPDATE partition_leases SET expires_at = {_LEASE_EXPIRY} WHERE {_PARTITION_KEY} AND run_id = $run_id "
                    "RETURNING run_id",
                    {"job": job, "partition_date": partition_date, "run_id": run_id, "ttl_s": ttl_s},
                )
            )

    def release_partition_lease(self, job: str, partition_date: Any, run_id: str) -> None:
        """Give up this run's lease; a lease another run holds is left alone."""
        with self._session(write=True) as session:
            session.execute(
                f"DELETE FROM partition_leases WHERE {_PARTITION_KEY} AND run_id = $run_id",
                {"job": job, "partition_date": partition_date, "run_id": run_id},
            )

    def take_over_partition_lease(
        self, job: str, partition_date: Any, run_id: str, host: str, pid: int, ttl_s: float, previous_run_id: str
    ) -> bool:
        """Take the lease from `previous_run_id`, which the caller judged dead; False when that run
        no longer holds it (it renewed into someone else's hands, released, or another taker won)."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "UPDATE partition_leases SET run_id = $run_id, host = $host, pid = $pid, acquired_at = now(), "
                    f"expires_at = {_LEASE_EXPIRY} WHERE {_PARTITION_KEY} AND run_id = $previous_run_id RETURNING run_id",
                    {
                        "job": job, "partition_date": partition_date, "run_id": run_id, "host": host, "pid": pid,
                        "ttl_s": ttl_s, "previous_run_id": previous_run_id,
                    },
                )
            )
