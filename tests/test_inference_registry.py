"""tasks/inference: the on-disk model registry and the XGBoost engine, on the demo model."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import xgboost as xgb
from conftest import DEMO_JOB, DemoEnv

from tasks.contracts import InferenceInput
from tasks.errors import DeviceUnavailable, FeatureVersionMismatch, ModelArtifactError
from tasks.features import credit_risk as fm
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.inference.engine import XGBoostEngine
from tasks.inference.registry import (
    ModelArtifact,
    inference_check_feature_version,
    inference_model_artifact,
    inference_model_versions,
)
from tasks.settings import PROJECT_ROOT


@pytest.fixture(scope="module")
def demo_version_dir(demo_env: DemoEnv) -> Path:
    return demo_env.settings.model_registry_dir(DEMO_JOB) / demo_env.plan.model_version


def add_version(registry: Path, source: Path, version: str, **metadata_changes) -> Path:
    target = registry / version
    shutil.copytree(source, target)
    meta = json.loads((target / "metadata.json").read_text())
    meta.update({"version": version, **metadata_changes})
    (target / "metadata.json").write_text(json.dumps(meta))
    return target


def write_meta(directory: Path, **changes) -> None:
    meta = json.loads((directory / "metadata.json").read_text())
    meta.update(changes)
    (directory / "metadata.json").write_text(json.dumps(meta))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- registry ---------------------------------------------------------------------------------


def test_versions_sort_numerically_and_latest_is_the_highest(tmp_path: Path, demo_version_dir: Path) -> None:
    for v in ("2", "10", "1", "9"):
        add_version(tmp_path, demo_version_dir, v)
    (tmp_path / "11").mkdir()  # no metadata.json: not a version
    assert inference_model_versions(tmp_path) == ["1", "2", "9", "10"]
    assert inference_model_artifact(tmp_path).metadata.version == "10"
    assert inference_model_artifact(tmp_path, "9").directory == tmp_path / "9"


def test_dotted_versions_sort_by_their_parts(tmp_path: Path, demo_version_dir: Path) -> None:
    for v in ("1.10.0", "1.2.0", "1.9.1"):
        add_version(tmp_path, demo_version_dir, v)
    assert inference_model_versions(tmp_path) == ["1.2.0", "1.9.1", "1.10.0"]


def test_a_non_numeric_version_does_not_crash_the_listing(tmp_path: Path, demo_version_dir: Path) -> None:
    for v in ("1.0.1", "1.0-rc1", "2"):
        add_version(tmp_path, demo_version_dir, v)
    assert sorted(inference_model_versions(tmp_path)) == ["1.0-rc1", "1.0.1", "2"]


def test_empty_or_missing_registry_is_a_model_artifact_error(tmp_path: Path) -> None:
    assert inference_model_versions(tmp_path / "absent") == []
    with pytest.raises(ModelArtifactError, match="no model versions"):
        inference_model_artifact(tmp_path / "absent")


def test_unknown_version_is_named(tmp_path: Path, demo_version_dir: Path) -> None:
    add_version(tmp_path, demo_version_dir, "1")
    with pytest.raises(ModelArtifactError, match="'7'"):
        inference_model_artifact(tmp_path, "7")


def test_model_file_with_a_wrong_checksum_is_refused(tmp_path: Path, demo_version_dir: Path) -> None:
    version = add_version(tmp_path, demo_version_dir, "1")
    model = version / "model.ubj"
    model.write_bytes(model.read_bytes()[:-16])  # truncated
    with pytest.raises(ModelArtifactError, match="sha256"):
        inference_model_artifact(tmp_path)


def test_a_pickle_is_refused_even_with_a_matching_checksum(tmp_path: Path, demo_version_dir: Path) -> None:
    version = add_version(tmp_path, demo_version_dir, "1")
    pkl = version / "model.pkl"
    pkl.write_bytes(b"\x80\x04K\x01.")  # pickle of the int 1
    write_meta(version, model_file="model.pkl", sha256=sha256_of(pkl))
    with pytest.raises(ModelArtifactError, match="pkl"):
        inference_model_artifact(tmp_path)


def test_missing_model_file_is_refused(tmp_path: Path, demo_version_dir: Path) -> None:
    version = add_version(tmp_path, demo_version_dir, "1")
    (version / "model.ubj").unlink()
    with pytest.raises(ModelArtifactError, match="does not exist"):
        inference_model_artifact(tmp_path)


@pytest.mark.parametrize("bad", ["{not json", json.dumps({"name": "credit_risk"}), json.dumps({"sha256": "XYZ"})])
def test_invalid_metadata_is_refused(tmp_path: Path, demo_version_dir: Path, bad: str) -> None:
    version = add_version(tmp_path, demo_version_dir, "1")
    (version / "metadata.json").write_text(bad)
    with pytest.raises(ModelArtifactError, match="metadata"):
        inference_model_artifact(tmp_path)


def test_demo_model_verifies_and_matches_the_feature_module(demo_version_dir: Path) -> None:
    artifact = inference_model_artifact(demo_version_dir.parent)
    assert artifact.metadata.sha256 == sha256_of(demo_version_dir / "model.ubj")
    assert artifact.metadata.features == list(fm.FEATURES)
    inference_check_feature_version(artifact, fm.FEATURE_VERSION, tuple(fm.FEATURES))  # no error


def test_feature_version_mismatch_names_both_versions(demo_version_dir: Path) -> None:
    artifact = inference_model_artifact(demo_version_dir.parent)
    old = artifact.model_copy(update={"metadata": artifact.metadata.model_copy(update={"feature_version": "0.9.0"})})
    with pytest.raises(FeatureVersionMismatch) as err:
        inference_check_feature_version(old, fm.FEATURE_VERSION, tuple(fm.FEATURES))
    assert "0.9.0" in str(err.value) and fm.FEATURE_VERSION in str(err.value)


def test_same_feature_version_but_other_features_is_a_mismatch(demo_version_dir: Path) -> None:
    artifact = inference_model_artifact(demo_version_dir.parent)
    swapped = tuple(reversed(fm.FEATURES))
    with pytest.raises(FeatureVersionMismatch, match="features"):
        inference_check_feature_version(artifact, fm.FEATURE_VERSION, swapped)


# --- engine -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifact(demo_version_dir: Path) -> ModelArtifact:
    return inference_model_artifact(demo_version_dir.parent, demo_version_dir.name)


@pytest.fixture(scope="module")
def batch(demo_env: DemoEnv) -> InferenceInput:
    raw = pl.read_parquet(demo_env.settings.raw_partition_dir(DEMO_JOB, demo_env.plan.scoring_dates[0].isoformat()))
    suite = load_guard_suite(PROJECT_ROOT / "expectations" / "credit_risk.json")
    scorable = guarded_chunk(raw.head(500), suite, entity_column="entity_id").scorable
    return InferenceInput(
        chunk_id=0,
        entity_ids=scorable["entity_id"].to_arrow(),
        features=fm.feature_matrix(scorable),
        feature_names=tuple(fm.FEATURES),
    )


def test_engine_margins_are_the_boosters_raw_margins(artifact: ModelArtifact, batch: InferenceInput) -> None:
    out = XGBoostEngine(artifact, nthread=1).inference_outputs(batch)
    reference = xgb.Booster(model_file=str(artifact.model_path))
    expected = reference.predict(
        xgb.DMatrix(batch.features, feature_names=list(fm.FEATURES), missing=np.nan), output_margin=True
    )
    np.testing.assert_allclose(out.margins, expected, rtol=0, atol=1e-6)
    assert out.entity_ids.equals(batch.entity_ids)
    assert (out.model_name, out.model_version, out.device_type) == ("credit_risk", artifact.metadata.version, "cpu")
    assert out.latency_ms >= 0


def test_contributions_add_up_to_the_margin(artifact: ModelArtifact, batch: InferenceInput) -> None:
    engine = XGBoostEngine(artifact, nthread=1)
    margins = engine.inference_outputs(batch).margins
    rows = np.array([0, 3, 7, 50, len(margins) - 1])
    contrib = engine.inference_contributions(batch, rows)
    assert contrib.values.shape == (rows.size, len(fm.FEATURES))
    # TreeSHAP: margin = bias + Σ contributions, with the same bias for every row.
    bias = margins[rows] - contrib.values.sum(axis=1)
    np.testing.assert_allclose(bias, bias[0], atol=1e-4)
    empty = engine.inference_contributions(batch, np.array([], dtype=np.int64))
    assert empty.values.shape == (0, len(fm.FEATURES))


def test_engine_refuses_cuda_here(artifact: ModelArtifact) -> None:
    with pytest.raises(DeviceUnavailable, match="cuda"):
        XGBoostEngine(artifact, device="cuda")


def test_engine_refuses_an_unloadable_model_file(tmp_path: Path, demo_version_dir: Path) -> None:
    version = add_version(tmp_path, demo_version_dir, "1")
    # Starts like UBJSON, checksum recorded: only XGBoost itself can tell that it is no model.
    (version / "model.ubj").write_bytes(b"{definitely not a model")
    write_meta(version, sha256=sha256_of(version / "model.ubj"))
    with pytest.raises(ModelArtifactError, match="could not be loaded"):
        XGBoostEngine(inference_model_artifact(tmp_path))


def test_inference_input_checks_its_matrix() -> None:
    ids = pa.array(["a", "b"])
    with pytest.raises(ValueError, match="float32"):
        InferenceInput(chunk_id=0, entity_ids=ids, features=np.zeros((2, 2)), feature_names=("x", "y"))
    with pytest.raises(ValueError, match="names"):
        InferenceInput(chunk_id=0, entity_ids=ids, features=np.zeros((2, 3), np.float32), feature_names=("x", "y"))
    with pytest.raises(ValueError, match="entity ids"):
        InferenceInput(chunk_id=0, entity_ids=ids, features=np.zeros((3, 2), np.float32), feature_names=("x", "y"))
