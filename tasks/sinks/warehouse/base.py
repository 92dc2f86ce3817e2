"""What every part of the warehouse is written over: a backend's short sessions, and reads that find nothing
(rather than create the warehouse) while no run has written yet."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from tasks.sinks.warehouse.schema import table_exists
from tasks.sinks.warehouse.session import Session


class WarehouseBase(ABC):
    """A backend's sessions; the warehouse's operations (tasks/sinks/warehouse/operations.py) are written over them."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the warehouse is, safe to log and show (no password)."""

    @abstractmethod
    def _exists(self) -> bool:
        """False when there is no warehouse yet, so reads return nothing instead of creating one."""

    @abstractmethod
    def _session(self, *, write: bool) -> contextlib.AbstractContextManager[Session]:
        """A short connection; `write` first creates any missing table."""

    def kept_open(self) -> contextlib.AbstractContextManager[None]:
        """A block in which this thread's calls may share one connection; a backend whose
        connections are cheap to open keeps none."""
        return contextlib.nullcontext()

    def applied_migrations(self) -> list[dict[str, Any]]:
        """The migrations this warehouse has had, oldest first."""
        return self._read_rows(
            "schema_migrations", "SELECT id, description, applied_at FROM schema_migrations ORDER BY id", {}
        )

    def _read_rows(self, table: str, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """`sql`'s rows; none while the warehouse or `table` does not exist yet (nothing wrote them)."""
        if not self._exists():
            return []
        with self._session(write=False) as session:
            return session.rows(sql, params) if table_exists(session, table) else []

    def _read_arrow(self, table: str, schema: pa.Schema, sql: str, params: Mapping[str, Any]) -> pa.Table:
        """`sql`'s result in `schema`; an empty table of it while the warehouse or `table` does not exist yet."""
        if not self._exists():
            return schema.empty_table()
        with self._session(write=False) as session:
            if not table_exists(session, table):
                return schema.empty_table()
            return session.arrow(sql, params).cast(schema)
