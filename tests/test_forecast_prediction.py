"""A forecast job's prediction layer and its XGBoost path end to end: the conformal interval against crepes, the
rule table over forecast fields, reasons up and down, the spec's kind checks, and a user's count job scored
through the `score` CLI — forecasts against XGBoost's own predictions, reasons against its own contributions,
the interval's coverage against actuals the model never saw."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from conftest import user_project_env
from pydantic import ValidationError
from user_projects import assert_one_error_line, score_cli

from tasks.contracts import FeatureContributions
from tasks.jobspec import JobSpec
from tasks.prediction.config import PredictionConfig, ReasonConfig
from tasks.prediction.forecasts import ForecastMap, predict_conformal_quantile
from tasks.prediction.reasons import predict_forecast_reason_codes

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

crepes = pytest.importorskip("crepes")

FEATURES = ("price", "promo", "temperature", "rain_mm")


@pytest.mark.parametrize("level", [0.5, 0.8, 0.9, 0.95, 0.99, 0.999])
@pytest.mark.parametrize("nonnegative", [False, True])
def test_the_interval_is_crepes_interval(level: float, nonnegative: bool) -> None:
    rng = np.random.default_rng(3)
    residuals, sigmas = rng.normal(0, 2, 500) * (1 + rng.random(500)), 0.5 + rng.random(500)
    regressor = crepes.ConformalRegressor().fit(residuals=residuals, sigmas=sigmas)
    margins, sigma = rng.normal(1, 2, 300), 0.2 + rng.random(300)
    interval = {"method": "split_conformal_normalized", "alphas": list(regressor.alphas), "sigma_floor": 1e-9}
    ours = ForecastMap(interval, level, link="identity", nonnegative=nonnegative).predict_forecast(margins, sigma)
    theirs = regressor.predict_int(
        np.maximum(margins, 0) if nonnegative else margins,
        sigmas=sigma,
        confidence=level,
        y_min=0.0 if nonnegative else -np.inf,
    )
    np.testing.assert_allclose(ours.low, theirs[:, 0], rtol=1e-12)
    np.testing.assert_allclose(ours.high, theirs[:, 1], rtol=1e-12)


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95])
def test_the_interval_per_difficulty_bin_is_crepes_mondrian_interval(level: float) -> None:
    rng = np.random.default_rng(4)
    sigmas = 0.2 + rng.gamma(2.0, 1.0, 2_000)
    residuals = rng.normal(0, 1, 2_000) * sigmas**1.4  # the error grows faster than σ̂ says: bins need their own q
    edges = np.quantile(sigmas, [0.25, 0.5, 0.75])
    bins = np.searchsorted(edges, sigmas, side="right")
    regressor = crepes.ConformalRegressor().fit(residuals=residuals, sigmas=sigmas, bins=bins)
    interval = {
        "method": "split_conformal_normalized",
        "bin_edges": list(edges),
        "sigma_floor": 1e-9,
        "bin_alphas": [list(a) for a in regressor.binned_alphas[1]],
    }
    margins, sigma = rng.normal(5, 2, 500), 0.2 + rng.gamma(2.0, 1.0, 500)
    ours = ForecastMap(interval, level, link="identity", nonnegative=False).predict_forecast(margins, sigma)
    theirs = regressor.predict_int(
        margins, sigmas=sigma, bins=np.searchsorted(edges, sigma, side="right"), confidence=level
    )
    np.testing.assert_allclose(ours.low, theirs[:, 0], rtol=1e-12)
    np.testing.assert_allclose(ours.high, theirs[:, 1], rtol=1e-12)


def test_too_few_scores_for_the_level_give_an_unbounded_interval() -> None:
    assert predict_conformal_quantile(np.array([3.0, 2.0, 1.0]), 0.9) == float("inf")
    assert predict_conformal_quantile(np.arange(19, 0, -1.0), 0.75) == 15.0  # the 15th smallest of 19: ⌈0.75 · 20⌉


def _rules(*rules: dict) -> dict:
    return {"rules": list(rules), "reasons": {"for_decisions": [], "codes": {}}}


def test_forecast_rule_tables_are_proven_exact() -> None:
    PredictionConfig.model_validate(
        _rules(
            {"id": "HIGH", "when": {"forecast_high": {"ge": 300}}, "decision": "add_capacity"},
            {"id": "LOW", "when": {"forecast_high": {"lt": 300}, "forecast": {"lt": 20}}, "decision": "cut"},
            {"id": "KEEP", "when": {"forecast_high": {"lt": 300}, "forecast": {"ge": 20}}, "decision": "keep"},
        )
    )
    with pytest.raises(ValidationError, match="overlap"):
        PredictionConfig.model_validate(
            _rules(
                {"id": "A", "when": {"forecast": {"ge": 10}}, "decision": "a"},
                {"id": "B", "when": {"forecast_high": {"ge": 12}}, "decision": "b"},
                {"id": "C", "decision": "c"},
            )
        )
    with pytest.raises(ValidationError, match="no rule covers"):
        PredictionConfig.model_validate(
            _rules(
                {"id": "A", "when": {"forecast": {"gt": 10}}, "decision": "a"},
                {"id": "B", "when": {"forecast": {"lt": 10}}, "decision": "b"},
            )
        )
    # Probability rules without a score scale are a multiclass job's; the job spec refuses them on a forecast job.
    spec = _credit_spec() | {"target": {"kind": "count"}}
    spec["prediction"] = _rules(
        {"id": "A", "when": {"probability": {"gt": 0.5}}, "decision": "a"}, {"id": "B", "decision": "b"}
    )
    with pytest.raises(ValidationError, match="a multiclass job's rules"):
        JobSpec.model_validate(spec)


def test_forecast_reasons_are_the_largest_contributions_with_their_direction() -> None:
    rng = np.random.default_rng(5)
    values = np.round(rng.normal(size=(200, 4)), 1)
    values[7] = 0.0
    config = ReasonConfig(
        top_k=2, for_decisions=[], codes={f: {"code": f.upper(), "text": f.title()} for f in FEATURES}
    )
    reasons = predict_forecast_reason_codes(
        FeatureContributions(row_index=np.arange(200), values=values, feature_names=FEATURES), config
    )
    for row, (codes, texts) in enumerate(zip(reasons.codes.to_pylist(), reasons.texts.to_pylist(), strict=True)):
        ranked = sorted((j for j in range(4) if values[row, j] != 0), key=lambda j: (-abs(values[row, j]), j))[:2]
        assert codes == [f"{FEATURES[j].upper()}_{'UP' if values[row, j] > 0 else 'DOWN'}" for j in ranked]
        assert texts == [
            f"{FEATURES[j].title()} {'raised' if values[row, j] > 0 else 'lowered'} the forecast" for j in ranked
        ]
    assert reasons.without_pushing_factor == 1


def _rows(day: dt.date, n: int, seed: int) -> pl.DataFrame:
    """A user's own demand table: more rain sells less, promotions sell more, and busy rows are noisier."""
    rng = np.random.default_rng(seed)
    price = rng.uniform(1, 10, n).round(2)
    promo = (rng.random(n) < 0.2).astype(np.int8)
    temperature = rng.normal(15, 8, n).round(1)
    rain = np.where(rng.random(n) < 0.3, rng.exponential(5, n), 0).round(1)
    mean = np.exp(1.5 + 0.8 * promo - 0.15 * price + 0.02 * temperature - 0.04 * rain)
    units = rng.negative_binomial(3, 3 / (3 + mean))
    return pl.DataFrame(
        {
            "item_id": [f"IT-{day:%m%d}-{i:06d}" for i in range(n)],
            "price": price,
            "promo": promo,
            "temperature": temperature,
            "rain_mm": rain,
            "units": units,
        }
    )


TRAIN = [dt.date(2026, 3, 1) + dt.timedelta(days=d) for d in range(4)]
HOLDOUT = dt.date(2026, 3, 5)
SCORED = [dt.date(2026, 3, 6), dt.date(2026, 3, 7)]


@pytest.fixture(scope="module")
def count_job(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A user's count job: scaffolded, turned into a forecast spec, an XGBoost count:poisson registered, two days scored."""
    import xgboost as xgb

    root = tmp_path_factory.mktemp("forecast")
    env = user_project_env(root)
    score = score_cli(root, env)
    pl.concat([_rows(d, 5_000, i) for i, d in enumerate(TRAIN)]).write_parquet(root / "train.parquet")
    _rows(HOLDOUT, 8_000, 40).write_parquet(root / "holdout.parquet")
    scored = {}
    for i, day in enumerate(SCORED):
        frame = _rows(day, 20_000, 50 + i)
        folder = root / "data" / "raw" / "sales" / f"date={day}"
        folder.mkdir(parents=True)
        frame.drop("units").write_parquet(folder / "part-0.parquet")
        scored[day] = frame
    pl.read_parquet(root / "train.parquet").drop("units").write_parquet(root / "sample.parquet")
    score("init", "sales", "--from", str(root / "sample.parquet"), "--entity-column", "item_id")
    spec_path = root / "jobs" / "sales.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["target"] = {"kind": "count", "name": "units sold", "unit": "units"}
    spec["prediction"] = {
        "interval_level": 0.9,
        "rules": [
            {"id": "ADD_STOCK", "when": {"forecast_high": {"ge": 12}}, "decision": "add_stock"},
            {"id": "KEEP", "decision": "keep"},
        ],
        "reasons": {
            "top_k": 2,
            "for_decisions": ["add_stock"],
            "codes": {
                "price": {"code": "PRICE", "text": "Price"},
                "promo": {"code": "PROMO", "text": "Promotion"},
                "temperature": {"code": "TEMP", "text": "Temperature"},
                "rain_mm": {"code": "RAIN", "text": "Rain"},
            },
        },
    }
    spec["monitoring"]["labels"]["outcome_column"] = "units"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    score("features", "sales", "--from", str(root / "train.parquet"), "--out", str(root / "train_inputs.parquet"))
    inputs = pl.read_parquet(root / "train_inputs.parquet")
    assert inputs.columns == ["item_id", *FEATURES, "outcome"]
    booster = xgb.train(
        {"objective": "count:poisson", "max_depth": 4, "eta": 0.1, "seed": 1},
        xgb.DMatrix(
            inputs.select(FEATURES).to_numpy(), label=inputs["outcome"].to_numpy(), feature_names=list(FEATURES)
        ),
        150,
    )
    booster.save_model(str(root / "count.ubj"))
    registered = score(
        "register", "sales", "--model", str(root / "count.ubj"), "--holdout", str(root / "holdout.parquet")
    )
    # One process for both days: each `score run` would start Prefect's temporary API again.
    score("backfill", "sales", "--start", SCORED[0].isoformat(), "--end", SCORED[-1].isoformat())
    return {"root": root, "score": score, "booster": booster, "scored": scored, "registered": registered.stdout}


def _forecasts(root: Path, day: dt.date) -> pl.DataFrame:
    return pl.read_parquet(root / "data" / "output" / "sales" / "forecasts" / f"date={day}" / "*.parquet")


def test_forecasts_are_xgboost_predictions_of_the_raw_rows(count_job: dict) -> None:
    import xgboost as xgb

    for day in SCORED:
        published = _forecasts(count_job["root"], day).sort("entity_id")
        # The guards profiled from the training sample quarantine a handful of rows beyond its ranges.
        assert published.height >= 0.99 * count_job["scored"][day].height
        raw = count_job["scored"][day].filter(pl.col("item_id").is_in(published["entity_id"].to_list())).sort("item_id")
        assert published["entity_id"].to_list() == raw["item_id"].to_list()
        own = count_job["booster"].predict(
            xgb.DMatrix(raw.select(FEATURES).to_numpy().astype(np.float32), feature_names=list(FEATURES))
        )
        np.testing.assert_allclose(published["forecast"].to_numpy(), own, rtol=1e-5)
        assert (published["forecast_low"] >= 0).all() and (published["forecast_low"] <= published["forecast"]).all()
        assert (published["forecast"] <= published["forecast_high"]).all()
        predictions = pl.read_parquet(
            count_job["root"] / "data" / "output" / "sales" / "predictions" / f"date={day}" / "*.parquet"
        )
        assert predictions.height == 0


def test_reasons_are_xgboost_contributions_up_and_down(count_job: dict) -> None:
    import xgboost as xgb

    day = SCORED[0]
    published = _forecasts(count_job["root"], day).filter(pl.col("decision") == "add_stock").sort("entity_id")
    assert published.height > 100
    raw = count_job["scored"][day].filter(pl.col("item_id").is_in(published["entity_id"].to_list())).sort("item_id")
    contributions = count_job["booster"].predict(
        xgb.DMatrix(raw.select(FEATURES).to_numpy().astype(np.float32), feature_names=list(FEATURES)),
        pred_contribs=True,
    )[:, :-1]
    codes = {"price": "PRICE", "promo": "PROMO", "temperature": "TEMP", "rain_mm": "RAIN"}
    for row, listed in enumerate(published["reason_codes"].to_list()):
        top = np.argsort(-np.abs(contributions[row]), kind="stable")[:2]
        assert listed == [f"{codes[FEATURES[j]]}_{'UP' if contributions[row, j] > 0 else 'DOWN'}" for j in top]
    assert (
        _forecasts(count_job["root"], day).filter(pl.col("decision") == "keep")["reason_codes"].list.len() == 0
    ).all()


def test_the_interval_covers_its_level_of_later_actuals_and_is_narrower_where_rows_are_easy(count_job: dict) -> None:
    joined = pl.concat(
        [
            _forecasts(count_job["root"], day).join(
                count_job["scored"][day].select("item_id", "units"), left_on="entity_id", right_on="item_id"
            )
            for day in SCORED
        ]
    )
    covered = ((joined["units"] >= joined["forecast_low"]) & (joined["units"] <= joined["forecast_high"])).mean()
    assert abs(covered - 0.90) <= 0.02, covered
    width = (joined["forecast_high"] - joined["forecast_low"]).to_numpy()
    expected = joined["expected_error"].to_numpy()
    easy = expected <= np.median(expected)
    assert width[easy].mean() < 0.8 * width[~easy].mean()
    assert "covered" in count_job["registered"] and "easy half" in count_job["registered"]


def test_a_classifier_on_the_count_job_is_refused_in_one_line(count_job: dict) -> None:
    import xgboost as xgb

    root = count_job["root"]
    inputs = pl.read_parquet(root / "train_inputs.parquet")
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 2},
        xgb.DMatrix(
            inputs.select(FEATURES).to_numpy(), label=(inputs["outcome"] > 5).to_numpy(), feature_names=list(FEATURES)
        ),
        5,
    )
    booster.save_model(str(root / "classifier.ubj"))
    before = sorted(p.name for p in (root / "data" / "models" / "sales").iterdir())
    done = count_job["score"](
        "register",
        "sales",
        "--model",
        str(root / "classifier.ubj"),
        "--holdout",
        str(root / "holdout.parquet"),
        ok=False,
    )
    assert_one_error_line(done, root / "classifier.ubj", "a binary classifier, but the job forecasts a count target")
    assert sorted(p.name for p in (root / "data" / "models" / "sales").iterdir()) == before


def test_an_error_model_that_changed_on_disk_stops_the_run(count_job: dict, tmp_path: Path) -> None:
    root = count_job["root"]
    version = root / "data" / "models" / "sales" / "1"
    error_model = version / json.loads((version / "metadata.json").read_text())["error_model_file"]
    kept = error_model.read_bytes()
    try:
        error_model.write_bytes(kept[:-8] + b"\x00" * 8)
        done = count_job["score"]("run", "sales", "--date", SCORED[0].isoformat(), ok=False)
        assert done.returncode != 0 and "error_model_sha256" in done.stdout + done.stderr
    finally:
        error_model.write_bytes(kept)


def _credit_spec() -> dict:
    return yaml.safe_load((Path(__file__).resolve().parents[1] / "jobs" / "credit_risk.yaml").read_text())


def test_a_forecast_spec_may_not_speak_of_events_and_a_binary_one_must() -> None:
    from tasks.jobspec import JobSpec, spec_field_problems

    spec = _credit_spec()
    spec["target"] = {"kind": "count"}
    with pytest.raises(ValidationError) as raised:
        JobSpec.model_validate(spec)
    assert "prediction.score, prediction.event, prediction.reasons.no_reason_code" in " ".join(
        p for _, p in spec_field_problems(raised.value)
    )
    spec = _credit_spec()
    del spec["prediction"]["event"]
    with pytest.raises(ValidationError, match="target.kind is binary, so prediction.event must be given"):
        JobSpec.model_validate(spec)
    spec = _credit_spec()
    spec["target"] = {"kind": "regression"}
    with pytest.raises(ValidationError, match="unknown key|Extra inputs"):
        JobSpec.model_validate({**spec, "target": {"kind": "regression", "units": "EUR"}})


def test_a_regressor_on_a_binary_job_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import xgboost as xgb

    from tasks.errors import ModelArtifactError
    from tasks.jobs.registration import registered_model_version

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3)).astype(np.float32)
    booster = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(x, label=x[:, 0]), 5)
    booster.save_model(str(tmp_path / "regressor.ubj"))
    with pytest.raises(ModelArtifactError, match="a regression objective, but the job is binary"):
        registered_model_version(
            tmp_path / "regressor.ubj",
            registry_dir=tmp_path / "registry" / "m",
            feature_version="1",
            features=("a", "b", "c"),
            holdout_features=x,
            holdout_outcomes=(x[:, 0] > 0).astype(float),
        )
    assert not (tmp_path / "registry").exists()


def test_a_regression_in_the_tens_of_thousands_keeps_the_fast_kernel_and_xgboosts_reasons(tmp_path: Path) -> None:
    """XGBoost's float32 contributions of a 50,000-scale target agree with any exact computation only to ~0.01:
    the kernel is checked relative to the row's magnitude, so it is not refused for float noise, and near ties
    of |contribution| (how forecast reasons rank) are recomputed by XGBoost."""
    import pyarrow as pa
    import xgboost as xgb

    from tasks.contracts import InferenceInput
    from tasks.inference.engine import inference_loaded_model
    from tasks.jobs.registration import registered_model_version

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 4)).astype(np.float32)
    y = 50_000 + 20_000 * x[:, 0] + 5_000 * x[:, 1] ** 2 - 300 * x[:, 2] + rng.normal(0, 3_000, 3000)
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": 5}, xgb.DMatrix(x, label=y), 200)
    booster.save_model(str(tmp_path / "amount.ubj"))
    report = registered_model_version(
        tmp_path / "amount.ubj",
        registry_dir=tmp_path / "registry" / "amount",
        feature_version="1",
        features=("a", "b", "c", "d"),
        holdout_features=x,
        holdout_outcomes=y,
        kind="regression",
    )
    assert "checked against XGBoost pred_contribs" in report.notes[0], report.notes
    engine = inference_loaded_model(tmp_path / "registry" / "amount", "latest", None, device="cpu", nthread=0).engine
    assert engine.contributions_kernel == "table_treeshap"
    rows = rng.normal(size=(2000, 4)).astype(np.float32)
    ours = engine.inference_contributions(
        InferenceInput(
            chunk_id=0,
            entity_ids=pa.array(np.arange(2000).astype(str)),
            features=rows,
            feature_names=("a", "b", "c", "d"),
        ),
        np.arange(2000),
        top_k=3,
    ).values
    theirs = booster.predict(xgb.DMatrix(rows), pred_contribs=True)[:, :-1]
    top = lambda v: np.argsort(-np.abs(v), axis=1, kind="stable")[:, :3]  # noqa: E731
    assert (top(ours) == top(theirs)).all()
    assert (
        np.sign(np.take_along_axis(ours, top(ours), 1)) == np.sign(np.take_along_axis(theirs, top(theirs), 1))
    ).all()
