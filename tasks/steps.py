"""Prefect tasks: thin wrappers that turn the domain functions into observable steps.

They pass small references (a run ticket, a summary) and never tables; engines and models are
built inside the task that uses them.
"""

from __future__ import annotations

import datetime as dt

from prefect import task
from prefect.artifacts import create_table_artifact
from pydantic import BaseModel, ConfigDict

from tasks.publish import discard_run_staging, published_partition
from tasks.scoring import ScoringSummary, output_dirs, prepared_job, score_partition_chunks
from tasks.settings import current_settings
from tasks.warehouse import DuckDBWarehouse


class RunTicket(BaseModel):
    """Identity of one scoring run, handed from step to step."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())

    run_id: str
    job: str
    partition_date: dt.date
    chunk_rows: int
    model_name: str
    model_version: str
    feature_version: str


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _warehouse() -> DuckDBWarehouse:
    return DuckDBWarehouse(current_settings().duckdb_path)


@task(name="start-run")
def start_run(run_id: str, job: str, partition_date: dt.date, chunk_rows: int | None) -> RunTicket:
    """Check spec, suite, model and feature versions, then open the run in the ledger."""
    prepared = prepared_job(job, partition_date, current_settings())
    meta = prepared.model.engine.metadata
    ticket = RunTicket(
        run_id=run_id,
        job=job,
        partition_date=partition_date,
        chunk_rows=chunk_rows or prepared.spec.chunk_rows,
        model_name=meta.name,
        model_version=meta.version,
        feature_version=prepared.features.FEATURE_VERSION,
    )
    _warehouse().record_run_started(
        {**ticket.model_dump(include={"run_id", "job", "partition_date", "model_name", "model_version", "feature_version"}), "started_at": _now()}
    )
    return ticket


@task(name="score-chunks")
def score_chunks(ticket: RunTicket) -> ScoringSummary:
    """Guard, infer and predict every chunk into staging files."""
    settings = current_settings()
    prepared = prepared_job(ticket.job, ticket.partition_date, settings)
    return score_partition_chunks(
        prepared,
        run_id=ticket.run_id,
        partition_date=ticket.partition_date,
        chunk_rows=ticket.chunk_rows,
        dirs=output_dirs(settings, ticket.job),
    )


@task(name="publish-partition")
def publish_partition(ticket: RunTicket, summary: ScoringSummary) -> dict[str, int]:
    """Replace the partition in the warehouse and in Parquet with this run's rows."""
    return published_partition(
        _warehouse(), output_dirs(current_settings(), ticket.job),
        job=ticket.job, partition_date=ticket.partition_date, run_id=ticket.run_id,
    )


@task(name="finish-run")
def finish_run(ticket: RunTicket, summary: ScoringSummary, published: dict[str, int]) -> dict:
    """Close the run as succeeded and leave a summary artifact on it."""
    counts = summary.ledger_counts()
    _warehouse().record_run_ended(ticket.run_id, status="succeeded", ended_at=_now(), counts=counts)
    create_table_artifact(
        key=f"run-summary-{ticket.job.replace('_', '-')}",
        table=[{"measure": k, "value": str(v)} for k, v in {**ticket.model_dump(), **counts, "published": published}.items()],
        description=f"Scoring of {ticket.job} for {ticket.partition_date}",
    )
    create_table_artifact(
        key=f"fallback-report-{ticket.job.replace('_', '-')}",
        table=[{**row, "share": f"{row['share']:.4%}"} for row in summary.fallback_report],
        description=(
            f"Fallbacks of {ticket.job} on {ticket.partition_date}: every repaired, quarantined, fallback-model, "
            f"failed-chunk and reason-less row, of {summary.rows_read} read (table fallback_report)"
        ),
    )
    create_table_artifact(
        key=f"guard-summary-{ticket.job.replace('_', '-')}",
        table=summary.guard_summary,
        description=(
            f"Feature guards of {ticket.job} on {ticket.partition_date}: rows each expectation repaired, "
            f"quarantined or failed, of {summary.rows_read} read (table guard_summary)"
        ),
    )
    return {"run_id": ticket.run_id, "job": ticket.job, "partition_date": ticket.partition_date.isoformat(), **counts}


@task(name="fail-run")
def fail_run(run_id: str, job: str, partition_date: dt.date, error: BaseException) -> None:
    """Record the failure with its message in the ledger and drop the run's staging files."""
    discard_run_staging(output_dirs(current_settings(), job), run_id)
    _warehouse().record_run_failed(
        run_id=run_id, job=job, partition_date=partition_date, ended_at=_now(), error=f"{type(error).__name__}: {error}"
    )
