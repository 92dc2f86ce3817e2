"""The monitoring page of a forecast job (target.kind regression or count) over a range of partitions, in the
target's words: the decision mix over time; the mean forecast and the interval width over time (every published
row, before any actual lands); once actuals land, the realized MAE, RMSE, bias and interval coverage per partition
(table `outcome_errors`, section `partition`, item `all`) and per decision; the MAE estimated before the actuals
(model health `estimated_error`) with its interval beside the realized one (`outcome_estimates`, measure `mae`); the
champion against its challenger on the same actuals (`shadow_outcomes`); the labels per partition, the
decision-monitoring flags, attribution and multivariate drift.

Same style and Content-Security-Policy as the binary page (tasks/reports/monitoring_page.py), whose pieces it reuses.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.monitoring.health import ESTIMATED_ERROR
from tasks.monitoring.history import ForecastHistory, MonitoringHistory, pooled_decision_errors
from tasks.prediction.words import JobWords
from tasks.reports.forecast_report import target_words
from tasks.reports.health_sections import attribution_section, multivariate_section
from tasks.reports.html_parts import esc, html_table, page_html, percent
from tasks.reports.monitoring_page import (
    MONITORING_CSS,
    VERSION_COLOURS,
    date_axis,
    decision_mix_png,
    figure_html,
    flags_section,
    interval_text_plain,
    labels_section,
    new_figure,
    png_data,
    row_cells,
)

PARTITION, ALL = "partition", "all"


def _partition_errors(errors: pl.DataFrame) -> pl.DataFrame:
    if errors.is_empty():
        return errors
    return errors.filter((pl.col("section") == PARTITION) & (pl.col("item") == ALL) & (pl.col("labelled") > 0)).sort(
        "partition_date", "model_version"
    )


def _dates(*frames: pl.DataFrame) -> list[dt.date]:
    return sorted({d for f in frames if f.height for d in f["partition_date"].to_list()})


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _legend(ax: Any, fig: Any) -> None:
    ax.legend(fontsize=8, frameon=False, ncol=4, loc="lower left", bbox_to_anchor=(0.0, 1.0))
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.14, top=0.84)


def means_png(forecast: ForecastHistory, unit: str) -> str:
    """Mean forecast per partition and model version, with the mean interval as a band, and the mean actual where labelled."""
    means, errors = forecast.means, _partition_errors(forecast.history.errors)
    fig, ax = new_figure()
    dates = _dates(means)
    if not dates:
        _empty(ax, "no published forecasts in this range")
        return png_data(fig)
    where = {d: i for i, d in enumerate(dates)}
    for i, version in enumerate(sorted(set(means["model_version"].to_list()))):
        rows = means.filter(pl.col("model_version") == version).sort("partition_date")
        x = np.array([where[d] for d in rows["partition_date"].to_list()])
        colour = VERSION_COLOURS[i % len(VERSION_COLOURS)]
        ax.fill_between(
            x,
            rows["forecast_low_mean"].to_numpy(),
            rows["forecast_high_mean"].to_numpy(),
            color=colour,
            alpha=0.15,
            label=f"mean interval, v{version}",
        )
        ax.plot(
            x, rows["forecast_mean"].to_numpy(), "o-", color=colour, markersize=4, label=f"mean forecast, v{version}"
        )
        labelled = errors.filter(pl.col("model_version") == version) if errors.height else errors
        if labelled.height:
            ax.plot(
                [where[d] for d in labelled["partition_date"].to_list() if d in where],
                [
                    v
                    for d, v in zip(
                        labelled["partition_date"].to_list(), labelled["actual_mean"].to_list(), strict=True
                    )
                    if d in where
                ],
                "s",
                color="#222",
                markersize=4,
                label=f"mean actual, v{version}",
            )
    ax.set_ylabel(unit or "forecast", fontsize=8)
    date_axis(ax, dates)
    _legend(ax, fig)
    return png_data(fig)


def width_png(forecast: ForecastHistory, unit: str) -> str:
    """Mean interval width per partition: over every published row, and over the labelled rows once actuals land."""
    means, errors = forecast.means, _partition_errors(forecast.history.errors)
    fig, ax = new_figure(9.0, 2.8)
    dates = _dates(means, errors)
    if not dates:
        _empty(ax, "no published forecasts in this range")
        return png_data(fig)
    where = {d: i for i, d in enumerate(dates)}
    widths = [
        v
        for f, c in ((means, "width_mean"), (errors, "mean_width"))
        if f.height
        for v in f[c].to_list()
        if v is not None and np.isfinite(v)
    ]
    for i, version in enumerate(
        sorted(set(means["model_version"].to_list()) | set(errors["model_version"].to_list() if errors.height else []))
    ):
        colour = VERSION_COLOURS[i % len(VERSION_COLOURS)]
        rows = means.filter(pl.col("model_version") == version).sort("partition_date") if means.height else means
        if rows.height:
            ax.plot(
                [where[d] for d in rows["partition_date"].to_list()],
                rows["width_mean"].to_numpy(),
                "o-",
                color=colour,
                markersize=4,
                label=f"every row, v{version}",
            )
        labelled = errors.filter(pl.col("model_version") == version) if errors.height else errors
        if labelled.height:
            ax.plot(
                [where[d] for d in labelled["partition_date"].to_list()],
                labelled["mean_width"].to_numpy(),
                "x",
                color=colour,
                markersize=7,
                label=f"labelled rows, v{version}",
            )
    # From 0, so a narrowing or widening reads as a share of the width; with room above the widest point.
    ax.set_ylim(0, max(widths, default=1.0) * 1.15 or 1.0)
    ax.set_ylabel(f"interval width ({unit})" if unit else "interval width", fontsize=8)
    date_axis(ax, dates)
    _legend(ax, fig)
    return png_data(fig)


def realized_png(forecast: ForecastHistory, measure: str, label: str, *, level: float | None = None) -> str:
    """One realized measure per labelled partition and model version; coverage with its level, bias with 0."""
    errors = _partition_errors(forecast.history.errors)
    fig, ax = new_figure(9.0, 2.6)
    if errors.is_empty():
        _empty(ax, "no actuals yet")
        return png_data(fig)
    dates = _dates(errors)
    where = {d: i for i, d in enumerate(dates)}
    for i, version in enumerate(sorted(set(errors["model_version"].to_list()))):
        rows = errors.filter(pl.col("model_version") == version)
        ax.plot(
            [where[d] for d in rows["partition_date"].to_list()],
            rows[measure].to_numpy(),
            "o-",
            color=VERSION_COLOURS[i % len(VERSION_COLOURS)],
            markersize=4,
            label=f"{label}, v{version}",
        )
    if level is not None:
        ax.axhline(level, color="#777", linestyle="--", linewidth=1, label=f"level {level:.0%}")
    if measure == "bias":
        ax.axhline(0.0, color="#777", linestyle="--", linewidth=1)
    ax.set_ylabel(label, fontsize=8)
    date_axis(ax, dates)
    _legend(ax, fig)
    return png_data(fig)


def _estimated(forecast: ForecastHistory, measure: str) -> pl.DataFrame:
    """Per partition and model version: the MAE (or RMSE) estimated before the actuals with its interval, and the
    realized one with whether it fell outside, where the actuals landed."""
    health = forecast.history.model_health
    estimated = (
        health.filter(
            (pl.col("section") == ESTIMATED_ERROR) & (pl.col("measure") == measure) & (pl.col("item") == ALL)
        ).select(
            "partition_date", "model_version", pl.col("value").alias("estimate"), "low", "high", "reference", "flag"
        )
        if health.height
        else None
    )
    realized = forecast.history.estimates
    realized = (
        realized.filter((pl.col("measure") == measure) & (pl.col("item") == ALL)).select(
            "partition_date",
            "model_version",
            pl.col("estimate").alias("judged_estimate"),
            pl.col("low").alias("judged_low"),
            pl.col("high").alias("judged_high"),
            "realized",
            "realized_rows",
            "outside",
            "partition_flag",
        )
        if realized.height
        else None
    )
    if estimated is None and realized is None:
        return pl.DataFrame()
    if estimated is None:
        return realized.rename({"judged_estimate": "estimate", "judged_low": "low", "judged_high": "high"}).sort(
            "partition_date"
        )
    if realized is None:
        return estimated.sort("partition_date")
    joined = estimated.join(realized, on=["partition_date", "model_version"], how="full", coalesce=True)
    # The interval `outside` was judged against first: the same as model health's unless that was re-run since.
    return (
        joined.with_columns(
            pl.coalesce("judged_estimate", "estimate").alias("estimate"),
            pl.coalesce("judged_low", "low").alias("low"),
            pl.coalesce("judged_high", "high").alias("high"),
        )
        .drop("judged_estimate", "judged_low", "judged_high")
        .sort("partition_date", "model_version")
    )


def estimated_png(rows: pl.DataFrame, unit: str) -> str:
    """The estimated MAE with its interval per partition, the realized MAE beside it (red when outside)."""
    fig, ax = new_figure(9.0, 2.8)
    if rows.is_empty():
        _empty(ax, "no estimated error in this range")
        return png_data(fig)
    dates = _dates(rows)
    x = np.array([dates.index(d) for d in rows["partition_date"].to_list()], dtype=np.float64)
    value = rows["estimate"].to_numpy()
    ax.errorbar(
        x,
        value,
        yerr=np.vstack([value - rows["low"].to_numpy(), rows["high"].to_numpy() - value]),
        fmt="_",
        color="#1565c0",
        capsize=4,
        markersize=12,
        label="estimated MAE (interval)",
    )
    if "realized" in rows.columns:
        for r, at in zip(rows.iter_rows(named=True), x, strict=True):
            if r["realized"] is not None:
                ax.plot(at, r["realized"], "o", markersize=6, color="#c62828" if r["outside"] else "#2e7d32")
        ax.plot([], [], "o", color="#2e7d32", label="realized, inside")
        ax.plot([], [], "o", color="#c62828", label="realized, outside")
    ax.set_ylabel(f"MAE ({unit})" if unit else "MAE", fontsize=8)
    date_axis(ax, dates)
    _legend(ax, fig)
    return png_data(fig)


def _means_section(forecast: ForecastHistory, decisions: Sequence[str]) -> str:
    counts = forecast.history.decision_counts
    totals: dict[tuple[dt.date, str], int] = {}
    for r in counts.iter_rows(named=True):
        totals[(r["partition_date"], r["decision"])] = r["rows"]
    present = [d for d in decisions if any(k[1] == d for k in totals)] + sorted({k[1] for k in totals} - set(decisions))
    by_date: dict[dt.date, int] = {}
    for (day, _), n in totals.items():
        by_date[day] = by_date.get(day, 0) + n
    body = []
    for r in forecast.means.iter_rows(named=True):
        day = r["partition_date"]
        shares = [percent(totals.get((day, d), 0) / by_date[day]) if by_date.get(day) else "—" for d in present]
        body.append(
            "<tr>"
            + row_cells(
                [
                    day.isoformat(),
                    r["model_version"],
                    r["rows"],
                    r["forecast_mean"],
                    r["forecast_low_mean"],
                    r["forecast_high_mean"],
                    r["width_mean"],
                    r["expected_error_mean"],
                    *shares,
                ]
            )
            + "</tr>"
        )
    header = [
        "date",
        "model version",
        "rows",
        "mean forecast",
        "mean low",
        "mean high",
        "mean width",
        "mean expected error",
        *(f"share {d}" for d in present),
    ]
    return (
        "<h2>Forecasts per partition</h2>"
        '<p class="muted">Every published row (table <code>forecasts</code>), before any actual lands; the decision shares '
        "are over all of a partition's rows.</p>" + html_table(header, body)
    )


def _realized_section(forecast: ForecastHistory) -> str:
    body = [
        "<tr>"
        + row_cells(
            [
                r["partition_date"].isoformat(),
                r["model_version"],
                r["rows"],
                r["labelled"],
                r["actual_mean"],
                r["forecast_mean"],
                r["mae"],
                r["rmse"],
                r["bias"],
                r["mape"],
                r["smape"],
                percent(r["coverage"]),
                percent(r["interval_level"]),
                r["mean_width"],
            ]
        )
        + "</tr>"
        for r in _partition_errors(forecast.history.errors).iter_rows(named=True)
    ]
    header = [
        "date",
        "model version",
        "rows",
        "labelled",
        "mean actual",
        "mean forecast",
        "MAE",
        "RMSE",
        "bias (actual − forecast)",
        "MAPE",
        "sMAPE",
        "coverage",
        "level",
        "mean width",
    ]
    return (
        "<h2>Realized error per partition</h2>"
        '<p class="muted">The labelled rows of each partition against their actuals (table <code>outcome_errors</code>, section '
        "<code>partition</code>): coverage is the share of actuals inside [forecast_low, forecast_high]; MAPE leaves out actuals "
        "of 0.</p>" + html_table(header, body)
    )


def _decision_errors_section(forecast: ForecastHistory) -> str:
    pooled = pooled_decision_errors(forecast.history.errors)
    body = (
        [
            "<tr>"
            + row_cells(
                [
                    r["model_version"],
                    r["item"],
                    r["labelled"],
                    r["actual_mean"],
                    r["forecast_mean"],
                    r["mae"],
                    r["rmse"],
                    r["bias"],
                    percent(r["coverage"]),
                    r["mean_width"],
                ]
            )
            + "</tr>"
            for r in pooled.iter_rows(named=True)
        ]
        if pooled.height
        else []
    )
    return (
        "<h2>Realized error per decision</h2>"
        '<p class="muted">Labelled rows of the whole range, per decision (section <code>decision</code>), each partition weighted '
        "by its labelled rows.</p>"
        + html_table(
            [
                "model version",
                "decision",
                "labelled rows",
                "mean actual",
                "mean forecast",
                "MAE",
                "RMSE",
                "bias",
                "coverage",
                "mean width",
            ],
            body,
        )
    )


def _estimated_section(rows: pl.DataFrame, unit: str) -> str:
    body = (
        [
            "<tr>"
            + row_cells(
                [
                    r["partition_date"].isoformat(),
                    r["model_version"],
                    r["estimate"],
                    r["low"],
                    r["high"],
                    r.get("realized"),
                    {True: "yes", False: "no"}.get(r.get("outside"), "—"),
                    r.get("flag") or "—",
                ]
            )
            + "</tr>"
            for r in rows.iter_rows(named=True)
        ]
        if rows.height
        else []
    )
    return (
        '<h2>Estimated against realized error</h2><div class="plots wide">'
        + figure_html(
            "estimated-mae",
            "<b>Estimated MAE</b> before the actuals, with its interval; the <b>realized</b> MAE once they land",
            estimated_png(rows, unit),
        )
        + "</div>"
        '<p class="muted">Model health estimates each partition\'s MAE from the error model before its actuals land (table '
        "<code>model_health</code>, section <code>estimated_error</code>); <code>outcome_estimates</code> sets the realized MAE "
        "beside it and says whether it fell outside the interval.</p>"
        + html_table(["date", "model version", "estimated MAE", "low", "high", "realized MAE", "outside", "flag"], body)
    )


def _challenger_section(history: MonitoringHistory) -> str:
    """Champion and challenger on the same labelled rows, per partition: MAE, RMSE and interval coverage of each, the
    challenger's minus the champion's with its paired bootstrap interval, and the recommendation (`shadow_outcomes`)."""
    rows = history.shadow_outcomes
    if not rows.height:
        return ""
    body = [
        "<tr>"
        + row_cells(
            [
                r["partition_date"].isoformat(),
                r["champion_version"],
                r["challenger_version"],
                r["measure"],
                r["rows"],
                r["champion"],
                r["challenger"],
                r["delta"],
                interval_text_plain(r),
                r["better"],
            ]
        )
        + "</tr>"
        for r in rows.iter_rows(named=True)
    ]
    advice = "".join(
        f"<li>{esc(day.isoformat())}: {esc(part['recommendation'][0])}</li>"
        for (day,), part in rows.group_by(["partition_date"], maintain_order=True)
    )
    return (
        "<h2>Champion and challenger on actuals</h2>"
        '<p class="muted">Both models on the same labelled rows (table <code>shadow_outcomes</code>); the difference is the '
        "challenger's minus the champion's, with its paired bootstrap interval; coverage is judged by its distance to the "
        "level.</p>"
        + html_table(
            [
                "partition",
                "champion",
                "challenger",
                "measure",
                "rows",
                "champion value",
                "challenger value",
                "difference",
                "interval",
                "better",
            ],
            body,
        )
        + f"<ul>{advice}</ul>"
    )


def forecast_monitoring_page_html(
    forecast: ForecastHistory, *, target: Mapping[str, str], level: float, words: JobWords
) -> str:
    """The whole monitoring page of a forecast job as one string; every text from the inputs is HTML-escaped. `target`
    is the spec's target (kind, name, unit), `level` its interval level; `words` (the decisions in rule-table order, by
    their plain names, and which of them are actions) order, name and colour the decision mix."""
    history, unit = forecast.history, target.get("unit") or ""
    decisions = list(words.decisions)
    estimated = _estimated(forecast, "mae")
    return page_html(
        f"Forecast monitoring {history.job} {history.first_date}..{history.last_date}",
        f"job <b>{esc(history.job)}</b> · forecast of <b>{esc(target_words(target))}</b>, interval {esc(f'{level:.0%}')} · partitions "
        f"<b>{esc(history.first_date)}</b> to <b>{esc(history.last_date)}</b>",
        '<h2>Decision mix over time</h2><div class="plots wide">'
        + figure_html(
            "decision-mix",
            '<b>Share of rows per decision</b> <span class="muted">▼ a decision share moved beyond '
            "tolerance against the trailing window</span>",
            decision_mix_png(history, words=words),
        )
        + '</div><h2>Forecast and interval over time</h2><div class="plots wide">'
        + figure_html(
            "forecast-mean",
            f"<b>Mean forecast</b> of {esc(target.get('name') or 'the target')} with the mean interval, and "
            "the <b>mean actual</b> of the labelled rows",
            means_png(forecast, unit),
        )
        + figure_html("interval-width", "<b>Mean interval width</b>", width_png(forecast, unit))
        + "</div>"
        + _means_section(forecast, decisions)
        + '<h2>Realized error over time</h2><div class="plots wide">'
        + figure_html("mae", "<b>Realized MAE</b>", realized_png(forecast, "mae", f"MAE ({unit})" if unit else "MAE"))
        + figure_html(
            "rmse", "<b>Realized RMSE</b>", realized_png(forecast, "rmse", f"RMSE ({unit})" if unit else "RMSE")
        )
        + figure_html(
            "bias",
            "<b>Bias</b> (actual − forecast)",
            realized_png(forecast, "bias", f"bias ({unit})" if unit else "bias"),
        )
        + figure_html(
            "coverage",
            f"<b>Interval coverage</b> against the level {esc(f'{level:.0%}')}",
            realized_png(forecast, "coverage", "coverage", level=level),
        )
        + "</div>"
        + _realized_section(forecast)
        + _decision_errors_section(forecast)
        + _estimated_section(estimated, unit)
        + _challenger_section(history)
        + labels_section(history)
        + flags_section(history)
        + attribution_section(history.model_health, new_figure, png_data, figure_html)
        + multivariate_section(history.model_health, new_figure, png_data, figure_html),
        css=MONITORING_CSS,
    )
