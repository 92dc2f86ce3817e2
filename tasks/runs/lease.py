"""A partition run's start under its lease: the lease that makes it the partition's only writer, and what
dead runs left, finished or undone, before the run opens in the ledger."""

from __future__ import annotations

import dataclasses
import datetime as dt

from tasks.runs.recovery import (
    pending_ledger_dir,
    recovered_job,
    recovered_partition,
    reserved_failure_room,
)
from tasks.runs.ticket import RunTicket, now_utc
from tasks.settings import Settings
from tasks.sinks.delta import delta_tables
from tasks.sinks.parquet_store import output_dirs
from tasks.sinks.partition_lock import PartitionLease
from tasks.sinks.warehouse import Warehouse


def run_lease(
    warehouse: Warehouse, settings: Settings, run_id: str, job: str, partition_date: dt.date
) -> PartitionLease:
    """The lease that makes this run the partition's only writer (`with lease.held(): …`)."""
    return PartitionLease(
        warehouse, job, partition_date, run_id, ttl_s=settings.lock_ttl_s, wait_s=settings.lock_wait_s
    )


def started_run(warehouse: Warehouse, settings: Settings, ticket: RunTicket) -> list[dict]:
    """Under the partition's lease: what dead runs of the job left, finished or undone (this
    partition's and, where no live run holds them, the others'), then the run opened in the ledger."""
    with warehouse.kept_open():
        recovered = recovered_partition(
            warehouse,
            output_dirs(settings, ticket.job),
            job=ticket.job,
            partition_date=ticket.partition_date,
            holder_run_id=ticket.run_id,
            pending_dir=pending_ledger_dir(settings, ticket.job),
            now=now_utc(),
            delta=lambda: delta_tables(ticket.delta_sink, settings),
        )
        recovered += recovered_job(
            warehouse, settings, ticket.job, recovering_run_id=f"recovery-{ticket.run_id}", skip=ticket.partition_date
        )
        reserved_failure_room(pending_ledger_dir(settings, ticket.job), ticket.run_id)
        warehouse.record_run_started(
            {
                **ticket.model_dump(
                    include={"run_id", "job", "partition_date", "model_name", "model_version", "feature_version"}
                ),
                "started_at": now_utc(),
            }
        )
    return [dataclasses.asdict(r) for r in recovered]
