"""Score one partition of one job: the flow every other flow is built from."""

from __future__ import annotations

import datetime as dt
import time
import uuid

from prefect import flow
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.futures import as_completed, wait
from prefect.runtime import flow_run

from tasks.calendar import parse_partition_date
from tasks.execution import configured_task_runner, inference_task_resources
from tasks.jobspec import checked_job_name
from tasks.monitoring_steps import monitor_decisions
from tasks.progress import reported_progress
from tasks.scoring import ScoringSummary
from tasks.settings import current_settings
from tasks.steps import (
    RunTicket,
    fail_run,
    finish_run,
    infer_unit,
    partition_lease,
    plan_work_units,
    predict_unit,
    prepare_run,
    publish_partition,
    record_run_warnings,
    start_run,
    summarize_run,
)


@flow(name="score-units")
def score_units(ticket: RunTicket) -> ScoringSummary:
    """Each work unit's inference task, then its prediction task, on the configured task runner."""
    started = time.time()
    units = plan_work_units(ticket)
    with inference_task_resources(current_settings()):
        inferred = [infer_unit.submit(ticket, unit) for unit in units]
    predicted = [predict_unit.submit(ticket, inference) for inference in inferred]
    label = f"{ticket.job} {ticket.partition_date}"
    progress = create_progress_artifact(0.0, description=f"{label}: {len(units)} work unit(s) of {ticket.chunk_rows}-row chunks")
    for done, _ in enumerate(as_completed(predicted), start=1):
        update_progress_artifact(progress, 100.0 * done / len(units))
        reported_progress(f"{label} units", done, len(units))
    # Every unit has stopped writing staging files before a failure is raised and they are dropped.
    wait(inferred + predicted)
    return summarize_run(ticket, [f.result() for f in inferred], [f.result() for f in predicted], started)


@flow(name="score_partition", log_prints=True)
def score_partition(job: str, date: dt.date, chunk_rows: int | None = None) -> dict:
    """Guard, infer, predict and publish `job` for the partition `date`; re-running replaces it."""
    # Checked before anything is read, written or logged under their names.
    job, date = checked_job_name(job, current_settings()), parse_partition_date(date, what="date")
    run_id = str(flow_run.id or uuid.uuid4())
    # Spec, suite and model are checked before the lease, so a mistake leaves no trace.
    ticket = prepare_run(run_id, job, date, chunk_rows)
    # One writer per partition: a second run waits for the lease or fails naming its holder,
    # before it opens a ledger row.
    lease = partition_lease(run_id, job, date)
    with lease.held():
        try:
            recovered = start_run(ticket)
            summary = score_units.with_options(task_runner=configured_task_runner(current_settings()))(ticket)
            lease.ensure_held()
            published = publish_partition(ticket, summary)
        except Exception as error:
            fail_run(run_id, job, date, error)
            raise
        # The outputs are published and the run has succeeded: what fails from here on is kept on
        # the run as a warning, not lost and not a failure.
        finished = finish_run(ticket, summary, published, return_state=True)
        result = finished.result() if finished.is_completed() else {
            "run_id": run_id, "job": job, "partition_date": date.isoformat(), **summary.ledger_counts(),
            "report": "", "warnings": [*published.warnings, f"artifacts not written: {finished.message}"],
        }
        monitored = monitor_decisions(job, date, run_id, return_state=True)
        if monitored.is_completed():
            result["decision_monitoring"] = monitored.result()
        else:
            result["warnings"].append(f"decision monitoring failed: {monitored.message}")
        if result["warnings"] != published.warnings:
            record_run_warnings(run_id, result["warnings"])
        result["recovered"] = recovered
    return result
