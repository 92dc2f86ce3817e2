"""One partition of one job, scored chunk by chunk: guard → features → inference → prediction.

This module joins the two halves and knows nothing of Prefect; `tasks.steps` wraps it in tasks.
Chunks stream from the raw Parquet and their outputs go straight to staging files, so memory
stays flat whatever the partition size.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads

from tasks.contracts import InferenceInput
from tasks.errors import GuardFailure, PartitionError
from tasks.features import FeatureModule, load_feature_module
from tasks.guards import GuardCounts, GuardSuite, guard_limit_breaches, guard_summary_rows, guarded_chunk, load_guard_suite
from tasks.inference.engine import XGBoostEngine
from tasks.inference.registry import ModelArtifact, inference_check_feature_version, inference_model_artifact
from tasks.jobspec import JobSpec, load_job_spec
from tasks.parquet_store import write_staged_chunk
from tasks.prediction.calibration import BinnedBetaCalibrator, ProbabilityMap
from tasks.prediction.outputs import predict_decided_chunk, predict_output
from tasks.settings import Settings

log = logging.getLogger("scoring.run")

GUARD_SUMMARY_COLUMNS = {
    "expectation": pl.String,
    "column_name": pl.String,
    "expectation_type": pl.String,
    "action": pl.String,
    "evaluated_by": pl.String,
    "rows": pl.Int64,
    "share": pl.Float64,
}


def parse_partition_date(value: str | dt.date, *, what: str = "partition date") -> dt.date:
    """A partition date from an ISO string; a clear error names `what` and the bad value."""
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise PartitionError(f"{what} {value!r} is not a valid ISO date (YYYY-MM-DD)") from None


@dataclass(frozen=True)
class PreparedJob:
    """Everything a run needs, loaded and cross-checked before any row is scored."""

    spec: JobSpec
    suite: GuardSuite
    features: FeatureModule
    artifact: ModelArtifact
    raw_dir: Path


def prepared_job(job: str, partition_date: dt.date, settings: Settings) -> PreparedJob:
    spec = load_job_spec(job, settings)
    suite = load_guard_suite(settings.expectations_dir / spec.expectation_suite)
    features = load_feature_module(spec.feature_module)
    artifact = inference_model_artifact(settings.model_registry_dir(spec.model.name), spec.model.version)
    inference_check_feature_version(artifact, features.FEATURE_VERSION, tuple(features.FEATURES))
    raw_dir = settings.raw_partition_dir(job, partition_date.isoformat())
    if not raw_dir.is_dir():
        raise PartitionError(f"no raw partition for job {job!r} on {partition_date}: {raw_dir} does not exist")
    return PreparedJob(spec=spec, suite=suite, features=features, artifact=artifact, raw_dir=raw_dir)


def raw_chunks(raw_dir: Path, chunk_rows: int) -> Iterator[pa.Table]:
    """The partition as tables of exactly `chunk_rows` rows (the last may be shorter).

    Read-ahead is one batch of one file: pyarrow's defaults (16 batches, 4 files) would hold most
    of a partition in memory. A Parquet row group is still read whole, so producers should write
    row groups no larger than a chunk.
    """
    dataset = pads.dataset(raw_dir, format="parquet")
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in dataset.to_batches(batch_size=chunk_rows, batch_readahead=1, fragment_readahead=1):
        pending.append(batch)
        pending_rows += batch.num_rows
        while pending_rows >= chunk_rows:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, chunk_rows)
            rest = table.slice(chunk_rows)
            pending = rest.to_batches()
            pending_rows = rest.num_rows
    if pending_rows:
        yield pa.Table.from_batches(pending)


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
    chunk_latency_ms: list[float] = field(default_factory=list)
    device_type: str = "cpu"
    wall_s: float = 0.0

    def inference_stats(self) -> dict[str, Any]:
        lat = np.asarray(self.chunk_latency_ms or [0.0])
        infer_s = lat.sum() / 1000.0
        return {
            "device_type": self.device_type,
            "chunks": self.chunks,
            "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p99": float(np.percentile(lat, 99)),
            "latency_ms_max": float(lat.max()),
            "inference_rows_per_s": float(self.rows_scored / infer_s) if infer_s > 0 else None,
            "end_to_end_rows_per_s": float(self.rows_read / self.wall_s) if self.wall_s > 0 else None,
        }

    def ledger_counts(self) -> dict[str, Any]:
        return {
            "rows_read": self.rows_read,
            "rows_scored": self.rows_scored,
            "rows_repaired": self.guard.rows_repaired,
            "rows_quarantined": self.guard.rows_quarantined,
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

    def all(self) -> tuple[Path, ...]:
        return (self.predictions, self.quarantine, self.guard_actions, self.guard_summary)


def output_dirs(settings: Settings, job: str) -> OutputDirs:
    base = settings.data_dir / "output" / job
    return OutputDirs(
        predictions=base / "predictions",
        quarantine=base / "quarantine",
        guard_actions=base / "guard_actions",
        guard_summary=base / "guard_summary",
    )


def _partition_columns(frame: pl.DataFrame, run_id: str, job: str, partition_date: dt.date) -> pl.DataFrame:
    return frame.select(
        pl.lit(run_id).alias("run_id"), pl.lit(job).alias("job"), pl.lit(partition_date).alias("partition_date"), pl.all()
    )


def score_partition_chunks(
    prepared: PreparedJob,
    *,
    run_id: str,
    partition_date: dt.date,
    chunk_rows: int,
    dirs: OutputDirs,
) -> ScoringSummary:
    """Score every chunk of the partition into the run's staging files; the partition stays untouched."""
    spec, fm = prepared.spec, prepared.features
    engine = XGBoostEngine(prepared.artifact, device=spec.inference.device, nthread=spec.inference.nthread)
    probability_map = ProbabilityMap(
        BinnedBetaCalibrator.from_metadata(prepared.artifact.metadata.calibration), spec.prediction.interval_level
    )
    summary = ScoringSummary(device_type=engine.device_type)
    decisions: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    started = time.perf_counter()
    for chunk_id, table in enumerate(raw_chunks(prepared.raw_dir, chunk_rows)):
        guarded = guarded_chunk(pl.from_arrow(table), prepared.suite, entity_column=spec.entity_column)
        summary.rows_read += table.num_rows
        summary.chunks += 1
        summary.guard.merge(guarded.counts)
        if guarded.quarantined.height:
            quarantined = guarded.quarantined.select(
                pl.col(spec.entity_column).cast(pl.String).alias("entity_id"),
                "failed_expectations",
                pl.struct(pl.exclude("failed_expectations")).struct.json_encode().alias("raw_row"),
            )
            write_staged_chunk(dirs.quarantine, run_id, chunk_id, _partition_columns(quarantined, run_id, spec.name, partition_date).to_arrow())
        if guarded.actions.height:
            actions = guarded.actions.rename({"column": "column_name"})
            write_staged_chunk(dirs.guard_actions, run_id, chunk_id, _partition_columns(actions, run_id, spec.name, partition_date).to_arrow())
        if guarded.scorable.height == 0:
            continue
        batch = InferenceInput(
            chunk_id=chunk_id,
            entity_ids=guarded.scorable[spec.entity_column].to_arrow(),
            features=fm.feature_matrix(guarded.scorable),
            feature_names=tuple(fm.FEATURES),
        )
        inferred = engine.inference_margins(batch)
        decided = predict_decided_chunk(inferred, probability_map, spec.prediction)
        contributions = engine.inference_contributions(batch, decided.reason_rows)
        predicted = predict_output(
            decided,
            contributions,
            spec.prediction,
            run_id=run_id,
            job=spec.name,
            partition_date=partition_date,
            feature_version=fm.FEATURE_VERSION,
        )
        write_staged_chunk(dirs.predictions, run_id, chunk_id, predicted.table)
        summary.rows_scored += predicted.table.num_rows
        summary.rows_with_reasons += predicted.rows_needing_reasons
        summary.rows_without_adverse_reason += predicted.rows_without_adverse_reason
        summary.rows_straddling += predicted.straddling_rows
        summary.chunk_latency_ms.append(inferred.latency_ms)
        decisions.update(predicted.decisions)
        rules.update(predicted.rules)
    summary.wall_s = time.perf_counter() - started
    summary.decisions = dict(sorted(decisions.items()))
    summary.rules = dict(sorted(rules.items()))
    summary.guard_summary = guard_summary_rows(prepared.suite, summary.guard)
    write_staged_chunk(
        dirs.guard_summary, run_id, 0,
        _partition_columns(pl.DataFrame(summary.guard_summary, schema=GUARD_SUMMARY_COLUMNS), run_id, spec.name, partition_date).to_arrow(),
    )
    if summary.rows_read < spec.limits.min_rows:
        raise PartitionError(
            f"partition {partition_date} of job {spec.name} has {summary.rows_read} raw rows in {prepared.raw_dir}; "
            f"the job needs at least {spec.limits.min_rows} (limits.min_rows)"
        )
    breaches = guard_limit_breaches(
        summary.guard,
        max_repaired_share=spec.limits.max_repaired_share,
        max_quarantined_share=spec.limits.max_quarantined_share,
    )
    if breaches:
        raise GuardFailure(f"job {spec.name} on {partition_date}: " + "; ".join(breaches))
    log.info(
        "scored %s %s: %d read, %d scored, %d repaired, %d quarantined in %.2fs",
        spec.name, partition_date, summary.rows_read, summary.rows_scored,
        summary.guard.rows_repaired, summary.guard.rows_quarantined, summary.wall_s,
    )
    return summary
