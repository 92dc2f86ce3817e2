"""Champion against challenger on the same labelled rows (tasks/monitoring/champion_outcomes.py).

Reference values come from independent computations here: scipy.stats.mannwhitneyu for AUC, a
bin-by-bin loop for ECE, and a plain row-resampling bootstrap for the intervals.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import expit
from scipy.stats import mannwhitneyu, rankdata

from tasks.monitoring import champion_outcomes
from tasks.monitoring.champion_outcomes import (
    FORECAST_MEASURES,
    MEASURES,
    ForecastRows,
    ModelComparison,
    compared_forecasts,
    compared_models,
)
from tasks.settings import PROJECT_ROOT

# --- independent references ----------------------------------------------------------------------


def auc_reference(y: np.ndarray, p: np.ndarray) -> float:
    events, non_events = p[y == 1], p[y == 0]
    u = mannwhitneyu(events, non_events, alternative="two-sided").statistic
    return float(u) / (events.size * non_events.size)


def auc_by_ranks(y: np.ndarray, p: np.ndarray) -> float:
    positives = int(y.sum())
    negatives = y.size - positives
    return (rankdata(p)[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def brier_reference(y: np.ndarray, p: np.ndarray) -> float:
    return sum((float(a) - float(b)) ** 2 for a, b in zip(p, y, strict=True)) / y.size


def ece_reference(y: np.ndarray, p: np.ndarray, bins: int) -> float:
    total = 0.0
    for k in range(bins):
        upper = p < (k + 1) / bins if k < bins - 1 else p <= 1.0
        inside = (p >= k / bins) & upper
        if inside.any():
            total += inside.sum() / y.size * abs(p[inside].mean() - y[inside].mean())
    return total


def measures_reference(y: np.ndarray, p: np.ndarray, bins: int = 10) -> np.ndarray:
    return np.array([auc_by_ranks(y, p), np.mean((p - y) ** 2), ece_reference(y, p, bins)])


# --- simulated data ------------------------------------------------------------------------------


def two_signal_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outcomes ~ Bernoulli(expit(z1 + z2)); the champion knows z1 only, the challenger z1 and z2.
    Both give the calibrated probability of what they know (the champion's by Gauss–Hermite)."""
    rng = np.random.default_rng(seed)
    z1, z2 = rng.normal(size=n), rng.normal(size=n)
    y = (rng.random(n) < expit(z1 + z2)).astype(np.int64)
    nodes, weights = hermegauss(40)
    champion = expit(z1[:, None] + nodes[None, :]) @ (weights / weights.sum())
    challenger = expit(z1 + z2)
    return y, champion, challenger


def equally_good_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Same generating process for both models: the signal plus independent noise of equal size."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    y = (rng.random(n) < expit(-0.5 + 1.5 * z)).astype(np.int64)
    champion = expit(-0.5 + 1.2 * (z + 0.7 * rng.normal(size=n)))
    challenger = expit(-0.5 + 1.2 * (z + 0.7 * rng.normal(size=n)))
    return y, champion, challenger


def numbers_in(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d+", text)]


# --- point estimates ------------------------------------------------------------------------------


def test_auc_is_mann_whitney_with_ties_half_credit() -> None:
    rng = np.random.default_rng(3)
    n = 3000
    signal = rng.normal(size=n)
    y = (rng.random(n) < expit(signal)).astype(np.int64)
    champion = np.round(expit(signal + rng.normal(size=n)), 2)  # ~100 distinct values: many ties
    challenger = np.round(expit(0.5 * signal + rng.normal(size=n)), 1)  # 11 distinct values
    assert np.unique(champion).size < 120 and np.unique(challenger).size <= 11
    result = compared_models(y, champion, challenger, resamples=20)
    assert result.champion["auc"] == pytest.approx(auc_reference(y, champion), abs=1e-12)
    assert result.challenger["auc"] == pytest.approx(auc_reference(y, challenger), abs=1e-12)
    assert result.delta["auc"] == pytest.approx(auc_reference(y, challenger) - auc_reference(y, champion), abs=1e-12)
    assert result.rows == n and result.events == int(y.sum())


def test_auc_of_constant_probabilities_is_one_half() -> None:
    y = np.array([0, 1, 0, 1, 1, 0])
    result = compared_models(y, np.full(6, 0.3), np.array([0.1, 0.9, 0.2, 0.8, 0.7, 0.3]), resamples=10)
    assert result.champion["auc"] == 0.5
    assert result.challenger["auc"] == 1.0


@pytest.mark.parametrize("bins", [10, 7, 1])
def test_brier_and_ece_match_a_bin_by_bin_computation(bins: int) -> None:
    rng = np.random.default_rng(11)
    n = 5000
    p = rng.beta(0.7, 2.0, size=n)
    p[:5] = [0.0, 1.0, 0.5, 0.25, 0.999999]  # the ends and some edges
    y = (rng.random(n) < np.clip(1.3 * p, 0, 1)).astype(np.int64)
    q = np.round(rng.random(n), 2)
    result = compared_models(y, p, q, resamples=10, ece_bins=bins)
    assert result.champion["brier"] == pytest.approx(brier_reference(y, p), rel=1e-12)
    assert result.challenger["brier"] == pytest.approx(brier_reference(y, q), rel=1e-12)
    assert result.champion["ece"] == pytest.approx(ece_reference(y, p, bins), rel=1e-9, abs=1e-12)
    assert result.challenger["ece"] == pytest.approx(ece_reference(y, q, bins), rel=1e-9, abs=1e-12)
    assert result.champion["ece"] > 0.01  # the labels were drawn miscalibrated on purpose


def test_labels_may_be_booleans_or_floats() -> None:
    y, a, b = two_signal_rows(500, seed=2)
    reference = compared_models(y, a, b, resamples=30)
    assert compared_models(y.astype(bool), a, b, resamples=30) == reference
    assert compared_models(y.astype(np.float32), list(a), b, resamples=30) == reference


# --- decisions and the recommendation ------------------------------------------------------------


def test_a_truly_better_challenger_is_promoted() -> None:
    y, champion, challenger = two_signal_rows(50_000, seed=5)
    result = compared_models(y, champion, challenger, level=0.99)
    assert result.better["auc"] == "challenger"
    assert result.better["brier"] == "challenger"
    assert result.better["ece"] != "champion"
    assert 0.0 < result.delta_low["auc"] < result.delta["auc"] < result.delta_high["auc"]
    assert result.recommendation.startswith("promote the challenger: its AUC is higher by")
    # The sentence carries the numbers: the AUC delta and its interval, to the decimals shown.
    shown = numbers_in(result.recommendation.split("its AUC is higher by")[1])[:3]
    for value, exact in zip(
        shown, (result.delta["auc"], result.delta_low["auc"], result.delta_high["auc"]), strict=True
    ):
        assert abs(value - exact) <= 0.5 * 10**-3 + 1e-12
    assert "99% interval" in result.recommendation


def test_swapped_roles_keep_the_champion() -> None:
    y, champion, challenger = two_signal_rows(50_000, seed=5)
    result = compared_models(y, challenger, champion, level=0.99)
    assert result.better["auc"] == "champion"
    assert result.better["brier"] == "champion"
    assert result.delta_high["auc"] < 0.0
    assert result.recommendation.startswith("keep the champion: the challenger's AUC is lower by")


def test_identical_models_show_no_difference() -> None:
    y, champion, _ = two_signal_rows(20_000, seed=8)
    result = compared_models(y, champion, champion.copy())
    for m in MEASURES:
        assert result.delta[m] == 0.0
        assert result.delta_low[m] == 0.0 == result.delta_high[m]
        assert result.better[m] == "undecided"
    assert (
        result.recommendation == "no clear difference on 20 000 labelled rows: keep the champion and gather more nights"
    )


def test_better_ranking_with_worse_calibration_is_mixed() -> None:
    y, champion, challenger = two_signal_rows(30_000, seed=9)
    overconfident = expit(np.log(challenger / (1 - challenger)) + 1.0)  # same ranking, shifted up a logit
    result = compared_models(y, champion, overconfident)
    assert result.better["auc"] == "challenger"
    assert result.better["ece"] == "champion"
    assert result.recommendation.startswith("mixed: the challenger's AUC is higher by")
    assert "but its ECE is higher by" in result.recommendation
    assert "keep the champion" in result.recommendation


def test_better_calibration_alone_does_not_promote() -> None:
    y, champion, challenger = equally_good_rows(20_000, seed=21)
    shifted = expit(np.log(champion / (1 - champion)) + 0.8)
    result = compared_models(y, shifted, challenger)
    assert result.better["auc"] == "undecided"
    assert result.better["ece"] == "challenger" and result.better["brier"] == "challenger"
    assert result.recommendation.startswith("no clear difference in AUC on 20 000 labelled rows")
    assert result.recommendation.endswith("keep the champion and gather more nights")


def test_rows_long_has_one_row_per_measure() -> None:
    y, champion, challenger = two_signal_rows(2000, seed=1)
    result = compared_models(y, champion, challenger, resamples=50)
    rows = result.rows_long()
    assert [r["measure"] for r in rows] == ["auc", "brier", "ece"]
    for r in rows:
        m = r["measure"]
        assert set(r) == {"measure", "champion", "challenger", "delta", "delta_low", "delta_high", "better"}
        assert r["champion"] == result.champion[m] and r["challenger"] == result.challenger[m]
        assert r["delta"] == pytest.approx(r["challenger"] - r["champion"], abs=1e-15)
        assert r["delta_low"] <= r["delta"] <= r["delta_high"]
        assert r["better"] == result.better[m]
    json.dumps(rows)  # plain types only


# --- the paired bootstrap ------------------------------------------------------------------------


def test_the_delta_interval_covers_zero_when_models_are_equally_good() -> None:
    covered = 0
    datasets = 150
    for seed in range(datasets):
        y, champion, challenger = equally_good_rows(1200, seed=1000 + seed)
        result = compared_models(y, champion, challenger, level=0.9, resamples=200, seed=seed)
        low, high = result.delta_low["auc"], result.delta_high["auc"]
        assert low < high
        covered += low <= 0.0 <= high
        assert (result.better["auc"] == "undecided") == (low <= 0.0 <= high)
    assert 0.80 <= covered / datasets <= 0.97, covered  # nominal 0.90; binomial sd ≈ 0.025


def test_the_interval_agrees_with_a_plain_row_resampling_bootstrap() -> None:
    y, champion, challenger = equally_good_rows(4000, seed=77)
    level = 0.9
    result = compared_models(y, champion, challenger, level=level, resamples=400, seed=4)
    rng = np.random.default_rng(123)
    deltas = []
    for _ in range(400):
        i = rng.integers(0, y.size, y.size)
        deltas.append(measures_reference(y[i], challenger[i]) - measures_reference(y[i], champion[i]))
    low, high = np.quantile(np.array(deltas), [(1 - level) / 2, (1 + level) / 2], axis=0)
    for k, m in enumerate(MEASURES):
        width, reference_width = result.delta_high[m] - result.delta_low[m], high[k] - low[k]
        assert 0.75 < width / reference_width < 1.33, (m, width, reference_width)
        middle = (result.delta_high[m] + result.delta_low[m]) / 2
        assert abs(middle - (high[k] + low[k]) / 2) < 0.25 * reference_width, m


def test_the_pairing_narrows_the_interval_of_a_near_copy() -> None:
    """A challenger that is the champion plus a little noise: the paired interval of the AUC delta is far
    narrower than two independent AUC intervals (Hanley–McNeil standard errors) would make it."""
    rng = np.random.default_rng(31)
    y, champion, _ = two_signal_rows(10_000, seed=31)
    challenger = np.clip(champion + rng.normal(scale=0.01, size=y.size), 0, 1)
    result = compared_models(y, champion, challenger, level=0.9)
    n1, n0 = int(y.sum()), int(y.size - y.sum())

    def hanley_mcneil(a: float) -> float:
        q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
        return math.sqrt((a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0))

    unpaired = 2 * 1.645 * math.hypot(hanley_mcneil(result.champion["auc"]), hanley_mcneil(result.challenger["auc"]))
    assert result.delta_high["auc"] - result.delta_low["auc"] < 0.2 * unpaired


def test_subsampled_bootstrap_is_rescaled_to_all_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    y, champion, challenger = equally_good_rows(40_000, seed=55)
    full = compared_models(y, champion, challenger, level=0.9, seed=1)
    monkeypatch.setattr(champion_outcomes, "BOOTSTRAP_ROWS", 5000)
    sub = compared_models(y, champion, challenger, level=0.9, seed=1)
    assert sub.delta == full.delta  # point estimates always use every row
    for m in ("auc", "brier"):
        ratio = (sub.delta_high[m] - sub.delta_low[m]) / (full.delta_high[m] - full.delta_low[m])
        assert 0.75 < ratio < 1.33, (m, ratio)
    assert sub.delta_low != full.delta_low


def test_the_bootstrap_is_deterministic_given_the_seed() -> None:
    y, champion, challenger = equally_good_rows(3000, seed=6)
    first = compared_models(y, champion, challenger, seed=42, resamples=100)
    assert compared_models(y, champion, challenger, seed=42, resamples=100) == first
    other = compared_models(y, champion, challenger, seed=43, resamples=100)
    assert other.delta == first.delta and other.delta_low != first.delta_low


# --- degenerate inputs -----------------------------------------------------------------------------


def test_zero_rows() -> None:
    empty = np.array([], dtype=np.float64)
    result = compared_models(np.array([], dtype=np.int64), empty, empty)
    assert (result.rows, result.events) == (0, 0)
    for m in MEASURES:
        assert math.isnan(result.champion[m]) and math.isnan(result.delta[m])
        assert math.isnan(result.delta_low[m]) and math.isnan(result.delta_high[m])
        assert result.better[m] == "undecided"
    assert "no labelled rows" in result.recommendation and "keep the champion" in result.recommendation


def test_too_few_rows_decide_nothing() -> None:
    y = np.array([0, 1, 1])
    result = compared_models(y, np.array([0.9, 0.1, 0.2]), np.array([0.1, 0.8, 0.9]))
    assert result.champion["auc"] == 0.0 and result.challenger["auc"] == 1.0  # measured all the same
    for m in MEASURES:
        assert math.isnan(result.delta_low[m]) and math.isnan(result.delta_high[m])
        assert result.better[m] == "undecided"
    assert result.recommendation == "only 3 labelled rows, too few to compare: keep the champion and gather more nights"
    assert (
        compared_models(np.tile(y, 4), np.tile([0.9, 0.1, 0.2], 4), np.tile([0.1, 0.8, 0.9], 4)).better["auc"]
        == "challenger"
    )


@pytest.mark.parametrize(("outcome", "missing"), [(0, "no events"), (1, "no non-events")])
def test_one_class_only(outcome: int, missing: str) -> None:
    rng = np.random.default_rng(12)
    n = 800
    y = np.full(n, outcome)
    champion = rng.random(n)
    result = compared_models(y, champion, rng.random(n))
    assert result.events == (0 if outcome == 0 else n)
    assert math.isnan(result.champion["auc"]) and math.isnan(result.challenger["auc"])
    assert (
        math.isnan(result.delta["auc"]) and math.isnan(result.delta_low["auc"]) and math.isnan(result.delta_high["auc"])
    )
    assert result.better["auc"] == "undecided"
    assert result.recommendation.startswith("keep the champion: AUC cannot be compared")
    assert f"{missing} among the 800 labelled rows" in result.recommendation
    # Brier and ECE are still measured and bootstrapped.
    assert result.champion["brier"] == pytest.approx(brier_reference(y, champion), rel=1e-12)
    assert (
        math.isfinite(result.delta_low["brier"])
        and result.delta_low["brier"] <= result.delta["brier"] <= result.delta_high["brier"]
    )


def test_one_class_names_a_decided_calibration_difference() -> None:
    rng = np.random.default_rng(13)
    y = np.zeros(2000, dtype=np.int64)
    result = compared_models(y, rng.uniform(0.2, 0.4, 2000), rng.uniform(0.0, 0.05, 2000))
    assert result.better["brier"] == "challenger" and result.better["ece"] == "challenger"
    assert "the challenger's Brier score is lower by" in result.recommendation


def test_a_single_event_leaves_auc_undecided() -> None:
    rng = np.random.default_rng(14)
    y = np.zeros(300, dtype=np.int64)
    y[7] = 1
    result = compared_models(y, rng.random(300), rng.random(300))
    assert math.isfinite(result.champion["auc"])
    assert result.better["auc"] == "undecided"  # most resamples draw the one event 0 or 1 times


@pytest.mark.parametrize(
    ("labels", "champion", "challenger", "message"),
    [
        ([0, 1, 1], [0.1, 0.2, 0.3], [0.1, 0.2], "challenger has 2 probabilities but there are 3 labels"),
        ([0, 1], [0.1, 0.2, 0.3], [0.1, 0.2], "champion has 3 probabilities but there are 2 labels"),
        ([0, 1, 1], [0.1, 1.2, 0.3], [0.1, 0.2, 0.3], r"champion probabilities must lie in \[0, 1\]; 1 do not"),
        ([0, 1, 1], [0.1, 0.2, 0.3], [-0.1, 0.2, 0.3], r"challenger probabilities must lie in \[0, 1\]"),
        ([0, 1, 1], [0.1, 0.2, 0.3], [np.nan, 0.2, 0.3], r"challenger probabilities must lie in \[0, 1\].*NaN"),
        ([0, 2, 1], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], "labels must be 0 or 1; 1 are not"),
        ([0, np.nan, 1], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], "labels must be 0 or 1"),
        ([[0, 1]], [[0.1, 0.2]], [[0.1, 0.2]], "labels must be one-dimensional"),
        (["a", "b"], [0.1, 0.2], [0.1, 0.2], "labels must be 0/1"),
        ([0, 1], ["x", "y"], [0.1, 0.2], "champion probabilities must be numbers"),
    ],
)
def test_bad_inputs_are_refused_by_name(labels, champion, challenger, message) -> None:
    with pytest.raises(ValueError, match=message):
        compared_models(np.array(labels), np.array(champion), np.array(challenger))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"level": 1.0}, "level"),
        ({"level": 0.0}, "level"),
        ({"resamples": 0}, "resamples"),
        ({"ece_bins": 0}, "ece_bins"),
    ],
)
def test_bad_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compared_models(np.array([0, 1]), np.array([0.2, 0.4]), np.array([0.3, 0.5]), **options)


def test_the_result_is_frozen() -> None:
    result = compared_models(np.array([0, 1]), np.array([0.2, 0.4]), np.array([0.3, 0.5]), resamples=5)
    assert isinstance(result, ModelComparison)
    with pytest.raises(AttributeError):
        result.rows = 3  # type: ignore[misc]


def test_importing_loads_no_heavy_library() -> None:
    code = (
        "import sys, json\n"
        "import tasks.monitoring.champion_outcomes\n"
        "heavy = ('scipy.stats', 'sklearn', 'torch', 'xgboost', 'prefect', 'polars')\n"
        "print(json.dumps([h for h in heavy if h in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


# --- forecast jobs: MAE, RMSE and interval coverage --------------------------------------------------


def poisson_rows(
    n: int,
    seed: int,
    *,
    champion_noise: float,
    challenger_noise: float,
    champion_width: float = 1.645,
    challenger_width: float = 1.645,
) -> tuple[np.ndarray, ForecastRows, ForecastRows]:
    """Counts ~ Poisson(μ); each model forecasts μ times lognormal noise, with the interval f ± width·√f (clipped at 0)."""
    rng = np.random.default_rng(seed)
    mu = np.exp(rng.normal(1.0, 0.6, n))
    y = rng.poisson(mu).astype(np.float64)

    def model(noise: float, width: float) -> ForecastRows:
        f = mu * np.exp(rng.normal(0.0, noise, n))
        return ForecastRows(f, np.maximum(f - width * np.sqrt(f), 0.0), f + width * np.sqrt(f))

    return y, model(champion_noise, champion_width), model(challenger_noise, challenger_width)


def forecast_measures_reference(y: np.ndarray, model: ForecastRows, level: float) -> np.ndarray:
    error = [float(a) - float(f) for a, f in zip(y, model.forecast, strict=True)]
    covered = sum(1 for a, lo, hi in zip(y, model.low, model.high, strict=True) if lo <= a <= hi) / y.size
    return np.array(
        [
            sum(abs(e) for e in error) / y.size,
            math.sqrt(sum(e * e for e in error) / y.size),
            covered,
            abs(covered - level),
        ]
    )


def test_forecast_measures_match_a_row_by_row_computation() -> None:
    y, champion, challenger = poisson_rows(1500, seed=1, champion_noise=0.2, challenger_noise=0.1)
    result = compared_forecasts(y, champion, challenger, interval_level=0.9, resamples=50)
    assert result.measures == FORECAST_MEASURES and result.events is None and result.rows == 1500
    for side, model in (("champion", champion), ("challenger", challenger)):
        np.testing.assert_allclose(
            [getattr(result, side)[m] for m in FORECAST_MEASURES],
            forecast_measures_reference(y, model, 0.9),
            rtol=1e-12,
        )
    rows = result.rows_long()
    assert [r["measure"] for r in rows] == list(FORECAST_MEASURES)
    for r in rows:
        assert r["delta_low"] <= r["delta"] <= r["delta_high"] and r["delta"] == pytest.approx(
            r["challenger"] - r["champion"], abs=1e-15
        )
    json.dumps(rows)


def test_a_more_accurate_challenger_is_promoted_and_a_worse_one_is_not() -> None:
    y, champion, challenger = poisson_rows(4000, seed=2, champion_noise=0.35, challenger_noise=0.05)
    result = compared_forecasts(y, champion, challenger, interval_level=0.9)
    assert result.better["mae"] == result.better["rmse"] == "challenger"
    assert result.recommendation.startswith("promote the challenger: its MAE is lower by"), result.recommendation
    swapped = compared_forecasts(y, challenger, champion, interval_level=0.9)
    assert swapped.better["mae"] == "champion"
    assert swapped.recommendation.startswith("keep the champion: the challenger's MAE is higher by"), (
        swapped.recommendation
    )


def test_coverage_is_judged_by_its_distance_to_the_level_not_by_more_coverage() -> None:
    """Same forecasts; the champion's interval is too narrow, the challenger's about right, a third one far too wide."""
    y, base, _ = poisson_rows(4000, seed=3, champion_noise=0.05, challenger_noise=0.05)
    f = base.forecast
    narrow, right, wide = (
        ForecastRows(f, np.maximum(f - w * np.sqrt(f), 0), f + w * np.sqrt(f)) for w in (0.8, 1.6, 4.0)
    )
    result = compared_forecasts(y, narrow, right, interval_level=0.9)
    assert result.champion["coverage"] < 0.8 and abs(result.challenger["coverage"] - 0.9) < 0.03
    assert result.better["mae"] == "undecided" and result.delta["mae"] == 0.0
    assert result.better["coverage"] == result.better["coverage_miss"] == "challenger"
    assert result.recommendation.startswith("no clear difference in MAE on 4 000 labelled rows")
    assert (
        "the challenger's interval coverage" in result.recommendation
        and "closer to the 90% level" in result.recommendation
    )
    # Wider than the level asks covers more, and is further from it: the challenger's coverage is worse.
    over = compared_forecasts(y, right, wide, interval_level=0.9)
    assert over.delta["coverage"] > 0 and over.better["coverage"] == "champion"
    assert over.recommendation.startswith("keep the champion: the challenger's interval coverage")
    assert "further from the 90% level" in over.recommendation


def test_the_forecast_interval_agrees_with_a_plain_row_resampling_bootstrap() -> None:
    y, champion, challenger = poisson_rows(3000, seed=4, champion_noise=0.2, challenger_noise=0.18)
    level = 0.9
    result = compared_forecasts(y, champion, challenger, interval_level=0.9, level=level, resamples=400, seed=4)
    rng = np.random.default_rng(5)
    deltas = []
    for _ in range(300):
        i = rng.integers(0, y.size, y.size)
        deltas.append(
            forecast_measures_reference(y[i], ForecastRows(*(v[i] for v in challenger)), 0.9)
            - forecast_measures_reference(y[i], ForecastRows(*(v[i] for v in champion)), 0.9)
        )
    low, high = np.quantile(np.array(deltas), [(1 - level) / 2, (1 + level) / 2], axis=0)
    for k, m in enumerate(FORECAST_MEASURES[:3]):
        width, reference_width = result.delta_high[m] - result.delta_low[m], high[k] - low[k]
        assert 0.75 < width / reference_width < 1.33, (m, width, reference_width)
        assert (
            abs((result.delta_high[m] + result.delta_low[m]) / 2 - (high[k] + low[k]) / 2) < 0.25 * reference_width
        ), m


def test_the_forecast_delta_interval_covers_zero_when_models_are_equally_good() -> None:
    covered = 0
    datasets = 120
    for seed in range(datasets):
        y, champion, challenger = poisson_rows(800, seed=500 + seed, champion_noise=0.2, challenger_noise=0.2)
        result = compared_forecasts(y, champion, challenger, interval_level=0.9, level=0.9, resamples=200, seed=seed)
        covered += result.delta_low["mae"] <= 0.0 <= result.delta_high["mae"]
    assert 0.80 <= covered / datasets <= 0.97, covered


def test_forecast_subsampling_and_degenerate_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    y, champion, challenger = poisson_rows(20_000, seed=6, champion_noise=0.2, challenger_noise=0.19)
    full = compared_forecasts(y, champion, challenger, interval_level=0.9, seed=1)
    monkeypatch.setattr(champion_outcomes, "BOOTSTRAP_ROWS", 4000)
    sub = compared_forecasts(y, champion, challenger, interval_level=0.9, seed=1)
    assert sub.delta == full.delta
    for m in ("mae", "rmse", "coverage"):
        assert 0.7 < (sub.delta_high[m] - sub.delta_low[m]) / (full.delta_high[m] - full.delta_low[m]) < 1.4, m
    monkeypatch.undo()
    assert compared_forecasts(y, champion, challenger, interval_level=0.9, seed=1) == full

    empty = ForecastRows(np.array([]), np.array([]), np.array([]))
    none = compared_forecasts(np.array([]), empty, empty, interval_level=0.9)
    assert none.rows == 0 and math.isnan(none.champion["mae"]) and none.recommendation.startswith("no labelled rows")
    few = compared_forecasts(
        y[:3], ForecastRows(*(v[:3] for v in champion)), ForecastRows(*(v[:3] for v in challenger)), interval_level=0.9
    )
    assert all(b == "undecided" for b in few.better.values()) and few.recommendation.startswith("only 3 labelled rows")


@pytest.mark.parametrize(
    ("actual", "champion", "challenger", "message"),
    [
        (
            [1.0, np.nan],
            ([1, 1], [0, 0], [2, 2]),
            ([1, 1], [0, 0], [2, 2]),
            "actuals must be finite numbers; 1 are not",
        ),
        (
            [1.0, 2.0],
            ([1, 1], [0, 0], [2, 2]),
            ([1], [0], [2]),
            "challenger forecast has 1 values but there are 2 actuals",
        ),
        (
            [1.0, 2.0],
            ([1, 1], [0, 3], [2, 2]),
            ([1, 1], [0, 0], [2, 2]),
            "champion interval has low above high on 1 rows",
        ),
        (
            [1.0, 2.0],
            ([1, np.inf], [0, 0], [2, 2]),
            ([1, 1], [0, 0], [2, 2]),
            "champion forecast must be finite numbers",
        ),
    ],
)
def test_bad_forecast_inputs_are_refused_by_name(actual, champion, challenger, message) -> None:
    arrays = [ForecastRows(*(np.array(v, dtype=np.float64) for v in side)) for side in (champion, challenger)]
    with pytest.raises(ValueError, match=message):
        compared_forecasts(np.array(actual), *arrays, interval_level=0.9)
