"""A partition run's page: the decision-mix shifts it opens with, the HTML for the job's kind, and its address."""

from __future__ import annotations

import datetime as dt
import html
import logging

import numpy as np

from tasks.catalog import PAGES_FOLDER, run_page_name
from tasks.jobspec import load_job_spec
from tasks.monitoring.decisions import decision_groups_frame, group_keys, trailing_decision_monitoring
from tasks.reports.class_report import class_run_report_html
from tasks.reports.forecast_report import forecast_run_report_html
from tasks.reports.html_report import run_report_html
from tasks.runs.ticket import RunTicket
from tasks.scoring.summary import ScoringSummary
from tasks.settings import Settings
from tasks.sinks.warehouse import Warehouse

log = logging.getLogger("scoring.run")


def trailing_shifts(
    warehouse: Warehouse, settings: Settings, ticket: RunTicket, summary: ScoringSummary
) -> tuple[list[dict] | None, int | None]:
    """The decision-mix measures of the run that moved beyond tolerance against the trailing window, as decision
    monitoring stores them once the run publishes, and the window's days: what the run page opens with. (None, None)
    when they cannot be read: the page is a view of the run and says nothing of them then."""
    try:
        spec = load_job_spec(ticket.job, settings)
        groups = decision_groups_frame(
            summary.decision_groups, forecasts=spec.target.forecasts, classifies=spec.target.classifies
        )
        rows = trailing_decision_monitoring(
            warehouse,
            spec,
            partition_date=ticket.partition_date,
            run_id=ticket.run_id,
            groups=groups.sort(*group_keys(groups)),
        ).to_pylist()
    except Exception as exc:
        log.warning(
            "%s %s: the run page cannot compare the decisions with the trailing days: %s",
            ticket.job,
            ticket.partition_date,
            exc,
        )
        return None, None
    if all(r["flag"] == "no_baseline" for r in rows):
        # No partition in the window to compare with: the page says nothing of the decision mix rather than "in line".
        return None, None
    return [r for r in rows if r["flag"] == "shift"], spec.monitoring.window_days


def partition_page(
    ticket: RunTicket,
    summary: ScoringSummary,
    counts: dict,
    *,
    shifts: list[dict] | None = None,
    window_days: int | None = None,
) -> tuple[str, list[str]]:
    """The run's HTML page and the warnings of making it; it opens with the decision-mix `shifts` against the trailing
    `window_days` (`trailing_shifts`). The page is a view of the run, not its output: when it cannot be rendered, a short
    page says why and the run publishes without it."""
    try:
        histograms = {
            name: (
                np.asarray(h["edges"]),
                np.asarray(h["current"]),
                np.asarray(h["reference"]) if h["reference"] else None,
            )
            for name, h in summary.drift_histograms.items()
        }
        # What every kind of run page shows; each kind adds its own report.
        shared = dict(
            job=ticket.job,
            partition_date=ticket.partition_date,
            run_id=ticket.run_id,
            summary=counts,
            fallback_rows=summary.fallback_report,
            drift_rows=summary.drift_report,
            histograms=histograms,
            bin_labels={name: h["labels"] for name, h in summary.drift_histograms.items() if h.get("labels")},
            health_rows=summary.model_health,
            shadow_rows=summary.shadow_comparison,
            flip_examples=summary.flip_examples,
            words=ticket.words,
            shifts=shifts,
            window_days=window_days,
        )
        if summary.classification_report is not None:
            return class_run_report_html(**shared, report=summary.classification_report), []
        if summary.forecast_report is not None:
            return forecast_run_report_html(**shared, forecast=summary.forecast_report), []
        return run_report_html(**shared, reason_codes=summary.reason_codes), []
    except Exception as exc:
        log.warning("%s %s: the run page failed: %s", ticket.job, ticket.partition_date, exc)
        page = (
            f"<!doctype html><meta charset=utf-8><title>{ticket.job} {ticket.partition_date}</title>"
            f"<p>The page of run {ticket.run_id} could not be rendered: {html.escape(f'{type(exc).__name__}: {exc}')}. "
            "Its outputs are published; the runs ledger and the Parquet reports hold its figures.</p>"
        )
        return page, [f"run page not rendered: {type(exc).__name__}: {exc}"]


def report_url(base_url: str | None, job: str, partition_date: dt.date) -> str | None:
    """The run page's address under `SCORING_REPORT_BASE_URL`, which serves `<data_dir>/output`; None without one."""
    if not base_url:
        return None
    return f"{base_url.rstrip('/')}/{job}/{PAGES_FOLDER}/{run_page_name(partition_date.isoformat())}"
