"""The monitoring and outcome rows of one job over a range of partitions, read from the warehouse: what the
monitoring pages (tasks/reports/monitoring_page.py, forecast_monitoring_page.py, class_monitoring_page.py) and the
`score` command's realized-performance tables show."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tasks.catalog import (
    DECISION_MONITORING,
    FORECASTS,
    OUTCOME_CALIBRATION,
    OUTCOME_CLASS_METRICS,
    OUTCOME_DECISIONS,
    OUTCOME_ERRORS,
    OUTCOME_ESTIMATES,
    OUTCOME_METRICS,
    OUTCOME_PARTITIONS,
    PREDICTIONS,
    SHADOW_OUTCOMES,
    SLICE_MONITORING,
    Dataset,
)
from tasks.monitoring.champion_outcomes import compared_models
from tasks.monitoring.outcomes import SHADOW_RESAMPLES
from tasks.sinks.warehouse import Warehouse


@dataclass(frozen=True)
class MonitoringHistory:
    """The warehouse's monitoring and outcome rows of one job over a range of partitions."""

    job: str
    first_date: dt.date
    last_date: dt.date
    decision_counts: pl.DataFrame
    decision_monitoring: pl.DataFrame
    partitions: pl.DataFrame
    metrics: pl.DataFrame
    errors: pl.DataFrame
    """A forecast job's `outcome_errors` (a binary job's `metrics` instead)."""
    calibration: pl.DataFrame
    decisions: pl.DataFrame
    model_health: pl.DataFrame
    estimates: pl.DataFrame
    slices: pl.DataFrame
    shadow_outcomes: pl.DataFrame
    pooled_comparisons: list[dict[str, Any]]
    """Champion against challenger on every labelled row of the range, per (champion, challenger) version pair (`pooled_comparisons`)."""
    class_metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    """A multiclass job's `outcome_class_metrics` (a binary job's `metrics` instead)."""


def pooled_comparisons(
    rows: pl.DataFrame, *, level: float, bins: int, labelled: int | None = None
) -> list[dict[str, Any]]:
    """Champion against challenger on the labelled rows of many partitions at once, per (champion, challenger)
    version pair: one night rarely has the rows to tell two good models apart, a month often does. `labelled`:
    how many rows there were when `rows` is a sample of them."""
    out = []
    for (champion, challenger), pair in rows.group_by(["champion_version", "challenger_version"], maintain_order=True):
        compared = compared_models(
            pair["outcome"].to_numpy().astype(np.int64),
            pair["champion"].to_numpy(),
            pair["challenger"].to_numpy(),
            level=level,
            resamples=SHADOW_RESAMPLES,
            seed=0,
            ece_bins=bins,
        )
        out.append(
            {
                "champion_version": champion,
                "challenger_version": challenger,
                "partitions": pair["partition_date"].n_unique(),
                "first_date": pair["partition_date"].min(),
                "last_date": pair["partition_date"].max(),
                "rows": compared.rows,
                "events": compared.events,
                "measures": compared.rows_long(),
                "recommendation": compared.recommendation,
                "sample_of": labelled if labelled is not None and labelled > rows.height else None,
            }
        )
    return out


def monitoring_history(
    warehouse: Warehouse,
    job: str,
    *,
    first_date: dt.date,
    last_date: dt.date,
    level: float = 0.95,
    bins: int = 10,
    counted: Dataset = PREDICTIONS,
) -> MonitoringHistory:
    """The job's monitoring rows of the range; `level` and `bins` (the spec's `monitoring.outcome_interval_level`
    and `calibration_bins`) are those of the pooled champion/challenger comparison; the decisions are counted in
    `counted` (FORECASTS for a forecast job)."""

    def rows(dataset: Dataset) -> pl.DataFrame:
        return pl.from_arrow(
            warehouse.monitoring_rows(dataset.table, job=job, first_date=first_date, last_date=last_date)
        )

    shadow_table, labelled = warehouse.labelled_shadow_rows(job, first_date=first_date, last_date=last_date)
    shadowed = pl.from_arrow(shadow_table)
    return MonitoringHistory(
        job=job,
        first_date=first_date,
        last_date=last_date,
        decision_counts=pl.from_arrow(
            warehouse.prediction_counts(
                job, first_date=first_date, last_date=last_date, by=("partition_date", "decision"), dataset=counted
            )
        ),
        decision_monitoring=rows(DECISION_MONITORING),
        partitions=rows(OUTCOME_PARTITIONS),
        metrics=rows(OUTCOME_METRICS),
        errors=rows(OUTCOME_ERRORS),
        calibration=rows(OUTCOME_CALIBRATION),
        decisions=rows(OUTCOME_DECISIONS),
        model_health=pl.from_arrow(warehouse.model_health_rows(job, first_date, last_date)),
        estimates=rows(OUTCOME_ESTIMATES),
        slices=rows(SLICE_MONITORING),
        shadow_outcomes=rows(SHADOW_OUTCOMES),
        pooled_comparisons=pooled_comparisons(shadowed, level=level, bins=bins, labelled=labelled),
        class_metrics=rows(OUTCOME_CLASS_METRICS),
    )


UNMATCHED_REASONS = {
    "not scored": "labels of days the job never scored (a range reaching back into the model's training days has many)",
    "quarantined": "labels of entities a scored day read but kept out of scoring (a guard or a failed chunk)",
    "unknown entity": "labels of entities a scored day never read",
}
"""Why a label matches no scored entity, each reason with what it means to the reader."""


def unmatched_label_counts(history: MonitoringHistory) -> dict[str, int]:
    """Labels of the range that match no scored entity, per reason of `UNMATCHED_REASONS` (`outcome_partitions`):
    a day never scored counts its labels under `not scored`, except those of entities it quarantined."""
    counts = dict.fromkeys(UNMATCHED_REASONS, 0)
    for r in history.partitions.iter_rows(named=True):
        counts["not scored" if r["status"] == "not scored" else "unknown entity"] += int(r["labels_unknown_entity"])
        counts["quarantined"] += int(r["labels_quarantined"])
    return counts


@dataclass(frozen=True)
class ForecastHistory:
    """A forecast job's monitoring rows over a range: the shared ones (decisions counted in `forecasts`, labels per
    partition, realized errors, model health, estimates, flags) and the published forecasts' means."""

    history: MonitoringHistory
    means: pl.DataFrame
    """Per partition and model version: rows, mean forecast, interval bounds, width and expected error (`Warehouse.forecast_means`)."""


def forecast_monitoring_history(
    warehouse: Warehouse, job: str, *, first_date: dt.date, last_date: dt.date
) -> ForecastHistory:
    """The forecast job's monitoring rows of the range."""
    return ForecastHistory(
        history=monitoring_history(warehouse, job, first_date=first_date, last_date=last_date, counted=FORECASTS),
        means=pl.from_arrow(warehouse.forecast_means(job, first_date=first_date, last_date=last_date)),
    )


def pooled_decision_errors(errors: pl.DataFrame) -> pl.DataFrame:
    """Realized error per model version and decision over the whole range, each partition weighted by its labelled
    rows: MAE, bias and coverage are means over rows, RMSE the root of the rows' mean squared error."""
    decided = errors.filter((pl.col("section") == "decision") & (pl.col("labelled") > 0)) if errors.height else errors
    if decided.is_empty():
        return pl.DataFrame()
    n = pl.col("labelled").cast(pl.Float64)
    return (
        decided.group_by("model_version", "item", maintain_order=True)
        .agg(
            pl.col("labelled").sum(),
            ((pl.col("actual_mean") * n).sum() / n.sum()).alias("actual_mean"),
            ((pl.col("forecast_mean") * n).sum() / n.sum()).alias("forecast_mean"),
            ((pl.col("mae") * n).sum() / n.sum()).alias("mae"),
            ((pl.col("rmse") ** 2 * n).sum() / n.sum()).sqrt().alias("rmse"),
            ((pl.col("bias") * n).sum() / n.sum()).alias("bias"),
            ((pl.col("coverage") * n).sum() / n.sum()).alias("coverage"),
            ((pl.col("mean_width") * n).sum() / n.sum()).alias("mean_width"),
        )
        .sort("model_version", "item")
    )


def class_monitoring_rows(
    warehouse: Warehouse, job: str, *, first_date: dt.date, last_date: dt.date
) -> list[dict[str, Any]]:
    """One row per partition of the range with a succeeded run: its date, model version, rows and the run's
    `classification` headline (None for a run recorded before it had one)."""
    rows = []
    for run in warehouse.latest_partition_runs(job, first_date=first_date, last_date=last_date):
        if run["status"] != "succeeded":
            continue
        inference = (
            json.loads(run["inference"]) if isinstance(run.get("inference"), str) else (run.get("inference") or {})
        )
        decisions = (
            json.loads(run["decisions"]) if isinstance(run.get("decisions"), str) else (run.get("decisions") or {})
        )
        rows.append(
            {
                "partition_date": run["partition_date"],
                "model_version": run["model_version"],
                "rows": run["rows_scored"],
                "decisions": decisions,
                "classification": inference.get("classification"),
            }
        )
    return sorted(rows, key=lambda r: r["partition_date"])
