"""Make a run's staged outputs the partition's outputs: warehouse transaction, then Parquet swap."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

from tasks.contracts import PREDICTION_SCHEMA
from tasks.parquet_store import discard_staged, publish_staged_partition, staged_files
from tasks.scoring import OutputDirs
from tasks.warehouse import (
    DRIFT_HISTOGRAM_SCHEMA,
    DRIFT_REPORT_SCHEMA,
    FALLBACK_REPORT_SCHEMA,
    GUARD_ACTIONS_SCHEMA,
    GUARD_SUMMARY_SCHEMA,
    QUARANTINE_SCHEMA,
    Warehouse,
)


def published_partition(
    warehouse: Warehouse, dirs: OutputDirs, *, job: str, partition_date: dt.date, run_id: str
) -> dict[str, int]:
    """Rows now in the warehouse per table for the partition. Parquet is swapped only after the
    warehouse commit, so a failed load leaves both stores on the previous run."""
    datasets: dict[str, tuple[Path, pa.Schema]] = {
        "predictions": (dirs.predictions, PREDICTION_SCHEMA),
        "quarantine": (dirs.quarantine, QUARANTINE_SCHEMA),
        "guard_actions": (dirs.guard_actions, GUARD_ACTIONS_SCHEMA),
        "guard_summary": (dirs.guard_summary, GUARD_SUMMARY_SCHEMA),
        "fallback_report": (dirs.fallback_report, FALLBACK_REPORT_SCHEMA),
        "drift_report": (dirs.drift_report, DRIFT_REPORT_SCHEMA),
        "drift_histograms": (dirs.drift_histograms, DRIFT_HISTOGRAM_SCHEMA),
    }
    inserted = warehouse.replace_partition(
        job=job,
        partition_date=partition_date,
        files={table: staged_files(folder, run_id) for table, (folder, _) in datasets.items()},
    )
    for folder, schema in datasets.values():
        publish_staged_partition(folder, partition_date.isoformat(), run_id, schema)
    discard_staged(dirs.inference_handoff, run_id)
    return inserted


def discard_run_staging(dirs: OutputDirs, run_id: str) -> None:
    for folder in dirs.all():
        discard_staged(folder, run_id)
