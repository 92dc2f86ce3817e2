"""scikit-learn models saved with skops, scored and explained as the models themselves compute.

Unit level: gradient boosting (after an imputer), a random forest and histogram gradient boosting (both on
rows with NaN) and a scaled logistic regression are registered in-process; the engine's margins equal the
model's own decision_function or logit(predict_proba), and its contributions equal an independent brute-force
path-dependent Shapley computation here (every subset of the features, E[f(x) | x_S] by cover weighting, as
Lundberg et al. define it) or coefficient × (value − reference mean) in numpy.

End to end, as a user: `score register` (with `--trust` for the types skops does not trust by default),
`validate`, `run`, `outcomes` for GB, RF and LR; published margins equal scikit-learn's own and published
reasons equal the top-k of the independent contributions. A scikit-learn challenger behind an XGBoost
champion, an MLP that scores with reasons counted unavailable, and refusals with one line and nothing written.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml

pytest.importorskip("sklearn")
skops_io = pytest.importorskip("skops.io")

from conftest import user_project_env  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LogisticRegression, Ridge  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from user_projects import (  # noqa: E402
    assert_nothing_registered,
    churn_project,
    day_output,
    model_inputs,
    registered_version,
    registry_versions,
    score_cli,
)

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

TREE = "sklearn.tree._tree.Tree"
HIST_TREE = "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor"
DTYPE = "numpy.dtype"
ADAM = "sklearn.neural_network._stochastic_optimizers.AdamOptimizer"
CLIP = 1e-7
TRAIN_DAYS = [dt.date(2026, 10, 1), dt.date(2026, 10, 2)]
HOLDOUT_DAY = dt.date(2026, 10, 3)
SCORED_DAYS = [dt.date(2026, 10, 4), dt.date(2026, 10, 5), dt.date(2026, 10, 6)]
ROWS = 2000


# ---- independent references -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tree:
    """One tree as scikit-learn stores it: `x <= threshold` goes left (compared in float64), NaN by `nan_left`."""

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    nan_left: np.ndarray
    cover: np.ndarray
    value: np.ndarray


def _reference_trees(final) -> tuple[list[_Tree], float]:  # noqa: ANN001
    """The classifier's trees and what their leaves are added to, read off the fitted model."""
    if isinstance(final, RandomForestClassifier):
        n = len(final.estimators_)
        return [
            _Tree(
                t.children_left,
                t.children_right,
                t.feature,
                t.threshold,
                t.missing_go_to_left.astype(bool),
                t.weighted_n_node_samples,
                t.value[:, 0, 1] / n,
            )
            for t in (e.tree_ for e in final.estimators_)
        ], 0.0
    if isinstance(final, GradientBoostingClassifier):
        prior = final.init_.class_prior_[1]
        return [
            _Tree(
                t.children_left,
                t.children_right,
                t.feature,
                t.threshold,
                np.zeros(t.node_count, bool),
                t.weighted_n_node_samples,
                final.learning_rate * t.value[:, 0, 0],
            )
            for t in (e.tree_ for e in final.estimators_[:, 0])
        ], math.log(prior / (1 - prior))
    assert isinstance(final, HistGradientBoostingClassifier)
    trees = []
    for (predictor,) in final._predictors:
        nodes = predictor.nodes
        leaf = nodes["is_leaf"].astype(bool)
        trees.append(
            _Tree(
                np.where(leaf, -1, nodes["left"].astype(np.int64)),
                nodes["right"].astype(np.int64),
                nodes["feature_idx"],
                nodes["num_threshold"],
                nodes["missing_go_to_left"].astype(bool),
                nodes["count"].astype(float),
                nodes["value"],
            )
        )
    return trees, float(np.ravel(final._baseline_prediction)[0])


def _brute_force_shapley(trees: list[_Tree], bias: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows × features Shapley values of v(S) = E[f(x) | x_S], the trees' sum f(x)), over all 2^m subsets."""
    n, m = x.shape
    masks = np.array([[(s >> j) & 1 for j in range(m)] for s in range(2**m)], dtype=bool)
    values = np.zeros((2**m, n))
    x64 = x.astype(np.float64)
    for tree in trees:

        def expected(node: int, tree=tree) -> np.ndarray:
            if tree.left[node] < 0:
                return np.full((2**m, n), float(tree.value[node]))
            lo, hi = int(tree.left[node]), int(tree.right[node])
            below, above = expected(lo, tree), expected(hi, tree)
            column = x64[:, tree.feature[node]]
            left = np.where(np.isnan(column), tree.nan_left[node], column <= tree.threshold[node])
            known = np.where(left, below, above)
            unknown = (tree.cover[lo] * below + tree.cover[hi] * above) / (tree.cover[lo] + tree.cover[hi])
            return np.where(masks[:, tree.feature[node]][:, None], known, unknown)

        values += expected(0)
    phi = np.zeros((n, m))
    for j in range(m):
        for s in range(2**m):
            if not (s >> j) & 1:
                size = bin(s).count("1")
                phi[:, j] += (
                    math.factorial(size)
                    * math.factorial(m - size - 1)
                    / math.factorial(m)
                    * (values[s | 1 << j] - values[s])
                )
    return phi, bias + values[-1]


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, CLIP, 1 - CLIP)
    return np.log(p / (1 - p))


def _own_margin(kind: str, model, x: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """What scikit-learn itself says, on the product's float32 rows (their exact float64 values for the linear model)."""
    if kind == "rf":
        return _logit(model.predict_proba(x)[:, 1])
    return model.decision_function(x.astype(np.float64) if kind == "lr" else x)


def _independent_contributions(kind: str, model, x: np.ndarray, reference: np.ndarray) -> np.ndarray:  # noqa: ANN001
    final = model[-1] if isinstance(model, Pipeline) else model
    if kind == "lr":
        columns, reference_columns = (model[:-1].transform(r.astype(np.float64)) for r in (x, reference))
        return final.coef_[0] * (columns - reference_columns.mean(axis=0))
    rows = model[:-1].transform(x) if isinstance(model, Pipeline) else x
    trees, bias = _reference_trees(final)
    phi, total = _brute_force_shapley(trees, bias, rows)
    # The reference itself adds up to the model's own output (probabilities for the forest).
    own = final.predict_proba(rows)[:, 1] if kind == "rf" else final.decision_function(rows)
    np.testing.assert_allclose(total, own, rtol=0, atol=1e-9)
    return phi


def _fitted(kind: str, x: np.ndarray, y: np.ndarray):  # noqa: ANN202
    model = {
        "gb": lambda: make_pipeline(
            SimpleImputer(), GradientBoostingClassifier(n_estimators=40, max_depth=3, random_state=0)
        ),
        "rf": lambda: RandomForestClassifier(n_estimators=30, max_depth=6, min_samples_leaf=5, random_state=0),
        "hgb": lambda: HistGradientBoostingClassifier(max_iter=30, max_depth=4, random_state=0),
        "lr": lambda: make_pipeline(SimpleImputer(), StandardScaler(), LogisticRegression(max_iter=500)),
        "mlp": lambda: make_pipeline(
            SimpleImputer(), StandardScaler(), MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0)
        ),
    }[kind]()
    from threadpoolctl import threadpool_limits

    # One OpenMP thread: histogram boosting's threads spin-wait for seconds on a busy two-core machine.
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(x, y)


UNTRUSTED = {"gb": [DTYPE, TREE], "rf": [TREE], "hgb": [HIST_TREE], "lr": [DTYPE], "mlp": [DTYPE, ADAM]}
"""What skops 0.16 does not trust by default in each model: the user reviews and names these with --trust."""


def _saved(model, path: Path) -> Path:  # noqa: ANN001
    skops_io.dump(model, str(path))
    return path


# ---- unit level --------------------------------------------------------------------------------------------


def _synthetic(rows: int = ROWS, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    x[:, 3] = rng.integers(0, 3, rows)
    # Feature 4 is only ever 1 or missing, and missing is risky: the trees split "missing or not", which
    # scikit-learn writes as a threshold of +inf.
    x[:, 4] = np.where(rng.random(rows) < 0.3, np.nan, 1.0)
    logit = 0.9 * x[:, 0] - 0.7 * x[:, 1] * (x[:, 2] > 0) + 0.5 * x[:, 3] + 0.8 * np.isnan(x[:, 4]) - 0.8
    y = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    x[rng.random(rows) < 0.1, 1] = np.nan
    return x, y


@pytest.mark.parametrize("kind", ["gb", "rf", "hgb", "lr"])
def test_the_engine_gives_the_models_own_margins_and_exact_contributions(tmp_path: Path, kind: str) -> None:
    from tasks.contracts import InferenceInput
    from tasks.inference.engine import inference_engine
    from tasks.inference.registry import inference_model_artifact
    from tasks.jobs.registration import registered_model_version

    x, y = _synthetic()
    train, holdout = slice(0, 1200), slice(1200, None)
    model = _fitted(kind, x[train], y[train])
    path = _saved(model, tmp_path / f"{kind}.skops")
    assert skops_io.get_untrusted_types(file=str(path)) == UNTRUSTED[kind]
    features = tuple(f"f{j}" for j in range(5))
    report = registered_model_version(
        path,
        registry_dir=tmp_path / "registry" / kind,
        feature_version="1",
        features=features,
        holdout_features=x[holdout],
        holdout_outcomes=y[holdout],
        trusted_types=tuple(UNTRUSTED[kind]),
    )
    artifact = inference_model_artifact(tmp_path / "registry" / kind, report.version)
    meta = artifact.metadata
    assert meta.skops_trusted == UNTRUSTED[kind]
    assert meta.sklearn_output.method == ("predict_proba" if kind == "rf" else "decision_function")
    assert (meta.explanation.method, meta.explanation.scale) == (
        ("linear", "margin") if kind == "lr" else ("treeshap", "probability" if kind == "rf" else "margin")
    )
    assert meta.explanation.max_abs_diff < 1e-9 and "local accuracy" in meta.explanation.checked_against

    engine = inference_engine(artifact)
    rows = np.ascontiguousarray(x[holdout])
    batch = InferenceInput(
        chunk_id=0, entity_ids=pa.array(np.arange(rows.shape[0]).astype(str)), features=rows, feature_names=features
    )
    margins = engine.inference_outputs(batch).margins
    assert margins.dtype == np.float64
    np.testing.assert_allclose(margins, _own_margin(kind, model, rows), rtol=0, atol=1e-6)

    if kind in ("rf", "hgb"):
        # Among the splits: "missing or not" (+inf), which the kernel must take as every number going left.
        final = model[-1] if isinstance(model, Pipeline) else model
        assert any(np.isinf(t.threshold).any() for t in _reference_trees(final)[0])

    explained = np.arange(0, rows.shape[0], 13)  # ~60 rows, with and without NaN
    assert np.isnan(rows[explained]).any()
    ours = engine.inference_contributions(batch, explained).values
    theirs = _independent_contributions(kind, model, rows[explained], x[holdout])
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    ("make", "detail", "note"),
    [
        (
            "pca",
            "a scikit-learn Pipeline of SimpleImputer, PCA and LogisticRegression (its step 'pca' (PCA) does not map each "
            "feature to one column of its own)",
            "the log-odds it computes its probabilities from",
        ),
        (
            "svc",
            "a scikit-learn Pipeline of SimpleImputer and SVC",
            "a raw score (not a log-odds), calibrated as it is",
        ),
    ],
)
def test_a_model_without_exact_contributions_scores_with_its_own_margins_and_reasons_off(
    tmp_path: Path, make: str, detail: str, note: str
) -> None:
    from sklearn.decomposition import PCA
    from sklearn.svm import SVC

    from tasks.contracts import InferenceInput
    from tasks.errors import DeviceUnavailable
    from tasks.inference.engine import inference_engine
    from tasks.inference.registry import inference_model_artifact
    from tasks.jobs.registration import registered_model_version

    x, y = _synthetic()
    model = (
        make_pipeline(SimpleImputer(), PCA(3), LogisticRegression())
        if make == "pca"
        else make_pipeline(SimpleImputer(), SVC())
    )
    path = _saved(model.fit(x[:1200], y[:1200]), tmp_path / f"{make}.skops")
    features = tuple(f"f{j}" for j in range(5))
    report = registered_model_version(
        path,
        registry_dir=tmp_path / "registry" / make,
        feature_version="1",
        features=features,
        holdout_features=x[1200:],
        holdout_outcomes=y[1200:],
        trusted_types=(DTYPE,),
    )
    artifact = inference_model_artifact(tmp_path / "registry" / make, report.version)
    assert (artifact.metadata.explanation.method, artifact.metadata.explanation.detail) == ("none", detail)
    assert any(note in line for line in report.notes) and any("reasons off" in line for line in report.notes), (
        report.notes
    )
    engine = inference_engine(artifact)
    assert engine.contributions_source is None and detail in engine.reasons_unavailable
    rows = np.ascontiguousarray(x[1200:])
    batch = InferenceInput(
        chunk_id=0, entity_ids=pa.array(np.arange(rows.shape[0]).astype(str)), features=rows, feature_names=features
    )
    np.testing.assert_allclose(
        engine.inference_outputs(batch).margins, model.decision_function(rows.astype(np.float64)), rtol=0, atol=1e-9
    )
    with pytest.raises(DeviceUnavailable, match="scikit-learn models score on CPU only"):
        inference_engine(artifact, device="cuda")


def test_a_tree_whose_stored_nodes_point_out_of_range_is_refused_even_when_trusted(tmp_path: Path) -> None:
    """skops distrusts scikit-learn's tree storage because a crafted file can hold child indices scikit-learn
    follows without bounds checks; a user who trusts the type is still protected."""
    from tasks.errors import ModelArtifactError
    from tasks.inference.engine_sklearn import inference_input_problem

    x, y = _synthetic(400)
    forest = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(x, y)
    tree = forest.estimators_[1].tree_
    state = tree.__getstate__()
    nodes = state["nodes"].copy()
    nodes["right_child"][0] = 10**6
    tree.__setstate__({**state, "nodes": nodes})
    path = _saved(forest, tmp_path / "crafted.skops")
    problem = inference_input_problem(path, tuple(f"f{j}" for j in range(5)), trusted_types=(TREE,))
    assert problem is not None and "node 0 with children" in problem and "1000000" in problem, problem
    with pytest.raises(ModelArtifactError, match="out of range"):
        from tasks.inference.engine_sklearn import _loaded

        _loaded(path, (TREE,))


def test_an_estimator_that_rejects_missing_inputs_is_refused_naming_it_and_the_rows(tmp_path: Path) -> None:
    from tasks.errors import ModelArtifactError
    from tasks.jobs.registration import registered_model_version

    x, y = _synthetic()
    model = GradientBoostingClassifier(n_estimators=10, random_state=0).fit(np.nan_to_num(x[:1200]), y[:1200])
    path = _saved(model, tmp_path / "gb.skops")
    missing = int(np.isnan(x[1200:]).any(axis=1).sum())
    with pytest.raises(ModelArtifactError) as refused:
        registered_model_version(
            path,
            registry_dir=tmp_path / "registry" / "gb",
            feature_version="1",
            features=tuple(f"f{j}" for j in range(5)),
            holdout_features=x[1200:],
            holdout_outcomes=y[1200:],
            trusted_types=(TREE,),
        )
    message = str(refused.value)
    assert "\n" not in message and str(path) in message
    assert "is a scikit-learn GradientBoostingClassifier, which rejects missing inputs" in message
    assert f"{missing} of the hold-out's 800 rows have missing inputs (NaN)" in message, message
    assert not (tmp_path / "registry").exists() or not any((tmp_path / "registry").rglob("metadata.json"))


def test_trust_is_refused_for_a_model_that_is_not_a_skops_file(tmp_path: Path) -> None:
    import xgboost as xgb

    from tasks.errors import ModelArtifactError
    from tasks.jobs.registration import registered_model_version

    x, y = _synthetic(400)
    xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(x, label=y), 3).save_model(str(tmp_path / "model.ubj"))
    with pytest.raises(
        ModelArtifactError,
        match=r"is not a scikit-learn .skops file \(xgboost\): --trust names types a .skops file may hold",
    ):
        registered_model_version(
            tmp_path / "model.ubj",
            registry_dir=tmp_path / "registry" / "m",
            feature_version="1",
            features=tuple(f"f{j}" for j in range(5)),
            holdout_features=x,
            holdout_outcomes=y,
            trusted_types=(TREE,),
        )


# ---- end to end, as a user -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    """A user's churn project: training, hold-out and scored days (labels for the scored days), the model
    inputs of the training, the hold-out and every scored row (`score features`), and a `score` that runs the CLI."""
    root = tmp_path_factory.mktemp("sklearn-byo")
    score = score_cli(root, user_project_env(root))
    churn_project(
        root,
        score,
        train_days=TRAIN_DAYS,
        holdout_day=HOLDOUT_DAY,
        scored_days=SCORED_DAYS,
        rows=ROWS,
        seed=500,
        features_of=[
            ("train.parquet", "train_inputs"),
            ("holdout.parquet", "holdout_inputs"),
            ("data/raw/churn", "scored_inputs"),
        ],
    )
    return root, score


def _trusting(kinds: list[str]) -> list[str]:
    return [arg for t in kinds for arg in ("--trust", t)]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    return _flat(lines[0])


def _assert_reasons(
    published: pl.DataFrame, position: dict[str, int], values: np.ndarray, names: list[str], root: Path
) -> int:
    """Every published reason list is the top-k positive contributions of `values` (rows by `position`), ties
    within 1e-9 in either order; returns how many rows were checked."""
    reasons = yaml.safe_load((root / "jobs" / "churn.yaml").read_text())["prediction"]["reasons"]
    code_of = [reasons["codes"][name]["code"] for name in names]
    k = reasons["top_k"]
    checked = 0
    for entity, codes in zip(published["entity_id"], published["reason_codes"], strict=True):
        row = values[position[entity]]
        order = np.argsort(-row, kind="stable")
        expected = [code_of[j] for j in order[:k] if row[j] > 0] or [reasons["no_reason_code"]]
        got = codes.to_list()
        if got != expected:
            value_of = {code_of[j]: row[j] for j in range(len(names))}
            assert len(got) == len(expected) and all(
                abs(value_of.get(a, 0) - value_of.get(b, 0)) < 1e-9 for a, b in zip(got, expected, strict=True)
            ), (
                entity,
                got,
                expected,
                row,
            )
        checked += 1
    return checked


@dataclass(frozen=True)
class _Scored:
    model: object
    version: str
    registered: str
    day: dt.date
    dataset: str
    """Where its rows were published: `predictions` as the champion, `shadow_predictions` as the challenger."""


@dataclass(frozen=True)
class _Runs:
    models: dict[str, _Scored]
    validated: list[str]
    outcomes: str
    xgboost: str
    refused: subprocess.CompletedProcess
    refused_path: Path
    versions_before_refusal: list[str]
    versions_after_refusal: list[str]


@pytest.fixture(scope="module")
def runs(project, tmp_path_factory: pytest.TempPathFactory) -> _Runs:
    """The user's models, each trained as their script would, saved with skops and registered with `--trust` for
    what skops flags (the forest tried first without it). Three runs, one a day, then the outcomes of the three days:
      1. the random forest as champion, gradient boosting shadowing it as challenger;
      2. an XGBoost champion, the logistic regression pipeline as challenger;
      3. an MLP as champion, which has no exact contributions.
    Each `score run` starts Prefect's temporary API (~15 s here): three runs cover every path a fourth would."""
    root, score = project
    folder = tmp_path_factory.mktemp("sklearn-models")
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    holdout = ("--holdout", str(root / "holdout.parquet"))
    models: dict[str, _Scored] = {}

    def registered(kind: str, day: dt.date, dataset: str) -> str:
        model = _fitted(kind, x, y)
        path = _saved(model, folder / f"{kind}.skops")
        assert skops_io.get_untrusted_types(file=str(path)) == UNTRUSTED[kind]
        done = score("register", "churn", "--model", str(path), *holdout, "--promote", *_trusting(UNTRUSTED[kind]))
        models[kind] = _Scored(model, registered_version(done.stdout), done.stdout, day, dataset)
        return models[kind].version

    spec_path = root / "jobs" / "churn.yaml"
    scaffolded = spec_path.read_text()
    refused_path = _saved(_fitted("rf", x, y), folder / "forest.skops")
    before = registry_versions(root)
    refused = score("register", "churn", "--model", str(refused_path), *holdout, ok=False)
    after = registry_versions(root)
    validated = []
    try:
        rf, gb = registered("rf", SCORED_DAYS[0], "predictions"), registered("gb", SCORED_DAYS[0], "shadow_predictions")
        spec_path.write_text(scaffolded.replace("  version: champion", f'  version: "{rf}"\n  challenger: "{gb}"'))
        validated.append(score("validate", "churn").stdout)
        score("run", "churn", "--date", str(SCORED_DAYS[0]))

        import xgboost as xgb

        booster = xgb.train(
            {"objective": "binary:logistic", "max_depth": 3, "seed": 1}, xgb.DMatrix(x, label=y, missing=np.nan), 40
        )
        booster.save_model(str(folder / "champion.ubj"))
        champion = registered_version(
            score("register", "churn", "--model", str(folder / "champion.ubj"), *holdout).stdout
        )
        lr = registered("lr", SCORED_DAYS[1], "shadow_predictions")
        spec_path.write_text(
            scaffolded.replace("  version: champion", f'  version: "{champion}"\n  challenger: "{lr}"')
        )
        validated.append(score("validate", "churn").stdout)
        score("run", "churn", "--date", str(SCORED_DAYS[1]))
    finally:
        spec_path.write_text(scaffolded)
    registered("mlp", SCORED_DAYS[2], "predictions")
    validated.append(score("validate", "churn").stdout)
    score("run", "churn", "--date", str(SCORED_DAYS[2]))
    outcomes = score("outcomes", "churn", "--start", str(SCORED_DAYS[0]), "--end", str(SCORED_DAYS[-1])).stdout
    return _Runs(models, validated, outcomes, champion, refused, refused_path, before, after)


@pytest.mark.parametrize("kind", ["gb", "rf", "lr"])
def test_a_skops_model_registers_validates_runs_and_meets_its_outcomes_with_its_own_margins_and_reasons(
    project, runs, kind: str
) -> None:
    root, _ = project
    model, version, day, dataset = (getattr(runs.models[kind], a) for a in ("model", "version", "day", "dataset"))
    flat = _flat(runs.models[kind].registered)
    assert "(sklearn, 5 features)" in flat
    if kind == "rf":
        assert "logit(p) of its predict_proba for class 1, p clipped to [1e-07, 1 − 1e-07]" in flat
        assert "on the probability scale" in flat and "not to its margin" in flat
    else:
        assert "the margin is its decision_function, the log-odds it computes its probabilities from" in flat
        assert ("exact linear contributions" if kind == "lr" else "exact TreeSHAP") in flat
    assert "reasons off" not in flat
    metadata = json.loads((root / "data" / "models" / "churn" / version / "metadata.json").read_text())
    assert metadata["skops_trusted"] == UNTRUSTED[kind]
    report = json.loads((root / "data" / "models" / "churn" / version / "registration.json").read_text())
    assert report["auc"] > 0.7, report["auc"]
    validated = runs.validated[SCORED_DAYS.index(day)]
    assert (
        f"challenger {version}: shadow-scored" if dataset == "shadow_predictions" else f"model churn {version}"
    ) in validated
    assert "reasons off" not in validated

    published = day_output(root, dataset, day)
    assert (published["model_version"] == version).all()
    scored_x, _, names, ids = model_inputs(root / "scored_inputs.parquet")
    position = {entity: i for i, entity in enumerate(ids)}
    rows = np.array([position[e] for e in published["entity_id"]])
    assert rows.size == sum(e.startswith(f"CU-{day:%m%d}-") for e in ids) > 0.99 * ROWS
    np.testing.assert_allclose(
        published["raw_margin"].to_numpy(), _own_margin(kind, model, scored_x[rows]), rtol=0, atol=1e-6
    )

    adverse = published.filter(pl.col("decision").is_in(["act", "manual_review"]))
    assert adverse.height > 50
    explained = np.array([position[e] for e in adverse["entity_id"]])
    values = np.zeros((len(ids), len(names)))
    values[explained] = _independent_contributions(
        kind, model, scored_x[explained], model_inputs(root / "holdout_inputs.parquet")[0]
    )
    assert _assert_reasons(adverse, position, values, names, root) == adverse.height
    fallback = day_output(root, "reports/fallback", day)
    assert (
        fallback.filter(pl.col("kind").is_in(["reasons_unavailable", "failed_chunk", "challenger_failed"]))[
            "rows"
        ].sum()
        == 0
    )

    outcomes = _flat(runs.outcomes)
    assert "realized performance" in outcomes
    if dataset == "predictions":
        assert f"{day}" in outcomes and version in outcomes, outcomes
    else:
        assert f"{day}: champion " in outcomes and f"vs challenger {version} on" in outcomes, outcomes


def test_an_untrusted_type_is_refused_naming_it_and_accepted_with_trust(project, runs) -> None:
    root, _ = project
    line = _one_error_line(runs.refused)
    assert str(runs.refused_path) in line
    assert f"holds types skops does not trust by default: ['{TREE}']" in line and f"--trust {TREE}" in line, line
    assert runs.versions_after_refusal == runs.versions_before_refusal
    # The same kind of file registered with --trust: loaded trusting exactly that type, at registration and at every run.
    metadata = json.loads(
        (root / "data" / "models" / "churn" / runs.models["rf"].version / "metadata.json").read_text()
    )
    assert metadata["skops_trusted"] == [TREE]


def test_a_skops_challenger_shadows_an_xgboost_champion_which_keeps_its_own_reasons(project, runs) -> None:
    root, _ = project
    day = runs.models["lr"].day
    predictions = day_output(root, "predictions", day)
    shadow = day_output(root, "shadow_predictions", day)
    assert (predictions["model_version"] == runs.xgboost).all() and shadow.height == predictions.height
    assert predictions.filter(pl.col("decision") != "no_action")["reason_codes"].list.len().min() >= 1
    fallback = day_output(root, "reports/fallback", day)
    totals = {r["kind"]: r["rows"] for r in fallback.unique("kind", keep="first", maintain_order=True).to_dicts()}
    assert totals["challenger_failed"] == 0 and totals["reasons_unavailable"] == 0


def test_an_mlp_scores_with_its_own_margins_and_its_reasons_counted_unavailable(project, runs) -> None:
    root, _ = project
    mlp = runs.models["mlp"]
    flat = _flat(mlp.registered)
    assert (
        "is a scikit-learn Pipeline of SimpleImputer, StandardScaler and MLPClassifier, which has no exact feature contributions"
        in flat
    )
    assert "reasons off" in flat and "reasons_unavailable" in flat
    assert "reasons off" in runs.validated[2]

    predictions = day_output(root, "predictions", mlp.day)
    assert (predictions["model_version"] == mlp.version).all()
    scored, _, _, ids = model_inputs(root / "scored_inputs.parquet")
    position = {entity: i for i, entity in enumerate(ids)}
    rows = np.array([position[e] for e in predictions["entity_id"]])
    p = mlp.model.predict_proba(scored[rows].astype(np.float64))[:, 1]
    np.testing.assert_allclose(predictions["raw_margin"].to_numpy(), _logit(p), rtol=0, atol=1e-6)
    needing = predictions.filter(pl.col("decision").is_in(["act", "manual_review"])).height
    assert needing > 0 and predictions["reason_codes"].list.len().max() == 0
    fallback = day_output(root, "reports/fallback", mlp.day)
    (row,) = fallback.filter(pl.col("kind") == "reasons_unavailable").to_dicts()
    assert row["rows"] == needing and "MLPClassifier" in row["detail"], row
    assert fallback.filter(pl.col("kind") == "failed_chunk")["rows"].sum() == 0
    assert mlp.version in _flat(runs.outcomes)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            "regressor",
            "is a scikit-learn Pipeline of SimpleImputer and Ridge, a regressor, but the job is binary (target.kind): register a "
            "binary classifier",
        ),
        (
            "three_classes",
            "is a scikit-learn Pipeline of SimpleImputer, StandardScaler and LogisticRegression with 3 classes [0, 1, 2]",
        ),
    ],
)
def test_a_regressor_or_a_multiclass_model_is_refused_with_one_line_and_nothing_written(
    project, tmp_path: Path, make: str, expected: str
) -> None:
    root, score = project
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    if make == "regressor":
        model = make_pipeline(SimpleImputer(), Ridge()).fit(x, y.astype(float))
    else:
        model = _fitted("lr", x, np.where(y == 1, 1, np.where(np.nan_to_num(x[:, 0]) > 36, 2, 0)))
    path = _saved(model, tmp_path / f"{make}.skops")
    before = registry_versions(root)

    refused = score(
        "register",
        "churn",
        "--model",
        str(path),
        "--holdout",
        str(root / "holdout.parquet"),
        "--trust",
        DTYPE,
        ok=False,
    )

    line = _one_error_line(refused)
    assert str(path) in line and expected in line, line
    assert_nothing_registered(root, before)
