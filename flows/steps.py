"""Prefect tasks: thin wrappers that turn the domain functions into observable steps.

They pass small references (a run ticket, a summary) and never tables; engines and models are
built inside the task that uses them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import html
import logging
import time
import traceback
import uuid

import numpy as np
from prefect import task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.futures import PrefectFuture, as_completed, wait
from pydantic import BaseModel, ConfigDict

from flows.execution import inference_task_resources
from flows.monitoring_steps import monitor_decisions
from flows.warehouse_config import configured_warehouse, with_warehouse_url
from tasks.errors import user_facing_error
from tasks.html_report import run_report_html
from tasks.partition_lock import PartitionLease
from tasks.publish import PublishedPartition, discarded_run, partition_store, published_partition, retried
from tasks.recovery import pending_ledger_dir, recorded_pending_failure, recovered_job, recovered_partition
from tasks.scoring import (
    PreparedJob,
    ScoringSummary,
    UnitInference,
    UnitPrediction,
    WorkUnit,
    inferred_unit,
    output_dirs,
    planned_work_units,
    predicted_unit,
    prepared_job,
    scoring_summary,
)
from tasks.progress import reported_progress
from tasks.settings import Settings, current_settings
from tasks.warehouse import Warehouse

log = logging.getLogger("scoring.run")


class RunTicket(BaseModel):
    """Identity of one scoring run, handed from step to step."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())

    run_id: str
    job: str
    partition_date: dt.date
    chunk_rows: int
    model_name: str
    model_version: str
    feature_version: str


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _warehouse() -> Warehouse:
    return configured_warehouse(current_settings())


def partition_lease(run_id: str, job: str, partition_date: dt.date) -> PartitionLease:
    """The lease that makes this run the partition's only writer (`with lease.held(): …`)."""
    settings = current_settings()
    return PartitionLease(_warehouse(), job, partition_date, run_id, ttl_s=settings.lock_ttl_s, wait_s=settings.lock_wait_s)


@task(name="prepare-run")
def prepare_run(run_id: str, job: str, partition_date: dt.date, chunk_rows: int | None) -> RunTicket:
    """Check spec, suite, model metadata and feature versions, before the lease: a mistake fails
    here, with nothing written and no ledger row. The model stays loaded for the run's units."""
    prepared = _prepared(run_id, job, partition_date, current_settings().model_dump_json())
    meta = prepared.model.engine.metadata
    return RunTicket(
        run_id=run_id,
        job=job,
        partition_date=partition_date,
        chunk_rows=chunk_rows or prepared.spec.chunk_rows,
        model_name=meta.name,
        model_version=meta.version,
        feature_version=prepared.features.FEATURE_VERSION,
    )


@task(name="start-run")
def start_run(ticket: RunTicket) -> list[dict]:
    """Under the partition's lease: finish or undo what dead runs of the job left (this partition's
    and, where no live run holds them, the others'), then open the run in the ledger."""
    settings, warehouse = current_settings(), _warehouse()
    recovered = recovered_partition(
        warehouse, output_dirs(settings, ticket.job), job=ticket.job, partition_date=ticket.partition_date,
        holder_run_id=ticket.run_id, pending_dir=pending_ledger_dir(settings, ticket.job), now=_now(),
    )
    recovered += recovered_job(warehouse, settings, ticket.job, recovering_run_id=f"recovery-{ticket.run_id}", skip=ticket.partition_date)
    warehouse.record_run_started(
        {**ticket.model_dump(include={"run_id", "job", "partition_date", "model_name", "model_version", "feature_version"}), "started_at": _now()}
    )
    return [dataclasses.asdict(r) for r in recovered]


@functools.lru_cache(maxsize=4)
def _prepared(run_id: str, job: str, partition_date: dt.date, settings_json: str) -> PreparedJob:
    # Once per run and worker process: a Dask worker loads the model on its first unit of the run.
    # The JSON key masks the warehouse URL (a secret), so that one comes from this process's settings.
    resolved = with_warehouse_url(current_settings())
    settings = Settings.model_validate_json(settings_json).model_copy(
        update={"warehouse_url": resolved.warehouse_url, "warehouse_secret_block": None}
    )
    return prepared_job(job, partition_date, settings)


def _run_job(ticket: RunTicket) -> PreparedJob:
    return _prepared(ticket.run_id, ticket.job, ticket.partition_date, current_settings().model_dump_json())


@task(name="recover-job")
def recover_job(job: str) -> list[dict]:
    """Finish or undo what dead runs of `job` left, where no live run holds the partition."""
    recovered = recovered_job(_warehouse(), with_warehouse_url(current_settings()), job, recovering_run_id=f"recovery-{uuid.uuid4()}")
    return [dataclasses.asdict(r) for r in recovered]


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


@task(name="publish-partition")
def publish_partition(ticket: RunTicket, summary: ScoringSummary) -> PublishedPartition:
    """Replace the partition in the warehouse and in Parquet with this run's rows and page, as one commit."""
    counts = summary.ledger_counts()
    warnings: list[str] = []
    try:
        page = _run_page(ticket, summary, counts)
    except Exception as exc:
        # The page is a view of the run, not its output: the run publishes without it.
        warnings.append(f"run page not rendered: {type(exc).__name__}: {exc}")
        log.warning("%s %s: the run page failed: %s", ticket.job, ticket.partition_date, exc)
        page = (
            f"<!doctype html><meta charset=utf-8><title>{ticket.job} {ticket.partition_date}</title>"
            f"<p>The page of run {ticket.run_id} could not be rendered: {html.escape(f'{type(exc).__name__}: {exc}')}. "
            "Its outputs are published; the runs ledger and the Parquet reports hold its figures.</p>"
        )
    settings = current_settings()
    return published_partition(
        _warehouse(), output_dirs(settings, ticket.job), job=ticket.job, partition_date=ticket.partition_date,
        run_id=ticket.run_id, counts=counts, page_html=page, warnings=warnings, ended_at=_now(), crash_at=settings.crash_at,
    )


def _run_page(ticket: RunTicket, summary: ScoringSummary, counts: dict) -> str:
    histograms = {
        name: (np.asarray(h["edges"]), np.asarray(h["current"]), np.asarray(h["reference"]) if h["reference"] else None)
        for name, h in summary.drift_histograms.items()
    }
    return run_report_html(
        job=ticket.job, partition_date=ticket.partition_date, run_id=ticket.run_id, summary=counts,
        fallback_rows=summary.fallback_report, drift_rows=summary.drift_report, histograms=histograms,
        bin_labels={name: h["labels"] for name, h in summary.drift_histograms.items() if h.get("labels")},
    )


def _drift_flags_markdown(rows: list[dict]) -> str:
    flagged = [r for r in rows if r["flag"] in ("warn", "alert")]
    if not flagged:
        return "No feature drifted beyond the warn thresholds."
    return "Drift flags: " + ", ".join(f"**{r['feature']}** {r['flag']} vs {r['baseline']} (PSI {r['psi']:.3f})" for r in flagged)


@task(name="finish-run")
def finish_run(ticket: RunTicket, summary: ScoringSummary, published: PublishedPartition) -> dict:
    """Leave the run's summary, page link, drift, fallback and guard tables as artifacts."""
    counts = summary.ledger_counts()
    report_path = partition_store(output_dirs(current_settings(), ticket.job)).page_link(ticket.partition_date.isoformat())
    create_table_artifact(
        key=f"run-summary-{ticket.job.replace('_', '-')}",
        table=[{"measure": k, "value": str(v)} for k, v in {**ticket.model_dump(), **counts, "published": published.rows, "warnings": published.warnings}.items()],
        description=f"Scoring of {ticket.job} for {ticket.partition_date}",
    )
    log.info("run report of %s %s: %s", ticket.job, ticket.partition_date, report_path)
    create_markdown_artifact(
        key=f"run-report-{ticket.job.replace('_', '-')}",
        markdown=(
            f"**Run report** of `{ticket.job}` on {ticket.partition_date}: [{report_path.name}]({report_path.as_uri()})\n\n"
            f"`{report_path}` — summary, fallback table, drift table and a histogram per feature, most drifted first.\n\n"
            + _drift_flags_markdown(summary.drift_report)
        ),
        description=f"HTML run report of {ticket.job} for {ticket.partition_date}",
    )
    create_table_artifact(
        key=f"drift-report-{ticket.job.replace('_', '-')}",
        table=[{k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()} for row in summary.drift_report],
        description=f"Drift of {ticket.job} on {ticket.partition_date} against the training reference and the previous partition (table drift_report)",
    )
    create_table_artifact(
        key=f"fallback-report-{ticket.job.replace('_', '-')}",
        table=[{**row, "share": f"{row['share']:.4%}"} for row in summary.fallback_report],
        description=(
            f"Fallbacks of {ticket.job} on {ticket.partition_date}: every repaired, quarantined, fallback-model, "
            f"failed-chunk and reason-less row, of {summary.rows_read} read (table fallback_report)"
        ),
    )
    create_table_artifact(
        key=f"guard-summary-{ticket.job.replace('_', '-')}",
        table=summary.guard_summary,
        description=(
            f"Feature guards of {ticket.job} on {ticket.partition_date}: rows each expectation repaired, "
            f"quarantined or failed, of {summary.rows_read} read (table guard_summary)"
        ),
    )
    return {
        "run_id": ticket.run_id, "job": ticket.job, "partition_date": ticket.partition_date.isoformat(),
        "report": str(report_path), **counts, "warnings": list(published.warnings),
    }


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


def finished_run(ticket: RunTicket, summary: ScoringSummary, published: PublishedPartition) -> dict:
    """Artifacts and decision monitoring of a published run. The run has succeeded: what fails here
    is kept on its ledger row as a warning, not lost and not a failure."""
    finished = finish_run(ticket, summary, published, return_state=True)
    result = finished.result() if finished.is_completed() else {
        "run_id": ticket.run_id, "job": ticket.job, "partition_date": ticket.partition_date.isoformat(),
        **summary.ledger_counts(), "report": "", "warnings": [*published.warnings, f"artifacts not written: {finished.message}"],
    }
    monitored = monitor_decisions(ticket.job, ticket.partition_date, ticket.run_id, return_state=True)
    if monitored.is_completed():
        result["decision_monitoring"] = monitored.result()
    else:
        result["warnings"].append(f"decision monitoring failed: {monitored.message}")
    if result["warnings"] != published.warnings:
        record_run_warnings(ticket.run_id, result["warnings"])
    return result


@task(name="record-run-warnings")
def record_run_warnings(run_id: str, warnings: list[str]) -> None:
    """What failed after the run published (page, artifacts, monitoring), kept on its ledger row."""
    retried(lambda: _warehouse().record_run_warnings(run_id, warnings))


@task(name="fail-run")
def fail_run(run_id: str, job: str, partition_date: dt.date, error: BaseException) -> None:
    """Record the failure in the ledger (one line and the traceback) and drop the run's files.

    A run whose rows were already committed is not failed: recovery finishes its publish. When the
    ledger cannot be written (warehouse locked, disk full), the failure is kept beside the outputs
    and the next start of the job records it; the files stay until then."""
    settings = current_settings()
    record = {
        "run_id": run_id, "job": job, "partition_date": partition_date, "ended_at": _now(),
        "error": f"{type(error).__name__}: {user_facing_error(error)[0]}",
        "error_detail": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
    }
    try:
        failed = retried(lambda: _warehouse().record_run_failed(**record))
    except Exception as exc:
        kept = recorded_pending_failure(pending_ledger_dir(settings, job), record)
        log.warning(
            "%s %s: the failure of run %s could not be written to the ledger (%s: %s); %s", job, partition_date, run_id,
            type(exc).__name__, exc, f"kept in {kept} for the next start" if kept else "the next start closes it as abandoned",
        )
        return
    if failed:
        discarded_run(output_dirs(settings, job), partition_date, run_id)
    else:
        log.warning("%s %s: run %s had committed its rows; the next start of the job finishes its Parquet swap", job, partition_date, run_id)
