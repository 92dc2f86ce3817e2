"""tasks/demo: the seeded generator injects dirt at its documented rates, and the guards remove it."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import DEMO_ARGS, DEMO_END, DEMO_JOB, DemoEnv

from tasks.demo.credit_data import (
    DIRTY_RATES,
    DayPlan,
    default_log_odds,
    demo_dates,
    generate_day,
    write_demo_partitions,
)
from tasks.demo.setup import prepared_demo
from tasks.features import credit_risk as fm
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.settings import PROJECT_ROOT, Settings

BIG_DAY = DayPlan(date=dt.date(2026, 2, 2), rows=20_000, shifted=False)
SUITE = load_guard_suite(PROJECT_ROOT / "expectations" / "credit_risk.json")


@pytest.fixture(scope="module")
def big_day() -> tuple[pl.DataFrame, pl.DataFrame]:
    return generate_day(BIG_DAY, seed=7)


@pytest.fixture(scope="module")
def big_day_guarded(big_day):
    raw, _ = big_day
    return guarded_chunk(raw, SUITE, entity_column="entity_id")


def assert_binomial_share(hits: int, n: int, p: float, *, sigmas: float = 4.5) -> None:
    """`hits` of `n` is within `sigmas` binomial standard deviations of n·p."""
    sd = math.sqrt(n * p * (1 - p))
    assert abs(hits - n * p) <= sigmas * sd, (
        f"{hits} of {n} ({hits / n:.4f}) vs expected rate {p:.4f} ± {sigmas * sd / n:.4f}"
    )


# --- dirt rates -------------------------------------------------------------------------------


def test_income_sentinel_rate(big_day) -> None:
    raw, _ = big_day
    # A row drawn for both null and sentinel income ends up null (each kind is drawn independently).
    p = DIRTY_RATES["annual_income_sentinel"] * (1 - DIRTY_RATES["annual_income_null"])
    assert_binomial_share(int((raw["annual_income"] == -1).sum()), raw.height, p)


@pytest.mark.parametrize(
    ("kind", "count"),
    [
        ("annual_income_null", lambda f: f["annual_income"].is_null().sum()),
        ("debt_to_income_null", lambda f: f["debt_to_income"].is_null().sum()),
        ("credit_utilization_over_one", lambda f: (f["credit_utilization"] > 1).sum()),
        ("employment_years_null", lambda f: f["employment_years"].is_null().sum()),
        ("entity_id_blank", lambda f: (f["entity_id"] == "").sum()),
    ],
)
def test_dirt_rates(big_day, kind: str, count) -> None:
    raw, _ = big_day
    assert_binomial_share(int(count(raw)), raw.height, DIRTY_RATES[kind])


def test_every_dirty_kind_is_covered_by_a_rate_test() -> None:
    assert set(DIRTY_RATES) == {
        "annual_income_sentinel",
        "annual_income_null",
        "debt_to_income_null",
        "credit_utilization_over_one",
        "employment_years_null",
        "entity_id_blank",
    }


def test_clean_columns_have_no_dirt(big_day) -> None:
    raw, _ = big_day
    assert raw.height == BIG_DAY.rows
    for col in (
        "loan_amount",
        "credit_history_months",
        "open_accounts",
        "recent_inquiries_6m",
        "home_ownership",
        "loan_purpose",
    ):
        assert raw[col].null_count() == 0, col
    ok_ids = raw.filter(pl.col("entity_id") != "")["entity_id"]
    assert ok_ids.str.contains(rf"^APP-{BIG_DAY.date:%Y%m%d}-\d{{7}}$").all()
    assert ok_ids.n_unique() == ok_ids.len()


# --- guards on the dirty day ------------------------------------------------------------------


def test_no_dirt_reaches_the_model(big_day_guarded) -> None:
    scorable = big_day_guarded.scorable
    assert scorable["annual_income"].null_count() == 0
    assert (scorable["annual_income"] > 0).all()  # no -1 sentinel
    assert scorable["credit_utilization"].is_between(0, 1).all()  # no utilisation above 1
    for col in ("debt_to_income", "employment_years"):
        assert scorable[col].null_count() == 0, col
    assert (scorable["entity_id"] != "").all()
    matrix = fm.feature_matrix(scorable)
    assert matrix.dtype == np.float32 and matrix.flags.c_contiguous
    assert matrix.shape == (scorable.height, len(fm.FEATURES))
    income = matrix[:, fm.FEATURES.index("annual_income")]
    util = matrix[:, fm.FEATURES.index("credit_utilization")]
    assert np.all(income > 0) and np.all((util >= 0) & (util <= 1))
    # Only "never delinquent" is missing information for the model.
    nan_columns = {fm.FEATURES[j] for j in np.flatnonzero(np.isnan(matrix).any(axis=0))}
    assert nan_columns == {"months_since_last_delinquency"}


def test_guard_counts_match_the_injected_dirt(big_day, big_day_guarded) -> None:
    raw, _ = big_day
    g = big_day_guarded
    blank = int((raw["entity_id"] == "").sum())
    assert g.counts.rows_quarantined == blank  # blank ids are the only quarantining dirt
    assert g.quarantined.height == blank and (g.quarantined["entity_id"] == "").all()
    dirty_rows = raw.filter(
        (pl.col("entity_id") != "")
        & (
            pl.col("annual_income").is_null()
            | (pl.col("annual_income") <= 0)
            | pl.col("debt_to_income").is_null()
            | (pl.col("credit_utilization") > 1)
            | pl.col("employment_years").is_null()
        )
    )
    assert g.counts.rows_repaired == dirty_rows.height > 0
    repaired_ids = set(g.actions.filter(pl.col("action") == "repair")["entity_id"]) - {""}
    assert repaired_ids == set(dirty_rows["entity_id"])
    assert g.scorable.height + g.quarantined.height == raw.height


def test_guarding_a_guarded_frame_changes_nothing(big_day_guarded) -> None:
    again = guarded_chunk(big_day_guarded.scorable, SUITE, entity_column="entity_id")
    assert again.actions.height == 0
    assert again.scorable.equals(big_day_guarded.scorable)


# --- labels and determinism -------------------------------------------------------------------


def test_labels_follow_the_known_risk_function(big_day) -> None:
    raw, labels = big_day
    assert labels["entity_id"].n_unique() == labels.height == int((raw["entity_id"] != "").sum())
    assert set(labels["defaulted"].unique()) <= {0, 1}
    assert (labels["observed_date"] == BIG_DAY.date + dt.timedelta(days=365)).all()
    # Rows untouched by dirt carry their clean values, so the true probability is recomputable.
    clean = raw.join(labels, on="entity_id").filter(
        pl.col("annual_income").is_not_null()
        & (pl.col("annual_income") > 0)
        & pl.col("debt_to_income").is_not_null()
        & (pl.col("credit_utilization") <= 1)
        & pl.col("employment_years").is_not_null()
    )
    p = 1 / (1 + np.exp(-default_log_odds(clean)))
    y = clean["defaulted"].to_numpy()
    sd = math.sqrt(np.sum(p * (1 - p)))
    assert abs(y.sum() - p.sum()) <= 4.5 * sd
    # Riskier applications default more: top quintile of true risk vs bottom quintile.
    lo, hi = np.quantile(p, [0.2, 0.8])
    assert y[p >= hi].mean() > 2 * y[p <= lo].mean()


def test_a_day_is_reproducible_from_its_seed_and_date() -> None:
    plan = DayPlan(date=dt.date(2026, 1, 5), rows=300, shifted=False)
    a_raw, a_labels = generate_day(plan, seed=3)
    b_raw, b_labels = generate_day(plan, seed=3)
    assert a_raw.equals(b_raw) and a_labels.equals(b_labels)
    c_raw, _ = generate_day(plan, seed=4)
    assert not a_raw.drop("entity_id").equals(c_raw.drop("entity_id"))


def test_a_dates_rows_do_not_depend_on_the_other_dates(tmp_path: Path) -> None:
    d1, d2 = dt.date(2026, 1, 5), dt.date(2026, 1, 6)
    write_demo_partitions(
        tmp_path / "a" / "raw", tmp_path / "a" / "labels", [d1, d2], rows_per_day=200, seed=1, shift_days=0
    )
    write_demo_partitions(
        tmp_path / "b" / "raw", tmp_path / "b" / "labels", [d2], rows_per_day=200, seed=1, shift_days=0
    )
    part = f"date={d2.isoformat()}"
    assert pl.read_parquet(tmp_path / "a" / "raw" / part).equals(pl.read_parquet(tmp_path / "b" / "raw" / part))
    assert pl.read_parquet(tmp_path / "a" / "labels" / part).equals(pl.read_parquet(tmp_path / "b" / "labels" / part))


def test_shifted_days_move_the_shifted_features() -> None:
    base, _ = generate_day(BIG_DAY, seed=7)
    shifted, _ = generate_day(DayPlan(date=BIG_DAY.date, rows=BIG_DAY.rows, shifted=True), seed=7)
    clean_util = lambda f: f.filter(pl.col("credit_utilization") <= 1)["credit_utilization"].mean()  # noqa: E731
    assert clean_util(shifted) > clean_util(base) + 0.1
    assert shifted["recent_inquiries_6m"].mean() > base["recent_inquiries_6m"].mean() + 1.0


# --- the prepared demo ------------------------------------------------------------------------


def test_demo_dates_end_on_the_given_day() -> None:
    assert demo_dates(dt.date(2026, 3, 1), 3) == [dt.date(2026, 2, 27), dt.date(2026, 2, 28), dt.date(2026, 3, 1)]


def test_session_demo_has_scoring_and_training_partitions(demo_env: DemoEnv) -> None:
    plan, settings = demo_env.plan, demo_env.settings
    assert plan.scoring_dates == [DEMO_END - dt.timedelta(days=i) for i in (2, 1, 0)]
    assert len(plan.training_dates) == DEMO_ARGS["train_days"]
    assert plan.training_dates[-1] == plan.scoring_dates[0] - dt.timedelta(days=1)
    assert all(
        b - a == dt.timedelta(days=1) for a, b in zip(plan.training_dates, plan.training_dates[1:], strict=False)
    )
    for day in plan.scoring_dates + plan.training_dates:
        raw = pl.read_parquet(settings.raw_partition_dir(DEMO_JOB, day.isoformat()))
        assert raw.height == DEMO_ARGS["rows_per_day"]
        assert (raw["application_date"] == day).all()
        assert settings.labels_partition_dir(DEMO_JOB, day.isoformat()).is_dir()
    meta = json.loads((settings.model_registry_dir(DEMO_JOB) / plan.model_version / "metadata.json").read_text())
    assert meta["training"]["window_start"] == plan.training_dates[0].isoformat()
    assert meta["training"]["window_end"] == plan.training_dates[-1].isoformat()
    assert meta["feature_version"] == fm.FEATURE_VERSION


def test_prepared_demo_reuses_the_model_of_the_same_window(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    small = {"days": 1, "rows_per_day": 400, "train_days": 2, "seed": 5, "end": dt.date(2026, 1, 10)}
    first = prepared_demo(settings, **small)
    again = prepared_demo(settings, **small)
    assert first.model_version == again.model_version == "1"
    registry = settings.model_registry_dir(DEMO_JOB)
    assert sorted(p.name for p in registry.iterdir()) == ["1"]
    other = prepared_demo(settings, **{**small, "seed": 6})
    assert other.model_version == "2"
    assert sorted(p.name for p in registry.iterdir()) == ["1", "2"]
