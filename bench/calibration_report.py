"""Calibration and interval coverage of the demo credit model on a fresh labelled hold-out, as JSON.

    .venv/bin/python bench/calibration_report.py --holdout-rows 200000

Trains the demo model as `score demo` does (its calibration is fitted on held-out training rows),
then draws new demo days after the training window — never seen by training or calibration —
scores them through the same guards, features, engine and probability map, and joins their
labels. Prints the expected calibration error (20 equal-count bins) and, over bins with at least
`--min-rows` rows, the share whose observed default rate lies inside the bin's mean interval, then
the range of probabilities the registered map can reach and its calibration table with warnings.
Targets: ECE ≤ 0.02; coverage ≥ interval level − 5 points.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
from pathlib import Path

import tasks  # noqa: F401
from tasks.demo.credit_data import demo_dates, write_demo_partitions
from tasks.demo.holdout import scored_with_labels
from tasks.demo.setup import DEMO_JOB, prepared_demo
from tasks.inference.registry import inference_model_artifact
from tasks.jobspec import load_job_spec
from tasks.prediction.calibration_check import predict_calibration_report, predict_calibration_table
from tasks.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-days", type=int, default=14)
    parser.add_argument("--rows-per-day", type=int, default=20_000, help="training rows per day, as `score demo`")
    parser.add_argument("--holdout-rows", type=int, default=200_000)
    parser.add_argument("--holdout-days", type=int, default=4)
    parser.add_argument("--min-rows", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    end = dt.date(2026, 6, 30)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp))
        plan = prepared_demo(
            settings, days=1, rows_per_day=args.rows_per_day, train_days=args.train_days, seed=args.seed, end=end
        )
        holdout = demo_dates(end + dt.timedelta(days=args.holdout_days), args.holdout_days)
        write_demo_partitions(
            settings.data_dir / "raw" / DEMO_JOB,
            settings.data_dir / "labels" / DEMO_JOB,
            holdout,
            rows_per_day=args.holdout_rows // args.holdout_days,
            seed=args.seed + 1,
            shift_days=0,
        )
        scored = scored_with_labels(settings, DEMO_JOB, holdout)
        spec = load_job_spec(DEMO_JOB, settings)
        level = spec.prediction.interval_level
        calibration = inference_model_artifact(
            settings.model_registry_dir(spec.model.name), plan.model_version
        ).metadata.calibration
        table = predict_calibration_table(calibration, level=level)
        report = predict_calibration_report(
            scored["probability"].to_numpy(),
            scored["probability_low"].to_numpy(),
            scored["probability_high"].to_numpy(),
            scored["outcome"].to_numpy(),
            interval_level=level,
            min_rows=args.min_rows,
        )
    print(
        json.dumps(
            {
                "bench": "calibration",
                "model_version": plan.model_version,
                "train_rows": args.train_days * args.rows_per_day,
                "holdout_rows": report.rows,
                "events": report.events,
                "ece": round(report.ece, 4),
                "interval_level": level,
                "bins_checked": report.bins_checked,
                "bins_covered": report.bins_covered,
                "coverage_share": round(report.coverage_share, 3),
                "ece_ok": report.ece <= 0.02,
                "coverage_ok": report.coverage_share >= level - 0.05,
                "calibration_method": table.method,
                "reachable_low": round(table.reachable_low, 4),
                "reachable_high": round(table.reachable_high, 4),
            }
        )
    )
    print(f"\n{'rows':>7} {'mean p':>8} {'observed':>9} {'interval':>17}  in")
    for b in report.bins:
        print(
            f"{b['rows']:>7} {b['mean_probability']:>8.4f} {b['observed_rate']:>9.4f} "
            f"[{b['interval_low']:.4f}, {b['interval_high']:.4f}]  {'yes' if b['covered'] else 'NO'}"
        )

    print(f"\nreachable probability over the held-out margins: {table.reachable_low:.4f} – {table.reachable_high:.4f}")
    print(f"{'bin':>4} {'rows':>6} {'events':>7} {'margins':>17} {'probability':>15} {'interval':>17}")
    for b in table.bins:
        print(
            f"{b['bin']:>4} {b['rows']:>6} {b['events']:>7} [{b['margin_low']:7.2f}, {b['margin_high']:7.2f}] "
            f"{b['probability_from']:.4f}–{b['probability_to']:.4f} [{b['interval_low']:.4f}, {b['interval_high']:.4f}]"
        )
    for warning in table.warnings:
        print(f"warning: {warning}")


if __name__ == "__main__":
    main()
