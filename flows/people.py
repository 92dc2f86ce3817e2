"""The flows people start: the nightly run of every job, and backfills of a date range."""

from __future__ import annotations

import datetime as dt

from typing import Annotated

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.score_partition import score_partition
from tasks.calendar import job_name_enum, partition_range, yesterday
from tasks.jobspec import configured_jobs
from tasks.monitoring_steps import monitor_decisions
from tasks.progress import reported_progress
from tasks.reporting import BackfillMode, catch_up_dates, partitions_to_score
from tasks.settings import current_settings
from tasks.steps import recover_job
from tasks.warehouse_config import with_warehouse_url

JobName = job_name_enum(current_settings())
MAX_CONCURRENCY = 8
"""Partitions one backfill scores at once, at most."""


def _scored(job: str, date: dt.date, chunk_rows: int | None) -> dict:
    state = score_partition(job, date, chunk_rows, return_state=True)
    if state.is_completed():
        result = state.result()
        return {
            "job": job, "date": date.isoformat(), "outcome": "succeeded", "rows_scored": result["rows_scored"],
            "error": "", "report": result["report"], "run_id": result["run_id"],
        }
    return {
        "job": job, "date": date.isoformat(), "outcome": "failed", "rows_scored": 0, "error": state.message or "", "report": "",
        "run_id": "",
    }


@task(name="score-partition-run")
def score_partition_run(job: str, date: dt.date, chunk_rows: int | None) -> dict:
    """One partition's score_partition run as a task, so a backfill can run several at once."""
    return _scored(job, date, chunk_rows)


def _reported(outcomes: list[dict], key: str) -> list[dict]:
    create_table_artifact(key=key, table=outcomes, description="Partitions and their outcomes")
    failed = [f"{o['job']} {o['date']}" for o in outcomes if o["outcome"] == "failed"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(outcomes)} partition(s) failed: {', '.join(failed)}")
    return outcomes


@flow(name="nightly")
def nightly(date: dt.date | None = None) -> list[dict]:
    """Score yesterday (business timezone) for every configured job, after re-scoring the days of the
    last `SCORING_CATCH_UP_DAYS` whose run failed or was abandoned; one failure does not stop the rest."""
    settings = with_warehouse_url(current_settings())
    day = date or yesterday(settings)
    outcomes = []
    for job in configured_jobs(settings):
        recover_job(job)
        outcomes += [_scored(job, earlier, None) for earlier in catch_up_dates(settings, job, day)]
        outcomes.append(_scored(job, day, None))
    return _reported(outcomes, "nightly-outcomes")


@flow(name="backfill", task_runner=ThreadPoolTaskRunner(max_workers=MAX_CONCURRENCY))
def backfill(
    job: JobName,  # type: ignore[valid-type]
    start_date: dt.date,
    end_date: dt.date,
    mode: BackfillMode = "all",
    dry_run: bool = False,
    chunk_rows: int | None = None,
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] = 1,
) -> list[dict]:
    """Score the partitions from `start_date` to `end_date` inclusive that `mode` selects (`all`,
    `missing`: never scored, `failed`: last run failed); failures are listed, not fatal to the rest.
    `dry_run` lists what would be scored and writes nothing; `concurrency` partitions run at once."""
    settings = with_warehouse_url(current_settings())
    if not dry_run:
        # Runs that died are closed first, so `failed` selects abandoned partitions too.
        recover_job(str(job))
    dates = partitions_to_score(settings, str(job), partition_range(start_date, end_date), mode)
    if dry_run:
        planned = [{"job": str(job), "date": d.isoformat(), "outcome": "would score", "rows_scored": 0, "error": "", "report": ""} for d in dates]
        create_table_artifact(key="backfill-plan", table=planned, description=f"Dry run, mode {mode}: nothing was written")
        return planned
    progress = create_progress_artifact(0.0, key="backfill-progress", description=f"{job}: {len(dates)} partition(s), mode {mode}")
    outcomes: dict[dt.date, dict] = {}
    waiting, running = list(dates), []
    while waiting or running:
        while waiting and len(running) < concurrency:
            running.append(score_partition_run.submit(str(job), waiting.pop(0), chunk_rows))
        finished = next(as_completed(running))
        running.remove(finished)
        outcome = finished.result()
        outcomes[dt.date.fromisoformat(outcome["date"])] = outcome
        update_progress_artifact(progress, 100.0 * len(outcomes) / len(dates))
        reported_progress(f"{job} partitions", len(outcomes), len(dates))
    if not dates:
        update_progress_artifact(progress, 100.0)
    if concurrency > 1:
        # Partitions finished out of order, so a partition's trailing window may have missed
        # earlier ones; monitor them again in date order.
        for day in dates:
            if outcomes[day]["outcome"] == "succeeded":
                monitor_decisions(str(job), day, outcomes[day]["run_id"])
    return _reported([outcomes[d] for d in dates], "backfill-outcomes")
