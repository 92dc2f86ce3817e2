"""Running many partitions: one score_partition subflow each, a bounded number at once, with progress
and a table of outcomes. The flows people start (flows/people.py) are wired from these."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator

from prefect import task
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import as_completed
from prefect.context import FlowRunContext, SettingsContext, get_settings_context
from prefect.settings import Settings

from flows.steps.monitoring import monitor_decisions
from flows.steps.partition import record_refused_run
from flows.score_partition import score_partition
from tasks.errors import PartitionsFailed
from tasks.scoring.progress import reported_progress
from tasks.reports.reporting import failed_outcomes_message, partition_outcome


_without_heartbeat: tuple[Settings, Settings] | None = None
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
        cached = _without_heartbeat = (context.settings, context.settings.copy_with_update(updates={"flows.heartbeat_frequency": None}))
    with SettingsContext(profile=context.profile, settings=cached[1]):
        yield


def scored_partition(job: str, date: dt.date, chunk_rows: int | None) -> dict:
    """One partition scored in a score_partition subflow; its outcome row, also when it failed. A
    partition refused before its lease gets a failed ledger row here, so `--mode failed` finds it."""
    with subflow_without_heartbeat():
        state = score_partition(job, date, chunk_rows or 0, return_state=True)
    if state.is_completed():
        return partition_outcome(job, date, result=state.result())
    error = state.result(raise_on_failure=False)
    if isinstance(error, BaseException) and state.state_details.flow_run_id is not None:
        # A ledger that cannot take the row does not change the outcome: the day is listed as failed either way.
        record_refused_run(str(state.state_details.flow_run_id), job, date, error, return_state=True)
    return partition_outcome(job, date, error=state.message or "")


@task(name="score-partition-run")
def score_partition_run(job: str, date: dt.date, chunk_rows: int | None) -> dict:
    """One partition's score_partition run as a task, so a backfill can run several at once."""
    return scored_partition(job, date, chunk_rows)


def scored_partitions(job: str, dates: list[dt.date], *, chunk_rows: int | None, concurrency: int, label: str) -> list[dict]:
    """Outcome rows of `dates` in date order, scored `concurrency` at a time (a sliding window: the
    next partition starts as soon as any one ends), with a progress artifact and bars."""
    progress = create_progress_artifact(0.0, key="backfill-progress", description=f"{job}: {len(dates)} partition(s), {label}")
    outcomes: dict[dt.date, dict] = {}
    waiting, running = list(dates), []
    while waiting or running:
        while waiting and len(running) < concurrency:
            running.append(score_partition_run.submit(job, waiting.pop(0), chunk_rows))
        finished = next(as_completed(running))
        running.remove(finished)
        outcome = finished.result()
        outcomes[dt.date.fromisoformat(outcome["date"])] = outcome
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


def reported_outcomes(outcomes: list[dict], key: str) -> list[dict]:
    """Leave the outcomes as a table artifact; raise naming the failed partitions, if any."""
    create_table_artifact(key=key, table=outcomes, description="Partitions and their outcomes")
    failed = failed_outcomes_message(outcomes)
    if failed:
        raise PartitionsFailed(failed)
    return outcomes


def planned_outcomes(job: str, dates: list[dt.date], mode: str) -> list[dict]:
    """What a dry run would score, as outcome rows and a table artifact; nothing is written."""
    planned = [partition_outcome(job, d, planned=True) for d in dates]
    create_table_artifact(key="backfill-plan", table=planned, description=f"Dry run, mode {mode}: nothing was written")
    return planned
