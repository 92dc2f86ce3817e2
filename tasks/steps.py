"""Prefect tasks: thin wrappers that turn the domain functions into observable steps.

They pass small references (a run ticket, a summary) and never tables; engines and models are
built inside the task that uses them.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from pathlib import Path

import numpy as np
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import BaseModel, ConfigDict

from tasks.html_report import run_report_html, write_run_report
from tasks.partition_lock import PartitionLease
from tasks.publish import discard_run_staging, published_partition
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
from tasks.settings import Settings, current_settings
from tasks.warehouse import Warehouse
from tasks.warehouse_config import configured_warehouse, with_warehouse_url

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


@task(name="start-run")
def start_run(run_id: str, job: str, partition_date: dt.date, chunk_rows: int | None) -> RunTicket:
    """Close runs of the partition that died holding it, check spec, suite, model and feature
    versions, then open the run in the ledger. Runs under the partition's lease."""
    abandoned = _warehouse().closed_abandoned_runs(job=job, partition_date=partition_date, run_id=run_id, ended_at=_now())
    for dead in abandoned:
        discard_run_staging(output_dirs(current_settings(), job), dead)
    if abandoned:
        log.warning("%s %s: closed abandoned run(s) %s as failed and removed their staged files", job, partition_date, ", ".join(abandoned))
    prepared = _prepared(run_id, job, partition_date, current_settings().model_dump_json())
    meta = prepared.model.engine.metadata
    ticket = RunTicket(
        run_id=run_id,
        job=job,
        partition_date=partition_date,
        chunk_rows=chunk_rows or prepared.spec.chunk_rows,
        model_name=meta.name,
        model_version=meta.version,
        feature_version=prepared.features.FEATURE_VERSION,
    )
    _warehouse().record_run_started(
        {**ticket.model_dump(include={"run_id", "job", "partition_date", "model_name", "model_version", "feature_version"}), "started_at": _now()}
    )
    return ticket


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
def publish_partition(ticket: RunTicket, summary: ScoringSummary) -> dict[str, int]:
    """Replace the partition in the warehouse and in Parquet with this run's rows."""
    return published_partition(
        _warehouse(), output_dirs(current_settings(), ticket.job),
        job=ticket.job, partition_date=ticket.partition_date, run_id=ticket.run_id,
    )


def _written_run_report(ticket: RunTicket, summary: ScoringSummary, counts: dict) -> Path:
    histograms = {
        name: (np.asarray(h["edges"]), np.asarray(h["current"]), np.asarray(h["reference"]) if h["reference"] else None)
        for name, h in summary.drift_histograms.items()
    }
    html = run_report_html(
        job=ticket.job, partition_date=ticket.partition_date, run_id=ticket.run_id, summary=counts,
        fallback_rows=summary.fallback_report, drift_rows=summary.drift_report, histograms=histograms,
    )
    folder = current_settings().output_dir(ticket.job) / "reports" / "html"
    return write_run_report(folder / f"date={ticket.partition_date.isoformat()}.html", html)


def _drift_flags_markdown(rows: list[dict]) -> str:
    flagged = [r for r in rows if r["flag"] in ("warn", "alert")]
    if not flagged:
        return "No feature drifted beyond the warn thresholds."
    return "Drift flags: " + ", ".join(f"**{r['feature']}** {r['flag']} vs {r['baseline']} (PSI {r['psi']:.3f})" for r in flagged)


@task(name="finish-run")
def finish_run(ticket: RunTicket, summary: ScoringSummary, published: dict[str, int]) -> dict:
    """Close the run as succeeded and leave a summary artifact on it."""
    counts = summary.ledger_counts()
    _warehouse().record_run_ended(ticket.run_id, status="succeeded", ended_at=_now(), counts=counts)
    create_table_artifact(
        key=f"run-summary-{ticket.job.replace('_', '-')}",
        table=[{"measure": k, "value": str(v)} for k, v in {**ticket.model_dump(), **counts, "published": published}.items()],
        description=f"Scoring of {ticket.job} for {ticket.partition_date}",
    )
    report_path = _written_run_report(ticket, summary, counts)
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
        "report": str(report_path), **counts,
    }


@task(name="fail-run")
def fail_run(run_id: str, job: str, partition_date: dt.date, error: BaseException) -> None:
    """Record the failure with its message in the ledger and drop the run's staging files."""
    discard_run_staging(output_dirs(current_settings(), job), run_id)
    _warehouse().record_run_failed(
        run_id=run_id, job=job, partition_date=partition_date, ended_at=_now(), error=f"{type(error).__name__}: {error}"
    )
