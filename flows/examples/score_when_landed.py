"""An example of composing the shared flows into your own: score a partition once its raw data has
landed, then refresh the realized outcomes of a label window.

Any job configured under `jobs/` works unchanged; nothing here knows a job. Copy it as a start for
event-driven scoring (trigger it from an automation when the upstream export finishes):

    from flows.examples.score_when_landed import score_when_landed
    score_when_landed("credit_risk", date(2026, 3, 10), wait_minutes=30)
"""

from __future__ import annotations

import datetime as dt

from prefect import flow, task

from flows.outcomes import outcomes
from flows.score_partition import score_partition
from tasks.errors import PartitionError
from tasks.runs.calendar import job_name_enum
from tasks.settings import current_settings

JobName = job_name_enum(current_settings())


@task(name="raw-partition-landed")
def raw_partition_landed(job: str, date: dt.date) -> int:
    """Parquet files of the raw partition; fails (and is retried) while there are none."""
    folder = current_settings().raw_partition_dir(job, date.isoformat())
    files = sorted(folder.glob("*.parquet"))
    if not files:
        raise PartitionError(f"raw partition of job {job} on {date} has not landed: no Parquet files in {folder}")
    return len(files)


@flow(name="score-when-landed")
def score_when_landed(
    job: JobName,  # type: ignore[valid-type]
    date: dt.date,
    wait_minutes: int = 0,
    outcomes_from: dt.date | None = None,
    outcomes_to: dt.date | None = None,
) -> dict:
    """Wait up to `wait_minutes` for the raw partition of `job` on `date`, score it, then ingest the
    labels of `outcomes_from`..`outcomes_to` when given."""
    landed = raw_partition_landed.with_options(retries=wait_minutes, retry_delay_seconds=60)(str(job), date)
    scored = score_partition(str(job), date)
    ingested = outcomes(job, outcomes_from, outcomes_to) if outcomes_from and outcomes_to else []
    return {"raw_files": landed, "scored": scored, "outcomes": ingested}
