"""What `score demo` prepares before scoring: raw partitions, labels, and trained model versions."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from tasks.demo.credit_data import demo_dates, write_demo_partitions
from tasks.demo.gearbox_data import write_gearbox_partitions
from tasks.demo.sales_data import write_sales_partitions
from tasks.demo.training import train_credit_model, train_sales_model
from tasks.errors import EnvironmentFault
from tasks.features import job_features
from tasks.guards import load_guard_suite
from tasks.inference.registry import inference_model_versions
from tasks.jobs.registration import RegistrationReport
from tasks.jobspec import load_job_spec
from tasks.settings import Settings

log = logging.getLogger("scoring.demo")
DEMO_JOB = "credit_risk"
GEARBOX_JOB = "gearbox"
SALES_JOB = "store_sales"


@dataclass(frozen=True)
class DemoPlan:
    scoring_dates: list[dt.date]
    training_dates: list[dt.date]
    model_version: str
    feature_model_versions: dict[str, str] = field(default_factory=dict)
    registration: RegistrationReport | None = None
    """The report of the model version trained for this demo; None when an earlier one was reused."""


def _next_version(registry: Path) -> str:
    existing = inference_model_versions(registry)
    return str(int(existing[-1]) + 1) if existing and existing[-1].isdigit() else "1"


def _training_info(registry: Path, version: str) -> dict:
    return json.loads((registry / version / "metadata.json").read_text()).get("training", {})


def prepared_demo(
    settings: Settings, *, days: int, rows_per_day: int, train_days: int, seed: int, end: dt.date, shift_days: int = 2
) -> DemoPlan:
    """Generate the demo partitions and train (or reuse) the model version trained on exactly them."""
    spec = load_job_spec(DEMO_JOB, settings)
    scoring = demo_dates(end, days)
    training = demo_dates(scoring[0] - dt.timedelta(days=1), train_days)
    raw_root = settings.data_dir / "raw" / DEMO_JOB
    labels_root = settings.data_dir / "labels" / DEMO_JOB
    train_dirs = write_demo_partitions(
        raw_root, labels_root, training, rows_per_day=rows_per_day, seed=seed, shift_days=0
    )
    write_demo_partitions(
        raw_root, labels_root, scoring, rows_per_day=rows_per_day, seed=seed, shift_days=min(shift_days, days)
    )

    registry = settings.model_registry_dir(spec.model.name)
    wanted = {
        "window_start": training[0].isoformat(),
        "window_end": training[-1].isoformat(),
        "seed": seed,
        "rows_per_day": rows_per_day,
    }
    for version in reversed(inference_model_versions(registry)):
        training_info = _training_info(registry, version)
        if {k: training_info.get(k) for k in wanted} == wanted:
            log.info("reusing model %s %s, trained on the same demo window", spec.model.name, version)
            return DemoPlan(scoring_dates=scoring, training_dates=training, model_version=version)
    version = _next_version(registry)
    registered = train_credit_model(
        settings,
        DEMO_JOB,
        raw_dirs=train_dirs,
        labels_dirs=[labels_root / f"date={d.isoformat()}" for d in training],
        version=version,
        seed=seed,
        training_window=(training[0], training[-1]),
        extra_training_info={"rows_per_day": rows_per_day},
    )
    return DemoPlan(scoring_dates=scoring, training_dates=training, model_version=registered.version)


def prepared_gearbox_demo(
    settings: Settings,
    *,
    days: int = 7,
    windows_per_day: int = 200,
    train_days: int = 14,
    seed: int = 7,
    end: dt.date,
) -> DemoPlan:
    """Generate the gearbox partitions and train (or reuse) the autoencoder and classifier on them.

    `windows_per_day` is per turbine (six turbines). The job scores with the `latest` version of
    both models, so only the latest pair is reused, and only when the classifier was trained on
    this window together with the latest autoencoder; otherwise both are trained as new versions.
    """
    # torch (seconds to import) is needed only when the gearbox models are trained, and only the demo extra has it.
    missing = [name for name in ("torch", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise EnvironmentFault(
            f"the gearbox demo trains its autoencoder with torch and exports it to ONNX, and {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed: a scoring install leaves the demo's training out; install the demo extra "
            "(pip install -c constraints.txt -e '.[demo]', which `make demo` does)"
        )
    from tasks.demo.gearbox_training import train_gearbox_models

    spec = load_job_spec(GEARBOX_JOB, settings)
    (autoencoder,) = spec.model.feature_models
    scoring = demo_dates(end, days)
    training = demo_dates(scoring[0] - dt.timedelta(days=1), train_days)
    raw_root = settings.data_dir / "raw" / GEARBOX_JOB
    labels_root = settings.data_dir / "labels" / GEARBOX_JOB
    train_dirs = write_gearbox_partitions(
        raw_root, labels_root, training, windows_per_turbine=windows_per_day, seed=seed
    )
    write_gearbox_partitions(raw_root, labels_root, scoring, windows_per_turbine=windows_per_day, seed=seed)

    registry = settings.model_registry_dir(spec.model.name)
    ae_registry = settings.model_registry_dir(autoencoder.name)
    classifiers, autoencoders = inference_model_versions(registry), inference_model_versions(ae_registry)
    if classifiers and autoencoders:
        training_info = _training_info(registry, classifiers[-1])
        wanted = {
            "window_start": training[0].isoformat(),
            "window_end": training[-1].isoformat(),
            "seed": seed,
            "windows_per_day": windows_per_day,
            "feature_models": {autoencoder.name: autoencoders[-1]},
        }
        if {k: training_info.get(k) for k in wanted} == wanted:
            log.info(
                "reusing models %s %s and %s %s, trained on the same demo window",
                spec.model.name,
                classifiers[-1],
                autoencoder.name,
                autoencoders[-1],
            )
            return DemoPlan(
                scoring_dates=scoring,
                training_dates=training,
                model_version=classifiers[-1],
                feature_model_versions={autoencoder.name: autoencoders[-1]},
            )
    ae_version, version = _next_version(ae_registry), _next_version(registry)
    ae_metadata, metadata = train_gearbox_models(
        raw_dirs=train_dirs,
        labels_dirs=[labels_root / f"date={d.isoformat()}" for d in training],
        suite=load_guard_suite(settings.expectations_dir / spec.expectation_suite),
        features=job_features(spec),
        entity_column=spec.entity_column,
        autoencoder_dir=ae_registry / ae_version,
        autoencoder_name=autoencoder.name,
        autoencoder_version=ae_version,
        output_feature=autoencoder.output_feature,
        model_dir=registry / version,
        seed=seed,
        training_window=(training[0], training[-1]),
        extra_training_info={"windows_per_day": windows_per_day},
    )
    return DemoPlan(
        scoring_dates=scoring,
        training_dates=training,
        model_version=metadata.version,
        feature_model_versions={ae_metadata.name: ae_metadata.version},
    )


def prepared_sales_demo(
    settings: Settings,
    *,
    days: int,
    rows_per_day: int,
    train_days: int,
    seed: int,
    end: dt.date,
    shift_days: int = 2,
    holdout_days: int | None = None,
) -> DemoPlan:
    """Generate the store-sales partitions and train (or reuse) the count model on them.

    The last `holdout_days` of the `train_days` labelled days are the hold-out the model never saw,
    as a forecaster validates on the days after its training window; the error model and the
    conformal interval are fitted there. By default a whole week (half the days when fewer than 14):
    demand and its noise follow the weekday, and an interval calibrated on two weekdays under-covered
    the Saturday it had never seen (87.6 % at 90 %). The last `shift_days` scoring days are the heat
    wave and promotion campaign.
    """
    if holdout_days is None:
        holdout_days = min(7, train_days // 2)
    if not 0 < holdout_days < train_days:
        raise ValueError(f"holdout_days must leave training days: {holdout_days} of {train_days}")
    spec = load_job_spec(SALES_JOB, settings)
    scoring = demo_dates(end, days)
    training = demo_dates(scoring[0] - dt.timedelta(days=1), train_days)
    raw_root = settings.data_dir / "raw" / SALES_JOB
    labels_root = settings.data_dir / "labels" / SALES_JOB
    train_dirs = write_sales_partitions(
        raw_root, labels_root, training, rows_per_day=rows_per_day, seed=seed, shift_days=0
    )
    write_sales_partitions(
        raw_root, labels_root, scoring, rows_per_day=rows_per_day, seed=seed, shift_days=min(shift_days, days)
    )

    registry = settings.model_registry_dir(spec.model.name)
    wanted = {
        "window_start": training[0].isoformat(),
        "holdout_end": training[-1].isoformat(),
        "seed": seed,
        "rows_per_day": rows_per_day,
        "holdout_start": training[-holdout_days].isoformat(),
    }
    for version in reversed(inference_model_versions(registry)):
        training_info = _training_info(registry, version)
        if {k: training_info.get(k) for k in wanted} == wanted:
            log.info("reusing model %s %s, trained on the same demo window", spec.model.name, version)
            return DemoPlan(scoring_dates=scoring, training_dates=training, model_version=version)
    registered = train_sales_model(
        settings,
        SALES_JOB,
        raw_dirs=train_dirs,
        labels_dirs=[labels_root / f"date={d.isoformat()}" for d in training],
        holdout_days=holdout_days,
        version=_next_version(registry),
        seed=seed,
        extra_training_info={"rows_per_day": rows_per_day},
    )
    return DemoPlan(
        scoring_dates=scoring, training_dates=training, model_version=registered.version, registration=registered
    )
