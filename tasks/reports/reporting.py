"""Read-side summaries of what was scored, for people (CLI tables, artifacts)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Literal

from rich.table import Table

from tasks.jobs.calendar import partition_range
from tasks.prediction.words import JobWords
from tasks.settings import Settings
from tasks.sinks.warehouse_choice import warehouse_for


def partition_summaries(settings: Settings, job: str, dates: list[dt.date]) -> list[dict[str, Any]]:
    """The latest run of each date (or status `not scored`), oldest date first."""
    runs = warehouse_for(settings).latest_partition_runs(job, first_date=min(dates), last_date=max(dates))
    rows = [{k: run[k] for k in ("partition_date", "status", *_COUNTS)} for run in runs]
    by_date = {r["partition_date"]: r for r in rows}
    out = []
    for d in dates:
        row = by_date.get(d, {"partition_date": d, "status": "not scored"} | dict.fromkeys(_COUNTS))
        if isinstance(row.get("decisions"), str):
            row["decisions"] = json.loads(row["decisions"])
        out.append(row)
    return out


_COUNTS = ("rows_read", "rows_scored", "rows_repaired", "rows_quarantined", "decisions", "rows_with_reasons")


def partition_summary_table(job: str, rows: list[dict[str, Any]], words: JobWords | None = None) -> Table:
    """Rows read / scored / repaired / quarantined and decisions per date, as a terminal table; `words` name the decisions."""
    decisions = sorted({d for r in rows for d in (r["decisions"] or {})})
    named = words.decision if words is not None else str
    table = Table(title=f"{job}: latest run per partition")
    for col in ("date", "status", "read", "scored", "repaired", "quarantined", *(named(d) for d in decisions), "with reasons"):
        table.add_column(col, justify="left" if col in ("date", "status") else "right")
    for r in rows:
        table.add_row(
            str(r["partition_date"]),
            r["status"],
            *(str(r[k] if r[k] is not None else "-") for k in ("rows_read", "rows_scored", "rows_repaired", "rows_quarantined")),
            *(str((r["decisions"] or {}).get(d, 0)) for d in decisions),
            str(r["rows_with_reasons"] or 0),
        )
    return table


BackfillMode = Literal["all", "missing", "failed"]


def partitions_to_score(settings: Settings, job: str, dates: list[dt.date], mode: BackfillMode) -> list[dt.date]:
    """The dates a backfill in `mode` scores: `all`; `missing` — never scored; `failed` — last run failed."""
    if mode == "all":
        return list(dates)
    wanted = "not scored" if mode == "missing" else "failed"
    return [row["partition_date"] for row in partition_summaries(settings, job, dates) if row["status"] == wanted]


def catch_up_dates(settings: Settings, job: str, day: dt.date) -> list[dt.date]:
    """The days of the `catch_up_days` before `day` whose last run failed (abandoned runs are failed
    once recovered) or that were never scored (their data came late), oldest first: what `nightly`
    scores before the new day."""
    if settings.catch_up_days == 0:
        return []
    window = partition_range(day - dt.timedelta(days=settings.catch_up_days), day - dt.timedelta(days=1))
    return [row["partition_date"] for row in partition_summaries(settings, job, window) if row["status"] in ("failed", "not scored")]


def partition_outcome(
    job: str, date: dt.date, *, result: dict[str, Any] | None = None, error: str = "", planned: bool = False,
) -> dict[str, Any]:
    """One row of a nightly or backfill outcome table: what became of one partition."""
    row = {"job": job, "date": date.isoformat(), "rows_scored": 0, "error": error, "report": "", "run_id": ""}
    if planned:
        return {**row, "outcome": "would score"}
    if result is None:
        return {**row, "outcome": "failed"}
    return {**row, "outcome": "succeeded", "rows_scored": result["rows_scored"], "report": result["report"], "run_id": result["run_id"]}


def failed_outcomes_message(outcomes: list[dict[str, Any]]) -> str | None:
    """`N of M partition(s) failed: job date (why), …`, or None when every partition succeeded."""
    failed = [
        f"{o['job']} {o['date']}" + (f" ({_short(o['error'])})" if o.get("error") else "") for o in outcomes if o["outcome"] == "failed"
    ]
    return f"{len(failed)} of {len(outcomes)} partition(s) failed: {', '.join(failed)}" if failed else None


def _short(error: str, limit: int = 400) -> str:
    # Prefect's state message wraps the exception; the operator needs the exception's own words.
    text = " ".join(error.split()).removeprefix("Flow run encountered an exception: ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
