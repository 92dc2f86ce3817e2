"""Labels as they come: a user's churn project whose label is Yes/No text (and one whose label is a polars Boolean),
scaffolded, trained, registered, scored and measured with `--positive` and `monitoring.labels.positive`, never recoded
to 1/0 by hand. The data is made here (not the demo generator); the model is a tiny XGBoost trained in the test.

Init, features and register run in this process (typer's CliRunner with the project's environment); the scoring run
and the outcomes run, which start Prefect, run as the user's `score` command once each."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
import xgboost as xgb
import yaml
from conftest import user_project_env
from pydantic import ValidationError
from typer.testing import CliRunner
from user_projects import ScoreCli, score_cli

from cli.score import app
from tasks.errors import LabelError
from tasks.jobspec import JobSpec, LabelSource, load_job_spec
from tasks.monitoring.outcomes import parquet_labels
from tasks.settings import Settings

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

JOB = "churn"
DAY = dt.date(2026, 3, 2)


def churn_rows(rows: int, *, seed: int, first: int) -> pl.DataFrame:
    """Customers with tenure, support calls and plan; `churned` is "Yes" with a logistic probability of them."""
    rng = np.random.default_rng(seed)
    tenure = rng.uniform(1, 72, rows).round(1)
    calls = rng.integers(0, 7, rows)
    plan = rng.choice(["basic", "plus", "pro"], rows, p=[0.5, 0.3, 0.2])
    risk = 1 / (1 + np.exp(-(-0.5 - 0.04 * tenure + 0.35 * calls + np.where(plan == "basic", 0.5, 0.0))))
    return pl.DataFrame(
        {
            "customer_id": [f"C-{first + i:06d}" for i in range(rows)],
            "tenure_months": tenure,
            "support_calls": calls,
            "plan": plan,
            "churned": np.where(rng.random(rows) < risk, "Yes", "No"),
        }
    )


@dataclass(frozen=True)
class Project:
    root: Path
    env: dict[str, str]
    score: ScoreCli
    settings: Settings
    holdout: pl.DataFrame
    labels: pl.DataFrame


def invoke(project: Project, *args: str):
    return CliRunner().invoke(app, list(args), env=project.env, catch_exceptions=True)


def ok(project: Project, *args: str) -> str:
    result = invoke(project, *args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


def one_error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    return " ".join(lines[0].split())


def nothing_written(project: Project) -> bool:
    return not list((project.root / "jobs").iterdir()) and not list((project.root / "expectations").iterdir())


def trained_model(inputs: Path, out: Path) -> None:
    frame = pl.read_parquet(inputs)
    names = [c for c in frame.columns if c not in ("customer_id", "outcome")]
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 2, "eta": 0.3, "seed": 1, "nthread": 1},
        xgb.DMatrix(frame.select(names).to_numpy(), label=frame["outcome"].to_numpy(), feature_names=names),
        num_boost_round=20,
    )
    booster.save_model(str(out))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("labels")
    env = user_project_env(root)
    train = churn_rows(1_500, seed=1, first=0)
    holdout = churn_rows(800, seed=2, first=100_000)
    day = churn_rows(600, seed=3, first=200_000)
    train.write_parquet(root / "train.parquet")
    holdout.write_parquet(root / "holdout.parquet")
    raw = root / "data" / "raw" / JOB / f"date={DAY}"
    raw.mkdir(parents=True)
    day.drop("churned").write_parquet(raw / "part-0.parquet")
    labels = day.select("customer_id", "churned", pl.lit(DAY + dt.timedelta(days=30)).alias("observed_date"))
    folder = root / "data" / "labels" / JOB / f"date={DAY}"
    folder.mkdir(parents=True)
    labels.write_parquet(folder / "part-0.parquet")
    settings = Settings(data_dir=root / "data", jobs_dir=root / "jobs", expectations_dir=root / "expectations")
    return Project(root, env, score_cli(root, env), settings, holdout, labels)


@pytest.fixture(scope="module")
def registered(project: Project) -> Project:
    """The churn job scaffolded with --positive Yes, a model trained on its `score features` and registered on the
    Yes/No hold-out; then one day scored and its Yes/No labels ingested."""
    root = project.root
    refused = one_error_line(
        invoke(
            project,
            "init",
            JOB,
            "--from",
            str(root / "train.parquet"),
            "--entity-column",
            "customer_id",
            "--label-column",
            "churned",
        )
    )
    assert refused.endswith(
        "label column 'churned' has values ['No', 'Yes']: say which is the event with --positive Yes (or --positive No)"
    ), refused
    assert str(root / "train.parquet") in refused and nothing_written(project)
    ok(
        project,
        "init",
        JOB,
        "--from",
        str(root / "train.parquet"),
        "--entity-column",
        "customer_id",
        "--label-column",
        "churned",
        "--positive",
        "Yes",
    )
    ok(project, "features", JOB, "--from", str(root / "train.parquet"), "--out", str(root / "inputs.parquet"))
    trained_model(root / "inputs.parquet", root / "model.ubj")
    ok(project, "register", JOB, "--model", str(root / "model.ubj"), "--holdout", str(root / "holdout.parquet"))
    project.score("backfill", JOB, "--start", str(DAY), "--end", str(DAY))
    project.score("outcomes", JOB, "--start", str(DAY), "--end", str(DAY))
    return project


def test_init_writes_the_event_value_quoted_and_keeps_the_label_out_of_features_and_suite(registered: Project) -> None:
    text = (registered.root / "jobs" / f"{JOB}.yaml").read_text()
    assert 'positive: "Yes"' in text and 'negative: "No"' in text
    spec = load_job_spec(JOB, registered.settings)
    assert (spec.monitoring.labels.positive, spec.monitoring.labels.negative) == ("Yes", "No")
    assert spec.target.kind == "binary" and spec.prediction.event == "churned = Yes"
    assert [c.name for c in spec.features.columns] == ["tenure_months", "support_calls", "plan"]
    suite = json.loads((registered.root / "expectations" / f"{JOB}.json").read_text())
    assert "churned" not in {e["kwargs"].get("column") for e in suite["expectations"]}
    # The base probability is the sample's share of "Yes", as numpy counts it.
    sample = pl.read_parquet(registered.root / "train.parquet")
    assert spec.prediction.score.base_probability == pytest.approx(
        float(np.mean(sample["churned"].to_numpy() == "Yes")), abs=1e-4
    )


def test_features_write_the_yes_rows_as_outcome_1(registered: Project) -> None:
    inputs = pl.read_parquet(registered.root / "inputs.parquet")
    sample = pl.read_parquet(registered.root / "train.parquet")
    assert np.array_equal(inputs["outcome"].to_numpy(), (sample["churned"].to_numpy() == "Yes").astype(np.int8))


def test_registering_on_yes_no_labels_calibrates_as_on_1_0_labels(registered: Project) -> None:
    """The same model registered by a job that reads 1/0 labels: every metadata field the hold-out shapes is the same."""
    root = registered.root
    spec = yaml.safe_load((root / "jobs" / f"{JOB}.yaml").read_text())
    spec["name"], spec["model"]["name"] = "churn_numbers", "churn_numbers"
    del spec["monitoring"]["labels"]["positive"], spec["monitoring"]["labels"]["negative"]
    (root / "jobs" / "churn_numbers.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    registered.holdout.with_columns((pl.col("churned") == "Yes").cast(pl.Int8)).write_parquet(
        root / "holdout_numbers.parquet"
    )
    ok(
        registered,
        "register",
        "churn_numbers",
        "--model",
        str(root / "model.ubj"),
        "--holdout",
        str(root / "holdout_numbers.parquet"),
    )

    def metadata(job: str) -> dict:
        document = json.loads((root / "data" / "models" / job / "1" / "metadata.json").read_text())
        del document["name"], document["training"]["registered_at"]
        return document

    yes_no, numbers = metadata(JOB), metadata("churn_numbers")
    assert yes_no["training"]["events_holdout"] == int((registered.holdout["churned"] == "Yes").sum())
    assert yes_no == numbers
    (root / "jobs" / "churn_numbers.yaml").unlink()


def test_outcomes_read_yes_as_the_event(registered: Project) -> None:
    root = registered.root
    predictions = pl.read_parquet(root / "data" / "output" / JOB / "predictions" / f"date={DAY}" / "*.parquet")
    joined = predictions.join(registered.labels, left_on="entity_id", right_on="customer_id")
    with duckdb.connect(str(root / "data" / "warehouse.duckdb"), read_only=True) as con:
        ((rate, labelled),) = con.sql(
            "SELECT observed_rate, labelled FROM outcome_metrics WHERE job = ?", params=[JOB]
        ).fetchall()
    assert labelled == joined.height
    assert rate == pytest.approx(float(np.mean(joined["churned"].to_numpy() == "Yes")), rel=1e-12)


def test_a_third_label_value_is_one_line_naming_file_column_and_value(registered: Project) -> None:
    root = registered.root
    maybe = registered.holdout.with_columns(
        pl.when(pl.int_range(pl.len()) < 3).then(pl.lit("Maybe")).otherwise(pl.col("churned")).alias("churned")
    )
    maybe.write_parquet(root / "holdout_maybe.parquet")
    line = one_error_line(
        invoke(
            registered,
            "register",
            JOB,
            "--model",
            str(root / "model.ubj"),
            "--holdout",
            str(root / "holdout_maybe.parquet"),
        )
    )
    assert str(root / "holdout_maybe.parquet") in line and "'churned'" in line and "['Maybe'] on 3 row(s)" in line, line
    assert sorted(p.name for p in (root / "data" / "models" / JOB).iterdir() if p.is_dir()) == ["1"]

    folder = root / "labels_maybe" / f"date={DAY}"
    folder.mkdir(parents=True)
    registered.labels.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("maybe")).otherwise(pl.col("churned")).alias("churned")
    ).write_parquet(folder / "late.parquet")
    spec = load_job_spec(JOB, registered.settings)
    with pytest.raises(
        LabelError,
        match=r"late\.parquet: outcome column 'churned' holds \['maybe'\] on 1 row\(s\), neither the event 'Yes' nor 'No'",
    ):
        parquet_labels(folder, spec.monitoring.labels)


def test_a_positive_flag_that_disagrees_with_the_spec_is_one_line(registered: Project) -> None:
    root = registered.root
    line = one_error_line(
        invoke(
            registered,
            "features",
            JOB,
            "--from",
            str(root / "train.parquet"),
            "--out",
            str(root / "other.parquet"),
            "--positive",
            "No",
        )
    )
    assert "--positive 'No' disagrees with monitoring.labels.positive 'Yes'" in line, line
    assert not (root / "other.parquet").exists()


def test_outcomes_take_the_event_from_the_spec_only(registered: Project) -> None:
    """A scheduled outcomes run revisits partitions reading the spec: a flag the spec does not say is refused, and labels
    of two values without the spec's positive say where to name it."""
    root = registered.root
    line = one_error_line(
        invoke(registered, "outcomes", JOB, "--start", str(DAY), "--end", str(DAY), "--positive", "No")
    )
    assert "--positive 'No' disagrees with monitoring.labels.positive 'Yes'" in line, line
    spec = yaml.safe_load((root / "jobs" / f"{JOB}.yaml").read_text())
    spec["name"], spec["model"]["name"] = "churn_unsaid", "churn_unsaid"
    del spec["monitoring"]["labels"]["positive"], spec["monitoring"]["labels"]["negative"]
    (root / "jobs" / "churn_unsaid.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        line = one_error_line(
            invoke(registered, "outcomes", "churn_unsaid", "--start", str(DAY), "--end", str(DAY), "--positive", "Yes")
        )
    finally:
        (root / "jobs" / "churn_unsaid.yaml").unlink()
    assert 'spec names no event value; add positive: "Yes" under monitoring.labels' in line, line
    folder = root / "data" / "labels" / JOB / f"date={DAY}"
    with pytest.raises(
        LabelError,
        match=(
            r"part-0\.parquet: outcome column 'churned' has values \['No', 'Yes'\]: say which is the event as positive: \"Yes\" "
            r"\(or \"No\"\) under monitoring\.labels in the job spec$"
        ),
    ):
        parquet_labels(folder, LabelSource(entity_column="customer_id", outcome_column="churned"))


@pytest.mark.parametrize(
    ("label", "kind", "expected"),
    [
        ("plan", "multiclass", "reads the label as the class name"),
        ("support_calls", "count", "reads the label as the actual number"),
    ],
)
def test_positive_is_refused_for_a_job_that_is_not_binary(
    project: Project, label: str, kind: str, expected: str
) -> None:
    sample = pl.read_parquet(project.root / "train.parquet").drop("churned")
    sample.write_parquet(project.root / f"{kind}.parquet")
    line = one_error_line(
        invoke(
            project,
            "init",
            kind,
            "--from",
            str(project.root / f"{kind}.parquet"),
            "--entity-column",
            "customer_id",
            "--label-column",
            label,
            "--kind",
            kind,
            "--positive",
            "basic",
        )
    )
    assert line.startswith(f"error: --positive names a binary job's event; --kind {kind} {expected}"), line
    assert not (project.root / "jobs" / f"{kind}.yaml").exists()


def test_boolean_labels_need_no_positive(project: Project) -> None:
    root = project.root
    sample = pl.read_parquet(root / "train.parquet").with_columns((pl.col("churned") == "Yes").alias("left"))
    sample.drop("churned").write_parquet(root / "bool.parquet")
    output = ok(
        project,
        "init",
        "leavers",
        "--from",
        str(root / "bool.parquet"),
        "--entity-column",
        "customer_id",
        "--label-column",
        "left",
    )
    assert "warning" not in output
    spec = load_job_spec("leavers", project.settings)
    assert spec.monitoring.labels.positive is None and [c.name for c in spec.features.columns] == [
        "tenure_months",
        "support_calls",
        "plan",
    ]
    ok(project, "features", "leavers", "--from", str(root / "bool.parquet"), "--out", str(root / "bool_inputs.parquet"))
    inputs = pl.read_parquet(root / "bool_inputs.parquet")
    assert np.array_equal(inputs["outcome"].to_numpy(), sample["left"].to_numpy().astype(np.int8))


def test_init_without_a_label_column_warns_of_a_column_named_like_one(project: Project) -> None:
    root = project.root
    pl.read_parquet(root / "train.parquet").with_columns(
        (pl.col("churned") == "Yes").cast(pl.Int8).alias("target")
    ).drop("churned").write_parquet(root / "unlabelled.parquet")
    output = ok(
        project, "init", "nolabel", "--from", str(root / "unlabelled.parquet"), "--entity-column", "customer_id"
    )
    assert "warning: target looks like an outcome and is now a model feature" in " ".join(output.split())
    assert "--force --label-column target" in output


@pytest.mark.parametrize(
    ("job", "labels", "expected"),
    [
        ("credit_risk", {"negative": "No"}, "monitoring.labels.negative needs monitoring.labels.positive"),
        ("credit_risk", {"positive": "Y", "negative": "Y"}, "positive and negative are both 'Y'"),
        (
            "store_sales",
            {"positive": "Yes"},
            "monitoring.labels.positive names a binary job's event; target.kind is count",
        ),
    ],
)
def test_a_spec_whose_labels_section_cannot_name_an_event_is_refused(job: str, labels: dict, expected: str) -> None:
    document = yaml.safe_load((Path(__file__).parents[1] / "jobs" / f"{job}.yaml").read_text())
    document["monitoring"].setdefault("labels", {}).update(labels)
    with pytest.raises(ValidationError, match=expected):
        JobSpec.model_validate(document)


def test_an_unquoted_yaml_boolean_or_number_names_the_labels_text() -> None:
    assert LabelSource(positive=True, negative=False).positive == "true"
    assert LabelSource(positive=2, negative=1.0).model_dump()["negative"] == "1"
