"""Partition dates: ranges, "yesterday" in the business timezone, and the jobs people may pick."""

from __future__ import annotations

import datetime as dt
import enum
from zoneinfo import ZoneInfo

from tasks.errors import PartitionError
from tasks.jobspec import configured_jobs
from tasks.settings import Settings


def partition_range(start: dt.date, end: dt.date, *, max_days: int = 3660) -> list[dt.date]:
    if end < start:
        raise PartitionError(f"end date {end} is before start date {start}")
    days = (end - start).days + 1
    if days > max_days:
        raise PartitionError(f"{start}..{end} spans {days} days; the limit is {max_days}")
    return [start + dt.timedelta(days=i) for i in range(days)]


def yesterday(settings: Settings) -> dt.date:
    return dt.datetime.now(ZoneInfo(settings.timezone)).date() - dt.timedelta(days=1)


def job_name_enum(settings: Settings) -> type[enum.StrEnum]:
    """An enum of configured jobs, so the Prefect UI renders the job parameter as a select."""
    jobs = configured_jobs(settings)
    return enum.StrEnum("JobName", {job: job for job in jobs})
