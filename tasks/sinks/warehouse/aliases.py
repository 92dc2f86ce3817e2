"""The `model_aliases` ledger: every move of a model's aliases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.sinks.warehouse.base import WarehouseBase


class AliasLedger(WarehouseBase):
    """Moves of the model aliases, recorded and read."""

    def record_alias_change(self, row: Mapping[str, Any]) -> None:
        """One move of a model alias in the `model_aliases` ledger (tasks/inference/aliases.py AliasChange.as_row, and the job)."""
        with self._session(write=True) as session:
            session.execute(
                "INSERT INTO model_aliases (model_name, alias, from_version, to_version, changed_by, changed_at, job, note) "
                "VALUES ($model_name, $alias, $from_version, $to_version, $changed_by, $changed_at, $job, $note)",
                dict(row),
            )

    def alias_changes(self, model_name: str) -> list[dict[str, Any]]:
        """Every recorded move of the model's aliases, oldest first."""
        return self._read_rows(
            "model_aliases",
            "SELECT model_name, alias, from_version, to_version, changed_by, changed_at, job, note FROM model_aliases "
            "WHERE model_name = $model_name ORDER BY changed_at, alias",
            {"model_name": model_name},
        )
