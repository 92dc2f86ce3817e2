"""Training of the demo models, through the same guards and features as scoring."""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import xgboost as xgb

from tasks.contracts import FeatureKind
from tasks.features import job_features
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.jobs.registration import RegistrationReport, job_model_inputs, registered_job_model, registered_model_version
from tasks.jobspec import load_job_spec
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

SALES_XGB_PARAMS: dict[str, Any] = {
    "objective": "count:poisson",
    "eval_metric": "poisson-nloglik",
    "max_depth": 5,
    "eta": 0.1,
    "subsample": 0.8,
    "min_child_weight": 5,
    "tree_method": "hist",
}
SALES_ROUNDS = 200


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
    booster = fitted_booster(
        features.feature_matrix(train_rows),
        train_rows[label].to_numpy().astype(np.float32),
        names=features.FEATURES,
        seed=seed,
    )
    with tempfile.TemporaryDirectory() as scratch:
        model_file = Path(scratch) / "model.ubj"
        booster.save_model(str(model_file))
        return registered_job_model(
            job,
            model_file,
            settings=settings,
            holdout=frame.filter(pl.Series(holdout)),
            reference=train_rows,
            version=version,
            training={
                **_window(training_window),
                "rows_train": train_rows.height,
                "rows_quarantined_training": guarded.counts.rows_quarantined,
                "event_rate": float(frame[label].mean()),
                "seed": seed,
                "params": {**XGB_PARAMS, "rounds": ROUNDS},
                **(extra_training_info or {}),
            },
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
            model_file,
            registry_dir=model_dir.parent,
            version=model_dir.name,
            feature_version=feature_version,
            features=names,
            kinds=kinds,
            holdout_features=x[holdout],
            holdout_outcomes=y[holdout],
            reference_features=x[~holdout],
            rows_quarantined=rows_quarantined,
            training={
                **_window(training_window),
                "rows_train": int((~holdout).sum()),
                "event_rate": float(y.mean()),
                "seed": seed,
                "params": {**XGB_PARAMS, "rounds": ROUNDS},
                **(extra_training_info or {}),
            },
        )


def _labelled_rows(
    raw_dirs: list[Path], labels_dirs: list[Path], *, entity_column: str, by: str, label: str
) -> pl.DataFrame:
    """Raw rows of each day with their outcome from the same day's labels (rows without a label left out);
    days are joined one by one, as an entity (a store's item) comes back every day."""
    return pl.concat(
        [
            pl.read_parquet(raw).join(
                pl.read_parquet(labelled).select(pl.col(by).alias(entity_column), label), on=entity_column, how="inner"
            )
            for raw, labelled in zip(raw_dirs, labels_dirs, strict=True)
        ],
        how="vertical_relaxed",
    )


def train_sales_model(
    settings: Settings,
    job: str,
    *,
    raw_dirs: list[Path],
    labels_dirs: list[Path],
    holdout_days: int,
    version: str,
    seed: int,
    extra_training_info: dict[str, Any] | None = None,
) -> RegistrationReport:
    """Fit a Poisson XGBoost on all but the last `holdout_days` of the labelled days, and register it
    through `score register`'s path with those last days as the hold-out the model never saw.

    The training rows are the model inputs `score features` writes (`job_model_inputs`): the job's
    own guards and declared features, so the model is fitted on exactly what scoring feeds it. The
    training rows are the drift reference.
    """
    spec = load_job_spec(job, settings)
    labels = spec.monitoring.labels
    fit_days = len(raw_dirs) - holdout_days

    def rows(raw: list[Path], labelled: list[Path]) -> pl.DataFrame:
        return _labelled_rows(
            raw, labelled, entity_column=spec.entity_column, by=labels.entity_column, label=labels.outcome_column
        )

    train_rows, holdout = (
        rows(raw_dirs[:fit_days], labels_dirs[:fit_days]),
        rows(raw_dirs[fit_days:], labels_dirs[fit_days:]),
    )
    inputs = job_model_inputs(job, train_rows, settings=settings, labelled=True, what="training days")
    assert inputs.outcomes is not None, "labelled model inputs carry their outcomes"
    train = xgb.DMatrix(inputs.matrix, label=inputs.outcomes, feature_names=list(inputs.names), missing=np.nan)
    booster = xgb.train({**SALES_XGB_PARAMS, "seed": seed}, train, num_boost_round=SALES_ROUNDS)
    days = [d.name.removeprefix("date=") for d in raw_dirs]
    with tempfile.TemporaryDirectory() as scratch:
        model_file = Path(scratch) / "model.ubj"
        booster.save_model(str(model_file))
        return registered_job_model(
            job,
            model_file,
            settings=settings,
            holdout=holdout,
            reference=train_rows.drop(labels.outcome_column),
            version=version,
            training={
                "window_start": days[0],
                "window_end": days[fit_days - 1],
                "holdout_start": days[fit_days],
                "holdout_end": days[-1],
                "rows_train": int(inputs.matrix.shape[0]),
                "rows_quarantined_training": inputs.rows_quarantined,
                "mean_outcome": float(inputs.outcomes.mean()),
                "seed": seed,
                "params": {**SALES_XGB_PARAMS, "rounds": SALES_ROUNDS},
                **(extra_training_info or {}),
            },
        )
