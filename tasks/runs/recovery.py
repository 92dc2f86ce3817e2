"""Finish or undo what killed and faulted runs left behind, so the ledger and every store agree.

A run that died before its warehouse commit (`running` or `publishing`) is closed as `failed` and
its staged files and unpublished version are removed: the previous run's outputs stand in every
store. A run that died after the commit (`committed`), or whose Delta tables could not be written,
has its rows in the warehouse and a complete version folder: recovery swaps the Parquet pointer to
it, writes its version files to the job's Delta tables when the spec has a Delta sink (a predicate
overwrite, harmless when they were written already), and closes it as `succeeded` (roll forward).
A Delta table that still cannot be written stops the recovery with SinkUnwritable and the run stays
`committed`: no later run of the partition may publish before its tables caught up. A failure
that could not be written to the ledger (the warehouse was locked or unreachable) was kept as a
pending record beside the outputs and is applied first, so the ledger keeps the real error rather
than "abandoned".

Recovery of a partition runs under its lease, so it never touches a partition a live run holds.
"""

from __future__ import annotations

import datetime as dt
import errno
import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.catalog import INFERENCE_HANDOFF
from tasks.errors import PartitionBusy, disk_full_fault
from tasks.jobspec import load_job_spec
from tasks.settings import Settings
from tasks.sinks.delta import DeltaTables, delta_tables, written_delta_partition
from tasks.sinks.parquet_store import OutputDirs, discard_staged, output_dirs
from tasks.sinks.partition_lock import PartitionLease
from tasks.sinks.publish import discarded_run, partition_store, version_tables
from tasks.sinks.warehouse import Warehouse

log = logging.getLogger("scoring.recovery")


@dataclass(frozen=True)
class RecoveredRun:
    """One run recovery closed: its status before and after, and what was done to its outputs."""

    run_id: str
    job: str
    partition_date: dt.date
    was: str
    now: str
    action: str


def pending_ledger_dir(settings: Settings, job: str) -> Path:
    return settings.output_dir(job) / "_ledger"


FAILURE_RESERVATION_BYTES = 64 * 1024
"""Room a run sets aside for its own failure record when it starts: a full disk stops the ledger
write that would record the failure, and then also any new file that would keep it."""


def _reservation(folder: Path, run_id: str) -> Path:
    return folder / f"{run_id}.reserved"


def reserved_failure_room(folder: Path, run_id: str) -> Path:
    """Set aside FAILURE_RESERVATION_BYTES for the run's failure record, before its ledger row is opened.

    A disk without that much room stops the run here, as DiskFull, before its row says `running`: the
    failure then goes in as a `failed` row where the ledger still takes a write, and otherwise the run
    leaves no row, never one left `running` with a failure nothing could keep."""
    path = _reservation(folder, run_id)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as file:
            # Written, not only sized: a sparse file would need new blocks when the record goes in.
            file.write(b"\0" * FAILURE_RESERVATION_BYTES)
            file.flush()
            os.fsync(file.fileno())
        return path
    except OSError as exc:
        path.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full_fault(
                path, needed_bytes=FAILURE_RESERVATION_BYTES, detail="the room a run sets aside for its failure record"
            ) from exc
        raise


def released_failure_room(folder: Path, run_id: str) -> None:
    """Give back the room a run set aside: it ended, or recovery closed it."""
    _reservation(folder, run_id).unlink(missing_ok=True)


def _fitted(record: dict[str, Any], limit: int) -> bytes:
    """The record as JSON in at most `limit` bytes: the traceback loses its start (its end says where it failed)."""
    text = json.dumps(record, default=str).encode()
    if len(text) <= limit:
        return text
    detail = record.get("error_detail") or ""
    # Each character dropped shortens the JSON by at least one byte; the margin pays for the "…".
    keep = max(0, len(detail) - (len(text) - limit) - 64)
    text = json.dumps(
        {**record, "error_detail": "…" + detail[len(detail) - keep :] if keep else None}, default=str
    ).encode()
    if len(text) <= limit:
        return text
    return json.dumps(
        {**record, "error_detail": None, "error": record["error"][: limit // 8] + "…"}, default=str
    ).encode()


def recorded_pending_failure(folder: Path, record: dict[str, Any]) -> Path | None:
    """Keep a failure the ledger could not take, for the next start to apply; None when even that fails.

    The record goes into the room the run set aside when it started (reserved_failure_room), which
    a full disk cannot refuse; without one, into a new file."""
    path = folder / f"{record['run_id']}.json"
    reserved = _reservation(folder, record["run_id"])
    if reserved.exists():
        try:
            with reserved.open("r+b") as file:
                file.write(_fitted(record, FAILURE_RESERVATION_BYTES))
                file.truncate()
                file.flush()
                os.fsync(file.fileno())
            os.replace(reserved, path)
            return path
        except OSError as exc:
            log.warning(
                "run %s: its failure record did not fit in the room set aside for it (%s)", record["run_id"], exc
            )
    tmp = path.with_suffix(".tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record, default=str))
        os.replace(tmp, path)
        return path
    except OSError as exc:
        # A half-written record (a full disk) is of no use to the next start and would stay behind.
        tmp.unlink(missing_ok=True)
        log.warning("could not keep the failure of run %s for later either (%s)", record["run_id"], exc)
        return None


def _pending_failures(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            record["partition_date"] = dt.date.fromisoformat(str(record["partition_date"]))
            # JSON keeps the time as text; PostgreSQL refuses text for a timestamptz column (SQLSTATE 42804).
            record["ended_at"] = dt.datetime.fromisoformat(str(record["ended_at"]))
            found.append((path, record))
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable pending ledger record %s: %s", path, exc)
    return found


def job_delta_tables(job: str, settings: Settings) -> DeltaTables | None:
    """The Delta tables the job's spec names now; None without a Delta sink."""
    return delta_tables(load_job_spec(job, settings).sinks.delta, settings)


def recovered_partition(
    warehouse: Warehouse,
    dirs: OutputDirs,
    *,
    job: str,
    partition_date: dt.date,
    holder_run_id: str,
    pending_dir: Path,
    now: dt.datetime,
    delta: Callable[[], DeltaTables | None] = lambda: None,
) -> list[RecoveredRun]:
    """Close every unfinished run of the partition but `holder_run_id`. The caller holds the lease.

    `delta()` gives the job's Delta tables; called only to roll a committed run forward, so a spec
    that no longer loads stops only the recovery that needs it."""
    store = partition_store(dirs)
    partition = partition_date.isoformat()
    recovered: list[RecoveredRun] = []
    for path, record in _pending_failures(pending_dir):
        if record["partition_date"] != partition_date or record["run_id"] == holder_run_id:
            continue
        was = warehouse.run_status(record["run_id"]) or "missing"
        if warehouse.record_run_failed(
            **{k: record[k] for k in ("run_id", "job", "partition_date", "ended_at", "error", "error_detail")}
        ):
            discarded_run(dirs, partition_date, record["run_id"])
            released_failure_room(pending_dir, record["run_id"])
            recovered.append(
                RecoveredRun(
                    record["run_id"], job, partition_date, was, "failed", "failure recorded from the pending record"
                )
            )
        path.unlink(missing_ok=True)
    for row in warehouse.unfinished_runs(job, partition_date):
        run_id, status = row["run_id"], row["status"]
        if run_id == holder_run_id:
            continue
        if status == "committed":
            store.swapped_in(partition, run_id)
            tables = delta()
            if tables is not None:
                written_delta_partition(
                    tables,
                    job=job,
                    partition_date=partition_date,
                    run_id=run_id,
                    files=version_tables(store, partition, run_id),
                )
            released_failure_room(pending_dir, run_id)
            warehouse.record_run_rolled_forward(
                run_id,
                ended_at=now,
                warning=(
                    f"published by recovery (run {holder_run_id}): the run's publish did not finish after its warehouse commit"
                    + ("; recovery wrote its Delta tables" if tables is not None else "")
                ),
            )
            discard_staged(dirs.of(INFERENCE_HANDOFF), run_id)
            done = "Parquet swapped to its committed version" + (
                f", Delta tables {tables.base} written" if tables is not None else ""
            )
            recovered.append(RecoveredRun(run_id, job, partition_date, status, "succeeded", done))
        else:
            # Files first, then the ledger: a kill between the two leaves a row still unfinished, which
            # the next start closes again, never a closed row whose staged files nobody removes.
            discarded_run(dirs, partition_date, run_id)
            released_failure_room(pending_dir, run_id)
            warehouse.record_run_abandoned(
                run_id,
                ended_at=now,
                error=(
                    f"abandoned while {status}: its process died or lost the partition lease before the warehouse commit; "
                    f"the previous outputs stand (closed by run {holder_run_id})"
                ),
            )
            recovered.append(
                RecoveredRun(
                    run_id, job, partition_date, status, "failed", "staged files and unpublished version removed"
                )
            )
    for run in recovered:
        log.warning(
            "recovered run %s of %s %s: %s -> %s (%s)", run.run_id, job, partition_date, run.was, run.now, run.action
        )
    return recovered


def partitions_needing_recovery(warehouse: Warehouse, settings: Settings, job: str) -> list[dt.date]:
    dates = {row["partition_date"] for row in warehouse.unfinished_runs(job)}
    dates |= {record["partition_date"] for _, record in _pending_failures(pending_ledger_dir(settings, job))}
    return sorted(dates)


def recovered_job(
    warehouse: Warehouse,
    settings: Settings,
    job: str,
    *,
    recovering_run_id: str,
    skip: dt.date | None = None,
) -> list[RecoveredRun]:
    """Recover every partition of `job` that has unfinished runs, except `skip` and partitions a live
    run holds (their lease is busy: that run is still working and closes its own row)."""
    recovered: list[RecoveredRun] = []
    dirs = output_dirs(settings, job)
    delta = functools.cache(lambda: job_delta_tables(job, settings))
    for day in partitions_needing_recovery(warehouse, settings, job):
        if day == skip:
            continue
        lease = PartitionLease(warehouse, job, day, recovering_run_id, ttl_s=settings.lock_ttl_s, wait_s=0)
        try:
            with lease.held():
                recovered += recovered_partition(
                    warehouse,
                    dirs,
                    job=job,
                    partition_date=day,
                    holder_run_id=recovering_run_id,
                    pending_dir=pending_ledger_dir(settings, job),
                    now=dt.datetime.now(dt.UTC),
                    delta=delta,
                )
        except PartitionBusy:
            log.info("partition %s of %s is held by a live run; left to it", day, job)
    return recovered
