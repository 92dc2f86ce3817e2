"""Which warehouse backend a run's settings name: PostgreSQL at a URL, or the local DuckDB file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
from tasks.sinks.postgres_warehouse import PostgresWarehouse
from tasks.sinks.warehouse import Warehouse

if TYPE_CHECKING:
    from tasks.settings import Settings


def warehouse_for(settings: Settings) -> Warehouse:
    """The warehouse the settings name: PostgreSQL at `warehouse_url` when set, else the DuckDB file
    at `settings.duckdb_path`. A Prefect Secret block is read at the orchestration edge
    (`flows.steps.blocks`), never here: domain code does not know the orchestrator."""
    if settings.warehouse_url is not None and settings.warehouse_secret_block:
        raise ValueError("set SCORING_WAREHOUSE_URL or SCORING_WAREHOUSE_SECRET_BLOCK, not both")
    if settings.warehouse_secret_block:
        raise ValueError(
            f"the warehouse URL is in the Prefect Secret block {settings.warehouse_secret_block!r}, which this code "
            "does not read: resolve it first with flows.steps.blocks.with_warehouse_url(settings)"
        )
    if settings.warehouse_url is not None:
        return PostgresWarehouse(settings.warehouse_url.get_secret_value())
    return DuckDBWarehouse(
        settings.duckdb_path, lock_timeout_s=settings.warehouse_lock_wait_s, memory_limit=settings.duckdb_memory_limit
    )
