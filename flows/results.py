"""A published partition read back by job and date: the wiring of the settings' warehouse (its URL read from a
Prefect Secret block when the settings name one) and the job's Parquet store into a `PublishedRun`."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from flows.steps.blocks import configured_warehouse
from tasks.errors import PartitionError
from tasks.jobspec import checked_job_name
from tasks.reports.model_card import MODEL_CARD_FILE
from tasks.results import LedgerRow, NotPublished, PublishedRun
from tasks.settings import Settings, current_settings
from tasks.sinks.parquet_store import output_dirs
from tasks.sinks.publish import partition_store


def read_published_run(job: str, date: dt.date | str, settings: Settings | None = None) -> PublishedRun:
    """The run whose outputs the readers of `job`'s partition `date` see now: its rows (predictions, quarantine,
    guard actions, any published dataset), its ledger row and its report pages.

    Args:
        job: A job configured under the settings' jobs folder.
        date: The partition (business day), a date or `YYYY-MM-DD`.
        settings: Where the data and the warehouse are; the environment's (`SCORING_*`) by default.

    Raises:
        NotPublished: No run of the job published the partition (never scored, or every run of it failed).
    """
    settings = settings or current_settings()
    job = checked_job_name(job, settings)
    try:
        day = date if isinstance(date, dt.date) else dt.date.fromisoformat(date)
    except ValueError as exc:
        raise PartitionError(f"date {date!r} is not a date: YYYY-MM-DD") from exc
    store = partition_store(output_dirs(settings, job))
    partition = day.isoformat()
    pointer = store.pointer(partition)
    # Resolved once: every dataset read later is this run's, even if another run publishes the day meanwhile.
    version_dir = Path(os.path.realpath(pointer))
    if not pointer.is_symlink() or not version_dir.is_dir():
        raise NotPublished(
            f"{job} {partition} was never published: no run of it succeeded under {settings.output_dir(job)}; "
            f"score it first (score run {job} --date {partition})"
        )
    rows = configured_warehouse(settings).latest_partition_runs(job, first_date=day, last_date=day)
    card_page = (settings.output_dir(job) / MODEL_CARD_FILE).with_suffix(".html")
    monitoring_page = settings.monitoring_page_path(job)
    return PublishedRun(
        job=job,
        partition_date=day,
        run_id=version_dir.name,
        ledger=LedgerRow.from_row(rows[0]) if rows else None,
        version_dir=version_dir,
        run_page=store.page_link(partition),
        monitoring_page=monitoring_page if monitoring_page.is_file() else None,
        model_card=card_page if card_page.is_file() else None,
    )
