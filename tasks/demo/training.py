"""Training of the demo classifiers, through the same guards and feature modules as scoring."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import xgboost as xgb

from tasks.drift import drift_bin_counts
from tasks.features import FeatureModule
from tasks.guards import GuardSuite, guarded_chunk
from tasks.inference.registry import ModelMetadata, ReferenceStats, inference_model_checksum
from tasks.prediction.calibration import predict_fitted_calibrator

log = logging.getLogger("scoring.training")

XGB_PARAMS: dict[str, Any] = {
    "objective": "binary:logistic",
    "eval_metric": "auc",
    "max_depth": 4,
    "eta": 0.08,
    "subsample": 0.8,
    "colsample_bytree": 0.9,
    "min_child_weight": 5,
    "tree_method": "hist",
}
ROUNDS = 200


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def reference_stats(matrix: np.ndarray, names: tuple[str, ...]) -> dict[str, ReferenceStats]:
    """Per-feature training distribution: moments, quantiles and a decile histogram."""
    stats: dict[str, ReferenceStats] = {}
    for j, name in enumerate(names):
        col = matrix[:, j].astype(np.float64)
        present = col[~np.isnan(col)]
        if present.size == 0:
            stats[name] = ReferenceStats(count=col.size, null_count=col.size, mean=None, std=None, min=None, max=None)
            continue
        qs = np.quantile(present, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99])
        edges = np.unique(np.quantile(present, np.linspace(0, 1, 11)))
        counts, _ = np.histogram(present, bins=edges) if edges.size > 1 else (np.array([present.size]), None)
        # Interior quantiles only: the training extremes would put one row in an edge bin of its own.
        percentiles = np.quantile(present, np.arange(1, 100) / 100)
        drift_edges, psi_edges = np.unique(percentiles), np.unique(percentiles[9::10])
        stats[name] = ReferenceStats(
            count=col.size,
            null_count=int(col.size - present.size),
            mean=float(present.mean()),
            std=float(present.std()),
            min=float(present.min()),
            max=float(present.max()),
            quantiles={f"p{int(q * 100):02d}": float(v) for q, v in zip([0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99], qs)},
            bin_edges=edges.tolist(),
            bin_counts=counts.tolist(),
            drift_edges=drift_edges.tolist(),
            drift_counts=drift_bin_counts(col, drift_edges)[0].tolist(),
            psi_edges=psi_edges.tolist(),
        )
    return stats


def train_credit_model(
    *,
    raw_dirs: list[Path],
    labels_dirs: list[Path],
    suite: GuardSuite,
    features: FeatureModule,
    entity_column: str,
    model_dir: Path,
    model_name: str,
    version: str,
    seed: int,
    training_window: tuple[dt.date, dt.date],
    extra_training_info: dict[str, Any] | None = None,
) -> ModelMetadata:
    """Train on the labelled window, calibrate on a held-out quarter, and register the version."""
    raw = pl.concat([pl.read_parquet(d) for d in raw_dirs], how="vertical_relaxed")
    labels = pl.concat([pl.read_parquet(d) for d in labels_dirs], how="vertical_relaxed")
    guarded = guarded_chunk(raw, suite, entity_column=entity_column)
    frame = guarded.scorable.join(labels.select(entity_column, "defaulted"), on=entity_column, how="inner")
    x = features.feature_matrix(frame)
    y = frame["defaulted"].to_numpy().astype(np.float32)
    return registered_classifier(
        x,
        y,
        names=features.FEATURES,
        feature_version=features.FEATURE_VERSION,
        model_dir=model_dir,
        model_name=model_name,
        version=version,
        seed=seed,
        training_window=training_window,
        rows_quarantined=guarded.counts.rows_quarantined,
        extra_training_info=extra_training_info,
    )


def registered_classifier(
    x: np.ndarray,
    y: np.ndarray,
    *,
    names: tuple[str, ...],
    feature_version: str,
    model_dir: Path,
    model_name: str,
    version: str,
    seed: int,
    training_window: tuple[dt.date, dt.date],
    rows_quarantined: int,
    extra_training_info: dict[str, Any] | None = None,
) -> ModelMetadata:
    """Fit the XGBoost classifier on labelled rows, calibrate it on a held-out quarter, register it.

    `x` holds the final model's input columns in `names` order (feature-model outputs included),
    so every job's classifier gets the same split, calibration, reference statistics and metadata.
    """
    rng = np.random.default_rng(seed)
    holdout = rng.random(x.shape[0]) < 0.25
    train = xgb.DMatrix(x[~holdout], label=y[~holdout], feature_names=list(names), missing=np.nan)
    valid = xgb.DMatrix(x[holdout], label=y[holdout], feature_names=list(names), missing=np.nan)
    booster = xgb.train({**XGB_PARAMS, "seed": seed}, train, num_boost_round=ROUNDS)
    holdout_margin = booster.predict(valid, output_margin=True)
    calibrator = predict_fitted_calibrator(holdout_margin, y[holdout])
    auc = _auc(holdout_margin, y[holdout])

    model_dir.mkdir(parents=True, exist_ok=True)
    model_path = model_dir / "model.ubj"
    booster.save_model(str(model_path))
    metadata = ModelMetadata(
        name=model_name,
        version=version,
        framework="xgboost",
        model_file=model_path.name,
        sha256=inference_model_checksum(model_path),
        feature_version=feature_version,
        features=list(names),
        feature_dtypes={n: "float32" for n in names},
        calibration=calibrator.to_metadata(),
        reference=reference_stats(x[~holdout], names),
        training={
            "window_start": training_window[0].isoformat(),
            "window_end": training_window[1].isoformat(),
            "rows_train": int((~holdout).sum()),
            "rows_holdout": int(holdout.sum()),
            "rows_quarantined": rows_quarantined,
            "event_rate": float(y.mean()),
            "holdout_auc": auc,
            "seed": seed,
            "params": {**XGB_PARAMS, "rounds": ROUNDS},
            **(extra_training_info or {}),
        },
    )
    (model_dir / "metadata.json").write_text(json.dumps(metadata.model_dump(mode="json"), indent=2))
    log.info("trained %s %s: holdout AUC %.3f on %d rows", model_name, version, auc, int(holdout.sum()))
    return metadata
