"""The flows people start: the nightly run of every job, and backfills of a date range."""

from __future__ import annotations

import datetime as dt

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.score_partition import score_partition
from tasks.calendar import job_name_enum, partition_range, yesterday
from tasks.jobspec import configured_jobs
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
def backfill(job: JobName, start_date: dt.date, end_date: dt.date, chunk_rows: int | None = None) -> list[dict]:  # type: ignore[valid-type]
    """Score every partition from `start_date` to `end_date` inclusive; failures are listed, not fatal to the rest."""
    dates = partition_range(start_date, end_date)
    return _reported([_scored(str(job), d, chunk_rows) for d in dates], "backfill-outcomes")
