"""The warehouse's tables: created from the catalog's Arrow schemas (tasks/catalog.py WAREHOUSE_DATASETS)
in each backend's type names, and what a session finds of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from tasks.catalog import MONITORING_DATASETS, PARTITION_DATASETS, WAREHOUSE_DATASETS, Dataset, warehouse_dataset
from tasks.sinks.warehouse.session import Session, quoted

PARTITIONED_TABLES = frozenset(d.table for d in PARTITION_DATASETS)
"""Tables a scoring run replaces per (job, partition_date) from its staged Parquet files."""
MONITORING_TABLES = frozenset(d.table for d in MONITORING_DATASETS)
OWN_TABLES = frozenset(d.table for d in WAREHOUSE_DATASETS)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_JSON = pa.json_()

DUCKDB_TYPES: dict[pa.DataType, str] = {
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
POSTGRES_TYPES: dict[pa.DataType, str] = {
    **DUCKDB_TYPES,
    pa.string(): "TEXT",
    pa.float64(): "DOUBLE PRECISION",
    pa.list_(pa.string()): "TEXT[]",
    pa.list_(pa.float64()): "DOUBLE PRECISION[]",
    _JSON: "JSONB",
}


def create_table_sql(table: str, types: Mapping[pa.DataType, str]) -> str:
    """`CREATE TABLE IF NOT EXISTS` for one of the catalog's warehouse tables in a backend's type names."""
    dataset = warehouse_dataset(table)
    columns = [f"{quoted(f.name)} {types[f.type]}{'' if f.nullable else ' NOT NULL'}" for f in dataset.schema]
    if dataset.primary_key:
        columns.append(f"PRIMARY KEY ({', '.join(quoted(c) for c in dataset.keys)})")
    return f"CREATE TABLE IF NOT EXISTS {quoted(table)} ({', '.join(columns)})"


def partition_index_sql(table: str) -> str:
    """The index a PostgreSQL partition table gets on (job, partition_date): every replace, monitoring read and
    outcomes join selects one partition, which a table of a year of nightly millions must not scan for."""
    return f"CREATE INDEX IF NOT EXISTS {quoted(table + '_partition')} ON {quoted(table)} (job, partition_date)"


INDEXED_TABLES = tuple(d.table for d in (*PARTITION_DATASETS, *MONITORING_DATASETS))


def monitoring_dataset(table: str) -> Dataset:
    if table not in MONITORING_TABLES:
        raise ValueError(f"not a monitoring table: {table!r}; known: {sorted(MONITORING_TABLES)}")
    return warehouse_dataset(table)


def table_exists(session: Session, table: str) -> bool:
    return bool(
        session.rows(
            "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = $table "
            "AND table_schema = current_schema()",
            {"table": table},
        )[0]["n"]
    )


def missing_tables(session: Session) -> list[str]:
    present = {
        r["table_name"]
        for r in session.rows("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
    }
    return [d.table for d in WAREHOUSE_DATASETS if d.table not in present]


def create_missing_tables(session: Session, types: Mapping[pa.DataType, str], *, indexed: bool = False) -> None:
    """Today's tables that are missing, whole; with `indexed` (PostgreSQL) a partition table with its index."""
    for table in missing_tables(session):
        session.execute(create_table_sql(table, types))
        if indexed and table in INDEXED_TABLES:
            session.execute(partition_index_sql(table))


def table_columns(session: Session, tables: Sequence[str]) -> dict[str, set[str]]:
    """The columns each of `tables` has now (no entry for a table that does not exist)."""
    found: dict[str, set[str]] = {}
    for r in session.rows(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
    ):
        if r["table_name"] in tables:
            found.setdefault(r["table_name"], set()).add(r["column_name"])
    return found
