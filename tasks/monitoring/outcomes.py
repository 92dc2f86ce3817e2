"""Realized outcomes: labels joined to the predictions they belong to, and how those predictions held up.

A labels partition `date=D` holds the outcomes (1: the job's event happened, 0: it did not; or true/false, or the two
values `monitoring.labels.positive` and `negative` name, any third value refused) of entities scored in partition D:
Parquet files under `data/labels/<job>/date=D/` and, when the job spec names one (`monitoring.labels.table`), the rows
of a warehouse table with that `partition_date`. An entity labelled more than once keeps its latest observation (the higher
outcome on a tie); the extra rows are counted as `labels_duplicate`. Labels join the partition's
published predictions on entity id, so each labelled row keeps the model version that scored it.
Every label is stored with the status of its entity in the partition — `scored`, `quarantined`
(read, but not scored: a guard or a failed chunk kept it out) or `unknown` (never seen) — and
counted per status (`labels_matched`, `labels_quarantined`, `labels_unknown_entity`); labels
without an outcome are stored and counted too. No label is dropped.

Per partition and model version, on the labelled rows that have an outcome:
- the observed event rate with its Clopper–Pearson interval (`scipy.stats.binomtest(...)
  .proportion_ci`, level `monitoring.outcome_interval_level`) against the expected rate (the mean
  calibrated probability of the same rows);
- AUC by the Mann–Whitney formula (ties count half; NaN while only one class occurs);
- the Brier score, and the expected calibration error on `monitoring.calibration_bins`
  equal-width probability bins, Σ_b n_b/N · |mean probability_b − event rate_b| (the bins are
  stored, so calibration curves add up over partitions);
- precision and recall of each action decision, and of all action decisions together;
- PSI of the score (ten-point bands, as tasks/quality/drift.py) against the pooled scores of the job's
  partitions in the trailing `monitoring.window_days`;
- each performance the scoring run estimated before labels (`model_health`, tasks/monitoring/health.py)
  beside its realized value on the labelled rows (`outcome_estimates`): a realized value outside the
  estimate's interval is `outside`, and the partition is flagged when its pooled event rate or its
  AUC is (the model's relation to the world changed, not just its inputs);
- when a challenger shadowed the partition (`shadow_predictions`), its realized AUC, Brier and ECE
  beside the champion's on the same labelled rows, with the paired bootstrap interval of each
  difference and a plain-language recommendation (`shadow_outcomes`, tasks/monitoring/champion_outcomes.py).

A forecast job (target.kind regression or count) has a number per entity instead: its labels are read and
accounted for the same way, with the actual a finite number (a count job's a whole number >= 0) or null while
unknown, and anything else refused as a binary outcome other than 0 or 1 is; they are stored in
`outcome_actuals`, joined to the partition's `forecasts`, and measured as realized error per model version,
decision and slice value (`outcome_errors`, tasks/monitoring/forecast_outcomes.py), the error the scoring run
estimated beside it (`outcome_estimates`), and a challenger that shadowed the partition (`shadow_forecasts`)
compared with the champion on realized MAE, RMSE and interval coverage (`shadow_outcomes`,
`forecast_shadow_outcome_rows`). The other kind's tables are emptied for the partition.

A multiclass job (target.kind multiclass) has a class name per entity: its labels are accounted for the same way,
each a name of target.classes (whole numbers and booleans read as the text they name) or null while unknown, anything
else refused; they are stored in `outcome_class_labels`, joined to the partition's `classifications`, and measured per
model version, decision and slice value (`outcome_class_metrics`, `outcome_class_rates`, `outcome_class_calibration`,
tasks/monitoring/class_outcomes.py), with the performance estimated before labels beside the realized one
(`outcome_estimates`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.catalog import (
    OUTCOME_ACTUALS,
    OUTCOME_CALIBRATION,
    OUTCOME_CLASS_CALIBRATION,
    OUTCOME_CLASS_LABELS,
    OUTCOME_CLASS_METRICS,
    OUTCOME_CLASS_RATES,
    OUTCOME_DATASETS,
    OUTCOME_DECISIONS,
    OUTCOME_ERRORS,
    OUTCOME_ESTIMATES,
    OUTCOME_LABELS,
    OUTCOME_METRICS,
    OUTCOME_PARTITIONS,
    SHADOW_OUTCOMES,
    Dataset,
)
from tasks.errors import LabelError
from tasks.monitoring.champion_outcomes import ForecastRows, compared_forecasts, compared_models
from tasks.monitoring.class_outcomes import CLASSIFICATION_COLUMNS, class_estimates_against_realized, class_outcome_rows
from tasks.monitoring.forecast_outcomes import (
    FORECAST_COLUMNS,
    PARTITION,
    error_estimates_against_realized,
    outcome_error_rows,
    partition_slice_values,
    sliced_forecasts,
)
from tasks.monitoring.health import ALL, ANY_ACTION, ANY_ACTION_BEFORE, ESTIMATED, PARTITION_FLAG_MEASURES
from tasks.monitoring.measures import brier_score, exact_auc
from tasks.prediction.class_labels import predict_binary_label_events, predict_class_label_text
from tasks.quality.drift import SCORE_EDGES, SCORE_PSI_EDGES, Histogram, drift_bin_counts, drift_metrics
from tasks.sinks.warehouse import Warehouse

if TYPE_CHECKING:
    from tasks.jobspec import JobSpec, LabelSource
    from tasks.sources import RawPartition

PREDICTION_COLUMNS = ("run_id", "entity_id", "probability", "score", "decision", "rule_id", "model_version")
"""The only prediction columns the outcome metrics read."""
_LABEL_SCHEMA = {"entity_id": pl.String, "outcome": pl.Int16, "observed_date": pl.Date, "source": pl.String}
_ACTUAL_SCHEMA = {**_LABEL_SCHEMA, "outcome": pl.Float64}
"""A forecast job's labels: the same columns, the outcome a number (stored as `outcome_actuals.actual`)."""
_CLASS_LABEL_SCHEMA = {**_LABEL_SCHEMA, "outcome": pl.String}
"""A multiclass job's labels: the outcome a class name (stored in `outcome_class_labels`)."""


def _label_schema(kind: str) -> dict[str, pl.DataType]:
    return _LABEL_SCHEMA if kind == "binary" else _CLASS_LABEL_SCHEMA if kind == "multiclass" else _ACTUAL_SCHEMA


def _checked_classes(outcome: pl.Series, *, where: str, column: str, classes: Sequence[str]) -> pl.Series:
    """A class name of `classes` or null (no label yet); anything else is refused, as a binary job's outcome other than
    0 or 1 is: a label the job has no class for cannot be scored right or wrong."""
    text = predict_class_label_text(outcome)
    bad = text.filter(text.is_not_null() & ~text.is_in(list(classes)))
    if bad.len():
        raise LabelError(
            f"{where}: column {column!r} holds the class of a multiclass job and must name one of target.classes {list(classes)} "
            f"(or be null while unknown); found {bad.len()} other value(s), e.g. {bad.unique().sort().head(5).to_list()}"
        )
    return text


def _checked_binary(
    outcome: pl.Series, *, where: str, column: str, positive: str | None, negative: str | None
) -> pl.Series:
    """1 (the event), 0 or null (no label yet), from 1/0, booleans or the values `positive` and `negative` name
    (`predict_binary_label_events`); anything else is refused, never read as 0."""
    # A scheduled outcomes run has no flag to add: the spec is where the event is named.
    read = predict_binary_label_events(outcome, positive=positive, negative=negative, flag=False)
    if read.problem is not None:
        raise LabelError(f"{where}: outcome column {column!r} {read.problem}")
    return read.events.cast(pl.Int16)


def _checked_actuals(actual: pl.Series, *, where: str, column: str, kind: str) -> pl.Series:
    """A finite number or null (no actual yet) for a regression job, a whole number >= 0 or null for a count job;
    anything else is refused, as a binary job's outcome other than 0 or 1 is: a guessed actual would be scored as real."""
    if not actual.dtype.is_numeric():
        raise LabelError(
            f"{where}: column {column!r} holds the actual of a {kind} job and must be numeric, got type {actual.dtype}"
        )
    actual = actual.cast(pl.Float64)
    present = actual.drop_nulls()
    bad = present.filter(~present.is_finite())
    if bad.len():
        raise LabelError(
            f"{where}: column {column!r} holds the actual of a {kind} job and must be a finite number (or null while unknown); "
            f"found {bad.len()} other value(s), e.g. {bad.unique().sort().head(5).to_list()}"
        )
    if kind == "count":
        bad = present.filter((present < 0) | (present != present.floor()))
        if bad.len():
            raise LabelError(
                f"{where}: column {column!r} holds the actual of a count job and must be a whole number >= 0; found {bad.len()} "
                f"other value(s), e.g. {bad.unique().sort().head(5).to_list()}"
            )
    return actual


def _checked_labels(
    frame: pl.DataFrame,
    *,
    source: str,
    where: str,
    kind: str = "binary",
    column: str = "outcome",
    classes: Sequence[str] = (),
    positive: str | None = None,
    negative: str | None = None,
) -> pl.DataFrame:
    """(entity_id, outcome, observed_date, source): a binary job's outcome 1 (the event: 1, true or `positive`), 0 or
    null (`_checked_binary`), a forecast job's actual (`_checked_actuals`), a multiclass job's class name of `classes`
    (`_checked_classes`); `column` is the outcome column's name where it came from."""
    if kind == "binary":
        outcome = _checked_binary(frame["outcome"], where=where, column=column, positive=positive, negative=negative)
    elif kind == "multiclass":
        outcome = _checked_classes(frame["outcome"], where=where, column=column, classes=classes)
    else:
        outcome = _checked_actuals(frame["outcome"], where=where, column=column, kind=kind)
    try:
        observed = frame["observed_date"].cast(pl.Date)
    except pl.exceptions.PolarsError as error:
        raise LabelError(
            f"{where}: observed date column cannot be read as dates ({frame['observed_date'].dtype}): {error}"
        ) from None
    return pl.DataFrame(
        {
            "entity_id": frame["entity_id"].cast(pl.String),
            "outcome": outcome,
            "observed_date": observed,
            "source": pl.Series([source] * frame.height, dtype=pl.String),
        },
        schema=_label_schema(kind),
    )


def parquet_labels(
    folder: Path, source: LabelSource, *, kind: str = "binary", classes: Sequence[str] = ()
) -> pl.DataFrame:
    """The labels of one partition folder (`date=D`), with the columns the job spec names; empty without files.
    `kind` is the job's target kind: a forecast job's outcome is a number (`_checked_actuals`), a multiclass job's
    a name of `classes` (`_checked_classes`)."""
    columns = {
        source.entity_column: "entity_id",
        source.outcome_column: "outcome",
        source.observed_date_column: "observed_date",
    }
    frames = []
    for path in sorted(folder.glob("*.parquet")):
        present = pq.read_schema(path).names
        missing = [c for c in columns if c not in present]
        if missing:
            raise LabelError(
                f"labels file {path} lacks column(s) {missing} named in the job spec's monitoring.labels; it has {present}"
            )
        frame = pl.read_parquet(path, columns=list(columns), hive_partitioning=False).rename(columns)
        frames.append(
            _checked_labels(
                frame,
                source="parquet",
                where=f"labels file {path}",
                kind=kind,
                column=source.outcome_column,
                classes=classes,
                positive=source.positive,
                negative=source.negative,
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema=_label_schema(kind))


def table_labels(
    table: pa.Table,
    *,
    name: str,
    kind: str = "binary",
    column: str = "outcome",
    classes: Sequence[str] = (),
    positive: str | None = None,
    negative: str | None = None,
) -> pl.DataFrame:
    """Labels read from the warehouse table `name` (columns entity_id, outcome, observed_date; `column`: the
    outcome's name in that table; `positive`/`negative`: the spec's monitoring.labels values of a binary job)."""
    return _checked_labels(
        pl.from_arrow(table),
        source=f"table {name}",
        where=f"labels table {name!r}",
        kind=kind,
        column=column,
        classes=classes,
        positive=positive,
        negative=negative,
    )


def deduplicated_labels(labels: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """One label per entity — the latest observation, the higher outcome on a tie — and how many rows went."""
    ordered = labels.sort(
        ["entity_id", "observed_date", "outcome", "source"], descending=[False, True, True, False], nulls_last=True
    )
    unique = ordered.unique(subset="entity_id", keep="first", maintain_order=True)
    return unique, labels.height - unique.height


def realized_performance(labelled: pl.DataFrame, *, actions: Sequence[str]) -> dict[tuple[str, str], tuple[float, int]]:
    """(measure, item) → (realized value, rows it was measured on), for every estimated measure, on
    `labelled` rows (probability, decision, rule_id, outcome) of one model version."""
    outcome = labelled["outcome"].cast(pl.Float64).to_numpy()
    events = float(outcome.sum())
    nan = float("nan")

    def rate(mask: np.ndarray) -> tuple[float, int]:
        count = int(mask.sum())
        return (float(outcome[mask].sum()) / count if count else nan), count

    realized: dict[tuple[str, str], tuple[float, int]] = {("event_rate", ALL): rate(np.ones(outcome.size, dtype=bool))}
    decision = labelled["decision"].to_numpy()
    rule = labelled["rule_id"].to_numpy()
    for value in np.unique(decision):
        realized[("event_rate_by_decision", str(value))] = rate(decision == value)
    for value in np.unique(rule):
        realized[("event_rate_by_rule", str(value))] = rate(rule == value)
    for item, chosen in [*((d, [d]) for d in actions), (ANY_ACTION, list(actions))]:
        mask = np.isin(decision, chosen)
        realized[("precision", item)] = rate(mask)
        realized[("recall", item)] = (float(outcome[mask].sum()) / events if events else nan, int(mask.sum()))
    for measure in ("precision", "recall"):
        realized[(measure, ANY_ACTION_BEFORE)] = realized[(measure, ANY_ACTION)]
    realized[("auc", ALL)] = (exact_auc(outcome, labelled["probability"].to_numpy()), outcome.size)
    return realized


def estimates_against_realized(
    estimates: pl.DataFrame, labelled: pl.DataFrame, *, actions: Sequence[str]
) -> list[dict[str, Any]]:
    """Each estimated measure of one model version beside its realized value on the labelled rows:
    `outside` when the realized value falls outside the estimate's interval; `partition_flag` (the
    same on every row) when the pooled event rate or the AUC does (PARTITION_FLAG_MEASURES)."""
    realized = realized_performance(labelled, actions=actions)
    rows = []
    for row in estimates.iter_rows(named=True):
        value, count = realized.get((row["measure"], row["item"]), (float("nan"), 0))
        known = not (math.isnan(value) or row["low"] is None or math.isnan(row["low"]))
        rows.append(
            {
                "measure": row["measure"],
                "item": row["item"],
                "estimate": row["value"],
                "low": row["low"],
                "high": row["high"],
                "realized": value,
                "realized_rows": count,
                "outside": (not row["low"] <= value <= row["high"]) if known else None,
            }
        )
    flagged = any(r["outside"] for r in rows if (r["measure"], r["item"]) in PARTITION_FLAG_MEASURES)
    return [{**r, "partition_flag": flagged} for r in rows]


def calibration_bins(outcome: np.ndarray, probability: np.ndarray, bins: int) -> pl.DataFrame:
    """Rows, events and probability sum per equal-width probability bin (every bin, empty ones too)."""
    index = np.minimum((probability * bins).astype(np.int64), bins - 1)
    return pl.DataFrame(
        {
            "bin": np.arange(bins, dtype=np.int64),
            "bin_low": np.arange(bins) / bins,
            "bin_high": np.arange(1, bins + 1) / bins,
            "rows": np.bincount(index, minlength=bins).astype(np.int64),
            "events": np.bincount(index, weights=outcome, minlength=bins).round().astype(np.int64),
            "probability_sum": np.bincount(index, weights=probability, minlength=bins),
        }
    )


def expected_calibration_error(bins: pl.DataFrame) -> float:
    """Σ n_b/N · |mean probability_b − event rate_b| over the non-empty bins; NaN without rows."""
    filled = bins.filter(pl.col("rows") > 0)
    total = filled["rows"].sum()
    if not total:
        return float("nan")
    gap = (filled["probability_sum"] - filled["events"]).abs() / total
    return float(gap.sum())


def event_rate_interval(events: int, rows: int, level: float) -> tuple[float, float]:
    """Clopper–Pearson (exact) interval of an event rate; NaNs without rows."""
    if rows == 0:
        return float("nan"), float("nan")
    from scipy.stats import binomtest

    ci = binomtest(events, rows).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def score_histogram(scores: np.ndarray, counts: np.ndarray | None = None) -> Histogram:
    """Integer scores on the drift module's score bins; `counts` weighs each score (from grouped rows)."""
    if counts is None:
        binned, _ = drift_bin_counts(scores, SCORE_EDGES)
    else:
        index = np.searchsorted(SCORE_EDGES, np.asarray(scores, dtype=np.float64), side="right")
        binned = np.bincount(index, weights=counts, minlength=len(SCORE_EDGES) + 1).astype(np.int64)
    return Histogram(edges=SCORE_EDGES, counts=binned, psi_edges=SCORE_PSI_EDGES)


@dataclass(frozen=True)
class PartitionOutcomes:
    """The outcome tables of one partition, each in its warehouse schema (every table of OUTCOME_DATASETS:
    those of the other target kind empty, so a partition never keeps another kind's rows)."""

    tables: dict[str, pa.Table]
    notes: tuple[str, ...] = ()
    """What the tables could not hold, in a sentence each (a raw partition gone, so no slice rows)."""

    def partition_row(self) -> dict[str, Any] | None:
        rows = self.tables[OUTCOME_PARTITIONS.table].to_pylist()
        return rows[0] if rows else None

    def metric_rows(self) -> list[dict[str, Any]]:
        return self.tables[OUTCOME_METRICS.table].to_pylist()

    def model_versions(self) -> list[str]:
        """The model versions measured: a binary job's `outcome_metrics`, a forecast job's `outcome_errors`, a multiclass
        job's `outcome_class_metrics`."""
        versions = [
            *self.tables[OUTCOME_METRICS.table].column("model_version").to_pylist(),
            *self.tables[OUTCOME_ERRORS.table].column("model_version").to_pylist(),
            *self.tables[OUTCOME_CLASS_METRICS.table].column("model_version").to_pylist(),
        ]
        return sorted(set(versions))


@dataclass(frozen=True)
class AccountedLabels:
    """A partition's labels, one per entity, each with the status of its entity in the partition."""

    stored: pl.DataFrame
    """(entity_id, outcome, observed_date, source, entity_status), in entity order."""
    duplicates: int
    """Label rows dropped because their entity had a later (or higher) one."""

    def partition_rows(self, key: dict[str, Any], *, scored: int, labelled: int) -> list[dict[str, Any]]:
        """The `outcome_partitions` row of a partition with `scored` predictions, `labelled` of them with an outcome."""
        if not (scored or self.stored.height):
            return []
        per_status = dict(self.stored.group_by("entity_status").len().iter_rows())
        return [
            {
                **key,
                "status": "not scored" if not scored else ("labelled" if labelled else "awaiting labels"),
                "predictions": scored,
                "predictions_labelled": labelled,
                "labels": self.stored.height,
                "labels_matched": per_status.get("scored", 0),
                "labels_quarantined": per_status.get("quarantined", 0),
                "labels_unknown_entity": per_status.get("unknown", 0),
                "labels_duplicate": self.duplicates,
                "labels_without_outcome": int(self.stored["outcome"].null_count()),
            }
        ]


def accounted_labels(labels: pl.DataFrame, scored: pl.Series, quarantined: pl.DataFrame | None) -> AccountedLabels:
    """`labels` deduplicated, each with its entity's status: `scored` (in the `scored` entity ids), `quarantined`
    (in `quarantined`: read, but not scored) or `unknown` (never seen)."""
    unique, duplicates = deduplicated_labels(labels)
    known = pl.concat(
        [
            scored.to_frame("entity_id").unique().with_columns(pl.lit("scored").alias("entity_status")),
            (quarantined if quarantined is not None else pl.DataFrame(schema={"entity_id": pl.String}))
            .select(pl.col("entity_id").cast(pl.String))
            .unique()
            .with_columns(pl.lit("quarantined").alias("entity_status")),
        ]
    ).unique(subset="entity_id", keep="first", maintain_order=True)
    stored = (
        unique.join(known, on="entity_id", how="left")
        .with_columns(pl.col("entity_status").fill_null("unknown"))
        .sort("entity_id")
    )
    return AccountedLabels(stored=stored, duplicates=duplicates)


def _table(dataset: Dataset, rows: list[dict[str, Any]] | pl.DataFrame) -> pa.Table:
    schema = dataset.schema
    if isinstance(rows, pl.DataFrame):
        return rows.select(schema.names).to_arrow().cast(schema)
    return pa.Table.from_pylist(rows, schema=schema)


def _all_outcome_tables(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """`tables`, and every other outcome table empty."""
    return {d.table: tables.get(d.table, d.schema.empty_table()) for d in OUTCOME_DATASETS}


def partition_outcome_tables(
    predictions: pl.DataFrame,
    labels: pl.DataFrame,
    baseline_scores: pa.Table,
    spec: JobSpec,
    *,
    partition_date: dt.date,
    quarantined: pl.DataFrame | None = None,
    estimates: pl.DataFrame | None = None,
    shadow: pl.DataFrame | None = None,
) -> PartitionOutcomes:
    """Join the partition's labels to its predictions and compute every outcome table of it.

    `labels` may hold several rows per entity (they are deduplicated here); `baseline_scores`
    holds (score, rows) of the trailing window's predictions; `quarantined` the entity ids the
    partition read but did not score; `estimates` the partition's `model_health` rows; `shadow` the
    challenger's (entity_id, probability, model_version) when one shadowed the partition.
    """
    job, config = spec.name, spec.monitoring
    predictions = predictions.sort("entity_id")
    accounted = accounted_labels(labels, predictions["entity_id"], quarantined)
    joined = predictions.join(
        accounted.stored.select("entity_id", "outcome"), on="entity_id", how="left", maintain_order="left"
    )
    labelled = joined.filter(pl.col("outcome").is_not_null())

    key = {"job": job, "partition_date": partition_date}
    partition_rows = accounted.partition_rows(key, scored=predictions.height, labelled=labelled.height)

    baseline = score_histogram(
        baseline_scores.column("score").to_numpy(zero_copy_only=False),
        baseline_scores.column("rows").to_numpy(zero_copy_only=False),
    )
    actions = spec.action_decisions
    metric_rows, calibration_frames, decision_rows, estimate_rows = [], [], [], []
    estimated = (
        estimates.filter(pl.col("section") == ESTIMATED)
        if estimates is not None and estimates.height
        else pl.DataFrame(schema={"model_version": pl.String})
    )
    for version in sorted(predictions["model_version"].unique().to_list()):
        scored = predictions.filter(pl.col("model_version") == version)
        rows = labelled.filter(pl.col("model_version") == version)
        outcome = rows["outcome"].to_numpy().astype(np.float64)
        probability = rows["probability"].to_numpy()
        events = int(outcome.sum())
        low, high = event_rate_interval(events, rows.height, config.outcome_interval_level)
        expected = float(probability.mean()) if rows.height else float("nan")
        bins = calibration_bins(outcome, probability, config.calibration_bins)
        current = score_histogram(scored["score"].to_numpy())
        metric_rows.append(
            {
                **key,
                "model_version": version,
                "scoring_run_id": ",".join(sorted(scored["run_id"].unique().to_list())),
                "rows": scored.height,
                "labelled": rows.height,
                "events": events,
                "observed_rate": events / rows.height if rows.height else float("nan"),
                "observed_low": low,
                "observed_high": high,
                "interval_level": config.outcome_interval_level,
                "expected_rate": expected,
                "expected_events": float(probability.sum()),
                "expected_within_interval": bool(low <= expected <= high) if rows.height else None,
                "auc": exact_auc(outcome, probability),
                "brier": brier_score(outcome, probability),
                "ece": expected_calibration_error(bins),
                "psi_score": drift_metrics(baseline, current)["psi"] if baseline.total else float("nan"),
                "psi_baseline_rows": baseline.total,
            }
        )
        calibration_frames.append(bins.with_columns(pl.lit(version).alias("model_version")))
        of_version = estimated.filter(pl.col("model_version") == version)
        if of_version.height and rows.height:
            estimate_rows += [
                {**key, "model_version": version, **r}
                for r in estimates_against_realized(of_version, rows, actions=actions)
            ]
        for decision in [*actions, ANY_ACTION]:
            chosen = [decision] if decision != ANY_ACTION else actions
            hit = rows.filter(pl.col("decision").is_in(chosen))
            hit_events = int(hit["outcome"].sum()) if hit.height else 0
            decision_rows.append(
                {
                    **key,
                    "model_version": version,
                    "decision": decision,
                    "rows": hit.height,
                    "events": hit_events,
                    "precision": hit_events / hit.height if hit.height else float("nan"),
                    "recall": hit_events / events if events else float("nan"),
                }
            )

    calibration = (
        pl.concat(calibration_frames).with_columns(
            pl.lit(job).alias("job"), pl.lit(partition_date).alias("partition_date")
        )
        if calibration_frames
        else []
    )
    return PartitionOutcomes(
        tables=_all_outcome_tables(
            {
                OUTCOME_LABELS.table: _table(
                    OUTCOME_LABELS,
                    accounted.stored.with_columns(
                        pl.lit(job).alias("job"), pl.lit(partition_date).alias("partition_date")
                    ),
                ),
                OUTCOME_PARTITIONS.table: _table(OUTCOME_PARTITIONS, partition_rows),
                OUTCOME_METRICS.table: _table(OUTCOME_METRICS, metric_rows),
                OUTCOME_CALIBRATION.table: _table(OUTCOME_CALIBRATION, calibration),
                OUTCOME_DECISIONS.table: _table(OUTCOME_DECISIONS, decision_rows),
                OUTCOME_ESTIMATES.table: _table(OUTCOME_ESTIMATES, estimate_rows),
                SHADOW_OUTCOMES.table: _table(
                    SHADOW_OUTCOMES,
                    shadow_outcome_rows(
                        labelled, shadow, key=key, level=config.outcome_interval_level, bins=config.calibration_bins
                    ),
                ),
            }
        )
    )


def forecast_outcome_tables(
    forecasts: pl.DataFrame,
    actuals: pl.DataFrame,
    spec: JobSpec,
    *,
    partition_date: dt.date,
    quarantined: pl.DataFrame | None = None,
    estimates: pl.DataFrame | None = None,
    slice_values: pl.DataFrame | None = None,
    shadow: pl.DataFrame | None = None,
) -> PartitionOutcomes:
    """A forecast job's outcome tables of one partition: its actuals accounted for as a binary job's labels are
    (`outcome_actuals`, `outcome_partitions`), its realized error per model version, decision and slice value
    (`outcome_errors`, tasks/monitoring/forecast_outcomes.py), the error estimated before actuals beside the
    realized one (`outcome_estimates`), and the challenger's realized error beside the champion's (`shadow_outcomes`).

    `forecasts` holds the partition's FORECAST_COLUMNS, `actuals` its labels (several rows per entity allowed)
    with the number in `outcome`, `estimates` its `model_health` rows, `slice_values` the raw partition's
    (entity_id, slice columns) (`partition_slice_values`; None: no slice rows), `shadow` the challenger's
    (entity_id, forecast, forecast_low, forecast_high, model_version) when one shadowed the partition.
    """
    job, config = spec.name, spec.monitoring
    forecasts = forecasts.sort("entity_id")
    accounted = accounted_labels(actuals, forecasts["entity_id"], quarantined)
    joined = forecasts.join(
        accounted.stored.select("entity_id", pl.col("outcome").alias("actual")),
        on="entity_id",
        how="left",
        maintain_order="left",
    )
    slices = list(config.slices) if slice_values is not None else []
    if slices:
        joined = sliced_forecasts(joined, slice_values, slices=slices, max_values=config.slice_max_values)
    key = {"job": job, "partition_date": partition_date}
    labelled = int(joined["actual"].is_not_null().sum())
    errors = outcome_error_rows(
        joined,
        decisions=list(dict.fromkeys(r.decision for r in spec.prediction.rules)),
        slices=slices,
        interval_level=spec.prediction.interval_level,
        key=key,
    )
    estimate_rows = []
    if estimates is not None and estimates.height:
        for version in sorted({r["model_version"] for r in errors}):
            own = [r for r in errors if r["model_version"] == version]
            realized = next(r for r in own if r["section"] == PARTITION and r["item"] == ALL)
            if realized["labelled"]:
                estimate_rows += [
                    {**key, "model_version": version, **r}
                    for r in error_estimates_against_realized(estimates.filter(pl.col("model_version") == version), own)
                ]
    return PartitionOutcomes(
        tables=_all_outcome_tables(
            {
                OUTCOME_ACTUALS.table: _table(
                    OUTCOME_ACTUALS,
                    accounted.stored.rename({"outcome": "actual"}).with_columns(
                        pl.lit(job).alias("job"), pl.lit(partition_date).alias("partition_date")
                    ),
                ),
                OUTCOME_PARTITIONS.table: _table(
                    OUTCOME_PARTITIONS, accounted.partition_rows(key, scored=forecasts.height, labelled=labelled)
                ),
                OUTCOME_ERRORS.table: _table(OUTCOME_ERRORS, errors),
                OUTCOME_ESTIMATES.table: _table(OUTCOME_ESTIMATES, estimate_rows),
                SHADOW_OUTCOMES.table: _table(
                    SHADOW_OUTCOMES,
                    forecast_shadow_outcome_rows(
                        joined.filter(pl.col("actual").is_not_null()),
                        shadow,
                        key=key,
                        level=config.outcome_interval_level,
                        interval_level=spec.prediction.interval_level,
                    ),
                ),
            }
        )
    )


def class_outcome_tables(
    classifications: pl.DataFrame,
    labels: pl.DataFrame,
    spec: JobSpec,
    *,
    partition_date: dt.date,
    quarantined: pl.DataFrame | None = None,
    estimates: pl.DataFrame | None = None,
    slice_values: pl.DataFrame | None = None,
) -> PartitionOutcomes:
    """A multiclass job's outcome tables of one partition: its labels accounted for as a binary job's are
    (`outcome_class_labels`, `outcome_partitions`), its realized performance per model version, decision and slice
    value (`outcome_class_metrics`, `outcome_class_rates`, `outcome_class_calibration`, tasks/monitoring/class_outcomes.py)
    and the performance estimated before labels beside the realized one (`outcome_estimates`).

    `classifications` holds the partition's CLASSIFICATION_COLUMNS, `labels` its labels (several rows per entity allowed)
    with the class name in `outcome`, `estimates` its `model_health` rows, `slice_values` the raw partition's
    (entity_id, slice columns) (`partition_slice_values`; None: no slice rows).
    """
    job, config = spec.name, spec.monitoring
    classifications = classifications.sort("entity_id")
    accounted = accounted_labels(labels, classifications["entity_id"], quarantined)
    joined = classifications.join(
        accounted.stored.select("entity_id", "outcome"), on="entity_id", how="left", maintain_order="left"
    )
    slices = list(config.slices) if slice_values is not None else []
    if slices:
        joined = sliced_forecasts(joined, slice_values, slices=slices, max_values=config.slice_max_values)
    key = {"job": job, "partition_date": partition_date}
    labelled = int(joined["outcome"].is_not_null().sum())
    metrics, rates, calibration = class_outcome_rows(
        joined,
        classes=spec.target.classes,
        decisions=list(dict.fromkeys(r.decision for r in spec.prediction.rules)),
        slices=slices,
        bins=config.calibration_bins,
        key=key,
    )
    estimate_rows = []
    if estimates is not None and estimates.height:
        for version in sorted({r["model_version"] for r in metrics}):
            estimate_rows += [
                {**key, "model_version": version, **r}
                for r in class_estimates_against_realized(
                    estimates.filter(pl.col("model_version") == version),
                    [r for r in metrics if r["model_version"] == version],
                    [r for r in rates if r["model_version"] == version],
                )
            ]
    return PartitionOutcomes(
        tables=_all_outcome_tables(
            {
                OUTCOME_CLASS_LABELS.table: _table(
                    OUTCOME_CLASS_LABELS,
                    accounted.stored.with_columns(
                        pl.lit(job).alias("job"), pl.lit(partition_date).alias("partition_date")
                    ),
                ),
                OUTCOME_PARTITIONS.table: _table(
                    OUTCOME_PARTITIONS, accounted.partition_rows(key, scored=classifications.height, labelled=labelled)
                ),
                OUTCOME_CLASS_METRICS.table: _table(OUTCOME_CLASS_METRICS, metrics),
                OUTCOME_CLASS_RATES.table: _table(OUTCOME_CLASS_RATES, rates),
                OUTCOME_CLASS_CALIBRATION.table: _table(OUTCOME_CLASS_CALIBRATION, calibration),
                OUTCOME_ESTIMATES.table: _table(OUTCOME_ESTIMATES, estimate_rows),
            }
        )
    )


SHADOW_RESAMPLES = 400
"""Paired bootstrap resamples of the champion/challenger differences; seeded, so an outcomes run
recomputed from the same rows stores the same intervals."""


def shadow_outcome_rows(
    labelled: pl.DataFrame, shadow: pl.DataFrame | None, *, key: dict[str, Any], level: float, bins: int
) -> list[dict[str, Any]]:
    """Champion against challenger on the labelled rows both scored: one row per measure (AUC, Brier, ECE)."""
    if shadow is None or not shadow.height or not labelled.height:
        return []
    # In entity order: the bootstrap draws by position, so the same rows give the same intervals however they were read.
    both = labelled.join(
        shadow.select(
            "entity_id",
            pl.col("probability").alias("challenger_probability"),
            pl.col("model_version").alias("challenger_version"),
        ),
        on="entity_id",
        how="inner",
    ).sort("entity_id")
    if not both.height:
        return []
    compared = compared_models(
        both["outcome"].to_numpy().astype(np.int64),
        both["probability"].to_numpy(),
        both["challenger_probability"].to_numpy(),
        level=level,
        resamples=SHADOW_RESAMPLES,
        seed=0,
        ece_bins=bins,
    )
    versions = {
        "champion_version": ",".join(sorted(both["model_version"].unique().to_list())),
        "challenger_version": ",".join(sorted(both["challenger_version"].unique().to_list())),
    }
    return [
        {
            **key,
            **versions,
            "rows": compared.rows,
            "events": compared.events,
            **row,
            "recommendation": compared.recommendation,
        }
        for row in compared.rows_long()
    ]


def forecast_shadow_outcome_rows(
    labelled: pl.DataFrame, shadow: pl.DataFrame | None, *, key: dict[str, Any], level: float, interval_level: float
) -> list[dict[str, Any]]:
    """A forecast job's champion against its challenger on the labelled rows both forecast: one row per measure
    (MAE, RMSE, interval coverage and its distance to the level; tasks/monitoring/champion_outcomes.py
    compared_forecasts). `labelled` are the champion's forecasts with their `actual`, `shadow` the challenger's."""
    if shadow is None or not shadow.height or not labelled.height:
        return []
    challenger = shadow.select(
        "entity_id",
        pl.col("forecast").alias("challenger_forecast"),
        pl.col("forecast_low").alias("challenger_low"),
        pl.col("forecast_high").alias("challenger_high"),
        pl.col("model_version").alias("challenger_version"),
    )
    # In entity order: the bootstrap draws by position, so the same rows give the same intervals however they were read.
    both = labelled.join(challenger, on="entity_id", how="inner").sort("entity_id")
    if not both.height:
        return []

    def side(*columns: str) -> ForecastRows:
        return ForecastRows(*(both[c].to_numpy() for c in columns))

    compared = compared_forecasts(
        both["actual"].to_numpy(),
        side("forecast", "forecast_low", "forecast_high"),
        side("challenger_forecast", "challenger_low", "challenger_high"),
        interval_level=interval_level,
        level=level,
        resamples=SHADOW_RESAMPLES,
        seed=0,
    )
    versions = {
        "champion_version": ",".join(sorted(both["model_version"].unique().to_list())),
        "challenger_version": ",".join(sorted(both["challenger_version"].unique().to_list())),
    }
    return [
        {**key, **versions, "rows": compared.rows, "events": None, **row, "recommendation": compared.recommendation}
        for row in compared.rows_long()
    ]


def partition_labels(warehouse: Warehouse, spec: JobSpec, labels_dir: Path, partition_date: dt.date) -> pl.DataFrame:
    """Every label of the partition: the Parquet folder's, then the warehouse table's if the spec names one
    (a forecast job's outcome a number: `_checked_actuals`)."""
    source, kind, classes = spec.monitoring.labels, spec.target.kind, spec.target.classes
    frames = [parquet_labels(labels_dir, source, kind=kind, classes=classes)]
    if source.table:
        rows = warehouse.source_labels(
            source.table,
            job=spec.name,
            partition_date=partition_date,
            entity_column=source.entity_column,
            outcome_column=source.outcome_column,
            observed_date_column=source.observed_date_column,
        )
        frames.append(
            table_labels(
                rows,
                name=source.table,
                kind=kind,
                column=source.outcome_column,
                classes=classes,
                positive=source.positive,
                negative=source.negative,
            )
        )
    return pl.concat(frames)


def ingested_outcomes(
    warehouse: Warehouse, spec: JobSpec, *, labels_dir: Path, partition_date: dt.date, raw: RawPartition | None = None
) -> PartitionOutcomes:
    """Read the partition's labels and predictions (a forecast job's forecasts, a multiclass job's classifications), compute
    its outcome tables and store them. `raw` is where a forecast or multiclass job's slice values are read from (None: no
    slice rows).

    The tables of (job, partition) are replaced in one transaction, and nothing in them depends on
    when or by which run they were computed: ingesting the same labels again leaves them identical.
    """
    labels = partition_labels(warehouse, spec, labels_dir, partition_date)
    if spec.target.classifies:
        outcomes = _class_outcomes(warehouse, spec, labels, partition_date=partition_date, raw=raw)
        warehouse.replace_monitoring_partition(job=spec.name, partition_date=partition_date, tables=outcomes.tables)
        return outcomes
    if spec.target.forecasts:
        outcomes = _forecast_outcomes(warehouse, spec, labels, partition_date=partition_date, raw=raw)
        warehouse.replace_monitoring_partition(job=spec.name, partition_date=partition_date, tables=outcomes.tables)
        return outcomes
    predictions = pl.from_arrow(warehouse.partition_predictions(spec.name, partition_date, PREDICTION_COLUMNS))
    window = spec.monitoring.window_days
    baseline_scores = warehouse.prediction_counts(
        spec.name,
        first_date=partition_date - dt.timedelta(days=window),
        last_date=partition_date - dt.timedelta(days=1),
        by=("score",),
    )
    quarantined = pl.from_arrow(warehouse.quarantined_entities(spec.name, partition_date))
    estimates = pl.from_arrow(warehouse.model_health_rows(spec.name, partition_date))
    shadow = pl.from_arrow(warehouse.partition_shadow_predictions(spec.name, partition_date))
    outcomes = partition_outcome_tables(
        predictions,
        labels,
        baseline_scores,
        spec,
        partition_date=partition_date,
        quarantined=quarantined,
        estimates=estimates,
        shadow=shadow,
    )
    warehouse.replace_monitoring_partition(job=spec.name, partition_date=partition_date, tables=outcomes.tables)
    return outcomes


def _slice_values(
    spec: JobSpec, raw: RawPartition | None, *, scored: int, table: str
) -> tuple[pl.DataFrame | None, list[str]]:
    """The slice columns' values of the partition's scored entities, re-read from its raw rows, and a note when they are gone."""
    if not spec.monitoring.slices or not scored or raw is None:
        return None, []
    values = partition_slice_values(raw, entity_column=spec.entity_column, slices=spec.monitoring.slices)
    return values, [] if values is not None else [
        f"the raw partition {raw} is gone, so {table} has no slice rows for it"
    ]


def _forecast_outcomes(
    warehouse: Warehouse, spec: JobSpec, actuals: pl.DataFrame, *, partition_date: dt.date, raw: RawPartition | None
) -> PartitionOutcomes:
    forecasts = pl.from_arrow(warehouse.partition_forecasts(spec.name, partition_date, FORECAST_COLUMNS))
    values, notes = _slice_values(spec, raw, scored=forecasts.height, table="outcome_errors")
    outcomes = forecast_outcome_tables(
        forecasts,
        actuals,
        spec,
        partition_date=partition_date,
        quarantined=pl.from_arrow(warehouse.quarantined_entities(spec.name, partition_date)),
        estimates=pl.from_arrow(warehouse.model_health_rows(spec.name, partition_date)),
        slice_values=values,
        shadow=pl.from_arrow(warehouse.partition_shadow_forecasts(spec.name, partition_date)),
    )
    return PartitionOutcomes(tables=outcomes.tables, notes=tuple(notes))


def _class_outcomes(
    warehouse: Warehouse, spec: JobSpec, labels: pl.DataFrame, *, partition_date: dt.date, raw: RawPartition | None
) -> PartitionOutcomes:
    classifications = pl.from_arrow(
        warehouse.partition_classifications(spec.name, partition_date, CLASSIFICATION_COLUMNS)
    )
    values, notes = _slice_values(spec, raw, scored=classifications.height, table="outcome_class_metrics")
    outcomes = class_outcome_tables(
        classifications,
        labels,
        spec,
        partition_date=partition_date,
        quarantined=pl.from_arrow(warehouse.quarantined_entities(spec.name, partition_date)),
        estimates=pl.from_arrow(warehouse.model_health_rows(spec.name, partition_date)),
        slice_values=values,
    )
    return PartitionOutcomes(tables=outcomes.tables, notes=tuple(notes))


def outcome_window(
    spec: JobSpec, *, start_date: dt.date | None, end_date: dt.date | None, yesterday: dt.date
) -> tuple[dt.date, dt.date]:
    """The partitions an outcomes run covers: the given range, or the job's `lookback_days` ending yesterday."""
    last = end_date or yesterday
    first = start_date or last - dt.timedelta(days=spec.monitoring.lookback_days - 1)
    return first, last
