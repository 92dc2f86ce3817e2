"""Raw margins in, the prediction contract out: one chunk at a time, one [PRED] line per chunk."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.contracts import (
    CLASSIFICATION_SCHEMA,
    FORECAST_SCHEMA,
    PREDICTION_SCHEMA,
    FeatureContributions,
    InferenceOutput,
    PredictionOutput,
)
from tasks.prediction.calibration import CalibratedProbability, ProbabilityMap
from tasks.prediction.config import PredictionConfig
from tasks.prediction.decisions import RuleDecisions, predict_rule_decisions
from tasks.prediction.forecasts import Forecast, ForecastMap
from tasks.prediction.multiclass import ClassProbabilities, ClassProbabilityMap
from tasks.prediction.reasons import ReasonTexts, predict_forecast_reason_codes, predict_reason_codes
from tasks.prediction.scores import predict_score

log = logging.getLogger("scoring.prediction")


@dataclass(frozen=True)
class DecidedChunk:
    """A chunk after calibration, scoring and rules (binary jobs: `calibrated` and `score`), after its
    forecast and interval and rules (forecast jobs: `forecast`), or after its calibrated class probabilities
    and rules (multiclass jobs: `classified`, `classes`); `reason_rows` are the rows that need reasons."""

    inference: InferenceOutput
    calibrated: CalibratedProbability | None
    score: np.ndarray | None
    rules: RuleDecisions
    reason_rows: np.ndarray
    forecast: Forecast | None = None
    classified: ClassProbabilities | None = None
    classes: tuple[str, ...] = ()
    """Multiclass jobs: the class names, in the order of the probability vector."""

    @property
    def reason_classes(self) -> np.ndarray | None:
        """Multiclass jobs: the class each reason row's contributions are for (its predicted class); None otherwise."""
        return None if self.classified is None else self.classified.predicted[self.reason_rows]

    def decided_columns(self) -> dict[str, np.ndarray]:
        """The columns the rules tested, by their contract names."""
        if self.classified is not None:
            c = self.classified
            return {
                "probability": c.probability,
                "probability_low": c.low,
                "probability_high": c.high,
                "margin": c.margin,
            }
        if self.forecast is not None:
            f = self.forecast
            return {"forecast": f.forecast, "forecast_low": f.low, "forecast_high": f.high}
        p, score = self.calibrated, self.score
        assert p is not None and score is not None, "a binary job's chunk has its calibrated probability and score"
        return {"probability": p.probability, "probability_low": p.low, "probability_high": p.high, "score": score}


def predict_decided_chunk(
    output: InferenceOutput,
    estimate_map: ProbabilityMap | ForecastMap | ClassProbabilityMap,
    config: PredictionConfig,
) -> DecidedChunk:
    """The chunk's estimates (a calibrated probability and score, a forecast and its interval, or the calibrated
    probability of every class) and the rule table's decision of every row."""
    if isinstance(estimate_map, ClassProbabilityMap):
        classified = estimate_map.predict_class_probabilities(output.margins)
        classes = tuple(estimate_map.calibrator.classes)
        rules = predict_rule_decisions(
            {
                "class": np.asarray(classes, dtype=object)[classified.predicted],
                "probability": classified.probability,
                "probability_low": classified.low,
                "probability_high": classified.high,
                "margin": classified.margin,
            },
            config.rules,
        )
        reason_rows = rules.rows_deciding(config.reasons.for_decisions)
        return DecidedChunk(
            inference=output,
            calibrated=None,
            score=None,
            rules=rules,
            reason_rows=reason_rows,
            classified=classified,
            classes=classes,
        )
    if isinstance(estimate_map, ForecastMap):
        if output.expected_error is None:
            raise ValueError(f"chunk {output.chunk_id}: a forecast needs the error model's expected error of every row")
        forecast = estimate_map.predict_forecast(output.margins, output.expected_error)
        rules = predict_rule_decisions(
            {"forecast": forecast.forecast, "forecast_low": forecast.low, "forecast_high": forecast.high}, config.rules
        )
        reason_rows = rules.rows_deciding(config.reasons.for_decisions)
        return DecidedChunk(
            inference=output, calibrated=None, score=None, rules=rules, reason_rows=reason_rows, forecast=forecast
        )
    calibrated = estimate_map.predict_calibrated_probability(output.margins)
    assert config.score is not None, "a binary job's prediction section has its score scale"
    score = predict_score(calibrated.probability, config.score)
    rules = predict_rule_decisions(
        {
            "probability": calibrated.probability,
            "probability_low": calibrated.low,
            "probability_high": calibrated.high,
            "score": score,
        },
        config.rules,
    )
    reason_rows = rules.rows_deciding(config.reasons.for_decisions)
    return DecidedChunk(inference=output, calibrated=calibrated, score=score, rules=rules, reason_rows=reason_rows)


def _fixed_lists(matrix: np.ndarray, width: int) -> pa.ListArray:
    """Rows of a rows × width matrix as one list each (the class vector of a multiclass row)."""
    flat = pa.array(np.ascontiguousarray(matrix, dtype=np.float64).reshape(-1), pa.float64())
    return pa.ListArray.from_arrays(pa.array(np.arange(0, matrix.shape[0] * width + 1, width, dtype=np.int32)), flat)


def _repeated(value: object, type_: pa.DataType, n: int) -> pa.Array:
    """`value` on each of `n` rows (~10x faster than converting a list of `n` Python objects)."""
    return pa.repeat(pa.scalar(value, type_), n)


def _rule_columns(rules: RuleDecisions) -> tuple[pa.Array, pa.Array]:
    """The decision and rule id of each row, as string columns: taken from the rule table by each row's rule
    where the rows were decided here, converted from the rows' strings where they were read back."""
    if rules.rule_index is None:
        return pa.array(rules.decision, pa.string()), pa.array(rules.rule_id, pa.string())
    at = pa.array(rules.rule_index)
    return (
        pa.array(rules.table_decisions, pa.string()).take(at),
        pa.array(rules.table_rule_ids, pa.string()).take(at),
    )


def _counts(values: pa.Array) -> dict[str, int]:
    return {row["values"]: row["counts"] for row in pc.value_counts(values).to_pylist()}


def predict_output(
    decided: DecidedChunk,
    contributions: FeatureContributions,
    config: PredictionConfig,
    *,
    run_id: str,
    job: str,
    partition_date: dt.date,
    feature_version: str,
    reason_texts: ReasonTexts | None = None,
) -> PredictionOutput:
    """The chunk's rows in PREDICTION_SCHEMA, with reason codes on every row that needs them.

    `reason_texts` (from predict_reason_texts) is needed when a reason's text depends on the value.
    """
    if not np.array_equal(contributions.row_index, decided.reason_rows):
        raise ValueError("contributions were computed for other rows than those needing reasons")
    out = decided.inference
    n = len(out.entity_ids)
    forecasts = decided.forecast is not None
    classified = decided.classified
    reason_classes = decided.reason_classes
    if reason_classes is not None and (
        contributions.explained_class is None or not np.array_equal(contributions.explained_class, reason_classes)
    ):
        raise ValueError("contributions were computed for other classes than the rows' predicted classes")
    reasons = (predict_forecast_reason_codes if forecasts else predict_reason_codes)(
        contributions, config.reasons, reason_texts
    )
    # Rows without reasons get empty lists: spread the explained rows' list lengths over the chunk
    # (reason_rows ascend, so the flat values keep their order).
    lengths = np.zeros(n, dtype=np.int64)
    lengths[decided.reason_rows] = np.diff(reasons.codes.offsets.to_numpy())
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    codes = pa.ListArray.from_arrays(offsets, reasons.codes.flatten())
    texts = pa.ListArray.from_arrays(offsets, reasons.texts.flatten())
    decision, rule_id = _rule_columns(decided.rules)
    columns = {
        "run_id": _repeated(run_id, pa.string(), n),
        "job": _repeated(job, pa.string(), n),
        "partition_date": _repeated(partition_date, pa.date32(), n),
        "entity_id": out.entity_ids.cast(pa.string()),
    }
    if classified is not None:
        names = pa.array(decided.classes, pa.string())
        k = len(decided.classes)
        columns |= {
            "predicted_class": names.take(pa.array(classified.predicted)),
            "probability": pa.array(classified.probability, pa.float64()),
            "probability_low": pa.array(classified.low, pa.float64()),
            "probability_high": pa.array(classified.high, pa.float64()),
            "class_probabilities": _fixed_lists(classified.probabilities, k),
            "runner_up_class": names.take(pa.array(classified.runner_up)),
            "margin": pa.array(classified.margin, pa.float64()),
        }
    elif decided.forecast is not None:
        columns |= {
            "forecast": pa.array(decided.forecast.forecast, pa.float64()),
            "forecast_low": pa.array(decided.forecast.low, pa.float64()),
            "forecast_high": pa.array(decided.forecast.high, pa.float64()),
            "expected_error": pa.array(out.expected_error, pa.float64()),
        }
    else:
        calibrated = decided.calibrated
        assert calibrated is not None, "a binary job's chunk has its calibrated probability"
        columns |= {
            "probability": pa.array(calibrated.probability, pa.float64()),
            "probability_low": pa.array(calibrated.low, pa.float64()),
            "probability_high": pa.array(calibrated.high, pa.float64()),
            "score": pa.array(decided.score, pa.int16()),
        }
    columns |= {
        "decision": decision,
        "rule_id": rule_id,
        "reason_codes": codes,
        "reason_texts": texts,
        **(
            {"raw_margins": _fixed_lists(out.margins, out.margins.shape[1])}
            if classified is not None
            else {"raw_margin": pa.array(out.margins, pa.float64())}
        ),
        "model_name": _repeated(out.model_name, pa.string(), n),
        "model_version": _repeated(out.model_version, pa.string(), n),
        "feature_version": _repeated(feature_version, pa.string(), n),
    }
    schema = CLASSIFICATION_SCHEMA if classified is not None else FORECAST_SCHEMA if forecasts else PREDICTION_SCHEMA
    table = pa.Table.from_pydict(columns, schema=schema)
    decisions = _counts(decision)
    rules = _counts(rule_id)
    straddling = int(decided.rules.straddling.sum())
    if classified is not None:
        predicted = pc.value_counts(columns["predicted_class"]).to_pylist()
        log.info(
            "[PRED] entity=%s chunk=%d rows=%d business_rule=%s final_decision=%s predicted_class=%s "
            "confidence_score=%.3f reasons_share=%.3f no_class_reason=%d straddling_share=%.3f",
            job,
            out.chunk_id,
            n,
            rules,
            decisions,
            {r["values"]: r["counts"] for r in predicted},
            float(classified.probability.mean()) if n else 0.0,
            len(decided.reason_rows) / n if n else 0.0,
            reasons.without_pushing_factor,
            straddling / n if n else 0.0,
        )
    elif decided.forecast is not None:
        f = decided.forecast
        log.info(
            "[PRED] entity=%s chunk=%d rows=%d business_rule=%s final_decision=%s forecast_mean=%.4g "
            "interval_width_mean=%.4g reasons_share=%.3f straddling_share=%.3f",
            job,
            out.chunk_id,
            n,
            rules,
            decisions,
            float(f.forecast.mean()) if n else 0.0,
            float((f.high - f.low).mean()) if n else 0.0,
            len(decided.reason_rows) / n if n else 0.0,
            straddling / n if n else 0.0,
        )
    else:
        assert decided.score is not None, "a binary job's chunk has its score"
        # The mean score under the job's own name for it (`propensity_score_mean=`), as its pages say it.
        score_key = "_".join(config.score.name.lower().split()) if config.score is not None else "score"
        log.info(
            "[PRED] entity=%s chunk=%d rows=%d business_rule=%s final_decision=%s %s_mean=%.1f "
            "reasons_share=%.3f no_reason=%d straddling_share=%.3f",
            job,
            out.chunk_id,
            n,
            rules,
            decisions,
            score_key,
            float(decided.score.mean()) if n else 0.0,
            len(decided.reason_rows) / n if n else 0.0,
            reasons.without_pushing_factor,
            straddling / n if n else 0.0,
        )
    return PredictionOutput(
        chunk_id=out.chunk_id,
        table=table,
        decisions=decisions,
        rules=rules,
        rows_needing_reasons=int(len(decided.reason_rows)),
        rows_without_adverse_reason=reasons.without_pushing_factor,
        straddling_rows=straddling,
    )
