"""One partition of one job, scored chunk by chunk: guard → features → inference → prediction.

This module joins the two halves and knows nothing of Prefect; `flows.steps` wraps it in tasks.
Chunks stream from the raw Parquet and their outputs go straight to staging files, so memory
stays flat whatever the partition size.
"""

from __future__ import annotations

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
import pyarrow.parquet as pq

from tasks.contracts import FeatureContributions, InferenceInput, InferenceOutput
from tasks.errors import (
    DeviceUnavailable,
    FallbackLimitExceeded,
    GuardFailure,
    InferenceFailure,
    ModelArtifactError,
    PartitionError,
)
from tasks.quality.drift import SCORE_EDGES, SCORE_PSI_EDGES, DriftAccumulator, Histogram, drift_bin_labels, drift_report_rows
from tasks.guards.duplicates import (
    chunk_duplicate_mask,
    duplicated_entity_ids,
    partition_row_groups,
    quarantined_rows_between,
    write_quarantined_rows,
)
from tasks.quality.fallback_report import fallback_limit_breaches, fallback_report_rows
from tasks.features import FeatureKind, FeatureModule, feature_categories, feature_kinds
from tasks.guards import (
    GuardCounts,
    GuardedChunk,
    GuardSuite,
    guard_limit_breaches,
    guard_summary_rows,
    guarded_chunk,
)
from tasks.inference.engine import LoadedModel, inference_loaded_model
from tasks.inference.registry import inference_check_feature_version
from tasks.inference.treeshap import XGBOOST_NAME
from tasks.jobspec import FeatureModelRef, JobSpec
from tasks.sinks.parquet_store import staging_dir, write_staged_chunk
from tasks.prediction.calibration import ProbabilityMap, predict_calibrator_from_metadata
from tasks.prediction.outputs import predict_decided_chunk, predict_output
from tasks.prediction.reasons import ReasonTexts, predict_reason_texts
from tasks.settings import Settings
from tasks.sources import ParquetPartition, RawPartition, opened_parquet, raw_partition
from tasks.sources.chunks import rechunked_tables
from tasks.jobs.validation import checked_raw_files, validated_job
from tasks.sinks.warehouse_choice import warehouse_for

log = logging.getLogger("scoring.run")

DRIFT_REPORT_COLUMNS = {
    "feature": pl.String, "kind": pl.String, "baseline": pl.String, "psi": pl.Float64, "ks": pl.Float64,
    "ks_upper": pl.Float64, "wasserstein": pl.Float64, "js": pl.Float64, "flag": pl.String, "rows": pl.Int64,
    "null_share": pl.Float64, "baseline_null_share": pl.Float64, "outside_p1_p99_share": pl.Float64,
    "unseen_share": pl.Float64,
}
"""`ks_upper` is null where the bound is too loose to inform, `ks` and `wasserstein` for categorical
features; `outside_p1_p99_share` (below the training p1 or above its p99) is for numeric features,
`unseen_share` (a value the training reference never had) for boolean and categorical ones."""
DRIFT_HISTOGRAM_COLUMNS = {
    "feature": pl.String, "kind": pl.String, "edges": pl.List(pl.Float64), "counts": pl.List(pl.Int64), "nulls": pl.Int64,
}
"""`edges` of a boolean or categorical feature are its category values (one bin each, then unseen)."""
FALLBACK_REPORT_COLUMNS = {
    "kind": pl.String,
    "detail": pl.String,
    "rows": pl.Int64,
    "share": pl.Float64,
    "limit": pl.Float64,
    "breached": pl.Boolean,
}
GUARD_SUMMARY_COLUMNS = {
    "expectation": pl.String,
    "column_name": pl.String,
    "expectation_type": pl.String,
    "action": pl.String,
    "evaluated_by": pl.String,
    "rows": pl.Int64,
    "share": pl.Float64,
}


@dataclass(frozen=True)
class PreparedJob:
    """Everything a run needs, loaded and cross-checked before any row is scored."""

    spec: JobSpec
    suite: GuardSuite
    features: FeatureModule
    model: LoadedModel
    feature_models: tuple[tuple[FeatureModelRef, LoadedModel], ...]
    raw: RawPartition
    """Where the partition's raw rows come from (a folder, an object-store prefix, a query)."""
    drift_baselines: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    """`reference` (training, from the model's metadata) and `previous` (the last scored partition before this one)."""
    reason_texts: ReasonTexts = field(default_factory=ReasonTexts)
    """The spec's value-dependent reason texts, resolved against the features and the model's training medians."""

    @property
    def drift_edges(self) -> dict[str, np.ndarray]:
        return {name: hist.edges for name, hist in self.drift_baselines.get("reference", {}).items()}

    @property
    def psi_edges(self) -> dict[str, np.ndarray]:
        return {name: hist.psi_edges for name, hist in self.drift_baselines.get("reference", {}).items()}

    @property
    def drift_kinds(self) -> dict[str, FeatureKind]:
        return {name: hist.kind for name, hist in self.drift_baselines.get("reference", {}).items()}

    def drift_accumulator(self, *, with_score: bool = False) -> DriftAccumulator:
        """An empty accumulator on the reference's bins of every model input, and the score's if asked."""
        score = {"score": SCORE_EDGES} if with_score else {}
        return DriftAccumulator(
            edges={**self.drift_edges, **score}, kinds=self.drift_kinds,
            psi_edges={**self.psi_edges, **({"score": SCORE_PSI_EDGES} if with_score else {})},
        )

    @property
    def model_features(self) -> tuple[str, ...]:
        """The final model's input: the feature module's columns, then each feature model's output."""
        return (*self.features.FEATURES, *(ref.output_feature for ref, _ in self.feature_models))


def prepared_job(job: str, partition_date: dt.date, settings: Settings) -> PreparedJob:
    """The job loaded for a run of `partition_date`, after `validated_job` found no problem in its
    inputs (JobValidationError lists them all), with its engines built and drift baselines read."""
    validated = validated_job(job, settings, partition_date=partition_date, check_labels=False)
    for note in validated.notes:
        log.warning("[PRED] job %s: %s", job, note)
    spec, features = validated.spec, validated.features
    device, nthread = spec.inference.device, spec.inference.nthread
    feature_models = []
    for ref in spec.model.feature_models:
        loaded = inference_loaded_model(settings.model_registry_dir(ref.name), ref.version, None, device=device, nthread=nthread)
        inference_check_feature_version(loaded.engine.artifact, features.FEATURE_VERSION, tuple(features.FEATURES))
        feature_models.append((ref, loaded))
    model = inference_loaded_model(
        settings.model_registry_dir(spec.model.name), spec.model.version, spec.model.fallback_version, device=device, nthread=nthread
    )
    meta = model.engine.metadata
    if not meta.reference:
        log.warning(
            "model %s %s has no training reference statistics; scoring %s without drift against training "
            "(drift.require_reference: false)", meta.name, meta.version, spec.name,
        )
    reference = {
        name: hist
        for name, stats in meta.reference.items()
        if (hist := Histogram.of_reference(stats)) is not None
    }
    previous = {
        row["feature"]: Histogram(
            edges=np.asarray(row["edges"], dtype=np.float64), counts=np.asarray(row["counts"], dtype=np.int64),
            nulls=row["nulls"], kind=row.get("kind") or "numeric",
            psi_edges=reference[row["feature"]].psi_edges if row["feature"] in reference else SCORE_PSI_EDGES,
        )
        for row in warehouse_for(settings).previous_drift_histograms(job, partition_date)
    }
    prepared = PreparedJob(
        spec=spec, suite=validated.suite, features=features, model=model, feature_models=tuple(feature_models),
        raw=validated.raw or raw_partition(spec.source, settings, job, partition_date), drift_baselines={"reference": reference, "previous": previous},
        reason_texts=_reason_texts(model, spec, feature_kinds(features), feature_categories(features)),
    )
    # The engine that loaded may be the fallback chosen only now, when the job's version failed to load.
    inference_check_feature_version(model.engine.artifact, features.FEATURE_VERSION, prepared.model_features)
    return prepared


def _reason_texts(
    model: LoadedModel, spec: JobSpec, kinds: dict[str, FeatureKind], categories: dict[str, tuple[str, ...]]
) -> ReasonTexts:
    """The spec's reason texts resolved; `by_band` needs each banded feature's training median."""
    meta = model.engine.metadata
    medians = {name: stats.quantiles["p50"] for name, stats in meta.reference.items() if "p50" in stats.quantiles}
    # Without a training reference (the job's opt-in) there is no median to band on: the default text speaks.
    unreferenced = not meta.reference and not spec.drift.require_reference
    if unreferenced and any(r.by_band is not None for r in spec.prediction.reasons.codes.values()):
        log.warning("[PRED] model %s %s has no training reference: by_band reasons of %s get their default text",
                    meta.name, meta.version, spec.name)
    try:
        return predict_reason_texts(
            spec.prediction.reasons, kinds=kinds, categories=categories, medians=medians,
            bands_without_median="default_text" if unreferenced else "refuse",
        )
    except ValueError as exc:
        raise ModelArtifactError(
            f"model {meta.name} {meta.version} ({model.engine.artifact.directory / 'metadata.json'}) cannot serve the "
            f"job's reason texts: {exc}"
        ) from None


def raw_chunks(raw: ParquetPartition, chunk_rows: int) -> Iterator[pa.Table]:
    """The partition as tables of exactly `chunk_rows` rows (the last may be shorter).

    Files are read one after the other, a batch at a time, so memory holds one row group (a Parquet
    row group is read whole: producers should write row groups no larger than a chunk) and a
    corrupt file is named.
    """
    files = checked_raw_files(raw)

    def batches() -> Iterator[pa.RecordBatch]:
        for path in files:
            try:
                yield from opened_parquet(path).iter_batches(batch_size=chunk_rows)
            except _CORRUPT_PARQUET as exc:
                _raise_if_os_error(exc)
                raise PartitionError(f"raw file {path} is corrupt: {_first_line(exc)}") from exc

    return rechunked_tables(batches(), chunk_rows)


_CORRUPT_PARQUET = (pa.ArrowException, OSError)
"""What pyarrow raises for bytes that are not (or no longer) Parquet: ArrowInvalid, or an OSError without errno."""


def _raise_if_os_error(exc: BaseException) -> None:
    # A real OS error (permission, disk) has an errno and is the environment's, not the file's content.
    if isinstance(exc, OSError) and exc.errno is not None:
        raise exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class WorkUnit:
    """Whole row groups of the raw partition that one task scores as consecutive chunks.

    Parquet reads a row group whole, so a unit never splits one between tasks: a row group larger
    than a chunk is read once and cut into chunks inside its unit, not re-read by several tasks.
    """

    unit_id: int
    row_groups: tuple[tuple[str, int], ...]
    rows: int
    first_chunk_id: int
    first_row: int = 0
    """Global number of the unit's first row in partition order (file, row group, row)."""
    duplicate_rows_file: str | None = None
    """Staged row numbers that the entity-key rule quarantines, when the partition has any."""


def partition_work_units(raw: ParquetPartition, chunk_rows: int) -> list[WorkUnit]:
    """The partition cut into units of at least `chunk_rows` rows (the last may be smaller), from
    the Parquet footers alone."""
    units: list[WorkUnit] = []
    pending: list[tuple[str, int]] = []
    pending_rows = next_chunk = first_row = 0

    def flush() -> None:
        nonlocal pending, pending_rows, next_chunk, first_row
        units.append(WorkUnit(len(units), tuple(pending), pending_rows, next_chunk, first_row))
        next_chunk += -(-pending_rows // chunk_rows)
        first_row += pending_rows
        pending, pending_rows = [], 0

    for group in partition_row_groups(raw):
        pending.append((group.path, group.group))
        pending_rows += group.rows
        if pending_rows >= chunk_rows:
            flush()
    if pending:
        flush()
    return units


def planned_work_units(prepared: PreparedJob, *, run_id: str, chunk_rows: int, dirs: OutputDirs) -> list[WorkUnit]:
    """The work units, each told which of its rows repeat an entity id seen elsewhere in the partition.

    The duplicate pre-pass reads only the entity column; an id found twice fails the run here,
    before any scoring, when the suite's entity-key action is `fail`.
    """
    scratch = staging_dir(dirs.inference_handoff, run_id)
    raw = prepared.raw.parquet_partition(scratch / "raw-snapshot", chunk_rows)
    units = partition_work_units(raw, chunk_rows)
    rule = prepared.suite.entity_key
    if rule is None:
        return units
    duplicates = duplicated_entity_ids(partition_row_groups(raw), rule.column, scratch_parent=scratch)
    if duplicates.rows.is_empty():
        return units
    if rule.on_duplicate == "fail":
        raise duplicates.failure(rule, prepared.suite.path.name)
    quarantined = duplicates.quarantined_rows(rule.on_duplicate)
    log.warning(
        "%s: %d entity id(s) appear more than once in column %r (%d rows); %s quarantines %d of them (%s)",
        prepared.raw, duplicates.id_count, rule.column, duplicates.rows.height, rule.key, quarantined.size, rule.on_duplicate,
    )
    path = write_quarantined_rows(scratch / "duplicate-rows.parquet", quarantined)
    return [replace(unit, duplicate_rows_file=str(path)) for unit in units]


def unit_chunks(unit: WorkUnit, chunk_rows: int) -> Iterator[tuple[int, pa.Table]]:
    """(chunk id, table) of each chunk of the unit, one row group in memory at a time."""

    def batches() -> Iterator[pa.RecordBatch]:
        opened: tuple[str, pq.ParquetFile] | None = None
        for path, group in unit.row_groups:
            try:
                # One open per file of the unit: on an object store each open costs requests for the footer.
                if opened is None or opened[0] != path:
                    opened = (path, opened_parquet(path))
                table = opened[1].read_row_group(group)
            except _CORRUPT_PARQUET as exc:
                _raise_if_os_error(exc)
                raise PartitionError(f"raw file {path} is corrupt in row group {group}: {_first_line(exc)}") from exc
            yield from table.to_batches(max_chunksize=chunk_rows)

    try:
        yield from enumerate(rechunked_tables(batches(), chunk_rows), start=unit.first_chunk_id)
    except pa.ArrowInvalid as exc:
        files = sorted({path for path, _ in unit.row_groups})
        raise PartitionError(f"raw files {files} do not share one schema: {exc}") from exc


@dataclass
class ScoringSummary:
    """Counts and timings of one scored partition; small enough to pass between tasks."""

    rows_read: int = 0
    rows_scored: int = 0
    rows_with_reasons: int = 0
    rows_without_adverse_reason: int = 0
    rows_straddling: int = 0
    chunks: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    rules: dict[str, int] = field(default_factory=dict)
    guard: GuardCounts = field(default_factory=GuardCounts)
    guard_summary: list[dict[str, Any]] = field(default_factory=list)
    fallback_report: list[dict[str, Any]] = field(default_factory=list)
    drift_report: list[dict[str, Any]] = field(default_factory=list)
    drift_histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per feature: its `kind`, bin `edges`, `current` counts, `reference` counts (empty without a
    reference) and, for boolean and categorical features, the bins' `labels` (categories, then unseen)."""
    chunk_latency_ms: list[float] = field(default_factory=list)
    device_type: str = "cpu"
    providers: list[str] = field(default_factory=list)
    model_version: str = ""
    fallback_reason: str | None = None
    rows_failed: int = 0
    failed_chunks: list[dict[str, Any]] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    wall_s: float = 0.0
    workers: list[str] = field(default_factory=list)
    """host:pid of each process that ran inference for the run."""
    explained_rows: dict[str, int] = field(default_factory=dict)
    tie_recomputed_rows: int = 0
    contributions_kernel_reason: str | None = None

    def inference_stats(self) -> dict[str, Any]:
        lat = np.asarray(self.chunk_latency_ms or [0.0])
        infer_s = lat.sum() / 1000.0
        return {
            "device_type": self.device_type,
            "providers": self.providers,
            "model_version": self.model_version,
            "fallback_reason": self.fallback_reason,
            "failed_chunks": self.failed_chunks,
            "chunks": self.chunks,
            "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p99": float(np.percentile(lat, 99)),
            "latency_ms_max": float(lat.max()),
            "inference_rows_per_s": float(self.rows_scored / infer_s) if infer_s > 0 else None,
            "end_to_end_rows_per_s": float(self.rows_read / self.wall_s) if self.wall_s > 0 else None,
            "peak_rss_mb": self.peak_rss_mb,
            "workers": self.workers,
            "reasons_explained_by": self.explained_rows,
            "reasons_tie_recomputed_rows": self.tie_recomputed_rows,
            "reasons_kernel_reason": self.contributions_kernel_reason,
        }

    def ledger_counts(self) -> dict[str, Any]:
        return {
            "rows_read": self.rows_read,
            "rows_scored": self.rows_scored,
            "rows_repaired": self.guard.rows_repaired,
            "rows_quarantined": self.guard.rows_quarantined,
            "rows_failed": self.rows_failed,
            "rows_fallback": self.rows_scored if self.fallback_reason else 0,
            "rows_with_reasons": self.rows_with_reasons,
            "rows_without_adverse_reason": self.rows_without_adverse_reason,
            "rows_straddling": self.rows_straddling,
            "decisions": self.decisions,
            "guard_counts": self.guard.by_expectation,
            "inference": self.inference_stats(),
        }


@dataclass(frozen=True)
class OutputDirs:
    predictions: Path
    quarantine: Path
    guard_actions: Path
    guard_summary: Path
    fallback_report: Path
    drift_report: Path
    drift_histograms: Path
    inference_handoff: Path
    """Raw outputs of a chunk between its inference and its prediction task; staged only, never published."""

    def all(self) -> tuple[Path, ...]:
        return (
            self.predictions, self.quarantine, self.guard_actions, self.guard_summary,
            self.fallback_report, self.drift_report, self.drift_histograms, self.inference_handoff,
        )


def output_dirs(settings: Settings, job: str) -> OutputDirs:
    base = settings.output_dir(job)
    return OutputDirs(
        predictions=base / "predictions",
        quarantine=base / "quarantine",
        guard_actions=base / "guard_actions",
        guard_summary=base / "guard_summary",
        fallback_report=base / "reports" / "fallback",
        drift_report=base / "reports" / "drift",
        drift_histograms=base / "reports" / "drift_histograms",
        inference_handoff=base / "inference_handoff",
    )


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


def scoring_summary(
    prepared: PreparedJob,
    inferences: list[UnitInference],
    predictions: list[UnitPrediction],
    *,
    run_id: str,
    partition_date: dt.date,
    dirs: OutputDirs,
    wall_s: float,
) -> ScoringSummary:
    """Merge the units' counts into the run's summary, stage its reports, and enforce the job's limits."""
    spec, engine = prepared.spec, prepared.model.engine
    summary = ScoringSummary(
        device_type=engine.device_type,
        providers=list(engine.providers),
        model_version=engine.metadata.version,
        fallback_reason=prepared.model.fallback_reason,
        wall_s=wall_s,
    )
    drift = prepared.drift_accumulator(with_score=True)
    decisions: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    explained: Counter[str] = Counter()
    for inference in sorted(inferences, key=lambda u: u.unit_id):
        summary.rows_read += inference.rows_read
        summary.chunks += inference.chunks
        summary.rows_failed += inference.rows_failed
        summary.failed_chunks += inference.failed_chunks
        summary.guard.merge(inference.guard)
        summary.chunk_latency_ms += inference.latency_ms
        drift.merge(inference.drift)
        summary.peak_rss_mb = max(summary.peak_rss_mb, inference.peak_rss_mb)
        explained.update(inference.explained_rows)
        summary.tie_recomputed_rows += inference.tie_recomputed_rows
    summary.explained_rows = dict(sorted(explained.items()))
    summary.contributions_kernel_reason = getattr(engine, "contributions_kernel_reason", None)
    summary.workers = sorted({inference.worker for inference in inferences})
    for prediction in sorted(predictions, key=lambda u: u.unit_id):
        summary.rows_scored += prediction.rows_scored
        summary.rows_with_reasons += prediction.rows_with_reasons
        summary.rows_without_adverse_reason += prediction.rows_without_adverse_reason
        summary.rows_straddling += prediction.rows_straddling
        drift.merge(prediction.drift)
        decisions.update(prediction.decisions)
        rules.update(prediction.rules)
        summary.peak_rss_mb = max(summary.peak_rss_mb, prediction.peak_rss_mb)
    summary.decisions = dict(sorted(decisions.items()))
    summary.rules = dict(sorted(rules.items()))
    if summary.rows_failed > spec.inference.max_failed_share * max(summary.rows_read, 1):
        last = summary.failed_chunks[-1]["error"]
        raise InferenceFailure(
            f"job {spec.name} on {partition_date}: {summary.rows_failed} of {summary.rows_read} rows are in chunks whose "
            f"inference failed after {1 + spec.inference.retries} attempt(s), beyond the error budget "
            f"inference.max_failed_share={spec.inference.max_failed_share:.2%}; last error: {last}"
        )
    summary.guard_summary = guard_summary_rows(prepared.suite, summary.guard)
    write_staged_chunk(
        dirs.guard_summary, run_id, 0,
        ChunkRef(run_id, spec.name, partition_date, 0, spec.entity_column).stamped(pl.DataFrame(summary.guard_summary, schema=GUARD_SUMMARY_COLUMNS)),
    )
    summary.drift_report = drift_report_rows(drift, prepared.drift_baselines, spec.drift.model_dump(exclude={"require_reference"}))
    reference = prepared.drift_baselines.get("reference", {})
    categories = feature_categories(prepared.features)
    summary.drift_histograms = {
        name: {"kind": h.kind, "edges": h.edges.tolist(), "current": h.counts.tolist(),
               "reference": reference[name].counts.tolist() if name in reference else [],
               "labels": drift_bin_labels(h, categories.get(name, ()))}
        for name, h in drift.histograms.items()
    }
    stamp = ChunkRef(run_id, spec.name, partition_date, 0, spec.entity_column)
    write_staged_chunk(dirs.drift_report, run_id, 0, stamp.stamped(pl.DataFrame(summary.drift_report, schema=DRIFT_REPORT_COLUMNS)))
    write_staged_chunk(dirs.drift_histograms, run_id, 0, stamp.stamped(pl.DataFrame(
        [{"feature": k, "kind": h.kind, "edges": h.edges.tolist(), "counts": h.counts.tolist(), "nulls": h.nulls}
         for k, h in drift.histograms.items()],
        schema=DRIFT_HISTOGRAM_COLUMNS,
    )))
    summary.fallback_report = fallback_report_rows(
        rows_read=summary.rows_read,
        guard_by_expectation=summary.guard.by_expectation,
        guard_columns={e.key: e.column for e in prepared.suite.expectations},
        rows_repaired=summary.guard.rows_repaired,
        rows_quarantined=summary.guard.rows_quarantined,
        rows_fallback=summary.rows_scored if summary.fallback_reason else 0,
        fallback_reason=summary.fallback_reason,
        rows_failed=summary.rows_failed,
        rows_without_adverse_reason=summary.rows_without_adverse_reason,
        rows_reasons_by_xgboost=summary.explained_rows.get(XGBOOST_NAME, 0),
        reasons_kernel_reason=summary.contributions_kernel_reason,
        rows_without_drift_reference=0 if reference else summary.rows_read,
        drift_reference_detail=None if reference else (
            f"model {engine.metadata.name} {engine.metadata.version} has no training reference (drift.require_reference: false)"
        ),
        limits=spec.limits.max_fallback_share,
    )
    write_staged_chunk(
        dirs.fallback_report, run_id, 0,
        ChunkRef(run_id, spec.name, partition_date, 0, spec.entity_column).stamped(
            pl.DataFrame(summary.fallback_report, schema=FALLBACK_REPORT_COLUMNS)
        ),
    )
    if summary.rows_read < spec.limits.min_rows:
        if summary.rows_read == 0:
            raise PartitionError(
                f"no raw partition for job {spec.name!r} on {partition_date}: {prepared.raw} holds 0 raw rows "
                f"(limits.min_rows: {spec.limits.min_rows}; 0 accepts an empty partition)"
            )
        raise PartitionError(
            f"partition {partition_date} of job {spec.name} has {summary.rows_read} raw rows in {prepared.raw}; "
            f"the job needs at least {spec.limits.min_rows} (limits.min_rows)"
        )
    breaches = guard_limit_breaches(
        summary.guard,
        max_repaired_share=spec.limits.max_repaired_share,
        max_quarantined_share=spec.limits.max_quarantined_share,
    )
    if breaches:
        raise GuardFailure(f"job {spec.name} on {partition_date}: " + "; ".join(breaches))
    fallback_breaches = fallback_limit_breaches(summary.fallback_report)
    if fallback_breaches:
        raise FallbackLimitExceeded(f"job {spec.name} on {partition_date}: " + "; ".join(fallback_breaches))
    log.info(
        "scored %s %s: %d read, %d scored, %d repaired, %d quarantined in %.2fs",
        spec.name, partition_date, summary.rows_read, summary.rows_scored,
        summary.guard.rows_repaired, summary.guard.rows_quarantined, summary.wall_s,
    )
    return summary


def score_partition_chunks(
    prepared: PreparedJob,
    *,
    run_id: str,
    partition_date: dt.date,
    chunk_rows: int,
    dirs: OutputDirs,
) -> ScoringSummary:
    """Score every chunk of the partition in this process, unit after unit: the flow's tasks in
    sequence. The run's staging files are written; the partition stays untouched."""
    started = time.perf_counter()
    inferences, predictions = [], []
    for unit in planned_work_units(prepared, run_id=run_id, chunk_rows=chunk_rows, dirs=dirs):
        inference = inferred_unit(prepared, unit, run_id=run_id, partition_date=partition_date, chunk_rows=chunk_rows, dirs=dirs)
        inferences.append(inference)
        predictions.append(predicted_unit(prepared, inference, run_id=run_id, partition_date=partition_date, dirs=dirs))
    return scoring_summary(
        prepared, inferences, predictions, run_id=run_id, partition_date=partition_date, dirs=dirs,
        wall_s=time.perf_counter() - started,
    )
