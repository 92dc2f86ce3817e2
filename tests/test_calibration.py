"""The probability and its interval mean what they say, on labelled rows the model never saw."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
from conftest import DEMO_END, DEMO_JOB, DemoEnv
from scipy import stats
from scipy.special import expit, logit

from tasks.demo.credit_data import demo_dates, write_demo_partitions
from tasks.demo.holdout import scored_with_labels
from tasks.jobspec import load_job_spec
from tasks.prediction.calibration import ProbabilityMap, predict_calibrator_from_metadata, predict_fitted_calibrator
from tasks.prediction.calibration_check import (
    predict_calibration_quality,
    predict_calibration_report,
    predict_calibration_table,
)
from tasks.settings import Settings


@pytest.fixture(scope="module")
def holdout(demo_env: DemoEnv, tmp_path_factory: pytest.TempPathFactory):
    """Two new demo days after the scored window, from another seed: never trained or calibrated on."""
    data = tmp_path_factory.mktemp("holdout-data")
    settings = Settings(data_dir=data)
    models = demo_env.settings.data_dir / "models"
    (data / "models").symlink_to(models, target_is_directory=True)
    days = demo_dates(DEMO_END + dt.timedelta(days=30), 2)
    write_demo_partitions(
        data / "raw" / DEMO_JOB, data / "labels" / DEMO_JOB, days, rows_per_day=15_000, seed=1234, shift_days=0
    )
    return settings, scored_with_labels(settings, DEMO_JOB, days)


def _report(scored, probability=None):
    level = load_job_spec(DEMO_JOB, Settings()).prediction.interval_level
    return predict_calibration_report(
        scored["probability"].to_numpy() if probability is None else probability,
        scored["probability_low"].to_numpy(),
        scored["probability_high"].to_numpy(),
        scored["outcome"].to_numpy(),
        interval_level=level,
        bins=20,
        min_rows=500,
    )


def test_expected_calibration_error_is_at_most_two_points(holdout) -> None:
    _, scored = holdout
    report = _report(scored)
    assert report.rows > 25_000 and report.events > 1_000
    assert report.ece <= 0.02, report.bins


def test_a_miscalibrated_probability_is_caught(holdout) -> None:
    _, scored = holdout
    assert _report(scored, np.clip(scored["probability"].to_numpy() * 1.5, 0, 1)).ece > 0.02


def test_observed_rates_fall_inside_the_interval_for_the_nominal_share_of_bins(holdout) -> None:
    _, scored = holdout
    report = _report(scored)
    assert report.bins_checked == 20
    assert report.coverage_share >= report.interval_level - 0.05, report.bins


def test_every_interval_is_proper_and_contains_its_probability(holdout) -> None:
    _, scored = holdout
    p, lo, hi = (scored[c].to_numpy() for c in ("probability", "probability_low", "probability_high"))
    assert ((lo <= p) & (p <= hi)).all()
    assert (hi - lo > 0).all()


# --- small hold-outs: the reachable range follows the data --------------------------------------


def true_risk(margin: np.ndarray) -> np.ndarray:
    """Monotone but not logistic in the margin: log-odds slope 0.8 below 0, 1.2 above."""
    return expit(0.4 + np.where(margin >= 0, 1.2, 0.8) * margin)


def small_holdout(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Margins from a mixture: a low-risk bulk and 3 % of rows in a cluster whose true risk is above
    0.9; outcomes drawn from `true_risk`. About 3.5 % events, most of them in the cluster."""
    rng = np.random.default_rng(seed)
    high = np.arange(rows) < round(0.03 * rows)
    margins = np.where(high, rng.normal(2.8, 0.5, rows), rng.normal(-6.8, 1.0, rows))
    return margins, (rng.random(rows) < true_risk(margins)).astype(np.float64)


def top_rows(margins: np.ndarray, share: float = 0.03) -> np.ndarray:
    return margins >= np.quantile(margins, 1.0 - share)


def legacy_metadata(margins: np.ndarray, outcomes: np.ndarray, bins: int = 40) -> dict:
    """What the previous training wrote (method binned_beta_jeffreys): equal-row bins, PAV on the raw rate."""
    order = np.argsort(margins, kind="stable")
    blocks = [[margins[g].sum(), outcomes[g].sum(), float(g.size)] for g in np.array_split(order, bins)]
    pooled: list[list[float]] = []
    for block in blocks:
        pooled.append(block)
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


LEVEL = 0.9


def test_a_small_holdout_reaches_the_risk_of_its_top_rows_and_stays_calibrated() -> None:
    margins, outcomes = small_holdout(1_500, seed=1)
    assert 0.025 < outcomes.mean() < 0.045
    top = top_rows(margins)
    assert true_risk(margins[top]).mean() > 0.9
    calibrator = predict_fitted_calibrator(margins, outcomes)
    calibrated = ProbabilityMap(calibrator, LEVEL).predict_calibrated_probability(margins[top])
    assert calibrated.probability.mean() >= 0.8 and np.mean(calibrated.probability >= 0.8) >= 0.9, (
        calibrated.probability
    )
    fresh_margins, fresh_outcomes = small_holdout(50_000, seed=2)
    quality = predict_calibration_quality(calibrator, fresh_margins, fresh_outcomes, level=LEVEL)
    assert quality.ece <= 0.02
    assert quality.reachable_high >= calibrated.probability.max()
    assert not any("saturates" in w for w in quality.warnings), quality.warnings


def test_the_flat_tailed_map_of_the_same_holdout_saturates_and_registration_says_so() -> None:
    margins, outcomes = small_holdout(1_500, seed=1)
    # As the user found it: a 1,541-row hold-out's 40 bins pooled down to 8, the top one wide.
    legacy = predict_calibrator_from_metadata(legacy_metadata(margins, outcomes, bins=8))
    quality = predict_calibration_quality(legacy, margins, outcomes, level=LEVEL)
    top = top_rows(margins)
    assert quality.reachable_high < outcomes[top].mean() - 0.2
    (saturation,) = [w for w in quality.warnings if "saturates" in w]
    assert f"at most {quality.reachable_high:.3f}" in saturation and "rows" in saturation
    (thin,) = [w for w in quality.warnings if "fewer than 10 events or non-events" in w]
    assert f"of {len(legacy.centers)} calibration bins" in thin


def test_the_interval_covers_the_true_probability_at_about_its_level() -> None:
    bulk, tail = np.array([-8.5, -7.5, -6.8, -5.5, -4.5]), np.array([2.3, 2.8, 3.3, 4.0])
    grid = np.concatenate([bulk, tail])
    covered = np.zeros(grid.size)
    fits = 200
    for seed in range(fits):
        calibrated = ProbabilityMap(predict_fitted_calibrator(*small_holdout(1_500, seed=100 + seed)), LEVEL)
        out = calibrated.predict_calibrated_probability(grid)
        covered += (out.low <= true_risk(grid)) & (true_risk(grid) <= out.high)
    share = covered / fits
    assert abs(share.mean() - LEVEL) <= 0.06, share
    assert share.min() >= LEVEL - 0.12, share


def test_the_interval_is_wider_in_the_tail_than_in_the_bulk_and_widens_beyond_the_data() -> None:
    margins, outcomes = small_holdout(1_500, seed=1)
    calibrator = predict_fitted_calibrator(margins, outcomes)
    probability_map = ProbabilityMap(calibrator, LEVEL)

    def log_odds_width(at: np.ndarray) -> np.ndarray:
        out = probability_map.predict_calibrated_probability(at)
        return logit(out.high) - logit(out.low)

    bulk = margins[(margins > np.quantile(margins, 0.25)) & (margins < np.quantile(margins, 0.75))]
    assert log_odds_width(margins[top_rows(margins)]).min() > log_odds_width(bulk).max()
    beyond = margins.max() + np.array([0.0, 1.0, 2.0, 4.0])
    assert np.all(np.diff(log_odds_width(beyond)) > 0)
    out = probability_map.predict_calibrated_probability(np.linspace(margins.min() - 5, margins.max() + 5, 2_001))
    assert np.all(np.diff(out.probability) > 0)
    assert np.all(np.diff(out.low) >= 0) and np.all(np.diff(out.high) >= 0)


def test_registration_warns_when_bins_hold_too_few_events() -> None:
    margins, outcomes = small_holdout(200, seed=3)
    assert outcomes.sum() < 10
    calibrator = predict_fitted_calibrator(margins, outcomes)
    quality = predict_calibration_quality(calibrator, margins, outcomes, level=LEVEL)
    events = int(outcomes.sum())
    overall = next(w for w in quality.warnings if "calibrate on more labelled rows" in w)
    assert f"{events:,} events and {200 - events:,} non-events in 200 rows" in overall
    thin = [b for b in quality.table if min(b["events"], b["rows"] - b["events"]) < 10]
    assert thin, quality.table
    assert any(
        f"{len(thin)} of {len(quality.table)} calibration bins hold fewer than 10" in w for w in quality.warnings
    )
    plentiful = predict_fitted_calibrator(*small_holdout(20_000, seed=4))
    assert predict_calibration_table(plentiful.to_metadata(), level=LEVEL).warnings == []


def test_the_table_from_metadata_alone_is_the_registration_table() -> None:
    margins, outcomes = small_holdout(1_500, seed=1)
    calibrator = predict_fitted_calibrator(margins, outcomes)
    quality = predict_calibration_quality(calibrator, margins, outcomes, level=LEVEL)
    table = predict_calibration_table(json.loads(json.dumps(calibrator.to_metadata())), level=LEVEL)
    assert table.bins == quality.table
    assert (table.reachable_low, table.reachable_high) == (quality.reachable_low, quality.reachable_high)
    assert sum(b["rows"] for b in table.bins) == margins.size and sum(b["events"] for b in table.bins) == outcomes.sum()
    assert table.bins[0]["margin_low"] == margins.min() and table.bins[-1]["margin_high"] == margins.max()
    at_ends = ProbabilityMap(calibrator, LEVEL).predict_calibrated_probability(np.array([margins.min(), margins.max()]))
    assert (table.reachable_low, table.reachable_high) == tuple(at_ends.probability)
    for b in table.bins:
        assert b["interval_low"] <= b["probability_from"] <= b["probability_to"] <= b["interval_high"]


def test_the_new_method_round_trips_and_names_a_broken_key() -> None:
    margins, outcomes = small_holdout(1_500, seed=1)
    calibrator = predict_fitted_calibrator(margins, outcomes)
    meta = json.loads(json.dumps(calibrator.to_metadata()))
    grid = np.linspace(-12, 8, 401)
    a = ProbabilityMap(calibrator, LEVEL).predict_calibrated_probability(grid)
    b = ProbabilityMap(predict_calibrator_from_metadata(meta), LEVEL).predict_calibrated_probability(grid)
    for x, y in ((a.probability, b.probability), (a.low, b.low), (a.high, b.high)):
        np.testing.assert_array_equal(x, y)
    for broken, key in (
        ({**meta, "upper_tail": {**meta["upper_tail"], "slope": "steep"}}, "upper_tail.slope"),
        ({k: v for k, v in meta.items() if k != "lower_tail"}, "lower_tail"),
        ({**meta, "margin_low": meta["margin_low"][:-1]}, "length"),
        ({**meta, "margin_high": [x - 100 for x in meta["margin_high"]]}, "margin_high"),
        ({**meta, "min_class_rows": 0}, "min_class_rows"),
    ):
        with pytest.raises(ValueError, match=key):
            predict_calibrator_from_metadata(broken)


def test_a_version_registered_with_the_older_method_scores_exactly_as_before() -> None:
    margins, outcomes = small_holdout(1_500, seed=1)
    meta = legacy_metadata(margins, outcomes)
    centers, events, totals = (np.array(meta[k]) for k in ("centers", "events", "totals"))
    # The older map, written out: Jeffreys posteriors at the centres, linear in between, flat outside.
    a, b = events + 0.5, totals - events + 0.5
    mean = a / (a + b)
    low = np.minimum(stats.beta.ppf((1 - LEVEL) / 2, a, b), mean)
    high = np.maximum(stats.beta.ppf((1 + LEVEL) / 2, a, b), mean)
    grid = np.linspace(-12, 8, 401)
    out = ProbabilityMap(predict_calibrator_from_metadata(meta), LEVEL).predict_calibrated_probability(grid)
    np.testing.assert_array_equal(out.probability, np.interp(grid, centers, mean))
    np.testing.assert_array_equal(out.low, np.interp(grid, centers, low))
    np.testing.assert_array_equal(out.high, np.interp(grid, centers, high))
    table = predict_calibration_table(meta, level=LEVEL)
    assert (table.reachable_low, table.reachable_high) == (mean[0], mean[-1])
