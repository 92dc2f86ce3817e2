"""What a run printed at the terminal: the partitions' summary table, the realized performance once labels
landed, and one line each on a forecast, a classification, the model's health and the challenger."""

from __future__ import annotations

import datetime as dt

from cli.console import console, print_line
from flows.steps.blocks import configured_warehouse, with_warehouse_url
from tasks.errors import ScoringError
from tasks.jobspec import load_job_spec
from tasks.reports.reporting import partition_summaries, partition_summary_table
from tasks.settings import current_settings


def print_summary(job: str, dates: list[dt.date]) -> None:
    settings = with_warehouse_url(current_settings())
    try:
        words = load_job_spec(job, settings).words
    except ScoringError:
        # The table is printed after a failed run too: a spec broken since keeps its error, the table its stored names.
        words = None
    console.print(partition_summary_table(job, partition_summaries(settings, job, dates), words))
    reports = [p for d in dates if (p := settings.run_page_path(job, d.isoformat())).exists()]
    if reports:
        console.print(
            f"run report{'s' if len(reports) > 1 else ''}: "
            + (str(reports[0]) if len(reports) == 1 else str(reports[0].parent))
        )


def print_realized_performance(job: str, dates: list[dt.date]) -> None:
    from tasks.monitoring.history import monitoring_history, unmatched_label_counts
    from tasks.reports.monitoring_page import (
        challenger_lines,
        realized_class_rows,
        realized_class_table,
        realized_error_rows,
        realized_error_table,
        realized_performance_rows,
        realized_performance_table,
        unmatched_labels_text,
    )

    settings = with_warehouse_url(current_settings())
    spec = load_job_spec(job, settings)
    monitoring = spec.monitoring
    level = monitoring.outcome_interval_level
    history = monitoring_history(
        configured_warehouse(settings),
        job,
        first_date=min(dates),
        last_date=max(dates),
        level=level,
        bins=monitoring.calibration_bins,
    )
    if spec.target.forecasts:
        console.print(realized_error_table(job, realized_error_rows(history)))
    elif spec.target.classifies:
        console.print(
            realized_class_table(job, realized_class_rows(history), interval_level=monitoring.health.interval_level)
        )
    else:
        console.print(realized_performance_table(job, realized_performance_rows(history), interval_level=level))
    print_line(unmatched_labels_text(unmatched_label_counts(history)))
    for line in challenger_lines(history):
        print_line(f"challenger: {line}")
    console.print(f"monitoring page: {settings.monitoring_page_path(job)}")


def _estimate(values: list[float] | None, fmt: str) -> str:
    """`value (low–high)`, or n/a where there is no estimate."""
    if not values or any(v is None or v != v for v in values):
        return "n/a"
    value, low, high = values
    return f"{value:{fmt}} ({low:{fmt}}–{high:{fmt}})"


def print_forecast(result: dict) -> None:
    """A forecast job's run in one line: what it forecast on average, how wide its intervals were, its decisions' shares."""
    forecast = result.get("forecast")
    if not forecast or forecast["mean"] is None:
        return
    unit = f" {forecast['unit']}" if forecast["unit"] else ""
    scored = max(result.get("rows_scored") or 0, 1)
    decisions = ", ".join(
        f"{d} {n / scored:.1%}" for d, n in sorted((result.get("decisions") or {}).items(), key=lambda kv: -kv[1])
    )
    print_line(
        f"{forecast['kind']} forecast of {forecast['name']}: mean {forecast['mean']:.4g}{unit}, mean width of the "
        f"{forecast['interval_level']:.0%} interval {forecast['mean_interval_width']:.4g}{unit}"
        + (f"; decisions {decisions}" if decisions else "")
    )


def print_classification(result: dict) -> None:
    """A multiclass job's run in one line: each class's share of the rows, the mean probability of the predicted
    class, the close calls and the decisions' shares."""
    classified = result.get("classification")
    if not classified or not classified["rows"]:
        return
    shares = ", ".join(f"{c} {share:.1%}" for c, share in classified["predicted_share"].items())
    scored = max(result.get("rows_scored") or 0, 1)
    decisions = ", ".join(
        f"{d} {n / scored:.1%}" for d, n in sorted((result.get("decisions") or {}).items(), key=lambda kv: -kv[1])
    )
    print_line(
        f"classes of {classified['name']}: {shares}; mean probability of the predicted class {classified['mean_probability']:.3f}; "
        f"margin < {classified['low_margin_cut']:g} on {classified['low_margin_share']:.1%} of rows"
        + (f"; decisions {decisions}" if decisions else "")
    )


def print_model_health(result: dict) -> None:
    """One line of the run's model health before labels, and its flags, when the job measures it: a binary job's
    expected event rate and AUC, a multiclass job's estimated accuracy and macro F1, a forecast job's estimated error
    where the run estimated it."""
    health = result.get("model_health") or {}
    shifted = (result.get("decision_monitoring") or {}).get("shifted_slices", [])
    if not health and not shifted:
        return
    if result.get("classification") is not None:
        line = (
            f"model health: estimated accuracy {_estimate(health.get('accuracy'), '.2%')}, "
            f"estimated macro F1 {_estimate(health.get('macro_f1'), '.3f')}; "
            f"flagged: {', '.join(health.get('flagged', [])) or 'nothing'}"
        )
    elif result.get("forecast") is not None:
        unit = f" {result['forecast']['unit']}" if result["forecast"]["unit"] else ""
        estimates = [
            f"estimated {label} {_estimate(health[measure], '.4g')}{unit}"
            + (
                f" (at registration {reference:.4g})"
                if (reference := health.get(f"{measure}_reference")) is not None
                else ""
            )
            for measure, label in (("mae", "MAE"), ("rmse", "RMSE"))
            if health.get(measure)
        ]
        line = "model health: " + "; ".join(
            [*estimates, f"flagged: {', '.join(health.get('flagged', [])) or 'nothing'}"]
        )
    else:
        line = (
            f"model health: expected event rate {_estimate(health.get('event_rate'), '.2%')}, "
            f"expected AUC {_estimate(health.get('auc'), '.3f')}; "
            f"flagged: {', '.join(health.get('flagged', [])) or 'nothing'}"
        )
    if shifted:
        line += f"; slices shifted: {len(shifted)} (table slice_monitoring)"
    print_line(line)


def print_challenger(result: dict) -> None:
    """One line on the challenger that shadowed the run, when the job names one."""
    shadow = result.get("challenger")
    if not shadow:
        return
    if shadow["challenger_version"] is None:
        # Nothing was compared: "0 of 0 decisions would flip" would read as agreement.
        print_line(
            f"challenger not loaded: it could score none of {shadow['rows_failed']:,} rows, so nothing was compared "
            "(fallback report challenger_failed; score aliases shows where the challenger alias points)"
        )
        return
    share = "" if shadow["flipped_share"] is None else f" ({shadow['flipped_share']:.2%})"
    line = (
        f"challenger {shadow['challenger_version']}: {shadow['rows_flipped']} of {shadow['rows_compared']} "
        f"decisions would flip{share}"
        + (f": {', '.join(shadow['top_flips'])}" if shadow["top_flips"] else "")
        + (f"; it failed on {shadow['rows_failed']} rows" if shadow["rows_failed"] else "")
        + " (table decision_flips)"
    )
    print_line(line)
