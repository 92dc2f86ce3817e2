"""Seeded generator of credit applications in daily partitions, with the dirt real upstreams make.

Each day is drawn from its own seed (`seed`, date), so a date's rows do not depend on which
other dates are generated. The label comes from `default_log_odds`, a known risk function,
computed on the clean values before any dirt is injected.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tasks.features.credit_risk import HOME_OWNERSHIP, LOAN_PURPOSE

DIRTY_RATES: dict[str, float] = {
    "annual_income_sentinel": 0.02,
    "annual_income_null": 0.01,
    "debt_to_income_null": 0.01,
    "credit_utilization_over_one": 0.03,
    "employment_years_null": 0.02,
    "entity_id_blank": 0.002,
}
"""Share of rows that get each kind of dirt, independently per row."""

SHIFTED_FEATURES = ("credit_utilization", "recent_inquiries_6m")
"""Features whose distribution moves in the last `shift_days` days of a generated range."""


@dataclass(frozen=True)
class DayPlan:
    date: dt.date
    rows: int
    shifted: bool


def demo_dates(end: dt.date, days: int) -> list[dt.date]:
    return [end - dt.timedelta(days=days - 1 - i) for i in range(days)]


def default_log_odds(frame: pl.DataFrame) -> np.ndarray:
    """The true log-odds of default of each (clean) application."""
    income = frame["annual_income"].to_numpy()
    return (
        -2.6
        + 3.2 * (frame["debt_to_income"].to_numpy() - 0.25)
        + 2.0 * (frame["credit_utilization"].to_numpy() - 0.35)
        + 0.45 * frame["delinquencies_2y"].to_numpy()
        + 0.18 * frame["recent_inquiries_6m"].to_numpy()
        - 0.55 * np.log(income / 60_000.0)
        + 0.35 * np.log(frame["loan_amount"].to_numpy() / 15_000.0)
        + 0.25 * (frame["loan_term_months"].to_numpy() == 60)
        - 0.012 * np.minimum(frame["credit_history_months"].to_numpy(), 240) / 12
        - 0.06 * np.minimum(frame["employment_years"].to_numpy(), 10)
        + 0.30 * (frame["home_ownership"].to_numpy() == "RENT")
        + 0.40 * (frame["loan_purpose"].to_numpy() == "small_business")
    )


def _clean_applications(rng: np.random.Generator, plan: DayPlan) -> pl.DataFrame:
    n = plan.rows
    income = np.round(np.exp(rng.normal(np.log(62_000), 0.45, n)), -2)
    base_utilization = rng.beta(2.0, 3.2, n)
    # Only the features in SHIFTED_FEATURES move: the revolving balance keeps the unshifted base.
    utilization = np.clip(base_utilization + (0.15 if plan.shifted else 0.0), 0.0, 1.0)
    delinquencies = rng.poisson(0.25, n)
    months_since = np.where(
        delinquencies > 0,
        rng.integers(1, 24, n).astype(float),
        np.where(rng.random(n) < 0.15, rng.integers(24, 120, n).astype(float), np.nan),
    )
    history = rng.integers(6, 400, n)
    revolving = np.round(np.clip(base_utilization, 0.0, 1.0) * rng.uniform(2_000, 40_000, n), 2)
    return pl.DataFrame(
        {
            "entity_id": [f"APP-{plan.date:%Y%m%d}-{i:07d}" for i in range(n)],
            "application_date": [plan.date] * n,
            "annual_income": income,
            "debt_to_income": np.round(np.clip(rng.gamma(4.0, 0.06, n), 0.0, 0.95), 4),
            "credit_utilization": np.round(utilization, 4),
            "delinquencies_2y": delinquencies,
            "months_since_last_delinquency": months_since,
            "credit_history_months": history,
            "open_accounts": rng.poisson(8, n) + 1,
            "recent_inquiries_6m": rng.poisson(2.2 if plan.shifted else 0.9, n),
            "loan_amount": np.round(np.clip(rng.lognormal(np.log(14_000), 0.6, n), 1_000, 80_000), -2),
            "loan_term_months": rng.choice([36, 60], n, p=[0.7, 0.3]),
            "employment_years": np.round(np.clip(rng.exponential(6.0, n), 0, 40), 1),
            "home_ownership": rng.choice(HOME_OWNERSHIP, n, p=[0.42, 0.40, 0.16, 0.02]),
            "revolving_balance": revolving,
            "loan_purpose": rng.choice(LOAN_PURPOSE, n, p=[0.45, 0.2, 0.1, 0.1, 0.05, 0.1]),
        },
        strict=False,
    ).with_columns(pl.col("months_since_last_delinquency").fill_nan(None))


def _with_dirt(rng: np.random.Generator, frame: pl.DataFrame) -> pl.DataFrame:
    n = frame.height
    hit = {kind: rng.random(n) < rate for kind, rate in DIRTY_RATES.items()}
    over_one = np.round(rng.uniform(1.01, 1.6, n), 4)
    return frame.with_columns(
        pl.when(pl.Series(hit["entity_id_blank"])).then(pl.lit("")).otherwise(pl.col("entity_id")).alias("entity_id"),
        pl.when(pl.Series(hit["annual_income_null"]))
        .then(None)
        .when(pl.Series(hit["annual_income_sentinel"]))
        .then(-1.0)
        .otherwise(pl.col("annual_income"))
        .alias("annual_income"),
        pl.when(pl.Series(hit["debt_to_income_null"]))
        .then(None)
        .otherwise(pl.col("debt_to_income"))
        .alias("debt_to_income"),
        pl.when(pl.Series(hit["credit_utilization_over_one"]))
        .then(pl.Series(over_one))
        .otherwise(pl.col("credit_utilization"))
        .alias("credit_utilization"),
        pl.when(pl.Series(hit["employment_years_null"]))
        .then(None)
        .otherwise(pl.col("employment_years"))
        .alias("employment_years"),
    )


def generate_day(plan: DayPlan, *, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(raw applications with dirt, labels) of one day."""
    rng = np.random.default_rng([seed, plan.date.toordinal()])
    clean = _clean_applications(rng, plan)
    probability = 1.0 / (1.0 + np.exp(-default_log_odds(clean)))
    defaulted = (rng.random(clean.height) < probability).astype(np.int8)
    raw = _with_dirt(rng, clean)
    labels = pl.DataFrame(
        {
            "entity_id": raw["entity_id"],
            "defaulted": defaulted,
            "observed_date": [plan.date + dt.timedelta(days=365)] * clean.height,
        }
    ).filter(pl.col("entity_id") != "")
    return raw, labels


def write_demo_partitions(
    raw_root: Path,
    labels_root: Path,
    dates: list[dt.date],
    *,
    rows_per_day: int,
    seed: int,
    shift_days: int,
) -> list[Path]:
    """Write `raw_root/date=D/part-0.parquet` (and labels) for every date; returns the raw folders."""
    written = []
    for i, date in enumerate(dates):
        plan = DayPlan(date=date, rows=rows_per_day, shifted=i >= len(dates) - shift_days)
        raw, labels = generate_day(plan, seed=seed)
        raw_dir = raw_root / f"date={date.isoformat()}"
        labels_dir = labels_root / f"date={date.isoformat()}"
        raw_dir.mkdir(parents=True, exist_ok=True)
        labels_dir.mkdir(parents=True, exist_ok=True)
        raw.write_parquet(raw_dir / "part-0.parquet")
        labels.write_parquet(labels_dir / "labels.parquet")
        written.append(raw_dir)
    return written
