"""Promotion by alias: `score promote JOB VERSION --alias champion` and its rollback.

A version is promoted only when it was registered through `score register` (its registration
report is beside it) and the job validates with it as the scoring model, so an alias never points
at a model the job cannot run. The alias file moves first (atomically); the `model_aliases` ledger
row follows, and when it cannot be written the alias file is put back, so the two never disagree.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tasks.errors import JobValidationError, ModelArtifactError
from tasks.inference.aliases import (
    AliasChange,
    inference_alias_history,
    inference_model_aliases,
    inference_moved_alias,
    inference_restored_aliases,
)
from tasks.inference.registry import inference_model_versions, inference_resolved_version
from tasks.jobs.registration import REGISTRATION_REPORT
from tasks.jobs.validation import job_problems
from tasks.jobspec import load_job_spec
from tasks.settings import Settings
from tasks.sinks.warehouse import Warehouse

log = logging.getLogger("scoring.promotion")


def _recorded(warehouse: Warehouse, registry: Path, change: AliasChange, job: str, before: tuple[dict, list]) -> AliasChange:
    try:
        warehouse.record_alias_change({**change.as_row(), "job": job})
    except Exception:
        inference_restored_aliases(registry, *before)
        raise
    log.info(
        "alias %s of %s: %s → %s (by %s)", change.alias, change.model_name, change.from_version or "(none)",
        change.to_version or "(removed)", change.changed_by,
    )
    return change


def promoted_alias(
    job: str, version: str, *, alias: str, settings: Settings, warehouse: Warehouse, changed_by: str, note: str = ""
) -> AliasChange:
    """Point `alias` of the job's model at `version` (a version, or another alias: `promote credit_risk
    challenger --alias champion`), after checking it is registered and the job validates with it."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    versions = inference_model_versions(registry)
    target = inference_resolved_version(registry, version, versions)
    if target not in versions:
        known = inference_model_aliases(registry)
        raise ModelArtifactError(
            f"model {spec.model.name} has no version {version!r}; versions: {versions}" + (f", aliases: {known}" if known else "")
        )
    if not (registry / target / REGISTRATION_REPORT).is_file():
        raise ModelArtifactError(
            f"model {spec.model.name} version {target} has no registration report ({registry / target / REGISTRATION_REPORT}): "
            "only a version registered with `score register` (hold-out calibration, reference, checks) can be promoted"
        )
    problems = job_problems(job, settings, model_version=target)
    if problems:
        raise JobValidationError(problems)
    before = (inference_model_aliases(registry), inference_alias_history(registry))
    change = inference_moved_alias(
        registry, alias, target, versions=versions, changed_by=changed_by,
        note=note or (f"promoted {version} ({target})" if version != target else "promoted"),
    )
    return _recorded(warehouse, registry, change, job, before)


def rolled_back_alias(job: str, *, alias: str, settings: Settings, warehouse: Warehouse, changed_by: str) -> AliasChange:
    """Point `alias` back at the version it pointed at before its last move, checked like a promotion."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    moves = [h for h in inference_alias_history(registry) if h["alias"] == alias]
    if not moves:
        raise ModelArtifactError(f"alias {alias!r} of model {spec.model.name} has never moved; nothing to roll back to")
    previous = moves[-1]["from_version"]
    if previous is None:
        raise ModelArtifactError(
            f"alias {alias!r} of model {spec.model.name} was created by its last move (pointing at {moves[-1]['to_version']}); "
            "there is no earlier version to roll back to"
        )
    return promoted_alias(
        job, previous, alias=alias, settings=settings, warehouse=warehouse, changed_by=changed_by,
        note=f"rolled back from {moves[-1]['to_version']}",
    )


def removed_alias(job: str, *, alias: str, settings: Settings, warehouse: Warehouse, changed_by: str) -> AliasChange:
    """Remove `alias` of the job's model, recorded in the ledger; a job whose spec still names it stops resolving it."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    before = (inference_model_aliases(registry), inference_alias_history(registry))
    change = inference_moved_alias(
        registry, alias, None, versions=inference_model_versions(registry), changed_by=changed_by, note="removed",
    )
    return _recorded(warehouse, registry, change, job, before)


def alias_notes(job: str, *, settings: Settings) -> list[str]:
    """What the job's aliases now mean for its runs, when it is worth a word: a challenger that is the
    champion itself, or an alias the spec names that no longer exists."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    versions, aliases = inference_model_versions(registry), inference_model_aliases(registry)
    notes = []
    for field, named in (("model.version", spec.model.version), ("model.challenger", spec.model.challenger)):
        if named is not None and named != "latest" and named not in versions and named not in aliases:
            notes.append(f"the job's {field} names {named!r}, which is neither a version nor an alias of {spec.model.name}")
    if spec.model.challenger is not None:
        champion = inference_resolved_version(registry, spec.model.version, versions)
        challenger = inference_resolved_version(registry, spec.model.challenger, versions)
        if champion == challenger:
            notes.append(
                f"the job's champion ({spec.model.version}) and challenger ({spec.model.challenger}) are both version {champion}: "
                "the shadow repeats the champion; point the challenger alias at a new version or remove model.challenger"
            )
    return notes


def job_aliases(job: str, *, settings: Settings, warehouse: Warehouse) -> dict[str, Any]:
    """The job's model, its versions, where each alias points, and the ledger of their moves."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    return {
        "model": spec.model.name, "versions": inference_model_versions(registry), "aliases": inference_model_aliases(registry),
        "scoring": {"version": spec.model.version, "challenger": spec.model.challenger},
        "history": warehouse.alias_changes(spec.model.name),
    }
