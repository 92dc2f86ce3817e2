"""The tree-margin kernel: XGBoost's own margins to the bit, for the models people train, or XGBoost's predictor.

Every model is trained here with XGBoost itself; the reference is the booster's own `inplace_predict`, and the
comparison is of the float32 bit patterns, not within a tolerance."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xgboost as xgb
from conftest import DEMO_JOB, DemoEnv

from tasks.contracts import InferenceInput
from tasks.inference.engine import XGBoostEngine
from tasks.inference.registry import inference_model_artifact
from tasks.inference.tree_margins import inference_checked_tree_margins


def _rows(n: int, n_features: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, n_features)).astype(np.float32)
    x[rng.random(x.shape) < 0.08] = np.nan
    return x


def _trained(params: dict, *, n_features: int = 8, rounds: int = 40, seed: int = 0) -> tuple[xgb.Booster, np.ndarray]:
    x = _rows(3000, n_features, seed)
    rng = np.random.default_rng(seed + 1)
    signal = np.nan_to_num(x[:, 0]) + 0.5 * np.nan_to_num(x[:, 1]) * np.nan_to_num(x[:, 2 % n_features])
    objective = params["objective"]
    if objective.startswith("binary"):
        y = (signal + rng.normal(size=len(x)) > 0.3).astype(np.float32)
    elif objective in ("count:poisson", "reg:tweedie"):
        y = rng.poisson(np.exp(0.3 * signal)).astype(np.float32)
    elif objective == "reg:gamma":
        y = rng.gamma(2.0, np.exp(0.3 * signal)).astype(np.float32)
    else:
        y = (3.0 * signal + rng.normal(size=len(x))).astype(np.float32)
    booster = xgb.train({"nthread": 1, "seed": seed, **params}, xgb.DMatrix(x, label=y), rounds)
    return booster, x


@pytest.fixture(scope="module")
def demo_version_dir(demo_env: DemoEnv) -> Path:
    return demo_env.settings.model_registry_dir(DEMO_JOB) / demo_env.plan.model_version


def _batch(rows: np.ndarray, names: list[str]) -> InferenceInput:
    return InferenceInput(
        chunk_id=0, entity_ids=pa.array([f"E{i}" for i in range(len(rows))]), features=rows, feature_names=tuple(names)
    )


def _xgboost_margins(booster: xgb.Booster):
    return lambda rows: booster.inplace_predict(rows, predict_type="margin", validate_features=False)


def _adversarial_rows(booster: xgb.Booster, n_features: int, seed: int) -> np.ndarray:
    """Fresh rows with NaN, ±inf, every split threshold exactly and the float32 just below it."""
    x = _rows(20_000, n_features, seed)
    frame = booster.trees_to_dataframe()
    splits = frame[frame["Feature"] != "Leaf"]
    rng = np.random.default_rng(seed)
    for feature in range(n_features):
        thresholds = splits.loc[splits["Feature"] == f"f{feature}", "Split"].to_numpy(dtype=np.float32)
        if thresholds.size:
            at = rng.integers(0, len(x), 4000)
            picked = thresholds[rng.integers(0, thresholds.size, at.size)]
            below = np.nextafter(picked, np.float32(-np.inf))
            x[at, feature] = np.where(rng.random(at.size) < 0.5, picked, below)
    x[rng.integers(0, len(x), 200), rng.integers(0, n_features, 200)] = np.inf
    x[rng.integers(0, len(x), 200), rng.integers(0, n_features, 200)] = -np.inf
    return x


MODELS = {
    "binary logistic, depth 6": ({"objective": "binary:logistic", "max_depth": 6}, 8),
    "binary logistic, base_score 0.3": ({"objective": "binary:logistic", "max_depth": 4, "base_score": 0.3}, 8),
    "binary logitraw": ({"objective": "binary:logitraw", "max_depth": 5}, 8),
    "squared error, depth 8, 40 features": ({"objective": "reg:squarederror", "max_depth": 8}, 40),
    "absolute error": ({"objective": "reg:absoluteerror", "max_depth": 5}, 8),
    "poisson counts": ({"objective": "count:poisson", "max_depth": 5}, 8),
    "gamma": ({"objective": "reg:gamma", "max_depth": 4}, 8),
    "tweedie": ({"objective": "reg:tweedie", "max_depth": 4}, 8),
    "stumps": ({"objective": "binary:logistic", "max_depth": 1}, 8),
    "every split pruned: single-leaf trees": ({"objective": "binary:logistic", "max_depth": 3, "gamma": 1e6}, 8),
    "some splits pruned": ({"objective": "binary:logistic", "max_depth": 6, "gamma": 2.0}, 8),
    "lossguide, 31 leaves": ({"objective": "binary:logistic", "grow_policy": "lossguide", "max_leaves": 31}, 12),
    "random forest of 4 trees a round": (
        {"objective": "binary:logistic", "num_parallel_tree": 4, "subsample": 0.8, "colsample_bynode": 0.8},
        8,
    ),
}


@pytest.mark.parametrize("name", MODELS)
def test_the_kernel_reproduces_xgboost_margins_bit_for_bit(name: str) -> None:
    params, n_features = MODELS[name]
    booster, _ = _trained(params, n_features=n_features)
    choice = inference_checked_tree_margins(booster.save_raw("json"), _xgboost_margins(booster), model_label=name)
    assert choice.kernel is not None, choice.reason
    rows = _adversarial_rows(booster, n_features, seed=7)
    for nthread in (1, 2):
        ours = choice.kernel.margins(rows, nthread=nthread)
        theirs = np.asarray(_xgboost_margins(booster)(rows), dtype=np.float32)
        assert ours.dtype == np.float32 and ours.shape == theirs.shape
        assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), (
            f"{np.count_nonzero(ours != theirs)} of {len(rows)} margins differ"
        )


@pytest.mark.parametrize(
    "params",
    [
        {"objective": "multi:softprob", "num_class": 3, "max_depth": 6},
        {"objective": "multi:softmax", "num_class": 5, "max_depth": 4, "base_score": 0.2},
    ],
    ids=["softprob, 3 classes, depth 6", "softmax, 5 classes, base_score 0.2"],
)
def test_every_class_margin_is_xgboost_s_bit_for_bit(params: dict) -> None:
    x = _rows(3000, 8, 4)
    y = np.digitize(
        np.nan_to_num(x[:, 0]) + 0.5 * np.nan_to_num(x[:, 1]), np.linspace(-1.5, 1.5, params["num_class"] - 1)
    )
    booster = xgb.train({"nthread": 1, **params}, xgb.DMatrix(x, label=y), 30)
    choice = inference_checked_tree_margins(
        booster.save_raw("json"), _xgboost_margins(booster), model_label="mc", multiclass=True
    )
    assert choice.kernel is not None, choice.reason
    rows = _adversarial_rows(booster, 8, seed=9)
    ours = choice.kernel.margins(rows, nthread=2)
    theirs = np.asarray(_xgboost_margins(booster)(rows), dtype=np.float32)
    assert ours.shape == theirs.shape == (len(rows), params["num_class"])
    assert np.array_equal(np.ascontiguousarray(ours).view(np.uint32), theirs.view(np.uint32))


def test_the_base_margin_is_xgboost_s_own_where_numpy_s_log_is_one_float_off() -> None:
    """For base_score 0.4988 numpy's float32 log and the C library's logf (XGBoost's) differ in the last bit; a base
    margin one float off changed ~1 in 10,000 margins by one float, which 256 load-time rows did not notice."""
    booster, _ = _trained({"objective": "binary:logistic", "max_depth": 8, "base_score": 0.4988})
    choice = inference_checked_tree_margins(booster.save_raw("json"), _xgboost_margins(booster), model_label="b")
    assert choice.kernel is not None
    rows = _rows(200_000, 8, 13)
    ours = choice.kernel.margins(rows)
    theirs = np.asarray(_xgboost_margins(booster)(rows), dtype=np.float32)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_float64_rows_are_taken_as_xgboost_takes_them() -> None:
    booster, _ = _trained({"objective": "binary:logistic", "max_depth": 5})
    choice = inference_checked_tree_margins(booster.save_raw("json"), _xgboost_margins(booster), model_label="f64")
    assert choice.kernel is not None
    rows = np.random.default_rng(3).normal(size=(5000, 8))
    assert np.array_equal(choice.kernel.margins(rows), booster.inplace_predict(rows, predict_type="margin"))


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"objective": "binary:logistic", "booster": "dart", "rate_drop": 0.2}, "dart"),
    ],
)
def test_a_model_the_kernel_cannot_represent_keeps_xgboost_margins(
    params: dict, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="scoring.inference")
    x = _rows(600, 6, 1)
    y = np.random.default_rng(1).integers(0, params.get("num_class", 2), len(x))
    booster = xgb.train(params, xgb.DMatrix(x, label=y), 5)
    choice = inference_checked_tree_margins(booster.save_raw("json"), _xgboost_margins(booster), model_label="odd")
    assert choice.kernel is None and why in choice.reason
    assert any("margins by XGBoost" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_categorical_splits_keep_xgboost_margins() -> None:
    rng = np.random.default_rng(2)
    x = np.column_stack([rng.integers(0, 5, 800), rng.normal(size=800)]).astype(np.float32)
    data = xgb.DMatrix(x, label=(x[:, 0] == 2).astype(np.float32), feature_types=["c", "q"], enable_categorical=True)
    booster = xgb.train({"objective": "binary:logistic", "max_cat_to_onehot": 1}, data, 5)
    choice = inference_checked_tree_margins(booster.save_raw("json"), _xgboost_margins(booster), model_label="cat")
    assert choice.kernel is None and "categorical" in choice.reason


def test_a_kernel_that_disagrees_with_xgboost_is_refused_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    booster, _ = _trained({"objective": "binary:logistic", "max_depth": 4})

    def nudged(rows: np.ndarray) -> np.ndarray:
        margins = np.asarray(_xgboost_margins(booster)(rows), dtype=np.float32)
        margins[::50] = np.nextafter(margins[::50], np.float32(np.inf))
        return margins

    choice = inference_checked_tree_margins(booster.save_raw("json"), nudged, model_label="nudged")
    assert choice.kernel is None
    assert choice.reason.startswith("its margins differed from XGBoost's inplace_predict on 6 of 256 load-time rows")
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "margin kernel refused, margins by XGBoost" in warning.getMessage()


def test_the_engine_scores_with_the_kernel_and_equals_the_booster(demo_version_dir: Path) -> None:
    artifact = inference_model_artifact(demo_version_dir.parent, demo_version_dir.name)
    engine = XGBoostEngine(artifact, nthread=2)
    assert engine.providers == ("xgboost:cpu", "tree_margins")
    rows = _rows(30_000, len(artifact.metadata.features), 11)
    output = engine.inference_outputs(_batch(rows, artifact.metadata.features))
    booster = xgb.Booster(model_file=str(artifact.model_path))
    expected = booster.inplace_predict(rows, predict_type="margin", validate_features=False).astype(np.float64)
    assert np.array_equal(output.margins, expected)


def test_without_the_kernel_the_engine_scores_with_the_booster(demo_version_dir: Path) -> None:
    artifact = inference_model_artifact(demo_version_dir.parent, demo_version_dir.name)
    engine = XGBoostEngine(artifact, nthread=1)
    assert engine.margin_kernel is not None
    # Where the kernel could not be built, the margins are the booster's: the same rows, the same numbers.
    engine.margin_kernel = None
    rows = _rows(1000, len(artifact.metadata.features), 12)
    batch = _batch(rows, artifact.metadata.features)
    expected = engine.booster.inplace_predict(rows, predict_type="margin", validate_features=False)
    assert np.array_equal(engine.inference_outputs(batch).margins, expected.astype(np.float64))
