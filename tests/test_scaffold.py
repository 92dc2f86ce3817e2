"""`score init`: a job scaffolded from a sample partition this test writes itself, then loaded,
guarded, computed and scored as any job is."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cli.score import app
from tasks.features import feature_kinds, job_features
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.jobspec import load_job_spec
from tasks.settings import Settings, current_settings

JOB = "loans"
REGIONS = ("north", "south", "east", "west", "centre")
ROWS = 2_000
SCORING_VARS = (
    "SCORING_DATA_DIR",
    "SCORING_JOBS_DIR",
    "SCORING_EXPECTATIONS_DIR",
    "SCORING_WAREHOUSE_PATH",
    "SCORING_WAREHOUSE_URL",
    "SCORING_WAREHOUSE_SECRET_BLOCK",
    "SCORING_TIMEZONE",
)


def sample_frame(seed: int, rows: int = ROWS, *, first_id: int = 0) -> pl.DataFrame:
    """Applicants whose default depends on age, income, home ownership and region."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 91, rows)
    income = rng.lognormal(10.8, 0.5, rows)
    owns_home = rng.random(rows) < 0.4
    region = rng.choice(REGIONS, rows, p=[0.35, 0.25, 0.2, 0.15, 0.05])
    logit = -2.2 + 0.8 * (income < 30_000) - 0.6 * owns_home + 0.9 * (region == "centre") - 0.01 * (age - 50)
    defaulted = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int8)
    income[rng.random(rows) < 0.05] = np.nan
    return pl.DataFrame(
        {
            "id": [f"C-{i:06d}" for i in range(first_id, first_id + rows)],
            "age": age,
            "income": pl.Series(income).fill_nan(None),
            "owns_home": np.where(owns_home, "yes", "no"),
            "region": region,
            "is_new": rng.random(rows) < 0.3,
            "defaulted": defaulted,
        }
    )


@dataclass(frozen=True)
class Scaffold:
    sample_dir: Path
    sample: pl.DataFrame
    settings: Settings
    spec_path: Path
    suite_path: Path


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def one_error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    return lines[0]


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in SCORING_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, folder in (
        ("SCORING_JOBS_DIR", "jobs"),
        ("SCORING_EXPECTATIONS_DIR", "expectations"),
        ("SCORING_DATA_DIR", "data"),
    ):
        (tmp_path / folder).mkdir()
        monkeypatch.setenv(name, str(tmp_path / folder))
    return current_settings()


@pytest.fixture
def scaffold(workspace: Settings, tmp_path: Path) -> Scaffold:
    sample = sample_frame(seed=3)
    sample_dir = tmp_path / "sample" / "date=2026-03-01"
    sample_dir.mkdir(parents=True)
    sample.head(1_200).write_parquet(sample_dir / "part-0.parquet")
    sample.slice(1_200).write_parquet(sample_dir / "part-1.parquet")
    result = invoke("init", JOB, "--from", str(sample_dir), "--entity-column", "id", "--label-column", "defaulted")
    assert result.exit_code == 0, (result.output, result.exception)
    spec_path, suite_path = workspace.jobs_dir / f"{JOB}.yaml", workspace.expectations_dir / f"{JOB}.json"
    assert f"wrote {spec_path}" in result.output and f"wrote {suite_path}" in result.output
    assert f"score run {JOB} --date" in result.output and "register" in result.output
    return Scaffold(sample_dir, sample, workspace, spec_path, suite_path)


def suite_entry(scaffold: Scaffold, etype: str, column: str) -> dict[str, Any]:
    doc = json.loads(scaffold.suite_path.read_text())
    (entry,) = [e for e in doc["expectations"] if e["type"] == etype and e["kwargs"]["column"] == column]
    return entry


# --- the spec -------------------------------------------------------------------------------------


def test_the_spec_loads_with_declared_features_of_the_inferred_kinds(scaffold: Scaffold) -> None:
    spec = load_job_spec(JOB, scaffold.settings)
    assert spec.entity_column == "id" and spec.model.name == JOB and spec.expectation_suite == f"{JOB}.json"
    features = job_features(spec)
    assert features.FEATURES == ("age", "income", "owns_home", "region", "is_new")  # no id, no label
    assert feature_kinds(features) == {
        "age": "numeric",
        "income": "numeric",
        "owns_home": "boolean",
        "region": "categorical",
        "is_new": "boolean",
    }
    counts = scaffold.sample["region"].value_counts()
    by_frequency = tuple(sorted(REGIONS, key=lambda r: -counts.filter(pl.col("region") == r)["count"].item()))
    assert features.CATEGORIES == {"region": by_frequency}
    assert spec.target.kind == "binary"
    assert spec.prediction.score.base_probability == pytest.approx(scaffold.sample["defaulted"].mean(), abs=1e-4)
    assert spec.monitoring.labels.outcome_column == "defaulted" and spec.monitoring.labels.entity_column == "id"
    assert set(spec.prediction.reasons.codes) == set(features.FEATURES)
    assert len({c.code for c in spec.prediction.reasons.codes.values()}) == len(features.FEATURES)
    assert {r.decision for r in spec.prediction.rules} == {"act", "manual_review", "no_action"}
    assert spec.action_decisions == ["act"] and spec.prediction.score.name == "score"


def test_the_spec_says_what_to_review(scaffold: Scaffold) -> None:
    text = scaffold.spec_path.read_text()
    review_lines = [line for line in text.splitlines() if "# review:" in line]
    for topic in ("base_probability", "cut-off", "code per feature", "kinds", "registry name", "outcomes arrive"):
        assert any(topic in line for line in review_lines), topic


def test_the_declared_features_of_the_sample_are_its_values_mapped(scaffold: Scaffold) -> None:
    features = job_features(load_job_spec(JOB, scaffold.settings))
    frame = scaffold.sample.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("atlantis")).otherwise(pl.col("region")).alias("region"),
        pl.when(pl.int_range(pl.len()) == 1).then(pl.lit("YES ")).otherwise(pl.col("owns_home")).alias("owns_home"),
    )
    matrix = features.feature_matrix(frame)
    categories = features.CATEGORIES["region"]
    for i, row in enumerate(frame.head(50).iter_rows(named=True)):
        income = math.nan if row["income"] is None else np.float32(row["income"])
        expected = [
            row["age"],
            income,
            1.0 if row["owns_home"].strip().lower() == "yes" else 0.0,
            categories.index(row["region"]) if row["region"] in categories else math.nan,
            float(row["is_new"]),
        ]
        np.testing.assert_array_equal(matrix[i], np.array(expected, dtype=np.float32))
    assert math.isnan(matrix[0, 3]) and matrix[1, 2] == 1


# --- the suite ------------------------------------------------------------------------------------


def test_the_suite_passes_its_own_sample_untouched(scaffold: Scaffold) -> None:
    suite = load_guard_suite(scaffold.suite_path, entity_column="id")
    guarded = guarded_chunk(scaffold.sample, suite, entity_column="id")
    assert guarded.counts.rows_repaired == 0 and guarded.counts.rows_quarantined == 0
    assert guarded.actions.height == 0 and guarded.scorable.equals(scaffold.sample)


def test_the_suite_is_profiled_from_the_sample(scaffold: Scaffold) -> None:
    doc = json.loads(scaffold.suite_path.read_text())
    for column in ("id", "age", "income", "owns_home", "region", "is_new"):
        assert suite_entry(scaffold, "expect_column_to_exist", column)["meta"]["guard"]["action"] == "fail"
    assert not [e for e in doc["expectations"] if e["kwargs"]["column"] == "defaulted"]  # the label is no raw column
    not_null = {
        e["kwargs"]["column"] for e in doc["expectations"] if e["type"] == "expect_column_values_to_not_be_null"
    }
    assert not_null == {"id", "age", "owns_home", "region", "is_new"}  # income has nulls in the sample
    assert suite_entry(scaffold, "expect_column_values_to_match_regex", "id")["kwargs"]["regex"] == r"^C-\d{6}$"
    assert set(suite_entry(scaffold, "expect_column_values_to_be_in_set", "region")["kwargs"]["value_set"]) == set(
        REGIONS
    )
    for column in ("age", "income"):
        kwargs = suite_entry(scaffold, "expect_column_values_to_be_between", column)["kwargs"]
        values = scaffold.sample[column].drop_nulls().to_numpy().astype(float)
        p_low, p_high = np.quantile(values, [0.001, 0.999])
        margin = p_high - p_low  # a whole range each side: broken values are caught, a rare real one is not
        assert kwargs["min_value"] <= min(values.min(), max(p_low - margin, 0.0))
        assert kwargs["max_value"] >= max(values.max(), p_high + margin)
        assert kwargs["max_value"] - kwargs["min_value"] <= 4 * (values.max() - values.min())


@pytest.mark.parametrize(
    ("column", "value", "etype"),
    [
        ("region", "atlantis", "expect_column_values_to_be_in_set"),
        ("owns_home", None, "expect_column_values_to_not_be_null"),
        ("id", "X-1", "expect_column_values_to_match_regex"),
    ],
)
def test_a_row_the_sample_never_had_is_caught_with_the_proposed_action(
    scaffold: Scaffold, column: str, value: Any, etype: str
) -> None:
    proposed = suite_entry(scaffold, etype, column)["meta"]["guard"]["action"]
    bad = scaffold.sample.with_columns(
        pl.when(pl.int_range(pl.len()) == 7).then(pl.lit(value)).otherwise(pl.col(column)).alias(column)
    )
    guarded = guarded_chunk(bad, load_guard_suite(scaffold.suite_path, entity_column="id"), entity_column="id")
    assert guarded.actions.select("entity_id", "column", "action").rows() == [(bad["id"][7], column, proposed)]
    assert proposed == "quarantine" and guarded.quarantined["id"].to_list() == [bad["id"][7]]


def test_a_null_income_is_no_violation_since_the_sample_had_them(scaffold: Scaffold) -> None:
    bad = scaffold.sample.with_columns(pl.lit(None, dtype=pl.Float64).alias("income"))
    guarded = guarded_chunk(bad, load_guard_suite(scaffold.suite_path, entity_column="id"), entity_column="id")
    assert guarded.actions.height == 0


@pytest.mark.gx
def test_great_expectations_itself_passes_the_sample_on_the_suite(scaffold: Scaffold) -> None:
    import great_expectations as gx
    from great_expectations.core import ExpectationSuite
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (
        context.data_sources.add_pandas("scaffold")
        .add_dataframe_asset("sample")
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": scaffold.sample.drop("defaulted").to_pandas()})
    )
    result = batch.validate(ExpectationSuite(**json.loads(scaffold.suite_path.read_text())))
    failed = [
        (r.expectation_config.type, r.expectation_config.kwargs.get("column")) for r in result.results if not r.success
    ]
    assert failed == [] and len(result.results) == len(json.loads(scaffold.suite_path.read_text())["expectations"])


# --- refusals -------------------------------------------------------------------------------------


def test_init_refuses_to_overwrite_unless_forced(scaffold: Scaffold) -> None:
    scaffold.spec_path.write_text(scaffold.spec_path.read_text() + "# my edits\n")
    before = (scaffold.spec_path.read_bytes(), scaffold.suite_path.read_bytes())
    args = ("init", JOB, "--from", str(scaffold.sample_dir), "--entity-column", "id")
    line = one_error_line(invoke(*args))
    assert str(scaffold.spec_path) in line and str(scaffold.suite_path) in line and "--force" in line
    assert (scaffold.spec_path.read_bytes(), scaffold.suite_path.read_bytes()) == before
    assert invoke(*args, "--force").exit_code == 0
    assert "# my edits" not in scaffold.spec_path.read_text()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ("--entity-column", "customer"),
            ["--entity-column", "'customer'", "id, age, income, owns_home, region, is_new, defaulted"],
        ),
        (("--entity-column", "id", "--label-column", "bad_debt"), ["--label-column", "'bad_debt'", "id, age"]),
        # Five regions would propose a multiclass job: asked for a binary one, text is refused.
        (
            ("--entity-column", "id", "--label-column", "region", "--kind", "binary"),
            ["'region'", "holds text", "outcome is 1 (the event) or 0"],
        ),
    ],
)
def test_a_column_the_sample_lacks_is_one_error_line_listing_its_columns(
    scaffold: Scaffold, workspace: Settings, extra: tuple[str, ...], expected: list[str]
) -> None:
    line = one_error_line(invoke("init", "other", "--from", str(scaffold.sample_dir), *extra))
    for part in expected:
        assert part in line, line
    assert not (workspace.jobs_dir / "other.yaml").exists() and not (workspace.expectations_dir / "other.json").exists()


def test_a_missing_sample_folder_is_one_error_line(workspace: Settings, tmp_path: Path) -> None:
    line = one_error_line(invoke("init", JOB, "--from", str(tmp_path / "nowhere"), "--entity-column", "id"))
    assert str(tmp_path / "nowhere") in line
    assert not list(workspace.jobs_dir.iterdir()) and not list(workspace.expectations_dir.iterdir())


def test_an_invalid_job_name_is_one_error_line(scaffold: Scaffold) -> None:
    line = one_error_line(invoke("init", "../Loans", "--from", str(scaffold.sample_dir), "--entity-column", "id"))
    assert "'../Loans'" in line


def test_a_spec_with_both_feature_module_and_features_is_refused(scaffold: Scaffold, prefect_logging: None) -> None:
    scaffold.spec_path.write_text(scaffold.spec_path.read_text() + "feature_module: tasks.features.credit_risk\n")
    line = one_error_line(invoke("run", JOB, "--date", "2026-03-02"))
    assert str(scaffold.spec_path) in line and "exactly one of `feature_module`" in line and "got both" in line


# --- scored like any job --------------------------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")
def test_a_scaffolded_job_scores_a_partition_with_nothing_but_a_model_added(scaffold: Scaffold) -> None:
    from tasks.demo.training import registered_classifier
    from tasks.inference.aliases import inference_moved_alias

    settings = scaffold.settings
    spec = load_job_spec(JOB, settings)
    features = job_features(spec)
    x = features.feature_matrix(scaffold.sample)
    registered_classifier(
        x,
        scaffold.sample["defaulted"].to_numpy().astype(np.float32),
        names=features.FEATURES,
        feature_version=features.FEATURE_VERSION,
        model_dir=settings.model_registry_dir(JOB) / "1",
        seed=1,
        training_window=(dt.date(2026, 3, 1), dt.date(2026, 3, 1)),
        rows_quarantined=0,
    )
    # The spec scores the champion alias; a version written straight into the registry is not one until named so.
    assert spec.model.version == "champion"
    inference_moved_alias(settings.model_registry_dir(JOB), "champion", "1", versions=["1"], changed_by="test")
    day = "2026-03-02"
    raw = sample_frame(seed=4, rows=1_500, first_id=10_000).drop("defaulted")
    raw = raw.with_columns(
        pl.when(pl.int_range(pl.len()) < 3).then(pl.lit("atlantis")).otherwise(pl.col("region")).alias("region")
    )
    raw_dir = settings.raw_partition_dir(JOB, day)
    raw_dir.mkdir(parents=True)
    raw.write_parquet(raw_dir / "part-0.parquet")

    result = invoke("run", JOB, "--date", day)
    assert result.exit_code == 0, (result.output, result.exception)
    files = list((settings.predictions_dir(JOB) / f"date={day}").glob("*.parquet"))
    predictions = pl.concat([pl.read_parquet(f) for f in files])
    assert predictions.height == raw.height - 3  # the unseen regions were quarantined
    assert set(predictions["feature_version"]) == {features.FEATURE_VERSION}
    assert set(predictions["decision"]) <= {"act", "manual_review", "no_action"}
    codes = {c.code for c in spec.prediction.reasons.codes.values()} | {spec.prediction.reasons.no_reason_code}
    explained = predictions.filter(pl.col("decision") != "no_action")
    assert explained.height > 0 and set(explained["reason_codes"].explode().drop_nulls()) <= codes
    assert pq.read_metadata(files[0]).num_rows > 0


def test_odd_columns_get_safe_feature_names_or_are_left_out_with_a_reason(workspace: Settings, tmp_path: Path) -> None:
    from tasks.jobs.scaffold import scaffolded_job

    rng = np.random.default_rng(9)
    rows = 400
    sample = pl.DataFrame(
        {
            "key": [f"k{i}" for i in range(rows)],
            "loan amount": rng.uniform(100, 900, rows),
            "amount_text": [f"{v:.2f}" for v in rng.uniform(0, 1e4, rows)],
            "opened": [dt.date(2026, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 60, rows)],
            "flag01": rng.integers(0, 2, rows),
            "yn": rng.choice(["Y", "N"], rows),
            'home "type"': rng.choice(["a b", "[c]", "yes"], rows),
        }
    )
    path = tmp_path / "odd.parquet"
    sample.write_parquet(path)
    done = scaffolded_job("odd", sample=path, entity_column="key", label_column=None, settings=workspace)
    # flag01 holds 0/1 integers, but nothing in its type or name says flag: it stays a number.
    assert done.features == {
        "loan_amount": "numeric",
        "flag01": "numeric",
        "yn": "boolean",
        "home__type_": "categorical",
    }
    assert "numbers stored as text" in done.left_out["amount_text"] and "Date" in done.left_out["opened"]
    spec = load_job_spec("odd", workspace)
    sources = {c.name: c.raw_column for c in spec.features.columns}
    assert sources["loan_amount"] == "loan amount" and sources["home__type_"] == 'home "type"'
    features = job_features(spec)
    matrix = features.feature_matrix(sample)
    np.testing.assert_array_equal(matrix[:, 0], sample["loan amount"].cast(pl.Float32).to_numpy())
    np.testing.assert_array_equal(matrix[:, 2], (sample["yn"] == "Y").cast(pl.Float32).to_numpy())
    assert set(features.CATEGORIES["home__type_"]) == {"a b", "[c]", "yes"}
    guarded = guarded_chunk(sample, load_guard_suite(done.suite_path, entity_column="key"), entity_column="key")
    assert guarded.actions.height == 0
