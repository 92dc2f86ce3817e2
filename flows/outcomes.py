"""Realized outcomes: ingest labels, join them to the predictions they belong to, measure, report."""

from __future__ import annotations

import datetime as dt

from pydantic.json_schema import SkipJsonSchema

from flows.steps.monitoring import current_outcomes_run_name, ingest_outcomes, report_outcomes
from flows.steps.run_logs import logged_flow
from tasks.jobspec import configured_jobs, load_job_spec
from tasks.monitoring.outcomes import outcome_window
from tasks.runs.calendar import ALL_JOBS, job_or_all_enum, partition_range, yesterday
from tasks.settings import current_settings

JobOrAll = job_or_all_enum(current_settings())
# A date or nothing, shown as a plain date picker: the form's None toggle ('Property is type "None"') puzzled analysts.
OptionalDay = dt.date | SkipJsonSchema[None]


@logged_flow(name="outcomes", flow_run_name=current_outcomes_run_name, log_prints=True)
def outcomes(
    job: JobOrAll = ALL_JOBS,  # type: ignore[valid-type,assignment]
    start_date: OptionalDay = None,
    end_date: OptionalDay = None,
) -> list[dict]:
    """Ingest the labels of `job`'s partitions from `start_date` to `end_date` inclusive, compute the outcome
    metrics per partition and model version, and write the monitoring page. Re-running leaves the same tables.

    Args:
        job: The job whose labels to ingest; all: every configured job (what the 06:00 run does).
        start_date: The first partition whose labels to ingest; leave it empty for the job's lookback window
            (monitoring.lookback_days in its spec) ending on end_date.
        end_date: The last partition, inclusive; leave it empty for yesterday.
    """
    settings = current_settings()
    jobs = configured_jobs(settings) if job == ALL_JOBS else [str(job)]
    ingested = []
    for name in jobs:
        first, last = outcome_window(
            load_job_spec(name, settings), start_date=start_date, end_date=end_date, yesterday=yesterday(settings)
        )
        ingested += [ingest_outcomes(name, day) for day in partition_range(first, last)]
        report_outcomes(name, first, last)
    return ingested
