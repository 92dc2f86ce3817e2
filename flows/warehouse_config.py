"""The warehouse the settings name, with the PostgreSQL URL read from a Prefect Secret block when
`SCORING_WAREHOUSE_SECRET_BLOCK` names one.

Only orchestration-side code (Prefect tasks, flows, the CLI and the reports they print) imports this
module; domain code receives settings whose URL is already resolved and calls `warehouse_for`.
"""

from __future__ import annotations

from pydantic import SecretStr

from tasks.settings import Settings
from tasks.warehouse import Warehouse, warehouse_for


def with_warehouse_url(settings: Settings) -> Settings:
    """`settings` with `warehouse_url` taken from the Secret block they name; unchanged without one."""
    if not settings.warehouse_secret_block:
        return settings
    if settings.warehouse_url is not None:
        raise ValueError("set SCORING_WAREHOUSE_URL or SCORING_WAREHOUSE_SECRET_BLOCK, not both")
    from prefect.blocks.system import Secret

    url = Secret.load(settings.warehouse_secret_block).get()
    if not isinstance(url, str):
        raise ValueError(f"Secret block {settings.warehouse_secret_block!r} must hold the warehouse URL as one string")
    return settings.model_copy(update={"warehouse_url": SecretStr(url), "warehouse_secret_block": None})


def configured_warehouse(settings: Settings) -> Warehouse:
    """The warehouse the settings name: PostgreSQL from a URL or a Secret block, else the DuckDB file."""
    return warehouse_for(with_warehouse_url(settings))
