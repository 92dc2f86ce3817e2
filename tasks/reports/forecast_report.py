"""The run page of a forecast job (target.kind regression or count), in the target's words: what was forecast
(mean, quantiles and the distribution of the forecast and of its interval's width, in the target's unit), the
decisions and the rule that made each, the reason codes that raised and lowered the forecasts, then the
fallbacks, the model health before actuals (the estimated error), the challenger's comparison and the drift, as on a
binary job's page.

Everything comes from the run's own sums (`ScoringSummary.forecast`, tasks/monitoring/forecast_distribution.py):
the page never reads back the rows the run just published.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tasks.monitoring.health import ESTIMATED_ERROR
from tasks.prediction.words import JobWords
from tasks.reports.html_parts import (
    cell_text,
    count_shares,
    esc,
    flag_badge,
    html_table,
    page_html,
    percent,
    svg_number,
    svg_text,
    table_cell,
)
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
    "rows_scored": "rows_forecast",
}
_W, _H = 480.0, 190.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 56.0, 8.0, 20.0, 34.0


def target_words(forecast: Mapping[str, Any]) -> str:
    """`units sold (units; count)`: the target as the spec names it."""
    name = forecast.get("name") or "the target"
    details = "; ".join(x for x in (forecast.get("unit") or "", forecast.get("kind") or "") if x)
    return f"{name} ({details})" if details else name


def _in_unit(value: Any, unit: str) -> str:
    return f"{cell_text(value)} {unit}".rstrip() if value is not None else "—"


def _edge(value: float) -> str:
    # A bin edge is a short decimal (a multiple of a 1-2-5 step): printed whole, where four significant digits
    # would turn 123.45 into 123.5 and name a bin by the wrong edge.
    return f"{value:,.12g}"


def _bin_text(edges: Sequence[float], i: int, unit: str) -> str:
    """Bin i of a histogram with an underflow bin first and an overflow bin last, in words."""
    suffix = f" {unit}" if unit else ""
    if i == 0:
        return f"below {_edge(edges[0])}{suffix}"
    if i == len(edges):
        return f"{_edge(edges[-1])}{suffix} and above"
    return f"{_edge(edges[i - 1])} to {_edge(edges[i])}{suffix}"


def bars_svg(name: str, edges: Sequence[float], counts: Sequence[int], *, axis: str, unit: str) -> str:
    """Share of rows per bin as bars (underflow, bins, overflow, at equal width by index), each bar titled with
    its range and rows, so a reader hovering it reads the count itself."""
    n_bins = len(counts)
    if n_bins != len(edges) + 1:
        raise ValueError(f"{name}: counts need len(edges) + 1 = {len(edges) + 1} bins, got {n_bins}")
    shares = count_shares(counts)
    peak = max(float(shares.max(initial=0.0)), 1e-9)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    base = _TOP + plot_h

    def y(share: float) -> float:
        return base - share / (peak * 1.08) * plot_h

    def x(slot: float) -> float:
        return _LEFT + slot / n_bins * plot_w

    parts = [
        f'<line class="axis" x1="{svg_number(_LEFT)}" y1="{svg_number(base)}" x2="{svg_number(_LEFT + plot_w)}" y2="{svg_number(base)}"/>',
        f'<line class="axis" x1="{svg_number(_LEFT)}" y1="{svg_number(_TOP)}" x2="{svg_number(_LEFT)}" y2="{svg_number(base)}"/>',
    ]
    for tick in (0.0, peak / 2, peak):
        parts.append(svg_text(_LEFT - 4, y(tick) + 3, f"{tick:.1%}", anchor="end"))
    parts.append(svg_text(10, _TOP + plot_h / 2, "share of rows", rotate=-90))
    for i, (rows, share) in enumerate(zip(counts, shares, strict=True)):
        parts.append(
            f'<rect class="current" x="{svg_number(x(i + 0.1))}" y="{svg_number(y(float(share)))}" width="{svg_number(0.8 / n_bins * plot_w)}" '
            f'height="{svg_number(base - y(float(share)))}"><title>{esc(_bin_text(edges, i, unit))}: {int(rows):,} rows '
            f"({float(share):.2%})</title></rect>"
        )
    step = max(1, len(edges) // 6)
    for i in range(0, len(edges), step):
        parts.append(svg_text(x(i + 1), base + 14, _edge(edges[i])))
    parts.append(svg_text(_LEFT + plot_w / 2, _H - 4, axis))
    label = f"histogram of {name}"
    return (
        f'<svg class="histogram" viewBox="0 0 {svg_number(_W)} {svg_number(_H)}" role="img" aria-label="{esc(label)}" data-histogram="{esc(name)}">'
        f"<title>{esc(label)}</title>{''.join(parts)}</svg>"
    )


def _forecast_section(forecast: Mapping[str, Any]) -> str:
    unit, level = forecast.get("unit") or "", forecast["level"]
    q, w = forecast["forecast_quantiles"], forecast["width_quantiles"]

    def bucket(pair: Sequence[float]) -> str:
        return (
            f"{_edge(pair[0])} to {_edge(pair[1])}{f' {unit}' if unit else ''}" if pair and pair[0] == pair[0] else "—"
        )

    rows = [
        ("rows forecast", cell_text(forecast["rows"])),
        ("mean forecast", _in_unit(forecast["forecast_mean"], unit)),
        (
            f"mean interval ({level:.0%})",
            f"{cell_text(forecast['forecast_low_mean'])} to {_in_unit(forecast['forecast_high_mean'], unit)}",
        ),
        ("mean interval width", _in_unit(forecast["width_mean"], unit)),
        ("mean expected error |actual − forecast|", _in_unit(forecast["expected_error_mean"], unit)),
        *((f"forecast {p}", bucket(q[p])) for p in q),
        *((f"interval width {p}", bucket(w[p])) for p in w),
    ]
    body = "".join(f'<tr><th>{esc(k)}</th><td class="n">{esc(v)}</td></tr>' for k, v in rows)
    figures = []
    for key, caption, axis in (
        (
            "forecast",
            f"Forecast of {forecast.get('name') or 'the target'}",
            f"forecast ({unit})" if unit else "forecast",
        ),
        (
            "interval_width",
            f"Width of the {level:.0%} prediction interval",
            f"interval width ({unit})" if unit else "interval width",
        ),
    ):
        hist = forecast["histograms"][key]
        if not hist["counts"]:
            continue
        note = "" if hist["exact"] else ' <span class="muted">(bins rounded to four significant digits)</span>'
        figures.append(
            f'<figure class="plot" data-plot="{esc(key)}"><figcaption><b>{esc(caption)}</b>{note}</figcaption>'
            f"{bars_svg(key, hist['edges'], hist['counts'], axis=axis, unit=unit)}</figure>"
        )
    return (
        f"<h2>Forecast: {esc(target_words(forecast))}</h2>"
        '<p class="muted">The interval holds the actual for the level\'s share of rows (split conformal, its width scaled '
        "row by row by the error model); the expected error is that model's estimate of |actual − forecast|. Percentiles "
        "are the four-significant-digit bucket holding them. Histograms: share of rows per bin, the first and last bins "
        "below the 0.5th and from the 99.5th percentile on; hover a bar for its rows.</p>"
        + html_table(["measure", "value"], [body])
        + f'<div class="plots">{"".join(figures) or "<p class=muted>no rows forecast</p>"}</div>'
    )


def _decisions_section(forecast: Mapping[str, Any]) -> str:
    total = sum(r["rows"] for r in forecast["rules"])
    body = [
        "<tr>"
        + table_cell(r["rule_id"])
        + table_cell(r["condition"])
        + table_cell(r["decision"])
        + table_cell(r["rows"])
        + f'<td class="n">{esc(percent(r["rows"] / total if total else None))}</td></tr>'
        for r in forecast["rules"]
    ]
    return (
        "<h2>Decisions and rules</h2>"
        '<p class="muted">The rule table, first match wins; each row\'s decision and the rule that made it are in '
        "<code>forecasts</code>.</p>" + html_table(["rule", "when", "decision", "rows", "share"], body)
    )


def _reasons_section(forecast: Mapping[str, Any], rows_with_reasons: int) -> str:
    body = [
        "<tr>"
        + table_cell(r["code"])
        + table_cell(r["text"])
        + table_cell(r["rows"])
        + f'<td class="n">{esc(percent(r["rows"] / rows_with_reasons if rows_with_reasons else None))}</td></tr>'
        for r in forecast["reason_codes"]
    ]
    return (
        "<h2>Reasons given</h2>"
        f'<p class="muted">Codes of the features that moved the forecast most, on the {cell_text(rows_with_reasons)} rows whose '
        "decision asks for reasons: <code>_UP</code> raised it, <code>_DOWN</code> lowered it; a row counts once per code.</p>"
        + html_table(["code", "reason", "rows", "share of rows with reasons"], body)
    )


def _health_section(rows: Sequence[Mapping[str, Any]]) -> str:
    """Model health before actuals: the estimated error with its interval, then the flagged drift rows."""
    estimates = [r for r in rows if r["section"] == ESTIMATED_ERROR]
    flagged = [
        r
        for r in rows
        if r["section"] in ("attribution", "multivariate")
        and (r["flag"] in ("warn", "alert") or r["measure"] in ("rank_agreement", "reconstruction_error"))
    ]
    if not estimates and not flagged:
        return ""
    body = [
        "<tr>"
        + table_cell(r["measure"])
        + table_cell(r["item"])
        + table_cell(r["value"])
        + table_cell(r["low"])
        + table_cell(r["high"])
        + table_cell(r["reference"])
        + (f"<td>{flag_badge(r['flag'])}</td>" if r["flag"] else "<td>—</td>")
        + table_cell(r["rows"])
        + "</tr>"
        for r in estimates
    ]
    drift = [
        "<tr>"
        + table_cell(r["section"])
        + table_cell(r["measure"])
        + table_cell(r["item"])
        + table_cell(r["value"])
        + table_cell(r["reference"])
        + table_cell(r["delta"])
        + (f"<td>{flag_badge(r['flag'])}</td>" if r["flag"] else "<td>—</td>")
        + "</tr>"
        for r in flagged
    ]
    return (
        "<h2>Model health before actuals</h2>"
        '<p class="muted">The error expected before the actuals land, from the error model (table <code>model_health</code>, '
        "section <code>estimated_error</code>), against the held-back hold-out's (reference); flagged when the whole interval "
        "lies above it. The realized error joins it when the actuals land (<code>outcome_estimates</code>).</p>"
        + html_table(["measure", "item", "estimate", "low", "high", "hold-out", "flag", "rows"], body)
        + html_table(["section", "measure", "item", "value", "reference", "change", "flag"], drift)
    )


def forecast_run_report_html(
    *,
    job: str,
    partition_date: Any,
    run_id: str,
    summary: dict[str, Any],
    forecast: Mapping[str, Any],
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
    """A forecast job's run page as one string; every text from the inputs is HTML-escaped. `summary` is the
    ledger counts, `forecast` the run's `ScoringSummary.forecast_report`; `shadow_rows` and `flip_examples` the
    challenger's comparison, when one shadows the job."""
    return page_html(
        f"Forecast run {job} {partition_date}",
        f"job <b>{esc(job)}</b> · partition <b>{esc(partition_date)}</b> · run <code>{esc(run_id)}</code> · "
        f"forecast of <b>{esc(target_words(forecast))}</b>, interval {forecast['level']:.0%}",
        lead_section(
            summary,
            drift_rows,
            histograms,
            bin_labels or {},
            shifts=shifts,
            window_days=window_days,
            reason_codes=forecast["reason_codes"],
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
        + _forecast_section(forecast)
        + _decisions_section(forecast)
        + _reasons_section(forecast, int(summary.get("rows_with_reasons") or 0))
        + fallback_section(fallback_rows)
        + _health_section(health_rows or [])
        + shadow_section(shadow_rows or [], flip_examples or [], words)
        + drift_sections(drift_rows, histograms, bin_labels or {}, words)
        + engineering_section(summary, _SUMMARY_NAMES),
        script=DRIFT_TABLE_SCRIPT,
    )
