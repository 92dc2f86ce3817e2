"""Training of the demo classifiers, through the same guards and feature modules as scoring."""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import xgboost as xgb

from tasks.features import FeatureKind, job_features
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.jobspec import load_job_spec
from tasks.jobs.registration import RegistrationReport, registered_job_model, registered_model_version
from tasks.settings import Settings

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


def fitted_booster(x: np.ndarray, y: np.ndarray, *, names: tuple[str, ...], seed: int) -> xgb.Booster:
    """The demo's XGBoost classifier, as a user's training script would fit it."""
    train = xgb.DMatrix(x, label=y, feature_names=list(names), missing=np.nan)
    return xgb.train({**XGB_PARAMS, "seed": seed}, train, num_boost_round=ROUNDS)


def _window(training_window: tuple[dt.date, dt.date]) -> dict[str, str]:
    return {"window_start": training_window[0].isoformat(), "window_end": training_window[1].isoformat()}


def train_credit_model(
    settings: Settings,
    job: str,
    *,
    raw_dirs: list[Path],
    labels_dirs: list[Path],
    version: str,
    seed: int,
    training_window: tuple[dt.date, dt.date],
    extra_training_info: dict[str, Any] | None = None,
) -> RegistrationReport:
    """Train on three quarters of the labelled window and register through `score register`'s path,
    with the other quarter as the hold-out and the training rows as the drift reference."""
    spec = load_job_spec(job, settings)
    suite = load_guard_suite(settings.expectations_dir / spec.expectation_suite, entity_column=spec.entity_column)
    features = job_features(spec)
    label = spec.monitoring.labels.outcome_column
    raw = pl.concat([pl.read_parquet(d) for d in raw_dirs], how="vertical_relaxed")
    labels = pl.concat([pl.read_parquet(d) for d in labels_dirs], how="vertical_relaxed")
    guarded = guarded_chunk(raw, suite, entity_column=spec.entity_column)
    by = spec.monitoring.labels.entity_column
    frame = guarded.scorable.join(
        labels.select(pl.col(by).alias(spec.entity_column), label), on=spec.entity_column, how="inner"
    )
    holdout = np.random.default_rng(seed).random(frame.height) < 0.25
    train_rows = frame.filter(pl.Series(~holdout))
    booster = fitted_booster(features.feature_matrix(train_rows), train_rows[label].to_numpy().astype(np.float32),
                             names=features.FEATURES, seed=seed)
    with tempfile.TemporaryDirectory() as scratch:
        model_file = Path(scratch) / "model.ubj"
        booster.save_model(str(model_file))
        return registered_job_model(
            job, model_file, settings=settings, holdout=frame.filter(pl.Series(holdout)), reference=train_rows,
            version=version,
            training={**_window(training_window), "rows_train": train_rows.height, "rows_quarantined_training":
                      guarded.counts.rows_quarantined, "event_rate": float(frame[label].mean()), "seed": seed,
                      "params": {**XGB_PARAMS, "rounds": ROUNDS}, **(extra_training_info or {})},
        )


def registered_classifier(
    x: np.ndarray,
    y: np.ndarray,
    *,
    names: tuple[str, ...],
    feature_version: str,
    model_dir: Path,
    seed: int,
    training_window: tuple[dt.date, dt.date],
    rows_quarantined: int,
    kinds: dict[str, FeatureKind] | None = None,
    extra_training_info: dict[str, Any] | None = None,
) -> RegistrationReport:
    """Fit the classifier on three quarters of labelled model-input rows and register it as
    `model_dir` (`<registry>/<name>/<version>`), the other quarter as the hold-out.

    For jobs whose final model takes feature-model outputs (gearbox): `x` already holds them.
    """
    holdout = np.random.default_rng(seed).random(x.shape[0]) < 0.25
    booster = fitted_booster(x[~holdout], y[~holdout], names=names, seed=seed)
    with tempfile.TemporaryDirectory() as scratch:
        model_file = Path(scratch) / "model.ubj"
        booster.save_model(str(model_file))
        return registered_model_version(
            model_file, registry_dir=model_dir.parent, version=model_dir.name, feature_version=feature_version,
            features=names, kinds=kinds, holdout_features=x[holdout], holdout_outcomes=y[holdout],
            reference_features=x[~holdout], rows_quarantined=rows_quarantined,
            training={**_window(training_window), "rows_train": int((~holdout).sum()), "event_rate": float(y.mean()),
                      "seed": seed, "params": {**XGB_PARAMS, "rounds": ROUNDS}, **(extra_training_info or {})},
        )
