"""Make a run's staged outputs the partition's outputs: warehouse transaction, then Parquet swap."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

from tasks.contracts import PREDICTION_SCHEMA
from tasks.parquet_store import discard_staged, publish_staged_partition, staged_files
from tasks.scoring import OutputDirs
from tasks.warehouse import DuckDBWarehouse

QUARANTINE_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()), ("job", pa.string()), ("partition_date", pa.date32()), ("entity_id", pa.string()),
        ("failed_expectations", pa.list_(pa.string())), ("raw_row", pa.string()),
    ]
)
GUARD_ACTIONS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()), ("job", pa.string()), ("partition_date", pa.date32()), ("entity_id", pa.string()),
        ("expectation", pa.string()), ("column_name", pa.string()), ("action", pa.string()),
        ("old_value", pa.string()), ("new_value", pa.string()),
    ]
)
FALLBACK_REPORT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()), ("job", pa.string()), ("partition_date", pa.date32()), ("kind", pa.string()),
        ("detail", pa.string()), ("rows", pa.int64()), ("share", pa.float64()), ("limit", pa.float64()),
        ("breached", pa.bool_()),
    ]
)
_RUN_KEY = [("run_id", pa.string()), ("job", pa.string()), ("partition_date", pa.date32())]
DRIFT_REPORT_SCHEMA = pa.schema(
    [
        *_RUN_KEY, ("feature", pa.string()), ("baseline", pa.string()), ("psi", pa.float64()), ("ks", pa.float64()),
        ("ks_upper", pa.float64()), ("wasserstein", pa.float64()), ("js", pa.float64()), ("flag", pa.string()),
        ("rows", pa.int64()), ("null_share", pa.float64()), ("baseline_null_share", pa.float64()),
        ("out_of_range_share", pa.float64()),
    ]
)
DRIFT_HISTOGRAM_SCHEMA = pa.schema(
    [*_RUN_KEY, ("feature", pa.string()), ("edges", pa.list_(pa.float64())), ("counts", pa.list_(pa.int64())), ("nulls", pa.int64())]
)
GUARD_SUMMARY_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()), ("job", pa.string()), ("partition_date", pa.date32()), ("expectation", pa.string()),
        ("column_name", pa.string()), ("expectation_type", pa.string()), ("action", pa.string()),
        ("evaluated_by", pa.string()), ("rows", pa.int64()), ("share", pa.float64()),
    ]
)


def published_partition(
    warehouse: DuckDBWarehouse, dirs: OutputDirs, *, job: str, partition_date: dt.date, run_id: str
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
