"""Does the probability mean what it says? Calibration error and interval coverage on labelled rows.

- ECE: rows cut into equal-count bins of predicted probability; the row-weighted mean of
  |mean predicted − observed event rate| over the bins.
- Interval coverage: in every bin with at least `min_rows` rows, is the observed event rate inside
  the bin's mean interval [probability_low, probability_high]? The interval is a credible interval
  for the event rate of rows like these, so at level L about L of such bins should hold it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CalibrationReport:
    rows: int
    events: int
    ece: float
    interval_level: float
    bins_checked: int
    bins_covered: int
    bins: list[dict[str, Any]] = field(default_factory=list)

    @property
    def coverage_share(self) -> float:
        return self.bins_covered / self.bins_checked if self.bins_checked else float("nan")


def predict_calibration_report(
    probability: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    outcome: np.ndarray,
    *,
    interval_level: float,
    bins: int = 20,
    min_rows: int = 500,
) -> CalibrationReport:
    order = np.argsort(probability, kind="stable")
    rows = []
    ece = 0.0
    for idx in np.array_split(order, bins):
        if idx.size == 0:
            continue
        observed = float(outcome[idx].mean())
        mean_p = float(probability[idx].mean())
        lo, hi = float(low[idx].mean()), float(high[idx].mean())
        ece += idx.size / probability.size * abs(mean_p - observed)
        rows.append({
            "rows": int(idx.size), "mean_probability": mean_p, "observed_rate": observed,
            "interval_low": lo, "interval_high": hi, "checked": bool(idx.size >= min_rows),
            "covered": bool(lo <= observed <= hi),
        })
    checked = [r for r in rows if r["checked"]]
    return CalibrationReport(
        rows=int(probability.size), events=int(outcome.sum()), ece=float(ece), interval_level=interval_level,
        bins_checked=len(checked), bins_covered=sum(r["covered"] for r in checked), bins=rows,
    )
