"""The run page of a multiclass job (target.kind multiclass), in its classes: the class mix (rows predicted per
class, their share and mean probability), the margin over the runner-up, the decisions per class and the rule
that made each, the reason codes given, then the fallbacks, the model health, the challenger's comparison and the
drift, as on the other kinds' pages.

Everything comes from the run's own sums (`ScoringSummary.classification_report`,
tasks/monitoring/class_distribution.py): the page never reads back the rows the run just published.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.prediction.words import JobWords
from tasks.reports.forecast_report import bars_svg
from tasks.reports.html_parts import cell_text, esc, flag_badge, html_table, page_html, percent, table_cell
from tasks.reports.html_report import (
    DRIFT_TABLE_SCRIPT,
    BinLabels,
    Histograms,
    drift_sections,
    engineering_section,
    fallback_section,
    glance_section,
    lead_section,
    shadow_section,
    summary_section,
)

_SUMMARY_NAMES = {
    "rows_scored": "rows_classified",
    # The predicted class's probability interval contains a rule's probability cut-off: a rule could decide it either way.
    "rows_straddling": "rows_straddling_a_probability_cutoff",
}


def _probability(value: Any) -> str:
    return "—" if value is None else f"{float(value):.3f}"


def _class_mix_section(report: Mapping[str, Any]) -> str:
    body = [
        "<tr>"
        + table_cell(r["class"])
        + table_cell(r["rows"])
        + f'<td class="n">{esc(percent(r["share"]))}</td>'
        + f'<td class="n">{esc(_probability(r["mean_probability"]))}</td></tr>'
        for r in report["class_mix"]
    ]
    return (
        f"<h2>Class mix: {esc(report['name'])}</h2>"
        f'<p class="muted">{cell_text(report["rows"])} rows classified; each row\'s predicted class is its most probable one '
        "after calibration; the mean probability is that of the predicted class, over the rows predicted as it "
        f"(all rows: {esc(_probability(report['mean_probability']))}). Each row's whole probability vector is in "
        "<code>classifications</code>.</p>" + html_table(["class", "rows predicted", "share", "mean probability"], body)
    )


def _margin_section(report: Mapping[str, Any]) -> str:
    margin = report["margin"]
    cut = margin["low_margin_cut"]
    figure = (
        (
            '<figure class="plot" data-plot="margin"><figcaption><b>Margin over the runner-up class</b></figcaption>'
            f"{bars_svg('margin', margin['edges'], margin['counts'], axis='probability of the predicted class − the runner-up', unit='')}"
            "</figure>"
        )
        if report["rows"]
        else "<p class=muted>no rows classified</p>"
    )
    return (
        "<h2>Margins</h2>"
        "<p class=\"muted\">The margin is the predicted class's probability minus the runner-up's: near 0 the two likeliest "
        f"classes are a close call. Mean margin {esc(_probability(margin['mean']))}; rows with a margin below {cut:g}: "
        f"{cell_text(margin['low_margin_rows'])} ({esc(percent(margin['low_margin_share']))}).</p>"
        f'<div class="plots">{figure}</div>'
    )


def _decisions_section(report: Mapping[str, Any], words: JobWords | None) -> str:
    classes, table = report["classes"], report["decision_by_class"]
    by_class = [
        "<tr>"
        + table_cell(words.decision(decision) if words else decision)
        + "".join(table_cell(n) for n in rows)
        + table_cell(sum(rows))
        + "</tr>"
        for decision, rows in zip(table["decisions"], table["rows"], strict=True)
    ]
    total = sum(r["rows"] for r in report["rules"])
    rules = [
        "<tr>"
        + table_cell(r["rule_id"])
        + table_cell(r["condition"])
        + table_cell(r["decision"])
        + table_cell(r["rows"])
        + f'<td class="n">{esc(percent(r["rows"] / total if total else None))}</td></tr>'
        for r in report["rules"]
    ]
    return (
        "<h2>Decisions by class</h2>"
        '<p class="muted">Rows per decision (down) and predicted class (across).</p>'
        + html_table(["decision", *classes, "all classes"], by_class)
        + "<h2>Rules</h2>"
        '<p class="muted">The rule table, first match wins; each row\'s decision and the rule that made it are in '
        "<code>classifications</code>.</p>" + html_table(["rule", "when", "decision", "rows", "share"], rules)
    )


def _reasons_section(report: Mapping[str, Any], rows_with_reasons: int) -> str:
    body = [
        "<tr>"
        + table_cell(r["code"])
        + table_cell(r["text"])
        + table_cell(r["rows"])
        + f'<td class="n">{esc(percent(r["rows"] / rows_with_reasons if rows_with_reasons else None))}</td></tr>'
        for r in report["reason_codes"]
    ]
    return (
        "<h2>Reasons given</h2>"
        f'<p class="muted">Codes of the features that pushed a row most toward its predicted class, on the '
        f"{cell_text(rows_with_reasons)} rows whose decision asks for reasons; a row counts once per code.</p>"
        + html_table(["code", "reason", "rows", "share of rows with reasons"], body)
    )


def _health_section(rows: list[Mapping[str, Any]]) -> str:
    """The model-health rows the run measured, as they are: drift of the attributions and of the inputs together, and
    whatever the job's kind estimates before its labels land; rows without a value (a measure of another kind's
    outputs, which this job has not) are left out."""
    rows = [r for r in rows if r.get("value") is not None and r.get("value") == r.get("value")]
    if not rows:
        return ""
    body = [
        "<tr>"
        + table_cell(r.get("section"))
        + table_cell(r.get("measure"))
        + table_cell(r.get("item"))
        + table_cell(r.get("value"))
        + table_cell(r.get("low"))
        + table_cell(r.get("high"))
        + table_cell(r.get("reference"))
        + (f"<td>{flag_badge(r['flag'])}</td>" if r.get("flag") else "<td>—</td>")
        + "</tr>"
        for r in rows
    ]
    return (
        "<h2>Model health before labels</h2>"
        '<p class="muted">Table <code>model_health</code> of this run.</p>'
        + html_table(["section", "measure", "item", "value", "low", "high", "reference", "flag"], body)
    )


def class_run_report_html(
    *,
    job: str,
    partition_date: Any,
    run_id: str,
    summary: dict[str, Any],
    report: Mapping[str, Any],
    fallback_rows: list[dict[str, Any]],
    drift_rows: list[dict[str, Any]],
    histograms: Histograms,
    bin_labels: BinLabels | None = None,
    health_rows: list[dict[str, Any]] | None = None,
    shadow_rows: list[dict[str, Any]] | None = None,
    flip_examples: list[dict[str, Any]] | None = None,
    words: JobWords | None = None,
    shifts: list[dict[str, Any]] | None = None,
    window_days: int | None = None,
) -> str:
    """A multiclass job's run page as one string; every text from the inputs is HTML-escaped. `summary` is the ledger
    counts, `report` the run's `ScoringSummary.classification_report`."""
    return page_html(
        f"Classification run {job} {partition_date}",
        f"job <b>{esc(job)}</b> · partition <b>{esc(partition_date)}</b> · run <code>{esc(run_id)}</code> · "
        f"classes of <b>{esc(report['name'])}</b>: {esc(', '.join(report['classes']))}",
        lead_section(
            summary,
            drift_rows,
            histograms,
            bin_labels or {},
            shifts=shifts,
            window_days=window_days,
            reason_codes=report["reason_codes"],
            words=words,
        )
        + glance_section(
            summary,
            fallback_rows,
            drift_rows,
            list(histograms),
            health_rows=health_rows,
            shadow_rows=shadow_rows,
            words=words,
            compared=shifts is not None,
        )
        + summary_section(summary, _SUMMARY_NAMES, words)
        + _class_mix_section(report)
        + _margin_section(report)
        + _decisions_section(report, words)
        + _reasons_section(report, int(summary.get("rows_with_reasons") or 0))
        + fallback_section(fallback_rows)
        + _health_section(health_rows or [])
        + shadow_section(shadow_rows or [], flip_examples or [], words)
        + drift_sections(drift_rows, histograms, bin_labels or {}, words)
        + engineering_section(summary, _SUMMARY_NAMES),
        script=DRIFT_TABLE_SCRIPT,
    )
