"""The catalog: every dataset the product writes, named once, with where it lives and what it holds.

A `Dataset` says its folder under the job's output dir (`data/output/<job>/…`), its Arrow schema,
its warehouse table, the columns that identify one of its rows, whether a scoring run replaces it
per (job, partition_date) and whether a run stages it per chunk or once per run. Scoring, publish,
the warehouse (DuckDB and PostgreSQL), the Delta sink, recovery, the reports and the crash trials
read their lists of datasets and their schemas from here; none spells them again.

This module imports only pyarrow and the standard library, so every layer can read it without
import circles (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

PARTITION_KEY = ("job", "partition_date")
"""The columns of a partition: a run replaces exactly the rows of one (job, partition_date)."""

Staging = Literal["chunk", "run"]


@dataclass(frozen=True)
class Dataset:
    """One dataset of the product, in every store it has."""

    name: str
    """What code calls it: the key of the Parquet store, the crash points, the Delta table under the sink's URL."""
    schema: pa.Schema | None
    """Its columns, in the warehouse table's order and types (and the Delta table's); None where
    they are not fixed (the inference hand-off's depend on the model)."""
    folder: str | None = None
    """Its folder under the job's output dir (`<job>/<folder>/date=D`); None: the warehouse only."""
    table: str | None = None
    """Its warehouse table; None: never in the warehouse (staged files only)."""
    keys: tuple[str, ...] = ()
    """The columns that identify one row; empty where a row has no identity of its own (an entity
    may be quarantined, and acted on by the same expectation, more than once)."""
    primary_key: bool = False
    """The warehouse declares `keys` as its PRIMARY KEY (tables updated row by row, not per partition)."""
    partitioned: bool = False
    """Replaced as a whole per (job, partition_date): a scoring run's Parquet version and warehouse
    rows, or a monitoring run's rows."""
    staged: Staging | None = None
    """How a scoring run stages it before publishing: a file per chunk, one file per run, or not at all."""
    published: bool = True
    """Readers see it (in Parquet, the warehouse and the Delta tables); False: a run's scratch, never published."""


_RUN_KEY = [("run_id", pa.string()), ("job", pa.string()), ("partition_date", pa.date32())]
"""The first columns of what a scoring run writes: the run, then the partition."""
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_JSON = pa.json_()

_SCORED_ENTITY = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("job", pa.string(), nullable=False),
    pa.field("partition_date", pa.date32(), nullable=False),
    pa.field("entity_id", pa.string(), nullable=False),
]
"""The first columns of both prediction contracts: the run, the partition and the scored entity."""
_DECIDED = [
    pa.field("decision", pa.string(), nullable=False),
    pa.field("rule_id", pa.string(), nullable=False),
    pa.field("reason_codes", pa.list_(pa.string()), nullable=False),
    pa.field("reason_texts", pa.list_(pa.string()), nullable=False),
    pa.field("raw_margin", pa.float64(), nullable=False),
    pa.field("model_name", pa.string(), nullable=False),
    pa.field("model_version", pa.string(), nullable=False),
    pa.field("feature_version", pa.string(), nullable=False),
]
"""The last columns of both: the decision, its reasons, the raw margin and what scored the row."""

PREDICTIONS = Dataset(
    name="predictions",
    schema=pa.schema(
        [
            *_SCORED_ENTITY,
            pa.field("probability", pa.float64(), nullable=False),
            pa.field("probability_low", pa.float64(), nullable=False),
            pa.field("probability_high", pa.float64(), nullable=False),
            pa.field("score", pa.int16(), nullable=False),
            *_DECIDED,
        ]
    ),
    folder="predictions",
    table="predictions",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
    staged="chunk",
)
"""The prediction contract: one row per scored entity (meanings: tasks/contracts.py PREDICTION_FIELD_MEANINGS)."""
PREDICTION_SCHEMA = PREDICTIONS.schema

FORECASTS = Dataset(
    name="forecasts",
    schema=pa.schema(
        [
            *_SCORED_ENTITY,
            pa.field("forecast", pa.float64(), nullable=False),
            pa.field("forecast_low", pa.float64(), nullable=False),
            pa.field("forecast_high", pa.float64(), nullable=False),
            pa.field("expected_error", pa.float64(), nullable=False),
            *_DECIDED,
        ]
    ),
    folder="forecasts",
    table="forecasts",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
    staged="chunk",
)
"""A forecast job's prediction contract (target.kind regression or count): one row per scored entity
(meanings: tasks/contracts.py FORECAST_FIELD_MEANINGS). A binary job publishes it empty, and a
forecast job publishes `predictions` empty, so a job's partition never keeps another kind's rows."""
FORECAST_SCHEMA = FORECASTS.schema
CLASSIFICATIONS = Dataset(
    name="classifications",
    schema=pa.schema(
        [
            *_SCORED_ENTITY,
            pa.field("predicted_class", pa.string(), nullable=False),
            pa.field("probability", pa.float64(), nullable=False),
            pa.field("probability_low", pa.float64(), nullable=False),
            pa.field("probability_high", pa.float64(), nullable=False),
            pa.field("class_probabilities", pa.list_(pa.float64()), nullable=False),
            pa.field("runner_up_class", pa.string(), nullable=False),
            pa.field("margin", pa.float64(), nullable=False),
            *_DECIDED[:4],
            pa.field("raw_margins", pa.list_(pa.float64()), nullable=False),
            *_DECIDED[5:],
        ]
    ),
    folder="classifications",
    table="classifications",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
    staged="chunk",
)
"""A multiclass job's prediction contract (target.kind multiclass): one row per scored entity, its predicted class,
the calibrated probability vector in target.classes order (meanings: tasks/contracts.py CLASSIFICATION_FIELD_MEANINGS).
Binary and forecast jobs publish it empty, and a multiclass job publishes `predictions` and `forecasts` empty."""
CLASSIFICATION_SCHEMA = CLASSIFICATIONS.schema
PREDICTION_GROUP_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("model_version", pa.string()),
        ("decision", pa.string()),
        ("rule_id", pa.string()),
        ("score", pa.int16()),
        ("straddling", pa.bool_()),
        ("rows", pa.int64()),
        ("probability_sum", pa.float64()),
    ]
)
"""Predictions counted per (run, model version, decision, rule, score, straddling) with their
probability sum: what decision monitoring reads, from the run's chunks or from the warehouse."""
FORECAST_GROUP_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("model_version", pa.string()),
        ("decision", pa.string()),
        ("rule_id", pa.string()),
        ("straddling", pa.bool_()),
        ("rows", pa.int64()),
        ("forecast_sum", pa.float64()),
    ]
)
"""A forecast job's forecasts counted per (run, model version, decision, rule, straddling) with their
sum: what its decision monitoring reads (there is no score)."""
CLASSIFICATION_GROUP_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("model_version", pa.string()),
        ("decision", pa.string()),
        ("rule_id", pa.string()),
        ("predicted_class", pa.string()),
        ("straddling", pa.bool_()),
        ("rows", pa.int64()),
        ("probability_sum", pa.float64()),
    ]
)
"""A multiclass job's classifications counted per (run, model version, decision, rule, predicted class, straddling)
with the sum of the predicted class's probability: what its decision monitoring reads (there is no score)."""

QUARANTINE = Dataset(
    name="quarantine",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("entity_id", pa.string()),
            ("failed_expectations", pa.list_(pa.string())),
            ("raw_row", pa.string()),
        ]
    ),
    folder="quarantine",
    table="quarantine",
    partitioned=True,
    staged="chunk",
)
"""Rows not scored, with the expectations they failed and the raw row as JSON."""

GUARD_ACTIONS = Dataset(
    name="guard_actions",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("entity_id", pa.string()),
            ("expectation", pa.string()),
            ("column_name", pa.string()),
            ("action", pa.string()),
            ("old_value", pa.string()),
            ("new_value", pa.string()),
        ]
    ),
    folder="guard_actions",
    table="guard_actions",
    partitioned=True,
    staged="chunk",
)
"""Every repair (entity, column, expectation, old → new) and quarantine."""

GUARD_SUMMARY = Dataset(
    name="guard_summary",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("expectation", pa.string()),
            ("column_name", pa.string()),
            ("expectation_type", pa.string()),
            ("action", pa.string()),
            ("evaluated_by", pa.string()),
            ("rows", pa.int64()),
            ("share", pa.float64()),
        ]
    ),
    folder="guard_summary",
    table="guard_summary",
    keys=(*PARTITION_KEY, "expectation"),
    partitioned=True,
    staged="run",
)
"""Every expectation of the suite with its action, engine and rows hit."""

FALLBACK_REPORT = Dataset(
    name="fallback_report",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("kind", pa.string()),
            ("detail", pa.string()),
            ("rows", pa.int64()),
            ("share", pa.float64()),
            ("limit", pa.float64()),
            ("breached", pa.bool_()),
        ]
    ),
    folder="reports/fallback",
    table="fallback_report",
    keys=(*PARTITION_KEY, "kind", "detail"),
    partitioned=True,
    staged="run",
)
"""Rows per kind of fallback (guard repair, quarantine, fallback model, failed chunk, …), share, limit, breached."""

DRIFT_REPORT = Dataset(
    name="drift_report",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("feature", pa.string()),
            ("baseline", pa.string()),
            ("psi", pa.float64()),
            ("ks", pa.float64()),
            ("ks_upper", pa.float64()),
            ("wasserstein", pa.float64()),
            ("js", pa.float64()),
            ("flag", pa.string()),
            ("rows", pa.int64()),
            ("null_share", pa.float64()),
            ("baseline_null_share", pa.float64()),
            ("outside_p1_p99_share", pa.float64()),
            ("kind", pa.string()),
            ("unseen_share", pa.float64()),
        ]
    ),
    folder="reports/drift",
    table="drift_report",
    keys=(*PARTITION_KEY, "feature", "baseline"),
    partitioned=True,
    staged="run",
)
"""Drift per feature and baseline (meanings: tasks/scoring/summary.py DRIFT_REPORT_COLUMNS). `kind`
null: a row written before kinds (numeric); `kind` and `unseen_share` came later, hence at the end."""

DRIFT_HISTOGRAMS = Dataset(
    name="drift_histograms",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("feature", pa.string()),
            ("edges", pa.list_(pa.float64())),
            ("counts", pa.list_(pa.int64())),
            ("nulls", pa.int64()),
            ("kind", pa.string()),
        ]
    ),
    folder="reports/drift_histograms",
    table="drift_histograms",
    keys=(*PARTITION_KEY, "feature"),
    partitioned=True,
    staged="run",
)
"""The merged per-feature histograms the drift was computed from (the next partition's baseline)."""

MODEL_HEALTH = Dataset(
    name="model_health",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("model_version", pa.string()),
            ("section", pa.string()),
            ("measure", pa.string()),
            ("item", pa.string()),
            ("value", pa.float64()),
            ("low", pa.float64()),
            ("high", pa.float64()),
            ("reference", pa.float64()),
            ("delta", pa.float64()),
            ("flag", pa.string()),
            ("rows", pa.int64()),
        ]
    ),
    folder="reports/model_health",
    table="model_health",
    keys=(*PARTITION_KEY, "model_version", "section", "measure", "item"),
    partitioned=True,
    staged="run",
)
"""Model health before labels (tasks/monitoring/health.py): estimated performance with its interval,
attribution drift and multivariate drift of the partition, in long format."""

SHADOW_PREDICTIONS = Dataset(
    name="shadow_predictions",
    schema=pa.schema([*PREDICTIONS.schema, pa.field("alias", pa.string(), nullable=False)]),
    folder="shadow_predictions",
    table="shadow_predictions",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
    staged="chunk",
)
"""What the challenger would have predicted for the same rows: the prediction contract, by the
challenger's version, with the alias or version the job named it by. Nothing here drives a decision."""

SHADOW_FORECASTS = Dataset(
    name="shadow_forecasts",
    schema=pa.schema([*FORECASTS.schema, pa.field("alias", pa.string(), nullable=False)]),
    folder="shadow_forecasts",
    table="shadow_forecasts",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
    staged="chunk",
)
"""A forecast job's shadow: the forecast contract by the challenger's version, with the alias it was named by."""

SHADOW_CLASSIFICATIONS = Dataset(
    name="shadow_classifications",
    schema=pa.schema([*CLASSIFICATIONS.schema, pa.field("alias", pa.string(), nullable=False)]),
    folder="shadow_classifications",
    table="shadow_classifications",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
    staged="chunk",
)
"""A multiclass job's shadow: the classification contract by the challenger's version, with the alias it was named by."""

DECISION_FLIPS = Dataset(
    name="decision_flips",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("entity_id", pa.string()),
            ("champion_version", pa.string()),
            ("challenger_version", pa.string()),
            ("champion_decision", pa.string()),
            ("challenger_decision", pa.string()),
            ("champion_score", pa.int16()),
            ("challenger_score", pa.int16()),
            ("champion_probability", pa.float64()),
            ("challenger_probability", pa.float64()),
            ("champion_reason_codes", pa.list_(pa.string())),
            ("challenger_reason_codes", pa.list_(pa.string())),
            ("champion_forecast", pa.float64()),
            ("challenger_forecast", pa.float64()),
            ("champion_class", pa.string()),
            ("challenger_class", pa.string()),
        ]
    ),
    folder="reports/decision_flips",
    table="decision_flips",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
    staged="chunk",
)
"""The rows whose decision the challenger would change, with both models' scores (binary jobs; null for the
other kinds), probabilities (binary jobs; a multiclass job's: the predicted class's), forecasts (forecast jobs),
predicted classes (multiclass jobs), each null where the job's kind has none, and reason codes."""

SHADOW_COMPARISON = Dataset(
    name="shadow_comparison",
    schema=pa.schema(
        [
            *_RUN_KEY,
            ("champion_version", pa.string()),
            ("challenger_version", pa.string()),
            ("section", pa.string()),
            ("champion_item", pa.string()),
            ("challenger_item", pa.string()),
            ("rows", pa.int64()),
            ("champion_value", pa.float64()),
            ("challenger_value", pa.float64()),
        ]
    ),
    folder="reports/shadow_comparison",
    table="shadow_comparison",
    keys=(*PARTITION_KEY, "section", "champion_item", "challenger_item"),
    partitioned=True,
    staged="run",
)
"""Champion against challenger on one partition (tasks/monitoring/shadow.py), in long format: the
decision crosstab, the score delta's distribution, the expected event rate per decision under each
model, and the challenger's own failures and fallbacks."""

INFERENCE_HANDOFF = Dataset(
    name="inference_handoff",
    schema=None,
    folder="inference_handoff",
    staged="chunk",
    published=False,
)
"""Raw outputs of a chunk between its inference and its prediction task (Arrow IPC files whose
columns depend on the model: tasks/scoring/unit_pass.py); staged only, never published."""

RUNS = Dataset(
    name="runs",
    schema=pa.schema(
        [
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("job", pa.string(), nullable=False),
            pa.field("partition_date", pa.date32(), nullable=False),
            pa.field("status", pa.string(), nullable=False),
            ("model_name", pa.string()),
            ("model_version", pa.string()),
            ("feature_version", pa.string()),
            ("rows_read", pa.int64()),
            ("rows_scored", pa.int64()),
            ("rows_repaired", pa.int64()),
            ("rows_quarantined", pa.int64()),
            ("rows_failed", pa.int64()),
            ("rows_fallback", pa.int64()),
            ("rows_with_reasons", pa.int64()),
            ("rows_without_adverse_reason", pa.int64()),
            ("rows_straddling", pa.int64()),
            ("decisions", _JSON),
            ("guard_counts", _JSON),
            ("inference", _JSON),
            pa.field("started_at", _TIMESTAMP, nullable=False),
            ("ended_at", _TIMESTAMP),
            ("error", pa.string()),
            ("error_detail", pa.string()),
            ("warnings", _JSON),
        ]
    ),
    table="runs",
    keys=("run_id",),
    primary_key=True,
)
"""The run ledger; JSON columns read back as JSON text on both backends.

`status` moves `running` → `publishing` (the run's outputs are assembled and it is about to commit)
→ `committed` (in the same transaction as the partition's warehouse rows) → `succeeded` (the
Parquet pointer swapped and any Delta tables written), or to `failed` with `error` (one line)
and `error_detail` (the traceback). A partition of a backfill or `nightly` refused before its lease (no raw data,
a source that did not answer) gets a row of status `refused` with its `error`: it never started and wrote nothing. `warnings` lists what failed after the outputs were published (page, monitoring)."""

PARTITION_LEASES = Dataset(
    name="partition_leases",
    schema=pa.schema(
        [
            pa.field("job", pa.string(), nullable=False),
            pa.field("partition_date", pa.date32(), nullable=False),
            pa.field("run_id", pa.string(), nullable=False),
            ("host", pa.string()),
            ("pid", pa.int64()),
            pa.field("acquired_at", _TIMESTAMP, nullable=False),
            pa.field("expires_at", _TIMESTAMP, nullable=False),
        ]
    ),
    table="partition_leases",
    keys=PARTITION_KEY,
    primary_key=True,
)
"""Which run may write a partition until when; expiry is judged by the database clock."""

MODEL_ALIASES = Dataset(
    name="model_aliases",
    schema=pa.schema(
        [
            pa.field("model_name", pa.string(), nullable=False),
            pa.field("alias", pa.string(), nullable=False),
            ("from_version", pa.string()),
            ("to_version", pa.string()),
            ("changed_by", pa.string()),
            pa.field("changed_at", _TIMESTAMP, nullable=False),
            ("job", pa.string()),
            ("note", pa.string()),
        ]
    ),
    table="model_aliases",
    keys=("model_name", "alias", "changed_at"),
    primary_key=True,
)
"""Every move of a model alias (tasks/inference/aliases.py): who moved it, when, from which version to
which (null: created, or removed), and through which job's promotion."""

SCHEMA_MIGRATIONS = Dataset(
    name="schema_migrations",
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            ("description", pa.string()),
            pa.field("applied_at", _TIMESTAMP, nullable=False),
        ]
    ),
    table="schema_migrations",
    keys=("id",),
    primary_key=True,
)
"""Each schema change the warehouse has had (tasks/sinks/warehouse/migrations.py MIGRATIONS), when it was applied."""

_MONITORING_KEY = [("job", pa.string()), ("partition_date", pa.date32())]

DECISION_MONITORING = Dataset(
    name="decision_monitoring",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("run_id", pa.string()),
            ("model_version", pa.string()),
            ("measure", pa.string()),
            ("item", pa.string()),
            ("value", pa.float64()),
            ("baseline", pa.float64()),
            ("baseline_partitions", pa.int64()),
            ("delta", pa.float64()),
            ("tolerance", pa.float64()),
            ("flag", pa.string()),
        ]
    ),
    table="decision_monitoring",
    keys=(*PARTITION_KEY, "model_version", "measure", "item"),
    partitioned=True,
)
"""Decision monitoring of a published partition (tasks/monitoring/decisions.py)."""

OUTCOME_LABELS = Dataset(
    name="outcome_labels",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("entity_id", pa.string()),
            ("outcome", pa.int16()),
            ("observed_date", pa.date32()),
            ("source", pa.string()),
            ("entity_status", pa.string()),
        ]
    ),
    table="outcome_labels",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
)
OUTCOME_ACTUALS = Dataset(
    name="outcome_actuals",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("entity_id", pa.string()),
            ("actual", pa.float64()),
            ("observed_date", pa.date32()),
            ("source", pa.string()),
            ("entity_status", pa.string()),
        ]
    ),
    table="outcome_actuals",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
)
"""A forecast job's actuals (the label files' outcome column, a number), as `outcome_labels` holds a binary job's 0/1 outcomes."""
OUTCOME_CLASS_LABELS = Dataset(
    name="outcome_class_labels",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("entity_id", pa.string()),
            ("outcome", pa.string()),
            ("observed_date", pa.date32()),
            ("source", pa.string()),
            ("entity_status", pa.string()),
        ]
    ),
    table="outcome_class_labels",
    keys=(*PARTITION_KEY, "entity_id"),
    partitioned=True,
)
"""A multiclass job's labels (the label files' outcome column, a class name of target.classes), as `outcome_labels`
holds a binary job's 0/1 outcomes."""
OUTCOME_PARTITIONS = Dataset(
    name="outcome_partitions",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("status", pa.string()),
            ("predictions", pa.int64()),
            ("predictions_labelled", pa.int64()),
            ("labels", pa.int64()),
            ("labels_matched", pa.int64()),
            ("labels_quarantined", pa.int64()),
            ("labels_unknown_entity", pa.int64()),
            ("labels_duplicate", pa.int64()),
            ("labels_without_outcome", pa.int64()),
        ]
    ),
    table="outcome_partitions",
    keys=PARTITION_KEY,
    partitioned=True,
)
OUTCOME_METRICS = Dataset(
    name="outcome_metrics",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("scoring_run_id", pa.string()),
            ("rows", pa.int64()),
            ("labelled", pa.int64()),
            ("events", pa.int64()),
            ("observed_rate", pa.float64()),
            ("observed_low", pa.float64()),
            ("observed_high", pa.float64()),
            ("interval_level", pa.float64()),
            ("expected_rate", pa.float64()),
            ("expected_events", pa.float64()),
            ("expected_within_interval", pa.bool_()),
            ("auc", pa.float64()),
            ("brier", pa.float64()),
            ("ece", pa.float64()),
            ("psi_score", pa.float64()),
            ("psi_baseline_rows", pa.int64()),
        ]
    ),
    table="outcome_metrics",
    keys=(*PARTITION_KEY, "model_version"),
    partitioned=True,
)
OUTCOME_CALIBRATION = Dataset(
    name="outcome_calibration",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("bin", pa.int64()),
            ("bin_low", pa.float64()),
            ("bin_high", pa.float64()),
            ("rows", pa.int64()),
            ("events", pa.int64()),
            ("probability_sum", pa.float64()),
        ]
    ),
    table="outcome_calibration",
    keys=(*PARTITION_KEY, "model_version", "bin"),
    partitioned=True,
)
OUTCOME_ERRORS = Dataset(
    name="outcome_errors",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("scoring_run_id", pa.string()),
            ("section", pa.string()),
            ("item", pa.string()),
            ("rows", pa.int64()),
            ("labelled", pa.int64()),
            ("actual_mean", pa.float64()),
            ("forecast_mean", pa.float64()),
            ("mae", pa.float64()),
            ("rmse", pa.float64()),
            ("bias", pa.float64()),
            ("mape", pa.float64()),
            ("smape", pa.float64()),
            ("coverage", pa.float64()),
            ("mean_width", pa.float64()),
            ("interval_level", pa.float64()),
        ]
    ),
    table="outcome_errors",
    keys=(*PARTITION_KEY, "model_version", "section", "item"),
    partitioned=True,
)
"""A forecast job's realized error once actuals land: per partition (`section` partition, `item` all), per
decision (`section` decision) and per slice value (`section` slice:<column>): `rows` forecasts, `labelled` of
them with an actual, and on those MAE, RMSE, bias (actual − forecast), MAPE over the non-zero actuals (null
where every actual is 0), sMAPE (0/0 counted as 0), the interval's coverage and mean width; every measure null
without an actual (tasks/monitoring/forecast_outcomes.py)."""
OUTCOME_CLASS_METRICS = Dataset(
    name="outcome_class_metrics",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("scoring_run_id", pa.string()),
            ("section", pa.string()),
            ("item", pa.string()),
            ("rows", pa.int64()),
            ("labelled", pa.int64()),
            ("accuracy", pa.float64()),
            ("log_loss", pa.float64()),
            ("macro_f1", pa.float64()),
            ("classwise_ece", pa.float64()),
            ("top_label_ece", pa.float64()),
            ("calibration_bins", pa.int64()),
        ]
    ),
    table="outcome_class_metrics",
    keys=(*PARTITION_KEY, "model_version", "section", "item"),
    partitioned=True,
)
"""A multiclass job's realized performance once labels land: per partition (`section` partition, `item` all), per
decision (`section` decision) and per slice value (`section` slice:<column>): `rows` classifications, `labelled` of
them with a label, and on those accuracy, log loss, macro F1, classwise and top-label ECE on `calibration_bins`
equal-width bins; every measure null without a label (tasks/monitoring/class_outcomes.py)."""
OUTCOME_CLASS_RATES = Dataset(
    name="outcome_class_rates",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("section", pa.string()),
            ("item", pa.string()),
            ("class_name", pa.string()),
            ("predicted_rows", pa.int64()),
            ("support", pa.int64()),
            ("precision", pa.float64()),
            ("recall", pa.float64()),
            ("f1", pa.float64()),
            ("ece", pa.float64()),
        ]
    ),
    table="outcome_class_rates",
    keys=(*PARTITION_KEY, "model_version", "section", "item", "class_name"),
    partitioned=True,
)
"""Per class of a multiclass job, in the groups of `outcome_class_metrics`: labelled rows predicted as the class and
truly of it (support), precision (null: never predicted), recall (null: never observed), F1 and the class's
one-vs-rest ECE."""
OUTCOME_CLASS_CALIBRATION = Dataset(
    name="outcome_class_calibration",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("class_name", pa.string()),
            ("bin", pa.int64()),
            ("bin_low", pa.float64()),
            ("bin_high", pa.float64()),
            ("rows", pa.int64()),
            ("events", pa.int64()),
            ("probability_sum", pa.float64()),
            ("mean_probability", pa.float64()),
            ("observed_rate", pa.float64()),
        ]
    ),
    table="outcome_class_calibration",
    keys=(*PARTITION_KEY, "model_version", "class_name", "bin"),
    partitioned=True,
)
"""A multiclass job's calibration per class of a partition's labelled rows: each equal-width bin of the class's
calibrated probability, its rows, the rows truly of the class (`events`) and the probability sum (so curves add up
over partitions), with the bin's mean probability and observed rate."""
OUTCOME_DECISIONS = Dataset(
    name="outcome_decisions",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("decision", pa.string()),
            ("rows", pa.int64()),
            ("events", pa.int64()),
            ("precision", pa.float64()),
            ("recall", pa.float64()),
        ]
    ),
    table="outcome_decisions",
    keys=(*PARTITION_KEY, "model_version", "decision"),
    partitioned=True,
)

SLICE_COUNTS = Dataset(
    name="slice_counts",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("run_id", pa.string()),
            ("slice_column", pa.string()),
            ("slice_value", pa.string()),
            ("decision", pa.string()),
            ("score_band", pa.int16()),
            ("rows", pa.int64()),
            ("probability_sum", pa.float64()),
            ("probability_sq_sum", pa.float64()),
        ]
    ),
    table="slice_counts",
    keys=(*PARTITION_KEY, "slice_column", "slice_value", "decision", "score_band"),
    partitioned=True,
)
"""Predictions counted per slice value, decision and ten-point score band (tasks/monitoring/slices.py):
the next partitions' baseline."""
SLICE_MONITORING = Dataset(
    name="slice_monitoring",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("run_id", pa.string()),
            ("slice_column", pa.string()),
            ("slice_value", pa.string()),
            ("measure", pa.string()),
            ("value", pa.float64()),
            ("baseline", pa.float64()),
            ("detail", pa.string()),
            ("rows", pa.int64()),
            ("baseline_rows", pa.int64()),
            ("p_value", pa.float64()),
            ("q_value", pa.float64()),
            ("flag", pa.string()),
        ]
    ),
    table="slice_monitoring",
    keys=(*PARTITION_KEY, "slice_column", "slice_value", "measure"),
    partitioned=True,
)
"""Each slice value's measures against the trailing window, with the false discovery rate controlled."""
OUTCOME_ESTIMATES = Dataset(
    name="outcome_estimates",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("model_version", pa.string()),
            ("measure", pa.string()),
            ("item", pa.string()),
            ("estimate", pa.float64()),
            ("low", pa.float64()),
            ("high", pa.float64()),
            ("realized", pa.float64()),
            ("realized_rows", pa.int64()),
            ("outside", pa.bool_()),
            ("partition_flag", pa.bool_()),
        ]
    ),
    table="outcome_estimates",
    keys=(*PARTITION_KEY, "model_version", "measure", "item"),
    partitioned=True,
)
"""The performance estimated the morning after beside the realized one once labels land."""
SHADOW_OUTCOMES = Dataset(
    name="shadow_outcomes",
    schema=pa.schema(
        [
            *_MONITORING_KEY,
            ("champion_version", pa.string()),
            ("challenger_version", pa.string()),
            ("measure", pa.string()),
            ("rows", pa.int64()),
            ("events", pa.int64()),
            ("champion", pa.float64()),
            ("challenger", pa.float64()),
            ("delta", pa.float64()),
            ("delta_low", pa.float64()),
            ("delta_high", pa.float64()),
            ("better", pa.string()),
            ("recommendation", pa.string()),
        ]
    ),
    table="shadow_outcomes",
    keys=(*PARTITION_KEY, "measure"),
    partitioned=True,
)
"""Champion and challenger against the same labelled rows: realized AUC, Brier and ECE of each (a forecast
job's: MAE, RMSE, interval coverage and its distance to the level, `events` null), the challenger's paired
difference with its bootstrap interval, and a plain-language recommendation."""

PARTITION_DATASETS: tuple[Dataset, ...] = (
    PREDICTIONS,
    FORECASTS,
    CLASSIFICATIONS,
    QUARANTINE,
    GUARD_ACTIONS,
    GUARD_SUMMARY,
    FALLBACK_REPORT,
    DRIFT_REPORT,
    DRIFT_HISTOGRAMS,
    MODEL_HEALTH,
    SHADOW_PREDICTIONS,
    SHADOW_FORECASTS,
    SHADOW_CLASSIFICATIONS,
    DECISION_FLIPS,
    SHADOW_COMPARISON,
)
"""What a scoring run publishes, in publish order: staged, moved into the run's version folder, its
warehouse rows replaced per (job, partition_date) in one transaction, swapped in by one pointer,
written to the Delta tables."""
SHADOW_DATASETS: tuple[Dataset, ...] = (
    SHADOW_PREDICTIONS,
    SHADOW_FORECASTS,
    SHADOW_CLASSIFICATIONS,
    DECISION_FLIPS,
    SHADOW_COMPARISON,
)
"""The partition datasets only a job that names a challenger fills; a run without one publishes them empty,
so a partition re-scored without its challenger keeps no stale shadow rows."""
STAGED_DATASETS: tuple[Dataset, ...] = (*PARTITION_DATASETS, INFERENCE_HANDOFF)
"""Every folder a scoring run stages files in (and a failed run's leftovers are removed from)."""

PAGES_FOLDER = "reports/html"
"""A job's HTML pages under its output dir: each partition's run page (`run_page_name`, a link to the page of the
version published) and the monitoring page (MONITORING_PAGE)."""
MONITORING_PAGE = "monitoring.html"
LOGS_FOLDER = "logs"
"""The logs under `<data_dir>/output`: each partition run's beside its job's outputs (`<job>/logs/date=D/`), every
other run's and each command's at the top (`logs/`)."""


def run_page_name(partition: str) -> str:
    """The file name of a partition's run page in PAGES_FOLDER."""
    return f"date={partition}.html"


OUTCOME_DATASETS: tuple[Dataset, ...] = (
    OUTCOME_LABELS,
    OUTCOME_ACTUALS,
    OUTCOME_CLASS_LABELS,
    OUTCOME_PARTITIONS,
    OUTCOME_METRICS,
    OUTCOME_ERRORS,
    OUTCOME_CLASS_METRICS,
    OUTCOME_CLASS_RATES,
    OUTCOME_CALIBRATION,
    OUTCOME_CLASS_CALIBRATION,
    OUTCOME_DECISIONS,
    OUTCOME_ESTIMATES,
    SHADOW_OUTCOMES,
)
"""Realized outcomes of a partition, replaced together by an outcomes run (tasks/monitoring/outcomes.py)."""
MONITORING_DATASETS: tuple[Dataset, ...] = (DECISION_MONITORING, SLICE_COUNTS, SLICE_MONITORING, *OUTCOME_DATASETS)
"""Tables of prediction monitoring and realized outcomes, each keyed by (job, partition_date) and
replaced per partition. No run id or clock time of the monitoring run is stored, so recomputing from
the same predictions and labels leaves identical tables."""
LEDGER_DATASETS: tuple[Dataset, ...] = (RUNS, PARTITION_LEASES, MODEL_ALIASES, SCHEMA_MIGRATIONS)
"""The run ledger, the partition leases, the alias ledger and the schema's migrations: rows written one by
one under their primary key."""
WAREHOUSE_DATASETS: tuple[Dataset, ...] = (*PARTITION_DATASETS, *LEDGER_DATASETS, *MONITORING_DATASETS)
"""Every warehouse table, in the order the warehouse creates them."""
DATASETS: tuple[Dataset, ...] = (*STAGED_DATASETS, *LEDGER_DATASETS, *MONITORING_DATASETS)
"""Every dataset, each once."""

_BY_NAME = {d.name: d for d in DATASETS}
_BY_TABLE = {d.table: d for d in WAREHOUSE_DATASETS}


def dataset(name: str) -> Dataset:
    """The dataset called `name`; KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no dataset {name!r} in the catalog; known: {sorted(_BY_NAME)}") from None


def warehouse_dataset(table: str) -> Dataset:
    """The dataset whose warehouse table is `table`; KeyError naming the known tables otherwise."""
    try:
        return _BY_TABLE[table]
    except KeyError:
        raise KeyError(f"no warehouse table {table!r} in the catalog; known: {sorted(_BY_TABLE)}") from None


def table_schemas(datasets: Iterable[Dataset]) -> dict[str, pa.Schema]:
    """Warehouse table → schema of `datasets`, in their order."""
    return {d.table: d.schema for d in datasets if d.table is not None}
