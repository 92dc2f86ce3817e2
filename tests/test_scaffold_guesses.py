"""`score init`'s guesses hold on the next night: a count seen only as 0 and 1 stays a count, a value outside the
profiled range is clipped and counted rather than quarantined, and the starter texts say true things in the
feature's plain name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from cli.score import app
from tasks.features import feature_kinds, job_features
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.jobspec import load_job_spec
from tasks.prediction.reasons import predict_reason_texts
from tasks.quality.fallback_report import fallback_report_rows
from tasks.settings import Settings, current_settings

JOB = "uptake"
ROWS = 1_000
SCORING_VARS = (
    "SCORING_DATA_DIR",
    "SCORING_JOBS_DIR",
    "SCORING_EXPECTATIONS_DIR",
    "SCORING_WAREHOUSE_PATH",
    "SCORING_WAREHOUSE_URL",
    "SCORING_WAREHOUSE_SECRET_BLOCK",
    "SCORING_TIMEZONE",
)


def customers(seed: int, rows: int = ROWS) -> pl.DataFrame:
    """Customers of a product: counts, flags, a measurement and a category, none of them made by the demo generator."""
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "customer": [f"K{i:05d}" for i in range(rows)],
            "num_policies": rng.integers(0, 2, rows),  # a count: its sample happens to hold only 0 and 1
            "is_member": rng.integers(0, 2, rows),
            "smoker": rng.choice(["Yes", "No"], rows),
            "children": rng.integers(0, 4, rows),  # four values
            "annual_km": rng.normal(15_000, 4_000, rows),
            "visits": rng.choice([0, 1, 1, 1, 1, 1, 2, 3, 5, 8], rows),  # its median 1 is its most common value
            "MOSTYPE": rng.integers(1, 40, rows),
            # Whole years written as floats (a writer filled gaps with null): a later 2.5 may still come.
            "tenure_years": pl.Series(rng.choice([0.0, 1.0, 2.0, 2.0, 2.0, 3.0, 5.0, 8.0, 13.0], rows)).scatter(
                [0, 1], None
            ),
            "channel": rng.choice(["web", "shop", "phone"], rows),
            "bought": rng.integers(0, 2, rows),
        }
    )


@pytest.fixture
def scaffolded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, pl.DataFrame, str]:
    for name in SCORING_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, folder in (
        ("SCORING_JOBS_DIR", "jobs"),
        ("SCORING_EXPECTATIONS_DIR", "expectations"),
        ("SCORING_DATA_DIR", "data"),
    ):
        (tmp_path / folder).mkdir()
        monkeypatch.setenv(name, str(tmp_path / folder))
    sample = customers(seed=5)
    sample.write_parquet(tmp_path / "sample.parquet")
    result = CliRunner().invoke(
        app,
        [
            "init",
            JOB,
            "--from",
            str(tmp_path / "sample.parquet"),
            "--entity-column",
            "customer",
            "--label-column",
            "bought",
        ],
        catch_exceptions=True,
    )
    assert result.exit_code == 0, (result.output, result.exception)
    return current_settings(), sample, result.output


def _suite(settings: Settings):
    return load_guard_suite(settings.expectations_dir / f"{JOB}.json", entity_column="customer")


def test_kinds_come_from_types_values_and_names_never_from_a_zero_one_sample_of_integers(scaffolded) -> None:
    settings, _, _ = scaffolded
    kinds = feature_kinds(job_features(load_job_spec(JOB, settings)))
    assert kinds == {
        "num_policies": "numeric",
        "is_member": "boolean",
        "smoker": "boolean",
        "children": "numeric",
        "annual_km": "numeric",
        "visits": "numeric",
        "MOSTYPE": "numeric",
        "tenure_years": "numeric",
        "channel": "categorical",
    }
    doc = json.loads((settings.expectations_dir / f"{JOB}.json").read_text())
    in_set = {
        e["kwargs"]["column"]: e["kwargs"]["value_set"]
        for e in doc["expectations"]
        if e["type"] == "expect_column_values_to_be_in_set"
    }
    assert set(in_set) == {"is_member", "smoker", "channel"} and in_set["is_member"] == [0, 1]
    # A yes/no text column allows its words in any case (the feature reads them lower-cased); a category only its values.
    assert {v.lower() for v in in_set["smoker"]} == {"no", "yes"} and {"y", "n", "yes", "Yes", "YES", "No"} - set(
        in_set["smoker"]
    ) == {"y", "n"}
    assert sorted(in_set["channel"]) == ["phone", "shop", "web"]


def test_a_count_the_sample_held_only_as_0_and_1_scores_a_later_2(scaffolded) -> None:
    settings, _, _ = scaffolded
    later = customers(seed=6, rows=200).with_columns(
        pl.when(pl.int_range(pl.len()) < 7).then(2).otherwise(pl.col("num_policies")).alias("num_policies")
    )
    guarded = guarded_chunk(later, _suite(settings), entity_column="customer")
    assert guarded.quarantined.height == 0 and guarded.scorable.height == later.height
    matrix = job_features(load_job_spec(JOB, settings)).feature_matrix(guarded.scorable)
    np.testing.assert_array_equal(matrix[:, 0], later["num_policies"].cast(pl.Float32).to_numpy())


def test_a_value_outside_the_profiled_range_is_clipped_scored_and_counted(scaffolded) -> None:
    settings, sample, _ = scaffolded
    doc = json.loads((settings.expectations_dir / f"{JOB}.json").read_text())
    (between,) = [
        e
        for e in doc["expectations"]
        if e["type"] == "expect_column_values_to_be_between" and e["kwargs"]["column"] == "annual_km"
    ]
    assert between["meta"]["guard"] == {"action": "repair", "repair": "clip"}
    assert "quarantine" in between["meta"]["review"] and "changes the model's input" in between["meta"]["review"]
    far = float(between["kwargs"]["max_value"]) + 50_000
    later = sample.with_columns(
        pl.when(pl.int_range(pl.len()) == 3).then(far).otherwise(pl.col("annual_km")).alias("annual_km")
    )
    guarded = guarded_chunk(later, _suite(settings), entity_column="customer")
    assert guarded.quarantined.height == 0 and guarded.scorable.height == later.height
    assert guarded.scorable["annual_km"][3] == between["kwargs"]["max_value"]
    assert guarded.actions.select("entity_id", "column", "action").rows() == [
        (later["customer"][3], "annual_km", "repair")
    ]
    report = fallback_report_rows(
        rows_read=later.height,
        guard_by_expectation=guarded.counts.by_expectation,
        guard_columns={e.key: e.column for e in _suite(settings).row_rules},
        rows_repaired=guarded.counts.rows_repaired,
        rows_quarantined=0,
        rows_fallback=0,
        fallback_reason=None,
        rows_failed=0,
        rows_without_adverse_reason=0,
        rows_reasons_by_framework=0,
        reasons_kernel_reason=None,
        limits={},
    )
    repaired = [(r["detail"], r["rows"]) for r in report if r["kind"] == "guard_repair"]
    assert (
        repaired[0] == ("all", 1)
        and len(repaired) == 2
        and repaired[1][0].startswith("annual_km:")
        and repaired[1][1] == 1
    )

    # Quarantine stays a one-word change.
    between["meta"]["guard"]["action"] = "quarantine"
    (settings.expectations_dir / f"{JOB}.json").write_text(json.dumps(doc))
    guarded = guarded_chunk(later, _suite(settings), entity_column="customer")
    assert guarded.quarantined["customer"].to_list() == [later["customer"][3]]


def test_starter_texts_name_the_feature_and_say_where_the_value_lies(scaffolded) -> None:
    settings, sample, _ = scaffolded
    spec = load_job_spec(JOB, settings)
    codes = spec.prediction.reasons.codes
    assert codes["annual_km"].label == "Annual km" and codes["num_policies"].label == "Num policies"
    assert codes["MOSTYPE"].label == "MOSTYPE"  # a code with nothing better known stays a code, with a note
    text = (settings.jobs_dir / f"{JOB}.yaml").read_text()
    assert "MOSTYPE kept as a code" in text
    assert (codes["annual_km"].by_band.low, codes["annual_km"].by_band.high) == (
        "Annual km is low",
        "Annual km is high",
    )
    children = sorted(sample["children"].unique().to_list())
    # A few whole numbers: one range per value the sample held, the last open upward, so tomorrow's larger value is
    # still described truly.
    assert codes["children"].by_cut.cuts == [v + 0.5 for v in children[:-1]]
    assert codes["children"].by_cut.texts == [f"Children is {v}" for v in children[:-1]] + [
        f"Children is {children[-1]} or more"
    ]
    assert children[0] == 0
    assert codes["channel"].by_value == {v: f"Channel is {v}" for v in ("web", "shop", "phone")}

    features = job_features(spec)
    medians = {"annual_km": float(np.median(sample["annual_km"].to_numpy()))}
    resolved = predict_reason_texts(
        spec.prediction.reasons,
        kinds=feature_kinds(features),
        categories=features.CATEGORIES,
        medians=medians,
    ).by_feature
    visits = sample["visits"].to_numpy()
    median = float(np.median(visits))
    assert np.mean(visits == median) > 0.25  # a common value: a band "at or below the median" would mislead
    (cut,) = codes["visits"].by_cut.cuts
    observed = np.unique(visits)
    assert observed[observed < cut].size and observed[observed > cut].size  # rows on both sides
    assert not np.isin(cut, observed) and np.searchsorted(observed, cut) == np.searchsorted(observed, median) + 1
    texts = resolved["visits"]
    for value in observed:
        chosen = texts.texts[int(texts.variant(np.array([value]))[0])]
        bound = int(chosen.split(" is ")[1].split(" ")[0])
        assert (value <= bound) if chosen.endswith("or less") else (value >= bound), (value, chosen)
    assert texts.texts[int(texts.variant(np.array([median]))[0])] == f"Visits is {median:g} or less"

    # Whole numbers in a float column: the cut is an observed value itself, so a later fraction gets a true text too.
    years = sample["tenure_years"].drop_nulls().to_numpy()
    (cut,) = codes["tenure_years"].by_cut.cuts
    assert cut in years and years[years < cut].size and np.median(years) < cut
    texts = resolved["tenure_years"]
    for value in (*np.unique(years), cut - 0.5, cut + 0.5):
        chosen = texts.texts[int(texts.variant(np.array([value]))[0])]
        assert chosen == (f"Tenure years is below {cut:g}" if value < cut else f"Tenure years is {cut:g} or more"), (
            value,
            chosen,
        )


def test_binary_starter_words_are_neutral_and_the_table_loads(scaffolded) -> None:
    settings, _, _ = scaffolded
    spec = load_job_spec(JOB, settings)
    text = (settings.jobs_dir / f"{JOB}.yaml").read_text().lower()
    for word in ("risk", "decline", "adverse", "approve"):
        assert word not in text, word
    assert spec.prediction.score.name == "score" and spec.prediction.score.higher == "more likely: bought = 1"
    assert spec.prediction.reasons.no_reason_text == "No single factor made bought = 1 more likely."
    assert spec.action_decisions == ["act"] and spec.decisions == ["act", "manual_review", "no_action"]
    # Without a registered model, validate's only problem is the missing model: the rule table and reasons load.
    checked = CliRunner().invoke(app, ["validate", JOB, "--json"])
    assert [p["field"] for p in json.loads(checked.output)["problems"]] == ["model.version"], checked.output


def test_init_lists_every_guess_with_its_evidence(scaffolded) -> None:
    _, sample, output = scaffolded
    lines = output.splitlines()
    guessed = {line.split(":", 1)[0].removeprefix("guessed "): line for line in lines if line.startswith("guessed ")}
    assert set(guessed) == set(sample.columns) - {"customer", "bought"}
    rows = f"{sample.height:,} sample rows"
    assert guessed["num_policies"].startswith(f"guessed num_policies: numeric count (integer, values 0–1 in {rows}")
    assert "not a boolean" in guessed["num_policies"]
    assert "is_/has_" in guessed["is_member"] and "boolean" in guessed["is_member"]
    assert "'Yes', 'No'" in guessed["smoker"] or "'No', 'Yes'" in guessed["smoker"]
    assert "not categorical" in guessed["children"] and "4 distinct" in guessed["children"]
