"""Prefect tasks of prediction monitoring and realized outcomes: thin wrappers over tasks/runs/monitoring.py.
They take and return plain values, never tables."""

from __future__ import annotations

import datetime as dt

from prefect import task
from prefect.runtime import flow_run

from flows.steps.artifacts import left_artifacts
from flows.steps.blocks import configured_warehouse, run_warehouse
from tasks.reports.artifacts import Artifact
from tasks.runs.calendar import ALL_JOBS
from tasks.runs.monitoring import (
    decision_monitoring,
    ingested_partition_outcomes,
    outcomes_run_name,
    written_monitoring_page,
)
from tasks.settings import current_settings


@task(name="monitor-decisions")
def monitor_decisions(
    job: str,
    partition_date: dt.date,
    run_id: str,
    groups: list[dict] | None = None,
    slice_counts: list[dict] | None = None,
) -> dict:
    """Decision mix, rule hits, score summary, straddling share and expected events of the published
    partition, and its slices, against the trailing window; stored in `decision_monitoring`,
    `slice_counts` and `slice_monitoring`. Returns the flagged measures. `groups` and `slice_counts`:
    the run's own counts; without them the published predictions and the stored slice counts are read."""
    settings = current_settings()
    result, artifacts = decision_monitoring(
        run_warehouse(run_id), settings, job, partition_date, run_id, groups, slice_counts
    )
    left_artifacts(artifacts)
    return result


@task(name="monitor-decisions")
def monitored_run_decisions(
    job: str, partition_date: dt.date, run_id: str, groups: list[dict], slice_counts: list[dict]
) -> tuple[dict, list[Artifact]]:
    """`monitor_decisions` of a run that has just published, from its own counts: the flagged measures, and the
    artifacts that its finish-run leaves in the run's artifact order."""
    return decision_monitoring(
        run_warehouse(run_id), current_settings(), job, partition_date, run_id, groups, slice_counts
    )


@task(name="ingest-outcomes")
def ingest_outcomes(job: str, partition_date: dt.date) -> dict:
    """Labels of one partition joined to its predictions; labels and outcome metrics replaced in the warehouse."""
    settings = current_settings()
    return ingested_partition_outcomes(configured_warehouse(settings), settings, job, partition_date)


@task(name="report-outcomes")
def report_outcomes(job: str, first_date: dt.date, last_date: dt.date) -> str:
    """Write the job's monitoring page for the range and leave the realized-performance artifacts; returns the page's path."""
    settings = current_settings()
    page, artifacts = written_monitoring_page(configured_warehouse(settings), settings, job, first_date, last_date)
    left_artifacts(artifacts)
    return str(page)


def current_outcomes_run_name() -> str:
    """The running outcomes flow run's name from its parameters: `outcomes <job or all> <first>…<last>`."""
    parameters = flow_run.parameters
    return outcomes_run_name(
        current_settings(), parameters.get("job", ALL_JOBS), parameters.get("start_date"), parameters.get("end_date")
    )
