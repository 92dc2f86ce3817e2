"""CatBoost models (`model.save_model("model.cbm")`) score with CatBoost's own raw values and get CatBoost's own
ShapValues as reasons, through the product's TreeSHAP on the converted trees.

The unit tests train small models on synthetic rows with missing values (every nan_mode) and compare the
engine with CatBoost's `predict(prediction_type="RawFormulaVal")` and `get_feature_importance(type="ShapValues")`.
The command-line tests scaffold a user's project, train a CatBoostClassifier on the job's own model inputs
(`score features`) and drive `score register`, `validate`, `run`, `outcomes` and a challenger run behind an
XGBoost champion as subprocesses; every published margin and reason code is checked against CatBoost itself.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
import yaml

catboost = pytest.importorskip("catboost")

from conftest import user_project_env  # noqa: E402
from user_projects import (  # noqa: E402
    assert_nothing_registered,
    assert_one_error_line,
    churn_project,
    day_output,
    model_inputs,
    raw_partition,
    registered_version,
    registry_versions,
    score_cli,
)

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

TRAIN_DAY, HOLDOUT_DAY, SCORED_DAY = dt.date(2026, 11, 1), dt.date(2026, 11, 2), dt.date(2026, 11, 3)
ROWS = 2000
FLT_MAX = float(np.finfo(np.float32).max)


def _classifier(**params) -> catboost.CatBoostClassifier:
    defaults = dict(iterations=40, depth=5, random_seed=0, thread_count=2, verbose=0, allow_writing_files=False)
    return catboost.CatBoostClassifier(**{**defaults, **params})


def _synthetic(rows: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    filled = np.nan_to_num(x)
    logit = filled[:, 0] + 0.6 * filled[:, 1] ** 2 - filled[:, 2] + np.isnan(x[:, 3]) + rng.normal(size=rows)
    return x, (logit > 0.5).astype(int)


def _artifact(tmp_path: Path, model, features: list[str]):  # noqa: ANN001, ANN202
    from tasks.inference.registry import ModelArtifact, ModelMetadata, inference_model_checksum

    folder = tmp_path / f"v{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    model.save_model(str(folder / "model.cbm"))
    meta = ModelMetadata(
        name="unit",
        version="1",
        framework="catboost",
        model_file="model.cbm",
        sha256=inference_model_checksum(folder / "model.cbm"),
        feature_version="1",
        features=features,
        feature_dtypes={f: "float32" for f in features},
    )
    return ModelArtifact(metadata=meta, directory=folder)


def _edge_rows(model, n_features: int) -> np.ndarray:  # noqa: ANN001
    """Rows on the borders themselves, one float32 step either side, ±inf, ±FLT_MAX and NaN, in every column."""
    borders = np.unique(np.concatenate([np.asarray(b, dtype=np.float32) for b in model.get_borders().values()]))
    with np.errstate(over="ignore"):  # the step above nan_mode Max's border at FLT_MAX is +inf
        steps = [np.nextafter(borders, np.float32(-np.inf)), np.nextafter(borders, np.float32(np.inf))]
    values = np.concatenate([borders, *steps, np.float32([np.nan, np.inf, -np.inf, FLT_MAX, -FLT_MAX, 0.0])])
    rng = np.random.default_rng(1)
    return values[rng.integers(0, values.size, size=(3000, n_features))].astype(np.float32)


def _batch(rows: np.ndarray, names: list[str]):  # noqa: ANN202
    import pyarrow as pa

    from tasks.contracts import InferenceInput

    return InferenceInput(
        chunk_id=0,
        entity_ids=pa.array(np.arange(rows.shape[0]).astype(str)),
        features=np.ascontiguousarray(rows),
        feature_names=tuple(names),
    )


@pytest.mark.parametrize(("nan_mode", "depth"), [("Min", 6), ("Max", 6), ("Forbidden", 4)])
def test_margins_are_catboosts_raw_values_and_reasons_its_shap_values_whatever_the_nan_mode(
    tmp_path: Path, nan_mode: str, depth: int
) -> None:
    from tasks.inference.engine_catboost import CatBoostEngine

    x, y = _synthetic()
    train = np.nan_to_num(x) if nan_mode == "Forbidden" else x
    model = _classifier(depth=depth, nan_mode=nan_mode).fit(train[:1500], y[:1500])
    names = [f"f{i}" for i in range(5)]
    engine = CatBoostEngine(_artifact(tmp_path, model, names))
    weights = model.get_leaf_weights()
    # Depth 6 on 1,500 rows leaves many leaves without a training row: the case CatBoost's TreeSHAP skips.
    assert depth == 4 or (weights == 0).sum() > 100

    holdout = x[1500:]
    edges = _edge_rows(model, 5)
    for rows in (holdout, edges):
        margins = engine.inference_outputs(_batch(rows, names)).margins
        theirs = model.predict(rows, prediction_type="RawFormulaVal")
        assert np.abs(margins - theirs).max() <= 1e-6
    source = engine.contributions_source
    assert source.name == "table_treeshap" and source.max_abs_diff <= 1e-5, source.reason
    for rows in (holdout, edges):
        ours = source.kernel.contributions(rows)
        shap = model.get_feature_importance(data=catboost.Pool(rows), type="ShapValues")
        assert np.abs(ours - shap).max() <= 1e-5
        # The converted trees route every edge value as CatBoost does: their leaves add up to its raw values.
        assert np.abs(ours.sum(axis=1) - model.predict(rows, prediction_type="RawFormulaVal")).max() <= 1e-9
    # What the pass publishes: contributions without the bias column, for the rows asked.
    index = np.flatnonzero(np.isnan(holdout).any(axis=1))[:50]
    published = engine.inference_contributions(_batch(holdout, names), index, top_k=3)
    shap = model.get_feature_importance(data=catboost.Pool(holdout[index]), type="ShapValues")[:, :-1]
    assert np.abs(published.values - shap).max() <= 1e-5


@pytest.mark.parametrize(("nan_mode", "depth"), [("Min", 4), ("Min", 6), ("Max", 4), ("Max", 6)])
def test_symmetric_trees_are_explained_by_one_table_row_per_leaf_equal_to_shap_values_and_the_general_kernel(
    tmp_path: Path, nan_mode: str, depth: int
) -> None:
    from tasks.inference.engine_catboost import (
        CatBoostEngine,
        inference_catboost_model_json,
        inference_catboost_tree_arrays,
    )
    from tasks.inference.treeshap import inference_treeshap_kernel

    x, y = _synthetic()
    model = _classifier(depth=depth, nan_mode=nan_mode, iterations=30).fit(x[:1500], y[:1500])
    names = [f"f{i}" for i in range(5)]
    engine = CatBoostEngine(_artifact(tmp_path, model, names))
    source = engine.contributions_source
    assert source.name == "table_treeshap" and source.kernel.layout == "oblivious", source.reason
    assert source.framework_contributions is not None and source.max_abs_diff <= 1e-5
    general = inference_treeshap_kernel(inference_catboost_tree_arrays(inference_catboost_model_json(model), 5).arrays)
    assert general.layout == "paths"
    # Depth 6 over 5 features splits a feature at several levels of a tree: some leaf indices no row can reach.
    assert depth == 4 or (source.kernel.widest_path < depth and np.isnan(source.kernel.table).any())
    for rows in (x[1500:], _edge_rows(model, 5)):
        ours = source.kernel.contributions(rows)
        shap = model.get_feature_importance(data=catboost.Pool(rows), type="ShapValues")
        assert np.isfinite(ours).all()
        assert np.abs(ours - shap).max() <= 1e-5
        assert np.abs(ours - general.contributions(rows)).max() <= 1e-12


def test_models_catboost_cannot_explain_exactly_are_explained_by_the_kernel_checked_against_their_raw_values(
    tmp_path: Path,
) -> None:
    from tasks.inference.engine_catboost import (
        CatBoostEngine,
        inference_catboost_model_json,
        inference_catboost_tree_arrays,
    )

    x, y = _synthetic()
    names = [f"f{i}" for i in range(5)]
    lossguide = _classifier(grow_policy="Lossguide", max_leaves=16, depth=6).fit(x[:1500], y[:1500])
    scaled = _classifier(depth=4).fit(x[:1500], y[:1500])
    scaled.set_scale_and_bias(0.5, 0.25)
    edited = _classifier(depth=6).fit(x[:1500], y[:1500])
    weights, values = edited.get_leaf_weights(), edited.get_leaf_values().copy()
    assert (weights == 0).sum() > 100 and np.all(values[weights == 0] == 0)  # training leaves every empty leaf at 0
    values[np.flatnonzero(weights == 0)[:20]] = 0.3
    edited.set_leaf_values(values)
    cases = (
        (lossguide, "non-symmetric"),
        (scaled, "scales the trees by 0.5"),
        (edited, "a leaf no training row reached"),
    )
    for model, why in cases:
        engine = CatBoostEngine(_artifact(tmp_path, model, names))
        source = engine.contributions_source
        assert source.name == "table_treeshap" and source.framework_contributions is None and source.output is not None
        assert source.kernel.layout == ("paths" if model is lossguide else "oblivious")
        rows = x[1500:]
        raw = model.predict(rows, prediction_type="RawFormulaVal")
        assert np.abs(engine.inference_outputs(_batch(rows, names)).margins - raw).max() <= 1e-6
        assert np.abs(source.kernel.contributions(rows).sum(axis=1) - raw).max() <= 1e-9, why
        assert why in inference_catboost_tree_arrays(inference_catboost_model_json(model), 5).own_shap_unusable
    # Why CatBoost is not asked: its ShapValues of non-symmetric trees do not add up to the raw values, and a
    # scaled model has none.
    shap = lossguide.get_feature_importance(data=catboost.Pool(x[1500:]), type="ShapValues")
    assert np.abs(shap.sum(axis=1) - lossguide.predict(x[1500:], prediction_type="RawFormulaVal")).max() > 0.01
    with pytest.raises(catboost.CatBoostError, match="Scale"):
        scaled.get_feature_importance(data=catboost.Pool(x[:5]), type="ShapValues")
    # and with a non-zero empty leaf, a row's ShapValues change with the rows explained beside it.
    together = edited.get_feature_importance(data=catboost.Pool(x[1500:]), type="ShapValues")[:10]
    alone = edited.get_feature_importance(data=catboost.Pool(x[1500:1510]), type="ShapValues")
    assert np.abs(together - alone).max() > 1e-3


def test_what_cannot_score_the_job_is_named(tmp_path: Path) -> None:
    from tasks.errors import DeviceUnavailable
    from tasks.inference.engine_catboost import CatBoostEngine, inference_input_problem

    x, y = _synthetic(600)
    names = ("a", "b", "c", "d", "e")

    def problem(model) -> str | None:  # noqa: ANN001
        path = tmp_path / "m.cbm"
        model.save_model(str(path))
        return inference_input_problem(path, names)

    small = dict(iterations=5, depth=3)
    assert (
        problem(_classifier(**small).fit(x, y)) is None
    )  # CatBoost's default names "0".."4": the order is all it knows
    assert problem(_classifier(**small).fit(x, y.astype(bool))) is None
    assert problem(_classifier(**small).fit(x, np.where(y == 1, "1", "0"))) is None
    assert "classes ['no', 'yes']; its raw value is the log-odds of class 'yes'" in problem(
        _classifier(**small).fit(x, np.where(y == 1, "yes", "no"))
    )
    assert "classes [1, 2]" in problem(_classifier(**small).fit(x, y + 1))
    assert "is a multiclass model (2 classes [0, 1]) (loss MultiClass)" in problem(
        _classifier(loss_function="MultiClass", **small).fit(x, y)
    )
    named = catboost.Pool(x, y, feature_names=["b", "a", "c", "d", "e"])
    assert "takes the job's features in another order" in problem(_classifier(**small).fit(named))
    assert "takes 4 inputs, but the job computes 5" in problem(_classifier(**small).fit(x[:, :4], y))
    broken = tmp_path / "broken.cbm"
    broken.write_bytes(b"CBM1" + b"\0" * 64)
    assert inference_input_problem(broken, names).startswith("could not be loaded by CatBoost: ")
    with pytest.raises(DeviceUnavailable, match="CatBoost cannot evaluate on a GPU here"):
        CatBoostEngine(_artifact(tmp_path, _classifier(**small).fit(x, y), list(names)), device="cuda")


def test_the_command_line_and_the_flow_do_not_import_catboost() -> None:
    code = "import sys, cli.score, flows.score_partition\nprint('catboost' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    """A user's churn project: scaffolded, the scored day's raw rows and labels in place, the model inputs of the
    training and scored days written by `score features`, and a `score` that runs the CLI in a subprocess."""
    root = tmp_path_factory.mktemp("catboost-byo")
    score = score_cli(root, user_project_env(root))
    churn_project(
        root,
        score,
        train_days=[TRAIN_DAY],
        holdout_day=HOLDOUT_DAY,
        scored_days=[SCORED_DAY],
        rows=ROWS,
        seed=300,
        features_of=[("train.parquet", "train_inputs"), (raw_partition(SCORED_DAY), "scored_inputs")],
    )
    return root, score


def _check_against_catboost(root: Path, published: pl.DataFrame, model) -> int:  # noqa: ANN001
    """Published margins are CatBoost's RawFormulaVal of the row's model inputs; reason codes are the top-k positive
    ShapValues CatBoost computes for those inputs. Returns how many rows carried reasons."""
    x, _, names, ids = model_inputs(root / "scored_inputs.parquet")
    position = {entity: i for i, entity in enumerate(ids.to_list())}
    rows = np.array([position[e] for e in published["entity_id"]])
    theirs = model.predict(x[rows], prediction_type="RawFormulaVal")
    assert np.abs(published["raw_margin"].to_numpy() - theirs).max() <= 1e-6
    spec = yaml.safe_load((root / "jobs" / "churn.yaml").read_text())["prediction"]["reasons"]
    code_of = [spec["codes"][name]["code"] for name in names]
    explained = published.with_row_index("i").filter(pl.col("decision").is_in(spec["for_decisions"]))
    assert explained.height > 20
    shap = model.get_feature_importance(data=catboost.Pool(x[rows[explained["i"].to_numpy()]]), type="ShapValues")[
        :, :-1
    ]
    for codes, row in zip(explained["reason_codes"].to_list(), shap, strict=True):
        order = np.argsort(-row, kind="stable")[: spec["top_k"]]
        assert codes == ([code_of[j] for j in order if row[j] > 0] or [spec["no_reason_code"]]), (codes, row)
    others = published.filter(~pl.col("decision").is_in(spec["for_decisions"]))
    assert others.height > 0 and others["reason_codes"].list.len().max() == 0
    return explained.height


def test_a_catboost_model_registers_validates_scores_and_shadows_an_xgboost_champion_with_catboosts_own_numbers(
    project, tmp_path: Path
) -> None:
    root, score = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    assert np.isnan(x).any()  # missing monthly charges reach the model as NaN
    model = _classifier().fit(catboost.Pool(x, y, feature_names=names))
    path = tmp_path / "churn.cbm"
    model.save_model(str(path))

    registered = score(
        "register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), "--promote"
    )
    version = registered_version(registered.stdout)
    flat = " ".join(registered.stdout.split())
    assert (
        "CatBoost model: 40 trees (SymmetricTree), loss Logloss" in flat and "log-odds of class 1 of [0, 1]" in flat
    ), flat
    metadata = json.loads((root / "data" / "models" / "churn" / version / "metadata.json").read_text())
    explanation = metadata["explanation"]
    assert metadata["framework"] == "catboost" and explanation["method"] == "treeshap"
    assert (
        explanation["checked_against"].startswith("CatBoost ShapValues on 2000 hold-out rows")
        and explanation["max_abs_diff"] <= 1e-5
    )
    assert json.loads((root / "data" / "models" / "churn" / version / "registration.json").read_text())["auc"] > 0.7

    score("validate", "churn")
    score("run", "churn", "--date", str(SCORED_DAY))
    predictions = day_output(root, "predictions", SCORED_DAY)
    assert (predictions["model_version"] == version).all()
    explained = _check_against_catboost(root, predictions, model)
    fallback = day_output(root, "reports/fallback", SCORED_DAY)
    assert fallback.filter(pl.col("kind").is_in(["failed_chunk", "reasons_unavailable"]))["rows"].sum() == 0
    with duckdb.connect(str(root / "data" / "warehouse.duckdb"), read_only=True) as con:
        (inference,) = con.execute(
            "SELECT inference FROM runs WHERE partition_date = ? AND status = 'succeeded'", [SCORED_DAY]
        ).fetchone()
    # The product's kernel explained every row (checked against ShapValues at load), not CatBoost.
    assert json.loads(inference)["reasons_explained_by"] == {"table_treeshap": explained}
    assert (
        "realized performance"
        in score("outcomes", "churn", "--start", str(SCORED_DAY), "--end", str(SCORED_DAY)).stdout
    )

    import xgboost as xgb

    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "seed": 1}, xgb.DMatrix(x, label=y, missing=np.nan), 40
    )
    booster.save_model(str(tmp_path / "champion.ubj"))
    champion = registered_version(
        score(
            "register", "churn", "--model", str(tmp_path / "champion.ubj"), "--holdout", str(root / "holdout.parquet")
        ).stdout
    )
    spec_path = root / "jobs" / "churn.yaml"
    scaffolded = spec_path.read_text()
    try:
        spec_path.write_text(
            scaffolded.replace("  version: champion", f'  version: "{champion}"\n  challenger: "{version}"')
        )
        score("validate", "churn")
        score("run", "churn", "--date", str(SCORED_DAY))
        shadow, predictions = (
            day_output(root, "shadow_predictions", SCORED_DAY),
            day_output(root, "predictions", SCORED_DAY),
        )
        assert (predictions["model_version"] == champion).all() and (shadow["model_version"] == version).all()
        assert shadow.height == predictions.height
        assert _check_against_catboost(root, shadow, model) > 0
        fallback = day_output(root, "reports/fallback", SCORED_DAY)
        assert fallback.filter(pl.col("kind") == "challenger_failed")["rows"].sum() == 0
    finally:
        spec_path.write_text(scaffolded)


def _categorical(x: np.ndarray, y: np.ndarray, names: list[str]):  # noqa: ANN202
    import pandas as pd

    frame = pd.DataFrame(x, columns=names)
    frame["contract"] = frame["contract"].fillna(-1).astype(int).astype(str)
    return _classifier(iterations=10, cat_features=["contract"]).fit(frame, y)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            "regressor",
            "is a regression model (loss RMSE), but the job is binary (target.kind): register a binary classifier (loss Logloss "
            "or CrossEntropy), or set target.kind: regression or count in the job spec",
        ),
        ("multiclass", "is a multiclass model (3 classes [0, 1, 2]) (loss MultiClass)"),
        ("categorical", "has categorical, text or embedding features ['contract'], which CatBoost encodes itself"),
    ],
)
def test_a_regressor_a_multiclass_model_and_categorical_features_are_refused_with_one_line_and_nothing_written(
    project, tmp_path: Path, make: str, expected: str
) -> None:
    root, score = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    if make == "regressor":
        model = catboost.CatBoostRegressor(
            iterations=10, depth=4, verbose=0, allow_writing_files=False, thread_count=2
        ).fit(x, y)
    elif make == "multiclass":
        # A churn model that also tells long-tenure customers who stayed apart.
        model = _classifier(iterations=10).fit(x, np.where(y == 1, 1, np.where(np.nan_to_num(x[:, 0]) > 36, 2, 0)))
    else:
        model = _categorical(x, y, names)
    path = tmp_path / f"{make}.cbm"
    model.save_model(str(path))
    before = registry_versions(root)

    refused = score("register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), ok=False)

    assert_one_error_line(refused, path, expected)
    assert_nothing_registered(root, before)
