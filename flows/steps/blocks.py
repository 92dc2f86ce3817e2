"""The warehouse the settings name, with the PostgreSQL URLs read from Prefect Secret blocks when
`SCORING_WAREHOUSE_SECRET_BLOCK` or `SCORING_SOURCE_SECRET_BLOCK` names one.

Only orchestration-side code (Prefect tasks, flows, the CLI and the reports they print) imports this
module; domain code receives settings whose URL is already resolved and calls `warehouse_for`.
"""

from __future__ import annotations

import functools

import httpx
from pydantic import SecretStr

from tasks.errors import SettingsError
from tasks.settings import Settings, current_settings
from tasks.sinks.warehouse import Warehouse
from tasks.sinks.warehouse_choice import warehouse_for


def with_warehouse_url(settings: Settings) -> Settings:
    """`settings` with `warehouse_url` and `source_url` taken from the Secret blocks they name; unchanged without any."""
    for url_field, block_field, what in (
        ("warehouse_url", "warehouse_secret_block", "warehouse"),
        ("source_url", "source_secret_block", "source"),
    ):
        block = getattr(settings, block_field)
        if not block:
            continue
        variable = f"environment variable SCORING_{block_field.upper()}={block!r}"
        if getattr(settings, url_field) is not None:
            raise SettingsError(f"{variable}: SCORING_{url_field.upper()} is set too; set one of them, not both")
        url = _secret_block_value(block, variable)
        if not isinstance(url, str):
            raise SettingsError(f"{variable}: the Secret block must hold the {what} URL as one string")
        settings = settings.model_copy(update={url_field: SecretStr(url), block_field: None})
    return settings


def _secret_block_value(block: str, variable: str) -> object:
    from prefect.blocks.system import Secret
    from prefect.settings import PREFECT_API_URL

    where = PREFECT_API_URL.value() or "Prefect's ephemeral API"
    try:
        return Secret.load(block).get()
    except ValueError as exc:
        # Prefect's "Unable to find block document named …": the name is what to fix.
        raise SettingsError(f"{variable}: no Prefect Secret block of that name at {where}") from exc
    except httpx.HTTPError as exc:
        raise SettingsError(f"{variable}: the Prefect API at {where} did not answer ({type(exc).__name__})") from exc


def configured_warehouse(settings: Settings) -> Warehouse:
    """The warehouse the settings name: PostgreSQL from a URL or a Secret block, else the DuckDB file."""
    return warehouse_for(with_warehouse_url(settings))


@functools.lru_cache(maxsize=16)
def run_warehouse(run_id: str) -> Warehouse:
    """The warehouse of one run, built once per process from its settings: each of the run's steps
    reads a Secret block once, not once per step."""
    return configured_warehouse(current_settings())
