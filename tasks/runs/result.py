"""What a published partition run leaves: its artifacts' contents in the order they are made, and the result
score_partition returns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tasks.monitoring.health import health_headline
from tasks.monitoring.shadow import shadow_headline
from tasks.prediction.words import JobWords
from tasks.reports.artifacts import Artifact, artifact_key, model_health_artifact, shadow_artifact
from tasks.reports.links import file_reference_markdown
from tasks.reports.plain_words import (
    drift_flag_text,
    flagged_drift_rows,
)
from tasks.runs.key_numbers import feature_name, key_numbers, key_numbers_markdown
from tasks.runs.ticket import RunTicket
from tasks.scoring.summary import ScoringSummary
from tasks.sinks.publish import PublishedPartition


def finished_run_result(
    ticket: RunTicket,
    summary: ScoringSummary,
    published: PublishedPartition,
    *,
    artifacts: dict | None,
    artifacts_error: str,
    monitoring: dict | None,
    monitoring_error: str,
) -> dict:
    """The result of a published run once its artifacts and decision monitoring ran (None: that step
    failed with its error): the run has succeeded, so a failure there is one more warning."""
    result = (
        artifacts
        if artifacts is not None
        else run_result(
            ticket, summary, report="", warnings=[*published.warnings, f"artifacts not written: {artifacts_error}"]
        )
    )
    if monitoring is not None:
        result["decision_monitoring"] = monitoring
    else:
        result["warnings"].append(f"decision monitoring failed: {monitoring_error}")
    return result


def _drift_flags_markdown(rows: list[dict], words: JobWords | None = None) -> str:
    flagged = flagged_drift_rows(rows)
    if not flagged:
        return "No feature moved beyond its warning threshold."
    return (
        "Features that moved: "
        + ", ".join(
            f"**{feature_name(r['feature'], words)}** {drift_flag_text(r)} (PSI {r['psi']:.3f})" for r in flagged
        )
        + ". PSI, the population stability index, says how far the spread of values moved: under 0.1 little, over 0.25 a lot."
    )


def run_artifacts(
    ticket: RunTicket,
    summary: ScoringSummary,
    published: PublishedPartition,
    report_path: Path,
    *,
    page_url: str | None = None,
    monitoring: dict | None = None,
    more_artifacts: Sequence[Artifact] = (),
) -> list[Artifact]:
    """The run's artifacts in the order they are made: the key numbers (the run page's address in their last row) pinned
    first in the UI, then the run page's link, `more_artifacts` (decision monitoring's, the model card's), model health, the
    challenger, drift, fallbacks and guards; the engineers' report file and run summary last."""
    job, day = ticket.job, ticket.partition_date
    counts = summary.ledger_counts()
    measures = {**ticket.model_dump(), **counts, "published": published.rows, "warnings": published.warnings}
    return [
        Artifact(
            artifact_key("key-numbers", job),
            f"{job} on {day}: rows, "
            + (
                "mean forecast, interval width, estimated error, decisions, fallbacks, drift flags"
                if summary.forecast_report
                else "class mix, mean probability, close calls, decisions, fallbacks, drift flags"
                if summary.classification_report
                else "decisions and their shift, reasons given, fallbacks, drift flags, expected performance"
            ),
            markdown=key_numbers_markdown(
                [
                    *key_numbers(summary, ticket.words, monitoring),
                    {"measure": "run page", "value": page_url or str(report_path)},
                ]
            ),
            pinned=True,
        ),
        *(
            [Artifact(artifact_key("run-page", job), f"The run page of {job} on {day}", link=page_url)]
            if page_url
            else []
        ),
        *more_artifacts,
        model_health_artifact(summary.model_health, job=job, partition_date=day),
        *(
            [shadow_artifact(summary.shadow_comparison, summary.flip_examples, job=job, partition_date=day)]
            if summary.shadow_comparison
            else []
        ),
        Artifact(
            artifact_key("drift-report", job),
            f"Drift of {job} on {day} against the training reference and the previous partition (table drift_report)",
            table=[
                {k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()} for row in summary.drift_report
            ],
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
            artifact_key("run-report", job),
            f"HTML run report of {job} for {day}",
            markdown=(
                f"**Run report** of `{job}` on {day}: {file_reference_markdown(report_path, page_url)} — summary, fallback table, "
                "drift table and a histogram per feature, most drifted first.\n\n"
                + _drift_flags_markdown(summary.drift_report, ticket.words)
            ),
        ),
        Artifact(
            artifact_key("run-summary", job),
            f"Scoring of {job} for {day}: the run's identity and counts, for engineers",
            table=[{"measure": k, "value": str(v)} for k, v in measures.items()],
        ),
    ]


def run_result(ticket: RunTicket, summary: ScoringSummary, *, report: str, warnings: list[str]) -> dict:
    """What score_partition returns for a published run."""
    return {
        "run_id": ticket.run_id,
        "job": ticket.job,
        "partition_date": ticket.partition_date.isoformat(),
        "report": report,
        **summary.ledger_counts(),
        "model_health": health_headline(
            summary.model_health, forecasts=summary.forecast is not None, classifies=summary.classification is not None
        ),
        "challenger": shadow_headline(summary.shadow_comparison),
        "drift_flags": [
            f"{feature_name(r['feature'], ticket.words)} {r['flag']}"
            for r in summary.drift_report
            if r["flag"] in ("warn", "alert")
        ],
        **({"forecast": summary.forecast} if summary.forecast is not None else {}),
        **({"classification": summary.classification} if summary.classification is not None else {}),
        "warnings": list(warnings),
    }
