"""Forecast jobs take regressors of every framework and publish what the framework itself predicts and explains.

A user's sales project (units sold per item, a count job; tests/user_projects.py `sales_project`) gets a regression
model (the forecast is the margin: link identity) and a count model (the margin is the forecast's log: link log)
of each framework beyond XGBoost, each trained here on the job's own model inputs and driven through the `score`
command: `score register`, then `score run` of one day (a third scikit-learn model, histogram boosting with a
Poisson loss, is registered and scored in-process: each `score` command of a scikit-learn model imports skops,
seconds of CPU). The published forecasts are checked against the
framework's own prediction on the same rows (LightGBM and CatBoost `predict`, scikit-learn `predict`, ONNX
Runtime), the reasons against the framework's own contributions (LightGBM `pred_contrib`, CatBoost `ShapValues`)
or, where it has none, an independent computation (Shapley values by enumerating every subset of the four inputs
on the model's own trees; coefficient × (value − hold-out mean) for a linear model). A classifier on the forecast
job, a regressor on a binary job and a quantile regressor are refused in one line: by `score register` for two
frameworks, through the same registration call in-process for all four.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

lgb = pytest.importorskip("lightgbm")
catboost = pytest.importorskip("catboost")
sio = pytest.importorskip("skops.io")
onnxmltools = pytest.importorskip("onnxmltools")
ort = pytest.importorskip("onnxruntime")

import pyarrow as pa  # noqa: E402
from conftest import user_project_env  # noqa: E402
from onnxmltools.convert.common.data_types import FloatTensorType  # noqa: E402
from skl2onnx import to_onnx  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor  # noqa: E402
from sklearn.linear_model import LogisticRegression, PoissonRegressor, QuantileRegressor, Ridge  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from user_projects import (  # noqa: E402
    assert_nothing_registered,
    assert_one_error_line,
    day_output,
    model_inputs,
    registered_version,
    registry_versions,
    sales_project,
    score_cli,
)

TRAIN_DAYS = (dt.date(2026, 3, 2), dt.date(2026, 3, 3))
HOLDOUT_DAY, SCORED_DAY = dt.date(2026, 3, 4), dt.date(2026, 3, 5)
ROWS = 1000
TREES = 20
TIE = 1e-6
"""Rows whose top-2 reasons a gap this small decides are not compared: float noise may order them either way."""
TREE_TRUST = "sklearn.tree._tree.Tree"
HIST_TRUST = "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, prefect_harness: None):
    """The user's sales project with the model inputs of its training, hold-out and scored days; `score run` reports to
    the session's Prefect server instead of starting one per run."""
    from prefect.settings import PREFECT_API_URL

    root = tmp_path_factory.mktemp("forecast-frameworks")
    env = {**user_project_env(root), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    score = score_cli(root, env)
    sales_project(
        root,
        score,
        train_days=TRAIN_DAYS,
        holdout_day=HOLDOUT_DAY,
        scored_days=[SCORED_DAY],
        rows=ROWS,
        seed=500,
        features_of=[
            ("train.parquet", "train_inputs"),
            ("holdout.parquet", "holdout_inputs"),
            (f"data/raw/sales/date={SCORED_DAY}", "scored_inputs"),
        ],
    )
    return root, score


@dataclass(frozen=True)
class Trained:
    """A model file as the user saved it, and the framework's own answers on raw model inputs."""

    path: Path
    link: str
    predict: Callable[[np.ndarray], np.ndarray]
    """Rows → the framework's own forecast."""
    contributions: Callable[[np.ndarray], np.ndarray]
    """Rows → rows × features: the framework's own contributions, or an independent computation of them."""
    register_args: tuple[str, ...] = ()


def _shapley(trees: list[tuple], x: np.ndarray) -> np.ndarray:
    """Path-dependent Shapley values of Σ trees (rows × features), by enumerating every subset S of the inputs: at a split
    on a feature in S the row's branch is taken (`x <= threshold` goes left), otherwise both, weighted by their cover.
    Each tree is (left, right, feature, threshold, value, cover) with -1 children at its leaves."""
    n, m = x.shape
    values = np.asarray(x, dtype=np.float64)

    def expectation(tree: tuple, node: int, subset: int) -> np.ndarray:
        left, right, feature, threshold, value, cover = tree
        if left[node] < 0:
            return np.full(n, float(value[node]))
        low, high = expectation(tree, left[node], subset), expectation(tree, right[node], subset)
        if subset >> int(feature[node]) & 1:
            return np.where(values[:, feature[node]] <= threshold[node], low, high)
        return (cover[left[node]] * low + cover[right[node]] * high) / cover[node]

    game = {s: sum(expectation(tree, 0, s) for tree in trees) for s in range(2**m)}
    phi = np.zeros((n, m))
    for i in range(m):
        for s in range(2**m):
            if not s >> i & 1:
                size = bin(s).count("1")
                phi[:, i] += (
                    math.factorial(size)
                    * math.factorial(m - size - 1)
                    / math.factorial(m)
                    * (game[s | 1 << i] - game[s])
                )
    return phi


def _forest_trees(forest) -> list[tuple]:  # noqa: ANN001
    """A scikit-learn forest's trees as `_shapley` takes them: each tree's leaf means over the trees' count, its cover
    the (bootstrap-weighted) training rows reaching each node, as scikit-learn keeps them."""
    members = forest.estimators_
    return [
        (
            m.tree_.children_left,
            m.tree_.children_right,
            m.tree_.feature,
            m.tree_.threshold,
            m.tree_.value[:, 0, 0] / len(members),
            m.tree_.weighted_n_node_samples,
        )
        for m in members
    ]


def _hist_trees(model) -> list[tuple]:  # noqa: ANN001
    """A HistGradientBoostingRegressor's trees as `_shapley` takes them (its leaves' values and training counts)."""
    trees = []
    for (predictor,) in model._predictors:
        nodes = predictor.nodes
        leaf = nodes["is_leaf"].astype(bool)
        trees.append(
            (
                np.where(leaf, -1, nodes["left"].astype(np.int64)),
                np.where(leaf, -1, nodes["right"].astype(np.int64)),
                nodes["feature_idx"].astype(np.int64),
                nodes["num_threshold"],
                nodes["value"],
                nodes["count"].astype(np.float64),
            )
        )
    return trees


def _lightgbm(objective: str) -> Callable[[np.ndarray, np.ndarray, list[str], Path, np.ndarray], Trained]:
    def train(x: np.ndarray, y: np.ndarray, names: list[str], folder: Path, holdout: np.ndarray) -> Trained:
        path = folder / f"sales_{objective}.txt"
        booster = lgb.train(
            {
                "objective": objective,
                "num_leaves": 15,
                "learning_rate": 0.1,
                "min_data_in_leaf": 20,
                "seed": 1,
                "verbose": -1,
                "num_threads": 1,
            },
            lgb.Dataset(x, label=y, feature_name=names),
            num_boost_round=TREES,
        )
        booster.save_model(str(path))
        return Trained(
            path,
            "log" if objective == "poisson" else "identity",
            booster.predict,
            lambda rows: booster.predict(rows, pred_contrib=True)[:, :-1],
        )

    return train


def _catboost(loss: str) -> Callable[[np.ndarray, np.ndarray, list[str], Path, np.ndarray], Trained]:
    def train(x: np.ndarray, y: np.ndarray, names: list[str], folder: Path, holdout: np.ndarray) -> Trained:
        path = folder / f"sales_{loss}.cbm"
        model = catboost.CatBoostRegressor(
            loss_function=loss,
            iterations=TREES,
            depth=4,
            random_seed=1,
            thread_count=1,
            verbose=0,
            allow_writing_files=False,
        ).fit(catboost.Pool(x, label=y, feature_names=names))
        model.save_model(str(path))
        return Trained(
            path,
            "log" if loss == "Poisson" else "identity",
            model.predict,
            lambda rows: model.get_feature_importance(
                data=catboost.Pool(rows, feature_names=names), type="ShapValues", thread_count=1
            )[:, :-1],
        )

    return train


def _sklearn_forest(x: np.ndarray, y: np.ndarray, names: list[str], folder: Path, holdout: np.ndarray) -> Trained:
    model = RandomForestRegressor(n_estimators=10, max_depth=6, min_samples_leaf=5, random_state=0, n_jobs=1).fit(x, y)
    sio.dump(model, folder / "sales_forest.skops")
    return Trained(
        folder / "sales_forest.skops",
        "identity",
        model.predict,
        lambda rows: _shapley(_forest_trees(model), rows),
        ("--trust", TREE_TRUST),
    )


def _sklearn_poisson_glm(x: np.ndarray, y: np.ndarray, names: list[str], folder: Path, holdout: np.ndarray) -> Trained:
    model = make_pipeline(StandardScaler(), PoissonRegressor(alpha=1e-4)).fit(x, y)
    sio.dump(model, folder / "sales_glm.skops")
    scaler, glm = model[0], model[-1]
    # The registration's reference rows are the hold-out's: contributions are coefficient × (scaled value − its mean there).
    mean = scaler.transform(holdout.astype(np.float64)).mean(axis=0)
    return Trained(
        folder / "sales_glm.skops",
        "log",
        model.predict,
        lambda rows: glm.coef_ * (scaler.transform(rows.astype(np.float64)) - mean),
    )


def _sklearn_hist_poisson(x: np.ndarray, y: np.ndarray, names: list[str], folder: Path, holdout: np.ndarray) -> Trained:
    model = HistGradientBoostingRegressor(
        loss="poisson", max_iter=TREES, max_leaf_nodes=15, early_stopping=False, random_state=0
    ).fit(x, y)
    sio.dump(model, folder / "sales_hist.skops")
    return Trained(
        folder / "sales_hist.skops",
        "log",
        model.predict,
        lambda rows: _shapley(_hist_trees(model), rows),
        ("--trust", HIST_TRUST),
    )


def _onnx_session(path: Path) -> Callable[[np.ndarray], np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda rows: np.asarray(
        session.run(None, {session.get_inputs()[0].name: rows.astype(np.float32)})[0], dtype=np.float64
    ).reshape(-1)


def _onnx_forest(x: np.ndarray, y: np.ndarray, names: list[str], folder: Path, holdout: np.ndarray) -> Trained:
    # Without bootstrap, each node's training count is what registration counts from the training rows as reference.
    model = RandomForestRegressor(
        n_estimators=10, max_depth=6, min_samples_leaf=5, bootstrap=False, max_features=0.75, random_state=0, n_jobs=1
    ).fit(x, y)
    path = folder / "sales_forest.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path.write_bytes(to_onnx(model, x[:1], target_opset=17).SerializeToString())
    return Trained(
        path,
        "identity",
        _onnx_session(path),
        lambda rows: _shapley(_forest_trees(model), rows),
        ("--reference", "train.parquet"),
    )


def _onnx_lightgbm_poisson(
    x: np.ndarray, y: np.ndarray, names: list[str], folder: Path, holdout: np.ndarray
) -> Trained:
    model = lgb.LGBMRegressor(
        objective="poisson",
        n_estimators=TREES,
        num_leaves=15,
        min_child_samples=20,
        random_state=1,
        n_jobs=1,
        verbose=-1,
    ).fit(x, y)
    path = folder / "sales_poisson.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = onnxmltools.convert_lightgbm(model, initial_types=[("input", FloatTensorType([None, x.shape[1]]))])
    path.write_bytes(graph.SerializeToString())
    # Counted on the training rows, the graph's node cover is LightGBM's own: so are its contributions.
    return Trained(
        path,
        "log",
        _onnx_session(path),
        lambda rows: model.booster_.predict(rows, pred_contrib=True)[:, :-1],
        ("--reference", "train.parquet"),
    )


CASES = {
    "lightgbm_regression": _lightgbm("regression"),
    "lightgbm_poisson": _lightgbm("poisson"),
    "catboost_rmse": _catboost("RMSE"),
    "catboost_poisson": _catboost("Poisson"),
    "sklearn_forest": _sklearn_forest,
    "sklearn_poisson_glm_pipeline": _sklearn_poisson_glm,
    "onnx_forest": _onnx_forest,
    "onnx_lightgbm_poisson": _onnx_lightgbm_poisson,
}


def _expected_codes(row: np.ndarray, codes: list[str]) -> list[str] | None:
    """The top-2 reasons of one row's contributions, largest |contribution| first, `_UP` where it raised the forecast;
    None when float noise could decide the order (a near tie, or a reason near 0)."""
    size = np.sort(np.abs(row))[::-1]
    if np.any(np.abs(np.diff(size[:3])) < TIE) or np.any(size[:2] < TIE):
        return None
    order = np.argsort(-np.abs(row), kind="stable")[:2]
    return [f"{codes[j]}_{'UP' if row[j] > 0 else 'DOWN'}" for j in order]


def _reasons_compared(root: Path, published: list[list[str]], contributions: np.ndarray, names: list[str]) -> int:
    """How many rows' published reasons were compared with (and equal) the top-2 of their independent contributions."""
    spec = yaml.safe_load((root / "jobs" / "sales.yaml").read_text())
    assert spec["prediction"]["reasons"]["top_k"] == 2
    codes = [spec["prediction"]["reasons"]["codes"][name]["code"] for name in names]
    compared = 0
    for row, codes_of_row in zip(np.asarray(contributions, dtype=np.float64), published, strict=True):
        expected = _expected_codes(row, codes)
        if expected is None:
            continue
        assert codes_of_row == expected, (codes_of_row, row)
        compared += 1
    return compared


def _settings(root: Path):  # noqa: ANN202  (a Settings)
    from tasks.settings import Settings

    return Settings(data_dir=root / "data", jobs_dir=root / "jobs", expectations_dir=root / "expectations")


@pytest.mark.parametrize("case", list(CASES))
def test_a_regressor_registers_and_publishes_the_frameworks_own_forecasts_and_reasons(
    project, tmp_path: Path, case: str
) -> None:
    root, score = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet", "item_id")
    holdout, _, _, _ = model_inputs(root / "holdout_inputs.parquet", "item_id")
    scored, _, _, ids = model_inputs(root / "scored_inputs.parquet", "item_id")
    trained = CASES[case](x, y, names, tmp_path, holdout)
    extra = [str(root / a) if a.endswith(".parquet") else a for a in trained.register_args]

    registered = score(
        "register",
        "sales",
        "--model",
        str(trained.path),
        "--holdout",
        str(root / "holdout.parquet"),
        "--promote",
        *extra,
    )
    version = registered_version(registered.stdout, "sales")
    metadata = json.loads((root / "data" / "models" / "sales" / version / "metadata.json").read_text())
    assert (metadata["target"], metadata["link"]) == ("count", trained.link), metadata
    assert metadata["explanation"]["method"] in ("treeshap", "linear"), metadata["explanation"]
    assert metadata["explanation"]["max_abs_diff"] is None or metadata["explanation"]["max_abs_diff"] <= 1e-5
    score("run", "sales", "--date", str(SCORED_DAY))

    published = day_output(root, "forecasts", SCORED_DAY, job="sales")
    assert published.height == ids.len() and (published["model_version"] == version).all()
    assert day_output(root, "predictions", SCORED_DAY, job="sales").height == 0
    position = {entity: i for i, entity in enumerate(ids.to_list())}
    at = np.array([position[e] for e in published["entity_id"].to_list()])
    rows = scored[at]
    # A count job's forecast is never negative: the framework's prediction, clipped at 0.
    theirs = np.maximum(np.asarray(trained.predict(rows), dtype=np.float64).reshape(-1), 0.0)
    np.testing.assert_allclose(published["forecast"].to_numpy(), theirs, rtol=1e-6, atol=1e-9)
    margin = published["raw_margin"].to_numpy()
    np.testing.assert_allclose(np.exp(margin) if trained.link == "log" else margin, theirs, rtol=1e-6, atol=1e-9)
    low, high = published["forecast_low"].to_numpy(), published["forecast_high"].to_numpy()
    assert (
        (low <= published["forecast"].to_numpy()).all()
        and (published["forecast"].to_numpy() <= high).all()
        and (low >= 0).all()
    )

    compared = _reasons_compared(root, published["reason_codes"].to_list(), trained.contributions(rows), names)
    print(
        f"{case}: forecasts equal the framework's to {np.abs(published['forecast'].to_numpy() / np.maximum(theirs, 1e-12) - 1).max():.2g} "
        f"relative; reasons compared on {compared} of {published.height} rows"
    )
    assert compared >= 0.9 * published.height
    fallback = day_output(root, "reports/fallback", SCORED_DAY, job="sales")
    assert fallback.filter(pl.col("kind").is_in(["failed_chunk", "reasons_unavailable"]))["rows"].sum() == 0


def test_histogram_boosting_with_a_poisson_loss_scores_its_raw_prediction_and_explains_on_that_scale(
    project, tmp_path: Path
) -> None:
    from tasks.contracts import InferenceInput
    from tasks.inference.engine import inference_loaded_model
    from tasks.jobs.registration import registered_job_model
    from tasks.prediction.forecasts import ForecastMap

    root, _ = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet", "item_id")
    holdout, _, _, _ = model_inputs(root / "holdout_inputs.parquet", "item_id")
    scored, _, _, ids = model_inputs(root / "scored_inputs.parquet", "item_id")
    trained = _sklearn_hist_poisson(x, y, names, tmp_path, holdout)
    settings = _settings(root)

    report = registered_job_model(
        "sales", trained.path, settings=settings, holdout=root / "holdout.parquet", trusted_types=(HIST_TRUST,)
    )
    loaded = inference_loaded_model(settings.model_registry_dir("sales"), report.version, None, device="cpu", nthread=1)
    meta = loaded.engine.metadata
    assert (meta.target, meta.link, meta.sklearn_output.method, meta.explanation.method) == (
        "count",
        "log",
        "raw_predict",
        "treeshap",
    )
    assert "local accuracy" in meta.explanation.checked_against and meta.explanation.max_abs_diff <= 1e-5
    batch = InferenceInput(
        chunk_id=0,
        entity_ids=pa.array(ids.to_list()),
        features=np.ascontiguousarray(scored),
        feature_names=tuple(names),
    )
    output = loaded.inference_outputs(batch)
    forecast = ForecastMap(meta.interval, 0.9, link=meta.link, nonnegative=True).predict_forecast(
        output.margins, output.expected_error
    )
    contributions = loaded.engine.inference_contributions(batch, np.arange(scored.shape[0]), top_k=2)

    # scikit-learn's forecast is exp of the raw prediction, the margin; the contributions are on the margin's scale and
    # add up to it with the boosting's baseline.
    np.testing.assert_allclose(forecast.forecast, trained.predict(scored), rtol=1e-6, atol=0)
    np.testing.assert_allclose(output.margins, np.log(trained.predict(scored)), rtol=0, atol=1e-9)
    np.testing.assert_allclose(contributions.values, trained.contributions(scored), rtol=0, atol=1e-9)


def _classifier(framework: str, x: np.ndarray, y: np.ndarray, names: list[str], folder: Path) -> Path:
    """A binary classifier of `sold_out` (10 units or more) in the framework's own file format."""
    label = (y >= 10).astype(np.int64)
    if framework == "lightgbm":
        path = folder / "flag.txt"
        lgb.train(
            {"objective": "binary", "num_leaves": 7, "verbose": -1, "num_threads": 1},
            lgb.Dataset(x, label=label, feature_name=names),
            5,
        ).save_model(str(path))
    elif framework == "catboost":
        path = folder / "flag.cbm"
        catboost.CatBoostClassifier(iterations=5, depth=3, thread_count=1, verbose=0, allow_writing_files=False).fit(
            catboost.Pool(x, label=label, feature_names=names)
        ).save_model(str(path))
    elif framework == "sklearn":
        path = folder / "flag.skops"
        sio.dump(LogisticRegression().fit(x, label), path)
    else:
        path = folder / "flag.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path.write_bytes(to_onnx(LogisticRegression().fit(x, label), x[:1], target_opset=17).SerializeToString())
    return path


def _regressor(framework: str, x: np.ndarray, y: np.ndarray, names: list[str], folder: Path) -> Path:
    """A regressor of the units sold in the framework's own file format."""
    if framework == "lightgbm":
        path = folder / "units.txt"
        lgb.train(
            {"objective": "regression", "num_leaves": 7, "verbose": -1, "num_threads": 1},
            lgb.Dataset(x, label=y, feature_name=names),
            5,
        ).save_model(str(path))
    elif framework == "catboost":
        path = folder / "units.cbm"
        catboost.CatBoostRegressor(iterations=5, depth=3, thread_count=1, verbose=0, allow_writing_files=False).fit(
            catboost.Pool(x, label=y, feature_names=names)
        ).save_model(str(path))
    elif framework == "sklearn":
        path = folder / "units.skops"
        sio.dump(Ridge().fit(x, y), path)
    else:
        path = folder / "units.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path.write_bytes(to_onnx(Ridge().fit(x, y), x[:1], target_opset=17).SerializeToString())
    return path


CLASSIFIER_ON_FORECAST = {
    "lightgbm": "has objective 'binary sigmoid:1', a classifier, but the job forecasts a count target (target.kind): register a regressor "
    "(regression, regression_l1, huber, fair, mape, poisson, tweedie, gamma)",
    "catboost": "is a binary classifier (loss Logloss), but the job forecasts a count target (target.kind): register a regressor (loss RMSE,",
    "sklearn": "is a scikit-learn LogisticRegression, a classifier, but the job forecasts a count target (target.kind): register a regressor (",
    "onnx": "is an ONNX classifier's graph (it has a LinearClassifier node), but the job forecasts a count target (target.kind): register a "
    "regressor (one value per row",
}
REGRESSOR_ON_BINARY = {
    "lightgbm": "has objective 'regression', a regression objective, but the job is binary (target.kind): register a binary classifier "
    "(binary or cross_entropy), or set target.kind: regression or count in the job spec",
    "catboost": "is a regression model (loss RMSE), but the job is binary (target.kind): register a binary classifier (loss Logloss or "
    "CrossEntropy), or set target.kind: regression or count in the job spec",
    "sklearn": "is a scikit-learn Ridge, a regressor, but the job is binary (target.kind): register a binary classifier (a classifier of "
    "classes 0 and 1), or set target.kind: regression or count in the job spec",
    "onnx": "is an ONNX regressor's graph (a LinearRegressor node computes its output), but the job is binary (target.kind): register a "
    "binary classifier (its class probabilities or one score per row), or set target.kind: regression or count in the job spec",
}


@pytest.mark.parametrize(("framework", "job"), [("lightgbm", "sales"), ("onnx", "sales_flag")])
def test_score_register_refuses_a_classifier_on_the_forecast_job_and_a_regressor_on_a_binary_job_in_one_line(
    project, tmp_path: Path, framework: str, job: str
) -> None:
    root, score = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet", "item_id")
    make, expected = (_classifier, CLASSIFIER_ON_FORECAST) if job == "sales" else (_regressor, REGRESSOR_ON_BINARY)
    path = make(framework, x, y, names, tmp_path)
    before = registry_versions(root, job)

    refused = score("register", job, "--model", str(path), "--holdout", str(root / "holdout.parquet"), ok=False)

    assert_one_error_line(refused, path, expected[framework])
    assert_nothing_registered(root, before, job)


@pytest.mark.parametrize("framework", list(CLASSIFIER_ON_FORECAST))
def test_every_framework_refuses_a_classifier_on_the_forecast_job_and_a_regressor_on_a_binary_job_naming_the_file(
    project, tmp_path: Path, framework: str
) -> None:
    from tasks.errors import ModelArtifactError
    from tasks.jobs.registration import registered_job_model

    root, _ = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet", "item_id")
    settings = _settings(root)
    for job, make, expected in (
        ("sales", _classifier, CLASSIFIER_ON_FORECAST),
        ("sales_flag", _regressor, REGRESSOR_ON_BINARY),
    ):
        path = make(framework, x, y, names, tmp_path)
        before = registry_versions(root, job)
        with pytest.raises(ModelArtifactError) as refused:
            registered_job_model(job, path, settings=settings, holdout=root / "holdout.parquet")
        message = " ".join(str(refused.value).split())
        assert message.startswith(f"model file {path} {expected[framework]}") and "\n" not in str(refused.value), (
            message
        )
        assert_nothing_registered(root, before, job)


QUANTILE = {
    "lightgbm": "has objective 'quantile': a quantile regressor predicts a quantile of the target, not the point forecast",
    "catboost": "is a regression model (loss Quantile): a quantile regressor predicts a quantile of the target",
    "sklearn": "is a scikit-learn HistGradientBoostingRegressor: a quantile regressor predicts a quantile of the target",
    "sklearn_linear": "is a scikit-learn QuantileRegressor: a quantile regressor predicts a quantile of the target",
}


@pytest.mark.parametrize("make", list(QUANTILE))
def test_a_quantile_regressor_is_refused_on_a_forecast_job_naming_what_it_predicts(
    project, tmp_path: Path, make: str
) -> None:
    from tasks.inference.frameworks import inference_framework_input_problem

    root, _ = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet", "item_id")
    trust: tuple[str, ...] = ()
    if make == "lightgbm":
        path = tmp_path / "median.txt"
        lgb.train(
            {"objective": "quantile", "alpha": 0.5, "verbose": -1, "num_threads": 1},
            lgb.Dataset(x, label=y, feature_name=names),
            5,
        ).save_model(str(path))
    elif make == "catboost":
        path = tmp_path / "median.cbm"
        catboost.CatBoostRegressor(
            loss_function="Quantile:alpha=0.5",
            iterations=5,
            depth=3,
            thread_count=1,
            verbose=0,
            allow_writing_files=False,
        ).fit(catboost.Pool(x, label=y, feature_names=names)).save_model(str(path))
    elif make == "sklearn":
        path, trust = tmp_path / "median.skops", (HIST_TRUST,)
        sio.dump(HistGradientBoostingRegressor(loss="quantile", quantile=0.5, max_iter=5).fit(x, y), path)
    else:
        path = tmp_path / "median_linear.skops"
        sio.dump(QuantileRegressor(quantile=0.5, alpha=0.0).fit(x[:300], y[:300]), path)
    framework = "sklearn" if make.startswith("sklearn") else make

    problem = inference_framework_input_problem(path, framework, tuple(names), trusted_types=trust, kind="count")

    assert problem is not None and problem.startswith(QUANTILE[make]), problem
