"""What `score register` (and the demo's forecast job) prints of a registered model's check on the hold-out."""

from __future__ import annotations

from rich.table import Table

from cli.console import console, print_note, print_warning


def _calibration_table(bins: list[dict], *, title: str) -> Table:
    table = Table(title=title)
    for column in ("bin", "rows", "events", "observed", "margin", "probability", "interval"):
        table.add_column(column, justify="right")
    for b in bins:
        table.add_row(
            str(b["bin"]),
            f"{b['rows']:,.0f}",
            f"{b['events']:,.0f}",
            f"{b['observed_rate']:.3f}",
            f"{b['margin_low']:.2f} .. {b['margin_high']:.2f}",
            f"{b['probability_from']:.3f} .. {b['probability_to']:.3f}",
            f"{b['interval_low']:.3f} .. {b['interval_high']:.3f}",
        )
    return table


def print_registration(report) -> None:  # noqa: ANN001  (tasks.jobs.registration.RegistrationReport, imported lazily)
    quality = report.calibration
    if report.class_calibration is not None:
        _print_class_registration(report)
        return
    if quality is None:
        print_forecast_registration(report)
        return
    auc = "n/a" if report.auc is None else f"{report.auc:.3f}"
    console.print(
        f"registered {report.model} version {report.version} ({report.framework}, {len(report.features)} features) at {report.directory}\n"
        f"hold-out: {report.rows:,} rows, {report.events:,} events ({report.events / max(report.rows, 1):.2%}), "
        f"{report.rows_quarantined:,} quarantined by the guards; AUC {auc}, ECE {quality.ece:.4f}; "
        f"drift reference: {report.reference_rows:,} rows",
        highlight=False,
    )
    console.print(
        _calibration_table(quality.table, title=f"calibration on the hold-out ({quality.interval_level:.0%} interval)")
    )
    console.print(
        f"reachable probability: {quality.reachable_low:.3g} .. {quality.reachable_high:.3g}", highlight=False
    )
    for note in report.notes:
        print_note(note)
    for warning in report.warnings:
        print_warning(warning)


def _print_class_registration(report) -> None:  # noqa: ANN001  (a multiclass model's RegistrationReport)
    check = report.class_calibration
    how = (
        "out of fold: each half calibrated by the other"
        if check.get("out_of_fold")
        else "in sample: a half lacked a class"
    )
    console.print(
        f"registered {report.model} version {report.version} ({report.framework}, multiclass, {len(check['classes'])} classes, "
        f"{len(report.features)} features) at {report.directory}\n"
        f"hold-out: {report.rows:,} rows, {report.rows_quarantined:,} quarantined by the guards; accuracy {check['accuracy']:.3f}, "
        f"log loss {check['log_loss']:.4f} (uncalibrated {check['uncalibrated_log_loss']:.4f}), classwise ECE {check['classwise_ece']:.4f}; "
        f"drift reference: {report.reference_rows:,} rows",
        highlight=False,
    )
    table = Table(title=f"calibration per class on the hold-out ({how})")
    for column in ("class", "hold-out rows", "mean probability", "observed share", "ECE"):
        table.add_column(column)
    for row in check["classes"]:
        bins = row.get("bins") or []
        rows = sum(b["rows"] for b in bins) or 1
        mean_p = sum(b["mean_probability"] * b["rows"] for b in bins) / rows if bins else float("nan")
        observed = sum(b["observed_rate"] * b["rows"] for b in bins) / rows if bins else float("nan")
        table.add_row(row["class"], f"{row['rows']:,}", f"{mean_p:.4f}", f"{observed:.4f}", f"{row['ece']:.4f}")
    console.print(table)
    for note in report.notes:
        print_note(note)
    for warning in report.warnings:
        print_warning(warning)


def print_forecast_registration(report) -> None:  # noqa: ANN001  (a forecast model's RegistrationReport)
    check = report.interval
    console.print(
        f"registered {report.model} version {report.version} ({report.framework}, {report.target} forecast, {len(report.features)} features) "
        f"at {report.directory}\n"
        f"hold-out: {report.rows:,} rows, {report.rows_quarantined:,} quarantined by the guards; drift reference: {report.reference_rows:,} rows",
        highlight=False,
    )
    table = Table(
        title=f"on {check.rows:,} held-back hold-out rows (they fitted neither the error model nor the interval)"
    )
    for column in ("measure", "value"):
        table.add_column(column)
    for measure, value in (
        ("MAE", f"{check.mae:.4g}"),
        ("RMSE", f"{check.rmse:.4g}"),
        ("bias (actual − forecast)", f"{check.bias:+.4g}"),
        (f"interval coverage (level {check.level:.0%})", f"{check.coverage:.1%}"),
        ("mean interval width", f"{check.mean_width:.4g}"),
        ("mean width, easy half of rows", f"{check.easy_half_width:.4g}"),
        ("mean width, hard half of rows", f"{check.hard_half_width:.4g}"),
    ):
        table.add_row(measure, value)
    console.print(table)
    for note in report.notes:
        print_note(note)
    for warning in report.warnings:
        print_warning(warning)
