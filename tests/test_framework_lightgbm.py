"""LightGBM models (`Booster.save_model` text files) score and explain as LightGBM itself does.

The models are trained here on the job's own model inputs (`score features`, with the raw data's missing
charges as NaN and plenty of exact zeros), and every number is checked against LightGBM's own
`predict(raw_score=True)` and `predict(pred_contrib=True)` on the same rows: the engine on its own, then a
user's project driven through the `score` command (register, validate, run, outcomes, a LightGBM
challenger behind an XGBoost champion), the refusals, and a machine without the extra.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

lgb = pytest.importorskip("lightgbm")

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

TRAIN_DAY, HOLDOUT_DAY, SCORED_DAY = dt.date(2026, 10, 1), dt.date(2026, 10, 3), dt.date(2026, 10, 4)
ROWS = 2000
TREES = 30


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    """A user's project with the churn job scaffolded, the model inputs of the training and scored days, the
    scored day's labels, and a `score` that runs the CLI in a subprocess."""
    root = tmp_path_factory.mktemp("lightgbm-byo")
    env = user_project_env(root)
    score = score_cli(root, env)
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
    return root, score, env


def _trained(x: np.ndarray, y: np.ndarray, names: list[str] | None, path: Path, **params: object) -> Path:
    """The user's own LightGBM training script: a small booster, saved as model text."""
    booster = lgb.train(
        {
            "objective": "binary",
            "num_leaves": 15,
            "learning_rate": 0.1,
            "min_data_in_leaf": 20,
            "seed": 1,
            "verbose": -1,
            "num_threads": 1,
            **params,
        },
        lgb.Dataset(x, label=y, feature_name=names or "auto"),
        num_boost_round=TREES,
    )
    booster.save_model(str(path))
    return path


def _threshold_rows(booster, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # noqa: ANN001
    """Rows of `x` with values put exactly on the float32 values around the model's split thresholds (LightGBM
    sends `x <= threshold` left: the float32 at or just below a float64 threshold, and the one above it)."""
    splits: dict[int, list[float]] = {}

    def walk(node: dict) -> None:
        if "leaf_value" not in node:
            splits.setdefault(node["split_feature"], []).append(node["threshold"])
            walk(node["left_child"])
            walk(node["right_child"])

    for tree in booster.dump_model()["tree_info"]:
        walk(tree["tree_structure"])
    rows = x[rng.choice(x.shape[0], 600)].copy()
    for feature, thresholds in splits.items():
        t = np.asarray(thresholds)[rng.integers(0, len(thresholds), rows.shape[0])]
        at = t.astype(np.float32)
        at = np.where(at.astype(np.float64) > t, np.nextafter(at, np.float32(-np.inf)), at)
        pick = rng.random(rows.shape[0])
        rows[:, feature] = np.where(
            pick < 0.4, at, np.where(pick < 0.6, np.nextafter(at, np.float32(np.inf)), rows[:, feature])
        )
    return rows


def _engine(model_path: Path, names: list[str], device: str = "cpu"):  # noqa: ANN202  (a LightGBMEngine)
    from tasks.inference.engine_lightgbm import LightGBMEngine
    from tasks.inference.registry import ModelArtifact, ModelMetadata, inference_model_checksum

    metadata = ModelMetadata(
        name="churn",
        version="1",
        framework="lightgbm",
        model_file=model_path.name,
        sha256=inference_model_checksum(model_path),
        feature_version="1.0.0",
        features=names,
        feature_dtypes=dict.fromkeys(names, "float32"),
    )
    return LightGBMEngine(ModelArtifact(metadata=metadata, directory=model_path.parent), device=device, nthread=1)


@pytest.mark.parametrize("kind", ["gbdt", "zero_as_missing", "random_forest", "no_missing_in_training"])
def test_the_engines_margins_and_contributions_are_lightgbms_own(project, tmp_path: Path, kind: str) -> None:
    import pyarrow as pa

    from tasks.contracts import InferenceInput

    root, _, _ = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    scored, _, _, _ = model_inputs(root / "scored_inputs.parquet")
    if kind == "no_missing_in_training":
        # Inputs centred and complete at training: every split has missing type None (a NaN is read as 0,
        # which falls on either side of the thresholds).
        center = np.nanmedian(x, axis=0)
        x, scored = np.nan_to_num(x - center), scored - center
    params = {
        "gbdt": {},
        "zero_as_missing": {"zero_as_missing": True},
        "no_missing_in_training": {},
        "random_forest": {"boosting": "rf", "bagging_freq": 1, "bagging_fraction": 0.7, "feature_fraction": 0.8},
    }[kind]
    path = _trained(x, y, names, tmp_path / f"{kind}.txt", **params)
    booster = lgb.Booster(model_file=str(path))
    rng = np.random.default_rng(7)
    rows = np.concatenate([scored, _threshold_rows(booster, scored, rng)])
    rows[rng.random(rows.shape) < 0.05] = np.nan
    assert np.isnan(rows).any(axis=1).sum() > 500 and (rows == 0).any(axis=1).sum() > 500
    engine = _engine(path, names)
    batch = InferenceInput(
        chunk_id=0, entity_ids=pa.array(np.arange(rows.shape[0]).astype(str)), features=rows, feature_names=tuple(names)
    )

    margins = engine.inference_outputs(batch).margins
    contributions = engine.inference_contributions(batch, np.arange(rows.shape[0]))

    raw = booster.predict(rows, raw_score=True)
    theirs = booster.predict(rows, pred_contrib=True)
    # LightGBM's own probability is the sigmoid of the margin; in random-forest mode its raw score sums the
    # trees and the probability is the sigmoid of their mean.
    p = booster.predict(rows)
    np.testing.assert_allclose(margins, np.log(p / (1 - p)), rtol=0, atol=1e-6)
    if kind == "random_forest":
        np.testing.assert_allclose(margins, raw / TREES, rtol=0, atol=1e-6)
        theirs = theirs / TREES
    else:
        assert np.abs(margins - raw).max() <= 1e-6
    assert contributions.explained_by == "table_treeshap", engine.contributions_kernel_reason
    assert np.abs(contributions.values - theirs[:, :-1]).max() <= 1e-5
    # The kernel's bias column too: the contributions add up to LightGBM's margin.
    kernel = engine.contributions_source.kernel.contributions(engine._explained_rows(rows))
    assert np.abs(kernel - theirs).max() <= 1e-5
    np.testing.assert_allclose(kernel.sum(axis=1), margins, rtol=0, atol=1e-5)


def test_lightgbm_scores_on_cpu_and_a_job_asking_for_cuda_is_refused_in_one_line(project, tmp_path: Path) -> None:
    from tasks.errors import DeviceUnavailable

    root, _, _ = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    path = _trained(x, y, names, tmp_path / "churn.txt")
    # Booster.predict and pred_contrib run on the CPU in every LightGBM build, CUDA builds included.
    with pytest.raises(
        DeviceUnavailable, match=r"^model churn 1: device 'cuda' was asked for, but LightGBM predicts on CPU only"
    ):
        _engine(path, names, device="cuda")
    engine = _engine(path, names, device="auto")
    assert (engine.device_type, engine.providers) == ("cpu", ("lightgbm:cpu",))


def test_a_lightgbm_model_registers_validates_scores_and_shadows_an_xgboost_champion_with_lightgbms_own_numbers(
    project, tmp_path: Path
) -> None:
    import xgboost as xgb

    root, score, _ = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    path = _trained(x, y, names, tmp_path / "churn_lgb.txt")
    booster = lgb.Booster(model_file=str(path))
    spec_path = root / "jobs" / "churn.yaml"
    scaffolded = spec_path.read_text()
    reasons = yaml.safe_load(scaffolded)["prediction"]["reasons"]
    code_of = [reasons["codes"][name]["code"] for name in names]
    scored_x, _, _, ids = model_inputs(root / "scored_inputs.parquet")
    position = {entity: i for i, entity in enumerate(ids.cast(pl.String).to_list())}
    raw = booster.predict(scored_x, raw_score=True)
    contributions = booster.predict(scored_x, pred_contrib=True)[:, :-1]

    def check_published(published: pl.DataFrame, version: str) -> int:
        """Margins are LightGBM's raw score, reasons the top-k of its pred_contrib; returns the rows with reasons."""
        assert (published["model_version"] == version).all() and published.height == ids.len()
        at = np.array([position[e] for e in published["entity_id"].to_list()])
        assert np.abs(published["raw_margin"].to_numpy() - raw[at]).max() <= 1e-6
        explained = 0
        for i, decision, codes in zip(at, published["decision"], published["reason_codes"], strict=True):
            if decision not in reasons["for_decisions"]:
                assert len(codes) == 0
                continue
            order = np.argsort(-contributions[i], kind="stable")[: reasons["top_k"]]
            expected = [code_of[j] for j in order if contributions[i, j] > 0] or [reasons["no_reason_code"]]
            assert codes.to_list() == expected, (i, contributions[i])
            explained += 1
        return explained

    try:
        registered = score(
            "register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), "--promote"
        )
        version = registered_version(registered.stdout)
        assert "the margin is LightGBM's raw score" in " ".join(registered.stdout.split())
        metadata = json.loads((root / "data" / "models" / "churn" / version / "metadata.json").read_text())
        assert metadata["framework"] == "lightgbm" and metadata["features"] == names
        assert metadata["explanation"]["method"] == "treeshap" and metadata["explanation"]["max_abs_diff"] <= 1e-5
        assert "LightGBM pred_contrib" in metadata["explanation"]["checked_against"]
        assert json.loads((root / "data" / "models" / "churn" / version / "registration.json").read_text())["auc"] > 0.7

        validated = score("validate", "churn")
        assert "reasons off" not in validated.stdout
        score("run", "churn", "--date", str(SCORED_DAY))
        assert check_published(day_output(root, "predictions", SCORED_DAY), version) > 50
        fallback = day_output(root, "reports/fallback", SCORED_DAY)
        assert fallback.filter(pl.col("kind").is_in(["failed_chunk", "reasons_unavailable"]))["rows"].sum() == 0
        outcomes = score("outcomes", "churn", "--start", str(SCORED_DAY), "--end", str(SCORED_DAY))
        assert "realized performance" in outcomes.stdout
        assert any(str(SCORED_DAY) in line and f"│ {version} " in line for line in outcomes.stdout.splitlines()), (
            outcomes.stdout
        )

        champion_model = xgb.train(
            {"objective": "binary:logistic", "max_depth": 3, "seed": 1, "nthread": 1},
            xgb.DMatrix(x, label=y, missing=np.nan, feature_names=names),
            40,
        )
        champion_model.save_model(str(tmp_path / "champion.ubj"))
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
            scaffolded.replace("  version: champion", f'  version: "{champion}"\n  challenger: "{version}"')
        )
        score("run", "churn", "--date", str(SCORED_DAY))
        fallback = day_output(root, "reports/fallback", SCORED_DAY)
        totals = {r["kind"]: r["rows"] for r in fallback.unique("kind", keep="first", maintain_order=True).to_dicts()}
        assert totals["challenger_failed"] == 0, totals
        predictions = day_output(root, "predictions", SCORED_DAY)
        assert (predictions["model_version"] == champion).all()
        xgb_margin = champion_model.inplace_predict(scored_x, predict_type="margin")
        at = np.array([position[e] for e in predictions["entity_id"].to_list()])
        assert np.abs(predictions["raw_margin"].to_numpy() - xgb_margin[at]).max() <= 1e-5
        # The LightGBM challenger shadows the same rows with its own margins and reasons.
        assert check_published(day_output(root, "shadow_predictions", SCORED_DAY), version) > 50
    finally:
        spec_path.write_text(scaffolded)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            "regression",
            "has objective 'regression', a regression objective, but the job is binary (target.kind): register a binary "
            "classifier (binary or cross_entropy), or set target.kind: regression or count in the job spec",
        ),
        ("multiclass", "has objective 'multiclass num_class:3'; a scoring model must be a binary classifier"),
        (
            "other_names",
            "was trained on features the job does not compute: only in the model ['calls', 'charges', 'contract_code', "
            "'paperless_flag', 'tenure'], only in the job",
        ),
        # LightGBM's own loader crashes the process on this file (a segmentation fault).
        (
            "cut_in_its_parameters",
            "is cut short: its parameters section does not end with LightGBM's `end of parameters` line",
        ),
    ],
)
def test_a_model_that_cannot_score_the_job_is_refused_with_one_line_and_nothing_written(
    project, tmp_path: Path, make: str, expected: str
) -> None:
    root, score, _ = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    path = tmp_path / f"{make}.txt"
    if make == "regression":
        _trained(x, y, names, path, objective="regression")
    elif make == "multiclass":
        three = np.where(y == 1, 1, np.where(np.nan_to_num(x[:, 0]) > 36, 2, 0))
        _trained(x, three, names, path, objective="multiclass", num_class=3)
    elif make == "other_names":
        _trained(x, y, ["tenure", "charges", "contract_code", "paperless_flag", "calls"], path)
    else:
        text = _trained(x, y, names, path).read_bytes()
        path.write_bytes(text[: text.index(b"[learning_rate: ") + 5])
    before = registry_versions(root)

    refused = score("register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), ok=False)

    assert_one_error_line(refused, path, expected)
    assert_nothing_registered(root, before)


def test_without_the_lightgbm_extra_a_lightgbm_model_is_one_line_naming_the_extra(project, tmp_path: Path) -> None:
    root, score, env = project
    x, y, names, _ = model_inputs(root / "train_inputs.parquet")
    path = _trained(x, y, names, tmp_path / "churn.txt")
    hidden = tmp_path / "no_lightgbm"
    hidden.mkdir()
    # A None entry in sys.modules makes `import lightgbm` raise ImportError, as on a machine without it.
    (hidden / "sitecustomize.py").write_text("import sys\n\nsys.modules['lightgbm'] = None\n")
    environ = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(hidden), env.get("PYTHONPATH", "")) if p)}
    before = registry_versions(root)

    refused = score(
        "register", "churn", "--model", str(path), "--holdout", str(root / "holdout.parquet"), ok=False, environ=environ
    )

    assert_one_error_line(refused, path, "pip install '.[lightgbm]'", returncode=3)
    assert registry_versions(root) == before
