"""One partition run outside the chunk loop: its ticket, its start under the lease, its page, its
artifacts' contents, its result and its failure record. Prefect-free: flows/steps/partition.py wraps these
as tasks and turns `Artifact`s into Prefect artifacts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import logging
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from tasks.errors import DiskFull, ModelArtifactError, PartitionBusy, environment_fault, user_facing_error
from tasks.jobspec import load_job_spec
from tasks.monitoring.decisions import decision_groups_frame, group_keys, trailing_decision_monitoring
from tasks.monitoring.health import ESTIMATED_ERROR, health_headline
from tasks.monitoring.shadow import shadow_headline
from tasks.prediction.words import JobWords
from tasks.quality.fallback_report import fallback_kind_totals
from tasks.reports.class_report import class_run_report_html
from tasks.reports.forecast_report import forecast_run_report_html
from tasks.reports.html_report import run_report_html
from tasks.reports.links import file_reference_markdown
from tasks.reports.plain_words import (
    drift_flag_text, feature_directions, flagged_drift_rows, reason_text, shift_parts,
)
from tasks.sinks.publish import PublishedPartition, discarded_run, retried
from tasks.sinks.recovery import (
    pending_ledger_dir, recorded_pending_failure, recovered_job, recovered_partition, released_failure_room, reserved_failure_room,
)
from tasks.scoring.prepared import PreparedJob
from tasks.scoring.summary import ScoringSummary
from tasks.scoring.units import RunDeadline
from tasks.sinks.parquet_store import output_dirs
from tasks.sinks.partition_lock import PartitionLease
from tasks.settings import Settings
from tasks.sinks.config import DeltaSink
from tasks.sinks.delta import delta_tables
from tasks.sinks.warehouse import Warehouse

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
    delta_sink: DeltaSink | None = None
    """The Delta sink of the spec the run was prepared with: its publish writes there."""
    challenger_version: str | None = None
    """The version the job's challenger (`model.challenger`, maybe an alias) resolved to when the run started."""
    max_run_seconds: float | None = None
    """The run's time limit (`limits.max_run_seconds`, else SCORING_MAX_RUN_SECONDS)."""
    deadline: float | None = None
    """When the run must have finished scoring, in seconds since the epoch: set when it starts under the lease."""
    words: JobWords | None = None
    """The job's own words (event, score, decisions, features) in the spec the run was prepared with: its page,
    artifacts and alerts say them."""

    def started(self, now: float) -> RunTicket:
        """The ticket of the run starting now: its deadline set."""
        return self.model_copy(update={"deadline": now + self.max_run_seconds if self.max_run_seconds else None})

    def run_deadline(self) -> RunDeadline | None:
        if self.deadline is None or self.max_run_seconds is None:
            return None
        return RunDeadline(self.deadline, self.max_run_seconds, f"run {self.run_id} of {self.job} {self.partition_date}")


@dataclass(frozen=True)
class Artifact:
    """What a Prefect artifact shows: a table (list of rows), Markdown, or a link, under a key."""

    key: str
    description: str
    table: list[dict[str, Any]] | None = None
    markdown: str | None = None
    link: str | None = None
    pinned: bool = False
    """Shown first in the run's artifacts, in the order given (flows/steps/artifacts.py: left_artifacts_in_order)."""


def artifact_key(prefix: str, job: str) -> str:
    return f"{prefix}-{job.replace('_', '-')}"


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def run_ticket(
    prepared: PreparedJob, *, run_id: str, partition_date: dt.date, chunk_rows: int | None, max_run_seconds: float | None = None,
) -> RunTicket:
    """The run's identity; `max_run_seconds` is the settings' limit, which the spec's `limits.max_run_seconds` overrides."""
    meta = prepared.model.engine.metadata
    return RunTicket(
        run_id=run_id, job=prepared.spec.name, partition_date=partition_date,
        chunk_rows=chunk_rows or prepared.spec.chunk_rows, model_name=meta.name, model_version=meta.version,
        feature_version=prepared.features.FEATURE_VERSION, delta_sink=prepared.spec.sinks.delta,
        challenger_version=prepared.challenger_plan.version if prepared.challenger_plan else None,
        max_run_seconds=prepared.spec.limits.max_run_seconds or max_run_seconds, words=prepared.spec.words,
    )


def pinned_versions(prepared: PreparedJob, ticket: RunTicket) -> None:
    """Refuse a worker's job whose model versions are not the run's: an alias moved between the run's
    start and this worker's load, and the partition would be scored by two models."""
    meta = prepared.model.engine.metadata
    challenger = prepared.challenger_plan.version if prepared.challenger_plan else None
    if (meta.version, challenger) != (ticket.model_version, ticket.challenger_version):
        raise ModelArtifactError(
            f"run {ticket.run_id} of {ticket.job} {ticket.partition_date} started with model {ticket.model_name} "
            f"{ticket.model_version} (challenger {ticket.challenger_version}), but this worker loaded {meta.version} "
            f"(challenger {challenger}): an alias moved during the run; score the partition again"
        )


def run_lease(warehouse: Warehouse, settings: Settings, run_id: str, job: str, partition_date: dt.date) -> PartitionLease:
    """The lease that makes this run the partition's only writer (`with lease.held(): …`)."""
    return PartitionLease(warehouse, job, partition_date, run_id, ttl_s=settings.lock_ttl_s, wait_s=settings.lock_wait_s)


def finished_run_result(
    ticket: RunTicket, summary: ScoringSummary, published: PublishedPartition, *,
    artifacts: dict | None, artifacts_error: str, monitoring: dict | None, monitoring_error: str,
) -> dict:
    """The result of a published run once its artifacts and decision monitoring ran (None: that step
    failed with its error): the run has succeeded, so a failure there is one more warning."""
    result = artifacts if artifacts is not None else run_result(
        ticket, summary, report="", warnings=[*published.warnings, f"artifacts not written: {artifacts_error}"]
    )
    if monitoring is not None:
        result["decision_monitoring"] = monitoring
    else:
        result["warnings"].append(f"decision monitoring failed: {monitoring_error}")
    return result


def started_run(warehouse: Warehouse, settings: Settings, ticket: RunTicket) -> list[dict]:
    """Under the partition's lease: what dead runs of the job left, finished or undone (this
    partition's and, where no live run holds them, the others'), then the run opened in the ledger."""
    with warehouse.kept_open():
        recovered = recovered_partition(
            warehouse, output_dirs(settings, ticket.job), job=ticket.job, partition_date=ticket.partition_date,
            holder_run_id=ticket.run_id, pending_dir=pending_ledger_dir(settings, ticket.job), now=now_utc(),
            delta=lambda: delta_tables(ticket.delta_sink, settings),
        )
        recovered += recovered_job(warehouse, settings, ticket.job, recovering_run_id=f"recovery-{ticket.run_id}", skip=ticket.partition_date)
        reserved_failure_room(pending_ledger_dir(settings, ticket.job), ticket.run_id)
        warehouse.record_run_started(
            {**ticket.model_dump(include={"run_id", "job", "partition_date", "model_name", "model_version", "feature_version"}), "started_at": now_utc()}
        )
    return [dataclasses.asdict(r) for r in recovered]


def trailing_shifts(warehouse: Warehouse, settings: Settings, ticket: RunTicket, summary: ScoringSummary) -> tuple[list[dict] | None, int | None]:
    """The decision-mix measures of the run that moved beyond tolerance against the trailing window, as decision
    monitoring stores them once the run publishes, and the window's days: what the run page opens with. (None, None)
    when they cannot be read: the page is a view of the run and says nothing of them then."""
    try:
        spec = load_job_spec(ticket.job, settings)
        groups = decision_groups_frame(summary.decision_groups, forecasts=spec.target.forecasts, classifies=spec.target.classifies)
        rows = trailing_decision_monitoring(
            warehouse, spec, partition_date=ticket.partition_date, run_id=ticket.run_id, groups=groups.sort(*group_keys(groups)),
        ).to_pylist()
    except Exception as exc:
        log.warning("%s %s: the run page cannot compare the decisions with the trailing days: %s", ticket.job, ticket.partition_date, exc)
        return None, None
    if all(r["flag"] == "no_baseline" for r in rows):
        # No partition in the window to compare with: the page says nothing of the decision mix rather than "in line".
        return None, None
    return [r for r in rows if r["flag"] == "shift"], spec.monitoring.window_days


def partition_page(
    ticket: RunTicket, summary: ScoringSummary, counts: dict, *, shifts: list[dict] | None = None, window_days: int | None = None,
) -> tuple[str, list[str]]:
    """The run's HTML page and the warnings of making it; it opens with the decision-mix `shifts` against the trailing
    `window_days` (`trailing_shifts`). The page is a view of the run, not its output: when it cannot be rendered, a short
    page says why and the run publishes without it."""
    try:
        histograms = {
            name: (np.asarray(h["edges"]), np.asarray(h["current"]), np.asarray(h["reference"]) if h["reference"] else None)
            for name, h in summary.drift_histograms.items()
        }
        if summary.classification_report is not None:
            return class_run_report_html(
                job=ticket.job, partition_date=ticket.partition_date, run_id=ticket.run_id, summary=counts,
                report=summary.classification_report, fallback_rows=summary.fallback_report, drift_rows=summary.drift_report,
                histograms=histograms, bin_labels={name: h["labels"] for name, h in summary.drift_histograms.items() if h.get("labels")},
                health_rows=summary.model_health, shadow_rows=summary.shadow_comparison, flip_examples=summary.flip_examples,
                words=ticket.words, shifts=shifts, window_days=window_days,
            ), []
        if summary.forecast_report is not None:
            return forecast_run_report_html(
                job=ticket.job, partition_date=ticket.partition_date, run_id=ticket.run_id, summary=counts, forecast=summary.forecast_report,
                fallback_rows=summary.fallback_report, drift_rows=summary.drift_report, histograms=histograms,
                bin_labels={name: h["labels"] for name, h in summary.drift_histograms.items() if h.get("labels")},
                health_rows=summary.model_health, shadow_rows=summary.shadow_comparison, flip_examples=summary.flip_examples,
                words=ticket.words, shifts=shifts, window_days=window_days,
            ), []
        return run_report_html(
            job=ticket.job, partition_date=ticket.partition_date, run_id=ticket.run_id, summary=counts,
            fallback_rows=summary.fallback_report, drift_rows=summary.drift_report, histograms=histograms,
            bin_labels={name: h["labels"] for name, h in summary.drift_histograms.items() if h.get("labels")},
            health_rows=summary.model_health, shadow_rows=summary.shadow_comparison, flip_examples=summary.flip_examples,
            words=ticket.words, shifts=shifts, window_days=window_days, reason_codes=summary.reason_codes,
        ), []
    except Exception as exc:
        log.warning("%s %s: the run page failed: %s", ticket.job, ticket.partition_date, exc)
        page = (
            f"<!doctype html><meta charset=utf-8><title>{ticket.job} {ticket.partition_date}</title>"
            f"<p>The page of run {ticket.run_id} could not be rendered: {html.escape(f'{type(exc).__name__}: {exc}')}. "
            "Its outputs are published; the runs ledger and the Parquet reports hold its figures.</p>"
        )
        return page, [f"run page not rendered: {type(exc).__name__}: {exc}"]


def _feature_name(feature: str, words: JobWords | None) -> str:
    return words.feature(feature) if words is not None else feature


def _drift_flags_markdown(rows: list[dict], words: JobWords | None = None) -> str:
    flagged = flagged_drift_rows(rows)
    if not flagged:
        return "No feature moved beyond its warning threshold."
    return "Features that moved: " + ", ".join(
        f"**{_feature_name(r['feature'], words)}** {drift_flag_text(r)} (PSI {r['psi']:.3f})" for r in flagged
    ) + ". PSI, the population stability index, says how far the spread of values moved: under 0.1 little, over 0.25 a lot."


def report_url(base_url: str | None, job: str, partition_date: dt.date) -> str | None:
    """The run page's address under `SCORING_REPORT_BASE_URL`, which serves `<data_dir>/output`; None without one."""
    if not base_url:
        return None
    return f"{base_url.rstrip('/')}/{job}/reports/html/date={partition_date.isoformat()}.html"


def _forecast_numbers(forecast: dict[str, Any], health_rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A forecast job's headline: the mean forecast and interval width in the target's unit, and the estimated MAE
    and RMSE with their intervals (model health's `estimated_error`), and their flag when they lie above the hold-out's."""
    unit = f" {forecast['unit']}" if forecast.get("unit") else ""

    def shown(value: float | None) -> str:
        return "—" if value is None or value != value else f"{value:,.4g}"

    rows = [
        (f"mean forecast ({forecast.get('name') or 'target'})", f"{shown(forecast['forecast_mean'])}{unit}"),
        (f"mean interval width ({forecast['level']:.0%})", f"{shown(forecast['width_mean'])}{unit}"),
    ]
    estimated = {r["measure"]: r for r in health_rows if r["section"] == ESTIMATED_ERROR and r["item"] == "all"}
    for measure in ("mae", "rmse"):
        r = estimated.get(measure)
        if r is not None and r["value"] is not None and r["value"] == r["value"]:
            flag = f", {r['flag']}: above the hold-out's {shown(r['reference'])}{unit}" if r["flag"] in ("warn", "alert") else ""
            rows.append((f"estimated {measure.upper()}", f"{shown(r['value'])}{unit} ({shown(r['low'])}–{shown(r['high'])}{flag})"))
    return rows


def _class_numbers(report: dict[str, Any]) -> list[tuple[str, str]]:
    """A multiclass job's headline: each class's predicted rows and share with the mean probability of the rows
    predicted as it, the mean probability of the predicted class, and the close calls (a small margin)."""
    margin = report["margin"]
    rows = [
        (f"predicted {r['class']}", f"{r['rows']:,} ({r['share']:.1%}), mean probability " + (
            "—" if r["mean_probability"] is None else f"{r['mean_probability']:.3f}"))
        for r in report["class_mix"] if r["share"] is not None
    ]
    if report["mean_probability"] is not None:
        rows.append(("mean probability of the predicted class", f"{report['mean_probability']:.3f}"))
        rows.append((f"rows with margin < {margin['low_margin_cut']:g}", f"{margin['low_margin_rows']:,} ({margin['low_margin_share']:.1%})"))
    return rows


def _rows_word(summary: ScoringSummary) -> str:
    return "rows classified" if summary.classification_report else "rows forecast" if summary.forecast_report else "rows scored"


def _drift_flag_rows(summary: ScoringSummary, words: JobWords | None) -> list[tuple[str, str]]:
    """A count of the features flagged, then one row per feature: how much it moved, which way and against what,
    each in words with its PSI (a table cell never holds the whole list, which the UI would cut)."""
    flagged = flagged_drift_rows(summary.drift_report)
    if not flagged:
        return [("drift flags", "none")]
    directions = feature_directions(summary.drift_histograms)
    by_feature: dict[str, list[str]] = {}
    for r in flagged:
        psi = f" (PSI {r['psi']:.3f})" if r.get("psi") is not None and r["psi"] == r["psi"] else ""
        # The histograms hold the training reference's counts: a direction against the previous partition is unknown.
        direction = directions.get(r["feature"]) if r.get("baseline") == "reference" else None
        by_feature.setdefault(str(r["feature"]), []).append(drift_flag_text(r, direction) + psi)
    return [("drift flags", f"{len(by_feature)} feature{'s' * (len(by_feature) != 1)} moved beyond the warning threshold")] + [
        (f"moved: {_feature_name(feature, words)}", "; ".join(texts)) for feature, texts in by_feature.items()
    ]


def _shift_rows(monitoring: dict | None, words: JobWords | None) -> list[tuple[str, str]]:
    """The decision-mix measures decision monitoring flagged against the trailing window, one row each (none when it
    did not run)."""
    if not monitoring or monitoring.get("window_days") is None:
        return []
    window = int(monitoring["window_days"])
    shifts = monitoring.get("shifts") or []
    if not shifts:
        # A first day, or one after a gap longer than the window, has nothing to be compared with: "nothing moved"
        # would claim a comparison that was not made.
        measures, without = monitoring.get("measures"), monitoring.get("without_baseline") or 0
        if without and without == measures:
            return [(f"decision mix vs the trailing {window} days", f"no baseline yet: no partition scored in the {window} days before")]
        return [(f"decision mix vs the trailing {window} days", "no measure moved beyond its tolerance")]
    return [(f"shift: {subject}", change) for subject, change in (shift_parts(r, words, window) for r in shifts)]


TOP_REASONS = 3
"""Reason codes the key numbers name, most given first; the run page lists them all."""


def key_numbers(summary: ScoringSummary, words: JobWords | None = None, monitoring: dict | None = None) -> list[dict[str, str]]:
    """The few numbers an analyst looks at first, one row each: rows, decisions (by their plain names in the job's
    `words`), the decision-mix shift decision `monitoring` flagged against the trailing window, the reason codes given
    most, fallbacks, drift flags (one row per feature), the estimated performance (a forecast job: the mean forecast,
    interval width, estimated MAE and RMSE; a multiclass job: its class mix, mean probability and close calls) and the
    challenger's flips when there are."""
    forecast, classes = summary.forecast_report, summary.classification_report
    named = words.decision if words is not None else str
    rows = [
        ("rows read", f"{summary.rows_read:,}"), (_rows_word(summary), f"{summary.rows_scored:,}"),
        ("rows repaired", f"{summary.guard.rows_repaired:,}"), ("rows quarantined", f"{summary.guard.rows_quarantined:,}"),
        ("rows in failed chunks", f"{summary.rows_failed:,}"),
        *(_forecast_numbers(forecast, summary.model_health) if forecast else ()),
        *(_class_numbers(classes) if classes else ()),
        *((f"decision {named(d)}", f"{n:,} ({n / summary.rows_scored:.1%})" if summary.rows_scored else str(n)) for d, n in summary.decisions.items()),
        *_shift_rows(monitoring, words),
        *((f"reason given #{i}", reason_text(r, summary.rows_with_reasons)) for i, r in enumerate(summary.reason_codes[:TOP_REASONS], 1)),
        *((f"fallback {r['kind']}", f"{r['rows']:,} ({r['share']:.2%})" + (" BREACHED" if r["breached"] else ""))
          for r in fallback_kind_totals(summary.fallback_report) if r["rows"]),
        *_drift_flag_rows(summary, words),
    ]
    health = health_headline(summary.model_health, forecasts=forecast is not None, classifies=classes is not None)
    for measure, fmt in (("event_rate", ".2%"), ("auc", ".3f")):
        values = (health or {}).get(measure)
        if values and all(v == v for v in values):
            rows.append((f"expected {measure.replace('_', ' ')}", f"{values[0]:{fmt}} ({values[1]:{fmt}}–{values[2]:{fmt}})"))
    shadow = shadow_headline(summary.shadow_comparison)
    if shadow:
        rows.append((f"challenger {shadow['challenger_version'] or '(not loaded)'}", f"{shadow['rows_flipped']:,} decisions would flip"))
    return [{"measure": k, "value": v} for k, v in rows]


def key_numbers_markdown(rows: list[dict[str, str]]) -> str:
    """The key numbers as a Markdown table: Prefect's table artifact cuts a long cell to one line and shows ten rows a
    page, and these are read whole at a glance. An address is a link, a file path code."""

    def cell(text: str) -> str:
        text = text.replace("|", "\\|").replace("\n", " ")
        if text.startswith(("http://", "https://")):
            return f"[{text}]({text})"
        return f"`{text}`" if text.startswith("/") else text

    return "\n".join(["| measure | value |", "| --- | --- |", *(f"| {cell(r['measure'])} | {cell(r['value'])} |" for r in rows)])


def run_artifacts(
    ticket: RunTicket, summary: ScoringSummary, published: PublishedPartition, report_path: Path, *, page_url: str | None = None,
    monitoring: dict | None = None, more_artifacts: Sequence[Artifact] = (),
) -> list[Artifact]:
    """The run's artifacts in the order they are made: the key numbers (the run page's address in their last row) pinned
    first in the UI, then the run page's link, `more_artifacts` (decision monitoring's, the model card's), model health, the
    challenger, drift, fallbacks and guards; the engineers' report file and run summary last."""
    job, day = ticket.job, ticket.partition_date
    counts = summary.ledger_counts()
    measures = {**ticket.model_dump(), **counts, "published": published.rows, "warnings": published.warnings}
    return [
        Artifact(artifact_key("key-numbers", job), f"{job} on {day}: rows, " + (
            "mean forecast, interval width, estimated error, decisions, fallbacks, drift flags" if summary.forecast_report else
            "class mix, mean probability, close calls, decisions, fallbacks, drift flags" if summary.classification_report else
            "decisions and their shift, reasons given, fallbacks, drift flags, expected performance"),
            markdown=key_numbers_markdown([*key_numbers(summary, ticket.words, monitoring), {"measure": "run page", "value": page_url or str(report_path)}]),
            pinned=True),
        *([Artifact(artifact_key("run-page", job), f"The run page of {job} on {day}", link=page_url)] if page_url else []),
        *more_artifacts,
        model_health_artifact(summary.model_health, job=job, partition_date=day),
        *([shadow_artifact(summary.shadow_comparison, summary.flip_examples, job=job, partition_date=day)]
          if summary.shadow_comparison else []),
        Artifact(
            artifact_key("drift-report", job),
            f"Drift of {job} on {day} against the training reference and the previous partition (table drift_report)",
            table=[{k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()} for row in summary.drift_report],
        ),
        Artifact(
            artifact_key("fallback-report", job),
            f"Fallbacks of {job} on {day}: every repaired, quarantined, fallback-model, failed-chunk and reason-less row, "
            f"of {summary.rows_read} read (table fallback_report)",
            table=[{**row, "share": f"{row['share']:.4%}"} for row in summary.fallback_report],
        ),
        Artifact(
            artifact_key("guard-summary", job),
            f"Feature guards of {job} on {day}: rows each expectation repaired, quarantined or failed, of "
            f"{summary.rows_read} read (table guard_summary)",
            table=summary.guard_summary,
        ),
        Artifact(
            artifact_key("run-report", job), f"HTML run report of {job} for {day}",
            markdown=(
                f"**Run report** of `{job}` on {day}: {file_reference_markdown(report_path, page_url)} — summary, fallback table, "
                "drift table and a histogram per feature, most drifted first.\n\n"
                + _drift_flags_markdown(summary.drift_report, ticket.words)
            ),
        ),
        Artifact(artifact_key("run-summary", job), f"Scoring of {job} for {day}: the run's identity and counts, for engineers",
                 table=[{"measure": k, "value": str(v)} for k, v in measures.items()]),
    ]


def model_health_artifact(rows: list[dict], *, job: str, partition_date: dt.date) -> Artifact:
    """The `model_health` rows of a run, flagged ones first, as a table artifact."""
    flagged = [r for r in rows if r["flag"] in ("warn", "alert")]

    def shown(value: Any) -> str:
        return "—" if value is None or value != value else (f"{value:.4g}" if isinstance(value, float) else str(value))

    ordered = sorted(rows, key=lambda r: r["flag"] not in ("warn", "alert"))
    return Artifact(
        artifact_key("model-health", job),
        f"Model health of {job} on {partition_date} before labels (table model_health): estimated performance with its "
        "interval, attribution and multivariate drift; flagged: "
        + (", ".join(f"{r['section']} {r['item']} {r['flag']}" for r in flagged) or "nothing"),
        table=[{k: shown(r[k]) for k in ("section", "measure", "item", "value", "low", "high", "reference", "delta", "flag", "rows")}
               for r in ordered],
    )


def shadow_artifact(rows: list[dict], examples: list[dict], *, job: str, partition_date: dt.date) -> Artifact:
    """Champion against challenger on the run's partition: the crosstab, decision mix and expected event
    rates (mean forecasts), the score delta (forecast delta), then the first flipped rows with both reason codes."""
    headline = shadow_headline(rows)
    shown = [
        {"section": r["section"], "champion": r["champion_item"], "challenger": r["challenger_item"], "rows": r["rows"],
         "champion_value": "—" if r["champion_value"] is None else f"{r['champion_value']:.4g}",
         "challenger_value": "—" if r["challenger_value"] is None else f"{r['challenger_value']:.4g}"}
        for r in rows if r["section"] != "score_delta_histogram"
    ]

    def estimate(x: dict, side: str) -> str:
        # A binary job's flipped row carries scores, a forecast job's forecasts, a multiclass job's classes.
        if x[f"{side}_score"] is not None:
            return str(x[f"{side}_score"])
        if x.get(f"{side}_class") is not None:
            return f"{x[f'{side}_class']} {x[f'{side}_probability']:.4g}"
        return f"{x[f'{side}_forecast']:.4g}"

    shown += [
        {"section": "flipped_row",
         "champion": f"{x['champion_decision']} ({estimate(x, 'champion')}; {', '.join(x['champion_reason_codes'] or [])})",
         "challenger": f"{x['challenger_decision']} ({estimate(x, 'challenger')}; {', '.join(x['challenger_reason_codes'] or [])})",
         "rows": 1, "champion_value": x["entity_id"], "challenger_value": ""}
        for x in examples
    ]
    share = headline["flipped_share"]
    sections = {r["section"] for r in rows}
    shadow_table = "shadow_forecasts" if "forecast_delta" in sections else "shadow_classifications" if "class_mix" in sections else "shadow_predictions"
    return Artifact(
        artifact_key("champion-challenger", job),
        f"Champion {rows[0]['champion_version']} against challenger {headline['challenger_version'] or '(not loaded)'} on {job} "
        f"{partition_date}: {headline['rows_flipped']} of {headline['rows_compared']} decisions would flip"
        + (f" ({share:.2%})" if share is not None else "") + f"; challenger failed on {headline['rows_failed']} rows "
        f"(tables shadow_comparison, decision_flips, {shadow_table})",
        table=shown,
    )


def run_result(ticket: RunTicket, summary: ScoringSummary, *, report: str, warnings: list[str]) -> dict:
    """What score_partition returns for a published run."""
    return {
        "run_id": ticket.run_id, "job": ticket.job, "partition_date": ticket.partition_date.isoformat(),
        "report": report, **summary.ledger_counts(),
        "model_health": health_headline(summary.model_health, forecasts=summary.forecast is not None, classifies=summary.classification is not None),
        "challenger": shadow_headline(summary.shadow_comparison),
        "drift_flags": [f"{_feature_name(r['feature'], ticket.words)} {r['flag']}" for r in summary.drift_report if r["flag"] in ("warn", "alert")],
        **({"forecast": summary.forecast} if summary.forecast is not None else {}),
        **({"classification": summary.classification} if summary.classification is not None else {}),
        "warnings": list(warnings),
    }


def _unfinished_before_commit(warehouse: Warehouse, run_id: str) -> bool:
    """Whether the ledger shows the run without committed rows (or has no row of it); False when it cannot be read."""
    try:
        return warehouse.run_status(run_id) in (None, "running", "publishing")
    except Exception as exc:
        log.warning("the ledger status of run %s could not be read (%s)", run_id, exc)
        return False


def recorded_failed_run(
    warehouse: Warehouse, settings: Settings, *, run_id: str, job: str, partition_date: dt.date, error: BaseException
) -> None:
    """The failure in the ledger (one line and the traceback) and the run's files dropped.

    A run whose rows were already committed is not failed: recovery finishes its publish. On a full
    disk, a run the ledger shows unfinished before its commit loses its files first, as recovery does:
    its staged outputs may be what fills the disk, and the ledger write needs the room. When the ledger
    cannot be written (warehouse locked, disk full), the failure is kept beside the outputs and the next
    start of the job records it; the files stay until then unless they were dropped already."""
    record = {
        "run_id": run_id, "job": job, "partition_date": partition_date, "ended_at": now_utc(),
        "error": f"{type(error).__name__}: {user_facing_error(error)[0]}",
        "error_detail": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
    }
    dirs, pending = output_dirs(settings, job), pending_ledger_dir(settings, job)
    if isinstance(environment_fault(error), DiskFull) and _unfinished_before_commit(warehouse, run_id):
        discarded_run(dirs, partition_date, run_id)
    try:
        failed = retried(lambda: warehouse.record_run_failed(**record))
    except Exception as exc:
        kept = recorded_pending_failure(pending, record)
        log.warning(
            "%s %s: the failure of run %s could not be written to the ledger (%s: %s); %s", job, partition_date, run_id,
            type(exc).__name__, exc, f"kept in {kept} for the next start" if kept else "the next start closes it as abandoned",
        )
        return
    released_failure_room(pending, run_id)
    if failed:
        discarded_run(dirs, partition_date, run_id)
    else:
        log.warning("%s %s: run %s had committed its rows; the next start of the job finishes its publish", job, partition_date, run_id)


def recorded_refused_run(
    warehouse: Warehouse, settings: Settings, *, run_id: str, job: str, partition_date: dt.date, error: BaseException
) -> bool:
    """A partition of a backfill or `nightly` refused before its lease (no raw data, raw data unreadable, a
    source that did not answer, ...), recorded in the ledger as a `refused` run with its reason, so that
    `--mode failed`, `--mode missing`, `score runs` and the catch-up find it. False when nothing was
    recorded: the run has its own row (it failed under its lease), or another run holds the partition,
    whose outcome is the partition's."""
    if isinstance(error, PartitionBusy) or warehouse.run_status(run_id) is not None:
        return False
    record = {
        "run_id": run_id, "job": job, "partition_date": partition_date, "ended_at": now_utc(),
        "error": f"{type(error).__name__}: {user_facing_error(error)[0]}",
        "error_detail": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
    }
    try:
        with run_lease(warehouse, settings.model_copy(update={"lock_wait_s": 0}), run_id, job, partition_date).held():
            return retried(lambda: warehouse.record_run_refused(**record))
    except PartitionBusy:
        return False
