"""Partition dates: ranges, "yesterday" in the business timezone, the day a scheduled run scores, and the
jobs people may pick."""

from __future__ import annotations

import datetime as dt
import enum
import re
from zoneinfo import ZoneInfo

from tasks.errors import PartitionError
from tasks.jobspec import configured_jobs
from tasks.settings import Settings

EARLIEST_PARTITION = dt.date(1970, 1, 1)
LATEST_PARTITION = dt.date(2199, 12, 31)
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
ALL_JOBS = "all"
"""The choice of every configured job, where a form may cover them all (the outcomes run)."""


def parse_partition_date(value: object, *, what: str = "partition date") -> dt.date:
    """A partition date from `YYYY-MM-DD` (or a date), within 1970..2199; anything else — another
    format, a path, a NUL byte, an impossible day — is refused with a message naming `what`."""
    if isinstance(value, dt.datetime):
        raise PartitionError(f"{what} {value!r} is a timestamp; give a date (YYYY-MM-DD)")
    if isinstance(value, dt.date):
        day = value
    elif isinstance(value, str) and _ISO_DATE.fullmatch(value):
        try:
            day = dt.date.fromisoformat(value)
        except ValueError as exc:
            raise PartitionError(f"{what} {value!r} is not a real date: {exc}") from None
    else:
        raise PartitionError(f"{what} {str(value)[:80]!r} is not a date in the form YYYY-MM-DD")
    if not EARLIEST_PARTITION <= day <= LATEST_PARTITION:
        raise PartitionError(f"{what} {day} is outside {EARLIEST_PARTITION}..{LATEST_PARTITION}")
    return day


def partition_range(start: dt.date, end: dt.date, *, max_days: int = 3660) -> list[dt.date]:
    start, end = parse_partition_date(start, what="start date"), parse_partition_date(end, what="end date")
    if end < start:
        raise PartitionError(f"end date {end} is before start date {start}")
    days = (end - start).days + 1
    if days > max_days:
        raise PartitionError(f"{start}..{end} spans {days} days; the limit is {max_days}")
    return [start + dt.timedelta(days=i) for i in range(days)]


def backfill_dates(settings: Settings, start: object, end: object) -> list[dt.date]:
    """The days of a backfill from `start` to `end`, checked before anything runs: real dates, the end not
    before the start, at most `max_backfill_days` of them, none after today in the business timezone (a
    day still to come has no data to score). PartitionError says what is wrong in one sentence."""
    first, last = parse_partition_date(start, what="start date"), parse_partition_date(end, what="end date")
    if last < first:
        raise PartitionError(f"the end date {last} is before the start date {first}: give the earlier day as the start")
    days = (last - first).days + 1
    if days > settings.max_backfill_days:
        raise PartitionError(
            f"{first}…{last} spans {days} days, more than the {settings.max_backfill_days} one backfill may score "
            "(SCORING_MAX_BACKFILL_DAYS): split the range"
        )
    today = dt.datetime.now(ZoneInfo(settings.timezone)).date()
    if last > today:
        raise PartitionError(
            f"the end date {last} is after today ({today}, {settings.timezone}): a day still to come has no data to score"
        )
    return partition_range(first, last)


def yesterday(settings: Settings) -> dt.date:
    return dt.datetime.now(ZoneInfo(settings.timezone)).date() - dt.timedelta(days=1)


def scheduled_partition_date(settings: Settings, scheduled_start: dt.datetime | None) -> dt.date:
    """The day a nightly run scores: the day before its scheduled start in the business timezone, so a
    late, queued or retried run scores the night it was scheduled for; without a schedule (a run
    started by hand, not by a deployment), the day before today."""
    if scheduled_start is None:
        return yesterday(settings)
    if scheduled_start.tzinfo is None:
        raise ValueError(f"scheduled start {scheduled_start} has no timezone")
    return scheduled_start.astimezone(ZoneInfo(settings.timezone)).date() - dt.timedelta(days=1)


def job_name_enum(settings: Settings) -> type[enum.StrEnum]:
    """An enum of configured jobs, so the Prefect UI renders the job parameter as a select."""
    jobs = configured_jobs(settings)
    return enum.StrEnum("JobName", {job: job for job in jobs})


def job_or_all_enum(settings: Settings) -> type[enum.StrEnum]:
    """`all` and the configured jobs, so the Prefect UI renders a job parameter that may cover every job as a
    select with `all` preselected, not as a job-or-None toggle."""
    return enum.StrEnum("JobOrAll", {ALL_JOBS: ALL_JOBS, **{job: job for job in configured_jobs(settings)}})
