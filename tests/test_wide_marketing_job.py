"""A marketing team's own wide propensity job, from a table the demo generator never wrote, through the `score`
command alone: 80+ columns (counts whose sample held only 0 and 1, flags, amounts, categories), a Yes/No label.

`score init --positive Yes` scaffolds it, a small XGBoost trained here is registered (the first version becomes the
champion), two days are scored and their labels land; then:
- no page, card, alert or command output says "risk", "adverse" or "decline" — the job never did;
- no row is quarantined although the scored days hold values the sample never had (every value lies inside the
  training table's own range, computed here with polars);
- a second model registered later leaves the champion where it was: the next day still scores with version 1.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import xgboost as xgb
from conftest import user_project_env
from user_projects import day_output, model_inputs, registered_version, score_cli

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

JOB = "marketing"
DAYS = [dt.date(2026, 9, 1), dt.date(2026, 9, 2)]
LATER_DAY = dt.date(2026, 9, 3)
PRODUCTS = [
    f"{p}_policies"
    for p in (
        "car",
        "van",
        "moped",
        "truck",
        "trailer",
        "tractor",
        "agri",
        "boat",
        "bike",
        "life",
        "accident",
        "disability",
        "fire",
        "surfboard",
        "sailboat",
        "holiday",
        "social",
        "private_third",
        "business_third",
        "family_accident",
    )
]
AMOUNTS = [f"{p.removesuffix('_policies')}_contribution" for p in PRODUCTS]
SHARES = [
    f"share_{s}"
    for s in (
        "married",
        "single",
        "rented",
        "owned",
        "higher_education",
        "lower_education",
        "high_status",
        "farmer",
        "skilled",
        "unskilled",
        "income_low",
        "income_high",
        "one_car",
        "no_car",
        "public_health",
        "private_health",
        "purchasing_power",
        "entrepreneur",
        "middle_management",
        "average_income",
        "age_20_30",
        "age_30_40",
        "age_40_50",
        "age_50_60",
        "age_60_70",
        "age_70_80",
        "household_1",
        "household_2",
        "household_3",
        "household_4",
        "household_5",
        "catholic",
        "protestant",
        "other_religion",
        "no_religion",
    )
]
FLAGS = ["is_member", "has_app", "is_newsletter_reader"]
CATEGORIES = {
    "region": ["north", "south", "east", "west"],
    "channel": ["web", "shop", "phone"],
    "segment": ["A", "B", "C", "D", "E"],
}
FORBIDDEN = re.compile(r"\brisk|adverse|\bdeclin", re.IGNORECASE)


def _customers(rows: int, seed: int) -> pl.DataFrame:
    """Customers as the marketing team's table has them: policy counts (mostly 0, a few 1, rarely 2 or more), yearly
    contributions, neighbourhood shares, 0/1 flags, categories, and whether they bought the caravan policy (Yes/No)."""
    rng = np.random.default_rng(seed)
    counts = {c: rng.poisson(rng.uniform(0.05, 0.4), rows) for c in PRODUCTS}
    amounts = {
        a: np.where(counts[c] > 0, rng.gamma(2.0, 150.0, rows), 0.0).round(2)
        for a, c in zip(AMOUNTS, PRODUCTS, strict=True)
    }
    shares = {s: rng.beta(2, 5, rows).round(3) for s in SHARES}
    flags = {f: (rng.random(rows) < 0.3).astype(np.int64) for f in FLAGS}
    cats = {k: rng.choice(v, rows) for k, v in CATEGORIES.items()}
    logit = (
        -2.5
        + 0.9 * counts["car_policies"]
        + 0.6 * counts["fire_policies"]
        + 2.0 * shares["share_purchasing_power"]
        + 0.5 * flags["is_member"]
        + 0.4 * (cats["channel"] == "web")
    )
    bought = rng.random(rows) < 1 / (1 + np.exp(-logit))
    return pl.DataFrame(
        {
            "customer_id": [f"C-{seed}{i:05d}" for i in range(rows)],
            **counts,
            **amounts,
            **shares,
            **flags,
            **cats,
            "purchased": np.where(bought, "Yes", "No"),
        }
    )


def _within(frame: pl.DataFrame, train: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every numeric value moved inside the training table's own range (so no value is new to the model)."""
    return frame.with_columns(
        pl.col(c).clip(train[c].min(), train[c].max()) for c, t in train.schema.items() if t.is_numeric()
    )


def _trained(inputs_path: Path, path: Path, *, seed: int) -> Path:
    inputs = model_inputs(inputs_path)
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "eta": 0.2, "seed": seed, "nthread": 1},
        xgb.DMatrix(inputs.x, label=inputs.outcome, feature_names=inputs.names),
        num_boost_round=25,
    )
    booster.save_model(str(path))
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("marketing")
    env = user_project_env(root)
    score = score_cli(root, env)
    train = _customers(6000, seed=1)
    train.write_parquet(root / "train.parquet")
    # The sample a user hands to `score init`: the first rows whose policy counts are all 0 or 1.
    train.filter(pl.all_horizontal(pl.col(c) <= 1 for c in PRODUCTS)).head(400).write_parquet(root / "sample.parquet")
    _customers(3000, seed=2).write_parquet(root / "holdout.parquet")
    outputs = {
        "init": score(
            "init",
            JOB,
            "--from",
            str(root / "sample.parquet"),
            "--entity-column",
            "customer_id",
            "--label-column",
            "purchased",
            "--positive",
            "Yes",
        )
    }
    for day, seed in zip([*DAYS, LATER_DAY], (3, 4, 5), strict=True):
        scored = _within(_customers(2000, seed=seed), train)
        raw = root / "data" / "raw" / JOB / f"date={day}"
        raw.mkdir(parents=True)
        scored.drop("purchased").write_parquet(raw / "part-0.parquet")
        labels = root / "data" / "labels" / JOB / f"date={day}"
        labels.mkdir(parents=True)
        scored.select(
            "customer_id", "purchased", pl.lit(day + dt.timedelta(days=30)).alias("observed_date")
        ).write_parquet(labels / "part-0.parquet")
    score("features", JOB, "--from", str(root / "train.parquet"), "--out", str(root / "train_inputs.parquet"))
    first = _trained(root / "train_inputs.parquet", root / "model_1.json", seed=1)
    outputs["register"] = score("register", JOB, "--model", str(first), "--holdout", str(root / "holdout.parquet"))
    outputs["validate"] = score("validate", JOB)
    outputs["backfill"] = score("backfill", JOB, "--start", str(DAYS[0]), "--end", str(DAYS[-1]))
    outputs["outcomes"] = score("outcomes", JOB, "--start", str(DAYS[0]), "--end", str(DAYS[-1]))
    outputs["card"] = score("card", JOB)
    second = _trained(root / "train_inputs.parquet", root / "model_2.json", seed=2)
    outputs["register_second"] = score(
        "register", JOB, "--model", str(second), "--holdout", str(root / "holdout.parquet")
    )
    outputs["later"] = score("run", JOB, "--date", str(LATER_DAY))
    return root, env, score, train, outputs


def _texts(root: Path) -> dict[str, str]:
    """Every page, card and alert the job's runs wrote, by path."""
    out = root / "data" / "output" / JOB
    found = {
        str(p): p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix in (".html", ".md", ".txt", ".json")
    }
    found |= {str(p): p.read_text() for p in (root / "data" / "models" / JOB).rglob("*.md")}
    return found


def test_the_scaffold_keeps_the_label_out_and_reads_counts_as_numbers(project) -> None:
    root, *_ = project
    spec = (root / "jobs" / f"{JOB}.yaml").read_text()
    suite = (root / "expectations" / f"{JOB}.json").read_text()
    assert "purchased" not in suite
    columns = pl.read_parquet(root / "train_inputs.parquet").columns
    assert "purchased" not in columns and len(columns) - 2 >= 80  # the entity and the outcome besides
    assert "positive:" in spec
    # car_policies held only 0 and 1 in the sample; it is a count, not a boolean, so 2 is no violation.
    assert "version: champion" in spec


def test_no_page_card_alert_or_output_speaks_of_risk_when_the_job_does_not(project) -> None:
    root, _, _, _, outputs = project
    texts = _texts(root)
    assert any(p.endswith(".html") for p in texts), sorted(texts)
    said = {p: FORBIDDEN.findall(t) for p, t in texts.items()}
    assert not {p: w for p, w in said.items() if w}, {p: w for p, w in said.items() if w}
    for name, done in outputs.items():
        assert not FORBIDDEN.findall(done.stdout + done.stderr), (name, FORBIDDEN.findall(done.stdout + done.stderr))


def test_no_row_inside_the_training_range_is_quarantined(project) -> None:
    root, _, _, train, _ = project
    for day in DAYS:
        quarantined = day_output(root, "quarantine", day, job=JOB)
        assert quarantined.height == 0, quarantined.head()
        assert day_output(root, "predictions", day, job=JOB).height == 2000
    # The scored days did hold values the sample never had: 2 or more policies of a kind.
    raw = pl.read_parquet(root / "data" / "raw" / JOB / f"date={DAYS[0]}" / "part-0.parquet")
    assert raw.select(pl.max_horizontal(pl.col(c) for c in ("car_policies", "fire_policies")).max()).item() >= 2


def test_a_later_registration_moves_no_alias(project) -> None:
    root, _, _, _, outputs = project
    assert registered_version(outputs["register"].stdout, JOB) == "1"
    assert registered_version(outputs["register_second"].stdout, JOB) == "2"
    assert set(day_output(root, "predictions", LATER_DAY, job=JOB)["model_version"].unique()) == {"1"}
