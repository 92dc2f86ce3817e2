"""The warehouse in a PostgreSQL database over ADBC: Arrow bulk loads (binary COPY), `$name`
parameters numbered for the driver, and the URL's password scrubbed from every error and repr."""

from __future__ import annotations

import contextlib
import logging
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.catalog import warehouse_dataset
from tasks.errors import WarehouseUnreachable
from tasks.redaction import redacted_url, scrubbed
from tasks.sinks.warehouse import Warehouse
from tasks.sinks.warehouse.migrations import migrated, pending_migrations
from tasks.sinks.warehouse.schema import POSTGRES_TYPES, create_missing_tables, missing_tables
from tasks.sinks.warehouse.session import NAMED_PARAMETER, Session, parameter_names

if TYPE_CHECKING:
    from adbc_driver_manager.dbapi import Connection as AdbcConnection

log = logging.getLogger("scoring.warehouse")


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A staged batch in the table's column order and types; columns it lacks are null, as with DuckDB's BY NAME."""
    columns = [
        batch.column(f.name).cast(f.type) if f.name in batch.schema.names else pa.nulls(batch.num_rows, f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class _PostgresSession:
    def __init__(self, con: AdbcConnection) -> None:
        self.con = con
        with con.cursor() as cursor:
            cursor.execute("SELECT current_schema()")
            # adbc_ingest resolves table names in `public` unless told the schema the session uses.
            self.schema: str = cursor.fetchall()[0][0]

    @staticmethod
    def _positional(sql: str, params: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
        names = parameter_names(sql)
        numbered = NAMED_PARAMETER.sub(lambda m: f"${names.index(m.group(1)) + 1}", sql)
        return numbered, [params[n] for n in names] if names and params is not None else []

    def _table(self, sql: str, params: Mapping[str, Any] | None) -> pa.Table:
        text, values = self._positional(sql, params)
        with self.con.cursor() as cursor:
            cursor.execute(text, values or None)
            return cursor.fetch_arrow_table()

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._table(sql, params).to_pylist()

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        result = self._table(sql, params)
        # The driver tags every field with its PostgreSQL type; callers compare schemas without it.
        return result.cast(pa.schema([f.remove_metadata() for f in result.schema]))

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        text, values = self._positional(sql, params)
        with self.con.cursor() as cursor:
            cursor.execute(text, values or None)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # ADBC connections are never in autocommit here: everything since the last commit is one transaction.
        self.con.commit()
        try:
            yield
        except BaseException:
            self.con.rollback()
            raise
        self.con.commit()

    def append_parquet(self, table: str, paths: Sequence[Path]) -> None:
        schema = warehouse_dataset(table).schema
        for path in paths:
            with pq.ParquetFile(path) as file:
                extra = sorted(set(file.schema_arrow.names) - set(schema.names))
                if extra:
                    raise ValueError(f"{path}: column(s) {extra} are not in the warehouse table {table}")
                if not file.metadata.num_rows:
                    continue
                batches = (_conformed(batch, schema) for batch in file.iter_batches())
                try:
                    self._ingest(table, pa.RecordBatchReader.from_batches(schema, batches))
                except Exception as exc:
                    exc.add_note(f"while loading {path} into the warehouse table {table}")
                    raise

    def append_arrow(self, table: str, rows: pa.Table) -> None:
        self._ingest(table, rows)

    def _ingest(self, table: str, data: pa.Table | pa.RecordBatchReader) -> None:
        with self.con.cursor() as cursor:
            cursor.adbc_ingest(table, data, mode="append", db_schema_name=self.schema)


class PostgresWarehouse(Warehouse):
    """The warehouse in a PostgreSQL database, given as `postgresql://user:password@host:port/db`."""

    def __init__(self, url: str) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("postgresql", "postgres"):
            raise ValueError(
                "the warehouse URL must start with postgresql:// (the value is not shown: it may hold a password)"
            )
        self._url = url

    def __repr__(self) -> str:
        return f"PostgresWarehouse({self.location!r})"

    @property
    def location(self) -> str:
        return redacted_url(self._url)

    def _exists(self) -> bool:
        return True

    def _scrub(self, exc: BaseException) -> None:
        """Blank the password out of the messages of `exc` and every exception chained to it, in place."""
        pending, seen = [exc], set()
        while pending:
            current = pending.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            current.args = tuple(self._scrubbed(a) if isinstance(a, str) else a for a in current.args)
            pending += [e for e in (current.__cause__, current.__context__) if e is not None]

    def _scrubbed(self, text: str) -> str:
        return scrubbed(text, url=self._url)

    def _connect(self) -> AdbcConnection:
        import adbc_driver_postgresql.dbapi

        try:
            return adbc_driver_postgresql.dbapi.connect(self._url)
        except Exception as exc:
            self._scrub(exc)
            log.warning("cannot connect to the PostgreSQL warehouse %s: %s", self.location, exc)
            # The driver's first line says why (refused, timed out, authentication); the rest is its context.
            reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise WarehouseUnreachable(f"cannot connect to the PostgreSQL warehouse {self.location}: {reason}") from exc

    @contextmanager
    def _session(self, *, write: bool) -> Iterator[Session]:
        try:
            con = self._connect()
            try:
                session = _PostgresSession(con)
                if write:
                    self._ensure_schema(session)
                yield session
                con.commit()
            except BaseException:
                # The error that got here is the one to report, not a rollback failing on a broken connection.
                with contextlib.suppress(Exception):
                    con.rollback()
                raise
            finally:
                con.close()
        except Exception as exc:
            self._scrub(exc)
            raise

    @staticmethod
    def _ensure_schema(session: _PostgresSession) -> None:
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL's catalog, so writers
        # that find a table missing or a migration pending change the schema one at a time.
        if missing_tables(session) or pending_migrations(session):
            session.execute("SELECT pg_advisory_xact_lock(hashtext('scoring warehouse schema'))")
            # Looked at again under the lock: another writer may have changed the schema meanwhile.
            create_missing_tables(session, POSTGRES_TYPES, indexed=True)
            migrated(session, POSTGRES_TYPES, "postgres")
            session.con.commit()
