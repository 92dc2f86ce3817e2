"""Which days a run scores: the days a backfill mode selects from the ledger, why, and the days `nightly`
catches up on before the new day."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from tasks.reports.reporting import partition_summaries, table_reason
from tasks.runs.calendar import partition_range
from tasks.settings import Settings

BackfillMode = Literal["all", "missing", "failed"]

_SELECTED_STATUSES = {"missing": ("not scored", "refused"), "failed": ("failed", "refused")}
"""The last statuses each mode selects: `refused` in both, a day that never started (no raw data yet, a
source that did not answer) is as unscored as one never tried, and its run failed."""


def partition_selection(settings: Settings, job: str, dates: list[dt.date], mode: BackfillMode) -> list[dict[str, Any]]:
    """Every day of the range with whether `mode` selects it, its last run's status and that run's reason
    (the error of a failed or refused run): `all` selects every day without reading the ledger; `missing`
    the days never scored or refused; `failed` the days whose last run failed or was refused."""
    if mode == "all":
        return [{"date": d.isoformat(), "selected": True, "last status": "", "reason": ""} for d in dates]
    return [
        {
            "date": row["partition_date"].isoformat(),
            "selected": row["status"] in _SELECTED_STATUSES[mode],
            "last status": row["status"],
            "reason": table_reason(row["error"] or ""),
        }
        for row in partition_summaries(settings, job, dates)
    ]


_MODE_WORDS = {
    "missing": ("never scored or refused", "was never scored or refused"),
    "failed": ("last run failed or refused", "had a last run that failed or was refused"),
}
"""What each mode selects, said of the days it picked and of the days when it picked none."""


def selection_message(job: str, mode: BackfillMode, selection: list[dict[str, Any]]) -> str:
    """What `mode` found in the range and why, in a sentence: the selected days with their last status and
    reason, or, when none, what the days' last statuses were instead."""
    picked = [r for r in selection if r["selected"]]
    span = f"{selection[0]['date']}…{selection[-1]['date']}" if selection else "the range"
    selected, none = _MODE_WORDS.get(mode, ("selected", "was selected"))
    if picked:
        days = ", ".join(
            f"{r['date']} ({r['last status']}" + (f": {r['reason']}" if r["reason"] else "") + ")" for r in picked
        )
        return f"{job} {span}, mode {mode}: {len(picked)} of {len(selection)} day(s) to score, {selected}: {days}"
    counts: dict[str, int] = {}
    for r in selection:
        counts[r["last status"]] = counts.get(r["last status"], 0) + 1
    found = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{job} {span}, mode {mode}: nothing to score, no day {none} ({found or 'no days'})"


def catch_up_dates(settings: Settings, job: str, day: dt.date) -> list[dt.date]:
    """The days of the `catch_up_days` before `day` whose last run failed (abandoned runs are failed
    once recovered) or was refused before its lease, or that were never scored (their data came late), oldest first: what `nightly`
    scores before the new day."""
    if settings.catch_up_days == 0:
        return []
    window = partition_range(day - dt.timedelta(days=settings.catch_up_days), day - dt.timedelta(days=1))
    unscored = ("failed", "refused", "not scored")
    return [row["partition_date"] for row in partition_summaries(settings, job, window) if row["status"] in unscored]
