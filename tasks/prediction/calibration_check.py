"""Does the probability mean what it says? Calibration error and interval coverage on labelled rows.

- ECE: rows cut into equal-count bins of predicted probability; the row-weighted mean of
  |mean predicted − observed event rate| over the bins.
- Interval coverage: in every bin with at least `min_rows` rows, is the observed event rate inside
  the bin's mean interval [probability_low, probability_high]? The interval is a credible interval
  for the event rate of rows like these, so at level L about L of such bins should hold it.
- Calibration quality, for registration: the calibration table (each bin of the map with its counts,
  margin range and the probabilities and bounds it gives there), the range of probabilities the map
  can reach over the held-out margins, the ECE on equal-width probability bins, and warnings in plain
  sentences — too few events overall, bins under the minimum of events or non-events, and top
  margins whose observed rate is above anything the map gives them (silent saturation). The table
  and the warnings about bins need only the stored metadata, so the model card shows them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.prediction.calibration import BinnedBetaCalibrator, ProbabilityMap, predict_calibrator_from_metadata

MIN_EVENTS = 100
"""Fewer events (or non-events) than this in the calibration rows gets a warning."""
TOP_SHARES = (0.01, 0.03, 0.10)
"""Shares of the highest margins checked against the highest probability the map gives them."""
MIN_TOP_ROWS = 10


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
    rows: list[dict[str, Any]] = []
    ece = 0.0
    for idx in np.array_split(order, bins):
        if idx.size == 0:
            continue
        observed = float(outcome[idx].mean())
        mean_p = float(probability[idx].mean())
        lo, hi = float(low[idx].mean()), float(high[idx].mean())
        ece += idx.size / probability.size * abs(mean_p - observed)
        rows.append(
            {
                "rows": int(idx.size),
                "mean_probability": mean_p,
                "observed_rate": observed,
                "interval_low": lo,
                "interval_high": hi,
                "checked": bool(idx.size >= min_rows),
                "covered": bool(lo <= observed <= hi),
            }
        )
    checked = [r for r in rows if r["checked"]]
    return CalibrationReport(
        rows=int(probability.size),
        events=int(outcome.sum()),
        ece=float(ece),
        interval_level=interval_level,
        bins_checked=len(checked),
        bins_covered=sum(r["covered"] for r in checked),
        bins=rows,
    )


@dataclass(frozen=True)
class CalibrationTable:
    """The map's bins as stored; `warnings` are what the stored counts alone show."""

    method: str
    interval_level: float
    bins: list[dict[str, Any]]
    reachable_low: float
    reachable_high: float
    warnings: list[str]


@dataclass(frozen=True)
class CalibrationQuality:
    """The calibration table and reachable range, with the ECE and warnings of labelled rows."""

    method: str
    interval_level: float
    rows: int
    events: int
    ece: float
    table: list[dict[str, Any]]
    reachable_low: float
    reachable_high: float
    warnings: list[str]


def predict_calibration_table(calibration: dict[str, Any], *, level: float) -> CalibrationTable:
    """The table of a model's calibration metadata; ValueError names the key that is wrong."""
    return _table(predict_calibrator_from_metadata(calibration), level)


def predict_calibration_quality(
    calibrator: BinnedBetaCalibrator, margins: np.ndarray, outcomes: np.ndarray, *, level: float, ece_bins: int = 10
) -> CalibrationQuality:
    """How well `calibrator` maps held-out `margins` to their 0/1 `outcomes`, at credibility `level`."""
    margins = np.asarray(margins, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    if margins.ndim != 1 or margins.shape != outcomes.shape or margins.size == 0:
        raise ValueError(f"need rows with one outcome each, got margins {margins.shape} and outcomes {outcomes.shape}")
    table = _table(calibrator, level)
    probability_map = ProbabilityMap(calibrator, level)
    probability = probability_map.predict_calibrated_probability(margins).probability
    which = np.clip((probability * ece_bins).astype(int), 0, ece_bins - 1)
    ece = sum(
        float(np.mean(which == b)) * abs(float(probability[which == b].mean() - outcomes[which == b].mean()))
        for b in np.unique(which)
    )
    saturation = _saturation_warning(probability_map, margins, outcomes, level)
    return CalibrationQuality(
        method=table.method,
        interval_level=level,
        rows=int(margins.size),
        events=int(outcomes.sum()),
        ece=float(ece),
        table=table.bins,
        reachable_low=table.reachable_low,
        reachable_high=table.reachable_high,
        warnings=[*table.warnings, *([saturation] if saturation else [])],
    )


def _table(calibrator: BinnedBetaCalibrator, level: float) -> CalibrationTable:
    centers = calibrator.centers
    if calibrator.margin_low is not None and calibrator.margin_high is not None:
        margin_low, margin_high = calibrator.margin_low, calibrator.margin_high
    else:
        # The older method keeps only centres; a bin then reaches halfway to its neighbours.
        middles = (centers[:-1] + centers[1:]) / 2
        margin_low = np.concatenate([[-np.inf], middles])
        margin_high = np.concatenate([middles, [np.inf]])
    at = ProbabilityMap(calibrator, level).predict_calibrated_probability(np.concatenate([margin_low, margin_high]))
    k = centers.size
    bins = [
        {
            "bin": i + 1,
            "rows": int(calibrator.totals[i]),
            "events": int(calibrator.events[i]),
            "observed_rate": float(calibrator.events[i] / calibrator.totals[i]),
            "margin_low": float(margin_low[i]),
            "margin_high": float(margin_high[i]),
            "probability_from": float(at.probability[i]),
            "probability_to": float(at.probability[k + i]),
            "interval_low": float(at.low[i]),
            "interval_high": float(at.high[k + i]),
        }
        for i in range(k)
    ]
    reachable_low, reachable_high = calibrator.reachable_range()
    return CalibrationTable(
        method=calibrator.method,
        interval_level=level,
        bins=bins,
        reachable_low=reachable_low,
        reachable_high=reachable_high,
        warnings=_count_warnings(calibrator),
    )


def _count_warnings(calibrator: BinnedBetaCalibrator) -> list[str]:
    rows, events = int(calibrator.totals.sum()), int(calibrator.events.sum())
    k = calibrator.centers.size
    warnings = []
    if min(events, rows - events) < MIN_EVENTS:
        warnings.append(
            f"The calibration hold-out has {events:,} events and {rows - events:,} non-events in {rows:,} rows; with "
            f"fewer than {MIN_EVENTS} of either the map has only {k} bin{'s' if k != 1 else ''} and wide intervals: "
            f"calibrate on more labelled rows."
        )
    least = calibrator.min_class_rows
    thin = [
        (i + 1, int(e), int(n))
        for i, (e, n) in enumerate(zip(calibrator.events, calibrator.totals, strict=True))
        if min(e, n - e) < least
    ]
    if thin:
        shown = "; ".join(f"bin {b}: {e} event{'s' if e != 1 else ''} in {n:,} rows" for b, e, n in thin[:5])
        more = f"; and {len(thin) - 5} more" if len(thin) > 5 else ""
        warnings.append(
            f"{len(thin)} of {k} calibration bins hold fewer than {least} events or non-events ({shown}{more}), "
            f"so their rates are too uncertain to place the probability."
        )
    return warnings


def _saturation_warning(
    probability_map: ProbabilityMap, margins: np.ndarray, outcomes: np.ndarray, level: float
) -> str | None:
    """A sentence when the top margins' observed rate is credibly above every probability the map gives them."""
    from scipy import stats  # ~0.9 s to import; only a model's calibration check needs it

    order = np.argsort(margins, kind="stable")[::-1]
    worst: tuple[float, str] | None = None
    for share in TOP_SHARES:
        n = int(round(share * margins.size))
        if n < MIN_TOP_ROWS:
            continue
        top = order[:n]
        k = int(outcomes[top].sum())
        observed_low, observed_high = stats.beta.ppf([(1 - level) / 2, (1 + level) / 2], k + 0.5, n - k + 0.5)
        highest = float(probability_map.predict_calibrated_probability(margins[top[:1]]).probability[0])
        gap = float(observed_low) - highest
        if gap > 0 and (worst is None or gap > worst[0]):
            worst = (
                gap,
                (
                    f"The top {share:.0%} of margins ({n:,} rows, margin ≥ {margins[top[-1]]:.3g}) had {k:,} events "
                    f"({k / n:.1%}, {level:.0%} interval {observed_low:.1%}–{observed_high:.1%}), but the map gives "
                    f"those rows at most {highest:.3f}: the probability saturates below the observed rate."
                ),
            )
    return worst[1] if worst else None
