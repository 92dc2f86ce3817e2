"""Registration never deploys by accident: a scaffolded job scores the alias `champion`, the first `score register`
sets it (and says so), a later one moves nothing and says what to do next, `--promote` / `--alias` move an alias
through the same checks and ledger as `score promote`, and `score validate` warns about a spec that follows `latest`.

A user's own churn project driven through the `score` command; tiny XGBoost models trained here."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import xgboost as xgb
import yaml
from conftest import user_project_env
from user_projects import churn_project, day_output, model_inputs, raw_partition, registered_version, score_cli

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

TRAIN_DAY, HOLDOUT_DAY, SCORED_DAY = dt.date(2026, 10, 1), dt.date(2026, 10, 2), dt.date(2026, 10, 3)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("no-deploy")
    score = score_cli(root, user_project_env(root))
    churn_project(
        root,
        score,
        train_days=[TRAIN_DAY],
        holdout_day=HOLDOUT_DAY,
        scored_days=[SCORED_DAY],
        rows=1500,
        seed=700,
        features_of=[("train.parquet", "train_inputs"), (raw_partition(SCORED_DAY), "scored_inputs")],
    )
    return root, score


def _model(root: Path, name: str, depth: int, rounds: int) -> Path:
    """The user's own training script: a small booster on the `score features` output, saved as UBJSON."""
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": depth, "seed": 3, "nthread": 1},
        xgb.DMatrix(x, label=y, missing=np.nan, feature_names=names),
        rounds,
    )
    path = root / f"{name}.ubj"
    booster.save_model(str(path))
    return path


def _aliases(root: Path) -> dict[str, str]:
    return json.loads((root / "data" / "models" / "churn" / "aliases.json").read_text())["aliases"]


def _ledger(root: Path) -> list[tuple[str, str | None, str | None]]:
    with duckdb.connect(str(root / "data" / "warehouse.duckdb"), read_only=True) as db:
        return db.execute("SELECT alias, from_version, to_version FROM model_aliases ORDER BY changed_at").fetchall()


def test_register_moves_no_alias_but_the_first_versions_champion_and_promote_moves_it(project) -> None:
    root, score = project
    spec_path = root / "jobs" / "churn.yaml"
    assert yaml.safe_load(spec_path.read_text())["model"]["version"] == "champion"
    holdout = ("--holdout", str(root / "holdout.parquet"))

    first = score("register", "churn", "--model", str(_model(root, "first", 2, 10)), *holdout)
    assert registered_version(first.stdout) == "1"
    assert "first version of churn: champion → 1 (recorded in model_aliases)" in first.stdout, first.stdout
    assert _aliases(root) == {"champion": "1"}
    assert _ledger(root) == [("champion", None, "1")]

    second = score("register", "churn", "--model", str(_model(root, "second", 3, 20)), *holdout)
    assert registered_version(second.stdout) == "2"
    flat = " ".join(second.stdout.split())
    assert "no alias moved: churn scores champion (version 1)" in flat, flat
    assert (
        "score promote churn 2 --alias challenger" in flat and "score promote churn 2 to make it the champion" in flat
    ), flat
    assert _aliases(root) == {"champion": "1"}
    assert _ledger(root) == [("champion", None, "1")]

    # Step 7 of docs/guides/bring-your-own-model.md: shadow version 2 as the challenger, one night,
    # the champion still deciding.
    score("promote", "churn", "2", "--alias", "challenger")
    spec = spec_path.read_text()
    spec_path.write_text(spec.replace("  version: champion", "  challenger: challenger\n  version: champion", 1))
    score("run", "churn", "--date", str(SCORED_DAY))
    assert set(day_output(root, "predictions", SCORED_DAY)["model_version"]) == {"1"}
    assert set(day_output(root, "shadow_predictions", SCORED_DAY)["model_version"]) == {"2"}

    score("promote", "churn", "challenger", "--note", "one night")
    assert _aliases(root) == {"champion": "2", "challenger": "2"}

    third = score(
        "register", "churn", "--model", str(_model(root, "third", 2, 30)), *holdout, "--promote", "--by", "ana"
    )
    assert registered_version(third.stdout) == "3"
    assert "churn: alias champion 2 → 3 (by ana, recorded in model_aliases)" in third.stdout, third.stdout
    fourth = score(
        "register", "churn", "--model", str(_model(root, "fourth", 4, 10)), *holdout, "--alias", "challenger"
    )
    assert "churn: alias challenger 2 → 4" in fourth.stdout, fourth.stdout
    assert _aliases(root) == {"champion": "3", "challenger": "4"}
    assert _ledger(root) == [
        ("champion", None, "1"),
        ("challenger", None, "2"),
        ("champion", "1", "2"),
        ("champion", "2", "3"),
        ("challenger", "2", "4"),
    ]

    refused = score(
        "register",
        "churn",
        "--model",
        str(root / "first.ubj"),
        *holdout,
        "--promote",
        "--alias",
        "challenger",
        ok=False,
    )
    assert refused.returncode == 2 and refused.stdout.startswith(
        "error: --promote moves champion and --alias moves challenger"
    )
    assert sorted(
        p.name for p in (root / "data" / "models" / "churn").iterdir() if (p / "metadata.json").is_file()
    ) == ["1", "2", "3", "4"]


def test_validate_warns_when_the_spec_follows_latest(project) -> None:
    root, score = project
    spec_path = root / "jobs" / "churn.yaml"
    scaffolded = spec_path.read_text()
    if not (root / "data" / "models" / "churn" / "1").is_dir():
        score(
            "register",
            "churn",
            "--model",
            str(_model(root, "first", 2, 10)),
            "--holdout",
            str(root / "holdout.parquet"),
        )
    warning = "model.version is latest: every `score register` changes what this job scores; use champion (score promote moves it)"
    try:
        assert warning not in score("validate", "churn").stdout
        spec_path.write_text(scaffolded.replace("  version: champion", "  version: latest", 1))
        validated = score("validate", "churn")
        lines = [line for line in validated.stdout.splitlines() if warning in line]
        assert len(lines) == 1 and lines[0] == f"warning: {spec_path} {warning}", validated.stdout
    finally:
        spec_path.write_text(scaffolded)
