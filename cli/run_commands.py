"""Commands that score and watch runs: demo, run, backfill, outcomes."""

from __future__ import annotations

import enum
import json
from typing import Annotated

import typer

from cli.console import console, print_json, print_warning, progress_bars, run_action
from cli.options import JsonOption
from cli.registration_report import print_forecast_registration
from cli.run_log import run_log
from cli.run_summaries import (
    print_challenger,
    print_classification,
    print_forecast,
    print_model_health,
    print_realized_performance,
    print_summary,
)
from flows.steps.blocks import configured_warehouse, with_warehouse_url
from tasks.errors import ExitCode, JobSpecError, JobValidationError, ScoringError
from tasks.jobs.validation import raw_partition_problems, validated_job
from tasks.jobspec import load_job_spec
from tasks.reports.reporting import partition_summaries
from tasks.runs.calendar import backfill_dates, parse_partition_date, partition_range, yesterday
from tasks.scoring.prepared import preloaded_job
from tasks.settings import current_settings
from tasks.sources import raw_partition


class BackfillChoice(str, enum.Enum):
    all = "all"
    missing = "missing"
    failed = "failed"


def demo(
    days: Annotated[int, typer.Option(min=1, help="Demo dates to score, ending yesterday.")] = 7,
    rows_per_day: Annotated[int, typer.Option(min=100, help="Credit applications per day.")] = 20_000,
    windows_per_day: Annotated[int, typer.Option(min=10, help="Gearbox vibration windows per turbine and day.")] = 200,
    store_items: Annotated[
        int, typer.Option(min=1_000, help="Store-sales rows (a store's item) per day, over 20 stores.")
    ] = 10_000,
    train_days: Annotated[
        int,
        typer.Option(
            min=3,
            help="Labelled days before the demo dates to train on (store_sales holds out the last week, or half the days when fewer than 14).",
        ),
    ] = 14,
    seed: Annotated[int, typer.Option(help="Seed of the data generators and the models.")] = 7,
) -> None:
    """Generate demo data for the three jobs, train their models, score every demo date, print summaries, then
    ingest the demo labels and print the realized performance per partition and model version."""

    def action() -> None:
        from flows.people import backfill
        from tasks.demo.setup import (
            DEMO_JOB,
            GEARBOX_JOB,
            SALES_JOB,
            prepared_demo,
            prepared_gearbox_demo,
            prepared_sales_demo,
        )

        settings = with_warehouse_url(current_settings())
        end = yesterday(settings)
        plans = {
            DEMO_JOB: prepared_demo(
                settings, days=days, rows_per_day=rows_per_day, train_days=train_days, seed=seed, end=end
            ),
            GEARBOX_JOB: prepared_gearbox_demo(
                settings, days=days, windows_per_day=windows_per_day, train_days=train_days, seed=seed, end=end
            ),
            SALES_JOB: prepared_sales_demo(
                settings, days=days, rows_per_day=store_items, train_days=train_days, seed=seed, end=end
            ),
        }
        for job, plan in plans.items():
            console.print(
                f"demo {job}: {len(plan.training_dates)} training days, model version {plan.model_version}, "
                f"scoring {plan.scoring_dates[0]}..{plan.scoring_dates[-1]}"
            )
            if plan.registration is not None and plan.registration.calibration is None:
                print_forecast_registration(plan.registration)
            try:
                with run_log(settings), progress_bars():
                    backfill(job, plan.scoring_dates[0], plan.scoring_dates[-1])
            finally:
                print_summary(job, plan.scoring_dates)
        from flows.outcomes import outcomes

        for job, plan in plans.items():
            # The demo's labels are known at once; in production they arrive later (deployment `outcomes`).
            outcomes(job, plan.scoring_dates[0], plan.scoring_dates[-1])
            print_realized_performance(job, plan.scoring_dates)
        console.print(f"outputs: {settings.output_root} and the warehouse {configured_warehouse(settings).location}")

    run_action(action)


def run(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    date: Annotated[str, typer.Option(help="Partition date, YYYY-MM-DD.")],
    chunk_rows: Annotated[int | None, typer.Option(min=1, help="Rows per chunk (default: the job's).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Score one partition of one job."""

    def action() -> None:
        day = parse_partition_date(date, what="--date")
        settings = current_settings()
        # The same checks the flow starts with, before Prefect is even imported: a user mistake is
        # an `error:` line per problem, not a run log.
        with preloaded_job(job, day, with_warehouse_url(settings), run_settings_json=settings.model_dump_json()):
            from flows.score_partition import score_partition

            with run_log(settings), progress_bars(show=not as_json):
                result = score_partition(job, day, chunk_rows or 0).to_dict()
        if as_json:
            print_json(result)
            return
        print_summary(job, [day])
        print_forecast(result)
        print_classification(result)
        print_model_health(result)
        print_challenger(result)
        for warning in result.get("warnings", []):
            print_warning(warning)

    run_action(action)


def backfill_command(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    start: Annotated[str, typer.Option(help="First partition date, YYYY-MM-DD.")],
    end: Annotated[str, typer.Option(help="Last partition date, YYYY-MM-DD (inclusive).")],
    mode: Annotated[
        BackfillChoice, typer.Option(help="all; missing: never scored or refused; failed: last run failed or refused.")
    ] = BackfillChoice.all,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the partitions that would be scored; write nothing.")
    ] = False,
    concurrency: Annotated[int, typer.Option(min=1, max=8, help="Partitions scored at once.")] = 1,
    as_json: JsonOption = False,
) -> None:
    """Score the partitions from START to END that MODE selects; failed partitions are listed, the rest still run."""

    def action() -> None:
        first, last = parse_partition_date(start, what="--start"), parse_partition_date(end, what="--end")
        settings = with_warehouse_url(current_settings())
        dates = backfill_dates(settings, first, last)
        # The checks every partition's run starts with, before any flow: the job once (a mistake there
        # stops every day), then every raw partition of the range against its suite. A day whose raw
        # data is wrong fails in its own run, recorded for `--mode failed`, while the others are scored;
        # when no day can be scored, nothing starts and every mistake is listed at once.
        validated = validated_job(job, settings, check_labels=False, check_raw=False)
        present = [d for d in dates if raw_partition(validated.spec.source, settings, validated.spec.name, d).exists()]
        problems = {day: raw_partition_problems(validated, settings, day) for day in present}
        if present and all(problems.values()):
            raise JobValidationError([p for day in present for p in problems[day]])
        from flows.people import backfill

        if dry_run:
            planned = backfill(job, first, last, mode=mode.value, dry_run=True)
            if as_json:
                print_json(planned)
                return
            console.print(
                f"dry run, mode {mode.value}: would score {len(planned)} partition(s): "
                + (", ".join(p["date"] for p in planned) or "none")
            )
            return
        if as_json:
            with run_log(settings):
                state = backfill(job, first, last, mode=mode.value, concurrency=concurrency, return_state=True)
            outcomes = state.result(raise_on_failure=False)
            print_json(outcomes if isinstance(outcomes, list) else partition_summaries(settings, job, dates))
            if state.is_failed():
                raise typer.Exit(ExitCode.USER)
            return
        try:
            with run_log(settings), progress_bars():
                backfill(job, first, last, mode=mode.value, concurrency=concurrency)
        finally:
            print_summary(job, dates)

    run_action(action)


def outcomes_command(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    start: Annotated[str, typer.Option(help="First partition date whose labels to ingest, YYYY-MM-DD.")],
    end: Annotated[str, typer.Option(help="Last partition date, YYYY-MM-DD (inclusive).")],
    positive: Annotated[
        str | None,
        typer.Option(
            help="A binary job's event as the label's value; it must agree with the spec's monitoring.labels.positive, which the scheduled outcomes runs read."
        ),
    ] = None,
) -> None:
    """Ingest the labels of the partitions START..END, join them to their predictions, and print the realized
    performance per partition and model version."""

    def action() -> None:
        first, last = parse_partition_date(start, what="--start"), parse_partition_date(end, what="--end")
        if last < first:
            raise ScoringError(f"--end {last} is before --start {first}")
        settings = current_settings()
        spec = load_job_spec(job, settings)
        if spec.label_source(positive).positive != spec.monitoring.labels.positive:
            # The scheduled outcomes run revisits these partitions reading the spec: a flag only this run knew would
            # make the two disagree, so the event is named where both read it.
            raise JobSpecError(
                f"--positive {positive}: job {job!r}'s spec names no event value; add positive: {json.dumps(positive)} under "
                f"monitoring.labels in {settings.jobs_dir / f'{job}.yaml'} (scheduled outcomes runs read the spec, not this flag)"
            )
        from flows.outcomes import outcomes

        with run_log(settings):
            outcomes(job, first, last)
        print_realized_performance(job, partition_range(first, last))

    run_action(action)
