"""The few numbers of a partition run an analyst looks at first, as rows and as a Markdown table."""

from __future__ import annotations

from typing import Any

from tasks.monitoring.health import ESTIMATED_ERROR, health_headline
from tasks.monitoring.shadow import shadow_headline
from tasks.prediction.words import JobWords
from tasks.quality.fallback_report import fallback_kind_totals
from tasks.reports.plain_words import (
    drift_flag_text,
    feature_directions,
    flagged_drift_rows,
    reason_text,
    shift_parts,
)
from tasks.scoring.summary import ScoringSummary


def feature_name(feature: str, words: JobWords | None) -> str:
    return words.feature(feature) if words is not None else feature


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
            flag = (
                f", {r['flag']}: above the hold-out's {shown(r['reference'])}{unit}"
                if r["flag"] in ("warn", "alert")
                else ""
            )
            rows.append(
                (
                    f"estimated {measure.upper()}",
                    f"{shown(r['value'])}{unit} ({shown(r['low'])}–{shown(r['high'])}{flag})",
                )
            )
    return rows


def _class_numbers(report: dict[str, Any]) -> list[tuple[str, str]]:
    """A multiclass job's headline: each class's predicted rows and share with the mean probability of the rows
    predicted as it, the mean probability of the predicted class, and the close calls (a small margin)."""
    margin = report["margin"]
    rows = [
        (
            f"predicted {r['class']}",
            f"{r['rows']:,} ({r['share']:.1%}), mean probability "
            + ("—" if r["mean_probability"] is None else f"{r['mean_probability']:.3f}"),
        )
        for r in report["class_mix"]
        if r["share"] is not None
    ]
    if report["mean_probability"] is not None:
        rows.append(("mean probability of the predicted class", f"{report['mean_probability']:.3f}"))
        rows.append(
            (
                f"rows with margin < {margin['low_margin_cut']:g}",
                f"{margin['low_margin_rows']:,} ({margin['low_margin_share']:.1%})",
            )
        )
    return rows


def _rows_word(summary: ScoringSummary) -> str:
    return (
        "rows classified"
        if summary.classification_report
        else "rows forecast"
        if summary.forecast_report
        else "rows scored"
    )


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
    return [
        ("drift flags", f"{len(by_feature)} feature{'s' * (len(by_feature) != 1)} moved beyond the warning threshold")
    ] + [(f"moved: {feature_name(feature, words)}", "; ".join(texts)) for feature, texts in by_feature.items()]


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
            return [
                (
                    f"decision mix vs the trailing {window} days",
                    f"no baseline yet: no partition scored in the {window} days before",
                )
            ]
        return [(f"decision mix vs the trailing {window} days", "no measure moved beyond its tolerance")]
    return [(f"shift: {subject}", change) for subject, change in (shift_parts(r, words, window) for r in shifts)]


TOP_REASONS = 3
"""Reason codes the key numbers name, most given first; the run page lists them all."""


def key_numbers(
    summary: ScoringSummary, words: JobWords | None = None, monitoring: dict | None = None
) -> list[dict[str, str]]:
    """The few numbers an analyst looks at first, one row each: rows, decisions (by their plain names in the job's
    `words`), the decision-mix shift decision `monitoring` flagged against the trailing window, the reason codes given
    most, fallbacks, drift flags (one row per feature), the estimated performance (a forecast job: the mean forecast,
    interval width, estimated MAE and RMSE; a multiclass job: its class mix, mean probability and close calls) and the
    challenger's flips when there are."""
    forecast, classes = summary.forecast_report, summary.classification_report
    named = words.decision if words is not None else str
    rows = [
        ("rows read", f"{summary.rows_read:,}"),
        (_rows_word(summary), f"{summary.rows_scored:,}"),
        ("rows repaired", f"{summary.guard.rows_repaired:,}"),
        ("rows quarantined", f"{summary.guard.rows_quarantined:,}"),
        ("rows in failed chunks", f"{summary.rows_failed:,}"),
        *(_forecast_numbers(forecast, summary.model_health) if forecast else ()),
        *(_class_numbers(classes) if classes else ()),
        *(
            (f"decision {named(d)}", f"{n:,} ({n / summary.rows_scored:.1%})" if summary.rows_scored else str(n))
            for d, n in summary.decisions.items()
        ),
        *_shift_rows(monitoring, words),
        *(
            (f"reason given #{i}", reason_text(r, summary.rows_with_reasons))
            for i, r in enumerate(summary.reason_codes[:TOP_REASONS], 1)
        ),
        *(
            (f"fallback {r['kind']}", f"{r['rows']:,} ({r['share']:.2%})" + (" BREACHED" if r["breached"] else ""))
            for r in fallback_kind_totals(summary.fallback_report)
            if r["rows"]
        ),
        *_drift_flag_rows(summary, words),
    ]
    health = health_headline(summary.model_health, forecasts=forecast is not None, classifies=classes is not None)
    for measure, fmt in (("event_rate", ".2%"), ("auc", ".3f")):
        values = (health or {}).get(measure)
        if values and all(v == v for v in values):
            rows.append(
                (f"expected {measure.replace('_', ' ')}", f"{values[0]:{fmt}} ({values[1]:{fmt}}–{values[2]:{fmt}})")
            )
    shadow = shadow_headline(summary.shadow_comparison)
    if shadow:
        rows.append(
            (
                f"challenger {shadow['challenger_version'] or '(not loaded)'}",
                f"{shadow['rows_flipped']:,} decisions would flip",
            )
        )
    return [{"measure": k, "value": v} for k, v in rows]


def key_numbers_markdown(rows: list[dict[str, str]]) -> str:
    """The key numbers as a Markdown table: Prefect's table artifact cuts a long cell to one line and shows ten rows a
    page, and these are read whole at a glance. An address is a link, a file path code."""

    def cell(text: str) -> str:
        text = text.replace("|", "\\|").replace("\n", " ")
        if text.startswith(("http://", "https://")):
            return f"[{text}]({text})"
        return f"`{text}`" if text.startswith("/") else text

    return "\n".join(
        ["| measure | value |", "| --- | --- |", *(f"| {cell(r['measure'])} | {cell(r['value'])} |" for r in rows)]
    )
