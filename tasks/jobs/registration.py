"""Registration: a model file trained anywhere plus a labelled hold-out → a new registry version.

One path for users (`score register`) and the demo trainers alike. The model file is checked
(format, no pickles, a binary classifier for a binary job and a regressor for a forecast job, inputs
matching the job's features), its raw outputs on the hold-out are computed by the same engine that
scores, the calibration (binary) or the error model and conformal interval (forecasts,
tasks/jobs/conformal.py) are fitted on them, the
reference statistics for drift come from the reference rows (the hold-out unless given), and the
version folder is written aside and renamed into the registry in one step, never over an
existing version.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from pydantic import ValidationError

from tasks.contracts import FeatureKind, InferenceInput
from tasks.errors import JobProblem, JobSpecError, JobValidationError, LabelError, ModelArtifactError, PartitionError
from tasks.features import FeatureModule, feature_kinds, job_features
from tasks.features.declared import DeclaredFeatures
from tasks.guards import GuardSuite, guarded_chunk, load_guard_suite, raw_schema_problems
from tasks.inference.config import VERSION_PATTERN, FeatureModelRef
from tasks.inference.contributions import inference_checked_explanation
from tasks.inference.engine import LoadedModel, inference_engine, inference_loaded_model
from tasks.inference.error_model import ERROR_MODEL_FILE
from tasks.inference.frameworks import (
    XGBOOST_FORECAST_OBJECTIVES,
    inference_framework_input_problem,
    inference_framework_registration_fields,
    inference_xgboost_module,
)
from tasks.inference.registry import (
    ACCEPTED_MODEL_SUFFIXES,
    FRAMEWORK_OF_SUFFIX,
    ModelArtifact,
    ModelExplanation,
    ModelMetadata,
    ReferenceStats,
    inference_model_artifact,
    inference_model_checksum,
    inference_model_file_problem,
    inference_model_versions,
    inference_reasons_unavailable,
)
from tasks.jobs.class_registration import (
    class_calibration_note,
    class_order_problem,
    class_reference,
    fitted_class_calibration,
)
from tasks.jobs.conformal import IntervalCheck, fitted_conformal_interval
from tasks.jobspec import JobSpec, LabelSource, load_job_spec
from tasks.monitoring.health import ATTRIBUTION_REFERENCE_ROWS, fitted_health_reference, holdout_auc_check
from tasks.prediction.calibration import ProbabilityMap, predict_fitted_calibrator, predict_one_outcome_problem
from tasks.prediction.calibration_check import CalibrationQuality, predict_calibration_quality
from tasks.prediction.class_labels import predict_binary_label_events, predict_class_label_indices
from tasks.prediction.forecasts import predict_forecast_values
from tasks.prediction.multiclass import ClassProbabilityMap
from tasks.quality.drift import FORECAST_DRIFT_NAME, reference_statistics
from tasks.settings import Settings

log = logging.getLogger("scoring.registration")

REGISTRATION_REPORT = "registration.json"
"""Beside metadata.json in every version folder registered through this module."""
BINARY_OBJECTIVES = ("binary:logistic", "binary:logitraw")
"""XGBoost objectives whose output is a margin (a log-odds) the calibration can map to a probability."""
FORECAST_OBJECTIVES = XGBOOST_FORECAST_OBJECTIVES
MULTICLASS_OBJECTIVES = ("multi:softprob",)


@dataclass(frozen=True)
class RegistrationReport:
    """What registration found and wrote; printed by `score register`, kept as registration.json."""

    model: str
    version: str
    directory: Path
    framework: str
    features: list[str]
    rows: int
    events: int
    rows_quarantined: int
    auc: float | None
    reference_rows: int
    calibration: CalibrationQuality | None
    """Binary models: the calibration's quality on the hold-out."""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What registration chose that is not a problem: the ONNX output that scores, reasons off."""
    target: str = "binary"
    interval: IntervalCheck | None = None
    """Forecast models: the conformal interval's coverage and width on the held-back part of the hold-out."""
    class_calibration: dict[str, Any] | None = None
    """Multiclass models: accuracy, log loss and the classwise reliability of the calibrated vector on the hold-out (out of fold)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "framework": self.framework,
            "target": self.target,
            "features": self.features,
            "rows": self.rows,
            "events": self.events,
            "rows_quarantined": self.rows_quarantined,
            "auc": self.auc,
            "reference_rows": self.reference_rows,
            "calibration": dataclasses.asdict(self.calibration) if self.calibration is not None else None,
            "interval": self.interval.as_json() if self.interval is not None else None,
            "class_calibration": self.class_calibration,
            "warnings": self.warnings,
            "notes": self.notes,
        }


def holdout_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """Rank AUC (ties get mid-ranks); None when the hold-out has one class only."""
    from scipy.stats import rankdata

    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(scores)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def holdout_actuals_problem(actuals: np.ndarray, kind: str) -> str | None:
    """Why a forecast job's actuals cannot fit its interval (missing, infinite, a negative or fractional count), or None."""
    bad = ~np.isfinite(actuals)
    if bad.any():
        return f"hold {int(bad.sum())} missing or infinite values, e.g. {actuals[bad][:3].tolist()}"
    if kind == "count":
        wrong = (actuals < 0) | (actuals != np.round(actuals))
        if wrong.any():
            return f"must be non-negative whole numbers for a count job (target.kind count); {int(wrong.sum())} are not, e.g. {actuals[wrong][:3].tolist()}"
    if np.unique(actuals[:10_000]).size < 2:
        return f"are all {actuals[0]:g}: a forecast fitted on one value cannot be checked"
    return None


def _next_version(registry_dir: Path) -> str:
    numeric = [int(v) for v in inference_model_versions(registry_dir) if v.isdigit()]
    return str(max(numeric, default=0) + 1)


def _xgboost_kind_problem(objective: str, kind: str) -> str | None:
    """Why an XGBoost objective does not fit a job of `kind`, or None."""
    if kind == "multiclass":
        if objective in MULTICLASS_OBJECTIVES:
            return None
        if objective == "multi:softmax":
            return (
                "has objective 'multi:softmax', which outputs the class only; train with multi:softprob (the same trees, "
                "with the probability of every class), or set booster.set_param({'objective': 'multi:softprob'}) and save it again"
            )
        what = (
            "a binary classifier"
            if objective in BINARY_OBJECTIVES
            else "a regression objective"
            if objective in FORECAST_OBJECTIVES
            else "not a multiclass objective"
        )
        return f"has objective {objective!r}, {what}, but the job is multiclass (target.kind): register a multi:softprob classifier"
    if objective.startswith("multi:"):
        return (
            f"has objective {objective!r}, a multiclass classifier, but the job is {kind} (target.kind): register a model of the job's "
            "kind, or set target.kind: multiclass with its classes in the job spec"
        )
    if kind == "binary":
        if objective in BINARY_OBJECTIVES:
            return None
        if objective in FORECAST_OBJECTIVES:
            return (
                f"has objective {objective!r}, a regression objective, but the job is binary (target.kind): register a binary classifier "
                "(binary:logistic or binary:logitraw), or set target.kind: regression or count in the job spec"
            )
        # binary:hinge outputs hard 0/1 labels, not a margin: there is nothing to calibrate or rank.
        return f"has objective {objective!r}; a scoring model must be a binary classifier (binary:logistic or binary:logitraw)"
    if objective in FORECAST_OBJECTIVES:
        return None
    what = (
        "a binary classifier"
        if objective.startswith("binary:") or objective == "reg:logistic"
        else "not a regression objective"
    )
    return (
        f"has objective {objective!r}, {what}, but the job forecasts a {kind} target (target.kind): register a regressor "
        f"({', '.join(FORECAST_OBJECTIVES)})"
    )


def _model_input_problem(
    model_path: Path,
    framework: str,
    features: tuple[str, ...],
    trusted_types: tuple[str, ...] = (),
    kind: str = "binary",
    classes: tuple[str, ...] = (),
) -> str | None:
    """Why the model cannot take the job's feature matrix (names where it has them, count and order
    always, an output of the job's kind), or None."""
    if framework == "xgboost":
        xgb = inference_xgboost_module()
        booster = xgb.Booster()
        try:
            booster.load_model(str(model_path))
        except xgb.core.XGBoostError as exc:
            return f"could not be loaded by XGBoost: {str(exc).splitlines()[0]}"
        objective = json.loads(booster.save_config())["learner"]["objective"]["name"]
        if (problem := _xgboost_kind_problem(objective, kind)) is not None:
            return problem
        if booster.num_features() != len(features):
            return (
                f"takes {booster.num_features()} inputs, but the job computes {len(features)} features {list(features)}"
            )
        best, rounds = booster.attributes().get("best_iteration"), booster.num_boosted_rounds()
        if best is not None and int(best) + 1 < rounds:
            # Booster.predict scores every round, XGBClassifier only those up to best_iteration: which one the user
            # validated is not in the file, and they differ by whole trees.
            return (
                f"holds {rounds} boosting rounds, but early stopping kept best_iteration {best}: XGBoost's Booster.predict scores all "
                f"{rounds} rounds, its scikit-learn wrapper only the first {int(best) + 1}; save the model you mean: "
                f"booster[: {int(best) + 1}].save_model(...) for the best rounds, or booster.set_attr(best_iteration=None) for all"
            )
        names = booster.feature_names
        if names is not None and tuple(names) != features:
            if set(names) == set(features):
                return f"takes the job's features in another order: model {list(names)}, job {list(features)}"
            return (
                f"was trained on features the job does not compute: only in the model {sorted(set(names) - set(features))}, "
                f"only in the job {sorted(set(features) - set(names))}"
            )
        return None
    if framework != "onnx":
        return inference_framework_input_problem(
            model_path, framework, features, trusted_types=trusted_types, kind=kind, classes=classes
        )
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001  (ONNX Runtime raises its own exception classes)
        return f"could not be loaded by ONNX Runtime: {str(exc).splitlines()[0]}"
    import onnx

    from tasks.inference.onnx_outputs import inference_onnx_kind_problem

    if (
        problem := inference_onnx_kind_problem(onnx.load(str(model_path), load_external_data=False), kind, classes)
    ) is not None:
        return problem
    shape = session.get_inputs()[0].shape
    if len(shape) != 2:
        return f"takes input of shape {shape}; a scoring model takes rows × features"
    if isinstance(shape[1], int) and shape[1] != len(features):
        return f"takes {shape[1]} inputs, but the job computes {len(features)} features {list(features)}"
    return None


def _registered_sha256(directory: Path) -> str | None:
    try:
        return json.loads((directory / "metadata.json").read_text(encoding="utf-8")).get("sha256")
    except (OSError, ValueError):
        return None


def _staged_model(model_file: Path, stage: Path) -> Path:
    target = stage / f"model{model_file.suffix}"
    shutil.copyfile(model_file, target)
    with target.open("rb") as fh:
        os.fsync(fh.fileno())
    return target


def _fsynced_json(path: Path, document: dict[str, Any]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())


def registered_model_version(
    model_file: Path,
    *,
    registry_dir: Path,
    feature_version: str,
    features: tuple[str, ...],
    kinds: Mapping[str, FeatureKind] | None = None,
    holdout_features: np.ndarray,
    holdout_outcomes: np.ndarray,
    reference_features: np.ndarray | None = None,
    version: str | None = None,
    interval_level: float = 0.90,
    rows_quarantined: int = 0,
    training: Mapping[str, Any] | None = None,
    trusted_types: tuple[str, ...] = (),
    latest_job: str | None = None,
    kind: str = "binary",
    classes: tuple[str, ...] = (),
) -> RegistrationReport:
    """Register `model_file` as a new version under `registry_dir` (`<registry>/<model name>`).

    `holdout_features` are the model's input columns in `features` order (feature-model outputs
    included) for labelled rows the model never saw; `holdout_outcomes` their outcomes: 0/1 for a
    binary job (`kind`), the actual quantity for a regression or count job, the class index into
    `classes` for a multiclass job. The
    reference for drift is `reference_features` (default: the hold-out). `trusted_types`: the types
    beyond skops' defaults the user trusts a scikit-learn file to hold (`score register --trust`).
    `latest_job`: the job whose spec scores `latest`, which this registration therefore deploys (a warning says so).
    """
    name = registry_dir.name
    model_file = Path(model_file)
    if not model_file.is_file():
        raise ModelArtifactError(f"model file {model_file} does not exist")
    framework = FRAMEWORK_OF_SUFFIX.get(model_file.suffix)
    if framework is None:
        raise ModelArtifactError(
            f"model file {model_file} has format {model_file.suffix or '(no suffix)'!r}; accepted: "
            f"{', '.join(ACCEPTED_MODEL_SUFFIXES)} (XGBoost: booster.save_model('model.ubj'); LightGBM: booster.save_model('model.txt'); "
            "CatBoost: model.save_model('model.cbm'); scikit-learn: skops.io.dump(model, 'model.skops'); any other: ONNX); "
            "pickles are refused because they execute code when loaded"
        )
    if trusted_types and framework != "sklearn":
        raise ModelArtifactError(
            f"model file {model_file} is not a scikit-learn .skops file ({framework}): --trust names types a .skops file may hold beyond skops' defaults"
        )
    problem = inference_model_file_problem(model_file, framework) or _model_input_problem(
        model_file, framework, features, trusted_types, kind, classes
    )
    if problem:
        raise ModelArtifactError(f"model file {model_file} {problem}")
    outcomes = np.asarray(holdout_outcomes, dtype=np.float64)
    classifies = kind == "multiclass"
    forecasts = kind not in ("binary", "multiclass")
    if holdout_features.shape != (outcomes.size, len(features)):
        raise ValueError(
            f"hold-out features {holdout_features.shape} do not match {outcomes.size} outcomes × {len(features)} features"
        )
    if classifies and (absent := [c for i, c in enumerate(classes) if not (outcomes == i).any()]):
        raise PartitionError(
            f"model {name}: the hold-out has no rows of class {', '.join(map(repr, absent))}: a calibration cannot learn how often "
            "a class it never saw occurs; give a hold-out with every class of target.classes"
        )
    if (
        not forecasts
        and not classifies
        and (problem := predict_one_outcome_problem(int(outcomes.sum()), int(outcomes.size)))
    ):
        raise PartitionError(f"model {name}: refusing to register a calibration that {problem}")
    if forecasts and (problem := holdout_actuals_problem(outcomes, kind)):
        raise PartitionError(f"model {name}: the hold-out's outcomes {problem}")
    if version is None:
        version = _next_version(registry_dir)
    elif not re.fullmatch(VERSION_PATTERN, version) or version == "latest":
        raise ModelArtifactError(
            f"--version {version!r} is not a version: use letters, digits, '.', '_' or '-' (at most 64), not 'latest'"
        )
    target = registry_dir / version
    if target.exists():
        raise ModelArtifactError(
            f"model {name} version {version} already exists at {target}; registered versions are never overwritten"
        )
    reference = holdout_features if reference_features is None else reference_features
    # Before anything is staged: a label-only or multiclass output, an untrusted type, is refused with nothing written.
    settled = inference_framework_registration_fields(
        model_file,
        framework,
        features,
        np.ascontiguousarray(holdout_features, dtype=np.float32),
        np.ascontiguousarray(reference, dtype=np.float32),
        trusted_types=trusted_types,
        kind=kind,
    )
    notes: list[str] = list(settled.notes)

    stage = registry_dir.parent / ".staging" / f"{name}-{version}-{uuid.uuid4().hex[:8]}"
    stage.mkdir(parents=True)
    try:
        staged = _staged_model(model_file, stage)
        base = dict(
            name=name,
            version=version,
            framework=framework,
            model_file=staged.name,
            sha256=inference_model_checksum(staged),
            feature_version=feature_version,
            features=list(features),
            feature_dtypes={f: "float32" for f in features},
            target=kind,
            classes=list(classes),
            **settled.fields,
        )
        engine = inference_engine(ModelArtifact(metadata=ModelMetadata(**base), directory=stage))
        try:
            margins = engine.inference_outputs(
                InferenceInput(
                    chunk_id=0,
                    entity_ids=pa.array(np.arange(outcomes.size).astype(str)),
                    features=np.ascontiguousarray(holdout_features, dtype=np.float32),
                    feature_names=features,
                )
            ).margins
        except ModelArtifactError as exc:
            raise ModelArtifactError(f"model file {model_file}: {exc}; target.classes names {len(classes)}") from None
        except ValidationError as exc:
            missing = int(np.isnan(holdout_features).any(axis=1).sum())
            raise ModelArtifactError(
                f"model file {model_file} gives no usable output on the hold-out: {exc.errors()[0]['msg'].removeprefix('Value error, ')}"
                + (
                    f"; {missing} of its {outcomes.size} rows have missing inputs, which reach the model as NaN and it must handle"
                    if missing
                    else ""
                )
            ) from None
        base["explanation"] = inference_checked_explanation(engine, holdout_features, model_file)
        if (said := _explanation_note(base["explanation"], classifies=classifies)) is not None:
            notes.append(said)
        class_fields: dict[str, Any] = {}
        if classifies:
            labels = outcomes.astype(np.int64)
            if (problem := class_order_problem(margins, labels, list(classes))) is not None:
                raise ModelArtifactError(f"model file {model_file} {problem}")
            fitted_classes = fitted_class_calibration(margins, labels, list(classes), level=interval_level)
            probabilities = (
                ClassProbabilityMap(fitted_classes.calibrator, interval_level)
                .predict_class_probabilities(
                    margins if reference_features is None else _margins_of(engine, reference, features)
                )
                .probabilities
            )
            class_fields = {
                "calibration": {**fitted_classes.calibrator.to_metadata(), "reliability": fitted_classes.reliability},
                "class_reference": class_reference(probabilities, list(classes)),
            }
            notes.append(class_calibration_note(fitted_classes))
            quality, auc, warnings = None, None, []
            if fitted_classes.reliability["classwise_ece"] > CLASSWISE_ECE_WARNING:
                warnings.append(
                    f"classwise ECE on the hold-out is {fitted_classes.reliability['classwise_ece']:.3f} (over {CLASSWISE_ECE_WARNING}): "
                    "the calibrated probabilities are off by that much on average; a larger hold-out calibrates better"
                )
        elif forecasts:
            fitted = fitted_conformal_interval(
                np.ascontiguousarray(holdout_features, dtype=np.float32),
                margins,
                outcomes,
                link=base["link"],
                level=interval_level,
                nonnegative=kind == "count",
                error_model_path=stage / ERROR_MODEL_FILE,
                model=name,
            )
            base |= {
                "interval": fitted.interval,
                "error_model_file": ERROR_MODEL_FILE,
                "error_model_sha256": inference_model_checksum(stage / ERROR_MODEL_FILE),
                "forecast_reference": _forecast_reference(
                    engine,
                    margins if reference_features is None else None,
                    reference,
                    features,
                    link=base["link"],
                    nonnegative=kind == "count",
                ),
            }
            notes.append(_interval_note(fitted.check))
            notes.append(_estimator_note(fitted.interval["estimated_error"], fitted.check))
            quality, auc, warnings = None, None, _interval_warnings(fitted.check)
        else:
            calibrator = predict_fitted_calibrator(margins, outcomes)
            quality = predict_calibration_quality(calibrator, margins, outcomes, level=interval_level)
            auc = holdout_auc(margins, outcomes)
            warnings = list(quality.warnings)
        same = [
            v for v in inference_model_versions(registry_dir) if _registered_sha256(registry_dir / v) == base["sha256"]
        ]
        if same:
            warnings.append(
                f"the same model file (sha256 {str(base['sha256'])[:12]}…) is already version {', '.join(same)}; "
                f"version {version} recalibrates it on this hold-out"
            )
        if (why := inference_reasons_unavailable(engine.metadata)) is not None:
            notes.append(
                f"{why}: each run counts the rows whose decision needs reasons as reasons_unavailable in its fallback report"
            )
        earlier = [v for v in inference_model_versions(registry_dir) if v != version]
        if latest_job is not None and earlier:
            # Registering is meant never to deploy; a spec that follows `latest` deploys every registration.
            warnings.append(
                f"job {latest_job} scores model.version: latest, so its next run scores version {version} instead of {earlier[-1]}; "
                f"to keep {earlier[-1]} live and shadow {version}: score promote {latest_job} {earlier[-1]}, set model.version: champion "
                f"and model.challenger: challenger in its spec, then score promote {latest_job} {version} --alias challenger"
            )
        if (
            classifies
            and fitted_classes.accuracy <= max(np.bincount(labels, minlength=len(classes)) / labels.size) + 0.01
        ):
            warnings.append(
                f"hold-out accuracy is {fitted_classes.accuracy:.3f}, no better than always naming the commonest class: check the label "
                "column, target.classes and the features"
            )
        if auc is not None and auc < 0.55:
            warnings.append(
                f"hold-out AUC is {auc:.3f}: the model barely ranks the hold-out; check the label column and the features"
            )
        metadata = ModelMetadata(
            **base,
            calibration={} if forecasts else class_fields["calibration"] if classifies else calibrator.to_metadata(),
            class_reference=class_fields.get("class_reference", {}),
            reference=reference_statistics(np.asarray(reference, dtype=np.float32), features, kinds),
            health=_health_reference(
                engine,
                np.asarray(reference, dtype=np.float32),
                features,
                holdout_auc=None
                if forecasts or classifies
                else holdout_auc_check(
                    ProbabilityMap(calibrator, interval_level).predict_calibrated_probability(margins).probability,
                    outcomes,
                ),
            ),
            training={
                **(training or {}),
                "rows_holdout": int(outcomes.size),
                **(
                    {
                        "holdout_mean_outcome": float(outcomes.mean()),
                        "holdout_mae": fitted.check.mae,
                        "holdout_rmse": fitted.check.rmse,
                    }
                    if forecasts
                    else {
                        "rows_per_class_holdout": {c: int((labels == i).sum()) for i, c in enumerate(classes)},
                        "holdout_accuracy": fitted_classes.accuracy,
                        "holdout_log_loss": fitted_classes.log_loss,
                        "holdout_classwise_ece": fitted_classes.reliability["classwise_ece"],
                    }
                    if classifies
                    else {
                        "events_holdout": int(outcomes.sum()),
                        "holdout_event_rate": float(outcomes.mean()) if outcomes.size else None,
                        "holdout_auc": auc,
                        "holdout_ece": quality.ece,
                    }
                ),
                "rows_reference": int(reference.shape[0]),
                "rows_quarantined": rows_quarantined,
                "registered_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "registered_by": getpass.getuser(),
                "model_file_source": str(model_file),
            },
        )
        report = RegistrationReport(
            model=name,
            version=version,
            directory=target,
            framework=framework,
            features=list(features),
            rows=int(outcomes.size),
            events=0 if forecasts or classifies else int(outcomes.sum()),
            rows_quarantined=rows_quarantined,
            auc=auc,
            reference_rows=int(reference.shape[0]),
            calibration=quality,
            warnings=warnings,
            notes=notes,
            target=kind,
            interval=fitted.check if forecasts else None,
            class_calibration={
                "accuracy": fitted_classes.accuracy,
                "log_loss": fitted_classes.log_loss,
                "uncalibrated_log_loss": fitted_classes.uncalibrated_log_loss,
                "level": interval_level,
                **fitted_classes.reliability,
            }
            if classifies
            else None,
        )
        _fsynced_json(stage / REGISTRATION_REPORT, report.as_json())
        _fsynced_json(stage / "metadata.json", metadata.model_dump(mode="json"))
        registry_dir.mkdir(parents=True, exist_ok=True)
        try:
            # rename(2) onto a non-empty folder fails: a version registered meanwhile is never replaced.
            os.rename(stage, target)
        except OSError:
            raise ModelArtifactError(
                f"model {name} version {version} already exists at {target}; registered versions are never overwritten"
            ) from None
        fd = os.open(registry_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    inference_model_artifact(registry_dir, version)
    for warning in warnings:
        log.warning("registration of %s %s: %s", name, version, warning)
    if classifies:
        log.info(
            "registered %s %s: hold-out accuracy %.3f on %d rows, %d classes",
            name,
            version,
            fitted_classes.accuracy,
            outcomes.size,
            len(classes),
        )
    elif forecasts:
        log.info("registered %s %s: hold-out MAE %.4g on %d rows", name, version, report.interval.mae, outcomes.size)
    else:
        log.info(
            "registered %s %s: hold-out AUC %s on %d rows, %d events",
            name,
            version,
            "n/a" if auc is None else f"{auc:.3f}",
            outcomes.size,
            int(outcomes.sum()),
        )
    return report


CLASSWISE_ECE_WARNING = 0.05
"""Classwise ECE on the hold-out (out of fold) above which registration warns that the probabilities are off."""


def _margins_of(engine: Any, rows: np.ndarray, features: tuple[str, ...]) -> np.ndarray:
    return engine.inference_outputs(
        InferenceInput(
            chunk_id=0,
            entity_ids=pa.array(np.arange(rows.shape[0]).astype(str)),
            features=np.ascontiguousarray(rows, dtype=np.float32),
            feature_names=features,
        )
    ).margins


def _forecast_reference(
    engine: Any,
    margins: np.ndarray | None,
    reference: np.ndarray,
    features: tuple[str, ...],
    *,
    link: str,
    nonnegative: bool,
) -> ReferenceStats:
    """The reference rows' forecasts (`margins` when they are the hold-out's, already computed), binned
    as a numeric feature's reference: what each partition's forecast drift is measured against."""
    if margins is None:
        margins = engine.inference_outputs(
            InferenceInput(
                chunk_id=0,
                entity_ids=pa.array(np.arange(reference.shape[0]).astype(str)),
                features=np.ascontiguousarray(reference, dtype=np.float32),
                feature_names=features,
            )
        ).margins
    forecast = predict_forecast_values(margins, link)
    if nonnegative:
        forecast = np.maximum(forecast, 0.0)
    return reference_statistics(forecast[:, None], (FORECAST_DRIFT_NAME,))[FORECAST_DRIFT_NAME]


def _interval_note(check: IntervalCheck) -> str:
    return (
        f"interval: split conformal at {check.level:.0%}, normalized by the error model; on {check.rows:,} held-back hold-out rows "
        f"it covered {check.coverage:.1%} with mean width {check.mean_width:.4g} (easy half {check.easy_half_width:.4g}, "
        f"hard half {check.hard_half_width:.4g}); MAE {check.mae:.4g}, RMSE {check.rmse:.4g}, bias {check.bias:+.4g}"
    )


def _estimator_note(estimator: Mapping[str, Any], check: IntervalCheck) -> str:
    return (
        f"estimated error before actuals: the error model's expected |error| scaled by {estimator['mae_scale']:.3f} (MAE) and "
        f"{estimator['mse_scale']:.3f} (MSE), fitted on {estimator['rows']:,} calibration rows; on the held-back rows it estimates "
        f"MAE {estimator['check_mae']:.4g} (realized {check.mae:.4g}), RMSE {estimator['check_rmse']:.4g} (realized {check.rmse:.4g})"
    )


def _interval_warnings(check: IntervalCheck) -> list[str]:
    """What in the held-back check a person should look at before promoting the model."""
    from scipy.stats import binom

    warnings = []
    # Coverage below what the held-back rows could show by chance (one-sided 1 %) says the rows are not exchangeable.
    if check.rows and binom.cdf(round(check.coverage * check.rows), check.rows, check.level) < 0.01:
        warnings.append(
            f"the interval covered {check.coverage:.1%} of {check.rows:,} held-back hold-out rows, below its level {check.level:.0%} by more than "
            "chance allows: are the hold-out's rows in time order or grouped? shuffle it or take a later period"
        )
    if not np.isfinite(check.mean_width):
        warnings.append(
            f"the hold-out is too small for an interval at {check.level:.0%}: every interval is unbounded; give more rows"
        )
    return warnings


def _explanation_note(explanation: ModelExplanation, *, classifies: bool = False) -> str | None:
    """The registration report's line on how rows get reasons; None when they get none (said by its own note)."""
    if explanation.method == "none":
        return None
    what = (
        "exact TreeSHAP contributions"
        if explanation.method == "treeshap"
        else "exact linear contributions, coefficient × (value − reference mean)"
    )
    checked = explanation.checked_against or "not checked"
    if not checked.startswith("computed by"):
        checked = f"checked against {checked}"
    if explanation.max_abs_diff is not None:
        checked += f", largest difference {explanation.max_abs_diff:.2g}"
    scale = (
        ""
        if explanation.scale == "margin"
        else (
            f"; they add up to {'each class' + chr(39) + 's' if classifies else 'the event' + chr(39) + 's'} probability, which the model "
            "averages, not to its margin"
        )
    )
    return f"reasons: {what}, {checked}{scale}"


def _health_reference(
    engine: Any, reference: np.ndarray, features: tuple[str, ...], *, holdout_auc: dict[str, float]
) -> dict[str, Any]:
    """PCA of the reference rows and, where the engine explains (XGBoost), the mean |contribution| of up
    to ATTRIBUTION_REFERENCE_ROWS of them: what the partitions' model health is compared with."""
    sample = reference
    if sample.shape[0] > ATTRIBUTION_REFERENCE_ROWS:
        sample = sample[np.random.default_rng(0).choice(sample.shape[0], ATTRIBUTION_REFERENCE_ROWS, replace=False)]
    contributions = None
    if getattr(engine, "contributions_source", None) is not None and sample.shape[0]:
        batch = InferenceInput(
            chunk_id=0,
            entity_ids=pa.array(np.arange(sample.shape[0]).astype(str)),
            features=np.ascontiguousarray(sample),
            feature_names=features,
        )
        classes = None
        if getattr(engine, "class_contributions", None) is not None:
            # A multiclass model's attribution: each row's contributions to the class it is predicted to be.
            classes = engine.inference_outputs(batch).margins.argmax(axis=1)
        contributions = engine.inference_contributions(batch, np.arange(sample.shape[0]), classes=classes).values
    return fitted_health_reference(reference, features, contributions, holdout_auc=holdout_auc)


def _read_parquet(path: Path, what: str) -> pl.DataFrame:
    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files or not files[0].exists():
        raise PartitionError(f"{what} {path} does not exist or holds no .parquet files")
    try:
        return pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed")
    except Exception as exc:  # noqa: BLE001  (polars and pyarrow raise several kinds for a bad file)
        raise PartitionError(
            f"{what} {path} could not be read as Parquet: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        ) from None


@dataclass(frozen=True)
class ModelInputs:
    """Rows of a job after its guards, as the final model sees them."""

    entity_ids: pl.Series
    names: tuple[str, ...]
    matrix: np.ndarray
    outcomes: np.ndarray | None
    rows_quarantined: int
    feature_models: dict[str, str]
    """Feature model name → the version whose output is among `names`."""
    forecasts: bool = False
    """Whether the outcomes are a forecast job's actual numbers rather than 1/0 events."""
    classes: tuple[str, ...] = ()
    """A multiclass job's classes: its outcomes are indices into them."""

    def frame(self) -> pl.DataFrame:
        """Entity, one column per model input, and the outcome when there is one: what a training script fits on."""
        columns = [self.entity_ids, *(pl.Series(n, self.matrix[:, j]) for j, n in enumerate(self.names))]
        if self.outcomes is not None:
            # A binary job's 1/0 events as small integers (what binary training scripts expect); a forecast's actual
            # numbers as they are, even on a sample whose counts happen to be all 0 and 1; a multiclass job's class
            # index (the label a multiclass trainer takes: XGBoost's num_class, scikit-learn's classes_ = 0..K-1).
            outcome = self.outcomes if self.forecasts else self.outcomes.astype(np.int32 if self.classes else np.int8)
            columns.append(pl.Series("outcome", outcome))
        return pl.DataFrame(columns)


@dataclass(frozen=True)
class _JobPath:
    """What turns a job's raw rows into model inputs, loaded once: spec, suite, features, feature models."""

    spec: JobSpec
    spec_path: Path
    suite: GuardSuite
    features: FeatureModule
    feature_models: tuple[tuple[FeatureModelRef, LoadedModel], ...]


def _job_path(job: str, settings: Settings) -> _JobPath:
    spec = load_job_spec(job, settings)
    return _JobPath(
        spec=spec,
        spec_path=settings.jobs_dir / f"{job}.yaml",
        suite=load_guard_suite(settings.expectations_dir / spec.expectation_suite, entity_column=spec.entity_column),
        features=job_features(spec),
        feature_models=tuple(
            (
                ref,
                inference_loaded_model(
                    settings.model_registry_dir(ref.name), ref.version, None, device="cpu", nthread=0
                ),
            )
            for ref in spec.model.feature_models
        ),
    )


def job_model_inputs(
    job: str,
    rows: Path | pl.DataFrame,
    *,
    settings: Settings,
    labelled: bool,
    what: str = "rows",
    positive: str | None = None,
) -> ModelInputs:
    """`rows` (raw columns; the spec's outcome column too when `labelled`) through the job's guards, features
    and feature models — the same path scoring takes, so a model trained on it sees what it will score."""
    return _model_inputs(_job_path(job, settings), rows, labelled=labelled, what=what, positive=positive)


def _binary_outcomes(labels: pl.Series, source: LabelSource, *, where: str, spec_path: Path) -> np.ndarray:
    """A binary job's outcomes, 1 (the event) or 0 on every row, from labels as they come (`predict_binary_label_events`)."""
    read = predict_binary_label_events(labels, positive=source.positive, negative=source.negative)
    if read.problem is not None:
        hint = (
            f', or as positive: "{read.suggested}" under monitoring.labels in {spec_path}'
            if read.suggested is not None
            else ""
        )
        raise LabelError(f"{where}: outcome column {source.outcome_column!r} {read.problem}{hint}")
    if read.events.null_count():
        raise LabelError(
            f"{where}: outcome column {source.outcome_column!r} is missing on {read.events.null_count():,} row(s): "
            "every labelled row needs its outcome, or leave those rows out"
        )
    return read.events.cast(pl.Float64).to_numpy()


def _model_inputs(
    path: _JobPath, rows: Path | pl.DataFrame, *, labelled: bool, what: str, positive: str | None = None
) -> ModelInputs:
    spec, suite, features = path.spec, path.suite, path.features
    forecasts = spec.target.forecasts
    label = spec.monitoring.labels.outcome_column
    frame = rows if isinstance(rows, pl.DataFrame) else _read_parquet(rows, what)
    where = what if isinstance(rows, pl.DataFrame) else f"{what} {rows}"
    if labelled and label not in frame.columns:
        raise PartitionError(
            f"{where} has no outcome column {label!r} (monitoring.labels.outcome_column in "
            f"{path.spec_path}); it has columns {frame.columns}"
        )
    file = Path(what if isinstance(rows, pl.DataFrame) else rows)
    problems = [
        JobProblem(file, column, problem) for column, problem in raw_schema_problems(frame.to_arrow().schema, suite)
    ]
    if isinstance(features, DeclaredFeatures):
        try:
            features.checked_raw_schema(frame.to_arrow().schema, where=where)
        except JobSpecError as exc:
            problems.append(JobProblem(file, "features", str(exc)))
    if problems:
        raise JobValidationError(problems)
    guarded = guarded_chunk(frame, suite, entity_column=spec.entity_column)
    scorable = guarded.scorable
    outcomes = None
    if labelled and forecasts:
        numbers = scorable[label].cast(pl.Float64, strict=False)
        bad = scorable.filter(numbers.is_null() | numbers.is_nan() | numbers.is_infinite())
        if bad.height:
            raise PartitionError(
                f"{where}: outcome column {label!r} must hold the actual {spec.target.name or 'value'} as a number on every row "
                f"(target.kind {spec.target.kind}); {bad.height} rows do not, e.g. {bad[label].head(3).to_list()}"
            )
        outcomes = numbers.to_numpy()
    elif labelled and spec.target.classifies:
        indices, unknown = predict_class_label_indices(scorable[label], spec.target.classes)
        if unknown:
            raise PartitionError(
                f"{where}: outcome column {label!r} holds values that are none of target.classes {spec.target.classes}: "
                f"{unknown[:5]}{' …' if len(unknown) > 5 else ''} on {int((indices < 0).sum())} rows; add them to target.classes "
                "(in the model's class order) or leave those rows out"
            )
        outcomes = indices.astype(np.float64)
    elif labelled:
        outcomes = _binary_outcomes(scorable[label], spec.label_source(positive), where=where, spec_path=path.spec_path)
    x = features.feature_matrix(scorable)
    names = tuple(features.FEATURES)
    used = {}
    for ref, loaded in path.feature_models:
        batch = InferenceInput(
            chunk_id=0,
            entity_ids=scorable[spec.entity_column].cast(pl.String).to_arrow(),
            features=x,
            feature_names=names,
        )
        x = np.ascontiguousarray(
            np.column_stack([x, loaded.engine.inference_outputs(batch).margins.astype(np.float32)])
        )
        names = (*names, ref.output_feature)
        used[ref.name] = loaded.engine.metadata.version
    return ModelInputs(
        entity_ids=scorable[spec.entity_column],
        names=names,
        matrix=x,
        outcomes=outcomes,
        rows_quarantined=guarded.counts.rows_quarantined,
        feature_models=used,
        forecasts=forecasts,
        classes=tuple(spec.target.classes),
    )


def registered_job_model(
    job: str,
    model_file: Path,
    *,
    settings: Settings,
    holdout: Path | pl.DataFrame,
    reference: Path | pl.DataFrame | None = None,
    version: str | None = None,
    training: Mapping[str, Any] | None = None,
    trusted_types: tuple[str, ...] = (),
    positive: str | None = None,
) -> RegistrationReport:
    """Register a model of `job`: its hold-out (and reference) rows go through the job's own guards,
    features and feature models; the outcome is the spec's `monitoring.labels.outcome_column`, read as 1 where it is
    `positive` (`--positive`, else the spec's `monitoring.labels.positive`; JobSpec.label_source)."""
    path = _job_path(job, settings)
    spec, features = path.spec, path.features
    held = _model_inputs(path, holdout, labelled=True, what="hold-out", positive=positive)
    if held.outcomes is None or held.outcomes.size == 0:
        raise PartitionError(f"hold-out {holdout} has no rows the job's guards let through")
    events = int(held.outcomes.sum())
    if not spec.target.forecasts and not spec.target.classifies and events in (0, held.outcomes.size):
        label, only = spec.monitoring.labels.outcome_column, "0 (no events)" if events == 0 else "1 (no non-events)"
        raise PartitionError(
            f"hold-out {holdout if isinstance(holdout, Path) else '(a data frame)'}: outcome column {label!r} "
            f"(monitoring.labels.outcome_column) is {only} on all {held.outcomes.size:,} rows the job's guards let through"
            f"{f' ({held.rows_quarantined:,} quarantined)' if held.rows_quarantined else ''}: a calibration fitted on one "
            "outcome cannot tell one row from another and would send every row to one decision; give a hold-out with events and non-events"
        )
    reference_x = None if reference is None else _model_inputs(path, reference, labelled=False, what="reference").matrix
    kinds = {**feature_kinds(features), **{ref.output_feature: "numeric" for ref in spec.model.feature_models}}
    return registered_model_version(
        model_file,
        registry_dir=settings.model_registry_dir(spec.model.name),
        feature_version=features.FEATURE_VERSION,
        features=held.names,
        kinds=kinds,
        holdout_features=held.matrix,
        holdout_outcomes=held.outcomes,
        reference_features=reference_x,
        version=version,
        interval_level=spec.prediction.interval_level,
        rows_quarantined=held.rows_quarantined,
        training={**({"feature_models": held.feature_models} if held.feature_models else {}), **(training or {})},
        latest_job=job if spec.model.version == "latest" else None,
        trusted_types=trusted_types,
        kind=spec.target.kind,
        classes=tuple(spec.target.classes),
    )
