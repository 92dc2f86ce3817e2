"""Features declared in the job spec (`features:`): the spec's validation and the matrix they give,
checked against values worked out row by row here."""

from __future__ import annotations

import copy
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import yaml
from pydantic import ValidationError

from tasks.errors import JobSpecError
from tasks.features import feature_categories, feature_kinds, job_features
from tasks.features.declared import DeclaredFeatures
from tasks.jobspec import JobSpec, load_job_spec
from tasks.settings import PROJECT_ROOT, Settings

COLUMNS: list[dict[str, Any]] = [
    {"name": "income"},
    {"name": "loan", "source": "loan amount", "clip": [0, 1000]},
    {"name": "floor_only", "source": "loan amount", "clip": [100, None]},
    {"name": "has_mortgage", "kind": "boolean"},
    {"name": "flag", "kind": "boolean"},
    {"name": "count_flag", "kind": "boolean"},
    {"name": "vip", "kind": "boolean", "true_values": ["Gold"], "false_values": ["basic", "Silver"]},
    {"name": "home", "kind": "categorical", "categories": ["RENT", "MORTGAGE", "OWN", "OTHER"]},
    {"name": "term", "kind": "categorical", "categories": [36, 60]},
]

FRAME = pl.DataFrame(
    {
        "income": [50_000, None, 12, -3, 7],
        "loan amount": [-5.0, 20.0, 5_000.0, float("nan"), None],
        "has_mortgage": [" YES", "n", "maybe", None, "False"],
        "flag": [True, False, None, True, False],
        "count_flag": [1, 0, 2, None, 1],
        "vip": ["gold", "SILVER", "Basic", "bronze", None],
        "home": ["RENT", "OWN", "CASTLE", None, "OTHER"],
        "term": [36, 60, 48, None, 36],
    },
    schema_overrides={"income": pl.Int64},
)

TRUTHY, FALSY = {"true", "yes", "y", "1"}, {"false", "no", "n", "0"}


def expected_value(column: dict[str, Any], raw: Any) -> float:
    """One cell, worked out from the documented rules in plain Python."""
    kind = column.get("kind", "numeric")
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return math.nan
    if kind == "numeric":
        low, high = column.get("clip", [None, None])
        value = float(raw)
        value = max(value, low) if low is not None else value
        return min(value, high) if high is not None else value
    if kind == "boolean":
        if isinstance(raw, bool):
            return float(raw)
        truthy = {v.lower() for v in column.get("true_values", TRUTHY)}
        falsy = {v.lower() for v in column.get("false_values", FALSY)}
        word = str(raw).strip().lower()
        return 1.0 if word in truthy else 0.0 if word in falsy else math.nan
    categories = [str(c) for c in column["categories"]]
    return float(categories.index(str(raw))) if str(raw) in categories else math.nan


def declared(columns: list[dict[str, Any]] = COLUMNS, version: str = "2.1.0") -> DeclaredFeatures:
    spec = base_spec()
    spec["features"] = {"version": version, "columns": columns}
    spec["prediction"]["reasons"]["codes"] = {
        c["name"]: {"code": f"R{i}", "text": c["name"]} for i, c in enumerate(columns)
    }
    features = job_features(JobSpec.model_validate(spec))
    assert isinstance(features, DeclaredFeatures)
    return features


def base_spec() -> dict[str, Any]:
    spec = yaml.safe_load((PROJECT_ROOT / "jobs" / "credit_risk.yaml").read_text())
    del spec["feature_module"]
    return copy.deepcopy(spec)


def test_the_matrix_follows_each_kind_row_by_row() -> None:
    features = declared()
    matrix = features.feature_matrix(FRAME)
    assert matrix.dtype == np.float32 and matrix.flags["C_CONTIGUOUS"]
    assert matrix.shape == (FRAME.height, len(COLUMNS))
    expected = np.array(
        [[expected_value(c, FRAME[c.get("source", c["name"])][i]) for c in COLUMNS] for i in range(FRAME.height)],
        dtype=np.float32,
    )
    np.testing.assert_array_equal(matrix, expected)
    # The mapping rules really fired, so the comparison above is not between two all-NaN arrays.
    assert matrix[0, 3] == 1 and matrix[1, 3] == 0 and math.isnan(matrix[2, 3])  # " YES", "n", "maybe"
    assert matrix[0, 1] == 0 and matrix[2, 1] == 1000 and matrix[0, 2] == 100  # clipped on both sides
    assert math.isnan(matrix[2, 7]) and matrix[4, 7] == 3  # unseen CASTLE, OTHER is code 3
    assert math.isnan(matrix[2, 8]) and matrix[1, 8] == 1  # term 48 unseen, 60 is code 1


def test_the_module_protocol_gives_names_kinds_categories_and_version() -> None:
    features = declared()
    assert features.FEATURE_VERSION == "2.1.0"
    assert features.FEATURES == tuple(c["name"] for c in COLUMNS)
    assert feature_kinds(features) == {c["name"]: c.get("kind", "numeric") for c in COLUMNS}
    assert feature_categories(features) == {"home": ("RENT", "MORTGAGE", "OWN", "OTHER"), "term": ("36", "60")}
    # Dask ships the prepared job to its workers.
    again = pickle.loads(pickle.dumps(features))
    np.testing.assert_array_equal(again.feature_matrix(FRAME), features.feature_matrix(FRAME))


def test_an_empty_chunk_and_an_all_null_column_give_the_right_shapes() -> None:
    features = declared()
    assert features.feature_matrix(FRAME.head(0)).shape == (0, len(COLUMNS))
    nulls = FRAME.with_columns(pl.lit(None).alias("home"), pl.lit(None).alias("income"))
    matrix = features.feature_matrix(nulls)
    assert np.isnan(matrix[:, 0]).all() and np.isnan(matrix[:, 7]).all()


def test_a_numeric_feature_on_a_string_column_is_an_error_naming_feature_column_and_type() -> None:
    features = declared()
    bad = FRAME.with_columns(pl.col("income").cast(pl.String))
    with pytest.raises(JobSpecError, match=r"feature 'income' is numeric .* raw column 'income' has type String"):
        features.feature_matrix(bad)
    schema = bad.drop("home").to_arrow().schema
    with pytest.raises(JobSpecError) as err:
        features.checked_raw_schema(schema, where="raw file x.parquet")
    message = str(err.value)
    assert message.startswith("raw file x.parquet:") and "'home', which is missing" in message and "income" in message
    features.checked_raw_schema(FRAME.to_arrow().schema, where="raw file ok.parquet")


@pytest.mark.parametrize(
    ("column", "problem"),
    [
        ({"name": "x", "kind": "categorical"}, "needs `categories`"),
        ({"name": "x", "kind": "categorical", "categories": ["a", "a"]}, "more than once"),
        ({"name": "x", "kind": "boolean", "clip": [0, 1]}, "cannot take ['clip']"),
        ({"name": "x", "categories": ["a"]}, "cannot take ['categories']"),
        ({"name": "x", "clip": [5, 1]}, "clip low 5.0 is above high 1.0"),
        ({"name": "x", "kind": "boolean", "true_values": ["Y"], "false_values": ["y"]}, "in both"),
        ({"name": "x[1]"}, "should match pattern"),
        ({"name": "x", "kind": "text"}, "'numeric', 'boolean' or 'categorical'"),
    ],
)
def test_a_bad_declared_column_is_refused(column: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError) as err:
        declared([column])
    assert problem in str(err.value)


def test_repeated_feature_names_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"repeated: \['a'\]"):
        declared([{"name": "a"}, {"name": "a", "source": "b"}])


def _write_spec(tmp_path: Path, spec: dict[str, Any]) -> Settings:
    jobs = tmp_path / "jobs"
    jobs.mkdir(exist_ok=True)
    (jobs / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec))
    return Settings(jobs_dir=jobs, data_dir=tmp_path / "data")


@pytest.mark.parametrize("which", ["both", "neither"])
def test_exactly_one_of_feature_module_and_features(tmp_path: Path, which: str) -> None:
    spec = base_spec()
    if which == "both":
        spec["feature_module"] = "tasks.features.credit_risk"
        spec["features"] = {"version": "1", "columns": [{"name": "annual_income"}]}
    with pytest.raises(JobSpecError) as err:
        load_job_spec("credit_risk", _write_spec(tmp_path, spec))
    message = str(err.value)
    assert "\n" not in message and f"got {which}" in message
    assert "`feature_module`" in message and "`features`" in message


def test_a_declared_job_needs_one_reason_code_per_feature_and_no_other(tmp_path: Path) -> None:
    from tasks.jobs.validation import job_problems

    spec = base_spec()
    spec["features"] = {
        "version": "1",
        "columns": [{"name": "annual_income"}, {"name": "debt_to_incme"}, {"name": "new_feature"}],
    }
    problems = [
        p
        for p in job_problems("credit_risk", _write_spec(tmp_path, spec))
        if p.field.startswith("prediction.reasons.codes")
    ]
    by_field = {p.field: p.message for p in problems}
    # The code of a renamed feature is named with the feature it most likely means; the rest are listed.
    assert "did you mean 'debt_to_incme'" in by_field["prediction.reasons.codes.debt_to_income"]
    assert "'new_feature'" in by_field["prediction.reasons.codes"]
    assert "'loan_amount' is not a feature of the model" in by_field["prediction.reasons.codes.loan_amount"]


def test_a_python_feature_module_job_still_loads_its_module() -> None:
    spec = JobSpec.model_validate(yaml.safe_load((PROJECT_ROOT / "jobs" / "credit_risk.yaml").read_text()))
    from tasks.features import credit_risk

    assert job_features(spec) is credit_risk
