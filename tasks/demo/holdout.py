"""Score labelled demo partitions outside the product's outputs, for calibration checks.

The rows go through the same guards, features, engine and probability map as a run, into a
throwaway staging folder that is discarded; nothing is published and the ledger is not touched.
"""

from __future__ import annotations

import datetime as dt
import uuid

import polars as pl

from tasks.scoring.prepared import prepared_job
from tasks.scoring.summary import score_partition_chunks
from tasks.settings import Settings
from tasks.sinks.parquet_store import discard_staged, output_dirs, staged_files


def scored_with_labels(settings: Settings, job: str, dates: list[dt.date], *, chunk_rows: int = 50_000) -> pl.DataFrame:
    """Predictions of `dates` joined to their labels; `outcome` is the label column, whatever its name."""
    frames = []
    dirs = output_dirs(settings, job)
    for day in dates:
        prepared = prepared_job(job, day, settings)
        run_id = f"holdout-{uuid.uuid4().hex[:8]}"
        score_partition_chunks(prepared, run_id=run_id, partition_date=day, chunk_rows=chunk_rows, dirs=dirs)
        try:
            predictions = pl.read_parquet(staged_files(dirs.predictions, run_id))
        finally:
            for folder in dirs.all():
                discard_staged(folder, run_id)
        labels = pl.read_parquet(settings.labels_partition_dir(job, day.isoformat()) / "*.parquet")
        (label,) = [c for c in labels.columns if c not in ("entity_id", "observed_date")]
        frames.append(
            predictions.join(labels.select("entity_id", pl.col(label).alias("outcome")), on="entity_id", how="inner")
        )
    return pl.concat(frames)
