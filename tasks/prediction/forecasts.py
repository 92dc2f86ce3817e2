"""A forecast job's prediction: the model's margin → the forecast, with its split-conformal interval.

Method `split_conformal_normalized` (what registration fits, with crepes' ConformalRegressor): the
hold-out is split three ways. On the first part a small model of the forecast's absolute error
E|y − ŷ| given the inputs is fitted (the error model, an inference artifact: it runs beside the
final model in the pass). On the second, the normalized nonconformity scores |y − ŷ| / σ̂ (σ̂ the
error model's estimate, never below `sigma_floor`) are kept, sorted descending — crepes' `alphas`.
The third is held back to check the interval's coverage and width at registration.

The scores are kept per difficulty bin (crepes' Mondrian conformal regressor): the calibration rows are
cut at quantiles of σ̂ (`bin_edges`) and each bin keeps its own sorted scores (`bin_alphas`), so the
interval holds its level among easy rows and among hard rows alike, not only on average (an error
model that underrates the busiest rows would otherwise leave them under-covered and the quiet ones
over-covered). Versions registered before the bins keep one list (`alphas`).

At scoring, the interval at level L is ŷ ± q·σ̂ where q is the alpha crepes' `predict_int` takes for
the row's bin: the ⌊(1 − L)(n + 1)⌋-th largest of the bin's n scores (an interval of unbounded width
when n is too small for L). A row whose inputs make the model err more gets a wider interval; the
coverage guarantee (≥ L on exchangeable rows, within each bin) is that of split conformal prediction.
Count forecasts and their intervals are clipped at 0, as crepes clips at `y_min`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

METHOD = "split_conformal_normalized"
LINKS = ("identity", "log")


@dataclass(frozen=True)
class Forecast:
    """One chunk's forecasts and their interval, on the target's scale."""

    forecast: np.ndarray
    low: np.ndarray
    high: np.ndarray


def predict_conformal_quantile(alphas: np.ndarray, level: float) -> float:
    """The normalized half-width at coverage `level`: crepes' `alphas[int((1 - level)(n + 1)) - 1]` of
    scores sorted descending; inf when the n scores are too few for `level`."""
    index = int((1 - level) * (len(alphas) + 1)) - 1
    return float(alphas[index]) if index >= 0 else float("inf")


def predict_difficulty_bin(sigma: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The difficulty bin of each row's σ̂: the number of bin edges at or below it."""
    return np.searchsorted(edges, sigma, side="right")


def predict_forecast_values(margins: np.ndarray, link: str) -> np.ndarray:
    """The forecast from the model's margin: the margin itself (identity link), or exp of it (log link:
    Poisson, Tweedie, gamma objectives)."""
    margins = np.asarray(margins, dtype=np.float64)
    if link == "identity":
        return margins
    if link == "log":
        return np.exp(margins)
    raise ValueError(f"link {link!r} is not one of {LINKS}")


class ForecastMap:
    """A fitted conformal interval at one coverage level, ready to apply to chunks."""

    def __init__(self, interval: Mapping[str, Any], level: float, *, link: str, nonnegative: bool) -> None:
        if interval.get("method") != METHOD:
            raise ValueError(f"interval method {interval.get('method')!r} is not {METHOD!r}")
        self.level = level
        self.link = link
        self.sigma_floor = float(interval["sigma_floor"])
        if "bin_alphas" in interval:
            self.bin_edges = np.asarray(interval["bin_edges"], dtype=np.float64)
            self.quantiles = np.array(
                [predict_conformal_quantile(np.asarray(a, dtype=np.float64), level) for a in interval["bin_alphas"]]
            )
        else:
            self.bin_edges = np.empty(0)
            self.quantiles = np.array(
                [predict_conformal_quantile(np.asarray(interval["alphas"], dtype=np.float64), level)]
            )
        if self.quantiles.size != self.bin_edges.size + 1:
            raise ValueError(f"interval has {self.bin_edges.size} bin edges but {self.quantiles.size} lists of scores")
        self.nonnegative = nonnegative

    def predict_forecast(self, margins: np.ndarray, expected_abs_error: np.ndarray) -> Forecast:
        """Forecast and interval per row; `expected_abs_error` is the error model's σ̂ of each row."""
        forecast = predict_forecast_values(margins, self.link)
        if self.nonnegative:
            # A count below 0 is no forecast; the interval was calibrated around the clipped forecast too.
            forecast = np.maximum(forecast, 0.0)
        sigma = np.maximum(np.asarray(expected_abs_error, dtype=np.float64), self.sigma_floor)
        half = self.quantiles[predict_difficulty_bin(sigma, self.bin_edges)] * sigma
        low, high = forecast - half, forecast + half
        if self.nonnegative:
            low, high = np.maximum(low, 0.0), np.maximum(high, 0.0)
        return Forecast(forecast=forecast, low=low, high=high)
