"""The probability and its interval mean what they say, on labelled rows the model never saw."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from tasks.demo.credit_data import demo_dates, write_demo_partitions
from tasks.demo.holdout import scored_with_labels
from tasks.jobspec import load_job_spec
from tasks.prediction.calibration_check import predict_calibration_report
from tasks.settings import Settings

from conftest import DEMO_END, DEMO_JOB, DemoEnv


@pytest.fixture(scope="module")
def holdout(demo_env: DemoEnv, tmp_path_factory: pytest.TempPathFactory):
    """Two new demo days after the scored window, from another seed: never trained or calibrated on."""
    data = tmp_path_factory.mktemp("holdout-data")
    settings = Settings(data_dir=data)
    models = demo_env.settings.data_dir / "models"
    (data / "models").symlink_to(models, target_is_directory=True)
    days = demo_dates(DEMO_END + dt.timedelta(days=30), 2)
    write_demo_partitions(data / "raw" / DEMO_JOB, data / "labels" / DEMO_JOB, days, rows_per_day=15_000, seed=1234, shift_days=0)
    return settings, scored_with_labels(settings, DEMO_JOB, days)


def _report(scored, probability=None):
    level = load_job_spec(DEMO_JOB, Settings()).prediction.interval_level
    return predict_calibration_report(
        scored["probability"].to_numpy() if probability is None else probability,
        scored["probability_low"].to_numpy(), scored["probability_high"].to_numpy(),
        scored["outcome"].to_numpy(), interval_level=level, bins=20, min_rows=500,
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
