"""The failure record of a partition run: a run that failed under its lease, or a day refused before it."""

from __future__ import annotations

import datetime as dt
import logging
import traceback

from tasks.errors import DiskFull, PartitionBusy, environment_fault, user_facing_error
from tasks.runs.lease import run_lease
from tasks.runs.recovery import (
    pending_ledger_dir,
    recorded_pending_failure,
    released_failure_room,
)
from tasks.runs.ticket import now_utc
from tasks.settings import Settings
from tasks.sinks.parquet_store import output_dirs
from tasks.sinks.publish import discarded_run, retried
from tasks.sinks.warehouse import Warehouse

log = logging.getLogger("scoring.run")


def _unfinished_before_commit(warehouse: Warehouse, run_id: str) -> bool:
    """Whether the ledger shows the run without committed rows (or has no row of it); False when it cannot be read."""
    try:
        return warehouse.run_status(run_id) in (None, "running", "publishing")
    except Exception as exc:
        log.warning("the ledger status of run %s could not be read (%s)", run_id, exc)
        return False


def recorded_failed_run(
    warehouse: Warehouse, settings: Settings, *, run_id: str, job: str, partition_date: dt.date, error: BaseException
) -> None:
    """The failure in the ledger (one line and the traceback) and the run's files dropped.

    A run whose rows were already committed is not failed: recovery finishes its publish. On a full
    disk, a run the ledger shows unfinished before its commit loses its files first, as recovery does:
    its staged outputs may be what fills the disk, and the ledger write needs the room. When the ledger
    cannot be written (warehouse locked, disk full), the failure is kept beside the outputs and the next
    start of the job records it; the files stay until then unless they were dropped already."""
    record = {
        "run_id": run_id,
        "job": job,
        "partition_date": partition_date,
        "ended_at": now_utc(),
        "error": f"{type(error).__name__}: {user_facing_error(error)[0]}",
        "error_detail": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
    }
    dirs, pending = output_dirs(settings, job), pending_ledger_dir(settings, job)
    if isinstance(environment_fault(error), DiskFull) and _unfinished_before_commit(warehouse, run_id):
        discarded_run(dirs, partition_date, run_id)
    try:
        failed = retried(lambda: warehouse.record_run_failed(**record))
    except Exception as exc:
        kept = recorded_pending_failure(pending, record)
        log.warning(
            "%s %s: the failure of run %s could not be written to the ledger (%s: %s); %s",
            job,
            partition_date,
            run_id,
            type(exc).__name__,
            exc,
            f"kept in {kept} for the next start" if kept else "the next start closes it as abandoned",
        )
        return
    released_failure_room(pending, run_id)
    if failed:
        discarded_run(dirs, partition_date, run_id)
    else:
        log.warning(
            "%s %s: run %s had committed its rows; the next start of the job finishes its publish",
            job,
            partition_date,
            run_id,
        )


def recorded_refused_run(
    warehouse: Warehouse, settings: Settings, *, run_id: str, job: str, partition_date: dt.date, error: BaseException
) -> bool:
    """A partition of a backfill or `nightly` refused before its lease (no raw data, raw data unreadable, a
    source that did not answer, ...), recorded in the ledger as a `refused` run with its reason, so that
    `--mode failed`, `--mode missing`, `score runs` and the catch-up find it. False when nothing was
    recorded: the run has its own row (it failed under its lease), or another run holds the partition,
    whose outcome is the partition's."""
    if isinstance(error, PartitionBusy) or warehouse.run_status(run_id) is not None:
        return False
    record = {
        "run_id": run_id,
        "job": job,
        "partition_date": partition_date,
        "ended_at": now_utc(),
        "error": f"{type(error).__name__}: {user_facing_error(error)[0]}",
        "error_detail": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
    }
    try:
        with run_lease(warehouse, settings.model_copy(update={"lock_wait_s": 0}), run_id, job, partition_date).held():
            return retried(lambda: warehouse.record_run_refused(**record))
    except PartitionBusy:
        return False
