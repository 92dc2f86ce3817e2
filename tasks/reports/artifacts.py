"""What a Prefect artifact shows (`Artifact`), and the artifacts built from a run's and a range's plain rows:
model health, champion against challenger, decision and slice monitoring, realized performance and the monitoring page's
link. Prefect-free: flows/steps/artifacts.py turns them into Prefect artifacts."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.monitoring.shadow import shadow_headline
from tasks.reports.links import file_reference_markdown
from tasks.reports.monitoring_page import unmatched_labels_text


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
        table=[
            {
                k: shown(r[k])
                for k in ("section", "measure", "item", "value", "low", "high", "reference", "delta", "flag", "rows")
            }
            for r in ordered
        ],
    )


def shadow_artifact(rows: list[dict], examples: list[dict], *, job: str, partition_date: dt.date) -> Artifact:
    """Champion against challenger on the run's partition: the crosstab, decision mix and expected event
    rates (mean forecasts), the score delta (forecast delta), then the first flipped rows with both reason codes."""
    headline = shadow_headline(rows)
    shown = [
        {
            "section": r["section"],
            "champion": r["champion_item"],
            "challenger": r["challenger_item"],
            "rows": r["rows"],
            "champion_value": "—" if r["champion_value"] is None else f"{r['champion_value']:.4g}",
            "challenger_value": "—" if r["challenger_value"] is None else f"{r['challenger_value']:.4g}",
        }
        for r in rows
        if r["section"] != "score_delta_histogram"
    ]

    def estimate(x: dict, side: str) -> str:
        # A binary job's flipped row carries scores, a forecast job's forecasts, a multiclass job's classes.
        if x[f"{side}_score"] is not None:
            return str(x[f"{side}_score"])
        if x.get(f"{side}_class") is not None:
            return f"{x[f'{side}_class']} {x[f'{side}_probability']:.4g}"
        return f"{x[f'{side}_forecast']:.4g}"

    shown += [
        {
            "section": "flipped_row",
            "champion": f"{x['champion_decision']} ({estimate(x, 'champion')}; {', '.join(x['champion_reason_codes'] or [])})",
            "challenger": f"{x['challenger_decision']} ({estimate(x, 'challenger')}; {', '.join(x['challenger_reason_codes'] or [])})",
            "rows": 1,
            "champion_value": x["entity_id"],
            "challenger_value": "",
        }
        for x in examples
    ]
    share = headline["flipped_share"]
    sections = {r["section"] for r in rows}
    shadow_table = (
        "shadow_forecasts"
        if "forecast_delta" in sections
        else "shadow_classifications"
        if "class_mix" in sections
        else "shadow_predictions"
    )
    return Artifact(
        artifact_key("champion-challenger", job),
        f"Champion {rows[0]['champion_version']} against challenger {headline['challenger_version'] or '(not loaded)'} on {job} "
        f"{partition_date}: {headline['rows_flipped']} of {headline['rows_compared']} decisions would flip"
        + (f" ({share:.2%})" if share is not None else "")
        + f"; challenger failed on {headline['rows_failed']} rows "
        f"(tables shadow_comparison, decision_flips, {shadow_table})",
        table=shown,
    )


def decision_monitoring_artifact(
    rows: list[dict], *, job: str, partition_date: dt.date, run_id: str, window_days: int
) -> Artifact:
    """The `decision_monitoring` rows of one partition as a table artifact, the shifted measures named."""
    shifted = [r for r in rows if r["flag"] == "shift"]

    def shown(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    return Artifact(
        artifact_key("decision-monitoring", job),
        f"Decision monitoring of {job} on {partition_date} (run {run_id}) against the trailing {window_days} days "
        "(table decision_monitoring): "
        + (", ".join(f"{r['measure']} {r['item']} shifted" for r in shifted) or "nothing shifted"),
        table=[
            {
                "measure": r["measure"],
                "item": r["item"],
                "value": f"{r['value']:.4g}",
                "trailing_mean": shown(r["baseline"], ".4g"),
                "delta": shown(r["delta"], "+.4g"),
                "tolerance": shown(r["tolerance"], ".4g"),
                "flag": r["flag"] or "",
            }
            for r in rows
        ],
    )


def slice_monitoring_artifact(
    rows: list[dict], *, job: str, partition_date: dt.date, fdr: float, window_days: int
) -> Artifact:
    """The `slice_monitoring` rows of one partition, shifted ones first, as a table artifact."""
    shifted = [r for r in rows if r["flag"] == "shift"]

    def shown(value: float | None) -> str:
        return "—" if value is None or value != value else f"{value:.4g}"

    ordered = sorted(rows, key=lambda r: (r["flag"] != "shift", r["q_value"] if r["q_value"] is not None else 2.0))
    return Artifact(
        artifact_key("slice-monitoring", job),
        f"Slices of {job} on {partition_date} against the trailing {window_days} days, false discovery rate {fdr:.0%} "
        "(table slice_monitoring): "
        + (", ".join(f"{r['slice_column']}={r['slice_value']} {r['measure']}" for r in shifted) or "no slice shifted"),
        table=[
            {
                "slice": f"{r['slice_column']}={r['slice_value']}",
                "measure": r["measure"],
                "value": shown(r["value"]),
                "window": shown(r["baseline"]),
                "rows": r["rows"],
                "q_value": shown(r["q_value"]),
                "flag": r["flag"],
            }
            for r in ordered
        ],
    )


def monitoring_page_link(job: str, page_url: str | None) -> list[Artifact]:
    """The link artifact to the monitoring page under SCORING_REPORT_BASE_URL; none without one (the page's
    Markdown artifact gives its path)."""
    return (
        [Artifact(artifact_key("monitoring-page", job), f"The monitoring page of {job}", link=page_url)]
        if page_url
        else []
    )


def monitoring_page_artifacts(
    performance: list[dict],
    *,
    job: str,
    first_date: dt.date,
    last_date: dt.date,
    page: Path,
    page_url: str | None,
    unmatched: dict[str, int],
    interval_level: float,
    forecasts: bool = False,
) -> list[Artifact]:
    """The realized-performance table of the scored days (a forecast job's realized error), the labels that match no
    scored entity counted per reason (`unmatched_label_counts`), and the monitoring page's link (`page_url`, its address
    under SCORING_REPORT_BASE_URL, else its path), as artifact contents."""
    measured = (
        "MAE, RMSE, bias (actual − forecast), the interval's coverage and mean width on the forecasts with an actual (tables "
        "outcome_errors, outcome_partitions)"
        if forecasts
        else f"observed event rate with its {interval_level:.0%} Clopper-Pearson interval against the expected rate (tables "
        "outcome_metrics, outcome_partitions)"
    )
    return [
        Artifact(
            artifact_key("realized-performance", job),
            f"Realized performance of {job}, scored partitions of {first_date}..{last_date}, per model version: {measured}.\n\n"
            + unmatched_labels_text(unmatched),
            table=[{k: str(v) for k, v in r.items()} for r in performance],
        ),
        *monitoring_page_link(job, page_url),
        Artifact(
            artifact_key("monitoring-report", job),
            f"{'Forecast' if forecasts else 'Prediction'} monitoring and realized outcomes of {job}",
            markdown=(
                f"**Monitoring page** of `{job}` for {first_date}..{last_date}: {file_reference_markdown(page, page_url)} — "
                + (
                    "decision mix, mean forecast and interval width over time, realized MAE, RMSE, bias and coverage per partition "
                    "and decision, the estimated MAE beside the realized one.\n\n"
                    if forecasts
                    else "decision mix over time, expected vs observed event rate, calibration per model version.\n\n"
                )
                + unmatched_labels_text(unmatched)
            ),
        ),
    ]
