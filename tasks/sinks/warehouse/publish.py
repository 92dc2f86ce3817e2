"""Publishing: a partition's rows swapped in, table by table, in one transaction."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa

from tasks.errors import PartitionLeaseLost
from tasks.sinks.warehouse.base import WarehouseBase
from tasks.sinks.warehouse.ledger import closed_run
from tasks.sinks.warehouse.schema import PARTITIONED_TABLES, monitoring_dataset
from tasks.sinks.warehouse.session import PARTITION_KEY, quoted

log = logging.getLogger("scoring.warehouse")


class PartitionPublishing(WarehouseBase):
    """The replacement of a partition's scored rows, and of its monitoring rows."""

    def replace_partition(
        self,
        *,
        job: str,
        partition_date: Any,
        files: dict[str, list[Path]],
        committing_run: str | None = None,
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
                session.execute(f"DELETE FROM {quoted(table)} WHERE {PARTITION_KEY}", key)
                if paths:
                    session.append_parquet(table, paths)
                inserted[table] = session.rows(f"SELECT count(*) AS n FROM {quoted(table)} WHERE {PARTITION_KEY}", key)[
                    0
                ]["n"]
            if committing_run is not None:
                session.execute(f"DELETE FROM decision_monitoring WHERE {PARTITION_KEY}", key)
                if not closed_run(
                    session,
                    committing_run,
                    status="committed",
                    ended_at=None,
                    error=None,
                    counts=counts,
                    warnings=(),
                    only_if="AND status = 'publishing'",
                ):
                    raise PartitionLeaseLost(
                        f"run {committing_run} of {job} {partition_date} is no longer publishing (another run closed it); "
                        "its rows were not committed"
                    )
        log.info("warehouse %s: partition (%s, %s) replaced, rows %s", self.location, job, partition_date, inserted)
        return inserted

    def replace_monitoring_partition(
        self, *, job: str, partition_date: Any, tables: dict[str, pa.Table]
    ) -> dict[str, int]:
        """Swap in the rows of each monitoring table for (job, partition_date) in one transaction.

        A table given zero rows is emptied for the partition. Every row must belong to the
        partition, or the next replacement would not delete it.
        """
        for table, rows in tables.items():
            schema = monitoring_dataset(table).schema
            if not rows.schema.equals(schema):
                raise ValueError(f"rows for {table} do not match its schema: got {rows.schema}, expected {schema}")
            keys = {(r["job"], r["partition_date"]) for r in rows.select(["job", "partition_date"]).to_pylist()}
            if keys - {(job, partition_date)}:
                raise ValueError(
                    f"rows for {table} belong to other partitions than ({job}, {partition_date}): {sorted(keys)}"
                )
        key = {"job": job, "partition_date": partition_date}
        inserted: dict[str, int] = {}
        with self._session(write=True) as session, session.transaction():
            for table, rows in tables.items():
                session.execute(f"DELETE FROM {quoted(table)} WHERE {PARTITION_KEY}", key)
                if rows.num_rows:
                    session.append_arrow(table, rows)
                inserted[table] = session.rows(f"SELECT count(*) AS n FROM {quoted(table)} WHERE {PARTITION_KEY}", key)[
                    0
                ]["n"]
        return inserted
