"""Prefect tasks of a partition run's life — prepare, start, publish, finish, fail — thin wrappers over
tasks/runs/ and tasks/sinks/publish.py; the work units' tasks are in units.py.

They pass small references (a run ticket, a summary) and never tables; engines and models are
built inside the task that uses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import time
import uuid

from prefect import task
from prefect.runtime import flow_run
from prefect.states import State
from prefect.utilities.annotations import quote

from flows.steps.alerts import run_link, sent_alerts
from flows.steps.api import ensure_orchestration_api, orchestration_lost
from flows.steps.artifacts import left_artifacts_in_order
from flows.steps.blocks import configured_warehouse, run_warehouse, with_warehouse_url
from flows.steps.monitoring import monitored_run_decisions
from flows.steps.units import prepared_run_job, stopping_signal
from tasks.errors import RunStopped, user_facing_error
from tasks.monitoring.alerts import published_run_alerts
from tasks.reports.artifacts import Artifact
from tasks.reports.links import served_url
from tasks.reports.model_card import MODEL_CARD_FILE, job_model_card, model_card_artifact, written_model_card
from tasks.runs.failure import recorded_failed_run, recorded_refused_run
from tasks.runs.lease import run_lease, started_run
from tasks.runs.page import partition_page, report_url, trailing_shifts
from tasks.runs.recovery import pending_ledger_dir, recovered_job, released_failure_room
from tasks.runs.result import finished_run_result, run_artifacts, run_result
from tasks.runs.ticket import RunTicket, now_utc, run_ticket
from tasks.scoring.summary import ScoringSummary
from tasks.settings import current_settings
from tasks.sinks.delta import delta_tables
from tasks.sinks.parquet_store import output_dirs
from tasks.sinks.partition_lock import PartitionLease
from tasks.sinks.publish import PublishedPartition, partition_store, published_partition, retried

log = logging.getLogger("scoring.run")


def partition_run_name() -> str:
    """`<job> <date>`, the name of a score_partition run: what an analyst looks for among a backfill's subflows
    (Prefect's default is a random name)."""
    parameters = flow_run.parameters
    return f"{parameters['job']} {parameters['date']}"


def partition_lease(run_id: str, job: str, partition_date: dt.date) -> PartitionLease:
    return run_lease(run_warehouse(run_id), current_settings(), run_id, job, partition_date)


@task(name="prepare-run")
def prepare_run(run_id: str, job: str, partition_date: dt.date, chunk_rows: int | None) -> RunTicket:
    """Check spec, suite, model metadata and feature versions, before the lease: a mistake fails
    here, with nothing written and no ledger row. The model stays loaded for the run's units."""
    settings = current_settings()
    prepared = prepared_run_job(run_id, job, partition_date, settings.model_dump_json())
    return run_ticket(
        prepared,
        run_id=run_id,
        partition_date=partition_date,
        chunk_rows=chunk_rows,
        max_run_seconds=settings.max_run_seconds,
    )


@task(name="start-run")
def start_run(ticket: RunTicket) -> tuple[RunTicket, list[dict]]:
    """Under the partition's lease: finish or undo what dead runs of the job left (this partition's
    and, where no live run holds them, the others'), then open the run in the ledger. The ticket comes
    back with its deadline: the time limit counts from here, waiting for another run's lease is not
    this run's time."""
    started = ticket.started(time.time())
    return started, started_run(run_warehouse(ticket.run_id), current_settings(), started)


@task(name="recover-job")
def recover_job(job: str) -> list[dict]:
    """Finish or undo what dead runs of `job` left, where no live run holds the partition."""
    recovered = recovered_job(
        configured_warehouse(current_settings()),
        with_warehouse_url(current_settings()),
        job,
        recovering_run_id=f"recovery-{uuid.uuid4()}",
    )
    return [dataclasses.asdict(r) for r in recovered]


@task(name="publish-partition")
def publish_partition(ticket: RunTicket, summary: ScoringSummary) -> PublishedPartition:
    """Replace the partition in the warehouse and in Parquet with this run's rows and page, as one commit,
    then in the spec's Delta tables."""
    if (deadline := ticket.run_deadline()) is not None:
        deadline.check()
    ensure_orchestration_api(
        f"run {ticket.run_id} of {ticket.job} {ticket.partition_date} is not published and the partition keeps its previous outputs"
    )
    counts = summary.ledger_counts()
    settings = current_settings()
    warehouse = run_warehouse(ticket.run_id)
    # The trailing window's read and the publish share one open database: an open costs ~20-35 ms and a close after
    # writes a checkpoint (bench/backfill.py pays them once per partition).
    with warehouse.kept_open():
        shifts, window_days = trailing_shifts(warehouse, settings, ticket, summary)
        page, warnings = partition_page(ticket, summary, counts, shifts=shifts, window_days=window_days)
        published = published_partition(
            warehouse,
            output_dirs(settings, ticket.job),
            job=ticket.job,
            partition_date=ticket.partition_date,
            run_id=ticket.run_id,
            counts=counts,
            page_html=page,
            warnings=warnings,
            ended_at=now_utc(),
            crash_at=settings.crash_at,
            delta=delta_tables(ticket.delta_sink, settings),
        )
    # Published: whatever fails from here is a warning, never a failure record.
    released_failure_room(pending_ledger_dir(settings, ticket.job), ticket.run_id)
    return published


@task(name="finish-run")
def finish_run(
    ticket: RunTicket,
    summary: ScoringSummary,
    published: PublishedPartition,
    monitoring: dict | None = None,
    more_artifacts: list[Artifact] | None = None,
) -> dict:
    """Leave the run's key numbers (with the decision-mix shift `monitoring` flagged), page link, `more_artifacts`
    (decision monitoring's, the model card's), drift, fallback and guard tables as artifacts, the key numbers first in
    the UI."""
    report_path = partition_store(output_dirs(current_settings(), ticket.job)).page_link(
        ticket.partition_date.isoformat()
    )
    log.info("run report of %s %s: %s", ticket.job, ticket.partition_date, report_path)
    page_url = report_url(current_settings().report_base_url, ticket.job, ticket.partition_date)
    left_artifacts_in_order(
        run_artifacts(
            ticket,
            summary,
            published,
            report_path,
            page_url=page_url,
            monitoring=monitoring,
            more_artifacts=more_artifacts or (),
        )
    )
    return run_result(ticket, summary, report=str(report_path), warnings=published.warnings)


def finished_run(ticket: RunTicket, summary: ScoringSummary, published: PublishedPartition) -> dict:
    """Decision monitoring and artifacts of a published run. The run has succeeded: what fails here
    is kept on its ledger row as a warning, not lost and not a failure."""
    # Decision monitoring and the model card read and write the warehouse back to back: one open database (their
    # tasks run in this thread), closed before the artifacts and alerts talk to the network. A database that cannot be
    # opened fails each task on its own, as a warning of the published run, never the run.
    with contextlib.ExitStack() as opened:
        with contextlib.suppress(Exception):
            opened.enter_context(run_warehouse(ticket.run_id).kept_open())
        # quote(): the summary's lists are not walked for futures (see score_partition).
        monitored = monitored_run_decisions(
            ticket.job,
            ticket.partition_date,
            ticket.run_id,
            quote(summary.decision_groups),
            quote(summary.slice_counts),
            return_state=True,
        )
        # Every artifact of the run is left by finish-run, which alone can keep the key numbers first.
        carded = write_model_card(ticket, return_state=True)
    monitoring, monitoring_artifacts = monitored.result() if monitored.is_completed() else (None, [])
    card = [carded.result()] if carded.is_completed() else []
    finished = finish_run(
        ticket,
        quote(summary),
        quote(published),
        quote(monitoring),
        quote([*monitoring_artifacts, *card]),
        return_state=True,
    )
    result = finished_run_result(
        ticket,
        summary,
        published,
        artifacts=finished.result() if finished.is_completed() else None,
        artifacts_error=_failure(finished),
        monitoring=monitoring,
        monitoring_error=_failure(monitored),
    )
    if not carded.is_completed():
        result["warnings"].append(f"model card not written: {_failure(carded)}")
    alerted = send_alerts(
        ticket,
        quote(summary.drift_report),
        result.get("decision_monitoring"),
        result.get("report") or None,
        quote([r for r in summary.model_health if r.get("section") == "class_mix"]),
        return_state=True,
    )
    result["warnings"] += alerted.result() if alerted.is_completed() else [f"alerts not sent: {_failure(alerted)}"]
    if result["warnings"] != published.warnings:
        recorded = record_run_warnings(ticket.run_id, result["warnings"], return_state=True)
        if not recorded.is_completed():
            # The outputs are published and the row says succeeded; only the terminal can still say what went wrong.
            result["warnings"].append(
                f"these warnings are not in the ledger row of run {ticket.run_id}: {_failure(recorded)}"
            )
    return result


@task(name="write-model-card")
def write_model_card(ticket: RunTicket) -> Artifact:
    """The job's model card rewritten with the figures of the run just published (its inference measures, its guards),
    as Markdown and as a page beside it. Returns its artifact, which finish-run leaves: a link to the page under
    SCORING_REPORT_BASE_URL, else its path."""
    settings = current_settings()
    markdown = job_model_card(ticket.job, settings, run_warehouse(ticket.run_id))
    page = written_model_card(markdown, settings.output_dir(ticket.job) / MODEL_CARD_FILE)
    log.info("model card of %s: %s", ticket.job, page)
    return model_card_artifact(ticket.job, page, served_url(settings.report_base_url, settings.output_root, page))


def _failure(state: State) -> str:
    """A failed task's error as the one line the CLI would print for it (a full disk as `disk full: …`), not
    Prefect's "Task run encountered an exception …"."""
    if state.is_completed():
        return ""
    error = state.result(raise_on_failure=False)
    return user_facing_error(error)[0] if isinstance(error, BaseException) else str(state.message)


@task(name="send-alerts")
def send_alerts(
    ticket: RunTicket,
    drift_rows: list[dict],
    monitoring: dict | None,
    page: str | None,
    health_rows: list[dict] | None = None,
) -> list[str]:
    """Drift alerts, decision-monitoring shifts and a class-mix shift of the published run, through the settings' notification block."""
    settings = current_settings()
    alerts = published_run_alerts(
        ticket.job,
        ticket.partition_date.isoformat(),
        drift_rows=drift_rows,
        monitoring=monitoring,
        health_rows=health_rows or (),
        run_link=run_link(flow_run.id),
        page=report_url(settings.report_base_url, ticket.job, ticket.partition_date) or page,
        words=ticket.words,
    )
    return sent_alerts(alerts)


@task(name="record-run-warnings")
def record_run_warnings(run_id: str, warnings: list[str]) -> None:
    """What failed after the run published (page, artifacts, monitoring), kept on its ledger row."""
    retried(lambda: run_warehouse(run_id).record_run_warnings(run_id, warnings))


def failed_run(run_id: str, job: str, partition_date: dt.date, error: BaseException) -> None:
    """The run's ledger row closed as failed by whatever ended it: an error, or SIGTERM or Ctrl-C on the way
    out (not left `running` until the next start). Anything else that is no Exception (a process exiting)
    passes through."""
    if isinstance(error, Exception):
        fail_run(run_id, job, partition_date, error)
    elif (signum := stopping_signal(error)) is not None:
        fail_run(run_id, job, partition_date, RunStopped(signum))


@task(name="fail-run")
def fail_run(run_id: str, job: str, partition_date: dt.date, error: BaseException) -> None:
    """Record the failure in the ledger and drop the run's files (tasks/runs/failure.py: recorded_failed_run);
    an HTTP error of a call to a lost Prefect API is recorded as what it means."""
    error = orchestration_lost(error) or error
    recorded_failed_run(
        run_warehouse(run_id), current_settings(), run_id=run_id, job=job, partition_date=partition_date, error=error
    )


@task(name="record-refused-run")
def record_refused_run(run_id: str, job: str, partition_date: dt.date, error: BaseException) -> bool:
    """A partition of a backfill or nightly refused before its lease, as a failed run in the ledger
    (tasks/runs/failure.py: recorded_refused_run)."""
    settings = with_warehouse_url(current_settings())
    return recorded_refused_run(
        configured_warehouse(settings),
        settings,
        run_id=run_id,
        job=job,
        partition_date=partition_date,
        error=error,
    )
