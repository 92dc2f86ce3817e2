"""Decision monitoring of a published partition, outcome ingestion and the monitoring page, as plain
results and artifact contents. Prefect-free: flows/steps/monitoring.py wraps these as tasks."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import polars as pl

from tasks.errors import ScoringError
from tasks.jobspec import configured_jobs, load_job_spec
from tasks.monitoring.decisions import decision_groups_frame, monitored_decisions
from tasks.monitoring.history import (
    class_monitoring_rows,
    forecast_monitoring_history,
    monitoring_history,
    unmatched_label_counts,
)
from tasks.monitoring.outcomes import ingested_outcomes, outcome_window
from tasks.monitoring.slices import slice_counts_frame
from tasks.reports.artifacts import (
    Artifact,
    artifact_key,
    decision_monitoring_artifact,
    monitoring_page_artifacts,
    monitoring_page_link,
    slice_monitoring_artifact,
)
from tasks.reports.class_monitoring_page import class_monitoring_page_html
from tasks.reports.forecast_monitoring_page import forecast_monitoring_page_html
from tasks.reports.html_parts import write_run_report
from tasks.reports.links import file_reference_markdown, served_url
from tasks.reports.monitoring_page import (
    monitoring_page_html,
    realized_class_rows,
    realized_error_rows,
    realized_performance_rows,
)
from tasks.runs.calendar import ALL_JOBS, parse_partition_date, yesterday
from tasks.settings import Settings
from tasks.sinks.warehouse import Warehouse
from tasks.sources import raw_partition

log = logging.getLogger("scoring.monitoring")


def decision_monitoring(
    warehouse: Warehouse,
    settings: Settings,
    job: str,
    partition_date: dt.date,
    run_id: str,
    groups: list[dict[str, Any]] | None = None,
    slice_counts: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], list[Artifact]]:
    """Decision mix, rule hits, score summary, straddling share and expected events of the published
    partition against the trailing window, stored in `decision_monitoring`: the flagged measures and the table.
    `groups` are the run's own counts (`ScoringSummary.decision_groups`); without them the published rows are counted."""
    spec = load_job_spec(job, settings)
    counted = (
        None
        if groups is None
        else decision_groups_frame(groups, forecasts=spec.target.forecasts, classifies=spec.target.classifies)
    )
    sliced = None if slice_counts is None else slice_counts_frame(slice_counts)
    with warehouse.kept_open():
        decided, slice_table = monitored_decisions(
            warehouse, spec, partition_date=partition_date, run_id=run_id, groups=counted, slice_counts=sliced
        )
    rows = pl.from_arrow(decided).to_dicts()
    slices = slice_table.to_pylist()
    shifted_slices = [r for r in slices if r["flag"] == "shift"]
    if shifted_slices:
        log.warning(
            "[MON] %s %s: %d slice measure(s) moved (false discovery rate %.0f%%): %s",
            job,
            partition_date,
            len(shifted_slices),
            spec.monitoring.slice_fdr * 100,
            ", ".join(
                f"{r['slice_column']}={r['slice_value']} {r['measure']} q={r['q_value']:.2g}" for r in shifted_slices
            ),
        )
    shifted = [r for r in rows if r["flag"] == "shift"]
    if shifted:
        log.warning(
            "[MON] %s %s: %d measure(s) moved beyond tolerance: %s",
            job,
            partition_date,
            len(shifted),
            ", ".join(f"{r['measure']}[{r['item']}] {r['delta']:+.3f}" for r in shifted),
        )
    result = {
        "job": job,
        "partition_date": partition_date.isoformat(),
        "run_id": run_id,
        "measures": len(rows),
        "shifted": [f"{r['measure']}:{r['item']}" for r in shifted],
        "shifted_slices": [f"{r['slice_column']}={r['slice_value']}:{r['measure']}" for r in shifted_slices],
        "shifts": [{k: r[k] for k in ("measure", "item", "value", "baseline", "delta")} for r in shifted],
        "window_days": spec.monitoring.window_days,
        "without_baseline": sum(r["flag"] == "no_baseline" for r in rows),
    }
    artifacts = [
        decision_monitoring_artifact(
            rows, job=job, partition_date=partition_date, run_id=run_id, window_days=spec.monitoring.window_days
        )
    ]
    if slices:
        artifacts.append(
            slice_monitoring_artifact(
                slices,
                job=job,
                partition_date=partition_date,
                fdr=spec.monitoring.slice_fdr,
                window_days=spec.monitoring.window_days,
            )
        )
    return result, artifacts


def outcomes_run_name(settings: Settings, job: object, start_date: object, end_date: object) -> str:
    """`outcomes <job or all> <first>…<last>`, the partitions an outcomes run covers (every job's lookback window
    together when the dates are left empty), so the analyst finds the run by what it measured. The parameters come
    as the run was asked for, before validation: what cannot be read is named as given, the run itself refuses it."""
    try:
        first, last = (None if d is None else parse_partition_date(d) for d in (start_date, end_date))
        windows = [
            outcome_window(
                load_job_spec(name, settings), start_date=first, end_date=last, yesterday=yesterday(settings)
            )
            for name in (configured_jobs(settings) if str(job) == ALL_JOBS else [str(job)])
        ]
        return f"outcomes {job} {min(w[0] for w in windows)}…{max(w[1] for w in windows)}"
    except (ScoringError, ValueError):
        return f"outcomes {job} {start_date or 'lookback'}…{end_date or 'yesterday'}"


def ingested_partition_outcomes(
    warehouse: Warehouse, settings: Settings, job: str, partition_date: dt.date
) -> dict[str, Any]:
    """Labels of one partition joined to its predictions; labels and outcome metrics replaced in the warehouse."""
    spec = load_job_spec(job, settings)
    # Only a forecast or multiclass job with slices reads its raw partition again: binary slice monitoring runs in the scoring pass.
    rereads = spec.target.forecasts or spec.target.classifies
    raw = raw_partition(spec.source, settings, job, partition_date) if rereads and spec.monitoring.slices else None
    outcomes = ingested_outcomes(
        warehouse,
        spec,
        labels_dir=settings.labels_partition_dir(job, partition_date.isoformat()),
        partition_date=partition_date,
        raw=raw,
    )
    for note in outcomes.notes:
        log.warning("[OUT] %s %s: %s", job, partition_date, note)
    partition = outcomes.partition_row() or {"status": "no labels, not scored", "labels": 0, "labels_unknown_entity": 0}
    if partition["status"] == "not scored":
        log.warning(
            "[OUT] %s %s: the partition was never scored; its %d label(s) are kept and counted as labels of a day not scored",
            job,
            partition_date,
            partition["labels"],
        )
    elif partition.get("labels_unknown_entity"):
        log.warning(
            "[OUT] %s %s: %d label(s) for entities the partition never scored",
            job,
            partition_date,
            partition["labels_unknown_entity"],
        )
    return {
        "job": job,
        "date": partition_date.isoformat(),
        "status": partition["status"],
        "labels": partition.get("labels", 0),
        "labels_unknown_entity": partition.get("labels_unknown_entity", 0),
        "model_versions": ",".join(outcomes.model_versions()),
        **({"notes": list(outcomes.notes)} if outcomes.notes else {}),
    }


def written_monitoring_page(
    warehouse: Warehouse, settings: Settings, job: str, first_date: dt.date, last_date: dt.date
) -> tuple[Path, list[Artifact]]:
    """The job's monitoring page for the range, written, and its realized-performance artifacts (a forecast job's:
    its realized error)."""
    spec = load_job_spec(job, settings)
    page = settings.monitoring_page_path(job)
    page_url = served_url(settings.report_base_url, settings.output_root, page)
    decisions = list(dict.fromkeys(r.decision for r in spec.prediction.rules))
    if spec.target.classifies:
        rows = class_monitoring_rows(warehouse, job, first_date=first_date, last_date=last_date)
        realized = realized_class_rows(
            monitoring_history(
                warehouse,
                job,
                first_date=first_date,
                last_date=last_date,
                level=spec.monitoring.outcome_interval_level,
                bins=spec.monitoring.calibration_bins,
            )
        )
        write_run_report(
            page,
            class_monitoring_page_html(
                rows,
                job=job,
                name=spec.target.name or spec.monitoring.labels.outcome_column,
                classes=spec.target.classes,
                decisions=decisions,
                first_date=first_date,
                last_date=last_date,
                realized=realized,
                words=spec.words,
            ),
        )
        log.info("monitoring page of %s: %s", job, page)
        return page, [
            *monitoring_page_link(job, page_url),
            Artifact(
                artifact_key("monitoring-report", job),
                f"Class-mix monitoring of {job}",
                markdown=(
                    f"**Monitoring page** of `{job}` for {first_date}..{last_date}: {file_reference_markdown(page, page_url)} — each "
                    "partition's class mix, mean probability of the predicted class, close calls and decisions."
                ),
            ),
        ]
    if spec.target.forecasts:
        forecast = forecast_monitoring_history(warehouse, job, first_date=first_date, last_date=last_date)
        write_run_report(
            page,
            forecast_monitoring_page_html(
                forecast,
                target=spec.target.model_dump(),
                level=spec.prediction.interval_level,
                words=spec.words,
            ),
        )
        log.info("monitoring page of %s: %s", job, page)
        return page, monitoring_page_artifacts(
            realized_error_rows(forecast.history),
            job=job,
            first_date=first_date,
            last_date=last_date,
            page=page,
            page_url=page_url,
            unmatched=unmatched_label_counts(forecast.history),
            interval_level=spec.prediction.interval_level,
            forecasts=True,
        )
    history = monitoring_history(
        warehouse,
        job,
        first_date=first_date,
        last_date=last_date,
        level=spec.monitoring.outcome_interval_level,
        bins=spec.monitoring.calibration_bins,
    )
    write_run_report(page, monitoring_page_html(history, words=spec.words))
    log.info("monitoring page of %s: %s", job, page)
    return page, monitoring_page_artifacts(
        realized_performance_rows(history),
        job=job,
        first_date=first_date,
        last_date=last_date,
        page=page,
        page_url=page_url,
        unmatched=unmatched_label_counts(history),
        interval_level=spec.monitoring.outcome_interval_level,
    )
