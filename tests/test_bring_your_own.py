"""The README's "Bring your own model" walk-through, as a new user does it: CLI commands only.

The data is generated here (not by the demo generator), the features are the spec's declarative
ones (not the demo's modules), the model is trained by the test as a user's own script would,
and nothing of the product is imported: every step is the `score` command in a subprocess.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import xgboost as xgb

from conftest import user_project_env

SCORE = Path(sys.executable).parent / "score"
DAYS = [dt.date(2026, 10, 1) + dt.timedelta(days=i) for i in range(6)]
TRAIN_DAYS, HOLDOUT_DAYS, SCORED_DAYS = DAYS[:3], DAYS[3:4], DAYS[4:]
CONTRACTS = ("monthly", "one_year", "two_year")


def true_risk(frame: pl.DataFrame) -> np.ndarray:
    """The generator's own probability of churn, from the raw columns."""
    tenure = frame["tenure_months"].to_numpy().astype(float)
    charges = frame["monthly_charges"].fill_null(70.0).to_numpy()
    contract = frame["contract"].to_numpy()
    paperless = frame["paperless"].to_numpy() == "yes"
    calls = frame["support_calls"].to_numpy().astype(float)
    logit = (
        -2.6 - 0.04 * tenure + 0.02 * (charges - 70) + 0.9 * paperless + 0.45 * calls
        + np.select([contract == "monthly", contract == "one_year"], [1.0, -0.3], -1.2)
    )
    return 1 / (1 + np.exp(-logit))


def day_rows(day: dt.date, rows: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    charges = rng.normal(70, 25, rows).clip(15, 180).round(2)
    frame = pl.DataFrame({
        "customer_id": [f"CU-{day:%m%d}-{i:06d}" for i in range(rows)],
        "tenure_months": rng.integers(0, 73, rows),
        "monthly_charges": pl.Series(np.where(rng.random(rows) < 0.03, np.nan, charges)).fill_nan(None),
        "contract": rng.choice(CONTRACTS, rows, p=[0.5, 0.3, 0.2]),
        "paperless": rng.choice(["yes", "no"], rows),
        "support_calls": rng.poisson(1.2, rows),
    })
    churned = (rng.random(rows) < true_risk(frame)).astype(np.int8)
    return frame.with_columns(pl.Series("churned", churned))


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory):
    """A fresh project of a user: an empty jobs and expectations folder, their own data folder."""
    root = tmp_path_factory.mktemp("byo")
    env = user_project_env(root)
    labelled = {}
    for i, day in enumerate(DAYS):
        frame = day_rows(day, 4000, seed=100 + i)
        raw = root / "data" / "raw" / "churn" / f"date={day}"
        raw.mkdir(parents=True)
        frame.drop("churned").write_parquet(raw / "part-0.parquet")
        labels = root / "data" / "labels" / "churn" / f"date={day}"
        labels.mkdir(parents=True)
        frame.select("customer_id", "churned", pl.lit(day + dt.timedelta(days=90)).alias("observed_date")).write_parquet(labels / "part-0.parquet")
        labelled[day] = frame

    def score(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(SCORE), *args], env=env, cwd=root, capture_output=True, text=True, timeout=600)
        if ok:
            assert done.returncode == 0, (args, done.returncode, done.stdout[-3000:], done.stderr[-3000:])
            assert "Traceback" not in done.stdout + done.stderr
        return done

    return root, score, labelled


def test_from_partitions_to_a_scored_nightly_job_with_cli_commands_only(user) -> None:
    root, score, labelled = user
    # The user's history, with its outcome column: the sample to scaffold from and to train on.
    train = pl.concat([labelled[d] for d in TRAIN_DAYS])
    holdout = pl.concat([labelled[d] for d in HOLDOUT_DAYS])
    train.write_parquet(root / "train.parquet")
    holdout.write_parquet(root / "holdout.parquet")

    init = score("init", "churn", "--from", str(root / "train.parquet"), "--entity-column", "customer_id", "--label-column", "churned")
    assert (root / "jobs" / "churn.yaml").is_file() and (root / "expectations" / "churn.json").is_file(), init.stdout

    # The user reviews the spec: the contract's reason reads by the row's own contract.
    spec_path = root / "jobs" / "churn.yaml"
    scaffolded = spec_path.read_text()
    lines = scaffolded.splitlines()
    at = lines.index("      contract:")
    code = lines[at + 1].split("code: ")[1]
    (variant,) = [i for i in range(at + 1, at + 6) if lines[i].strip().startswith("by_value:")]
    by_contract = {"monthly": "Month-to-month contract", "one_year": "One-year contract", "two_year": "Two-year contract"}
    lines[variant] = f"        by_value: {{{', '.join(f'{k}: {v}' for k, v in by_contract.items())}}}"
    spec_path.write_text("\n".join(lines) + "\n")

    # The user's training script: the model inputs come from `score features`, the fit is theirs.
    score("features", "churn", "--from", str(root / "train.parquet"), "--out", str(root / "train_inputs.parquet"))
    inputs = pl.read_parquet(root / "train_inputs.parquet")
    names = [c for c in inputs.columns if c not in ("customer_id", "outcome")]
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "eta": 0.1, "seed": 1},
        xgb.DMatrix(inputs.select(names).to_numpy(), label=inputs["outcome"].to_numpy(), feature_names=names, missing=np.nan),
        num_boost_round=150,
    )
    booster.save_model(str(root / "churn.ubj"))

    registered = score("register", "churn", "--model", str(root / "churn.ubj"), "--holdout", str(root / "holdout.parquet"),
                       "--trained-from", str(TRAIN_DAYS[0]), "--trained-to", str(TRAIN_DAYS[-1]))
    assert "registered churn version 1" in registered.stdout
    assert "reachable probability" in registered.stdout
    metadata = json.loads((root / "data" / "models" / "churn" / "1" / "metadata.json").read_text())
    assert metadata["features"] == names
    assert metadata["training"]["window_start"] == str(TRAIN_DAYS[0])
    assert metadata["reference"]["paperless"]["kind"] == "boolean"
    assert metadata["reference"]["contract"]["kind"] == "categorical"

    assert score("validate", "churn").returncode == 0
    score("backfill", "churn", "--start", str(SCORED_DAYS[0]), "--end", str(SCORED_DAYS[-1]))
    outcomes = score("outcomes", "churn", "--start", str(SCORED_DAYS[0]), "--end", str(SCORED_DAYS[-1]))
    assert "realized performance" in outcomes.stdout

    for day in SCORED_DAYS:
        predictions = pl.read_parquet(root / "data" / "output" / "churn" / "predictions" / f"date={day}" / "*.parquet")
        raw = labelled[day]
        assert predictions.height + _quarantined(root, day) == raw.height
        assert predictions["entity_id"].n_unique() == predictions.height
        joined = predictions.join(raw.select(pl.col("customer_id").alias("entity_id"), "churned", "paperless",
                                             pl.Series("true_risk", true_risk(raw))), on="entity_id")
        # Calibrated on a hold-out of 4,000 rows: the expected rate follows the generator's own risk.
        assert abs(joined["probability"].mean() - joined["true_risk"].mean()) < 0.02
        assert abs(joined["probability"].mean() - joined["churned"].mean()) < 0.03
        top = joined.sort("true_risk", descending=True).head(joined.height // 50)
        assert top["probability"].mean() > 0.7 * top["true_risk"].mean()
        assert (joined["probability_low"] <= joined["probability"]).all() and (joined["probability"] <= joined["probability_high"]).all()
        # Rows the rules act on or send to a person carry reasons; rows with no action do not.
        reasons = joined.filter(pl.col("decision") != "no_action")
        assert reasons.height > 0 and reasons["reason_codes"].list.len().min() >= 1
        assert joined.filter(pl.col("decision") == "no_action")["reason_codes"].list.len().max() in (0, None)
        # Where the contract is a reason, its text is the one of the row's own contract.
        contract = joined.join(raw.select(pl.col("customer_id").alias("entity_id"), "contract"), on="entity_id").explode(
            ["reason_codes", "reason_texts"]
        ).filter(pl.col("reason_codes") == code)
        assert contract.height > 0
        assert (contract["reason_texts"] == contract["contract"].replace_strict(by_contract)).all()

    drift = pl.read_parquet(root / "data" / "output" / "churn" / "reports" / "drift" / f"date={SCORED_DAYS[0]}" / "*.parquet")
    kinds = dict(drift.filter(pl.col("baseline") == "reference").select("feature", "kind").iter_rows())
    assert kinds == {"tenure_months": "numeric", "monthly_charges": "numeric", "contract": "categorical",
                     "paperless": "boolean", "support_calls": "numeric"}
    page = (root / "data" / "output" / "churn" / "reports" / "html" / f"date={SCORED_DAYS[0]}.html").read_text()
    assert "p1–p99" in page and "<th>kind</th>" in page


def _quarantined(root: Path, day: dt.date) -> int:
    folder = root / "data" / "output" / "churn" / "quarantine" / f"date={day}"
    files = list(folder.glob("*.parquet"))
    return pl.read_parquet(files).height if files else 0
