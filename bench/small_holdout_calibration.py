"""Calibration on a small hold-out, as a user with a model trained elsewhere has one, as JSON lines.

    .venv/bin/python bench/small_holdout_calibration.py [--holdout-rows 1541] [--seeds 5]

A tabular generator (not the demo's) with ~3.5 % events and a small high-risk group; an XGBoost
model is trained on 8,000 rows, then calibrated on a hold-out of `--holdout-rows` by the method
registration uses now and by the equal-row method it used before (40 bins, pooled, flat beyond the
outer centres). Both are judged on 200,000 fresh rows of the same generator: the highest reachable
probability against the realized rate of the top 3 % of margins, the mean calibrated probability
there, and the ECE (10 equal-width bins). One line per seed, then the medians, with the ratios
new / old measured in the same run.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import xgboost as xgb
from scipy.special import expit

import tasks  # noqa: F401
from tasks.prediction.calibration import ProbabilityMap, predict_calibrator_from_metadata, predict_fitted_calibrator
from tasks.prediction.calibration_check import predict_calibration_quality

LEVEL = 0.9


def rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Six features; risk rises steeply in a small group with high debt and recent delinquencies."""
    x = rng.normal(size=(n, 6)).astype(np.float32)
    x[:, 5] = (rng.random(n) < 0.04).astype(np.float32)  # a rare flag
    logit = -4.4 + 0.7 * x[:, 0] + 0.4 * x[:, 1] - 0.3 * x[:, 2] + 3.6 * x[:, 5] + 1.2 * x[:, 5] * (x[:, 0] > 0)
    return x, (rng.random(n) < expit(logit)).astype(np.float64)


def equal_row_metadata(margins: np.ndarray, outcomes: np.ndarray, bins: int = 40) -> dict:
    """The calibration registration wrote before: equal-row bins, PAV on the raw rate, flat tails."""
    order = np.argsort(margins, kind="stable")
    pooled: list[list[float]] = []
    for g in np.array_split(order, bins):
        pooled.append([float(margins[g].sum()), float(outcomes[g].sum()), float(g.size)])
        while len(pooled) > 1 and pooled[-2][1] / pooled[-2][2] >= pooled[-1][1] / pooled[-1][2]:
            last = pooled.pop()
            pooled[-1] = [a + b for a, b in zip(pooled[-1], last, strict=True)]
    sums = np.array(pooled)
    return {
        "method": "binned_beta_jeffreys",
        "centers": (sums[:, 0] / sums[:, 2]).tolist(),
        "events": sums[:, 1].tolist(),
        "totals": sums[:, 2].tolist(),
    }


def measured(calibrator, margins: np.ndarray, outcomes: np.ndarray, top: np.ndarray) -> dict:
    quality = predict_calibration_quality(calibrator, margins, outcomes, level=LEVEL)
    p = ProbabilityMap(calibrator, LEVEL).predict_calibrated_probability(margins[top]).probability
    return {
        "bins": len(calibrator.centers),
        "reachable_high": quality.reachable_high,
        "top3_mean_probability": float(p.mean()),
        "ece_fresh": quality.ece,
        "warnings": len(quality.warnings),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--holdout-rows", type=int, default=1541)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    results = []
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        x, y = rows(8_000, rng)
        booster = xgb.train(
            {"objective": "binary:logistic", "max_depth": 3, "eta": 0.1, "seed": seed}, xgb.DMatrix(x, label=y), 150
        )
        hx, hy = rows(args.holdout_rows, rng)
        fx, fy = rows(200_000, rng)
        holdout_margin = booster.inplace_predict(hx, predict_type="margin")
        fresh_margin = booster.inplace_predict(fx, predict_type="margin")
        top = fresh_margin >= np.quantile(fresh_margin, 0.97)
        new = measured(predict_fitted_calibrator(holdout_margin, hy), fresh_margin, fy, top)
        old = measured(predict_calibrator_from_metadata(equal_row_metadata(holdout_margin, hy)), fresh_margin, fy, top)
        line = {
            "seed": seed,
            "holdout_rows": args.holdout_rows,
            "holdout_events": int(hy.sum()),
            "top3_realized_rate": float(fy[top].mean()),
            "new": new,
            "old": old,
        }
        results.append(line)
        print(json.dumps(line))
    realized = float(np.median([r["top3_realized_rate"] for r in results]))
    summary = {
        "median_top3_realized_rate": realized,
        "median_new": {
            k: float(np.median([r["new"][k] for r in results]))
            for k in ("reachable_high", "top3_mean_probability", "ece_fresh")
        },
        "median_old": {
            k: float(np.median([r["old"][k] for r in results]))
            for k in ("reachable_high", "top3_mean_probability", "ece_fresh")
        },
    }
    summary["ratio_top3_probability_to_realized"] = {
        "new": summary["median_new"]["top3_mean_probability"] / realized,
        "old": summary["median_old"]["top3_mean_probability"] / realized,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
