"""Bayesian calibration: raw margin → probability of the event with a credible interval.

Method `event_binned_beta_logistic_tails` (what training registers):

- Bins sized by events. The held-out rows, sorted by margin, are cut from the top down into bins
  that each hold at least `min_class_rows` events *and* as many non-events and, where the data allow
  more, close at 1/`bins` of the rows, of the events or of the non-events, whichever comes first. A
  small hold-out gets few bins, each with enough of both outcomes for its rate to mean something
  (log-odds standard error ≲ √(2/`min_class_rows`)); a large one gets equal-row bins in the bulk and
  finer ones where events concentrate. Cutting from the top keeps the high-risk end resolved; rows
  left over at the bottom join the lowest bin. Rows with equal margins share a bin.
- Monotone. Adjacent bins whose posterior means are out of order are pooled
  (pool-adjacent-violators), keeping sums, so pooled bins stay exact and still hold the minimum.
- Each bin's event rate gets a Beta posterior under the Jeffreys prior, Beta(k + ½, n − k + ½). Between
  bin centres the log-odds of the posterior mean and of the equal-tailed interval's bounds are
  interpolated linearly in margin (the margin is a log-odds, so this follows the curve where linear
  interpolation of the probability would bow above it across a wide bin). Lower bounds are lowered and
  upper bounds raised where a neighbour's are wider, so both bounds are monotone in the margin too —
  widening only, never narrower than a bin's own interval.
- Logistic tails. Beyond the outer bin centres the map continues as a logistic in the margin,
  logit p = α + β·m, fitted on the outer bin's rows (MAP: β ~ Normal(1, 1), since a calibrated model's
  margin has slope 1 and a handful of rows, or rows that are all events, must not drive β to 0 or ∞;
  β ≥ 0). The outer knot sits where that logistic reaches the bin's posterior mean rather than at the
  bin's mean margin: an outer bin that had to reach far inward for enough of the rarer outcome mixes
  rows of very different risk, and its mean margin would put its rate where that risk is not. So the
  reachable range follows the data. (Flat tails capped the probability at the outer bin's rate: on a
  1,541-row hold-out with 54 events, at 0.654 where the top rows defaulted 92 % of the time.)
- Honest tails. The outer knot's interval is at least the logistic fit's Laplace band there. Beyond
  it, both bounds keep their log-odds offsets from the mean, stretched by the fit's standard error
  relative to the knot's, √(V(δ)/V(0)) with V(δ) = Var α̂ + 2δ Cov(α̂, β̂) + δ² Var β̂ at distance δ: the
  interval widens with the distance from the data and most where the outer bin is thin. A bound that
  would turn back is held at its extreme, so `probability_low` never falls as the margin rises
  (rules act on it).

Method `binned_beta_jeffreys` (versions registered before it), loaded and scored exactly as they were:
equal-row bins, PAV on the raw rate, Jeffreys Beta knots interpolated linearly in probability, flat
beyond the outer centres.

The interval therefore says: "among applications the model scores like this one, the event rate
lies in [low, high] with the stated credibility" — it shrinks where held-out data was plentiful.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# scipy.stats takes ~0.9 s to import and scipy.special ~0.2 s: each function imports what it uses, so
# loading this module (every `score` command and flow does) costs nothing (tests/test_lazy_imports.py).

METHOD = "event_binned_beta_logistic_tails"
LEGACY_METHOD = "binned_beta_jeffreys"
METHODS = (METHOD, LEGACY_METHOD)
MIN_CLASS_ROWS = 10
"""Events, and non-events, each bin holds at least (when the hold-out has them)."""
BINS = 40
"""A large hold-out's bins close at 1/BINS of its rows, events or non-events."""
SLOPE_PRIOR_MEAN = 1.0
SLOPE_PRIOR_SD = 1.0
INTERCEPT_PRIOR_SD = 3.0
TAIL_FIELDS = ("slope", "slope_variance", "anchor_variance", "covariance")
_TINY = 1e-12


@dataclass(frozen=True)
class LogisticTail:
    """logit p = logit p₀ + slope·δ beyond an outer bin centre (δ = margin − centre), with the Laplace
    variance of that log-odds: anchor_variance + 2δ·covariance + δ²·slope_variance."""

    slope: float
    slope_variance: float
    anchor_variance: float
    covariance: float

    def variance(self, delta: np.ndarray) -> np.ndarray:
        return np.maximum(self.anchor_variance + 2.0 * delta * self.covariance + delta**2 * self.slope_variance, 0.0)


@dataclass(frozen=True)
class BinnedBetaCalibrator:
    """Bins of held-out margins with their event counts; without `lower_tail` and `upper_tail` (the older
    method) the map is flat beyond the outer centres."""

    method: str
    centers: np.ndarray
    events: np.ndarray
    totals: np.ndarray
    margin_low: np.ndarray | None = None
    margin_high: np.ndarray | None = None
    lower_tail: LogisticTail | None = None
    upper_tail: LogisticTail | None = None
    min_class_rows: int = MIN_CLASS_ROWS

    def to_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "method": self.method,
            "centers": self.centers.tolist(),
            "events": self.events.tolist(),
            "totals": self.totals.tolist(),
        }
        if self.method == METHOD:
            assert self.margin_low is not None and self.margin_high is not None
            assert self.lower_tail is not None and self.upper_tail is not None
            meta |= {
                "margin_low": self.margin_low.tolist(),
                "margin_high": self.margin_high.tolist(),
                "lower_tail": {f: getattr(self.lower_tail, f) for f in TAIL_FIELDS},
                "upper_tail": {f: getattr(self.upper_tail, f) for f in TAIL_FIELDS},
                "min_class_rows": self.min_class_rows,
            }
        return meta

    def knots(self, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, low, high) of each bin's posterior event rate at the credibility `level`."""
        from scipy import special

        a = self.events + 0.5
        b = self.totals - self.events + 0.5
        mean = a / (a + b)
        # The Beta quantiles (scipy.stats.beta.ppf is this same function, behind a ~0.9 s import).
        low = np.minimum(special.betaincinv(a, b, (1.0 - level) / 2.0), mean)
        high = np.maximum(special.betaincinv(a, b, (1.0 + level) / 2.0), mean)
        if self.lower_tail is None or self.upper_tail is None:
            return mean, low, high
        # An outer knot is where its bin's logistic reaches the bin's rate; that point is only as sure as
        # the logistic fit there, so its interval is at least the fit's band.
        z = float(special.ndtri((1.0 + level) / 2.0))
        for at, tail in ((0, self.lower_tail), (-1, self.upper_tail)):
            half = z * np.sqrt(tail.anchor_variance)
            center = special.logit(mean[at])
            low[at] = min(low[at], special.expit(center - half))
            high[at] = max(high[at], special.expit(center + half))
        return mean, np.minimum.accumulate(low[::-1])[::-1], np.maximum.accumulate(high)

    def margin_range(self) -> tuple[float, float]:
        """The lowest and highest held-out margin (the outer centres where the method stores no edges)."""
        if self.margin_low is None or self.margin_high is None:
            return float(self.centers[0]), float(self.centers[-1])
        return float(self.margin_low[0]), float(self.margin_high[-1])

    def reachable_range(self) -> tuple[float, float]:
        """Lowest and highest probability the map gives over the held-out margins.

        Flat tails give exactly these beyond them; logistic tails go on toward 0 and 1 past the data."""
        low, high = self.margin_range()
        p = ProbabilityMap(self, 0.5).predict_calibrated_probability(np.array([low, high])).probability
        return float(p[0]), float(p[1])


def predict_fitted_calibrator(
    margins: np.ndarray, outcomes: np.ndarray, *, min_class_rows: int = MIN_CLASS_ROWS, bins: int = BINS
) -> BinnedBetaCalibrator:
    """The calibrator of held-out `margins` and their 0/1 `outcomes` (method `event_binned_beta_logistic_tails`)."""
    margins = np.asarray(margins, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    if margins.ndim != 1 or margins.shape != outcomes.shape or margins.size == 0:
        raise ValueError(
            f"need held-out rows with one outcome each, got margins {margins.shape} and outcomes {outcomes.shape}"
        )
    if not np.isfinite(margins).all():
        raise ValueError(f"margins must be finite; {int((~np.isfinite(margins)).sum())} are not")
    if not np.isin(outcomes, (0.0, 1.0)).all():
        raise ValueError(
            f"outcomes must be 0 or 1; got {np.unique(outcomes[~np.isin(outcomes, (0.0, 1.0))])[:5].tolist()}"
        )
    if min_class_rows < 1 or bins < 1:
        raise ValueError(f"min_class_rows and bins must be at least 1, got {min_class_rows} and {bins}")
    order = np.argsort(margins, kind="stable")
    m, y = margins[order], outcomes[order]
    starts = _bin_starts(m, y, min_class_rows=min_class_rows, bins=bins)
    bounds = list(zip(starts, [*starts[1:], m.size], strict=True))
    # [margin sum, events, rows, first row, end row] per bin, pooled where posterior means fall.
    pooled: list[list[float]] = []
    for s, e in bounds:
        pooled.append([float(m[s:e].sum()), float(y[s:e].sum()), float(e - s), s, e])
        while len(pooled) > 1 and _jeffreys_mean(pooled[-2]) >= _jeffreys_mean(pooled[-1]):
            last = pooled.pop()
            first = pooled[-1]
            pooled[-1] = [first[0] + last[0], first[1] + last[1], first[2] + last[2], first[3], last[4]]
    sums = np.array(pooled)
    centers, events, totals = sums[:, 0] / sums[:, 2], sums[:, 1], sums[:, 2]
    first_row, end_row = sums[:, 3].astype(int), sums[:, 4].astype(int)
    rates = (events + 0.5) / (totals + 1.0)
    lower = _LogisticFit.of(m[first_row[0] : end_row[0]], y[first_row[0] : end_row[0]], rates[0])
    upper = _LogisticFit.of(m[first_row[-1] : end_row[-1]], y[first_row[-1] : end_row[-1]], rates[-1])
    # The outer knots sit where their bin's own logistic reaches the bin's rate, not at its mean
    # margin: an outer bin that had to reach far inward for enough of the rarer outcome mixes rows of
    # very different risk, and its mean margin would place its rate far from where that risk is.
    # Each stays inside its bin and a third of the way from its neighbour, so centres still increase.
    means, centers = centers, centers.copy()
    if centers.size == 1:
        centers[0] = np.clip(upper.reaching(rates[0]), m[0], m[-1])
    else:
        centers[0] = np.clip(
            lower.reaching(rates[0]), m[0], min(m[end_row[0] - 1], means[0] + (means[1] - means[0]) / 3)
        )
        centers[-1] = np.clip(
            upper.reaching(rates[-1]), max(m[first_row[-1]], means[-1] - (means[-1] - means[-2]) / 3), m[-1]
        )
    return BinnedBetaCalibrator(
        method=METHOD,
        centers=centers,
        events=events,
        totals=totals,
        margin_low=m[first_row],
        margin_high=m[end_row - 1],
        lower_tail=lower.tail_at(centers[0]),
        upper_tail=upper.tail_at(centers[-1]),
        min_class_rows=min_class_rows,
    )


def _jeffreys_mean(block: list[float]) -> float:
    return (block[1] + 0.5) / (block[2] + 1.0)


def _bin_starts(m: np.ndarray, y: np.ndarray, *, min_class_rows: int, bins: int) -> list[int]:
    """First row of each bin of the sorted margins `m`, cut from the top down (see the module docstring)."""
    n = m.size
    events = np.concatenate([[0.0], np.cumsum(y)])
    nonevents = np.arange(n + 1) - events
    rows = np.arange(n + 1, dtype=np.float64)
    quotas = (n / bins, events[-1] / bins, nonevents[-1] / bins)

    def last_start(cum: np.ndarray, end: int, need: float) -> int:
        # The largest start s with cum[end] − cum[s] ≥ need; −1 when even the first row is not enough.
        return int(np.searchsorted(cum, cum[end] - need, side="right")) - 1

    starts: list[int] = []
    end = n
    while end > 0:
        needed = min(last_start(events, end, min_class_rows), last_start(nonevents, end, min_class_rows))
        quota = max(last_start(c, end, q) for c, q in zip((rows, events, nonevents), quotas, strict=True))
        start = min(needed, quota)
        if start <= 0:
            # The rows below cannot make a bin of their own: they join the lowest bin so far.
            if starts and needed < 0:
                starts[-1] = 0
            else:
                starts.append(0)
            break
        start = int(np.searchsorted(m, m[start], side="left"))
        if start == 0:
            starts.append(0)
            break
        starts.append(start)
        end = start
    return starts[::-1]


@dataclass(frozen=True)
class _LogisticFit:
    """logit p = α + β·(margin − center) fitted on an outer bin's rows, with the Laplace covariance of (α, β)."""

    center: float
    intercept: float
    slope: float
    covariance: np.ndarray

    @classmethod
    def of(cls, margin: np.ndarray, outcome: np.ndarray, rate: float) -> _LogisticFit:
        """MAP under β ~ Normal(1, 1), β ≥ 0, and a weak α prior around the bin's log-odds."""
        from scipy import special

        center = float(margin.mean())
        x = np.column_stack([np.ones_like(margin), margin - center])
        prior_mean = np.array([float(special.logit(rate)), SLOPE_PRIOR_MEAN])
        prior_precision = np.diag([1.0 / INTERCEPT_PRIOR_SD**2, 1.0 / SLOPE_PRIOR_SD**2])
        theta = _posterior_mode(x, outcome, prior_mean, prior_precision, free=np.array([True, True]))
        if theta[1] < 0:
            # A falling fit: the map stays monotone, so the slope is held at 0 and only α is refitted.
            theta = _posterior_mode(
                x, outcome, np.array([prior_mean[0], 0.0]), prior_precision, free=np.array([True, False])
            )
        p = special.expit(x @ theta)
        hessian = (x * (p * (1.0 - p))[:, None]).T @ x + prior_precision
        return cls(center=center, intercept=float(theta[0]), slope=float(theta[1]), covariance=np.linalg.inv(hessian))

    def reaching(self, rate: float) -> float:
        """The margin where the fit reaches `rate` (its rows' mean margin when the fit is flat)."""
        from scipy import special

        return (
            self.center + (float(special.logit(rate)) - self.intercept) / self.slope if self.slope > 0 else self.center
        )

    def tail_at(self, anchor: float) -> LogisticTail:
        shift = anchor - self.center
        s = self.covariance
        return LogisticTail(
            slope=self.slope,
            slope_variance=float(s[1, 1]),
            anchor_variance=float(s[0, 0] + 2.0 * shift * s[0, 1] + shift**2 * s[1, 1]),
            covariance=float(s[0, 1] + shift * s[1, 1]),
        )


def _posterior_mode(
    x: np.ndarray, y: np.ndarray, start: np.ndarray, prior_precision: np.ndarray, *, free: np.ndarray
) -> np.ndarray:
    """Mode of a logistic regression's log posterior (Normal prior centred on `start`) over the `free`
    coefficients: Newton steps, halved until the posterior rises, since a full step can overshoot."""
    from scipy import special

    def log_posterior(theta: np.ndarray) -> float:
        eta = x @ theta
        return float(y @ eta - np.logaddexp(0.0, eta).sum() - 0.5 * (theta - start) @ prior_precision @ (theta - start))

    theta = start.copy()
    current = log_posterior(theta)
    for _ in range(100):
        p = special.expit(x @ theta)
        gradient = x.T @ (y - p) - prior_precision @ (theta - start)
        hessian = (x * (p * (1.0 - p))[:, None]).T @ x + prior_precision
        step = np.zeros_like(theta)
        step[free] = np.linalg.solve(hessian[np.ix_(free, free)], gradient[free])
        for _ in range(50):
            trial = log_posterior(theta + step)
            if trial >= current:
                break
            step /= 2.0
        theta, improvement, current = theta + step, trial - current, trial
        if np.abs(step).max() < 1e-10 or improvement < 1e-12:
            break
    return theta


def predict_one_outcome_problem(events: int, rows: int) -> str | None:
    """Why a calibration fitted on `rows` held-out rows with `events` events cannot be trusted, or None.

    With one outcome only the map has nothing to separate: every margin gets (about) the same
    probability near 0 or 1, so every row gets the same decision and nothing looks wrong."""
    if events == 0:
        return (
            f"was fitted on a hold-out without events: none of its {rows:,} rows has outcome 1, so it maps every score "
            "near 0 and the rules give every row the same decision; register the model again on a hold-out with events and non-events"
        )
    if events == rows:
        return (
            f"was fitted on a hold-out without non-events: all {rows:,} of its rows have outcome 1, so it maps every score "
            "near 1 and the rules give every row the same decision; register the model again on a hold-out with events and non-events"
        )
    return None


def predict_calibrator_from_metadata(calibration: dict[str, Any]) -> BinnedBetaCalibrator:
    """The calibrator a model's metadata holds; ValueError names the first key that is missing or unusable."""
    if not calibration:
        raise ValueError("is missing or empty: the model was registered without a calibration map")
    method = calibration.get("method")
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {list(METHODS)}")
    keys = ("centers", "events", "totals", *(("margin_low", "margin_high") if method == METHOD else ()))
    arrays = {key: _finite_list(calibration, key) for key in keys}
    centers, events, totals = arrays["centers"], arrays["events"], arrays["totals"]
    if any(arrays[k].size != centers.size for k in keys):
        raise ValueError(f"{', '.join(keys)} differ in length ({', '.join(str(arrays[k].size) for k in keys)})")
    if (np.diff(centers) <= 0).any():
        raise ValueError("'centers' must increase strictly")
    if (events < 0).any() or (totals <= 0).any() or (events > totals).any():
        raise ValueError("each bin needs 0 <= events <= totals and totals > 0")
    problem = predict_one_outcome_problem(int(events.sum()), int(totals.sum()))
    if problem:
        raise ValueError(problem)
    if method == LEGACY_METHOD:
        return BinnedBetaCalibrator(method=method, centers=centers, events=events, totals=totals)
    low, high = arrays["margin_low"], arrays["margin_high"]
    if (low > centers).any() or (centers > high).any() or (high[:-1] >= low[1:]).any():
        raise ValueError("'margin_low' and 'margin_high' must bracket each bin's centre and increase from bin to bin")
    min_class_rows = calibration.get("min_class_rows")
    if not isinstance(min_class_rows, int) or isinstance(min_class_rows, bool) or min_class_rows < 1:
        raise ValueError(f"'min_class_rows' must be a positive integer, got {min_class_rows!r}")
    return BinnedBetaCalibrator(
        method=method,
        centers=centers,
        events=events,
        totals=totals,
        margin_low=low,
        margin_high=high,
        lower_tail=_tail(calibration, "lower_tail"),
        upper_tail=_tail(calibration, "upper_tail"),
        min_class_rows=min_class_rows,
    )


def _finite_list(calibration: dict[str, Any], key: str) -> np.ndarray:
    try:
        values = np.asarray(calibration[key], dtype=np.float64)
    except KeyError:
        raise ValueError(f"has no {key!r}") from None
    except (TypeError, ValueError):
        raise ValueError(f"{key!r} is not a list of numbers") from None
    if values.ndim != 1 or values.size == 0 or not np.isfinite(values).all():
        raise ValueError(f"{key!r} must be a non-empty list of finite numbers")
    return values


def _tail(calibration: dict[str, Any], key: str) -> LogisticTail:
    tail = calibration.get(key)
    if not isinstance(tail, dict):
        raise ValueError(f"has no {key!r} (an object with {', '.join(TAIL_FIELDS)})")
    values = {}
    for field in TAIL_FIELDS:
        value = tail.get(field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise ValueError(f"'{key}.{field}' must be a finite number, got {value!r}")
        if field != "covariance" and value < 0:
            raise ValueError(f"'{key}.{field}' must be >= 0, got {value!r}")
        values[field] = float(value)
    return LogisticTail(**values)


@dataclass(frozen=True)
class CalibratedProbability:
    probability: np.ndarray
    low: np.ndarray
    high: np.ndarray


class ProbabilityMap:
    """A calibrator evaluated at one credibility level, ready to apply to chunks."""

    def __init__(self, calibrator: BinnedBetaCalibrator, level: float) -> None:
        from scipy import special

        self.level = level
        self._calibrator = calibrator
        self._x = calibrator.centers
        self._mean, self._low, self._high = calibrator.knots(level)
        self._logit_knots = tuple(
            special.logit(np.clip(k, _TINY, 1.0 - _TINY)) for k in (self._mean, self._low, self._high)
        )

    def predict_calibrated_probability(self, margins: np.ndarray) -> CalibratedProbability:
        from scipy import special

        margins = np.asarray(margins, dtype=np.float64)
        cal = self._calibrator
        if cal.lower_tail is None or cal.upper_tail is None:
            return CalibratedProbability(
                probability=np.interp(margins, self._x, self._mean),
                low=np.interp(margins, self._x, self._low),
                high=np.interp(margins, self._x, self._high),
            )
        probability, low, high = (special.expit(np.interp(margins, self._x, k)) for k in self._logit_knots)
        for at, tail, outward in ((0, cal.lower_tail, -1.0), (-1, cal.upper_tail, 1.0)):
            rows = np.flatnonzero(outward * (margins - self._x[at]) > 0)
            if rows.size:
                probability[rows], low[rows], high[rows] = self._tail(
                    np.abs(margins[rows] - self._x[at]), tail, outward, at
                )
        return CalibratedProbability(probability=probability, low=low, high=high)

    def _tail(self, distance: np.ndarray, tail: LogisticTail, outward: float, at: int) -> tuple[np.ndarray, ...]:
        """(mean, low, high) at `distance` ≥ 0 beyond the outer centre `at`; `outward` +1 above it, −1 below.

        The knot's log-odds offsets of both bounds are stretched by the fit's standard error relative to
        the knot's. The bound on the far side (high above, low below) is held once it would turn back,
        and so is the near one, so both stay monotone in the margin."""
        from scipy import special

        center = self._logit_knots[0][at]
        below, above = (self._logit_knots[k][at] - center for k in (1, 2))
        far_pull, near_pull = (above, -below) if outward > 0 else (-below, above)
        covariance = outward * tail.covariance
        v0 = max(tail.anchor_variance, _TINY)
        stretch = np.sqrt(tail.variance(outward * distance) / v0)
        rise = tail.slope * distance
        far = np.maximum(rise + far_pull * stretch, far_pull)
        near = _held_rise(distance, tail.slope, near_pull / np.sqrt(v0), v0, covariance, tail.slope_variance)
        mean = special.expit(center + outward * rise)
        inner, outer = special.expit(center + outward * near), special.expit(center + outward * far)
        low, high = (inner, outer) if outward > 0 else (outer, inner)
        return mean, np.minimum(low, mean), np.maximum(high, mean)


def _held_rise(
    distance: np.ndarray, slope: float, pull: float, v0: float, covariance: float, slope_variance: float
) -> np.ndarray:
    """slope·e − pull·√V(e), V(e) = v0 + 2e·covariance + e²·slope_variance, at min(e, its maximiser).

    The function is concave (√V is convex), so holding it at its maximum keeps it non-decreasing."""
    turn = np.inf
    if pull**2 * slope_variance > slope**2:
        shift = covariance / slope_variance
        rest = max(v0 - covariance * shift, 0.0)
        turn = max(slope * np.sqrt(rest) / np.sqrt(slope_variance * (pull**2 * slope_variance - slope**2)) - shift, 0.0)
    e = np.minimum(distance, turn)
    return slope * e - pull * np.sqrt(np.maximum(v0 + 2.0 * e * covariance + e**2 * slope_variance, 0.0))
