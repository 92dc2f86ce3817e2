"""Every schema change since the first release, recorded in `schema_migrations` and run once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from tasks.catalog import DECISION_FLIPS, DRIFT_HISTOGRAMS, DRIFT_REPORT, RUNS, warehouse_dataset
from tasks.sinks.warehouse.schema import INDEXED_TABLES, partition_index_sql, table_columns
from tasks.sinks.warehouse.session import Session, quoted

log = logging.getLogger("scoring.warehouse")

ADDED_COLUMNS = {
    RUNS.table: ("rows_failed", "rows_fallback", "error_detail", "warnings"),
    DRIFT_REPORT.table: ("kind", "unseen_share"),
    DRIFT_HISTOGRAMS.table: ("kind",),
}
"""Columns added after the first release (types from the catalog), added in place by migration 0001."""
RENAMED_COLUMNS = {DRIFT_REPORT.table: {"out_of_range_share": "outside_p1_p99_share"}}
"""Old name → new name; the values keep their meaning (numeric: share below p1 or at/above p99)."""
_FORECAST_COLUMNS = {DECISION_FLIPS.table: ("champion_forecast", "challenger_forecast")}
"""Columns forecast jobs brought to tables of earlier releases, added in place by migration 0003."""
_CLASS_COLUMNS = {DECISION_FLIPS.table: ("champion_class", "challenger_class")}
"""Columns multiclass jobs brought to tables of earlier releases, added in place by migration 0004."""


def _adding(added: Mapping[str, tuple[str, ...]], renamed: Mapping[str, Mapping[str, str]] | None = None):  # noqa: ANN202
    """A migration's statements: ALTERs that bring the tables of `added` (and `renamed`) to today's columns, renames first."""
    renamed = renamed or {}

    def statements(session: Session, types: Mapping[pa.DataType, str], backend: str) -> list[str]:  # noqa: ARG001
        present = table_columns(session, sorted({*added, *renamed}))
        found = []
        for table, renames in renamed.items():
            for old, new in renames.items():
                if old in present.get(table, ()) and new not in present[table]:
                    found.append(f"ALTER TABLE {quoted(table)} RENAME COLUMN {quoted(old)} TO {quoted(new)}")
        for table, columns in added.items():
            for column in columns:
                if table in present and column not in present[table]:
                    kind = types[warehouse_dataset(table).schema.field(column).type]
                    found.append(f"ALTER TABLE {quoted(table)} ADD COLUMN {quoted(column)} {kind}")
        return found

    return statements


def _partition_indexes(session: Session, types: Mapping[pa.DataType, str], backend: str) -> list[str]:  # noqa: ARG001
    # DuckDB's zone maps already skip other partitions' row groups; its ART indexes would slow every bulk replace.
    return [partition_index_sql(t) for t in INDEXED_TABLES] if backend == "postgres" else []


@dataclass(frozen=True)
class Migration:
    """One recorded change of the warehouse's schema: its statements are computed against the tables as
    they are (so a migration finds nothing to do on a warehouse created by today's release) and run once,
    then recorded in `schema_migrations`."""

    id: str
    description: str
    statements: Callable[[Session, Mapping[pa.DataType, str], str], list[str]]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_added_columns",
        "runs.rows_failed, rows_fallback, error_detail, warnings; drift_report.out_of_range_share renamed "
        "outside_p1_p99_share, drift_report.kind, unseen_share; drift_histograms.kind",
        _adding(ADDED_COLUMNS, RENAMED_COLUMNS),
    ),
    Migration(
        "0002_partition_indexes",
        "an index on (job, partition_date) of every partition table (PostgreSQL)",
        _partition_indexes,
    ),
    Migration(
        "0003_forecast_columns", "decision_flips.champion_forecast, challenger_forecast", _adding(_FORECAST_COLUMNS)
    ),
    Migration("0004_class_columns", "decision_flips.champion_class, challenger_class", _adding(_CLASS_COLUMNS)),
)
"""Every schema change since the first release, in order. A new column or index is a new entry here; tables
new in a release are created whole (`create_table_sql`) and need none."""


def pending_migrations(session: Session) -> list[Migration]:
    applied = {r["id"] for r in session.rows("SELECT id FROM schema_migrations")}
    return [m for m in MIGRATIONS if m.id not in applied]


def migrated(session: Session, types: Mapping[pa.DataType, str], backend: str) -> list[str]:
    """Run and record every migration not yet in `schema_migrations`; the ids applied."""
    done = []
    for migration in pending_migrations(session):
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
