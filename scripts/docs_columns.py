"""What each column of the catalog's datasets means, for the generated output reference (scripts/docs_reference.py).

The prediction contracts' meanings come from the code (`tasks/contracts.py`); every other column is
explained here, by name, with a few names that mean something else in one dataset given per dataset.
The build fails on a catalog column this module does not explain, so a new column needs its sentence.
"""

from __future__ import annotations

COLUMN_MEANINGS: dict[str, str] = {
    # Keys every dataset shares.
    "run_id": "The scoring run that wrote the row; joins to the `runs` ledger.",
    "job": "The job spec, a file in `jobs/`.",
    "partition_date": "The raw partition the row is about.",
    "entity_id": "The entity: the value of the job's entity column.",
    "model_name": "Registry name of the model.",
    "model_version": "Registry version of the model the row is about.",
    "feature_version": "Version of the features that computed the model inputs.",
    "scoring_run_id": "The scoring run whose published rows were compared with the labels.",
    # Guards.
    "failed_expectations": "The expectations the row failed, in suite order.",
    "raw_row": "The raw row as JSON, as read.",
    "expectation": "The expectation, as its type and column.",
    "column_name": "The column the expectation guards.",
    "expectation_type": "The Great Expectations type of the expectation.",
    "action": "What the guard does: repair, quarantine or fail (keep_first / quarantine_all for duplicate ids).",
    "old_value": "The value before the repair, as text.",
    "new_value": "The value after the repair, as text (null for a quarantine).",
    "evaluated_by": (
        "What evaluated it: the compiled polars checks, great_expectations, the partition pre-pass or implicit."
    ),
    # Counts and shares.
    "rows": "Rows counted in this row's group.",
    "share": "`rows` as a share of the rows read.",
    "limit": "The job's limit on that share (limits in the job spec); null: none.",
    "breached": "Whether the share is above its limit (the run then fails).",
    "kind": "The kind of the row's subject (a fallback kind; a feature's kind: numeric, boolean or categorical).",
    "detail": "What the kind is about in detail (a column and expectation, a reason, a model).",
    # Drift.
    "feature": "The model input (or `score`, `forecast`).",
    "baseline": (
        "What it is compared with: `reference` (the training reference) or `previous` (the previous scored partition)."
    ),
    "psi": "Population stability index against the baseline.",
    "ks": "Kolmogorov–Smirnov statistic at the bin edges (null for a categorical feature).",
    "ks_upper": "Upper bound of the exact KS statistic; null where the bound is too loose to inform.",
    "wasserstein": "Wasserstein-1 distance on the binned distributions (null for a categorical feature).",
    "js": "Jensen–Shannon distance (base 2) on the binned distributions.",
    "flag": "The verdict: ok, warn or alert (decision and slice monitoring: ok or shift).",
    "null_share": "Share of missing values in the partition.",
    "baseline_null_share": "Share of missing values in the baseline.",
    "outside_p1_p99_share": "Numeric features: share of values below the training p1 or above its p99.",
    "unseen_share": "Boolean and categorical features: share of values the training reference never had.",
    "edges": "The bin edges (a boolean or categorical feature's category values).",
    "counts": "Rows per bin.",
    "nulls": "Missing values.",
    # Model health and monitoring, long format.
    "section": (
        "The group of measures the row belongs to "
        "(e.g. estimated_performance, attribution, partition, decision, slice:<column>)."
    ),
    "measure": "The measure.",
    "item": "What the measure is about: a decision, a rule, a feature, a class, or `all`.",
    "value": "The measure's value.",
    "low": "Lower end of its interval.",
    "high": "Upper end of its interval.",
    "reference": "The same measure on the model's reference (hold-out or training rows at registration).",
    "delta": "The change against the reference or baseline.",
    "tolerance": "How far the measure may move before it is flagged.",
    "baseline_partitions": "Partitions of the trailing window the baseline averages.",
    "baseline_rows": "Rows of the trailing window behind the baseline.",
    "p_value": "The test's p-value.",
    "q_value": "The p-value adjusted for the false discovery rate (Benjamini–Hochberg) across the partition's tests.",
    "slice_column": "The raw column monitored per value (monitoring.slices).",
    "slice_value": "Its value (rare values pooled as `(other)`).",
    "score_band": "The ten-point score band.",
    "probability_sum": "Sum of the calibrated probabilities of the group's rows.",
    "probability_sq_sum": "Sum of their squares.",
    # Champion and challenger.
    "alias": "The alias (or version) the job named the challenger by.",
    "champion_version": "The champion's model version.",
    "challenger_version": "The challenger's model version.",
    "champion_decision": "The champion's decision.",
    "challenger_decision": "The challenger's decision.",
    "champion_score": "The champion's score (binary jobs; null otherwise).",
    "challenger_score": "The challenger's score (binary jobs; null otherwise).",
    "champion_probability": "The champion's probability (a multiclass job's: of its predicted class).",
    "challenger_probability": "The challenger's probability (a multiclass job's: of its predicted class).",
    "champion_reason_codes": "The champion's reason codes.",
    "challenger_reason_codes": "The challenger's reason codes.",
    "champion_forecast": "The champion's forecast (forecast jobs; null otherwise).",
    "challenger_forecast": "The challenger's forecast (forecast jobs; null otherwise).",
    "champion_class": "The champion's predicted class (multiclass jobs; null otherwise).",
    "challenger_class": "The challenger's predicted class (multiclass jobs; null otherwise).",
    "champion_item": "The champion's side of the row (e.g. its decision in the crosstab).",
    "challenger_item": "The challenger's side of the row.",
    "champion_value": "The measure under the champion.",
    "challenger_value": "The measure under the challenger.",
    "champion": "The measure's realized value for the champion.",
    "challenger": "The measure's realized value for the challenger.",
    "delta_low": "Lower end of the paired bootstrap interval of the difference.",
    "delta_high": "Upper end of that interval.",
    "better": "The model the measure decides for (undecided while the interval holds 0).",
    "recommendation": "What to do, in plain language.",
    # The run ledger.
    "status": "The run's (or partition's) status.",
    "rows_read": "Raw rows the source gave.",
    "rows_scored": "Rows scored.",
    "rows_repaired": "Rows a guard repaired.",
    "rows_quarantined": "Rows quarantined, not scored.",
    "rows_failed": "Rows of chunks that failed.",
    "rows_fallback": "Rows scored by a fallback model.",
    "rows_with_reasons": "Rows given reason codes.",
    "rows_without_adverse_reason": "Rows whose decision needed reasons but got none (`no_reason`).",
    "rows_straddling": "Rows whose interval straddles a cut-off of the rule table.",
    "decisions": "Rows per decision (JSON).",
    "guard_counts": "Rows hit per expectation (JSON).",
    "inference": "Inference metrics: chunk latency p50/p99/max, rows/s, and the kind's own figures (JSON).",
    "started_at": "When the run started.",
    "ended_at": "When it ended.",
    "error": "The one-line error, as the CLI printed it.",
    "error_detail": "The traceback.",
    "warnings": "What failed after the outputs were published (JSON list).",
    # Leases, aliases, migrations.
    "host": "Host of the run holding the lease.",
    "pid": "Its process id.",
    "acquired_at": "When the lease was taken.",
    "expires_at": "When it expires unless renewed (the database clock).",
    "from_version": "The version the alias pointed at before (null: created).",
    "to_version": "The version it points at now (null: removed).",
    "changed_by": "Who moved it.",
    "changed_at": "When.",
    "note": "The note given with the move.",
    "id": "The migration's id.",
    "description": "What it changed.",
    "applied_at": "When this warehouse applied it.",
    # Labels.
    "outcome": "The realized outcome (binary: 1 the event, 0 not; multiclass: the class name).",
    "actual": "The realized number (forecast jobs).",
    "observed_date": "When the outcome was observed.",
    "source": "Where the label came from (the label files or the warehouse table).",
    "entity_status": "The entity's status in the partition: scored, quarantined or unknown.",
    "predictions": "Rows the partition published.",
    "predictions_labelled": "Of them, rows with a label.",
    "labels": "Labels read for the partition.",
    "labels_matched": "Labels that match a scored entity.",
    "labels_quarantined": "Labels of entities the partition quarantined.",
    "labels_unknown_entity": "Labels of entities the partition never read.",
    "labels_duplicate": "Labels repeating an entity.",
    "labels_without_outcome": "Labels with no outcome yet.",
    # Realized performance.
    "labelled": "Rows of the group with a label.",
    "events": "Labelled rows where the event happened (multiclass: rows truly of the class).",
    "observed_rate": "The realized event rate.",
    "observed_low": "Lower end of its interval (outcome_interval_level).",
    "observed_high": "Upper end of that interval.",
    "interval_level": "The level of the interval.",
    "expected_rate": "The event rate the calibrated probabilities expected.",
    "expected_events": "The events they expected.",
    "expected_within_interval": "Whether the expected rate lies inside the realized rate's interval.",
    "auc": "Realized AUC.",
    "brier": "Realized Brier score.",
    "ece": "Expected calibration error.",
    "psi_score": "PSI of the score against the previous partitions'.",
    "psi_baseline_rows": "Rows behind that PSI's baseline.",
    "actual_mean": "Mean actual.",
    "forecast_mean": "Mean forecast.",
    "mae": "Mean absolute error.",
    "rmse": "Root mean squared error.",
    "bias": "Mean of actual − forecast.",
    "mape": "Mean absolute percentage error over the non-zero actuals.",
    "smape": "Symmetric MAPE (0/0 counted as 0).",
    "coverage": "Share of actuals inside the prediction interval.",
    "mean_width": "Mean width of the prediction interval.",
    "accuracy": "Share of labelled rows whose predicted class was right.",
    "log_loss": "Log loss of the calibrated probability vector.",
    "macro_f1": "F1 averaged over the classes predicted or observed in the group.",
    "classwise_ece": "Mean over the classes of each one-vs-rest ECE.",
    "top_label_ece": "ECE of the predicted class's probability.",
    "calibration_bins": "Equal-width bins the ECEs use (monitoring.calibration_bins).",
    "class_name": "The class.",
    "predicted_rows": "Labelled rows predicted as the class.",
    "support": "Labelled rows truly of the class.",
    "precision": "Precision.",
    "recall": "Recall.",
    "f1": "F1.",
    "bin": "The calibration bin's number.",
    "bin_low": "Its lower edge.",
    "bin_high": "Its upper edge.",
    "mean_probability": "The bin's mean calibrated probability.",
    "decision": "The decision.",
    "estimate": "The measure estimated before labels.",
    "realized": "The same measure once labels landed.",
    "realized_rows": "Labelled rows behind the realized value.",
    "outside": "Whether the realized value falls outside the estimate's interval.",
    "partition_flag": (
        "Whether this flags the partition "
        "(the event rate or AUC; a forecast job's MAE or RMSE; a multiclass job's accuracy)."
    ),
}
DATASET_COLUMN_MEANINGS: dict[str, dict[str, str]] = {
    "outcome_partitions": {"status": "not scored, awaiting labels or labelled."},
    "runs": {
        "status": "running → publishing → committed → succeeded, or failed; refused for a day refused before its lease."
    },
    "decision_monitoring": {"baseline": "The measure's mean over the trailing window (monitoring.window_days)."},
    "slice_monitoring": {
        "baseline": "The same value's measure over the trailing window.",
        "detail": "What the test compared.",
    },
    "model_health": {"rows": "Rows behind the measure."},
    "outcome_labels": {"entity_id": "The labelled entity."},
}


def column_meaning(dataset: str, column: str) -> str | None:
    from tasks.contracts import CLASSIFICATION_FIELD_MEANINGS, FORECAST_FIELD_MEANINGS, PREDICTION_FIELD_MEANINGS

    contracts = {
        "predictions": PREDICTION_FIELD_MEANINGS,
        "shadow_predictions": PREDICTION_FIELD_MEANINGS,
        "forecasts": FORECAST_FIELD_MEANINGS,
        "shadow_forecasts": FORECAST_FIELD_MEANINGS,
        "classifications": CLASSIFICATION_FIELD_MEANINGS,
        "shadow_classifications": CLASSIFICATION_FIELD_MEANINGS,
    }
    if column in DATASET_COLUMN_MEANINGS.get(dataset, {}):
        return DATASET_COLUMN_MEANINGS[dataset][column]
    if column in contracts.get(dataset, {}):
        return contracts[dataset][column]
    return COLUMN_MEANINGS.get(column)
