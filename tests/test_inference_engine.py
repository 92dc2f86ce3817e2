"""tasks/inference beyond the XGBoost happy path: registry refusals, the ONNX engine, devices,
the fallback version, retries and the inference error budget, and determinism across chunk sizes.

Registry and engine tests build their own tmp registries; flow tests run on a fresh copy of the
demo inputs (`fresh_data`) with a modified job spec in a tmp jobs folder (`SCORING_JOBS_DIR`).
Faults that cannot be produced for real (an engine call that fails now and then) are injected by
monkeypatching the final engine's `inference_outputs`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import os
import pickle
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv
from polars.testing import assert_frame_equal

from tasks.contracts import InferenceInput
from tasks.errors import DeviceUnavailable, InferenceFailure, JobValidationError, ModelArtifactError
from tasks.inference.engine import ONNXEngine, XGBoostEngine, inference_cuda_device_present, inference_loaded_model
from tasks.inference.registry import inference_model_artifact
from tasks.settings import Settings, current_settings

no_gpu_here = pytest.mark.skipif(
    inference_cuda_device_present(), reason="asserts the CPU-only behaviour; this machine has a GPU"
)


# --- helpers ----------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def demo_version_dir(demo_env: DemoEnv) -> Path:
    return demo_env.settings.model_registry_dir(DEMO_JOB) / demo_env.plan.model_version


def copied_version(registry: Path, source: Path, version: str, **metadata_changes) -> Path:
    """A copy of `source` as `registry/version`, its metadata updated with `metadata_changes`."""
    target = registry / version
    shutil.copytree(source, target)
    meta = json.loads((target / "metadata.json").read_text())
    meta.update({"version": version, **metadata_changes})
    (target / "metadata.json").write_text(json.dumps(meta))
    return target


def with_model_file(
    version_dir: Path, name: str, payload: bytes, *, framework: str | None = None, sha256: str | None = None
) -> Path:
    """Replace the version's model by `payload` saved as `name`; sha256 recorded unless given."""
    for old in version_dir.glob("model.*"):
        old.unlink()
    path = version_dir / name
    path.write_bytes(payload)
    meta = json.loads((version_dir / "metadata.json").read_text())
    meta.update(model_file=name, sha256=sha256 or sha256_of(path))
    if framework:
        meta["framework"] = framework
    (version_dir / "metadata.json").write_text(json.dumps(meta))
    return path


N_FEATURES = 4
ONNX_FEATURES = [f"f{i}" for i in range(N_FEATURES)]


def linear_onnx_bytes(weights: np.ndarray, bias: np.ndarray) -> bytes:
    """An ONNX graph y = x @ weights + bias (Gemm), input [batch, n_features], output [batch, outputs]."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    n_in, n_out = weights.shape
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n_out])],
        [
            numpy_helper.from_array(weights.astype(np.float32), "W"),
            numpy_helper.from_array(bias.astype(np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what ONNX Runtime 1.x reads without complaint
    onnx.checker.check_model(model)
    return model.SerializeToString()


def onnx_registry(root: Path, payload: bytes, *, name: str = "tiny_linear", version: str = "1") -> Path:
    """`root/name/version/` with `model.onnx` and its metadata; returns the registry dir of `name`."""
    directory = root / name / version
    directory.mkdir(parents=True)
    (directory / "model.onnx").write_bytes(payload)
    meta = {
        "name": name,
        "version": version,
        "framework": "onnx",
        "model_file": "model.onnx",
        "sha256": sha256_of(directory / "model.onnx"),
        "feature_version": "test-1",
        "features": ONNX_FEATURES,
        "feature_dtypes": {f: "float32" for f in ONNX_FEATURES},
    }
    (directory / "metadata.json").write_text(json.dumps(meta))
    return root / name


def onnx_batch(rows: int = 64, seed: int = 3) -> InferenceInput:
    features = np.random.default_rng(seed).normal(size=(rows, N_FEATURES)).astype(np.float32)
    return InferenceInput(
        chunk_id=2,
        entity_ids=pa.array([f"E{i}" for i in range(rows)]),
        features=np.ascontiguousarray(features),
        feature_names=tuple(ONNX_FEATURES),
    )


WEIGHTS = np.array([[0.5], [-1.25], [2.0], [0.125]], dtype=np.float32)
BIAS = np.array([-0.75], dtype=np.float32)


def device_auto_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "scoring.inference" and "device auto" in r.getMessage()]


# --- 1. registry refusals -------------------------------------------------------------------------


class _MakesADirectoryWhenUnpickled:
    """Unpickling this runs `os.mkdir(path)`: proof of code execution if a loader ever unpickles it."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("file_name", ["model.pkl", "model.ubj", "model.json"])
def test_a_real_pickle_is_refused_whatever_its_name(
    tmp_path: Path, demo_version_dir: Path, protocol: int, file_name: str
) -> None:
    registry = tmp_path / "registry"
    sentinel = tmp_path / "pickle-was-executed"
    payload = pickle.dumps(_MakesADirectoryWhenUnpickled(sentinel), protocol=protocol)
    version = copied_version(registry, demo_version_dir, "1")
    path = with_model_file(version, file_name, payload)  # sha256 matches: only the format check can stop it
    with pytest.raises(ModelArtifactError, match="pickle") as err:
        inference_model_artifact(registry)
    assert str(path) in str(err.value)
    assert not sentinel.exists()


def test_an_unknown_model_format_is_refused(tmp_path: Path, demo_version_dir: Path) -> None:
    version = copied_version(tmp_path, demo_version_dir, "1")
    path = with_model_file(version, "model.h5", b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    with pytest.raises(ModelArtifactError, match=r"unknown format '\.h5'") as err:
        inference_model_artifact(tmp_path)
    assert str(path) in str(err.value)
    assert ".ubj" in str(err.value) and ".onnx" in str(err.value)  # says what would be accepted


def test_a_model_file_cut_in_half_is_refused_as_truncated(tmp_path: Path, demo_version_dir: Path) -> None:
    version = copied_version(tmp_path, demo_version_dir, "1")
    model = version / "model.ubj"
    full = model.read_bytes()
    model.write_bytes(full[: len(full) // 2])  # metadata keeps the sha256 of the whole file
    with pytest.raises(ModelArtifactError, match="truncated") as err:
        inference_model_artifact(tmp_path)
    message = str(err.value)
    assert str(model) in message
    assert f"({len(full) // 2} bytes)" in message
    assert sha256_of(demo_version_dir / "model.ubj") in message  # the expected checksum is shown


def test_a_truncated_file_with_a_recomputed_checksum_fails_in_xgboost_naming_the_file(
    tmp_path: Path, demo_version_dir: Path
) -> None:
    version = copied_version(tmp_path, demo_version_dir, "1")
    full = (demo_version_dir / "model.ubj").read_bytes()
    path = with_model_file(version, "model.ubj", full[: len(full) // 2])  # checksum of the half file
    artifact = inference_model_artifact(tmp_path)  # the registry cannot tell: starts like UBJSON, sha256 matches
    with pytest.raises(ModelArtifactError, match="could not be loaded") as err:
        XGBoostEngine(artifact, nthread=1)
    assert str(path) in str(err.value)


def test_an_onnx_suffixed_file_that_is_not_onnx_is_refused(tmp_path: Path, demo_version_dir: Path) -> None:
    version = copied_version(tmp_path, demo_version_dir, "1")
    # The XGBoost model renamed to .onnx, metadata saying onnx: suffix and framework agree, bytes do not.
    path = with_model_file(version, "model.onnx", (demo_version_dir / "model.ubj").read_bytes(), framework="onnx")
    with pytest.raises(ModelArtifactError, match="ONNX protobuf") as err:
        inference_model_artifact(tmp_path)
    assert str(path) in str(err.value)


def test_an_onnx_file_that_onnx_runtime_cannot_parse_is_refused_naming_the_file(tmp_path: Path) -> None:
    good = linear_onnx_bytes(WEIGHTS, BIAS)
    registry = onnx_registry(tmp_path, good[: len(good) // 2])  # starts with the ir_version field, sha256 matches
    artifact = inference_model_artifact(registry)
    with pytest.raises(ModelArtifactError, match="could not be loaded by ONNX Runtime") as err:
        ONNXEngine(artifact)
    assert str(artifact.model_path) in str(err.value)


@pytest.mark.parametrize(
    ("file_name", "framework", "source"),
    [("model.ubj", "onnx", "xgboost"), ("model.json", "onnx", "xgboost"), ("model.onnx", "xgboost", "onnx")],
)
def test_framework_and_suffix_must_agree(
    tmp_path: Path, demo_version_dir: Path, file_name: str, framework: str, source: str
) -> None:
    payload = (demo_version_dir / "model.ubj").read_bytes() if source == "xgboost" else linear_onnx_bytes(WEIGHTS, BIAS)
    version = copied_version(tmp_path, demo_version_dir, "1")
    path = with_model_file(version, file_name, payload, framework=framework)
    with pytest.raises(ModelArtifactError, match=f"framework '{framework}'") as err:
        inference_model_artifact(tmp_path)
    assert str(path) in str(err.value)
    assert Path(file_name).suffix in str(err.value)


# --- 2. the ONNX engine -----------------------------------------------------------------------------


@pytest.fixture
def onnx_artifact(tmp_path: Path):
    return inference_model_artifact(onnx_registry(tmp_path, linear_onnx_bytes(WEIGHTS, BIAS)))


def test_onnx_engine_outputs_are_the_linear_models_values(onnx_artifact) -> None:
    engine = ONNXEngine(onnx_artifact, nthread=1)
    assert engine.providers == ("CPUExecutionProvider",)
    assert engine.device_type == "cpu"
    batch = onnx_batch()
    out = engine.inference_outputs(batch)
    expected = batch.features.astype(np.float64) @ WEIGHTS.astype(np.float64)[:, 0] + float(BIAS[0])
    assert out.margins.dtype == np.float64 and out.margins.shape == (batch.features.shape[0],)
    np.testing.assert_allclose(out.margins, expected, rtol=1e-5, atol=1e-5)
    assert out.entity_ids.equals(batch.entity_ids)
    assert (out.chunk_id, out.model_name, out.model_version, out.device_type) == (2, "tiny_linear", "1", "cpu")


@no_gpu_here
def test_onnx_engine_refuses_cuda_without_a_gpu(onnx_artifact) -> None:
    # onnxruntime-gpu lists CUDA as available here and would silently run on CPU: the engine must not.
    with pytest.raises(DeviceUnavailable, match="cuda") as err:
        ONNXEngine(onnx_artifact, device="cuda")
    assert "CPUExecutionProvider" in str(err.value)


@no_gpu_here
def test_onnx_engine_auto_runs_on_cpu_and_says_so_once(onnx_artifact, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoring.inference")
    engine = ONNXEngine(onnx_artifact, device="auto", nthread=1)
    assert engine.device_type == "cpu" and engine.providers == ("CPUExecutionProvider",)
    engine.inference_outputs(onnx_batch())
    engine.inference_outputs(onnx_batch(seed=4))
    (line,) = device_auto_lines(caplog)
    assert "CPU" in line.getMessage() and "tiny_linear" in line.getMessage()


def test_onnx_model_with_two_outputs_per_row_is_refused_naming_the_file(tmp_path: Path) -> None:
    two = np.concatenate([WEIGHTS, -WEIGHTS], axis=1)
    artifact = inference_model_artifact(onnx_registry(tmp_path, linear_onnx_bytes(two, np.zeros(2, np.float32))))
    engine = ONNXEngine(artifact, nthread=1)
    with pytest.raises(ModelArtifactError, match="one value per row") as err:
        engine.inference_outputs(onnx_batch(rows=10))
    assert str(artifact.model_path) in str(err.value)
    assert "(10, 2)" in str(err.value)


def test_onnx_engine_has_no_feature_contributions(onnx_artifact) -> None:
    engine = ONNXEngine(onnx_artifact, nthread=1)
    with pytest.raises(ModelArtifactError, match="no exact feature contributions") as err:
        engine.inference_contributions(onnx_batch(), np.array([0, 1]))
    assert "tiny_linear" in str(err.value)


# --- 3. XGBoost devices -------------------------------------------------------------------------------


@no_gpu_here
def test_xgboost_auto_runs_on_cpu_and_says_so_once(demo_version_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoring.inference")
    engine = XGBoostEngine(
        inference_model_artifact(demo_version_dir.parent, demo_version_dir.name), device="auto", nthread=1
    )
    assert engine.device_type == "cpu"
    # The margins come from the tree-margin kernel, which reproduced XGBoost's bit for bit at load.
    assert engine.providers == ("xgboost:cpu", "tree_margins")
    (line,) = device_auto_lines(caplog)
    assert "CPU" in line.getMessage()


@no_gpu_here
def test_a_device_problem_never_triggers_the_fallback(demo_version_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoring.inference")
    registry, version = demo_version_dir.parent, demo_version_dir.name
    with pytest.raises(DeviceUnavailable):
        inference_loaded_model(registry, version, version, device="cuda", nthread=1)
    assert not [r for r in caplog.records if "fallback" in r.getMessage()]


# --- flow helpers ---------------------------------------------------------------------------------


def query(settings: Settings, sql: str, params: list | None = None) -> pl.DataFrame:
    con = duckdb.connect(str(settings.duckdb_path), read_only=True)
    try:
        return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())
    finally:
        con.close()


def predictions_of(settings: Settings, day: dt.date) -> pl.DataFrame:
    return query(
        settings, "SELECT * FROM predictions WHERE job = ? AND partition_date = ? ORDER BY entity_id", [DEMO_JOB, day]
    )


def runs_of(settings: Settings, day: dt.date) -> list[dict]:
    return query(
        settings, "SELECT * FROM runs WHERE job = ? AND partition_date = ? ORDER BY started_at", [DEMO_JOB, day]
    ).to_dicts()


def quarantine_of(settings: Settings, day: dt.date) -> pl.DataFrame:
    return query(settings, "SELECT * FROM quarantine WHERE job = ? AND partition_date = ?", [DEMO_JOB, day])


def use_job_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings, change: Callable[[dict], None]
) -> Settings:
    """The demo job spec, changed by `change`, in a tmp jobs folder that `SCORING_JOBS_DIR` points at."""
    spec = yaml.safe_load((settings.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    change(spec)
    jobs = tmp_path / "jobs"
    jobs.mkdir(exist_ok=True)
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    return current_settings()


def nothing_published(settings: Settings, day: dt.date) -> None:
    assert not list(settings.data_dir.glob("output/**/*.parquet"))
    assert not list(settings.data_dir.glob("output/*/_staging/*/*"))
    for table in ("predictions", "quarantine"):
        assert query(settings, f"SELECT count(*) AS n FROM {table} WHERE partition_date = ?", [day])["n"].item() == 0


class EngineCrash(RuntimeError):
    """The injected inference fault."""


# --- 4. fallback version --------------------------------------------------------------------------


def add_broken_version_99(settings: Settings, source_version: str) -> Path:
    """Version 99: the demo model file, but metadata with another file's sha256 (a swapped file)."""
    registry = settings.model_registry_dir(DEMO_JOB)
    return copied_version(registry, registry / source_version, "99", sha256="0" * 64)


@pytest.mark.usefixtures("prefect_harness")
def test_a_broken_version_scores_with_the_fallback_and_says_so(
    demo_env: DemoEnv,
    fresh_data: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flows.score_partition import score_partition

    good = demo_env.plan.model_version
    add_broken_version_99(fresh_data, good)
    settings = use_job_spec(
        tmp_path, monkeypatch, fresh_data, lambda s: s["model"].update(version="99", fallback_version=good)
    )
    day = demo_env.plan.scoring_dates[-1]
    caplog.set_level(logging.INFO, logger="scoring.inference")

    result = score_partition(DEMO_JOB, day)

    preds = predictions_of(settings, day)
    assert preds.height > 0 and set(preds["model_version"]) == {good}
    (run,) = runs_of(settings, day)
    assert run["run_id"] == result.run_id and run["status"] == "succeeded"
    assert run["model_version"] == good
    assert run["rows_fallback"] == run["rows_scored"] == preds.height > 0
    assert run["rows_failed"] == 0
    reason = json.loads(run["inference"])["fallback_reason"]
    assert reason and "99" in reason and "sha256" in reason
    assert str(settings.model_registry_dir(DEMO_JOB) / "99" / "model.ubj") in reason
    warnings = [
        r
        for r in caplog.records
        if r.name == "scoring.inference" and r.levelno == logging.WARNING and r.getMessage().startswith("[INF]")
    ]
    assert warnings, [r.getMessage() for r in caplog.records if r.name == "scoring.inference"][:5]
    assert all("model_version=99" in r.getMessage() and f"fallback_version={good}" in r.getMessage() for r in warnings)


@pytest.mark.usefixtures("prefect_harness")
def test_a_broken_version_without_fallback_fails_the_run(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    add_broken_version_99(fresh_data, demo_env.plan.model_version)
    settings = use_job_spec(tmp_path, monkeypatch, fresh_data, lambda s: s["model"].update(version="99"))
    day = demo_env.plan.scoring_dates[-1]
    with pytest.raises(JobValidationError, match="sha256"):
        score_partition(DEMO_JOB, day)
    # Refused before the lease: no ledger row (not even a warehouse file) and nothing published.
    assert not settings.duckdb_path.exists()
    assert not (settings.output_dir(DEMO_JOB) / "predictions").exists()


# --- 5. retries and the error budget ------------------------------------------------------------------


@pytest.fixture
def flaky_engine(monkeypatch: pytest.MonkeyPatch):
    """Patch `XGBoostEngine.inference_outputs`; `fails(chunk_id, attempt)` says when an attempt raises.

    Returns a recorder: attempts per chunk, and the entity ids each chunk was given.
    """
    original = XGBoostEngine.inference_outputs

    class Recorder:
        attempts: Counter = Counter()
        entity_ids: dict[int, list[str]] = {}
        fails: Callable[[int, int], bool] = staticmethod(lambda chunk, attempt: False)

    recorder = Recorder()
    recorder.attempts = Counter()
    recorder.entity_ids = {}

    def inference_outputs(self, batch: InferenceInput):
        recorder.attempts[batch.chunk_id] += 1
        recorder.entity_ids[batch.chunk_id] = batch.entity_ids.to_pylist()
        if recorder.fails(batch.chunk_id, recorder.attempts[batch.chunk_id]):
            raise EngineCrash(f"injected fault in chunk {batch.chunk_id}, attempt {recorder.attempts[batch.chunk_id]}")
        return original(self, batch)

    monkeypatch.setattr(XGBoostEngine, "inference_outputs", inference_outputs)
    return recorder


@pytest.mark.usefixtures("prefect_harness")
def test_a_chunk_that_fails_once_is_retried_and_scores_the_same(
    demo_env: DemoEnv,
    fresh_data: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flaky_engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flows.score_partition import score_partition

    settings = use_job_spec(tmp_path, monkeypatch, fresh_data, lambda s: s["inference"].update(retries=1))
    day = demo_env.plan.scoring_dates[0]
    clean = score_partition(DEMO_JOB, day, 1000)
    clean_preds = predictions_of(settings, day)
    n_chunks = json.loads(runs_of(settings, day)[0]["inference"])["chunks"]
    assert n_chunks >= 3 and sum(flaky_engine.attempts.values()) == n_chunks  # one attempt each when clean

    flaky_engine.attempts.clear()
    flaky_engine.fails = lambda chunk, attempt: attempt == 1
    caplog.set_level(logging.INFO, logger="scoring.run")
    flaky = score_partition(DEMO_JOB, day, 1000)

    assert flaky_engine.attempts == Counter({c: 2 for c in range(n_chunks)})
    retried = [r for r in caplog.records if r.name == "scoring.run" and "failed on attempt 1 of 2" in r.getMessage()]
    assert len(retried) == n_chunks and all("EngineCrash" in r.getMessage() for r in retried)
    run = [r for r in runs_of(settings, day) if r["run_id"] == flaky.run_id][0]
    assert run["status"] == "succeeded" and run["rows_failed"] == 0
    assert run["rows_scored"] == clean.rows_scored > 0
    preds = predictions_of(settings, day)
    assert set(preds["run_id"]) == {flaky.run_id}
    assert_frame_equal(preds.drop("run_id"), clean_preds.drop("run_id"))


@pytest.mark.usefixtures("prefect_harness")
def test_a_chunk_that_always_fails_is_quarantined_within_the_error_budget(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flaky_engine
) -> None:
    from flows.score_partition import score_partition

    settings = use_job_spec(tmp_path, monkeypatch, fresh_data, lambda s: s["inference"].update(max_failed_share=0.5))
    day = demo_env.plan.scoring_dates[1]
    bad_chunk = 1
    flaky_engine.fails = lambda chunk, attempt: chunk == bad_chunk
    result = score_partition(DEMO_JOB, day, 1000)

    assert flaky_engine.attempts[bad_chunk] == 2  # 1 + the default retries: 1
    failed_ids = flaky_engine.entity_ids[bad_chunk]
    raw = pl.read_parquet(settings.raw_partition_dir(DEMO_JOB, day.isoformat()))
    assert set(failed_ids) <= set(raw["entity_id"][1000:2000])  # the ids of raw rows 1000..1999 that passed the guards

    (run,) = runs_of(settings, day)
    assert run["run_id"] == result.run_id and run["status"] == "succeeded"
    assert run["rows_failed"] == len(failed_ids) > 0
    assert len(failed_ids) < 1000  # the chunk also had rows the guards quarantined: both kinds must be kept
    assert run["rows_read"] == raw.height == run["rows_scored"] + run["rows_quarantined"] + run["rows_failed"]
    (failed_chunk,) = json.loads(run["inference"])["failed_chunks"]
    assert failed_chunk["chunk"] == bad_chunk and failed_chunk["rows"] == len(failed_ids)
    assert "EngineCrash" in failed_chunk["error"]

    quarantine = quarantine_of(settings, day)
    by_inference = quarantine.filter(pl.col("failed_expectations").list.first().str.starts_with("inference_failed"))
    assert sorted(by_inference["entity_id"]) == sorted(failed_ids)
    assert by_inference["failed_expectations"].to_list() == [["inference_failed(EngineCrash)"]] * len(failed_ids)
    assert quarantine.height == run["rows_quarantined"] + run["rows_failed"]
    # The raw row is kept, so the failed rows can be replayed.
    assert json.loads(by_inference["raw_row"][0])["entity_id"] == by_inference["entity_id"][0]

    preds = predictions_of(settings, day)
    assert preds.height == run["rows_scored"]
    assert not set(preds["entity_id"]) & set(failed_ids)
    # Every other chunk was scored: predictions + quarantined rows cover every raw row.
    assert preds.height + quarantine.height == raw.height


@pytest.mark.usefixtures("prefect_harness")
def test_a_failed_chunk_beyond_the_error_budget_fails_the_run(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flaky_engine
) -> None:
    from flows.score_partition import score_partition

    settings = fresh_data  # the demo spec: retries 1, max_failed_share 0 by default
    day = demo_env.plan.scoring_dates[1]
    flaky_engine.fails = lambda chunk, attempt: chunk == 1
    with pytest.raises(InferenceFailure, match="max_failed_share") as err:
        score_partition(DEMO_JOB, day, 1000)
    message = str(err.value)
    assert "EngineCrash" in message and day.isoformat() in message
    assert flaky_engine.attempts[1] == 2
    (run,) = runs_of(settings, day)
    assert run["status"] == "failed" and run["error"].startswith("InferenceFailure")
    nothing_published(settings, day)


# --- 6. determinism across chunk sizes ---------------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")
def test_large_partition_predictions_do_not_depend_on_the_chunk_size(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.score_partition import score_partition
    from tasks.demo.credit_data import write_demo_partitions

    settings = fresh_data
    day = demo_env.plan.scoring_dates[-1] + dt.timedelta(days=30)  # never trained on, never scored
    rows = 25_500
    write_demo_partitions(
        settings.data_dir / "raw" / DEMO_JOB,
        settings.data_dir / "labels" / DEMO_JOB,
        [day],
        rows_per_day=rows,
        seed=11,
        shift_days=0,
    )
    by_size: dict[int, pl.DataFrame] = {}
    for chunk_rows in (1_000, 10_000, 100_000):
        result = score_partition(DEMO_JOB, day, chunk_rows)
        run = [r for r in runs_of(settings, day) if r["run_id"] == result.run_id][0]
        assert run["status"] == "succeeded" and run["rows_read"] == rows
        assert json.loads(run["inference"])["chunks"] == math.ceil(rows / chunk_rows)
        preds = predictions_of(settings, day)
        assert set(preds["run_id"]) == {result.run_id}
        assert preds.height == run["rows_scored"] > 0.9 * rows
        by_size[chunk_rows] = preds.drop("run_id").sort("entity_id")
    assert [math.ceil(rows / c) for c in by_size] == [26, 3, 1]
    assert_frame_equal(by_size[1_000], by_size[100_000])
    assert_frame_equal(by_size[10_000], by_size[100_000])


def test_a_process_builds_an_engine_once_per_verified_version(demo_version_dir: Path, tmp_path: Path) -> None:
    """Partitions of a backfill share the engine; a version whose metadata changed builds anew, and a
    model file replaced after the first load is refused, not served from the kept engine."""
    registry = tmp_path / "registry" / DEMO_JOB
    copied_version(registry, demo_version_dir, "1")
    first = inference_loaded_model(registry, "1", None, device="cpu", nthread=1)
    again = inference_loaded_model(registry, "1", None, device="cpu", nthread=1)
    assert again.engine is first.engine
    other_threads = inference_loaded_model(registry, "1", None, device="cpu", nthread=2)
    assert other_threads.engine is not first.engine

    meta_path = registry / "1" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "training": {**meta.get("training", {}), "note": "recalibrated"}}))
    assert inference_loaded_model(registry, "1", None, device="cpu", nthread=1).engine is not first.engine

    model = registry / "1" / meta["model_file"]
    model.write_bytes(model.read_bytes()[:-10])
    with pytest.raises(ModelArtifactError, match="sha256"):
        inference_loaded_model(registry, "1", None, device="cpu", nthread=1)


def test_units_at_once_share_the_cores_and_a_job_s_nthread_wins(
    demo_version_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the thread runner has a worker per core this process may use (its affinity), and each unit's XGBoost
    call gets twice its fair share of them, at most every core, as XGBoost's own configuration says; a job's
    `inference.nthread` is taken as it is."""
    import os

    from tasks.settings import Settings

    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("SCORING_TASK_WORKERS", raising=False)
    assert Settings().task_workers == cores
    monkeypatch.setenv("SCORING_TASK_WORKERS", "7")
    assert Settings().task_workers == 7

    registry = tmp_path / "registry" / DEMO_JOB
    copied_version(registry, demo_version_dir, "1")

    def booster_threads(nthread: int, calls: int | None) -> int:
        engine = inference_loaded_model(
            registry, "1", None, device="cpu", nthread=nthread, concurrent_calls=calls
        ).engine
        return int(json.loads(engine.booster.save_config())["learner"]["generic_param"]["nthread"])

    for calls in (1, 2, 3, 64):
        assert booster_threads(0, calls) == min(cores, max(1, (2 * cores) // calls))
    assert booster_threads(3, 64) == 3
    # Without a count of units (Dask workers size their own threads), the job's 0 is XGBoost's own default.
    assert booster_threads(0, None) == 0
