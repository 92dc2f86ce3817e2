"""Registration of a forecast model's interval: the error model and the split-conformal scores.

The hold-out is shuffled (seeded) and split three ways: FIT_SHARE of the rows fit the error model
(tasks/inference/error_model.py), CALIBRATION_SHARE give crepes' ConformalRegressor its normalized
nonconformity scores, kept per bin of σ̂ (Mondrian: `_difficulty_edges`), and the rest are held back to check, before anything is registered, what the
interval does on rows that played no part in it: its coverage and width, on the easy and the hard
half of the rows. The calibration part also fits how the error model's σ̂ turn into a partition's
estimated MAE and RMSE before actuals land (`estimated_error`, tasks/monitoring/health.py). crepes (maintained, tested) does the fit and the held-back intervals; the
prediction layer applies the stored scores at the spec's level with crepes' own formula
(tasks/prediction/forecasts.py), and the check below refuses to register if the two ever disagree.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.errors import MissingExtra, PartitionError
from tasks.inference.error_model import ErrorModel, inference_fitted_error_model
from tasks.monitoring.health import fitted_error_estimator
from tasks.prediction.forecasts import METHOD, ForecastMap, predict_difficulty_bin, predict_forecast_values

FIT_SHARE = 0.4
CALIBRATION_SHARE = 0.4
MIN_HOLDOUT_ROWS = 200
DIFFICULTY_BINS = 5
BIN_ROWS = 250
"""Calibration rows a difficulty bin holds at least: its 90 % quantile then rests on 25 rows above it."""
SPLIT_SEED = 20261205


@dataclass(frozen=True)
class IntervalCheck:
    """What the interval did on the held-back rows at the spec's level."""

    level: float
    rows: int
    coverage: float
    mean_width: float
    easy_half_width: float
    hard_half_width: float
    mae: float
    rmse: float
    bias: float
    """Mean of actual − forecast."""

    def as_json(self) -> dict[str, Any]:
        return {k: float(v) if isinstance(v, float) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class FittedInterval:
    interval: dict[str, Any]
    """metadata.interval, read by tasks/prediction/forecasts.py ForecastMap."""
    check: IntervalCheck


def _crepes():  # noqa: ANN202  (the crepes module)
    try:
        # crepes turns every UserWarning to "always" when imported (warnings.simplefilter at module level): the filters
        # in force before, such as scikit-learn's feature-names warning that engine_sklearn silences, are kept.
        with warnings.catch_warnings():
            import crepes
    except ImportError:
        raise MissingExtra(
            "registering a forecast model (target.kind regression or count) fits its conformal interval with crepes, which is not "
            "installed: pip install 'batch-scoring[forecast]'"
        ) from None
    return crepes


def _difficulty_edges(sigma: np.ndarray) -> np.ndarray:
    """Cuts of σ̂ into up to DIFFICULTY_BINS bins of at least BIN_ROWS calibration rows each (fewer on a small
    hold-out, none below 2 × BIN_ROWS); σ̂ from trees has ties, so a cut that would leave a bin short is dropped."""
    bins = max(1, min(DIFFICULTY_BINS, sigma.size // BIN_ROWS))
    edges = np.unique(np.quantile(sigma, np.arange(1, bins) / bins))
    while edges.size:
        counts = np.bincount(predict_difficulty_bin(sigma, edges), minlength=edges.size + 1)
        if counts.min() >= BIN_ROWS:
            break
        edges = np.delete(edges, min(int(counts.argmin()), edges.size - 1))
    return edges


def fitted_conformal_interval(
    features: np.ndarray,
    margins: np.ndarray,
    outcomes: np.ndarray,
    *,
    link: str,
    level: float,
    nonnegative: bool,
    error_model_path: Path,
    model: str,
) -> FittedInterval:
    """Fit the error model (saved at `error_model_path`) and the conformal scores on the hold-out; check them on its held-back part."""
    crepes = _crepes()
    n = outcomes.size
    if n < MIN_HOLDOUT_ROWS:
        raise PartitionError(
            f"model {model}: the hold-out has {n} labelled rows; a forecast model's interval needs at least {MIN_HOLDOUT_ROWS} "
            f"({FIT_SHARE:.0%} fit its error model, {CALIBRATION_SHARE:.0%} calibrate the interval, the rest check it)"
        )
    order = np.random.default_rng(SPLIT_SEED).permutation(n)
    fit_end, calibration_end = int(n * FIT_SHARE), int(n * (FIT_SHARE + CALIBRATION_SHARE))
    fit, calibration, held = order[:fit_end], order[fit_end:calibration_end], order[calibration_end:]
    forecast = predict_forecast_values(margins, link)
    if nonnegative:
        forecast = np.maximum(forecast, 0.0)
    errors = outcomes - forecast
    inference_fitted_error_model(features[fit], margins[fit], np.abs(errors[fit]), error_model_path)
    sigma = ErrorModel(error_model_path).inference_expected_error(features, margins)
    # A row the error model calls error-free would get a zero-width interval; no row is narrower than
    # the 1st percentile of the fit rows' estimates (and never 0).
    floor = max(float(np.quantile(sigma[fit], 0.01)), 1e-6 * float(np.abs(errors[fit]).mean()) + 1e-12)
    sigma = np.maximum(sigma, floor)
    edges = _difficulty_edges(sigma[calibration])
    bins = predict_difficulty_bin(sigma, edges)
    regressor = crepes.ConformalRegressor().fit(
        residuals=errors[calibration], sigmas=sigma[calibration], bins=bins[calibration]
    )
    bin_values, bin_alphas = regressor.binned_alphas
    if list(bin_values) != list(range(edges.size + 1)):
        raise AssertionError(f"difficulty bins {list(bin_values)} are not 0..{edges.size}")
    interval = {
        "method": METHOD,
        "bin_edges": [float(e) for e in edges],
        "bin_alphas": [[float(a) for a in alphas] for alphas in bin_alphas],
        "sigma_floor": floor,
        "rows_fit": int(fit.size),
        "rows_calibration": int(calibration.size),
        "rows_check": int(held.size),
        "split_seed": SPLIT_SEED,
        "estimated_error": fitted_error_estimator(errors[calibration], sigma[calibration]),
    }
    bounds = regressor.predict_int(
        forecast[held], sigmas=sigma[held], bins=bins[held], confidence=level, y_min=0.0 if nonnegative else -np.inf
    )
    ours = ForecastMap(interval, level, link=link, nonnegative=nonnegative).predict_forecast(margins[held], sigma[held])
    if not (
        np.allclose(bounds[:, 0], ours.low, rtol=1e-12, atol=1e-9)
        and np.allclose(bounds[:, 1], ours.high, rtol=1e-12, atol=1e-9)
    ):
        raise AssertionError("the prediction layer's interval differs from crepes' on the held-back rows")
    width = bounds[:, 1] - bounds[:, 0]
    y = outcomes[held]
    easy = sigma[held] <= np.median(sigma[held])
    check = IntervalCheck(
        level=level,
        rows=int(held.size),
        coverage=float(((y >= bounds[:, 0]) & (y <= bounds[:, 1])).mean()),
        mean_width=float(width.mean()),
        easy_half_width=float(width[easy].mean()),
        hard_half_width=float(width[~easy].mean()) if (~easy).any() else float(width.mean()),
        mae=float(np.abs(errors[held]).mean()),
        rmse=float(np.sqrt((errors[held] ** 2).mean())),
        bias=float(errors[held].mean()),
    )
    interval["check"] = check.as_json()
    # What the estimator says of the held-back rows, beside what they did (`check`): it fitted on none of them;
    # and how far the held-back MAE and RMSE, the partitions' reference, are from the model's error by chance.
    estimator, held_sigma, held_errors = interval["estimated_error"], sigma[held], errors[held]
    estimator["check_mae"] = float(estimator["mae_scale"] * held_sigma.mean())
    estimator["check_rmse"] = float(np.sqrt(estimator["mse_scale"] * (held_sigma**2).mean()))
    estimator["check_mae_se"] = float(np.abs(held_errors).std(ddof=1) / np.sqrt(held.size))
    estimator["check_rmse_se"] = float(
        (held_errors**2).std(ddof=1) / np.sqrt(held.size) / (2.0 * max(check.rmse, 1e-300))
    )
    return FittedInterval(interval=interval, check=check)
