"""Score one partition of one job: the flow every other flow is built from."""

from __future__ import annotations

import datetime as dt
import uuid

from prefect import flow
from prefect.runtime import flow_run

from tasks.steps import fail_run, finish_run, publish_partition, score_chunks, start_run


@flow(name="score_partition", log_prints=True)
def score_partition(job: str, date: dt.date, chunk_rows: int | None = None) -> dict:
    """Guard, infer, predict and publish `job` for the partition `date`; re-running replaces it."""
    run_id = str(flow_run.id or uuid.uuid4())
    try:
        ticket = start_run(run_id, job, date, chunk_rows)
        summary = score_chunks(ticket)
        published = publish_partition(ticket, summary)
    except Exception as error:
        fail_run(run_id, job, date, error)
        raise
    return finish_run(ticket, summary, published)
