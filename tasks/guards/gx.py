"""The Great Expectations fallback: a row-level (column map) expectation the guards do not compile runs
through GX itself on each chunk, slower, but honoured. GX is imported only when a suite needs it."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from tasks.errors import GuardFailure, SuiteError
from tasks.guards.compiled import Expectation


class GreatExpectationsRowChecks:
    """Row-level expectations the guards do not compile, validated by GX itself on each chunk."""

    def __init__(self, expectations: list[Expectation], configs: list[Any]) -> None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.expectations = expectations
        self.configs = configs
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        asset = context.data_sources.add_pandas("guards").add_dataframe_asset("chunk")
        self._batch_definition = asset.add_batch_definition_whole_dataframe("whole_chunk")

    def violation_masks(self, frame: pl.DataFrame) -> dict[str, np.ndarray]:
        columns = sorted({e.column for e in self.expectations})
        batch = self._batch_definition.get_batch(batch_parameters={"dataframe": frame.select(columns).to_pandas()})
        masks: dict[str, np.ndarray] = {}
        for exp, config in zip(self.expectations, self.configs, strict=True):
            result = batch.validate(config, result_format={"result_format": "COMPLETE"})
            if result.exception_info.get("raised_exception"):
                raise GuardFailure(
                    f"Great Expectations could not evaluate {exp.key} on column {exp.column!r}: "
                    f"{result.exception_info.get('exception_message')}"
                )
            mask = np.zeros(frame.height, dtype=bool)
            mask[np.asarray(result.result.get("unexpected_index_list") or [], dtype=np.int64)] = True
            masks[exp.key] = mask
        return masks


def gx_map_expectation(etype: str, kwargs: dict[str, Any], where: str) -> Any:
    """The GX expectation object for a type we do not compile; only row-level types can guard rows."""
    from great_expectations.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.expectation import ColumnMapExpectation
    from great_expectations.expectations.registry import get_expectation_impl

    try:
        impl = get_expectation_impl(etype)
    except ExpectationNotFoundError:
        raise SuiteError(f"{where}: {etype!r} is not a Great Expectations expectation type") from None
    if not issubclass(impl, ColumnMapExpectation):
        raise SuiteError(
            f"{where}: {etype} judges the whole column, not rows, so it cannot guard rows; "
            "check it in the drift report or a separate validation instead"
        )
    try:
        return impl(**kwargs)
    except Exception as exc:
        raise SuiteError(f"{where}: Great Expectations rejects the kwargs of {etype}: {exc}") from None
