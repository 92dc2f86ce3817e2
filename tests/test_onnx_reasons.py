"""ONNX exports of tree ensembles and linear models get exact reasons; other graphs keep reasons off.

Unit level, each against an independent computation: the trees of onnxmltools' LightGBM export, with
the cover counted from the training rows, are LightGBM's own (its `internal_count`s, its `pred_contrib`
to 1e-5); skl2onnx's GradientBoosting export gives a brute-force path-dependent Shapley computation
over scikit-learn's own trees; a RandomForest's one-class weights (ONNX Runtime derives the other class)
are read for either event class; a LogisticRegression pipeline gives coef × (x − mean) by numpy; an MLP
and a split mode the table does not read stay without reasons, saying why.

Through the CLI as a user runs it (`score register`, `validate`, `run`, `outcomes`, a challenger): an
onnxmltools LightGBM export and a skl2onnx RandomForest export publish the framework's own margins and
the top-k of the independent contributions as their reasons.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import warnings
from pathlib import Path

import numpy as np
import onnx
import polars as pl
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")
lgb = pytest.importorskip("lightgbm")
onnxmltools = pytest.importorskip("onnxmltools")

from conftest import user_project_env  # noqa: E402
from onnxmltools.convert.common.data_types import FloatTensorType  # noqa: E402
from skl2onnx import to_onnx  # noqa: E402
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from test_onnx_outputs import FLOAT32_SPACING  # noqa: E402
from user_projects import churn_project, day_output, model_inputs, raw_partition, registered_version, score_cli  # noqa: E402

from tasks.inference.onnx_explained import (  # noqa: E402
    NO_NODE,
    UNREACHED_LEAF_COVER,
    inference_onnx_contributions,
    inference_onnx_counted_trees,
    inference_onnx_explained_node,
    inference_onnx_registration_explanation,
)
from tasks.inference.registry import ModelMetadata, OnnxOutput  # noqa: E402
from tasks.inference.treeshap import inference_treeshap_kernel  # noqa: E402

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

TRAIN_DAYS = [dt.date(2026, 10, 1), dt.date(2026, 10, 2)]
HOLDOUT_DAY, SCORED_DAY = dt.date(2026, 10, 3), dt.date(2026, 10, 4)
ROWS = 2000
ZIPMAP = OnnxOutput(name="output_probability", kind="zipmap", event_label=1, classes=[0, 1], clip=1e-7)
TIE = 1e-6
"""Independent and product contributions may differ by float noise: rows whose ranking a gap this small decides are not compared."""


def _synthetic(rows: int, features: int, seed: int, *, missing: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    logit = x[:, 0] - 0.8 * x[:, 1] + 0.6 * x[:, 2] * x[:, 3] + 0.3 * np.abs(x[:, -1])
    y = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    x[rng.random(x.shape) < missing] = np.nan
    return x, y


def _saved(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def _sklearn_onnx(model, x: np.ndarray, path: Path, *, zipmap: bool = True) -> Path:  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = None if zipmap else {id(model): {"zipmap": False}}
        return _saved(to_onnx(model, x[:1], options=options, target_opset=17), path)


def _lightgbm_onnx(model, n_features: int, path: Path, *, zipmap: bool = True) -> Path:  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _saved(
            onnxmltools.convert_lightgbm(
                model, initial_types=[("input", FloatTensorType([None, n_features]))], zipmap=zipmap
            ),
            path,
        )


def _lightgbm_counts(booster) -> list[list[int]]:  # noqa: ANN001
    """Each tree's training counts as LightGBM keeps them (internal_count, leaf_count), sorted."""

    def walk(node: dict, out: list[int]) -> list[int]:
        if "leaf_index" in node:
            out.append(node["leaf_count"])
        else:
            out.append(node["internal_count"])
            walk(node["left_child"], out)
            walk(node["right_child"], out)
        return out

    return [sorted(walk(tree["tree_structure"], [])) for tree in booster.dump_model()["tree_info"]]


def _metadata(path: Path, n_features: int, output: OnnxOutput, explanation) -> ModelMetadata:  # noqa: ANN001
    names = [f"f{i}" for i in range(n_features)]
    return ModelMetadata(
        name="unit",
        version="1",
        framework="onnx",
        model_file=path.name,
        sha256="0" * 64,
        feature_version="1",
        features=names,
        feature_dtypes={n: "float32" for n in names},
        onnx_output=output,
        explanation=explanation,
    )


def _sklearn_trees(estimators, x_reference: np.ndarray, leaf_value) -> list[tuple]:  # noqa: ANN001
    """scikit-learn's own trees, each node's cover counted from the reference rows by scikit-learn's own routing,
    a leaf no reference row reaches counting UNREACHED_LEAF_COVER rows, every other node the sum of its children."""
    trees = []
    for estimator in estimators:
        tree = estimator.tree_
        cover = np.bincount(estimator.apply(x_reference), minlength=tree.node_count).astype(np.float64)
        leaf = tree.children_left < 0
        cover[leaf & (cover == 0)] = UNREACHED_LEAF_COVER
        for node in range(tree.node_count - 1, -1, -1):  # scikit-learn numbers children after their parent
            if not leaf[node]:
                cover[node] = cover[tree.children_left[node]] + cover[tree.children_right[node]]
        trees.append((tree.children_left, tree.children_right, tree.feature, tree.threshold, leaf_value(tree), cover))
    return trees


def _brute_force_shapley(trees: list[tuple], x: np.ndarray, bias: float) -> np.ndarray:
    """Shapley values of the path-dependent game v(S) = Σ_trees E[tree | x_S], by enumerating every subset S:
    at a split on a feature in S the row's branch is taken (scikit-learn's `x <= threshold`), otherwise both
    branches weighted by their cover. rows × (features + 1), v(∅) + bias last."""
    n, m = x.shape

    def expectation(tree: tuple, node: int, subset: int) -> np.ndarray:
        left, right, feature, threshold, value, cover = tree
        if left[node] < 0:
            return np.full(n, value[node])
        low, high = expectation(tree, left[node], subset), expectation(tree, right[node], subset)
        if subset >> int(feature[node]) & 1:
            return np.where(x[:, feature[node]] <= threshold[node], low, high)
        return (cover[left[node]] * low + cover[right[node]] * high) / cover[node]

    game = {s: sum(expectation(tree, 0, s) for tree in trees) for s in range(2**m)}
    phi = np.zeros((n, m + 1))
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
    phi[:, m] = game[0] + bias
    return phi


def test_lightgbm_export_counted_on_the_training_rows_is_lightgbms_own_cover_and_contributions(tmp_path: Path) -> None:
    x, y = _synthetic(ROWS, 5, seed=1, missing=0.03)
    model = lgb.LGBMClassifier(n_estimators=30, num_leaves=15, verbose=-1).fit(x, y)
    path = _lightgbm_onnx(model, 5, tmp_path / "lgb.onnx")
    explained = inference_onnx_explained_node(
        onnx.load(str(path)), OnnxOutput(**{**ZIPMAP.model_dump(), "name": "probabilities"})
    )

    trees, unreached = inference_onnx_counted_trees(explained, x)

    assert unreached == 0 and trees.node_start.size - 1 == 30
    ours = [sorted(trees.cover[a:b].astype(int).tolist()) for a, b in itertools.pairwise(trees.node_start)]
    assert ours == _lightgbm_counts(model.booster_)
    rows = _synthetic(500, 5, seed=2, missing=0.03)[0]
    contributions = inference_treeshap_kernel(trees).contributions(rows)
    theirs = model.booster_.predict(rows, pred_contrib=True)
    print(f"LightGBM export: max |contribution − pred_contrib| = {np.abs(contributions - theirs).max():.2g}")
    np.testing.assert_allclose(contributions, theirs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        contributions.sum(axis=1), model.booster_.predict(rows, raw_score=True), rtol=0, atol=1e-5
    )


def test_gradient_boosting_export_gives_brute_force_path_dependent_shapley_values(tmp_path: Path) -> None:
    x, y = _synthetic(ROWS, 6, seed=3)
    model = GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0).fit(x, y)
    path = _sklearn_onnx(model, x, tmp_path / "gb.onnx")
    reference, rows = _synthetic(1000, 6, seed=4)[0], _synthetic(8, 6, seed=5)[0]

    explanation, notes = inference_onnx_registration_explanation(path, ZIPMAP, reference, reference)
    engine = inference_onnx_contributions(path, _metadata(path, 6, ZIPMAP, explanation))

    assert explanation.method == "treeshap" and explanation.scale == "margin" and explanation.cover_rows == 1000
    assert "adding up to the margin" in notes[0] and "count of the 1000 reference rows" in notes[0]
    ours = engine.source.values(rows, None)[0]
    trees = _sklearn_trees(model.estimators_[:, 0], reference, lambda tree: model.learning_rate * tree.value[:, 0, 0])
    prior = model.decision_function(rows) - sum(model.learning_rate * e.predict(rows) for e in model.estimators_[:, 0])
    theirs = _brute_force_shapley(trees, rows, float(prior[0]))
    print(f"GradientBoosting export: max |contribution − brute force| = {np.abs(ours - theirs[:, :-1]).max():.2g}")
    np.testing.assert_allclose(ours, theirs[:, :-1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours.sum(axis=1) + theirs[:, -1], model.decision_function(rows), rtol=0, atol=1e-5)
    np.testing.assert_allclose(engine.source.output(rows), model.decision_function(rows), rtol=0, atol=1e-5)


@pytest.mark.parametrize("event", [1, 0])
def test_one_class_weights_are_read_as_onnx_runtime_derives_the_other_class(tmp_path: Path, event: int) -> None:
    """skl2onnx writes a binary forest's and boosting's weights for one class id only: ONNX Runtime returns
    [1 − s, s] for the forest (all weights positive) and [sigmoid(−s), sigmoid(s)] for the boosting."""
    x, y = _synthetic(ROWS, 5, seed=6)
    forest = RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0).fit(x, y)
    boosting = GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(x, y)
    rows = _synthetic(300, 5, seed=7)[0]
    output = OnnxOutput(**{**ZIPMAP.model_dump(), "event_label": event})
    for model, expected in (
        (forest, forest.predict_proba(rows)[:, event]),
        (boosting, boosting.decision_function(rows) * (1 if event == 1 else -1)),
    ):
        proto = onnx.load(str(_sklearn_onnx(model, x, tmp_path / "m.onnx")))
        weights = next(a for a in proto.graph.node[0].attribute if a.name == "class_ids")
        assert set(weights.ints) == {0}, (
            "the converter wrote weights of both classes: this test no longer covers the binary case"
        )
        explained = inference_onnx_explained_node(proto, output)
        trees, _ = inference_onnx_counted_trees(explained, x)
        total = inference_treeshap_kernel(trees).contributions(rows).sum(axis=1)
        np.testing.assert_allclose(total, expected, rtol=0, atol=1e-5)
        assert explained.scale(output) == ("probability" if model is forest else "margin")


def test_a_logistic_pipeline_export_gives_coefficient_times_value_minus_reference_mean(tmp_path: Path) -> None:
    x, y = _synthetic(ROWS, 5, seed=8, missing=0.03)
    model = make_pipeline(SimpleImputer(), StandardScaler(), LogisticRegression()).fit(x, y)
    output = OnnxOutput(
        name="probabilities", kind="probability", event_index=1, event_label=1, classes=[0, 1], clip=1e-7
    )
    path = _sklearn_onnx(model, x, tmp_path / "lr.onnx", zipmap=False)
    reference, rows = _synthetic(1000, 5, seed=9, missing=0.03)[0], _synthetic(200, 5, seed=10, missing=0.03)[0]

    explanation, notes = inference_onnx_registration_explanation(path, output, reference, reference)
    source = inference_onnx_contributions(path, _metadata(path, 5, output, explanation)).source

    assert explanation.method == "linear" and explanation.scale == "margin" and "after its Imputer, Scaler" in notes[0]
    columns = model[:-1].transform(reference)
    np.testing.assert_allclose(explanation.reference_mean, columns.mean(axis=0), rtol=0, atol=1e-6)
    coef = model[-1].coef_[0]
    expected = coef * (model[:-1].transform(rows) - columns.mean(axis=0))
    ours = source.values(rows, None)[0]
    print(f"LogisticRegression export: max |contribution − coef × (x − mean)| = {np.abs(ours - expected).max():.2g}")
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours.sum(axis=1) + source.bias, model.decision_function(rows), rtol=0, atol=1e-5)


def test_an_mlp_or_a_split_the_table_does_not_read_keeps_reasons_off_saying_why(tmp_path: Path) -> None:
    x, y = _synthetic(ROWS, 5, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp = MLPClassifier(hidden_layer_sizes=(8,), max_iter=200, random_state=0).fit(x, y)
    explanation, notes = inference_onnx_registration_explanation(
        _sklearn_onnx(mlp, x, tmp_path / "mlp.onnx"), ZIPMAP, x, x
    )
    assert (explanation.method, explanation.detail, notes) == ("none", NO_NODE, [])

    forest = RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0).fit(x, y)
    proto = onnx.load(str(_sklearn_onnx(forest, x, tmp_path / "rf.onnx")))
    modes = next(a for a in proto.graph.node[0].attribute if a.name == "nodes_modes")
    modes.strings[:] = [b"BRANCH_GT" if m == b"BRANCH_LEQ" else m for m in modes.strings]
    explanation, _ = inference_onnx_registration_explanation(_saved(proto, tmp_path / "gt.onnx"), ZIPMAP, x, x)
    assert explanation.method == "none" and "splits with BRANCH_GT" in explanation.detail, explanation

    # A forest trained on missing values splits them apart at +inf; skl2onnx keeps the threshold, not their side.
    holey, informative = _synthetic(ROWS, 5, seed=13)
    holey[(informative == 1) & (np.arange(ROWS) % 2 == 0), 4] = np.nan
    forest = RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0).fit(holey, informative)
    explanation, _ = inference_onnx_registration_explanation(
        _sklearn_onnx(forest, holey, tmp_path / "nan.onnx"), ZIPMAP, holey, holey
    )
    assert (
        explanation.method == "none"
        and "splits at inf (what a scikit-learn tree trained on missing values writes)" in explanation.detail
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    """A user's project with the churn job scaffolded, the model inputs of the training, hold-out and scored
    days, the scored day's labels, and a `score` that runs the CLI in a subprocess."""
    root = tmp_path_factory.mktemp("onnx-reasons")
    score = score_cli(root, user_project_env(root))
    churn_project(
        root,
        score,
        train_days=TRAIN_DAYS,
        holdout_day=HOLDOUT_DAY,
        scored_days=[SCORED_DAY],
        rows=ROWS,
        seed=300,
        features_of=[
            ("train.parquet", "train_inputs"),
            ("holdout.parquet", "holdout_inputs"),
            (raw_partition(SCORED_DAY), "scored_inputs"),
        ],
    )
    return root, score


def _registered(root: Path, score, path: Path, *extra: str) -> tuple[str, dict, str]:  # noqa: ANN001
    registered = score(
        "register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), "--promote", *extra
    )
    version = registered_version(registered.stdout)
    return (
        version,
        json.loads((root / "data" / "models" / "churn" / version / "metadata.json").read_text()),
        registered.stdout,
    )


def _published_against(root: Path, dataset: str, margin, contributions) -> tuple[pl.DataFrame, int]:  # noqa: ANN001
    """The scored day's predictions (or shadow predictions) beside the framework's margins; and how many explained
    rows' reasons equal the top-k positive independent contributions (rows a float-noise gap could reorder left out)."""
    predictions = day_output(root, dataset, SCORED_DAY)
    x, _, _, ids = model_inputs(root / "scored_inputs.parquet")
    position = {e: i for i, e in enumerate(ids.cast(pl.String).to_list())}
    index = np.array([position[e] for e in predictions["entity_id"].to_list()])
    joined = predictions.with_columns(pl.Series("framework_margin", np.asarray(margin(x))[index]))
    explained = predictions.filter(pl.col("decision").is_in(["act", "manual_review"]))
    rows = np.array([position[e] for e in explained["entity_id"].to_list()])
    values = np.asarray(contributions(x[rows]))
    codes = [f"R0{j + 1}" for j in range(values.shape[1])]
    compared = 0
    for published, row in zip(explained["reason_codes"].to_list(), values, strict=True):
        ranked = np.sort(row)[::-1][:4]
        if np.any(np.abs(np.diff(ranked)) < TIE) or np.any(np.abs(ranked[:3]) < TIE):
            continue
        order = np.argsort(-row, kind="stable")[:3]
        assert published == ([codes[j] for j in order if row[j] > 0] or ["R00"]), (published, row)
        compared += 1
    return joined, compared


def _margins_close(joined: pl.DataFrame) -> float:
    """Largest |published raw margin − framework margin|, asserted within ONNX Runtime's float32 rounding of p."""
    margin, theirs = joined["raw_margin"].to_numpy(), joined["framework_margin"].to_numpy()
    p = 1 / (1 + np.exp(-theirs))
    np.testing.assert_array_less(np.abs(margin - theirs), 1e-5 + 4 * FLOAT32_SPACING / (p * (1 - p)))
    return float(np.abs(margin - theirs).max())


def test_a_lightgbm_onnx_export_publishes_lightgbms_margins_and_reasons(project, tmp_path: Path) -> None:
    root, score = project
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    model = lgb.LGBMClassifier(n_estimators=40, num_leaves=15, learning_rate=0.1, verbose=-1).fit(x, y)
    path = _lightgbm_onnx(model, x.shape[1], tmp_path / "churn_lgb.onnx")

    # The training rows as the reference: the counted cover is LightGBM's own, so are the reasons.
    version, metadata, stdout = _registered(root, score, path, "--reference", str(root / "train.parquet"))
    explanation = metadata["explanation"]
    assert (explanation["method"], explanation["scale"], explanation["cover_rows"]) == (
        "treeshap",
        "margin",
        x.shape[0],
    )
    assert "local accuracy" in explanation["checked_against"] and explanation["max_abs_diff"] <= 1e-5
    start = np.cumsum([0] + [len(c) for c in _lightgbm_counts(model.booster_)])
    assert [sorted(explanation["node_cover"][a:b]) for a, b in itertools.pairwise(start)] == _lightgbm_counts(
        model.booster_
    )
    assert "exact TreeSHAP of the graph's TreeEnsembleClassifier (40 trees), adding up to the margin" in " ".join(
        stdout.split()
    )
    assert "reasons off" not in score("validate", "churn").stdout

    score("run", "churn", "--date", str(SCORED_DAY))
    joined, compared = _published_against(
        root,
        "predictions",
        lambda rows: model.booster_.predict(rows, raw_score=True),
        lambda rows: model.booster_.predict(rows, pred_contrib=True)[:, :-1],
    )
    print(
        f"LightGBM export through the CLI: max |margin − raw_score| = {_margins_close(joined):.2g}; reasons compared on {compared} rows"
    )
    assert (joined["model_version"] == version).all()
    assert compared >= 0.9 * joined.filter(pl.col("decision") != "no_action").height > 0
    fallback = day_output(root, "reports/fallback", SCORED_DAY)
    assert fallback.filter(pl.col("kind") == "reasons_unavailable")["rows"].sum() == 0
    assert (
        "realized performance"
        in score("outcomes", "churn", "--start", str(SCORED_DAY), "--end", str(SCORED_DAY)).stdout
    )


def test_a_random_forest_onnx_challenger_behind_an_xgboost_champion_publishes_scikit_learns_margins_and_reasons(
    project, tmp_path: Path
) -> None:
    root, score = project
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    model: Pipeline = make_pipeline(
        SimpleImputer(), RandomForestClassifier(n_estimators=20, max_depth=5, random_state=0)
    ).fit(x, y)
    challenger, metadata, stdout = _registered(root, score, _sklearn_onnx(model, x, tmp_path / "churn_rf.onnx"))
    explanation = metadata["explanation"]
    holdout, _, _, _ = model_inputs(root / "holdout_inputs.parquet")
    # A forest averages probabilities: its contributions add up to the probability, the cover counted on the hold-out.
    assert (explanation["method"], explanation["scale"], explanation["cover_rows"]) == (
        "treeshap",
        "probability",
        holdout.shape[0],
    )
    assert "adding up to the event's probability" in " ".join(stdout.split())

    import xgboost as xgb

    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "seed": 1}, xgb.DMatrix(x, label=y, missing=np.nan), 40
    )
    booster.save_model(str(tmp_path / "champion.ubj"))
    champion, _, _ = _registered(root, score, tmp_path / "champion.ubj")
    spec_path = root / "jobs" / "churn.yaml"
    scaffolded = spec_path.read_text()
    try:
        spec_path.write_text(
            scaffolded.replace("  version: champion", f'  version: "{champion}"\n  challenger: "{challenger}"')
        )
        assert "reasons off" not in score("validate", "churn").stdout
        score("run", "churn", "--date", str(SCORED_DAY))
    finally:
        spec_path.write_text(scaffolded)

    fallback = day_output(root, "reports/fallback", SCORED_DAY)
    totals = {r["kind"]: r["rows"] for r in fallback.unique("kind", keep="first", maintain_order=True).to_dicts()}
    assert totals["challenger_failed"] == 0 and totals["reasons_unavailable"] == 0
    predictions = day_output(root, "predictions", SCORED_DAY)
    assert (predictions["model_version"] == champion).all()
    assert predictions.filter(pl.col("decision") != "no_action")["reason_codes"].list.len().min() >= 1
    forest = model[-1]
    trees = _sklearn_trees(
        forest.estimators_,
        model[0].transform(holdout).astype(np.float32),
        lambda tree: tree.value[:, 0, 1] / tree.value[:, 0, :].sum(axis=1) / forest.n_estimators,
    )

    def margin(rows: np.ndarray) -> np.ndarray:
        p = np.clip(model.predict_proba(rows)[:, 1], 1e-7, 1 - 1e-7)
        return np.log(p) - np.log1p(-p)

    def shapley(rows: np.ndarray) -> np.ndarray:
        return _brute_force_shapley(trees, model[0].transform(rows).astype(np.float32), 0.0)[:, :-1]

    joined, compared = _published_against(root, "shadow_predictions", margin, shapley)
    print(
        f"RandomForest export through the CLI: max |margin − logit(predict_proba)| = {_margins_close(joined):.2g}; reasons compared on {compared} rows"
    )
    assert (joined["model_version"] == challenger).all() and joined.height == predictions.height
    assert compared >= 0.9 * joined.filter(pl.col("decision") != "no_action").height > 0


def test_check_model_takes_the_tree_exports_one_line_per_check(project, tmp_path: Path) -> None:
    from tasks.inference.onnx_check import inference_check_onnx_path

    root, score = project
    x, y = _synthetic(ROWS, 5, seed=12, missing=0.03)
    sample = np.nan_to_num(x[:64])
    boosting = lgb.LGBMClassifier(n_estimators=20, num_leaves=7, verbose=-1).fit(x, y)
    models = {
        "rf": (
            make_pipeline(SimpleImputer(), RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0)).fit(
                x, y
            ),
            None,
        ),
        "gb": (
            make_pipeline(
                SimpleImputer(), GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0)
            ).fit(x, y),
            None,
        ),
        "lgb": (boosting, True),
        "lgb_tensor": (boosting, False),
    }
    for name, (model, zipmap) in models.items():
        folder = tmp_path / name
        folder.mkdir()
        if zipmap is None:
            _sklearn_onnx(model, x, folder / "model.onnx")
        else:
            _lightgbm_onnx(model, 5, folder / "model.onnx", zipmap=zipmap)
        np.savez(folder / "reference_io.npz", inputs=sample, outputs=model.predict_proba(sample).astype(np.float32))
        report = inference_check_onnx_path(folder)
        assert report.ok, (name, report.checks)

    checked = score("check-model", str(tmp_path / "lgb"))
    assert checked.stdout.rstrip().splitlines()[-1] == "ok", checked.stdout
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in checked.stdout.splitlines()
        if line.count("│") >= 3
    }
    assert {rows.get(name) for name in ("shapes", "numerics", "operators")} == {"passed"}, checked.stdout
    # onnxmltools declares the label output (1,): said, and not failed, as registration scores the probabilities.
    flat = " ".join(checked.stdout.replace("│", " ").split())
    assert "not scored, so not failed: output 'label': declared (1,), ONNX Runtime returns (64,)" in flat, (
        checked.stdout
    )
