"""Binned Bayesian calibration: raw margin → probability of the event with a credible interval.

At training time the held-out margins are cut into quantile bins; adjacent bins whose observed
rates are out of order are pooled (pool-adjacent-violators), so the map is monotone. Each bin's
event rate gets a Beta posterior under the Jeffreys prior, Beta(k + ½, n − k + ½). At scoring time a
row's probability is the posterior mean, and its interval the equal-tailed credible interval at the
job's level, both interpolated linearly in margin between bin centres (flat beyond the outer ones).

The interval therefore says: "among applications the model scores like this one, the event rate
lies in [low, high] with the stated credibility" — it shrinks where training data was plentiful.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

METHOD = "binned_beta_jeffreys"


@dataclass(frozen=True)
class BinnedBetaCalibrator:
    centers: np.ndarray
    events: np.ndarray
    totals: np.ndarray

    @classmethod
    def fit(cls, margins: np.ndarray, outcomes: np.ndarray, *, bins: int = 40) -> BinnedBetaCalibrator:
        margins = np.asarray(margins, dtype=np.float64)
        outcomes = np.asarray(outcomes, dtype=np.float64)
        if margins.shape != outcomes.shape or margins.size < bins:
            raise ValueError(f"need at least {bins} held-out rows with one outcome each, got {margins.shape}/{outcomes.shape}")
        order = np.argsort(margins, kind="stable")
        groups = np.array_split(order, bins)
        blocks = [[float(margins[g].sum()), float(outcomes[g].sum()), float(g.size)] for g in groups if g.size]
        # Pool adjacent violators on the rate k/n, keeping sums so pooled bins stay exact.
        pooled: list[list[float]] = []
        for block in blocks:
            pooled.append(block)
            while len(pooled) > 1 and pooled[-2][1] / pooled[-2][2] >= pooled[-1][1] / pooled[-1][2]:
                last = pooled.pop()
                pooled[-1] = [a + b for a, b in zip(pooled[-1], last)]
        sums = np.array(pooled)
        return cls(centers=sums[:, 0] / sums[:, 2], events=sums[:, 1], totals=sums[:, 2])

    @classmethod
    def from_metadata(cls, calibration: dict[str, Any]) -> BinnedBetaCalibrator:
        """The calibrator a model's metadata holds; ValueError names the first key that is missing or unusable."""
        if not calibration:
            raise ValueError("is missing or empty: the model was registered without a calibration map")
        if calibration.get("method") != METHOD:
            raise ValueError(f"method {calibration.get('method')!r} is not {METHOD!r}")
        arrays = {}
        for key in ("centers", "events", "totals"):
            try:
                arrays[key] = np.asarray(calibration[key], dtype=np.float64)
            except KeyError:
                raise ValueError(f"has no {key!r}") from None
            except (TypeError, ValueError):
                raise ValueError(f"{key!r} is not a list of numbers") from None
            if arrays[key].ndim != 1 or arrays[key].size == 0 or not np.isfinite(arrays[key]).all():
                raise ValueError(f"{key!r} must be a non-empty list of finite numbers")
        centers, events, totals = arrays["centers"], arrays["events"], arrays["totals"]
        if not centers.size == events.size == totals.size:
            raise ValueError(f"centers, events and totals differ in length ({centers.size}, {events.size}, {totals.size})")
        if (np.diff(centers) <= 0).any():
            raise ValueError("'centers' must increase strictly")
        if (events < 0).any() or (totals <= 0).any() or (events > totals).any():
            raise ValueError("each bin needs 0 <= events <= totals and totals > 0")
        return cls(centers=centers, events=events, totals=totals)

    def to_metadata(self) -> dict[str, Any]:
        return {
            "method": METHOD,
            "centers": self.centers.tolist(),
            "events": self.events.tolist(),
            "totals": self.totals.tolist(),
        }

    def knots(self, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, low, high) of each bin's posterior event rate at the credibility `level`."""
        a = self.events + 0.5
        b = self.totals - self.events + 0.5
        mean = a / (a + b)
        low = stats.beta.ppf((1.0 - level) / 2.0, a, b)
        high = stats.beta.ppf((1.0 + level) / 2.0, a, b)
        return mean, np.minimum(low, mean), np.maximum(high, mean)


@dataclass(frozen=True)
class CalibratedProbability:
    probability: np.ndarray
    low: np.ndarray
    high: np.ndarray


class ProbabilityMap:
    """A calibrator evaluated at one credibility level, ready to apply to chunks."""

    def __init__(self, calibrator: BinnedBetaCalibrator, level: float) -> None:
        self.level = level
        self._x = calibrator.centers
        self._mean, self._low, self._high = calibrator.knots(level)

    def predict_calibrated_probability(self, margins: np.ndarray) -> CalibratedProbability:
        return CalibratedProbability(
            probability=np.interp(margins, self._x, self._mean),
            low=np.interp(margins, self._x, self._low),
            high=np.interp(margins, self._x, self._high),
        )
