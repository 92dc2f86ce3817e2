"""ONNX exports as converters write them, through the CLI as a user runs them: scikit-learn models
exported by skl2onnx with its default ZipMap and as a plain probability tensor are registered,
validated and scored, a logistic pipeline with exact linear reasons, an MLP with reasons off and
counted; a label-only and a multiclass export are refused with one line; `score check-model` takes a
ZipMap.

The models are trained here on the job's own model inputs (`score features`), and every margin the
run publishes is checked against scikit-learn's own `predict_proba` on the same rows, every reason
against coefficient × (value − hold-out mean) computed by numpy from scikit-learn's own pipeline.
"""

from __future__ import annotations

import datetime as dt
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import polars as pl
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")

from conftest import user_project_env  # noqa: E402
from skl2onnx import to_onnx  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
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

TRAIN_DAYS = [dt.date(2026, 10, 1), dt.date(2026, 10, 2)]
HOLDOUT_DAY, SCORED_DAY = dt.date(2026, 10, 3), dt.date(2026, 10, 4)
ROWS = 3000
FLOAT32_SPACING = 2.0**-24
"""ONNX Runtime returns float32 probabilities: p carries a rounding error up to this much, which its logit
multiplies by 1 / (p (1 − p))."""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    """A user's project with the churn job scaffolded, the model inputs of the training, hold-out and
    scored days, and a `score` that runs the CLI in a subprocess."""
    root = tmp_path_factory.mktemp("onnx-byo")
    score = score_cli(root, user_project_env(root))
    churn_project(
        root,
        score,
        train_days=TRAIN_DAYS,
        holdout_day=HOLDOUT_DAY,
        scored_days=[SCORED_DAY],
        rows=ROWS,
        seed=200,
        labels=False,
        features_of=[
            ("train.parquet", "train_inputs"),
            (raw_partition(SCORED_DAY), "scored_inputs"),
            ("holdout.parquet", "holdout_inputs"),
        ],
    )
    return root, score


def _fitted(kind: str, x: np.ndarray, y: np.ndarray) -> Pipeline:
    """The user's own model: missing charges imputed (the raw data has them), inputs scaled, then the classifier."""
    classifier = (
        LogisticRegression(max_iter=500)
        if kind == "logistic"
        else MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return make_pipeline(SimpleImputer(), StandardScaler(), classifier).fit(x, y)


def _exported(model: Pipeline, x: np.ndarray, path: Path, *, zipmap: bool) -> Path:
    options = None if zipmap else {id(model): {"zipmap": False}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx.save(to_onnx(model, x[:1], options=options, target_opset=17), path)
    return path


@pytest.mark.parametrize(
    ("kind", "zipmap", "output"),
    [
        ("logistic", True, "output_probability"),
        ("logistic", False, "probabilities"),
        ("mlp", True, "output_probability"),
        ("mlp", False, "probabilities"),
    ],
)
def test_a_scikit_learn_export_registers_validates_and_scores_with_its_probabilities_and_linear_reasons_or_none(
    project, tmp_path: Path, kind: str, zipmap: bool, output: str
) -> None:
    root, score = project
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    model = _fitted(kind, x, y)
    path = _exported(model, x, tmp_path / f"{kind}.onnx", zipmap=zipmap)

    registered = score(
        "register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), "--promote"
    )
    version = registered_version(registered.stdout)
    metadata = json.loads((root / "data" / "models" / "churn" / version / "metadata.json").read_text())
    chosen = metadata["onnx_output"]
    # Output 0 is the predicted label: the probabilities are taken instead, the event's class by its label.
    assert chosen["name"] == output and chosen["kind"] == ("zipmap" if zipmap else "probability")
    assert chosen["classes"] == [0, 1] and (chosen["event_label"] == 1) and chosen["clip"] == 1e-7
    assert chosen["event_index"] == (None if zipmap else 1)
    assert "margin = logit(p) with p clipped to [1e-07, 1 − 1e-07]" in registered.stdout
    reasons_off = kind == "mlp"
    assert ("reasons off" in registered.stdout and "reasons_unavailable" in registered.stdout) is reasons_off
    assert metadata["explanation"]["method"] == ("none" if reasons_off else "linear")
    report = json.loads((root / "data" / "models" / "churn" / version / "registration.json").read_text())
    assert report["auc"] > 0.7, report["auc"]

    validated = score("validate", "churn")
    assert ("reasons off" in validated.stdout and "reasons_unavailable" in validated.stdout) is reasons_off

    score("run", "churn", "--date", str(SCORED_DAY))
    predictions = day_output(root, "predictions", SCORED_DAY)
    assert (predictions["model_version"] == version).all()
    scored_x, _, _, ids = model_inputs(root / "scored_inputs.parquet")
    expected = pl.DataFrame(
        {
            "entity_id": ids.cast(pl.String),
            "sklearn_p": model.predict_proba(scored_x)[:, 1],
            "row": np.arange(ids.len()),
        }
    )
    joined = predictions.join(expected, on="entity_id", how="inner")
    assert joined.height == predictions.height == ids.len()
    p = joined["sklearn_p"].to_numpy()
    margin = joined["raw_margin"].to_numpy()
    # The published margin is scikit-learn's probability as log-odds (calibration aside): equal to 1e-5,
    # plus the logit's magnification of ONNX Runtime's float32 rounding of p.
    np.testing.assert_allclose(1 / (1 + np.exp(-margin)), p, rtol=0, atol=1e-5)
    np.testing.assert_array_less(np.abs(margin - np.log(p / (1 - p))), 1e-5 + 4 * FLOAT32_SPACING / (p * (1 - p)))

    needing = joined.filter(pl.col("decision").is_in(["act", "manual_review"]))
    assert needing.height > 0
    fallback = day_output(root, "reports/fallback", SCORED_DAY)
    (row,) = fallback.filter(pl.col("kind") == "reasons_unavailable").to_dicts()
    assert fallback.filter(pl.col("kind") == "failed_chunk")["rows"].sum() == 0
    if reasons_off:
        assert predictions["reason_codes"].list.len().max() == 0
        assert row["rows"] == needing.height and "ONNX graph" in row["detail"], row
        return
    assert row["rows"] == 0, row
    # Exact linear reasons: the top 3 positive coefficient × (value − hold-out mean), by numpy on scikit-learn's own pipeline.
    holdout_x, _, _, _ = model_inputs(root / "holdout_inputs.parquet")
    columns = model[:-1].transform(scored_x[needing["row"].to_numpy()])
    values = model[-1].coef_[0] * (columns - model[:-1].transform(holdout_x).mean(axis=0))
    compared = 0
    for published, contributions in zip(needing["reason_codes"].to_list(), values, strict=True):
        ranked = np.sort(contributions)[::-1][:4]
        if np.any(np.abs(np.diff(ranked)) < 1e-6) or np.any(np.abs(ranked[:3]) < 1e-6):
            continue
        order = np.argsort(-contributions, kind="stable")[:3]
        assert published == ([f"R0{j + 1}" for j in order if contributions[j] > 0] or ["R00"]), (
            published,
            contributions,
        )
        compared += 1
    assert compared >= 0.9 * needing.height


def test_a_spec_without_reasons_never_asks_an_onnx_model_for_them_and_an_onnx_challenger_shadows_without_them(
    project, tmp_path: Path
) -> None:
    root, score = project
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    onnx_version = registered_version(
        score(
            "register",
            "churn",
            "--model",
            str(_exported(_fitted("mlp", x, y), x, tmp_path / "mlp.onnx", zipmap=True)),
            "--holdout",
            str(root / "holdout.parquet"),
            "--promote",
        ).stdout
    )
    spec_path = root / "jobs" / "churn.yaml"
    scaffolded = spec_path.read_text()
    try:
        spec_path.write_text(scaffolded.replace("for_decisions: [act, manual_review]", "for_decisions: []"))
        assert "reasons off" not in score("validate", "churn").stdout
        score("run", "churn", "--date", str(SCORED_DAY))
        fallback = day_output(root, "reports/fallback", SCORED_DAY)
        assert fallback.filter(pl.col("kind") == "reasons_unavailable")["rows"].to_list() == [0]

        import xgboost as xgb

        booster = xgb.train(
            {"objective": "binary:logistic", "max_depth": 3, "seed": 1}, xgb.DMatrix(x, label=y, missing=np.nan), 40
        )
        booster.save_model(str(tmp_path / "champion.ubj"))
        champion = registered_version(
            score(
                "register",
                "churn",
                "--model",
                str(tmp_path / "champion.ubj"),
                "--holdout",
                str(root / "holdout.parquet"),
            ).stdout
        )
        spec_path.write_text(
            scaffolded.replace("  version: champion", f'  version: "{champion}"\n  challenger: "{onnx_version}"')
        )
        validated = score("validate", "churn")
        assert f"challenger {onnx_version}: model churn {onnx_version} is an ONNX graph" in validated.stdout
        score("run", "churn", "--date", str(SCORED_DAY))
        fallback = day_output(root, "reports/fallback", SCORED_DAY)
        totals = {r["kind"]: r["rows"] for r in fallback.unique("kind", keep="first", maintain_order=True).to_dicts()}
        assert totals["challenger_failed"] == 0 and totals["reasons_unavailable"] == 0
        shadow = day_output(root, "shadow_predictions", SCORED_DAY)
        predictions = day_output(root, "predictions", SCORED_DAY)
        assert shadow.height == predictions.height and (shadow["model_version"] == onnx_version).all()
        assert shadow["reason_codes"].list.len().max() == 0
        # The XGBoost champion keeps its reasons.
        assert predictions.filter(pl.col("decision") != "no_action")["reason_codes"].list.len().min() >= 1
    finally:
        spec_path.write_text(scaffolded)


def _label_only(model: Pipeline, x: np.ndarray, path: Path) -> Path:
    """skl2onnx's default export with its probability output removed: only the predicted label is left."""
    exported = _exported(model, x, path, zipmap=True)
    graph = onnx.load(str(exported))
    kept = [o for o in graph.graph.output if o.name == "output_label"]
    del graph.graph.output[:]
    graph.graph.output.extend(kept)
    onnx.save(graph, str(exported))
    return exported


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ("label_only", "output 'output_label' (shape (3000,), tensor(int64)) holds predicted class labels only"),
        (
            "three_classes",
            "output 'output_probability' (a sequence of 3000 maps, one per row, seq(map(int64,tensor(float)))) "
            "holds the probabilities of 3 classes [0, 1, 2]",
        ),
        (
            "three_classes_tensor",
            "output 'probabilities' (shape (3000, 3), tensor(float)) holds the probabilities of 3 classes [0, 1, 2]",
        ),
    ],
    ids=["label_only", "three_classes", "three_classes_tensor"],
)
def test_a_label_only_or_multiclass_export_is_refused_with_one_line_and_nothing_written(
    project, tmp_path: Path, make: str, expected: str
) -> None:
    root, score = project
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    if make == "label_only":
        path = _label_only(_fitted("logistic", x, y), x, tmp_path / "label.onnx")
    else:
        # A churn model that also tells a third class apart: long-tenure customers who stayed.
        three = np.where(y == 1, 1, np.where(np.nan_to_num(x[:, 0]) > 36, 2, 0))
        path = _exported(_fitted("logistic", x, three), x, tmp_path / "three.onnx", zipmap=make == "three_classes")
    before = registry_versions(root)

    refused = score("register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), ok=False)

    assert_one_error_line(refused, path, expected)
    assert_nothing_registered(root, before)


def test_check_model_takes_a_zipmap_export(project, tmp_path: Path) -> None:
    root, score = project
    x, y, _, _ = model_inputs(root / "train_inputs.parquet")
    model = _fitted("logistic", x, y)
    folder = tmp_path / "version"
    folder.mkdir()
    _exported(model, x, folder / "model.onnx", zipmap=True)
    sample = np.nan_to_num(x[:64])
    np.savez(folder / "reference_io.npz", inputs=sample, outputs=model.predict_proba(sample).astype(np.float32))

    checked = score("check-model", str(folder))

    assert checked.stdout.rstrip().splitlines()[-1] == "ok", checked.stdout
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in checked.stdout.splitlines()
        if line.count("│") >= 3
    }
    assert {rows.get(name) for name in ("shapes", "numerics", "operators")} == {"passed"}, checked.stdout
    flat = "".join(checked.stdout.replace("│", " ").split())
    assert "'output_probability'" in flat and "theprobabilityofclass1of[0,1]" in flat, checked.stdout
    # Without a reference the numbers cannot be compared: not ok, exit 1, still no traceback.
    (folder / "reference_io.npz").unlink()
    assert score("check-model", str(folder / "model.onnx"), ok=False).returncode == 1


def _graph(path: Path, nodes: list, output: onnx.ValueInfoProto, weights: np.ndarray) -> Path:
    """A torch-style export by hand: `x` (N × 3) times `w`, then `nodes`."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), *nodes],
        "user",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [output],
        [helper.make_tensor("w", TensorProto.FLOAT, list(weights.shape), weights.astype(np.float32).ravel().tolist())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_sigmoid_output_is_a_probability_and_two_logits_per_row_are_refused(tmp_path: Path) -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from tasks.errors import ModelArtifactError
    from tasks.inference.onnx_outputs import inference_onnx_margins, inference_registered_onnx_output

    rows = np.random.default_rng(3).normal(size=(200, 3)).astype(np.float32)
    w = np.array([[0.8], [-1.5], [0.3]])
    sigmoid = _graph(
        tmp_path / "sigmoid.onnx",
        [helper.make_node("Sigmoid", ["xw"], ["p"])],
        helper.make_tensor_value_info("p", TensorProto.FLOAT, [None, 1]),
        w,
    )
    choice = inference_registered_onnx_output(sigmoid, rows)
    assert (choice.output.kind, choice.output.event_index) == (
        "probability",
        0,
    ) and "a Sigmoid node produces it" in choice.description
    p = ort.InferenceSession(str(sigmoid), providers=["CPUExecutionProvider"]).run(None, {"x": rows})[0]
    # The margin is the logit the sigmoid was applied to.
    np.testing.assert_allclose(
        inference_onnx_margins(choice.output, p, 200), (rows.astype(np.float64) @ w).ravel(), atol=1e-5
    )

    logits = _graph(
        tmp_path / "logits.onnx",
        [helper.make_node("Identity", ["xw"], ["z"])],
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 2]),
        np.array([[0.8, -0.8], [-1.5, 1.5], [0.3, 0.1]]),
    )
    with pytest.raises(
        ModelArtifactError,
        match=r"output 'z' \(shape \(200, 2\), tensor\(float\)\) holds 2 values per row that are not class probabilities",
    ):
        inference_registered_onnx_output(logits, rows)


def test_a_raw_score_that_looked_like_a_probability_on_the_hold_out_fails_where_it_leaves_0_1_instead_of_being_clipped(
    tmp_path: Path,
) -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from tasks.errors import ModelArtifactError
    from tasks.inference.onnx_outputs import inference_onnx_margins, inference_registered_onnx_output

    # A logit head without a sigmoid, scaled so that every hold-out value happens to lie in [0, 1].
    holdout = np.random.default_rng(4).uniform(0.0, 1.0, size=(200, 3)).astype(np.float32)
    w = np.array([[0.3], [0.3], [0.3]])
    linear = _graph(
        tmp_path / "linear.onnx",
        [helper.make_node("Identity", ["xw"], ["z"])],
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 1]),
        w,
    )
    choice = inference_registered_onnx_output(linear, holdout)
    assert choice.output.kind == "probability" and "no Sigmoid produces it" in choice.description
    later = holdout.copy()
    later[:5] = 1.2  # 3 × 0.3 × 1.2 = 1.08: the same head, a row the hold-out never had
    z = ort.InferenceSession(str(linear), providers=["CPUExecutionProvider"]).run(None, {"x": later})[0]
    assert float(z.max()) > 1.0
    with pytest.raises(
        ModelArtifactError,
        match=r"output 'z' was registered as the event's probability, but gives 1\.08\d* on 5 of 200 rows",
    ):
        inference_onnx_margins(choice.output, z, 200)
    inside = z[5:]
    np.testing.assert_allclose(
        inference_onnx_margins(choice.output, inside, 195),
        np.log(inside.ravel().astype(np.float64) / (1 - inside.ravel())),
        atol=1e-6,
    )


def test_class_labels_without_the_event_label_are_refused_naming_them(tmp_path: Path) -> None:
    from tasks.errors import ModelArtifactError
    from tasks.inference.onnx_outputs import inference_registered_onnx_output

    x = np.random.default_rng(4).normal(size=(300, 3)).astype(np.float32)
    labels = np.where(x[:, 0] > 0, "yes", "no")
    path = _exported(make_pipeline(LogisticRegression()).fit(x, labels), x, tmp_path / "words.onnx", zipmap=False)
    with pytest.raises(
        ModelArtifactError,
        match=r"holds the probabilities of classes \['no', 'yes'\]; none of them is the hold-out's event label 1",
    ):
        inference_registered_onnx_output(path, x)
