"""Commands about a job's model: register, promote, aliases, check-model, card."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from cli.console import console, print_line, print_warning, run_action
from cli.options import PositiveOption
from cli.registration_report import print_registration
from flows.steps.blocks import configured_warehouse, with_warehouse_url
from tasks.errors import ScoringError
from tasks.runs.calendar import parse_partition_date
from tasks.settings import current_settings


def register(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    model: Annotated[
        Path,
        typer.Option(
            help="The model file, trained anywhere: XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm, scikit-learn .skops or ONNX .onnx."
        ),
    ],
    holdout: Annotated[
        Path,
        typer.Option(
            help="Labelled rows the model never saw (a Parquet file or folder) with the raw columns and the job's outcome column."
        ),
    ],
    reference: Annotated[
        Path | None,
        typer.Option(help="Rows that stand for the training distribution, for drift (default: the hold-out)."),
    ] = None,
    version: Annotated[str | None, typer.Option(help="Version to register (default: the next number).")] = None,
    trained_from: Annotated[
        str | None, typer.Option(help="First day of the training window, YYYY-MM-DD (recorded).")
    ] = None,
    trained_to: Annotated[
        str | None, typer.Option(help="Last day of the training window, YYYY-MM-DD (recorded).")
    ] = None,
    trust: Annotated[
        list[str] | None,
        typer.Option(
            help="A type a scikit-learn .skops file may hold beyond skops' defaults, after you reviewed it (repeat for several)."
        ),
    ] = None,
    positive: PositiveOption = None,
    promote: Annotated[
        bool,
        typer.Option(
            "--promote", help="Point the champion alias at the new version (checked and recorded like `score promote`)."
        ),
    ] = False,
    alias: Annotated[
        str | None,
        typer.Option(
            help="Point this alias at the new version instead, e.g. challenger to shadow it from the next run."
        ),
    ] = None,
    by: Annotated[
        str | None, typer.Option(help="Who moves the alias, for the model_aliases ledger (default: the login name).")
    ] = None,
) -> None:
    """Register a model trained elsewhere: check it against the job, calibrate it (binary job) or fit its error model
    and prediction interval (forecast job) on the hold-out, compute the drift reference, and write a new registry
    version (never over an existing one). No alias moves unless --promote or --alias says so, except that a model's
    first version becomes its champion."""

    def action() -> None:
        import getpass

        from tasks.jobs.promotion import CHAMPION, alias_notes, registered_model, scoring_version_text

        if promote and alias not in (None, CHAMPION):
            raise ScoringError(f"--promote moves {CHAMPION} and --alias moves {alias}: give one of them")
        window = {}
        if trained_from:
            window["window_start"] = parse_partition_date(trained_from, what="--trained-from").isoformat()
        if trained_to:
            window["window_end"] = parse_partition_date(trained_to, what="--trained-to").isoformat()
        settings = with_warehouse_url(current_settings())
        done = registered_model(
            job,
            model,
            alias=CHAMPION if promote else alias,
            settings=settings,
            warehouse=configured_warehouse(settings),
            changed_by=by or getpass.getuser(),
            holdout=holdout,
            reference=reference,
            version=version,
            training=window,
            trusted_types=tuple(trust or ()),
            positive=positive,
        )
        print_registration(done.report)
        for change in done.moved:
            print_line(
                f"first version of {change.model_name}: {change.alias} → {change.to_version} (recorded in model_aliases)"
                if done.first and change.alias == CHAMPION
                else f"{change.model_name}: alias {change.alias} {change.from_version or '(new)'} → {change.to_version} "
                f"(by {change.changed_by}, recorded in model_aliases)"
            )
        if done.refused is not None:
            asked = CHAMPION if promote else alias
            if asked is not None:
                raise ScoringError(
                    f"{done.report.model} version {done.report.version} is registered, but {asked} was not moved to it: {done.refused}"
                )
            print_warning(
                f"first version of {done.report.model} is registered but not the {CHAMPION}: {done.refused}; "
                f"once fixed: score promote {job} {done.report.version}"
            )
        elif not done.moved:
            print_line(
                f"no alias moved: {scoring_version_text(job, settings=settings)}; next: score promote {job} {done.report.version} --alias challenger "
                f"to shadow it (the spec's model.challenger: challenger), or score promote {job} {done.report.version} to make it the {CHAMPION}"
            )
        for note in alias_notes(job, settings=settings):
            print_warning(note)

    run_action(action)


def promote(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    version: Annotated[
        str | None, typer.Argument(help="Registered version to promote, or an alias (e.g. challenger).")
    ] = None,
    alias: Annotated[str, typer.Option(help="The alias to point at it.")] = "champion",
    rollback: Annotated[
        bool, typer.Option("--rollback", help="Point the alias back at the version it pointed at before its last move.")
    ] = False,
    by: Annotated[
        str | None, typer.Option(help="Who promotes, for the model_aliases ledger (default: the login name).")
    ] = None,
    note: Annotated[str, typer.Option(help="Why, for the ledger.")] = "",
) -> None:
    """Point an alias (champion by default) of the job's model at a version, after checking that it was registered
    and that the job validates with it; every move is recorded in the model_aliases ledger."""

    def action() -> None:
        import getpass

        from tasks.jobs.promotion import alias_notes, promoted_alias, reconciled_aliases, rolled_back_alias

        if rollback == (version is not None):
            raise ScoringError(
                "give a VERSION to promote (e.g. `score promote credit_risk 2`), or --rollback without one"
            )
        settings = with_warehouse_url(current_settings())
        warehouse, who = configured_warehouse(settings), by or getpass.getuser()
        print_reconciled(reconciled_aliases(job, settings=settings, warehouse=warehouse))
        change = (
            rolled_back_alias(job, alias=alias, settings=settings, warehouse=warehouse, changed_by=who)
            if rollback
            else promoted_alias(
                job, version, alias=alias, settings=settings, warehouse=warehouse, changed_by=who, note=note
            )
        )
        console.print(
            Text(
                f"{change.model_name}: alias {change.alias} {change.from_version or '(new)'} → {change.to_version} "
                f"(by {change.changed_by}, recorded in model_aliases)"
            ),
            highlight=False,
        )
        for warning in alias_notes(job, settings=settings):
            print_warning(warning)

    run_action(action)


def print_reconciled(moves: list) -> None:
    """A `warning:` line per alias move that was in force but missing from the ledger, now recorded
    (tasks.jobs.promotion.reconciled_aliases: its mover was stopped between the two)."""
    for m in moves:
        print_warning(
            f"{m.model_name}: alias {m.alias} {m.from_version or '(new)'} → {m.to_version or '(removed)'} "
            f"(by {m.changed_by}, {m.changed_at:%Y-%m-%d %H:%M:%S} UTC) was in force but missing from model_aliases "
            "(the command that moved it was stopped before writing it); recorded now"
        )


def aliases(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    remove: Annotated[
        str | None, typer.Option(help="Remove this alias (recorded in the ledger like any move).")
    ] = None,
    by: Annotated[str | None, typer.Option(help="Who removes it, for the ledger (default: the login name).")] = None,
) -> None:
    """The job model's versions, where each alias points, which the job scores with, and every move of the aliases."""

    def action() -> None:
        import getpass

        from tasks.jobs.promotion import alias_notes, job_aliases, reconciled_aliases, removed_alias

        settings = with_warehouse_url(current_settings())
        warehouse = configured_warehouse(settings)
        print_reconciled(reconciled_aliases(job, settings=settings, warehouse=warehouse))
        if remove is not None:
            change = removed_alias(
                job, alias=remove, settings=settings, warehouse=warehouse, changed_by=by or getpass.getuser()
            )
            console.print(
                Text(f"{change.model_name}: alias {change.alias} {change.from_version} → (removed)"), highlight=False
            )
        listing = job_aliases(job, settings=settings, warehouse=warehouse)
        scoring = listing["scoring"]

        def named(name: str) -> str:
            target = listing["aliases"].get(name)
            return f"{name} ({target})" if target else name

        console.print(
            Text(
                f"{listing['model']}: versions {', '.join(listing['versions']) or '(none)'}; the job scores with "
                f"{named(scoring['version'])}"
                + (f", shadowed by {named(scoring['challenger'])}" if scoring["challenger"] else "")
            ),
            highlight=False,
        )
        for warning in alias_notes(job, settings=settings):
            print_warning(warning)
        table = Table(title="aliases")
        for column in ("alias", "version"):
            table.add_column(column)
        for name, target in listing["aliases"].items():
            table.add_row(name, target)
        console.print(table)
        history = Table(title="model_aliases ledger")
        for column in ("changed_at", "alias", "from", "to", "by", "job", "note"):
            history.add_column(column)
        for row in listing["history"]:
            history.add_row(
                str(row["changed_at"])[:19],
                row["alias"],
                row["from_version"] or "—",
                row["to_version"] or "—",
                row["changed_by"] or "",
                row["job"] or "",
                row["note"] or "",
            )
        console.print(history)

    run_action(action)


class TargetProvider(str, enum.Enum):
    cpu = "cpu"
    cuda = "cuda"


ONNX_PROVIDERS = {TargetProvider.cpu: "CPUExecutionProvider", TargetProvider.cuda: "CUDAExecutionProvider"}
_STATUS_STYLE = {"passed": "green", "failed": "bold red", "not_run": "yellow"}


def check_model(
    path: Annotated[Path, typer.Argument(help="A .onnx file, or a registry version folder holding model.onnx.")],
    provider: Annotated[
        TargetProvider, typer.Option(help="Execution provider the model must run on.")
    ] = TargetProvider.cpu,
    atol: Annotated[float, typer.Option(min=0.0, help="Largest absolute difference from the reference output.")] = 1e-4,
) -> None:
    """ONNX triple check: shapes, numerics against reference_io.npz, operator placement. Exit 1 if one fails."""
    from tasks.inference.onnx_check import inference_check_onnx_path

    report = run_action(lambda: inference_check_onnx_path(path, provider=ONNX_PROVIDERS[provider], atol=atol))
    table = Table(
        title=Text(f"ONNX check of {report.model_path}"),
        caption=Text(f"target {report.target_provider}; session runs on {', '.join(report.providers) or '-'}"),
    )
    for column in ("check", "status", "details"):
        table.add_column(column, overflow="fold")
    for check in report.checks:
        table.add_row(check.name, Text(check.status, style=_STATUS_STYLE[check.status]), Text(check.details))
    console.print(table)
    open_points = [
        f"{check.name} {check.status.replace('_', ' ')}" for check in report.checks if check.status != "passed"
    ]
    console.print(("ok" if report.ok else "not ok") + (f" ({', '.join(open_points)})" if open_points else ""))
    if not report.ok:
        raise typer.Exit(1)


def card(
    job: Annotated[str, typer.Argument(help="A configured job, e.g. credit_risk.")],
    out: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the Markdown (its page goes beside it, .html); default data/output/<job>/model_card.md.",
        ),
    ] = None,
) -> None:
    """Write the model card (Markdown and a page): Prediction Contract and Inference Specification, from spec, registry and latest run."""
    from tasks.reports.model_card import MODEL_CARD_FILE, job_model_card, written_model_card

    settings = run_action(current_settings)
    markdown = run_action(lambda: job_model_card(job, with_warehouse_url(settings)))
    target = out or settings.output_dir(job) / MODEL_CARD_FILE
    page = written_model_card(markdown, target)
    console.print(f"model card of {job}: {target} (page: {page})")
