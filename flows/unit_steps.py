"""Prefect tasks of one run's work units: plan, infer, predict, summarize, each a thin wrapper over
tasks/scoring/ (units, unit_pass, summary), and their submission on the configured task runner.
The prepared job (model and engines) is built once per run and worker process."""

from __future__ import annotations

import datetime as dt
import functools
import time

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.futures import PrefectFuture, as_completed, wait

from flows.execution import inference_task_resources
from flows.warehouse_config import with_warehouse_url
from tasks.scoring.partition_run import RunTicket
from tasks.scoring.progress import reported_progress
from tasks.scoring.prepared import PreparedJob, prepared_job
from tasks.scoring.summary import ScoringSummary, scoring_summary
from tasks.scoring.unit_pass import UnitInference, UnitPrediction, inferred_unit, predicted_unit
from tasks.scoring.units import WorkUnit, planned_work_units
from tasks.sinks.parquet_store import output_dirs
from tasks.settings import Settings, current_settings


@functools.lru_cache(maxsize=4)
def prepared_run_job(run_id: str, job: str, partition_date: dt.date, settings_json: str) -> PreparedJob:
    # Once per run and worker process: a Dask worker loads the model on its first unit of the run.
    settings = Settings.model_validate_json(settings_json).with_urls_of(with_warehouse_url(current_settings()))
    return prepared_job(job, partition_date, settings)


def _run_job(ticket: RunTicket) -> PreparedJob:
    return prepared_run_job(ticket.run_id, ticket.job, ticket.partition_date, current_settings().model_dump_json())


@task(name="plan-work-units")
def plan_work_units(ticket: RunTicket) -> list[WorkUnit]:
    """The partition's row groups grouped into units of at least one chunk, with the rows of duplicated entity ids."""
    return planned_work_units(
        _run_job(ticket), run_id=ticket.run_id, chunk_rows=ticket.chunk_rows, dirs=output_dirs(current_settings(), ticket.job)
    )


@task(name="infer-unit")
def infer_unit(ticket: RunTicket, unit: WorkUnit) -> UnitInference:
    """Guards, features, raw margins and contributions of one unit's chunks (the inference side)."""
    return inferred_unit(
        _run_job(ticket), unit, run_id=ticket.run_id, partition_date=ticket.partition_date,
        chunk_rows=ticket.chunk_rows, dirs=output_dirs(current_settings(), ticket.job),
    )


@task(name="predict-unit")
def predict_unit(ticket: RunTicket, inference: UnitInference) -> UnitPrediction:
    """Probabilities, intervals, scores, decisions and reasons of one unit's chunks (the business side)."""
    return predicted_unit(
        _run_job(ticket), inference, run_id=ticket.run_id, partition_date=ticket.partition_date,
        dirs=output_dirs(current_settings(), ticket.job),
    )


@task(name="summarize-run")
def summarize_run(
    ticket: RunTicket, inferences: list[UnitInference], predictions: list[UnitPrediction], started: float
) -> ScoringSummary:
    """Merge the units' counts, stage the run's reports and enforce the job's limits."""
    return scoring_summary(
        _run_job(ticket), inferences, predictions, run_id=ticket.run_id, partition_date=ticket.partition_date,
        dirs=output_dirs(current_settings(), ticket.job), wall_s=time.time() - started,
    )


def submitted_units(ticket: RunTicket, units: list[WorkUnit]) -> tuple[list[PrefectFuture], list[PrefectFuture]]:
    """Each unit's inference task, then its prediction task; returns once every one has stopped
    (so no unit still writes staging files when a failure drops them), with progress on the way."""
    with inference_task_resources(current_settings()):
        inferred = [infer_unit.submit(ticket, unit) for unit in units]
    predicted = [predict_unit.submit(ticket, inference) for inference in inferred]
    label = f"{ticket.job} {ticket.partition_date}"
    progress = create_progress_artifact(0.0, description=f"{label}: {len(units)} work unit(s) of {ticket.chunk_rows}-row chunks")
    for done, _ in enumerate(as_completed(predicted), start=1):
        update_progress_artifact(progress, 100.0 * done / len(units))
        reported_progress(f"{label} units", done, len(units))
    wait(inferred + predicted)
    return inferred, predicted
