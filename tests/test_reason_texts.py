"""Reason texts that depend on the row's value: the spec form, its checks against the features,
and the text each row gets (band, cut, value, missing → default)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv
from pydantic import ValidationError

from tasks.contracts import FeatureContributions
from tasks.errors import JobValidationError
from tasks.prediction.config import ReasonCode, ReasonConfig
from tasks.prediction.reasons import predict_reason_codes, predict_reason_text_problems, predict_reason_texts
from tasks.settings import Settings

NAMES = ("income", "dti", "housing", "flag", "term", "age")
KINDS = {"housing": "categorical", "flag": "boolean"}
CATEGORIES = {"housing": ("RENT", "MORTGAGE", "OWN", "OTHER")}
MEDIAN = 50_000.0
CODES = {
    "income": {"code": "R01", "text": "income default", "by_band": {"low": "income low", "high": "income high"}},
    "dti": {
        "code": "R02",
        "text": "dti default",
        "by_cut": {"cuts": [0.2, 0.35], "texts": ["dti moderate", "dti high", "dti very high"]},
    },
    "housing": {"code": "R03", "text": "housing default", "by_value": {"RENT": "renting", "OWN": "owns"}},
    "flag": {"code": "R04", "text": "flag default", "by_value": {0: "no flag", True: "flagged"}},
    "term": {"code": "R05", "text": "term default", "by_value": {36: "short term", 60: "long term"}},
    "age": {"code": "R06", "text": "age text"},
}
REASONS = ReasonConfig(top_k=1, for_decisions=["decline"], no_reason_code="R00", no_reason_text="nothing", codes=CODES)


def _expected(feature: str, value: np.float32) -> str:
    """The text the spec above gives `value`, written out rule by rule; compared at float32, the
    model input's precision, so a value that is 0.35 in the data lands on the cut 0.35."""
    if np.isnan(value):
        return CODES[feature]["text"]
    if feature == "income":
        return "income low" if value <= np.float32(MEDIAN) else "income high"
    if feature == "dti":
        return (
            "dti moderate" if value < np.float32(0.2) else "dti high" if value < np.float32(0.35) else "dti very high"
        )
    if feature == "housing":
        return {0.0: "renting", 2.0: "owns"}.get(value, "housing default")
    if feature == "flag":
        return {0.0: "no flag", 1.0: "flagged"}.get(value, "flag default")
    if feature == "term":
        return {36.0: "short term", 60.0: "long term"}.get(value, "term default")
    return CODES[feature]["text"]


def _texts():
    return predict_reason_texts(REASONS, kinds=KINDS, categories=CATEGORIES, medians={"income": MEDIAN})


def test_each_row_gets_the_text_its_value_picks() -> None:
    rng = np.random.default_rng(4)
    n = 3_000
    values = np.column_stack(
        [
            rng.choice([20_000.0, MEDIAN, 50_000.5, 90_000.0, np.nan], n),
            rng.choice([0.1, 0.2, 0.3, 0.35, 0.6, np.nan], n),
            rng.choice([0.0, 1.0, 2.0, 3.0, np.nan], n),
            rng.choice([0.0, 1.0, np.nan], n),
            rng.choice([36.0, 48.0, 60.0], n),
            rng.normal(40, 10, n),
        ]
    ).astype(np.float32)
    # Exactly one positive contribution per row, on a random feature: that feature is the reason.
    top = rng.integers(0, len(NAMES), n)
    contributions = np.full((n, len(NAMES)), -0.1)
    contributions[np.arange(n), top] = rng.uniform(0.1, 1.0, n)
    explained = FeatureContributions(
        row_index=np.arange(n), values=contributions, feature_names=NAMES, feature_values=values
    )
    out = predict_reason_codes(explained, REASONS, _texts())
    expected = [[_expected(NAMES[j], values[i, j])] for i, j in enumerate(top)]
    assert out.texts.to_pylist() == expected
    assert out.codes.to_pylist() == [[CODES[NAMES[j]]["code"]] for j in top]
    # Every variant, and the default, was reached.
    reached = {t for [t] in expected}
    assert {
        "income low",
        "income high",
        "dti moderate",
        "dti high",
        "dti very high",
        "renting",
        "owns",
        "housing default",
        "no flag",
        "flagged",
        "short term",
        "long term",
        "term default",
        "income default",
    } <= reached


def test_value_dependent_texts_refuse_to_guess_without_values_or_resolution() -> None:
    explained = FeatureContributions(row_index=np.arange(1), values=np.ones((1, len(NAMES))), feature_names=NAMES)
    with pytest.raises(ValueError, match="carry no feature values"):
        predict_reason_codes(explained, REASONS, _texts())
    with pytest.raises(ValueError, match="not resolved"):
        predict_reason_codes(explained, REASONS)
    with pytest.raises(ValueError, match=r"codes\.income\.by_band: .*no median"):
        predict_reason_texts(REASONS, kinds=KINDS, categories=CATEGORIES, medians={})


def test_without_a_training_median_by_choice_a_band_falls_back_to_its_default_text() -> None:
    texts = predict_reason_texts(
        REASONS, kinds=KINDS, categories=CATEGORIES, medians={}, bands_without_median="default_text"
    )
    assert texts.defaulted == {"income"} and "income" not in texts.by_feature
    values = np.array([[10.0, 0.6, 0.0, 1.0, 36.0, 30.0], [1e9, 0.1, 2.0, 0.0, 60.0, 30.0]], dtype=np.float32)
    contributions = np.array([[1.0, 0.5, 0, 0, 0, 0], [1.0, 0, 0, 0, 0, 0]])
    explained = FeatureContributions(
        row_index=np.arange(2), values=contributions, feature_names=NAMES, feature_values=values
    )
    out = predict_reason_codes(explained, REASONS.model_copy(update={"top_k": 2}), texts)
    # Low and high incomes alike get the default text; the other variants still follow the value.
    assert out.texts.to_pylist() == [["income default", "dti very high"], ["income default"]]


@pytest.mark.parametrize(
    ("reason", "match"),
    [
        ({"code": "X", "text": "t", "by_cut": {"cuts": [0.3, 0.2], "texts": ["a", "b", "c"]}}, "increase strictly"),
        ({"code": "X", "text": "t", "by_cut": {"cuts": [0.2, 0.3], "texts": ["a", "b"]}}, "texts needs 3"),
        ({"code": "X", "text": "t", "by_band": {"low": "a", "high": "b"}, "by_value": {"1": "x"}}, "at most one"),
        ({"code": "X", "text": "t", "by_value": {1: "a", "1": "b"}}, "more than once"),
    ],
)
def test_the_spec_form_is_checked_at_load(reason: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ReasonCode.model_validate(reason)


def test_yaml_keys_become_the_values_they_mean() -> None:
    loaded = yaml.safe_load("by_value: {yes: flagged, 0: not flagged, 36: short}")
    reason = ReasonCode.model_validate({"code": "X", "text": "t", **loaded})
    assert reason.by_value == {"true": "flagged", "0": "not flagged", "36": "short"}


def test_problems_name_the_field_and_the_bad_key() -> None:
    codes = {
        "housing": {"code": "A", "text": "t", "by_value": {"RENT": "r", "RENTING": "x"}},
        "purpose": {"code": "B", "text": "t", "by_band": {"low": "l", "high": "h"}},
        "flag": {"code": "C", "text": "t", "by_value": {"maybe": "m", "0": "n", "false": "f"}},
        "term": {"code": "D", "text": "t", "by_value": {"long": "l"}},
        "rate": {"code": "E", "text": "t", "by_cut": {"cuts": [1.0], "texts": ["a", "b"]}},
    }
    reasons = ReasonConfig(for_decisions=["d"], no_reason_code="R0", no_reason_text="n", codes=codes)
    problems = predict_reason_text_problems(
        reasons,
        kinds={"housing": "categorical", "purpose": "categorical", "flag": "boolean"},
        categories={"housing": ("RENT", "OWN"), "purpose": ("car", "other")},
    )
    assert problems == [
        "prediction.reasons.codes.housing.by_value: key 'RENTING' is not a category of housing (categories: RENT, OWN)",
        "prediction.reasons.codes.purpose.by_band: purpose is categorical, which has no order to band or cut; use by_value",
        "prediction.reasons.codes.flag.by_value: key 'maybe' is not a value of the boolean flag (use 0/1 or true/false)",
        "prediction.reasons.codes.flag.by_value: keys '0' and 'false' name the same value",
        "prediction.reasons.codes.term.by_value: key 'long' is not a number (the numeric term has numeric values)",
    ]


def test_a_bad_by_value_key_stops_before_the_lease_naming_the_spec(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.scoring.prepared import prepared_job
    from tasks.sinks.warehouse_choice import warehouse_for

    spec = yaml.safe_load((fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["prediction"]["reasons"]["codes"]["home_ownership"]["by_value"]["RENTING"] = "Renting"
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    settings = fresh_data.model_copy(update={"jobs_dir": jobs})
    with pytest.raises(JobValidationError) as err:
        prepared_job(DEMO_JOB, demo_env.plan.scoring_dates[0], settings)
    assert str(jobs / f"{DEMO_JOB}.yaml") in str(err.value)
    assert "prediction.reasons.codes.home_ownership.by_value: key 'RENTING'" in str(err.value)
    assert warehouse_for(settings).latest_succeeded_run(DEMO_JOB) is None
