"""What `score demo` prepares before scoring: raw partitions, labels, and a trained model version."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass

from tasks.demo.credit_data import demo_dates, write_demo_partitions
from tasks.demo.training import train_credit_model
from tasks.features import load_feature_module
from tasks.guards import load_guard_suite
from tasks.inference.registry import inference_model_versions
from tasks.jobspec import load_job_spec
from tasks.settings import Settings

log = logging.getLogger("scoring.demo")
DEMO_JOB = "credit_risk"


@dataclass(frozen=True)
class DemoPlan:
    scoring_dates: list[dt.date]
    training_dates: list[dt.date]
    model_version: str


def prepared_demo(
    settings: Settings, *, days: int, rows_per_day: int, train_days: int, seed: int, end: dt.date, shift_days: int = 2
) -> DemoPlan:
    """Generate the demo partitions and train (or reuse) the model version trained on exactly them."""
    spec = load_job_spec(DEMO_JOB, settings)
    scoring = demo_dates(end, days)
    training = demo_dates(scoring[0] - dt.timedelta(days=1), train_days)
    raw_root = settings.data_dir / "raw" / DEMO_JOB
    labels_root = settings.data_dir / "labels" / DEMO_JOB
    train_dirs = write_demo_partitions(raw_root, labels_root, training, rows_per_day=rows_per_day, seed=seed, shift_days=0)
    write_demo_partitions(raw_root, labels_root, scoring, rows_per_day=rows_per_day, seed=seed, shift_days=min(shift_days, days))

    registry = settings.model_registry_dir(spec.model.name)
    wanted = {"window_start": training[0].isoformat(), "window_end": training[-1].isoformat(), "seed": seed,
              "rows_per_day": rows_per_day}
    for version in reversed(inference_model_versions(registry)):
        training_info = json.loads((registry / version / "metadata.json").read_text()).get("training", {})
        if {k: training_info.get(k) for k in wanted} == wanted:
            log.info("reusing model %s %s, trained on the same demo window", spec.model.name, version)
            return DemoPlan(scoring_dates=scoring, training_dates=training, model_version=version)
    existing = inference_model_versions(registry)
    version = str(int(existing[-1]) + 1) if existing and existing[-1].isdigit() else "1"
    metadata = train_credit_model(
        raw_dirs=train_dirs,
        labels_dirs=[labels_root / f"date={d.isoformat()}" for d in training],
        suite=load_guard_suite(settings.expectations_dir / spec.expectation_suite),
        features=load_feature_module(spec.feature_module),
        entity_column=spec.entity_column,
        model_dir=registry / version,
        model_name=spec.model.name,
        version=version,
        seed=seed,
        training_window=(training[0], training[-1]),
        extra_training_info={"rows_per_day": rows_per_day},
    )
    return DemoPlan(scoring_dates=scoring, training_dates=training, model_version=metadata.version)
