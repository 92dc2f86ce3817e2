"""Commands about a job's definition: init, validate, features."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from cli.console import console, print_json, print_line, run_action
from cli.options import JsonOption, PositiveOption
from flows.steps.blocks import with_warehouse_url
from tasks.errors import ExitCode
from tasks.jobs.validation import ValidatedJob, latest_version_warnings, validated_job
from tasks.runs.calendar import parse_partition_date
from tasks.settings import current_settings
from tasks.sources import SqlPartition


class KindChoice(str, enum.Enum):
    binary = "binary"
    regression = "regression"
    count = "count"
    multiclass = "multiclass"


def init(
    job: Annotated[str, typer.Argument(help="Name of the new job: lower-case letters, digits and _.")],
    sample: Annotated[Path, typer.Option("--from", help="A sample partition: a folder of Parquet files, or one file.")],
    entity_column: Annotated[str, typer.Option(help="Column with the id of the scored entity.")],
    label_column: Annotated[
        str | None,
        typer.Option(
            help="Column with the outcome, if the sample has one: 1/0 (the event) for a binary job, the actual number for a forecast, the class for a multiclass job; its values propose the kind."
        ),
    ] = None,
    kind: Annotated[
        KindChoice | None,
        typer.Option(
            help="The job's target kind instead of the one the label column suggests: binary (1/0), regression (any number), count (non-negative whole numbers), multiclass (3 or more classes, names or whole-number codes)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the job's spec and suite if they exist.")] = False,
    positive: Annotated[
        str | None,
        typer.Option(
            help="The label's value that is the event of a binary job, when the label is not 1/0 or true/false (e.g. Yes, churned, 2); written to the spec's monitoring.labels.positive."
        ),
    ] = None,
) -> None:
    """Scaffold jobs/JOB.yaml (declared features, the target's kind, starter rules, reason codes) and
    expectations/JOB.json (guards profiled from the sample), with `review:` notes on every proposal."""
    from tasks.jobs.scaffold import scaffolded_job

    def action() -> None:
        settings = current_settings()
        done = scaffolded_job(
            job,
            sample=sample,
            entity_column=entity_column,
            label_column=label_column,
            settings=settings,
            force=force,
            kind=kind.value if kind is not None else None,
            positive=positive,
        )
        kinds = ", ".join(
            f"{sum(k == kind for k in done.features.values())} {kind}" for kind in ("numeric", "boolean", "categorical")
        )
        target = done.target
        if target is None:
            proposed = f"target: {done.kind}" + (
                " (no --label-column: the default)" if kind is None else " (as --kind asked)"
            )
        else:
            proposed = f"target: {done.kind}, " + (
                f"as --kind asked; {target.why}" if target.asked else f"proposed because {target.why}"
            )
            proposed += (
                {
                    "binary": ""
                    if target.positive is not None
                    else "; --force --kind count or regression scaffolds a forecast job instead",
                    "count": "; --force --kind regression scaffolds a forecast of any number instead",
                    "regression": "",
                    "multiclass": "; --force --kind count scaffolds a forecast of the number instead"
                    if target.numeric
                    else "",
                }[done.kind]
                if not target.asked
                else ""
            )
            if target.classes:
                proposed += f"\nclasses, in this order (it must be the model's, e.g. scikit-learn's classes_): {', '.join(target.classes)}"
        forecasts = done.kind in ("regression", "count")
        train = (
            [
                "  2. train a multiclass classifier on them (the outcome is the class's index into target.classes; e.g. XGBoost "
                "multi:softprob with num_class",
                f"     {len(target.classes) if target else 'K'}, LightGBM multiclass, CatBoost MultiClass, a scikit-learn classifier) and save "
                "it: XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm,",
                "     scikit-learn .skops (skops.io.dump) or ONNX .onnx (docs/guides/model-formats.md), then",
                f"     score register {done.job} --model MODEL --holdout HOLDOUT.parquet   (rows it never saw, with the "
                f"{label_column or 'label'}: they calibrate the class probabilities)",
            ]
            if done.kind == "multiclass"
            else [
                "  2. train a regressor on them (count: e.g. XGBoost count:poisson or reg:tweedie; regression: e.g. XGBoost "
                "reg:squarederror) and save it:",
                "     XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm, scikit-learn .skops (skops.io.dump) or ONNX .onnx "
                "(docs/guides/model-formats.md), then",
                f"     score register {done.job} --model MODEL --holdout HOLDOUT.parquet   (rows it never saw, with the actual "
                f"{label_column or 'outcome'}: they fit the prediction interval)",
            ]
            if forecasts
            else [
                "  2. train a binary classifier on them and save it: XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm,",
                "     scikit-learn .skops (skops.io.dump) or ONNX .onnx (docs/guides/model-formats.md), then",
                f"     score register {done.job} --model MODEL --holdout HOLDOUT.parquet   (rows it never saw, with the outcome)",
            ]
        )
        lines = [
            f"profiled {done.rows} rows from {len(done.sample_files)} file(s) of {sample}",
            f"wrote {done.spec_path}: {len(done.features)} declared features ({kinds})",
            proposed,
            f"wrote {done.suite_path}: {done.expectations} expectations",
            *(f"guessed {column}: {guess}" for column, guess in done.guesses.items()),
            *(f"left out {column}: {why}" for column, why in done.left_out.items()),
            "a number outside its profiled range is clipped to it and scored (counted as guard_repair); "
            "the suite's review notes say how to quarantine such rows instead",
            *(
                f"warning: {column} looks like an outcome and is now a model feature (a model would learn the answer from it): if it "
                f"is the label, scaffold again with --force --label-column {column}"
                for column in done.label_like
            ),
            "next: review every `review:` note in both files, then",
            f"  1. score features {done.job} --from TRAIN.parquet --out INPUTS.parquet   (the model inputs to train on, in order)",
            *train,
            f"  3. score validate {done.job}",
            f"  4. put a partition in {settings.raw_partition_dir(done.job, 'YYYY-MM-DD')} and score run {done.job} --date YYYY-MM-DD",
        ]
        for line in lines:
            print_line(line)

    run_action(action)


def validate(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    date: Annotated[
        str | None, typer.Option(help="Raw partition to check the suite against, YYYY-MM-DD (default: the latest).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Cross-check a job's spec, suite, features, model metadata and data schemas; print every problem (exit 2) or a summary."""

    def action() -> None:
        day = parse_partition_date(date, what="--date") if date is not None else None
        settings = with_warehouse_url(current_settings())
        if as_json:
            from tasks.jobs.validation import job_problems

            problems = job_problems(job, settings, partition_date=day)
            print_json(
                {
                    "job": job,
                    "ok": not problems,
                    "problems": [{"file": str(p.file), "field": p.field, "message": p.message} for p in problems],
                }
            )
            if problems:
                raise typer.Exit(ExitCode.USER)
            return
        for line in _validated_summary(validated_job(job, settings, partition_date=day)):
            print_line(line)

    run_action(action)


def features_command(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    rows: Annotated[
        Path,
        typer.Option(
            "--from", help="Raw rows: a Parquet file or a partition folder (with the outcome column, if any)."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Parquet file to write: the entity, one column per model input, and `outcome` when the rows have it."
        ),
    ],
    positive: PositiveOption = None,
) -> None:
    """Write the model inputs the job computes from raw rows (guards, features, feature models), so a training
    script fits on exactly what scoring will feed the model."""

    def action() -> None:
        from tasks.jobs.registration import job_model_inputs
        from tasks.jobspec import load_job_spec as spec_of

        settings = current_settings()
        spec = spec_of(job, settings)
        source = spec.label_source(positive)
        labelled = source.outcome_column in _parquet_columns(rows)
        inputs = job_model_inputs(job, rows, settings=settings, labelled=labelled, positive=positive)
        out.parent.mkdir(parents=True, exist_ok=True)
        inputs.frame().write_parquet(out)
        console.print(
            f"wrote {out}: {inputs.matrix.shape[0]:,} rows × {len(inputs.names)} model inputs"
            + (
                (
                    " + outcome (the class's index into target.classes: "
                    + ", ".join(f"{i} {c}" for i, c in enumerate(inputs.classes))
                    + ")"
                )
                if labelled and inputs.classes
                else f" + outcome (1: {source.outcome_column} = {source.positive}, 0: {source.outcome_column} = "
                f"{source.negative if source.negative is not None else 'the other value'})"
                if labelled and source.positive
                else " + outcome"
                if labelled
                else ""
            )
            + f"; {inputs.rows_quarantined:,} rows quarantined by the guards",
            highlight=False,
        )

    run_action(action)


def _parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    return pq.read_schema(files[0]).names if files and files[0].is_file() else []


def _validated_summary(validated: ValidatedJob) -> list[str]:
    spec, meta = validated.spec, validated.model.metadata
    lines = [
        f"ok: job {spec.name} ({validated.spec_path})",
        f"  suite {validated.suite.path}: {len(validated.suite.order)} expectations",
        f"  features {getattr(spec, 'feature_module', None) or 'of the spec'}: version {validated.features.FEATURE_VERSION}, "
        f"{len(validated.features.FEATURES)} features",
        f"  model {meta.name} {meta.version}"
        + (f" (named {spec.model.version})" if spec.model.version not in (meta.version, "latest") else "")
        + f" ({meta.framework}, sha256 {meta.sha256[:12]}…), {len(meta.features)} features",
        *(
            [
                f"  challenger {spec.model.challenger}: shadow-scored in the same pass (model.challenger_failure: {spec.model.challenger_failure})"
            ]
            if spec.model.challenger
            else []
        ),
        *(
            f"  feature model {ref.name} {a.metadata.version} → {ref.output_feature}"
            for ref, a in validated.feature_models
        ),
        *_target_summary(validated),
        f"  reason codes: {len(spec.prediction.reasons.codes)}, one per model feature",
        (
            f"  raw partition {validated.raw}: {validated.raw_files} "
            + ("query checked" if isinstance(validated.raw, SqlPartition) else "file(s) checked")
        )
        if validated.raw
        else "  raw partition: none yet, the suite's columns were not checked against data",
        f"  labels partition {validated.labels_dir}: label columns checked"
        if validated.labels_dir
        else "  labels partition: none yet",
    ]
    return lines + [
        f"warning: {note}" for note in (*validated.notes, *latest_version_warnings(spec, validated.spec_path))
    ]


def _target_summary(validated: ValidatedJob) -> list[str]:
    """What the job predicts, and for a forecast model the interval registration measured on held-back rows."""
    spec, meta = validated.spec, validated.model.metadata
    target = spec.target
    if target.classifies:
        calibration, training = meta.calibration or {}, meta.training or {}
        measured = (
            f"; at registration: accuracy {training['holdout_accuracy']:.3f}, log loss {training.get('holdout_log_loss', float('nan')):.4f}, "
            f"classwise ECE {training.get('holdout_classwise_ece', float('nan')):.4f} on the hold-out"
            if training.get("holdout_accuracy") is not None
            else ""
        )
        return [
            f"  target: multiclass, {target.name or spec.monitoring.labels.outcome_column}: {len(target.classes)} classes, "
            f"{', '.join(target.classes)}",
            f"  calibration: {calibration.get('method', 'none')} of the probability vector" + measured,
        ]
    if not target.forecasts:
        return [f"  target: binary, the probability of {spec.prediction.event}; {spec.words.score_meaning}"]
    unit = f" {target.unit}" if target.unit else ""
    lines = [
        f"  target: {target.kind} forecast of {target.name or spec.monitoring.labels.outcome_column}"
        + (f" ({target.unit})" if target.unit else "")
    ]
    check = (meta.interval or {}).get("check") or {}
    if check:
        level, registered = spec.prediction.interval_level, check["level"]
        lines.append(
            f"  interval: {level:.0%} split conformal (model {meta.name} {meta.version}, link {meta.link}); at registration, on "
            f"{check['rows']:,} held-back hold-out rows, the {registered:.0%} interval covered {check['coverage']:.1%}, mean width "
            f"{check['mean_width']:.4g}{unit}; MAE {check['mae']:.4g}{unit}"
            + (
                ""
                if abs(registered - level) < 1e-9
                else f" (at the spec's {level:.0%} the width differs and the coverage is unchecked)"
            )
        )
    return lines
