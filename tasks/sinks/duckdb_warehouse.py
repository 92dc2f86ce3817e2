"""The warehouse in one local DuckDB file: short connections that wait, with backoff, while another
process holds the file's lock, and a schema checked once per file and process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tasks.errors import (
    ReadOnlyStorage,
    duckdb_lock_holder,
    environment_fault,
    locked_warehouse_fault,
    process_description,
)
from tasks.sinks.warehouse import Warehouse
from tasks.sinks.warehouse.migrations import migrated
from tasks.sinks.warehouse.schema import DUCKDB_TYPES, create_missing_tables
from tasks.sinks.warehouse.session import Session, parameter_names, quoted

log = logging.getLogger("scoring.warehouse")


class _DuckDBSession:
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    @staticmethod
    def _bound(sql: str, params: Mapping[str, Any] | None) -> dict[str, Any] | None:
        names = parameter_names(sql)
        return {n: params[n] for n in names} if names and params is not None else None

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        cursor = self.con.execute(sql, self._bound(sql, params))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        return self.con.sql(sql, params=self._bound(sql, params)).to_arrow_table()

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self.con.execute(sql, self._bound(sql, params))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def append_parquet(self, table: str, paths: Sequence[Path]) -> None:
        # Without insertion order the load streams instead of buffering row groups to keep them in
        # file order: at 10 M rows 2× faster within the memory limit. Only for this connection, so
        # reads elsewhere keep a stable order (the outcomes' sums must not change between reads).
        self.con.execute("SET SESSION preserve_insertion_order = false")
        self.con.execute(
            f"INSERT INTO {quoted(table)} BY NAME SELECT * FROM read_parquet(?, hive_partitioning = false)",
            [[str(p) for p in paths]],
        )

    def append_arrow(self, table: str, rows: pa.Table) -> None:
        columns = ", ".join(quoted(c) for c in rows.schema.names)
        self.con.register("incoming_rows", rows)
        try:
            self.con.execute(f"INSERT INTO {quoted(table)} ({columns}) SELECT {columns} FROM incoming_rows")
        finally:
            self.con.unregister("incoming_rows")


_HELD = threading.local()


def _held_connections() -> dict[Path, duckdb.DuckDBPyConnection]:
    """The databases this thread keeps open (DuckDBWarehouse.kept_open), by file."""
    if not hasattr(_HELD, "connections"):
        _HELD.connections = {}
    return _HELD.connections


_SCHEMA_LOCK = threading.Lock()
_SCHEMA_CHECKED: set[tuple[str, int, int]] = set()


class DuckDBWarehouse(Warehouse):
    """The warehouse in one local DuckDB file."""

    def __init__(self, path: Path, *, lock_timeout_s: float = 120.0, memory_limit: str = "128MB") -> None:
        self.path = path
        self.lock_timeout_s = lock_timeout_s
        # DuckDB's default (80 % of RAM) lets a 10 M-row partition load grow the scorer's peak by
        # its buffer pool; with a cap it writes blocks out instead, and memory stays flat.
        self.memory_limit = memory_limit

    def __repr__(self) -> str:
        return f"DuckDBWarehouse({str(self.path)!r})"

    @property
    def location(self) -> str:
        return str(self.path)

    def _exists(self) -> bool:
        return self.path.exists()

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short connection; `read_only` only skips the schema check.

        The database is always opened read-write: DuckDB keeps one instance per file and process,
        and refuses a read-only connection beside a read-write one (partitions of a backfill run
        in threads of one process), while another process's lock blocks readers and writers alike.
        """
        held = _held_connections().get(self.path)
        con = held.cursor() if held is not None else self._opened()
        try:
            if not read_only:
                self._ensure_schema_once(con)
            yield con
        finally:
            con.close()

    @contextmanager
    def kept_open(self) -> Iterator[None]:
        """This thread's calls in the block share one open database: opening the file costs ~20 ms
        and closing it a checkpoint, so a step of several calls (start, publish, monitoring) pays
        both once. The file's lock is held for the block only, as it is for any write."""
        held = _held_connections()
        if self.path in held:
            yield
            return
        held[self.path] = self._opened()
        try:
            yield
        finally:
            con = held.pop(self.path)
            try:
                con.close()
            except duckdb.Error as exc:
                # Every write in the block was committed to the WAL; a checkpoint that fails on
                # close is retried by the next open, and must not undo a step that succeeded.
                log.warning(
                    "warehouse %s: its checkpoint at close failed; the next open replays the log: %s", self.path, exc
                )

    def _opened(self) -> duckdb.DuckDBPyConnection:
        """A connection, once no other process holds the file's lock (waiting up to `lock_timeout_s`).

        Waiting is logged once, naming the holder, and a lock still held at the deadline, a
        read-only file or a full disk end as one EnvironmentFault naming the file.
        """
        started = time.monotonic()
        delay, announced = 0.05, False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._fault(exc) from exc
        while True:
            try:
                return duckdb.connect(str(self.path), config={"memory_limit": self.memory_limit})
            except duckdb.IOException as exc:
                holder = duckdb_lock_holder(str(exc))
                if holder is None:
                    raise self._fault(exc) from exc
                waited = time.monotonic() - started
                if waited >= self.lock_timeout_s:
                    raise locked_warehouse_fault(self.path, holder, self.lock_timeout_s) from exc
                if not announced:
                    log.warning(
                        "warehouse %s is locked by process %d (%s); waiting up to %g s for it (SCORING_WAREHOUSE_LOCK_WAIT_S)",
                        self.path,
                        holder,
                        process_description(holder),
                        self.lock_timeout_s,
                    )
                    announced = True
                time.sleep(min(delay, max(self.lock_timeout_s - waited, 0.0)))
                delay = min(delay * 2, 2.0)

    def _fault(self, exc: BaseException) -> BaseException:
        """`exc` as the EnvironmentFault it amounts to, worded for this warehouse; `exc` itself otherwise."""
        fault = environment_fault(exc, path_hint=self.path)
        if isinstance(fault, ReadOnlyStorage):
            return ReadOnlyStorage(f"read-only warehouse {self.path}: {str(fault).rpartition(': ')[2]}")
        return fault or exc

    def _ensure_schema_once(self, con: duckdb.DuckDBPyConnection) -> None:
        """The schema checked once per database file and process, never by two threads at once.

        Partitions of a backfill share the process's DuckDB instance, and two concurrent
        `CREATE TABLE IF NOT EXISTS` of one table fail with a catalog write-write conflict.
        The file's identity is part of the key, so a file deleted and made anew is checked again.
        """
        with _SCHEMA_LOCK:
            stat = self.path.stat()
            key = (str(self.path.resolve()), stat.st_dev, stat.st_ino)
            if key in _SCHEMA_CHECKED:
                return
            self._ensure_schema(con)
            _SCHEMA_CHECKED.add(key)

    @staticmethod
    def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
        session = _DuckDBSession(con)
        create_missing_tables(session, DUCKDB_TYPES)
        migrated(session, DUCKDB_TYPES, "duckdb")

    @contextmanager
    def _session(self, *, write: bool) -> Iterator[Session]:
        with self.connect(read_only=not write) as con:
            yield _DuckDBSession(con)
