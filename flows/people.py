"""The flows people start: the nightly run of every job, and backfills of a date range."""

from __future__ import annotations

import datetime as dt

from prefect import flow
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from flows.score_partition import score_partition
from tasks.calendar import job_name_enum, partition_range, yesterday
from tasks.jobspec import configured_jobs
from tasks.reporting import BackfillMode, partitions_to_score
from tasks.settings import current_settings

JobName = job_name_enum(current_settings())


def _scored(job: str, date: dt.date, chunk_rows: int | None) -> dict:
    state = score_partition(job, date, chunk_rows, return_state=True)
    if state.is_completed():
        result = state.result()
        return {
            "job": job, "date": date.isoformat(), "outcome": "succeeded", "rows_scored": result["rows_scored"],
            "error": "", "report": result["report"],
        }
    return {"job": job, "date": date.isoformat(), "outcome": "failed", "rows_scored": 0, "error": state.message or "", "report": ""}


def _reported(outcomes: list[dict], key: str) -> list[dict]:
    create_table_artifact(key=key, table=outcomes, description="Partitions and their outcomes")
    failed = [f"{o['job']} {o['date']}" for o in outcomes if o["outcome"] == "failed"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(outcomes)} partition(s) failed: {', '.join(failed)}")
    return outcomes


@flow(name="nightly")
def nightly(date: dt.date | None = None) -> list[dict]:
    """Score yesterday (business timezone) for every configured job; one failure does not stop the rest."""
    day = date or yesterday(current_settings())
    return _reported([_scored(job, day, None) for job in configured_jobs(current_settings())], "nightly-outcomes")


@flow(name="backfill")
def backfill(
    job: JobName,  # type: ignore[valid-type]
    start_date: dt.date,
    end_date: dt.date,
    mode: BackfillMode = "all",
    dry_run: bool = False,
    chunk_rows: int | None = None,
) -> list[dict]:
    """Score the partitions from `start_date` to `end_date` inclusive that `mode` selects (`all`,
    `missing`: never scored, `failed`: last run failed); failures are listed, not fatal to the rest.
    `dry_run` lists what would be scored and writes nothing."""
    settings = current_settings()
    dates = partitions_to_score(settings, str(job), partition_range(start_date, end_date), mode)
    if dry_run:
        planned = [{"job": str(job), "date": d.isoformat(), "outcome": "would score", "rows_scored": 0, "error": "", "report": ""} for d in dates]
        create_table_artifact(key="backfill-plan", table=planned, description=f"Dry run, mode {mode}: nothing was written")
        return planned
    progress = create_progress_artifact(0.0, key="backfill-progress", description=f"{job}: {len(dates)} partition(s), mode {mode}")
    outcomes = []
    for i, d in enumerate(dates, start=1):
        outcomes.append(_scored(str(job), d, chunk_rows))
        update_progress_artifact(progress, 100.0 * i / len(dates))
    if not dates:
        update_progress_artifact(progress, 100.0)
    return _reported(outcomes, "backfill-outcomes")
