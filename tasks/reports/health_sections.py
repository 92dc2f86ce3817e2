"""The model-health sections of the monitoring page: estimated against realized performance,
attribution drift, multivariate drift and slices, each a plot (data: PNG) and a table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from tasks.monitoring.health import ALL, ATTRIBUTION, MULTIVARIATE
from tasks.reports.html_parts import esc, html_table


def _cells(values: list[Any]) -> str:
    def shown(v: Any) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return "—"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    return "".join(f"<td>{esc(shown(v))}</td>" for v in values)


def estimated_vs_realized_section(
    estimates: pl.DataFrame, health: pl.DataFrame, figure: Callable, png: Callable, figure_html: Callable
) -> str:
    """Per partition, the estimated event rate and AUC with their intervals, the realized values where labels landed."""
    estimated = (
        health.filter(
            (pl.col("section") == "estimated_performance")
            & pl.col("measure").is_in(["event_rate", "auc"])
            & (pl.col("item") == ALL)
        )
        if health.height
        else health
    )
    fig_parts = []
    for measure, label in (("event_rate", "event rate"), ("auc", "AUC")):
        fig, ax = figure(9.0, 2.8)
        rows = estimated.filter(pl.col("measure") == measure).sort("partition_date") if estimated.height else estimated
        if not rows.height:
            ax.text(0.5, 0.5, "no estimates in this range", ha="center", va="center", transform=ax.transAxes)
        else:
            dates = rows["partition_date"].to_list()
            x = np.arange(len(dates))
            value = rows["value"].to_numpy()
            ax.errorbar(
                x,
                value,
                yerr=np.vstack([value - rows["low"].to_numpy(), rows["high"].to_numpy() - value]),
                fmt="_",
                color="#1565c0",
                capsize=4,
                markersize=12,
                label=f"estimated {label} (interval)",
            )
            real = (
                estimates.filter((pl.col("measure") == measure) & (pl.col("item") == ALL))
                if estimates.height
                else estimates
            )
            if real.height:
                where = {d: i for i, d in enumerate(dates)}
                for r in real.iter_rows(named=True):
                    if r["partition_date"] in where and r["realized"] is not None:
                        ax.plot(
                            where[r["partition_date"]],
                            r["realized"],
                            "o",
                            markersize=6,
                            color="#c62828" if r["outside"] else "#2e7d32",
                        )
                ax.plot([], [], "o", color="#2e7d32", label="realized, inside")
                ax.plot([], [], "o", color="#c62828", label="realized, outside")
            ax.set_xticks(x, [d.isoformat() for d in dates], rotation=30, fontsize=7, ha="right")
            ax.legend(fontsize=8, frameon=False, ncol=3, loc="lower left", bbox_to_anchor=(0.0, 1.0))
        fig.subplots_adjust(left=0.07, right=0.99, bottom=0.25, top=0.82)
        fig_parts.append(
            figure_html(
                f"estimated-{measure}", f"<b>Estimated {label}</b> before labels, realized once they land", png(fig)
            )
        )
    body = []
    judged = estimates.filter(pl.col("outside").is_not_null()) if estimates.height else estimates
    outside = judged.filter(pl.col("outside") | pl.col("partition_flag")) if judged.height else judged
    for r in outside.sort("partition_date", "model_version", "measure", "item").iter_rows(named=True):
        cls = ' class="unknown"' if r["outside"] else ""
        body.append(
            f"<tr{cls}>"
            + _cells(
                [
                    r["partition_date"].isoformat(),
                    r["model_version"],
                    r["measure"],
                    r["item"],
                    r["estimate"],
                    r["low"],
                    r["high"],
                    r["realized"],
                    r["realized_rows"],
                    r["outside"],
                    r["partition_flag"],
                ]
            )
            + "</tr>"
        )
    inside = judged.height - int(judged["outside"].sum()) if judged.height else 0
    return (
        "<h2>Estimated vs realized performance</h2>"
        '<p class="muted">Estimated by the scoring run from the calibrated probabilities (<code>model_health</code>); '
        "realized on the labelled rows (<code>outcome_estimates</code>, every measure). A partition is flagged when its pooled "
        f"event rate or AUC falls outside the estimate's interval. <b>{inside} of {judged.height}</b> realized values fell "
        "inside their estimate's interval; the table lists those outside and the flagged partitions' rows.</p>"
        '<div class="plots wide">'
        + "".join(fig_parts)
        + "</div>"
        + html_table(
            [
                "date",
                "model version",
                "measure",
                "item",
                "estimate",
                "low",
                "high",
                "realized",
                "labelled rows",
                "outside",
                "partition flagged",
            ],
            body,
        )
    )


def attribution_section(health: pl.DataFrame, figure: Callable, png: Callable, figure_html: Callable) -> str:
    rows = (
        health.filter(
            (pl.col("section") == ATTRIBUTION) & pl.col("measure").is_in(["mean_abs_contribution", "mean_contribution"])
        )
        if health.height
        else health
    )
    fig, ax = figure(9.0, 3.4)
    if not rows.height:
        ax.text(0.5, 0.5, "no attribution rows in this range", ha="center", va="center", transform=ax.transAxes)
        flagged = rows
    else:
        change = rows.group_by("partition_date", "item").agg(pl.col("delta").abs().max().alias("change"))
        dates = sorted(set(change["partition_date"].to_list()))
        features = sorted(set(change["item"].to_list()))
        grid = np.full((len(features), len(dates)), np.nan)
        for r in change.iter_rows(named=True):
            grid[features.index(r["item"]), dates.index(r["partition_date"])] = r["change"]
        image = ax.imshow(grid, aspect="auto", cmap="Reds", vmin=0, vmax=max(0.15, float(np.nanmax(grid))))
        ax.set_yticks(range(len(features)), features, fontsize=7)
        ax.set_xticks(range(len(dates)), [d.isoformat() for d in dates], rotation=30, fontsize=7, ha="right")
        fig.colorbar(image, ax=ax, fraction=0.03)
        fig.subplots_adjust(left=0.25, right=0.97, bottom=0.22, top=0.97)
        flagged = rows.filter(pl.col("flag").is_in(["warn", "alert"]))
    body = [
        "<tr>"
        + _cells(
            [
                r["partition_date"].isoformat(),
                r["item"],
                r["measure"],
                r["value"],
                r["reference"],
                r["delta"],
                r["flag"],
            ]
        )
        + "</tr>"
        for r in flagged.sort("partition_date", "item").iter_rows(named=True)
    ]
    return (
        "<h2>Attribution drift</h2>"
        '<p class="muted">Change of each feature\'s mean |contribution| or mean contribution against the reference at '
        "registration, as a share of the reference's total mean |contribution| (the larger of the two per cell).</p>"
        '<div class="plots wide">'
        + figure_html("attribution", "<b>Attribution change</b> per feature and partition", png(fig))
        + "</div>"
        + html_table(["date", "feature", "measure", "value", "reference", "change", "flag"], body)
    )


def multivariate_section(health: pl.DataFrame, figure: Callable, png: Callable, figure_html: Callable) -> str:
    rows = (
        health.filter((pl.col("section") == MULTIVARIATE) & (pl.col("measure") == "reconstruction_error")).sort(
            "partition_date"
        )
        if health.height
        else health
    )
    fig, ax = figure(9.0, 2.8)
    if not rows.height:
        ax.text(
            0.5,
            0.5,
            "no multivariate rows in this range (a model registered before model health)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    else:
        dates = rows["partition_date"].to_list()
        x = np.arange(len(dates))
        ax.fill_between(
            x, rows["low"].to_numpy(), rows["high"].to_numpy(), color="#90caf9", alpha=0.5, label="reference ± 3 s.e."
        )
        ax.plot(x, rows["reference"].to_numpy(), "--", color="#1565c0", label="reference mean")
        colours = [
            "#c62828" if f == "alert" else "#e69500" if f == "warn" else "#2e7d32" for f in rows["flag"].to_list()
        ]
        ax.scatter(x, rows["value"].to_numpy(), c=colours, zorder=3, label="mean reconstruction error")
        ax.set_xticks(x, [d.isoformat() for d in dates], rotation=30, fontsize=7, ha="right")
        ax.legend(fontsize=8, frameon=False, ncol=3, loc="lower left", bbox_to_anchor=(0.0, 1.0))
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.25, top=0.82)
    return (
        "<h2>Multivariate drift</h2>"
        '<p class="muted">Mean squared reconstruction error of the standardized model inputs under the PCA fitted at '
        "registration: it rises when the inputs' joint distribution moves, even with every marginal unchanged.</p>"
        '<div class="plots wide">'
        + figure_html("multivariate", "<b>PCA reconstruction error</b> per partition", png(fig))
        + "</div>"
    )


def slices_section(slices: pl.DataFrame) -> str:
    shifted = slices.filter(pl.col("flag") == "shift").sort("partition_date", "q_value") if slices.height else slices
    body = [
        "<tr>"
        + _cells(
            [
                r["partition_date"].isoformat(),
                f"{r['slice_column']}={r['slice_value']}",
                r["measure"],
                r["value"],
                r["baseline"],
                r["rows"],
                r["p_value"],
                r["q_value"],
            ]
        )
        + "</tr>"
        for r in shifted.iter_rows(named=True)
    ]
    tested = slices.filter(pl.col("q_value").is_not_null()).height if slices.height else 0
    return (
        "<h2>Slices</h2>"
        f'<p class="muted">{tested} slice measures tested in this range; those whose Benjamini–Hochberg adjusted p-value '
        "is within the job's false discovery rate are listed (<code>slice_monitoring</code>).</p>"
        + html_table(["date", "slice", "measure", "value", "trailing window", "rows", "p-value", "q-value"], body)
    )
