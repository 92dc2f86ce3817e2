"""Champion against challenger on the same labelled rows: once labels land for a partition that the
champion model scored and a challenger shadow-scored, which one held up better, and is the
difference larger than the noise of the labels?

Both models are measured on the same rows (same order). A binary job's (`compared_models`): AUC
(higher is better), the Brier score and the expected calibration error (lower is better). A forecast
job's (`compared_forecasts`): MAE and RMSE (lower is better) and the interval's coverage (better
closer to the interval's level). The difference challenger − champion of each measure gets a paired
bootstrap interval: each resample weighs the rows once and both models are measured under the same
weights, so what the two models share (the hard rows, the easy rows) cancels in the difference and
the interval is that of the difference, not of two separate measures.

Pure numpy: importing this module loads neither scipy.stats nor anything heavier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tasks.monitoring.measures import brier_score, exact_auc

MEASURES = ("auc", "brier", "ece")
"""The measures compared, in report order."""
FORECAST_MEASURES = ("mae", "rmse", "coverage", "coverage_miss")
"""A forecast job's measures, in report order: `coverage` is the share of actuals inside the model's interval,
`coverage_miss` its distance |coverage − interval level|, whose difference decides which coverage is better."""
HIGHER_IS_BETTER = {"auc": True, "brier": False, "ece": False, "mae": False, "rmse": False, "coverage_miss": False}
MEASURE_NAMES = {
    "auc": "AUC",
    "brier": "Brier score",
    "ece": "ECE",
    "mae": "MAE",
    "rmse": "RMSE",
    "coverage": "interval coverage",
    "coverage_miss": "interval coverage miss",
}

BOOTSTRAP_ROWS = 200_000
"""At most this many rows take part in the bootstrap (a class-stratified random subset beyond)."""
AUC_BINS = 2_000
"""Quantile bins of each model's probability on which the bootstrap measures AUC."""
_BLOCK_BYTES = 32 * 2**20
"""Memory for the weights of one block of resamples."""
_MIN_DEFINED_SHARE = 0.5
"""A delta's interval is NaN when fewer than this share of the resamples define it."""
MIN_ROWS = 10
"""Below this many labelled rows no interval is drawn (a bootstrap of a handful of rows is too coarse:
one row would give a zero-width interval) and every measure stays undecided."""


def _poisson_table() -> np.ndarray:
    """Poisson(1) counts indexed by a 16-bit uniform: P(k) exact to 1/65 536 (k ≤ 8)."""
    cdf = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(20)])
    return np.searchsorted(np.round(cdf * 65536), np.arange(65536), side="right").astype(np.float64)


_POISSON_TABLE = _poisson_table()


@dataclass(frozen=True)
class ModelComparison:
    """Champion against challenger on `rows` labelled rows, `events` of them events (None for forecasts).

    `delta` = challenger − champion per measure, `delta_low`/`delta_high` its bootstrap interval;
    `better` names the model a measure decides for ("undecided" while the interval holds 0 or is NaN;
    for `coverage`, the verdict of `coverage_miss`).
    """

    rows: int
    events: int | None
    champion: dict[str, float]
    challenger: dict[str, float]
    delta: dict[str, float]
    delta_low: dict[str, float]
    delta_high: dict[str, float]
    better: dict[str, str]
    recommendation: str
    level: float = 0.95
    measures: tuple[str, ...] = MEASURES
    """MEASURES (a binary job's) or FORECAST_MEASURES."""

    def rows_long(self) -> list[dict]:
        """One row per measure: measure, champion, challenger, delta, delta_low, delta_high, better."""
        return [
            {
                "measure": m,
                "champion": self.champion[m],
                "challenger": self.challenger[m],
                "delta": self.delta[m],
                "delta_low": self.delta_low[m],
                "delta_high": self.delta_high[m],
                "better": self.better[m],
            }
            for m in self.measures
        ]


def ece_bin_index(probability: np.ndarray, bins: int) -> np.ndarray:
    """Equal-width probability bin of each row: ⌊p·bins⌋, with p = 1 in the last bin (as
    tasks/monitoring/outcomes.py bins calibration)."""
    return np.minimum((np.asarray(probability, dtype=np.float64) * bins).astype(np.int64), bins - 1)


def expected_calibration_error(labels: np.ndarray, probability: np.ndarray, bins: int) -> float:
    """Σ_b n_b/N · |mean p_b − event rate_b| over `bins` equal-width bins; NaN without rows."""
    if labels.size == 0:
        return float("nan")
    gap = np.bincount(ece_bin_index(probability, bins), weights=probability - labels, minlength=bins)
    return float(np.abs(gap).sum() / labels.size)


class _BinnedModel:
    """One model's rows reduced to what the weighted measures need.

    Fine bins: the ~AUC_BINS quantile bins of the model's probability, split further at the ECE bin
    edges so each lies inside one ECE bin (ordered as the probabilities are: ties share a bin). Per
    row: its cell (fine bin × outcome), its fine bin, its probability and squared residual. Under
    weights w, AUC comes from the weighted non-events and events per fine bin, ECE from Σ w·p and
    Σ w·y per fine bin summed over the runs of fine bins that make up each ECE bin, Brier from Σ w·(p − y)².
    """

    def __init__(self, labels: np.ndarray, probability: np.ndarray, ece_bins: int) -> None:
        edges = np.unique(np.quantile(probability, np.linspace(0.0, 1.0, AUC_BINS + 1)[1:-1]))
        # (ECE bin, quantile bin) is ordered as p is: both parts are non-decreasing in p.
        key = ece_bin_index(probability, ece_bins) * (edges.size + 1) + np.searchsorted(
            edges, probability, side="right"
        )
        keys, fine = np.unique(key, return_inverse=True)
        self.fine = fine.ravel()
        self.bins = keys.size
        self.cell = 2 * self.fine + labels
        # Fine bins are ordered, so each occupied ECE bin is a run of them: where each run starts.
        self.ece_starts = np.unique(keys // (edges.size + 1), return_index=True)[1]
        self.probability = probability
        self.squared = (probability - labels) ** 2

    def measures(self, weights: np.ndarray, total: np.ndarray) -> np.ndarray:
        """(k, 3) AUC, Brier, ECE under each of k weightings (rows of `weights`; `total` their sums)."""
        k = weights.shape[0]
        counts = np.empty((k, 2 * self.bins))
        mass = np.empty((k, self.bins))
        for j in range(k):
            counts[j] = np.bincount(self.cell, weights=weights[j], minlength=2 * self.bins)
            mass[j] = np.bincount(self.fine, weights=weights[j] * self.probability, minlength=self.bins)
        neg, pos = counts[:, 0::2], counts[:, 1::2]
        below = np.cumsum(neg, axis=1) - neg
        pairs = pos.sum(axis=1) * neg.sum(axis=1)
        gaps = np.add.reduceat(mass - pos, self.ece_starts, axis=1)  # Σ w·(p − y) per occupied ECE bin
        with np.errstate(invalid="ignore", divide="ignore"):
            auc = np.where(pairs > 0, ((pos * below).sum(axis=1) + 0.5 * (pos * neg).sum(axis=1)) / pairs, np.nan)
            brier = (weights @ self.squared) / total
            ece = np.abs(gaps).sum(axis=1) / total
        return np.column_stack([auc, brier, ece])


def _bootstrap_rows(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """Indices of a class-stratified random subset of BOOTSTRAP_ROWS rows, or None to use them all."""
    n = labels.size
    if n <= BOOTSTRAP_ROWS:
        return None
    chosen = []
    events = np.flatnonzero(labels == 1)
    take_events = int(round(BOOTSTRAP_ROWS * events.size / n))
    for members, take in ((events, take_events), (np.flatnonzero(labels == 0), BOOTSTRAP_ROWS - take_events)):
        chosen.append(rng.choice(members, size=min(take, members.size), replace=False))
    return np.sort(np.concatenate(chosen))


def _delta_deviations(
    labels: np.ndarray,
    champion: np.ndarray,
    challenger: np.ndarray,
    *,
    resamples: int,
    ece_bins: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, int]:
    """(resamples, 3) bootstrap deltas minus the same delta under unit weights, and the rows used."""
    y = labels.astype(np.int64)
    models = [_BinnedModel(y, p, ece_bins) for p in (champion, challenger)]
    m = y.size
    ones = np.ones((1, m))
    reference = models[1].measures(ones, np.array([float(m)])) - models[0].measures(ones, np.array([float(m)]))
    block = max(1, min(resamples, _BLOCK_BYTES // (8 * max(m, 1))))
    out = np.empty((resamples, len(MEASURES)))
    done = 0
    while done < resamples:
        k = min(block, resamples - done)
        weights = _POISSON_TABLE[rng.integers(0, 65536, size=(k, m), dtype=np.uint16)]
        total = weights.sum(axis=1)
        total[total == 0] = np.nan
        out[done : done + k] = models[1].measures(weights, total) - models[0].measures(weights, total)
        done += k
    return out - reference, m


def _interval(point: float, deviations: np.ndarray, level: float, scale: float) -> tuple[float, float]:
    finite = deviations[np.isfinite(deviations)]
    if not math.isfinite(point) or finite.size == 0 or finite.size < _MIN_DEFINED_SHARE * deviations.size:
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return point + scale * float(low), point + scale * float(high)


def _verdict(measure: str, low: float, high: float) -> str:
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0.0 <= high:
        return "undecided"
    challenger_higher = low > 0.0
    return "challenger" if challenger_higher == HIGHER_IS_BETTER[measure] else "champion"


def _count(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def _numbers(*values: float) -> list[str]:
    """The values with as many decimals as their largest needs for two significant digits (≥ 3)."""
    largest = max((abs(v) for v in values if math.isfinite(v) and v != 0.0), default=1.0)
    decimals = min(8, max(3, 1 - math.floor(math.log10(largest))))
    return [f"{(round(v, decimals) + 0.0):.{decimals}f}" for v in values]


def _finding(comparison_level: float, measure: str, delta: float, low: float, high: float, owner: str) -> str:
    """'its AUC is higher by 0.021 (95% interval 0.012 to 0.030)': a decided difference, in the direction
    it went, the interval turned the same way so both bounds are positive."""
    higher = delta > 0.0
    size, a, b = (delta, low, high) if higher else (-delta, -high, -low)
    size_s, a_s, b_s = _numbers(size, a, b)
    level_s = f"{100 * comparison_level:g}%"
    return f"{owner} {MEASURE_NAMES[measure]} is {'higher' if higher else 'lower'} by {size_s} ({level_s} interval {a_s} to {b_s})"


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _no_worse(measures: list[str]) -> str:
    names = [MEASURE_NAMES[m] for m in measures]
    return f"its {_join(names)} {'is' if len(names) == 1 else 'are'} no worse"


def _recommended(
    found: Callable[[str, str], str],
    better: dict[str, str],
    measures: tuple[str, ...],
    *,
    rows: int,
    level: float,
    lead: str,
    lead_numbers: tuple[float, float, float],
    lead_name: str,
) -> str:
    """The recommendation once enough rows are labelled: mixed findings keep the champion; the challenger is
    promoted when it is better on the `lead` measure (AUC, MAE) and no worse on the others; otherwise the
    champion stays, saying what was or was not found."""
    for_challenger = [m for m in measures if better[m] == "challenger"]
    for_champion = [m for m in measures if better[m] == "champion"]
    undecided = [m for m in measures if better[m] == "undecided"]
    if for_challenger and for_champion:
        gains = _join([found(m, "its" if i else "the challenger's") for i, m in enumerate(for_challenger)])
        losses = _join([found(m, "its") for m in for_champion])
        return f"mixed: {gains} but {losses}; keep the champion until someone weighs the trade-off"
    if lead in for_challenger:
        parts = [found(m, "its") for m in for_challenger]
        if undecided:
            parts.append(_no_worse(undecided))
        return "promote the challenger: " + _join(parts)
    if for_champion:
        return "keep the champion: " + _join(
            [found(m, "the challenger's" if i == 0 else "its") for i, m in enumerate(for_champion)]
        )
    if for_challenger:
        shown = _numbers(*lead_numbers)
        others = _join([found(m, "the challenger's" if i == 0 else "its") for i, m in enumerate(for_challenger)])
        return (
            f"no clear difference in {lead_name} on {_count(rows)} labelled rows (delta {shown[0]}, {100 * level:g}% interval "
            f"{shown[1]} to {shown[2]}), though {others}: keep the champion and gather more nights"
        )
    return f"no clear difference on {_count(rows)} labelled rows: keep the champion and gather more nights"


def _recommendation(rows: int, events: int, delta: dict, low: dict, high: dict, better: dict, level: float) -> str:
    """The sentence of `compared_models`, by the rules listed there."""
    if rows == 0:
        return "no labelled rows: nothing to compare; keep the champion"
    if rows < MIN_ROWS:
        return f"only {rows} labelled rows, too few to compare: keep the champion and gather more nights"

    def found(measure: str, owner: str) -> str:
        return _finding(level, measure, delta[measure], low[measure], high[measure], owner)

    if events == 0 or events == rows:
        missing = "no events" if events == 0 else "no non-events"
        sentence = (
            f"keep the champion: AUC cannot be compared, as there are {missing} among the {_count(rows)} labelled rows"
        )
        decided = [m for m in MEASURES if better[m] != "undecided"]
        decided = [found(m, "the challenger's" if i == 0 else "its") for i, m in enumerate(decided)]
        return sentence + ("; " + _join(decided) if decided else "")
    return _recommended(
        found,
        better,
        MEASURES,
        rows=rows,
        level=level,
        lead="auc",
        lead_numbers=(delta["auc"], low["auc"], high["auc"]),
        lead_name="AUC",
    )


def _checked_probabilities(values: np.ndarray, name: str, rows: int) -> np.ndarray:
    p = np.asarray(values)
    if p.ndim != 1:
        raise ValueError(f"{name} probabilities must be one-dimensional, got shape {p.shape}")
    if p.size != rows:
        raise ValueError(f"{name} has {p.size} probabilities but there are {rows} labels: they must be the same rows")
    if p.size and not np.issubdtype(p.dtype, np.number) and p.dtype != np.bool_:
        raise ValueError(f"{name} probabilities must be numbers, got dtype {p.dtype}")
    p = p.astype(np.float64)
    bad = ~((p >= 0.0) & (p <= 1.0))
    if bad.any():
        raise ValueError(
            f"{name} probabilities must lie in [0, 1]; {int(bad.sum())} do not (NaN included), e.g. {p[bad][:5].tolist()}"
        )
    return p


def _checked_labels(values: np.ndarray) -> np.ndarray:
    y = np.asarray(values)
    if y.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {y.shape}")
    if y.size and not (np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_):
        raise ValueError(f"labels must be 0/1, got dtype {y.dtype}")
    y = y.astype(np.float64)
    bad = ~((y == 0.0) | (y == 1.0))
    if bad.any():
        raise ValueError(f"labels must be 0 or 1; {int(bad.sum())} are not, e.g. {y[bad][:5].tolist()}")
    return y.astype(np.int64)


def compared_models(
    labels: np.ndarray,
    champion: np.ndarray,
    challenger: np.ndarray,
    *,
    level: float = 0.95,
    resamples: int = 400,
    seed: int = 0,
    ece_bins: int = 10,
) -> ModelComparison:
    """Champion and challenger measured on the same labelled rows, with the paired bootstrap interval
    (at `level`) of each difference challenger − champion, and a recommendation.

    `labels` are 0/1 outcomes; `champion` and `challenger` the calibrated probabilities each model gave
    the same rows, in the same order. ValueError on mismatched lengths, labels other than 0/1, or
    probabilities outside [0, 1] (NaN included).

    Point estimates are exact on all rows: AUC by Mann–Whitney (ties get half credit; NaN unless both
    classes occur), Brier = mean (p − y)², ECE = Σ_b n_b/N · |mean p_b − event rate_b| over `ece_bins`
    equal-width bins (bin ⌊p·bins⌋, p = 1 in the last).

    The bootstrap (deterministic given `seed`): every resample draws one Poisson(1) weight per row
    (16-bit table look-up, probabilities exact to 1/65 536) and measures both models under those same
    weights — the pairing. Under weights, AUC is counted on ~AUC_BINS quantile bins of each model's
    probability (fixed once: ties within a bin get half credit), Brier and ECE from weighted sums of
    p − y per row. The interval is the percentile interval of the resampled deltas, moved by the
    difference between the exact point delta and the delta under unit weights (so the binning of AUC
    does not move it). Resamples in which a measure is undefined (no event or no non-event drawn) are
    left out of its interval; when that is over half of them the interval is NaN. Under MIN_ROWS (10)
    rows there is no bootstrap: intervals are NaN and every measure undecided.

    Subsampling: beyond BOOTSTRAP_ROWS (200 000) rows, the bootstrap runs on a class-stratified random
    subset of that many rows (chosen by the same seeded generator), and the deviations of the resampled
    deltas are shrunk by √(subset / rows) — the m-out-of-n rescaling, exact for measures whose spread
    falls as 1/√rows (AUC, Brier; approximate for ECE). 1 M rows with 400 resamples take ~1.3 s on
    2 cores (~2.5 s while they are shared with other work).

    A measure is decided ("challenger"/"champion") when its interval excludes 0: for AUC higher is
    better, for Brier and ECE lower is; otherwise (interval holds 0, or is NaN) it is "undecided".
    The recommendation is one sentence whose start says what to do, by the first rule that applies:

    1. no labelled rows → "no labelled rows: nothing to compare; keep the champion"; fewer than
       MIN_ROWS → "only N labelled rows, too few to compare: keep the champion …";
    2. one class only → "keep the champion: AUC cannot be compared, as there are no events (no
       non-events) among the N labelled rows", followed by any decided Brier/ECE difference;
    3. some measure decided for the challenger and some for the champion → "mixed: the challenger's
       <gains> but its <losses>; keep the champion until someone weighs the trade-off";
    4. AUC decided for the challenger (so, by 3, nothing for the champion) → "promote the challenger:
       its AUC is higher by d (L% interval a to b)…", naming Brier/ECE as better or "no worse";
    5. something decided for the champion (so nothing for the challenger) → "keep the champion: the
       challenger's <measure> is lower/higher by …";
    6. only Brier/ECE decided for the challenger, AUC undecided → "no clear difference in AUC on N
       labelled rows (…), though the challenger's <measure> is lower by …: keep the champion and gather
       more nights" (promotion needs better ranking; calibration alone is fixed by recalibrating);
    7. nothing decided → "no clear difference on N labelled rows: keep the champion and gather more
       nights".

    Differences are stated with their size and interval turned positive ("lower by 0.004 (95% interval
    0.002 to 0.006)"), rows with a space between thousands ("1 234").
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    if int(resamples) != resamples or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples}")
    if int(ece_bins) != ece_bins or ece_bins < 1:
        raise ValueError(f"ece_bins must be a positive integer, got {ece_bins}")
    resamples, ece_bins = int(resamples), int(ece_bins)
    y = _checked_labels(labels)
    rows = int(y.size)
    p_champion = _checked_probabilities(champion, "champion", rows)
    p_challenger = _checked_probabilities(challenger, "challenger", rows)
    events = int(y.sum())

    measured = {}
    for name, p in (("champion", p_champion), ("challenger", p_challenger)):
        measured[name] = {
            "auc": exact_auc(y, p),
            "brier": brier_score(y, p),
            "ece": expected_calibration_error(y, p, ece_bins),
        }
    delta = {m: measured["challenger"][m] - measured["champion"][m] for m in MEASURES}

    low = {m: float("nan") for m in MEASURES}
    high = dict(low)
    if rows >= MIN_ROWS:
        rng = np.random.default_rng(seed)
        subset = _bootstrap_rows(y, rng)
        if subset is None:
            deviations, used = _delta_deviations(
                y, p_champion, p_challenger, resamples=resamples, ece_bins=ece_bins, rng=rng
            )
        else:
            deviations, used = _delta_deviations(
                y[subset], p_champion[subset], p_challenger[subset], resamples=resamples, ece_bins=ece_bins, rng=rng
            )
        scale = math.sqrt(used / rows)
        for i, m in enumerate(MEASURES):
            low[m], high[m] = _interval(delta[m], deviations[:, i], level, scale)
    better = {m: _verdict(m, low[m], high[m]) for m in MEASURES}
    return ModelComparison(
        rows=rows,
        events=events,
        champion=measured["champion"],
        challenger=measured["challenger"],
        delta=delta,
        delta_low=low,
        delta_high=high,
        better=better,
        recommendation=_recommendation(rows, events, delta, low, high, better, level),
        level=level,
    )


# --- forecast jobs ---------------------------------------------------------------------------------


class ForecastRows(NamedTuple):
    """One model's forecasts of the labelled rows and its interval's bounds, on the target's scale."""

    forecast: np.ndarray
    low: np.ndarray
    high: np.ndarray


def _checked_numbers(values: np.ndarray, name: str, rows: int | None) -> np.ndarray:
    x = np.asarray(values)
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {x.shape}")
    if rows is not None and x.size != rows:
        raise ValueError(f"{name} has {x.size} values but there are {rows} actuals: they must be the same rows")
    if x.size and not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise ValueError(f"{name} must be numbers, got dtype {x.dtype}")
    x = x.astype(np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        raise ValueError(f"{name} must be finite numbers; {int(bad.sum())} are not, e.g. {x[bad][:5].tolist()}")
    return x


def _checked_forecasts(rows_of: ForecastRows, name: str, rows: int) -> ForecastRows:
    parts = zip(("forecast", "low", "high"), rows_of, strict=True)
    checked = ForecastRows(*(_checked_numbers(values, f"{name} {part}", rows) for part, values in parts))
    inverted = checked.low > checked.high
    if inverted.any():
        raise ValueError(f"{name} interval has low above high on {int(inverted.sum())} rows")
    return checked


def _forecast_errors(actual: np.ndarray, model: ForecastRows) -> np.ndarray:
    """(rows, 3): each row's absolute error, squared error and whether the interval covers the actual."""
    error = actual - model.forecast
    covered = (actual >= model.low) & (actual <= model.high)
    return np.column_stack([np.abs(error), error * error, covered.astype(np.float64)])


def _forecast_measures(sums: np.ndarray, interval_level: float) -> np.ndarray:
    """(k, 4) MAE, RMSE, coverage and coverage miss from (k, 3) weighted means of _forecast_errors' columns."""
    return np.column_stack([sums[:, 0], np.sqrt(sums[:, 1]), sums[:, 2], np.abs(sums[:, 2] - interval_level)])


def _forecast_delta_deviations(
    errors: tuple[np.ndarray, np.ndarray], *, interval_level: float, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """(resamples, 4) bootstrap deltas of FORECAST_MEASURES minus the same deltas under unit weights."""
    both = np.column_stack(errors)
    m = both.shape[0]

    def deltas(means: np.ndarray) -> np.ndarray:
        return _forecast_measures(means[:, 3:], interval_level) - _forecast_measures(means[:, :3], interval_level)

    reference = deltas(both.mean(axis=0, keepdims=True))
    block = max(1, min(resamples, _BLOCK_BYTES // (8 * max(m, 1))))
    out = np.empty((resamples, len(FORECAST_MEASURES)))
    done = 0
    while done < resamples:
        k = min(block, resamples - done)
        weights = _POISSON_TABLE[rng.integers(0, 65536, size=(k, m), dtype=np.uint16)]
        total = weights.sum(axis=1, keepdims=True)
        total[total == 0] = np.nan
        out[done : done + k] = deltas((weights @ both) / total)
        done += k
    return out - reference


def _coverage_finding(level: float, interval_level: float, comparison: dict, owner: str) -> str:
    """'the challenger's interval coverage 0.902 is closer to the 90% level than the champion's 0.861 (by 0.037, 95% interval …)'."""
    delta, low, high = comparison["delta"], comparison["low"], comparison["high"]
    closer = delta < 0.0
    size, a, b = (-delta, -high, -low) if closer else (delta, low, high)
    size_s, a_s, b_s = _numbers(size, a, b)
    mine, theirs = _numbers(comparison["challenger"], comparison["champion"])
    return (
        f"{owner} interval coverage {mine} is {'closer to' if closer else 'further from'} the {100 * interval_level:g}% level than "
        f"the champion's {theirs} (by {size_s}, {100 * level:g}% interval {a_s} to {b_s})"
    )


def _forecast_recommendation(
    rows: int, compared: dict[str, dict], better: dict[str, str], level: float, interval_level: float
) -> str:
    """The sentence of `compared_forecasts`, by the rules listed there."""
    if rows == 0:
        return "no labelled rows: nothing to compare; keep the champion"
    if rows < MIN_ROWS:
        return f"only {rows} labelled rows, too few to compare: keep the champion and gather more nights"

    def found(measure: str, owner: str) -> str:
        if measure == "coverage":
            return _coverage_finding(level, interval_level, compared["coverage_miss"], owner)
        c = compared[measure]
        return _finding(level, measure, c["delta"], c["low"], c["high"], owner)

    mae = compared["mae"]
    return _recommended(
        found,
        better,
        ("mae", "rmse", "coverage"),
        rows=rows,
        level=level,
        lead="mae",
        lead_numbers=(mae["delta"], mae["low"], mae["high"]),
        lead_name="MAE",
    )


def compared_forecasts(
    actual: np.ndarray,
    champion: ForecastRows,
    challenger: ForecastRows,
    *,
    interval_level: float,
    level: float = 0.95,
    resamples: int = 400,
    seed: int = 0,
) -> ModelComparison:
    """A forecast job's champion and challenger measured on the same labelled rows, with the paired
    bootstrap interval (at `level`) of each difference challenger − champion, and a recommendation.

    `actual` are the realized quantities; `champion` and `challenger` each model's forecast and interval
    bounds for the same rows, in the same order; `interval_level` the level both intervals were drawn at
    (the spec's `prediction.interval_level`). ValueError on mismatched lengths, values that are not finite
    numbers, or an interval whose low lies above its high.

    Point estimates are exact on all rows: MAE = mean |actual − forecast|, RMSE = √mean (actual − forecast)²,
    coverage = the share of rows with low ≤ actual ≤ high, coverage_miss = |coverage − interval_level|.

    The bootstrap is `compared_models`' (seeded Poisson(1) weights per row, the same weights for both
    models, percentile interval moved to the exact point delta, beyond BOOTSTRAP_ROWS a random subset
    with its deviations shrunk by √(subset / rows); none under MIN_ROWS rows). MAE, RMSE and the coverage
    miss are decided when their interval excludes 0, lower being better; `coverage` takes the verdict of
    `coverage_miss` (the interval closer to its level is the better one; a wider interval that covers
    more than the level asks is no better), while its own delta and interval are of the coverages.

    The recommendation is one sentence, by the first rule that applies (MAE plays AUC's part):
    1. no labelled rows, or fewer than MIN_ROWS → keep the champion, as `compared_models` says;
    2. some measure decided for each model → "mixed: the challenger's <gains> but its <losses>; keep the
       champion until someone weighs the trade-off";
    3. MAE decided for the challenger → "promote the challenger: its MAE is lower by d (L% interval a to b)…",
       naming RMSE and coverage as better or "no worse";
    4. something decided for the champion → "keep the champion: the challenger's <measure> is higher by …";
    5. only RMSE or coverage decided for the challenger → "no clear difference in MAE on N labelled rows (…),
       though the challenger's <measure> …: keep the champion and gather more nights";
    6. nothing decided → "no clear difference on N labelled rows: keep the champion and gather more nights".
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    if not 0.0 < interval_level < 1.0:
        raise ValueError(f"interval_level must lie strictly between 0 and 1, got {interval_level}")
    if int(resamples) != resamples or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples}")
    resamples = int(resamples)
    y = _checked_numbers(actual, "actuals", None)
    rows = int(y.size)
    models = tuple(
        _checked_forecasts(ForecastRows(*model), name, rows)
        for model, name in ((champion, "champion"), (challenger, "challenger"))
    )
    errors = tuple(_forecast_errors(y, model) for model in models)
    nan = float("nan")
    measured = [
        dict(
            zip(
                FORECAST_MEASURES,
                _forecast_measures(e.mean(axis=0, keepdims=True), interval_level)[0].tolist(),
                strict=True,
            )
        )
        if rows
        else dict.fromkeys(FORECAST_MEASURES, nan)
        for e in errors
    ]
    delta = {m: measured[1][m] - measured[0][m] for m in FORECAST_MEASURES}
    low = dict.fromkeys(FORECAST_MEASURES, nan)
    high = dict(low)
    if rows >= MIN_ROWS:
        rng = np.random.default_rng(seed)
        subset = np.sort(rng.choice(rows, size=BOOTSTRAP_ROWS, replace=False)) if rows > BOOTSTRAP_ROWS else None
        used = errors if subset is None else tuple(e[subset] for e in errors)
        deviations = _forecast_delta_deviations(used, interval_level=interval_level, resamples=resamples, rng=rng)
        scale = math.sqrt(used[0].shape[0] / rows)
        for i, m in enumerate(FORECAST_MEASURES):
            low[m], high[m] = _interval(delta[m], deviations[:, i], level, scale)
    better = {m: _verdict(m, low[m], high[m]) for m in FORECAST_MEASURES if m != "coverage"}
    better["coverage"] = better["coverage_miss"]
    compared = {
        m: {"champion": measured[0][m], "challenger": measured[1][m], "delta": delta[m], "low": low[m], "high": high[m]}
        for m in FORECAST_MEASURES
    }
    # The coverage finding reads the coverages themselves beside the miss's difference.
    compared["coverage_miss"] |= {"champion": measured[0]["coverage"], "challenger": measured[1]["coverage"]}
    return ModelComparison(
        rows=rows,
        events=None,
        champion=measured[0],
        challenger=measured[1],
        delta=delta,
        delta_low=low,
        delta_high=high,
        better={m: better[m] for m in FORECAST_MEASURES},
        recommendation=_forecast_recommendation(rows, compared, better, level, interval_level),
        level=level,
        measures=FORECAST_MEASURES,
    )
