"""Promotion by alias: `score promote JOB VERSION --alias champion` and its rollback, and `score register`,
which moves an alias only when asked (or for the model's first version, which becomes the champion).

A version is promoted only when it was registered through `score register` (its registration
report is beside it) and the job validates with it as the scoring model, so an alias never points
at a model the job cannot run.

One move at a time per model: each holds the model's alias lock from reading where the alias
points to its ledger row, so two promotions at once apply one after the other (the second moves
from the first's target) instead of both moving from the same version. The alias file is renamed
first, with the move marked unrecorded; the `model_aliases` row follows, then the mark is cleared.
When the row cannot be written the file is put back; when the process dies between the rename and
the row, the next alias command of the model (or `score recover`) writes the row. The file is the
commit point because runs read it: once renamed, the move is in force, and the ledger catches up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.errors import JobSpecError, JobValidationError, ModelArtifactError
from tasks.inference.aliases import (
    AliasChange,
    inference_alias_history,
    inference_alias_lock,
    inference_alias_snapshot,
    inference_model_aliases,
    inference_moved_alias,
    inference_recorded_alias_changes,
    inference_restored_aliases,
    inference_unrecorded_alias_changes,
)
from tasks.inference.registry import inference_model_versions, inference_resolved_version
from tasks.jobs.registration import REGISTRATION_REPORT, RegistrationReport, registered_job_model
from tasks.jobs.validation import job_problems
from tasks.jobspec import load_job_spec
from tasks.settings import Settings
from tasks.sinks.crash_points import crash_point
from tasks.sinks.warehouse import Warehouse

log = logging.getLogger("scoring.promotion")

CHAMPION = "champion"
"""The alias a scaffolded job scores (`model.version: champion`), moved by `score promote` and by nothing else
but the registration of a model's first version."""


def _reconciled(registry: Path, warehouse: Warehouse) -> list[AliasChange]:
    """Write the ledger rows of moves a killed mover left unrecorded (none twice), clear their mark, and
    return the moves whose row was missing. The caller holds the alias lock."""
    unrecorded = inference_unrecorded_alias_changes(registry)
    if not unrecorded:
        return []
    ledger = {
        (r["alias"], r["from_version"], r["to_version"], r["changed_at"])
        for r in warehouse.alias_changes(registry.name)
    }
    written = []
    for change, job in unrecorded:
        # A mover killed after its row but before clearing the mark left a move the ledger already holds.
        if (change.alias, change.from_version, change.to_version, change.changed_at) not in ledger:
            warehouse.record_alias_change({**change.as_row(), "job": job})
            written.append(change)
            log.info(
                "alias %s of %s: %s → %s (by %s at %s) was in %s but not in model_aliases (its mover stopped in between); recorded now",
                change.alias,
                change.model_name,
                change.from_version or "(none)",
                change.to_version or "(removed)",
                change.changed_by,
                change.changed_at.isoformat(),
                registry / "aliases.json",
            )
    inference_recorded_alias_changes(registry, [change for change, _ in unrecorded])
    return written


@contextlib.contextmanager
def _alias_moves(registry: Path, warehouse: Warehouse) -> Iterator[None]:
    """The model's alias lock, with what an earlier mover left unrecorded written to the ledger first."""
    with inference_alias_lock(registry):
        _reconciled(registry, warehouse)
        yield


def _committed(
    registry: Path, job: str, settings: Settings, warehouse: Warehouse, move: Callable[[], AliasChange]
) -> AliasChange:
    """`move` (it renames the alias file), then its ledger row, then the file's unrecorded mark cleared."""
    before = inference_alias_snapshot(registry)
    change = move()
    crash_point("alias:moved", settings.crash_at)
    try:
        warehouse.record_alias_change({**change.as_row(), "job": job})
    except Exception:
        inference_restored_aliases(registry, before)
        raise
    crash_point("alias:recorded", settings.crash_at)
    inference_recorded_alias_changes(registry, [change])
    log.info(
        "alias %s of %s: %s → %s (by %s)",
        change.alias,
        change.model_name,
        change.from_version or "(none)",
        change.to_version or "(removed)",
        change.changed_by,
    )
    return change


def promoted_alias(
    job: str, version: str, *, alias: str, settings: Settings, warehouse: Warehouse, changed_by: str, note: str = ""
) -> AliasChange:
    """Point `alias` of the job's model at `version` (a version, or another alias: `promote credit_risk
    challenger --alias champion`), after checking it is registered and the job validates with it."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    # The check (a second or so) runs before the lock, so promotions at once wait only for each other's move.
    target = _checked_target(job, version, registry, settings)
    with _alias_moves(registry, warehouse):
        return _moved_to(
            job,
            version,
            target,
            registry,
            alias=alias,
            settings=settings,
            warehouse=warehouse,
            changed_by=changed_by,
            note=note,
        )


def _checked_target(job: str, version: str, registry: Path, settings: Settings) -> str:
    """The registered version `version` names, refused unless `score register` wrote it and the job validates with it."""
    versions = inference_model_versions(registry)
    target = inference_resolved_version(registry, version, versions)
    if target not in versions:
        known = inference_model_aliases(registry)
        raise ModelArtifactError(
            f"model {registry.name} has no version {version!r}; versions: {versions}"
            + (f", aliases: {known}" if known else "")
        )
    if not (registry / target / REGISTRATION_REPORT).is_file():
        raise ModelArtifactError(
            f"model {registry.name} version {target} has no registration report ({registry / target / REGISTRATION_REPORT}): "
            "only a version registered with `score register` (hold-out calibration or prediction interval, reference, checks) can be promoted"
        )
    problems = job_problems(job, settings, model_version=target)
    if problems:
        raise JobValidationError(problems)
    return target


def _moved_to(
    job: str,
    version: str,
    target: str,
    registry: Path,
    *,
    alias: str,
    settings: Settings,
    warehouse: Warehouse,
    changed_by: str,
    note: str,
) -> AliasChange:
    """The move to the checked `target`, under the alias lock. `version` is resolved again there: when it is an
    alias that another process moved since the check, the move is refused naming where it points now."""
    versions = inference_model_versions(registry)
    now = inference_resolved_version(registry, version, versions)
    if now != target:
        raise ModelArtifactError(
            f"alias {version!r} of model {registry.name} moved from {target} to {now} while this promotion was checked; "
            f"nothing changed: promote {now} again if it is still meant"
        )
    return _committed(
        registry,
        job,
        settings,
        warehouse,
        lambda: inference_moved_alias(
            registry,
            alias,
            target,
            versions=versions,
            changed_by=changed_by,
            job=job,
            note=note or (f"promoted {version} ({target})" if version != target else "promoted"),
        ),
    )


def rolled_back_alias(
    job: str, *, alias: str, settings: Settings, warehouse: Warehouse, changed_by: str
) -> AliasChange:
    """Point `alias` back at the version it pointed at before its last move, checked like a promotion."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    # The last move is read, checked and undone under the lock: a move made meanwhile is the one rolled back, never skipped.
    with _alias_moves(registry, warehouse):
        moves = [h for h in inference_alias_history(registry) if h["alias"] == alias]
        if not moves:
            raise ModelArtifactError(
                f"alias {alias!r} of model {spec.model.name} has never moved; nothing to roll back to"
            )
        previous = moves[-1]["from_version"]
        if previous is None:
            raise ModelArtifactError(
                f"alias {alias!r} of model {spec.model.name} was created by its last move (pointing at {moves[-1]['to_version']}); "
                "there is no earlier version to roll back to"
            )
        return _moved_to(
            job,
            previous,
            _checked_target(job, previous, registry, settings),
            registry,
            alias=alias,
            settings=settings,
            warehouse=warehouse,
            changed_by=changed_by,
            note=f"rolled back from {moves[-1]['to_version']}",
        )


def removed_alias(job: str, *, alias: str, settings: Settings, warehouse: Warehouse, changed_by: str) -> AliasChange:
    """Remove `alias` of the job's model, recorded in the ledger; a job whose spec still names it stops resolving it."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    with _alias_moves(registry, warehouse):
        return _committed(
            registry,
            job,
            settings,
            warehouse,
            lambda: inference_moved_alias(
                registry,
                alias,
                None,
                versions=inference_model_versions(registry),
                changed_by=changed_by,
                note="removed",
                job=job,
            ),
        )


def reconciled_aliases(job: str, *, settings: Settings, warehouse: Warehouse) -> list[AliasChange]:
    """Moves of the job's model's aliases that were in force but missing from the ledger, now written to it
    (`score recover`)."""
    try:
        registry = settings.model_registry_dir(load_job_spec(job, settings).model.name)
    except JobSpecError:
        # `score recover` goes through every configured job: one whose spec does not load moves no alias,
        # and must not stop the recovery of the others' runs.
        return []
    if not inference_unrecorded_alias_changes(registry):
        return []
    with inference_alias_lock(registry):
        return _reconciled(registry, warehouse)


def alias_notes(job: str, *, settings: Settings) -> list[str]:
    """What the job's aliases now mean for its runs, when it is worth a word: a challenger that is the
    champion itself, or an alias the spec names that no longer exists."""
    spec = load_job_spec(job, settings)
    registry = settings.model_registry_dir(spec.model.name)
    versions, aliases = inference_model_versions(registry), inference_model_aliases(registry)
    notes = []
    for field, named in (("model.version", spec.model.version), ("model.challenger", spec.model.challenger)):
        if named is not None and named != "latest" and named not in versions and named not in aliases:
            notes.append(
                f"the job's {field} names {named!r}, which is neither a version nor an alias of {spec.model.name}"
            )
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
        "model": spec.model.name,
        "versions": inference_model_versions(registry),
        "aliases": inference_model_aliases(registry),
        "scoring": {"version": spec.model.version, "challenger": spec.model.challenger},
        "history": warehouse.alias_changes(spec.model.name),
    }


def scoring_version_text(job: str, *, settings: Settings) -> str:
    """What the job scores with now, in a few words: `credit_risk scores champion (version 1)`."""
    spec = load_job_spec(job, settings)
    named = spec.model.version
    target = inference_resolved_version(settings.model_registry_dir(spec.model.name), named)
    return f"{job} scores {named}" + (f" (version {target})" if target != named else "")


@dataclass(frozen=True)
class Registration:
    """A registered version and what it did to the aliases: `moved` the alias moves made (none unless asked, or
    the first version's champion), `refused` why an asked or first-version move was not made."""

    report: RegistrationReport
    first: bool
    moved: tuple[AliasChange, ...] = ()
    refused: str | None = None


def registered_model(
    job: str,
    model_file: Path,
    *,
    alias: str | None,
    settings: Settings,
    warehouse: Warehouse,
    changed_by: str,
    holdout: Path,
    reference: Path | None = None,
    version: str | None = None,
    training: Mapping[str, Any] | None = None,
    trusted_types: tuple[str, ...] = (),
    positive: str | None = None,
) -> Registration:
    """Register a model of `job` (tasks.jobs.registration.registered_job_model) and move `alias` to it, checked and
    recorded as `score promote` does; nothing else moves, except that a model's first version (no version and no
    champion before) becomes its champion, so a new job can run. A refused move leaves the version registered."""
    report = registered_job_model(
        job,
        model_file,
        settings=settings,
        holdout=holdout,
        reference=reference,
        version=version,
        training=training,
        trusted_types=trusted_types,
        positive=positive,
    )
    registry = settings.model_registry_dir(report.model)
    first = inference_model_versions(registry) == [report.version] and CHAMPION not in inference_model_aliases(registry)
    wanted = list(dict.fromkeys([*([CHAMPION] if first else []), *([alias] if alias else [])]))
    moved: list[AliasChange] = []
    for name in wanted:
        try:
            moved.append(
                promoted_alias(
                    job,
                    report.version,
                    alias=name,
                    settings=settings,
                    warehouse=warehouse,
                    changed_by=changed_by,
                    note="first version, promoted at registration"
                    if first and name == CHAMPION
                    else "moved at registration",
                )
            )
        except (JobValidationError, ModelArtifactError) as exc:
            return Registration(report, first, moved=tuple(moved), refused=str(exc))
    return Registration(report, first, moved=tuple(moved))
