"""The warehouse the settings name, with the PostgreSQL URLs read from Prefect Secret blocks when
`SCORING_WAREHOUSE_SECRET_BLOCK` or `SCORING_SOURCE_SECRET_BLOCK` names one.

Only orchestration-side code (Prefect tasks, flows, the CLI and the reports they print) imports this
module; domain code receives settings whose URL is already resolved and calls `warehouse_for`.
"""

from __future__ import annotations

import functools

from pydantic import SecretStr

from tasks.settings import Settings, current_settings
from tasks.sinks.warehouse import Warehouse
from tasks.sinks.warehouse_choice import warehouse_for


def with_warehouse_url(settings: Settings) -> Settings:
    """`settings` with `warehouse_url` and `source_url` taken from the Secret blocks they name; unchanged without any."""
    for url_field, block_field, what in (
        ("warehouse_url", "warehouse_secret_block", "warehouse"), ("source_url", "source_secret_block", "source")
    ):
        block = getattr(settings, block_field)
        if not block:
            continue
        if getattr(settings, url_field) is not None:
            raise ValueError(f"set SCORING_{url_field.upper()} or SCORING_{block_field.upper()}, not both")
        from prefect.blocks.system import Secret

        url = Secret.load(block).get()
        if not isinstance(url, str):
            raise ValueError(f"Secret block {block!r} must hold the {what} URL as one string")
        settings = settings.model_copy(update={url_field: SecretStr(url), block_field: None})
    return settings


def configured_warehouse(settings: Settings) -> Warehouse:
    """The warehouse the settings name: PostgreSQL from a URL or a Secret block, else the DuckDB file."""
    return warehouse_for(with_warehouse_url(settings))


@functools.lru_cache(maxsize=16)
def run_warehouse(run_id: str) -> Warehouse:
    """The warehouse of one run, built once per process from its settings: each of the run's steps
    reads a Secret block once, not once per step."""
    return configured_warehouse(current_settings())
