"""Realized error of a forecast job (target.kind regression or count) once its actuals land.

The label files of a forecast job hold a number per entity, the actual (units sold, an amount), read
and accounted for as a binary job's outcomes are (tasks/monitoring/outcomes.py) and stored in
`outcome_actuals`. Joined to the partition's published forecasts on entity id, per model version,
`outcome_errors` holds one row per group of forecasts — the partition (`partition`/`all`), each
decision of the rule table (`decision`/<decision>) and each value of each `monitoring.slices` column
(`slice:<column>`/<value>) — with, on the group's rows that have an actual:

- MAE, RMSE and bias = mean(actual − forecast) (positive: the model forecast too little);
- MAPE = mean(|actual − forecast| / |actual|) over the rows whose actual is not 0 (null where every
  actual is 0: a relative error of a zero is not defined), and sMAPE = mean(2·|a − f| / (|a| + |f|))
  with 0/0 counted as 0 (a zero forecast of a zero is exact), so it is defined on every row;
- the interval's coverage (share of actuals in [forecast_low, forecast_high]) and mean width, beside
  the spec's `prediction.interval_level` the coverage should match.

`rows` counts the group's forecasts, `labelled` those with an actual; every measure is taken on the
labelled rows (forecast_mean too, so bias = actual_mean − forecast_mean), and is null without one.

Sums run in entity order with `np.bincount`, which adds in index order: the same forecasts and actuals
give the same bits however the warehouse returned them, so recomputing leaves identical tables.

Slice values are the raw partition's columns, read again through the job's source (the scoring pass
keeps only their counts); values beyond the `monitoring.slice_max_values` most frequent are pooled as
`(other)`, nulls are `(null)` as in slice monitoring (tasks/monitoring/slices.py), and a forecast whose
entity the raw partition no longer holds is `(not in raw)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.errors import PartitionError
from tasks.monitoring.health import ALL
from tasks.monitoring.slices import NULL_VALUE, OTHER
from tasks.sources import ParquetPartition, RawPartition

FORECAST_COLUMNS = ("run_id", "entity_id", "forecast", "forecast_low", "forecast_high", "decision", "model_version")
"""The only forecast columns the realized error reads."""
ESTIMATED_ERROR = "estimated_error"
"""The `model_health` section whose measures (`mae`, `rmse`, item `all`) estimate a forecast job's error before actuals land."""
ERROR_MEASURES = ("mae", "rmse")
"""The realized measures an estimate is checked against; either outside its interval flags the partition."""
NOT_IN_RAW = "(not in raw)"
"""Slice value of a forecast whose entity the raw partition no longer holds."""
PARTITION, DECISION, SLICE = "partition", "decision", "slice:"
_SLICE_READ_ROWS = 100_000


def partition_slice_values(raw: RawPartition, *, entity_column: str, slices: Sequence[str]) -> pl.DataFrame | None:
    """(entity_id, one String column per slice) of the raw partition, the first row of an entity that
    occurs twice; None when the partition is gone (its raw rows were removed since it was scored)."""
    if not raw.exists():
        return None
    wanted = [entity_column, *slices]
    frames = []
    if isinstance(raw, ParquetPartition):
        for location in raw.files():
            opened = raw.opened(location)
            missing = [c for c in wanted if c not in opened.schema_arrow.names]
            if missing:
                raise PartitionError(
                    f"raw file {location} lacks column(s) {missing} that the job's entity_column and monitoring.slices name"
                )
            frames.append(pl.from_arrow(opened.read(columns=wanted)))
    else:
        with raw.batches(_SLICE_READ_ROWS) as reader:
            missing = [c for c in wanted if c not in reader.schema.names]
            if missing:
                raise PartitionError(
                    f"raw source {raw} returns no column(s) {missing} that the job's entity_column and monitoring.slices name"
                )
            frames.append(pl.from_arrow(reader.read_all().select(wanted)))
    schema = {"entity_id": pl.String, **{c: pl.String for c in slices}}
    if not frames:
        return pl.DataFrame(schema=schema)
    return (
        pl.concat([f.select(pl.col(c).cast(pl.String) for c in wanted) for f in frames])
        .rename({entity_column: "entity_id"})
        .filter(pl.col("entity_id").is_not_null())
        .unique(subset="entity_id", keep="first", maintain_order=True)
        .cast(schema)
    )


def sliced_forecasts(
    forecasts: pl.DataFrame, values: pl.DataFrame, *, slices: Sequence[str], max_values: int
) -> pl.DataFrame:
    """`forecasts` with a column `slice:<column>` per slice column: each row's value, the values beyond the
    `max_values` most frequent (ties by value) pooled as `(other)`."""
    joined = forecasts.join(
        values.select("entity_id", pl.lit(True).alias("_in_raw"), *(pl.col(c).alias(f"{SLICE}{c}") for c in slices)),
        on="entity_id",
        how="left",
        maintain_order="left",
    )
    pooled = []
    for column in (f"{SLICE}{c}" for c in slices):
        value = (
            pl.when(pl.col("_in_raw").is_null())
            .then(pl.lit(NOT_IN_RAW))
            .otherwise(pl.col(column).fill_null(NULL_VALUE))
        )
        counts = joined.select(value.alias("v"))["v"].value_counts(name="n").sort(["n", "v"], descending=[True, False])
        kept = counts["v"].head(max_values)
        pooled.append(pl.when(value.is_in(kept.implode())).then(value).otherwise(pl.lit(OTHER)).alias(column))
    return joined.with_columns(pooled).drop("_in_raw")


def _error_sums(
    codes: np.ndarray, groups: int, actual: np.ndarray, forecast: np.ndarray, low: np.ndarray, high: np.ndarray
) -> dict[str, np.ndarray]:
    """Per group index (0..groups-1) the sums every measure is made of, over rows with an actual."""
    error = actual - forecast
    absolute = np.abs(error)
    nonzero = actual != 0
    scale = np.abs(actual) + np.abs(forecast)

    def summed(weights: np.ndarray) -> np.ndarray:
        return np.bincount(codes, weights=weights, minlength=groups)

    return {
        "labelled": np.bincount(codes, minlength=groups),
        "actual": summed(actual),
        "forecast": summed(forecast),
        "abs": summed(absolute),
        "sq": summed(error * error),
        "error": summed(error),
        "ape": summed(np.divide(absolute, np.abs(actual), out=np.zeros_like(absolute), where=nonzero)),
        "nonzero": np.bincount(codes, weights=nonzero.astype(np.float64), minlength=groups),
        "sape": summed(np.divide(2.0 * absolute, scale, out=np.zeros_like(absolute), where=scale > 0)),
        "covered": summed(((low <= actual) & (actual <= high)).astype(np.float64)),
        "width": summed(high - low),
    }


def _measures(sums: dict[str, np.ndarray], i: int) -> dict[str, float | None]:
    n = int(sums["labelled"][i])
    if not n:
        return dict.fromkeys(
            ("actual_mean", "forecast_mean", "mae", "rmse", "bias", "mape", "smape", "coverage", "mean_width")
        )
    nonzero = float(sums["nonzero"][i])
    return {
        "actual_mean": float(sums["actual"][i]) / n,
        "forecast_mean": float(sums["forecast"][i]) / n,
        "mae": float(sums["abs"][i]) / n,
        "rmse": math.sqrt(float(sums["sq"][i]) / n),
        "bias": float(sums["error"][i]) / n,
        "mape": float(sums["ape"][i]) / nonzero if nonzero else None,
        "smape": float(sums["sape"][i]) / n,
        "coverage": float(sums["covered"][i]) / n,
        "mean_width": float(sums["width"][i]) / n,
    }


def outcome_error_rows(
    joined: pl.DataFrame, *, decisions: Sequence[str], slices: Sequence[str], interval_level: float, key: dict[str, Any]
) -> list[dict[str, Any]]:
    """`outcome_errors` rows of one partition: per model version, the partition, each decision (every one of
    `decisions`, the rule table's, and any other the rows hold) and each value of each of `slices`. `joined` holds
    the partition's forecasts (FORECAST_COLUMNS) with `actual` (null: no label) and, per slice, `slice:<column>`
    (`sliced_forecasts`)."""
    joined = joined.sort("entity_id")
    rows: list[dict[str, Any]] = []
    for version in sorted(joined["model_version"].unique().to_list()):
        scored = joined.filter(pl.col("model_version") == version)
        labelled = scored.filter(pl.col("actual").is_not_null())
        arrays = [
            labelled[c].to_numpy().astype(np.float64) for c in ("actual", "forecast", "forecast_low", "forecast_high")
        ]
        common = {
            **key,
            "model_version": version,
            "scoring_run_id": ",".join(sorted(scored["run_id"].unique().to_list())),
            "interval_level": interval_level,
        }
        groupings = [
            (PARTITION, pl.lit(ALL, dtype=pl.String), [ALL]),
            (
                DECISION,
                pl.col("decision"),
                list(dict.fromkeys([*decisions, *sorted(scored["decision"].unique().to_list())])),
            ),
        ]
        groupings += [
            (f"{SLICE}{c}", pl.col(f"{SLICE}{c}"), sorted(scored[f"{SLICE}{c}"].unique().to_list())) for c in slices
        ]
        for section, item, items in groupings:
            index = {value: i for i, value in enumerate(items)}
            # with_columns, not select: a bare literal would select one row, not one per forecast.
            counted = scored.with_columns(item.alias("_item"))["_item"].value_counts(name="n")
            forecasts = dict(zip(counted["_item"].to_list(), counted["n"].to_list(), strict=True))
            codes = (
                labelled.with_columns(item.alias("_item"))["_item"]
                .replace_strict(index, return_dtype=pl.Int64)
                .to_numpy()
            )
            sums = _error_sums(codes, len(items), *arrays)
            for value, i in index.items():
                rows.append(
                    {
                        **common,
                        "section": section,
                        "item": value,
                        "rows": int(forecasts.get(value, 0)),
                        "labelled": int(sums["labelled"][i]),
                        **_measures(sums, i),
                    }
                )
    return rows


def error_estimates_against_realized(estimates: pl.DataFrame, errors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each error estimated before actuals (`model_health` section `estimated_error`, measures mae and rmse of one model
    version) beside the realized one of the same version (`outcome_errors` partition row): `outside` when the
    realized value falls outside the estimate's interval; `partition_flag` (the same on every row) when any does."""
    realized = next((r for r in errors if r["section"] == PARTITION and r["item"] == ALL), None)
    rows = []
    for row in estimates.filter(
        (pl.col("section") == ESTIMATED_ERROR) & pl.col("measure").is_in(ERROR_MEASURES)
    ).iter_rows(named=True):
        value = realized.get(row["measure"]) if realized is not None and row["item"] == ALL else None
        value = float("nan") if value is None else value
        known = not (
            math.isnan(value)
            or row["low"] is None
            or math.isnan(row["low"])
            or row["high"] is None
            or math.isnan(row["high"])
        )
        rows.append(
            {
                "measure": row["measure"],
                "item": row["item"],
                "estimate": row["value"],
                "low": row["low"],
                "high": row["high"],
                "realized": value,
                "realized_rows": realized["labelled"] if realized is not None and row["item"] == ALL else 0,
                "outside": (not row["low"] <= value <= row["high"]) if known else None,
            }
        )
    flagged = any(r["outside"] for r in rows if r["measure"] in ERROR_MEASURES and r["item"] == ALL)
    return [{**r, "partition_flag": flagged} for r in rows]
