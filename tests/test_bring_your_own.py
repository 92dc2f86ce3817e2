"""The "Bring your own model" guide (docs/guides/bring-your-own-model.md), as a new user follows it: CLI commands only.

The guide's own ```bash blocks run here, in its order, and its `# train.py` scripts are the ones trained with, so
a changed flag or command on that page fails this test. The data is generated here (not by the demo generator),
the features are the spec's declarative ones (not the demo's modules), and nothing of the product is imported:
every step is the `score` command in a subprocess. Between blocks the test does what the guide asks of the
reader: review the scaffolded spec, and name the challenger in it.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import user_project_env
from test_docs_guides import BRING_YOUR_OWN, command_blocks, reader_env, run_block, script_files

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
pytestmark = pytest.mark.slow

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
        -2.6
        - 0.04 * tenure
        + 0.02 * (charges - 70)
        + 0.9 * paperless
        + 0.45 * calls
        + np.select([contract == "monthly", contract == "one_year"], [1.0, -0.3], -1.2)
    )
    return 1 / (1 + np.exp(-logit))


def day_rows(day: dt.date, rows: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    charges = rng.normal(70, 25, rows).clip(15, 180).round(2)
    frame = pl.DataFrame(
        {
            "customer_id": [f"CU-{day:%m%d}-{i:06d}" for i in range(rows)],
            "tenure_months": rng.integers(0, 73, rows),
            "monthly_charges": pl.Series(np.where(rng.random(rows) < 0.03, np.nan, charges)).fill_nan(None),
            "contract": rng.choice(CONTRACTS, rows, p=[0.5, 0.3, 0.2]),
            "paperless": rng.choice(["yes", "no"], rows),
            "support_calls": rng.poisson(1.2, rows),
        }
    )
    churned = (rng.random(rows) < true_risk(frame)).astype(np.int8)
    return frame.with_columns(pl.Series("churned", churned))


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory):
    """A fresh project of a user: an empty jobs and expectations folder, their own data folder, raw partitions
    and labels of every day, and their history split by time into train.parquet and holdout.parquet."""
    root = tmp_path_factory.mktemp("byo")
    env = reader_env(user_project_env(root), root / "bin")
    labelled = {}
    for i, day in enumerate(DAYS):
        frame = day_rows(day, 4000, seed=100 + i)
        raw = root / "data" / "raw" / "churn" / f"date={day}"
        raw.mkdir(parents=True)
        frame.drop("churned").write_parquet(raw / "part-0.parquet")
        labels = root / "data" / "labels" / "churn" / f"date={day}"
        labels.mkdir(parents=True)
        observed = pl.lit(day + dt.timedelta(days=90)).alias("observed_date")
        frame.select("customer_id", "churned", observed).write_parquet(labels / "part-0.parquet")
        labelled[day] = frame
    pl.concat([labelled[d] for d in TRAIN_DAYS]).write_parquet(root / "train.parquet")
    pl.concat([labelled[d] for d in HOLDOUT_DAYS]).write_parquet(root / "holdout.parquet")
    return root, env, labelled


def review_contract_texts(spec_path: Path) -> tuple[str, dict[str, str]]:
    """What the guide asks after `score init`: the reader reviews the spec; here the contract's reason reads by
    the row's own contract. The reason code and the texts given."""
    lines = spec_path.read_text().splitlines()
    at = lines.index("      contract:")
    code = lines[at + 1].split("code: ")[1]
    (variant,) = [i for i in range(at + 1, at + 6) if lines[i].strip().startswith("by_value:")]
    by_contract = {
        "monthly": "Month-to-month contract",
        "one_year": "One-year contract",
        "two_year": "Two-year contract",
    }
    lines[variant] = f"        by_value: {{{', '.join(f'{k}: {v}' for k, v in by_contract.items())}}}"
    spec_path.write_text("\n".join(lines) + "\n")
    return code, by_contract


def name_the_challenger(spec_path: Path) -> None:
    """What the guide asks after promoting version 2 to challenger: `challenger: challenger` under `model:`."""
    spec = spec_path.read_text()
    assert "  version: champion" in spec
    spec_path.write_text(spec.replace("  version: champion", "  challenger: challenger\n  version: champion", 1))


def test_from_partitions_to_a_scored_nightly_job_with_cli_commands_only(user) -> None:
    root, env, labelled = user
    for name, text in script_files(BRING_YOUR_OWN).items():
        (root / name).write_text(text)
    spec_path = root / "jobs" / "churn.yaml"
    blocks = command_blocks(BRING_YOUR_OWN)
    outputs, code, by_contract, challenger_named = [], None, None, False
    for block in blocks:
        outputs.append(run_block(block, cwd=root, env=env))
        if "score init churn" in block:
            assert spec_path.is_file() and (root / "expectations" / "churn.json").is_file(), outputs[-1]
            code, by_contract = review_contract_texts(spec_path)
        if "--alias challenger" in block:
            name_the_challenger(spec_path)
            challenger_named = True
    assert code is not None and challenger_named, "the guide no longer scaffolds the job or shadows a challenger"
    said = " ".join(" ".join(outputs).split())
    assert "registered churn version 1" in said and "registered churn version 2" in said
    assert "reachable probability" in said
    assert "first version of churn: champion → 1 (recorded in model_aliases)" in said
    assert "realized performance" in said

    inputs = pl.read_parquet(root / "train_inputs.parquet")
    names = [c for c in inputs.columns if c not in ("customer_id", "outcome")]
    metadata = json.loads((root / "data" / "models" / "churn" / "1" / "metadata.json").read_text())
    assert metadata["features"] == names
    assert metadata["training"]["window_start"] == str(TRAIN_DAYS[0])
    assert metadata["reference"]["paperless"]["kind"] == "boolean"
    assert metadata["reference"]["contract"]["kind"] == "categorical"
    # Step 7: version 2 shadowed the last night beside the deciding champion, then became the champion.
    last = SCORED_DAYS[-1]
    assert set(_day(root, "predictions", last)["model_version"]) == {"1"}
    assert set(_day(root, "shadow_predictions", last)["model_version"]) == {"2"}
    aliases = json.loads((root / "data" / "models" / "churn" / "aliases.json").read_text())["aliases"]
    assert aliases == {"champion": "2", "challenger": "2"}

    for day in SCORED_DAYS:
        predictions = pl.read_parquet(root / "data" / "output" / "churn" / "predictions" / f"date={day}" / "*.parquet")
        raw = labelled[day]
        assert predictions.height + _quarantined(root, day) == raw.height
        assert predictions["entity_id"].n_unique() == predictions.height
        joined = predictions.join(
            raw.select(
                pl.col("customer_id").alias("entity_id"), "churned", "paperless", pl.Series("true_risk", true_risk(raw))
            ),
            on="entity_id",
        )
        # Calibrated on a hold-out of 4,000 rows: the expected rate follows the generator's own risk.
        assert abs(joined["probability"].mean() - joined["true_risk"].mean()) < 0.02
        assert abs(joined["probability"].mean() - joined["churned"].mean()) < 0.03
        top = joined.sort("true_risk", descending=True).head(joined.height // 50)
        assert top["probability"].mean() > 0.7 * top["true_risk"].mean()
        assert (joined["probability_low"] <= joined["probability"]).all() and (
            joined["probability"] <= joined["probability_high"]
        ).all()
        # Rows the rules act on or send to a person carry reasons; rows with no action do not.
        reasons = joined.filter(pl.col("decision") != "no_action")
        assert reasons.height > 0 and reasons["reason_codes"].list.len().min() >= 1
        assert joined.filter(pl.col("decision") == "no_action")["reason_codes"].list.len().max() in (0, None)
        # Where the contract is a reason, its text is the one of the row's own contract.
        contract = (
            joined.join(raw.select(pl.col("customer_id").alias("entity_id"), "contract"), on="entity_id")
            .explode(["reason_codes", "reason_texts"])
            .filter(pl.col("reason_codes") == code)
        )
        assert contract.height > 0
        assert (contract["reason_texts"] == contract["contract"].replace_strict(by_contract)).all()

    drift = pl.read_parquet(
        root / "data" / "output" / "churn" / "reports" / "drift" / f"date={SCORED_DAYS[0]}" / "*.parquet"
    )
    kinds = dict(drift.filter(pl.col("baseline") == "reference").select("feature", "kind").iter_rows())
    assert kinds == {
        "tenure_months": "numeric",
        "monthly_charges": "numeric",
        "contract": "categorical",
        "paperless": "boolean",
        "support_calls": "numeric",
    }
    page = (root / "data" / "output" / "churn" / "reports" / "html" / f"date={SCORED_DAYS[0]}.html").read_text()
    assert "p1–p99" in page and "<th>kind</th>" in page


def _day(root: Path, dataset: str, day: dt.date) -> pl.DataFrame:
    return pl.read_parquet(root / "data" / "output" / "churn" / dataset / f"date={day}" / "*.parquet")


def _quarantined(root: Path, day: dt.date) -> int:
    folder = root / "data" / "output" / "churn" / "quarantine" / f"date={day}"
    files = list(folder.glob("*.parquet"))
    return pl.read_parquet(files).height if files else 0
