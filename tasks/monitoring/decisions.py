"""Decision monitoring of a published partition, before any label exists: what was decided, and did it move?

Measures, one row per (measure, item) in long format; `item` is a decision, a rule id, or `all`:

- `rows`: prediction rows of the partition;
- `decision_share` / `rule_share`: share of rows per decision and per threshold rule — every
  decision and rule of the job's rule table gets a row, so a rule that stops firing shows as 0;
- `straddling_share`: share of rows whose interval contains a probability cut-off of the rules
  (`low < cut <= high`, as the rule table decides);
- `score_mean`, `score_p10`, `score_p50`, `score_p90`: the score distribution (linear quantiles);
- `expected_event_rate` (mean calibrated probability) and `expected_events` (their sum).

A multiclass job (read from `classifications`) has no score either: its straddling rows are those whose
predicted class's probability interval contains a probability cut-off of the rules; it has
`class_share` per class of target.classes (the predicted class mix) and `expected_accuracy` (the mean
calibrated probability of the predicted class), both kept for reading with no flag, instead of the
score's measures and the expected events.

A forecast job (read from `forecasts`) has no score: its straddling rows are those whose interval
contains a forecast cut-off of the rules, and instead of the score and the expected events it has
`forecast_mean` (the mean forecast, flagged on a tolerance relative to the window's mean, so one
setting fits units and euros alike) and `forecast_total` (their sum: the demand the partition expects).

Each measure is compared with its mean over the trailing window: the job's partitions in
`[date - window_days, date)` that already have monitoring rows. `delta = value - baseline`; a
measure kind with a tolerance in the job spec (`monitoring.tolerance`) is flagged `shift` when
`|delta|` exceeds it, else `ok`, or `no_baseline` while the window holds no partition. Counts and
quantiles are kept for reading but carry no flag.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa

from tasks.catalog import (
    CLASSIFICATION_GROUP_SCHEMA,
    DECISION_MONITORING,
    FORECAST_GROUP_SCHEMA,
    PREDICTION_GROUP_SCHEMA,
    SLICE_MONITORING,
)
from tasks.monitoring.slices import monitored_slices
from tasks.prediction.decisions import predict_probability_cutoffs, predict_straddling
from tasks.sinks.warehouse import Warehouse

if TYPE_CHECKING:
    from tasks.jobspec import DecisionTolerance, JobSpec

TOLERATED_MEASURES = (
    "decision_share",
    "rule_share",
    "straddling_share",
    "expected_event_rate",
    "score_mean",
    "forecast_mean",
)
"""Measure kinds that are flagged; each has a field of the same name in `monitoring.tolerance`."""
RELATIVE_TOLERANCES = ("forecast_mean",)
"""Measure kinds whose tolerance is a share of the baseline: the row's `tolerance` is that share times |baseline|."""
ALL = "all"
_MEASURES_SCHEMA = {"measure": pl.String, "item": pl.String, "value": pl.Float64}


def prediction_groups(predictions: pl.DataFrame, cutoffs: Sequence[float]) -> pl.DataFrame:
    """Predictions counted by (run_id, model_version, decision, rule_id, score, straddling), with
    the sum of their probabilities: everything decision monitoring needs, a few hundred rows.
    Forecasts (a `forecast` column) are counted by the same keys but the score, with their sum;
    classifications (a `predicted_class` column) by the predicted class instead of the score, with the
    sum of its probability."""
    forecasts = "forecast" in predictions.columns
    value = "forecast" if forecasts else "probability"
    straddling = predict_straddling(pl.col(f"{value}_low"), pl.col(f"{value}_high"), cutoffs, none=pl.lit(False))
    keys = [c for c in ("run_id", "model_version") if c in predictions.columns]
    kind_key = () if forecasts else ("predicted_class",) if "predicted_class" in predictions.columns else ("score",)
    groups = predictions.group_by(*keys, "decision", "rule_id", *kind_key, straddling.alias("straddling")).agg(
        pl.len().cast(pl.Int64).alias("rows"), pl.col(value).sum().alias(f"{value}_sum")
    )
    # The string keys are views into the predictions' buffers; a run keeps every chunk's groups until
    # it ends, and their views would keep every chunk's buffers alive (~1.8 MB a 50 k-row chunk,
    # 360 MB at 10 M rows). The Arrow round trip copies out the few values they show.
    return pl.from_arrow(groups.to_arrow())


GROUP_KEYS = ("run_id", "model_version", "decision", "rule_id", "score", "straddling")
FORECAST_GROUP_KEYS = ("run_id", "model_version", "decision", "rule_id", "straddling")
CLASS_GROUP_KEYS = ("run_id", "model_version", "decision", "rule_id", "predicted_class", "straddling")


def decision_groups_frame(
    rows: Sequence[dict] = (), *, forecasts: bool = False, classifies: bool = False
) -> pl.DataFrame:
    """`prediction_groups` rows (as `ScoringSummary.decision_groups` holds them) in their schema: a forecast job's
    (`forecasts`), a multiclass job's (`classifies`) or a binary job's."""
    schema = (
        FORECAST_GROUP_SCHEMA if forecasts else CLASSIFICATION_GROUP_SCHEMA if classifies else PREDICTION_GROUP_SCHEMA
    )
    return pl.from_arrow(pa.Table.from_pylist(list(rows), schema=schema))


def group_keys(groups: pl.DataFrame) -> tuple[str, ...]:
    """The keys of `prediction_groups` rows: a forecast job's have no score, a multiclass job's a predicted class instead."""
    return (
        FORECAST_GROUP_KEYS
        if "forecast_sum" in groups.columns
        else CLASS_GROUP_KEYS
        if "predicted_class" in groups.columns
        else GROUP_KEYS
    )


def merged_prediction_groups(groups: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """`prediction_groups` of parts of one partition (its chunks) as those of the whole.

    The parts' probability (forecast) sums are added exactly (`math.fsum`), so the result does not
    depend on the order in which units finish.
    """
    parts = [g for g in groups if g.height]
    if not parts:
        return decision_groups_frame(
            forecasts=bool(groups) and "forecast_sum" in groups[0].columns,
            classifies=bool(groups) and "predicted_class" in groups[0].columns,
        )
    keys = group_keys(parts[0])
    summed = "forecast_sum" if "forecast_sum" in parts[0].columns else "probability_sum"
    merged = pl.concat(parts).group_by(*keys).agg(pl.col("rows").sum(), pl.col(summed))
    return merged.with_columns(pl.col(summed).map_elements(math.fsum, return_dtype=pl.Float64)).sort(*keys)


def decision_measures(
    predictions: pl.DataFrame,
    *,
    decisions: Sequence[str],
    rule_ids: Sequence[str],
    cutoffs: Sequence[float],
    classes: Sequence[str] = (),
) -> pl.DataFrame:
    """The partition's measures as (measure, item, value); shares of an empty partition are NaN."""
    return grouped_decision_measures(
        prediction_groups(predictions, cutoffs), decisions=decisions, rule_ids=rule_ids, classes=classes
    )


def grouped_decision_measures(
    groups: pl.DataFrame, *, decisions: Sequence[str], rule_ids: Sequence[str], classes: Sequence[str] = ()
) -> pl.DataFrame:
    """`decision_measures` from `prediction_groups` rows, so a partition of any size is never loaded whole;
    `classes` (target.classes) each get a `class_share` row in a multiclass job's."""
    rows = int(groups["rows"].sum())
    nan = float("nan")
    decision_counts = dict(groups.group_by("decision").agg(pl.col("rows").sum()).iter_rows())
    rule_counts = dict(groups.group_by("rule_id").agg(pl.col("rows").sum()).iter_rows())
    out: list[tuple[str, str, float]] = [("rows", ALL, float(rows))]
    for decision in [*decisions, *sorted(set(decision_counts) - set(decisions))]:
        out.append(("decision_share", decision, decision_counts.get(decision, 0) / rows if rows else nan))
    for rule in [*rule_ids, *sorted(set(rule_counts) - set(rule_ids))]:
        out.append(("rule_share", rule, rule_counts.get(rule, 0) / rows if rows else nan))
    straddling = float(groups.filter(pl.col("straddling"))["rows"].sum()) / rows if rows else nan
    if "forecast_sum" in groups.columns:
        total = float(groups["forecast_sum"].sum()) if rows else nan
        out += [
            ("straddling_share", ALL, straddling),
            ("forecast_mean", ALL, total / rows if rows else nan),
            ("forecast_total", ALL, total),
        ]
        return pl.DataFrame(out, schema=_MEASURES_SCHEMA, orient="row")
    if "predicted_class" in groups.columns:
        class_counts = dict(groups.group_by("predicted_class").agg(pl.col("rows").sum()).iter_rows())
        out.append(("straddling_share", ALL, straddling))
        for name in [*classes, *sorted(set(class_counts) - set(classes))]:
            out.append(("class_share", name, class_counts.get(name, 0) / rows if rows else nan))
        out.append(("expected_accuracy", ALL, float(groups["probability_sum"].sum()) / rows if rows else nan))
        return pl.DataFrame(out, schema=_MEASURES_SCHEMA, orient="row")
    counts = groups["rows"].to_numpy()
    scores = groups["score"].cast(pl.Float64).to_numpy()
    # Scores are integers 0..100, so their quantiles come exactly from one value per row, rebuilt
    # from the counts (2 bytes a row even for tens of millions).
    every_score = np.repeat(scores.astype(np.int16), counts)
    probability_sum = float(groups["probability_sum"].sum()) if rows else nan
    out += [
        ("straddling_share", ALL, straddling),
        ("score_mean", ALL, float((scores * counts).sum()) / rows if rows else nan),
        *((f"score_p{q}", ALL, float(np.quantile(every_score, q / 100)) if rows else nan) for q in (10, 50, 90)),
        ("expected_event_rate", ALL, probability_sum / rows if rows else nan),
        ("expected_events", ALL, probability_sum),
    ]
    return pl.DataFrame(out, schema=_MEASURES_SCHEMA, orient="row")


def measures_against_baseline(
    measures: pl.DataFrame, history: pl.DataFrame, tolerance: DecisionTolerance
) -> pl.DataFrame:
    """`measures` with baseline (trailing mean), baseline_partitions, delta, tolerance and flag.

    `history` holds (partition_date, measure, item, value) of the previous partitions in the window.
    """
    baseline = (
        history.filter(pl.col("value").is_not_nan())
        .group_by("measure", "item")
        .agg(
            pl.col("value").mean().alias("baseline"),
            pl.col("partition_date").n_unique().cast(pl.Int64).alias("baseline_partitions"),
        )
    )
    limits = pl.DataFrame(
        {"measure": list(TOLERATED_MEASURES), "tolerance": [float(getattr(tolerance, m)) for m in TOLERATED_MEASURES]}
    )
    joined = (
        measures.join(baseline, on=["measure", "item"], how="left", maintain_order="left")
        .join(limits, on="measure", how="left", maintain_order="left")
        .with_columns(pl.col("baseline_partitions").fill_null(0), (pl.col("value") - pl.col("baseline")).alias("delta"))
    )
    tolerated = pl.col("measure").is_in(list(TOLERATED_MEASURES))
    relative = pl.col("measure").is_in(list(RELATIVE_TOLERANCES))
    joined = joined.with_columns(
        pl.when(relative)
        .then(pl.col("tolerance") * pl.col("baseline").abs())
        .otherwise(pl.col("tolerance"))
        .alias("tolerance")
    )
    flag = (
        pl.when(~tolerated)
        .then(None)
        .when(pl.col("value").is_nan())
        .then(pl.lit("no_data"))
        .when(pl.col("baseline").is_null())
        .then(pl.lit("no_baseline"))
        .when(pl.col("delta").abs() > pl.col("tolerance"))
        .then(pl.lit("shift"))
        .otherwise(pl.lit("ok"))
    )
    return joined.with_columns(flag.alias("flag"))


def _versions(groups: pl.DataFrame) -> str:
    """The model versions that scored the partition, comma-separated (more than one when a fallback scored)."""
    return ",".join(sorted(groups["model_version"].unique().to_list()))


def decision_monitoring_rows(
    groups: pl.DataFrame,
    history: pl.DataFrame,
    spec: JobSpec,
    *,
    partition_date: dt.date,
    run_id: str,
) -> pa.Table:
    """The `decision_monitoring` rows of one partition from its `prediction_groups`, in the table's schema."""
    rules = spec.prediction.rules
    measures = grouped_decision_measures(
        groups,
        decisions=list(dict.fromkeys(r.decision for r in rules)),
        rule_ids=[r.id for r in rules],
        classes=spec.target.classes,
    )
    compared = measures_against_baseline(measures, history, spec.monitoring.tolerance)
    schema = DECISION_MONITORING.schema
    frame = compared.with_columns(
        pl.lit(spec.name).alias("job"),
        pl.lit(partition_date).alias("partition_date"),
        pl.lit(run_id).alias("run_id"),
        pl.lit(_versions(groups)).alias("model_version"),
    ).select(schema.names)
    return frame.to_arrow().cast(schema)


def trailing_decision_monitoring(
    warehouse: Warehouse, spec: JobSpec, *, partition_date: dt.date, run_id: str, groups: pl.DataFrame
) -> pa.Table:
    """The `decision_monitoring` rows of the partition's `prediction_groups` against the stored rows of the trailing
    window; read only, so a run's page can say what moved before the run publishes and `monitored_decisions` stores them."""
    window = spec.monitoring.window_days
    history = pl.from_arrow(
        warehouse.monitoring_rows(
            "decision_monitoring",
            job=spec.name,
            first_date=partition_date - dt.timedelta(days=window),
            last_date=partition_date - dt.timedelta(days=1),
        )
    ).select("partition_date", "measure", "item", "value")
    return decision_monitoring_rows(groups, history, spec, partition_date=partition_date, run_id=run_id)


def monitored_decisions(
    warehouse: Warehouse,
    spec: JobSpec,
    *,
    partition_date: dt.date,
    run_id: str,
    groups: pl.DataFrame | None = None,
    slice_counts: pl.DataFrame | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Compute the partition's decision monitoring and its slices' (tasks/monitoring/slices.py) and store them.

    `groups` are the run's `prediction_groups`, counted chunk by chunk while it scored; without
    them (monitoring a partition again) the warehouse aggregates the published predictions, so
    memory does not grow with the partition either way. They must be those of `run_id`:
    monitoring a partition that another run has since replaced would store measures of rows nobody
    reads any more.
    """
    rules = spec.prediction.rules
    if groups is None:
        counted = (
            warehouse.forecast_groups
            if spec.target.forecasts
            else warehouse.classification_groups
            if spec.target.classifies
            else warehouse.prediction_groups
        )
        groups = pl.from_arrow(
            counted(spec.name, partition_date, predict_probability_cutoffs(rules), straddling=predict_straddling)
        )
    # Sorted, so the sums over groups add in the same order every time.
    groups = groups.sort(*group_keys(groups))
    runs = sorted(groups["run_id"].unique().to_list())
    if runs and runs != [run_id]:
        raise ValueError(
            f"predictions of {spec.name} {partition_date} were published by run(s) {runs}, not by run {run_id!r}; "
            "monitor the run that published the partition"
        )
    rows = trailing_decision_monitoring(warehouse, spec, partition_date=partition_date, run_id=run_id, groups=groups)
    slices = monitored_slices(warehouse, spec, partition_date=partition_date, run_id=run_id, counts=slice_counts)
    warehouse.replace_monitoring_partition(
        job=spec.name, partition_date=partition_date, tables={"decision_monitoring": rows, **slices}
    )
    return rows, slices[SLICE_MONITORING.table]
