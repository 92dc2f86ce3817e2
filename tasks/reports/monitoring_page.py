"""What people read about prediction monitoring and realized outcomes of one job over a range of partitions.

- `monitoring_page_html`: one self-contained page (same style and Content-Security-Policy as the
  run report: inline CSS, plots as data: PNGs, no script) with the decision mix over time (dates
  whose decision shares moved beyond tolerance marked), the observed event rate with its
  interval against the expected rate per model version, a calibration curve per model version
  (the range's calibration bins added up), and tables of realized performance, precision and
  recall of the action decisions (those that act on the entity), labels per partition (unknown entities highlighted), the
  decision-monitoring flags, and model health (tasks/reports/health_sections.py): estimated vs
  realized performance, attribution drift, multivariate drift and shifted slices;
- `realized_performance_rows` / `realized_performance_table`: the same realized performance as
  plain rows (Prefect table artifact) and as a rich table (the `score` CLI);
- `realized_error_rows` / `realized_error_table`: a forecast job's realized error (MAE, RMSE, bias,
  the interval's coverage and width) in the same two forms.

The rows drawn here are read by tasks/monitoring/history.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from rich.table import Table

from tasks.monitoring.history import UNMATCHED_REASONS, MonitoringHistory
from tasks.monitoring.outcomes import ANY_ACTION, ANY_ACTION_BEFORE, event_rate_interval
from tasks.prediction.words import JobWords
from tasks.reports.health_sections import (
    attribution_section,
    estimated_vs_realized_section,
    multivariate_section,
    slices_section,
)

# The run report's page style, so both pages of a job read alike.
from tasks.reports.html_parts import CSP, CSS, cell_text, esc, html_table, percent

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MONITORING_CSS = "tr.unknown td{background:#fde2e1;font-weight:600}.plots.wide{grid-template-columns:1fr}"
_ACTION_COLOURS = ("#c62828", "#e69500", "#8e24aa", "#d84315", "#ad1457")
_OTHER_COLOURS = ("#2e7d32", "#1565c0", "#00838f", "#546e7a", "#8d6e63")
VERSION_COLOURS = ("#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#e69500", "#00838f")


def _interval_text(low: Any, high: Any) -> str:
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return "—"
    return f"{low:.2%}–{high:.2%}"


def _three_decimals(value: Any) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.3f}"


def realized_performance_rows(history: MonitoringHistory) -> list[dict[str, Any]]:
    """One row per (partition, model version) that was scored; labels of days never scored are counted by
    `unmatched_label_counts`, not listed (a range reaching into the training days would open with rows of dashes)."""
    label_counts = _label_counts(history)
    out = []
    for r in history.metrics.sort("partition_date", "model_version").iter_rows(named=True):
        out.append(
            {
                "date": r["partition_date"].isoformat(),
                "model_version": r["model_version"],
                "rows": r["rows"],
                "labelled": r["labelled"],
                "events": r["events"],
                "observed_rate": percent(r["observed_rate"]),
                "observed_interval": _interval_text(r["observed_low"], r["observed_high"]),
                "expected_rate": percent(r["expected_rate"]),
                "expected_in_interval": {True: "yes", False: "NO", None: "—"}[r["expected_within_interval"]],
                **{k: _three_decimals(r[k]) for k in ("auc", "brier", "ece", "psi_score")},
                **label_counts(r["partition_date"]),
            }
        )
    return out


def _label_counts(history: MonitoringHistory) -> Callable[[dt.date], dict[str, int]]:
    labels = {r["partition_date"]: r for r in history.partitions.iter_rows(named=True)}

    def label_counts(day: dt.date) -> dict[str, int]:
        row = labels.get(day) or {}
        return {
            "labels_quarantined": row.get("labels_quarantined", 0),
            "labels_unknown_entity": row.get("labels_unknown_entity", 0),
        }

    return label_counts


def unmatched_labels_text(counts: dict[str, int]) -> str:
    """`unmatched_label_counts` in a sentence: the total, then each reason that has labels, with its count."""
    total = sum(counts.values())
    if not total:
        return "Every label matches a scored entity."
    reasons = "; ".join(f"{reason}: {n} ({UNMATCHED_REASONS[reason]})" for reason, n in counts.items() if n)
    return f"Labels that match no scored entity: {total} — {reasons}."


def _four_digits(value: Any) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.4g}"


def realized_error_rows(history: MonitoringHistory) -> list[dict[str, Any]]:
    """A forecast job's realized error, one row per (partition, model version) that was scored (`outcome_errors`,
    section `partition`); labels of days never scored are counted by `unmatched_label_counts`, not listed."""
    label_counts = _label_counts(history)
    errors = history.errors.filter(pl.col("section") == "partition") if history.errors.height else history.errors
    out = []
    for r in errors.sort("partition_date", "model_version").iter_rows(named=True):
        out.append(
            {
                "date": r["partition_date"].isoformat(),
                "model_version": r["model_version"],
                "rows": r["rows"],
                "labelled": r["labelled"],
                **{k: _four_digits(r[k]) for k in ("mae", "rmse")},
                "bias": "—" if r["bias"] is None else f"{r['bias']:+.4g}",
                "coverage": "—" if r["coverage"] is None else percent(r["coverage"]),
                "mean_width": _four_digits(r["mean_width"]),
                "interval_level": f"{r['interval_level']:.0%}",
                **label_counts(r["partition_date"]),
            }
        )
    return out


def realized_class_rows(history: MonitoringHistory) -> list[dict[str, Any]]:
    """A multiclass job's realized performance, one row per (partition, model version) that was scored (`outcome_class_metrics`,
    section `partition`) beside the accuracy estimated before labels (`outcome_estimates`); labels of days never scored
    are counted by `unmatched_label_counts`, not listed."""
    label_counts = _label_counts(history)
    metrics = (
        history.class_metrics.filter(pl.col("section") == "partition")
        if history.class_metrics.height
        else history.class_metrics
    )
    estimates = (
        history.estimates.filter(pl.col("measure") == "accuracy") if history.estimates.height else history.estimates
    )
    estimated = {(r["partition_date"], r["model_version"]): r for r in estimates.iter_rows(named=True)}
    out = []
    for r in metrics.sort("partition_date", "model_version").iter_rows(named=True):
        estimate = estimated.get((r["partition_date"], r["model_version"]))
        out.append(
            {
                "date": r["partition_date"].isoformat(),
                "model_version": r["model_version"],
                "rows": r["rows"],
                "labelled": r["labelled"],
                "accuracy": "—" if r["accuracy"] is None else percent(r["accuracy"]),
                "estimated_accuracy": "—" if estimate is None else _interval_text(estimate["low"], estimate["high"]),
                "accuracy_in_interval": "—"
                if estimate is None
                else {True: "NO", False: "yes", None: "—"}[estimate["outside"]],
                **{
                    k: "—" if r[k] is None else _three_decimals(r[k])
                    for k in ("log_loss", "macro_f1", "classwise_ece", "top_label_ece")
                },
                **label_counts(r["partition_date"]),
            }
        )
    return out


_TERMINAL_HEADERS = {
    "model_version": "version",
    "observed_rate": "observed",
    "observed_interval": "interval",
    "expected_rate": "expected",
    "expected_in_interval": "in int.",
    "auc": "AUC",
    "brier": "Brier",
    "ece": "ECE",
    "psi_score": "PSI",
    "labels_quarantined": "quar.",
    "labels_unknown_entity": "unknown",
    "mae": "MAE",
    "rmse": "RMSE",
    "mean_width": "mean width",
    "interval_level": "level",
    "estimated_accuracy": "estimated",
    "accuracy_in_interval": "in int.",
    "log_loss": "log loss",
    "macro_f1": "macro F1",
    "classwise_ece": "classwise ECE",
    "top_label_ece": "top-label ECE",
}


def _terminal_table(title: str, caption: str, rows: list[dict[str, Any]], *, red: Callable[[str, Any], bool]) -> Table:
    columns = list(dict.fromkeys(k for r in rows for k in r)) or ["date"]
    table = Table(title=title, caption=caption)
    for col in columns:
        table.add_column(
            _TERMINAL_HEADERS.get(col, col.replace("_", " ")),
            justify="left" if col in ("date", "model_version") else "right",
            no_wrap=True,
        )
    for r in rows:
        cells = []
        for col in columns:
            value = r.get(col, "—")
            text = str(value)
            if red(col, value):
                text = f"[red]{text}[/red]"
            cells.append(text)
        table.add_row(*cells)
    return table


def realized_error_table(job: str, rows: list[dict[str, Any]]) -> Table:
    """`realized_error_rows` as a terminal table; unknown-entity labels in red."""
    return _terminal_table(
        f"{job}: realized error per partition and model version",
        "on the forecasts with an actual: MAE, RMSE, bias = mean(actual − forecast); coverage: share of actuals inside the "
        "forecast's interval, against its level; mean width of that interval; quar. / unknown: labels of entities the "
        "partition quarantined / never saw (table outcome_errors)",
        rows,
        red=lambda col, value: col == "labels_unknown_entity" and bool(value),
    )


def realized_class_table(job: str, rows: list[dict[str, Any]], *, interval_level: float) -> Table:
    """`realized_class_rows` as a terminal table; unknown-entity labels and accuracies outside the estimate's interval in red."""
    return _terminal_table(
        f"{job}: realized performance per partition and model version",
        f"on the classifications with a label: accuracy; estimated: the {interval_level:.0%} interval of the accuracy estimated "
        "before labels; in int.: the realized accuracy inside it; log loss of the calibrated vector; macro F1; classwise ECE "
        "(mean one-vs-rest) and top-label ECE; quar. / unknown: labels of entities the partition quarantined / never saw "
        "(tables outcome_class_metrics, outcome_class_rates)",
        rows,
        red=lambda col, value: (
            (col == "labels_unknown_entity" and bool(value)) or (col == "accuracy_in_interval" and value == "NO")
        ),
    )


def realized_performance_table(job: str, rows: list[dict[str, Any]], *, interval_level: float = 0.95) -> Table:
    """`realized_performance_rows` as a terminal table; unknown-entity labels and expected rates outside the interval in red."""
    return _terminal_table(
        f"{job}: realized performance per partition and model version",
        f"observed event rate with its {interval_level:.0%} Clopper–Pearson interval; expected: mean calibrated "
        "probability; in int.: expected inside the interval; PSI: score vs the trailing window; quar. / unknown: "
        "labels of entities the partition quarantined / never saw",
        rows,
        red=lambda col, value: (
            (col == "labels_unknown_entity" and bool(value)) or (col == "expected_in_interval" and value == "NO")
        ),
    )


def png_data(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def new_figure(width: float = 9.0, height: float = 3.2) -> tuple[Figure, Any]:
    # matplotlib takes ~0.5 s to import: loaded when a page is drawn, not with the flows that may draw one.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=80)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def date_axis(ax: Any, dates: list[dt.date]) -> None:
    step = max(1, len(dates) // 12)
    ticks = list(range(0, len(dates), step))
    ax.set_xticks(ticks, [dates[i].strftime("%m-%d") for i in ticks], fontsize=8)
    ax.set_xlim(-0.6, len(dates) - 0.4)
    ax.tick_params(axis="y", labelsize=8)


def _shifted_dates(history: MonitoringHistory) -> list[dt.date]:
    """Partitions with a decision share flagged `shift` against their trailing window."""
    frame = history.decision_monitoring
    if frame.is_empty():
        return []
    flagged = frame.filter((pl.col("measure") == "decision_share") & (pl.col("flag") == "shift"))
    return sorted(set(flagged["partition_date"].to_list()))


def _decision_colours(decisions: list[str], actions: Sequence[str]) -> dict[str, str]:
    """Action decisions in warm colours, the others in cool ones, each in rule-table order."""
    acting = [d for d in decisions if d in actions]
    rest = [d for d in decisions if d not in actions]
    return {
        **{d: _ACTION_COLOURS[i % len(_ACTION_COLOURS)] for i, d in enumerate(acting)},
        **{d: _OTHER_COLOURS[i % len(_OTHER_COLOURS)] for i, d in enumerate(rest)},
    }


def decision_mix_png(history: MonitoringHistory, *, words: JobWords | None = None) -> str:
    """Stacked share of rows per decision and partition, action decisions on top, each by its plain name; partitions
    with a shifted decision share marked. `words.decisions` gives the rule-table order; decisions not in it follow by name."""
    decisions, actions = (words.decisions, words.actions) if words is not None else ((), ())
    named = words.decision if words is not None else str
    counts = history.decision_counts
    fig, ax = new_figure()
    if counts.is_empty():
        ax.text(0.5, 0.5, "no scored partitions", ha="center", va="center", transform=ax.transAxes)
        return png_data(fig)
    wide = counts.pivot(on="decision", index="partition_date", values="rows").sort("partition_date").fill_null(0)
    dates = wide["partition_date"].to_list()
    present = [c for c in wide.columns if c != "partition_date"]
    ordered = [d for d in decisions if d in present] + sorted(set(present) - set(decisions))
    colours = _decision_colours(ordered, actions)
    stacked = [d for d in ordered if d not in actions] + [d for d in reversed(ordered) if d in actions]
    totals = wide.select(pl.sum_horizontal(present)).to_series().to_numpy().astype(np.float64)
    bottom = np.zeros(len(dates))
    x = np.arange(len(dates))
    for decision in stacked:
        share = wide[decision].to_numpy() / np.where(totals > 0, totals, 1)
        ax.bar(x, share, bottom=bottom, width=0.8, color=colours[decision], label=named(decision))
        bottom += share
    shifted = [dates.index(d) for d in _shifted_dates(history) if d in dates]
    if shifted:
        ax.plot(
            shifted,
            [1.04] * len(shifted),
            "v",
            color="#c62828",
            markersize=8,
            label="decision share shifted",
            clip_on=False,
        )
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("share of rows", fontsize=8)
    date_axis(ax, dates)
    ax.legend(fontsize=8, frameon=False, ncol=min(5, len(present) + 1), loc="lower left", bbox_to_anchor=(0.0, 1.04))
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.12, top=0.82)
    return png_data(fig)


def event_rate_png(history: MonitoringHistory, event: str) -> str:
    """Observed event rate with its interval and the expected rate, per partition and model version."""
    metrics = history.metrics.filter(pl.col("labelled") > 0).sort("partition_date")
    fig, ax = new_figure()
    if metrics.is_empty():
        ax.text(0.5, 0.5, "no labelled predictions yet", ha="center", va="center", transform=ax.transAxes)
        return png_data(fig)
    dates = sorted(set(metrics["partition_date"].to_list()))
    position = {d: i for i, d in enumerate(dates)}
    versions = sorted(set(metrics["model_version"].to_list()))
    for i, version in enumerate(versions):
        rows = metrics.filter(pl.col("model_version") == version)
        offset = (i - (len(versions) - 1) / 2) * 0.12
        x = np.array([position[d] for d in rows["partition_date"].to_list()]) + offset
        observed = rows["observed_rate"].to_numpy()
        err = np.vstack([observed - rows["observed_low"].to_numpy(), rows["observed_high"].to_numpy() - observed])
        colour = VERSION_COLOURS[i % len(VERSION_COLOURS)]
        level = rows["interval_level"][0]
        ax.errorbar(
            x,
            observed,
            yerr=err,
            fmt="o",
            color=colour,
            capsize=3,
            markersize=4,
            label=f"observed, v{version} ({level:.0%} interval)",
        )
        ax.plot(
            x,
            rows["expected_rate"].to_numpy(),
            "_",
            color=colour,
            markersize=14,
            markeredgewidth=2,
            label=f"expected, v{version}",
        )
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"share of rows: {event}"[:60], fontsize=8)
    date_axis(ax, dates)
    ax.legend(fontsize=8, frameon=False, ncol=4, loc="lower left", bbox_to_anchor=(0.0, 1.0))
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.12, top=0.84)
    return png_data(fig)


def calibration_png(history: MonitoringHistory, version: str) -> str:
    """Event rate against mean probability per bin, the range's bins added up; ideal on the diagonal."""
    bins = (
        history.calibration.filter(pl.col("model_version") == version)
        .group_by("bin")
        .agg(pl.col("rows").sum(), pl.col("events").sum(), pl.col("probability_sum").sum())
        .filter(pl.col("rows") > 0)
        .sort("bin")
    )
    fig, ax = new_figure(4.6, 3.6)
    top = 0.05
    if not bins.is_empty():
        mean_p = (bins["probability_sum"] / bins["rows"]).to_numpy()
        rate = (bins["events"] / bins["rows"]).to_numpy()
        intervals = [
            event_rate_interval(int(e), int(n), 0.95) for e, n in zip(bins["events"], bins["rows"], strict=True)
        ]
        err = np.array(
            [
                [r - lo for (lo, _), r in zip(intervals, rate, strict=True)],
                [hi - r for (_, hi), r in zip(intervals, rate, strict=True)],
            ]
        )
        ax.errorbar(
            mean_p, rate, yerr=err, fmt="o-", color="#1565c0", capsize=3, markersize=4, label="bins (95% interval)"
        )
        top = float(max(mean_p.max(), np.nanmax([hi for _, hi in intervals]))) * 1.08
    ax.plot([0, top], [0, top], "--", color="#777", linewidth=1, label="perfect calibration")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("mean calibrated probability", fontsize=8)
    ax.set_ylabel("observed event rate", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title(f"model version {version}", fontsize=9, loc="left")
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.13, top=0.92)
    return png_data(fig)


def figure_html(name: str, caption: str, png: str) -> str:
    return (
        f'<figure class="plot" data-plot="{esc(name)}"><figcaption>{caption}</figcaption>'
        f'<img alt="{esc(name)}" src="data:image/png;base64,{png}"></figure>'
    )


def row_cells(values: list[Any]) -> str:
    out = []
    for v in values:
        numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
        cls = ' class="n"' if numeric else ""
        out.append(f"<td{cls}>{esc(cell_text(v) if not isinstance(v, str) else v)}</td>")
    return "".join(out)


def _performance_section(history: MonitoringHistory) -> str:
    rows = realized_performance_rows(history)
    header = list(dict.fromkeys(k for r in rows for k in r)) or ["date"]
    body = []
    for r in rows:
        cls = ' class="unknown"' if r.get("labels_unknown_entity") else ""
        body.append(f"<tr{cls}>" + row_cells([r.get(h, "—") for h in header]) + "</tr>")
    return "<h2>Realized performance</h2>" + html_table([h.replace("_", " ") for h in header], body)


def _precision_section(history: MonitoringHistory, words: JobWords) -> str:
    actions = words.actions
    # Partitions measured before the pooled row was renamed call it `any adverse`: pooled with the others all the same.
    decisions = history.decisions
    if decisions.height:
        decisions = decisions.with_columns(pl.col("decision").replace(ANY_ACTION_BEFORE, ANY_ACTION))
    body = []
    if not decisions.is_empty():
        events = history.metrics.group_by("model_version").agg(pl.col("events").sum().alias("all_events"))
        pooled = (
            decisions.group_by("model_version", "decision", maintain_order=True)
            .agg(pl.col("rows").sum(), pl.col("events").sum())
            .join(events, on="model_version", how="left")
        )
        rank = {d: i for i, d in enumerate([*actions, ANY_ACTION])}
        pooled = pooled.sort(
            pl.col("model_version"), pl.col("decision").replace_strict(rank, default=len(rank), return_dtype=pl.Int64)
        )
        for r in pooled.iter_rows(named=True):
            precision = r["events"] / r["rows"] if r["rows"] else float("nan")
            recall = r["events"] / r["all_events"] if r["all_events"] else float("nan")
            shown = r["decision"] if r["decision"] == ANY_ACTION else words.decision(r["decision"])
            body.append(
                "<tr>"
                + row_cells([r["model_version"], shown, r["rows"], r["events"], percent(precision), percent(recall)])
                + "</tr>"
            )
    heading = (
        f"Actions against outcomes: {words.actions_text(conjunction='and')}" if actions else "Actions against outcomes"
    )
    return (
        f"<h2>{esc(heading)}</h2>"
        '<p class="muted">Labelled rows of the whole range, for the decisions that act on the entity: precision = events '
        f"({esc(words.subject)}) among the rows given the decision, recall = share of all events that got it; "
        f"<i>{esc(ANY_ACTION)}</i>: any of them.</p>"
        + html_table(["model version", "decision", "labelled rows", "events", "precision", "recall"], body)
    )


def _measures_text(by: dict[str, dict[str, Any]]) -> str:
    return ", ".join(
        f"{m} {by[m]['champion']:.4f} → {by[m]['challenger']:.4f} (Δ {by[m]['delta']:+.4f}, {interval_text_plain(by[m])})"
        for m in ("auc", "brier", "ece")
        if m in by
    )


def challenger_lines(history: MonitoringHistory) -> list[str]:
    """Per labelled partition a challenger shadowed, then pooled over the range: both models' AUC, Brier and
    ECE, the differences' intervals and the recommendation."""
    lines = []
    for (day,), rows in history.shadow_outcomes.group_by(["partition_date"], maintain_order=True):
        by = {r["measure"]: r for r in rows.iter_rows(named=True)}
        first = next(iter(by.values()))
        lines.append(
            f"{day}: champion {first['champion_version']} vs challenger {first['challenger_version']} on {first['rows']} labelled rows: "
            f"{_measures_text(by)}; {first['recommendation']}"
        )
    for pooled in history.pooled_comparisons:
        lines.append(
            f"pooled over {pooled['partitions']} partition(s) {pooled['first_date']}..{pooled['last_date']}: champion "
            f"{pooled['champion_version']} vs challenger {pooled['challenger_version']} on {pooled['rows']} labelled rows"
            + (f" (an md5 sample of entities, of {pooled['sample_of']})" if pooled.get("sample_of") else "")
            + ": "
            f"{_measures_text({r['measure']: r for r in pooled['measures']})}; {pooled['recommendation']}"
        )
    return lines


def interval_text_plain(row: dict[str, Any]) -> str:
    low, high = row["delta_low"], row["delta_high"]
    return (
        "no interval"
        if low is None or high is None or math.isnan(low) or math.isnan(high)
        else f"{low:+.4f} to {high:+.4f}"
    )


def _challenger_section(history: MonitoringHistory) -> str:
    if not history.shadow_outcomes.height:
        return ""
    rows = [
        "<tr>"
        + row_cells(
            [
                r["partition_date"],
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
        for r in history.shadow_outcomes.iter_rows(named=True)
    ] + [
        "<tr>"
        + row_cells(
            [
                f"pooled {p['first_date']}..{p['last_date']}",
                p["champion_version"],
                p["challenger_version"],
                r["measure"],
                p["rows"],
                r["champion"],
                r["challenger"],
                r["delta"],
                interval_text_plain(r),
                r["better"],
            ]
        )
        + "</tr>"
        for p in history.pooled_comparisons
        for r in p["measures"]
    ]
    recommendations = "".join(f"<li>{esc(line)}</li>" for line in challenger_lines(history))
    return (
        "<h2>Champion and challenger on labels</h2>"
        '<p class="muted">Both models on the same labelled rows (table <code>shadow_outcomes</code>); the difference is the '
        "challenger's minus the champion's, with its paired bootstrap interval.</p>"
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
            rows,
        )
        + f"<ul>{recommendations}</ul>"
    )


def labels_section(history: MonitoringHistory) -> str:
    body = []
    for r in history.partitions.sort("partition_date").iter_rows(named=True):
        cls = ' class="unknown"' if r["labels_unknown_entity"] else ""
        body.append(
            f"<tr{cls}>"
            + row_cells(
                [
                    r["partition_date"].isoformat(),
                    r["status"],
                    r["predictions"],
                    r["predictions_labelled"],
                    r["labels"],
                    r["labels_matched"],
                    r["labels_quarantined"],
                    r["labels_unknown_entity"],
                    r["labels_duplicate"],
                    r["labels_without_outcome"],
                ]
            )
            + "</tr>"
        )
    header = [
        "date",
        "status",
        "predictions",
        "with outcome",
        "labels",
        "matched",
        "quarantined entity",
        "unknown entity",
        "duplicates",
        "without outcome",
    ]
    return (
        "<h2>Labels per partition</h2>"
        '<p class="muted">Every label is kept in <code>outcome_labels</code> with the status of its entity: labels of '
        "entities the partition quarantined or never saw are counted here; unknown entities are highlighted.</p>"
        + html_table(header, body)
    )


def flags_section(history: MonitoringHistory) -> str:
    frame = history.decision_monitoring
    body = []
    if not frame.is_empty():
        for r in (
            frame.filter(pl.col("flag") == "shift").sort("partition_date", "measure", "item").iter_rows(named=True)
        ):
            body.append(
                "<tr>"
                + row_cells(
                    [
                        r["partition_date"].isoformat(),
                        r["measure"],
                        r["item"],
                        r["value"],
                        r["baseline"],
                        r["delta"],
                        r["tolerance"],
                        r["baseline_partitions"],
                    ]
                )
                + "</tr>"
            )
    note = "" if not frame.is_empty() else '<p class="muted">No decision monitoring rows in this range.</p>'
    header = ["date", "measure", "item", "value", "trailing mean", "delta", "tolerance", "partitions in window"]
    return "<h2>Decision-monitoring flags</h2>" + note + html_table(header, body)


def monitoring_page_html(history: MonitoringHistory, *, words: JobWords) -> str:
    """A binary job's whole monitoring page as one string (a forecast job's: tasks/reports/forecast_monitoring_page.py); every
    text from the inputs is HTML-escaped.

    `words` are the job's own: its event, score, decisions in rule-table order by their plain names, and which of
    them are actions (coloured apart in the decision mix, measured against outcomes).
    """
    event = words.subject
    title = f"Prediction monitoring {history.job} {history.first_date}..{history.last_date}"
    versions = sorted(set(history.calibration["model_version"].to_list()))
    calibration = (
        "".join(
            figure_html(
                f"calibration-{v}", f"<b>Calibration</b> of model version {esc(v)}", calibration_png(history, v)
            )
            for v in versions
        )
        or '<p class="muted">No labelled predictions yet.</p>'
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}{MONITORING_CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1>"
        f'<p class="meta">job <b>{esc(history.job)}</b> · event: {esc(event)} · {esc(words.score_meaning)} · partitions '
        f"<b>{esc(history.first_date)}</b> to <b>{esc(history.last_date)}</b></p>"
        "<h2>Decision mix over time</h2>"
        '<div class="plots wide">'
        + figure_html(
            "decision-mix",
            '<b>Share of rows per decision</b> <span class="muted">▼ a decision share moved '
            "beyond tolerance against the trailing window</span>",
            decision_mix_png(history, words=words),
        )
        + "</div><h2>Expected vs observed event rate</h2>"
        '<div class="plots wide">'
        + figure_html(
            "event-rate",
            "<b>Observed event rate</b> with its interval, and the <b>expected</b> rate "
            "(mean calibrated probability of the same rows)",
            event_rate_png(history, event),
        )
        + '</div><h2>Calibration per model version</h2><div class="plots">'
        + calibration
        + "</div>"
        + _performance_section(history)
        + _precision_section(history, words)
        + labels_section(history)
        + flags_section(history)
        + _challenger_section(history)
        + estimated_vs_realized_section(history.estimates, history.model_health, new_figure, png_data, figure_html)
        + attribution_section(history.model_health, new_figure, png_data, figure_html)
        + multivariate_section(history.model_health, new_figure, png_data, figure_html)
        + slices_section(history.slices)
        + "</body></html>\n"
    )
