"""Realized outcomes: ingest labels, join them to the predictions they belong to, measure, report."""

from __future__ import annotations

import datetime as dt

from prefect import flow

from tasks.jobs.calendar import job_name_enum, partition_range, yesterday
from tasks.jobspec import configured_jobs, load_job_spec
from flows.steps.monitoring import ingest_outcomes, report_outcomes
from tasks.monitoring.outcomes import outcome_window
from tasks.settings import current_settings

JobName = job_name_enum(current_settings())


@flow(name="outcomes", log_prints=True)
def outcomes(
    job: JobName | None = None,  # type: ignore[valid-type]
    start_date: dt.date | None = None,
    end_date: dt.date | None = None,
) -> list[dict]:
    """Ingest the labels of `job`'s partitions from `start_date` to `end_date` inclusive (every job, and
    the job's `monitoring.lookback_days` ending yesterday, when not given), compute the outcome
    metrics per partition and model version, and write the monitoring page. Re-running leaves the
    same tables.

    Args:
        job: The job whose labels to ingest; empty: every configured job.
        start_date: The first partition whose labels to ingest; empty: the job's lookback window.
        end_date: The last partition, inclusive; empty: yesterday.
    """
    settings = current_settings()
    jobs = [str(job)] if job else configured_jobs(settings)
    ingested = []
    for name in jobs:
        first, last = outcome_window(
            load_job_spec(name, settings), start_date=start_date, end_date=end_date, yesterday=yesterday(settings)
        )
        ingested += [ingest_outcomes(name, day) for day in partition_range(first, last)]
        report_outcomes(name, first, last)
    return ingested
