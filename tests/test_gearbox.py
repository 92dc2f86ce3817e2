"""The gearbox fault-warning job: band features, the generator, the autoencoder's ONNX export, and
a whole run of the shared `score_partition` flow on a small gearbox demo."""

from __future__ import annotations

import datetime as dt
import json
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import onnxruntime as ort
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from scipy.stats import rankdata

from tasks.demo.gearbox_data import (
    DIRTY_RATES,
    LABEL_DELAY_DAYS,
    RATED_RPM,
    ROW_GROUP_ROWS,
    TURBINES,
    GearboxDayPlan,
    fleet,
    generate_day,
    synthetic_windows,
    write_gearbox_partitions,
)
from tasks.demo.setup import DemoPlan, prepared_gearbox_demo
from tasks.features import gearbox as fm
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.inference.onnx_check import inference_validate_onnx_model
from tasks.settings import PROJECT_ROOT, Settings, current_settings

JOB = "gearbox"
SUITE = load_guard_suite(PROJECT_ROOT / "expectations" / "gearbox.json")
SPEC = yaml.safe_load((PROJECT_ROOT / "jobs" / "gearbox.yaml").read_text())
DEMO_ARGS = {"days": 2, "windows_per_day": 100, "train_days": 8, "seed": 11, "end": dt.date(2026, 3, 10)}
_OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}


def window_frame(windows: np.ndarray) -> pl.DataFrame:
    """A frame whose `window` column is an Arrow list<float32> built from the rows of `windows`."""
    n, width = windows.shape
    offsets = pa.array(np.arange(0, (n + 1) * width, width, dtype=np.int32))
    column = pa.ListArray.from_arrays(offsets, pa.array(windows.astype(np.float32).ravel()))
    return pl.from_arrow(pa.table({"entity_id": [f"w{i}" for i in range(n)], "window": column}))


def sine(freq_hz: float, rows: int = 1) -> np.ndarray:
    t = np.arange(fm.WINDOW_SAMPLES) / fm.SAMPLE_RATE_HZ
    return np.tile(np.sin(2 * np.pi * freq_hz * t), (rows, 1))


def fleet_windows(rng: np.random.Generator, rows: int, severity: float, *, seed: int = 7) -> np.ndarray:
    """Windows of turbine T01 of the `seed` fleet at rated speed, all with one fault severity."""
    traits = fleet(seed)
    return synthetic_windows(
        rng,
        shaft_rpm=np.full(rows, RATED_RPM),
        severity=np.full(rows, severity),
        gain=np.full(rows, traits.gain[0]),
        noise_rms=np.full(rows, traits.noise_rms[0]),
        resonance_hz=np.full(rows, traits.resonance_hz[0]),
    )


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    ranks = rankdata(scores)
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# --- features ---------------------------------------------------------------------------------


@pytest.mark.parametrize("freq_hz", [150.0, 1050.0, 1950.0, 2850.0, 3450.0, 4750.0])
def test_a_pure_sine_puts_its_energy_in_the_band_containing_it(freq_hz: float) -> None:
    features = fm.feature_matrix(window_frame(sine(freq_hz)))[0]
    bands = features[: len(fm.BANDS)]
    expected = next(
        i
        for i, (lo, hi) in enumerate(zip(fm.BAND_EDGES_HZ[:-1], fm.BAND_EDGES_HZ[1:], strict=True))
        if lo <= freq_hz < hi
    )
    assert int(np.argmax(bands)) == expected, fm.BANDS[int(np.argmax(bands))]
    # A unit sine has power 1/2 (-3 dB); the neighbouring bands get only Hann-window leakage.
    assert bands[expected] == pytest.approx(-3.01, abs=0.3)
    assert np.delete(bands, expected).max() < bands[expected] - 20
    assert features[fm.FEATURES.index("rms")] == pytest.approx(np.sqrt(0.5), rel=0.01)


def test_feature_matrix_is_a_c_contiguous_float32_matrix_in_features_order() -> None:
    windows = fleet_windows(np.random.default_rng(0), 50, 0.0)
    matrix = fm.feature_matrix(window_frame(windows))
    assert matrix.dtype == np.float32 and matrix.flags.c_contiguous
    assert matrix.shape == (50, len(fm.FEATURES)) == (50, 18)
    assert fm.FEATURES[:2] == ("band_0_300hz", "band_300_600hz") and fm.FEATURES[-2:] == ("rms", "kurtosis")
    assert np.isfinite(matrix).all()
    assert fm.feature_matrix(window_frame(windows).head(0)).shape == (0, len(fm.FEATURES))


def test_a_chunk_and_its_halves_give_identical_features() -> None:
    rng = np.random.default_rng(1)
    windows = np.concatenate([fleet_windows(rng, 37, 0.0), fleet_windows(rng, 24, 0.7)])
    frame = window_frame(windows)
    whole = fm.feature_matrix(frame)
    halves = np.concatenate([fm.feature_matrix(frame.slice(0, 29)), fm.feature_matrix(frame.slice(29))])
    assert np.array_equal(whole, halves)
    assert np.array_equal(fm.feature_matrix(frame.slice(40, 5)), whole[40:45])


def test_window_matrix_follows_the_offsets_of_a_sliced_arrow_column() -> None:
    windows = np.random.default_rng(2).standard_normal((9, fm.WINDOW_SAMPLES)).astype(np.float32)
    assert np.array_equal(fm.window_matrix(window_frame(windows).slice(3, 4)), windows[3:7])


def test_a_window_of_the_wrong_length_is_an_error_naming_the_column() -> None:
    frame = pl.DataFrame(
        {"window": [np.zeros(fm.WINDOW_SAMPLES, np.float32), np.zeros(2000, np.float32)]},
        schema={"window": pl.List(pl.Float32)},
    )
    with pytest.raises(ValueError, match=r"column 'window' must hold 2048 samples.*1 of 2 row\(s\).*\[2000\]"):
        fm.feature_matrix(frame)


def test_a_missing_window_is_an_error_naming_the_column() -> None:
    frame = pl.DataFrame({"window": [[0.0] * fm.WINDOW_SAMPLES, None]}, schema={"window": pl.List(pl.Float32)})
    with pytest.raises(ValueError, match="column 'window' has 1 missing window"):
        fm.feature_matrix(frame)


# --- generator --------------------------------------------------------------------------------


def test_faulty_windows_have_more_energy_at_the_mesh_harmonics() -> None:
    rng = np.random.default_rng(3)
    healthy = fm.feature_matrix(window_frame(fleet_windows(rng, 200, 0.0)))
    faulty = fm.feature_matrix(window_frame(fleet_windows(rng, 200, 0.6)))
    gain = faulty.mean(axis=0) - healthy.mean(axis=0)
    for band in ("band_1800_2100hz", "band_2700_3000hz", "band_3600_3900hz"):  # 2nd..4th mesh harmonic
        assert gain[fm.FEATURES.index(band)] > 2.0, (band, gain[fm.FEATURES.index(band)])
    assert gain[fm.FEATURES.index("band_1800_2100hz")] > gain[fm.FEATURES.index("band_0_300hz")] + 2.0
    assert gain[fm.FEATURES.index("kurtosis")] > 0


def test_labelled_faults_are_learnable_but_no_single_feature_separates_them() -> None:
    raw, labels = generate_day(GearboxDayPlan(dt.date(2026, 2, 2), windows_per_turbine=300), seed=7)
    frame = guarded_chunk(raw, SUITE, entity_column="entity_id").scorable.join(
        labels, on="entity_id", maintain_order="left"
    )
    x, y = fm.feature_matrix(frame), frame["outcome"].to_numpy()
    per_feature = [auc(x[:, j], y) for j in range(x.shape[1])]
    assert 0.02 < y.mean() < 0.15
    assert max(per_feature) > 0.75
    assert max(per_feature) < 0.95


def test_a_day_is_seeded_by_its_date_alone() -> None:
    plan = GearboxDayPlan(dt.date(2026, 2, 3), windows_per_turbine=20)
    first, first_labels = generate_day(plan, seed=5)
    again, again_labels = generate_day(plan, seed=5)
    other, _ = generate_day(plan, seed=6)
    assert first.equals(again) and first_labels.equals(again_labels)
    assert not first.equals(other)


def test_written_partitions_follow_the_raw_contract(tmp_path: Path) -> None:
    day = dt.date(2026, 2, 4)
    (raw_dir,) = write_gearbox_partitions(
        tmp_path / "raw", tmp_path / "labels", [day], windows_per_turbine=1100, seed=7
    )
    files = sorted(raw_dir.glob("*.parquet"))
    assert [f.name for f in files] == [f"part-{t}.parquet" for t in TURBINES]
    for f in files:
        meta = pq.ParquetFile(f).metadata
        assert meta.num_rows == 1100
        assert max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) <= ROW_GROUP_ROWS
    raw = pq.read_table(raw_dir)
    assert raw.schema.field("window").type == pa.list_(pa.float32())
    assert raw.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    frame = pl.read_parquet(raw_dir)
    assert frame["entity_id"].str.contains(r"^T\d{2}-20260204-\d{5}$").all()
    labels = pl.read_parquet(tmp_path / "labels" / f"date={day}")
    assert set(labels["outcome"].unique()) == {0, 1}
    assert (labels["observed_date"] == day + dt.timedelta(days=LABEL_DELAY_DAYS)).all()
    assert set(labels["entity_id"]) == set(frame["entity_id"])


def test_the_guards_quarantine_exactly_the_dirty_windows() -> None:
    raw, _ = generate_day(GearboxDayPlan(dt.date(2026, 2, 5), windows_per_turbine=1000), seed=7)
    lengths = raw["window"].list.len()
    missing = raw["window"].is_null()
    truncated = ~missing & (lengths != fm.WINDOW_SAMPLES)
    curtailed = ~raw["shaft_rpm"].is_between(1400, 1700)
    dirty = (missing | truncated | curtailed).to_numpy()
    for kind, mask in (("window_missing", missing), ("window_truncated", truncated), ("curtailed", curtailed)):
        rate = DIRTY_RATES[kind]
        assert abs(int(mask.sum()) - raw.height * rate) <= 5 * np.sqrt(raw.height * rate), kind
    guarded = guarded_chunk(raw, SUITE, entity_column="entity_id")
    assert guarded.counts.rows_quarantined == int(dirty.sum())
    assert set(guarded.quarantined["entity_id"]) == set(raw.filter(pl.Series(dirty))["entity_id"])
    assert guarded.counts.rows_repaired == 0
    assert fm.feature_matrix(guarded.scorable).shape == (raw.height - int(dirty.sum()), len(fm.FEATURES))


# --- the autoencoder's export -----------------------------------------------------------------


def test_exported_autoencoder_gives_torchs_output_for_any_batch(tmp_path: Path) -> None:
    from tasks.demo.gearbox_training import AE_PARAMS, exported_autoencoder, fitted_autoencoder, torch_outputs

    rng = np.random.default_rng(4)
    healthy = fm.feature_matrix(window_frame(fleet_windows(rng, 400, 0.0)))
    model = fitted_autoencoder(healthy, seed=3, params={**AE_PARAMS, "epochs": 5, "batch": 128})
    path = tmp_path / "model.onnx"
    exported_autoencoder(model, path, healthy[:32])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    fresh = fm.feature_matrix(
        window_frame(np.concatenate([fleet_windows(rng, 150, 0.0), fleet_windows(rng, 150, 0.8)]))
    )
    for batch in (fresh, fresh[:1], fresh[:77]):
        onnx_out = session.run(None, {"features": batch})[0]
        assert onnx_out.shape == (batch.shape[0],)
        np.testing.assert_allclose(onnx_out, torch_outputs(model, batch), rtol=0, atol=1e-4)
    assert inference_validate_onnx_model(path, fresh, torch_outputs(model, fresh)).ok


# --- a small gearbox demo, scored by the shared flow ------------------------------------------


@dataclass(frozen=True)
class GearboxEnv:
    settings: Settings
    plan: DemoPlan


@pytest.fixture(scope="module")
def gearbox_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GearboxEnv]:
    data_dir = tmp_path_factory.mktemp("gearbox-data")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("SCORING_DATA_DIR", "SCORING_JOBS_DIR", "SCORING_EXPECTATIONS_DIR", "SCORING_WAREHOUSE_PATH"):
            mp.delenv(name, raising=False)
        mp.setenv("SCORING_DATA_DIR", str(data_dir))
        settings = current_settings()
        assert settings.data_dir == data_dir
        yield GearboxEnv(settings=settings, plan=prepared_gearbox_demo(settings, **DEMO_ARGS))


def test_the_demo_registers_the_autoencoder_and_the_classifier_trained_with_it(gearbox_env: GearboxEnv) -> None:
    settings, plan = gearbox_env.settings, gearbox_env.plan
    ae_version = plan.feature_model_versions["gearbox_autoencoder"]
    ae_dir = settings.model_registry_dir("gearbox_autoencoder") / ae_version
    ae = json.loads((ae_dir / "metadata.json").read_text())
    assert ae["framework"] == "onnx" and ae["model_file"] == "model.onnx"
    assert ae["features"] == list(fm.FEATURES) and ae["feature_version"] == fm.FEATURE_VERSION
    assert ae["calibration"] == {}
    with np.load(ae_dir / "reference_io.npz") as io:
        assert io["inputs"].shape[1] == len(fm.FEATURES) and io["outputs"].shape == (io["inputs"].shape[0],)
    assert ae["training"]["onnx_check"]["max_abs_diff"] <= 1e-4

    clf = json.loads((settings.model_registry_dir("gearbox_fault") / plan.model_version / "metadata.json").read_text())
    assert clf["framework"] == "xgboost"
    assert clf["features"] == [*fm.FEATURES, "ae_reconstruction_error"]
    assert clf["training"]["feature_models"] == {"gearbox_autoencoder": ae_version}
    assert clf["calibration"] and "ae_reconstruction_error" in clf["reference"]


def test_the_same_window_reuses_both_models(gearbox_env: GearboxEnv) -> None:
    again = prepared_gearbox_demo(gearbox_env.settings, **DEMO_ARGS)
    assert again == gearbox_env.plan
    for name in ("gearbox_autoencoder", "gearbox_fault"):
        assert [p.name for p in gearbox_env.settings.model_registry_dir(name).iterdir()] == ["1"]


def test_reconstruction_error_is_higher_on_faulty_windows(gearbox_env: GearboxEnv) -> None:
    version = gearbox_env.plan.feature_model_versions["gearbox_autoencoder"]
    session = ort.InferenceSession(
        str(gearbox_env.settings.model_registry_dir("gearbox_autoencoder") / version / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )
    rng = np.random.default_rng(5)
    errors = {}
    for severity in (0.0, 0.3, 0.7):
        features = fm.feature_matrix(window_frame(fleet_windows(rng, 300, severity, seed=DEMO_ARGS["seed"])))
        errors[severity] = session.run(None, {"features": features})[0]
    assert errors[0.3].mean() > 1.5 * errors[0.0].mean()
    assert errors[0.7].mean() > errors[0.3].mean()


def _query(settings: Settings, sql: str, params: list) -> pl.DataFrame:
    con = duckdb.connect(str(settings.duckdb_path), read_only=True)
    try:
        return pl.from_arrow(con.sql(sql, params=params).to_arrow_table())
    finally:
        con.close()


@pytest.mark.usefixtures("prefect_harness")
def test_score_partition_scores_the_gearbox_job_end_to_end(gearbox_env: GearboxEnv) -> None:
    from flows.score_partition import score_partition

    settings = gearbox_env.settings
    results = [score_partition(JOB, day) for day in gearbox_env.plan.scoring_dates]
    predictions = _query(settings, "SELECT * FROM predictions WHERE job = ? ORDER BY entity_id", [JOB])
    runs = _query(settings, "SELECT * FROM runs WHERE job = ?", [JOB])
    assert set(runs["status"]) == {"succeeded"} and runs.height == len(results)
    assert set(predictions["run_id"]) == {r.run_id for r in results}

    dates = [d.isoformat() for d in gearbox_env.plan.scoring_dates]
    raw = pl.concat([pl.read_parquet(settings.raw_partition_dir(JOB, d)) for d in dates])
    guarded = guarded_chunk(raw, SUITE, entity_column="entity_id")
    assert predictions.height == guarded.scorable.height
    assert set(predictions["entity_id"]) == set(guarded.scorable["entity_id"])
    assert set(predictions["model_name"]) == {"gearbox_fault"}
    assert set(predictions["feature_version"]) == {fm.FEATURE_VERSION}

    rules = SPEC["prediction"]["rules"]
    for row in predictions.iter_rows(named=True):
        rule = next(
            r for r in rules if all(_OPS[op](row[f], v) for f, cmp in r["when"].items() for op, v in cmp.items())
        )
        assert (row["rule_id"], row["decision"]) == (rule["id"], rule["decision"])
    assert {"alarm", "normal"} <= set(predictions["decision"]) <= {"alarm", "inspect", "normal"}

    reasons = SPEC["prediction"]["reasons"]
    # A code's text is its default or, where the spec bands the feature, the side the row's value is on
    # (which side is checked on the credit job, tests/test_reasons_e2e.py).
    codes = {c["code"]: {c["text"], *c.get("by_band", {}).values()} for c in reasons["codes"].values()} | {
        reasons["no_reason_code"]: {reasons["no_reason_text"]}
    }
    alarms = predictions.filter(pl.col("decision") == "alarm")
    assert alarms.height > 0
    assert (alarms["reason_codes"].list.len() > 0).all()
    for row in alarms.select("reason_codes", "reason_texts").iter_rows(named=True):
        assert len(row["reason_texts"]) == len(row["reason_codes"])
        assert all(t in codes[c] for c, t in zip(row["reason_codes"], row["reason_texts"], strict=True)), row
    names_a_band = alarms["reason_texts"].list.eval(pl.element().str.contains(r"kHz band \(")).list.any()
    assert names_a_band.mean() > 0.9, alarms["reason_texts"].to_list()
    assert predictions.filter(pl.col("decision") == "normal")["reason_codes"].list.len().max() == 0

    labels = pl.concat([pl.read_parquet(settings.labels_partition_dir(JOB, d)) for d in dates])
    scored = predictions.join(labels, on="entity_id", how="inner")
    assert scored.height == predictions.height
    y = scored["outcome"].to_numpy()
    assert auc(scored["probability"].to_numpy(), y) > 0.8
    assert scored.filter(pl.col("decision") == "alarm")["outcome"].mean() > 3 * y.mean()


def test_check_model_passes_on_the_demo_autoencoder(gearbox_env: GearboxEnv, prefect_logging: None) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    version_dir = (
        gearbox_env.settings.model_registry_dir("gearbox_autoencoder")
        / gearbox_env.plan.feature_model_versions["gearbox_autoencoder"]
    )
    result = CliRunner().invoke(app, ["check-model", str(version_dir)])
    assert result.exit_code == 0, result.output
    assert "not ok" not in result.output and "ok" in result.output


@pytest.mark.usefixtures("prefect_harness")
def test_the_model_card_of_the_gearbox_job_is_filled_from_its_last_run(gearbox_env: GearboxEnv) -> None:
    from tasks.reports.model_card import job_model_card

    card = job_model_card("gearbox", gearbox_env.settings)
    assert f"gearbox_fault version {gearbox_env.plan.model_version} (xgboost" in card
    assert "gearbox_autoencoder latest → `ae_reconstruction_error`" in card
    assert "no succeeded run yet" not in card and "gearbox fault within 7 days" in card
    assert "ALARM → alarm" in card and "INSPECT → inspect" in card


def test_an_autoencoder_newer_than_the_classifier_was_trained_with_is_refused(gearbox_env: GearboxEnv) -> None:
    import shutil

    from tasks.errors import JobValidationError
    from tasks.scoring.prepared import prepared_job

    registry = gearbox_env.settings.model_registry_dir("gearbox_autoencoder")
    trained = gearbox_env.plan.feature_model_versions["gearbox_autoencoder"]
    newer = registry / "999"
    shutil.copytree(registry / trained, newer)
    meta = json.loads((newer / "metadata.json").read_text())
    (newer / "metadata.json").write_text(json.dumps({**meta, "version": "999"}))
    try:
        with pytest.raises(JobValidationError, match="gearbox_autoencoder") as err:
            prepared_job("gearbox", gearbox_env.plan.scoring_dates[-1], gearbox_env.settings)
        assert f"{trained}, but gearbox_autoencoder 999" in str(err.value)
    finally:
        shutil.rmtree(newer)
