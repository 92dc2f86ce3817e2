"""What crosses the inference → prediction boundary, and the prediction contract written out.

Inference speaks in raw engine outputs (margins, contributions, latency, device); prediction
speaks in business terms (probability, interval, score, decision, reasons). The DTOs hold whole
chunks as arrays — never one object per row — and check their invariants on construction.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks.catalog import CLASSIFICATION_SCHEMA, FORECAST_SCHEMA, PREDICTION_SCHEMA

FeatureKind = Literal["numeric", "boolean", "categorical"]
"""How a feature's values are read: as numbers, as true/false, or as the codes of categories. Job specs declare it
(tasks/features/config.py), and the reason texts of the prediction layer depend on it."""


class _ArrayModel(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)


class InferenceInput(_ArrayModel):
    """One chunk of model input: a C-contiguous float32 matrix in the model's feature order."""

    chunk_id: int = Field(ge=0)
    entity_ids: pa.Array
    features: np.ndarray
    feature_names: tuple[str, ...]

    @model_validator(mode="after")
    def _matrix_matches_names(self) -> InferenceInput:
        f = self.features
        if f.dtype != np.float32 or f.ndim != 2 or not f.flags.c_contiguous:
            raise ValueError(
                f"chunk {self.chunk_id}: features must be a 2-d C-contiguous float32 array, "
                f"got dtype={f.dtype} ndim={f.ndim} c_contiguous={f.flags.c_contiguous}"
            )
        if f.shape[1] != len(self.feature_names):
            raise ValueError(f"chunk {self.chunk_id}: {f.shape[1]} feature columns but {len(self.feature_names)} names")
        if f.shape[0] != len(self.entity_ids):
            raise ValueError(f"chunk {self.chunk_id}: {f.shape[0]} rows but {len(self.entity_ids)} entity ids")
        return self


class InferenceOutput(_ArrayModel):
    """Raw engine output of one chunk: one margin per row (log-odds for a binary job, the link scale of
    a forecast job's objective) or, for a multiclass job, one per row and class (rows × classes, whose
    row-wise softmax is the model's own probability vector), plus how it was computed; a forecast job's
    error model adds each row's expected absolute error."""

    chunk_id: int = Field(ge=0)
    entity_ids: pa.Array
    margins: np.ndarray
    model_name: str
    model_version: str
    device_type: str
    latency_ms: float = Field(ge=0)
    expected_error: np.ndarray | None = Field(
        default=None,
        description="Forecast jobs: the error model's expected |actual − forecast| per row, the interval's scale.",
    )

    @model_validator(mode="after")
    def _one_margin_per_row(self) -> InferenceOutput:
        if self.margins.ndim not in (1, 2) or self.margins.shape[0] != len(self.entity_ids):
            raise ValueError(
                f"chunk {self.chunk_id}: margins shape {self.margins.shape} does not match "
                f"{len(self.entity_ids)} entity ids"
            )
        if not np.isfinite(self.margins).all():
            raise ValueError(f"chunk {self.chunk_id}: the engine returned non-finite margins")
        if self.expected_error is not None and (
            self.expected_error.shape != self.margins.shape or not np.isfinite(self.expected_error).all()
        ):
            raise ValueError(
                f"chunk {self.chunk_id}: the error model returned {self.expected_error.shape} values, not one finite value per row"
            )
        return self


class FeatureContributions(_ArrayModel):
    """Exact per-feature contributions to the margin (TreeSHAP) for a subset of a chunk's rows."""

    row_index: np.ndarray = Field(description="Positions in the chunk of the explained rows.")
    values: np.ndarray = Field(description="rows × features, bias column removed.")
    feature_names: tuple[str, ...]
    explained_by: str = Field(
        default="xgboost", description="`table_treeshap` (the load-checked kernel) or `xgboost` (pred_contribs)."
    )
    tie_recomputed_rows: int = Field(
        default=0, ge=0, description="Rows the kernel explained whose top-k was near a tie, so XGBoost recomputed them."
    )
    feature_values: np.ndarray | None = Field(
        default=None,
        description="rows × features: the explained rows' own model inputs (float32, NaN where missing), for reason texts that depend on the value.",
    )

    explained_class: np.ndarray | None = Field(
        default=None,
        description="Multiclass jobs: the class index each explained row's contributions are for (its predicted class).",
    )

    @model_validator(mode="after")
    def _shape(self) -> FeatureContributions:
        expected = (self.row_index.shape[0], len(self.feature_names))
        if self.values.shape != expected:
            raise ValueError(f"contributions shape {self.values.shape}, expected {expected}")
        if self.feature_values is not None and self.feature_values.shape != expected:
            raise ValueError(f"feature_values shape {self.feature_values.shape}, expected {expected}")
        return self


# The prediction contract's schema is the catalog's PREDICTIONS (tasks/catalog.py), imported above
# so `tasks.contracts.PREDICTION_SCHEMA` stays where the inference / prediction layers read it.
PREDICTION_FIELD_MEANINGS = {
    "run_id": "The run that wrote the row; joins to the `runs` ledger.",
    "job": "The job spec that scored the row.",
    "partition_date": "The raw partition the row came from.",
    "entity_id": "The scored entity: the value of the job's entity column (a customer, a turbine window, an order).",
    "probability": "Calibrated probability of the job's event.",
    "probability_low": "Lower end of the credible interval for the event rate of rows like this one.",
    "probability_high": "Upper end of that interval.",
    # The model card puts the job's own words here (prediction.score.name and .higher).
    "score": "The job's score, 0–100, from the probability; higher: the event is more likely.",
    "decision": "What to do with the entity.",
    "rule_id": "The one threshold rule that made the decision.",
    "reason_codes": "Codes of the features that pushed most toward the event, strongest first.",
    "reason_texts": "The same reasons in business language.",
    "raw_margin": "The model's raw log-odds output, before calibration (for audit).",
    "model_name": "Registry name of the final model.",
    "model_version": "Registry version that actually scored the row (a fallback version if one was used).",
    "feature_version": "Version of the feature module that computed the inputs.",
}


FORECAST_FIELD_MEANINGS = {
    "run_id": PREDICTION_FIELD_MEANINGS["run_id"],
    "job": PREDICTION_FIELD_MEANINGS["job"],
    "partition_date": PREDICTION_FIELD_MEANINGS["partition_date"],
    "entity_id": "The forecast entity: the value of the job's entity column (a store and item, a customer, a claim).",
    "forecast": "The model's forecast of the job's target (target.name), on its scale; never negative for a count.",
    "forecast_low": "Lower end of the prediction interval: the actual lands in [forecast_low, forecast_high] for the spec's interval_level of rows (split conformal).",
    "forecast_high": "Upper end of that interval.",
    "expected_error": "The expected |actual − forecast| of this row (the error model's estimate): the interval's scale; its mean is the partition's estimated MAE.",
    "decision": PREDICTION_FIELD_MEANINGS["decision"],
    "rule_id": PREDICTION_FIELD_MEANINGS["rule_id"],
    "reason_codes": "Codes of the features that moved the forecast most, strongest first, suffixed _UP (raised it) or _DOWN (lowered it).",
    "reason_texts": 'The same reasons in business language ("Rain lowered the forecast").',
    "raw_margin": "The model's raw output on its link scale (the forecast itself, or its log for Poisson, Tweedie and gamma objectives).",
    "model_name": PREDICTION_FIELD_MEANINGS["model_name"],
    "model_version": PREDICTION_FIELD_MEANINGS["model_version"],
    "feature_version": PREDICTION_FIELD_MEANINGS["feature_version"],
}


CLASSIFICATION_FIELD_MEANINGS = {
    "run_id": PREDICTION_FIELD_MEANINGS["run_id"],
    "job": "The job spec that classified the row.",
    "partition_date": PREDICTION_FIELD_MEANINGS["partition_date"],
    "entity_id": "The classified entity: the value of the job's entity column (a ticket, a machine, a transaction).",
    "predicted_class": "The most probable class (target.classes); ties go to the class listed first.",
    "probability": "Calibrated probability that the entity belongs to predicted_class.",
    "probability_low": "Lower end of the credible interval of that probability, from the calibration hold-out's rows like this one (wide where it had few).",
    "probability_high": "Upper end of that interval.",
    "class_probabilities": "The calibrated probability of every class, in target.classes order; they add up to 1.",
    "runner_up_class": "The second most probable class.",
    "margin": "probability minus the runner-up's probability: how clearly the predicted class won.",
    "decision": PREDICTION_FIELD_MEANINGS["decision"],
    "rule_id": PREDICTION_FIELD_MEANINGS["rule_id"],
    "reason_codes": "Codes of the features that pushed most toward predicted_class, strongest first.",
    "reason_texts": "The same reasons in business language.",
    "raw_margins": "The model's raw per-class outputs before calibration (their softmax is the model's own probabilities), in target.classes order.",
    "model_name": PREDICTION_FIELD_MEANINGS["model_name"],
    "model_version": "Registry version that actually classified the row (a fallback version if one was used).",
    "feature_version": PREDICTION_FIELD_MEANINGS["feature_version"],
}


class PredictionOutput(_ArrayModel):
    """The business result of one chunk, conforming to PREDICTION_SCHEMA (binary jobs), FORECAST_SCHEMA
    (forecast jobs) or CLASSIFICATION_SCHEMA (multiclass jobs), with its summary."""

    chunk_id: int = Field(ge=0)
    table: pa.Table
    decisions: dict[str, int] = Field(description="Rows per decision.")
    rules: dict[str, int] = Field(description="Rows per rule id.")
    rows_needing_reasons: int = Field(ge=0)
    rows_without_adverse_reason: int = Field(ge=0)
    straddling_rows: int = Field(ge=0, description="Rows whose interval contains a decision cut-off.")

    @model_validator(mode="after")
    def _conforms(self) -> PredictionOutput:
        if not any(self.table.schema.equals(s) for s in (PREDICTION_SCHEMA, FORECAST_SCHEMA, CLASSIFICATION_SCHEMA)):
            raise ValueError(
                f"chunk {self.chunk_id}: prediction table matches none of PREDICTION_SCHEMA, FORECAST_SCHEMA, CLASSIFICATION_SCHEMA"
            )
        if sum(self.decisions.values()) != self.table.num_rows:
            raise ValueError(f"chunk {self.chunk_id}: decisions do not cover every row")
        return self
