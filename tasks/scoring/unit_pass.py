"""One work unit scored in two passes: inference (guard, features, inference and the chosen rows'
contributions, raw outputs to handoff files) and prediction (those outputs turned into the
prediction contract, one staged Parquet file per chunk)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import resource
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc  # noqa: F401  (pa.ipc: the inference → prediction handoff files)

from tasks.contracts import FeatureContributions, InferenceInput, InferenceOutput
from tasks.errors import DeviceUnavailable, InferenceFailure, ModelArtifactError
from tasks.guards import GuardCounts, GuardedChunk, guarded_chunk
from tasks.guards.duplicates import chunk_duplicate_mask, quarantined_rows_between
from tasks.prediction.calibration import ProbabilityMap, predict_calibrator_from_metadata
from tasks.prediction.outputs import predict_decided_chunk, predict_output
from tasks.quality.drift import SCORE_EDGES, SCORE_PSI_EDGES, DriftAccumulator
from tasks.scoring.prepared import PreparedJob
from tasks.scoring.units import WorkUnit, unit_chunks
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
            pl.lit(self.run_id).alias("run_id"), pl.lit(self.job).alias("job"),
            pl.lit(self.partition_date).alias("partition_date"), pl.all(),
        ).to_arrow()


def _inferred(prepared: PreparedJob, batch: InferenceInput) -> tuple[InferenceInput, InferenceOutput]:
    """Feature models first (each adds one column), then the final model's raw outputs."""
    features = batch.features
    for _, loaded in prepared.feature_models:
        extra = loaded.engine.inference_outputs(batch).margins.astype(np.float32)
        features = np.ascontiguousarray(np.column_stack([features, extra]))
    full = batch if features is batch.features else InferenceInput(
        chunk_id=batch.chunk_id, entity_ids=batch.entity_ids, features=features, feature_names=prepared.model_features
    )
    return full, prepared.model.engine.inference_outputs(full)


_NOT_RETRIED = (DeviceUnavailable, InferenceFailure, ModelArtifactError)
"""A wrong device or a model that breaks its contract fails the same way on every attempt and chunk."""


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

_HANDOFF_FEATURES = b"feature_names"


def _handoff_path(dirs: OutputDirs, run_id: str, chunk_id: int) -> Path:
    return staging_dir(dirs.inference_handoff, run_id) / f"chunk-{chunk_id:05d}.arrow"


def _write_handoff(path: Path, inferred: InferenceOutput, contributions: FeatureContributions, *, with_values: bool) -> None:
    """The chunk's raw outputs for its prediction task: margins per row, and for the rows that need
    reasons their contributions (row index, then `c<j>` per feature) and, when a reason's text
    depends on the value (`with_values`), their own feature values (`v<j>`; NaN on the other rows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(inferred.margins)
    rows = np.full(n, -1, dtype=np.int64)
    rows[contributions.row_index] = np.arange(len(contributions.row_index))
    explained = np.zeros((n, len(contributions.feature_names)), dtype=np.float64)
    explained[contributions.row_index] = contributions.values
    values = np.full((n, len(contributions.feature_names)), np.nan, dtype=np.float32)
    if with_values and contributions.feature_values is not None:
        values[contributions.row_index] = contributions.feature_values
    table = pa.table(
        {
            "entity_id": inferred.entity_ids,
            "margin": pa.array(inferred.margins, type=pa.float64()),
            "contribution_row": pa.array(rows),
            **{f"c{j}": pa.array(explained[:, j]) for j in range(explained.shape[1])},
            **({f"v{j}": pa.array(values[:, j]) for j in range(values.shape[1])} if with_values else {}),
        }
    ).replace_schema_metadata(
        {
            _HANDOFF_FEATURES: json.dumps(list(contributions.feature_names)).encode(),
            b"inference": json.dumps(
                {"model_name": inferred.model_name, "model_version": inferred.model_version,
                 "device_type": inferred.device_type, "latency_ms": inferred.latency_ms}
            ).encode(),
        }
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read_handoff(path: Path, chunk_id: int) -> tuple[InferenceOutput, FeatureContributions]:
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    meta = json.loads(table.schema.metadata[b"inference"])
    names = tuple(json.loads(table.schema.metadata[_HANDOFF_FEATURES]))
    inferred = InferenceOutput(
        chunk_id=chunk_id, entity_ids=table.column("entity_id").combine_chunks(),
        margins=table.column("margin").to_numpy(), **meta,
    )
    rows = table.column("contribution_row").to_numpy()
    row_index = np.flatnonzero(rows >= 0)
    shape = (len(row_index), len(names))

    def explained(prefix: str, dtype: type) -> np.ndarray:
        columns = [table.column(f"{prefix}{j}").to_numpy()[row_index] for j in range(len(names))]
        return (np.column_stack(columns) if names else np.empty(shape)).astype(dtype, copy=False).reshape(shape)

    return inferred, FeatureContributions(
        row_index=row_index, values=explained("c", np.float64), feature_names=names,
        feature_values=explained("v", np.float32) if "v0" in table.column_names else None,
    )


@dataclass
class UnitInference:
    """What the inference task of one unit hands on: counts, and the chunks whose outputs wait in handoff files."""

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


@dataclass
class UnitPrediction:
    unit_id: int
    rows_scored: int = 0
    rows_with_reasons: int = 0
    rows_without_adverse_reason: int = 0
    rows_straddling: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    drift: DriftAccumulator | None = None
    peak_rss_mb: float = 0.0


def _peak_rss_mb() -> float:
    # The worker process's high-water mark: a scoring run's memory must not grow with the partition.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _probability_map(prepared: PreparedJob) -> ProbabilityMap:
    engine = prepared.model.engine
    return ProbabilityMap(predict_calibrator_from_metadata(engine.metadata.calibration), prepared.spec.prediction.interval_level)


def inferred_unit(
    prepared: PreparedJob, unit: WorkUnit, *, run_id: str, partition_date: dt.date, chunk_rows: int, dirs: OutputDirs
) -> UnitInference:
    """Guard, build features, infer and explain every chunk of `unit`; raw outputs go to handoff files.

    Which rows need reasons is a business rule, so the prediction layer's pure decision function
    picks them here; only their contributions are computed, on the same device as the margins.
    """
    spec, fm, engine = prepared.spec, prepared.features, prepared.model.engine
    probability_map = _probability_map(prepared)
    result = UnitInference(unit.unit_id, drift=prepared.drift_accumulator())
    duplicate_rows = quarantined_rows_between(unit.duplicate_rows_file, unit.first_row, unit.rows)
    for chunk_id, table in unit_chunks(unit, chunk_rows):
        chunk = ChunkRef(run_id, spec.name, partition_date, chunk_id, spec.entity_column)
        guarded = guarded_chunk(
            pl.from_arrow(table), prepared.suite, entity_column=spec.entity_column,
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

        def inferred_and_explained() -> tuple[InferenceInput, InferenceOutput, FeatureContributions]:
            full, inferred = _inferred(prepared, batch)
            decided = predict_decided_chunk(inferred, probability_map, spec.prediction)
            return full, inferred, engine.inference_contributions(full, decided.reason_rows, top_k=spec.prediction.reasons.top_k)

        try:
            full, inferred, contributions = _with_retries(
                1 + spec.inference.retries, f"chunk {chunk_id} of {spec.name} {partition_date}", inferred_and_explained
            )
        except _NOT_RETRIED:
            raise
        except Exception as exc:
            failed = guarded.scorable.with_columns(
                pl.lit([f"inference_failed({type(exc).__name__})"], dtype=pl.List(pl.String)).alias("failed_expectations")
            )
            _write_quarantine(failed, dirs, chunk, "inference")
            result.rows_failed += failed.height
            result.failed_chunks.append({"chunk": chunk_id, "rows": failed.height, "error": f"{type(exc).__name__}: {exc}"})
            continue
        _write_handoff(_handoff_path(dirs, run_id, chunk_id), inferred, contributions, with_values=bool(prepared.reason_texts.by_feature))
        result.explained_rows[contributions.explained_by] += contributions.row_index.shape[0]
        result.tie_recomputed_rows += contributions.tie_recomputed_rows
        result.chunk_ids.append(chunk_id)
        result.latency_ms.append(inferred.latency_ms)
        result.drift.add_matrix(prepared.model_features, full.features)
    result.peak_rss_mb = _peak_rss_mb()
    return result


def predicted_unit(
    prepared: PreparedJob, inference: UnitInference, *, run_id: str, partition_date: dt.date, dirs: OutputDirs
) -> UnitPrediction:
    """Turn the unit's raw outputs into the prediction contract: probability, interval, score,
    decision and reasons, one staged Parquet file per chunk."""
    spec = prepared.spec
    probability_map = _probability_map(prepared)
    result = UnitPrediction(inference.unit_id, drift=DriftAccumulator(edges={"score": SCORE_EDGES}, psi_edges={"score": SCORE_PSI_EDGES}))
    for chunk_id in inference.chunk_ids:
        path = _handoff_path(dirs, run_id, chunk_id)
        inferred, contributions = _read_handoff(path, chunk_id)
        decided = predict_decided_chunk(inferred, probability_map, spec.prediction)
        predicted = predict_output(
            decided, contributions, spec.prediction,
            run_id=run_id, job=spec.name, partition_date=partition_date, feature_version=prepared.features.FEATURE_VERSION,
            reason_texts=prepared.reason_texts,
        )
        write_staged_chunk(dirs.predictions, run_id, chunk_id, predicted.table)
        path.unlink()
        result.rows_scored += predicted.table.num_rows
        result.rows_with_reasons += predicted.rows_needing_reasons
        result.rows_without_adverse_reason += predicted.rows_without_adverse_reason
        result.rows_straddling += predicted.straddling_rows
        result.drift.add("score", predicted.table.column("score").to_numpy())
        result.decisions.update(predicted.decisions)
        result.rules.update(predicted.rules)
    result.peak_rss_mb = _peak_rss_mb()
    return result
