"""Realized performance of a multiclass job (target.kind multiclass) once its labels land.

A multiclass job's label files hold a class name per entity in the outcome column (whole numbers and
booleans are read as the text they name, as registration reads the hold-out's), read and accounted for as a
binary job's outcomes are (tasks/monitoring/outcomes.py) and stored in `outcome_class_labels`; a label that
names none of target.classes is refused, as a binary outcome other than 0 or 1 is. Joined to the partition's
published `classifications` on entity id, per model version and group of rows — the partition
(`partition`/`all`), each decision of the rule table (`decision`/<decision>) and each value of each
`monitoring.slices` column (`slice:<column>`/<value>, values pooled as a forecast job's are,
tasks/monitoring/forecast_outcomes.py) — on the group's labelled rows:

- `outcome_class_metrics`: accuracy, log loss of the calibrated vector, macro F1, classwise ECE (the mean
  over the classes of each one-vs-rest ECE on `monitoring.calibration_bins` equal-width bins) and top-label
  ECE (tasks/monitoring/multiclass_measures.py);
- `outcome_class_rates`: per class, rows predicted as it and rows truly of it (support), precision, recall,
  F1 and the class's own ECE;
- `outcome_class_calibration` (the partition only): per class and bin, rows, events, the probability sum,
  mean probability and observed rate — sums, so calibration curves add up over partitions;
- `outcome_estimates`: every measure the scoring run estimated before labels (`model_health`, section
  `estimated_performance`: accuracy, macro F1, and per class its rate, precision, recall and F1) beside its
  realized value; the partition is flagged when the realized accuracy falls outside the estimate's interval.

`rows` counts the group's classifications, `labelled` those with a label; every measure is taken on the
labelled rows and is null without one. Rows are measured in entity order, so the same classifications and
labels give the same bits however the warehouse returned them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.monitoring.forecast_outcomes import DECISION, PARTITION, SLICE
from tasks.monitoring.health import ALL, CLASS_PARTITION_FLAG_MEASURES, ESTIMATED
from tasks.monitoring.multiclass_measures import class_indices, multiclass_realized_performance

CLASSIFICATION_COLUMNS = ("run_id", "entity_id", "predicted_class", "class_probabilities", "decision", "model_version")
"""The only classification columns the realized measures read."""
METRIC_MEASURES = ("accuracy", "log_loss", "macro_f1", "classwise_ece", "top_label_ece")
RATE_MEASURES = ("precision", "recall", "f1", "ece")


def class_vectors(frame: pl.DataFrame, classes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The calibrated vectors (rows, K) and predicted class indices of classification rows."""
    k = len(classes)
    vectors = frame["class_probabilities"].explode().to_numpy().astype(np.float64)
    if vectors.size != frame.height * k:
        raise ValueError(
            f"class_probabilities must hold {k} probabilities per row (target.classes), got {vectors.size} over {frame.height} rows"
        )
    return vectors.reshape(frame.height, k), class_indices(frame["predicted_class"].to_numpy(), classes)


def _metric_values(realized: dict[str, Any] | None) -> dict[str, float | None]:
    if realized is None:
        return dict.fromkeys(METRIC_MEASURES)
    return {m: realized[m] for m in METRIC_MEASURES}


def class_outcome_rows(
    joined: pl.DataFrame,
    *,
    classes: Sequence[str],
    decisions: Sequence[str],
    slices: Sequence[str],
    bins: int,
    key: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(`outcome_class_metrics`, `outcome_class_rates`, `outcome_class_calibration`) rows of one partition, per model
    version. `joined` holds the partition's CLASSIFICATION_COLUMNS with `outcome` (a class name; null: no label) and,
    per slice, `slice:<column>` (`sliced_forecasts` works on classifications as on forecasts)."""
    joined = joined.sort("entity_id")
    metrics: list[dict[str, Any]] = []
    rates: list[dict[str, Any]] = []
    calibration: list[dict[str, Any]] = []
    for version in sorted(joined["model_version"].unique().to_list()):
        scored = joined.filter(pl.col("model_version") == version)
        labelled = scored.filter(pl.col("outcome").is_not_null())
        probabilities, predicted = class_vectors(labelled, classes)
        truth = class_indices(labelled["outcome"].to_numpy(), classes)
        common = {**key, "model_version": version}
        run_ids = ",".join(sorted(scored["run_id"].unique().to_list()))
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
            # with_columns, not select: a bare literal would select one row, not one per classification.
            counted = scored.with_columns(item.alias("_item"))["_item"].value_counts(name="n")
            classified = dict(zip(counted["_item"].to_list(), counted["n"].to_list(), strict=True))
            values = labelled.with_columns(item.alias("_item"))["_item"].to_numpy()
            for value in items:
                mask = values == value
                realized = (
                    multiclass_realized_performance(
                        probabilities[mask], predicted[mask], truth[mask], classes=classes, bins=bins
                    )
                    if mask.any()
                    else None
                )
                group = {**common, "section": section, "item": value}
                metrics.append(
                    {
                        **group,
                        "scoring_run_id": run_ids,
                        "rows": int(classified.get(value, 0)),
                        "labelled": int(mask.sum()),
                        "calibration_bins": bins,
                        **_metric_values(realized),
                    }
                )
                for name in classes:
                    of_class = realized["classes"][name] if realized is not None else None
                    rates.append(
                        {
                            **group,
                            "class_name": name,
                            "predicted_rows": of_class["predicted_rows"] if of_class else 0,
                            "support": of_class["support"] if of_class else 0,
                            **{
                                m: (None if of_class is None or math.isnan(of_class[m]) else of_class[m])
                                for m in RATE_MEASURES
                            },
                        }
                    )
                if section == PARTITION and realized is not None:
                    calibration += [
                        {**common, **row}
                        for row in realized["calibration"]
                        .rename({"class": "class_name", "low": "bin_low", "high": "bin_high"})
                        .to_dicts()
                    ]
    return metrics, rates, calibration


def class_estimates_against_realized(
    estimates: pl.DataFrame, metrics: Sequence[dict[str, Any]], rates: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each measure of one model version estimated before labels (`model_health` section `estimated_performance`)
    beside its realized value on the partition's labelled rows (that version's `outcome_class_metrics` and
    `outcome_class_rates` partition rows): `outside` when the realized value falls outside the interval;
    `partition_flag` (the same on every row) when the accuracy's does (CLASS_PARTITION_FLAG_MEASURES)."""
    partition = next((r for r in metrics if r["section"] == PARTITION and r["item"] == ALL), None)
    if partition is None or not partition["labelled"]:
        return []
    labelled = partition["labelled"]
    per_class = {r["class_name"]: r for r in rates if r["section"] == PARTITION and r["item"] == ALL}
    realized: dict[tuple[str, str], tuple[float | None, int]] = {
        ("accuracy", ALL): (partition["accuracy"], labelled),
        ("macro_f1", ALL): (partition["macro_f1"], labelled),
    }
    for name, row in per_class.items():
        realized[("class_rate", name)] = (row["support"] / labelled, labelled)
        realized[("precision", name)] = (row["precision"], row["predicted_rows"])
        realized[("recall", name)] = (row["recall"], row["support"])
        realized[("f1", name)] = (row["f1"], labelled)
    rows = []
    for row in estimates.filter(pl.col("section") == ESTIMATED).iter_rows(named=True):
        value, count = realized.get((row["measure"], row["item"]), (None, 0))
        value = float("nan") if value is None else float(value)
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
                "realized_rows": count,
                "outside": (not row["low"] <= value <= row["high"]) if known else None,
            }
        )
    flagged = any(r["outside"] for r in rows if (r["measure"], r["item"]) in CLASS_PARTITION_FLAG_MEASURES)
    return [{**r, "partition_flag": flagged} for r in rows]
