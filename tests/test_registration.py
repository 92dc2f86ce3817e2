"""tasks/jobs/registration.py and `score register`: a model trained anywhere becomes a registry version,
or is refused with one line naming the file and what is wrong, and nothing is written."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import polars as pl
import pytest
import xgboost as xgb
from conftest import DemoEnv
from onnx import TensorProto, helper
from scipy.optimize import minimize
from typer.testing import CliRunner

from tasks.demo.setup import DEMO_JOB
from tasks.errors import JobValidationError, LabelError, ModelArtifactError, PartitionError
from tasks.inference.aliases import ALIASES_FILE
from tasks.inference.registry import inference_model_artifact, inference_model_checksum, inference_model_versions
from tasks.jobs.registration import REGISTRATION_REPORT, job_model_inputs, registered_job_model
from tasks.prediction.calibration import predict_fitted_calibrator
from tasks.settings import Settings

SCORE = Path(sys.executable).parent / "score"


@pytest.fixture
def labelled(demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path) -> dict[str, Path]:
    """A user's files: raw rows joined to their outcome, split into training rows and a hold-out."""
    days = demo_env.plan.training_dates
    frames = [
        pl.read_parquet(fresh_data.raw_partition_dir(DEMO_JOB, str(d)) / "*.parquet").join(
            pl.read_parquet(fresh_data.labels_partition_dir(DEMO_JOB, str(d)) / "*.parquet").select(
                "entity_id", "defaulted"
            ),
            on="entity_id",
        )
        for d in days
    ]
    files = {"train": tmp_path / "train.parquet", "holdout": tmp_path / "holdout.parquet"}
    pl.concat(frames[:-1]).write_parquet(files["train"])
    frames[-1].write_parquet(files["holdout"])
    return files


def _user_booster(settings: Settings, train: Path, **params: object) -> tuple[xgb.Booster, list[str]]:
    inputs = job_model_inputs(DEMO_JOB, train, settings=settings, labelled=True)
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "seed": 3, **params},
        xgb.DMatrix(inputs.matrix, label=inputs.outcomes, feature_names=list(inputs.names), missing=np.nan),
        num_boost_round=60,
    )
    return booster, list(inputs.names)


def test_a_model_trained_outside_is_registered_with_calibration_reference_and_report(
    fresh_data: Settings, labelled: dict[str, Path], tmp_path: Path
) -> None:
    booster, names = _user_booster(fresh_data, labelled["train"])
    booster.save_model(str(tmp_path / "mine.json"))
    before = inference_model_versions(fresh_data.model_registry_dir(DEMO_JOB))

    report = registered_job_model(DEMO_JOB, tmp_path / "mine.json", settings=fresh_data, holdout=labelled["holdout"])

    assert report.version == str(int(before[-1]) + 1)
    artifact = inference_model_artifact(fresh_data.model_registry_dir(DEMO_JOB), report.version)
    meta = artifact.metadata
    assert meta.framework == "xgboost" and meta.features == names
    assert meta.sha256 == inference_model_checksum(tmp_path / "mine.json")
    holdout = pl.read_parquet(labelled["holdout"])
    # The hold-out's rows minus those the guards quarantined; events counted independently.
    assert report.rows + report.rows_quarantined == holdout.height
    assert meta.training["events_holdout"] == report.events <= int(holdout["defaulted"].sum())
    assert meta.reference["home_ownership"].kind == "categorical" and meta.reference["annual_income"].kind == "numeric"
    written = json.loads((artifact.directory / REGISTRATION_REPORT).read_text())
    assert (
        written["rows"] == report.rows and written["calibration"]["reachable_high"] == report.calibration.reachable_high
    )
    assert 0 < report.calibration.reachable_low < report.calibration.reachable_high < 1
    assert not list((fresh_data.data_dir / "models" / ".staging").glob("*"))


def _logistic_onnx(path: Path, weights: np.ndarray, bias: float) -> None:
    """A logistic regression fitted outside the product, exported by hand: output 0 is the margin."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["margin"]),
        ],
        "logistic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, weights.size])],
        [helper.make_tensor_value_info("margin", TensorProto.FLOAT, [None, 1])],
        [
            helper.make_tensor("w", TensorProto.FLOAT, [weights.size, 1], weights.astype(np.float32).tolist()),
            helper.make_tensor("b", TensorProto.FLOAT, [1], [bias]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_an_onnx_model_is_registered_through_the_same_path(
    fresh_data: Settings, labelled: dict[str, Path], tmp_path: Path
) -> None:
    inputs = job_model_inputs(DEMO_JOB, labelled["train"], settings=fresh_data, labelled=True)
    x = np.nan_to_num(inputs.matrix)
    scale = x.std(axis=0) + 1e-9
    z, y = x / scale, inputs.outcomes

    def loss(theta: np.ndarray) -> float:
        m = z @ theta[:-1] + theta[-1]
        return float(np.mean(np.logaddexp(0, m) - y * m) + 1e-3 * theta[:-1] @ theta[:-1])

    theta = minimize(loss, np.zeros(x.shape[1] + 1), method="L-BFGS-B").x
    _logistic_onnx(tmp_path / "logit.onnx", theta[:-1] / scale, float(theta[-1]))

    # The graph passes NaN through: registration refuses its outputs on rows with missing inputs.
    with pytest.raises(
        ModelArtifactError, match=r"no usable output on the hold-out: .*non-finite.* have missing inputs"
    ):
        registered_job_model(DEMO_JOB, tmp_path / "logit.onnx", settings=fresh_data, holdout=labelled["holdout"])
    holdout = pl.read_parquet(labelled["holdout"]).filter(pl.col("months_since_last_delinquency").is_not_null())
    report = registered_job_model(
        DEMO_JOB, tmp_path / "logit.onnx", settings=fresh_data, holdout=holdout, version="lr-1"
    )
    assert report.framework == "onnx" and report.version == "lr-1"
    assert report.auc is not None and report.auc > 0.6
    assert inference_model_artifact(fresh_data.model_registry_dir(DEMO_JOB), "lr-1").metadata.framework == "onnx"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ("pickle", "pickles are refused"),
        ("unknown", "has format '.h5'"),
        ("regression", "objective 'reg:squarederror'"),
        (
            "hinge",
            "has objective 'binary:hinge'; a scoring model must be a binary classifier (binary:logistic or binary:logitraw)",
        ),
        ("fewer_features", "takes 13 inputs, but the job computes 14 features"),
        ("reordered", "in another order"),
        ("renamed", "only in the model ['annual_incme']"),
        ("not_xgboost", "does not start like an XGBoost"),
        ("early_stopped", "early stopping kept best_iteration"),
    ],
)
def test_a_model_that_cannot_serve_the_job_is_refused_naming_the_file(
    fresh_data: Settings, labelled: dict[str, Path], tmp_path: Path, make: str, expected: str
) -> None:
    inputs = job_model_inputs(DEMO_JOB, labelled["train"], settings=fresh_data, labelled=True)
    names = list(inputs.names)
    x, y = inputs.matrix, inputs.outcomes
    path = tmp_path / "model.json"
    if make == "pickle":
        path = tmp_path / "model.pkl"
        path.write_bytes(pickle.dumps({"weights": [1, 2]}))
    elif make == "unknown":
        path = tmp_path / "model.h5"
        path.write_text("trees")
    elif make == "regression":
        xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(x, label=y, feature_names=names), 3).save_model(
            str(path)
        )
    elif make == "hinge":
        # Its name starts with binary:, but it predicts hard 0/1 labels: no margin to calibrate.
        xgb.train({"objective": "binary:hinge"}, xgb.DMatrix(x, label=y, feature_names=names), 3).save_model(str(path))
    elif make == "fewer_features":
        xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(x[:, 1:], label=y), 3).save_model(str(path))
    elif make == "reordered":
        order = names[1:] + names[:1]
        xgb.train(
            {"objective": "binary:logistic"},
            xgb.DMatrix(x[:, [*range(1, x.shape[1]), 0]], label=y, feature_names=order),
            3,
        ).save_model(str(path))
    elif make == "renamed":
        xgb.train(
            {"objective": "binary:logistic"}, xgb.DMatrix(x, label=y, feature_names=["annual_incme", *names[1:]]), 3
        ).save_model(str(path))
    elif make == "not_xgboost":
        path.write_text("[1, 2, 3]")
    elif make == "early_stopped":
        train, valid = (
            xgb.DMatrix(x[::2], label=y[::2], feature_names=names),
            xgb.DMatrix(x[1::2], label=y[1::2], feature_names=names),
        )
        booster = xgb.train(
            {"objective": "binary:logistic", "eta": 0.9, "max_depth": 6},
            train,
            200,
            evals=[(valid, "valid")],
            early_stopping_rounds=2,
            verbose_eval=False,
        )
        assert int(booster.attributes()["best_iteration"]) + 1 < booster.num_boosted_rounds()
        booster.save_model(str(path))
    registry = fresh_data.model_registry_dir(DEMO_JOB)
    before = inference_model_versions(registry)

    result = CliRunner().invoke(
        _app(), ["register", DEMO_JOB, "--model", str(path), "--holdout", str(labelled["holdout"])]
    )

    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and str(path) in lines[0] and expected in lines[0], (
        result.output
    )
    assert inference_model_versions(registry) == before
    assert not list((fresh_data.data_dir / "models" / ".staging").glob("*"))


def _app():
    from cli.score import app

    return app


def test_an_existing_version_is_never_overwritten(
    fresh_data: Settings, labelled: dict[str, Path], tmp_path: Path
) -> None:
    booster, _ = _user_booster(fresh_data, labelled["train"])
    booster.save_model(str(tmp_path / "mine.ubj"))
    registry = fresh_data.model_registry_dir(DEMO_JOB)
    existing = inference_model_versions(registry)[-1]
    metadata_before = (registry / existing / "metadata.json").read_bytes()
    with pytest.raises(ModelArtifactError, match=f"version {existing} already exists"):
        registered_job_model(
            DEMO_JOB, tmp_path / "mine.ubj", settings=fresh_data, holdout=labelled["holdout"], version=existing
        )
    assert (registry / existing / "metadata.json").read_bytes() == metadata_before
    with pytest.raises(ModelArtifactError, match="'latest' is not a version|not a version"):
        registered_job_model(
            DEMO_JOB, tmp_path / "mine.ubj", settings=fresh_data, holdout=labelled["holdout"], version="latest"
        )


def test_a_holdout_without_its_outcome_or_with_other_values_is_refused(
    fresh_data: Settings, labelled: dict[str, Path], tmp_path: Path
) -> None:
    booster, _ = _user_booster(fresh_data, labelled["train"])
    booster.save_model(str(tmp_path / "mine.ubj"))
    holdout = pl.read_parquet(labelled["holdout"])
    holdout.drop("defaulted").write_parquet(tmp_path / "unlabelled.parquet")
    with pytest.raises(PartitionError, match=r"no outcome column 'defaulted'.*it has columns \['entity_id'"):
        registered_job_model(
            DEMO_JOB, tmp_path / "mine.ubj", settings=fresh_data, holdout=tmp_path / "unlabelled.parquet"
        )
    holdout.with_columns(
        pl.when(pl.int_range(pl.len()) < 2).then(2).otherwise(pl.col("defaulted")).alias("defaulted")
    ).write_parquet(tmp_path / "two.parquet")
    with pytest.raises(
        LabelError,
        match=r"outcome column 'defaulted' must be 1 \(the event\) or 0 \(or true/false\); 2 row\(s\) are not, e\.g\. \[2\]",
    ):
        registered_job_model(DEMO_JOB, tmp_path / "mine.ubj", settings=fresh_data, holdout=tmp_path / "two.parquet")
    holdout.drop("annual_income").write_parquet(tmp_path / "short.parquet")
    with pytest.raises(JobValidationError, match="annual_income"):
        registered_job_model(DEMO_JOB, tmp_path / "mine.ubj", settings=fresh_data, holdout=tmp_path / "short.parquet")
    assert len(inference_model_versions(fresh_data.model_registry_dir(DEMO_JOB))) == 1


def test_registering_the_same_file_again_says_it_recalibrates_an_existing_version(
    fresh_data: Settings, labelled: dict[str, Path], tmp_path: Path
) -> None:
    booster, _ = _user_booster(fresh_data, labelled["train"])
    booster.save_model(str(tmp_path / "mine.ubj"))
    first = registered_job_model(DEMO_JOB, tmp_path / "mine.ubj", settings=fresh_data, holdout=labelled["holdout"])
    assert not any("already version" in w for w in first.warnings)
    again = registered_job_model(DEMO_JOB, tmp_path / "mine.ubj", settings=fresh_data, holdout=labelled["holdout"])
    assert again.version != first.version
    assert any(f"is already version {first.version}" in w for w in again.warnings), again.warnings


@pytest.mark.parametrize(("outcome", "holds"), [(0, "is 0 (no events)"), (1, "is 1 (no non-events)")])
def test_a_holdout_with_one_outcome_only_is_refused_naming_the_file_and_column(
    fresh_data: Settings, labelled: dict[str, Path], tmp_path: Path, outcome: int, holds: str
) -> None:
    booster, _ = _user_booster(fresh_data, labelled["train"])
    booster.save_model(str(tmp_path / "mine.ubj"))
    one = tmp_path / "one_outcome.parquet"
    pl.read_parquet(labelled["holdout"]).with_columns(pl.lit(outcome).alias("defaulted")).write_parquet(one)
    registry = fresh_data.model_registry_dir(DEMO_JOB)
    before = inference_model_versions(registry)

    result = CliRunner().invoke(
        _app(), ["register", DEMO_JOB, "--model", str(tmp_path / "mine.ubj"), "--holdout", str(one)]
    )

    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: hold-out {one}: outcome column 'defaulted'"), result.output
    assert holds in lines[0] and "rows the job's guards let through" in lines[0], lines[0]
    assert inference_model_versions(registry) == before
    assert not list((fresh_data.data_dir / "models" / ".staging").glob("*"))


def test_a_version_calibrated_without_events_is_refused_by_promote_validate_and_run(
    fresh_data: Settings, demo_env: DemoEnv
) -> None:
    """A version registered before registration refused such hold-outs: its calibration's bins hold no event.
    It loads and scores, approving everyone; every command that would put it to work refuses it, naming it."""
    registry = fresh_data.model_registry_dir(DEMO_JOB)
    shutil.copytree(registry / "1", registry / "2")
    meta = json.loads((registry / "2" / "metadata.json").read_text())
    margins = np.random.default_rng(5).normal(-2.0, 1.0, 2_000)
    meta |= {"version": "2", "calibration": predict_fitted_calibrator(margins, np.zeros_like(margins)).to_metadata()}
    (registry / "2" / "metadata.json").write_text(json.dumps(meta))
    day = demo_env.plan.scoring_dates[-1].isoformat()

    for args in (["promote", DEMO_JOB, "2"], ["validate", DEMO_JOB], ["run", DEMO_JOB, "--date", day]):
        done = subprocess.run([str(SCORE), *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, (args, done.stdout, done.stderr)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(
            f"error: {registry / '2' / 'metadata.json'}: calibration: model credit_risk version 2: "
        ), (args, done.stdout)
        assert "without events: none of its 2,000 rows has outcome 1" in lines[0], lines[0]
    assert not (registry / ALIASES_FILE).exists()
    # Refused before the lease: no warehouse, no ledger row, no output.
    assert not fresh_data.duckdb_path.exists()
    assert not (fresh_data.output_dir(DEMO_JOB) / "predictions").exists()
