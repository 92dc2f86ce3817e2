"""A challenger for the demo credit job: a second model trained on the champion's window with another
seed, and a copy of the jobs folder whose credit spec pins the champion and names the challenger.
Used by the champion/challenger tests, the publish crash trials and `bench/shadow_scoring.py`."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

from tasks.demo.training import train_credit_model
from tasks.inference.registry import inference_model_versions
from tasks.settings import Settings

DEMO_JOB = "credit_risk"
_PINNED = "model:\n  name: credit_risk\n  version: latest\n"


def registered_demo_challenger(settings: Settings, *, champion: str, seed: int = 29) -> str:
    """A new version of the credit model, trained on the window `champion` was trained on (its raw
    and labels partitions must still be there) with another seed: its hold-out, subsamples and so
    its trees differ, enough for some decisions to flip. Returns the version."""
    registry = settings.model_registry_dir(DEMO_JOB)
    training = json.loads((registry / champion / "metadata.json").read_text())["training"]
    first, last = dt.date.fromisoformat(training["window_start"]), dt.date.fromisoformat(training["window_end"])
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    version = str(max(int(v) for v in inference_model_versions(registry) if v.isdigit()) + 1)
    train_credit_model(
        settings,
        DEMO_JOB,
        raw_dirs=[settings.raw_partition_dir(DEMO_JOB, d.isoformat()) for d in days],
        labels_dirs=[settings.labels_partition_dir(DEMO_JOB, d.isoformat()) for d in days],
        version=version,
        seed=seed,
        training_window=(first, last),
        extra_training_info={"rows_per_day": training.get("rows_per_day"), "challenger_of": champion},
    )
    return version


def challenger_jobs_dir(
    settings: Settings, target: Path, *, champion: str, challenger: str | None, failure: str = "count"
) -> Path:
    """A copy of the jobs folder at `target` whose credit spec scores with `champion` and, when given,
    shadows it with `challenger` (`model.challenger_failure: failure`)."""
    shutil.copytree(settings.jobs_dir, target, dirs_exist_ok=True)
    spec = target / f"{DEMO_JOB}.yaml"
    text = spec.read_text()
    if _PINNED not in text:
        raise ValueError(f"{spec} does not name its model as the demo does; cannot pin a champion in it")
    model = f"model:\n  name: credit_risk\n  version: {json.dumps(champion)}\n"
    if challenger is not None:
        model += f"  challenger: {json.dumps(challenger)}\n  challenger_failure: {failure}\n"
    spec.write_text(text.replace(_PINNED, model))
    return target
