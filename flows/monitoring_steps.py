"""Prefect tasks of prediction monitoring and realized outcomes: thin wrappers over tasks/monitoring.py,
tasks/outcomes.py and tasks/monitoring_report.py. They take and return plain values, never tables."""

from __future__ import annotations

import datetime as dt
import logging

import polars as pl
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from tasks.html_report import write_run_report
from tasks.jobspec import load_job_spec
from tasks.monitoring import monitored_decisions
from tasks.monitoring_report import monitoring_history, monitoring_page_html, realized_performance_rows
from tasks.outcomes import ingested_outcomes
from tasks.settings import current_settings
from tasks.warehouse import Warehouse
from flows.warehouse_config import configured_warehouse

log = logging.getLogger("scoring.monitoring")


def _artifact_key(prefix: str, job: str) -> str:
    return f"{prefix}-{job.replace('_', '-')}"


def _warehouse() -> Warehouse:
    return configured_warehouse(current_settings())


@task(name="monitor-decisions")
def monitor_decisions(job: str, partition_date: dt.date, run_id: str) -> dict:
    """Decision mix, rule hits, score summary, straddling share and expected events of the published
    partition, against the trailing window; stored in `decision_monitoring`. Returns the flagged measures."""
    spec = load_job_spec(job, current_settings())
    rows = pl.from_arrow(monitored_decisions(_warehouse(), spec, partition_date=partition_date, run_id=run_id))
    shifted = rows.filter(pl.col("flag") == "shift")
    create_table_artifact(
        key=_artifact_key("decision-monitoring", job),
        table=[
            {
                "measure": r["measure"], "item": r["item"], "value": f"{r['value']:.4g}",
                "trailing_mean": "—" if r["baseline"] is None else f"{r['baseline']:.4g}",
                "delta": "—" if r["delta"] is None else f"{r['delta']:+.4g}",
                "tolerance": "—" if r["tolerance"] is None else f"{r['tolerance']:.4g}",
                "flag": r["flag"] or "",
            }
            for r in rows.iter_rows(named=True)
        ],
        description=(
            f"Decision monitoring of {job} on {partition_date} (run {run_id}) against the trailing "
            f"{spec.monitoring.window_days} days (table decision_monitoring): "
            + (", ".join(f"{r['measure']} {r['item']} shifted" for r in shifted.iter_rows(named=True)) or "nothing shifted")
        ),
    )
    if shifted.height:
        log.warning(
            "[MON] %s %s: %d measure(s) moved beyond tolerance: %s", job, partition_date, shifted.height,
            ", ".join(f"{r['measure']}[{r['item']}] {r['delta']:+.3f}" for r in shifted.iter_rows(named=True)),
        )
    return {
        "job": job, "partition_date": partition_date.isoformat(), "run_id": run_id, "measures": rows.height,
        "shifted": [f"{r['measure']}:{r['item']}" for r in shifted.iter_rows(named=True)],
    }


@task(name="ingest-outcomes")
def ingest_outcomes(job: str, partition_date: dt.date) -> dict:
    """Labels of one partition joined to its predictions; labels and outcome metrics replaced in the warehouse."""
    settings = current_settings()
    spec = load_job_spec(job, settings)
    outcomes = ingested_outcomes(
        _warehouse(), spec, labels_dir=settings.labels_partition_dir(job, partition_date.isoformat()),
        partition_date=partition_date,
    )
    partition = outcomes.partition_row() or {"status": "no labels, not scored", "labels": 0, "labels_unknown_entity": 0}
    if partition["status"] == "not scored":
        log.warning("[OUT] %s %s: the partition was never scored; its %d label(s) are kept and counted as unknown entities",
                    job, partition_date, partition["labels"])
    elif partition.get("labels_unknown_entity"):
        log.warning("[OUT] %s %s: %d label(s) for entities the partition never scored", job, partition_date,
                    partition["labels_unknown_entity"])
    return {
        "job": job, "date": partition_date.isoformat(), "status": partition["status"],
        "labels": partition.get("labels", 0), "labels_unknown_entity": partition.get("labels_unknown_entity", 0),
        "model_versions": ",".join(r["model_version"] for r in outcomes.metric_rows()),
    }


@task(name="report-outcomes")
def report_outcomes(job: str, first_date: dt.date, last_date: dt.date) -> str:
    """Write the job's monitoring page for the range and leave the realized-performance artifacts; returns the page's path."""
    settings = current_settings()
    spec = load_job_spec(job, settings)
    history = monitoring_history(_warehouse(), job, first_date=first_date, last_date=last_date)
    page = settings.data_dir / "output" / job / "reports" / "html" / "monitoring.html"
    decisions = list(dict.fromkeys(r.decision for r in spec.prediction.rules))
    html = monitoring_page_html(history, event=spec.prediction.event, decisions=decisions, adverse=spec.adverse_decisions)
    write_run_report(page, html)
    rows = realized_performance_rows(history)
    unknown = sum(int(r["labels_unknown_entity"]) for r in history.partitions.iter_rows(named=True))
    create_table_artifact(
        key=_artifact_key("realized-performance", job),
        table=[{k: str(v) for k, v in r.items()} for r in rows],
        description=(
            f"Realized performance of {job}, partitions {first_date}..{last_date}, per model version: observed event "
            f"rate with its {spec.monitoring.outcome_interval_level:.0%} Clopper-Pearson interval against the expected "
            f"rate (tables outcome_metrics, outcome_partitions); labels for unknown entities: {unknown}"
        ),
    )
    create_markdown_artifact(
        key=_artifact_key("monitoring-report", job),
        markdown=(
            f"**Monitoring page** of `{job}` for {first_date}..{last_date}: [{page.name}]({page.as_uri()})\n\n"
            f"`{page}` — decision mix over time, expected vs observed event rate, calibration per model version.\n\n"
            f"Labels for entities never scored: **{unknown}**."
        ),
        description=f"Prediction monitoring and realized outcomes of {job}",
    )
    log.info("monitoring page of %s: %s", job, page)
    return str(page)
