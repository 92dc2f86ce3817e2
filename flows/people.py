"""The flows people start: the nightly run of every job, and backfills of a date range."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from prefect import flow
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.steps.partitions import (
    planned_outcomes, reported_outcomes, reported_selection, scheduled_start, scored_partition, scored_partitions,
)
from flows.steps.partition import recover_job
from flows.steps.blocks import with_warehouse_url
from tasks.jobs.calendar import backfill_dates, job_name_enum, scheduled_partition_date
from tasks.jobspec import configured_jobs
from tasks.reports.reporting import BackfillMode, catch_up_dates, partition_selection
from tasks.settings import current_settings

JobName = job_name_enum(current_settings())
MAX_CONCURRENCY = 8
"""Partitions one backfill scores at once, at most."""


def nightly_run_name() -> str:
    """`nightly <date>`: the day the run scores, the scheduled night when no date is given."""
    day = flow_run.parameters.get("date") or scheduled_partition_date(current_settings(), scheduled_start())
    return f"nightly {day}"


def backfill_run_name() -> str:
    """`<job> <start>…<end> <mode>`, and `(dry run)` for a dry run: what the backfill scores, readable in the runs list."""
    p = flow_run.parameters
    return f"{p['job']} {p['start_date']}…{p['end_date']} {p.get('mode', 'all')}" + (" (dry run)" if p.get("dry_run") else "")


@flow(name="nightly", flow_run_name=nightly_run_name)
def nightly(date: dt.date | None = None) -> list[dict]:
    """Score every configured job's night, after the days of the last `SCORING_CATCH_UP_DAYS` whose run
    failed, was abandoned or never ran; one failure does not stop the rest.

    Args:
        date: The partition (business day) to score. Leave it empty: a scheduled run scores the night before
            its scheduled start, a run started by hand yesterday.
    """
    settings = with_warehouse_url(current_settings())
    day = date or scheduled_partition_date(settings, scheduled_start())
    outcomes = []
    for job in configured_jobs(settings):
        recover_job(job)
        outcomes += [scored_partition(job, d, None) for d in [*catch_up_dates(settings, job, day), day]]
    return reported_outcomes(outcomes, "nightly-outcomes")


@flow(name="backfill", flow_run_name=backfill_run_name, task_runner=ThreadPoolTaskRunner(max_workers=MAX_CONCURRENCY))
def backfill(
    job: JobName,  # type: ignore[valid-type]
    start_date: dt.date,
    end_date: dt.date,
    mode: BackfillMode = "all",
    dry_run: bool = False,
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] = 1,
    chunk_rows: Annotated[int, Field(ge=0)] = 0,
) -> list[dict]:
    """Score the partitions of the range that `mode` selects; failures are listed, not fatal to the rest. The range
    is checked first (end not before start, at most SCORING_MAX_BACKFILL_DAYS days, none after today).

    Args:
        job: The job to score: one of the specs in jobs/.
        start_date: The first partition to score: the business day the data belongs to, not the day it is scored.
        end_date: The last partition to score, inclusive.
        mode: Which days of the range: all of them; missing, those never scored (or refused: no data yet); failed, whose last
            run failed or was refused.
        dry_run: Only list the days the mode selects; nothing is scored or written.
        concurrency: Engineering: how many days are scored at once (1 to 8); each takes memory and cores.
        chunk_rows: Engineering: rows per chunk; 0 keeps the job's own chunk size.
    """
    settings = with_warehouse_url(current_settings())
    # Checked before anything runs or is written: a wrong range fails at once, in one sentence.
    days = backfill_dates(settings, start_date, end_date)
    if not dry_run:
        # Runs that died are closed first, so `failed` selects abandoned partitions too.
        recover_job(str(job))
    selection = partition_selection(settings, str(job), days, mode)
    dates = reported_selection(str(job), mode, selection) if mode != "all" else days
    if dry_run:
        return planned_outcomes(str(job), dates, mode)
    outcomes = scored_partitions(str(job), dates, chunk_rows=chunk_rows or None, concurrency=concurrency, label=f"mode {mode}")
    return reported_outcomes(outcomes, "backfill-outcomes")
