"""Running many partitions: one score_partition subflow each, a bounded number at once, with progress
and a table of outcomes. The flows people start (flows/people.py) are wired from these."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Iterator
from pathlib import Path

from prefect import task
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.context import FlowRunContext, SettingsContext, get_settings_context
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.settings import Settings as PrefectSettings
from prefect.states import Failed, State

from flows.score_partition import score_partition
from flows.steps.blocks import with_warehouse_url
from flows.steps.monitoring import monitor_decisions
from flows.steps.partition import record_refused_run, recover_job
from tasks.errors import PartitionsFailed, ScoringError, user_facing_error
from tasks.jobspec import load_job_spec
from tasks.prediction.words import JobWords
from tasks.reports.links import served_url
from tasks.reports.reporting import failed_outcomes_message, partition_outcome
from tasks.results import PartitionResult
from tasks.runs.calendar import backfill_dates, scheduled_partition_date
from tasks.runs.page import report_url
from tasks.runs.scheduling import BackfillMode, partition_selection, selection_message
from tasks.scoring.progress import reported_progress
from tasks.settings import Settings, current_settings

log = logging.getLogger("scoring.backfill")


_without_heartbeat: tuple[PrefectSettings, PrefectSettings] | None = None
"""The last settings seen, and their copy without a flow heartbeat (a copy costs ~25 ms)."""


@contextlib.contextmanager
def subflow_without_heartbeat() -> Iterator[None]:
    """A partition subflow started in the block beats no heartbeat of its own.

    The parent flow run beats for the process its partitions run in. A subflow's own beat only
    costs time: Prefect joins a flow run's heartbeat thread at its end, and that thread sleeps in
    whole seconds (prefect/flow_engine.py: _send_heartbeats), ~0.5 s a partition on average.
    """
    global _without_heartbeat
    context = get_settings_context()
    if context.settings.flows.heartbeat_frequency is None:
        yield
        return
    cached = _without_heartbeat
    if cached is None or cached[0] is not context.settings:
        cached = _without_heartbeat = (
            context.settings,
            context.settings.copy_with_update(updates={"flows.heartbeat_frequency": None}),
        )
    with SettingsContext(profile=context.profile, settings=cached[1]):
        yield


def scored_partition(job: str, date: dt.date, chunk_rows: int | None) -> dict:
    """One partition scored in a score_partition subflow; its outcome row, also when it failed. A
    partition refused before its lease gets a `refused` ledger row here, so `--mode failed` finds it."""
    with subflow_without_heartbeat():
        state = score_partition(job, date, chunk_rows or 0, return_state=True)
    settings = current_settings()
    if state.is_completed():
        result: PartitionResult = state.result()
        link = _page_link(settings, job, date, result.run_page)
        return partition_outcome(job, date, result=result.to_dict(), link=link, words=_job_words(job))
    error = state.result(raise_on_failure=False)
    if isinstance(error, BaseException) and state.state_details.flow_run_id is not None:
        # A ledger that cannot take the row does not change the outcome: the day is listed as failed either way.
        record_refused_run(str(state.state_details.flow_run_id), job, date, error, return_state=True)
    reason = user_facing_error(error)[0] if isinstance(error, BaseException) else state.message or ""
    run_id = str(state.state_details.flow_run_id or "")
    return partition_outcome(job, date, reason=reason, run_id=run_id, link=_log_link(settings, job, date, run_id))


def _log_link(settings: Settings, job: str, date: dt.date, run_id: str) -> str:
    """A failed day's log file (its traceback is there, not in the UI) under SCORING_REPORT_BASE_URL, else its path
    under the data folder; empty when the run wrote none (refused before it logged a line)."""
    if not run_id:
        return ""
    path = settings.run_log_path("score_partition", run_id, job=job, partition=date.isoformat())
    if not path.is_file():
        return ""
    url = served_url(settings.report_base_url, settings.output_root, path)
    return url or str(path.relative_to(settings.data_dir))


def _page_link(settings: Settings, job: str, date: dt.date, page: Path | None) -> str:
    """The run page's address under SCORING_REPORT_BASE_URL, else its path under the data folder (short: the
    outcome table says where that is)."""
    url = report_url(settings.report_base_url, job, date)
    if url or page is None:
        return url or ""
    return str(page.relative_to(settings.data_dir)) if page.is_relative_to(settings.data_dir) else str(page)


def _job_words(job: str) -> JobWords | None:
    """The job's words for its decisions; None (their keys are shown) when its spec no longer loads."""
    try:
        return load_job_spec(job, current_settings()).words
    except ScoringError:
        return None


@task(name="score-partition-run", task_run_name="score {job} {date}")
def score_partition_run(job: str, date: dt.date, chunk_rows: int | None) -> dict | State:
    """One partition's score_partition run as a task, so a backfill can run several at once; named after its
    day in the backfill's graph, where a failed day's task ends Failed (red) with its reason as its message."""
    outcome = scored_partition(job, date, chunk_rows)
    if outcome["outcome"] == "failed":
        # No data on the state: Prefect logs the state's repr, and the reason alone reads best there. The row (its run
        # id and log file) waits for the backfill in this process, which runs its days' tasks in threads.
        _failed_outcomes[(job, date)] = outcome
        return Failed(message=outcome["reason"] or f"{job} {date} failed")
    return outcome


_failed_outcomes: dict[tuple[str, dt.date], dict] = {}
"""Outcome rows of failed days' tasks (score_partition_run), taken by scored_partitions."""


def scored_partitions(
    job: str, dates: list[dt.date], *, chunk_rows: int | None, concurrency: int, label: str
) -> list[dict]:
    """Outcome rows of `dates` in date order, scored `concurrency` at a time (a sliding window: the
    next partition starts as soon as any one ends), with a progress artifact and bars."""
    progress = create_progress_artifact(
        0.0, key="backfill-progress", description=f"{job}: {len(dates)} partition(s), {label}"
    )
    outcomes: dict[dt.date, dict] = {}
    waiting, running = list(dates), {}
    while waiting or running:
        while waiting and len(running) < concurrency:
            day = waiting.pop(0)
            running[score_partition_run.submit(job, day, chunk_rows)] = day
        finished = next(as_completed(list(running)))
        day = running.pop(finished)
        outcome = finished.result(raise_on_failure=False)
        if isinstance(outcome, BaseException):
            # A failed day's task ends Failed without an exception; one here is a bug of the backfill itself.
            raise outcome
        failed = _failed_outcomes.pop((job, day), None)
        outcomes[day] = (
            outcome
            if outcome is not None
            else failed or partition_outcome(job, day, reason=finished.state.message or "")
        )
        update_progress_artifact(progress, 100.0 * len(outcomes) / len(dates))
        reported_progress(f"{job} partitions", len(outcomes), len(dates))
    if not dates:
        update_progress_artifact(progress, 100.0)
    if concurrency > 1:
        # Partitions finished out of order, so a partition's trailing window may have missed
        # earlier ones; monitor them again in date order.
        for day in dates:
            if outcomes[day]["outcome"] == "succeeded":
                monitor_decisions(job, day, outcomes[day]["run_id"])
    return [outcomes[d] for d in dates]


def scheduled_start() -> dt.datetime | None:
    """When the deployment scheduled the current flow run; None for a run not started by a deployment."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or run.deployment_id is None:
        return None
    return run.expected_start_time


FAILED_MARK = "🔴 "
"""Before `failed` in an outcome table artifact: the table has no colours, and a failed day must stand out as in the graph."""


def reported_outcomes(outcomes: list[dict], key: str) -> list[dict]:
    """Leave the outcomes as a table artifact, each day's outcome and reason first and its run page last;
    raise naming the failed partitions, if any."""
    failed = failed_outcomes_message(outcomes)
    settings = current_settings()
    pages = "run page" if settings.report_base_url else f"run page (its path under {settings.data_dir})"
    create_table_artifact(
        key=key,
        table=[{**o, "outcome": FAILED_MARK + o["outcome"]} if o["outcome"] == "failed" else o for o in outcomes],
        description=f"{failed or f'{len(outcomes)} partition(s) scored'}. Each day's outcome, reason, rows, decisions, flags and {pages}",
    )
    if failed:
        raise PartitionsFailed(failed)
    return outcomes


def selected_dates(
    job: str, start_date: dt.date, end_date: dt.date, mode: BackfillMode, *, recover: bool
) -> list[dt.date]:
    """The days of a backfill: its range checked before anything runs or is written (PartitionError in one sentence),
    the job's dead runs closed when `recover` (so `failed` selects abandoned partitions too), then the days `mode`
    selects. For `missing` and `failed`, what the mode found and why (each day's last status and reason) is logged
    and left as a table artifact, also when it selected none."""
    settings = with_warehouse_url(current_settings())
    days = backfill_dates(settings, start_date, end_date)
    if recover:
        recover_job(job)
    if mode == "all":
        return days
    selection = partition_selection(settings, job, days, mode)
    message = selection_message(job, mode, selection)
    log.info("%s", message)
    create_table_artifact(key="backfill-selection", table=selection, description=message)
    return [dt.date.fromisoformat(r["date"]) for r in selection if r["selected"]]


def nightly_run_name() -> str:
    """`nightly <date>`: the day the run scores, the scheduled night when no date is given."""
    day = flow_run.parameters.get("date") or scheduled_partition_date(current_settings(), scheduled_start())
    return f"nightly {day}"


def backfill_run_name() -> str:
    """`<job> <start>…<end> mode <mode>`, and `(dry run)` for a dry run: what the backfill scores, readable in the runs
    list. The word `mode` keeps a name ending in `failed` from reading as the run's state."""
    p = flow_run.parameters
    return f"{p['job']} {p['start_date']}…{p['end_date']} mode {p.get('mode', 'all')}" + (
        " (dry run)" if p.get("dry_run") else ""
    )


def planned_outcomes(job: str, dates: list[dt.date], mode: str) -> list[dict]:
    """What a dry run would score, as outcome rows and a table artifact; nothing is written."""
    planned = [partition_outcome(job, d, planned=True) for d in dates]
    create_table_artifact(key="backfill-plan", table=planned, description=f"Dry run, mode {mode}: nothing was written")
    return planned
