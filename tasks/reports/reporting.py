"""Read-side summaries of what was scored, for people (CLI tables, artifacts)."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from rich.table import Table

from tasks.prediction.words import JobWords
from tasks.settings import Settings
from tasks.sinks.warehouse_choice import warehouse_for


def partition_summaries(settings: Settings, job: str, dates: list[dt.date]) -> list[dict[str, Any]]:
    """The latest run of each date (or status `not scored`), oldest date first."""
    runs = warehouse_for(settings).latest_partition_runs(job, first_date=min(dates), last_date=max(dates))
    rows = [{k: run[k] for k in ("partition_date", "status", "error", *_COUNTS)} for run in runs]
    by_date = {r["partition_date"]: r for r in rows}
    out = []
    for d in dates:
        row = by_date.get(d, {"partition_date": d, "status": "not scored", "error": None} | dict.fromkeys(_COUNTS))
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
    for col in (
        "date",
        "status",
        "read",
        "scored",
        "repaired",
        "quarantined",
        *(named(d) for d in decisions),
        "with reasons",
    ):
        table.add_column(col, justify="left" if col in ("date", "status") else "right")
    for r in rows:
        table.add_row(
            str(r["partition_date"]),
            r["status"],
            *(
                str(r[k] if r[k] is not None else "-")
                for k in ("rows_read", "rows_scored", "rows_repaired", "rows_quarantined")
            ),
            *(str((r["decisions"] or {}).get(d, 0)) for d in decisions),
            str(r["rows_with_reasons"] or 0),
        )
    return table


def partition_outcome(
    job: str,
    date: dt.date,
    *,
    result: dict[str, Any] | None = None,
    reason: str = "",
    planned: bool = False,
    link: str = "",
    words: JobWords | None = None,
    run_id: str = "",
) -> dict[str, Any]:
    """One row of a nightly or backfill outcome table: what became of one partition, its outcome and reason
    first, then its rows, decisions (by their names in the job's `words`) and flags, and the link to its run
    page last (`link`: a URL, or the page's path), which is the longest cell; a failed day's `run_id` and `link` (its
    log file) when it ran."""
    row = {
        "date": date.isoformat(),
        "outcome": "failed",
        "reason": table_reason(reason),
        "job": job,
        "rows_scored": 0,
        "decisions": "",
        "flags": "",
        "run_id": run_id,
        "link": link,
    }
    if planned:
        return {**row, "outcome": "would score"}
    if result is None:
        return row
    named = words.decision if words is not None else str
    return {
        **row,
        "outcome": "succeeded",
        "rows_scored": result["rows_scored"],
        "decisions": ", ".join(f"{named(d)} {n:,}" for d, n in (result.get("decisions") or {}).items()),
        "flags": _flags(result),
        "run_id": result["run_id"],
        "link": link,
    }


def _flags(result: dict[str, Any]) -> str:
    """The run's flags in a few words: drifted features, decision measures that moved, model health flags, warnings."""
    drift = result.get("drift_flags") or []
    moved = (result.get("decision_monitoring") or {}).get("shifted") or []
    health = ((result.get("model_health") or {}).get("flagged")) or []
    warnings = result.get("warnings") or []
    parts = [
        *([f"drift: {', '.join(drift)}"] if drift else []),
        *([f"decisions moved: {', '.join(moved)}"] if moved else []),
        *([f"model health: {', '.join(health)}"] if health else []),
        *([f"{len(warnings)} warning(s)"] if warnings else []),
    ]
    return "; ".join(parts) or "none"


def failed_outcomes_message(outcomes: list[dict[str, Any]]) -> str | None:
    """`N of M partition(s) failed: job date (why), …`, or None when every partition succeeded."""
    failed = [
        f"{o['job']} {o['date']}" + (f" ({o['reason']})" if o["reason"] else "")
        for o in outcomes
        if o["outcome"] == "failed"
    ]
    return f"{len(failed)} of {len(outcomes)} partition(s) failed: {', '.join(failed)}" if failed else None


_LEADING_NOISE = re.compile(r"^(?:[A-Z][A-Za-z]*: )?(?:(?:/|[a-z][a-z0-9+.-]*://)[^\s:]*: )?")
"""An error class's name (`JobValidationError: `) and a file's path or URL before the sentence: the table's reason
cell is narrow, and the day, the job and the ledger's own `error` already say them."""


def table_reason(error: str) -> str:
    """The reason of a failed or refused day in a table cell: the sentence without the error's class or file."""
    return _short(_LEADING_NOISE.sub("", _short(error), count=1))


def _short(error: str, limit: int = 400) -> str:
    # Prefect's state message wraps the exception; the operator needs the exception's own words.
    text = " ".join(error.split()).removeprefix("Flow run encountered an exception: ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
