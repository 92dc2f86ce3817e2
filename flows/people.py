"""The flows people start: the nightly run of every job, and backfills of a date range."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.steps import partitions
from flows.steps.blocks import with_warehouse_url
from flows.steps.partition import recover_job
from flows.steps.run_logs import logged_flow
from tasks.jobspec import configured_jobs
from tasks.runs.calendar import job_name_enum, scheduled_partition_date
from tasks.runs.scheduling import BackfillMode, catch_up_dates
from tasks.settings import current_settings

JobName = job_name_enum(current_settings())
MAX_CONCURRENCY = 8  # partitions one backfill scores at once, at most
BACKFILL_RUNNER = ThreadPoolTaskRunner(max_workers=MAX_CONCURRENCY)


@logged_flow(name="nightly", flow_run_name=partitions.nightly_run_name)
def nightly(date: dt.date | None = None) -> list[dict]:
    """Score every configured job's night, after the days of the last `SCORING_CATCH_UP_DAYS` whose run
    failed, was abandoned or never ran; one failure does not stop the rest.

    Args:
        date: The partition (business day) to score. Leave it empty: a scheduled run scores the night before
            its scheduled start, a run started by hand yesterday.
    """
    settings = with_warehouse_url(current_settings())
    day = date or scheduled_partition_date(settings, partitions.scheduled_start())
    outcomes = []
    for job in configured_jobs(settings):
        recover_job(job)
        outcomes += [partitions.scored_partition(job, d, None) for d in [*catch_up_dates(settings, job, day), day]]
    return partitions.reported_outcomes(outcomes, "nightly-outcomes")


@logged_flow(name="backfill", flow_run_name=partitions.backfill_run_name, task_runner=BACKFILL_RUNNER)
def backfill(
    job: JobName,  # type: ignore[valid-type]
    start_date: dt.date,
    end_date: dt.date,
    mode: BackfillMode = "all",
    dry_run: bool = False,
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] = 1,
    chunk_rows: Annotated[int, Field(ge=0)] = 0,
) -> list[dict]:
    """Score the partitions of the range that `mode` selects; failures are listed, not fatal to the rest.

    Args:
        job: The job to score: one of the specs in jobs/.
        start_date: The first partition to score: the business day the data belongs to, not the day it is scored.
        end_date: The last partition to score, inclusive: not before the start, not after today, at most SCORING_MAX_BACKFILL_DAYS on.
        mode: Which days of the range: all of them; missing, those never scored or refused; failed, whose last run failed or was refused.
        dry_run: Only list the days the mode selects; nothing is scored or written.
        concurrency: Engineering: how many days are scored at once (1 to 8); each takes memory and cores.
        chunk_rows: Engineering: rows per chunk; 0 keeps the job's own chunk size.
    """
    dates = partitions.selected_dates(str(job), start_date, end_date, mode, recover=not dry_run)
    if dry_run:
        return partitions.planned_outcomes(str(job), dates, mode)
    outcomes = partitions.scored_partitions(
        str(job), dates, chunk_rows=chunk_rows or None, concurrency=concurrency, label=f"mode {mode}"
    )
    return partitions.reported_outcomes(outcomes, "backfill-outcomes")
