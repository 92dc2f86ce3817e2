"""A job loaded for one run of a partition: spec, suite, feature module, engines, drift baselines
and reason texts, cross-checked before any row is scored."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from tasks.contracts import FeatureKind
from tasks.errors import FeatureVersionMismatch, ModelArtifactError, ScoringError
from tasks.features import FeatureModule, feature_categories, feature_kinds
from tasks.guards import GuardSuite
from tasks.inference.config import FeatureModelRef
from tasks.inference.engine import LoadedModel, inference_loaded_model
from tasks.inference.kinds import inference_job_kind_words, inference_model_kind_words, inference_same_kind
from tasks.inference.registry import ModelMetadata, inference_check_feature_version
from tasks.jobs.validation import validated_job
from tasks.jobspec import JobSpec
from tasks.monitoring.health import HealthAccumulator, PcaReference
from tasks.prediction.calibration import ProbabilityMap, predict_calibrator_from_metadata
from tasks.prediction.config import PredictionConfig
from tasks.prediction.decisions import predict_probability_cutoffs
from tasks.prediction.forecasts import ForecastMap
from tasks.prediction.multiclass import ClassProbabilityMap, predict_multiclass_calibrator_from_metadata
from tasks.prediction.reasons import ReasonTexts, predict_reason_texts
from tasks.quality.drift import (
    FORECAST_DRIFT_NAME,
    SCORE_DRIFT_NAME,
    SCORE_EDGES,
    SCORE_PSI_EDGES,
    DriftAccumulator,
    Histogram,
)
from tasks.settings import Settings
from tasks.sinks.warehouse import Warehouse
from tasks.sinks.warehouse_choice import warehouse_for
from tasks.sources import RawPartition, raw_partition

log = logging.getLogger("scoring.run")


def predict_estimate_map(meta: ModelMetadata, spec: JobSpec) -> ProbabilityMap | ForecastMap | ClassProbabilityMap:
    """What turns the model's margins into the job's estimates at the spec's level: its calibration, or its conformal interval."""
    level = spec.prediction.interval_level
    if spec.target.forecasts:
        return ForecastMap(meta.interval, level, link=meta.link, nonnegative=spec.target.kind == "count")
    if spec.target.classifies:
        return ClassProbabilityMap(predict_multiclass_calibrator_from_metadata(meta.calibration), level)
    return ProbabilityMap(predict_calibrator_from_metadata(meta.calibration), level)


@dataclass(frozen=True)
class PredictionPlan:
    """What the prediction side of a run needs, and no inference engine: the spec's prediction
    config, the model's calibration at the spec's level, and the resolved reason texts."""

    job: str
    config: PredictionConfig
    estimate_map: ProbabilityMap | ForecastMap | ClassProbabilityMap
    """The calibration at the spec's level (binary jobs) or the conformal interval at it (forecast jobs)."""
    reason_texts: ReasonTexts
    feature_version: str
    cutoffs: tuple[float, ...]
    """The rules' probability cut-offs, which decision monitoring counts straddling rows against."""
    challenger: ChallengerPlan | None = None
    """How the challenger's outputs become its shadow predictions; None when the job names none or it did not load."""
    challenger_failure: str = "count"
    estimate_bins: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Drift bins (edges, PSI edges) of what the job predicts: `score` (binary) or `forecast` (where the
    model has a forecast reference); the prediction side counts each chunk's estimates on them."""

    def estimate_drift(self) -> DriftAccumulator:
        """An empty accumulator on `estimate_bins`."""
        return DriftAccumulator(
            edges={name: edges for name, (edges, _) in self.estimate_bins.items()},
            psi_edges={name: psi for name, (_, psi) in self.estimate_bins.items()},
        )

    @property
    def decisions(self) -> tuple[str, ...]:
        """The rule table's decisions, each once, in rule order."""
        return tuple(dict.fromkeys(r.decision for r in self.config.rules))

    @property
    def forecasts(self) -> bool:
        """Whether the job forecasts a quantity (its estimates are forecasts, not calibrated probabilities)."""
        return isinstance(self.estimate_map, ForecastMap)

    @property
    def classifies(self) -> bool:
        """Whether the job chooses a class per row (its estimates are calibrated probability vectors)."""
        return isinstance(self.estimate_map, ClassProbabilityMap)

    @property
    def classes(self) -> tuple[str, ...]:
        """A multiclass job's classes in the model's order (its calibration's); empty for the other kinds."""
        return tuple(self.estimate_map.calibrator.classes) if isinstance(self.estimate_map, ClassProbabilityMap) else ()


@dataclass(frozen=True)
class ChallengerPlan:
    """The challenger's side of the prediction: its own calibration (binary jobs) or its own conformal
    interval on its own error model's expected errors (forecast jobs), its own contributions, the job's
    rules and reason wording (banded on the champion's training medians, so both models' reasons read
    alike; a challenger without some of the job's inputs would have no median of them to band on)."""

    named: str
    """The alias or version the job named it by (`model.challenger`)."""
    version: str
    estimate_map: ProbabilityMap | ForecastMap | ClassProbabilityMap
    """The challenger's own calibration or conformal interval, at the spec's level (`predict_estimate_map`)."""


@dataclass(frozen=True)
class PreparedJob:
    """Everything a run needs, loaded and cross-checked before any row is scored."""

    spec: JobSpec
    suite: GuardSuite
    features: FeatureModule
    model: LoadedModel
    feature_models: tuple[tuple[FeatureModelRef, LoadedModel], ...]
    raw: RawPartition
    """Where the partition's raw rows come from (a folder, an object-store prefix, a query)."""
    drift_baselines: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    """`reference` (training, from the model's metadata) and `previous` (the last scored partition before this one)."""
    reason_texts: ReasonTexts = field(default_factory=ReasonTexts)
    """The spec's value-dependent reason texts, resolved against the features and the model's training medians."""
    challenger: LoadedModel | None = None
    """The job's challenger (`model.challenger`), scored as a shadow in the same pass; None without one or when it did not load."""
    challenger_columns: np.ndarray | None = None
    """Where the challenger's inputs sit among `model_features` (it may take a subset of them, in its own order)."""
    challenger_plan: ChallengerPlan | None = None
    challenger_error: str | None = None
    """Why the named challenger does not shadow this run (it did not load or does not fit the job's features)."""
    estimate_reference: dict[str, Histogram] = field(default_factory=dict)
    """A forecast job's reference forecasts binned (`forecast`), from the model's metadata; empty otherwise."""

    @property
    def drift_edges(self) -> dict[str, np.ndarray]:
        return {name: hist.edges for name, hist in self.drift_baselines.get("reference", {}).items()}

    @property
    def psi_edges(self) -> dict[str, np.ndarray]:
        return {name: hist.psi_edges for name, hist in self.drift_baselines.get("reference", {}).items()}

    @property
    def drift_kinds(self) -> dict[str, FeatureKind]:
        return {name: hist.kind for name, hist in self.drift_baselines.get("reference", {}).items()}

    def drift_accumulator(self, *, with_estimate: bool = False) -> DriftAccumulator:
        """An empty accumulator on the reference's bins of every model input, and the estimate's (score or forecast) if asked."""
        bins = self.prediction_plan.estimate_bins if with_estimate else {}
        return DriftAccumulator(
            edges={**self.drift_edges, **{name: edges for name, (edges, _) in bins.items()}},
            kinds=self.drift_kinds,
            psi_edges={**self.psi_edges, **{name: psi for name, (_, psi) in bins.items()}},
        )

    @property
    def report_baselines(self) -> dict[str, dict[str, Histogram]]:
        """What the drift report compares with: the inputs' training reference and, for a forecast job, the
        reference forecasts (`reference`); the previous partition's histograms, estimate included (`previous`)."""
        baselines = dict(self.drift_baselines)
        if self.estimate_reference:
            baselines["reference"] = {**baselines.get("reference", {}), **self.estimate_reference}
        return baselines

    @cached_property
    def prediction_plan(self) -> PredictionPlan:
        return PredictionPlan(
            job=self.spec.name,
            config=self.spec.prediction,
            estimate_map=predict_estimate_map(self.model.engine.metadata, self.spec),
            reason_texts=self.reason_texts,
            feature_version=self.features.FEATURE_VERSION,
            cutoffs=tuple(predict_probability_cutoffs(self.spec.prediction.rules)),
            challenger=self.challenger_plan,
            challenger_failure=self.spec.model.challenger_failure,
            estimate_bins={name: (hist.edges, hist.psi_edges) for name, hist in self.estimate_reference.items()}
            if self.spec.target.forecasts
            else {}
            if self.spec.target.classifies
            else {SCORE_DRIFT_NAME: (SCORE_EDGES, SCORE_PSI_EDGES)},
        )

    @cached_property
    def pca_reference(self) -> PcaReference | None:
        """The final model's PCA for multivariate drift, as arrays; None for a model registered before it."""
        return PcaReference.of(self.health_reference.get("pca"))

    @cached_property
    def rule_decisions(self) -> np.ndarray:
        """The decision of each rule of the rule table, in order (an object array, indexed by `RuleDecisions.rule_index`)."""
        return np.array([r.decision for r in self.spec.prediction.rules], dtype=object)

    def health_accumulator(self) -> HealthAccumulator:
        """Empty model-health sums for the final model's inputs and the job's rule table."""
        rules = self.spec.prediction.rules
        return HealthAccumulator(
            features=self.model_features,
            rule_ids=tuple(r.id for r in rules),
            rule_decisions=tuple(r.decision for r in rules),
        )

    @property
    def health_reference(self) -> dict:
        """The final model's model-health reference (`ModelMetadata.health`); empty for a model registered before it."""
        return self.model.engine.metadata.health

    @property
    def model_features(self) -> tuple[str, ...]:
        """The final model's input: the feature module's columns, then each feature model's output."""
        return (*self.features.FEATURES, *(ref.output_feature for ref, _ in self.feature_models))


def units_at_once(settings: Settings) -> int | None:
    """Units that call the engines at once in this process: the thread runner's workers; None on Dask, whose workers
    are processes sized by their own threads (`SCORING_DASK_THREADS_PER_WORKER`)."""
    return settings.task_workers if settings.task_runner == "threads" else None


def unit_workers(settings: Settings) -> int | None:
    """The workers that score a run's units at once, which its units are planned for: the thread runner's threads, or
    a local Dask cluster's worker threads; None on an existing cluster, whose size the run does not know. (Not
    `units_at_once`, which sizes the engines' threads and counts only the units calling them in this process.)"""
    if settings.task_runner == "threads":
        return settings.task_workers
    return None if settings.dask_address else settings.dask_workers * settings.dask_threads_per_worker


def prepared_job(
    job: str, partition_date: dt.date, settings: Settings, warehouse: Warehouse | None = None
) -> PreparedJob:
    """The job loaded for a run of `partition_date`, after `validated_job` found no problem in its
    inputs (JobValidationError lists them all), with its engines built and drift baselines read
    from `warehouse` (the settings' own when not given)."""
    validated = validated_job(job, settings, partition_date=partition_date, check_labels=False)
    for note in validated.notes:
        log.warning("[PRED] job %s: %s", job, note)
    spec, features = validated.spec, validated.features
    device, nthread = spec.inference.device, spec.inference.nthread
    calls = units_at_once(settings)
    feature_models = []
    for ref in spec.model.feature_models:
        loaded = inference_loaded_model(
            settings.model_registry_dir(ref.name),
            ref.version,
            None,
            device=device,
            nthread=nthread,
            concurrent_calls=calls,
        )
        inference_check_feature_version(loaded.engine.artifact, features.FEATURE_VERSION, tuple(features.FEATURES))
        feature_models.append((ref, loaded))
    model = inference_loaded_model(
        settings.model_registry_dir(spec.model.name),
        spec.model.version,
        spec.model.fallback_version,
        device=device,
        nthread=nthread,
        concurrent_calls=calls,
    )
    meta = model.engine.metadata
    if not meta.reference:
        log.warning(
            "model %s %s has no training reference statistics; scoring %s without drift against training "
            "(drift.require_reference: false)",
            meta.name,
            meta.version,
            spec.name,
        )
    reference = {
        name: hist for name, stats in meta.reference.items() if (hist := Histogram.of_reference(stats)) is not None
    }
    forecast = (
        Histogram.of_reference(meta.forecast_reference) if spec.target.forecasts and meta.forecast_reference else None
    )
    estimate_reference = {FORECAST_DRIFT_NAME: forecast} if forecast is not None else {}
    binned = {**reference, **estimate_reference}
    previous = {
        row["feature"]: Histogram(
            edges=np.asarray(row["edges"], dtype=np.float64),
            counts=np.asarray(row["counts"], dtype=np.int64),
            nulls=row["nulls"],
            kind=row.get("kind") or "numeric",
            psi_edges=binned[row["feature"]].psi_edges if row["feature"] in binned else SCORE_PSI_EDGES,
        )
        for row in (warehouse or warehouse_for(settings)).previous_drift_histograms(job, partition_date)
    }
    prepared = PreparedJob(
        spec=spec,
        suite=validated.suite,
        features=features,
        model=model,
        feature_models=tuple(feature_models),
        raw=validated.raw or raw_partition(spec.source, settings, job, partition_date),
        drift_baselines={"reference": reference, "previous": previous},
        reason_texts=_reason_texts(model, spec, feature_kinds(features), feature_categories(features)),
        estimate_reference=estimate_reference,
    )
    # The engine that loaded may be the fallback chosen only now, when the job's version failed to load.
    inference_check_feature_version(model.engine.artifact, features.FEATURE_VERSION, prepared.model_features)
    if spec.model.challenger is not None:
        prepared = _with_challenger(prepared, settings)
    return prepared


def _with_challenger(prepared: PreparedJob, settings: Settings) -> PreparedJob:
    """`prepared` with its challenger loaded; when it cannot be, the reason, unless the spec says a
    failing challenger fails the run (`model.challenger_failure: fail`)."""
    spec, features = prepared.spec, prepared.features
    try:
        challenger = inference_loaded_model(
            settings.model_registry_dir(spec.model.name),
            spec.model.challenger,
            None,
            device=spec.inference.device,
            nthread=spec.inference.nthread,
            concurrent_calls=units_at_once(settings),
        )
        meta = challenger.engine.metadata
        if meta.feature_version != features.FEATURE_VERSION:
            raise FeatureVersionMismatch(
                f"challenger {meta.name} {meta.version} was trained on feature_version {meta.feature_version}, "
                f"the job computes {features.FEATURE_VERSION}"
            )
        missing = [f for f in meta.features if f not in prepared.model_features]
        if missing:
            raise FeatureVersionMismatch(
                f"challenger {meta.name} {meta.version} takes features the job does not compute: {missing}"
            )
        if not inference_same_kind(meta.target, spec.target.kind):
            raise ModelArtifactError(
                f"challenger {meta.name} {meta.version} was registered as {inference_model_kind_words(meta.target)}, but job {spec.name} is "
                f"{inference_job_kind_words(spec.target.kind)}: register a model of the job's kind"
            )
        if spec.target.classifies and meta.classes != spec.target.classes:
            raise ModelArtifactError(
                f"challenger {meta.name} {meta.version} was registered for classes {meta.classes}, but job {spec.name} names {spec.target.classes}"
            )
        if spec.target.forecasts and (not meta.interval or challenger.error_model is None):
            raise ModelArtifactError(
                f"challenger {meta.name} {meta.version} has no conformal interval or error model; register it again with score register"
            )
        plan = ChallengerPlan(
            named=spec.model.challenger, version=meta.version, estimate_map=predict_estimate_map(meta, spec)
        )
    except (ScoringError, ValueError) as exc:
        if spec.model.challenger_failure == "fail":
            raise
        log.warning("[INF] challenger %s of %s does not shadow this run: %s", spec.model.challenger, spec.name, exc)
        return replace(prepared, challenger_error=f"challenger {spec.model.challenger}: {exc}")
    columns = np.array([prepared.model_features.index(f) for f in meta.features], dtype=np.intp)
    return replace(prepared, challenger=challenger, challenger_plan=plan, challenger_columns=columns)


_preloaded: dict[tuple[str, dt.date, str], PreparedJob] = {}
_preloaded_lock = threading.Lock()


@contextmanager
def preloaded_job(
    job: str, partition_date: dt.date, settings: Settings, *, run_settings_json: str
) -> Iterator[PreparedJob]:
    """`prepared_job`, offered for the run of (job, partition_date) started inside the block in this
    process (whose settings serialize to `run_settings_json`), so a job checked before its run starts
    is loaded once; whatever the run did not take is dropped when the block ends."""
    prepared = prepared_job(job, partition_date, settings)
    key = (job, partition_date, run_settings_json)
    with _preloaded_lock:
        _preloaded[key] = prepared
    try:
        yield prepared
    finally:
        with _preloaded_lock:
            _preloaded.pop(key, None)


def taken_preloaded_job(job: str, partition_date: dt.date, run_settings_json: str) -> PreparedJob | None:
    """The job `preloaded_job` offers for this run, taken so that no later run uses it; None without one."""
    with _preloaded_lock:
        return _preloaded.pop((job, partition_date, run_settings_json), None)


def _reason_texts(
    model: LoadedModel, spec: JobSpec, kinds: dict[str, FeatureKind], categories: dict[str, tuple[str, ...]]
) -> ReasonTexts:
    """The spec's reason texts resolved; `by_band` needs each banded feature's training median."""
    meta = model.engine.metadata
    medians = {name: stats.quantiles["p50"] for name, stats in meta.reference.items() if "p50" in stats.quantiles}
    # Without a training reference (the job's opt-in) there is no median to band on: the default text speaks.
    unreferenced = not meta.reference and not spec.drift.require_reference
    if unreferenced and any(r.by_band is not None for r in spec.prediction.reasons.codes.values()):
        log.warning(
            "[PRED] model %s %s has no training reference: by_band reasons of %s get their default text",
            meta.name,
            meta.version,
            spec.name,
        )
    try:
        return predict_reason_texts(
            spec.prediction.reasons,
            kinds=kinds,
            categories=categories,
            medians=medians,
            bands_without_median="default_text" if unreferenced else "refuse",
        )
    except ValueError as exc:
        raise ModelArtifactError(
            f"model {meta.name} {meta.version} ({model.engine.artifact.directory / 'metadata.json'}) cannot serve the "
            f"job's reason texts: {exc}"
        ) from None
