"""Prefect tasks of one run's work units: plan, score (or infer, then predict, where inference runs on
workers of its own), summarize, each a thin wrapper over tasks/scoring/ (units, unit_pass, summary),
and their submission on the configured task runner. The prepared job (model and engines) is built
once per run and worker process."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import signal
import time

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.exceptions import TerminationSignal
from prefect.futures import PrefectFuture, as_completed, wait
from prefect.utilities.annotations import quote

from flows.steps.api import reporting_to_api
from flows.steps.blocks import run_warehouse, with_warehouse_url
from flows.steps.task_runners import dask_task_runner, inference_runs_apart, inference_task_resources, units_in_own_flow
from tasks.errors import OrchestrationLost, RunStopped
from tasks.runs.ticket import RunTicket, pinned_versions
from tasks.scoring.prepared import PredictionPlan, PreparedJob, prepared_job, taken_preloaded_job, unit_workers
from tasks.scoring.progress import reported_progress
from tasks.scoring.summary import ScoringSummary, scoring_summary
from tasks.scoring.unit_pass import (
    ScoredUnit,
    UnitInference,
    UnitPrediction,
    inferred_unit,
    predicted_unit,
    scored_unit,
)
from tasks.scoring.units import WorkUnit, planned_work_units, stopped_run
from tasks.settings import Settings, current_settings
from tasks.sinks.parquet_store import output_dirs

log = logging.getLogger("scoring.run")


@functools.lru_cache(maxsize=4)
def prepared_run_job(run_id: str, job: str, partition_date: dt.date, settings_json: str) -> PreparedJob:
    # Once per run and worker process: a Dask worker loads the model on its first unit of the run;
    # the command line's own check of the job is taken over rather than loaded twice.
    preloaded = taken_preloaded_job(job, partition_date, settings_json)
    if preloaded is not None:
        return preloaded
    settings = Settings.model_validate_json(settings_json).with_urls_of(with_warehouse_url(current_settings()))
    return prepared_job(job, partition_date, settings, run_warehouse(run_id))


def _run_job(ticket: RunTicket) -> PreparedJob:
    prepared = prepared_run_job(ticket.run_id, ticket.job, ticket.partition_date, current_settings().model_dump_json())
    pinned_versions(prepared, ticket)
    return prepared


def _unit_args(ticket: RunTicket) -> dict:
    return {
        "run_id": ticket.run_id,
        "partition_date": ticket.partition_date,
        "dirs": output_dirs(current_settings(), ticket.job),
        "deadline": ticket.run_deadline(),
    }


@task(name="plan-work-units")
def plan_work_units(ticket: RunTicket) -> list[WorkUnit]:
    """The partition's row groups grouped into units of at least one chunk, with the rows of duplicated entity ids."""
    settings = current_settings()
    return planned_work_units(
        _run_job(ticket),
        run_id=ticket.run_id,
        chunk_rows=ticket.chunk_rows,
        dirs=output_dirs(settings, ticket.job),
        workers=unit_workers(settings),
    )


@task(name="score-unit")
def score_unit(ticket: RunTicket, unit: WorkUnit) -> ScoredUnit:
    """One unit's chunks from raw rows to the prediction contract: guards, features, margins, the
    decision, the contributions of the rows that need reasons, probability, score and reasons."""
    return scored_unit(_run_job(ticket), unit, chunk_rows=ticket.chunk_rows, **_unit_args(ticket))


@task(name="infer-unit")
def infer_unit(ticket: RunTicket, unit: WorkUnit) -> UnitInference:
    """The inference half of score-unit, on a worker holding the inference resources."""
    return inferred_unit(_run_job(ticket), unit, chunk_rows=ticket.chunk_rows, **_unit_args(ticket))


@task(name="predict-unit")
def predict_unit(ticket: RunTicket, plan: PredictionPlan, inference: UnitInference) -> UnitPrediction:
    """The prediction half of score-unit, on any worker, from the plan alone: no model is loaded."""
    return predicted_unit(plan, inference, **_unit_args(ticket))


@task(name="summarize-run")
def summarize_run(
    ticket: RunTicket, inferences: list[UnitInference], predictions: list[UnitPrediction], started: float
) -> ScoringSummary:
    """Merge the units' counts, stage the run's reports and enforce the job's limits."""
    return scoring_summary(
        _run_job(ticket),
        inferences,
        predictions,
        run_id=ticket.run_id,
        partition_date=ticket.partition_date,
        dirs=output_dirs(current_settings(), ticket.job),
        wall_s=time.time() - started,
    )


def _units_done(ticket: RunTicket, futures: list[PrefectFuture]) -> None:
    """Progress as the units finish; returns once every one has stopped, so no unit still writes
    staging files when a failure drops them."""
    label = f"{ticket.job} {ticket.partition_date}"
    # One unit has no progress to show; its artifact would cost two API calls a partition.
    progress = None
    try:
        with reporting_to_api():
            progress = (
                create_progress_artifact(
                    0.0, description=f"{label}: {len(futures)} work unit(s) of {ticket.chunk_rows}-row chunks"
                )
                if len(futures) > 1
                else None
            )
    except OrchestrationLost as lost:
        _progress_lost(lost)
    try:
        for done, _ in enumerate(as_completed(futures), start=1):
            if progress is not None:
                try:
                    with reporting_to_api():
                        update_progress_artifact(progress, 100.0 * done / len(futures))
                except OrchestrationLost as lost:
                    # The units go on (none may write staging files after a failure drops them), without a
                    # retried call per unit; publish-partition checks the API and fails the run before publishing.
                    progress = None
                    _progress_lost(lost)
            reported_progress(f"{label} units", done, len(futures))
    except BaseException as stop:
        signum = stopping_signal(stop)
        if signum is not None:
            stopped_run(ticket.run_id, signum)
            wait(futures)
        raise


def stopping_signal(error: BaseException) -> int | None:
    """The signal that `error` stands for: Prefect raises TerminationSignal for SIGTERM during a flow run,
    Python KeyboardInterrupt for SIGINT; None for any other error."""
    if isinstance(error, KeyboardInterrupt):
        return signal.SIGINT
    if isinstance(error, TerminationSignal):
        return error.signal
    return error.signum if isinstance(error, RunStopped) else None


def _progress_lost(lost: OrchestrationLost) -> None:
    log.warning("progress of the run's units is no longer reported: %s", lost)


def scored_units(ticket: RunTicket, units: list[WorkUnit]) -> tuple[list[UnitInference], list[UnitPrediction]]:
    """Each unit scored by one task; where inference runs on workers of its own, an inference task
    there and a prediction task anywhere, handing over through the run's staging files."""
    settings = current_settings()
    if not inference_runs_apart(settings):
        scored = [score_unit.submit(ticket, unit) for unit in units]
        _units_done(ticket, scored)
        results = [f.result() for f in scored]
        return [r.inference for r in results], [r.prediction for r in results]
    with inference_task_resources(settings):
        inferred = [infer_unit.submit(ticket, unit) for unit in units]
    plan = _run_job(ticket).prediction_plan
    predicted = [predict_unit.submit(ticket, plan, inference) for inference in inferred]
    _units_done(ticket, predicted)
    wait(inferred + predicted)
    return [f.result() for f in inferred], [f.result() for f in predicted]


def scored_summary(ticket: RunTicket) -> ScoringSummary:
    """The run's units planned, scored on the running flow's task runner and summarized."""
    started = time.time()
    inferences, predictions = scored_units(ticket, plan_work_units(ticket))
    # quote(): Prefect would walk every list of the units' results looking for futures, ~0.1 s a task.
    # Only tasks called in this process get quoted arguments: the Dask runner turns a quote into a tuple.
    return summarize_run(ticket, quote(inferences), quote(predictions), started)


@flow(name="score-units")
def score_units(ticket: RunTicket) -> ScoringSummary:
    """Each work unit scored on the Dask cluster the flow runs with, then their counts merged."""
    return scored_summary(ticket)


def partition_summary(ticket: RunTicket) -> ScoringSummary:
    """The run's summary: its units scored on the partition flow's own task runner, or on Dask (whose runner is not
    the run's) in a `score-units` subflow of their own."""
    settings = current_settings()
    if units_in_own_flow(settings):
        return score_units.with_options(task_runner=dask_task_runner(settings))(ticket)
    return scored_summary(ticket)
