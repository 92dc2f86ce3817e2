"""Score one partition of one job: the flow every other flow is built from."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated

from prefect.runtime import flow_run
from prefect.utilities.annotations import quote
from pydantic import Field

from flows.steps.alerts import alert_failed_run
from flows.steps.partition import (
    failed_run,
    finished_run,
    partition_lease,
    partition_run_name,
    prepare_run,
    publish_partition,
    start_run,
)
from flows.steps.run_logs import logged_flow, refusal_writes_no_log
from flows.steps.task_runners import UnitThreadPoolTaskRunner
from flows.steps.units import partition_summary
from tasks.jobspec import checked_job_name
from tasks.results import PartitionResult
from tasks.runs.calendar import parse_partition_date
from tasks.settings import current_settings


@logged_flow(
    partition=True,
    name="score_partition",
    flow_run_name=partition_run_name,
    log_prints=True,
    task_runner=UnitThreadPoolTaskRunner(),
    on_failure=[alert_failed_run],
)
def score_partition(job: str, date: dt.date, chunk_rows: Annotated[int, Field(ge=0)] = 0) -> PartitionResult:
    """Guard, infer, predict and publish `job` for the partition `date`; re-running replaces it.

    Args:
        job: The job to score: one of the specs in jobs/.
        date: The partition: the business day the data belongs to.
        chunk_rows: Engineering: rows per chunk; 0 keeps the job's own chunk size.
    """
    # Checked before anything is read, written or logged under their names.
    job, date = checked_job_name(job, current_settings()), parse_partition_date(date, what="date")
    run_id = str(flow_run.id or uuid.uuid4())
    # Spec, suite and model are checked before the lease, so a mistake leaves no trace.
    with refusal_writes_no_log():
        ticket = prepare_run(run_id, job, date, chunk_rows or None)
    # One writer per partition: a second run waits for the lease or fails naming its holder, before its ledger row.
    lease = partition_lease(run_id, job, date)
    with lease.held():
        try:
            ticket, recovered = start_run(ticket)
            summary = partition_summary(ticket)
            lease.ensure_held()
            # quote(): Prefect would walk every list of the summary looking for futures, ~0.1 s a task.
            published = publish_partition(ticket, quote(summary))
        except BaseException as error:
            failed_run(run_id, job, date, error)
            raise
        return PartitionResult.from_dict({**finished_run(ticket, summary, published), "recovered": recovered})
