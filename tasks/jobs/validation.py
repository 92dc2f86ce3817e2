"""Every mistake in a job's inputs at once, found before a lease, a ledger row or a Prefect log line.

The spec, its expectation suite, its features and its models' metadata are loaded and checked
against each other (reason-code keys against the model's features, feature lists and versions,
pinned feature-model versions) and against the data: the suite's columns against a raw
partition's schema, the label columns against the latest labels partition. A problem that makes
later checks meaningless (a spec that does not parse, a model that cannot be read) skips them, so
every problem reported is one to fix. `score validate` prints them; `score run`, `score backfill`
and the flows refuse to start on them (JobValidationError).
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from tasks.errors import JobProblem, JobSpecError, JobValidationError, PartitionError, ScoringError, SuiteError
from tasks.features import FeatureModule, feature_categories, feature_kinds, job_features
from tasks.features.declared import DeclaredFeatures
from tasks.guards import GuardSuite, load_guard_suite, raw_schema_problems
from tasks.inference.config import FeatureModelRef
from tasks.inference.kinds import inference_job_kind_words, inference_model_kind_words, inference_same_kind
from tasks.inference.registry import ModelArtifact, inference_artifact_problems, inference_reasons_unavailable
from tasks.jobspec import JobSpec, checked_job_name, job_spec_document, job_spec_path, spec_field_problems
from tasks.prediction.calibration import predict_calibrator_from_metadata
from tasks.prediction.calibration_check import predict_calibration_table
from tasks.prediction.multiclass import predict_multiclass_calibrator_from_metadata
from tasks.prediction.reasons import predict_reason_text_problems
from tasks.settings import Settings
from tasks.sinks.delta import delta_store_problem, delta_tables
from tasks.sources import ParquetPartition, RawPartition, SqlPartition, checked_parquet_files, raw_partition

_CORRUPT_PARQUET = (pa.ArrowException, OSError)
"""What pyarrow raises for bytes that are not Parquet: ArrowInvalid, or an OSError without errno."""


@dataclass(frozen=True)
class ValidatedJob:
    """A job whose inputs fit together: what was loaded and checked."""

    spec: JobSpec
    spec_path: Path
    suite: GuardSuite
    features: FeatureModule
    model: ModelArtifact
    """The version that will score: the job's, or its fallback_version when the job's cannot be loaded."""
    feature_models: tuple[tuple[FeatureModelRef, ModelArtifact], ...]
    raw: RawPartition | None
    """The raw partition the suite was checked against; None when the job has none yet."""
    raw_files: int
    labels_dir: Path | None
    """The labels partition the label columns were checked against; None when there is none."""
    notes: tuple[str, ...] = ()
    """What will happen that is not a mistake, e.g. a fallback model scoring every row."""


def job_problems(
    job: str, settings: Settings, *, partition_date: dt.date | None = None, model_version: str | None = None
) -> list[JobProblem]:
    """Every problem of `job`'s inputs, checked against the raw partition of `partition_date` (by
    default the latest one); empty when the job can run. `model_version` checks the job as if its
    spec named that version (a promotion's check)."""
    return _checked_job(job, settings, partition_date, model_version=model_version)[1]


def validated_job(
    job: str,
    settings: Settings,
    *,
    partition_date: dt.date | None = None,
    check_labels: bool = True,
    check_raw: bool = True,
) -> ValidatedJob:
    """`job`'s inputs, loaded and cross-checked as `job_problems` does; JobValidationError lists every problem.
    `check_labels=False` (a scoring run) leaves the labels partition's columns to the outcomes flow;
    `check_raw=False` leaves out the raw partition (a backfill checks each day's with `raw_partition_problems`)."""
    validated, problems = _checked_job(job, settings, partition_date, check_labels=check_labels, check_raw=check_raw)
    if problems or validated is None:
        raise JobValidationError(problems)
    return validated


def latest_version_warnings(spec: JobSpec, spec_path: Path) -> list[str]:
    """A line per model reference that follows `latest`: nothing wrong today, but the next registration changes
    what the job scores without a promotion (`score validate` says so; a run does not)."""
    lines = []
    if spec.model.version == "latest":
        lines.append(
            f"{spec_path} model.version is latest: every `score register` changes what this job scores; "
            "use champion (score promote moves it)"
        )
    lines += [
        f"{spec_path} model.feature_models[{i}].version is latest: every new version of {ref.name} changes what this job "
        "scores; name a version"
        for i, ref in enumerate(spec.model.feature_models)
        if ref.version == "latest"
    ]
    return lines


def raw_partition_problems(validated: ValidatedJob, settings: Settings, partition_date: dt.date) -> list[JobProblem]:
    """The raw partition of `partition_date` against a job already validated: its files readable, the
    suite's columns and the declared features' columns present with their types."""
    problems: list[JobProblem] = []
    _raw_partition(
        validated.spec.name,
        validated.spec,
        validated.spec_path,
        settings,
        partition_date,
        validated.suite,
        validated.features,
        problems,
    )
    return problems


def checked_raw_files(raw: ParquetPartition) -> list[str]:
    """The partition's Parquet files, each footer read: a zero-byte, non-Parquet or garbage-footer
    file is a PartitionError naming it, found before anything is scored."""
    checked = checked_parquet_files(raw)
    for _, _, problem in checked:
        if problem:
            raise PartitionError(problem)
    return [location for location, _, _ in checked]


def _latest_partition(root: Path) -> Path | None:
    dated = sorted(p for p in root.glob("date=*") if p.is_dir()) if root.is_dir() else []
    return dated[-1] if dated else None


def _checked_job(
    job: str,
    settings: Settings,
    partition_date: dt.date | None,
    *,
    check_labels: bool = True,
    model_version: str | None = None,
    check_raw: bool = True,
) -> tuple[ValidatedJob | None, list[JobProblem]]:
    try:
        checked_job_name(job, settings)
    except JobSpecError as exc:
        return None, [JobProblem(settings.jobs_dir, "job", str(exc))]
    spec_path = job_spec_path(job, settings)
    try:
        document = job_spec_document(job, settings)
    except JobSpecError as exc:
        return None, [JobProblem(spec_path, "(file)", str(exc))]
    try:
        spec = JobSpec.model_validate(document)
    except ValidationError as exc:
        return None, [JobProblem(spec_path, field, problem) for field, problem in spec_field_problems(exc)]
    if model_version is not None:
        spec = spec.model_copy(
            update={"model": spec.model.model_copy(update={"version": model_version, "challenger": None})}
        )
    problems: list[JobProblem] = []
    if spec.name != job:
        problems.append(
            JobProblem(spec_path, "name", f"declares name {spec.name!r}; it must match the file name {job!r}")
        )
    suite = _suite(spec, spec_path, settings, problems)
    features = _features(spec, spec_path, problems)
    if features is not None:
        problems += _reason_code_problems(spec, spec_path, _model_features(spec, features))
        problems += [
            JobProblem(spec_path, *problem.split(": ", 1))
            for problem in predict_reason_text_problems(
                spec.prediction.reasons, kinds=feature_kinds(features), categories=feature_categories(features)
            )
        ]
    model, notes = _scoring_model(spec, spec_path, settings, features, problems)
    feature_models = _feature_models(spec, spec_path, settings, features, model, problems)
    raw, raw_files = (
        _raw_partition(job, spec, spec_path, settings, partition_date, suite, features, problems)
        if check_raw
        else (None, 0)
    )
    if (tables := delta_tables(spec.sinks.delta, settings)) is not None and (problem := delta_store_problem(tables)):
        problems.append(JobProblem(spec_path, "sinks.delta.url", problem))
    # A labels file that does not fit the spec fails the outcomes flow; scoring a night does not need labels.
    labels_dir = _labels_partition(job, spec, spec_path, settings, partition_date, problems if check_labels else [])
    if problems or suite is None or features is None or model is None or feature_models is None:
        return None, problems
    return ValidatedJob(
        spec=spec,
        spec_path=spec_path,
        suite=suite,
        features=features,
        model=model,
        feature_models=feature_models,
        raw=raw,
        raw_files=raw_files,
        labels_dir=labels_dir,
        notes=tuple(notes),
    ), []


def _suite(spec: JobSpec, spec_path: Path, settings: Settings, problems: list[JobProblem]) -> GuardSuite | None:
    path = settings.expectations_dir / spec.expectation_suite
    try:
        return load_guard_suite(path, entity_column=spec.entity_column)
    except SuiteError as exc:
        if not path.is_file():
            problems.append(JobProblem(spec_path, "expectation_suite", f"{spec.expectation_suite!r}: {exc}"))
        else:
            found = re.search(r"expectation #(\d+)", str(exc))
            problems.append(JobProblem(path, f"expectations[{found[1]}]" if found else "expectations", str(exc)))
        return None


def _features(spec: JobSpec, spec_path: Path, problems: list[JobProblem]) -> FeatureModule | None:
    module = getattr(spec, "feature_module", None)
    try:
        return job_features(spec)
    except (ImportError, AttributeError) as exc:
        problems.append(JobProblem(spec_path, "feature_module", f"{module!r} cannot be loaded: {exc}"))
    except ScoringError as exc:
        problems.append(JobProblem(spec_path, "features", str(exc)))
    return None


def _model_features(spec: JobSpec, features: FeatureModule) -> tuple[str, ...]:
    """The final model's input: the job's features, then each feature model's output."""
    return (*features.FEATURES, *(ref.output_feature for ref in spec.model.feature_models))


def _reason_code_problems(spec: JobSpec, spec_path: Path, model_features: tuple[str, ...]) -> list[JobProblem]:
    """A key that names no model feature (with the closest feature), and the features without a code:
    reasons are computed per model feature, so either fails the run when reasons are assigned."""
    codes = spec.prediction.reasons.codes
    uncovered = [f for f in model_features if f not in codes]
    problems, suggested = [], set()
    for key in (k for k in codes if k not in model_features):
        close = difflib.get_close_matches(key, uncovered, n=1) or difflib.get_close_matches(key, model_features, n=1)
        suggested.update(close)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; the model's features: {', '.join(model_features)}"
        problems.append(
            JobProblem(spec_path, f"prediction.reasons.codes.{key}", f"{key!r} is not a feature of the model{hint}")
        )
    rest = [f for f in uncovered if f not in suggested]
    if rest:
        problems.append(
            JobProblem(
                spec_path,
                "prediction.reasons.codes",
                f"no reason code for model feature(s) {rest}; every feature needs one",
            )
        )
    return problems


def _artifact(
    registry_dir: Path, version: str, spec_path: Path, field: str
) -> tuple[ModelArtifact | None, list[JobProblem]]:
    """The artifact and its problems; a version the registry does not have is the spec's `field`."""
    artifact, problems = inference_artifact_problems(registry_dir, version)
    return artifact, [JobProblem(spec_path, field, p.message) if p.file == registry_dir else p for p in problems]


def _scoring_model(
    spec: JobSpec, spec_path: Path, settings: Settings, features: FeatureModule | None, problems: list[JobProblem]
) -> tuple[ModelArtifact | None, list[str]]:
    registry = settings.model_registry_dir(spec.model.name)
    model, model_problems = _artifact(registry, spec.model.version, spec_path, "model.version")
    checked = [model] if model else []
    notes: list[str] = []
    fallback = spec.model.fallback_version
    if fallback is not None:
        spare, spare_problems = _artifact(registry, fallback, spec_path, "model.fallback_version")
        problems += spare_problems
        if spare is not None:
            checked.append(spare)
            if model is None:
                # The run would load the fallback and count every row as a fallback: not a mistake to refuse.
                notes.append(
                    f"model {spec.model.name} {spec.model.version} cannot be loaded, so fallback_version {fallback} "
                    f"would score every row: " + "; ".join(str(p) for p in model_problems)
                )
                model, model_problems = spare, []
    problems += model_problems
    for artifact in checked:
        problems += _scoring_metadata_problems(artifact, spec, spec_path, features)
    notes += _challenger_notes(spec, spec_path, registry, features, model, problems)
    notes += _reasons_off_notes(spec, model, "model")
    if spec.target.kind != "binary" and spec.monitoring.slices:
        # The slice tables count a probability's sums and score bands, which a forecast job has not.
        notes.append(
            f"monitoring.slices {spec.monitoring.slices} of a {spec.target.kind} job (target.kind) are not monitored yet: "
            "its runs write no slice counts and no slice_monitoring rows"
        )
    if model is not None and not problems and spec.target.kind == "binary":
        meta = model.metadata
        table = predict_calibration_table(meta.calibration, level=spec.prediction.interval_level)
        notes += [f"model {meta.name} {meta.version} calibration: {warning}" for warning in table.warnings]
    return model, notes


def _challenger_notes(
    spec: JobSpec,
    spec_path: Path,
    registry: Path,
    features: FeatureModule | None,
    model: ModelArtifact | None,
    problems: list[JobProblem],
) -> list[str]:
    """The challenger checked as a scoring model: its problems are the job's when the spec says a
    failing challenger fails the run (`challenger_failure: fail`), otherwise notes of what the run will count."""
    if spec.model.challenger is None:
        return []
    artifact, found = _artifact(registry, spec.model.challenger, spec_path, "model.challenger")
    if artifact is not None:
        # A challenger may take a subset of the job's model inputs, in its own order; the pass hands it its columns.
        found += _scoring_metadata_problems(artifact, spec, spec_path, None)
        meta = artifact.metadata
        if features is not None and meta.feature_version != features.FEATURE_VERSION:
            found.append(
                JobProblem(
                    artifact.directory / "metadata.json",
                    "feature_version",
                    (
                        f"the challenger was trained on feature_version {meta.feature_version!r}, the job computes {features.FEATURE_VERSION!r}"
                    ),
                )
            )
        missing = [f for f in meta.features if features is not None and f not in _model_features(spec, features)]
        if missing:
            found.append(
                JobProblem(
                    artifact.directory / "metadata.json",
                    "features",
                    (f"the challenger takes features the job does not compute: {missing}"),
                )
            )
    if spec.model.challenger_failure == "fail":
        problems += found
        return [] if found else _reasons_off_notes(spec, artifact, f"challenger {spec.model.challenger}")
    if found:
        return [
            f"challenger {spec.model.challenger} cannot shadow the run; its rows will be counted as challenger_failed: "
            + "; ".join(str(p) for p in found)
        ]
    if model is not None and artifact is not None and artifact.metadata.version == model.metadata.version:
        return [
            f"challenger {spec.model.challenger} is version {model.metadata.version}, the champion itself: no decision can flip"
        ]
    return _reasons_off_notes(spec, artifact, f"challenger {spec.model.challenger}")


def _reasons_off_notes(spec: JobSpec, artifact: ModelArtifact | None, role: str) -> list[str]:
    """That a model scores with reasons off, when the job's decisions ask for reasons: not a mistake, a count."""
    why = inference_reasons_unavailable(artifact.metadata) if artifact is not None else None
    wanted = spec.prediction.reasons.for_decisions
    if why is None or not wanted:
        return []
    if role == "model":
        return [
            f"{why}; rows decided {', '.join(wanted)} get no reason codes, counted as reasons_unavailable in each run's fallback report"
        ]
    return [f"{role}: {why}; it shadow-scores rows decided {', '.join(wanted)} without reason codes"]


def _scoring_metadata_problems(
    artifact: ModelArtifact, spec: JobSpec, spec_path: Path, features: FeatureModule | None
) -> list[JobProblem]:
    """What stops a final model from finishing a run: no usable calibration map, no training
    reference unless the job opts out, other features or another feature version than the job's."""
    meta, meta_path = artifact.metadata, artifact.directory / "metadata.json"
    problems = []
    kind = spec.target.kind
    if not inference_same_kind(meta.target, kind):
        problems.append(
            JobProblem(
                meta_path,
                "target",
                (
                    f"model {meta.name} version {meta.version} was registered as {inference_model_kind_words(meta.target)}, but job {spec.name} is "
                    f"{inference_job_kind_words(kind)} (target.kind in {spec_path}): register a model of the job's kind"
                ),
            )
        )
    elif kind == "multiclass":
        if meta.classes != spec.target.classes:
            problems.append(
                JobProblem(
                    meta_path,
                    "classes",
                    (
                        f"model {meta.name} version {meta.version} was registered for classes {meta.classes}, but job {spec.name} names "
                        f"{spec.target.classes} (target.classes in {spec_path}): the model's outputs would be read as other classes; "
                        "register it again for these classes"
                    ),
                )
            )
        try:
            predict_multiclass_calibrator_from_metadata(meta.calibration)
        except ValueError as exc:
            problems.append(JobProblem(meta_path, "calibration", f"model {meta.name} version {meta.version}: {exc}"))
    elif kind == "binary":
        try:
            predict_calibrator_from_metadata(meta.calibration)
        except ValueError as exc:
            # The path names the version's folder; a promotion or an alias names it by its number or alias, so say it too.
            problems.append(JobProblem(meta_path, "calibration", f"model {meta.name} version {meta.version}: {exc}"))
    elif not meta.interval or meta.error_model_file is None:
        problems.append(
            JobProblem(
                meta_path,
                "interval",
                (
                    f"model {meta.name} version {meta.version} has no conformal interval or error model; register it again with score register"
                ),
            )
        )
    if not meta.reference and spec.drift.require_reference:
        problems.append(
            JobProblem(
                meta_path,
                "reference",
                (
                    "is missing or empty, so drift cannot be checked against training; retrain the model, or set "
                    f"`drift: {{require_reference: false}}` in {spec_path} to score without it"
                ),
            )
        )
    if features is not None:
        source = f"feature module {getattr(spec, 'feature_module', None) or 'of the job'}"
        if spec.model.feature_models:
            source += " and the feature models' outputs"
        problems += _feature_problems(
            meta_path,
            meta.feature_version,
            meta.features,
            features.FEATURE_VERSION,
            _model_features(spec, features),
            source,
        )
    return problems


def _feature_problems(
    meta_path: Path, trained_version: str, trained: list[str], version: str, expected: tuple[str, ...], source: str
) -> list[JobProblem]:
    problems = []
    if trained_version != version:
        problems.append(
            JobProblem(
                meta_path,
                "feature_version",
                (
                    f"the model was trained on feature_version {trained_version!r}, but the {source} computes {version!r}; "
                    "retrain, or pin a model trained on these features"
                ),
            )
        )
    if tuple(trained) == expected:
        return problems
    only_model = [f for f in trained if f not in expected]
    only_job = [f for f in expected if f not in trained]
    if only_model or only_job:
        message = (
            f"the model takes {len(trained)} features, the {source} gives {len(expected)}; "
            f"only in the model: {only_model}, only in the job: {only_job}"
        )
    else:
        at = next(i for i, (a, b) in enumerate(zip(trained, expected, strict=True)) if a != b)
        message = (
            f"the model takes the same {len(expected)} features in another order: position {at} is {trained[at]!r} "
            f"in the model, {expected[at]!r} in the {source}"
        )
    problems.append(JobProblem(meta_path, "features", message))
    return problems


def _feature_models(
    spec: JobSpec,
    spec_path: Path,
    settings: Settings,
    features: FeatureModule | None,
    model: ModelArtifact | None,
    problems: list[JobProblem],
) -> tuple[tuple[FeatureModelRef, ModelArtifact], ...] | None:
    """Each feature model's artifact, checked against the job's features and the version the final model was trained with."""
    loaded = []
    trained_with = model.metadata.training.get("feature_models", {}) if model else {}
    for i, ref in enumerate(spec.model.feature_models):
        field = f"model.feature_models[{i}].version"
        artifact, found = _artifact(settings.model_registry_dir(ref.name), ref.version, spec_path, field)
        problems += found
        if artifact is None:
            continue
        loaded.append((ref, artifact))
        meta = artifact.metadata
        if features is not None:
            problems += _feature_problems(
                artifact.directory / "metadata.json",
                meta.feature_version,
                meta.features,
                features.FEATURE_VERSION,
                tuple(features.FEATURES),
                f"feature module {getattr(spec, 'feature_module', None) or 'of the job'}",
            )
        if model is not None and ref.name in trained_with and str(trained_with[ref.name]) != meta.version:
            problems.append(
                JobProblem(
                    spec_path,
                    field,
                    (
                        f"model {model.metadata.name} {model.metadata.version} was trained on the output of {ref.name} "
                        f"{trained_with[ref.name]}, but {ref.name} {meta.version} would feed it; pin version {trained_with[ref.name]} "
                        "in model.feature_models or retrain"
                    ),
                )
            )
    return tuple(loaded) if len(loaded) == len(spec.model.feature_models) else None


def _raw_partition(
    job: str,
    spec: JobSpec,
    spec_path: Path,
    settings: Settings,
    partition_date: dt.date | None,
    suite: GuardSuite | None,
    features: FeatureModule | None,
    problems: list[JobProblem],
) -> tuple[RawPartition | None, int]:
    """The suite's columns against each distinct schema of the partition's raw files (or its query's result).

    Without a date, a job on the default layout is checked against its latest partition and a SQL
    job against its query's columns (any date answers that); an object-store job only with a date.
    """
    try:
        raw = _dated_raw_partition(job, spec, settings, partition_date)
        if raw is None:
            return None, 0
        if isinstance(raw, SqlPartition):
            schemas = [(raw.location, raw.schema())]
        else:
            if not raw.exists() and partition_date is not None:
                if not raw.local and spec.limits.min_rows == 0:
                    return raw, 0
                what = "the folder does not exist" if raw.local else "no Parquet files under it"
                problems.append(
                    JobProblem(
                        _problem_file(raw, str(raw)),
                        "date",
                        f"no raw partition for job {job!r} on {partition_date}: {what}",
                    )
                )
                return None, 0
            checked = checked_parquet_files(raw)
            problems += [
                JobProblem(_problem_file(raw, location), "(file)", problem)
                for location, _, problem in checked
                if problem
            ]
            schemas = [(location, schema) for location, schema, _ in checked if schema is not None]
    except PartitionError as exc:
        problems.append(JobProblem(spec_path, "source", str(exc)))
        return None, 0
    if suite is not None:
        seen: list[pa.Schema] = []
        for path, schema in schemas:
            if any(schema.equals(s) for s in seen):
                continue
            seen.append(schema)
            problems += [
                JobProblem(
                    spec_path,
                    "monitoring.slices",
                    f"{column!r} is not a column of raw file {path}{_did_you_mean(column, schema.names)}; "
                    f"it has {schema.names}",
                )
                for column in spec.monitoring.slices
                if column not in schema.names
            ]
            found = [
                JobProblem(_problem_file(raw, path), column, problem)
                for column, problem in raw_schema_problems(schema, suite)
            ]
            problems += found
            if found:
                # The suite checks every column it names; the features' view of the same gap would repeat it.
                continue
            if isinstance(features, DeclaredFeatures):
                # A Python module reads what it needs itself; declared features say what they read, so check it now.
                try:
                    features.checked_raw_schema(schema, where=f"raw file {path}")
                except JobSpecError as exc:
                    problems.append(JobProblem(_problem_file(raw, path), "features", str(exc)))
    return raw, len(schemas)


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _problem_file(raw: RawPartition, location: str) -> Path | str:
    """A file of a local folder as the Path it is; a URL or a query's description as written (a Path would fold `//`)."""
    return Path(location) if isinstance(raw, ParquetPartition) and raw.local else location


def _dated_raw_partition(
    job: str, spec: JobSpec, settings: Settings, partition_date: dt.date | None
) -> RawPartition | None:
    if partition_date is not None:
        return raw_partition(spec.source, settings, job, partition_date)
    if spec.source is None:
        latest = _latest_partition(settings.inside_data_root("raw", job))
        return ParquetPartition(str(latest)) if latest is not None else None
    if spec.source.sql is not None:
        return raw_partition(spec.source, settings, job, dt.date.today())
    return None


def _labels_partition(
    job: str,
    spec: JobSpec,
    spec_path: Path,
    settings: Settings,
    partition_date: dt.date | None,
    problems: list[JobProblem],
) -> Path | None:
    """The columns `monitoring.labels` names against the files of the labels partition of `partition_date`
    (the latest one when no date is given or that day has no labels yet), if any."""
    dated = settings.labels_partition_dir(job, partition_date.isoformat()) if partition_date else None
    labels_dir = (
        dated if dated is not None and dated.is_dir() else _latest_partition(settings.inside_data_root("labels", job))
    )
    if labels_dir is None:
        return None
    source = spec.monitoring.labels
    wanted = {
        "entity_column": source.entity_column,
        "outcome_column": source.outcome_column,
        "observed_date_column": source.observed_date_column,
    }
    for path in sorted(labels_dir.glob("*.parquet")):
        try:
            names = pq.read_schema(path).names
        except _CORRUPT_PARQUET as exc:
            if isinstance(exc, OSError) and exc.errno is not None:
                raise
            problems.append(JobProblem(path, "(file)", f"labels file {path} is not a readable Parquet file"))
            continue
        for field, column in wanted.items():
            if column not in names:
                problems.append(
                    JobProblem(
                        spec_path,
                        f"monitoring.labels.{field}",
                        (f"{column!r} is not a column of labels file {path}; its columns: {', '.join(names)}"),
                    )
                )
        # The files of one partition share their producer: the first readable one speaks for them.
        break
    return labels_dir
