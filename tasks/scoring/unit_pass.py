"""One work unit scored in one pass per chunk: guard, features, inference, the decision (once), the
contributions of the rows the decision says need reasons, then the prediction contract, staged as one
Parquet file per chunk (`scored_unit`).

Where the task runner sends inference to other workers (GPUs) than prediction, the unit's pass is cut
in two at the layer boundary: `inferred_unit` hands each decided chunk and the sparse contributions
of its explained rows over in an Arrow IPC file, and `predicted_unit` turns them into the contract
with no inference engine loaded (a `PredictionPlan` is all it needs)."""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import logging
import os
import resource
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc  # noqa: F401  (pa.ipc: the inference → prediction handoff files)

from tasks.catalog import DECISION_FLIPS, SHADOW_CLASSIFICATIONS, SHADOW_FORECASTS, SHADOW_PREDICTIONS
from tasks.contracts import FeatureContributions, InferenceInput, InferenceOutput
from tasks.errors import DeviceUnavailable, InferenceFailure, ModelArtifactError, environment_fault
from tasks.guards import GuardCounts, GuardedChunk, guarded_chunk
from tasks.guards.duplicates import chunk_duplicate_mask, quarantined_rows_between
from tasks.inference.engine import InferenceEngine
from tasks.monitoring.class_distribution import ClassDistribution
from tasks.monitoring.decisions import prediction_groups
from tasks.monitoring.forecast_distribution import ForecastDistribution, reason_code_counts
from tasks.monitoring.health import HealthAccumulator, attribution_sample, attribution_share
from tasks.monitoring.shadow import ShadowAccumulator, flipped_rows
from tasks.monitoring.slices import chunk_slice_counts, summed_slice_counts
from tasks.prediction.calibration import CalibratedProbability
from tasks.prediction.decisions import RuleDecisions
from tasks.prediction.forecasts import Forecast
from tasks.prediction.multiclass import ClassProbabilities
from tasks.prediction.outputs import DecidedChunk, predict_decided_chunk, predict_output
from tasks.quality.drift import FORECAST_DRIFT_NAME, SCORE_DRIFT_NAME, DriftAccumulator
from tasks.scoring.prepared import PredictionPlan, PreparedJob
from tasks.scoring.units import RunDeadline, WorkUnit, check_not_stopped, unit_chunks
from tasks.sinks.parquet_store import OutputDirs, staging_dir, write_staged_chunk

log = logging.getLogger("scoring.run")


def _write_guard_outputs(guarded: GuardedChunk, dirs: OutputDirs, chunk: ChunkRef) -> None:
    if guarded.quarantined.height:
        _write_quarantine(guarded.quarantined, dirs, chunk, "guards")
    if guarded.actions.height:
        actions = guarded.actions.rename({"column": "column_name"})
        write_staged_chunk(dirs.guard_actions, chunk.run_id, chunk.chunk_id, chunk.stamped(actions))


def _write_quarantine(rows: pl.DataFrame, dirs: OutputDirs, chunk: ChunkRef, part: str) -> None:
    """Rows that were not scored, with why and the row itself as JSON, so they can be replayed."""
    quarantined = rows.select(
        pl.col(chunk.entity_column).cast(pl.String).alias("entity_id"),
        "failed_expectations",
        pl.struct(pl.exclude("failed_expectations")).struct.json_encode().alias("raw_row"),
    )
    write_staged_chunk(dirs.quarantine, chunk.run_id, chunk.chunk_id, chunk.stamped(quarantined), part=part)


@dataclass(frozen=True)
class ChunkRef:
    run_id: str
    job: str
    partition_date: dt.date
    chunk_id: int
    entity_column: str

    def stamped(self, frame: pl.DataFrame) -> pa.Table:
        return frame.select(
            pl.lit(self.run_id).alias("run_id"),
            pl.lit(self.job).alias("job"),
            pl.lit(self.partition_date).alias("partition_date"),
            pl.all(),
        ).to_arrow()


def _inferred(prepared: PreparedJob, batch: InferenceInput) -> tuple[InferenceInput, InferenceOutput]:
    """Feature models first (each adds one column), then the final model's raw outputs."""
    features = batch.features
    for _, loaded in prepared.feature_models:
        extra = loaded.engine.inference_outputs(batch).margins.astype(np.float32)
        features = np.ascontiguousarray(np.column_stack([features, extra]))
    full = (
        batch
        if features is batch.features
        else InferenceInput(
            chunk_id=batch.chunk_id,
            entity_ids=batch.entity_ids,
            features=features,
            feature_names=prepared.model_features,
        )
    )
    return full, prepared.model.inference_outputs(full)


_NOT_RETRIED = (DeviceUnavailable, InferenceFailure, ModelArtifactError)
"""A wrong device or a model that breaks its contract fails the same way on every attempt and chunk."""


def _explained_chunk(
    engine: InferenceEngine, inputs: InferenceInput, decided: DecidedChunk, top_k: int
) -> tuple[DecidedChunk, FeatureContributions, int]:
    """The chunk with the contributions of the rows its decisions say need reasons, and how many of those
    rows go without because the engine has none (an ONNX graph: reasons off, counted, never a failed
    chunk). An engine is asked only when it explains and some row needs reasons."""
    unavailable = engine.reasons_unavailable is not None
    if unavailable or decided.reason_rows.size == 0:
        contributions = FeatureContributions(
            row_index=np.empty(0, dtype=np.intp),
            values=np.empty((0, len(inputs.feature_names))),
            feature_names=inputs.feature_names,
            feature_values=np.empty((0, len(inputs.feature_names)), dtype=np.float32),
            explained_by="none" if unavailable else getattr(engine, "contributions_kernel", "none"),
            explained_class=None if decided.classified is None else np.empty(0, dtype=np.int64),
        )
        return (
            replace(decided, reason_rows=contributions.row_index),
            contributions,
            int(decided.reason_rows.size) if unavailable else 0,
        )
    if decided.classified is not None:
        return (
            decided,
            engine.inference_contributions(inputs, decided.reason_rows, top_k=top_k, classes=decided.reason_classes),
            0,
        )
    return decided, engine.inference_contributions(inputs, decided.reason_rows, top_k=top_k), 0


def _with_retries(attempts: int, what: str, fn):
    """`fn()`, tried `attempts` times; configuration and artifact errors are not retried."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except _NOT_RETRIED:
            raise
        except Exception as exc:
            log.warning("[INF] %s failed on attempt %d of %d: %s: %s", what, attempt, attempts, type(exc).__name__, exc)
            if attempt == attempts:
                raise


def _runtime_message(exc: BaseException, limit: int = 400) -> str:
    """The exception as one line: ONNX Runtime spreads what it found (e.g. the dimension it got and
    the one it expected) over several lines."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_HANDOFF_FEATURES = b"feature_names"
_RULED_COLUMNS = ("decision", "rule_id", "straddling")


def _handoff_path(dirs: OutputDirs, run_id: str, chunk_id: int, *, shadow: bool = False) -> Path:
    return staging_dir(dirs.inference_handoff, run_id) / f"chunk-{chunk_id:05d}{'-shadow' if shadow else ''}.arrow"


def _sparse_rows(values: np.ndarray, rows: np.ndarray, n: int, dtype: pa.DataType) -> pa.ListArray:
    """Row i of `values` as the list of row `rows[i]` of n; every other row null (no values stored)."""
    lengths = np.zeros(n, dtype=np.int32)
    lengths[rows] = values.shape[1]
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    valid = np.zeros(n, dtype=bool)
    valid[rows] = True
    return pa.ListArray.from_arrays(offsets, pa.array(values.ravel(), type=dtype), mask=pa.array(~valid))


def _write_handoff(
    path: Path, decided: DecidedChunk, contributions: FeatureContributions, *, with_values: bool
) -> None:
    """The decided chunk for its prediction task: margins and decisions per row, and for the rows that
    need reasons their contributions and, when a reason's text depends on the value (`with_values`),
    their own feature values; the other rows' lists are null and cost nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    inferred, n = decided.inference, len(decided.inference.margins)
    classified = decided.classified
    columns = {
        "entity_id": inferred.entity_ids,
        # A multiclass chunk's `margin` is the decided margin to the runner-up (decided_columns): its raw margins, one list
        # a row, go under their contract name.
        **(
            {"margin": pa.array(inferred.margins, type=pa.float64())}
            if classified is None
            else {"raw_margins": _sparse_rows(inferred.margins, np.arange(n), n, pa.float64())}
        ),
        **(
            {}
            if inferred.expected_error is None
            else {"expected_error": pa.array(inferred.expected_error, type=pa.float64())}
        ),
        **decided.decided_columns(),
        **(
            {}
            if classified is None
            else {
                "predicted": classified.predicted,
                "runner_up": classified.runner_up,
                "class_probabilities": _sparse_rows(classified.probabilities, np.arange(n), n, pa.float64()),
            }
        ),
        "decision": pa.array(decided.rules.decision, pa.string()),
        "rule_id": pa.array(decided.rules.rule_id, pa.string()),
        "straddling": decided.rules.straddling,
        "contributions": _sparse_rows(contributions.values, contributions.row_index, n, pa.float64()),
    }
    if with_values and contributions.feature_values is not None:
        columns["feature_values"] = _sparse_rows(contributions.feature_values, contributions.row_index, n, pa.float32())
    table = pa.table(columns).replace_schema_metadata(
        {
            _HANDOFF_FEATURES: json.dumps(list(contributions.feature_names)).encode(),
            b"inference": json.dumps(
                {
                    "model_name": inferred.model_name,
                    "model_version": inferred.model_version,
                    "device_type": inferred.device_type,
                    "latency_ms": inferred.latency_ms,
                }
            ).encode(),
            b"contributions": json.dumps(
                {"explained_by": contributions.explained_by, "tie_recomputed_rows": contributions.tie_recomputed_rows}
            ).encode(),
            b"classes": json.dumps(list(decided.classes)).encode(),
        }
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read_handoff(path: Path, chunk_id: int) -> tuple[DecidedChunk, FeatureContributions]:
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all().combine_chunks()
    meta = table.schema.metadata
    names = tuple(json.loads(meta[_HANDOFF_FEATURES]))
    forecasts = "forecast" in table.column_names
    classes = tuple(json.loads(meta.get(b"classes", b"[]")))

    def matrix(name: str) -> np.ndarray:
        return table.column(name).combine_chunks().flatten().to_numpy().reshape(table.num_rows, len(classes))

    inferred = InferenceOutput(
        chunk_id=chunk_id,
        entity_ids=table.column("entity_id").combine_chunks(),
        margins=matrix("raw_margins") if classes else table.column("margin").to_numpy(),
        **json.loads(meta[b"inference"]),
        expected_error=table.column("expected_error").to_numpy() if forecasts else None,
    )
    decided_names = (
        ("forecast", "forecast_low", "forecast_high")
        if forecasts
        else ("probability", "probability_low", "probability_high", "margin", "predicted", "runner_up")
        if classes
        else ("probability", "probability_low", "probability_high", "score")
    )
    column = {name: table.column(name).to_numpy(zero_copy_only=False) for name in (*decided_names, *_RULED_COLUMNS)}
    contributions = table.column("contributions").combine_chunks()
    row_index = np.flatnonzero(contributions.is_valid().to_numpy(zero_copy_only=False))
    shape = (len(row_index), len(names))

    def explained(name: str, dtype: type) -> np.ndarray:
        return table.column(name).combine_chunks().flatten().to_numpy().astype(dtype, copy=False).reshape(shape)

    rules = RuleDecisions(column["decision"], column["rule_id"], column["straddling"])
    explained_class = None
    if classes:
        classified = ClassProbabilities(
            probabilities=matrix("class_probabilities"),
            predicted=column["predicted"],
            probability=column["probability"],
            low=column["probability_low"],
            high=column["probability_high"],
            runner_up=column["runner_up"],
            margin=column["margin"],
        )
        decided = DecidedChunk(
            inference=inferred,
            calibrated=None,
            score=None,
            rules=rules,
            reason_rows=row_index,
            classified=classified,
            classes=classes,
        )
        explained_class = classified.predicted[row_index]
    elif forecasts:
        decided = DecidedChunk(
            inference=inferred,
            calibrated=None,
            score=None,
            rules=rules,
            reason_rows=row_index,
            forecast=Forecast(column["forecast"], column["forecast_low"], column["forecast_high"]),
        )
    else:
        decided = DecidedChunk(
            inference=inferred,
            calibrated=CalibratedProbability(
                column["probability"], column["probability_low"], column["probability_high"]
            ),
            score=column["score"],
            rules=rules,
            reason_rows=row_index,
        )
    return decided, FeatureContributions(
        row_index=row_index,
        values=explained("contributions", np.float64),
        feature_names=names,
        feature_values=explained("feature_values", np.float32) if "feature_values" in table.column_names else None,
        explained_class=explained_class,
        **json.loads(meta[b"contributions"]),
    )


@dataclass
class UnitInference:
    """The inference side's counts of one unit (and, when the pass is cut in two, the chunks whose
    decided outputs wait in handoff files)."""

    unit_id: int
    chunk_ids: list[int] = field(default_factory=list)
    chunks: int = 0
    rows_read: int = 0
    rows_failed: int = 0
    failed_chunks: list[dict[str, Any]] = field(default_factory=list)
    guard: GuardCounts = field(default_factory=GuardCounts)
    latency_ms: list[float] = field(default_factory=list)
    drift: DriftAccumulator | None = None
    peak_rss_mb: float = 0.0
    explained_rows: Counter[str] = field(default_factory=Counter)
    """Rows whose reasons' contributions each explainer computed (`table_treeshap` or `xgboost`)."""
    tie_recomputed_rows: int = 0
    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    """The process that ran the unit's inference: on Dask, one of the cluster's workers."""
    health: HealthAccumulator = field(default_factory=HealthAccumulator)
    """Sums of the unit's model health (estimated performance, attribution, multivariate drift)."""
    slice_counts: list[pl.DataFrame] = field(default_factory=list)
    """Each chunk's predictions counted per slice value (`chunk_slice_counts`)."""
    rows_reasons_unavailable: int = 0
    """Rows whose decision needed reasons that the final model's engine cannot give (an ONNX graph)."""
    challenger_rows_failed: int = 0
    challenger_failures: list[str] = field(default_factory=list)
    """Chunks the challenger could not shadow, one line each; the champion's rows there are scored all the same."""


@dataclass
class UnitPrediction:
    unit_id: int
    rows_scored: int = 0
    rows_with_reasons: int = 0
    rows_without_adverse_reason: int = 0
    rows_straddling: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    reason_codes: Counter[str] = field(default_factory=Counter)
    """Rows given each reason code, for the run's top reasons in its key numbers and page."""
    drift: DriftAccumulator | None = None
    decision_groups: list[pl.DataFrame] = field(default_factory=list)
    """Each chunk's predictions counted per decision-monitoring group (`prediction_groups`), so
    decision monitoring never re-reads the partition."""
    peak_rss_mb: float = 0.0
    shadow: ShadowAccumulator | None = None
    """Champion × challenger sums of the unit's chunks; None when no challenger shadows the run."""
    forecasts: ForecastDistribution | None = None
    """A forecast job's forecasts, intervals and reason codes summed over the unit's chunks (None for a binary job),
    so the run page draws their distribution without re-reading the partition."""
    classifications: ClassDistribution | None = None
    """A multiclass job's predicted classes, probabilities, margins, decisions and reason codes summed over the unit's
    chunks (None for the other kinds), for the run page's class mix."""


@dataclass
class ScoredUnit:
    inference: UnitInference
    prediction: UnitPrediction


def _libc_malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator returns pages its own way
        return None


_MALLOC_TRIM = _libc_malloc_trim()
_TRIM_EVERY_S = 0.5
_trimmed_at = [0.0]


def _returned_free_memory() -> None:
    """Give the pages malloc holds free back to the system, at most every half second. glibc keeps what each
    thread's arena freed for its next allocation, and with two workers the chunks' freed tables left a 10 M-row run
    ~100 MB above its live memory by the end of the pass; a trim takes ~6 ms."""
    now = time.monotonic()
    if _MALLOC_TRIM is None or now - _trimmed_at[0] < _TRIM_EVERY_S:
        return
    _trimmed_at[0] = now
    _MALLOC_TRIM(0)


def _peak_rss_mb() -> float:
    # The worker process's high-water mark: a scoring run's memory must not grow with the partition.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _decided_chunks(
    prepared: PreparedJob,
    unit: WorkUnit,
    result: UnitInference,
    *,
    run_id: str,
    partition_date: dt.date,
    chunk_rows: int,
    dirs: OutputDirs,
    deadline: RunDeadline | None = None,
) -> Iterator[tuple[DecidedChunk, FeatureContributions, Shadow | None]]:
    """Guard, build features, infer, decide and explain every chunk of `unit`, counting into `result`.

    Which rows need reasons is a business rule, so the prediction layer's pure decision function
    decides the chunk here, once; only those rows' contributions are computed, on the same device
    as the margins.
    """
    spec, fm, engine = prepared.spec, prepared.features, prepared.model.engine
    plan = prepared.prediction_plan
    duplicate_rows = quarantined_rows_between(unit.duplicate_rows_file, unit.first_row, unit.rows)
    for chunk_id, table in unit_chunks(unit, chunk_rows):
        check_not_stopped(run_id)
        if deadline is not None:
            deadline.check()
        chunk = ChunkRef(run_id, spec.name, partition_date, chunk_id, spec.entity_column)
        guarded = guarded_chunk(
            pl.from_arrow(table),
            prepared.suite,
            entity_column=spec.entity_column,
            duplicate_rows=chunk_duplicate_mask(duplicate_rows, unit.first_row + result.rows_read, table.num_rows),
        )
        result.rows_read += table.num_rows
        result.chunks += 1
        result.guard.merge(guarded.counts)
        _write_guard_outputs(guarded, dirs, chunk)
        if guarded.scorable.height == 0:
            continue
        batch = InferenceInput(
            chunk_id=chunk_id,
            entity_ids=guarded.scorable[spec.entity_column].to_arrow(),
            features=fm.feature_matrix(guarded.scorable),
            feature_names=tuple(fm.FEATURES),
        )

        def decided_and_explained() -> tuple[InferenceInput, DecidedChunk, FeatureContributions, int]:
            # Called within this iteration only (by _with_retries below): `batch` is this chunk's.
            full, inferred = _inferred(prepared, batch)  # noqa: B023
            decided = predict_decided_chunk(inferred, plan.estimate_map, plan.config)
            return full, *_explained_chunk(engine, full, decided, plan.config.reasons.top_k)

        try:
            full, decided, contributions, unexplained = _with_retries(
                1 + spec.inference.retries, f"chunk {chunk_id} of {spec.name} {partition_date}", decided_and_explained
            )
        except _NOT_RETRIED:
            raise
        except Exception as exc:
            failed = guarded.scorable.with_columns(
                pl.lit([f"inference_failed({type(exc).__name__})"], dtype=pl.List(pl.String)).alias(
                    "failed_expectations"
                )
            )
            _write_quarantine(failed, dirs, chunk, "inference")
            result.rows_failed += failed.height
            result.failed_chunks.append(
                {"chunk": chunk_id, "rows": failed.height, "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        result.explained_rows[contributions.explained_by] += contributions.row_index.shape[0]
        result.rows_reasons_unavailable += unexplained
        result.tie_recomputed_rows += contributions.tie_recomputed_rows
        result.latency_ms.append(decided.inference.latency_ms)
        result.drift.add_matrix(prepared.model_features, full.features)
        _health_of_chunk(
            prepared,
            result,
            full,
            decided,
            guarded.scorable,
            first_row=unit.first_row + result.rows_read - table.num_rows,
            partition_rows=unit.partition_rows,
        )
        yield decided, contributions, _shadow_of_chunk(prepared, full, result)


Shadow = tuple[DecidedChunk, FeatureContributions]
"""The challenger's decided chunk and the contributions of the rows its own decisions explain."""


def _shadow_of_chunk(prepared: PreparedJob, full: InferenceInput, result: UnitInference) -> Shadow | None:
    """The challenger's pass over the chunk the champion just scored: the same model inputs (its own
    columns of them), its own calibration (or its own error model and conformal interval), the same
    rules. A failure is counted, not raised, unless the spec says a failing challenger fails the run."""
    if prepared.challenger is None:
        return None
    plan, challenger = prepared.prediction_plan, prepared.challenger
    engine = challenger.engine
    columns = prepared.challenger_columns
    inputs = (
        full
        if np.array_equal(columns, np.arange(full.features.shape[1]))
        else InferenceInput(
            chunk_id=full.chunk_id,
            entity_ids=full.entity_ids,
            features=np.ascontiguousarray(full.features[:, columns]),
            feature_names=tuple(engine.metadata.features),
        )
    )

    def decided_and_explained() -> Shadow:
        decided = predict_decided_chunk(challenger.inference_outputs(inputs), plan.challenger.estimate_map, plan.config)
        decided, contributions, _ = _explained_chunk(engine, inputs, decided, plan.config.reasons.top_k)
        return decided, contributions

    try:
        return _with_retries(
            1 + prepared.spec.inference.retries,
            f"challenger {plan.challenger.version} on chunk {full.chunk_id}",
            decided_and_explained,
        )
    except Exception as exc:
        if plan.challenger_failure == "fail" and environment_fault(exc) is None:
            # A runtime's own error (ONNX Runtime's, XGBoost's) is no ScoringError: unwrapped it would be a bug's
            # exit 1 with a traceback, and would not say that the challenger, not the champion, failed, nor where.
            raise InferenceFailure(
                f"challenger {plan.challenger.named} (model {engine.metadata.name} {plan.challenger.version}) failed on chunk "
                f"{full.chunk_id} of {prepared.spec.name} and model.challenger_failure is fail: {_runtime_message(exc)}"
            ) from exc
        if plan.challenger_failure == "fail":
            raise
        why = f"chunk {full.chunk_id}: {type(exc).__name__}: {exc}"
        log.warning("[INF] challenger %s %s did not shadow %s", plan.challenger.named, plan.challenger.version, why)
        result.challenger_rows_failed += full.features.shape[0]
        result.challenger_failures.append(why)
        return None


_SLICE_PARTS_FOLDED = 16
"""A unit folds its chunks' slice counts into one frame every this many chunks: a slice column of many
values would otherwise keep a frame of them per chunk until the unit ends."""


def _health_of_chunk(
    prepared: PreparedJob,
    result: UnitInference,
    full: InferenceInput,
    decided: DecidedChunk,
    scorable: pl.DataFrame,
    *,
    first_row: int,
    partition_rows: int,
) -> None:
    """The chunk's model-health sums and slice counts, from what the pass already holds; the only new
    work is the PCA projection and the contributions of the attribution sample."""
    calibrated, rules = decided.calibrated, decided.rules
    config = prepared.spec.monitoring.health
    slices = prepared.spec.monitoring.slices
    if slices and calibrated is not None:
        result.slice_counts.append(
            chunk_slice_counts(
                scorable.select(slices),
                calibrated.probability,
                rules.rule_index,
                prepared.rule_decisions,
                decided.score,
            )
        )
        if len(result.slice_counts) >= _SLICE_PARTS_FOLDED:
            result.slice_counts = [summed_slice_counts(result.slice_counts)]
    if not config.enabled:
        return
    if calibrated is not None:
        result.health.add_decided(calibrated.probability, calibrated.low, calibrated.high, rules.rule_index)
    if decided.classified is not None:
        classified = decided.classified
        result.health.add_classified(classified.probabilities, classified.predicted, classified.low, classified.high)
    if decided.forecast is not None and decided.inference.expected_error is not None:
        result.health.add_expected_error(
            decided.inference.expected_error, floor=prepared.prediction_plan.estimate_map.sigma_floor
        )
    result.health.add_inputs(full.features, prepared.pca_reference)
    share = attribution_share(config.attribution_share, config.attribution_min_rows, partition_rows)
    if "attribution" in prepared.health_reference and share > 0:
        sample = attribution_sample(first_row, full.features.shape[0], share)
        classes = None if decided.classified is None else decided.classified.predicted[sample]
        kwargs = {} if classes is None else {"classes": classes}
        result.health.add_contributions(prepared.model.engine.inference_contributions(full, sample, **kwargs).values)


def _unit_inference(prepared: PreparedJob, unit_id: int) -> UnitInference:
    return UnitInference(unit_id, drift=prepared.drift_accumulator(), health=prepared.health_accumulator())


def _unit_prediction(plan: PredictionPlan, unit_id: int) -> UnitPrediction:
    return UnitPrediction(
        unit_id,
        drift=plan.estimate_drift(),
        shadow=ShadowAccumulator(plan.decisions, forecasts=plan.forecasts, classes=plan.classes)
        if plan.challenger is not None
        else None,
        forecasts=ForecastDistribution() if plan.forecasts else None,
        classifications=ClassDistribution() if plan.classifies else None,
    )


def _shadow_predicted_chunk(
    plan: PredictionPlan,
    result: UnitPrediction,
    champion: pa.Table,
    shadow: Shadow,
    *,
    run_id: str,
    partition_date: dt.date,
    dirs: OutputDirs,
) -> None:
    """The challenger's chunk in the prediction contract (plus the alias it was named by), staged as
    shadow predictions (shadow forecasts for a forecast job, shadow classifications for a multiclass job);
    the rows whose decision it flips staged beside; both counted into `result.shadow`."""
    decided, contributions = shadow
    chunk_id = decided.inference.chunk_id
    table = predict_output(
        decided,
        contributions,
        plan.config,
        run_id=run_id,
        job=plan.job,
        partition_date=partition_date,
        feature_version=plan.feature_version,
        reason_texts=plan.reason_texts,
    ).table
    dataset = (
        SHADOW_CLASSIFICATIONS
        if decided.classified is not None
        else SHADOW_FORECASTS
        if decided.forecast is not None
        else SHADOW_PREDICTIONS
    )
    table = table.append_column(
        dataset.schema.field("alias"), pa.array([plan.challenger.named] * table.num_rows, pa.string())
    )
    write_staged_chunk(dirs.of(dataset), run_id, chunk_id, table)
    flipped = result.shadow.add(champion, table)
    if flipped.any():
        flips = flipped_rows(champion, table, flipped)
        key = champion.select(["run_id", "job", "partition_date"]).take(pa.array(np.flatnonzero(flipped)))
        write_staged_chunk(
            dirs.decision_flips,
            run_id,
            chunk_id,
            pa.Table.from_arrays([*key.columns, *flips.columns], schema=DECISION_FLIPS.schema),
        )


def _predicted_chunk(
    plan: PredictionPlan,
    result: UnitPrediction,
    decided: DecidedChunk,
    contributions: FeatureContributions,
    shadow: Shadow | None,
    *,
    run_id: str,
    partition_date: dt.date,
    dirs: OutputDirs,
) -> None:
    """The decided chunk in the prediction contract, staged, and counted into `result`; the
    challenger's shadow of it beside, when there is one."""
    predicted = predict_output(
        decided,
        contributions,
        plan.config,
        run_id=run_id,
        job=plan.job,
        partition_date=partition_date,
        feature_version=plan.feature_version,
        reason_texts=plan.reason_texts,
    )
    forecasts = decided.forecast is not None
    classifies = decided.classified is not None
    staged = dirs.classifications if classifies else dirs.forecasts if forecasts else dirs.predictions
    write_staged_chunk(staged, run_id, decided.inference.chunk_id, predicted.table)
    if shadow is not None:
        _shadow_predicted_chunk(
            plan, result, predicted.table, shadow, run_id=run_id, partition_date=partition_date, dirs=dirs
        )
    result.rows_scored += predicted.table.num_rows
    result.rows_with_reasons += predicted.rows_needing_reasons
    result.rows_without_adverse_reason += predicted.rows_without_adverse_reason
    result.rows_straddling += predicted.straddling_rows
    result.decisions.update(predicted.decisions)
    result.rules.update(predicted.rules)
    result.reason_codes.update(reason_code_counts(predicted.table.column("reason_codes")))
    if forecasts:
        result.forecasts.add(predicted.table)
    estimate = FORECAST_DRIFT_NAME if forecasts else SCORE_DRIFT_NAME
    if estimate in result.drift.histograms:
        result.drift.add(estimate, predicted.table.column(estimate).to_numpy())
    if classifies:
        result.classifications.add(predicted.table)
    grouped = predicted.table.select(
        _CLASS_GROUPED_COLUMNS if classifies else _FORECAST_GROUPED_COLUMNS if forecasts else _GROUPED_COLUMNS
    )
    result.decision_groups.append(prediction_groups(pl.from_arrow(grouped), plan.cutoffs))


_GROUPED_COLUMNS = (
    "run_id",
    "model_version",
    "decision",
    "rule_id",
    "score",
    "probability",
    "probability_low",
    "probability_high",
)
_FORECAST_GROUPED_COLUMNS = (
    "run_id",
    "model_version",
    "decision",
    "rule_id",
    "forecast",
    "forecast_low",
    "forecast_high",
)
_CLASS_GROUPED_COLUMNS = (
    "run_id",
    "model_version",
    "decision",
    "rule_id",
    "predicted_class",
    "probability",
    "probability_low",
    "probability_high",
)


def scored_unit(
    prepared: PreparedJob,
    unit: WorkUnit,
    *,
    run_id: str,
    partition_date: dt.date,
    chunk_rows: int,
    dirs: OutputDirs,
    deadline: RunDeadline | None = None,
) -> ScoredUnit:
    """Every chunk of `unit` from raw rows to the staged prediction contract, in one pass per chunk."""
    plan = prepared.prediction_plan
    inference, prediction = _unit_inference(prepared, unit.unit_id), _unit_prediction(plan, unit.unit_id)
    for decided, contributions, shadow in _decided_chunks(
        prepared,
        unit,
        inference,
        run_id=run_id,
        partition_date=partition_date,
        chunk_rows=chunk_rows,
        dirs=dirs,
        deadline=deadline,
    ):
        inference.chunk_ids.append(decided.inference.chunk_id)
        _predicted_chunk(
            plan, prediction, decided, contributions, shadow, run_id=run_id, partition_date=partition_date, dirs=dirs
        )
        _returned_free_memory()
    inference.peak_rss_mb = prediction.peak_rss_mb = _peak_rss_mb()
    return ScoredUnit(inference, prediction)


def inferred_unit(
    prepared: PreparedJob,
    unit: WorkUnit,
    *,
    run_id: str,
    partition_date: dt.date,
    chunk_rows: int,
    dirs: OutputDirs,
    deadline: RunDeadline | None = None,
) -> UnitInference:
    """The inference half of `scored_unit`: each decided chunk and its explained rows' contributions go to a handoff file."""
    result = _unit_inference(prepared, unit.unit_id)
    with_values = bool(prepared.prediction_plan.reason_texts.by_feature)
    for decided, contributions, shadow in _decided_chunks(
        prepared,
        unit,
        result,
        run_id=run_id,
        partition_date=partition_date,
        chunk_rows=chunk_rows,
        dirs=dirs,
        deadline=deadline,
    ):
        chunk_id = decided.inference.chunk_id
        _write_handoff(_handoff_path(dirs, run_id, chunk_id), decided, contributions, with_values=with_values)
        if shadow is not None:
            _write_handoff(_handoff_path(dirs, run_id, chunk_id, shadow=True), *shadow, with_values=with_values)
        result.chunk_ids.append(chunk_id)
        _returned_free_memory()
    result.peak_rss_mb = _peak_rss_mb()
    return result


def predicted_unit(
    plan: PredictionPlan,
    inference: UnitInference,
    *,
    run_id: str,
    partition_date: dt.date,
    dirs: OutputDirs,
    deadline: RunDeadline | None = None,
) -> UnitPrediction:
    """The prediction half of `scored_unit`: the handoff files of `inference` in the prediction contract,
    one staged Parquet file per chunk; no engine is loaded and nothing is decided again."""
    result = _unit_prediction(plan, inference.unit_id)
    for chunk_id in inference.chunk_ids:
        check_not_stopped(run_id)
        if deadline is not None:
            deadline.check()
        path, shadow_path = _handoff_path(dirs, run_id, chunk_id), _handoff_path(dirs, run_id, chunk_id, shadow=True)
        decided, contributions = _read_handoff(path, chunk_id)
        shadow = _read_handoff(shadow_path, chunk_id) if shadow_path.exists() else None
        _predicted_chunk(
            plan, result, decided, contributions, shadow, run_id=run_id, partition_date=partition_date, dirs=dirs
        )
        path.unlink()
        shadow_path.unlink(missing_ok=True)
        _returned_free_memory()
    result.peak_rss_mb = _peak_rss_mb()
    return result
